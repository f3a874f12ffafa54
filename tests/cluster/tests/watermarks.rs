//! Watermarks from real clients: service nodes report theirs and honour
//! `not_before`, a node whose clock ran ahead moves to another machine id on
//! restart, a report far ahead is kept (and holds back that id alone),
//! releases keep the holder's last timestamp, and rows removed by hand
//! (DELETE, TRUNCATE) leave tombstones that keep their holders' time out of
//! reach. DROP and CREATE EXTENSION: tests/drop_create.rs.

use idgen_cluster_tests::*;
use idgen_core::generator::{Clock, Generator};
use idgen_core::Layout;
use postgres::Client;

/// A service node's wall clock: real time plus an offset the test controls.
struct NodeClock {
    offset_ms: i64,
}

impl Clock for NodeClock {
    fn now_unix_ms(&mut self) -> i64 {
        (real_unix_secs() * 1000.0) as i64 + self.offset_ms
    }
    fn wait_until(&mut self, unix_ms: i64) {
        let left = unix_ms - self.now_unix_ms();
        if left > 0 {
            std::thread::sleep(std::time::Duration::from_millis(left as u64));
        }
    }
}

/// One row of `idgen_claim` with its `not_before` in Unix ms.
#[derive(Debug)]
struct Grant {
    machine_id: i32,
    version: i64,
    outcome: String,
    not_before_ms: i64,
}

fn claim_at(client: &mut Client, service: &str, host: &str) -> Result<Grant, postgres::Error> {
    let row = client.query_one(
        "SELECT machine_id, version, outcome, (extract(epoch FROM not_before) * 1000)::bigint \
         FROM idgen_claim($1, $2::text::inet, 8080)",
        &[&service, &host],
    )?;
    Ok(Grant { machine_id: row.get(0), version: row.get(1), outcome: row.get(2), not_before_ms: row.get(3) })
}

/// `idgen_heartbeat` reporting the node's watermark (Unix ms).
fn heartbeat_with(
    client: &mut Client,
    service: &str,
    host: &str,
    g: &Grant,
    watermark_ms: i64,
) -> Result<(), postgres::Error> {
    client
        .query_one(
            "SELECT idgen_heartbeat($1, $2, $3::text::inet, 8080, $4, to_timestamp($5::float8 / 1000))",
            &[&service, &g.machine_id, &host, &g.version, &(watermark_ms as f64)],
        )
        .map(|_| ())
}

/// The row's watermark in Unix ms.
fn issued_until_ms(client: &mut Client, service: &str, machine_id: i32) -> i64 {
    client
        .query_one(
            "SELECT (extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes WHERE service = $1 AND machine_id = $2",
            &[&service, &machine_id],
        )
        .unwrap()
        .get(0)
}

/// Mints `n` IDs as a service node would, with the core's generator on the node's clock.
fn mint_as_node(g: &Grant, clock: &mut NodeClock, n: usize) -> Vec<i64> {
    let mut generator = Generator::new(Layout::DEFAULT, g.machine_id as u16, g.not_before_ms, 2_000);
    (0..n).map(|_| generator.next_id(clock, i64::MAX).expect("the node's clock is in the layout")).collect()
}

/// Stores IDs in `ids`; returns how many were there already.
fn store(client: &mut Client, ids: &[i64]) -> i64 {
    let inserted =
        client.execute("INSERT INTO ids SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING", &[&ids]).unwrap();
    ids.len() as i64 - inserted as i64
}

