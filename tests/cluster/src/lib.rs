//! Helpers for the client-driven suites in `tests/`: each test gets its own
//! database with idgen installed in the scratch cluster that `scripts/test.sh`
//! starts (`IDGEN_TEST_DSN`, default `host=127.0.0.1 port=28815 user=postgres`).

use postgres::error::DbError;
use postgres::{Client, Config, NoTls};
use std::sync::{Arc, Mutex};

mod bounded;
pub use bounded::*;
pub mod docs;
mod http;
pub use http::*;

pub fn base_dsn() -> String {
    std::env::var("IDGEN_TEST_DSN").unwrap_or_else(|_| "host=127.0.0.1 port=28815 user=postgres".to_owned())
}

/// What every test session asks for: a connection attempt gives up after two minutes (the server
/// bounds the start-up after it by its authentication_timeout), and each statement after five, so
/// that a test waiting on a lock, or on a server that stopped answering, fails with the error
/// instead of hanging.
pub const SESSION_LIMITS: &str = "connect_timeout=120 options='-c statement_timeout=300s'";

/// The DSN of a session to `dbname` in the cluster at `cluster_dsn`, within [`SESSION_LIMITS`].
pub fn session_dsn(cluster_dsn: &str, dbname: &str) -> String {
    format!("{cluster_dsn} dbname={dbname} {SESSION_LIMITS}")
}

/// A session to `dbname` in the cluster at `cluster_dsn`, within [`SESSION_LIMITS`].
pub fn connect_to(cluster_dsn: &str, dbname: &str) -> Client {
    Client::connect(&session_dsn(cluster_dsn, dbname), NoTls).unwrap_or_else(|e| {
        panic!("connect to database {dbname} at {cluster_dsn} (is the cluster running? see scripts/test.sh): {e}")
    })
}

/// Creates login role `role` unless it exists (roles are the cluster's: a test's outlive it).
pub fn ensure_login_role(admin: &mut Client, role: &str) {
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$"
        ))
        .unwrap();
}

/// A database of its own for one test, created afresh with idgen installed.
pub struct TestDb {
    pub name: String,
    cluster_dsn: String,
}

impl TestDb {
    pub fn create(name: &str) -> TestDb {
        TestDb::create_on(&base_dsn(), name)
    }

    /// A database of its own in the cluster at `cluster_dsn`, with idgen installed.
    pub fn create_on(cluster_dsn: &str, name: &str) -> TestDb {
        let db = TestDb::empty_on(cluster_dsn, name);
        db.connect().batch_execute("CREATE EXTENSION idgen").unwrap();
        db
    }

    /// A database of its own in the cluster at `cluster_dsn`, without idgen. Named by its test, so
    /// that a run drops what a killed run left; one test process at a time may hold a name on a
    /// cluster (another process using it fails this at once, naming it, instead of having its
    /// database dropped under it).
    pub fn empty_on(cluster_dsn: &str, name: &str) -> TestDb {
        let name = format!("idgen_t_{name}");
        claim_database_name(cluster_dsn, &name);
        let mut admin = connect_to(cluster_dsn, "postgres");
        rollback_prepared_transactions(cluster_dsn, &name);
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        TestDb { name, cluster_dsn: cluster_dsn.to_owned() }
    }

    /// Every statement of the test's sessions ends within five minutes ([`SESSION_LIMITS`]): a
    /// test that waits on a lock it should not wait on fails instead of hanging.
    pub fn dsn(&self) -> String {
        session_dsn(&self.cluster_dsn, &self.name)
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.dsn(), NoTls).unwrap()
    }

    /// A connection that records the WARNINGs and NOTICEs the server sends it.
    pub fn connect_recording(&self) -> (Client, Notices) {
        let notices = Notices::default();
        let sink = notices.0.clone();
        let client = self
            .dsn()
            .parse::<Config>()
            .unwrap()
            .notice_callback(move |n: DbError| sink.lock().unwrap().push(n))
            .connect(NoTls)
            .unwrap();
        (client, notices)
    }
}

