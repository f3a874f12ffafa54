//! The sidecar (`idgen-node --listen`) against clients that do not play fair: one that pipelines
//! batches and reads nothing, one that sends half a request (or trickles one), thousands that
//! connect and say nothing, requests that bend the path or the query; and a process paused past
//! its lease, whose `/status` must say what `/id` does. Meanwhile the other clients and the probes
//! are served. No test depends on the machine's speed: every wait has a generous deadline and fails
//! with a message, and "served meanwhile" means within [`ANSWER_BOUND`], far above any answer of a
//! sidecar that works and far below the forever of one that is wedged.

mod common;

use common::*;
use idgen_client::sidecar::{Sidecar, ANSWER_TIMEOUT, HEADER_TIMEOUT, MAX_CONNECTIONS, WRITE_TIMEOUT};
use idgen_cluster_tests::*;
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long an answer to a well-behaved client may take while others misbehave.
const ANSWER_BOUND: Duration = Duration::from_secs(30);

/// A sidecar for "svc" as `host`:1, with `extra` arguments, and its address once it is ready.
fn start_sidecar(dsn: &str, host: &str, extra: &[&str]) -> (Node, String) {
    let node = spawn_node(dsn, host, &[&["--listen", "127.0.0.1:0"], extra].concat());
    let line = node.stderr.wait_for("the address it listens on", |l| l.starts_with("idgen-node: listening on "));
    let address = line.trim_start_matches("idgen-node: listening on http://").to_owned();
    wait_for("the sidecar to be ready", PATIENCE, || {
        let ready = http_get(&address, "/readyz").status == 200;
        if !ready {
            poll_pause();
        }
        ready
    });
    (node, address)
}

fn json(reply: &HttpReply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("not JSON ({e}): {reply:?}"))
}

/// Asserts a refusal: its status, and its code (`error` in JSON, the first words in text).
fn assert_refused(reply: &HttpReply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    if reply.header("content-type") == Some("application/json") {
        assert_eq!(json(reply)["error"], code, "{reply:?}");
    } else {
        assert!(reply.body.starts_with(&format!("{}: ", code.replace('_', " "))), "{reply:?}");
    }
}

/// `GET path` on a connection of its own, answered 200 within [`ANSWER_BOUND`].
fn served(address: &str, path: &str) -> HttpReply {
    let started = Instant::now();
    let reply = http_get(address, path);
    let took = started.elapsed();
    assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
    assert!(took < ANSWER_BOUND, "GET {path} took {took:?} while other clients misbehaved");
    reply
}

/// `/id`, `/livez` and `/readyz`, each served.
fn others_are_served(address: &str) {
    let id = served(address, "/id");
    assert!(id.body.trim_end().parse::<i64>().is_ok(), "{id:?}");
    served(address, "/livez");
    served(address, "/readyz");
}

/// How many IDs the sidecar has minted.
fn issued(address: &str) -> u64 {
    json(&http_get(address, "/status"))["ids_issued"].as_u64().expect("ids_issued")
}

/// A connection to `address` with a small receive buffer, so that an answer it does not read
/// fills it after a few kilobytes, whatever the kernel's autotuning would have given.
fn small_window(address: &str) -> TcpStream {
    let addr: SocketAddr = address.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect_timeout(&addr.into(), PATIENCE).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.set_write_timeout(Some(PATIENCE)).unwrap();
    stream
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe)
}