#[test]
fn a_gracefully_restarted_service_gets_its_id_back_and_starts_after_its_watermark() {
    let db = TestDb::create("service_restart");
    let mut client = db.connect();
    let mut clock = NodeClock { offset_ms: 90_000 }; // 90 s ahead: within the 5-minute lease margin
    let first = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    let before = mint_as_node(&first, &mut clock, 1_000);
    let watermark = clock.now_unix_ms();
    client
        .query_one(
            "SELECT idgen_release('svc', $1, '10.0.0.1', 8080, $2, to_timestamp($3::float8 / 1000))",
            &[&first.machine_id, &first.version, &(watermark as f64)],
        )
        .unwrap();
    // It starts again on the same address, within the cooldown that keeps others away.
    let again = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    assert_eq!((again.machine_id, again.outcome.as_str()), (first.machine_id, "reused"));
    assert_eq!(again.not_before_ms, watermark, "not_before is the watermark it released with");
    let after = mint_as_node(&again, &mut clock, 1_000);
    assert!(after[0] > *before.last().unwrap(), "its first ID follows every ID of its previous run");
}

#[test]
fn a_service_whose_clock_ran_ahead_moves_to_another_id_on_restart_and_issues_nothing_twice() {
    let db = TestDb::create("service_clock_ahead");
    let mut client = db.connect();
    client.batch_execute("CREATE TABLE ids (id bigint PRIMARY KEY)").unwrap();
    let hour_ms = 3_600_000;
    let mut clock = NodeClock { offset_ms: hour_ms };
    let first = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    let window_start = clock.now_unix_ms();
    let ids = mint_as_node(&first, &mut clock, 20_000);
    assert_eq!(store(&mut client, &ids), 0);
    heartbeat_with(&mut client, "svc", "10.0.0.1", &first, clock.now_unix_ms()).unwrap();
    let watermark = issued_until_ms(&mut client, "svc", first.machine_id);

    // Its clock is corrected and it restarts: its own id's watermark is an hour ahead.
    clock.offset_ms = 0;
    let (mut restarted, notices) = db.connect_recording();
    let moved = claim_at(&mut restarted, "svc", "10.0.0.1").unwrap();
    assert_ne!(moved.machine_id, first.machine_id, "the identity moved to another machine id");
    let warning = notices.take().into_iter().find(|n| n.severity() == "WARNING").expect("a warning");
    assert!(
        warning
            .message()
            .contains(&format!("machine id {} of service \"svc\" cannot be used before", first.machine_id)),
        "{}",
        warning.message()
    );
    let released: bool = client
        .query_one(
            "SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'svc' AND machine_id = $1",
            &[&first.machine_id],
        )
        .unwrap()
        .get(0);
    assert!(released, "the set-aside id is released, and keeps its watermark");
    assert!(issued_until_ms(&mut client, "svc", first.machine_id) >= watermark);

    // Its clock passes through the hour the first run used: nothing is issued twice.
    clock.offset_ms = window_start - clock.now_unix_ms();
    let again = mint_as_node(&moved, &mut clock, 20_000);
    assert_eq!(store(&mut client, &again), 0);

    // Held again by a node that restarts while every other id is taken: the claim fails, naming the id.
    fill_registry(&mut client, "svc");
    client
        .execute(
            "UPDATE system_nodes SET host = '10.0.0.3', released_at = NULL, version = version + 1 \
             WHERE service = 'svc' AND machine_id = $1",
            &[&first.machine_id],
        )
        .unwrap();
    let err = claim_at(&mut restarted, "svc", "10.0.0.3").unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000", "{err:?}");
    assert!(
        e.message().starts_with(&format!(
            "idgen_claim: machine id {} of service \"svc\" cannot be used before ",
            first.machine_id
        )) && e.message().ends_with("and no other machine id is free"),
        "{}",
        e.message()
    );
    assert!(e.hint().unwrap().contains("Do not delete the row"), "{:?}", e.hint());
}

