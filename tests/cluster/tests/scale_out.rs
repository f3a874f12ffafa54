//! Several primaries, one ID space: disjoint `idgen.machine_id_range`s on two
//! independent clusters (the scratch cluster and the clock-step cluster), a
//! range that fills up, a range changed under live holders; and registry
//! writes that wait for a synchronous standby whatever the session's
//! `synchronous_commit`. These change cluster-wide settings: one test at a time.

use idgen_cluster_tests::*;
use postgres::Client;
use std::collections::HashSet;

/// IDs minted on one server: `backends` sessions inserting with the column default (half of them
/// reconnecting midway), and `nodes` service nodes minting in-process. Returns every ID.
fn mint_on(db: &TestDb, tag: &str, backends: usize, nodes: usize) -> Vec<i64> {
    let mut admin = db.connect();
    define_service(&mut admin, "shop");
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS minted (id bigint PRIMARY KEY DEFAULT idgen_next_id('shop'), k int)")
        .unwrap();
    for b in 0..backends {
        let mut backend = db.connect();
        backend.batch_execute("INSERT INTO minted (k) SELECT g FROM generate_series(1, 500) g").unwrap();
        if b % 2 == 0 {
            drop(backend);
            backend = db.connect();
        }
        backend.batch_execute("INSERT INTO minted (k) SELECT g FROM generate_series(1, 500) g").unwrap();
    }
    let mut ids: Vec<i64> = admin.query("SELECT id FROM minted", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    for n in 0..nodes {
        let mut node = TestNode::claim(&mut admin, "shop", &format!("10.{tag}.0.{n}"), 8080).unwrap();
        ids.extend(node.mint(2_000));
        node.heartbeat(&mut admin).unwrap();
        ids.extend(node.mint(2_000));
        node.release(&mut admin).unwrap();
    }
    ids
}

fn machine_ids(ids: &[i64]) -> (i64, i64) {
    let m: Vec<i64> = ids.iter().map(|id| (id >> 12) & 1023).collect();
    (*m.iter().min().unwrap(), *m.iter().max().unwrap())
}

#[test]
fn two_primaries_with_disjoint_ranges_mint_into_one_table_without_a_duplicate() {
    let (clock, _turn) = clock_cluster_turn();
    let _low = SystemSettings::set(&base_dsn(), &[("idgen.machine_id_range", "0-511")]);
    let _high = SystemSettings::set(&clock.dsn, &[("idgen.machine_id_range", "512-1023")]);
    // The same service, and the same database name, on both servers: each would start at machine id 0.
    let a = TestDb::create_on(&base_dsn(), "shard_a");
    let b = TestDb::create_on(&clock.dsn, "shard_a");
    let from_a = mint_on(&a, "1", 4, 3);
    let from_b = mint_on(&b, "2", 4, 3);
    assert_eq!(from_a.len(), 4 * 1000 + 3 * 4000);
    assert_eq!(from_b.len(), from_a.len());
    let (a_min, a_max) = machine_ids(&from_a);
    let (b_min, b_max) = machine_ids(&from_b);
    assert!(a_max <= 511 && b_min >= 512 && b_max <= 1023, "a: {a_min}-{a_max}, b: {b_min}-{b_max}");
    assert_eq!((a_min, b_min), (0, 512), "each server starts at the bottom of its range");

    // Merged into one table: not one duplicate.
    let merged: HashSet<i64> = from_a.iter().chain(&from_b).copied().collect();
    assert_eq!(merged.len(), from_a.len() + from_b.len());
    let mut target = a.connect();
    target.batch_execute("CREATE TABLE merged (id bigint PRIMARY KEY)").unwrap();
    let inserted = target.execute("INSERT INTO merged SELECT unnest($1::bigint[])", &[&from_b]).unwrap();
    assert_eq!(inserted as usize, from_b.len());
    let conflicts =
        target.query_one("SELECT count(*) FROM minted m JOIN merged g ON g.id = m.id", &[]).unwrap().get::<_, i64>(0);
    assert_eq!(conflicts, 0);

    // Each server checks its range with one query.
    for db in [&a, &b] {
        let row = db
            .connect()
            .query_one("SELECT machine_id_first, machine_id_last, machine_ids FROM idgen_policy()", &[])
            .unwrap();
        let (first, last, count): (i32, i32, i32) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(count, last - first + 1);
    }
}

#[test]
fn a_claim_that_finds_its_range_full_fails_with_53000_naming_the_range() {
    let (clock, _turn) = clock_cluster_turn();
    let _range = SystemSettings::set(&clock.dsn, &[("idgen.machine_id_range", "10-12")]);
    let db = TestDb::create_on(&clock.dsn, "range_full");
    let mut client = db.connect();
    let got: Vec<i32> =
        (1..=3).map(|k| claim(&mut client, "svc", &format!("10.0.0.{k}"), 1).unwrap().machine_id).collect();
    assert_eq!(got, [10, 11, 12]);
    let err = claim(&mut client, "svc", "10.0.0.4", 1).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "53000");
    assert!(
        e.detail()
            .unwrap()
            .starts_with("3 of 3 machine ids (10 to 12: the service's pool within idgen.machine_id_range) are held"),
        "{:?}",
        e.detail()
    );
    // A backend's claim meets the same range.
    let err = client.query_one("SELECT idgen_next_id('svc')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "53000");
    let capacity: (i64, i64) = {
        let r =
            client.query_one("SELECT capacity::bigint, free FROM idgen_capacity WHERE service = 'svc'", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(capacity, (3, 0));
}

#[test]
fn a_range_changed_under_live_holders_strands_nothing_and_hands_out_nothing_twice() {
    let (clock, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&clock.dsn, "range_change");
    let mut admin = db.connect();
    let mut node = TestNode::claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    let mut backend = db.connect();
    backend.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    assert_eq!(node.machine_id, 0);
    let first_ids = node.mint(100);

    let _range = SystemSettings::set(&clock.dsn, &[("idgen.machine_id_range", "100-199")]);
    let mut admin = db.connect();
    // The live holders keep their ids: the node heartbeats and mints, the backend renews its lease.
    node.heartbeat(&mut admin).unwrap();
    let more = node.mint(100);
    assert_eq!(more.len(), 100);
    wait_past_backend_watermark(&mut backend, "svc");
    backend.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    let held: i32 =
        backend.query_one("SELECT machine_id FROM idgen_backend_leases() WHERE service = 'svc'", &[]).unwrap().get(0);
    assert_eq!(held, 1);
    // idgen_health() says which rows are outside and until when they may be stamped.
    let finding: String = admin
        .query_one("SELECT finding || ' ' || subject FROM idgen_health() WHERE finding = 'outside_range'", &[])
        .unwrap()
        .get(0);
    assert_eq!(finding, "outside_range svc");
    // New claims come from the range; nothing outside it is handed out again.
    assert_eq!(claim(&mut admin, "svc", "10.0.0.2", 1).unwrap().machine_id, 100);
    // The node restarts: it leaves its id (with its watermark) and moves inside the range.
    let (mut restarted_client, notices) = db.connect_recording();
    let restarted = TestNode::claim(&mut restarted_client, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!((restarted.machine_id, restarted.outcome.as_str()), (101, "new"));
    let warned = notices.take();
    assert!(
        warned.iter().any(|n| n.message().starts_with(
            "idgen_claim: machine id 0 of service \"svc\" is outside the machine ids this server hands out for it \
             (100-199: its pool within idgen.machine_id_range); 10.0.0.1:1 moves to machine id 101"
        )),
        "{warned:?}"
    );
    let last_stamp = *more.iter().chain(&first_ids).max().unwrap();
    let old = admin
        .query_one(
            "SELECT released_at IS NOT NULL, issued_until >= (idgen_decode($1)).ts FROM system_nodes WHERE machine_id = 0",
            &[&last_stamp],
        )
        .unwrap();
    assert_eq!((old.get::<_, bool>(0), old.get::<_, bool>(1)), (true, true), "released, its watermark kept");
    let set_aside: i64 = admin
        .query_one("SELECT count(*) FROM idgen_events WHERE event = 'set_aside' AND machine_id = 0", &[])
        .unwrap()
        .get(0);
    assert_eq!(set_aside, 1);
    // A new connection in the backend's slot moves inside the range too.
    drop(backend);
    let mut reconnected = db.connect();
    reconnected.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    let now: i32 = reconnected
        .query_one("SELECT machine_id FROM idgen_backend_leases() WHERE service = 'svc'", &[])
        .unwrap()
        .get(0);
    assert!((100..=199).contains(&now), "{now}");
    // Capacity counts the range only.
    let capacity: i64 =
        admin.query_one("SELECT capacity::bigint FROM idgen_capacity WHERE service = 'svc'", &[]).unwrap().get(0);
    assert_eq!(capacity, 100);
}

/// Whether `statement`, run by a new session at `synchronous_commit = $synchronous_commit`, waits for a synchronous
/// standby at its commit (seen as wait event SyncRep, in the session or in the registry writer that
/// commits a backend's claim for it; the wait is then cancelled, which leaves the commit local: the
/// session's statement succeeds, a writer's caller fails with 58000).
/// Decided by what happens, never by how long it takes; [`PATIENCE`] without either fails.
fn waits_for_the_standby(db: &TestDb, observer: &mut Client, synchronous_commit: &str, statement: &str) -> bool {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let waiter = spawn_named(format!("the session at synchronous_commit = {synchronous_commit}"), {
        let (dsn, statement, setting) =
            (db.dsn(), statement.to_owned(), format!("SET synchronous_commit = {synchronous_commit}"));
        move || {
            let mut session = Client::connect(&dsn, postgres::NoTls).unwrap();
            session.batch_execute(&setting).unwrap();
            let pid: i32 = session.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            pid_tx.send(pid).unwrap();
            session.batch_execute(&statement)
        }
    });
    let pid: i32 = recv_within(&pid_rx, PATIENCE, "the session's pid");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if waiter.is_finished() {
            join_within(waiter, PATIENCE, statement).unwrap();
            return false;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{statement}: neither finished nor waited for the standby within {PATIENCE:?}"
        );
        let waiting: Option<i32> = observer
            .query_one(
                "SELECT min(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database() \
                   AND (pid = $1 OR backend_type = 'idgen registry writer')",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if let Some(waiting) = waiting {
            let writer = waiting != pid;
            observer.query_one("SELECT pg_cancel_backend($1)", &[&waiting]).unwrap();
            let outcome = join_within(waiter, PATIENCE, statement);
            if writer {
                // A registry writer whose wait was cancelled answers nothing: its commit is only
                // local, and the backend must not mint under it.
                let err = outcome.expect_err("a backend minted under a claim the standby did not confirm");
                assert_eq!(sqlstate(&err), "58000", "{statement}: {err:?}");
            } else {
                // The statement itself succeeded: only the wait was cancelled (the session is told so).
                outcome.unwrap();
            }
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn registry_writes_wait_for_the_synchronous_standby_even_at_synchronous_commit_off() {
    let (clock, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&clock.dsn, "durable");
    let mut setup = db.connect();
    setup.batch_execute("CREATE TABLE plain (k int)").unwrap();
    let c = claim(&mut setup, "svc", "10.0.0.1", 1).unwrap();
    // A standby that never comes: a commit that waits for it waits until cancelled.
    let _standby = SystemSettings::set(&clock.dsn, &[("synchronous_standby_names", "idgen_missing_standby")]);
    let mut observer = db.connect();
    // Reading the registry writes nothing and waits for nothing (a new session's first read of a
    // layout included; a transaction id would make its commit wait).
    let reads = "SELECT * FROM idgen_nodes; SELECT * FROM idgen_health(); \
                 SELECT * FROM idgen_decode(idgen_min_id(now(), 'svc'), 'svc'); SELECT * FROM idgen_explain(1::bigint, 'svc')";
    assert!(
        !waits_for_the_standby(&db, &mut observer, "on", reads),
        "a read of the registry took a transaction id and waited for the standby at commit"
    );
    let health: Vec<String> = observer
        .query("SELECT severity || ' ' || finding FROM idgen_health() WHERE subject = 'replication'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(health, ["critical synchronous_standby_missing"]);
    // The session's own writes do not wait: that is what synchronous_commit = off means.
    assert!(!waits_for_the_standby(&db, &mut observer, "off", "INSERT INTO plain VALUES (1)"));
    // A claim, a heartbeat, a release and a backend's first ID (its claim) each wait for the standby.
    assert!(waits_for_the_standby(&db, &mut observer, "off", "SELECT * FROM idgen_claim('svc', '10.0.0.2', 1)"));
    let heartbeat = format!("SELECT idgen_heartbeat('svc', {}::smallint, '10.0.0.1', 1, {})", c.machine_id, c.version);
    assert!(waits_for_the_standby(&db, &mut observer, "off", &heartbeat));
    assert!(waits_for_the_standby(&db, &mut observer, "off", "SELECT idgen_next_id('svc')"));
    let release = format!("SELECT idgen_release('svc', {}::smallint, '10.0.0.1', 1, {})", c.machine_id, c.version);
    assert!(waits_for_the_standby(&db, &mut observer, "off", &release));
    // Nor after them.
    assert!(
        !waits_for_the_standby(&db, &mut observer, "on", reads),
        "after the writes, a read of the registry took a transaction id and waited for the standby"
    );
}

#[test]
fn a_registry_writer_waiting_for_a_standby_that_is_gone_ends_at_sigterm_and_hands_out_nothing() {
    let (clock, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&clock.dsn, "writer_sigterm");
    let _standby = SystemSettings::set(&clock.dsn, &[("synchronous_standby_names", "idgen_missing_standby")]);
    // A backend's first ID: its claim commits in a registry writer, which waits for the standby.
    let minting = spawn_named("a backend's first ID", {
        let dsn = db.dsn();
        move || Client::connect(&dsn, postgres::NoTls).unwrap().query_one("SELECT idgen_next_id()", &[]).map(|_| ())
    });
    let mut observer = db.connect();
    let mut writer = None;
    wait_for("a registry writer waiting for the standby", PATIENCE, || {
        writer = observer
            .query_one(
                "SELECT min(pid) FROM pg_stat_activity \
                 WHERE backend_type = 'idgen registry writer' AND wait_event = 'SyncRep'",
                &[],
            )
            .unwrap()
            .get(0);
        writer.is_some()
    });
    // As a fast shutdown or a switchover's demotion ends it: SIGTERM.
    let writer: i32 = writer.unwrap();
    observer.query_one("SELECT pg_terminate_backend($1)", &[&writer]).unwrap();
    wait_for_exit(&mut observer, writer);
    // Its commit stopped waiting for the standby: no answer, so no ID under that claim.
    let outcome = join_within(minting, PATIENCE, "the backend's first ID");
    let error = outcome.expect_err("an ID was minted under a claim that may not have reached the standby");
    assert_eq!(sqlstate(&error), "58000", "{error:?}");
}

#[test]
fn a_backend_ended_while_no_synchronous_standby_streams_exits_at_once() {
    // A fast shutdown (a switchover's demotion) ends each backend with one SIGTERM. A backend that
    // holds a lease records its last stamp on the way out; had that commit waited for the standby
    // the switchover took away, the backend, and the server's shutdown with it, would hang for good
    // (a fresh machine's failover test hung so for 20 minutes).
    let (clock, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&clock.dsn, "exit_no_standby");
    let mut backend = db.connect();
    backend.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let (pid, slot): (i32, i32) = backend
        .query_one("SELECT pg_backend_pid(), backend_slot FROM idgen_backend_leases()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    let _standby = SystemSettings::set(&clock.dsn, &[("synchronous_standby_names", "idgen_missing_standby")]);
    let mut observer = db.connect();
    observer.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    wait_for_exit(&mut observer, pid);
    // Its last stamp was recorded: the row is released, its watermark not past the clock.
    let (released, stamped): (bool, bool) = observer
        .query_one(
            "SELECT released_at IS NOT NULL, issued_until <= clock_timestamp() FROM system_nodes WHERE backend_slot = $1",
            &[&slot],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(released && stamped, "released {released}, watermark not ahead {stamped}");
}

#[test]
fn claims_can_be_refused_while_no_synchronous_standby_streams() {
    let (clock, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&clock.dsn, "require_standby");
    let mut client = db.connect();
    let c = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let _require = SystemSettings::set(&clock.dsn, &[("idgen.require_synchronous_standby", "on")]);
    let mut client = db.connect();
    let err = claim(&mut client, "svc", "10.0.0.2", 1).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000");
    assert_eq!(
        e.message(),
        "idgen_claim: no synchronous standby is attached, and idgen.require_synchronous_standby is on"
    );
    assert_eq!(sqlstate(&client.query_one("SELECT idgen_next_id()", &[]).unwrap_err()), "55000");
    // Refused again within the minute: recorded once per service and kind.
    assert_eq!(sqlstate(&claim(&mut client, "svc", "10.0.0.3", 1).unwrap_err()), "55000");
    // Holders go on: heartbeats and releases are not refused.
    heartbeat(&mut client, "svc", c.machine_id, "10.0.0.1", 1, c.version).unwrap();
    release(&mut client, "svc", c.machine_id, "10.0.0.1", 1, c.version).unwrap();
    let refused: Vec<String> = client
        .query("SELECT service FROM idgen_events WHERE event = 'refused_no_standby' ORDER BY service", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(refused, [db.name.as_str(), "svc"]);
}

/// The sink of the replication test and its subscriptions (each to a slot of its own).
const SINK: &str = "idgen_t_pools_sink";
const SUBSCRIPTIONS: [(&str, &str); 2] =
    [("idgen_t_pools_sub_a", "idgen_t_pools_slot_a"), ("idgen_t_pools_sub_b", "idgen_t_pools_slot_b")];

#[test]
fn two_databases_of_one_cluster_with_disjoint_pools_replicate_into_one_table_without_a_duplicate() {
    // Two databases of one cluster: their default services (named like each database) share the
    // server's address and its backend slots, so both would hand out machine id 0 at once. Given
    // disjoint pools, their IDs never meet: both publish into one table of a third database.
    // The turn also keeps out the test above, which narrows the scratch cluster's range meanwhile.
    let (_clock, _turn) = clock_cluster_turn();
    for (subscription, slot) in SUBSCRIPTIONS {
        drop_subscription_and_slot(SINK, subscription, slot);
    }
    let shards = [TestDb::create("pools_shard_a"), TestDb::create("pools_shard_b")];
    let sink = TestDb::create("pools_sink");
    assert_eq!(sink.name, SINK);
    let mut sink_client = sink.connect();
    sink_client.batch_execute("CREATE TABLE events (id bigint PRIMARY KEY, shard text NOT NULL)").unwrap();
    for ((shard, (first, last)), (subscription, slot)) in shards.iter().zip([(0, 511), (512, 1023)]).zip(SUBSCRIPTIONS)
    {
        let mut client = shard.connect();
        client
            .batch_execute(&format!(
                "SELECT idgen_define_layout(current_database(), 'snowflake', pool_first => {first}, pool_last => {last});
                 CREATE TABLE events (id bigint PRIMARY KEY DEFAULT idgen_next_id(), shard text NOT NULL DEFAULT current_database());
                 CREATE PUBLICATION idgen_t_pools_pub FOR TABLE events;"
            ))
            .unwrap();
        // (Apart from the subscription: one creating its slot in its own cluster would wait for itself.)
        client.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot]).unwrap();
        sink_client
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION {subscription} CONNECTION '{}' PUBLICATION idgen_t_pools_pub
                     WITH (create_slot = false, slot_name = '{slot}', copy_data = false)",
                shard.dsn().replace('\'', "''")
            ))
            .unwrap();
    }
    // Both shards mint at once, from sessions that come and go.
    let party = std::sync::Arc::new(Barrier::new(6));
    let workers: Vec<_> = (0..6)
        .map(|k| {
            let dsn = shards[k % 2].dsn();
            let party = party.clone();
            spawn_named(format!("shard {} session {k}", k % 2), move || {
                party.wait_within(PATIENCE);
                for _ in 0..3 {
                    let mut session = Client::connect(&dsn, postgres::NoTls).unwrap();
                    session.batch_execute("INSERT INTO events SELECT FROM generate_series(1, 2000)").unwrap();
                }
            })
        })
        .collect();
    join_all(workers, WORK_PATIENCE, "the shards' sessions");
    let minted: i64 = 6 * 3 * 2000;
    wait_for("every row to reach the sink", PATIENCE, || {
        sink_client.query_one("SELECT count(*) FROM events", &[]).unwrap().get::<_, i64>(0) == minted
    });
    // No duplicate key stopped an apply worker, and each shard's IDs carry its pool's machine ids.
    let ranges: Vec<(String, i64, i64, i64)> = sink_client
        .query(
            "SELECT shard, count(*), min((id >> 12) & 1023), max((id >> 12) & 1023) FROM events GROUP BY shard ORDER BY shard",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert!(ranges[0].3 <= 511 && ranges[1].2 >= 512, "{ranges:?}");
    assert_eq!((ranges[0].1, ranges[1].1), (minted / 2, minted / 2));
    let failed: i64 = sink_client
        .query_one(
            "SELECT count(*) FROM pg_stat_subscription WHERE subname LIKE 'idgen_t_pools_sub_%' AND pid IS NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(failed, 0, "every apply worker still runs");
    drop(sink_client);
    for (subscription, slot) in SUBSCRIPTIONS {
        drop_subscription_and_slot(SINK, subscription, slot);
    }
}
