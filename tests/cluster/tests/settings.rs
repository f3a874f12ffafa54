//! Thresholds are one for the whole cluster (PGC_SIGHUP): they follow postgresql.conf or
//! ALTER SYSTEM, cannot differ per session, role or database, and fail safe when inconsistent: the
//! last consistent ones stay in force.
//! These tests change them on the clock-step cluster, one at a time.

use idgen_cluster_tests::docs::{pages, sql_blocks};
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
fn contradicting_settings_keep_the_last_consistent_ones_in_force() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "bad_settings");
    // Claimed by the defaults: consistent, so kept as the last consistent ones.
    let c = claim(&mut db.connect(), "svc", "10.0.0.1", 1).unwrap();
    let _settings = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "1h")]);
    let mut admin = db.connect();
    // Claims and heartbeats go on, by the defaults: a lease of the 1-hour tier minus the 5-minute margin.
    claim(&mut admin, "svc", "10.0.0.2", 1).unwrap();
    let lease_until: String = admin
        .query_one("SELECT idgen_heartbeat('svc', $1, '10.0.0.1', 1, $2)::text", &[&c.machine_id, &c.version])
        .unwrap()
        .get(0);
    let lease: String = admin
        .query_one(
            "SELECT ($1::text::timestamptz - last_seen)::text FROM system_nodes WHERE machine_id = $2",
            &[&lease_until, &c.machine_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(lease, "00:55:00");
    // The person on call hears it first from idgen_health(), and idgen_policy() says why and what is in force.
    let finding = admin.query_one("SELECT severity, finding, detail, action FROM idgen_health()", &[]).unwrap();
    assert_eq!(
        (finding.get::<_, String>(0).as_str(), finding.get::<_, String>(1).as_str()),
        ("critical", "settings_inconsistent")
    );
    let detail: String = finding.get(2);
    assert!(detail.contains("idgen.heartbeat_interval (1h) must be shorter than the lease"), "{detail}");
    assert!(detail.contains("go on by the last consistent settings"), "{detail}");
    assert!(detail.contains("idgen.heartbeat_interval 5m, idgen.lease_safety_margin 5m"), "{detail}");
    assert!(finding.get::<_, String>(3).contains("then one SELECT pg_reload_conf()"));
    let (heartbeat_interval, problem): (String, Option<String>) = admin
        .query_one("SELECT heartbeat_interval::text, problem FROM idgen_policy()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(heartbeat_interval, "00:05:00", "idgen_policy() shows the settings in force");
    let problem = problem.expect("idgen_policy().problem names the inconsistency");
    assert!(
        problem.starts_with(
            "idgen settings are inconsistent. idgen.heartbeat_interval (1h) must be shorter than the lease"
        ),
        "{problem}"
    );
    // The views go by them too.
    let states: Vec<String> = admin
        .query("SELECT state FROM idgen_nodes ORDER BY machine_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(states, ["live", "live"]);
}

#[test]
fn a_server_that_never_ran_by_consistent_settings_refuses_claims_until_they_are() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_never_consistent");
    // The server starts with settings that contradict each other: nothing consistent is known.
    let settings = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "1h")]);
    cluster.restart();
    let mut admin = db.connect();
    for err in [
        claim(&mut admin, "svc", "10.0.0.2", 1).unwrap_err(),
        admin.query_one("SELECT idgen_next_id()", &[]).unwrap_err(),
    ] {
        let e = db_error(&err);
        assert_eq!((e.code().code(), e.message()), ("22023", "idgen settings are inconsistent"), "{e:?}");
        assert!(e.detail().unwrap().starts_with("idgen.heartbeat_interval (1h) must be shorter than the lease"));
    }
    let detail: String = admin
        .query_one("SELECT detail FROM idgen_health() WHERE finding = 'settings_inconsistent'", &[])
        .unwrap()
        .get(0);
    assert!(detail.contains("No machine id is claimed or renewed until they are corrected"), "{detail}");
    drop(settings);
    claim(&mut db.connect(), "svc", "10.0.0.2", 1).unwrap();
}

