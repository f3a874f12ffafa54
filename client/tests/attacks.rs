//! Attacks on idgen-client's bounds and on what it leaves the registry with, as a reviewer who had
//! not seen the code made them (scripts/test.sh starts the servers). Each failed before its fix:
//! a clock that keeps stepping back hung `next_id` and `shutdown`; a claim's `not_before` ahead
//! kept `start` past its bound; a commit whose synchronous wait somebody cancelled was taken as
//! confirmed; a claim that reached the server after its retry had won fenced the winner; and a
//! 9-argument `idgen_heartbeat` anybody created on the `search_path` captured every heartbeat of a
//! server without one (and with it, two nodes issued the same IDs).

use idgen_client::{Config, Error, IdgenNode, Status};
use idgen_cluster_tests::*;
use postgres::Client;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a busy machine may add to a documented bound.
const SLACK: Duration = Duration::from_secs(10);

fn real_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Runs `f` on a thread; its result within `patience`, or `None` (the thread is left running).
fn within<T: Send + 'static>(patience: Duration, f: impl FnOnce() -> T + Send + 'static) -> (Option<T>, Duration) {
    let (done, result) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    let value = result.recv_timeout(patience).ok();
    (value, started.elapsed())
}

/// A release by hand on a registry of idgen 0.5.1, whose machine ids are smallint (the shared
/// `release` binds them as integer, as 0.7.0 takes them).
/// Frees the node's id as an attacker who moved it would: a release that names the clock as its
/// holder's watermark (without one, a release keeps what the holder may still stamp, and the id stays
/// fenced for the holder's lease).
fn release_on_0_5_1(admin: &mut Client, host: &str, node: &IdgenNode) -> bool {
    admin
        .query_one(
            "SELECT idgen_release('svc', $1::int4::int2, $2::text::inet, 1, $3, clock_timestamp())",
            &[&node.machine_id(), &host, &node.version()],
        )
        .unwrap()
        .get(0)
}