#[test]
fn watermarks_only_grow_and_a_report_far_ahead_is_kept() {
    let db = TestDb::create("watermark_reports");
    let (mut client, notices) = db.connect_recording();
    let g = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    let now_ms = (real_unix_secs() * 1000.0) as i64;
    heartbeat_with(&mut client, "svc", "10.0.0.1", &g, now_ms + 10_000).unwrap();
    heartbeat_with(&mut client, "svc", "10.0.0.1", &g, now_ms - 3_600_000).unwrap();
    assert_eq!(issued_until_ms(&mut client, "svc", g.machine_id), now_ms + 10_000, "a lower report never lowers it");
    // It only draws a WARNING: the node's clock is behind (inputs.rs has the rest).
    let behind = notices.take();
    assert!(behind.len() == 1 && behind[0].message().contains("behind the watermark"), "{behind:?}");

    // Two days ahead: a clock gone wrong, but the node may have stamped that far. Forgetting the
    // report would let the id's next holder stamp below it, so it is kept, with a WARNING.
    let far_ms = now_ms + 2 * 86_400_000;
    heartbeat_with(&mut client, "svc", "10.0.0.1", &g, far_ms).unwrap();
    assert_eq!(issued_until_ms(&mut client, "svc", g.machine_id), far_ms);
    let warnings = notices.take();
    assert!(
        warnings.iter().any(|n| n.severity() == "WARNING" && n.message().contains("ahead of the server clock")),
        "{warnings:?}"
    );
    // It holds back that id alone: others claim and mint at once.
    let other = claim_at(&mut db.connect(), "svc", "10.0.0.2").unwrap();
    assert!(other.not_before_ms < now_ms + 60_000, "{other:?}");
    client.query_one("SELECT idgen_next_id()", &[]).unwrap();

    // An infinite watermark bounds nothing: refused before anything is written.
    let before = registry_snapshot(&mut client);
    let err = client
        .query_one("SELECT idgen_release('svc', $1, '10.0.0.1', 8080, $2, 'infinity')", &[&g.machine_id, &g.version])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "{err:?}");
    assert_eq!(registry_snapshot(&mut client), before);
}

#[test]
fn a_release_keeps_the_reported_watermark_and_the_next_holder_starts_after_it() {
    let db = TestDb::create("release_watermark");
    let mut client = db.connect();
    let g = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    // The node's clock is 20 s ahead of the server's: its last ID is in the server's future.
    let last_ms = (real_unix_secs() * 1000.0) as i64 + 20_000;
    let released: bool = client
        .query_one(
            "SELECT idgen_release('svc', $1, '10.0.0.1', 8080, $2, to_timestamp($3::float8 / 1000))",
            &[&g.machine_id, &g.version, &(last_ms as f64)],
        )
        .unwrap()
        .get(0);
    assert!(released);
    fill_registry(&mut client, "svc");
    client
        .batch_execute(
            "UPDATE system_nodes SET released_at = now() - interval '61 seconds' WHERE released_at IS NOT NULL",
        )
        .unwrap();
    // Past the cooldown another node takes it, and may stamp only after the released node's last ID.
    let next = claim_at(&mut client, "svc", "10.0.0.2").unwrap();
    assert_eq!((next.machine_id, next.outcome.as_str()), (g.machine_id, "released"));
    assert_eq!(next.not_before_ms, last_ms);
}

fn next_id(client: &mut Client) -> Result<i64, postgres::Error> {
    client.query_one("SELECT idgen_next_id()", &[]).map(|r| r.get(0))
}