/// The server log from a point on (it outlives test runs: a test reads what was logged since).
pub struct ServerLogSince {
    offset: i64,
}

impl ServerLogSince {
    pub fn now(client: &mut Client) -> ServerLogSince {
        let offset = client.query_one("SELECT (pg_stat_file(pg_current_logfile())).size", &[]).unwrap().get(0);
        ServerLogSince { offset }
    }

    /// What was logged since, up to a line logged now: every line a process logged before it
    /// answered its client is in it (the logging collector writes a moment later: waited for).
    pub fn read(&self, client: &mut Client, label: &str) -> String {
        let marker = format!("idgen test: the server log read by {label}, {:?}", std::time::SystemTime::now());
        client.batch_execute(&format!("DO $$ BEGIN RAISE LOG '{marker}'; END $$")).unwrap();
        let mut log = String::new();
        wait_for(&format!("the server log to have the line logged for {label}"), PATIENCE, || {
            log = client
                .query_one(
                    "SELECT pg_read_file(pg_current_logfile(), $1, (pg_stat_file(pg_current_logfile())).size - $1)",
                    &[&self.offset],
                )
                .unwrap()
                .get(0);
            log.contains(&marker)
        });
        log
    }
}

/// Waits until the server process `pid` has gone (a session's exit runs after its client closed).
pub fn wait_for_exit(observer: &mut Client, pid: i32) {
    wait_for(&format!("backend {pid} to exit"), PATIENCE, || {
        observer.query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&pid]).unwrap().get::<_, i64>(0)
            == 0
    });
}

/// The advisory lock key by which a test process holds a test database's name (the other key is
/// `hashtext(name)`, in the cluster's `postgres` database): see [`TestDb::empty_on`].
pub const TEST_DATABASE_LOCK: i32 = 0x1d6e_7e57;

/// A test's database has its test's name, so that the next run drops what a killed run left. So a
/// second test process running the same test against the same cluster would drop the database
/// under the first (`WITH (FORCE)` ends its sessions: workers in a statement fail with 57P01, the
/// others wait for them). Each process therefore holds the names it uses, for its lifetime, as
/// advisory locks on a session of its own in the cluster's `postgres` database; a name another
/// live process holds fails the test at once, naming that process.
fn claim_database_name(cluster_dsn: &str, name: &str) {
    struct Holder {
        cluster_dsn: String,
        session: Option<Client>,
        names: Vec<String>,
    }
    static HOLDERS: Mutex<Vec<Holder>> = Mutex::new(Vec::new());
    let mut holders = HOLDERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let index = holders.iter().position(|h| h.cluster_dsn == cluster_dsn).unwrap_or_else(|| {
        holders.push(Holder { cluster_dsn: cluster_dsn.to_owned(), session: None, names: Vec::new() });
        holders.len() - 1
    });
    let holder = &mut holders[index];
    let try_lock = |session: &mut Client, name: &str| -> Result<bool, postgres::Error> {
        session
            .query_one("SELECT pg_try_advisory_lock($1, hashtext($2))", &[&TEST_DATABASE_LOCK, &name])
            .map(|r| r.get(0))
    };
    let taken = match holder.session.as_mut().map(|s| try_lock(s, name)) {
        Some(Ok(taken)) => taken,
        // None yet, or it was lost (a restart of the cluster ended it, and its locks): a new one
        // takes this process's names again.
        _ => {
            let program =
                std::env::current_exe().ok().and_then(|p| Some(p.file_name()?.to_string_lossy().into_owned()));
            let application = format!("idgen tests {} pid {}", program.unwrap_or_default(), std::process::id())
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != ' ' && c != '-' && c != '_', "");
            let mut session = Client::connect(
                &format!("{} application_name='{application}'", session_dsn(cluster_dsn, "postgres")),
                NoTls,
            )
            .unwrap_or_else(|e| panic!("connect to {cluster_dsn} (is the cluster running? see scripts/test.sh): {e}"));
            for held in &holder.names {
                try_lock(&mut session, held).unwrap();
            }
            let taken = try_lock(&mut session, name).unwrap();
            holder.session = Some(session);
            taken
        }
    };
    if taken {
        holder.names.push(name.to_owned());
        return;
    }
    let others: String = holder
        .session
        .as_mut()
        .expect("a session after a try")
        .query_one(
            "SELECT coalesce(string_agg(format('%s (backend pid %s, since %s)', a.application_name, a.pid, a.backend_start), ', '), 'a process that has just ended')
               FROM pg_locks l JOIN pg_stat_activity a USING (pid)
              WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = 'postgres')
                AND l.classid = $1::int4::oid AND l.objid = hashtext($2)::oid AND l.objsubid = 2",
            &[&TEST_DATABASE_LOCK, &name],
        )
        .unwrap()
        .get(0);
    panic!(
        "the test database {name} is in use by another test process on {cluster_dsn}: {others}. Run one test \
         process per test at a time on a cluster (or give this run a cluster of its own with IDGEN_TEST_DSN): \
         this one would drop the database under the other."
    );
}

