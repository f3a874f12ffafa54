//! `idgen-node` releases its machine id on SIGTERM as on SIGINT (Kubernetes, systemd and `docker
//! stop` send SIGTERM), and a second signal while the release runs does not cut it short: the
//! release is held by another session's row lock, the second signal comes, and the process exits
//! only after the release, with exit status 0 and a watermark that bounds every ID it printed.
//! Against the scratch cluster that scripts/test.sh starts; every wait has a deadline.

mod common;

use common::*;
use idgen_cluster_tests::*;

/// Runs a node until it has printed IDs, sends `signal`, and checks the release.
fn a_signal_releases(signal: &str, name: &str) {
    let db = TestDb::create(name);
    let mut admin = db.connect();
    let mut node = spawn_node(&db.dsn(), "10.0.0.1", &["--rate", "1000"]);
    let mut printed = ids(&node.stdout.take(10));
    node.signal(signal);
    printed.extend(ids(&node.stdout.rest()));
    assert!(node.exit_status().success(), "after SIG{signal}: {:?}", node.stderr.so_far());
    assert_released_bounding(&mut admin, "10.0.0.1", &printed);
    assert!(node.stderr.so_far().iter().any(|l| l.contains("released machine id")), "{:?}", node.stderr.so_far());
}

#[test]
fn sigterm_releases_the_id_and_exits_0() {
    a_signal_releases("TERM", "client_sigterm");
}

#[test]
fn sigint_releases_the_id_and_exits_0() {
    a_signal_releases("INT", "client_sigint");
}

#[test]
fn a_second_signal_during_the_release_lets_the_release_finish() {
    for (first, second) in [("TERM", "TERM"), ("TERM", "INT")] {
        let db = TestDb::create("client_signal_twice");
        let mut admin = db.connect();
        let mut node = spawn_node(&db.dsn(), "10.0.0.1", &["--rate", "1000"]);
        let mut printed = ids(&node.stdout.take(10));
        // The release is one UPDATE of the node's row: another session's lock on it holds it.
        let lock = RowLock::hold(&db, "10.0.0.1");
        node.signal(first);
        wait_for_blocked_release(&mut admin);
        node.signal(second);
        node.stderr.wait_for("the node to report the second signal", |l| l.contains("signal 2 received"));
        // The release is still held by the lock: the process must not have gone without it.
        assert!(node.running(), "SIG{second} during the release ended the process: {:?}", node.stderr.so_far());
        assert!(!node_row(&mut admin, "10.0.0.1").0, "released while the row was locked");
        lock.commit();
        printed.extend(ids(&node.stdout.rest()));
        assert!(node.exit_status().success(), "SIG{first}, SIG{second}: {:?}", node.stderr.so_far());
        assert_released_bounding(&mut admin, "10.0.0.1", &printed);
    }
}

/// A line of `idgen-node`'s stderr with what differs from run to run made general: the machine id,
/// the version (each registry draws where its versions start) and the service's name.
fn general(line: &str) -> String {
    let mut out = line.to_owned();
    for (number_after, stand_in) in [("machine id ", 'N'), ("at version ", 'V')] {
        let (mut general, mut rest) = (String::new(), out.as_str());
        while let Some(at) = rest.find(number_after) {
            general.push_str(&rest[..at + number_after.len()]);
            rest = rest[at + number_after.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
            general.push(stand_in);
        }
        general.push_str(rest);
        out = general;
    }
    match (out.find("service \""), out.find("\" at version")) {
        (Some(start), Some(end)) if start < end => format!("{}service \"S{}", &out[..start], &out[end..]),
        _ => out,
    }
}

#[test]
fn idgen_node_prints_on_stderr_what_the_docs_show() {
    // docs/services.md shows a node's run from its start to Ctrl-C: every line it prints on stderr,
    // but for the machine id and the service, must be what a node prints.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/services.md")).unwrap();
    let section = &doc[doc.find("## `idgen-node`: a node from the command line").expect("the section on idgen-node")..];
    let start = section.find("```console\n").expect("its transcript") + "```console\n".len();
    let transcript = &section[start..start + section[start..].find("```").unwrap()];
    let shown: Vec<String> = transcript.lines().filter(|l| l.starts_with("idgen-node: ")).map(general).collect();
    assert!(shown.len() >= 3, "{transcript}");
    let db = TestDb::create("client_transcript");
    let mut node = spawn_node(&db.dsn(), "10.0.0.7", &["--rate", "2"]);
    assert_eq!(ids(&node.stdout.take(2)).len(), 2);
    node.signal("INT");
    assert!(node.exit_status().success(), "{:?}", node.stderr.so_far());
    let printed: Vec<String> = node.stderr.so_far().iter().map(|l| general(l)).collect();
    assert_eq!(printed, shown, "idgen-node printed {:?}", node.stderr.so_far());
}
