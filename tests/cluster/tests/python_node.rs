//! The Python node of docs/services.md (docs/examples/idgen_node.py), run as a program against the
//! scratch cluster: it heartbeats at the server's interval, stops minting at once when a heartbeat
//! is refused (55000, 22023, 42501), and releases with its watermark when it ends. The page shows
//! the file as it is.

use idgen_cluster_tests::docs::repository_root;
use idgen_cluster_tests::*;
use postgres::Client;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests set the cluster's heartbeat interval: one at a time.
static INTERVAL: Mutex<()> = Mutex::new(());

fn program() -> std::path::PathBuf {
    repository_root().join("docs/examples/idgen_node.py")
}

/// Debian's Python, which has psycopg 3 (python3-psycopg); IDGEN_PYTHON names another.
fn python() -> String {
    std::env::var("IDGEN_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into())
}

/// A running node: what it printed so far on stdout (its IDs) and stderr (its messages).
struct PythonNode {
    child: Child,
    ids: Arc<Mutex<Vec<i64>>>,
    messages: Arc<Mutex<Vec<String>>>,
}

impl PythonNode {
    fn start(dsn: &str, service: &str, port: i32) -> PythonNode {
        let mut command = Command::new(python());
        command
            .arg(program())
            .args([dsn, service, "10.0.0.5", &port.to_string(), "--rate", "200"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("python3 runs docs/examples/idgen_node.py");
        let ids = Arc::new(Mutex::new(Vec::new()));
        let messages = Arc::new(Mutex::new(Vec::new()));
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let sink = ids.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                sink.lock().unwrap().push(line.unwrap().parse::<i64>().expect("an ID per line"));
            }
        });
        let sink = messages.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                sink.lock().unwrap().push(line.unwrap());
            }
        });
        PythonNode { child, ids, messages }
    }

    fn ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap().clone()
    }

    fn messages(&self) -> String {
        self.messages.lock().unwrap().join("\n")
    }

    fn wait_for_ids(&mut self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.ids().len() < n {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the node exited ({status}) before minting {n} IDs:\n{}", self.messages());
            }
            assert!(Instant::now() < deadline, "no {n} IDs within {PATIENCE:?}:\n{}", self.messages());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status, once it has exited; a node still running after `PATIENCE` fails the test.
    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the readers take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return status.code().expect("exited, not killed");
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("the node still mints {PATIENCE:?} after it should have stopped:\n{}", self.messages());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The time the node says it stopped minting (its clock, in ms).
    fn stopped_at_ms(&self) -> i64 {
        let messages = self.messages();
        let line = messages
            .lines()
            .find(|l| l.contains("stopped minting at"))
            .unwrap_or_else(|| panic!("the node never said it stopped minting:\n{messages}"));
        line.split("stopped minting at ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
    }
}

impl Drop for PythonNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node's row: its machine id and version, and `last_seen` in ms.
fn node_row(client: &mut Client, service: &str, port: i32) -> (i32, i64, i64) {
    let r = client
        .query_one(
            "SELECT machine_id::int, version, floor(extract(epoch FROM last_seen) * 1000)::bigint \
             FROM system_nodes WHERE service = $1 AND port = $2",
            &[&service, &port],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The time each ID carries, in ms, by the service's layout.
fn stamped_ms(client: &mut Client, service: &str, ids: &[i64]) -> Vec<i64> {
    client
        .query(
            "SELECT floor(extract(epoch FROM (idgen_decode(x, $2)).ts) * 1000)::bigint FROM unnest($1::bigint[]) x",
            &[&ids, &service],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every ID the node printed carries a time at or before the moment it says it stopped minting.
fn assert_minted_nothing_after_the_stop(client: &mut Client, service: &str, node: &PythonNode) {
    let stopped = node.stopped_at_ms();
    let ids = node.ids();
    let late: Vec<i64> = stamped_ms(client, service, &ids).into_iter().filter(|&ms| ms > stopped).collect();
    assert!(late.is_empty(), "{} IDs stamped after the node stopped minting at {stopped}: {late:?}", late.len());
}

#[test]
fn the_python_node_heartbeats_at_the_servers_interval_and_stops_at_once_when_its_id_is_released() {
    let _one = INTERVAL.lock().unwrap_or_else(|e| e.into_inner());
    let _interval = SystemSettings::set(&base_dsn(), &[("idgen.heartbeat_interval", "1")]);
    let db = TestDb::create("python_node_moved");
    let mut admin = db.connect();
    let mut node = PythonNode::start(&db.dsn(), "orders", 8080);
    node.wait_for_ids(20);
    let (machine_id, version, seen) = node_row(&mut admin, "orders", 8080);
    // The server's interval (1 s here), not a constant of the program: two more heartbeats come.
    for _ in 0..2 {
        let before = node_row(&mut admin, "orders", 8080).2;
        wait_for("the node's next heartbeat", PATIENCE, || {
            std::thread::sleep(Duration::from_millis(100));
            node_row(&mut admin, "orders", 8080).2 > before
        });
    }
    assert!(node_row(&mut admin, "orders", 8080).2 > seen);
    // Freed by hand, as docs/operations.md says: the node's next heartbeat is refused with 55000.
    assert!(release_by_hand(&mut admin, "orders", machine_id, "10.0.0.5", 8080, version).unwrap());
    assert_eq!(node.exit_code(), 3, "{}", node.messages());
    assert!(node.messages().contains("heartbeat refused with 55000"), "{}", node.messages());
    assert_minted_nothing_after_the_stop(&mut admin, "orders", &node);
}

#[test]
fn the_python_node_stops_at_once_when_its_role_loses_the_service() {
    let _one = INTERVAL.lock().unwrap_or_else(|e| e.into_inner());
    let _interval = SystemSettings::set(&base_dsn(), &[("idgen.heartbeat_interval", "1")]);
    let db = TestDb::create("python_node_revoked");
    let mut admin = db.connect();
    let role = "idgen_t_python_node";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('payments', '{role}')")).unwrap();
    let mut node = PythonNode::start(&format!("{} user={role}", db.dsn()), "payments", 8081);
    node.wait_for_ids(20);
    admin.batch_execute(&format!("SELECT idgen_revoke_service('payments', '{role}')")).unwrap();
    assert_eq!(node.exit_code(), 3, "{}", node.messages());
    assert!(node.messages().contains("heartbeat refused with 42501"), "{}", node.messages());
    assert_minted_nothing_after_the_stop(&mut admin, "payments", &node);
}

#[test]
fn the_python_node_stops_when_its_watermark_is_refused_at_the_end_of_its_layout() {
    let _one = INTERVAL.lock().unwrap_or_else(|e| e.into_inner());
    let _interval = SystemSettings::set(&base_dsn(), &[("idgen.heartbeat_interval", "1")]);
    let db = TestDb::create("python_node_watermark");
    let mut admin = db.connect();
    // A layout whose last tick comes in 10 seconds: 31 bits of 1 ms end 2^31 ms after its epoch.
    let ends_ms: i64 = admin
        .query_one(
            "SELECT floor(extract(epoch FROM ends_at) * 1000)::bigint FROM idgen_define_layout('ending', 'snowflake', \
               epoch => now() - interval '1 millisecond' * 2147483648 + interval '10 seconds', \
               time_bits => 31, machine_bits => 10, sequence_bits => 22)",
            &[],
        )
        .unwrap()
        .get(0);
    let mut node = PythonNode::start(&db.dsn(), "ending", 8082);
    node.wait_for_ids(20);
    // Past it the node mints nothing; its report says where its clock is, and the registry refuses
    // that watermark (22023): the node stops.
    assert_eq!(node.exit_code(), 3, "{}", node.messages());
    assert!(node.messages().contains("heartbeat refused with 22023"), "{}", node.messages());
    let stamped = stamped_ms(&mut admin, "ending", &node.ids());
    assert!(stamped.iter().all(|&ms| ms <= ends_ms), "an ID past the layout's last tick");
    assert_minted_nothing_after_the_stop(&mut admin, "ending", &node);
}

#[test]
fn the_python_node_releases_with_its_watermark_when_done() {
    let db = TestDb::create("python_node_done");
    let mut admin = db.connect();
    let output = Command::new(python())
        .arg(program())
        .args([&db.dsn(), "orders", "10.0.0.5", "8083", "--count", "50", "--rate", "500"])
        .output()
        .expect("python3 runs docs/examples/idgen_node.py");
    let messages = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{messages}");
    let ids: Vec<i64> = String::from_utf8_lossy(&output.stdout).lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 50);
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 50, "an ID twice");
    let last = *stamped_ms(&mut admin, "orders", &ids).iter().max().unwrap();
    let (released, watermark): (bool, i64) = admin
        .query_one(
            "SELECT released_at IS NOT NULL, floor(extract(epoch FROM issued_until) * 1000)::bigint \
             FROM system_nodes WHERE service = 'orders' AND port = 8083",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(released, "{messages}");
    assert!(watermark >= last, "released with a watermark ({watermark}) before its last ID's time ({last})");
}

/// Whether the node's row is released.
fn released(client: &mut Client, service: &str, port: i32) -> bool {
    client
        .query_one(
            "SELECT released_at IS NOT NULL FROM system_nodes WHERE service = $1 AND port = $2",
            &[&service, &port],
        )
        .unwrap()
        .get(0)
}

/// A node whose reader goes away (`| head`), or that gets SIGHUP, stops and releases its id, as on
/// SIGTERM (it once died of the broken pipe, and of SIGHUP, with its id held).
#[test]
fn the_python_node_releases_when_its_reader_goes_away_or_on_sighup() {
    let db = TestDb::create("python_node_ends");
    let mut admin = db.connect();
    let mut child = Command::new(python())
        .arg(program())
        .args([&db.dsn(), "orders", "10.0.0.5", "8084", "--rate", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs docs/examples/idgen_node.py");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..5 {
        lines.next().expect("an ID").unwrap();
    }
    drop(lines);
    let mut node = PythonNode { child, ids: Arc::default(), messages: Arc::default() };
    assert_eq!(node.exit_code(), 0, "the node did not end cleanly when its reader went away");
    assert!(released(&mut admin, "orders", 8084), "the node whose reader went away left its id held");

    let mut node = PythonNode::start(&db.dsn(), "orders", 8085);
    node.wait_for_ids(5);
    let hung_up = Command::new("kill").args(["-HUP", &node.child.id().to_string()]).status().unwrap();
    assert!(hung_up.success());
    assert_eq!(node.exit_code(), 0, "{}", node.messages());
    assert!(released(&mut admin, "orders", 8085), "the node left its id held after SIGHUP");
}

#[test]
fn services_md_shows_the_program_as_it_is() {
    let page = std::fs::read_to_string(repository_root().join("docs/services.md")).unwrap();
    let file = std::fs::read_to_string(program()).unwrap();
    let start = page.find("```python\n").expect("docs/services.md has a python block") + "```python\n".len();
    let end = start + page[start..].find("```\n").unwrap();
    assert_eq!(&page[start..end], file, "docs/services.md's python block differs from docs/examples/idgen_node.py");
}