/// A prepared transaction left by an interrupted run would keep the database from being dropped.
fn rollback_prepared_transactions(cluster_dsn: &str, database: &str) {
    let Ok(mut client) = Client::connect(&session_dsn(cluster_dsn, database), NoTls) else { return };
    let gids: Vec<String> = client
        .query("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for gid in gids {
        client.batch_execute(&format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''"))).unwrap();
    }
}

#[derive(Clone, Default)]
pub struct Notices(Arc<Mutex<Vec<DbError>>>);

impl Notices {
    pub fn take(&self) -> Vec<DbError> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The notifications `listener` has been sent for everything committed before this call, without
/// waiting for more: the server hands a session the notifications it has before it answers a
/// statement (a NOTIFY's commit signals every listener before the committing call returns).
pub fn notifications_so_far(listener: &mut Client) -> Vec<postgres::Notification> {
    use postgres::fallible_iterator::FallibleIterator;
    listener.batch_execute("SELECT 1").unwrap();
    listener.notifications().iter().collect().unwrap()
}

/// One row of `idgen_claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub machine_id: i32,
    pub version: i64,
    pub outcome: String,
}

pub fn claim(client: &mut Client, service: &str, host: &str, port: i32) -> Result<Claimed, postgres::Error> {
    let row = client.query_one(
        "SELECT machine_id::int, version, outcome FROM idgen_claim($1, $2::text::inet, $3)",
        &[&service as &(dyn postgres::types::ToSql + Sync), &host, &port],
    )?;
    Ok(Claimed { machine_id: row.get(0), version: row.get(1), outcome: row.get(2) })
}

pub fn heartbeat(
    client: &mut Client,
    service: &str,
    machine_id: i32,
    host: &str,
    port: i32,
    version: i64,
) -> Result<(), postgres::Error> {
    call_with_holding(client, "idgen_heartbeat", service, machine_id, host, port, version).map(|_| ())
}

/// A node's release on its way out: with its watermark (it has stopped minting: the server's clock
/// stands for its last stamp), so that its id may be claimed again at once.
pub fn release(
    client: &mut Client,
    service: &str,
    machine_id: i32,
    host: &str,
    port: i32,
    version: i64,
) -> Result<bool, postgres::Error> {
    client
        .query_one(
            "SELECT idgen_release($1, $2, $3::text::inet, $4, $5, clock_timestamp())",
            &[&service as &(dyn postgres::types::ToSql + Sync), &machine_id, &host, &port, &version],
        )
        .map(|row| row.get(0))
}

/// A release by hand, as docs/operations.md frees an id: no watermark, so the registry keeps what
/// the holder may still stamp until it learns of the release.
pub fn release_by_hand(
    client: &mut Client,
    service: &str,
    machine_id: i32,
    host: &str,
    port: i32,
    version: i64,
) -> Result<bool, postgres::Error> {
    call_with_holding(client, "idgen_release", service, machine_id, host, port, version).map(|row| row.get(0))
}

/// `SELECT function(service, machine_id, host, port, version)`: heartbeat and release take the same arguments.
fn call_with_holding(
    client: &mut Client,
    function: &str,
    service: &str,
    machine_id: i32,
    host: &str,
    port: i32,
    version: i64,
) -> Result<postgres::Row, postgres::Error> {
    client.query_one(
        &format!("SELECT {function}($1, $2, $3::text::inet, $4, $5)"),
        &[&service as &(dyn postgres::types::ToSql + Sync), &machine_id, &host, &port, &version],
    )
}

/// The SQLSTATE of a failed call.
pub fn sqlstate(err: &postgres::Error) -> &str {
    err.code().map(|c| c.code()).unwrap_or("(no SQLSTATE)")
}

pub fn db_error(err: &postgres::Error) -> &DbError {
    err.as_db_error().unwrap_or_else(|| panic!("not a server error: {err}"))
}

/// Runs `sql`, a DROP of the registry (or a batch that starts with one, outside a transaction), as
/// a DBA does after its HINT: again while it fails at once with 55P03 because another transaction
/// uses the registry for a moment (autovacuum analysing idgen's claim guards after their first
/// claim, say), for up to [`PATIENCE`]; then its outcome, whatever it is.
pub fn drop_registry(client: &mut Client, sql: &str) -> Result<(), postgres::Error> {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match client.batch_execute(sql) {
            Err(err) if sqlstate(&err) == "55P03" && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            outcome => return outcome,
        }
    }
}

