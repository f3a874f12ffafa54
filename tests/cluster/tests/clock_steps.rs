//! Real clock steps under a running server (libfaketime preloaded into the
//! clock-step cluster, see scripts/clusters.sh): every ID is issued once, or the
//! call is refused with a documented error; never an ID twice.
//!
//! Each scenario mints into one table whose primary key defaults to
//! `idgen_next_id()`, moves the server's clock, reconnects, restarts or takes
//! the machine id over, then mints through the same wall-clock window again.
//! Duplicates are counted with `ON CONFLICT DO NOTHING`.

use idgen_cluster_tests::*;
use postgres::Client;
use std::sync::{Mutex, MutexGuard};

/// The clock is one for the whole cluster: scenarios take turns.
static CLOCK: Mutex<()> = Mutex::new(());

struct Scenario {
    cluster: ClockCluster,
    db: TestDb,
    _turn: MutexGuard<'static, ()>,
}

impl Scenario {
    fn new(name: &str) -> Scenario {
        Scenario::with_layout(name, "snowflake")
    }

    /// The database's service has the layout of `preset`, defined before its first claim.
    fn with_layout(name: &str, preset: &str) -> Scenario {
        let turn = CLOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let cluster = ClockCluster::from_env();
        cluster.set("+0");
        let db = TestDb::create_on(&cluster.dsn, name);
        db.connect()
            .batch_execute(&format!(
                "SELECT idgen_define_layout(current_database(), '{preset}');
                 CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT idgen_next_id(), pass int NOT NULL)"
            ))
            .unwrap();
        Scenario { cluster, db, _turn: turn }
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        self.cluster.set("+0");
    }
}

/// Inserts `n` rows with generated IDs; returns how many IDs were already in the table.
fn mint(client: &mut Client, pass: i32, n: i64) -> Result<i64, postgres::Error> {
    let inserted: i64 = client
        .query_one(
            "WITH i AS (INSERT INTO ids (pass) SELECT $1 FROM generate_series(1, $2::bigint) ON CONFLICT DO NOTHING RETURNING 1) \
             SELECT count(*) FROM i",
            &[&pass, &n],
        )?
        .get(0);
    Ok(n - inserted)
}

