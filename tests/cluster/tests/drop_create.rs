//! DROP and CREATE EXTENSION, and `pg_restore --clean`, never hand out an id that a holder of the
//! earlier registry may still use: a DROP is refused while any row or tombstone is ahead of the
//! clock, whoever holds it (another session, a background worker, a service with its whole lease),
//! and the dropping session's own leases count as what they stamped. A fresh install then grants
//! at once, whoever is connected.

use idgen_cluster_tests::*;
use postgres::Client;
use std::process::Command;

fn next_id(client: &mut Client) -> Result<i64, postgres::Error> {
    client.query_one("SELECT idgen_next_id()", &[]).map(|r| r.get(0))
}

fn drop_extension(client: &mut Client) -> Result<(), postgres::Error> {
    drop_registry(client, "DROP EXTENSION idgen")
}

fn pid(client: &mut Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

#[test]
fn the_dropping_session_counts_and_nothing_it_minted_is_handed_out_again() {
    let db = TestDb::create("drop_own_session");
    let mut own = db.connect();
    own.batch_execute("CREATE TABLE kept (id bigint PRIMARY KEY)").unwrap();
    own.batch_execute("INSERT INTO kept SELECT idgen_next_id() FROM generate_series(1, 50000)").unwrap();
    // Alone in the database, the session drops and creates the registry under its own lease...
    drop_registry(&mut own, "DROP EXTENSION idgen; CREATE EXTENSION idgen").unwrap();
    // ...then it and a new session mint at the same time into one primary key.
    let dsn = db.dsn();
    let other = spawn_named("the new session", move || {
        let mut other = Client::connect(&dsn, postgres::NoTls).unwrap();
        other.batch_execute("INSERT INTO kept SELECT idgen_next_id() FROM generate_series(1, 200000)")
    });
    let mine = own.batch_execute("INSERT INTO kept SELECT idgen_next_id() FROM generate_series(1, 200000)");
    mine.unwrap();
    join_within(other, WORK_PATIENCE, "the new session's inserts").unwrap();
    let rows: i64 = own.query_one("SELECT count(*) FROM kept", &[]).unwrap().get(0);
    assert_eq!(rows, 450_000);
    // Its leases of the dropped registry ended at the DROP: it claimed in the new one.
    let leases: i64 =
        own.query_one("SELECT count(*) FROM system_nodes WHERE backend_slot IS NOT NULL", &[]).unwrap().get(0);
    assert_eq!(leases, 2, "both sessions hold a lease of the new registry");
}

#[test]
fn a_drop_waits_for_other_sessions_leases_and_a_fresh_install_mints_at_once() {
    let db = TestDb::create("drop_other_session");
    let mut holder = db.connect();
    next_id(&mut holder).unwrap();
    let holder_pid = pid(&mut holder);
    let mut admin = db.connect();
    let err = drop_extension(&mut admin).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55006", "{err:?}");
    assert_eq!(e.message(), "DROP EXTENSION: the idgen registry still guards machine ids that may be stamped");
    let detail = e.detail().unwrap();
    assert!(detail.contains(&format!("pid {holder_pid}")), "the holder is named: {detail}");
    assert!(e.hint().unwrap().contains("pg_terminate_backend"), "{:?}", e.hint());
    // Refused: nothing changed, and the holder goes on.
    next_id(&mut holder).unwrap();
    // Once it has disconnected (recording its last stamp), nothing is ahead.
    drop(holder);
    wait_for_exit(&mut admin, holder_pid);
    drop_extension(&mut admin).unwrap();
    // An install beside other connected sessions grants at once.
    let _bystander = db.connect();
    admin.batch_execute("CREATE EXTENSION idgen").unwrap();
    let mut fresh = db.connect();
    next_id(&mut fresh).unwrap();
    claim(&mut fresh, "svc", "10.0.0.1", 1).unwrap();
}

#[test]
fn a_service_lease_keeps_the_registry_for_its_whole_length() {
    let db = TestDb::create("drop_service_lease");
    let mut admin = db.connect();
    let c = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    // The node reported nothing yet, but may stamp for its whole lease (55 minutes).
    for drop in ["DROP EXTENSION idgen", "DROP EXTENSION idgen CASCADE", "DROP SCHEMA public CASCADE"] {
        let err = drop_registry(&mut admin, drop).unwrap_err();
        assert_eq!(sqlstate(&err), "55006", "{drop}: {err:?}");
        let detail = db_error(&err).detail().unwrap().to_owned();
        assert!(detail.contains("service \"svc\" machine id 0 (10.0.0.1:1)"), "{detail}");
    }
    let until: bool = admin
        .query_one("SELECT bound >= lease_until FROM idgen_nodes WHERE service = 'svc' AND machine_id = 0", &[])
        .unwrap()
        .get(0);
    assert!(until, "the refusal holds until the end of the lease at least");
    // Released with its last stamp, the node leaves nothing ahead.
    admin.query_one("SELECT idgen_release('svc', $1, '10.0.0.1', 1, $2, now())", &[&c.machine_id, &c.version]).unwrap();
    drop_extension(&mut admin).unwrap();
}

#[test]
fn a_background_worker_holding_a_lease_keeps_the_registry() {
    // A logical-replication apply worker fills a column default with idgen_next_id(): its lease
    // is a background worker's, not a client backend's.
    let publisher = TestDb::empty_on(&base_dsn(), "drop_bgworker_pub");
    let subscriber = TestDb::create("drop_bgworker_sub");
    let slot = "idgen_t_drop_bgworker";
    let mut publisher_client = publisher.connect();
    publisher_client
        .batch_execute("CREATE TABLE t (k int PRIMARY KEY, v int); CREATE PUBLICATION idgen_t_pub FOR TABLE t")
        .unwrap();
    // (Not in the same transaction as writes.)
    publisher_client.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot]).unwrap();
    let mut admin = subscriber.connect();
    // (The slot exists already: a subscription creating one in its own cluster would wait for itself.)
    admin
        .batch_execute(&format!(
            "CREATE TABLE t (k int PRIMARY KEY, v int, id bigint NOT NULL DEFAULT idgen_next_id());
             CREATE SUBSCRIPTION idgen_t_sub CONNECTION '{}' PUBLICATION idgen_t_pub
                 WITH (create_slot = false, slot_name = '{slot}', copy_data = false);",
            publisher.dsn().replace('\'', "''")
        ))
        .unwrap();
    publisher_client.batch_execute("INSERT INTO t SELECT g, g FROM generate_series(1, 10) g").unwrap();
    wait_for("the apply worker to insert the rows", PATIENCE, || {
        admin.query_one("SELECT count(*) FROM t", &[]).unwrap().get::<_, i64>(0) == 10
    });
    let worker: i32 = admin
        .query_one("SELECT pid FROM pg_stat_subscription WHERE subname = 'idgen_t_sub' AND relid IS NULL", &[])
        .unwrap()
        .get(0);
    let err = drop_extension(&mut admin).unwrap_err();
    assert_eq!(sqlstate(&err), "55006", "{err:?}");
    let detail = db_error(&err).detail().unwrap().to_owned();
    assert!(detail.contains(&format!("pid {worker}")), "the apply worker is named: {detail}");
    admin.batch_execute("ALTER SUBSCRIPTION idgen_t_sub DISABLE").unwrap();
    wait_for_exit(&mut admin, worker);
    admin
        .batch_execute("ALTER SUBSCRIPTION idgen_t_sub SET (slot_name = NONE); DROP SUBSCRIPTION idgen_t_sub")
        .unwrap();
    // The publisher's walsender for the slot ends after the worker: the slot is dropped once it is free.
    wait_for("the slot's walsender to exit", PATIENCE, || {
        publisher_client
            .query_one("SELECT NOT active FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
            .unwrap()
            .get::<_, bool>(0)
    });
    publisher_client.query_one("SELECT pg_drop_replication_slot($1)", &[&slot]).unwrap();
    // Its exit recorded its last stamp: nothing is ahead any more. (The record is a registry write
    // of its own; the DROP does not wait for one in progress, and is retried while it is.)
    wait_for("the DROP once no transaction uses the registry", PATIENCE, || {
        match admin.batch_execute("DROP EXTENSION idgen CASCADE") {
            Ok(()) => true,
            Err(err) if sqlstate(&err) == "55P03" => false,
            Err(err) => panic!("DROP EXTENSION: {err:?}"),
        }
    });
}