/// The version a machine id's first row in this database's registry has: each registry draws the
/// base its versions start after (`idgen_registry.version_base`; 0 for objects before 0.7.0). Read
/// as a superuser.
pub fn first_version(client: &mut Client) -> i64 {
    let row = client
        .query_one(
            "SELECT CASE WHEN EXISTS (SELECT FROM pg_attribute
                                       WHERE attrelid = 'idgen_private.idgen_registry'::regclass AND attname = 'version_base')
                         THEN (SELECT (to_jsonb(r) ->> 'version_base')::bigint FROM idgen_private.idgen_registry r)
                         ELSE 0 END + 1",
            &[],
        )
        .unwrap();
    row.get(0)
}

/// Creates `service` with the default layout (idgen_define_layout), as a service must exist before
/// a backend mints for it (a database's own service always does).
pub fn define_service(client: &mut Client, service: &str) {
    client
        .query("SELECT idgen_define_layout($1)", &[&service])
        .unwrap_or_else(|e| panic!("defining service {service}: {e}"));
}

/// Fills every machine id 0..=1023 of `service` that has no row with a fresh,
/// busy holder at 192.0.2.x, so that only take-back tiers remain.
pub fn fill_registry(client: &mut Client, service: &str) {
    fill_registry_except(client, service, &[]);
}

/// Like [`fill_registry`], leaving the machine ids `free` never registered.
/// (Deleting rows instead would leave tombstones, as it must.) The
/// holders reported no watermark, so setting `last_seen` back ages them fully.
pub fn fill_registry_except(client: &mut Client, service: &str, free: &[i32]) {
    let free = free.to_vec();
    client
        .execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version) \
             SELECT $1, m, ('192.0.2.' || (m % 250))::inet, 10000 + m, 1 FROM generate_series(0, 1023) m \
             WHERE m <> ALL ($2) \
             ON CONFLICT DO NOTHING",
            &[&service, &free],
        )
        .unwrap();
}

/// Makes rows of `system_nodes` (those matching `condition`) look as if their holders had been
/// silent for `idle` (an interval, e.g. `'2 hours'`): `last_seen` goes back, and with it the lease
/// and the take-back time they were granted, which a holder's silence leaves where they were.
pub fn set_idle(client: &mut Client, idle: &str, condition: &str) {
    client
        .batch_execute(&format!(
            "UPDATE system_nodes SET last_seen = now() - interval '{idle}', \
                 lease_until = now() - interval '{idle}' + (lease_until - last_seen), \
                 takeover_at = now() - interval '{idle}' + (takeover_at - last_seen) \
             WHERE {condition}"
        ))
        .unwrap();
}

