//! The claim tiers in order, the 1-hour alert, exhaustion and what listeners get.

use idgen_cluster_tests::*;
use serde_json::Value;

#[test]
fn tiers_are_taken_in_order_then_a_full_registry_fails() {
    let db = TestDb::create("tiers");
    let mut admin = db.connect();
    fill_registry_except(&mut admin, "tiers", &[1000]); // one id never registered
    admin
        .batch_execute(
            "UPDATE system_nodes SET released_at = now() - interval '2 minutes' WHERE machine_id = 10;
             -- released 30 s ago: still cooling down, even though long idle
             UPDATE system_nodes SET released_at = now() - interval '30 seconds', last_seen = now() - interval '3 days' WHERE machine_id = 11;
             UPDATE system_nodes SET last_seen = now() - interval '8 days' WHERE machine_id = 20;
             UPDATE system_nodes SET last_seen = now() - interval '9 days' WHERE machine_id = 21;
             UPDATE system_nodes SET last_seen = now() - interval '2 days' WHERE machine_id = 30;
             UPDATE system_nodes SET last_seen = now() - interval '2 hours' WHERE machine_id = 40;
             UPDATE system_nodes SET last_seen = now() - interval '59 minutes' WHERE machine_id = 50;",
        )
        .unwrap();

    let mut listener = db.connect();
    listener.batch_execute("LISTEN idgen_alert").unwrap();
    let (mut claimant, notices) = db.connect_recording();
    // (The server log outlives test runs: read only what is written from here on.)
    let since = ServerLogSince::now(&mut admin);

    let mut outcomes = vec![];
    for k in 1..=6 {
        let c = claim(&mut claimant, "tiers", &format!("10.9.0.{k}"), 1).unwrap();
        outcomes.push((c.outcome.clone(), c.machine_id));
        // (Claims of free ids also warn that the service is nearly full: tests/cluster/tests/diagnostics.rs.)
        let warnings: Vec<_> = notices
            .take()
            .into_iter()
            .filter(|n| n.severity() == "WARNING" && !n.message().contains("% full ("))
            .collect();
        if c.outcome == "idle_1h" {
            assert_eq!(warnings.len(), 1, "the 1-hour tier warns");
            assert!(
                warnings[0].message().starts_with(
                    "idgen_claim: took back machine id 40 of service \"tiers\" from 192.0.2.40:10040, idle only 2h"
                ),
                "{}",
                warnings[0].message()
            );
        } else {
            assert!(warnings.is_empty(), "{} must not warn: {warnings:?}", c.outcome);
        }
    }
    let expected =
        [("new", 1000), ("released", 10), ("idle_7d", 21), ("idle_7d", 20), ("idle_1d", 30), ("idle_1h", 40)];
    assert_eq!(outcomes, expected.map(|(o, m)| (o.to_owned(), m)));

    // Nothing is left: 11 is cooling down, 50 is not idle for an hour.
    let err = claim(&mut claimant, "tiers", "10.9.0.7", 1).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "53000");
    assert_eq!(e.message(), "idgen_claim: no machine id is free for service \"tiers\"");
    let detail = e.detail().unwrap();
    assert!(detail.starts_with("1024 of 1024 machine ids (0 to 1023: the service's pool) are held"), "{detail}");
    assert!(
        detail.contains("The least recently seen holder is machine id 11 at 192.0.2.11:10011, idle 3d"),
        "{detail}"
    );
    assert!(e.hint().unwrap().starts_with("Someone must look"));
    let warned = notices.take();
    assert!(warned.iter().any(|n| n.severity() == "WARNING" && n.message().contains("are exhausted")), "{warned:?}");

    // Listeners hear the 1-hour take-back. The exhaustion's NOTIFY would die
    // with its failed transaction, so it is not sent: the server log has it.
    let mut heard: Vec<Value> =
        notifications_so_far(&mut listener).iter().map(|n| serde_json::from_str(n.payload()).unwrap()).collect();
    // The claim of the free id 1000 took the service above idgen.capacity_critical: announced once.
    // The claim of the released 10 left it there: no alert again.
    let nearly_full: Vec<&Value> = heard.iter().filter(|h| h["event"] == "capacity").collect();
    assert_eq!(nearly_full.iter().map(|h| h["machine_id"].as_i64().unwrap()).collect::<Vec<_>>(), [1000]);
    assert_eq!(nearly_full[0]["level"], "critical");
    heard.retain(|h| h["event"] != "capacity");
    assert_eq!(heard.len(), 1, "{heard:?}");
    // Any role can LISTEN: listeners hear what happened, not where the holders are.
    let idle = heard[0]["idle_seconds"].clone();
    assert_eq!(
        heard[0],
        serde_json::json!({"event": "idle_1h_takeover", "service": "tiers", "machine_id": 40, "idle_seconds": idle})
    );

    // The server log has the whole alert (written by the logging collector, a moment later).
    let line_of = |log: &str, event: &str| -> Option<String> {
        log.lines()
            .find(|l| {
                l.contains("idgen_alert {")
                    && l.contains(&format!("\"event\":\"{event}\""))
                    && l.contains("\"service\":\"tiers\"")
            })
            .map(str::to_owned)
    };
    // Read after every claim above returned: every line they logged is in it.
    let log = since.read(&mut admin, &db.name);
    // One line per alert: the client's WARNING is not logged again (it was, with the alert as its DETAIL).
    for event in ["idle_1h_takeover", "exhausted"] {
        let lines = log
            .lines()
            .filter(|l| {
                l.contains("idgen_alert {")
                    && l.contains(&format!("\"event\":\"{event}\""))
                    && l.contains("\"service\":\"tiers\"")
            })
            .count();
        assert_eq!(lines, 1, "the {event} alert's lines in the server log:\n{log}");
    }
    let logged = |event: &str| -> Value {
        let line = line_of(&log, event).unwrap_or_else(|| panic!("no {event} alert in the server log:\n{log}"));
        serde_json::from_str(&line[line.find("idgen_alert {").unwrap() + "idgen_alert ".len()..]).unwrap()
    };
    let alert = logged("idle_1h_takeover");
    assert_eq!(alert["holder"], serde_json::json!({"host": "10.9.0.6", "port": 1, "version": 2}));
    assert_eq!(alert["previous_holder"]["host"], "192.0.2.40");
    assert_eq!(alert["previous_holder"]["port"], 10040);
    assert_eq!(alert["previous_holder"]["version"], 1);
    // Idle since the row's last_seen: at least the two hours it was set back, and no more than has
    // passed since then by the time the alert is read.
    let idle = alert["idle_seconds"].as_i64().unwrap();
    assert_eq!(heard[0]["idle_seconds"], idle);
    let last_seen = alert["previous_holder"]["last_seen"].as_str().unwrap();
    let since: i64 = admin
        .query_one("SELECT floor(extract(epoch FROM clock_timestamp() - $1::text::timestamptz))::bigint", &[&last_seen])
        .unwrap()
        .get(0);
    assert!(idle >= 7200 && idle <= since, "idle {idle}, {since} s since last_seen");
    let exhausted = logged("exhausted");
    assert_eq!((exhausted["held"].as_i64(), exhausted["holder"]["host"].as_str()), (Some(1024), Some("10.9.0.7")));
}

#[test]
fn the_least_recently_seen_row_goes_first_within_a_tier() {
    let db = TestDb::create("tier_order");
    let mut admin = db.connect();
    fill_registry(&mut admin, "svc");
    admin
        .batch_execute(
            "UPDATE system_nodes SET last_seen = now() - interval '3 hours' WHERE machine_id = 700;
             UPDATE system_nodes SET last_seen = now() - interval '5 hours' WHERE machine_id = 800;
             UPDATE system_nodes SET last_seen = now() - interval '4 hours' WHERE machine_id = 5;",
        )
        .unwrap();
    let ids: Vec<i32> =
        (1..=3).map(|k| claim(&mut admin, "svc", &format!("10.0.0.{k}"), 1).unwrap().machine_id).collect();
    assert_eq!(ids, vec![800, 5, 700]);
}