#[test]
fn a_client_that_pipelines_batches_and_reads_nothing_stalls_only_its_own_connection_and_is_reset() {
    let db = TestDb::create("client_sidecar_abuse_pipeline");
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &[]);
    let issued_before = issued(&address);

    let mut abuser = small_window(&address);
    let request = "GET /ids?count=10000 HTTP/1.1\r\nHost: sidecar\r\n\r\n";
    abuser.write_all(request.repeat(40).as_bytes()).unwrap();

    // Other clients ask for batches all along, and the probes and single IDs are served meanwhile:
    // for longer than the write timeout, so through the moment the abuser is dropped.
    let until = Instant::now() + WRITE_TIMEOUT + Duration::from_secs(5);
    let loaders: Vec<_> = (0..2)
        .map(|k| {
            let address = address.clone();
            spawn_named(format!("batch client {k}"), move || {
                let mut http = Http::connect(&address).unwrap();
                let mut batches = 0;
                while Instant::now() < until {
                    let reply = http.get("/ids?count=10000").unwrap();
                    assert_eq!((reply.status, reply.body.lines().count()), (200, 10_000), "batch {batches}");
                    batches += 1;
                }
                batches
            })
        })
        .collect();
    let mut singles = 0;
    while Instant::now() < until {
        others_are_served(&address);
        singles += 1;
        poll_pause();
    }
    let batches: usize = join_all(loaders, PATIENCE, "the batch clients").into_iter().sum();
    assert!(batches > 0);

    // The sidecar reset the connection whose answers were not read, seen here without reading.
    wait_for("the sidecar to reset the connection that reads nothing", PATIENCE, || match abuser.take_error() {
        Ok(Some(e)) if is_reset(&e) => true,
        Ok(Some(e)) => panic!("the abuser's connection failed otherwise: {e}"),
        Ok(None) => {
            poll_pause();
            false
        }
        Err(e) => panic!("SO_ERROR: {e}"),
    });
    // What it had been sent before: some answers, not the 40 it asked for.
    let mut received = vec![];
    match abuser.read_to_end(&mut received) {
        Ok(_) => {}
        Err(e) if is_reset(&e) => {}
        Err(e) => panic!("reading what the abuser was sent: {e}"),
    }
    let answers = String::from_utf8_lossy(&received).matches("HTTP/1.1 200").count();
    assert!(answers < 40, "the abuser got {answers} answers");
    // Nothing was minted for the abuser's 40 requests but what its connection held: a batch or
    // two beyond those of the other clients.
    let minted = issued(&address) - issued_before;
    let others = batches as u64 * 10_000 + singles;
    eprintln!("minted {minted} IDs, {others} of them for the other clients; the abuser got {answers} answers");
    assert!(minted <= others + 5 * 10_000, "minted {minted}, the other clients took {others}");
    others_are_served(&address);

    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn a_client_that_sends_half_a_request_or_trickles_one_is_dropped_and_others_are_served() {
    let db = TestDb::create("client_sidecar_abuse_half");
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &[]);

    // Twenty clients send the start of a request and go silent.
    let started = Instant::now();
    let mut halves: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut half = TcpStream::connect(&address).unwrap();
            half.set_read_timeout(Some(PATIENCE)).unwrap();
            half.write_all(b"GET /ids?count=5 HTTP/1.1\r\nHost: sidecar\r\n").unwrap();
            half
        })
        .collect();
    // One sends a header a byte at a time, never ending it: bytes that keep coming do not extend
    // the time a request head may take.
    let trickler = {
        let address = address.clone();
        spawn_named("trickler", move || {
            let mut slow = TcpStream::connect(&address).unwrap();
            slow.set_write_timeout(Some(PATIENCE)).unwrap();
            slow.write_all(b"GET /id HTTP/1.1\r\nX-Slow: ").unwrap();
            let started = Instant::now();
            loop {
                match slow.write_all(b"a") {
                    Ok(()) => assert!(started.elapsed() < PATIENCE, "a request trickled in for {PATIENCE:?}"),
                    Err(e) => {
                        assert!(is_reset(&e), "the trickler's write failed otherwise: {e}");
                        return started.elapsed();
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    others_are_served(&address);
    for half in &mut halves {
        let mut byte = [0u8; 1];
        match half.read(&mut byte) {
            Ok(0) => {}
            Err(e) if is_reset(&e) => {}
            Ok(_) => panic!("a half request was answered"),
            Err(e) => panic!("a half request was not dropped within {PATIENCE:?}: {e}"),
        }
    }
    let dropped_after = started.elapsed();
    assert!(dropped_after >= HEADER_TIMEOUT / 2, "dropped after {dropped_after:?}: before its time?");
    let trickled_for = join_within(trickler, PATIENCE + Duration::from_secs(10), "the trickler");
    eprintln!("half requests dropped after {dropped_after:?}; the trickler after {trickled_for:?}");
    others_are_served(&address);

    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn a_client_that_reads_an_answer_just_fast_enough_to_keep_it_moving_is_reset_all_the_same() {
    let db = TestDb::create("client_sidecar_abuse_slow_reader");
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &[]);
    // The largest answer, 420 KB of JSON, taken 4 KB a second: often enough that its writes keep
    // moving, so slowly that it would take almost two minutes.
    let mut slow = small_window(&address);
    slow.write_all(b"GET /ids?count=10000&format=json HTTP/1.1\r\nHost: sidecar\r\n\r\n").unwrap();
    let started = Instant::now();
    let mut received = 0;
    let ended = loop {
        let mut chunk = [0u8; 4096];
        match slow.read(&mut chunk) {
            Ok(0) => break "closed",
            Ok(n) => received += n,
            Err(e) if is_reset(&e) => break "reset",
            Err(e) => panic!("the slow reader's read failed otherwise: {e}"),
        }
        assert!(started.elapsed() < PATIENCE, "the slow reader was still served after {PATIENCE:?}");
        others_are_served(&address);
        std::thread::sleep(Duration::from_secs(1));
    };
    let took = started.elapsed();
    eprintln!("the slow reader's connection was {ended} after {took:?} and {received} bytes");
    assert!(received < 10_000 * 40, "it took the whole answer ({received} bytes)");
    assert!(took >= WRITE_TIMEOUT.min(ANSWER_TIMEOUT) / 2, "ended after {took:?}: before its time?");
    others_are_served(&address);
    node.signal("TERM");
    assert!(node.exit_status().success());
}

/// Raises this process's soft limit on open files to `wanted` if it is below and the hard limit
/// allows; the limit it has then.
fn open_files_limit(wanted: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= wanted {
        return soft;
    }
    let raised = limit.maximum.map_or(wanted, |hard| hard.min(wanted));
    match setrlimit(Resource::Nofile, Rlimit { current: Some(raised), maximum: limit.maximum }) {
        Ok(()) => raised,
        Err(_) => soft,
    }
}

/// How many of `connections` the server has not closed (a read would wait).
fn still_open(connections: &[TcpStream]) -> usize {
    connections
        .iter()
        .filter(|c| {
            let mut byte = [0u8; 1];
            matches!((&**c).read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock)
        })
        .count()
}

#[test]
fn thousands_of_idle_connections_neither_exhaust_the_sidecar_nor_lock_a_new_client_out() {
    const IDLE: usize = 3000;
    let limit = open_files_limit(IDLE as u64 + 256);
    assert!(
        limit >= IDLE as u64 + 256,
        "this test opens {IDLE} connections, and may open only {limit} files (ulimit -n)"
    );
    let db = TestDb::create("client_sidecar_abuse_idle");
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &[]);
    let addr: SocketAddr = address.parse().unwrap();

    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|k| {
            let stream = TcpStream::connect_timeout(&addr, PATIENCE)
                .unwrap_or_else(|e| panic!("idle connection {k} of {IDLE}: {e}"));
            stream.set_nonblocking(true).unwrap();
            stream
        })
        .collect();
    // A new client is served all the same, and so are the probes.
    others_are_served(&address);
    let mut http = Http::connect(&address).unwrap();
    assert_eq!(http.get("/ids?count=100").unwrap().body.lines().count(), 100);

    // The sidecar closed idle connections to stay within its cap: its open files stay within it.
    wait_for("the sidecar to close idle connections beyond its cap", PATIENCE, || {
        let open = still_open(&idle);
        if open > MAX_CONNECTIONS {
            poll_pause();
        }
        open <= MAX_CONNECTIONS
    });
    let fds = std::fs::read_dir(format!("/proc/{}/fd", node.child.id())).map(|d| d.count());
    if let Ok(fds) = fds {
        assert!(fds <= MAX_CONNECTIONS + 100, "the sidecar holds {fds} open files");
    }
    assert_eq!(http.get("/livez").unwrap().status, 200, "the served client's connection was kept");
    drop(idle);
    others_are_served(&address);

    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn paths_and_queries_are_read_strictly_over_the_wire() {
    let db = TestDb::create("client_sidecar_abuse_strict");
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &[]);
    let mut http = Http::connect(&address).unwrap();
    for path in
        ["/../id", "/./id", "//id", "/id/", "/%69d", "/id%2F", "/%2e%2e/id", "/ID", "/ids/../id", "/livez/", "//readyz"]
    {
        let reply = http.get(path).unwrap();
        assert_refused(&reply, 404, "not_found");
        assert!(reply.body.contains("no such path"), "{path}: {reply:?}");
    }
    for (path, words) in [
        ("/ids?count=+5", "not \"+5\""),
        ("/ids?count=02", "not \"02\""),
        ("/ids?count=%35", "not \"%35\""),
        ("/ids?count=2&count=3", "\"count\" given more than once"),
        ("/ids?count=2&format=text&format=json", "\"format\" given more than once"),
        ("/ids?count=2&offset=1", "unknown parameter \"offset\""),
        ("/id?x=1", "unknown parameter \"x\""),
        ("/ids?count=2&", "an empty parameter"),
        ("/readyz?verbose", "unknown parameter \"verbose\""),
    ] {
        let reply = http.get(path).unwrap();
        assert_refused(&reply, 400, "bad_request");
        assert!(reply.body.contains(words), "{path}: {reply:?}");
    }
    let reply = http.request("GET", "/ids?count=+5", &[("Accept", "application/json")]).unwrap();
    assert_refused(&reply, 400, "bad_request");
    assert!(json(&reply)["reason"].as_str().unwrap().contains("not \"+5\""), "{reply:?}");
    // What the documentation shows still works, on the same connection.
    assert_eq!(http.get("/ids?count=5&format=json").unwrap().status, 200);
    assert_eq!(http.get("/readyz?format=json").unwrap().status, 200);
    assert_eq!(http.get("/id?").unwrap().status, 200);

    // A request hyper cannot read is answered 400 by it and its connection closed; others go on.
    let mut garbled = TcpStream::connect(&address).unwrap();
    garbled.set_read_timeout(Some(PATIENCE)).unwrap();
    garbled.write_all(b"GET /id HTTP/1.1\r\nHost: sidecar\r\nno colon here\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = garbled.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    others_are_served(&address);

    // A target in absolute form names no path as sent.
    let mut absolute = TcpStream::connect(&address).unwrap();
    absolute.set_read_timeout(Some(PATIENCE)).unwrap();
    absolute
        .write_all(b"GET http://elsewhere.example/id HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = absolute.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer:?}");

    // A client that shuts its side down after a whole request gets its answer (its IDs are minted).
    let mut half_closed = TcpStream::connect(&address).unwrap();
    half_closed.set_read_timeout(Some(PATIENCE)).unwrap();
    half_closed.write_all(b"GET /ids?count=3 HTTP/1.1\r\nHost: sidecar\r\n\r\n").unwrap();
    half_closed.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    let _ = half_closed.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "a half-closed client got no answer: {answer:?}");
    assert_eq!(answer.split("\r\n\r\n").nth(1).unwrap_or("").lines().count(), 3, "{answer:?}");

    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn status_says_expired_as_id_does_when_the_process_resumes_past_its_deadline() {
    // Leases of 4 s, heartbeats every second.
    let (_turn, cluster, _settings): (_, ClockCluster, _) = short_leases(None);
    let db = TestDb::create_on(&cluster.dsn, "client_sidecar_abuse_paused");
    // A heartbeat may wait a minute for an answer: the one that waits on the row lock below keeps
    // the heartbeat thread from marking the lease expired, as a process just resumed has not yet.
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1", &["--call-timeout", "60"]);
    assert_eq!(http_get(&address, "/id").status, 200);
    let lock = RowLock::hold(&db, "10.0.0.1");
    // Paused past its deadline (4 s after the last heartbeat answered, before the lock).
    node.signal("STOP");
    std::thread::sleep(Duration::from_secs(6));
    node.signal("CONT");

    let status = json(&http_get(&address, "/status"));
    let id = http_request(&address, "GET", "/id", &[("Accept", "application/json")]);
    let status_after = json(&http_get(&address, "/status"));
    assert_refused(&id, 503, "expired");
    for status in [&status, &status_after] {
        assert_eq!(status["status"], "expired", "{status}");
        assert!(status["time_to_deadline_ms"].is_null(), "{status}");
    }
    assert_refused(&http_get(&address, "/readyz"), 503, "expired");
    assert_eq!(http_get(&address, "/livez").status, 200, "an expired lease may come back: no restart");

    // Once a heartbeat gets through, both say so.
    lock.commit();
    wait_for("the sidecar to be live again", PATIENCE, || {
        let live = json(&http_get(&address, "/status"))["status"] == "live";
        if !live {
            poll_pause();
        }
        live
    });
    assert_eq!(http_get(&address, "/id").status, 200);
    node.signal("TERM");
    assert!(node.exit_status().success(), "{:?}", node.stderr.so_far());
}

#[test]
fn stop_closes_every_connection_within_its_bound_and_dropping_the_sidecar_ends_it() {
    // No node: the sidecar answers as while its node claims.
    let sidecar = Sidecar::bind("127.0.0.1:0", 2).unwrap();
    let address = sidecar.local_addr().to_string();
    assert_refused(&http_get(&address, "/id"), 503, "starting");
    assert_eq!(http_get(&address, "/livez").status, 200);
    let mut idle = Http::connect(&address).unwrap();
    assert_eq!(idle.get("/livez").unwrap().status, 200);
    let mut half = TcpStream::connect(&address).unwrap();
    half.set_read_timeout(Some(PATIENCE)).unwrap();
    half.write_all(b"GET /livez HTTP/1.1\r\n").unwrap();

    let started = Instant::now();
    join_within(spawn_named("Sidecar::stop", move || sidecar.stop()), PATIENCE, "Sidecar::stop");
    let took = started.elapsed();
    assert!(took < WRITE_TIMEOUT + ANSWER_BOUND, "stop took {took:?}");
    assert!(TcpStream::connect(&address).is_err(), "still listening after stop");
    assert!(idle.get("/livez").is_err(), "an idle connection outlived stop");
    let mut byte = [0u8; 1];
    match half.read(&mut byte) {
        Ok(0) => {}
        Err(e) if is_reset(&e) => {}
        other => panic!("a half request outlived stop: {other:?}"),
    }

    let dropped = Sidecar::bind("127.0.0.1:0", 1).unwrap();
    let address = dropped.local_addr().to_string();
    assert_eq!(http_get(&address, "/livez").status, 200);
    drop(dropped);
    wait_for("the dropped sidecar to stop listening", PATIENCE, || {
        let gone = TcpStream::connect(&address).is_err();
        if !gone {
            poll_pause();
        }
        gone
    });
}