#[test]
fn a_session_behind_on_reloads_does_not_bring_older_settings_back() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_stale_session");
    let mut admin = db.connect();
    // What a new session's idgen_policy() says the margin is: what claims run by.
    let in_force = || -> String {
        db.connect().query_one("SELECT lease_safety_margin::text FROM idgen_policy()", &[]).unwrap().get(0)
    };
    // A session that read the defaults waits inside one statement: a reload reaches a backend only
    // between statements, and any role can make one last.
    let mut stale = db.connect();
    stale.batch_execute("SELECT * FROM idgen_policy()").unwrap();
    let stale_pid: i32 = stale.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    admin.batch_execute("SELECT pg_advisory_lock(7357)").unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(move || {
            stale.batch_execute("DO $$ BEGIN PERFORM pg_advisory_lock(7357); PERFORM * FROM idgen_policy(); END $$")
        });
        wait_for("the stale session to wait for the lock", PATIENCE, || {
            admin
                .query_one("SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)", &[&stale_pid])
                .unwrap()
                .get(0)
        });
        // A longer margin, consistent, is in force; then a reload contradicts it.
        let raised = SystemSettings::set(
            &cluster.dsn,
            &[("idgen.lease_safety_margin", "10min"), ("idgen.takeover_idle_1h", "2h")],
        );
        assert_eq!(in_force(), "00:10:00");
        let contradicting = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "3h")]);
        assert_eq!(in_force(), "00:10:00", "the last consistent settings stay in force");
        // The stale session runs by the defaults it still has, which are consistent: they are not kept
        // over the newer ones.
        admin.batch_execute("SELECT pg_advisory_unlock(7357)").unwrap();
        waiting.join().unwrap().unwrap();
        assert_eq!(in_force(), "00:10:00", "a session behind on reloads brought older settings back");
        drop(contradicting);
        drop(raised);
    });
}

/// Inserts keyed by `idgen_next_id()` on a new connection each, until `stop`: how many, and the
/// errors.
fn insert_on_new_connections(db: &TestDb, stop: &std::sync::atomic::AtomicBool) -> (usize, Vec<String>) {
    let (mut inserted, mut errors) = (0, Vec::new());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match db.connect().execute("INSERT INTO t (payload) VALUES (1)", &[]) {
            Ok(_) => inserted += 1,
            Err(e) => errors.push(format!("{e:?}")),
        }
    }
    (inserted, errors)
}

