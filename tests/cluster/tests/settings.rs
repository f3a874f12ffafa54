//! Thresholds are one for the whole cluster (PGC_SIGHUP): they follow postgresql.conf or
//! ALTER SYSTEM, cannot differ per session, role or database, and fail closed when inconsistent.
//! These tests change them on the clock-step cluster, one at a time.

use idgen_cluster_tests::*;

#[test]
fn thresholds_follow_the_settings() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "thresholds");
    let mut admin = db.connect();
    fill_registry(&mut admin, "svc");
    admin
        .batch_execute("UPDATE system_nodes SET last_seen = now() - interval '20 minutes' WHERE machine_id = 3")
        .unwrap();
    let err = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "53000", "20 minutes idle is not enough at the default 1 hour");
    let _settings = SystemSettings::set(
        &cluster.dsn,
        &[("idgen.takeover_idle_1h", "15min"), ("idgen.lease_safety_margin", "1min")],
    );
    let mut admin = db.connect();
    let c = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!((c.machine_id, c.outcome.as_str()), (3, "idle_1h"));
    // The lease follows too: last heartbeat + 15 min - 1 min.
    let lease_until: String =
        admin.query_one("SELECT idgen_heartbeat('svc', 3::smallint, '10.0.0.1', 1, 2)::text", &[]).unwrap().get(0);
    // The heartbeat set last_seen: the lease runs from the write, whenever it landed.
    let lease: String = admin
        .query_one(
            "SELECT ($1::text::timestamptz - last_seen)::text FROM system_nodes WHERE machine_id = 3",
            &[&lease_until],
        )
        .unwrap()
        .get(0);
    assert_eq!(lease, "00:14:00");
}

#[test]
fn inconsistent_settings_stop_claims_and_heartbeats() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "bad_settings");
    let c = claim(&mut db.connect(), "svc", "10.0.0.1", 1).unwrap();
    let _settings = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "1h")]);
    let mut admin = db.connect();
    for err in [
        claim(&mut admin, "svc", "10.0.0.2", 1).unwrap_err(),
        heartbeat(&mut admin, "svc", c.machine_id, "10.0.0.1", 1, c.version).unwrap_err(),
    ] {
        let e = db_error(&err);
        assert_eq!((e.code().code(), e.message()), ("22023", "idgen settings are inconsistent"));
        assert!(
            e.detail().unwrap().starts_with("idgen.heartbeat_interval (1h) must be shorter than the lease"),
            "{:?}",
            e.detail()
        );
    }
    // The person on call hears it first from idgen_health(), and idgen_policy() says why.
    let finding = admin.query_one("SELECT severity, finding, detail FROM idgen_health()", &[]).unwrap();
    assert_eq!(
        (finding.get::<_, String>(0).as_str(), finding.get::<_, String>(1).as_str()),
        ("critical", "settings_inconsistent")
    );
    assert!(finding.get::<_, String>(2).contains("idgen.heartbeat_interval (1h) must be shorter than the lease"));
    let problem: Option<String> = admin.query_one("SELECT problem FROM idgen_policy()", &[]).unwrap().get(0);
    assert!(problem.is_some());
    // The views still show every row, by the thresholds as set.
    let state: String = admin.query_one("SELECT state FROM idgen_nodes", &[]).unwrap().get(0);
    assert_eq!(state, "live");
}

#[test]
fn thresholds_cannot_differ_per_session_role_or_database() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_scope");
    let mut admin = db.connect();
    admin.batch_execute("LOAD 'idgen'").unwrap();
    for attempt in [
        "SET idgen.takeover_idle_1h = '10min'".to_owned(),
        "ALTER ROLE postgres SET idgen.takeover_idle_1h = '10min'".to_owned(),
        format!("ALTER DATABASE {} SET idgen.release_cooldown = '0'", db.name),
    ] {
        let err = admin.batch_execute(&attempt).expect_err(&attempt);
        assert_eq!(sqlstate(&err), "55P02", "{attempt}: {err:?}");
    }
}

#[test]
fn a_lower_threshold_after_a_reload_waits_for_the_lease_as_granted() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "reload_lease");
    let mut admin = db.connect();
    fill_registry_except(&mut admin, "svc", &[0]);
    // The other ids are busy for good: their holders were granted terms of years.
    admin
        .batch_execute("UPDATE system_nodes SET lease_until = now() + interval '10 years', takeover_at = now() + interval '10 years'")
        .unwrap();
    // Granted under the defaults: a lease of 55 minutes, no take-back for an hour.
    let holder = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(holder.machine_id, 0);
    // The tiers come down to seconds, consistently, and the holder falls silent for 20 s (the
    // server's clock steps on, rather than the test waiting).
    let _settings = SystemSettings::set(
        &cluster.dsn,
        &[
            ("idgen.takeover_idle_7d", "40s"),
            ("idgen.takeover_idle_1d", "20s"),
            ("idgen.takeover_idle_1h", "10s"),
            ("idgen.lease_safety_margin", "2s"),
            ("idgen.heartbeat_interval", "1s"),
            ("idgen.release_cooldown", "1s"),
        ],
    );
    cluster.offset(20.0);
    let mut other = db.connect();
    let err = claim(&mut other, "svc", "10.0.0.2", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "53000", "the holder's lease was cut short by the reload: {err:?}");
    let state: String =
        other.query_one("SELECT state FROM idgen_nodes WHERE service = 'svc' AND machine_id = 0", &[]).unwrap().get(0);
    assert_eq!(state, "live", "the lease as granted");
    // Past the take-back time it was granted with, the tiers of the new settings apply.
    cluster.offset(3_620.0);
    let taken = claim(&mut other, "svc", "10.0.0.2", 1).unwrap();
    assert_eq!(taken.machine_id, 0);
    assert!(taken.outcome.starts_with("idle_"), "{taken:?}");
    cluster.set("+0");
}

#[test]
fn a_setting_set_and_reset_without_a_restart_breaks_no_trigger_or_view() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_reset");
    let mut admin = db.connect();
    claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    claim(&mut admin, "svc", "10.0.0.2", 1).unwrap();
    drop(SystemSettings::set(&cluster.dsn, &[("idgen.takeover_idle_1h", "30min"), ("idgen.history_retention", "30d")]));
    // A session that has not loaded idgen sees the reset settings as empty placeholders: the
    // triggers, the purge and the views read them through the library, never through SQL.
    let mut fresh = db.connect();
    for sql in [
        "DELETE FROM system_nodes WHERE host = '10.0.0.1'",
        "TRUNCATE system_nodes",
        "SELECT idgen_purge_history()",
        "SELECT * FROM idgen_nodes",
        "SELECT * FROM idgen_health()",
    ] {
        fresh.batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    let tombstones: i64 = fresh.query_one("SELECT count(*) FROM idgen_tombstones", &[]).unwrap().get(0);
    assert_eq!(tombstones, 2);
}
