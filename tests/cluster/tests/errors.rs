//! Errors are part of the API: no Rust backtrace reaches a client, whatever RUST_BACKTRACE the
//! server was started with. The clock-step cluster runs with RUST_BACKTRACE=1
//! (scripts/clusters.sh); an error PostgreSQL raises inside idgen's Rust code (here a lock timeout
//! in a heartbeat's write) is where pgrx would append one to the DETAIL.

use idgen_cluster_tests::*;

#[test]
fn no_backtrace_reaches_a_client_from_a_server_started_with_rust_backtrace() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "backtraces");
    let mut admin = db.connect();
    // The premise: this server was started with RUST_BACKTRACE=1 (the postmaster's environment,
    // which every backend inherits; a backend's own /proc entry holds its ps title instead).
    let environment: Vec<u8> = admin
        .query_one(
            "SELECT pg_read_binary_file(format('/proc/%s/environ', split_part(pg_read_file('postmaster.pid'), E'\n', 1)))",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        environment.split(|b| *b == 0).any(|var| var == b"RUST_BACKTRACE=1"),
        "the clock-step cluster must run with RUST_BACKTRACE=1 (scripts/clusters.sh)"
    );
    let c = claim(&mut admin, "svc", "10.0.0.1", 1).unwrap();
    // Another session holds the node's row; the heartbeat's UPDATE times out inside idgen.
    let mut holder = db.connect();
    let mut hold = holder.transaction().unwrap();
    hold.batch_execute("SELECT FROM system_nodes WHERE service = 'svc' FOR UPDATE").unwrap();
    let mut node = db.connect();
    node.batch_execute("SET lock_timeout = '100ms'").unwrap();
    let err = heartbeat(&mut node, "svc", c.machine_id, "10.0.0.1", 1, c.version).unwrap_err();
    hold.rollback().unwrap();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55P03", "{err:?}");
    assert_eq!(e.message(), "canceling statement due to lock timeout");
    assert_eq!(e.detail(), None, "a backtrace in the DETAIL: {:?}", e.detail());
    // And the errors idgen raises itself carry their own DETAIL only.
    let err = admin.batch_execute("SELECT idgen_grant_service('svc', 'idgen_t_no_such_role')").unwrap_err();
    assert_eq!(sqlstate(&err), "42704");
    assert_eq!(db_error(&err).detail(), None);
}
