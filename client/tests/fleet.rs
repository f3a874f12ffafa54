//! What the registry sees of a fleet of service nodes, from what they already send: a node whose
//! clock runs ahead (its offset in `idgen_nodes`, a `holder_clock_skew` finding), a node's clock
//! counts (each heartbeat reports them), a crash-looping `idgen-node` (a `restart_loop` finding),
//! and a node against a server from before the counts existed (it heartbeats without them).
//! Servers are started by scripts/test.sh; every wait ends within a deadline, with a message.

use idgen_client::{Config, Error, IdgenNode};
use idgen_cluster_tests::*;

mod common;
use idgen_core::generator::Stop;
use idgen_core::Layout;
use postgres::Client;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_for(what, PATIENCE, done);
}

fn real_unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A wall clock `offset` ms away from real time.
fn offset_clock(offset: &Arc<AtomicI64>) -> idgen_client::WallClockFn {
    let offset = offset.clone();
    Arc::new(move || real_unix_ms() + offset.load(Ordering::SeqCst))
}

/// The findings of `idgen_health()` named `finding`, as (subject, detail).
fn findings(admin: &mut Client, finding: &str) -> Vec<(String, String)> {
    admin
        .query("SELECT subject, detail FROM idgen_health() WHERE finding = $1", &[&finding])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[test]
fn a_node_whose_clock_runs_ahead_shows_its_offset_and_a_skew_finding() {
    let db = TestDb::create("client_fleet_skew");
    let mut admin = db.connect();
    let ahead = Arc::new(AtomicI64::new(5_000));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.3.1", 1);
    config.wall_clock = offset_clock(&ahead);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    node.next_id().unwrap();
    let ok = node.metrics().heartbeats_ok;
    wait_until("two heartbeats", || node.metrics().heartbeats_ok > ok + 1);
    // The offset is the report minus the server clock: 5 s less however long the heartbeat took to
    // arrive (no budget for that: only ahead by more than the 1 s alert, and never more than 5 s).
    let offset: f64 = admin
        .query_one("SELECT extract(epoch FROM clock_offset)::float8 FROM idgen_nodes WHERE holder = '10.0.3.1:1'", &[])
        .unwrap()
        .get(0);
    assert!(offset > 1.0 && offset <= 5.0, "clock_offset {offset} s for a node 5 s ahead");
    let skewed = findings(&mut admin, "holder_clock_skew");
    assert!(
        skewed.iter().any(|(subject, _)| subject.contains(&format!("machine id {}", node.machine_id()))),
        "no holder_clock_skew finding for the node 5 s ahead: {skewed:?}"
    );
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_nodes_clock_counts_reach_the_registry_with_its_heartbeats() {
    let db = TestDb::create("client_fleet_counts");
    let mut admin = db.connect();
    let offset = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.3.2", 1);
    config.wall_clock = offset_clock(&offset);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    let id = node.next_id().unwrap();
    // 5 s behind the last ID: refused and counted.
    let stamped = Layout::DEFAULT.unix_ms_of(Layout::DEFAULT.decompose(id).unwrap().ticks);
    offset.store(stamped - real_unix_ms() - 5_000, Ordering::SeqCst);
    assert!(matches!(node.next_id(), Err(Error::Clock { stop: Stop::ClockBehind { .. }, .. })));
    offset.store(0, Ordering::SeqCst);
    wait_until("the refusal in idgen_nodes", || {
        let row = admin
            .query_one(
                "SELECT coalesce(clock_backward_refusals, -1), coalesce(clock_backward_waits, -1)
                   FROM idgen_nodes WHERE holder = '10.0.3.2:1'",
                &[],
            )
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1)) == (1, 0)
    });
    let refusals = findings(&mut admin, "clock_backward_refusals");
    assert!(!refusals.is_empty(), "idgen_health() does not report the node's refused step back");
    let summed: i64 =
        admin.query_one("SELECT clock_backward_refusals FROM idgen_metrics WHERE service = 'svc'", &[]).unwrap().get(0);
    assert_eq!(summed, 1);
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_node_heartbeats_a_server_from_before_the_counts() {
    // The registry of 0.5.1 (the frozen install script), run by today's library: its heartbeat has
    // no counts, and the node heartbeats without them.
    let db = TestDb::empty_on(&base_dsn(), "client_fleet_old_server");
    db.connect().batch_execute("CREATE EXTENSION idgen VERSION '0.5.1'").unwrap();
    let mut config = Config::new(&db.dsn(), "svc", "10.0.3.3", 1);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    wait_until("two heartbeats against 0.5.1", || node.metrics().heartbeats_ok > 1);
    assert_eq!(node.metrics().heartbeats_failed, 0);
    node.next_id().unwrap();
    assert!(node.shutdown().unwrap());
}

/// Runs `idgen-node` until it has printed an ID (its claim committed), then kills it (SIGKILL:
/// no release).
fn crash_once(dsn: &str, host: &str) {
    let mut node = common::spawn_node(dsn, host, &["--rate", "1000"]);
    let line = node.stdout.take(1).remove(0);
    assert!(line.parse::<i64>().is_ok(), "idgen-node printed {line:?}");
    node.child.child().kill().unwrap();
    node.child.wait_within(PATIENCE);
}

#[test]
fn a_crash_looping_node_is_reported_as_a_restart_loop() {
    // Restart loops are counted over idgen.restart_loop_window (5 minutes) against
    // idgen.restart_loop_claims (3): a cluster-wide setting, so the clock-step cluster, in turn.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "client_fleet_crash_loop");
    let mut admin = db.connect();
    // Started, killed, and restarted: 3 claims are no loop yet.
    for _ in 0..3 {
        crash_once(&db.dsn(), "10.0.3.4");
    }
    assert_eq!(findings(&mut admin, "restart_loop"), vec![], "3 claims in the window are no loop");
    // The fourth restart makes it one, named by the node.
    crash_once(&db.dsn(), "10.0.3.4");
    let loops = findings(&mut admin, "restart_loop");
    assert!(loops.iter().any(|(subject, _)| subject.contains("10.0.3.4:1")), "no restart_loop for the node: {loops:?}");
    // With a higher threshold the same history is no loop: the setting is what decides.
    let _looser = SystemSettings::set(&cluster.dsn, &[("idgen.restart_loop_claims", "10")]);
    assert_eq!(findings(&mut db.connect(), "restart_loop"), vec![]);
}
