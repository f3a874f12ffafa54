//! Refused calls write nothing and start nothing: a flood of releases of ids the caller does not
//! hold, of heartbeats at a stale version and of claims of a full service leaves a bounded record
//! (one event per service and kind a minute) and starts no background worker per call, so that
//! the server's worker slots stay free for the work that needs them (here: a parallel query).

use idgen_cluster_tests::*;

/// Workers planned and launched by a parallel scan of `big` (its plan's Gather).
fn parallel_workers(client: &mut postgres::Client) -> (i64, i64) {
    let lines: Vec<String> = client
        .query("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM big", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let count = |label: &str| -> i64 {
        lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(label).map(|n| n.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {label} in {lines:?}"))
    };
    (count("Workers Planned:"), count("Workers Launched:"))
}

#[test]
fn a_flood_of_refused_calls_leaves_a_bounded_record_and_the_worker_slots_free() {
    let db = TestDb::create("floods");
    let mut admin = db.connect();
    let held = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    fill_registry(&mut admin, "full");
    // A service's first claim creates its claim guards (in a worker, once per service).
    assert_eq!(sqlstate(&claim(&mut admin, "full", "10.2.0.0", 1).unwrap_err()), "53000");
    admin.batch_execute("CREATE TABLE big AS SELECT g FROM generate_series(1, 100000) g; ANALYZE big").unwrap();
    let mut observer = db.connect();
    observer
        .batch_execute(
            "SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
             SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off",
        )
        .unwrap();
    assert_eq!(parallel_workers(&mut observer), (2, 2), "the parallel query gets its workers before the flood");

    let floods: Vec<_> = (0..10)
        .map(|k| {
            let dsn = db.dsn();
            spawn_named(format!("flood {k}"), move || {
                let mut client = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
                for round in 0..100 {
                    // A release of an id this node does not hold: false, with a WARNING.
                    let released: bool = client
                        .query_one(
                            "SELECT idgen_release('svc', 7::smallint, $1::text::inet, 1, 1)",
                            &[&format!("10.1.0.{k}")],
                        )
                        .unwrap()
                        .get(0);
                    assert!(!released);
                    // A heartbeat at a version the node no longer has.
                    let err = heartbeat(&mut client, "svc", held.machine_id, "10.0.0.1", 1, held.version + 1 + round)
                        .unwrap_err();
                    assert_eq!(sqlstate(&err), "55000", "{err:?}");
                    // A claim of a full service (or 55P03: two new identities sharing a guard).
                    let err = claim(&mut client, "full", &format!("10.2.{k}.{round}"), 1).unwrap_err();
                    assert!(matches!(sqlstate(&err), "53000" | "55P03"), "{err:?}");
                }
            })
        })
        .collect();
    let mut short = Vec::new();
    wait_for("the floods to end", WORK_PATIENCE, || {
        let (planned, launched) = parallel_workers(&mut observer);
        if launched < planned {
            short.push((planned, launched));
        }
        floods.iter().all(|f| f.is_finished())
    });
    join_all(floods, PATIENCE, "the floods");
    assert!(short.is_empty(), "the parallel query went short of workers during the flood: {short:?}");
    // 3,000 refusals, one event per service and kind: the releases and heartbeats (ownership lost)
    // of "svc", the claims (full) of "full".
    let recorded: Vec<(String, String, i64)> = admin
        .query(
            "SELECT service, event, count(*) FROM idgen_events WHERE event <> 'claim' GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        recorded,
        [("full".to_owned(), "refused_full".to_owned(), 1), ("svc".to_owned(), "ownership_lost".to_owned(), 1)]
    );
    // The holder itself is unaffected.
    heartbeat(&mut admin, "svc", held.machine_id, "10.0.0.1", 1, held.version).unwrap();
}
