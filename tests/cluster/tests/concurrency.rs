//! Concurrent claims: distinct ids, no waiting on open transactions, rollback.

use idgen_cluster_tests::*;
use std::sync::Arc;

#[test]
fn two_hundred_concurrent_claims_get_two_hundred_distinct_ids() {
    let db = Arc::new(TestDb::create("crowd"));
    let start = Arc::new(Barrier::new(200));
    let workers: Vec<_> = (0..200)
        .map(|i| {
            let (db, go) = (db.clone(), start.clone());
            // A claimant that fails releases the others from the barrier, with its message.
            spawn_party(format!("claimant {i}"), &start, move || {
                let mut client = db.connect();
                go.wait();
                // As the client contract says: 55P03 (here: two new identities sharing a guard at
                // the same moment) is retried.
                let deadline = std::time::Instant::now() + PATIENCE;
                loop {
                    match claim(&mut client, "crowd", &format!("10.2.{}.{}", i / 100, i % 100), 7000 + i) {
                        Err(err) if sqlstate(&err) == "55P03" => {
                            assert!(std::time::Instant::now() < deadline, "claim {i} kept meeting a busy guard");
                        }
                        result => return result.unwrap(),
                    }
                }
            })
        })
        .collect();
    let mut claims: Vec<Claimed> = join_all(workers, WORK_PATIENCE, "the 200 claimants");
    claims.sort_by_key(|c| c.machine_id);
    let ids: Vec<i32> = claims.iter().map(|c| c.machine_id).collect();
    assert_eq!(ids, (0..200).collect::<Vec<i32>>(), "200 distinct ids, the lowest ones");
    let v1 = first_version(&mut db.connect());
    assert!(claims.iter().all(|c| c.outcome == "new" && c.version == v1), "{claims:?}");

    // The same identity, restarted gracefully (released), gets its id back with the next version.
    let mut client = db.connect();
    let first: i32 = client
        .query_one("SELECT machine_id FROM system_nodes WHERE host = '10.2.1.37' AND port = 7137", &[])
        .unwrap()
        .get(0);
    assert!(release(&mut client, "crowd", first, "10.2.1.37", 7137, v1).unwrap());
    let again = claim(&mut client, "crowd", "10.2.1.37", 7137).unwrap();
    assert_eq!(again, Claimed { machine_id: first, version: v1 + 2, outcome: "reused".into() });
}

#[test]
fn an_uncommitted_claim_does_not_block_other_claims() {
    let db = TestDb::create("open_claim");
    let mut holder = db.connect();
    holder.batch_execute("BEGIN").unwrap();
    assert_eq!(claim(&mut holder, "svc", "10.0.0.1", 1).unwrap().machine_id, 0);

    // statement_timeout turns a wait into a failure (57014) instead of a hang.
    let mut other = db.connect();
    other.batch_execute("SET statement_timeout = '5s'").unwrap();
    let b = claim(&mut other, "svc", "10.0.0.2", 2).unwrap();
    assert_eq!((b.machine_id, b.outcome.as_str()), (1, "new"), "skips the id being claimed, without waiting");

    // The same identity as the open claim is refused at once, not queued.
    let err = claim(&mut other, "svc", "10.0.0.1", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "{err:?}");
    assert!(db_error(&err).hint().unwrap().starts_with("Retry in a moment"));

    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(claim(&mut other, "svc", "10.0.0.3", 3).unwrap().machine_id, 2);
    let rows: i64 = other.query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(rows, 3);
}

#[test]
fn an_uncommitted_takeover_neither_blocks_nor_is_doubled() {
    let db = TestDb::create("open_takeover");
    let mut admin = db.connect();
    fill_registry(&mut admin, "svc");
    admin.batch_execute("UPDATE system_nodes SET last_seen = now() - interval '2 hours' WHERE machine_id = 9").unwrap();

    let mut taker = db.connect();
    taker.batch_execute("BEGIN").unwrap();
    let took = claim(&mut taker, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!((took.machine_id, took.outcome.as_str()), (9, "idle_1h"));

    let mut other = db.connect();
    other.batch_execute("SET statement_timeout = '5s'").unwrap();
    // The only idle row is locked by the open take-over: skipped, so nothing is left.
    let err = claim(&mut other, "svc", "10.0.0.2", 2).unwrap_err();
    assert_eq!(sqlstate(&err), "53000", "{err:?}");
    // The row's previous holder re-claiming finds its row locked: refused at once.
    let err = claim(&mut other, "svc", "192.0.2.9", 10009).unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "{err:?}");

    taker.batch_execute("ROLLBACK").unwrap();
    let back = claim(&mut other, "svc", "192.0.2.9", 10009).unwrap();
    assert_eq!((back.machine_id, back.version, back.outcome.as_str()), (9, 2, "reused"));
}

#[test]
fn a_rolled_back_claim_leaves_nothing_behind() {
    let db = TestDb::create("rollback");
    let mut client = db.connect();
    client.batch_execute("BEGIN").unwrap();
    claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(registry_snapshot(&mut client), "");
    let c = claim(&mut client, "svc", "10.0.0.2", 2).unwrap();
    assert_eq!((c.machine_id, c.version), (0, first_version(&mut client)));
}

#[test]
fn a_claim_runs_at_read_committed_only() {
    let db = TestDb::create("isolation");
    let mut client = db.connect();
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        client.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).unwrap();
        let err = claim(&mut client, "svc", "10.0.0.1", 1).unwrap_err();
        assert_eq!(sqlstate(&err), "0A000", "{level}: {err:?}");
        assert_eq!(db_error(&err).message(), "idgen_claim must run at READ COMMITTED", "{level}");
        client.batch_execute("ROLLBACK").unwrap();
    }
    assert_eq!(registry_snapshot(&mut client), "", "a refused claim writes nothing");
    client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").unwrap();
    let c = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    client.batch_execute("COMMIT").unwrap();
    assert_eq!((c.machine_id, c.outcome.as_str()), (0, "new"));
}

