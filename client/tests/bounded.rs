//! Every wait of the client ends, whatever the database or the network does (scripts/test.sh
//! starts the servers): a primary whose commits wait for a synchronous standby that never
//! answers, and a peer that stops answering while its socket stays open. The bounds asserted are
//! the documented ones plus a generous slack: a test that only checks "it returned" could not
//! tell a bounded wait from a slow one, and one without slack would fail on a busy machine.

use idgen_client::{Config, Error, IdgenNode, Status};
use idgen_cluster_tests::*;
use postgres::Client;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What a busy machine may add to a documented bound.
const SLACK: Duration = Duration::from_secs(30);

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_for(what, PATIENCE, done);
}

/// Runs `f` on a thread and waits for it within [`WORK_PATIENCE`]: a call that hangs fails the
/// test (naming it) instead of hanging it. Returns the result and how long it took.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (done, result) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    match result.recv_timeout(WORK_PATIENCE) {
        Ok(value) => (value, started.elapsed()),
        Err(_) => panic!("{what} did not return within {WORK_PATIENCE:?}: the wait is not bounded"),
    }
}

fn held_rows(admin: &mut Client, host: &str) -> i64 {
    admin
        .query_one("SELECT count(*) FROM system_nodes WHERE host = $1::text::inet AND released_at IS NULL", &[&host])
        .unwrap()
        .get(0)
}

#[test]
fn a_primary_that_never_confirms_a_commit_cannot_hang_start_heartbeats_or_shutdown() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "client_hung_commit");
    let config = |host: &str| {
        let mut config = Config::new(&db.dsn(), "svc", host, 1);
        config.call_timeout = Duration::from_secs(1);
        config.start_timeout = Duration::from_secs(3);
        config.heartbeat_interval = Some(Duration::from_millis(200));
        config
    };
    let running = Arc::new(IdgenNode::start(config("10.0.0.1")).unwrap());
    let last_id = running.next_id().unwrap();
    wait_until("a heartbeat", || running.metrics().heartbeats_ok > 0);

    // From now on every commit waits for a standby that does not exist (reads still answer).
    let hung = SystemSettings::set(&cluster.dsn, &[("synchronous_standby_names", "idgen_absent_standby")]);

    // The heartbeat gets no answer: it gives up at its deadline, counts it, and tries again.
    wait_until("a heartbeat to time out", || running.metrics().heartbeats_timed_out > 0);
    assert!(matches!(running.status(), Status::Live | Status::Expired), "{:?}", running.status());

    // A new node's claim gets no answer either: start gives up within start_timeout + call_timeout.
    let fresh = config("10.0.0.2");
    let bound = fresh.start_timeout + fresh.call_timeout;
    let (started, took) = within("IdgenNode::start against a hung primary", move || IdgenNode::start(fresh));
    match started {
        Err(Error::NoAnswer { call: "claim", .. }) => {}
        Err(e) => panic!("start failed otherwise: {e}"),
        Ok(node) => panic!("start claimed machine id {} although no commit completes", node.machine_id()),
    }
    assert!(took < bound + SLACK, "start took {took:?}, bound {bound:?}");

    // Shutdown stops issuing at once and gives the release its time: within two call_timeouts.
    let node = running.clone();
    let (released, took) = within("IdgenNode::shutdown against a hung primary", move || node.shutdown());
    assert!(matches!(released, Err(Error::NoAnswer { call: "release", .. })), "{released:?}");
    assert!(took < 2 * Duration::from_secs(1) + SLACK, "shutdown took {took:?}");
    assert!(matches!(running.next_id(), Err(Error::Stopped)));

    // What the registry is left with once commits complete again: the fresh node's claims, which
    // committed after it gave up on them, released by the node itself; the running node's release
    // committed (its cancelled wait left it committed here), with a watermark covering its IDs.
    drop(hung);
    let mut admin = db.connect();
    wait_until("the fresh node's unused claims to be released", || held_rows(&mut admin, "10.0.0.2") == 0);
    wait_until("the running node's release", || held_rows(&mut admin, "10.0.0.1") == 0);
    let covered: bool = admin
        .query_one(
            "SELECT bool_and(issued_until >= (SELECT ts FROM idgen_decode($1))) FROM system_nodes
              WHERE host = '10.0.0.1' AND service = 'svc'",
            &[&last_id],
        )
        .unwrap()
        .get(0);
    assert!(covered, "the release's watermark does not cover the node's last ID");
}