#[test]
fn pg_restore_clean_into_a_live_database_hands_out_no_id_in_use() {
    let db = TestDb::create("drop_restore_clean");
    let mut admin = db.connect();
    admin.batch_execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id(), item text)").unwrap();
    // A dump taken before the node's claim.
    let dump_file = std::env::temp_dir().join(format!("{}-{}.dump", db.name, std::process::id()));
    // pg_dump and pg_restore set statement_timeout = 0 in their sessions: a deadline bounds them.
    let dump = output_within(
        Command::new("pg_dump").args(["--format=custom", "--file"]).arg(&dump_file).arg("--dbname").arg(db.dsn()),
        WORK_PATIENCE,
        "pg_dump",
    );
    assert!(dump.status.success(), "pg_dump: {}", String::from_utf8_lossy(&dump.stderr));
    let mut node = TestNode::claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    let _application = db.connect();
    // Restoring over the live database: its DROP EXTENSION is refused, the rest goes on.
    let restore = output_within(
        Command::new("pg_restore").args(["--clean", "--if-exists", "--dbname", &db.dsn()]).arg(&dump_file),
        WORK_PATIENCE,
        "pg_restore --clean",
    );
    std::fs::remove_file(&dump_file).ok();
    let stderr = String::from_utf8_lossy(&restore.stderr);
    assert!(!restore.status.success(), "pg_restore reported no error: {stderr}");
    assert!(stderr.contains("the idgen registry still guards machine ids that may be stamped"), "{stderr}");
    // The node keeps its id and its lease; another node gets another id.
    node.mint(100);
    node.heartbeat(&mut admin).unwrap();
    let other = claim(&mut db.connect(), "svc", "10.0.0.2", 1).unwrap();
    assert_ne!(other.machine_id, node.machine_id);
    // The restore set the history's numbering back to the dump's; the history goes on past it.
    let recorded: i64 =
        admin.query_one("SELECT count(*) FROM idgen_events WHERE holder = '10.0.0.2:1'", &[]).unwrap().get(0);
    assert_eq!(recorded, 1);
}