/// The registry's rows as text, to compare before and after a call.
pub fn registry_snapshot(client: &mut Client) -> String {
    client
        .query_one(
            "SELECT coalesce(string_agg(format('%s|%s|%s|%s|%s|%s|%s', service, machine_id, host, port, version, last_seen, released_at), E'\\n' ORDER BY service, machine_id), '') FROM system_nodes",
            &[],
        )
        .unwrap()
        .get(0)
}

/// This connection's lease for `service`, from `idgen_backend_leases()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendLease {
    pub machine_id: i32,
    pub version: i64,
    pub backend_slot: i32,
    pub ids_issued: i64,
}

pub fn backend_lease(client: &mut Client, service: &str) -> Option<BackendLease> {
    client
        .query_opt(
            "SELECT machine_id::int, version, backend_slot, ids_issued FROM idgen_backend_leases() WHERE service = $1",
            &[&service],
        )
        .unwrap()
        .map(|r| BackendLease { machine_id: r.get(0), version: r.get(1), backend_slot: r.get(2), ids_issued: r.get(3) })
}

/// The machine id an ID of the default layout carries.
pub fn machine_id_of(client: &mut Client, id: i64) -> i32 {
    client.query_one("SELECT machine_id FROM idgen_decode($1)", &[&id]).unwrap().get(0)
}

/// Backend rows of `service` in the registry.
pub fn backend_rows(client: &mut Client, service: &str) -> i64 {
    client
        .query_one("SELECT count(*) FROM system_nodes WHERE service = $1 AND backend_slot IS NOT NULL", &[&service])
        .unwrap()
        .get(0)
}

/// The scratch cluster whose wall clock tests may move: libfaketime is preloaded
/// into it and re-reads a file on every clock reading (see scripts/clusters.sh).
/// Tests of one binary that change the clock-step cluster (its clock, its cluster-wide settings,
/// a restart) take turns; binaries run one after another.
static CLOCK_TURN: Mutex<()> = Mutex::new(());

/// The clock-step cluster at real time, for this test alone until the guard drops.
pub fn clock_cluster_turn() -> (ClockCluster, std::sync::MutexGuard<'static, ()>) {
    let turn = CLOCK_TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = ClockCluster::from_env();
    cluster.set("+0");
    (cluster, turn)
}

pub struct ClockCluster {
    pub dsn: String,
    file: std::path::PathBuf,
    restart: std::path::PathBuf,
}

impl ClockCluster {
    /// From `IDGEN_CLOCK_DSN`, `IDGEN_CLOCK_FILE` and `IDGEN_CLOCK_RESTART`, which scripts/test.sh sets.
    pub fn from_env() -> ClockCluster {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run the clock-step suite through scripts/test.sh, which starts its cluster")
            })
        };
        ClockCluster {
            dsn: var("IDGEN_CLOCK_DSN"),
            file: var("IDGEN_CLOCK_FILE").into(),
            restart: var("IDGEN_CLOCK_RESTART").into(),
        }
    }

    /// Moves the server's wall clock: "+0" (real time), "-4" (4 s behind), "+3600.25",
    /// or a frozen "2026-11-29 14:00:03". Every backend sees it at its next clock reading.
    pub fn set(&self, faketime: &str) {
        std::fs::write(&self.file, format!("{faketime}\n")).unwrap();
    }

    /// Sets the server's clock `seconds` ahead of (or behind) real time.
    pub fn offset(&self, seconds: f64) {
        self.set(&format!("{seconds:+.6}"));
    }

    /// Restarts the server (same preload); every connection is lost.
    pub fn restart(&self) {
        let status = status_within(
            std::process::Command::new("bash").arg(&self.restart),
            WORK_PATIENCE,
            "the restart of the clock-step cluster",
        );
        assert!(status.success(), "restarting the clock-step cluster failed: {status}");
    }
}

/// Unix seconds of the real (unfaked) clock of this process.
pub fn real_unix_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Cluster-wide settings (`ALTER SYSTEM` + reload) on a cluster, in force until dropped. idgen's
/// thresholds are PGC_SIGHUP: a test that needs other values must change them for every session,
/// so it runs on the clock-step cluster and takes its turn there.
pub struct SystemSettings {
    dsn: String,
    names: Vec<String>,
}

