//! Fleet findings (idgen 0.6.0): what heartbeats report (the node's clock offset, its generator's
//! counts), holder clock skew, restart loops and flapping machine ids, as idgen_nodes,
//! idgen_metrics and idgen_health() show them. Time is driven by injected watermarks, rows aged
//! by hand and settings windows, never by waiting.

use idgen_cluster_tests::*;
use postgres::Client;

/// idgen_health()'s findings of `finding`, as `severity subject`.
fn findings(client: &mut Client, finding: &str) -> Vec<String> {
    client
        .query("SELECT severity || ' ' || subject FROM idgen_health() WHERE finding = $1 ORDER BY subject", &[&finding])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A heartbeat reporting the watermark `watermark` (SQL, e.g. `clock_timestamp() + interval '5 s'`)
/// and the generator's counts, as the service client sends them (bigint counts).
fn heartbeat_reporting(
    client: &mut Client,
    node: (&str, i32),
    held: &Claimed,
    watermark: &str,
    counts: [Option<i64>; 3],
) -> Result<(), postgres::Error> {
    client
        .query_one(
            &format!("SELECT idgen_heartbeat('svc', $1, $2::text::inet, $3, $4, {watermark}, $5, $6, $7)"),
            &[&held.machine_id, &node.0, &node.1, &held.version, &counts[0], &counts[1], &counts[2]],
        )
        .map(|_| ())
}

/// The clock offset idgen_nodes shows for a machine id, in seconds (NULL: none).
fn clock_offset(client: &mut Client, machine_id: i32) -> Option<f64> {
    client
        .query_one(
            "SELECT extract(epoch FROM clock_offset)::float8 FROM idgen_nodes WHERE service = 'svc' AND machine_id = $1",
            &[&machine_id],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_skewed_holder_shows_its_clock_offset_and_a_finding_past_the_setting() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "clock_skew");
    let mut client = db.connect();
    let ahead = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let behind = claim(&mut client, "svc", "10.0.0.2", 1).unwrap();
    let on_time = claim(&mut client, "svc", "10.0.0.3", 1).unwrap();
    // A node whose clock is 5 s ahead of the server's, one 5 s behind (its report is behind the
    // watermark the claim recorded: the registry keeps its own, and the offset is the report's),
    // and one on time.
    heartbeat_reporting(&mut client, ("10.0.0.1", 1), &ahead, "clock_timestamp() + interval '5 s'", [None; 3]).unwrap();
    heartbeat_reporting(&mut client, ("10.0.0.2", 1), &behind, "clock_timestamp() - interval '5 s'", [None; 3])
        .unwrap();
    heartbeat_reporting(&mut client, ("10.0.0.3", 1), &on_time, "clock_timestamp()", [None; 3]).unwrap();
    let offset = |client: &mut Client, held: &Claimed| clock_offset(client, held.machine_id).expect("an offset");
    let (a, b, c) = (offset(&mut client, &ahead), offset(&mut client, &behind), offset(&mut client, &on_time));
    assert!((4.0..=5.0).contains(&a), "5 s ahead, less the heartbeat's own time: {a}");
    assert!((-6.0..=-5.0).contains(&b), "5 s behind: {b}");
    assert!((-1.0..=0.0).contains(&c), "on time: {c}");
    let kept_ahead_of_report: bool = client
        .query_one(
            "SELECT issued_until > last_seen + clock_offset FROM system_nodes WHERE service = 'svc' AND machine_id = $1",
            &[&behind.machine_id],
        )
        .unwrap()
        .get(0);
    assert!(kept_ahead_of_report, "the registry kept its watermark; the offset is the report's");
    let skewed = |held: &Claimed| format!("warning svc machine id {}", held.machine_id);
    assert_eq!(findings(&mut client, "holder_clock_skew"), [skewed(&ahead), skewed(&behind)]);
    let max: f64 = client
        .query_one("SELECT max_clock_offset_seconds FROM idgen_metrics WHERE service = 'svc'", &[])
        .unwrap()
        .get(0);
    assert!((5.0..=6.0).contains(&max), "{max}");

    // A 10 s bound, after a reload: both are within it.
    let _bound = SystemSettings::set(&cluster.dsn, &[("idgen.clock_skew_alert", "10s")]);
    let mut client = db.connect();
    assert!(findings(&mut client, "holder_clock_skew").is_empty());
    let shown: String = client.query_one("SELECT clock_skew_alert::text FROM idgen_policy()", &[]).unwrap().get(0);
    assert_eq!(shown, "00:00:10");
    // A heartbeat without a watermark reports no offset; a new version (a release) hides the old one.
    client
        .query_one("SELECT idgen_heartbeat('svc', $1, '10.0.0.3', 1, $2)", &[&on_time.machine_id, &on_time.version])
        .unwrap();
    assert_eq!(clock_offset(&mut client, on_time.machine_id), None);
    assert!(release(&mut client, "svc", ahead.machine_id, "10.0.0.1", 1, ahead.version).unwrap());
    assert_eq!(clock_offset(&mut client, ahead.machine_id), None, "the offset was its holder's, before the release");
}

#[test]
fn heartbeat_counts_are_stored_shown_and_summed_and_a_negative_one_changes_nothing() {
    let db = TestDb::create("generator_counts");
    let mut client = db.connect();
    let first = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let second = claim(&mut client, "svc", "10.0.0.2", 1).unwrap();
    heartbeat_reporting(&mut client, ("10.0.0.1", 1), &first, "clock_timestamp()", [Some(1), Some(0), Some(2)])
        .unwrap();
    heartbeat_reporting(&mut client, ("10.0.0.2", 1), &second, "clock_timestamp()", [Some(2), Some(3), Some(4)])
        .unwrap();
    let counts = |client: &mut Client, held: &Claimed| -> (Option<i64>, Option<i64>, Option<i64>) {
        let row = client
            .query_one(
                "SELECT clock_backward_waits, clock_backward_refusals, sequence_exhaustions FROM idgen_nodes
                  WHERE service = 'svc' AND machine_id = $1",
                &[&held.machine_id],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(counts(&mut client, &first), (Some(1), Some(0), Some(2)));
    assert_eq!(counts(&mut client, &second), (Some(2), Some(3), Some(4)));
    let summed = client
        .query_one(
            "SELECT clock_backward_waits, clock_backward_refusals, sequence_exhaustions FROM idgen_metrics WHERE service = 'svc'",
            &[],
        )
        .unwrap();
    assert_eq!((summed.get::<_, i64>(0), summed.get::<_, i64>(1), summed.get::<_, i64>(2)), (3, 3, 6));
    // The refusals are a warning; the waits a notice, for each node that reports some.
    let name = |held: &Claimed, severity: &str| format!("{severity} svc machine id {}", held.machine_id);
    assert_eq!(findings(&mut client, "clock_backward_refusals"), [name(&second, "warning")]);
    assert_eq!(findings(&mut client, "generator_waits"), [name(&first, "notice"), name(&second, "notice")]);

    // A negative count is refused, naming the argument, and nothing changes.
    let before = registry_snapshot(&mut client);
    let row_before: String = client
        .query_one("SELECT s::text FROM system_nodes s WHERE machine_id = $1", &[&first.machine_id])
        .unwrap()
        .get(0);
    for (i, argument) in ["clock_backward_waits", "clock_backward_refusals", "sequence_exhaustions"].iter().enumerate()
    {
        let mut reported = [Some(5), Some(5), Some(5)];
        reported[i] = Some(-1);
        let err = heartbeat_reporting(&mut client, ("10.0.0.1", 1), &first, "clock_timestamp()", reported).unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{err:?}");
        assert_eq!(db_error(&err).message(), format!("idgen_heartbeat: argument \"{argument}\" must not be negative"));
    }
    let row_after: String = client
        .query_one("SELECT s::text FROM system_nodes s WHERE machine_id = $1", &[&first.machine_id])
        .unwrap()
        .get(0);
    assert_eq!(
        (registry_snapshot(&mut client), row_after),
        (before, row_before),
        "a refused heartbeat changes nothing"
    );

    // The calls of before 0.6.0 keep working: six arguments, and five without a watermark.
    client
        .query_one(
            "SELECT idgen_heartbeat('svc', $1, '10.0.0.1', 1, $2, clock_timestamp())",
            &[&first.machine_id, &first.version],
        )
        .unwrap();
    heartbeat(&mut client, "svc", first.machine_id, "10.0.0.1", 1, first.version).unwrap();
    assert_eq!(counts(&mut client, &first), (None, None, None), "the last heartbeat reported none");
    // The client's own call: bigint parameters, the watermark in Unix milliseconds.
    client
        .query_one(
            "SELECT idgen_heartbeat($1, $2, $3::text::inet, $4, $5, to_timestamp($6::float8 / 1000), $7, $8, $9)",
            &[
                &"svc",
                &first.machine_id,
                &"10.0.0.1",
                &1i32,
                &first.version,
                &(real_unix_secs() * 1000.0),
                &7i64,
                &0i64,
                &0i64,
            ],
        )
        .unwrap();
    assert_eq!(counts(&mut client, &first), (Some(7), Some(0), Some(0)));
}

/// A service node's process reports its last stamp (a second ahead of the server's clock) and is
/// killed; its row is then made to look as if that had been long ago, its lease and take-back time
/// over (its watermark stays what it reported): the node's next claim reuses the row (a restart).
fn report_and_die(client: &mut Client, node: (&str, i32), held: &Claimed) {
    heartbeat_reporting(client, node, held, "clock_timestamp() + interval '1 second'", [None; 3]).unwrap();
    client
        .execute(
            "UPDATE system_nodes SET last_seen = now() - interval '3 hours', lease_until = now() - interval '3 hours',
                    takeover_at = now() - interval '2 hours'
              WHERE service = 'svc' AND machine_id = $1",
            &[&held.machine_id],
        )
        .unwrap();
}

#[test]
fn a_node_that_claims_more_than_three_times_within_the_window_is_a_restart_loop() {
    let db = TestDb::create("restart_loop");
    let mut client = db.connect();
    // A crash loop: the node is killed (it never releases) and claims again, four times. Its
    // earlier process is long gone each time, so it gets its own row back: a restart.
    let mut versions = Vec::new();
    for _ in 0..4 {
        let c = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
        assert_eq!(c.machine_id, 0);
        versions.push(c.version);
        report_and_die(&mut client, ("10.0.0.1", 1), &c);
    }
    let events: Vec<(String, String, Option<i64>)> = client
        .query(
            "SELECT event, outcome, previous_version FROM idgen_events WHERE holder = '10.0.0.1:1' ORDER BY event_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(events[0], ("claim".to_owned(), "new".to_owned(), None));
    assert_eq!(
        events[1..].to_vec(),
        (1..4).map(|i| ("restart".to_owned(), "reused".to_owned(), Some(versions[i - 1]))).collect::<Vec<_>>()
    );
    // A node that claims three times is no loop (it moves to another id each time: its earlier
    // process may still be stamping).
    for _ in 0..3 {
        claim(&mut client, "svc", "10.0.0.2", 2).unwrap();
    }
    assert_eq!(findings(&mut client, "restart_loop"), ["warning svc 10.0.0.1:1"]);
    let row =
        client.query_one("SELECT claims, machine_ids FROM idgen_restart_loops WHERE service = 'svc'", &[]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, String>(1)), (4, "0".to_owned()));
    let metrics =
        client.query_one("SELECT restarts, restart_loops FROM idgen_metrics WHERE service = 'svc'", &[]).unwrap();
    assert_eq!((metrics.get::<_, i64>(0), metrics.get::<_, i64>(1)), (3, 1));
    // The fourth claim of the second node makes it a loop too.
    claim(&mut client, "svc", "10.0.0.2", 2).unwrap();
    assert_eq!(findings(&mut client, "restart_loop"), ["warning svc 10.0.0.1:1", "warning svc 10.0.0.2:2"]);

    // The restarts keep the tenures apart, and each with its holder: an ID stamped after the last
    // restart is the last process's, one stamped between the first claim and the first restart
    // the first process's.
    let explained = |client: &mut Client, at: &str| -> (String, Option<String>, Option<i64>) {
        let row = client
            .query_one(&format!("SELECT finding, holder, version FROM idgen_explain(idgen_min_id({at}), 'svc')"), &[])
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let now = explained(&mut client, "clock_timestamp() + interval '2 seconds'");
    assert_eq!(now, ("held".to_owned(), Some("10.0.0.1:1".to_owned()), Some(versions[3])));
    let first_stamp: String = client
        .query_one(
            "SELECT (not_before + interval '1 millisecond')::text FROM idgen_events WHERE holder = '10.0.0.1:1' AND event = 'claim'",
            &[],
        )
        .unwrap()
        .get(0);
    let early = explained(&mut client, &format!("'{first_stamp}'::timestamptz"));
    assert_eq!(early, ("held".to_owned(), Some("10.0.0.1:1".to_owned()), Some(versions[0])));
}

#[test]
fn a_window_and_a_count_from_the_settings_decide_what_a_loop_is() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "restart_loop_settings");
    let mut client = db.connect();
    for _ in 0..4 {
        claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    }
    assert_eq!(findings(&mut client, "restart_loop"), ["warning svc 10.0.0.1:1"]);
    // Four claims are no loop when more than four make one.
    let higher = SystemSettings::set(&cluster.dsn, &[("idgen.restart_loop_claims", "4")]);
    assert!(findings(&mut db.connect(), "restart_loop").is_empty());
    drop(higher);
    // Claims older than the window do not count: the history's times moved back by hand, a 1 s window.
    let mut owner = db.connect();
    owner.batch_execute("ALTER TABLE idgen_private.idgen_history DISABLE TRIGGER idgen_history_append_only").unwrap();
    owner
        .batch_execute("UPDATE idgen_private.idgen_history SET at = at - interval '1 minute' WHERE host = '10.0.0.1'")
        .unwrap();
    owner
        .batch_execute("ALTER TABLE idgen_private.idgen_history ENABLE ALWAYS TRIGGER idgen_history_append_only")
        .unwrap();
    assert_eq!(findings(&mut db.connect(), "restart_loop"), ["warning svc 10.0.0.1:1"], "a minute ago is in 5 minutes");
    let _short = SystemSettings::set(&cluster.dsn, &[("idgen.restart_loop_window", "30s")]);
    assert!(findings(&mut db.connect(), "restart_loop").is_empty());
}

#[test]
fn a_machine_id_that_moves_between_holders_more_than_three_times_is_flapping() {
    let db = TestDb::create("id_flapping");
    let mut client = db.connect();
    // Only machine id 0 is free: every other one has a live holder.
    fill_registry_except(&mut client, "svc", &[0]);
    let mut held = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(held.machine_id, 0);
    let mut holder = "10.0.0.1";
    let moves = |client: &mut Client| -> i64 {
        client
            .query_one("SELECT coalesce(max(moves), 0) FROM idgen_flapping_ids WHERE service = 'svc'", &[])
            .unwrap()
            .get(0)
    };
    for round in 1..=4 {
        // The holder releases; its cooldown is over (aged by hand); the other node takes it.
        assert!(release(&mut client, "svc", 0, holder, 1, held.version).unwrap());
        client
            .batch_execute(
                "UPDATE system_nodes SET released_at = released_at - interval '2 minutes' WHERE machine_id = 0",
            )
            .unwrap();
        holder = if holder == "10.0.0.1" { "10.0.0.2" } else { "10.0.0.1" };
        held = claim(&mut client, "svc", holder, 1).unwrap();
        assert_eq!((held.machine_id, held.outcome.as_str()), (0, "released"), "round {round}");
        if round == 3 {
            assert!(findings(&mut client, "id_flapping").is_empty(), "three moves are no flapping");
        }
    }
    assert_eq!(findings(&mut client, "id_flapping"), ["warning svc machine id 0"]);
    assert_eq!(moves(&mut client), 4);
    let flapping: i64 =
        client.query_one("SELECT flapping_ids FROM idgen_metrics WHERE service = 'svc'", &[]).unwrap().get(0);
    assert_eq!(flapping, 1);
    // Neither node claimed more than twice: no restart loop.
    assert!(findings(&mut client, "restart_loop").is_empty());
}
