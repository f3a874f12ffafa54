//! The client's clock policy, the backends' one: a step back of the node's clock is waited out
//! up to `Config::max_clock_backward` (by default `idgen.max_clock_backward`'s 2 s) and refused
//! beyond it, and both are counted, in the node's metrics and in the registry (each heartbeat
//! reports them). The node's wall clock is injected (`Config::wall_clock`): real time plus an
//! offset the test moves.

use idgen_client::{ClockEvents, Config, Error, IdgenNode};
use idgen_cluster_tests::*;
use idgen_core::generator::{Stop, MAX_CLOCK_BACKWARD_DEFAULT_MS};
use idgen_core::Layout;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn real_unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Moves the clock to `ms` behind the time stamped in `id`: measured from the ID, not from the
/// real time, so that however long the machine took since, the step is what the test says.
fn step_back_behind(offset: &AtomicI64, id: i64, ms: i64) {
    let stamped = stamped_unix_ms(id);
    offset.store(stamped - real_unix_ms() - ms, Ordering::SeqCst);
}

/// A wall clock `offset` ms away from real time.
fn offset_clock(offset: &Arc<AtomicI64>) -> idgen_client::WallClockFn {
    let offset = offset.clone();
    Arc::new(move || real_unix_ms() + offset.load(Ordering::SeqCst))
}

#[test]
fn the_default_is_the_backends_default() {
    let config = Config::new("host=h", "svc", "10.0.0.1", 1);
    assert_eq!(config.max_clock_backward, Duration::from_millis(MAX_CLOCK_BACKWARD_DEFAULT_MS as u64));
}