#[test]
fn only_the_extension_owner_s_drop_is_checked_and_it_never_queues_claims_behind_it() {
    let db = TestDb::create("drop_rights");
    let mut admin = db.connect();
    let (granted, owner) = ("idgen_t_drop_granted", "idgen_t_drop_db_owner");
    ensure_login_role(&mut admin, granted);
    ensure_login_role(&mut admin, owner);
    admin
        .batch_execute(&format!(
            "SELECT idgen_grant_service('a', '{granted}'); ALTER DATABASE {} OWNER TO {owner}",
            db.name
        ))
        .unwrap();
    // A role granted service "a" keeps a claim's transaction open (a registry write in flight)...
    let mut writer = Client::connect(&format!("{} user={granted}", db.dsn()), postgres::NoTls).unwrap();
    writer.batch_execute("BEGIN").unwrap();
    claim(&mut writer, "a", "10.0.0.1", 1).unwrap();
    // ...and, from another session, asks to drop what it may not: refused by PostgreSQL, before
    // idgen's guard takes any lock, so nothing queues behind it.
    let mut dropper = Client::connect(&format!("{} user={granted}", db.dsn()), postgres::NoTls).unwrap();
    for drop in ["DROP OWNED BY postgres", "DROP EXTENSION idgen"] {
        let err = dropper.batch_execute(drop).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{drop}: {err:?}");
    }
    let mut other = db.connect();
    other.batch_execute("SET lock_timeout = '5s'").unwrap();
    claim(&mut other, "b", "10.0.0.2", 1).unwrap();
    next_id(&mut other).unwrap();
    // The database owner owns idgen's schema, but may not drop idgen with it.
    let mut db_owner = Client::connect(&format!("{} user={owner}", db.dsn()), postgres::NoTls).unwrap();
    let err = db_owner.batch_execute("DROP SCHEMA public CASCADE").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
    assert!(db_error(&err).message().contains("holds the extension idgen"), "{err:?}");
    // Nor by giving the schema to a role of its own and dropping what that role owns: the schema
    // goes with it, and idgen with the schema (an outside review's way past the guard).
    db_owner.batch_execute(&format!("ALTER SCHEMA public OWNER TO {owner}")).unwrap();
    let err = db_owner.batch_execute(&format!("DROP OWNED BY {owner} CASCADE")).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err:?}");
    assert_eq!(
        db_error(&err).message(),
        "DROP OWNED: schema \"public\" holds the extension idgen, which only its owner may drop"
    );
    // A superuser's DROP, while the write is in flight, fails at once instead of queueing claims.
    let err = admin.batch_execute("DROP EXTENSION idgen").unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "{err:?}");
    claim(&mut other, "b", "10.0.0.3", 1).unwrap();
    writer.batch_execute("ROLLBACK").unwrap();
    let installed: i64 =
        admin.query_one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(installed, 1);
    drop((writer, dropper, db_owner));
    // A superuser's DROP OWNED BY the schema's owner takes idgen too: the guard checks it.
    let live = claim(&mut other, "c", "10.0.0.4", 1).unwrap();
    let err = drop_registry(&mut admin, &format!("DROP OWNED BY {owner} CASCADE")).unwrap_err();
    assert_eq!(sqlstate(&err), "55006", "a live lease of machine id {}: {err:?}", live.machine_id);
    admin
        .batch_execute(&format!(
            "ALTER SCHEMA public OWNER TO pg_database_owner; ALTER DATABASE {} OWNER TO postgres",
            db.name
        ))
        .unwrap();
}

