//! The sidecar, `idgen-node --listen`, against real servers: its answers (plain text, JSON, batches,
//! bad requests), its probes, its 503s (shutting down, a lease expired in a partition, the id lost to
//! a take-over), and IDs over HTTP that share one primary key with `DEFAULT idgen_next_id()` without
//! a collision. Each sidecar listens on a port the system picks (`--listen 127.0.0.1:0`, read back
//! from its stderr). No test depends on the machine's speed: each waits for a state within a
//! generous deadline, and fails with a message.

mod common;

use common::*;
use idgen_cluster_tests::*;
use serde_json::Value;

/// A sidecar for "svc" as `host`:1, and its address once it is ready (live, and its node inside
/// its lease).
fn start_sidecar(dsn: &str, host: &str) -> (Node, String) {
    start_sidecar_with(dsn, host, &[])
}

/// [`start_sidecar`], with `extra` arguments.
fn start_sidecar_with(dsn: &str, host: &str, extra: &[&str]) -> (Node, String) {
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

/// The ID of a plain-text answer of `/id`.
fn text_id(reply: &HttpReply) -> i64 {
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some("text/plain; charset=utf-8"));
    let line = reply.body.strip_suffix('\n').unwrap_or_else(|| panic!("not one line: {:?}", reply.body));
    line.parse().unwrap_or_else(|_| panic!("not an ID: {line:?}"))
}

/// The IDs of a JSON answer of `/ids`: numbers, and the same as strings.
fn json_ids(reply: &HttpReply) -> Vec<i64> {
    assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/json")), "{reply:?}");
    let body = json(reply);
    let numbers: Vec<i64> = body["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let strings: Vec<i64> =
        body["ids_str"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(numbers, strings);
    numbers
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

#[test]
fn the_sidecar_answers_ids_in_text_and_json_one_or_a_batch_and_refuses_bad_requests() {
    let db = TestDb::create("client_sidecar_answers");
    let mut admin = db.connect();
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1");
    // One keep-alive connection for all of it.
    let mut http = Http::connect(&address).unwrap();
    let live = http.get("/livez").unwrap();
    assert_eq!((live.status, live.body.as_str()), (200, "live\n"));

    let mut all = vec![text_id(&http.get("/id").unwrap())];
    assert_eq!(http.get("/id").unwrap().header("cache-control"), Some("no-store"));
    for (method, path, accept) in
        [("GET", "/id", Some("application/json")), ("GET", "/id?format=json", None), ("POST", "/id?format=json", None)]
    {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
        let reply = http.request(method, path, &headers).unwrap();
        assert_eq!((reply.status, reply.header("content-type")), (200, Some("application/json")), "{reply:?}");
        let body = json(&reply);
        let id = body["id"].as_i64().unwrap();
        assert_eq!(body["id_str"].as_str(), Some(id.to_string().as_str()), "{body}");
        all.push(id);
    }
    // Text wins when asked for by name.
    all.push(text_id(&http.request("GET", "/id?format=text", &[("Accept", "application/json")]).unwrap()));

    let batch = http.get("/ids?count=1000").unwrap();
    assert_eq!(batch.status, 200, "{batch:?}");
    let lines = ids(&batch.body.lines().map(str::to_owned).collect::<Vec<_>>());
    assert_eq!(lines.len(), 1000);
    all.extend(lines);
    all.extend(json_ids(&http.request("POST", "/ids?count=100", &[("Accept", "application/json")]).unwrap()));
    all.extend(json_ids(&http.get(&format!("/ids?count={}&format=json", idgen_client::sidecar::MAX_BATCH)).unwrap()));
    assert_eq!(all.len(), 5 + 1000 + 100 + 10_000);
    // In the order minted, as the library mints them: increasing, so no two alike.
    assert!(all.windows(2).all(|w| w[0] < w[1]), "IDs over HTTP out of order");

    // Bad requests: 400 (and 404, 405) with the reason, in the format asked for.
    for (path, words) in [
        ("/ids", "needs count=N"),
        ("/ids?count=0", "not \"0\""),
        ("/ids?count=10001", "not \"10001\""),
        ("/ids?count=many", "not \"many\""),
        ("/id?count=2", "unknown parameter \"count\""),
        ("/id?format=xml", "not \"xml\""),
    ] {
        let reply = http.get(path).unwrap();
        assert_refused(&reply, 400, "bad_request");
        assert!(reply.body.contains(words), "{path}: {reply:?}");
    }
    assert_refused(
        &http.request("GET", "/ids?count=0", &[("Accept", "application/json")]).unwrap(),
        400,
        "bad_request",
    );
    assert_refused(&http.get("/nope").unwrap(), 404, "not_found");
    let reply = http.request("DELETE", "/id", &[]).unwrap();
    assert_refused(&reply, 405, "method_not_allowed");
    assert_eq!(reply.header("allow"), Some("GET, POST"));

    // Readiness and status name the machine id the registry gave, the one every ID carries.
    let (_, _, machine_id) = node_row(&mut admin, "10.0.0.1");
    let ready = json(&http.get("/readyz?format=json").unwrap());
    assert_eq!((ready["ready"].as_bool(), ready["machine_id"].as_i64()), (Some(true), Some(machine_id.into())));
    let status = json(&http.get("/status").unwrap());
    assert_eq!((status["status"].as_str(), status["machine_id"].as_i64()), (Some("live"), Some(machine_id.into())));
    assert!(status["ids_issued"].as_u64().unwrap() >= all.len() as u64, "{status}");

    node.signal("TERM");
    assert!(node.exit_status().success());
    assert_released_bounding(&mut admin, "10.0.0.1", &all);
}

/// The samples of a Prometheus text answer: `name{labels}` → value.
fn samples(body: &str) -> std::collections::BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l:?}"));
            (series.to_owned(), value.parse().unwrap_or_else(|_| panic!("not a number: {l:?}")))
        })
        .collect()
}