#[test]
fn a_claim_never_grants_an_id_before_the_bound_of_a_row_removed_after_its_snapshot() {
    // An outside review's attack: a transaction takes its snapshot; a holder claims a machine id and
    // mints; a superuser deletes the holder's row, which leaves a tombstone with the holder's bound.
    // A claim of that id inside the old snapshot saw neither the row nor the tombstone, and was
    // granted at once, while the holder went on stamping (7,192 equal IDs with two real nodes).
    let db = TestDb::create("snapshot_tombstone");
    let mut admin = db.connect();
    claim(&mut admin, "svc", "10.0.0.9", 9).unwrap();
    let mut old = db.connect();
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    let holder = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    admin
        .batch_execute(&format!(
            "DELETE FROM system_nodes WHERE service = 'svc' AND machine_id = {}",
            holder.machine_id
        ))
        .unwrap();
    let claimed = old.query_one(
        "SELECT extract(epoch FROM not_before)::float8 FROM idgen_claim('svc', '10.0.0.2', 2, $1)",
        &[&holder.machine_id],
    );
    let bound: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM bound)::float8 FROM idgen_tombstones WHERE service = 'svc' AND machine_id = $1",
            &[&holder.machine_id],
        )
        .unwrap()
        .get(0);
    match claimed {
        Ok(row) => {
            let not_before: f64 = row.get(0);
            assert!(not_before >= bound, "granted from {not_before} s, before the removed holder's bound {bound} s");
        }
        Err(err) => assert_eq!(sqlstate(&err), "0A000", "{err:?}"),
    }
}

#[test]
fn a_row_restored_inside_a_snapshot_older_than_its_removal_is_refused() {
    // The same old snapshot, restoring by hand the row it still sees: the insert no longer conflicts
    // with the deleted row, and its trigger's merge would miss the tombstone the DELETE left, so the
    // row would come back without the bound and the newer version that fence its holder.
    let db = TestDb::create("snapshot_restore");
    let mut admin = db.connect();
    let holder = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    let mut old = db.connect();
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    let row = format!("service = 'svc' AND machine_id = {}", holder.machine_id);
    admin.batch_execute(&format!("DELETE FROM system_nodes WHERE {row}")).unwrap();
    let err =
        old.batch_execute(&format!("INSERT INTO system_nodes SELECT * FROM system_nodes WHERE {row}")).unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    assert_eq!(db_error(&err).message(), "INSERT INTO system_nodes must run at READ COMMITTED");
    old.batch_execute("ROLLBACK").unwrap();
    let rows: i64 = admin.query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
}

#[test]
fn a_role_granted_one_service_cannot_delay_another_services_claims_or_a_backends_first_id() {
    let db = TestDb::create("hostage");
    let mut admin = db.connect();
    let role = "idgen_t_hostage_taker";
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$;
             SELECT idgen_grant_service('a', '{role}');"
        ))
        .unwrap();
    // The victim: a node of service "b". The attacker claims, for service "a", the victim's own
    // address and 39 more whose guards (a public function) share its bucket, plus the new machine
    // ids those take, and keeps the transaction open.
    let victim = idgen_core::input::NodeIdentity {
        service: "b".into(),
        host: "10.9.9.9".into(),
        port: 9999,
        backend_slot: None,
    };
    let bucket = idgen_core::guard::identity_guard(&victim);
    let colliding: Vec<i32> = (1..=65_535)
        .filter(|&port| {
            let node = idgen_core::input::NodeIdentity { port, ..victim.clone() };
            idgen_core::guard::identity_guard(&node) == bucket
        })
        .take(40)
        .collect();
    assert_eq!(colliding.len(), 40);
    let mut attacker = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    attacker.batch_execute("BEGIN").unwrap();
    for port in &colliding {
        claim(&mut attacker, "a", "10.9.9.9", *port).unwrap();
    }
    // Neither another service's claim nor a backend's first ID waits for the open transaction.
    let mut other = db.connect();
    other.batch_execute("SET lock_timeout = '5s'").unwrap();
    let c = claim(&mut other, "b", &victim.host, victim.port).unwrap();
    assert_eq!((c.machine_id, c.outcome.as_str()), (0, "new"));
    let mut backend = db.connect();
    backend.batch_execute("SET lock_timeout = '5s'; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), n int); INSERT INTO t (n) VALUES (1)").unwrap();
    // Nor can the attacker keep its claims (and their locks) past a restart in a prepared transaction.
    let err = attacker.batch_execute("PREPARE TRANSACTION 'idgen_t_hostage'").unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    let prepared: i64 =
        admin.query_one("SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'idgen_t_hostage'", &[]).unwrap().get(0);
    assert_eq!(prepared, 0);
    let claimed: i64 = admin.query_one("SELECT count(*) FROM system_nodes WHERE service = 'a'", &[]).unwrap().get(0);
    assert_eq!(claimed, 0, "the refused PREPARE rolled the claims back");
    // A refused release too: it looks at the registry's rows (and may record the refusal).
    attacker.batch_execute("BEGIN").unwrap();
    let released: bool =
        attacker.query_one("SELECT idgen_release('a', 5::smallint, '10.9.9.9', 9, 1)", &[]).unwrap().get(0);
    assert!(!released);
    let err = attacker.batch_execute("PREPARE TRANSACTION 'idgen_t_hostage'").unwrap_err();
    assert_eq!(sqlstate(&err), "0A000", "{err:?}");
    drop(attacker);
    admin.batch_execute(&format!("DROP OWNED BY {role}")).unwrap();
}
