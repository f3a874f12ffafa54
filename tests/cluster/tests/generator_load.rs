//! `PRIMARY KEY DEFAULT idgen_next_id()` under load: 8 sessions insert 100,000
//! rows each into one table, half of them reconnecting every 5,000 rows.
//! (Sequence exhaustion is exercised with a frozen clock in clock_steps.rs.)

use idgen_cluster_tests::*;
use std::collections::BTreeSet;

const SESSIONS: i32 = 8;
const ROWS_PER_SESSION: i32 = 100_000;
const BATCH: i32 = 5_000;

#[test]
fn eight_sessions_with_reconnects_insert_unique_increasing_ids_and_reuse_their_slots() {
    let db = TestDb::create("load");
    let service = db.name.clone(); // idgen.service is unset: the database's name
    db.connect()
        .batch_execute("CREATE TABLE events (id bigint PRIMARY KEY DEFAULT idgen_next_id(), session int, n int)")
        .unwrap();

    let workers: Vec<_> = (0..SESSIONS)
        .map(|session| {
            let dsn = db.dsn();
            let service = service.clone();
            spawn_named(format!("session {session}"), move || {
                let reconnects = session % 2 == 0;
                let mut slots = BTreeSet::new();
                let mut client = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
                for first in (1..=ROWS_PER_SESSION).step_by(BATCH as usize) {
                    if reconnects && first > 1 {
                        client = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
                    }
                    // Any unique violation fails the statement, and the test with it.
                    client
                        .execute(
                            "INSERT INTO events (session, n) SELECT $1, g FROM generate_series($2::int, $3::int) g",
                            &[&session, &first, &(first + BATCH - 1)],
                        )
                        .unwrap();
                    slots.insert(backend_lease(&mut client, &service).expect("a lease after inserting").backend_slot);
                }
                (reconnects, slots)
            })
        })
        .collect();
    let mut slots_used = BTreeSet::new();
    for (_, slots) in join_all(workers, WORK_PATIENCE, "the inserting sessions") {
        slots_used.extend(slots);
    }

    let mut client = db.connect();
    let rows: i64 = client.query_one("SELECT count(DISTINCT id) FROM events", &[]).unwrap().get(0);
    assert_eq!(rows, i64::from(SESSIONS * ROWS_PER_SESSION));
    // Within a session, across its reconnects too, IDs grow with the insertion order.
    let out_of_order: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY session ORDER BY n) AS previous FROM events) e \
             WHERE id <= previous",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(out_of_order, 0);
    // Every ID decodes to a machine id the registry granted to a backend of this service.
    let foreign: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT DISTINCT (idgen_decode(id)).machine_id AS m FROM events) d \
             WHERE NOT EXISTS (SELECT 1 FROM system_nodes n WHERE n.service = $1 AND n.machine_id = d.m AND n.backend_slot IS NOT NULL)",
            &[&service],
        )
        .unwrap()
        .get(0);
    assert_eq!(foreign, 0);
    // 84 connections over at most a few dozen slots: churn reuses rows instead of using up the 1,024 ids.
    let rows_held = backend_rows(&mut client, &service);
    assert!(rows_held >= 1 && rows_held <= slots_used.len() as i64, "{rows_held} rows for slots {slots_used:?}");
    let distinct_slots: i64 = client
        .query_one("SELECT count(DISTINCT backend_slot) FROM system_nodes WHERE service = $1", &[&service])
        .unwrap()
        .get(0);
    assert_eq!(distinct_slots, rows_held, "one row per slot");
}
