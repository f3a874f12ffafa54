//! Heartbeat fencing, release and cooldown: a holder learns at once that ownership moved.

use idgen_cluster_tests::*;

#[test]
fn after_a_takeover_the_old_holders_heartbeat_fails_with_55000() {
    let db = TestDb::create("fence");
    let mut admin = db.connect();
    fill_registry_except(&mut admin, "svc", &[7]);

    let mut old = db.connect();
    let a = claim(&mut old, "svc", "10.0.0.1", 1).unwrap();
    let v1 = first_version(&mut admin);
    assert_eq!((a.machine_id, a.version), (7, v1));
    heartbeat(&mut old, "svc", 7, "10.0.0.1", 1, v1).unwrap();

    // Two hours of silence: its last heartbeat (and the watermark it left) move back as time passing would.
    set_idle(&mut admin, "2 hours", "machine_id = 7");
    admin
        .batch_execute("UPDATE system_nodes SET issued_until = issued_until - interval '2 hours' WHERE machine_id = 7")
        .unwrap();
    let mut new = db.connect();
    let b = claim(&mut new, "svc", "10.0.0.2", 2).unwrap();
    assert_eq!((b.machine_id, b.version, b.outcome.as_str()), (7, v1 + 1, "idle_1h"));

    let err = heartbeat(&mut old, "svc", 7, "10.0.0.1", 1, v1).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000");
    assert_eq!(
        e.message(),
        format!("idgen_heartbeat: machine id 7 of service \"svc\" is no longer held by 10.0.0.1:1 at version {v1}")
    );
    assert!(
        e.detail().unwrap().starts_with(&format!("It is now held by 10.0.0.2:2 at version {}, last seen ", v1 + 1)),
        "{:?}",
        e.detail()
    );
    assert!(e.hint().unwrap().contains("exit"));

    heartbeat(&mut new, "svc", 7, "10.0.0.2", 2, v1 + 1).unwrap();
    // The old holder cannot release what it lost either.
    assert!(!release(&mut old, "svc", 7, "10.0.0.1", 1, v1).unwrap());
    let row = admin
        .query_one("SELECT host::text, version, released_at IS NULL FROM system_nodes WHERE machine_id = 7", &[])
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i64>(1), row.get::<_, bool>(2)),
        ("10.0.0.2/32".into(), v1 + 1, true)
    );
}

#[test]
fn a_second_process_with_the_same_identity_gets_another_id_and_fences_the_first() {
    let db = TestDb::create("twin");
    let mut stale = db.connect();
    let first = claim(&mut stale, "svc", "10.0.0.1", 1).unwrap();
    // The first process may still be stamping for its whole lease: sharing its id would give two
    // writers one machine id, so the identity moves on, and the first learns at its next heartbeat.
    let mut fresh = db.connect();
    let second = claim(&mut fresh, "svc", "10.0.0.1", 1).unwrap();
    assert_ne!(second.machine_id, first.machine_id);
    assert_eq!(second.outcome, "new");
    let err = heartbeat(&mut stale, "svc", first.machine_id, "10.0.0.1", 1, first.version).unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    assert!(db_error(&err).detail().unwrap().starts_with("It was released at "), "{err:?}");
    heartbeat(&mut fresh, "svc", second.machine_id, "10.0.0.1", 1, second.version).unwrap();
}

#[test]
fn heartbeat_moves_last_seen_and_returns_the_lease() {
    let db = TestDb::create("heartbeat");
    let mut client = db.connect();
    let c = claim(&mut client, "svc", "10.0.0.1", 1).unwrap();
    client.batch_execute("UPDATE system_nodes SET last_seen = now() - interval '50 minutes'").unwrap();
    let lease_until: String = client
        .query_one("SELECT idgen_heartbeat('svc', $1, '10.0.0.1', 1, $2)::text", &[&c.machine_id, &c.version])
        .unwrap()
        .get(0);
    let row = client
        .query_one(
            "SELECT ($1::text::timestamptz - last_seen)::text, extract(epoch FROM now() - last_seen)::float8 FROM system_nodes",
            &[&lease_until],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "00:55:00", "lease = last heartbeat + 1h - 5min margin");
    let seen: f64 = row.get(1);
    assert!(seen < 60.0, "last_seen moved to the heartbeat, {seen}s ago");
}

#[test]
fn a_released_id_cools_down_for_others_but_not_for_its_holder() {
    let db = TestDb::create("cooldown");
    let mut admin = db.connect();
    fill_registry_except(&mut admin, "svc", &[5]);
    let mut a = db.connect();
    let mut b = db.connect();

    let first = claim(&mut a, "svc", "10.0.0.1", 1).unwrap();
    let v1 = first_version(&mut admin);
    assert_eq!((first.machine_id, first.version), (5, v1));
    assert!(release(&mut a, "svc", 5, "10.0.0.1", 1, v1).unwrap());
    let err = heartbeat(&mut a, "svc", 5, "10.0.0.1", 1, v1).unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "a released lease is over");
    assert!(db_error(&err).detail().unwrap().starts_with("It was released at "));

    // Within the cooldown nobody else may take it...
    assert_eq!(sqlstate(&claim(&mut b, "svc", "10.0.0.2", 2).unwrap_err()), "53000");
    // ...but its holder may claim it straight back.
    let back = claim(&mut a, "svc", "10.0.0.1", 1).unwrap();
    assert_eq!((back.machine_id, back.version, back.outcome.as_str()), (5, v1 + 2, "reused"));
    assert!(release(&mut a, "svc", 5, "10.0.0.1", 1, v1 + 2).unwrap());
    let margin: String = admin
        .query_one("SELECT (issued_until - released_at)::text FROM system_nodes WHERE machine_id = 5", &[])
        .unwrap()
        .get(0);
    assert_eq!(margin, "00:05:00", "released without a watermark: the release plus the lease margin");

    // Past the cooldown another node may take it, but may stamp only after the released holder's
    // watermark: released without one, that is the release plus the lease margin (5 minutes of clock
    // skew), not the cooldown alone.
    admin
        .batch_execute("UPDATE system_nodes SET released_at = now() - interval '61 seconds' WHERE machine_id = 5")
        .unwrap();
    let row = b
        .query_one(
            "SELECT c.machine_id, c.version, c.outcome, c.not_before = date_trunc('milliseconds', n.issued_until) \
             FROM system_nodes n, LATERAL (SELECT * FROM idgen_claim('svc', '10.0.0.2', 2)) c WHERE n.machine_id = 5",
            &[],
        )
        .unwrap();
    let taken = (row.get::<_, i32>(0), row.get::<_, i64>(1), row.get::<_, String>(2));
    assert_eq!(taken, (5, v1 + 4, "released".to_owned()));
    assert!(row.get::<_, bool>(3), "not_before is the released holder's watermark");
    // Releasing what you no longer hold changes nothing and warns.
    let (mut a2, notices) = db.connect_recording();
    let before = registry_snapshot(&mut admin);
    assert!(!release(&mut a2, "svc", 5, "10.0.0.1", 1, v1 + 3).unwrap());
    assert_eq!(registry_snapshot(&mut admin), before);
    let warnings = notices.take();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].severity(), "WARNING");
    assert!(
        warnings[0].message().starts_with("idgen_release: machine id 5 of service \"svc\""),
        "{}",
        warnings[0].message()
    );
}
