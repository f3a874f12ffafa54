//! Inserts that no other role can starve of background workers. A role granted nothing fills every
//! free background worker slot with parallel queries (their settings are any role's to set); then
//! another role's new connection inserts a row keyed by `idgen_next_id()`, which needs a claim.
//! With idgen preloaded, its registry writers started with the server and need no free slot: the
//! inserts succeed. Without, a request that finds no slot fails soon (1.5 s, not a 10-second stall)
//! with a message that names the cause and the fix, and `idgen_health()` reports it.
//! scripts/test.sh runs the client-driven suites against a plain and a preloaded cluster.

use idgen_cluster_tests::*;
use postgres::{Client, NoTls};
use std::time::{Duration, Instant};

const HOG: &str = "idgen_t_slot_hog";
const INSERTER: &str = "idgen_t_slot_inserter";

/// Held for writing by the test that ends the server's writers (a request they serve then fails:
/// "the registry writer ended"), for reading by the tests that need them.
static WRITERS_IN_USE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn using_the_writers() -> std::sync::RwLockReadGuard<'static, ()> {
    WRITERS_IN_USE.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn preloaded(admin: &mut Client) -> bool {
    let libraries: String = admin.query_one("SHOW shared_preload_libraries", &[]).unwrap().get(0);
    libraries.split(',').any(|l| l.trim() == "idgen")
}

/// The setting that makes a parallel-safe query run in a worker: renamed in PostgreSQL 16.
fn forced_parallel_setting(admin: &mut Client) -> &'static str {
    let version: i32 = admin.query_one("SELECT current_setting('server_version_num')::int", &[]).unwrap().get(0);
    if version >= 160000 {
        "debug_parallel_query"
    } else {
        "force_parallel_mode"
    }
}

/// Sessions of a role granted nothing, each holding a parallel worker in a sleeping query, until
/// dropped (their queries are cancelled).
struct Hogs {
    sessions: Vec<std::thread::JoinHandle<()>>,
    pids: Vec<i32>,
    dsn: String,
}

impl Hogs {
    /// Starts hogs until a parallel query of another session gets no worker: every free slot is held.
    fn fill(db: &TestDb, admin: &mut Client) -> Hogs {
        let dsn = format!("{} user={HOG}", db.dsn());
        let forced = forced_parallel_setting(admin);
        let mut hogs = Hogs { sessions: Vec::new(), pids: Vec::new(), dsn: dsn.clone() };
        let mut probe = Client::connect(&dsn, NoTls).unwrap();
        probe.batch_execute(&format!("SET max_parallel_workers = 64; SET {forced} = on")).unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let plan: Vec<String> = probe
                .query("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT pg_sleep(0)", &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            if plan.iter().any(|line| line.contains("Workers Launched: 0")) {
                return hogs;
            }
            assert!(Instant::now() < deadline, "the slots were not full after {} hogs: {plan:?}", hogs.pids.len());
            let mut client = Client::connect(&dsn, NoTls).unwrap();
            let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            client.batch_execute(&format!("SET max_parallel_workers = 64; SET {forced} = on")).unwrap();
            hogs.pids.push(pid);
            hogs.sessions.push(std::thread::spawn(move || {
                // Ended by a cancel when the test is done (or by the sessions' statement timeout).
                let _ = client.batch_execute("SELECT pg_sleep(240)");
            }));
            // Its worker starts with its query; with no slot left, the query runs without one.
            wait_for("a hog's query under way", PATIENCE, || {
                probe
                    .query_one(
                        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE leader_pid = $1)
                             OR EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active'
                                          AND query_start < clock_timestamp() - interval '1 second')",
                        &[&pid],
                    )
                    .unwrap()
                    .get(0)
            });
        }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&self.dsn.replace(&format!(" user={HOG}"), ""), NoTls) {
            for pid in &self.pids {
                let _ = admin.execute("SELECT pg_cancel_backend($1)", &[pid]);
            }
        }
        for session in self.sessions.drain(..) {
            let _ = session.join();
        }
    }
}

/// One row inserted by a new connection of the inserting role: the result and how long it took.
fn insert_on_a_new_connection(db: &TestDb) -> (Result<u64, postgres::Error>, Duration) {
    let mut client = Client::connect(&format!("{} user={INSERTER}", db.dsn()), NoTls).unwrap();
    let started = Instant::now();
    let result = client.execute("INSERT INTO t (payload) VALUES (1)", &[]);
    (result, started.elapsed())
}

