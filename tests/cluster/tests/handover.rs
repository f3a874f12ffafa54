//! A backend that disconnects leaves its lease in its slot, and the next backend of the slot takes
//! it up with no registry write (src/registry/handover.rs): a new connection's first ID costs no
//! background worker and no commit. What the registry knows stays what the slot may stamp: the
//! next backend goes on after the last backend's IDs; a DROP EXTENSION closes the leases parked in
//! its database; a lease of a dropped registry is never taken up; a role the service is not granted
//! to gets nothing; the database's writer closes a lease nobody takes up.

use idgen_cluster_tests::*;
use postgres::Client;
use std::sync::Mutex;
use std::time::Duration;

/// A lease parked this long may have been closed by its database's writer (it closes after 10 s),
/// so the handover is checked only when the next session landed in the slot sooner.
const HANDOVER_CHECK_WITHIN: Duration = Duration::from_secs(9);

/// This file's tests take turns: each holds backend slots that another's reconnects wait for.
static TURNS: Mutex<()> = Mutex::new(());

fn my_turn() -> std::sync::MutexGuard<'static, ()> {
    TURNS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// This session's backend slot (the number idgen registers it under), read without minting.
fn my_slot(client: &mut Client) -> i32 {
    client
        .query_one(
            "SELECT s FROM generate_series(0, 10000) s \
             WHERE idgen_slot_pid(current_setting('idgen.node_host')::inet, current_setting('port')::int, s) = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

fn pid(client: &mut Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// A session of `dsn` in backend slot `slot`: connects until one lands there (a slot is the lowest
/// free one on PostgreSQL 15, the last freed from 17 on; other tests' sessions may hold it a while).
fn connect_into_slot(dsn: &str, slot: i32) -> Client {
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut misses = Vec::new();
    loop {
        let mut client = Client::connect(dsn, postgres::NoTls).unwrap();
        if my_slot(&mut client) == slot {
            return client;
        }
        assert!(std::time::Instant::now() < deadline, "no session landed in backend slot {slot} in {PATIENCE:?}");
        // Kept open a while, so that the next attempts do not take the same slot.
        misses.push(client);
        if misses.len() > 20 {
            misses.clear();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The row of the lease in `slot`: its version, the transaction that wrote it last, its watermark
/// in Unix ms and when it was last written.
fn row(admin: &mut Client, service: &str, slot: i32) -> (i64, String, i64, String) {
    let r = admin
        .query_one(
            "SELECT version, xmin::text, floor(extract(epoch FROM issued_until) * 1000)::bigint, last_seen::text \
             FROM system_nodes WHERE service = $1 AND backend_slot = $2",
            &[&service, &slot],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// Inserts `n` rows keyed by `idgen_next_id()` into `t`; returns the keys.
fn insert(client: &mut Client, n: i64) -> Vec<i64> {
    client
        .query("INSERT INTO t (payload) SELECT g FROM generate_series(1, $1::int8) g RETURNING id", &[&n])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn keyed_table(db: &TestDb) {
    db.connect().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), payload int)").unwrap();
}

/// Disconnects `client` and waits until its process has gone (its exit hook has run).
fn disconnect(admin: &mut Client, mut client: Client) {
    let pid = pid(&mut client);
    drop(client);
    wait_for_exit(admin, pid);
}

#[test]
fn a_reconnect_in_its_slot_takes_up_the_lease_with_no_registry_write() {
    let _turn = my_turn();
    let db = TestDb::create("handover_reconnect");
    keyed_table(&db);
    let mut admin = db.connect();
    let mut first = db.connect();
    let slot = my_slot(&mut first);
    let mut earlier = insert(&mut first, 500);
    let lease = backend_lease(&mut first, &db.name).unwrap();
    let claimed_at: String =
        first.query_one("SELECT claimed_at::text FROM idgen_backend_leases()", &[]).unwrap().get(0);
    // A backend's window is as long as its lease is old (src/backend.rs): renewed once the lease is
    // 20 s old, it outlasts the reconnect below, and the next session's IDs need no renewal.
    let old_enough: String =
        first.query_one("SELECT ($1::text::timestamptz + interval '20 s')::text", &[&claimed_at]).unwrap().get(0);
    wait_until_server_clock_passes(&mut first, &old_enough);
    earlier.extend(insert(&mut first, 1));
    let parked = std::time::Instant::now();
    disconnect(&mut admin, first);
    let before = row(&mut admin, &db.name, slot);

    let mut next = connect_into_slot(&db.dsn(), slot);
    let landed_after = parked.elapsed();
    let later = insert(&mut next, 500);
    let last = earlier.iter().max().unwrap();
    assert!(later.iter().all(|id| id > last), "every ID after the last backend's");
    if landed_after >= HANDOVER_CHECK_WITHIN {
        // The database's writer closes a lease parked 10 s (the_databases_writer_closes_...): on a
        // machine this busy the slot came free too late for the handover to be seen.
        println!("a session landed in slot {slot} only after {landed_after:?}: the handover was not checked");
        return;
    }
    let taken_up = backend_lease(&mut next, &db.name).unwrap();
    assert_eq!(
        (taken_up.machine_id, taken_up.version, taken_up.backend_slot),
        (lease.machine_id, lease.version, slot),
        "the same row, at the same version"
    );
    let claimed_again: String =
        next.query_one("SELECT claimed_at::text FROM idgen_backend_leases()", &[]).unwrap().get(0);
    assert_eq!(claimed_again, claimed_at, "the lease goes on: it was not claimed again");
    assert_eq!(row(&mut admin, &db.name, slot), before, "nothing was written to its row");
}

#[test]
fn ids_stay_unique_across_many_reconnects() {
    let _turn = my_turn();
    let db = TestDb::create("handover_many");
    keyed_table(&db);
    let dsn = db.dsn();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let dsn = dsn.clone();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
                    insert(&mut client, 20);
                }
            })
        })
        .collect();
    for thread in threads {
        join_within(thread, WORK_PATIENCE, "the reconnecting inserts");
    }
    let count: i64 = db.connect().query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(count, 4 * 100 * 20, "every insert took a key of its own (the primary key refuses a repeat)");
}

#[test]
fn drop_extension_closes_the_leases_parked_in_its_database() {
    let _turn = my_turn();
    let db = TestDb::create("handover_drop");
    let mut admin = db.connect();
    let mut session = db.connect();
    let id: i64 = session.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    disconnect(&mut admin, session);
    // The lease sits in its slot with its window ahead; the drop closes it to the last stamp, as the
    // backend's own exit record did before, and nothing is left that may still be stamped.
    admin.batch_execute("DROP EXTENSION idgen").unwrap_or_else(|e| panic!("DROP EXTENSION after {id}: {e}"));
}

#[test]
fn a_lease_parked_across_a_drop_past_the_guard_and_a_create_is_not_taken_up() {
    let _turn = my_turn();
    let db = TestDb::create("handover_drop_create");
    let mut admin = db.connect();
    let mut first = db.connect();
    let slot = my_slot(&mut first);
    first.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let lease = backend_lease(&mut first, &db.name).unwrap();
    disconnect(&mut admin, first);
    // A superuser drops idgen past its event trigger (which would close the parked lease) and
    // creates it again: a new registry, whose rows know nothing of the lease in the slot.
    admin
        .batch_execute("SET session_replication_role = replica; DROP EXTENSION idgen; RESET session_replication_role")
        .unwrap();
    admin.batch_execute("CREATE EXTENSION idgen").unwrap();

    let mut next = connect_into_slot(&db.dsn(), slot);
    next.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let claimed = backend_lease(&mut next, &db.name).unwrap();
    assert_ne!(claimed.version, lease.version, "claimed in the new registry, not taken up from the old one");
    let rows: i64 = admin
        .query_one(
            "SELECT count(*) FROM system_nodes WHERE backend_slot = $1 AND version = $2",
            &[&slot, &claimed.version],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "the new registry holds the lease the backend issues under");
}

#[test]
fn the_databases_writer_closes_a_lease_nobody_takes_up() {
    let _turn = my_turn();
    // On the clock-step cluster, where no other test of this binary runs: a session of another
    // database in the slot would leave its lease over this one once its window ended. Restarted
    // first: leases that earlier tests left parked in the slot (their windows not yet ended) would
    // leave this one no entry, and it would be closed at once instead of parked.
    let (cluster, _turn) = clock_cluster_turn();
    cluster.restart();
    let db = TestDb::create_on(&cluster.dsn, "handover_close");
    let mut admin = db.connect();
    let mut session = db.connect();
    let slot = my_slot(&mut session);
    let id: i64 = session.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    let stamped_ms: i64 = session
        .query_one("SELECT floor(extract(epoch FROM (idgen_decode($1)).ts) * 1000)::bigint", &[&id])
        .unwrap()
        .get(0);
    disconnect(&mut admin, session);
    assert!(row(&mut admin, &db.name, slot).2 > stamped_ms, "parked: the window stays while it may be taken up");
    // Ten seconds later the database's writer records the last stamp, and releases the row: an
    // ended session holds no id.
    wait_for("the parked lease's last stamp in its row", PATIENCE, || {
        std::thread::sleep(Duration::from_millis(200));
        row(&mut admin, &db.name, slot).2 == stamped_ms
    });
    let released: bool = admin
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE backend_slot = $1", &[&slot])
        .unwrap()
        .get(0);
    assert!(released);
}

#[test]
fn a_role_the_service_is_not_granted_to_takes_up_nothing_in_the_slot() {
    let _turn = my_turn();
    let db = TestDb::create("handover_grant");
    let mut admin = db.connect();
    ensure_login_role(&mut admin, "idgen_t_handover_granted");
    ensure_login_role(&mut admin, "idgen_t_handover_other");
    admin
        .batch_execute(&format!(
            "SELECT idgen_grant_service('svc', 'idgen_t_handover_granted'); GRANT CONNECT ON DATABASE {} TO PUBLIC",
            db.name
        ))
        .unwrap();
    let dsn_of = |role: &str| format!("{} user={role}", db.dsn());
    let mut granted = Client::connect(&dsn_of("idgen_t_handover_granted"), postgres::NoTls).unwrap();
    let slot = my_slot(&mut granted);
    granted.query_one("SELECT idgen_next_id('svc')", &[]).unwrap();
    disconnect(&mut admin, granted);

    let mut other = connect_into_slot(&dsn_of("idgen_t_handover_other"), slot);
    let err = other.query_one("SELECT idgen_next_id('svc')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err}");
    let err = other.batch_execute("SET idgen.service = 'svc'; SELECT idgen_next_id()").unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "{err}");
}

#[test]
fn a_truncated_registry_fences_a_parked_lease_as_it_fences_a_connected_backend() {
    let _turn = my_turn();
    let db = TestDb::create("handover_truncate");
    let mut admin = db.connect();
    // One machine id: whoever else claims it after the TRUNCATE meets the window the slot may stamp in.
    admin
        .batch_execute(&format!("SELECT idgen_define_layout('{}', pool_first => 7, pool_last => 7)", db.name))
        .unwrap();
    keyed_table(&db);
    let mut first = db.connect();
    let slot = my_slot(&mut first);
    insert(&mut first, 2000);
    disconnect(&mut admin, first);
    admin.batch_execute("TRUNCATE system_nodes").unwrap();
    // Another slot's claim of the one id waits for the window or is refused; it never stamps inside
    // it, and nor does the slot's next backend, which takes up the lease: no key repeats.
    let mut other = db.connect();
    let refused_or_inserted = |result: Result<Vec<postgres::Row>, postgres::Error>| match result {
        Ok(rows) => rows.len(),
        Err(e) => {
            assert_ne!(sqlstate(&e), "23505", "a key repeated: {e}");
            0
        }
    };
    let by_other = refused_or_inserted(
        other.query("INSERT INTO t (payload) SELECT g FROM generate_series(1, 2000) g RETURNING id", &[]),
    );
    // (Its lease, if it got one, parks in its own slot: gone, it keeps nobody out of the first one's.)
    disconnect(&mut admin, other);
    let mut next = connect_into_slot(&db.dsn(), slot);
    let by_next = refused_or_inserted(
        next.query("INSERT INTO t (payload) SELECT g FROM generate_series(1, 2000) g RETURNING id", &[]),
    );
    let count: i64 = admin.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(count as usize, 2000 + by_other + by_next);
}