/// `promtool check metrics` on a scrape: the format, and Prometheus' naming rules.
fn assert_promtool_accepts(body: &str) {
    use std::io::Write;
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's prometheus package; scripts/test.sh installs it)");
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let done = promtool.wait_with_output().unwrap();
    assert!(
        done.status.success() && done.stdout.is_empty() && done.stderr.is_empty(),
        "promtool check metrics: {}{}\n{body}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}

#[test]
fn metrics_count_what_the_node_did_in_prometheus_text_that_promtool_accepts() {
    let db = TestDb::create("client_sidecar_metrics");
    let mut admin = db.connect();
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1");
    assert_eq!(http_get(&address, "/ids?count=100").status, 200);
    let reply = http_get(&address, "/metrics");
    assert_eq!(
        (reply.status, reply.header("content-type")),
        (200, Some("text/plain; version=0.0.4; charset=utf-8")),
        "{reply:?}"
    );
    assert_promtool_accepts(&reply.body);
    let m = samples(&reply.body);
    let (_, _, machine_id) = node_row(&mut admin, "10.0.0.1");
    assert_eq!(m["idgen_node_machine_id"], f64::from(machine_id));
    // The probes mint nothing: the batch alone.
    assert_eq!(m["idgen_node_ids_issued_total"], 100.0, "{}", reply.body);
    assert_eq!(m["idgen_node_status{status=\"live\"}"], 1.0);
    let others: f64 =
        m.iter().filter(|(k, _)| k.starts_with("idgen_node_status{") && !k.contains("\"live\"")).map(|(_, v)| v).sum();
    assert_eq!(others, 0.0, "{}", reply.body);
    assert!(m["idgen_node_lease_remaining_seconds"] > 0.0, "{}", reply.body);
    for counter in [
        "idgen_node_heartbeat_failures_total",
        "idgen_node_heartbeat_timeouts_total",
        "idgen_node_clock_backward_waits_total",
        "idgen_node_clock_backward_refusals_total",
    ] {
        assert_eq!(m[counter], 0.0, "{counter}: {}", reply.body);
    }
    assert!(m.contains_key("idgen_node_heartbeats_total") && m.contains_key("idgen_node_sequence_exhaustions_total"));
    // It takes no parameter (a scrape sends none).
    assert_refused(&http_get(&address, "/metrics?format=json"), 400, "bad_request");

    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn ids_over_http_and_from_database_backends_share_one_primary_key_without_a_collision() {
    let db = TestDb::create("client_sidecar_unique");
    db.connect()
        .batch_execute("CREATE TABLE minted (id bigint PRIMARY KEY DEFAULT idgen_next_id('svc'), source text NOT NULL)")
        .unwrap();
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1");
    let mut workers = vec![];
    for c in 0..3 {
        let (address, dsn) = (address.clone(), db.dsn());
        workers.push(spawn_named(format!("HTTP client {c}"), move || {
            let mut http = Http::connect(&address).unwrap();
            let mut client = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
            let mut fetched = 0;
            for _ in 0..20 {
                let mut ids =
                    ids(&http.get("/ids?count=200").unwrap().body.lines().map(str::to_owned).collect::<Vec<_>>());
                for _ in 0..20 {
                    ids.push(text_id(&http.get("/id").unwrap()));
                }
                client.execute("INSERT INTO minted SELECT unnest($1::bigint[]), 'http'", &[&ids]).unwrap();
                fetched += ids.len();
            }
            fetched
        }));
    }
    for b in 0..2 {
        let dsn = db.dsn();
        workers.push(spawn_named(format!("backend {b}"), move || {
            for _ in 0..10 {
                let mut backend = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
                backend.batch_execute("INSERT INTO minted (source) SELECT 'db' FROM generate_series(1, 500)").unwrap();
            }
            10 * 500
        }));
    }
    let minted: usize = join_all(workers, WORK_PATIENCE, "the HTTP clients and the backends").into_iter().sum();
    // Every ID went into one primary key: a duplicate would have failed its insert.
    let row = db
        .connect()
        .query_one("SELECT count(DISTINCT id), count(*) FILTER (WHERE source = 'http') FROM minted", &[])
        .unwrap();
    assert_eq!((row.get::<_, i64>(0) as usize, row.get::<_, i64>(1) as usize), (minted, 3 * 20 * 220));
    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn on_sigterm_the_sidecar_answers_503_shutting_down_while_it_releases_then_exits_0() {
    let db = TestDb::create("client_sidecar_sigterm");
    let mut admin = db.connect();
    let (mut node, address) = start_sidecar(&db.dsn(), "10.0.0.1");
    let mut http = Http::connect(&address).unwrap();
    let fetched = ids(&http.get("/ids?count=500").unwrap().body.lines().map(str::to_owned).collect::<Vec<_>>());
    // Hold the release (one UPDATE of the node's row) with another session's row lock, to look at
    // the sidecar while it releases.
    let lock = RowLock::hold(&db, "10.0.0.1");
    node.signal("TERM");
    wait_for_blocked_release(&mut admin);
    assert_refused(&http.get("/id").unwrap(), 503, "shutting_down");
    assert_refused(&http.get("/ids?count=5&format=json").unwrap(), 503, "shutting_down");
    let ready = http.get("/readyz").unwrap();
    assert_refused(&ready, 503, "shutting_down");
    assert_eq!(ready.header("retry-after"), None, "nothing to wait for");
    assert_eq!(http.get("/livez").unwrap().status, 200, "the process still serves");
    assert!(!node_row(&mut admin, "10.0.0.1").0, "released while the row was locked");
    lock.commit();
    assert!(node.exit_status().success(), "{:?}", node.stderr.so_far());
    assert_released_bounding(&mut admin, "10.0.0.1", &fetched);
    assert!(Http::connect(&address).is_err(), "still listening after it exited");
}

#[test]
fn a_partitioned_sidecar_answers_503_expired_then_503_lost_once_its_id_is_taken_over() {
    // One machine id for the service: the other node can only get it by taking it over.
    let (_turn, cluster, _settings): (_, ClockCluster, _) = short_leases(Some("0-0"));
    let db = TestDb::create_on(&cluster.dsn, "client_sidecar_partition");
    let role = "idgen_t_client_sidecar_partition";
    let dsn = partitionable_role(&db, role, "svc");
    let (mut node, address) = start_sidecar(&dsn, "10.0.0.1");
    let before = text_id(&http_get(&address, "/id"));
    let mut admin = db.connect();
    partition(&mut admin, &db, role);

    // Issues until its deadline, then refuses: 503 expired, worth a retry; not ready, yet live.
    let mut refused = None;
    wait_for("the sidecar to refuse once its lease expired", PATIENCE, || {
        let reply = http_request(&address, "GET", "/id", &[("Accept", "application/json")]);
        if reply.status == 200 {
            assert!(json(&reply)["id"].as_i64().unwrap() > before);
            return false;
        }
        refused = Some(reply);
        true
    });
    let refused = refused.unwrap();
    assert_refused(&refused, 503, "expired");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_refused(&http_get(&address, "/ids?count=10"), 503, "expired");
    assert_refused(&http_get(&address, "/readyz"), 503, "expired");
    assert_eq!(http_get(&address, "/livez").status, 200, "an expired lease may come back: no restart");

    // Another node takes the id once the first is idle past the 1-hour tier (6 s here).
    let mut outcome = String::new();
    wait_for("the id to be taken over", PATIENCE, || match claim(&mut admin, "svc", "10.0.0.2", 1) {
        Ok(c) => {
            outcome = c.outcome;
            true
        }
        Err(e) => {
            assert_eq!(sqlstate(&e), "53000", "{e:?}");
            poll_pause();
            false
        }
    });
    assert_eq!(outcome, "idle_1h");
    // Back in touch, it learns the id moved: 503 lost for good, and not live (restart it).
    heal(&mut admin, &db, role);
    let mut lost = None;
    wait_for("the sidecar to learn its id moved", PATIENCE, || {
        let reply = http_request(&address, "GET", "/id", &[("Accept", "application/json")]);
        assert_eq!(reply.status, 503, "{reply:?}");
        if json(&reply)["error"] == "expired" {
            poll_pause();
            return false;
        }
        lost = Some(reply);
        true
    });
    let lost = lost.unwrap();
    assert_refused(&lost, 503, "lost");
    assert!(json(&lost)["reason"].as_str().unwrap().contains("10.0.0.2:1"), "{lost:?}");
    assert_refused(&http_get(&address, "/readyz"), 503, "lost");
    assert_refused(&http_get(&address, "/livez"), 503, "lost");
    // Lost for good: no deadline left to count down.
    let status = json(&http_get(&address, "/status"));
    assert_eq!(status["status"], "lost", "{status}");
    assert!(status["time_to_deadline_ms"].is_null(), "{status}");
    let metrics = http_get(&address, "/metrics").body;
    let m = samples(&metrics);
    assert_eq!(
        (m["idgen_node_status{status=\"lost\"}"], m["idgen_node_status{status=\"live\"}"]),
        (1.0, 0.0),
        "{metrics}"
    );
    assert_eq!(m["idgen_node_lease_remaining_seconds"], 0.0, "{metrics}");
    assert!(m["idgen_node_heartbeat_failures_total"] > 0.0, "a partition fails heartbeats: {metrics}");
    // Nothing to release: it exits 0 all the same.
    node.signal("TERM");
    assert!(node.exit_status().success());
    assert!(node.stderr.so_far().iter().any(|l| l.contains("had already moved")), "{:?}", node.stderr.so_far());
}

#[test]
fn while_it_claims_the_sidecar_answers_503_starting_and_a_sigterm_then_is_kept_for_after_the_claim() {
    let db = TestDb::create("client_sidecar_starting");
    let mut admin = db.connect();
    // The claim waits while another session holds the registry.
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; LOCK TABLE system_nodes IN ACCESS EXCLUSIVE MODE").unwrap();
    let mut node = spawn_node(&db.dsn(), "10.0.0.1", &["--listen", "127.0.0.1:0"]);
    let line = node.stderr.wait_for("the address it listens on", |l| l.starts_with("idgen-node: listening on "));
    let address = line.trim_start_matches("idgen-node: listening on http://").to_owned();
    let starting = http_get(&address, "/id");
    assert_refused(&starting, 503, "starting");
    assert_eq!(starting.header("retry-after"), Some("1"));
    assert_refused(&http_request(&address, "GET", "/readyz", &[("Accept", "application/json")]), 503, "starting");
    assert_eq!(http_get(&address, "/livez").status, 200, "live while it claims");
    assert_eq!(json(&http_get(&address, "/status"))["status"], "starting");
    // A SIGTERM during the claim is kept: once the claim is through, the node releases and exits 0.
    node.signal("TERM");
    holder.batch_execute("ROLLBACK").unwrap();
    assert!(node.exit_status().success(), "{:?}", node.stderr.so_far());
    assert!(node_row(&mut admin, "10.0.0.1").0, "claimed, then released");
}

#[test]
fn a_sidecar_adopting_a_machine_id_of_a_sonyflake_service_says_so_and_serves_its_ids() {
    let db = TestDb::create("client_sidecar_layout");
    let mut admin = db.connect();
    admin
        .batch_execute("SELECT idgen_define_layout('svc', preset => 'sonyflake', pool_first => 0, pool_last => 511)")
        .unwrap();
    let (mut node, address) = start_sidecar_with(&db.dsn(), "10.0.0.9", &["--machine-id", "300"]);
    // The startup line names the machine id asked for and the layout the registry recorded.
    let line = node.stderr.wait_for("the startup line", |l| l.starts_with("idgen-node: machine id "));
    assert!(line.contains("machine id 300 of service \"svc\""), "{line}");
    assert!(
        line.contains("sonyflake: 39 bits of 10 ms since 2014-09-01T00:00:00.000Z") && line.contains("pool 0-511"),
        "{line}"
    );
    let status = json(&http_get(&address, "/status"));
    assert_eq!(status["machine_id"].as_i64(), Some(300), "{status}");
    let layout = &status["layout"];
    assert_eq!(
        (
            layout["preset"].as_str(),
            layout["epoch"].as_str(),
            layout["time_unit_ms"].as_i64(),
            layout["field_order"].as_str(),
            layout["pool_first"].as_i64(),
            layout["pool_last"].as_i64()
        ),
        (
            Some("sonyflake"),
            Some("2014-09-01T00:00:00.000Z"),
            Some(10),
            Some("time_sequence_machine"),
            Some(0),
            Some(511)
        ),
        "{status}"
    );
    let reply = http_get(&address, "/ids?count=500");
    let minted = ids(&reply.body.lines().map(str::to_owned).collect::<Vec<_>>());
    let astray: i64 = admin
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[]) id WHERE (idgen_decode(id, 'svc')).machine_id <> 300",
            &[&minted],
        )
        .unwrap()
        .get(0);
    assert_eq!((minted.len(), astray), (500, 0));
    node.signal("TERM");
    assert!(node.exit_status().success());
}

#[test]
fn idgen_node_asking_for_a_held_machine_id_exits_with_the_registrys_refusal() {
    let db = TestDb::create("client_sidecar_adopt_refused");
    let mut admin = db.connect();
    let mut holder = spawn_node(&db.dsn(), "10.0.0.10", &["--machine-id", "7", "--rate", "100"]);
    holder.stdout.take(1);
    let mut second = spawn_node(&db.dsn(), "10.0.0.11", &["--machine-id", "7"]);
    let status = second.exit_status();
    assert_eq!(status.code(), Some(1), "{status}");
    let said = second.stderr.so_far().join("\n");
    assert!(said.contains("55006") && said.contains("10.0.0.10:1"), "{said}");
    assert!(holder.running(), "the holder stopped");
    let (released, _, machine_id) = node_row(&mut admin, "10.0.0.10");
    assert_eq!((released, machine_id), (false, 7));
    holder.signal("TERM");
    assert!(holder.exit_status().success());
}