impl SystemSettings {
    pub fn set(cluster_dsn: &str, settings: &[(&str, &str)]) -> SystemSettings {
        let dsn = session_dsn(cluster_dsn, "postgres");
        let mut admin = Client::connect(&dsn, NoTls).unwrap();
        // ALTER SYSTEM checks the names: they are known once idgen is loaded.
        admin.batch_execute("LOAD 'idgen'").unwrap();
        for (name, value) in settings {
            admin.batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'")).unwrap();
        }
        let names = settings.iter().map(|(n, _)| n.to_string()).collect();
        let applied = SystemSettings { dsn, names };
        applied.reload(settings);
        applied
    }

    /// Settings `names` that something else sets (a documented example run as written): reset,
    /// with a reload, when dropped.
    pub fn adopt(cluster_dsn: &str, names: &[String]) -> SystemSettings {
        SystemSettings { dsn: session_dsn(cluster_dsn, "postgres"), names: names.to_vec() }
    }

    /// Reloads and waits until a new session sees every value (the reload is asynchronous).
    fn reload(&self, expected: &[(&str, &str)]) {
        let mut admin = Client::connect(&self.dsn, NoTls).unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        wait_for(&format!("a new session to see {expected:?}"), PATIENCE, || {
            let mut fresh = Client::connect(&self.dsn, NoTls).unwrap();
            fresh.batch_execute("LOAD 'idgen'").unwrap();
            expected.iter().all(|(name, value)| {
                let now: String = fresh.query_one("SELECT current_setting($1)", &[name]).unwrap().get(0);
                // Durations may read back in other units ('1h' as '60min'); anything else as written.
                now == *value
                    || fresh
                        .query_one("SELECT $1::text::interval = $2::text::interval", &[value, &now])
                        .map(|r| r.get::<_, bool>(0))
                        .unwrap_or(false)
            })
        });
    }
}

impl Drop for SystemSettings {
    fn drop(&mut self) {
        let Ok(mut admin) = Client::connect(&self.dsn, NoTls) else { return };
        let _ = admin.batch_execute("LOAD 'idgen'");
        for name in &self.names {
            let _ = admin.batch_execute(&format!("ALTER SYSTEM RESET {name}"));
        }
        let _ = admin.batch_execute("SELECT pg_reload_conf()");
        let defaults: Vec<(&str, String)> = self
            .names
            .iter()
            .map(|n| {
                let default: String = admin
                    .query_one("SELECT coalesce(boot_val, '') || CASE WHEN coalesce(boot_val, '') = '' THEN '' ELSE coalesce(unit, '') END FROM pg_settings WHERE name = $1", &[n])
                    .map(|r| r.get(0))
                    .unwrap_or_default();
                (n.as_str(), default)
            })
            .collect();
        let expected: Vec<(&str, &str)> = defaults.iter().map(|(n, v)| (*n, v.as_str())).collect();
        self.reload(&expected);
    }
}

/// Waits until the server's clock has passed `timestamp` (a timestamptz as text): waiting for a
/// condition, however long the machine takes, never for a fixed time.
pub fn wait_until_server_clock_passes(client: &mut Client, timestamp: &str) {
    // Patience beyond the time to wait: the time may be a whole heartbeat interval ahead.
    let left: f64 = client
        .query_one(
            "SELECT greatest(extract(epoch FROM $1::text::timestamptz - clock_timestamp()), 0)::float8",
            &[&timestamp],
        )
        .unwrap()
        .get(0);
    wait_for(
        &format!("the server clock to pass {timestamp}"),
        PATIENCE + std::time::Duration::from_secs_f64(left),
        || {
            client
                .query_one("SELECT clock_timestamp() > $1::text::timestamptz", &[&timestamp])
                .unwrap()
                .get::<_, bool>(0)
        },
    );
}

