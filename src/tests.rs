//! `#[pg_test]`s: each runs inside a transaction that is rolled back, so these
//! check single-session behaviour and the installed schema. pgrx runs them
//! concurrently in one database, so each uses a service name of its own. Commit,
//! concurrency, notifications and privileges are tested from real clients in
//! tests/cluster.

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn one<T: pgrx::FromDatum + pgrx::IntoDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql).expect("query failed").expect("query returned NULL")
    }

    /// The version of a machine id's first row in this registry: each registry draws the base its
    /// versions start after.
    fn first_version() -> i64 {
        one::<i64>("SELECT version_base + 1 FROM idgen_private.idgen_registry")
    }

    #[pg_test]
    fn a_released_node_gets_its_id_back_at_a_new_version() {
        let first = one::<String>(
            "SELECT format('%s/%s/%s', machine_id, version, outcome) FROM idgen_claim('svc', '10.0.0.5', 8080)",
        );
        let v1 = first_version();
        assert_eq!(first, format!("0/{v1}/new"));
        let other = one::<String>(
            "SELECT format('%s/%s/%s', machine_id, version, outcome) FROM idgen_claim('svc', '10.0.0.6', 8080)",
        );
        assert_eq!(other, format!("1/{v1}/new"));
        // Released with its watermark (its holder stopped): it may be taken at once.
        Spi::run(&format!("SELECT idgen_release('svc', 0::smallint, '10.0.0.5', 8080, {v1}, clock_timestamp())"))
            .unwrap();
        let again = one::<String>(
            "SELECT format('%s/%s/%s', machine_id, version, outcome) FROM idgen_claim('svc', '10.0.0.5', 8080)",
        );
        assert_eq!(again, format!("0/{}/reused", v1 + 2));
        // Claimed again while it holds the id: the row may be a live twin's, so it takes another.
        let twin = one::<String>(
            "SELECT format('%s/%s/%s', machine_id, version, outcome) FROM idgen_claim('svc', '10.0.0.5', 8080)",
        );
        assert_eq!(twin, format!("2/{v1}/new"));
        // Services have separate id spaces.
        let elsewhere =
            one::<String>("SELECT format('%s/%s', machine_id, outcome) FROM idgen_claim('billing', '10.0.0.5', 8080)");
        assert_eq!(elsewhere, "0/new");
    }

    #[pg_test]
    fn lease_until_is_last_seen_plus_the_1h_tier_minus_the_margin() {
        // last_seen is the moment of the write (clock_timestamp()), so a claim late in a long transaction gets a full lease.
        // (A statement does not see its own function's writes: read the row in the next one.)
        let lease_after_last_seen = |until: String| {
            one::<String>(&format!(
                "SELECT ('{until}'::timestamptz - last_seen)::text FROM system_nodes WHERE service = 'lease'"
            ))
        };
        let until = one::<String>("SELECT lease_until::text FROM idgen_claim('lease', '10.0.0.5', 8080)");
        assert_eq!(lease_after_last_seen(until), "00:55:00");
        let until = one::<String>(&format!(
            "SELECT idgen_heartbeat('lease', 0::smallint, '10.0.0.5', 8080, {})::text",
            first_version()
        ));
        assert_eq!(lease_after_last_seen(until), "00:55:00");
        let later = one::<bool>("SELECT last_seen > now() FROM system_nodes WHERE service = 'lease'");
        assert!(later, "last_seen is the write's own time, after the transaction began");
    }

    #[pg_test]
    fn a_stale_version_cannot_heartbeat() {
        Spi::run("SELECT idgen_claim('stale', '10.0.0.5', 8080)").unwrap();
        Spi::run("SELECT idgen_claim('stale', '10.0.0.5', 8080)").unwrap();
        let result = PgTryBuilder::new(|| {
            Spi::run(&format!("SELECT idgen_heartbeat('stale', 0::smallint, '10.0.0.5', 8080, {})", first_version()))
                .map(|_| "renewed".to_owned())
        })
        .catch_when(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, |_| Ok("55000".to_owned()))
        .execute()
        .unwrap();
        assert_eq!(result, "55000");
    }

    #[pg_test]
    fn settings_have_the_documented_defaults() {
        let shown = one::<String>(
            "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings WHERE name LIKE 'idgen.%'",
        );
        assert_eq!(
            shown,
            "idgen.capacity_alert=-1, idgen.capacity_critical=0.85, idgen.capacity_warning=0.7, \
             idgen.clock_skew_alert=1000ms, idgen.heartbeat_interval=300s, idgen.history_retention=7776000s, \
             idgen.lease_safety_margin=300s, idgen.machine_id_range=, idgen.max_clock_backward=2000ms, \
             idgen.node_host=127.0.0.1, idgen.release_cooldown=60s, idgen.require_synchronous_standby=off, \
             idgen.restart_loop_claims=3, idgen.restart_loop_window=300s, idgen.service=, \
             idgen.takeover_idle_1d=86400s, idgen.takeover_idle_1h=3600s, idgen.takeover_idle_7d=604800s"
        );
        // The thresholds are one for the whole cluster; the choice of service is open to every session.
        let contexts = one::<String>(
            "SELECT string_agg(context || ':' || name, ',' ORDER BY name) FROM pg_settings WHERE name LIKE 'idgen.%'",
        );
        assert_eq!(
            contexts,
            "sighup:idgen.capacity_alert,sighup:idgen.capacity_critical,sighup:idgen.capacity_warning,\
             sighup:idgen.clock_skew_alert,sighup:idgen.heartbeat_interval,sighup:idgen.history_retention,\
             sighup:idgen.lease_safety_margin,sighup:idgen.machine_id_range,superuser:idgen.max_clock_backward,\
             superuser:idgen.node_host,sighup:idgen.release_cooldown,sighup:idgen.require_synchronous_standby,\
             sighup:idgen.restart_loop_claims,sighup:idgen.restart_loop_window,user:idgen.service,sighup:idgen.takeover_idle_1d,\
             sighup:idgen.takeover_idle_1h,sighup:idgen.takeover_idle_7d"
        );
    }

    #[pg_test(error = "parameter \"idgen.takeover_idle_1h\" cannot be changed now")]
    fn thresholds_cannot_be_set_for_one_session() {
        Spi::run("SET LOCAL idgen.takeover_idle_1h = '2d'").unwrap();
    }

    #[pg_test]
    fn every_registry_object_explains_itself() {
        // Every table and view of the extension, in its schema and in idgen_private, and their columns.
        let uncommented = one::<String>(
            "WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'idgen'), \
                  rel AS (SELECT c.oid, c.relname FROM pg_class c JOIN pg_depend d ON d.objid = c.oid AND d.classid = 'pg_class'::regclass \
                            AND d.deptype = 'e' JOIN ext ON d.refobjid = ext.oid WHERE c.relkind IN ('r', 'v', 'i', 'S')) \
             SELECT format('%s relations, %s without a comment, %s columns without one', \
               (SELECT count(*) FROM rel), \
               (SELECT count(*) FROM rel WHERE obj_description(rel.oid, 'pg_class') IS NULL), \
               (SELECT count(*) FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped \
                 JOIN pg_class c ON c.oid = rel.oid AND c.relkind = 'r' WHERE col_description(rel.oid, a.attnum) IS NULL))",
        );
        assert_eq!(uncommented, "26 relations, 0 without a comment, 0 columns without one");
        assert!(one::<bool>(
            "SELECT obj_description('system_nodes_node_identity'::regclass, 'pg_class') IS NOT NULL \
                AND (SELECT bool_and(obj_description(oid, 'pg_trigger') IS NOT NULL) FROM pg_trigger \
                     WHERE tgrelid IN ('system_nodes'::regclass, 'idgen_private.idgen_service_members'::regclass, \
                                       'idgen_private.idgen_history'::regclass) AND NOT tgisinternal) \
                AND obj_description((SELECT oid FROM pg_event_trigger WHERE evtname = 'idgen_drop_guard'), 'pg_event_trigger') IS NOT NULL \
                AND obj_description('idgen_private'::regnamespace, 'pg_namespace') IS NOT NULL"
        ));
        let uncommented_functions = one::<i64>(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('idgen_claim', 'idgen_heartbeat', 'idgen_release') \
             AND obj_description(oid, 'pg_proc') IS NULL",
        );
        assert_eq!(uncommented_functions, 0);
        // Every function and type the extension installs in its schema and in idgen_private, the
        // generator's included (the test build also installs these tests, in schema "tests"). Types:
        // standalone composite types only; a table's or view's row type is explained by its relation
        // (and from PostgreSQL 18 on it is an extension member of its own).
        let members = one::<String>(
            "WITH ext AS (SELECT oid, extnamespace FROM pg_extension WHERE extname = 'idgen'), \
                  schemas AS (SELECT extnamespace AS oid FROM ext UNION ALL SELECT 'idgen_private'::regnamespace), \
                  member AS ( \
                    SELECT p.oid, 'pg_proc' AS catalog FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM schemas) \
                    UNION ALL \
                    SELECT t.oid, 'pg_type' FROM pg_type t WHERE t.typnamespace IN (SELECT oid FROM schemas) AND t.typtype = 'c' \
                        AND (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c') \
             SELECT format('%s/%s', count(*), count(*) FILTER (WHERE obj_description(m.oid, m.catalog) IS NULL)) \
             FROM member m JOIN pg_depend d ON d.objid = m.oid AND d.deptype = 'e' JOIN ext ON d.refobjid = ext.oid",
        );
        assert_eq!(
            members, "58/0",
            "57 functions (21 of them health findings) and the idgen_id_parts type, none without a comment"
        );
    }

    #[pg_test]
    fn the_registry_is_dumped_and_closed_to_public() {
        assert!(one::<bool>(
            "SELECT 'system_nodes'::regclass = ANY (extconfig) AND 'idgen_private.idgen_service_members'::regclass = ANY (extconfig) \
                AND 'idgen_private.idgen_tombstones'::regclass = ANY (extconfig) \
                AND 'idgen_private.idgen_layouts'::regclass = ANY (extconfig) \
             FROM pg_extension WHERE extname = 'idgen'"
        ));
        // The registry functions are open to every role, and check the acting role's service grants
        // themselves (tests/cluster/tests/privileges.rs); nothing else is.
        let public_can = one::<String>(
            "SELECT format('%s %s %s %s / %s %s %s %s %s %s %s %s %s %s %s %s', \
               has_function_privilege('public', 'idgen_claim(text, inet, integer)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_claim(text, inet, integer, integer)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_heartbeat(text, integer, inet, integer, bigint, timestamptz, bigint, bigint, bigint)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_release(text, integer, inet, integer, bigint, timestamptz)', 'EXECUTE'), \
               has_table_privilege('public', 'system_nodes', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_table_privilege('public', 'idgen_private.nodes', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_table_privilege('public', 'idgen_private.idgen_registry', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_table_privilege('public', 'idgen_private.idgen_tombstones', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_function_privilege('public', 'idgen_private.rows_removed()', 'EXECUTE'), \
               has_table_privilege('public', 'idgen_private.idgen_claim_guards', 'SELECT, UPDATE'), \
               has_table_privilege('public', 'idgen_private.idgen_service_members', 'SELECT, INSERT, UPDATE, DELETE'), \
               has_schema_privilege('public', 'idgen_private', 'CREATE'), \
               has_function_privilege('public', 'idgen_grant_service(text, text)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_revoke_service(text, text)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_define_layout(text, text, integer, integer, timestamptz, integer, integer, integer, integer, text)', 'EXECUTE'), \
               has_table_privilege('public', 'idgen_private.idgen_layouts', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'))",
        );
        assert_eq!(public_can, "t t t t / f f f f f f f f f f f f");
        // The history: dumped, written and purged by idgen only, read through the filtered views.
        let history = one::<String>(
            "SELECT format('%s %s %s %s %s %s', \
               'idgen_private.idgen_history'::regclass = ANY (extconfig) AND 'idgen_private.idgen_history_purged'::regclass = ANY (extconfig) \
                 AND 'idgen_private.idgen_history_event_id_seq'::regclass = ANY (extconfig), \
               has_table_privilege('public', 'idgen_private.idgen_history', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_table_privilege('public', 'idgen_private.idgen_history_purged', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'), \
               has_function_privilege('public', 'idgen_purge_history(interval)', 'EXECUTE'), \
               has_function_privilege('public', 'idgen_private.history_append_only()', 'EXECUTE'), \
               has_table_privilege('public', 'idgen_nodes', 'SELECT') AND NOT has_table_privilege('public', 'idgen_nodes', 'INSERT')) \
             FROM pg_extension WHERE extname = 'idgen'",
        );
        assert_eq!(history, "t f f f f t");
        // The column default must work for every role: the generator is open to PUBLIC.
        assert!(one::<bool>(
            "SELECT has_function_privilege('public', 'idgen_next_id()', 'EXECUTE') \
                AND has_function_privilege('public', 'idgen_next_id(text)', 'EXECUTE')"
        ));
    }

    #[pg_test]
    fn next_ids_decode_to_this_backends_lease() {
        // The database's own service (named like it): the only one that exists without a commit,
        // which a #[pg_test] never makes.
        let issued = "SELECT COALESCE(sum(ids_issued), 0)::bigint FROM idgen_backend_leases() WHERE service = current_database()";
        let before = one::<i64>(issued);
        Spi::run("CREATE TEMP TABLE pgtest_ids AS SELECT idgen_next_id() AS id FROM generate_series(1, 5000)").unwrap();
        let row = one::<String>(
            "SELECT format('%s/%s/%s', count(DISTINCT id), count(DISTINCT d.machine_id), bool_and(d.machine_id = l.machine_id)) \
             FROM pgtest_ids, idgen_decode(pgtest_ids.id) d, idgen_backend_leases() l WHERE l.service = current_database()",
        );
        assert_eq!(row, "5000/1/t");
        assert_eq!(one::<i64>(issued) - before, 5000);
    }

    #[pg_test]
    fn min_and_max_id_bracket_every_id_of_their_millisecond() {
        let inside = one::<bool>(
            "SELECT bool_and(id BETWEEN idgen_min_id(d.ts) AND idgen_max_id(d.ts)) \
             FROM (SELECT idgen_next_id() AS id FROM generate_series(1, 100)) i, idgen_decode(i.id) d",
        );
        assert!(inside);
    }

    #[pg_test]
    fn the_history_accepts_exactly_the_event_kinds_the_library_records() {
        // The CHECK constraint of idgen_history restates idgen_core::history::EventKind::ALL.
        let check = one::<String>(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'idgen_history_event_known'",
        );
        let listed: Vec<&str> = check.split('\'').skip(1).step_by(2).collect();
        let labels: Vec<&str> = idgen_core::history::EventKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(listed, labels, "{check}");
    }
}
