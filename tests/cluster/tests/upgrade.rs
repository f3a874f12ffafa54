//! `ALTER EXTENSION idgen UPDATE` from earlier versions (their install scripts are in
//! tests/upgrade; scripts/clusters.sh installs them): the registry keeps its rows,
//! gains watermarks from what 0.1.0 guaranteed and leases from today's settings, keeps
//! the grants DBAs gave, and ends up exactly like a fresh install. Until the update,
//! this library refuses to work against the older objects, and says what to run.

use idgen_cluster_tests::*;
use postgres::Client;

/// The version `ALTER EXTENSION idgen UPDATE` reaches: the library's (Cargo.toml).
const LATEST: &str = "0.10.2";

#[test]
fn the_latest_version_here_is_the_librarys() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml")).unwrap();
    let version = manifest.lines().find_map(|line| line.strip_prefix("version = ")).expect("a version line");
    assert_eq!(version.trim_matches('"'), LATEST, "Cargo.toml's version is not LATEST of this file");
}

/// Everything a DBA could see of the extension's objects, one line each, sorted.
const FINGERPRINT: &str = "
WITH ext AS (SELECT oid, extconfig FROM pg_extension WHERE extname = 'idgen'),
member AS (SELECT d.classid, d.objid, d.objsubid FROM pg_depend d, ext WHERE d.refobjid = ext.oid AND d.deptype = 'e')
SELECT string_agg(line, E'\\n' ORDER BY line) FROM (
  SELECT 'member ' || pg_describe_object(m.classid, m.objid, m.objsubid) || ' -- '
         || coalesce(obj_description(m.objid, m.classid::regclass::text), '') AS line FROM member m
  UNION ALL SELECT 'function ' || pg_get_functiondef(m.objid) FROM member m
    JOIN pg_proc p ON p.oid = m.objid AND m.classid = 'pg_proc'::regclass
  UNION ALL SELECT 'acl ' || p.oid::regprocedure::text || ' '
         || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), 'default') FROM member m
    JOIN pg_proc p ON p.oid = m.objid AND m.classid = 'pg_proc'::regclass
  UNION ALL SELECT format('column %s.%s %s %s %s %s -- %s', c.relname,
         -- The column's place among the live ones (what SELECT * shows): an update's dropped columns keep their numbers.
         (SELECT count(*) FROM pg_attribute b WHERE b.attrelid = c.oid AND b.attnum > 0 AND NOT b.attisdropped AND b.attnum <= a.attnum),
         a.attname, format_type(a.atttypid, a.atttypmod),
         a.attnotnull, coalesce(pg_get_expr(ad.adbin, ad.adrelid), ''), coalesce(col_description(c.oid, a.attnum), ''))
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    WHERE c.oid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass)
  UNION ALL SELECT 'index ' || pg_get_indexdef(indexrelid) || ' -- ' || coalesce(obj_description(indexrelid, 'pg_class'), '')
    FROM pg_index WHERE indrelid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass)
  UNION ALL SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
    WHERE conrelid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass)
  UNION ALL SELECT 'trigger ' || pg_get_triggerdef(oid) || ' ' || tgenabled::text || ' -- ' || coalesce(obj_description(oid, 'pg_trigger'), '')
    FROM pg_trigger WHERE tgrelid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass) AND NOT tgisinternal
  UNION ALL SELECT 'table ' || relname || ' ' || relkind::text || ' ' || coalesce(relacl::text, 'default') || ' ' || coalesce(array_to_string(reloptions, ','), '') FROM pg_class
    WHERE oid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass)
  UNION ALL SELECT 'view ' || relname || ' ' || pg_get_viewdef(oid) FROM pg_class
    WHERE oid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass) AND relkind = 'v'
  UNION ALL SELECT 'dumped ' || (SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text) FROM unnest(extconfig) c) FROM ext
  -- idgen_health()'s findings are rows (0.10.2).
  UNION ALL SELECT format('health finding %s %s %s', finding, severity, reported_by) FROM idgen_private.health_findings
) lines";

fn fingerprint(client: &mut Client) -> String {
    client.query_one(FINGERPRINT, &[]).unwrap().get(0)
}

fn upgraded(name: &str) -> (TestDb, Client) {
    let db = TestDb::empty_on(&base_dsn(), name);
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.1.0'").unwrap();
    (db, client)
}