#[test]
fn a_drop_fails_at_once_while_a_reader_uses_the_registry_and_holds_no_claim_back() {
    // Nothing is stamping: only a reader stands in the DROP's way.
    let db = TestDb::create("drop_reader");
    let mut admin = db.connect();
    let reader = "idgen_t_drop_reader";
    ensure_login_role(&mut admin, reader);
    // Any role may read idgen_nodes, with no grant at all.
    admin.batch_execute("SET lock_timeout = '30s'").unwrap();
    // Any table a reader holds: the nodes (and everything idgen_nodes joins), or the layouts alone.
    for view in ["idgen_nodes", "idgen_layouts"] {
        let mut reading = Client::connect(&format!("{} user={reader}", db.dsn()), postgres::NoTls).unwrap();
        reading.batch_execute(&format!("BEGIN; SELECT count(*) FROM {view}")).unwrap();
        // A DROP that took a weaker lock and then waited for the reader's, holding it, stopped every
        // claim until the reader's transaction ended: it must fail at once instead.
        let err = admin.batch_execute("DROP EXTENSION idgen").unwrap_err();
        assert_eq!(sqlstate(&err), "55P03", "{view}: {err:?}");
        assert!(db_error(&err).message().contains("in use by another transaction"), "{view}: the DROP waited: {err:?}");
        let mut other = db.connect();
        other.batch_execute("SET lock_timeout = '5s'").unwrap();
        next_id(&mut other).unwrap();
        reading.batch_execute("ROLLBACK").unwrap();
    }
}

