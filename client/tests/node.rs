//! The client contract, kept by `idgen-client` against real servers (started by
//! scripts/test.sh): many nodes and backends with churn, a partition from the database, a
//! take-over while partitioned, a restart, and a graceful shutdown against a kill. No test
//! depends on the machine's speed: each waits for a state, never for a time.

use idgen_client::{Config, Error, IdgenNode, Status};
use idgen_cluster_tests::*;
use postgres::Client;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::MutexGuard;
use std::time::Duration;

/// The clock-step cluster with leases of seconds: take-back ages 6 s / 20 s / 40 s, margin 2 s (a 4 s
/// lease), heartbeats every second, and, when given, a machine-id range. Bind the three in this
/// order: locals drop in reverse, so the settings are reset before the turn passes to another test.
fn short_leases(range: Option<&str>) -> (MutexGuard<'static, ()>, ClockCluster, SystemSettings) {
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

/// Waits for a state, however long the machine takes (`what` names it for a reader of a hung run).
fn wait_until(_what: &str, mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A login role granted `service`, that can connect to `db` only while granted CONNECT.
fn partitionable_role(db: &TestDb, role: &str, service: &str) -> String {
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
fn partition(admin: &mut Client, db: &TestDb, role: &str) {
    admin.batch_execute(&format!("REVOKE CONNECT ON DATABASE {} FROM {role}", db.name)).unwrap();
    admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", &[&role]).unwrap();
}

fn heal(admin: &mut Client, db: &TestDb, role: &str) {
    admin.batch_execute(&format!("GRANT CONNECT ON DATABASE {} TO {role}", db.name)).unwrap();
}

#[test]
fn many_nodes_and_backends_mint_into_one_table_with_churn_and_never_collide() {
    let db = TestDb::create("client_churn");
    db.connect()
        .batch_execute("CREATE TABLE minted (id bigint PRIMARY KEY DEFAULT idgen_next_id('shop'), by_node boolean)")
        .unwrap();
    let mut threads = vec![];
    for t in 0..6 {
        let dsn = db.dsn();
        threads.push(std::thread::spawn(move || {
            let mut ids = vec![];
            for round in 0..4 {
                // Restarts: a new identity every other round, the same one otherwise.
                let mut node =
                    IdgenNode::start(Config::new(&dsn, "shop", &format!("10.0.{t}.1"), 9000 + round / 2)).unwrap();
                ids.extend((0..3000).map(|_| node.next_id().unwrap()));
                assert!(node.shutdown().unwrap());
            }
            let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
            client.execute("INSERT INTO minted (id, by_node) SELECT unnest($1::bigint[]), true", &[&ids]).unwrap();
            ids.len()
        }));
    }
    for _ in 0..2 {
        let dsn = db.dsn();
        threads.push(std::thread::spawn(move || {
            for _ in 0..20 {
                let mut backend = Client::connect(&dsn, postgres::NoTls).unwrap();
                backend
                    .batch_execute("INSERT INTO minted (by_node) SELECT false FROM generate_series(1, 500)")
                    .unwrap();
            }
            20 * 500
        }));
    }
    let minted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Every ID went into one primary key: a duplicate would have failed its insert.
    let rows: i64 = db.connect().query_one("SELECT count(DISTINCT id) FROM minted", &[]).unwrap().get(0);
    assert_eq!(rows as usize, minted);
    assert_eq!(minted, 6 * 4 * 3000 + 2 * 20 * 500);
}

#[test]
fn a_partitioned_node_issues_until_its_deadline_then_stops_and_resumes_as_owner() {
    let (_turn, cluster, _settings) = short_leases(None);
    let db = TestDb::create_on(&cluster.dsn, "client_partition");
    let role = "idgen_t_client_partition";
    let dsn = partitionable_role(&db, role, "svc");
    let node = IdgenNode::start(Config::new(&dsn, "svc", "10.0.0.1", 1)).unwrap();
    let before = node.next_id().unwrap();
    wait_until("a heartbeat", || node.metrics().heartbeats_ok > 0);

    let mut admin = db.connect();
    partition(&mut admin, &db, role);
    // Until the deadline every call issues; from it on, every call refuses.
    let mut issued_while_partitioned = 0;
    loop {
        match node.next_id() {
            Ok(id) => {
                assert!(id > before);
                issued_while_partitioned += 1;
            }
            Err(Error::LeaseExpired) => break,
            Err(e) => panic!("{e}"),
        }
    }
    wait_until("the heartbeat to see the lease expire", || node.status() == Status::Expired);
    assert!(matches!(node.next_id(), Err(Error::LeaseExpired)));
    let metrics = node.metrics();
    assert!(metrics.heartbeats_failed > 0 && metrics.time_to_deadline.is_none(), "{metrics:?}");
    assert_eq!(metrics.ids_issued, issued_while_partitioned + 1);

    // Reconnected, it still owns its id: a heartbeat succeeds and it issues again.
    heal(&mut admin, &db, role);
    wait_until("a heartbeat after the partition", || node.status() == Status::Live);
    assert!(node.next_id().unwrap() > before);
}

#[test]
fn a_node_partitioned_past_a_take_over_stops_before_the_new_holders_epoch_and_for_good() {
    // One machine id for the service: the other node can only get it by taking it over.
    let (_turn, cluster, _settings) = short_leases(Some("0-0"));
    let db = TestDb::create_on(&cluster.dsn, "client_takeover");
    let role = "idgen_t_client_takeover";
    let dsn = partitionable_role(&db, role, "svc");
    let node = IdgenNode::start(Config::new(&dsn, "svc", "10.0.0.1", 1)).unwrap();
    let mut last = node.next_id().unwrap();
    let mut admin = db.connect();
    partition(&mut admin, &db, role);
    while let Ok(id) = node.next_id() {
        last = id;
    }
    // Another node takes the id once the first is idle past the 1-hour tier (6 s here).
    let taken = loop {
        match admin.query_one("SELECT outcome, not_before::text FROM idgen_claim('svc', '10.0.0.2', 1)", &[]) {
            Ok(row) => break (row.get::<_, String>(0), row.get::<_, String>(1)),
            Err(e) => {
                assert_eq!(sqlstate(&e), "53000", "{e:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(taken.0, "idle_1h");
    // The old node's last ID is stamped before the new holder's epoch begins.
    let before_epoch: bool =
        admin.query_one("SELECT (idgen_decode($1)).ts <= $2::text::timestamptz", &[&last, &taken.1]).unwrap().get(0);
    assert!(before_epoch, "ID {last} stamped in the new holder's epoch (after {})", taken.1);
    // Back in touch, it learns the id moved, and stops for good.
    heal(&mut admin, &db, role);
    wait_until("the heartbeat to learn the id moved", || matches!(node.status(), Status::Lost { .. }));
    match node.next_id() {
        Err(Error::OwnershipLost(detail)) => assert!(detail.contains("10.0.0.2:1"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restarted_node_gets_its_id_back_and_starts_after_its_watermark() {
    let db = TestDb::create("client_restart");
    let mut first = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    let last = (0..5000).map(|_| first.next_id().unwrap()).max().unwrap();
    assert!(first.shutdown().unwrap(), "a graceful shutdown releases");
    let second = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    assert_eq!(second.machine_id(), first.machine_id());
    assert_eq!(second.version(), first.version() + 2, "released, then reused");
    let next = second.next_id().unwrap();
    assert!(next > last && (next >> 22) > (last >> 22), "stamped after the watermark: {next} after {last}");
}

type Output = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Runs the example binary, returning it (and the rest of its output) once it has printed `ids` IDs.
fn run_node(dsn: &str, host: &str, ids: usize) -> (std::process::Child, Output, Vec<i64>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idgen-node"))
        .args(["--dsn", dsn, "--service", "svc", "--host", host, "--port", "1", "--rate", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let printed: Vec<i64> = lines.by_ref().take(ids).map(|l| l.unwrap().parse().unwrap()).collect();
    assert_eq!(printed.len(), ids);
    (child, lines, printed)
}

#[test]
fn a_graceful_shutdown_releases_and_a_kill_leaves_the_id_to_the_tiers() {
    let (_turn, cluster, _settings) = short_leases(Some("0-0"));
    let db = TestDb::create_on(&cluster.dsn, "client_shutdown");
    let mut admin = db.connect();
    let released = |admin: &mut Client| -> bool {
        admin.query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'svc'", &[]).unwrap().get(0)
    };
    // Ctrl-C: the node stops issuing and releases.
    let (mut child, rest, _) = run_node(&db.dsn(), "10.0.0.1", 10);
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(rest.map(|l| l.unwrap()).all(|l| l.parse::<i64>().is_ok()), "only IDs on stdout");
    assert!(child.wait().unwrap().success());
    assert!(released(&mut admin));
    // kill -9: nothing is released; the id stays the node's until the 1-hour tier takes it back.
    let (mut child, _rest, printed) = run_node(&db.dsn(), "10.0.0.1", 10);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!released(&mut admin));
    let err = claim(&mut admin, "svc", "10.0.0.2", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "53000", "a live holder's id is not free");
    let taken = loop {
        match claim(&mut admin, "svc", "10.0.0.2", 1) {
            Ok(c) => break c,
            Err(e) => {
                assert_eq!(sqlstate(&e), "53000", "{e:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!((taken.machine_id, taken.outcome.as_str()), ((printed[0] >> 12 & 1023) as i16, "idle_1h"));
}

/// A clock that reads one instant.
struct Frozen(i64);

impl idgen_core::generator::Clock for Frozen {
    fn now_unix_ms(&mut self) -> i64 {
        self.0
    }

    fn wait_until(&mut self, _unix_ms: i64) {
        panic!("a frozen clock never gets there");
    }
}

#[test]
fn the_published_test_vectors_hold_for_the_nodes_generator_and_for_the_database() {
    let doc: serde_json::Value = serde_json::from_str(include_str!("../../docs/test_vectors.json")).unwrap();
    let db = TestDb::create("client_vectors");
    let mut client = db.connect();
    for v in doc["vectors"].as_array().unwrap() {
        let (unix_ms, machine_id, sequence, id) = (
            v["unix_ms"].as_i64().unwrap(),
            v["machine_id"].as_i64().unwrap(),
            v["sequence"].as_i64().unwrap(),
            v["id"].as_i64().unwrap(),
        );
        // The generator a node mints with: its first ID in a millisecond has sequence 0.
        if sequence == 0 {
            let mut generator =
                idgen_core::generator::Generator::new(idgen_core::Layout::DEFAULT, machine_id as u16, unix_ms - 1, 0);
            assert_eq!(generator.next_id(&mut Frozen(unix_ms), i64::MAX), Ok(id), "{v}");
        }
        // The database reads and builds the same IDs.
        let row = client
            .query_one(
                "SELECT idgen_min_id($1::text::timestamptz) | ($2::bigint << 12) | $3::bigint,
                        to_char((d).ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), (d).machine_id, (d).sequence
                   FROM (SELECT idgen_decode($4) AS d) x",
                &[&v["iso"].as_str().unwrap(), &machine_id, &sequence, &id],
            )
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), id, "{v}");
        assert_eq!(row.get::<_, String>(1), v["iso"].as_str().unwrap());
        assert_eq!((i64::from(row.get::<_, i16>(2)), i64::from(row.get::<_, i32>(3))), (machine_id, sequence));
    }
}

#[test]
fn a_node_survives_a_database_restart_and_still_releases_at_shutdown() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "client_restart_server");
    let mut node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    let before = node.next_id().unwrap();
    cluster.restart();
    // The lease is the node's own: it issues on while the server restarts.
    assert!(node.next_id().unwrap() > before);
    // Its connection died with the restart, unnoticed between heartbeats: the release reconnects.
    assert!(node.shutdown().unwrap());
    let released: bool = db
        .connect()
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'svc'", &[])
        .unwrap()
        .get(0);
    assert!(released);
}
