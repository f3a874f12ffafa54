//! The registry is state: pg_dump and restore keep its rows and its ownership history.

use idgen_cluster_tests::*;
use std::process::Command;

#[test]
fn registry_rows_survive_pg_dump_and_restore() {
    let source = TestDb::create("dump_source");
    let mut client = source.connect();
    // A service with a layout of its own, fixed by its first claim, and one defined only.
    client
        .batch_execute(
            "SELECT idgen_define_layout('sony', 'sonyflake', pool_first => 0, pool_last => 255);
             SELECT idgen_define_layout('later', 'js_safe');",
        )
        .unwrap();
    claim(&mut client, "sony", "10.0.0.9", 9).unwrap();
    let layouts = |c: &mut postgres::Client| -> Vec<String> {
        c.query("SELECT format('%s', l) FROM idgen_layouts l ORDER BY service", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let a = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    let b = claim(&mut client, "svc", "10.0.0.2", 2).unwrap();
    // The first node restarts gracefully: it releases, and claims its id back.
    assert!(release(&mut client, "svc", a.machine_id, "10.0.0.1", 1, a.version).unwrap());
    claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    assert!(release(&mut client, "svc", b.machine_id, "10.0.0.2", 2, b.version).unwrap());
    let before = registry_snapshot(&mut client);
    let history = |c: &mut postgres::Client| -> Vec<String> {
        c.query("SELECT concat_ws(' ', event_id, event, service, machine_id, version, outcome, holder) FROM idgen_events ORDER BY event_id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let events_before = history(&mut client);
    assert_eq!(events_before.len(), 6, "{events_before:?}");
    let layouts_before = layouts(&mut client);
    assert_eq!(
        layouts_before.len(),
        3,
        "sony, later and svc (its first claim recorded the default): {layouts_before:?}"
    );

    let dump_file = dump(&source);

    let target = format!("{}_restored", source.name);
    let mut admin = connect_to(&base_dsn(), "postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {target} WITH (FORCE)")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {target}")).unwrap();
    let target_dsn = session_dsn(&base_dsn(), &target);
    let restore = output_within(
        Command::new("pg_restore").args(["--exit-on-error", "--dbname", &target_dsn]).arg(&dump_file),
        WORK_PATIENCE,
        "pg_restore",
    );
    assert!(restore.status.success(), "pg_restore: {}", String::from_utf8_lossy(&restore.stderr));
    std::fs::remove_file(&dump_file).ok();
    let mut restored = connect_to(&base_dsn(), &target);
    assert_eq!(registry_snapshot(&mut restored), before);
    assert!(before.lines().count() == 3 && before.contains("10.0.0.2"), "{before}");
    // Every layout as it was: the IDs already minted are cut by them.
    assert_eq!(layouts(&mut restored), layouts_before);

    // The ownership history survives too, and goes on after the last restored event.
    assert_eq!(history(&mut restored), events_before);

    // And the restored registry works: the first node heartbeats at the version its claim back got
    // (two after its first: the release counted one).
    heartbeat(&mut restored, "svc", 0, "10.0.0.1", 1, a.version + 2).unwrap();
    assert!(release(&mut restored, "svc", 0, "10.0.0.1", 1, a.version + 2).unwrap());
    let after = history(&mut restored);
    assert_eq!(after.len(), 7);
    assert!(after[6].starts_with(&format!("7 release svc 0 {} ", a.version + 3)), "{after:?}");
}

#[test]
fn a_service_restored_from_a_dump_of_0_6_0_keeps_the_layout_its_ids_were_cut_by() {
    // A dump of 0.6.0 has rows and history but no layouts: restored into 0.7.0, its services' IDs
    // were cut by the default layout, which a definition must not change before the next claim
    // fixes it (an outside review's finding: it accepted sonyflake for them).
    let source = TestDb::empty_on(&base_dsn(), "dump_old_source");
    let mut old = source.connect();
    old.batch_execute("CREATE EXTENSION idgen VERSION '0.6.0'").unwrap();
    old.query_one("SELECT idgen_claim('orders', '10.0.0.1', 1)", &[]).unwrap();
    old.query_one("SELECT idgen_next_id('orders')", &[]).unwrap();
    let dump_file = dump(&source);
    let target = TestDb::empty_on(&base_dsn(), "dump_old_restored");
    let restore = output_within(
        Command::new("pg_restore").args(["--exit-on-error", "--dbname", &target.dsn()]).arg(&dump_file),
        WORK_PATIENCE,
        "pg_restore",
    );
    assert!(restore.status.success(), "pg_restore: {}", String::from_utf8_lossy(&restore.stderr));
    std::fs::remove_file(&dump_file).ok();
    let mut restored = target.connect();
    let version: String =
        restored.query_one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", &[]).unwrap().get(0);
    assert_eq!(version, "0.10.2", "restored into the current version");
    let err = restored.query_one("SELECT * FROM idgen_define_layout('orders', 'sonyflake')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    assert!(db_error(&err).detail().unwrap().contains("an earlier version of idgen"), "{err:?}");
    // The layout its IDs were cut by is answered, and fixed; a claim goes on with it.
    let row = restored
        .query_one(
            "SELECT preset, defined_by, fixed_at IS NOT NULL FROM idgen_define_layout('orders', 'snowflake')",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1), row.get::<_, bool>(2)),
        ("snowflake".to_owned(), "update to 0.7.0".to_owned(), true)
    );
    claim(&mut restored, "orders", "10.0.0.2", 1).unwrap();
    // A service it never knew may still be defined.
    restored.query_one("SELECT * FROM idgen_define_layout('fresh', 'sonyflake')", &[]).unwrap();
}

/// Dumps database `source` in pg_dump's custom format; the file's path.
fn dump(source: &TestDb) -> std::path::PathBuf {
    let dump_file = std::env::temp_dir().join(format!("{}-{}.dump", source.name, std::process::id()));
    // pg_dump and pg_restore set statement_timeout = 0 in their sessions: a deadline bounds them.
    let dump = output_within(
        Command::new("pg_dump").args(["--format=custom", "--file"]).arg(&dump_file).arg("--dbname").arg(source.dsn()),
        WORK_PATIENCE,
        "pg_dump",
    );
    assert!(dump.status.success(), "pg_dump: {}", String::from_utf8_lossy(&dump.stderr));
    dump_file
}