#[test]
fn a_step_back_within_the_bound_is_waited_out_beyond_it_refused_and_both_are_counted() {
    let db = TestDb::create("client_clock_policy");
    let offset = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.2.1", 1);
    config.wall_clock = offset_clock(&offset);
    config.max_clock_backward = Duration::from_millis(1_500);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    let before = node.next_id().unwrap();
    assert_eq!(node.metrics().clock, ClockEvents::default());

    // 400 ms back: waited out (the ID still comes after every earlier one).
    step_back_behind(&offset, before, 400);
    let after = node.next_id().unwrap();
    assert!(after > before);
    assert_eq!(node.metrics().clock, ClockEvents { backward_waits: 1, ..ClockEvents::default() });

    // 5 s back, beyond the bound: refused, nothing issued, and said so.
    step_back_behind(&offset, after, 5_000);
    match node.next_id() {
        Err(e @ Error::Clock { stop: Stop::ClockBehind { allowed_ms: 1_500, .. }, .. }) => {
            let text = e.to_string();
            assert!(text.contains("max_clock_backward") && text.contains("no ID was issued"), "{text}");
        }
        other => panic!("a 5 s step back was not refused: {other:?}"),
    }
    assert_eq!(node.metrics().clock, ClockEvents { backward_waits: 1, backward_refusals: 1, sequence_exhaustions: 0 });
    assert_eq!(node.metrics().ids_issued, 2);

    // The clock comes back: issuing resumes above every earlier ID.
    offset.store(0, Ordering::SeqCst);
    assert!(node.next_id().unwrap() > after);
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_node_that_waits_out_nothing_refuses_every_step_back() {
    let db = TestDb::create("client_clock_strict");
    let offset = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.2.2", 1);
    config.wall_clock = offset_clock(&offset);
    config.max_clock_backward = Duration::ZERO;
    let node = IdgenNode::start(config).unwrap();
    let id = node.next_id().unwrap();
    step_back_behind(&offset, id, 50);
    assert!(matches!(node.next_id(), Err(Error::Clock { stop: Stop::ClockBehind { allowed_ms: 0, .. }, .. })));
    assert_eq!(node.metrics().clock.backward_refusals, 1);
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_node_whose_clock_is_a_day_ahead_reports_it_before_its_first_id() {
    // The claim takes no report: the registry bounds a new holder by the server's clock. A node
    // whose clock is a day ahead stamps a day ahead from its first ID; were it cut off before its
    // first heartbeat, its id would be taken back after the 1-hour tier and its IDs repeated by the
    // next holder a day later (simulation finding F1). The node reports before it mints, so the
    // registry holds its clock before any ID exists.
    let db = TestDb::create("client_clock_day_ahead");
    let mut admin = db.connect();
    let day_ms = 86_400_000;
    let offset = Arc::new(AtomicI64::new(day_ms));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.2.9", 1);
    config.wall_clock = offset_clock(&offset);
    // No heartbeat of the thread's during the test: only the report `start` makes.
    config.heartbeat_interval = Some(Duration::from_secs(3_600));
    let node = IdgenNode::start(config).unwrap();
    let id = node.next_id().unwrap();
    let stamped = stamped_unix_ms(id);
    assert!(stamped > real_unix_ms() + day_ms / 2, "the ID is stamped by the node's clock, a day ahead");
    // What a node taking the id over must wait for: the report plus the lease granted with it.
    let bound = registry_bound_ms(&mut admin, "10.0.2.9");
    assert!(bound > stamped, "the registry bounds the holder at {bound} ms, before its first ID's stamp {stamped} ms");
    assert_eq!(node.metrics().heartbeats_ok, 1, "the report before the first ID");
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_clock_that_jumps_ahead_after_a_report_issues_nothing_past_it_until_it_reports_again() {
    // The registry bounds a node by its last report plus the lease granted with it (55 minutes by
    // default). A clock that jumps further ahead after a report would stamp past that bound, and a
    // node cut off then would leave IDs its id's next holder repeats (an outside review's attack).
    let db = TestDb::create("client_clock_jump");
    let mut admin = db.connect();
    let offset = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.2.8", 1);
    config.wall_clock = offset_clock(&offset);
    // No heartbeat of the thread's interval during the test: only the reports the node asks for.
    config.heartbeat_interval = Some(Duration::from_secs(3_600));
    let node = IdgenNode::start(config).unwrap();
    node.next_id().unwrap();
    let two_hours_ms = 2 * 3_600_000;
    offset.store(two_hours_ms, Ordering::SeqCst);
    match node.next_id() {
        Err(Error::ClockAhead { bound_unix_ms }) => {
            assert!(bound_unix_ms < real_unix_ms() + two_hours_ms, "the bound {bound_unix_ms} is the report's")
        }
        other => panic!("a clock two hours past the last report issued {other:?}"),
    }
    // The node reports its clock at once; answered, it issues on that clock, inside what the
    // registry now holds for it.
    let mut id = None;
    wait_for("the node to report its clock and issue again", PATIENCE, || {
        id = node.next_id().ok();
        id.is_some()
    });
    let stamped = stamped_unix_ms(id.unwrap());
    assert!(stamped > real_unix_ms() + two_hours_ms / 2, "stamped on the jumped clock");
    let bound = registry_bound_ms(&mut admin, "10.0.2.8");
    assert!(bound > stamped, "the registry bounds the node at {bound} ms, before its stamp {stamped} ms");
    assert!(node.shutdown().unwrap());
}

/// What a node taking over the id of the node at `host` must wait for (Unix ms): the node's last
/// report plus the lease granted with it.
fn registry_bound_ms(admin: &mut postgres::Client, host: &str) -> i64 {
    let bound: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM issued_until + (lease_until - last_seen))::float8 * 1000
               FROM system_nodes WHERE host = $1::text::inet",
            &[&host],
        )
        .unwrap()
        .get(0);
    bound as i64
}

/// The time (Unix ms) default-layout ID `id` was stamped with.
fn stamped_unix_ms(id: i64) -> i64 {
    Layout::DEFAULT.unix_ms_of(Layout::DEFAULT.decompose(id).unwrap().ticks)
}