fn held_rows(admin: &mut Client, host: &str) -> Vec<(i32, i64)> {
    admin
        .query(
            "SELECT machine_id, version FROM system_nodes WHERE host = $1::text::inet AND released_at IS NULL
              ORDER BY machine_id",
            &[&host],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. The clock policy: a step back is "waited out up to max_clock_backward (2 s)". The wait was on
//    the wall clock, under the generator's lock, with no bound of its own: a clock that steps back
//    again before it is back (each step within the 2 s) kept next_id waiting for ever, and with it
//    shutdown (which takes the generator's lock) and the heartbeat (its report too). Now the wait
//    ends on the monotonic clock after max_clock_backward, with Err(Clock).

#[test]
fn a_clock_that_keeps_stepping_back_hangs_next_id_shutdown_and_the_heartbeat() {
    let db = TestDb::create("attack_sawtooth_clock");
    // Real time, until `anchor` is set: then a sawtooth that drops 1 s back every second and
    // never reaches the anchor again (each step back is within max_clock_backward).
    let anchor = Arc::new(AtomicI64::new(0));
    let started_at = Arc::new(AtomicI64::new(0));
    let clock = {
        let (anchor, started_at) = (anchor.clone(), started_at.clone());
        Arc::new(move || {
            let a = anchor.load(Ordering::SeqCst);
            if a == 0 {
                return real_ms();
            }
            let since = real_ms() - started_at.load(Ordering::SeqCst);
            a - 1_000 + since % 900
        })
    };
    let mut config = Config::new(&db.dsn(), "svc", "10.0.9.1", 1);
    config.call_timeout = Duration::from_secs(1);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    config.wall_clock = clock;
    let node = Arc::new(IdgenNode::start(config).unwrap());
    wait_for("a heartbeat", PATIENCE, || node.metrics().heartbeats_ok > 0);
    // An ID now, then the clock is 100-1000 ms behind it for good.
    node.next_id().unwrap();
    let now = real_ms();
    started_at.store(now, Ordering::SeqCst);
    anchor.store(now, Ordering::SeqCst);
    let ok = node.metrics().heartbeats_ok;

    let minting = node.clone();
    let (minted, took) = within(Duration::from_secs(2) + SLACK, move || minting.next_id());
    // The documented outcome: an ID after waiting out at most 2 s, or Err(Clock(..)).
    let next_id_bounded = minted.is_some();
    if let Some(minted) = &minted {
        assert!(matches!(minted, Err(Error::Clock { .. })), "a clock never back gave {minted:?}");
    }

    // Meanwhile the heartbeat cannot read its report (the generator's lock): no heartbeat succeeds.
    let (hb, _) = within(Duration::from_secs(3), {
        let node = node.clone();
        move || node.metrics().heartbeats_ok
    });
    eprintln!("heartbeats ok before the step back: {ok}; while next_id waits: {hb:?} (None: metrics() blocked too)");
    let stopping = node.clone();
    let bound = 2 * Duration::from_secs(1) + Duration::from_secs(2);
    let (stopped, shutdown_took) = within(bound + SLACK, move || stopping.shutdown());
    let shutdown_bounded = stopped.is_some();

    // Let the clock come back so that the threads left behind end.
    anchor.store(0, Ordering::SeqCst);
    assert!(
        next_id_bounded && shutdown_bounded,
        "next_id returned within max_clock_backward + {SLACK:?}: {next_id_bounded} (waited {took:?}); \
         shutdown returned within 2 call_timeouts + {SLACK:?}: {shutdown_bounded} (waited {shutdown_took:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. `start` "ends within start_timeout + call_timeout": it did not when its claim's not_before was
//    ahead of its clock. A release with a watermark ahead (within lease_safety_margin, what a
//    claimant waits) leaves the row bound there; the same identity reclaims it straight back and
//    start slept until then, whatever start_timeout said. Now it gives the id back (with not_before
//    as its watermark) and says why.

#[test]
fn start_waits_out_a_not_before_ahead_past_its_documented_bound() {
    let (cluster, _turn) = clock_cluster_turn();
    let _settings = SystemSettings::set(&cluster.dsn, &[("idgen.lease_safety_margin", "25s")]);
    let db = TestDb::create_on(&cluster.dsn, "attack_not_before_bound");
    let mut admin = db.connect();
    let claimed = claim(&mut admin, "svc", "10.0.9.2", 1).unwrap();
    // Released with a watermark 20 s ahead (its clock ran ahead): the registry keeps it.
    let released: bool = admin
        .query_one(
            "SELECT idgen_release('svc', $1, '10.0.9.2', 1, $2, clock_timestamp() + interval '20 seconds')",
            &[&claimed.machine_id, &claimed.version],
        )
        .unwrap()
        .get(0);
    assert!(released);

    let mut config = Config::new(&db.dsn(), "svc", "10.0.9.2", 1);
    config.call_timeout = Duration::from_secs(1);
    config.start_timeout = Duration::from_secs(1);
    let bound = config.start_timeout + config.call_timeout + Duration::from_secs(1);
    let (started, took) = within(Duration::from_secs(120), move || IdgenNode::start(config));
    match started.expect("start did not return within 120 s") {
        Err(Error::NotBeforeAhead { .. }) => {}
        Err(e) => panic!("start failed otherwise: {e}"),
        Ok(node) => panic!("start returned machine id {} after its bound ({took:?})", node.machine_id()),
    }
    assert!(took < bound + SLACK, "start took {took:?}; documented bound {bound:?}");
    // The claim went back, and nothing is held for the identity.
    wait_for("the claim to go back", PATIENCE, || held_rows(&mut admin, "10.0.9.2").is_empty());
}

// ---------------------------------------------------------------------------------------------
// 3. A claim waiting for a synchronous standby whose wait is cancelled by anyone but the client
//    (pg_cancel_backend from a DBA or a watchdog for "stuck" sessions) answers success with a
//    WARNING ("canceling wait for synchronous replication ... committed locally, but might not
//    have been replicated"). The client ignored notices: it took the claim as confirmed and minted,
//    on a claim the standby never got. After a failover, the new primary hands the same machine
//    id to another node: duplicate IDs. The same holds for a heartbeat (its lease is extended on
//    a grant the standby never saw: the new primary's take-back age runs from the older one).

#[test]
fn a_claim_whose_synchronous_wait_someone_else_cancels_is_taken_as_confirmed() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "attack_syncrep_cancel");
    let hung = SystemSettings::set(&cluster.dsn, &[("synchronous_standby_names", "idgen_absent_standby")]);
    let mut config = Config::new(&db.dsn(), "svc", "10.0.9.3", 1);
    config.call_timeout = Duration::from_secs(20);
    config.start_timeout = Duration::from_secs(25);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(IdgenNode::start(config));
    });
    // A watchdog cancels the sessions waiting for the standby (the claim's guard worker's, then
    // the claim's own).
    let mut admin = db.connect();
    let mut cancels = 0;
    let give_up = Instant::now() + Duration::from_secs(60);
    let started = loop {
        if let Ok(started) = rx.recv_timeout(Duration::from_millis(50)) {
            break started;
        }
        assert!(Instant::now() < give_up, "start did not return");
        let rows = admin
            .query(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                  WHERE wait_event = 'SyncRep' AND datname = current_database()",
                &[],
            )
            .unwrap();
        cancels += rows.iter().filter(|r| r.get::<_, bool>(0)).count();
    };
    eprintln!("cancelled {cancels} synchronous waits");
    let accepted = match &started {
        Ok(node) => node.next_id().is_ok(),
        Err(_) => false,
    };
    drop(hung);
    if let Ok(node) = started {
        let _ = node.shutdown();
    }
    assert!(!accepted, "start returned a node that mints on a claim whose commit no synchronous standby confirmed");
}