/// The watermark (`issued_until`, as text) of this connection's lease for `service`.
pub fn backend_watermark(backend: &mut Client, service: &str) -> String {
    backend
        .query_one("SELECT issued_until::text FROM idgen_backend_leases() WHERE service = $1", &[&service])
        .unwrap()
        .get(0)
}

/// Waits until the server's clock has passed the watermark of `backend`'s lease for `service`,
/// so that its next `idgen_next_id` checks the lease in the registry.
pub fn wait_past_backend_watermark(backend: &mut Client, service: &str) {
    let until = backend_watermark(backend, service);
    wait_until_server_clock_passes(backend, &until);
}

/// The wall clock of this (client) process, for service nodes that mint in-process.
pub struct WallClock;

impl idgen_core::generator::Clock for WallClock {
    fn now_unix_ms(&mut self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
    }

    fn wait_until(&mut self, unix_ms: i64) {
        let left = unix_ms - self.now_unix_ms();
        if left > 0 {
            std::thread::sleep(std::time::Duration::from_millis(left as u64));
        }
    }
}

/// The layout of `service` as the registry records it (`idgen_layouts`), or the default for a service
/// never claimed nor defined (and for every service of objects before 0.7.0). A lost connection is
/// the caller's to handle: the failover load follows it to the new primary.
pub fn service_layout(client: &mut Client, service: &str) -> Result<idgen_core::Layout, postgres::Error> {
    let has_layouts: bool = client.query_one("SELECT to_regclass('idgen_layouts') IS NOT NULL", &[])?.get(0);
    if !has_layouts {
        return Ok(idgen_core::Layout::DEFAULT);
    }
    let row = client
        .query_opt(
            "SELECT (extract(epoch FROM epoch) * 1000)::bigint, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order \
               FROM idgen_layouts WHERE service = $1",
            &[&service],
        )?;
    let Some(row) = row else { return Ok(idgen_core::Layout::DEFAULT) };
    let width = |i: usize| row.get::<_, i32>(i) as u32;
    let order = idgen_core::layout::FieldOrder::from_label(row.get(5)).expect("a known field order");
    Ok(idgen_core::Layout::new(row.get(0), i64::from(row.get::<_, i32>(1)), width(2), width(3), width(4), order)
        .unwrap())
}

/// A service node as the client contract describes it, minting in-process with the core's
/// generator (the code the database's backends run): claim, mint until the lease ends,
/// heartbeat with its watermark, release.
pub struct TestNode {
    pub service: String,
    pub host: String,
    pub port: i32,
    pub machine_id: i32,
    pub version: i64,
    pub outcome: String,
    /// The lease as the server computed it, in Unix ms (a real client measures it on a monotonic clock).
    pub lease_until_ms: i64,
    /// The first time it may stamp, in Unix ms (the claim's `not_before`).
    pub not_before_ms: i64,
    generator: idgen_core::generator::Generator,
}

impl TestNode {
    pub fn claim(client: &mut Client, service: &str, host: &str, port: i32) -> Result<TestNode, postgres::Error> {
        let row = client.query_one(
            "SELECT machine_id::int, version, outcome, (extract(epoch FROM lease_until) * 1000)::float8, \
                    (extract(epoch FROM not_before) * 1000)::float8 \
               FROM idgen_claim($1, $2::text::inet, $3)",
            &[&service as &(dyn postgres::types::ToSql + Sync), &host, &port],
        )?;
        let machine_id: i32 = row.get(0);
        let not_before_ms = row.get::<_, f64>(4).floor() as i64;
        let layout = service_layout(client, service)?;
        Ok(TestNode {
            service: service.to_owned(),
            host: host.to_owned(),
            port,
            machine_id,
            version: row.get(1),
            outcome: row.get(2),
            lease_until_ms: row.get::<_, f64>(3).floor() as i64,
            not_before_ms,
            generator: idgen_core::generator::Generator::new(layout, machine_id as u16, not_before_ms, 0),
        })
    }

    pub fn layout(&self) -> &idgen_core::Layout {
        self.generator.layout()
    }

