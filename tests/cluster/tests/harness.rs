//! The harness the suites stand on: its waits end in failures that say what was awaited, and a
//! worker that dies releases the others with its message, instead of leaving them waiting (a test
//! of six workers once hung for eight minutes when two died). All but the last test need no
//! server; only here are deadlines short, where the wait is meant to run out.

use idgen_cluster_tests::*;
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The message of the failure `f` must end in, within [`WORK_PATIENCE`] (timed by the standard
/// library itself, so that a helper that no longer ends fails this test instead of hanging it).
fn failure_of(f: impl FnOnce() + Send + 'static) -> String {
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).err();
        let _ = done.send(failed.map(|payload| panic_message(payload.as_ref())));
    });
    match outcome.recv_timeout(WORK_PATIENCE) {
        Ok(Some(message)) => message,
        Ok(None) => panic!("expected a failure, and it succeeded"),
        Err(e) => panic!("no failure within {WORK_PATIENCE:?} (a wait that does not end): {e}"),
    }
}

#[test]
fn a_party_that_dies_before_the_barrier_fails_the_others_at_once_with_its_message() {
    let barrier = Arc::new(Barrier::new(4));
    let parties: Vec<_> = (0..4)
        .map(|k| {
            let together = barrier.clone();
            spawn_party(format!("worker {k}"), &barrier, move || {
                assert_ne!(k, 2, "worker 2 could not connect: 57P01");
                // The others wait the full patience for worker 2, unless its death releases them.
                together.wait_within(PATIENCE);
            })
        })
        .collect();
    let message = failure_of(move || {
        join_all(parties, WORK_PATIENCE, "the parties");
    });
    assert!(message.starts_with("the parties: 4 of 4 failed:"), "{message}");
    assert!(
        message.contains("worker 2: assertion `left != right` failed: worker 2 could not connect: 57P01"),
        "{message}"
    );
    for k in [0, 1, 3] {
        assert!(
            message.contains(&format!(
                "worker {k}: a barrier of 4 parties was broken: worker 2 failed: assertion `left != right` failed: worker 2 could not connect"
            )),
            "worker {k} did not fail with worker 2's message: {message}"
        );
    }
    // A party that comes later is refused at once too.
    let late = failure_of(move || barrier.wait_within(PATIENCE));
    assert!(late.contains("was broken: worker 2 failed"), "{late}");
}

#[test]
fn a_party_that_never_arrives_fails_the_waiting_one_at_its_deadline_and_then_every_other() {
    let barrier = Arc::new(Barrier::new(2));
    let first = barrier.clone();
    let waited = failure_of(move || first.wait_within(Duration::from_millis(200)));
    assert_eq!(waited, "gave up after 200ms at a barrier: 1 of 2 parties arrived");
    // The barrier is broken for good: the latecomer fails at once, with the reason.
    let late = failure_of(move || barrier.wait_within(PATIENCE));
    assert_eq!(late, "a barrier of 2 parties was broken: gave up after 200ms at a barrier: 1 of 2 parties arrived");
}

#[test]
fn a_barrier_whose_parties_all_arrive_turns_again_and_again() {
    let barrier = Arc::new(Barrier::new(3));
    let parties: Vec<_> = (0..3)
        .map(|k| {
            let together = barrier.clone();
            spawn_party(format!("party {k}"), &barrier, move || {
                for _ in 0..50 {
                    together.wait();
                }
                k
            })
        })
        .collect();
    assert_eq!(join_all(parties, WORK_PATIENCE, "the parties"), [0, 1, 2]);
}

#[test]
fn join_all_names_every_worker_that_panicked_or_is_still_running() {
    let (release, released) = mpsc::channel::<()>();
    let workers = vec![
        spawn_named("quick", || 1),
        spawn_named("panicker", || panic!("db error: FATAL: terminating connection due to administrator command")),
        spawn_named("stuck", move || {
            // Until the test lets it go: a worker that never ends, as far as join_all can tell.
            let _ = released.recv();
            3
        }),
    ];
    let stuck = workers[2].thread().clone();
    let message = failure_of(move || {
        join_all(workers, Duration::from_millis(300), "three workers");
    });
    assert_eq!(
        message,
        "three workers: 2 of 3 failed:\n\
         panicker: db error: FATAL: terminating connection due to administrator command\n\
         stuck: still running after 300ms"
    );
    release.send(()).unwrap();
    assert_eq!(stuck.name(), Some("stuck"));
}