#[test]
fn an_updated_extension_is_exactly_a_fresh_install() {
    let (_db, mut old) = upgraded("upgrade_shape");
    old.batch_execute("ALTER EXTENSION idgen UPDATE TO '0.2.0'; ALTER EXTENSION idgen UPDATE").unwrap();
    let fresh = TestDb::create("upgrade_fresh");
    let (updated, installed) = (fingerprint(&mut old), fingerprint(&mut fresh.connect()));
    let differences: Vec<String> = {
        let (a, b): (Vec<&str>, Vec<&str>) = (updated.lines().collect(), installed.lines().collect());
        a.iter()
            .filter(|l| !b.contains(l))
            .map(|l| format!("only after UPDATE: {l}"))
            .chain(b.iter().filter(|l| !a.contains(l)).map(|l| format!("only in a fresh install: {l}")))
            .collect()
    };
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn an_update_keeps_rows_and_grants_and_gives_every_row_a_watermark() {
    let (_db, mut client) = upgraded("upgrade_rows");
    client
        .batch_execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_t_upgrade_svc') THEN CREATE ROLE idgen_t_upgrade_svc; END IF; END $$;
             GRANT EXECUTE ON FUNCTION idgen_claim(text, inet, integer),
                                       idgen_heartbeat(text, smallint, inet, integer, integer),
                                       idgen_release(text, smallint, inet, integer, integer) TO idgen_t_upgrade_svc;",
        )
        .unwrap();
    // A service node that holds its id, one that released it, and a backend's lease, as 0.1.0 left them.
    // (0.1.0's functions would run this build's library, so the rows are written directly.)
    client
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version, backend_slot, last_seen, released_at) VALUES
                 ('svc', 0, '10.0.0.1', 8080, 1, NULL, now() - interval '1 minute', NULL),
                 ('svc', 1, '10.0.0.2', 8080, 2, NULL, now() - interval '2 minutes', now() - interval '2 minutes'),
                 ('db', 0, '127.0.0.1', 5432, 4, 3, now() - interval '10 minutes', NULL)",
        )
        .unwrap();
    let before: Vec<(String, i32, i64)> = client
        .query("SELECT service, machine_id::int, version::bigint FROM system_nodes ORDER BY 1, 2", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();

    client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();

    let version: String =
        client.query_one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(version, LATEST);
    let after: Vec<(String, i32, i64)> = client
        .query("SELECT service, machine_id::int, version::bigint FROM system_nodes ORDER BY 1, 2", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(after, before, "every row and version is kept");
    // Watermarks from what 0.1.0 guaranteed: a backend issued until its next check, a released
    // id was stamped before its release (within the lease margin), a held service is bounded by its lease.
    let watermarks: Vec<String> = client
        .query(
            "SELECT service || '/' || machine_id || ' ' || CASE
                 WHEN issued_until = last_seen + interval '5 minutes' AND backend_slot IS NOT NULL THEN 'last_seen + 5min'
                 WHEN issued_until = released_at + interval '5 minutes' THEN 'released_at + 5min'
                 WHEN issued_until = last_seen THEN 'last_seen'
                 ELSE issued_until::text END
             FROM system_nodes ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(watermarks, ["db/0 last_seen + 5min", "svc/0 last_seen", "svc/1 released_at + 5min"]);
    // The grants a DBA gave survive the new signatures. Since 0.4.0 every role may call the
    // functions, and the service grants (idgen_grant_service) decide.
    let grants: String = client
        .query_one(
            "SELECT format('%s %s %s %s',
                 has_function_privilege('idgen_t_upgrade_svc', 'idgen_claim(text, inet, integer)', 'EXECUTE'),
                 has_function_privilege('idgen_t_upgrade_svc', 'idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint)', 'EXECUTE'),
                 has_function_privilege('idgen_t_upgrade_svc', 'idgen_release(text, integer, inet, integer, bigint, timestamptz)', 'EXECUTE'),
                 has_function_privilege('public', 'idgen_claim(text, inet, integer)', 'EXECUTE'))",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(grants, "t t t t");
    // The node that released its id comes back to it, after its watermark, and heartbeats with
    // the new signature. (The one still holding its row gets another id: its row may belong
    // to a live twin.)
    let row = client
        .query_one(
            "SELECT machine_id, version, outcome,
                    not_before >= (SELECT date_trunc('milliseconds', issued_until) FROM system_nodes
                                    WHERE service = 'svc' AND machine_id = 1)
             FROM idgen_claim('svc', '10.0.0.2', 8080)",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, String>(2), row.get::<_, bool>(3)), (1, "reused".to_owned(), true));
    let version: i64 = row.get(1);
    client.query_one("SELECT idgen_heartbeat('svc', 1::smallint, '10.0.0.2', 8080, $1, now())", &[&version]).unwrap();
    let leases: i64 = client
        .query_one("SELECT count(*) FROM system_nodes WHERE lease_until IS NOT NULL AND takeover_at IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert_eq!(leases, 3, "every row records the lease of the settings at the update");
    // The history starts at the update, with the holders of the time: older IDs are said to be
    // from before it.
    let finding: String = client
        .query_one("SELECT finding FROM idgen_explain(idgen_min_id(now() - interval '1 hour'), 'db')", &[])
        .unwrap()
        .get(0);
    assert_eq!(finding, "before_history");
    client.batch_execute("DROP OWNED BY idgen_t_upgrade_svc").unwrap();
}

#[test]
fn this_library_refuses_an_older_installation_until_it_is_updated() {
    // Between installing a new build and ALTER EXTENSION UPDATE, the new library meets the old
    // objects: it refuses to claim or mint, and says what to run.
    let db = TestDb::empty_on(&base_dsn(), "upgrade_window");
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.3.0'").unwrap();
    for sql in
        ["SELECT * FROM idgen_claim('svc', '10.0.0.1', 1)", "SELECT idgen_next_id()", "SELECT idgen_next_id('svc')"]
    {
        let err = client.batch_execute(sql).expect_err(sql);
        let db_err = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err:?}"));
        assert_eq!(sqlstate(&err), "55000", "{sql}: {err:?}");
        assert!(db_err.message().contains("0.3.0"), "{sql}: {}", db_err.message());
        assert!(db_err.hint().is_some_and(|h| h.contains("ALTER EXTENSION idgen UPDATE")), "{sql}: {db_err:?}");
    }
    client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();
    let mut fresh = db.connect();
    let first = claim(&mut fresh, "svc", "10.0.0.1", 1).unwrap();
    fresh.query_one("SELECT idgen_next_id()", &[]).unwrap();
    assert_eq!(first.outcome, "new");
    let events: Vec<String> = fresh
        .query("SELECT holder FROM idgen_events WHERE service = 'svc'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events, ["10.0.0.1:1"], "the history starts with the update");
}

#[test]
fn an_update_from_0_3_0_waits_for_its_floor_and_keeps_the_rows() {
    let db = TestDb::empty_on(&base_dsn(), "upgrade_floor");
    let mut client = db.connect();
    client
        .batch_execute(
            "CREATE EXTENSION idgen VERSION '0.3.0';
             INSERT INTO system_nodes (service, machine_id, host, port, version, issued_until)
                  VALUES ('svc', 3, '10.0.0.3', 80, 5, now() + interval '1 minute');
             UPDATE idgen_registry SET floor = now() + interval '1 hour';",
        )
        .unwrap();
    // 0.3.0's floor held back every id after a hand delete; 0.4.0 keeps such bounds per id and
    // cannot tell which ids the floor was for.
    let err = client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    assert!(err.as_db_error().unwrap().hint().unwrap().contains("Retry"), "{err:?}");
    client
        .batch_execute("UPDATE idgen_registry SET floor = now() - interval '1 second'; ALTER EXTENSION idgen UPDATE")
        .unwrap();
    let row = client.query_one("SELECT version, issued_until > now() FROM system_nodes", &[]).unwrap();
    let (version, ahead): (i64, bool) = (row.get(0), row.get(1));
    assert_eq!((version, ahead), (5, true));
    let terms: (String, String) = client
        .query_one("SELECT (lease_until - last_seen)::text, (takeover_at - last_seen)::text FROM system_nodes", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(terms, ("00:55:00".to_owned(), "01:00:00".to_owned()));
    // The node gets another id: its row may still be stamped by a live holder.
    let c = claim(&mut db.connect(), "svc", "10.0.0.3", 80).unwrap();
    assert_ne!(c.machine_id, 3);
}

/// A value of each argument type idgen's functions take, for calling every one of them.
const SAMPLE_ARGUMENT: &str = "CASE t.typname
     WHEN 'text' THEN quote_literal('svc') WHEN 'varchar' THEN quote_literal('svc')
     WHEN 'inet' THEN quote_literal('10.0.0.1') || '::inet' WHEN 'int4' THEN '1' WHEN 'int2' THEN '1::smallint'
     WHEN 'int8' THEN '1::bigint' WHEN 'timestamptz' THEN 'now()' WHEN 'interval' THEN quote_literal('1 day') || '::interval'
     WHEN 'bool' THEN 'true' ELSE 'NULL::' || format_type(t.oid, NULL) END";

/// Every function of the installed extension that SQL can call, with sample arguments.
fn calls_of_every_function(client: &mut Client) -> Vec<String> {
    let sql = format!(
        "SELECT format('SELECT %s(%s)', p.oid::regproc, coalesce(string_agg({SAMPLE_ARGUMENT}, ', ' ORDER BY a.n), ''))
           FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'
           JOIN pg_proc p ON p.oid = d.objid AND d.classid = 'pg_proc'::regclass
           LEFT JOIN LATERAL unnest(p.proargtypes) WITH ORDINALITY a(type, n) ON true
           LEFT JOIN pg_type t ON t.oid = a.type
          WHERE d.deptype = 'e' AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)
          GROUP BY p.oid ORDER BY 1"
    );
    client.query(&sql, &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

#[test]
fn every_function_of_an_older_installation_answers_clearly_and_none_crashes() {
    // Between installing a new build and ALTER EXTENSION UPDATE, the new library serves the old
    // version's functions, whatever their signatures were. 0.4.0's to 0.10.1's keep working (this
    // library runs against their objects); older ones refuse with 55000 and the hint. Never a
    // crash, an internal error (XX000) or a missing relation (42P01).
    for version in
        ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.10.1"]
    {
        let runs_against =
            ["0.4.0", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.10.1"].contains(&version);
        let db = TestDb::empty_on(&base_dsn(), &format!("upgrade_calls_{}", version.replace('.', "_")));
        let mut client = db.connect();
        client.batch_execute(&format!("CREATE EXTENSION idgen VERSION '{version}'")).unwrap();
        let calls = calls_of_every_function(&mut client);
        assert!(calls.len() >= 8, "{version}: {calls:?}");
        // Rows removed by hand run the extension's triggers, where the version has them.
        let statements = calls.iter().map(String::as_str).chain(["DELETE FROM system_nodes", "TRUNCATE system_nodes"]);
        let mut refused = Vec::new();
        let mut unclear = Vec::new();
        for sql in statements {
            let mut probe = db.connect();
            match probe.batch_execute(sql) {
                Ok(()) => {}
                Err(err) => {
                    let db_err =
                        err.as_db_error().unwrap_or_else(|| panic!("{version} {sql}: the backend died: {err:?}"));
                    let code = db_err.code().code();
                    if ["XX000", "42P01", "42883", "42703"].contains(&code) {
                        unclear.push(format!("{version} {sql}: {code} {}", db_err.message()));
                    }
                    if code == "55000" && db_err.message().contains("this database has version") {
                        assert!(
                            db_err.hint().is_some_and(|h| h.contains("ALTER EXTENSION idgen UPDATE")),
                            "{version} {sql}: {db_err:?}"
                        );
                        refused.push(sql.to_owned());
                    }
                }
            }
            assert!(probe.simple_query("SELECT 1").is_ok(), "{version} {sql}: the connection did not survive");
        }
        assert!(unclear.is_empty(), "{unclear:#?}");
        let mints = ["SELECT idgen_next_id()", "SELECT idgen_next_id('svc')"];
        for sql in mints.iter().chain(["SELECT idgen_claim('svc', '10.0.0.1'::inet, 1)"].iter()) {
            let result = db.connect().batch_execute(sql);
            if runs_against {
                result.unwrap_or_else(|e| panic!("{version} {sql}: {e:?}"));
            } else {
                let err = result.expect_err(sql);
                assert_eq!(sqlstate(&err), "55000", "{version} {sql}: {err:?}");
            }
        }
        if runs_against {
            assert!(refused.is_empty(), "{version} keeps working until the update: {refused:?}");
        } else {
            assert!(refused.len() >= 3, "{version}: the registry's functions refuse: {refused:?}");
        }
    }
}

#[test]
fn holders_that_keep_their_id_across_the_update_are_in_the_history() {
    let db = TestDb::empty_on(&base_dsn(), "upgrade_carried");
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.4.0'").unwrap();
    let node = claim(&mut client, "svc", "10.0.0.7", 7).unwrap();
    let mut backend = db.connect();
    backend.query_one("SELECT idgen_next_id()", &[]).unwrap();
    // The history of 0.2.0's databases started empty at the update to 0.3.0, whoever held ids:
    // these holders' claims are gone from it.
    client.batch_execute("DELETE FROM idgen_private.idgen_history").unwrap();
    client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();
    // Both keep their ids across the update, and what they stamp from now on is explained.
    let after_update: i64 = backend.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    let finding = |client: &mut Client, id: i64, service: &str| -> (String, Option<String>) {
        let row = client.query_one("SELECT finding, holder FROM idgen_explain($1, $2)", &[&id, &service]).unwrap();
        (row.get(0), row.get(1))
    };
    let database: String = client.query_one("SELECT current_database()", &[]).unwrap().get(0);
    let (found, holder) = finding(&mut client, after_update, &database);
    assert_eq!(found, "held", "an ID stamped after the update by a holder from before it");
    assert!(holder.is_some_and(|h| h.starts_with("backend slot")));
    let svc_id = client
        .query_one(
            "SELECT idgen_min_id(now() + interval '1 second') | ($1::bigint << 12)",
            &[&i64::from(node.machine_id)],
        )
        .unwrap()
        .get(0);
    assert_eq!(finding(&mut client, svc_id, "svc"), ("held".to_owned(), Some("10.0.0.7:7".to_owned())));
    // From their last write before the update on, that is: an ID of an hour before is from before
    // the history.
    let hour_ago: i64 = client.query_one("SELECT idgen_min_id(now() - interval '1 hour')", &[]).unwrap().get(0);
    assert_eq!(finding(&mut client, hour_ago, &database).0, "before_history");
    let carried: i64 = client
        .query_one(
            "SELECT count(*) FROM idgen_events WHERE event = 'claim' AND detail LIKE 'Held across ALTER EXTENSION%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(carried, 2);
}

#[test]
fn an_update_fails_at_once_while_a_reader_uses_the_registry_and_blocks_no_claim() {
    let db = TestDb::empty_on(&base_dsn(), "upgrade_busy");
    let mut admin = db.connect();
    admin.batch_execute("CREATE EXTENSION idgen VERSION '0.4.0'").unwrap();
    // A dashboard's long transaction, by a role with no rights on idgen's tables.
    let mut reader = db.connect();
    reader.batch_execute("BEGIN; SELECT count(*) FROM idgen_events; SELECT count(*) FROM idgen_nodes").unwrap();
    let err = admin.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "the update waited for the reader instead of failing: {err:?}");
    // Nothing queued behind it: a new session mints at once (its claim commits on its own). It
    // stays connected: its exit record would be a registry write the update does not wait for.
    let mut minter = db.connect();
    minter.query_one("SELECT idgen_next_id()", &[]).unwrap();
    reader.batch_execute("COMMIT").unwrap();
    admin.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();
    drop(minter);
    let version: String =
        admin.query_one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(version, LATEST);
}

#[test]
fn an_update_from_0_5_1_is_a_fresh_install_and_keeps_holders_who_then_report() {
    let db = TestDb::empty_on(&base_dsn(), "upgrade_from_0_5_1");
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.5.1'").unwrap();
    // A service node and a backend hold ids across the update; 0.5.1's heartbeat (six arguments)
    // keeps working with this library before it.
    let node = claim(&mut client, "svc", "10.0.0.7", 7).unwrap();
    client
        .query_one(
            "SELECT idgen_heartbeat('svc', $1::int::smallint, '10.0.0.7', 7, $2, now())",
            &[&node.machine_id, &node.version],
        )
        .unwrap();
    let mut backend = db.connect();
    backend.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let before = registry_snapshot(&mut client);
    client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();
    assert_eq!(registry_snapshot(&mut client), before, "every row, version and watermark is kept");
    let fresh = TestDb::create("upgrade_from_0_5_1_fresh");
    assert_eq!(
        fingerprint(&mut client),
        fingerprint(&mut fresh.connect()),
        "0.5.1 updated differs from a fresh install"
    );
    // The holder heartbeats with its reports, which idgen_nodes shows; its backend mints on.
    let mut client = db.connect();
    client
        .query_one(
            "SELECT idgen_heartbeat('svc', $1, '10.0.0.7', 7, $2, clock_timestamp() + interval '3 seconds', 1, 2, 3)",
            &[&node.machine_id, &node.version],
        )
        .unwrap();
    let row = client
        .query_one(
            "SELECT clock_offset > interval '2 seconds', clock_backward_waits, clock_backward_refusals, sequence_exhaustions
               FROM idgen_nodes WHERE service = 'svc'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, i64>(1), row.get::<_, i64>(2), row.get::<_, i64>(3)),
        (true, 1, 2, 3)
    );
    backend.query_one("SELECT idgen_next_id()", &[]).unwrap();
    let findings: Vec<String> = client
        .query("SELECT finding FROM idgen_health() ORDER BY finding", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(findings, ["clock_backward_refusals", "generator_waits", "holder_clock_skew"]);
}

#[test]
fn an_update_from_0_6_0_records_the_layout_every_service_has_used_and_widens_machine_ids() {
    let db = TestDb::empty_on(&base_dsn(), "upgrade_from_0_6_0");
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.6.0'").unwrap();
    // This library serves 0.6.0's objects: a node claims (smallint machine ids), a backend mints,
    // a row removed by hand leaves a tombstone of another service.
    let node = TestNode::claim(&mut client, "svc", "10.0.0.7", 7).unwrap();
    let mut backend = db.connect();
    let before_update: i64 = backend.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    client
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version) VALUES ('gone', 5, '10.0.0.9', 9, 1);
             DELETE FROM system_nodes WHERE service = 'gone'",
        )
        .unwrap();
    let before = registry_snapshot(&mut client);
    client.batch_execute("ALTER EXTENSION idgen UPDATE").unwrap();
    assert_eq!(registry_snapshot(&mut client), before, "every row, version and watermark is kept");
    assert_eq!(first_version(&mut client), 1, "a registry with rows keeps its versions' start, and its history");
    let fresh = TestDb::create("upgrade_from_0_6_0_fresh");
    assert_eq!(
        fingerprint(&mut client),
        fingerprint(&mut fresh.connect()),
        "0.6.0 updated differs from a fresh install"
    );
    // Every service it knew cut its IDs by the default layout: recorded as such, and fixed.
    let database: String = client.query_one("SELECT current_database()", &[]).unwrap().get(0);
    let layouts: Vec<(String, bool)> = client
        .query("SELECT service, fixed_at IS NOT NULL FROM idgen_layouts ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut expected = vec![(database.clone(), true), ("gone".to_owned(), true), ("svc".to_owned(), true)];
    expected.sort();
    assert_eq!(layouts, expected);
    for service in [database.as_str(), "gone", "svc"] {
        assert_eq!(service_layout(&mut client, service).unwrap(), idgen_core::Layout::DEFAULT, "{service}");
        let pool: (i32, i32) = client
            .query_one("SELECT pool_first, pool_last FROM idgen_layouts WHERE service = $1", &[&service])
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        let default = idgen_core::layout::ServiceLayout::DEFAULT.pool;
        assert_eq!(pool, (i32::from(default.first), i32::from(default.last)), "{service}");
    }
    let err = client.query_one("SELECT * FROM idgen_define_layout('svc', 'sonyflake')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    // Machine ids are integer now; a heartbeat that passes a smallint still works.
    let types: String = client
        .query_one(
            "SELECT string_agg(format_type(atttypid, NULL), ',' ORDER BY attrelid::regclass::text)
               FROM pg_attribute WHERE attname = 'machine_id'
                AND attrelid IN ('system_nodes'::regclass, 'idgen_private.idgen_tombstones'::regclass,
                                 'idgen_private.idgen_history'::regclass, 'idgen_id_parts'::regclass)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(types, "integer,integer,integer,integer");
    client
        .query_one(
            "SELECT idgen_heartbeat('svc', $1::int::smallint, '10.0.0.7', 7, $2, now())",
            &[&node.machine_id, &node.version],
        )
        .unwrap();
    // The backend mints on across the update, above what it minted before it.
    let after_update: i64 = backend.query_one("SELECT idgen_next_id()", &[]).unwrap().get(0);
    assert!(after_update > before_update);
}

#[test]
fn a_registry_updated_from_0_6_0_with_nothing_in_it_draws_its_version_base() {
    // Created at 0.6.0 right after a DROP (the old install script at hand) and updated at once: its
    // versions must not start at 1 again, or a node of the dropped registry would match its rows.
    let db = TestDb::empty_on(&base_dsn(), "upgrade_empty_0_6_0");
    let mut client = db.connect();
    client.batch_execute("CREATE EXTENSION idgen VERSION '0.6.0'; ALTER EXTENSION idgen UPDATE").unwrap();
    let base: i64 = client.query_one("SELECT version_base FROM idgen_private.idgen_registry", &[]).unwrap().get(0);
    assert!(base > 0, "drawn below 2^52: 0 has a chance of 2^-52");
    let c = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(c.version, base + 1);
}