#[test]
fn no_cascade_from_another_object_reaches_idgen() {
    let db = TestDb::create("drop_cascades");
    let mut admin = db.connect();
    // Every object of idgen depends only on pg_catalog's pinned objects, on idgen's own objects,
    // on its schema and on its owner: the commands the drop guard checks are the only ways to
    // drop it. (PL/pgSQL was one more: DROP EXTENSION plpgsql CASCADE took idgen with it.)
    let outside: Vec<String> = admin
        .query(
            "WITH ext AS (SELECT oid, extnamespace FROM pg_extension WHERE extname = 'idgen'),
                  member AS (SELECT d.classid, d.objid FROM pg_depend d, ext
                              WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
                  -- a member relation's row type is the relation's own
                  own AS (SELECT classid, objid FROM member
                          UNION ALL SELECT 'pg_type'::regclass, c.reltype FROM pg_class c JOIN member m
                                     ON m.classid = 'pg_class'::regclass AND m.objid = c.oid)
             SELECT pg_describe_object(d.classid, d.objid, d.objsubid) || ' -> ' || pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid)
               FROM pg_depend d JOIN member m ON (d.classid, d.objid) = (m.classid, m.objid), ext
              WHERE d.refobjid >= 12000 AND d.refclassid <> 'pg_extension'::regclass
                AND (d.refclassid, d.refobjid) NOT IN (SELECT classid, objid FROM own)
                AND NOT (d.refclassid = 'pg_namespace'::regclass AND d.refobjid = ext.extnamespace)
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(outside.is_empty(), "idgen depends on objects a DROP ... CASCADE could take it with: {outside:?}");
    // So, with a holder inside its lease, these leave idgen in place.
    claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    admin.batch_execute("DROP EXTENSION plpgsql CASCADE").unwrap();
    let installed: i64 =
        admin.query_one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(installed, 1, "DROP EXTENSION plpgsql CASCADE dropped idgen");
    admin.batch_execute("CREATE EXTENSION plpgsql").unwrap();
    // Nor can an object leave the extension, to be dropped on its own.
    let err = admin.batch_execute("ALTER EXTENSION idgen DROP TABLE system_nodes").unwrap_err();
    assert_eq!(sqlstate(&err), "55006", "{err:?}");
}

#[test]
fn a_drop_or_truncate_reading_an_old_snapshot_is_refused() {
    let db = TestDb::create("drop_snapshot");
    let mut admin = db.connect();
    // At REPEATABLE READ the check would read the registry as the snapshot shows it: windows and
    // reports committed since would be missed.
    for command in ["DROP EXTENSION idgen", "TRUNCATE system_nodes"] {
        admin.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
        let err = admin.batch_execute(command).unwrap_err();
        admin.batch_execute("ROLLBACK").unwrap();
        assert_eq!(sqlstate(&err), "0A000", "{command}: {err:?}");
        assert!(db_error(&err).message().ends_with("must run at READ COMMITTED"), "{command}: {err:?}");
    }
    admin.batch_execute("SET default_transaction_isolation = 'serializable'").unwrap();
    let err = admin.batch_execute("TRUNCATE system_nodes").unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    admin.batch_execute("RESET default_transaction_isolation").unwrap();
    admin.batch_execute("TRUNCATE system_nodes").unwrap();
    drop_extension(&mut admin).unwrap();
}

/// The machine id an ID carries (the default layout).
fn machine_id_of(client: &mut Client, id: i64) -> i32 {
    client.query_one("SELECT machine_id FROM idgen_decode($1)", &[&id]).unwrap().get(0)
}

#[test]
fn a_backend_of_a_dropped_registry_issues_nothing_under_its_window_when_the_clock_steps_back_into_it() {
    // The drop guard lets a DROP through once every window has ended on the server's clock. A clock
    // that was ahead at the DROP and is then corrected (as NTP does) lands back inside a window a
    // connected backend of the dropped registry still holds in memory. The new registry hands that
    // machine id to another backend, from now on: the old one must check its lease, not issue under
    // its window (simulation finding F2).
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "drop_step_back");
    let mut old = db.connect();
    let first = next_id(&mut old).unwrap();
    let window_end_ms: f64 = old
        .query_one("SELECT extract(epoch FROM issued_until)::float8 * 1000 FROM idgen_backend_leases()", &[])
        .unwrap()
        .get(0);
    // Ahead by a minute: the window has ended, and the registry is dropped and created again.
    cluster.offset(60.0);
    let mut admin = db.connect();
    drop_registry(&mut admin, "DROP EXTENSION idgen; CREATE EXTENSION idgen").unwrap();
    // Corrected to half a second before the old window's end, however long all this took.
    let real_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
    cluster.offset((window_end_ms - 500.0 - real_ms) / 1000.0);
    let mut new = db.connect();
    let taken = next_id(&mut new).unwrap();
    assert_eq!(
        machine_id_of(&mut new, taken),
        machine_id_of(&mut new, first),
        "the new registry hands out the same id"
    );
    let after = next_id(&mut old).unwrap();
    assert_ne!(
        machine_id_of(&mut new, after),
        machine_id_of(&mut new, taken),
        "the backend of the dropped registry issued under its old window, beside the id's new holder"
    );
    cluster.set("+0");
}