#[test]
fn a_truncated_and_restored_registry_fences_leases_of_the_old_epoch() {
    let db = TestDb::create("truncate_epoch");
    let (mut backend, notices) = db.connect_recording();
    next_id(&mut backend).unwrap();
    let mut admin = db.connect();
    let epoch =
        |c: &mut Client| -> i64 { c.query_one("SELECT epoch FROM idgen_private.idgen_registry", &[]).unwrap().get(0) };
    let before = epoch(&mut admin);
    // A restore of the same rows after TRUNCATE: the backend's row comes back exactly as it was.
    admin
        .batch_execute(
            "CREATE TABLE saved AS SELECT * FROM system_nodes; TRUNCATE system_nodes; \
             INSERT INTO system_nodes SELECT * FROM saved",
        )
        .unwrap();
    assert_ne!(epoch(&mut admin), before, "TRUNCATE starts a new epoch");
    // The restored rows take the truncated rows' bounds, and newer versions: their holders are fenced.
    let restored: Vec<(i64, i64, bool)> = admin
        .query(
            "SELECT s.version, n.version, n.issued_until >= s.issued_until FROM saved s JOIN system_nodes n USING (service, machine_id)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let v1 = first_version(&mut admin);
    assert_eq!(restored, [(v1, v1 + 1, true)]);
    wait_past_backend_watermark(&mut backend, &db.name);
    next_id(&mut backend).unwrap();
    let warned =
        notices.take().iter().any(|n| n.severity() == "WARNING" && n.message().contains("the registry that granted"));
    assert!(warned, "a lease granted in another epoch is dropped at its next check");
    let version: i64 = backend
        .query_one("SELECT version FROM idgen_backend_leases() WHERE service = current_database()", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, v1 + 2, "and claimed afresh, after the restored row's version");
}

#[test]
fn a_deleted_row_keeps_its_holders_time_out_of_reach_and_holds_back_nothing_else() {
    let db = TestDb::create("delete_tombstone");
    let mut client = db.connect();
    let a = claim_at(&mut client, "svc", "10.0.0.1").unwrap();
    heartbeat_with(&mut client, "svc", "10.0.0.1", &a, (real_unix_secs() * 1000.0) as i64 + 23 * 3_600_000).unwrap();
    // A person deletes a live node's row, which reported a watermark 23 hours ahead: that node may
    // go on issuing until then, and its id stays out of reach until then.
    client.execute("DELETE FROM system_nodes WHERE service = 'svc' AND machine_id = $1", &[&a.machine_id]).unwrap();
    let tombstone: (i64, i64) = client
        .query_one(
            "SELECT version, (extract(epoch FROM bound) * 1000)::bigint FROM idgen_tombstones WHERE service = 'svc' AND machine_id = $1",
            &[&a.machine_id],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(tombstone.0, a.version);
    assert!(tombstone.1 >= (real_unix_secs() * 1000.0) as i64 + 22 * 3_600_000, "{tombstone:?}");
    // Nothing else waits: another node gets another id, the database's backends mint.
    let b = claim_at(&mut client, "svc", "10.0.0.2").unwrap();
    assert_ne!(b.machine_id, a.machine_id);
    assert!(b.not_before_ms < (real_unix_secs() * 1000.0) as i64 + 60_000, "{b:?}");
    next_id(&mut client).unwrap();
    let _ = claim_at(&mut db.connect(), "other", "10.0.0.3").unwrap();
    // When that id is the only one left, the claim says which id and until when.
    fill_registry_except(&mut client, "svc", &[a.machine_id]);
    let err = claim_at(&mut client, "svc", "10.0.0.4").unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000", "{err:?}");
    assert!(
        e.message().starts_with(&format!(
            "idgen_claim: machine id {} of service \"svc\" cannot be used before ",
            a.machine_id
        )),
        "{}",
        e.message()
    );
    // The row restored by hand takes its tombstone: a newer version (the old holder is fenced) and its bound.
    client
        .execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version) VALUES ('svc', $1, '10.0.0.1', 8080, 1)",
            &[&a.machine_id],
        )
        .unwrap();
    let restored: (i64, i64) = client
        .query_one(
            "SELECT version, (extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes WHERE service = 'svc' AND machine_id = $1",
            &[&a.machine_id],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(restored, (a.version + 1, tombstone.1));
    let err = heartbeat_with(&mut client, "svc", "10.0.0.1", &a, 0).unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "the old holder is fenced: {err:?}");
    // Moving a row to another machine id or service would leave nothing behind: refused.
    for update in [
        "UPDATE system_nodes SET machine_id = 1000 WHERE service = 'svc' AND machine_id = $1",
        "UPDATE system_nodes SET service = 'renamed' WHERE service = 'svc' AND machine_id = $1",
    ] {
        let err = client.execute(update, &[&a.machine_id]).unwrap_err();
        assert_eq!(sqlstate(&err), "55000", "{update}: {err:?}");
    }
}
