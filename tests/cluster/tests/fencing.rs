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

    // Past the cooldown another node may take it, but may stamp only after the released holder's
    // watermark, not the cooldown alone.
    admin
        .batch_execute("UPDATE system_nodes SET released_at = now() - interval '61 seconds' WHERE machine_id = 5")
        .unwrap();
    let row = b
        .query_one(
            "SELECT c.machine_id, c.version, c.outcome, c.not_before >= date_trunc('milliseconds', n.issued_until) \
             FROM system_nodes n, LATERAL (SELECT * FROM idgen_claim('svc', '10.0.0.2', 2)) c WHERE n.machine_id = 5",
            &[],
        )
        .unwrap();
    let taken = (row.get::<_, i32>(0), row.get::<_, i64>(1), row.get::<_, String>(2));
    assert_eq!(taken, (5, v1 + 4, "released".to_owned()));
    assert!(row.get::<_, bool>(3), "not_before is before the released holder's watermark");
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

    // Released by hand, without a watermark: its holder may stamp on until it learns of it, so the
    // release keeps its bound as the watermark (its lease, and its take-back time an hour after its
    // claim), not the release plus the 5-minute margin; past the cooldown, nobody takes it before.
    assert!(release_by_hand(&mut admin, "svc", 5, "10.0.0.2", 2, v1 + 4).unwrap());
    let (kept, ahead): (bool, String) = admin
        .query_one(
            "SELECT issued_until >= GREATEST(lease_until, takeover_at), \
                    justify_interval(date_trunc('minute', issued_until - released_at))::text \
             FROM system_nodes WHERE machine_id = 5",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(kept, "a release without a watermark kept less than the holder's bound");
    assert_eq!(ahead, "00:59:00", "released without a watermark: the holder's take-back time");
    admin
        .batch_execute("UPDATE system_nodes SET released_at = now() - interval '61 seconds' WHERE machine_id = 5")
        .unwrap();
    assert_eq!(sqlstate(&claim(&mut b, "svc", "10.0.0.3", 3).unwrap_err()), "53000");
}

/// docs/operations.md's freeing of an id by hand, with its holder still minting: a node cut off from
/// the database goes on until its lease ends, by its own clock; the DBA releases its id as the docs
/// say (no watermark: only the node knows its last stamp); another node claims the id as soon as the
/// registry lets it, and mints. The release keeps what the holder may still stamp (its last report
/// plus its lease), so the next holder starts after every ID of the first: none repeats. (Before
/// 0.8.0 the release kept only its own time plus the margin, and the next holder minted the same
/// IDs as the cut-off node.)
#[test]
fn a_node_cut_off_and_freed_by_hand_shares_no_id_with_the_next_holder() {
    let (cluster, _turn) = clock_cluster_turn();
    let _settings = SystemSettings::set(
        &cluster.dsn,
        &[
            ("idgen.takeover_idle_7d", "240s"),
            ("idgen.takeover_idle_1d", "120s"),
            ("idgen.takeover_idle_1h", "20s"),
            ("idgen.lease_safety_margin", "5s"),
            ("idgen.heartbeat_interval", "5s"),
            ("idgen.release_cooldown", "1s"),
        ],
    );
    let db = TestDb::create_on(&cluster.dsn, "fencing_hand_release");
    let mut admin = db.connect();
    // One machine id: the next holder gets exactly the first one's.
    admin.batch_execute("SELECT idgen_define_layout('svc', 'snowflake', pool_first => 7, pool_last => 7)").unwrap();
    let mut first = TestNode::claim(&mut admin, "svc", "10.0.5.1", 1).unwrap();
    first.heartbeat(&mut admin).unwrap();
    let first_lease_until_ms = first.lease_until_ms;
    // Cut off: it heartbeats no more, and mints in its lease (15 s) on its own.
    let minting = std::thread::spawn(move || {
        let mut ids = Vec::new();
        loop {
            let batch = first.mint(50);
            if batch.is_empty() {
                return ids;
            }
            ids.extend(batch);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Freed by hand, as the docs say.
    let freed: bool = admin
        .query_one(
            "SELECT idgen_release(service, machine_id, host, port, version) FROM system_nodes WHERE service = 'svc'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(freed);
    // The next node claims it as soon as it can: refused (53000: nothing free, or 55006) until then.
    let mut second = None;
    wait_for("the next holder's claim", PATIENCE, || {
        match TestNode::claim(&mut admin, "svc", "10.0.5.2", 1) {
            Ok(node) => second = Some(node),
            Err(e) => {
                assert!(["53000", "55006"].contains(&sqlstate(&e)), "{e:?}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        second.is_some()
    });
    let mut second = second.unwrap();
    assert_eq!(second.machine_id, 7);
    assert!(
        second.not_before_ms >= first_lease_until_ms,
        "the next holder may stamp from {}, before the cut-off node's lease ends at {first_lease_until_ms}",
        second.not_before_ms
    );
    // It mints once its clock passes not_before, until its lease ends or it has plenty.
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut later = Vec::new();
    while later.len() < 200_000 && std::time::Instant::now() < deadline {
        let batch = second.mint(1_000);
        if batch.is_empty() && !later.is_empty() {
            break;
        }
        if batch.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        later.extend(batch);
    }
    let earlier: std::collections::HashSet<i64> =
        join_within(minting, WORK_PATIENCE, "the cut-off node's minting").into_iter().collect();
    assert!(earlier.len() > 1_000 && later.len() > 1_000, "both minted: {} and {}", earlier.len(), later.len());
    let repeated = later.iter().filter(|id| earlier.contains(id)).count();
    assert_eq!(repeated, 0, "{repeated} IDs of the next holder were the cut-off node's");
}