#[test]
fn another_roles_parallel_queries_cannot_starve_a_new_connections_insert() {
    let _writers = using_the_writers();
    let db = TestDb::create("worker_slots");
    let mut admin = db.connect();
    ensure_login_role(&mut admin, HOG);
    ensure_login_role(&mut admin, INSERTER);
    admin
        .batch_execute(&format!(
            "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), payload int);
             GRANT INSERT ON t TO {INSERTER}"
        ))
        .unwrap();
    let preloaded = preloaded(&mut admin);
    if !preloaded {
        // A writer started for another database may still run: it would leave when asked, and
        // free its slot for this one. The hogs must hold every slot idgen could use.
        wait_for("idgen's writers started on demand to leave", WORK_PATIENCE, || {
            admin
                .query_one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idgen registry writer'", &[])
                .unwrap()
                .get::<_, i64>(0)
                == 0
        });
    }
    let hogs = Hogs::fill(&db, &mut admin);
    if preloaded {
        for attempt in 0..5 {
            let (result, _) = insert_on_a_new_connection(&db);
            result.unwrap_or_else(|e| panic!("insert {attempt} with every free slot held: {e}"));
        }
    } else {
        let (result, took) = insert_on_a_new_connection(&db);
        let err = result.expect_err("no slot, no writer, no claim");
        assert_eq!(sqlstate(&err), "53000", "{err}");
        let e = db_error(&err);
        assert!(e.message().contains("no background worker slot is free"), "{}", e.message());
        assert!(e.hint().is_some_and(|h| h.contains("shared_preload_libraries")), "{:?}", e.hint());
        // Refused after the slot wait (1.5 s), not held for seconds more: a generous bound, for a
        // busy machine (docs/benchmarks.md measures it).
        assert!(took < Duration::from_secs(10), "refused after {took:?}");
        let findings: Vec<String> =
            admin.query("SELECT finding FROM idgen_health()", &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert!(findings.iter().any(|f| f == "worker_slots_exhausted"), "{findings:?}");
    }
    drop(hogs);
    // The slots free again, the insert goes through in either mode.
    let (result, _) = insert_on_a_new_connection(&db);
    result.unwrap();
}

#[test]
fn idgen_health_reports_the_writers_as_the_server_runs_them() {
    let _writers = using_the_writers();
    let db = TestDb::create("worker_health");
    let mut admin = db.connect();
    admin.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let findings: Vec<String> =
        admin.query("SELECT finding FROM idgen_health()", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(!findings.iter().any(|f| f == "registry_writers_missing"), "{findings:?}");
    if preloaded(&mut admin) {
        // The server's writers serve this database (one may just have moved to another database
        // that asked, the server's other tests': a new connection's claim brings one back).
        wait_for("a registry writer serving this database", PATIENCE, || {
            db.connect().query_one("SELECT idgen_next_id()", &[]).unwrap();
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE backend_type = 'idgen registry writer' AND datname = current_database()",
                    &[],
                )
                .unwrap()
                .get::<_, i64>(0)
                >= 1
        });
    }
}

/// The server's writers, ended (by a superuser, or a database dropped under them), are started
/// again a second later. Requests that come meanwhile wait for them and take no worker slot; no
/// writer started for one database keeps them out of their places; and `idgen_health()` never
/// says that none runs. (It did: two databases' requests in that second started writers of their
/// own, which held both places while requests came, and the finding fired after 10 s.)
#[test]
fn the_servers_writers_come_back_to_their_places_and_are_never_reported_missing() {
    let _writers = WRITERS_IN_USE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    let db = TestDb::create("writers_back");
    let mut admin = db.connect();
    if !preloaded(&mut admin) {
        return;
    }
    let others = [TestDb::create("writers_back_b"), TestDb::create("writers_back_c")];
    // Both writers serve (the first requests of two databases), and are ended.
    for other in &others {
        other.connect().query_one("SELECT idgen_next_id()", &[]).unwrap();
    }
    let mut first_mints: Vec<Client> = others.iter().map(|other| other.connect()).collect();
    admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'idgen registry writer'",
            &[],
        )
        .unwrap();
    let ended = Instant::now();
    // Both databases ask at once, before the server starts its writers again.
    std::thread::scope(|scope| {
        for client in &mut first_mints {
            scope.spawn(|| client.query_one("SELECT idgen_next_id()", &[]).unwrap());
        }
    });
    // Each database mints on new connections for longer than the finding waits (10 s).
    let mut connections = 0;
    while ended.elapsed() < Duration::from_secs(13) {
        for other in &others {
            other
                .connect()
                .query_one("SELECT idgen_next_id()", &[])
                .unwrap_or_else(|e| panic!("a new connection's first ID while the writers came back: {e}"));
            connections += 1;
        }
        let findings: Vec<String> =
            admin.query("SELECT finding FROM idgen_health()", &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert!(
            !findings.iter().any(|f| f == "registry_writers_missing"),
            "{:.1} s after the writers were ended, {connections} connections later: {findings:?}",
            ended.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}