    /// Up to `count` IDs, fewer if the lease ends first.
    pub fn mint(&mut self, count: usize) -> Vec<i64> {
        let mut clock = WallClock;
        (0..count).map_while(|_| self.generator.next_id(&mut clock, self.lease_until_ms).ok()).collect()
    }

    /// The watermark the node reports: the later of the end of its last stamp's tick and its clock.
    fn watermark_ms(&self) -> f64 {
        use idgen_core::generator::Clock;
        self.generator.last_tick_end_unix_ms().max(WallClock.now_unix_ms()) as f64
    }

    /// A version-checked heartbeat; the new lease on success.
    pub fn heartbeat(&mut self, client: &mut Client) -> Result<(), postgres::Error> {
        let row = client.query_one(
            "SELECT (extract(epoch FROM idgen_heartbeat($1, $2, $3::text::inet, $4, $5, to_timestamp($6::float8 / 1000))) * 1000)::float8",
            &[&self.service, &self.machine_id, &self.host, &self.port, &self.version, &self.watermark_ms()],
        )?;
        self.lease_until_ms = row.get::<_, f64>(0).floor() as i64;
        Ok(())
    }

    pub fn release(&mut self, client: &mut Client) -> Result<bool, postgres::Error> {
        let row = client.query_one(
            "SELECT idgen_release($1, $2, $3::text::inet, $4, $5, to_timestamp($6::float8 / 1000))",
            &[&self.service, &self.machine_id, &self.host, &self.port, &self.version, &self.watermark_ms()],
        )?;
        self.lease_until_ms = 0;
        Ok(row.get(0))
    }
}

/// Disables and drops a test's subscription (in `subscriber_database`) and its slot (on this cluster, a
/// slot created apart: a subscription in its own cluster cannot create it), waiting (bounded) for the apply
/// worker and the publisher's walsender to let go. Also clears what an interrupted run left.
pub fn drop_subscription_and_slot(subscriber_database: &str, subscription: &str, slot: &str) {
    let cluster = base_dsn();
    if let Ok(mut subscriber) = Client::connect(&session_dsn(&cluster, subscriber_database), NoTls) {
        let exists: i64 = subscriber
            .query_one(
                "SELECT count(*) FROM pg_subscription s JOIN pg_database d ON d.oid = s.subdbid
                  WHERE s.subname = $1 AND d.datname = current_database()",
                &[&subscription],
            )
            .unwrap()
            .get(0);
        if exists == 1 {
            subscriber.batch_execute(&format!("ALTER SUBSCRIPTION {subscription} DISABLE")).unwrap();
            wait_for("the apply worker to exit", PATIENCE, || {
                subscriber
                    .query_one(
                        "SELECT count(*) FROM pg_stat_subscription WHERE subname = $1 AND pid IS NOT NULL",
                        &[&subscription],
                    )
                    .unwrap()
                    .get::<_, i64>(0)
                    == 0
            });
            subscriber
                .batch_execute(&format!(
                    "ALTER SUBSCRIPTION {subscription} SET (slot_name = NONE); DROP SUBSCRIPTION {subscription}"
                ))
                .unwrap();
        }
    }
    let mut admin = connect_to(&cluster, "postgres");
    let slot_exists = |admin: &mut Client| -> Option<bool> {
        admin
            .query_opt("SELECT active FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
            .unwrap()
            .map(|r| r.get(0))
    };
    if slot_exists(&mut admin).is_some() {
        // The publisher's walsender for the slot ends after the apply worker.
        wait_for("the slot's walsender to exit", PATIENCE, || slot_exists(&mut admin) == Some(false));
        admin.query_one("SELECT pg_drop_replication_slot($1)", &[&slot]).unwrap();
    }
}

/// Every `.rs` file under `dir`, as paths relative to it.
pub fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    found.sort();
    found
}

/// Whether the server `client` is connected to preloads idgen (`shared_preload_libraries`): its
/// settings are then defined in every session from the start, and checked when set.
pub fn idgen_preloaded(client: &mut Client) -> bool {
    client
        .query_one("SELECT 'idgen' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))", &[])
        .unwrap()
        .get(0)
}