#[test]
fn recv_within_fails_at_once_when_the_sender_died_and_at_its_deadline_when_it_is_silent() {
    let (sender, receiver) = mpsc::channel::<i32>();
    let dead = spawn_named("sender", move || {
        let _sender = sender;
        panic!("the session did not connect");
    });
    let message = failure_of(move || {
        recv_within(&receiver, PATIENCE, "the session's pid");
    });
    assert_eq!(message, "the session's pid: never sent, its sender is gone (did its thread fail?)");
    let failed = failure_of(move || {
        join_within(dead, PATIENCE, "the sender");
    });
    assert_eq!(failed, "the sender: 1 of 1 failed:\nsender: the session did not connect");

    let (silent, receiver) = mpsc::channel::<i32>();
    let message = failure_of(move || {
        recv_within(&receiver, Duration::from_millis(100), "a word from a silent sender");
    });
    drop(silent);
    assert_eq!(message, "gave up after 100ms waiting for a word from a silent sender");
}

/// Whether process `pid` has ended (a zombie, reaped by no one in a container, has).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}

#[test]
fn a_child_past_its_deadline_is_killed_with_everything_it_started() {
    let dir = std::env::temp_dir().join(format!("idgen_harness_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("grandchild.pid");
    // A child that starts a grandchild and waits for it: both must go when the deadline passes.
    let mut child = spawn_guarded(
        Command::new("sh").arg("-c").arg(format!("sleep 600 & echo $! > {}; wait", pid_file.display())),
        "a shell waiting for its sleeper",
    );
    wait_for("the shell to start its sleeper", PATIENCE, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    });
    let grandchild = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let shell = child.id().to_string();
    let message = failure_of(move || {
        child.wait_within(Duration::from_millis(300));
    });
    assert_eq!(message, "gave up after 300ms waiting for a shell waiting for its sleeper to exit: killed it");
    wait_for("the shell and its sleeper to be killed", PATIENCE, || gone(&shell) && gone(&grandchild));
    std::fs::remove_dir_all(&dir).ok();

    // output_within: the same, with the output so far in the message.
    let message = failure_of(|| {
        output_within(Command::new("sleep").arg("600"), Duration::from_millis(300), "a sleeper");
    });
    assert!(
        message
            .starts_with("gave up after 300ms waiting for a sleeper to exit: killed it\na sleeper printed on stdout: "),
        "{message}"
    );
    // A child that ends in time: its status and its output.
    let done =
        output_within(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]), PATIENCE, "a short shell");
    assert_eq!(
        (done.status.code(), done.stdout.as_slice(), done.stderr.as_slice()),
        (Some(3), &b"out\n"[..], &b"err\n"[..])
    );
    // Dropped while it runs (a test failing meanwhile), the child is killed.
    let sleeper = spawn_guarded(Command::new("sleep").arg("600"), "a dropped sleeper");
    let pid = sleeper.id().to_string();
    drop(sleeper);
    assert!(gone(&pid), "the dropped sleeper {pid} still runs");
}

#[test]
fn a_test_database_another_test_process_uses_is_not_dropped_under_it() {
    // Another test process: it holds the name idgen_t_held_elsewhere (as TestDb does, on a session
    // of its own in the postgres database), has created that database and works in it.
    let mut other = postgres::Client::connect(
        &format!("{} application_name='another test run'", session_dsn(&base_dsn(), "postgres")),
        postgres::NoTls,
    )
    .unwrap();
    let name = "idgen_t_held_elsewhere";
    let taken: bool =
        other.query_one("SELECT pg_try_advisory_lock($1, hashtext($2))", &[&TEST_DATABASE_LOCK, &name]).unwrap().get(0);
    assert!(taken, "a run killed while holding {name} still holds it");
    other.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
    other.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let mut working = connect_to(&base_dsn(), name);
    // This process asks for the same test database: refused at once, naming the other process...
    let message = failure_of(|| {
        TestDb::create("held_elsewhere");
    });
    assert!(
        message.starts_with(&format!("the test database {name} is in use by another test process on "))
            && message.contains("another test run (backend pid "),
        "{message}"
    );
    // ...before anything was dropped: the other process's session goes on.
    working.batch_execute("SELECT 1").unwrap();
    drop(working);
    other.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)")).unwrap();

    // A name this process holds is its own to create again (a test that starts over), and no
    // other process can take it meanwhile.
    let first = TestDb::create("name_in_use");
    let again = TestDb::create("name_in_use");
    assert_eq!(again.name, first.name);
    let taken: bool = other
        .query_one("SELECT pg_try_advisory_lock($1, hashtext($2))", &[&TEST_DATABASE_LOCK, &again.name])
        .unwrap()
        .get(0);
    assert!(!taken, "another session took {} from this process", again.name);
}