#[test]
fn thresholds_changed_one_at_a_time_in_either_order_stop_no_insert() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_one_at_a_time");
    let mut admin = db.connect();
    admin.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idgen_next_id(), payload int)").unwrap();
    // What a new session's idgen_policy() says the 1-hour tier is: what claims run by.
    let in_force = || -> String {
        db.connect().query_one("SELECT takeover_idle_1h::text FROM idgen_policy()", &[]).unwrap().get(0)
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let inserts = scope.spawn(|| insert_on_new_connections(&db, &stop));
        wait_for("the first inserts", PATIENCE, || admin.query_one("SELECT count(*) > 0 FROM t", &[]).unwrap().get(0));
        // The 1-hour tier first: it contradicts the 5-minute margin and heartbeat, and nothing changes.
        let tier = SystemSettings::set(&cluster.dsn, &[("idgen.takeover_idle_1h", "3min")]);
        assert_eq!(in_force(), "01:00:00", "the last consistent settings stay in force");
        let margin = SystemSettings::set(&cluster.dsn, &[("idgen.lease_safety_margin", "1min")]);
        assert_eq!(in_force(), "01:00:00");
        let heartbeat = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "1min")]);
        assert_eq!(in_force(), "00:03:00", "consistent again: in force as set");
        // Back, one at a time, in the order that contradicts at each step until the last.
        drop(margin);
        assert_eq!(in_force(), "00:03:00");
        drop(heartbeat);
        assert_eq!(in_force(), "00:03:00");
        drop(tier);
        assert_eq!(in_force(), "01:00:00");
        // And the other way: the smaller ones first, consistent at each step.
        let margin = SystemSettings::set(&cluster.dsn, &[("idgen.lease_safety_margin", "1min")]);
        let heartbeat = SystemSettings::set(&cluster.dsn, &[("idgen.heartbeat_interval", "1min")]);
        assert_eq!(in_force(), "01:00:00");
        let tier = SystemSettings::set(&cluster.dsn, &[("idgen.takeover_idle_1h", "3min")]);
        assert_eq!(in_force(), "00:03:00");
        drop((tier, heartbeat, margin));
        let before: i64 = admin.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
        wait_for("inserts after the last step", PATIENCE, || {
            admin.query_one("SELECT count(*) FROM t", &[]).unwrap().get::<_, i64>(0) > before
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (inserted, errors) = inserts.join().unwrap();
        assert!(errors.is_empty(), "{} of {} inserts failed: {errors:#?}", errors.len(), inserted + errors.len());
    });
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
fn a_threshold_set_for_a_role_or_a_database_is_reported_with_the_statement_that_resets_it() {
    // Without idgen loaded, Postgres takes ALTER ROLE/DATABASE ... SET idgen.takeover_idle_1h as a
    // placeholder and stores it; sessions refuse it only when idgen loads. idgen_health() says so.
    // The clock-step cluster's turn: one setting is for all roles of every database (ALTER ROLE ALL).
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_role_threshold");
    let role = "idgen_t_role_threshold";
    let mut admin = db.connect(); // a new session: idgen is not loaded in it unless preloaded
    ensure_login_role(&mut admin, role);
    let for_role = format!("ALTER ROLE {role} IN DATABASE {} SET idgen.takeover_idle_1h = '3min'", db.name);
    let for_database = format!("ALTER DATABASE {} SET idgen.release_cooldown = '0'", db.name);
    let for_all = "ALTER ROLE ALL SET idgen.takeover_idle_1d = '2d'".to_owned();
    if idgen_preloaded(&mut admin) {
        // Loaded everywhere: refused where it is set.
        for attempt in [&for_role, &for_database, &for_all] {
            assert_eq!(sqlstate(&admin.batch_execute(attempt).unwrap_err()), "55P02", "{attempt}");
        }
        return;
    }
    admin.batch_execute(&for_role).unwrap();
    admin.batch_execute(&for_database).unwrap();
    // A plain role reads it too (pg_db_role_setting is readable by all).
    let findings = |client: &mut postgres::Client| -> Vec<(String, String, String, String)> {
        client
            .query(
                "SELECT severity, subject, detail, action FROM idgen_health() WHERE finding = 'setting_ignored' ORDER BY subject",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    };
    let mut plain = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    // For all roles of every database: the finding names it, and its RESET ends it.
    admin.batch_execute(&for_all).unwrap();
    let all = findings(&mut plain);
    admin.batch_execute("ALTER ROLE ALL RESET idgen.takeover_idle_1d").unwrap();
    let all: Vec<_> = all.iter().filter(|f| f.1.contains("takeover_idle_1d")).collect();
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].1, "idgen.takeover_idle_1d (all roles)");
    assert!(all[0].3.starts_with("ALTER ROLE ALL RESET idgen.takeover_idle_1d;"), "{:?}", all[0].3);
    let seen = findings(&mut plain);
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let (severity, subject, detail, action) = &seen[0];
    assert_eq!(
        (severity.as_str(), subject.as_str()),
        ("warning", format!("idgen.release_cooldown (database {})", db.name).as_str())
    );
    assert!(
        detail.starts_with(&format!("database {} sets idgen.release_cooldown=0, a server-wide setting", db.name)),
        "{detail}"
    );
    assert!(action.starts_with(&format!("ALTER DATABASE {} RESET idgen.release_cooldown;", db.name)), "{action}");
    let (_, subject, _, action) = &seen[1];
    assert_eq!(subject, &format!("idgen.takeover_idle_1h (role {role} in database {})", db.name));
    // The role's sessions go on minting; the actions, run as written, end the findings: PostgreSQL
    // refuses the RESET in the session that read them (idgen is loaded there), a new one runs it.
    plain.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let mut reader = db.connect();
    assert_eq!(findings(&mut reader), seen);
    for (_, _, _, action) in &seen {
        let reset = action.split(';').next().unwrap();
        assert_eq!(sqlstate(&reader.batch_execute(reset).unwrap_err()), "55P02", "{reset}");
        assert!(action.contains(&format!("(psql -c '{reset}')")), "{action}");
        db.connect().batch_execute(reset).unwrap();
    }
    assert!(findings(&mut admin).is_empty());
    assert!(action.starts_with(&format!("ALTER ROLE {role} IN DATABASE {} RESET idgen.takeover_idle_1h;", db.name)));
}

