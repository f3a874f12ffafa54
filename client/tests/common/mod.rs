//! What the signal and sidecar suites share: `idgen-node` run as a child whose output is read on
//! threads of their own (so that no read can hang), signals sent to it, the registry row it leaves,
//! and a row lock that holds its release. Every wait ends within a deadline, with a message.

#![allow(dead_code)] // each suite uses its part

use idgen_cluster_tests::*;
use postgres::Client;
use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The lines a child prints on one of its pipes, as they come.
pub struct Lines {
    what: String,
    lines: mpsc::Receiver<String>,
    seen: RefCell<Vec<String>>,
}

impl Lines {
    fn read(pipe: impl Read + Send + 'static, what: String) -> Lines {
        let (tx, lines) = mpsc::channel();
        spawn_named(format!("reader of {what}"), move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines { what, lines, seen: RefCell::new(vec![]) }
    }

    /// The next `n` lines, within [`PATIENCE`] each.
    pub fn take(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|k| {
                let line = recv_within(&self.lines, PATIENCE, &format!("line {} of {n} of {}", k + 1, self.what));
                self.seen.borrow_mut().push(line.clone());
                line
            })
            .collect()
    }

    /// Reads lines until one satisfies `wanted`, within [`PATIENCE`]; that line.
    pub fn wait_for(&self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.borrow_mut().push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "gave up waiting for {what} ({e}); {} said so far:\n{}",
                    self.what,
                    self.seen.borrow().join("\n")
                ),
            }
        }
    }

    /// Every line until the child closes the pipe, within [`PATIENCE`] a line.
    pub fn rest(&self) -> Vec<String> {
        let mut lines = vec![];
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) => {
                    self.seen.borrow_mut().push(line.clone());
                    lines.push(line);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return lines,
                Err(e) => panic!("{} neither printed nor closed: {e}", self.what),
            }
        }
    }

    /// Every line read so far, and every one that has come meanwhile.
    pub fn so_far(&self) -> Vec<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.borrow_mut().push(line);
        }
        self.seen.borrow().clone()
    }
}

/// A running `idgen-node`, killed (with its process group) if the test fails while it runs.
pub struct Node {
    pub child: GuardedChild,
    pub stdout: Lines,
    pub stderr: Lines,
}