// ---------------------------------------------------------------------------------------------
// 4. A claim that times out but runs late. The cancel request reaches an idle backend (the
//    claim's bytes are still in the network) and does nothing; start retries and wins machine id
//    M. Then the first attempt's claim reaches the server: the identity's own held row is "ahead"
//    (bound = its whole lease), so it is set aside (released, fenced) and the identity gets another
//    id, which the late handler releases. The node `start` returned was fenced: its first
//    heartbeat was refused (OwnershipLost). Now a retry first ends the abandoned attempt's
//    backend (pg_terminate_backend, named by pid and start time), so its claim never runs.

/// A proxy that holds the client's first connection's claim (the Parse or Query message naming
/// idgen_claim) until told, as a network that delays a packet; every other byte flows.
struct DelayingProxy {
    port: u16,
    hold: Arc<AtomicBool>,
}

impl DelayingProxy {
    fn to(target: &str) -> DelayingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(AtomicBool::new(true));
        let target = target.to_owned();
        std::thread::spawn({
            let hold = hold.clone();
            move || {
                for (n, client) in listener.incoming().flatten().enumerate() {
                    let Ok(server) = TcpStream::connect(&target) else { continue };
                    let up = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    if n == 0 {
                        let hold = hold.clone();
                        std::thread::spawn(move || pump_holding_first_query(up.0, up.1, hold));
                    } else {
                        std::thread::spawn(move || raw_pump(up.0, up.1));
                    }
                    std::thread::spawn(move || raw_pump(server, client));
                }
            }
        });
        DelayingProxy { port, hold }
    }
}

fn raw_pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

fn pump_holding_first_query(mut from: TcpStream, mut to: TcpStream, hold: Arc<AtomicBool>) {
    // The startup message: length-prefixed, untyped.
    let mut len = [0u8; 4];
    if from.read_exact(&mut len).is_err() {
        return;
    }
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    if from.read_exact(&mut body).is_err() {
        return;
    }
    to.write_all(&len).unwrap();
    to.write_all(&body).unwrap();
    loop {
        let mut header = [0u8; 5];
        if from.read_exact(&mut header).is_err() {
            return;
        }
        let mut body = vec![0u8; u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize - 4];
        if from.read_exact(&mut body).is_err() {
            return;
        }
        let claim = body.windows(b"idgen_claim(".len()).any(|w| w == b"idgen_claim(");
        if (header[0] == b'P' || header[0] == b'Q') && claim {
            while hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = to.write_all(&header);
            let _ = to.write_all(&body);
            return raw_pump(from, to);
        }
        if to.write_all(&header).is_err() || to.write_all(&body).is_err() {
            return;
        }
    }
}