/// The thresholds come down to seconds, consistently, after `holder` was granted machine id 0 of
/// "svc" under the defaults (a lease of 55 minutes, no take-back for an hour); every other id is
/// busy for good. Returns the holder and the lowered settings (restored when dropped).
fn holder_granted_before_a_lowering_reload(cluster: &ClockCluster, db: &TestDb) -> (Claimed, SystemSettings) {
    let mut admin = db.connect();
    fill_registry_except(&mut admin, "svc", &[0]);
    // The other ids are busy for good: their holders were granted terms of years.
    admin
        .batch_execute("UPDATE system_nodes SET lease_until = now() + interval '10 years', takeover_at = now() + interval '10 years'")
        .unwrap();
    let holder = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(holder.machine_id, 0);
    let settings = SystemSettings::set(
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
    (holder, settings)
}

/// After the holder fell silent for 20 s (the server's clock steps on, rather than the test
/// waiting): its id is not taken back before the take-back time it was granted, and is after.
fn the_grant_stands_until_it_ends(cluster: &ClockCluster, db: &TestDb) {
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
fn a_lower_threshold_after_a_reload_waits_for_the_lease_as_granted() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "reload_lease");
    let (_holder, _settings) = holder_granted_before_a_lowering_reload(&cluster, &db);
    the_grant_stands_until_it_ends(&cluster, &db);
}