/// Starts `idgen-node` for service "svc" as `host`:1 on `dsn`, with `extra` arguments.
pub fn spawn_node(dsn: &str, host: &str, extra: &[&str]) -> Node {
    let what = format!("idgen-node for {host}");
    let mut child = spawn_guarded(
        Command::new(env!("CARGO_BIN_EXE_idgen-node"))
            .args(["--dsn", dsn, "--service", "svc", "--host", host, "--port", "1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        &what,
    );
    let stdout = Lines::read(child.child().stdout.take().unwrap(), format!("the stdout of {what}"));
    let stderr = Lines::read(child.child().stderr.take().unwrap(), format!("the stderr of {what}"));
    Node { child, stdout, stderr }
}

impl Node {
    /// Sends signal `name` (`TERM`, `INT`) to the node.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = status_within(Command::new("kill").args([&format!("-{name}"), &pid]), PATIENCE, "kill");
        assert!(sent.success(), "kill -{name} {pid}: {sent}");
    }

    /// Its exit status, within [`PATIENCE`]; what it said on stderr is in the message if it fails.
    pub fn exit_status(&mut self) -> std::process::ExitStatus {
        let status = self.child.wait_within(PATIENCE);
        eprintln!("{}", self.stderr.so_far().join("\n"));
        status
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.child().try_wait().unwrap().is_none()
    }
}

/// The IDs in `lines`, each of which must be one.
pub fn ids(lines: &[String]) -> Vec<i64> {
    lines.iter().map(|l| l.parse().unwrap_or_else(|_| panic!("not an ID: {l:?}"))).collect()
}

/// The timestamp an ID carries, in Unix ms.
pub fn stamped_ms(id: i64) -> i64 {
    (id >> 22) + idgen_core::layout::EPOCH_2025_UNIX_MS
}

/// The machine id an ID carries.
pub fn machine_of(id: i64) -> i32 {
    (id >> 12 & 1023) as i32
}

/// The registry row of node `host`:1 of service "svc": whether it is released, its watermark
/// (`issued_until`, Unix ms) and its machine id.
pub fn node_row(admin: &mut Client, host: &str) -> (bool, i64, i32) {
    let row = admin
        .query_one(
            "SELECT released_at IS NOT NULL, floor(extract(epoch FROM issued_until) * 1000)::bigint, machine_id \
               FROM system_nodes WHERE service = 'svc' AND host = $1::text::inet AND port = 1 AND backend_slot IS NULL",
            &[&host],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Asserts that node `host` released its id with a watermark that bounds every one of `ids`.
pub fn assert_released_bounding(admin: &mut Client, host: &str, ids: &[i64]) {
    let (released, watermark, machine_id) = node_row(admin, host);
    assert!(released, "{host} did not release its machine id");
    let last = ids.iter().map(|&id| stamped_ms(id)).max().expect("some IDs");
    assert!(last <= watermark, "an ID stamped at {last} after the released watermark {watermark}");
    assert!(ids.iter().all(|&id| machine_of(id) == machine_id), "an ID of another machine id than {machine_id}");
}

/// Another session's row lock on node `host`'s registry row, in an open transaction: the node's
/// release (an UPDATE of that row) waits for it.
pub struct RowLock(Client);

impl RowLock {
    pub fn hold(db: &TestDb, host: &str) -> RowLock {
        let mut session = db.connect();
        session.batch_execute("BEGIN").unwrap();
        let locked = session
            .query(
                "SELECT 1 FROM system_nodes WHERE service = 'svc' AND host = $1::text::inet AND port = 1 FOR UPDATE",
                &[&host],
            )
            .unwrap();
        assert_eq!(locked.len(), 1, "no registry row of {host} to lock");
        RowLock(session)
    }

    pub fn commit(mut self) {
        self.0.batch_execute("COMMIT").unwrap();
    }
}

/// Waits until a session of `db` runs `idgen_release` and waits for a lock.
pub fn wait_for_blocked_release(admin: &mut Client) {
    wait_for("the release to wait for the row lock", PATIENCE, || {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                    AND wait_event_type = 'Lock' AND query LIKE '%idgen_release(%' AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
            > 0
    });
}

/// The clock-step cluster with leases of seconds: take-back ages 6 s / 20 s / 40 s, margin 2 s (a 4 s
/// lease), heartbeats every second, and, when given, a machine-id range. Bind the three in this
/// order: locals drop in reverse, so the settings are reset before the turn passes to another test.
pub fn short_leases(range: Option<&str>) -> (std::sync::MutexGuard<'static, ()>, ClockCluster, SystemSettings) {
    let (cluster, turn) = clock_cluster_turn();
    let mut settings = vec![
        ("idgen.takeover_idle_7d", "40s"),
        ("idgen.takeover_idle_1d", "20s"),
        ("idgen.takeover_idle_1h", "6s"),
        ("idgen.lease_safety_margin", "2s"),
        ("idgen.heartbeat_interval", "1s"),
        ("idgen.release_cooldown", "1s"),
    ];
    if let Some(range) = range {
        settings.push(("idgen.machine_id_range", range));
    }
    let applied = SystemSettings::set(&cluster.dsn, &settings);
    (turn, cluster, applied)
}

/// A login role granted `service`, that can connect to `db` only while granted CONNECT.
pub fn partitionable_role(db: &TestDb, role: &str, service: &str) -> String {
    let mut admin = db.connect();
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$;
             REVOKE CONNECT ON DATABASE {db} FROM PUBLIC; GRANT CONNECT ON DATABASE {db} TO {role};
             SELECT idgen_grant_service('{service}', '{role}');",
            db = db.name
        ))
        .unwrap();
    format!("{} user={role}", db.dsn())
}

/// Cuts `role` off `db`: no new connection, and its sessions terminated.
pub fn partition(admin: &mut Client, db: &TestDb, role: &str) {
    admin.batch_execute(&format!("REVOKE CONNECT ON DATABASE {} FROM {role}", db.name)).unwrap();
    admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", &[&role]).unwrap();
}

pub fn heal(admin: &mut Client, db: &TestDb, role: &str) {
    admin.batch_execute(&format!("GRANT CONNECT ON DATABASE {} TO {role}", db.name)).unwrap();
}

/// A pause between polls of a state.
pub fn poll_pause() {
    std::thread::sleep(Duration::from_millis(50));
}
