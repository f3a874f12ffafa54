//! Every refused input: the right SQLSTATE, the argument named, nothing written.

use idgen_cluster_tests::*;

/// (call, SQLSTATE, start of the message)
const BAD_CALLS: &[(&str, &str, &str)] = &[
    ("SELECT * FROM idgen_claim(NULL, '10.0.0.1', 1)", "22004", "idgen_claim: argument \"service\" must not be NULL"),
    ("SELECT * FROM idgen_claim('', '10.0.0.1', 1)", "22023", "idgen_claim: argument \"service\" must not be empty"),
    (
        "SELECT * FROM idgen_claim(repeat('s', 65), '10.0.0.1', 1)",
        "22001",
        "idgen_claim: argument \"service\" is too long",
    ),
    (
        "SELECT * FROM idgen_claim(' svc', '10.0.0.1', 1)",
        "22023",
        "idgen_claim: argument \"service\" must not begin or end with white space",
    ),
    (
        "SELECT * FROM idgen_claim(E'svc\\t', '10.0.0.1', 1)",
        "22023",
        "idgen_claim: argument \"service\" must not contain control characters",
    ),
    ("SELECT * FROM idgen_claim('svc', NULL, 1)", "22004", "idgen_claim: argument \"host\" must not be NULL"),
    (
        "SELECT * FROM idgen_claim('svc', '10.0.0.0/8', 1)",
        "22023",
        "idgen_claim: argument \"host\" must be a single address",
    ),
    (
        "SELECT * FROM idgen_claim('svc', '10.0.0.1/24', 1)",
        "22023",
        "idgen_claim: argument \"host\" must be a single address",
    ),
    (
        "SELECT * FROM idgen_claim('svc', '255.255.255.255', 1)",
        "22023",
        "idgen_claim: argument \"host\" must be the node's own address, not the broadcast address",
    ),
    (
        "SELECT * FROM idgen_claim('svc', '239.1.2.3', 1)",
        "22023",
        "idgen_claim: argument \"host\" must be the node's own address, not a multicast address",
    ),
    (
        "SELECT * FROM idgen_claim('svc', 'ff0e::1', 1)",
        "22023",
        "idgen_claim: argument \"host\" must be the node's own address, not a multicast address",
    ),
    ("SELECT * FROM idgen_claim('svc', '10.0.0.1', NULL)", "22004", "idgen_claim: argument \"port\" must not be NULL"),
    ("SELECT * FROM idgen_claim('svc', '10.0.0.1', 0)", "22023", "idgen_claim: argument \"port\" is out of range"),
    ("SELECT * FROM idgen_claim('svc', '10.0.0.1', 65536)", "22023", "idgen_claim: argument \"port\" is out of range"),
    (
        "SELECT idgen_heartbeat(NULL, 0::smallint, '10.0.0.1', 1, 1)",
        "22004",
        "idgen_heartbeat: argument \"service\" must not be NULL",
    ),
    (
        "SELECT idgen_heartbeat('svc', NULL, '10.0.0.1', 1, 1)",
        "22004",
        "idgen_heartbeat: argument \"machine_id\" must not be NULL",
    ),
    (
        "SELECT idgen_heartbeat('svc', 1024::smallint, '10.0.0.1', 1, 1)",
        "22023",
        "idgen_heartbeat: argument \"machine_id\" is out of range",
    ),
    (
        "SELECT idgen_heartbeat('svc', (-1)::smallint, '10.0.0.1', 1, 1)",
        "22023",
        "idgen_heartbeat: argument \"machine_id\" is out of range",
    ),
    (
        "SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 70000, 1)",
        "22023",
        "idgen_heartbeat: argument \"port\" is out of range",
    ),
    (
        "SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, 0)",
        "22023",
        "idgen_heartbeat: argument \"version\" must be positive",
    ),
    (
        "SELECT idgen_heartbeat('svc', 0::smallint, '10.0.0.1', 1, NULL)",
        "22004",
        "idgen_heartbeat: argument \"version\" must not be NULL",
    ),
    (
        "SELECT idgen_release('svc', 0::smallint, NULL, 1, 1)",
        "22004",
        "idgen_release: argument \"host\" must not be NULL",
    ),
    (
        "SELECT idgen_release('svc', 0::smallint, '10.0.0.1', 1, -3)",
        "22023",
        "idgen_release: argument \"version\" must be positive",
    ),
    (
        "SELECT idgen_release('', 0::smallint, '10.0.0.1', 1, 1)",
        "22023",
        "idgen_release: argument \"service\" must not be empty",
    ),
];