#[test]
fn a_backend_of_a_dropped_registry_in_a_statement_running_across_the_drop_issues_nothing_under_its_window() {
    // As the test above, but the backend of the dropped registry is inside one statement that runs
    // across the DROP: it mints, waits (here for an advisory lock; a PL/pgSQL batch's pg_sleep, a
    // lock wait), and mints again. The registry generation moves when a backend processes the DROP's
    // invalidation: at the start of a transaction, when it takes a relation lock it does not hold
    // yet, or when it is idle and told to catch up (the DROP and CREATE fill the invalidation queue
    // enough for that: an idle backend in an open transaction is saved so); none of these happens
    // inside this statement (simulation finding F5).
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "drop_step_back_stmt");
    let mut admin = db.connect();
    admin.batch_execute("SELECT pg_advisory_lock(42)").unwrap();
    let dsn = db.dsn();
    let old = spawn_named("the backend of the dropped registry", move || {
        let mut old = Client::connect(&dsn, postgres::NoTls).unwrap();
        let row = old.query_one(
            "SELECT idgen_next_id() AS first, pg_advisory_lock(42) IS NULL AS waited,
                    (SELECT array_agg(idgen_next_id()) FROM generate_series(1, 20000)) AS after",
            &[],
        );
        row.map(|r| (r.get::<_, i64>(0), r.get::<_, Vec<i64>>(2)))
    });
    // It holds its first window and waits for the lock.
    let deadline = std::time::Instant::now() + PATIENCE;
    let window_end_ms: f64 = loop {
        let waiting: Option<f64> = admin
            .query_one(
                "SELECT (SELECT extract(epoch FROM issued_until)::float8 * 1000 FROM system_nodes
                          WHERE backend_slot IS NOT NULL)
                  WHERE EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory')",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap_or(None);
        if let Some(ms) = waiting {
            break ms;
        }
        assert!(std::time::Instant::now() < deadline, "the first backend never waited for the lock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    cluster.offset(60.0);
    let mut dropper = db.connect();
    drop_registry(&mut dropper, "DROP EXTENSION idgen; CREATE EXTENSION idgen").unwrap();
    let real_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
    cluster.offset((window_end_ms - 800.0 - real_ms) / 1000.0);
    let mut new = db.connect();
    next_id(&mut new).unwrap();
    // Both mint at once: the new registry's first backend, and the one whose statement goes on.
    let newer = spawn_named("the new registry's backend", move || {
        let ids: Vec<i64> =
            new.query_one("SELECT array_agg(idgen_next_id()) FROM generate_series(1, 20000)", &[]).unwrap().get(0);
        ids
    });
    admin.batch_execute("SELECT pg_advisory_unlock(42)").unwrap();
    let old = join_within(old, WORK_PATIENCE, "the first backend's statement");
    let taken = join_within(newer, WORK_PATIENCE, "the new backend's IDs");
    cluster.set("+0");
    let mut check = db.connect();
    let (first, after) = old.expect("the first backend's statement");
    let taken_machine_id = machine_id_of(&mut check, taken[0]);
    assert_eq!(machine_id_of(&mut check, first), taken_machine_id, "the new registry hands out the same id");
    let taken: std::collections::HashSet<i64> = taken.into_iter().collect();
    let equal = after.iter().filter(|id| taken.contains(id)).count();
    assert_eq!(equal, 0, "the backend of the dropped registry issued IDs the id's new holder issued too");
    assert_ne!(
        machine_id_of(&mut check, after[0]),
        taken_machine_id,
        "the backend of the dropped registry issued under its old window, beside the id's new holder"
    );
}

#[test]
fn a_node_of_a_dropped_registry_matches_no_row_of_the_registry_created_again() {
    // A service node is cut off; once its lease has passed, the DROP goes through, and the registry
    // is created again. A second process with the node's identity (a supervisor's restart) claims
    // there and gets the same machine id. When the first process's heartbeat comes through, it
    // names the version it holds: it must match nothing, or both would mint on one machine id
    // (simulation finding F3). Versions of rows never registered start at a base drawn for each
    // registry, so the new row's version is not the old one's.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "drop_versions");
    let mut admin = db.connect();
    let first = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    // Two hours on: the node's lease and take-back time have passed, and nothing guards the DROP.
    cluster.offset(7_200.0);
    drop_registry(&mut admin, "DROP EXTENSION idgen; CREATE EXTENSION idgen").unwrap();
    let twin = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(twin.machine_id, first.machine_id, "the same machine id for the same identity");
    let err = heartbeat(&mut admin, "svc", first.machine_id, "10.0.0.1", 1, first.version)
        .expect_err("the dropped registry's node matched the new row");
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    // The twin's own heartbeat is its, as ever.
    heartbeat(&mut admin, "svc", twin.machine_id, "10.0.0.1", 1, twin.version).unwrap();
    cluster.set("+0");
}

/// The end of the window `client`'s backend holds, on the server's clock (Unix ms).
fn window_end_ms(client: &mut Client) -> f64 {
    client
        .query_one("SELECT extract(epoch FROM issued_until)::float8 * 1000 FROM idgen_backend_leases()", &[])
        .unwrap()
        .get(0)
}

fn real_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64
}

