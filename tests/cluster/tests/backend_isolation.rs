//! The column default for roles with least privilege and at every isolation level.

use idgen_cluster_tests::*;
use std::collections::BTreeSet;
use std::sync::Arc;

const APP_ROLE: &str = "idgen_t_insert_only";

fn ensure_role(client: &mut postgres::Client, role: &str) {
    client
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$"
        ))
        .unwrap();
}

#[test]
fn a_role_with_only_insert_on_its_table_can_use_the_default() {
    let db = TestDb::create("insert_only");
    let mut admin = db.connect();
    ensure_role(&mut admin, APP_ROLE);
    admin
        .batch_execute(&format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id(), item text);
             GRANT INSERT ON orders TO {APP_ROLE};"
        ))
        .unwrap();
    let mut app = postgres::Client::connect(&format!("{} user={APP_ROLE}", db.dsn()), postgres::NoTls).unwrap();
    // A temporary table named like the registry, first on the path: the claim must not write to it.
    app.batch_execute(
        "SET search_path = pg_temp, public;
         CREATE TEMP TABLE system_nodes (service text, machine_id smallint, host inet, port int, version int, last_seen timestamptz, backend_slot int, released_at timestamptz);",
    )
    .unwrap();
    app.batch_execute("INSERT INTO orders (item) VALUES ('first'), ('second')").unwrap();
    let temp_rows: i64 = app.query_one("SELECT count(*) FROM pg_temp.system_nodes", &[]).unwrap().get(0);
    assert_eq!(temp_rows, 0);

    let rows: i64 = admin.query_one("SELECT count(*) FROM orders", &[]).unwrap().get(0);
    assert_eq!(rows, 2);
    let registered: i64 = admin
        .query_one("SELECT count(*) FROM system_nodes WHERE service = $1 AND backend_slot IS NOT NULL", &[&db.name])
        .unwrap()
        .get(0);
    assert_eq!(registered, 1);

    // Still nothing else: no registry access, no registry functions, and the role's own rights after the insert.
    for sql in [
        "SELECT * FROM public.system_nodes",
        "SELECT * FROM public.idgen_claim('svc', '10.0.0.1', 1)",
        "SELECT * FROM public.orders",
        "UPDATE public.system_nodes SET version = 1",
    ] {
        let err = app.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&err), "42501", "{sql}: {err:?}");
    }
    let user: String = app.query_one("SELECT current_user::text", &[]).unwrap().get(0);
    assert_eq!(user, APP_ROLE);
}

#[test]
fn the_first_insert_of_a_new_backend_works_at_repeatable_read_and_serializable() {
    let db = TestDb::create("isolation");
    let service = db.name.clone();
    db.connect().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id())").unwrap();
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let mut client = db.connect();
        client.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).unwrap();
        client.batch_execute("SELECT count(*) FROM t").unwrap(); // the snapshot is taken before the claim
        client.batch_execute("INSERT INTO t DEFAULT VALUES").unwrap();
        client.batch_execute("COMMIT").unwrap();
        assert!(backend_lease(&mut client, &service).is_some(), "{level}");
    }
}

#[test]
fn a_snapshot_older_than_another_backends_claim_never_yields_the_same_machine_id() {
    let db = TestDb::create("old_snapshot");
    let service = db.name.clone();
    db.connect().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id())").unwrap();
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let mut old = db.connect();
        old.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}; SELECT count(*) FROM system_nodes")).unwrap();
        // Meanwhile new backends claim and commit the machine ids the old snapshot thinks are free.
        let mut newcomers: Vec<_> = (0..3).map(|_| db.connect()).collect();
        for c in &mut newcomers {
            c.batch_execute("INSERT INTO t DEFAULT VALUES").unwrap();
        }
        // At worst a serialization failure, which a retry resolves.
        if let Err(err) = old.batch_execute("INSERT INTO t DEFAULT VALUES; COMMIT") {
            assert_eq!(sqlstate(&err), "40001", "{level}: {err:?}");
            old.batch_execute("ROLLBACK").unwrap();
            old.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}; INSERT INTO t DEFAULT VALUES; COMMIT")).unwrap();
        }
        // Either way, the old backend's machine id is none of the newcomers'.
        let mine = backend_lease(&mut old, &service).expect("a lease after the insert").machine_id;
        for c in &mut newcomers {
            assert_ne!(backend_lease(c, &service).unwrap().machine_id, mine, "{level}: a machine id granted twice");
        }
    }
}

#[test]
fn concurrent_new_backends_at_serializable_succeed_with_at_most_retries() {
    const WORKERS: usize = 6;
    let db = TestDb::create("serializable_race");
    let service = db.name.clone();
    db.connect().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), w int)").unwrap();
    // All backends are connected before the first claim and stay connected until all have inserted, so
    // no slot (and no machine id) is handed from one to the next: every machine id must differ. A
    // worker that fails breaks the barrier, so that the others fail at once too, and every one's
    // error is reported (a worker that died used to leave the others waiting at the barrier).
    let barrier = Arc::new(Barrier::new(WORKERS));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (dsn, service, together) = (db.dsn(), service.clone(), barrier.clone());
            spawn_party(format!("worker {w}"), &barrier, move || {
                let mut client =
                    postgres::Client::connect(&dsn, postgres::NoTls).unwrap_or_else(|e| panic!("connect: {e}"));
                together.wait();
                let tx = format!("BEGIN ISOLATION LEVEL SERIALIZABLE; INSERT INTO t (w) VALUES ({w}); COMMIT");
                let mut attempts = 1;
                while let Err(err) = client.batch_execute(&tx) {
                    // Only a serialization failure may be retried; anything else is this worker's failure, as the server said it.
                    assert_eq!(sqlstate(&err), "40001", "attempt {attempts}: {err:?}");
                    client.batch_execute("ROLLBACK").unwrap();
                    attempts += 1;
                    assert!(attempts <= 20, "kept failing with 40001: {err:?}");
                }
                let lease = backend_lease(&mut client, &service).expect("a lease after the insert");
                together.wait();
                lease.machine_id
            })
        })
        .collect();
    let leased: BTreeSet<i32> = join_all(workers, WORK_PATIENCE, "the serializable workers").into_iter().collect();
    assert_eq!(leased.len(), WORKERS, "{leased:?}");
    let mut client = db.connect();
    let (rows, machines): (i64, Vec<i32>) = client
        .query_one("SELECT count(*), array_agg(DISTINCT (idgen_decode(id)).machine_id) FROM t", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(rows, WORKERS as i64);
    assert_eq!(machines.into_iter().collect::<BTreeSet<_>>(), leased, "each row carries its backend's machine id");
}
