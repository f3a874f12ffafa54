//! Where idgen runs: read-only transactions are refused clearly; any schema works.

use idgen_cluster_tests::*;

#[test]
fn a_read_only_transaction_is_refused_with_25006() {
    let db = TestDb::create("read_only");
    let mut client = db.connect();
    let held = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let calls = [
        "SELECT * FROM idgen_claim('svc', '10.0.0.2', 2)".to_owned(),
        format!("SELECT idgen_heartbeat('svc', {}::smallint, '10.0.0.1', 1, {})", held.machine_id, held.version),
        format!("SELECT idgen_release('svc', {}::smallint, '10.0.0.1', 1, {})", held.machine_id, held.version),
    ];
    for call in &calls {
        client.batch_execute("BEGIN READ ONLY").unwrap();
        let err = client.batch_execute(call).expect_err(call);
        client.batch_execute("ROLLBACK").unwrap();
        let e = db_error(&err);
        assert_eq!(e.code().code(), "25006", "{call}");
        assert!(e.message().ends_with("cannot write the registry in a read-only transaction"), "{}", e.message());
    }
    // The same calls work once the transaction may write.
    for call in &calls {
        client.batch_execute(call).unwrap();
    }
}

#[test]
fn idgen_works_when_installed_in_a_schema_of_its_own() {
    let db = TestDb::create("own_schema");
    let mut client = db.connect();
    drop_registry(&mut client, "DROP EXTENSION idgen; CREATE SCHEMA ids; CREATE EXTENSION idgen SCHEMA ids").unwrap();
    let row = client
        .query_one("SELECT machine_id, outcome, version FROM ids.idgen_claim('svc', '10.0.0.1', 1)", &[])
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, String>(1)), (0, "new".to_owned()));
    client.query_one("SELECT ids.idgen_heartbeat('svc', 0, '10.0.0.1', 1, $1)", &[&row.get::<_, i64>(2)]).unwrap();
    let count: i64 = client.query_one("SELECT count(*) FROM ids.system_nodes", &[]).unwrap().get(0);
    assert_eq!(count, 1);
}