/// Unix seconds of the first and last timestamp stamped in a pass.
fn stamped(client: &mut Client, pass: i32) -> (f64, f64) {
    let row = client
        .query_one(
            "SELECT extract(epoch FROM min(d.ts))::float8, extract(epoch FROM max(d.ts))::float8 \
             FROM ids, idgen_decode(ids.id, current_database()) d WHERE pass = $1",
            &[&pass],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// The server's clock, in Unix seconds.
fn server_clock(client: &mut Client) -> f64 {
    client.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap().get(0)
}

/// This backend's machine id, slot and `not_before` (Unix seconds) for the database's service.
fn lease(client: &mut Client) -> (i32, i32, f64) {
    let row = client
        .query_one(
            "SELECT machine_id, backend_slot, extract(epoch FROM not_before)::float8 FROM idgen_backend_leases() \
             WHERE service = current_database()",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Mints in `pass` until the server's clock has passed `until` (Unix seconds); returns the duplicates.
/// `53000` (nothing free yet: a watermark still ahead) is retried as the clock moves on, for at
/// most two minutes of real time past `until`.
fn mint_through(client: &mut Client, pass: i32, until: f64) -> i64 {
    let mut duplicates = 0;
    let mut minted = false;
    let give_up =
        std::time::Instant::now() + std::time::Duration::from_secs_f64((until - server_clock(client)).max(0.0) + 120.0);
    while !minted || server_clock(client) <= until {
        assert!(
            std::time::Instant::now() < give_up,
            "pass {pass}: the clock did not pass {until} with IDs minted in time"
        );
        match mint(client, pass, 500) {
            Ok(d) => {
                duplicates += d;
                minted = true;
            }
            Err(err) if sqlstate(&err) == "53000" => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(err) => panic!("pass {pass}: {err:?}"),
        }
    }
    duplicates
}

fn assert_refused_with_clock_behind(result: Result<i64, postgres::Error>) {
    let err = result.expect_err("a clock behind the last ID by more than idgen.max_clock_backward is refused");
    assert_eq!(sqlstate(&err), "58000", "{err:?}");
    assert!(db_error(&err).message().contains("behind the last ID this backend issued"), "{err:?}");
}

#[test]
fn a_step_back_within_the_limit_is_waited_out() {
    let s = Scenario::new("clock_small_step");
    let mut client = s.db.connect();
    assert_eq!(mint(&mut client, 1, 2_000).unwrap(), 0);
    s.cluster.offset(-1.0); // idgen.max_clock_backward is 2 s
    assert_eq!(mint(&mut client, 2, 2_000).unwrap(), 0);
    let above: bool = client
        .query_one("SELECT (SELECT min(id) FROM ids WHERE pass = 2) > (SELECT max(id) FROM ids WHERE pass = 1)", &[])
        .unwrap()
        .get(0);
    assert!(above, "IDs after the step are above every ID before it: the backend waited, it did not reuse time");
}

#[test]
fn a_larger_step_back_is_refused_and_a_new_connection_does_not_reissue_the_window() {
    let s = Scenario::new("clock_large_step");
    let mut first = s.db.connect();
    assert_eq!(mint(&mut first, 1, 2_000).unwrap(), 0);
    let (first_id, first_slot, _) = lease(&mut first);
    let (_, last) = stamped(&mut first, 1);
    s.cluster.offset(-4.0);
    assert_refused_with_clock_behind(mint(&mut first, 2, 10));
    drop(first);

    // The reconnect usually lands in the same slot, whose row's watermark is ahead of the clock.
    let (mut next, notices) = s.db.connect_recording();
    let duplicates = mint_through(&mut next, 2, last + 0.5);
    assert_eq!(duplicates, 0, "IDs of the window before the step were issued again");
    let (id, slot, not_before) = lease(&mut next);
    if id == first_id {
        assert!(not_before >= last, "machine id {id} kept, but not_before {not_before} precedes the last ID {last}");
    }
    if slot == first_slot {
        let moved = notices.take().iter().any(|n| n.message().contains(&format!("machine id {first_id} of service")));
        assert!(moved || id != first_id, "the same slot reused machine id {first_id} without a warning");
    }
}

#[test]
fn under_a_10_ms_layout_a_step_back_is_waited_out_or_refused_and_no_id_is_issued_twice() {
    // Sonyflake's layout: 256 IDs per 10 ms tick, a tick stamped until its end.
    let s = Scenario::with_layout("clock_sonyflake", "sonyflake");
    let mut first = s.db.connect();
    assert_eq!(mint(&mut first, 1, 5_000).unwrap(), 0);
    s.cluster.offset(-1.0); // within idgen.max_clock_backward (2 s): waited out
    assert_eq!(mint(&mut first, 2, 5_000).unwrap(), 0);
    let above: bool = first
        .query_one("SELECT (SELECT min(id) FROM ids WHERE pass = 2) > (SELECT max(id) FROM ids WHERE pass = 1)", &[])
        .unwrap()
        .get(0);
    assert!(above, "IDs after the step are above every ID before it");
    let (_, last) = stamped(&mut first, 2);
    s.cluster.offset(-4.0);
    assert_refused_with_clock_behind(mint(&mut first, 3, 10));
    drop(first);
    // A new connection mints through the window already used: not one ID again.
    let mut next = s.db.connect();
    let duplicates = mint_through(&mut next, 3, last + 0.5);
    assert_eq!(duplicates, 0, "IDs of the window before the step were issued again");
    let layouts: i64 = next
        .query_one(
            "SELECT count(*) FROM ids, idgen_decode(ids.id, current_database()) d WHERE d.ts < '2020-01-01'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(layouts, 0, "every ID decodes by the service's layout to a time of this run");
}

/// The clock runs an hour ahead while one session mints, then is corrected; `between` runs after the
/// correction (a reconnect, a restart, a take-over setup) and returns the session that mints again, with
/// the clock moved back into the hour that was already used.
fn jump_ahead_then_correct(name: &str, between: impl FnOnce(&Scenario, i32) -> Client) {
    let s = Scenario::new(name);
    s.cluster.offset(3_600.0);
    let mut first = s.db.connect();
    assert_eq!(mint(&mut first, 1, 20_000).unwrap(), 0);
    let (first_id, _, _) = lease(&mut first);
    let (from, to) = stamped(&mut first, 1);
    s.cluster.offset(0.0); // corrected, as NTP or an operator would
    assert_refused_with_clock_behind(mint(&mut first, 2, 10));
    drop(first);

    let mut next = between(&s, first_id);
    // The wall clock reaches the hour that was already used: mint through it again.
    s.cluster.offset(from - real_unix_secs());
    let duplicates = mint_through(&mut next, 3, to + 0.5);
    assert_eq!(duplicates, 0, "IDs of the hour the clock ran ahead were issued again");
    let again: i64 = next
        .query_one(
            "SELECT count(*) FROM ids, idgen_decode(ids.id) d \
             WHERE pass = 3 AND d.machine_id = $1 AND d.ts <= to_timestamp($2)",
            &[&first_id, &to],
        )
        .unwrap()
        .get(0);
    assert_eq!(again, 0, "machine id {first_id} stamped again inside the window its first holder used");
}

#[test]
fn a_forward_jump_then_correction_then_reconnect_issues_nothing_twice() {
    jump_ahead_then_correct("clock_jump_reconnect", |s, _| s.db.connect());
}

#[test]
fn a_forward_jump_then_correction_then_server_restart_issues_nothing_twice() {
    jump_ahead_then_correct("clock_jump_restart", |s, _| {
        s.cluster.restart();
        s.db.connect()
    });
}

#[test]
fn a_forward_jump_then_correction_then_takeover_by_another_identity_waits_past_the_watermark() {
    jump_ahead_then_correct("clock_jump_takeover", |s, first_id| {
        let mut admin = s.db.connect();
        let service = s.db.name.clone();
        // Only the first holder's row can be taken: it looks idle for hours, every other id is busy.
        fill_registry(&mut admin, &service);
        admin
            .execute(
                "UPDATE system_nodes SET last_seen = now() + interval '10 years', issued_until = now() + interval '10 years' \
                 WHERE service = $1 AND machine_id <> $2",
                &[&service, &first_id],
            )
            .unwrap();
        set_idle(&mut admin, "3 hours", &format!("service = '{service}' AND machine_id = {first_id}"));
        let mut other = s.db.connect();
        other.batch_execute("SET idgen.node_host = '10.9.9.9'").unwrap();
        // Its watermark is an hour ahead of the corrected clock: not usable now.
        let err = mint(&mut other, 2, 10).unwrap_err();
        assert_eq!(sqlstate(&err), "53000", "{err:?}");
        other
    });
}

#[test]
fn sequence_exhaustion_waits_for_the_clock_and_never_borrows_the_next_millisecond() {
    let s = Scenario::new("clock_frozen");
    let mut client = s.db.connect();
    assert_eq!(mint(&mut client, 1, 10).unwrap(), 0);
    // Freeze the clock at a whole second just ahead: every reading returns the same millisecond.
    let frozen = real_unix_secs().floor() + 2.0;
    let row = client
        .query_one(
            "SELECT to_char(to_timestamp($1) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), \
                    to_char(to_timestamp($1 + 1) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')",
            &[&frozen],
        )
        .unwrap();
    let (frozen_text, second_later): (String, String) = (row.get(0), row.get(1));
    s.cluster.set(&frozen_text);
    let first: Vec<i64> =
        client.query_one("SELECT array_agg(idgen_next_id()) FROM generate_series(1, 4096)", &[]).unwrap().get(0);
    let frozen_ms = (frozen * 1000.0) as i64;
    let in_frozen_ms: i64 = client
        .query_one(
            "SELECT count(DISTINCT d.sequence) FROM unnest($1::bigint[]) id, idgen_decode(id) d \
             WHERE (extract(epoch FROM d.ts) * 1000)::bigint = $2",
            &[&first, &frozen_ms],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_frozen_ms, 4096, "all 4,096 sequence numbers of the frozen millisecond are used");

    // The next ID has no room in this millisecond: it must wait for the clock, however long.
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    // (The server measures statement_timeout on the frozen clock: the join's deadline bounds this wait.)
    let waiting = spawn_named("the session waiting for the clock", move || -> i64 {
        client.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0)
    });
    let mut observer = s.db.connect();
    let deadline = std::time::Instant::now() + PATIENCE;
    while !waiting.is_finished() {
        assert!(std::time::Instant::now() < deadline, "the waiting idgen_next_id() never showed as active");
        let active: bool = observer
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT idgen_next_id()%')",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if active {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // A generator that borrowed future time would already have stamped the frozen second's next millisecond.
    s.cluster.set(&second_later);
    let id = join_within(waiting, PATIENCE, "the idgen_next_id() waiting for the clock to move");
    let stamped_ms: i64 = observer
        .query_one("SELECT (extract(epoch FROM ts) * 1000)::bigint FROM idgen_decode($1)", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(stamped_ms, frozen_ms + 1000, "the waiting ID is stamped when the clock moved, not before");
}

/// The registry's watermark for this backend's lease, as another session reads it (committed),
/// in Unix ms.
fn committed_watermark_ms(s: &Scenario, backend: &mut Client) -> i64 {
    let (machine_id, slot, _) = lease(backend);
    s.db.connect()
        .query_one(
            "SELECT floor(extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes \
             WHERE service = current_database() AND machine_id = $1 AND backend_slot = $2",
            &[&machine_id, &slot],
        )
        .unwrap()
        .get(0)
}

/// The latest timestamp (Unix ms) of `ids`.
fn last_stamp_ms(client: &mut Client, ids: &[i64]) -> i64 {
    client
        .query_one(
            "SELECT max(floor(extract(epoch FROM (idgen_decode(i)).ts) * 1000))::bigint FROM unnest($1::bigint[]) i",
            &[&ids],
        )
        .unwrap()
        .get(0)
}

#[test]
fn ids_kept_from_a_rolled_back_savepoint_are_never_issued_again_after_a_step_back() {
    let s = Scenario::new("savepoint_mint");
    let mut first = s.db.connect();
    // A new connection's first IDs (its claim among them) are minted in a subtransaction that
    // fails; the caller keeps them, as an ORM keeps a generated key after a savepoint rollback.
    first
        .batch_execute(
            "DO $$
             DECLARE kept bigint[];
             BEGIN
                 BEGIN
                     kept := ARRAY(SELECT idgen_next_id() FROM generate_series(1, 100000));
                     RAISE EXCEPTION 'the savepoint rolls back';
                 EXCEPTION WHEN raise_exception THEN NULL;
                 END;
                 INSERT INTO ids (id, pass) SELECT unnest(kept), 1;
             END $$",
        )
        .unwrap();
    let (start, last) = stamped(&mut first, 1);
    // The claim and the window behind those IDs were committed on their own.
    let kept: Vec<i64> = first.query("SELECT id FROM ids", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(committed_watermark_ms(&s, &mut first) >= last_stamp_ms(&mut first, &kept));
    // The clock steps back to before those IDs; a new connection mints through their time.
    s.cluster.offset(-(real_unix_secs() - start + 0.5));
    let mut next = s.db.connect();
    assert_eq!(mint_through(&mut next, 2, last + 0.5), 0, "IDs kept from the rolled-back savepoint were issued again");
}

#[test]
fn a_window_renewed_in_a_rolled_back_savepoint_stays_committed() {
    let s = Scenario::new("savepoint_renewal");
    let mut backend = s.db.connect();
    assert_eq!(mint(&mut backend, 1, 10).unwrap(), 0);
    // The next ID renews the window, inside a savepoint that rolls back; the IDs are kept.
    wait_past_backend_watermark(&mut backend, &s.db.name);
    let mut tx = backend.transaction().unwrap();
    tx.batch_execute("SAVEPOINT renewal").unwrap();
    let kept: Vec<i64> =
        tx.query_one("SELECT ARRAY(SELECT idgen_next_id() FROM generate_series(1, 50000))", &[]).unwrap().get(0);
    tx.batch_execute("ROLLBACK TO SAVEPOINT renewal").unwrap();
    tx.commit().unwrap();
    let stamped_until = last_stamp_ms(&mut backend, &kept);
    let committed = committed_watermark_ms(&s, &mut backend);
    assert!(committed >= stamped_until, "IDs stamped up to {stamped_until}, the registry's watermark is {committed}");
}