#[test]
fn bad_inputs_are_refused_before_anything_is_written() {
    let db = TestDb::create("inputs");
    let mut client = db.connect();
    // A registry with a real holder, so that a wrongly accepted call would have something to change.
    let held = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!(held.machine_id, 0);
    // A refused statement rolls back whatever it wrote, so the rows alone cannot tell. This backend's
    // counts of system_nodes writes can: they include the work of rolled-back savepoints.
    let writes = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_xact_user_tables \
             WHERE relname = 'system_nodes'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    for (call, code, message) in BAD_CALLS {
        client.batch_execute("BEGIN").unwrap();
        let before = writes(&mut client);
        client.batch_execute("SAVEPOINT call").unwrap();
        let err = client.batch_execute(call).expect_err(call);
        client.batch_execute("ROLLBACK TO SAVEPOINT call").unwrap();
        let written = writes(&mut client) - before;
        client.batch_execute("COMMIT").unwrap();
        let e = db_error(&err);
        assert_eq!(e.code().code(), *code, "{call}: {}", e.message());
        assert!(e.message().starts_with(message), "{call}: {}", e.message());
        assert_eq!(written, 0, "{call} wrote the registry before refusing");
    }
}

#[test]
fn no_function_fails_on_a_null_with_an_internal_error() {
    // Each argument of each function in turn NULL, the others sensible. A NULL is refused with
    // 22004 naming the argument, or means something (STRICT functions answer NULL, a NULL
    // watermark reports none, a diagnostic helper says "no such node"): never XX000.
    let db = TestDb::create("inputs_nulls");
    let mut client = db.connect();
    let sample = "CASE t.typname
         WHEN 'text' THEN quote_literal('svc') WHEN 'inet' THEN quote_literal('10.0.0.1') || '::inet'
         WHEN 'int4' THEN '1' WHEN 'int2' THEN '1::smallint' WHEN 'int8' THEN '1::bigint'
         WHEN 'timestamptz' THEN 'now()' WHEN 'interval' THEN quote_literal('1 day') || '::interval'
         ELSE 'NULL' END";
    let calls: Vec<String> = client
        .query(
            &format!(
                "SELECT format('SELECT %s(%s)', p.oid::regproc,
                        string_agg(CASE WHEN a.n = k.n THEN 'NULL::' || format_type(t.oid, NULL) ELSE {sample} END, ', ' ORDER BY a.n))
                   FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'
                   JOIN pg_proc p ON p.oid = d.objid AND d.classid = 'pg_proc'::regclass
                   CROSS JOIN LATERAL generate_series(1, p.pronargs) k(n)
                   CROSS JOIN LATERAL unnest(p.proargtypes) WITH ORDINALITY a(type, n)
                   JOIN pg_type t ON t.oid = a.type
                  WHERE d.deptype = 'e'
                  GROUP BY p.oid, k.n ORDER BY 1"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(calls.len() >= 20, "{calls:?}");
    let internal: Vec<String> = calls
        .iter()
        .filter_map(|call| {
            let err = client.batch_execute(call).err()?;
            let e = db_error(&err);
            (e.code().code().starts_with("XX") || e.code().code().starts_with("58"))
                .then(|| format!("{call}: {} {}", e.code().code(), e.message()))
        })
        .collect();
    assert!(internal.is_empty(), "{internal:#?}");
    for call in ["SELECT * FROM idgen_explain(NULL)", "SELECT idgen_node_state(NULL, NULL, NULL, NULL)"] {
        let err = client.batch_execute(call).expect_err(call);
        assert_eq!(sqlstate(&err), "22004", "{call}: {err:?}");
    }
}

#[test]
fn a_purge_age_of_zero_or_less_is_refused_and_removes_nothing() {
    let db = TestDb::create("inputs_purge");
    let mut client = db.connect();
    claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    for age in ["-1 day", "0", "-1 month 20 days", "-1000 years 360001 days"] {
        let err = client.query_one("SELECT idgen_purge_history($1::text::interval)", &[&age]).unwrap_err();
        let e = db_error(&err);
        assert_eq!(e.code().code(), "22023", "{age}: {e:?}");
        assert_eq!(e.message(), "idgen_purge_history: argument \"older_than\" must be positive");
    }
    let events: i64 = client.query_one("SELECT count(*) FROM idgen_events", &[]).unwrap().get(0);
    assert_eq!(events, 1);
    let purged: i64 = client.query_one("SELECT idgen_purge_history('1 second')", &[]).unwrap().get(0);
    assert_eq!(purged, 0);
}

#[test]
fn times_outside_the_layout_name_the_value() {
    let db = TestDb::create("inputs_times");
    let mut client = db.connect();
    for (call, shown) in [
        ("SELECT idgen_min_id('-infinity')", "Got -infinity."),
        ("SELECT idgen_max_id('infinity')", "Got infinity."),
        ("SELECT idgen_min_id('1970-01-01')", "Got 1970-01-01T00:00:00.000Z."),
    ] {
        let err = client.query_one(call, &[]).unwrap_err();
        let e = db_error(&err);
        assert_eq!(e.code().code(), "22008", "{call}");
        assert!(e.detail().unwrap().starts_with(shown), "{call}: {:?}", e.detail());
    }
}

#[test]
fn a_watermark_behind_the_registrys_is_kept_as_the_registry_had_it_with_a_warning_and_an_event() {
    let db = TestDb::create("inputs_behind");
    let (mut client, notices) = db.connect_recording();
    let node = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let held_before: String =
        client.query_one("SELECT issued_until::text FROM system_nodes WHERE service = 'svc'", &[]).unwrap().get(0);
    // Local time sent as UTC by a node five hours west, a clock left at 1970, and one before year 1.
    for reported in ["now() - interval '5 hours'", "'1970-01-01 00:00:00+00'", "'0001-06-01 00:00:00+00 BC'"] {
        let sql = format!("SELECT idgen_heartbeat('svc', $1, '10.0.0.1', 1, $2, {reported})");
        client.query_one(sql.as_str(), &[&node.machine_id, &node.version]).unwrap();
        let warned = notices.take();
        assert_eq!(warned.len(), 1, "{reported}: {warned:?}");
        assert_eq!(warned[0].code().code(), "01000");
        assert!(warned[0].message().contains("behind the watermark the registry holds"), "{:?}", warned[0]);
        assert!(warned[0].hint().unwrap().contains("UTC"));
    }
    let kept: bool = client
        .query_one(
            "SELECT issued_until >= $1::text::timestamptz FROM system_nodes WHERE service = 'svc'",
            &[&held_before],
        )
        .unwrap()
        .get(0);
    assert!(kept, "the registry keeps its own watermark");
    // Once a minute per service in the history; idgen_health() names the node.
    let events: i64 =
        client.query_one("SELECT count(*) FROM idgen_events WHERE event = 'watermark_behind'", &[]).unwrap().get(0);
    assert_eq!(events, 1);
    let finding: String =
        client.query_one("SELECT detail FROM idgen_health() WHERE finding = 'watermark_behind'", &[]).unwrap().get(0);
    assert!(finding.starts_with("10.0.0.1:1 reported a watermark behind"), "{finding}");
    // A report at the node's clock is no news; nor is a release with one.
    client
        .query_one("SELECT idgen_heartbeat('svc', $1, '10.0.0.1', 1, $2, now())", &[&node.machine_id, &node.version])
        .unwrap();
    assert!(notices.take().is_empty());
}