#[test]
fn a_heartbeat_after_a_lowering_reload_keeps_the_grant_its_node_may_still_hold() {
    // The heartbeat commits, but its answer (the shorter lease) may never reach the node: lost
    // after the commit, or a call the node timed out that committed anyway. The node then holds
    // the grant it last heard of, so the registry keeps it until it ends.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "reload_heartbeat");
    let (holder, _settings) = holder_granted_before_a_lowering_reload(&cluster, &db);
    let mut node = db.connect();
    let grant = "SELECT lease_until, takeover_at FROM system_nodes WHERE service = 'svc' AND machine_id = 0";
    let before = node.query_one(grant, &[]).unwrap();
    heartbeat(&mut node, "svc", 0, "10.0.0.1", 1, holder.version).unwrap();
    let after = node.query_one(grant, &[]).unwrap();
    for column in 0..2 {
        let (was, is): (std::time::SystemTime, std::time::SystemTime) = (before.get(column), after.get(column));
        assert!(is >= was, "column {column} of the grant went back from {was:?} to {is:?}");
    }
    the_grant_stands_until_it_ends(&cluster, &db);
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

#[test]
fn a_value_that_can_be_checked_alone_is_refused_when_it_is_set() {
    // The scratch cluster: nothing here is accepted, so nothing changes for other tests.
    let db = TestDb::create("settings_refused");
    let mut admin = db.connect();
    admin.batch_execute("LOAD 'idgen'").unwrap();
    for (statement, why) in [
        ("ALTER SYSTEM SET idgen.node_host = 'db1.internal'", "is not an IP address"),
        ("ALTER SYSTEM SET idgen.node_host = '255.255.255.255'", "is the broadcast address"),
        ("ALTER SYSTEM SET idgen.node_host = '0.0.0.0'", "is an unspecified address"),
        ("SET idgen.node_host = 'ff02::1'", "is a multicast address"),
        ("ALTER SYSTEM SET idgen.machine_id_range = '9-2'", "idgen.machine_id_range"),
        ("SET idgen.service = 'orders '", "must not begin or end with white space"),
        ("ALTER ROLE postgres SET idgen.service = ' orders'", "must not begin or end with white space"),
    ] {
        let err = admin.batch_execute(statement).expect_err(statement);
        let e = db_error(&err);
        assert_eq!(e.code().code(), "22023", "{statement}: {e:?}");
        assert!(e.message().starts_with("invalid value for parameter"), "{statement}: {e:?}");
        assert!(e.detail().is_some_and(|d| d.contains(why)), "{statement}: {e:?}");
    }
    // Nothing was written: the settings stay as they were, and idgen mints.
    let auto_conf: i64 = admin
        .query_one("SELECT count(*) FROM pg_file_settings WHERE name LIKE 'idgen.%' AND sourcefile LIKE '%postgresql.auto.conf'", &[])
        .unwrap()
        .get(0);
    assert_eq!(auto_conf, 0);
    admin.batch_execute("SET idgen.node_host = '10.0.0.5'; SET idgen.service = ''").unwrap();
    admin.query_one("SELECT idgen_next_id()", &[]).unwrap();
}

#[test]
fn contradicting_thresholds_warn_at_each_sessions_next_use_after_the_reload() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_contradict");
    let (mut holder, notices) = db.connect_recording();
    holder.query_one("SELECT idgen_next_id()", &[]).unwrap();
    assert!(notices.take().is_empty());
    // Longer than the 1-day tier: each value alone is in range, together they contradict.
    let _settings = SystemSettings::set(&cluster.dsn, &[("idgen.takeover_idle_1h", "2d")]);
    // wait_for saw a new session with the value; this one has it at its next statement.
    holder.batch_execute("SELECT 1").unwrap();
    // A session holding a lease still mints inside it, and hears what its renewals run by.
    holder.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let warned = notices.take();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].code().code(), "01000");
    assert!(warned[0].message().contains("settings contradict each other"), "{:?}", warned[0]);
    assert!(warned[0].detail().unwrap().contains("idgen.takeover_idle_1h (2d)"), "{:?}", warned[0]);
    holder.query_one("SELECT idgen_next_id()", &[]).unwrap();
    assert!(notices.take().is_empty(), "once per change");
    // A new session is warned at its first use, and mints by the last consistent settings.
    let (mut fresh, fresh_notices) = db.connect_recording();
    fresh.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let warned = fresh_notices.take();
    assert!(
        warned.iter().any(|n| n.message().contains("settings contradict each other; claims and renewals go on")),
        "{warned:?}"
    );
    let finding: String =
        fresh.query_one("SELECT finding FROM idgen_health() WHERE severity = 'critical'", &[]).unwrap().get(0);
    assert_eq!(finding, "settings_inconsistent");
}

/// The `sql` blocks of README.md and docs/ marked `<!-- alter-system -->`: every block that sets
/// idgen's settings with ALTER SYSTEM (tests/cluster/tests/docs_examples.rs checks that each has
/// the marker).
fn documented_sql_blocks() -> Vec<(String, String)> {
    pages()
        .iter()
        .flat_map(sql_blocks)
        .filter(|b| b.marker.as_deref() == Some("alter-system"))
        .map(|b| (b.place, b.sql))
        .collect()
}

