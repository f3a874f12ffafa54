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