#[test]
fn a_claim_that_runs_after_the_retry_won_fences_the_node_start_returned() {
    let db = TestDb::create("attack_late_claim");
    let (port, user): (String, String) = {
        let row = db.connect().query_one("SELECT current_setting('port'), current_user::text", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    let proxy = DelayingProxy::to(&format!("127.0.0.1:{port}"));
    let dsn = format!("host=127.0.0.1 port={} user={user} dbname={}", proxy.port, db.name);
    let mut config = Config::new(&dsn, "svc", "10.0.9.4", 1);
    config.call_timeout = Duration::from_secs(1);
    config.start_timeout = Duration::from_secs(10);
    config.heartbeat_interval = Some(Duration::from_millis(500));
    let (started, _) = within(Duration::from_secs(30), move || IdgenNode::start(config));
    let node = started.expect("start returned").expect("the retry claims");
    let mut admin = db.connect();
    let won = (node.machine_id(), node.version());
    assert_eq!(held_rows(&mut admin, "10.0.9.4"), vec![won]);
    node.next_id().unwrap();

    // The first attempt's claim reaches the server now.
    proxy.hold.store(false, Ordering::SeqCst);
    // Three heartbeats later the node still holds what it won (a late claim would have fenced it:
    // its next heartbeat is refused).
    let ok = node.metrics().heartbeats_ok;
    wait_for("three heartbeats, or the node's loss", PATIENCE, || {
        std::thread::sleep(Duration::from_millis(100));
        node.metrics().heartbeats_ok > ok + 2 || matches!(node.status(), Status::Lost { .. })
    });
    for r in admin
        .query(
            "SELECT machine_id, version, released_at IS NOT NULL, (issued_until - now())::text,
                    (idgen_private.holder_bound(n, '1h', '1h') - now())::text
               FROM idgen_private.nodes n WHERE host = '10.0.9.4' ORDER BY machine_id",
            &[],
        )
        .unwrap()
    {
        eprintln!(
            "row: machine_id {} version {} released {} issued_until-now {} bound-now {}",
            r.get::<_, i32>(0),
            r.get::<_, i64>(1),
            r.get::<_, bool>(2),
            r.get::<_, String>(3),
            r.get::<_, String>(4)
        );
    }
    eprintln!("node: {:?}", node.metrics());
    let status = node.status();
    let rows = held_rows(&mut admin, "10.0.9.4");
    let next = node.next_id();
    let _ = node.shutdown();
    assert!(
        status == Status::Live && rows == vec![won] && next.is_ok(),
        "the late claim took the winner's row: status {status:?}, held rows {rows:?} (won {won:?}), next_id {next:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. The 9-argument heartbeat was called by its bare name, first, on every server. Servers before
//    0.6.0 have no such function, so the name was free: anyone who can create in any schema of the
//    node's search_path (public, on a cluster upgraded from 14 or earlier, where PUBLIC keeps
//    CREATE) defined it, and every heartbeat ran the attacker's code as the node's role, and
//    "succeeded" with whatever lease it returned. Here the node's id is released under it (its
//    real heartbeat gets 55000 and stops the node). Now every call names idgen's schema, casts
//    every argument, and uses the counts only where the installed version has them.

#[test]
fn a_nine_argument_idgen_heartbeat_anyone_creates_in_public_captures_the_heartbeat() {
    let db = TestDb::empty_on(&base_dsn(), "attack_heartbeat_capture");
    let mut admin = db.connect();
    admin.batch_execute("CREATE EXTENSION idgen VERSION '0.5.1'").unwrap();
    ensure_login_role(&mut admin, "idgen_t_attacker");
    admin
        .batch_execute(
            "GRANT CREATE ON SCHEMA public TO PUBLIC;  -- the default before PostgreSQL 15
             SET ROLE idgen_t_attacker;
             CREATE FUNCTION public.idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz,
                                                    bigint, bigint, bigint)
                 RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() + interval '100 years' $$;
             RESET ROLE;",
        )
        .unwrap();
    let mut config = Config::new(&db.dsn(), "svc", "10.0.9.5", 1);
    config.call_timeout = Duration::from_secs(2);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    wait_for("a heartbeat", PATIENCE, || node.metrics().heartbeats_ok > 0);
    // The id is taken from the node (released by hand: what a take-over does to its version).
    assert!(release_on_0_5_1(&mut admin, "10.0.9.5", &node));
    let ok = node.metrics().heartbeats_ok;
    wait_for("more heartbeats, or the node's loss", PATIENCE, || {
        node.metrics().heartbeats_ok > ok + 3 || matches!(node.status(), Status::Lost { .. })
    });
    let metrics = node.metrics();
    let minted = node.next_id();
    let _ = node.shutdown();
    assert!(
        matches!(metrics.status, Status::Lost { .. }) && minted.is_err(),
        "the node heartbeats 'ok' and mints on a released id: {metrics:?}, next_id {minted:?}"
    );
}

/// The capture of test 5 carried through: the id released under the captured node goes to
/// another node, and both mint the same IDs.
#[test]
fn a_captured_heartbeat_lets_two_nodes_issue_the_same_ids() {
    let (cluster, _turn) = clock_cluster_turn();
    let _settings = SystemSettings::set(
        &cluster.dsn,
        &[("idgen.release_cooldown", "1s"), ("idgen.lease_safety_margin", "2s"), ("idgen.machine_id_range", "0-0")],
    );
    let db = TestDb::empty_on(&cluster.dsn, "attack_capture_duplicates");
    let mut admin = db.connect();
    admin.batch_execute("CREATE EXTENSION idgen VERSION '0.5.1'").unwrap();
    ensure_login_role(&mut admin, "idgen_t_attacker");
    admin
        .batch_execute(
            "GRANT CREATE ON SCHEMA public TO PUBLIC;
             SET ROLE idgen_t_attacker;
             CREATE FUNCTION public.idgen_heartbeat(text, smallint, inet, integer, bigint, timestamptz,
                                                    bigint, bigint, bigint)
                 RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() + interval '100 years' $$;
             RESET ROLE;",
        )
        .unwrap();
    let config = |host: &str| {
        let mut config = Config::new(&db.dsn(), "svc", host, 1);
        config.call_timeout = Duration::from_secs(2);
        config.start_timeout = Duration::from_secs(30);
        config.heartbeat_interval = Some(Duration::from_millis(200));
        config
    };
    let a = Arc::new(IdgenNode::start(config("10.0.9.6")).unwrap());
    wait_for("a heartbeat", PATIENCE, || a.metrics().heartbeats_ok > 0);
    // The id moves (a take-over, or a release by hand): A's heartbeats still "succeed".
    assert!(release_on_0_5_1(&mut admin, "10.0.9.6", &a));
    // After the cooldown and the release's watermark (2 s), another node gets it.
    let mut b = None;
    wait_for("B's claim", PATIENCE, || {
        match IdgenNode::start(config("10.0.9.7")) {
            Ok(node) => b = Some(node),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
        b.is_some()
    });
    let b = Arc::new(b.unwrap());
    assert_eq!(b.machine_id(), a.machine_id());
    let ok = a.metrics().heartbeats_ok;
    wait_for("A's heartbeats after the move, or A's loss", PATIENCE, || {
        a.metrics().heartbeats_ok > ok + 2 || matches!(a.status(), Status::Lost { .. })
    });
    let mint = |node: Arc<IdgenNode>| {
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_millis(300);
            let mut ids = Vec::new();
            while Instant::now() < until {
                match node.next_id() {
                    Ok(id) => ids.push(id),
                    Err(_) => break,
                }
            }
            ids
        })
    };
    let (ta, tb) = (mint(a.clone()), mint(b.clone()));
    let ids_a: std::collections::HashSet<i64> = ta.join().unwrap().into_iter().collect();
    let ids_b = tb.join().unwrap();
    let twice = ids_b.iter().filter(|id| ids_a.contains(id)).count();
    let _ = a.shutdown();
    let _ = b.shutdown();
    assert_eq!(twice, 0, "{twice} IDs issued by both nodes ({} by A, {} by B)", ids_a.len(), ids_b.len());
}