#[test]
fn every_alter_system_example_in_the_docs_works_as_written_in_a_fresh_session() {
    // Before PostgreSQL 17, ALTER SYSTEM knows idgen's settings only in a session that loaded
    // idgen: every example says LOAD 'idgen' first, and runs here in a session that has not.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_docs");
    let examples: Vec<_> =
        documented_sql_blocks().into_iter().filter(|(_, sql)| sql.contains("ALTER SYSTEM SET idgen.")).collect();
    assert!(examples.len() >= 3, "{examples:?}");
    for (file, sql) in examples {
        let names: Vec<String> = sql
            .split("ALTER SYSTEM SET ")
            .skip(1)
            .map(|rest| rest.split([' ', '=']).next().unwrap().to_owned())
            .collect();
        let _reset = SystemSettings::adopt(&cluster.dsn, &names);
        let mut fresh = db.connect();
        // One statement at a time, as psql sends them (ALTER SYSTEM runs in no transaction block).
        let code: String = sql.lines().map(|line| line.split("--").next().unwrap()).collect::<Vec<_>>().join("\n");
        for statement in code.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            fresh.batch_execute(statement).unwrap_or_else(|e| panic!("{file}:\n{sql}\n{statement}: {e:?}"));
        }
    }
}

/// Appends `line` to the server's postgresql.auto.conf as an editor would (ALTER SYSTEM would check
/// it once idgen is loaded); its other lines, shared_preload_libraries among them, stay. The server
/// writes the file (it owns the data directory), read whole before COPY truncates it, and runs no
/// program: on the clock-step cluster a program starts under libfaketime, which fails in a child
/// once the shared memory of the faketime that started the server is gone (`cat` exited 1).
fn append_to_the_files(admin: &mut postgres::Client, line: &str) {
    admin.execute("SELECT set_config('idgen_test.line', $1, false)", &[&line]).unwrap();
    admin
        .batch_execute(
            "DO $$
             DECLARE
                 path text := current_setting('data_directory') || '/postgresql.auto.conf';
                 content text := pg_read_file(path);
             BEGIN
                 EXECUTE format(
                     'COPY (SELECT l FROM (SELECT l, n FROM regexp_split_to_table(%L, E''\n'') WITH ORDINALITY AS t(l, n)
                                           WHERE l <> '''' UNION ALL SELECT %L, 2147483647) x ORDER BY n) TO %L',
                     content, current_setting('idgen_test.line'), path);
             END $$",
        )
        .unwrap();
}

#[test]
fn a_configured_value_the_server_refused_stops_claims_rather_than_falling_back_to_the_default() {
    // Set where idgen is not loaded (postgresql.conf, ALTER DATABASE/ROLE ... SET before LOAD),
    // a bad value is only refused when a backend loads idgen: Postgres then warns and keeps the
    // default, here the database's name as the service: another id space than configured.
    let db = TestDb::create("settings_configured_refused");
    let mut admin = db.connect();
    if idgen_preloaded(&mut admin) {
        // Loaded everywhere: the bad value is refused where it is set, and nothing is stored.
        let err =
            admin.batch_execute(&format!("ALTER DATABASE {} SET idgen.service = ' orders'", db.name)).unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{err:?}");
        let stored: i64 = admin
            .query_one("SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = $1", &[&db.name])
            .unwrap()
            .get(0);
        assert_eq!(stored, 0);
        return;
    }
    admin.batch_execute(&format!("ALTER DATABASE {} SET idgen.service = ' orders'", db.name)).unwrap();
    let (mut session, notices) = db.connect_recording();
    let err = session.query_one("SELECT idgen_next_id()", &[]).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "22023", "{e:?}");
    assert!(e.message().contains("the configured value of setting \"idgen.service\" was refused"), "{e:?}");
    assert!(e.detail().unwrap().contains("\" orders\""), "{e:?}");
    assert!(notices.take().iter().any(|n| n.message().starts_with("invalid value for parameter \"idgen.service\"")));
    let problem: Option<String> = session.query_one("SELECT problem FROM idgen_policy()", &[]).unwrap().get(0);
    assert!(problem.is_some_and(|p| p.contains("idgen.service")));
    let nothing: i64 = admin.query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(nothing, 0, "no machine id was claimed under the default");
    // Corrected (and the service defined), a new session mints.
    define_service(&mut admin, "orders");
    admin.batch_execute(&format!("ALTER DATABASE {} SET idgen.service = 'orders'", db.name)).unwrap();
    let mut corrected = db.connect();
    corrected.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let service: String = admin.query_one("SELECT service::text FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(service, "orders");
}

#[test]
fn a_range_refused_in_the_configuration_file_stops_claims_rather_than_handing_out_every_id() {
    // A DBA's typo in the configuration file: nothing checks it until the backends read it, at
    // the reload or when they load idgen, and refuse it; they would keep the default range, every
    // id of every pool, and a shard would collide with the others. (ALTER SYSTEM checks the value
    // once idgen is loaded, and before PostgreSQL 17 refuses idgen's settings before.)
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_file_refused");
    let names = ["idgen.machine_id_range".to_owned()];
    let reset = SystemSettings::adopt(&cluster.dsn, &names);
    let mut admin = connect_to(&cluster.dsn, "postgres");
    append_to_the_files(&mut admin, "idgen.machine_id_range = '512-65536'");
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_for("a new session to refuse the range", PATIENCE, || {
        let err = db.connect().query_one("SELECT idgen_next_id()", &[]).err();
        err.is_some_and(|e| db_error(&e).message().contains("\"idgen.machine_id_range\" was refused"))
    });
    let held: i64 = db.connect().query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(held, 0, "no id was claimed under the default range");
    // The line removed and the files reloaded, new sessions claim again (with idgen preloaded they
    // inherit the postmaster's refusal of the line, which no check hook sees removed).
    drop(reset);
    let mut after = db.connect();
    let err = after.query_one("SELECT idgen_next_id()", &[]).err();
    assert!(err.is_none(), "a new session still refuses after the line was removed: {err:?}");
}

#[test]
fn a_range_refused_in_the_configuration_file_at_the_servers_start_stops_claims_too() {
    // The files are read at the server's start before a preloaded idgen defines its settings:
    // then its refusal of the file's value must stand as a reload's does, until the line goes.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_file_refused_at_start");
    let names = ["idgen.machine_id_range".to_owned()];
    let reset = SystemSettings::adopt(&cluster.dsn, &names);
    append_to_the_files(&mut connect_to(&cluster.dsn, "postgres"), "idgen.machine_id_range = '512-1023x'");
    cluster.restart();
    let err = db.connect().query_one("SELECT idgen_next_id()", &[]).err();
    let err = err.unwrap_or_else(|| panic!("a new session claimed under the default range after a start"));
    assert!(db_error(&err).message().contains("\"idgen.machine_id_range\" was refused"), "{err:?}");
    let held: i64 = db.connect().query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(held, 0, "no id was claimed under the default range");
    drop(reset);
    let err = db.connect().query_one("SELECT idgen_next_id()", &[]).err();
    assert!(err.is_none(), "a new session still refuses after the line was removed: {err:?}");
}

#[test]
fn a_cluster_wide_value_in_the_connections_options_stops_claims_rather_than_being_dropped_for_the_default() {
    // Before idgen is loaded, a connection's options set placeholders; when idgen loads, Postgres
    // refuses them for cluster-wide settings ("cannot be changed now") and keeps the compiled-in
    // default, not the file's value: a shard's range, the standby requirement, gone for that
    // backend. Its claims refuse instead.
    let db = TestDb::create("settings_options");
    let role = "idgen_t_options_app";
    ensure_login_role(&mut db.connect(), role);
    let preloaded = idgen_preloaded(&mut db.connect());
    for option in ["idgen.machine_id_range=0-9", "idgen.require_synchronous_standby=on", "idgen.node_host=10.9.9.9"] {
        let dsn = format!(
            "{} user={role} options='-c statement_timeout=300s -c {option}'",
            session_dsn(&base_dsn(), &db.name)
        );
        if preloaded {
            // Loaded from the start: Postgres refuses the connection itself.
            let err = postgres::Client::connect(&dsn, postgres::NoTls).err();
            let err = err.unwrap_or_else(|| panic!("{option}: the connection was accepted"));
            assert!(["55P02", "42501"].contains(&sqlstate(&err)), "{option}: {err:?}");
            continue;
        }
        let mut session = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
        let err = session.query_one("SELECT idgen_next_id()", &[]).unwrap_err();
        let e = db_error(&err);
        assert_eq!(e.code().code(), "22023", "{option}: {e:?}");
        assert!(e.message().contains("was refused"), "{option}: {e:?}");
    }
    let held: i64 = db.connect().query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(held, 0);
}

#[test]
fn a_refused_role_value_stays_refused_across_a_reload_of_the_files_own_value() {
    // The file sets idgen.service; a role's value, refused when idgen loads, outranks it. A reload
    // checks the file's value again, which passes: the role's refusal must stand.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_role_over_file");
    let _file = SystemSettings::set(&cluster.dsn, &[("idgen.service", "main")]);
    let role = "idgen_t_role_over_file";
    let mut admin = connect_to(&cluster.dsn, "postgres");
    ensure_login_role(&mut admin, role);
    let set = format!("ALTER ROLE {role} IN DATABASE {} SET idgen.service = 'orders '", db.name);
    if idgen_preloaded(&mut admin) {
        // Loaded everywhere: the bad value is refused where it is set.
        assert_eq!(sqlstate(&admin.batch_execute(&set).unwrap_err()), "22023");
        return;
    }
    admin.batch_execute(&set).unwrap();
    let mut session = postgres::Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    let refused = |session: &mut postgres::Client| {
        let err = session.query_one("SELECT idgen_next_id()", &[]).unwrap_err();
        assert!(db_error(&err).message().contains("\"idgen.service\" was refused"), "{err:?}");
    };
    refused(&mut session);
    let loaded: String = session.query_one("SELECT pg_conf_load_time()::text", &[]).unwrap().get(0);
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_for("the session to reload its configuration", PATIENCE, || {
        session.query_one("SELECT pg_conf_load_time() > $1::text::timestamptz", &[&loaded]).unwrap().get(0)
    });
    refused(&mut session);
    admin.batch_execute(&format!("ALTER ROLE {role} IN DATABASE {} RESET idgen.service", db.name)).unwrap();
}

#[test]
fn a_reload_read_inside_an_open_transaction_refuses_a_bad_file_value_too() {
    // ALTER SYSTEM checks its value as a file's inside its own transaction, and is no configured
    // value; a reload that a session handles while idle in a transaction block is one.
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "settings_reload_in_transaction");
    let names = ["idgen.node_host".to_owned()];
    let _reset = SystemSettings::adopt(&cluster.dsn, &names);
    let mut session = db.connect();
    session.query_one("SELECT idgen_next_id()", &[]).unwrap();
    session.batch_execute("BEGIN").unwrap();
    let loaded: String = session.query_one("SELECT pg_conf_load_time()::text", &[]).unwrap().get(0);
    let mut admin = connect_to(&cluster.dsn, "postgres");
    append_to_the_files(&mut admin, "idgen.node_host = '10.0.0.5/24'");
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_for("the session to reload its configuration", PATIENCE, || {
        session.query_one("SELECT pg_conf_load_time() > $1::text::timestamptz", &[&loaded]).unwrap().get(0)
    });
    session.batch_execute("COMMIT").unwrap();
    // Its next renewal or claim refuses: a new service needs one now.
    let err = session.query_one("SELECT idgen_next_id('reload_probe')", &[]).unwrap_err();
    assert!(db_error(&err).message().contains("\"idgen.node_host\" was refused"), "{err:?}");
}