#[test]
fn a_backend_whose_claim_raced_a_create_extension_still_sees_the_next_drop() {
    // The backend looks for the registry before its claim and finds none (the CREATE of another
    // session is not committed yet); the registry writer then claims in the new registry. Knowing no
    // oid to watch, the backend must take any invalidation for the DROP it may be (an outside
    // review's second way past F2's first fix).
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "drop_raced_create");
    let mut admin = db.connect();
    let mut a = db.connect();
    a.batch_execute("BEGIN; SELECT idgen_next_id() WHERE false").unwrap();
    drop_registry(&mut admin, "DROP EXTENSION idgen").unwrap();
    admin.batch_execute("BEGIN; CREATE EXTENSION idgen; LOCK TABLE pg_extension IN ACCESS EXCLUSIVE MODE").unwrap();
    let claiming = std::thread::spawn(move || {
        let id = next_id(&mut a);
        let _ = a.batch_execute("COMMIT");
        (a, id)
    });
    wait_for("the claim to wait for pg_extension", PATIENCE, || {
        admin
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'pg_extension'::regclass", &[])
            .unwrap()
            .get::<_, i64>(0)
            > 0
    });
    admin.batch_execute("COMMIT").unwrap();
    let (mut a, first) = join_within(claiming, WORK_PATIENCE, "the claim that raced the CREATE");
    first.unwrap();
    let window_end = window_end_ms(&mut a);
    cluster.offset(60.0);
    drop_registry(&mut admin, "DROP EXTENSION idgen; CREATE EXTENSION idgen").unwrap();
    cluster.offset((window_end - 600.0 - real_ms()) / 1000.0);
    let mut new = db.connect();
    let taken = next_id(&mut new).unwrap();
    let after = next_id(&mut a).unwrap();
    cluster.set("+0");
    assert_ne!(
        machine_id_of(&mut new, after),
        machine_id_of(&mut new, taken),
        "the backend issued under the dropped registry's window, beside the id's new holder"
    );
}