/// A TCP proxy whose connections can be frozen: a frozen one forwards nothing either way while
/// its sockets stay open, as a peer that died without a word (its kernel still acknowledges, so
/// keepalives see nothing: only the client's own deadline can tell).
struct Proxy {
    port: u16,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    freeze_new: Arc<AtomicBool>,
}

impl Proxy {
    fn to(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let freeze_new = Arc::new(AtomicBool::new(false));
        let target = target.to_owned();
        std::thread::spawn({
            let (frozen, freeze_new) = (frozen.clone(), freeze_new.clone());
            move || {
                for client in listener.incoming().flatten() {
                    let Ok(server) = TcpStream::connect(&target) else { continue };
                    let flag = Arc::new(AtomicBool::new(freeze_new.load(Ordering::SeqCst)));
                    frozen.lock().unwrap().push(flag.clone());
                    pump(client.try_clone().unwrap(), server.try_clone().unwrap(), flag.clone());
                    pump(server, client, flag);
                }
            }
        });
        Proxy { port, frozen, freeze_new }
    }

    /// Freezes every connection made so far.
    fn freeze_current(&self) {
        for flag in self.frozen.lock().unwrap().iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// Freezes every connection, and the ones still to come.
    fn freeze_all(&self) {
        self.freeze_new.store(true, Ordering::SeqCst);
        self.freeze_current();
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, frozen: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        from.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buffer = [0u8; 16 * 1024];
        loop {
            if frozen.load(Ordering::SeqCst) {
                // Holds the sockets open, reads and forwards nothing.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            match from.read(&mut buffer) {
                Ok(0) => return,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    });
}

#[test]
fn a_peer_that_stops_answering_is_left_behind_by_the_heartbeat_and_cannot_hang_shutdown() {
    let db = TestDb::create("client_dead_peer");
    let (port, user): (String, String) = {
        let row = db.connect().query_one("SELECT current_setting('port'), current_user::text", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    let proxy = Proxy::to(&format!("127.0.0.1:{port}"));
    let dsn = format!("host=127.0.0.1 port={} user={user} dbname={}", proxy.port, db.name);
    let mut config = Config::new(&dsn, "svc", "10.0.1.1", 1);
    config.call_timeout = Duration::from_secs(1);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = Arc::new(IdgenNode::start(config).unwrap());
    wait_until("a heartbeat", || node.metrics().heartbeats_ok > 0);

    // The heartbeat's connection goes silent: the heartbeat gives up on it at its deadline and the
    // next one connects anew (a multi-host connection string would find the new primary here).
    proxy.freeze_current();
    wait_until("a heartbeat to time out", || node.metrics().heartbeats_timed_out > 0);
    let ok = node.metrics().heartbeats_ok;
    wait_until("a heartbeat on a new connection", || node.metrics().heartbeats_ok > ok);
    assert_eq!(node.status(), Status::Live);
    node.next_id().unwrap();

    // Everything goes silent, new connections too: shutdown still returns within two call_timeouts.
    proxy.freeze_all();
    let stopping = node.clone();
    let (released, took) = within("IdgenNode::shutdown with a silent peer", move || stopping.shutdown());
    assert!(released.is_err(), "a release through a silent peer cannot have succeeded: {released:?}");
    assert!(took < 2 * Duration::from_secs(1) + SLACK, "shutdown took {took:?}");
    assert!(matches!(node.next_id(), Err(Error::Stopped)));
}
