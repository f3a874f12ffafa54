//! A backend's own lease: committed on its own whatever its caller's
//! transaction does, re-claimed when it is taken over, never waiting on
//! another session, and refusing clearly where it cannot write.

use idgen_cluster_tests::*;

fn next_id(client: &mut postgres::Client) -> Result<i64, postgres::Error> {
    client.query_one("SELECT idgen_next_id()", &[]).map(|r| r.get(0))
}

#[test]
fn a_claim_made_in_a_transaction_or_savepoint_that_rolls_back_stays_committed() {
    let db = TestDb::create("rollback");
    let service = db.name.clone();
    let mut client = db.connect();
    let mut issued = Vec::new();

    // A whole transaction rolls back: its IDs may have reached the client, so the claim behind them
    // committed on its own and stays.
    client.batch_execute("BEGIN").unwrap();
    issued.push(next_id(&mut client).unwrap());
    client.batch_execute("ROLLBACK").unwrap();
    let lease = backend_lease(&mut client, &service).expect("the lease outlives the rollback");
    assert_eq!(backend_rows(&mut client, &service), 1, "and so does its row");

    // A savepoint rolls back inside a transaction that commits: the same lease goes on.
    client.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    issued.push(next_id(&mut client).unwrap());
    client.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    issued.push(next_id(&mut client).unwrap());
    client.batch_execute("COMMIT").unwrap();
    assert_eq!(backend_lease(&mut client, &service).map(|l| l.version), Some(lease.version));

    // A PL/pgSQL exception block is a savepoint too: a claim of a new service inside it stays.
    define_service(&mut client, "scratch_service");
    client
        .batch_execute(
            "DO $$ BEGIN
                 BEGIN
                     PERFORM idgen_next_id('scratch_service');
                     RAISE EXCEPTION 'undo';
                 EXCEPTION WHEN raise_exception THEN NULL;
                 END;
             END $$",
        )
        .unwrap();
    assert!(backend_lease(&mut client, "scratch_service").is_some());
    let rows: i64 =
        client.query_one("SELECT count(*) FROM system_nodes WHERE service = 'scratch_service'", &[]).unwrap().get(0);
    assert_eq!(rows, 1);

    // IDs after the rollbacks keep growing.
    for _ in 0..100 {
        issued.push(next_id(&mut client).unwrap());
    }
    assert!(issued.windows(2).all(|w| w[0] < w[1]), "{issued:?}");
}

#[test]
fn a_renewal_made_in_a_transaction_that_rolls_back_stays_committed() {
    let db = TestDb::create("verify_rollback");
    let service = db.name.clone();
    let mut client = db.connect();
    next_id(&mut client).unwrap();
    let seen = |c: &mut postgres::Client| -> String {
        c.query_one("SELECT last_seen::text FROM system_nodes WHERE service = $1", &[&service]).unwrap().get(0)
    };
    let claimed_seen = seen(&mut client);
    wait_past_backend_watermark(&mut client, &service);
    client.batch_execute("BEGIN").unwrap();
    next_id(&mut client).unwrap(); // due: a renewal, committed on its own before the ID
    client.batch_execute("ROLLBACK").unwrap();
    let renewed_seen = seen(&mut client);
    assert_ne!(renewed_seen, claimed_seen, "the renewal outlived the rollback");
    next_id(&mut client).unwrap(); // inside the renewed window: no write
    assert_eq!(seen(&mut client), renewed_seen);
}

#[test]
fn a_taken_over_backend_reclaims_before_its_next_id_and_never_stamps_past_its_watermark() {
    let db = TestDb::create("takeover");
    let service = db.name.clone();
    let (mut backend, notices) = db.connect_recording();
    let mut issued: Vec<i64> = (0..50).map(|_| next_id(&mut backend).unwrap()).collect();
    let lease = backend_lease(&mut backend, &service).unwrap();

    // Another node takes the row over: the version moves and the identity changes. Its not_before
    // would be the row's watermark, so the old backend must never stamp at or past it.
    let mut admin = db.connect();
    let watermark: String = admin
        .query_one(
            "UPDATE system_nodes SET version = version + 1, host = '10.7.7.7', port = 7, backend_slot = NULL, \
                 last_seen = clock_timestamp() \
             WHERE service = $1 AND machine_id = $2 RETURNING issued_until::text",
            &[&service, &lease.machine_id],
        )
        .unwrap()
        .get(0);
    // Once the clock has passed the watermark, the backend cannot issue another ID without a lease check.
    wait_until_server_clock_passes(&mut admin, &watermark);
    let after: Vec<i64> = (0..50).map(|_| next_id(&mut backend).unwrap()).collect();

    let warnings = notices.take();
    assert!(
        warnings.iter().any(|n| n.code().code() == "01000"
            && n.message()
                .contains(&format!("machine id {} of service \"{service}\" is no longer held", lease.machine_id))),
        "{warnings:?}"
    );
    let relet = backend_lease(&mut backend, &service).unwrap();
    assert_ne!(relet.machine_id, lease.machine_id, "a fresh machine id");
    assert!(after.iter().all(|&id| machine_id_of(&mut backend, id) == relet.machine_id));
    assert!(after[0] > *issued.last().unwrap(), "IDs keep growing across leases");
    issued.extend(after);
    let past: i64 = admin
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[]) id, idgen_decode(id) d \
             WHERE d.machine_id = $2 AND d.ts >= $3::text::timestamptz",
            &[&issued, &lease.machine_id, &watermark],
        )
        .unwrap()
        .get(0);
    assert_eq!(past, 0, "IDs with the lost machine id stamped at or past the watermark the new holder starts after");
}

#[test]
fn a_backend_never_waits_on_another_sessions_open_transaction() {
    let db = TestDb::create("no_wait");
    let service = db.name.clone();
    let mut first = db.connect();
    first.batch_execute("BEGIN").unwrap();
    next_id(&mut first).unwrap(); // claims machine id 0 on its own; the transaction stays open
    let mut second = db.connect();
    // `first` commits only at the end: a wait on it could only end by this timeout, with 55P03.
    second.batch_execute("SET lock_timeout = '5s'").unwrap();
    next_id(&mut second).unwrap();
    let (a, b) = (backend_lease(&mut first, &service).unwrap(), backend_lease(&mut second, &service).unwrap());
    assert_ne!(a.machine_id, b.machine_id);
    first.batch_execute("COMMIT").unwrap();
}

#[test]
fn a_verification_finding_its_row_locked_fails_at_once_with_55p03() {
    let db = TestDb::create("verify_busy");
    let service = db.name.clone();
    let mut backend = db.connect();
    // The other transaction holds the row until the end: waiting for it could only end by this
    // timeout, whose 55P03 says "lock timeout"; idgen's says the entry "is busy".
    backend.batch_execute("SET lock_timeout = '5s'").unwrap();
    next_id(&mut backend).unwrap();
    let mut other = db.connect();
    other.batch_execute("BEGIN").unwrap();
    other.execute("SELECT 1 FROM system_nodes WHERE service = $1 FOR UPDATE", &[&service]).unwrap();
    wait_past_backend_watermark(&mut backend, &service);
    let err = next_id(&mut backend).unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "{err:?}");
    assert!(db_error(&err).message().contains("is busy"), "{err:?}");
    other.batch_execute("COMMIT").unwrap();
    next_id(&mut backend).unwrap();
}

#[test]
fn read_only_transactions_issue_only_below_the_watermark_the_last_write_recorded() {
    let db = TestDb::create("backend_read_only");
    let service = db.name.clone();
    let mut client = db.connect();
    client.batch_execute("BEGIN READ ONLY").unwrap();
    let err = next_id(&mut client).unwrap_err();
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(sqlstate(&err), "25006");
    assert_eq!(
        db_error(&err).message(),
        format!(
            "idgen_next_id: this backend holds no machine id for service \"{service}\" and cannot claim one in a read-only transaction"
        )
    );
    // Claimed in a read-write transaction, the lease serves read-only ones only below the watermark
    // that claim wrote: an ID issued there is stamped before it, and past it the backend refuses.
    next_id(&mut client).unwrap();
    let watermark = |c: &mut postgres::Client| -> String {
        c.query_one("SELECT issued_until::text FROM system_nodes WHERE service = $1", &[&service]).unwrap().get(0)
    };
    let written = watermark(&mut client);
    client.batch_execute("SET default_transaction_read_only = on").unwrap();
    match next_id(&mut client) {
        Ok(id) => {
            let below: bool = client
                .query_one("SELECT (idgen_decode($1)).ts < $2::text::timestamptz", &[&id, &written])
                .unwrap()
                .get(0);
            assert!(below, "ID {id} stamped at or past the watermark {written}");
        }
        Err(err) => assert_eq!(sqlstate(&err), "25006", "{err:?}"),
    }
    wait_until_server_clock_passes(&mut client, &written);
    let err = next_id(&mut client).unwrap_err();
    assert_eq!(sqlstate(&err), "25006", "{err:?}");
    assert!(db_error(&err).message().contains("cannot be renewed in a read-only transaction"), "{err:?}");
    assert_eq!(watermark(&mut client), written, "a read-only transaction wrote nothing");
    // A read-write call moves the watermark on, and read-only ones may issue below it again.
    client.batch_execute("SET default_transaction_read_only = off").unwrap();
    next_id(&mut client).unwrap();
    assert_ne!(watermark(&mut client), written);
}

#[test]
fn a_two_phase_transaction_may_use_ids_and_holds_nothing_of_the_registry() {
    let db = TestDb::create("prepare");
    let service = db.name.clone();
    let mut client = db.connect();
    client.batch_execute("BEGIN").unwrap();
    next_id(&mut client).unwrap(); // the claim commits on its own, outside this transaction
    client.batch_execute("PREPARE TRANSACTION 'idgen_t_prepare'").unwrap();
    // Nothing of the registry waits for COMMIT PREPARED: another backend claims, and this one mints on.
    let mut other = db.connect();
    other.batch_execute("SET lock_timeout = '5s'").unwrap();
    next_id(&mut other).unwrap();
    next_id(&mut client).unwrap();
    assert_eq!(backend_rows(&mut client, &service), 2);
    client.batch_execute("ROLLBACK PREPARED 'idgen_t_prepare'").unwrap();
    assert_eq!(backend_rows(&mut client, &service), 2, "the claims were committed on their own");
}

#[test]
fn settings_choose_the_service_and_the_registered_address() {
    let db = TestDb::create("backend_settings");
    let mut client = db.connect();
    define_service(&mut client, "billing");
    client.batch_execute("SET idgen.service = 'billing'; SET idgen.node_host = '10.20.30.40'").unwrap();
    next_id(&mut client).unwrap();
    let row = client
        .query_one(
            "SELECT host(host), port = current_setting('port')::int FROM system_nodes WHERE service = 'billing'",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, bool>(1)), ("10.20.30.40".to_owned(), true));
    // Services share one id space: a service node claiming 'billing' gets another machine id.
    let node = claim(&mut client, "billing", "10.0.0.1", 8080).unwrap();
    assert_ne!(node.machine_id, backend_lease(&mut client, "billing").unwrap().machine_id);

    // A bad value is refused when it is set, not at the next insert, and the session goes on
    // with the value it had.
    for (setting, fragment) in [
        ("SET idgen.service = ' billing'", "setting \"idgen.service\" must not begin or end with white space"),
        ("SET idgen.node_host = 'db.example'", "not an IP address"),
    ] {
        let err = client.batch_execute(setting).expect_err(setting);
        assert_eq!(sqlstate(&err), "22023", "{setting}");
        assert!(db_error(&err).detail().is_some_and(|d| d.contains(fragment)), "{err:?}");
        next_id(&mut client).unwrap();
        let service: String = client.query_one("SELECT current_setting('idgen.service')", &[]).unwrap().get(0);
        assert_eq!(service, "billing", "{setting}");
    }
    let err = client.query_one("SELECT idgen_next_id(NULL)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "22004");
}

/// The watermark of this connection's lease row, in Unix ms, read from another session.
fn row_watermark_ms(db: &TestDb, machine_id: i32, slot: i32) -> i64 {
    db.connect()
        .query_one(
            "SELECT floor(extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes \
             WHERE service = current_database() AND machine_id = $1 AND backend_slot = $2",
            &[&machine_id, &slot],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_session_s_own_settings_break_neither_its_exit_record_nor_its_claims() {
    let db = TestDb::create("exit_settings");
    // A database whose sessions start read-only and with a short statement timeout: idgen's own
    // transactions (the registry writer's, the exit record) write all the same.
    let mut admin = db.connect();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on; ALTER DATABASE {} SET statement_timeout = '1ms'",
            db.name, db.name
        ))
        .unwrap();
    let mut session = db.connect();
    // (The session's own statement_timeout is the tests' bound, from its connection options, which
    // take precedence over the database's 1 ms; idgen's own sessions get the database's.)
    session.batch_execute("SET default_transaction_read_only = off").unwrap();
    let id = next_id(&mut session).unwrap();
    let lease = backend_lease(&mut session, &db.name).unwrap();
    // The session turns read-only again, and is ended (a terminated backend records its last stamp
    // rather than leave its lease in its slot): its exit still records it.
    session.batch_execute("SET default_transaction_read_only = on").unwrap();
    let pid: i32 = session.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let stamped_ms: i64 = session
        .query_one("SELECT floor(extract(epoch FROM (idgen_decode($1)).ts) * 1000)::bigint", &[&id])
        .unwrap()
        .get(0);
    admin.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    drop(session);
    wait_for_exit(&mut admin, pid);
    assert_eq!(
        row_watermark_ms(&db, lease.machine_id, lease.backend_slot),
        stamped_ms,
        "the window was lowered to the last stamp"
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} RESET default_transaction_read_only; ALTER DATABASE {} RESET statement_timeout",
            db.name, db.name
        ))
        .unwrap();
}

/// A backend terminated while its generator waits for the clock (here: the next 10 ms tick of a
/// `sonyflake` service, 256 IDs each) exits, and its exit records its lease, releasing the row.
/// (It once hung in its exit for good, holding its locks, its connection and the server's
/// shutdown: the exit hook waited for the lock the abandoned wait held.)
#[test]
fn a_backend_terminated_while_its_generator_waits_for_the_clock_exits_and_releases_its_id() {
    let db = TestDb::create("terminated_in_wait");
    let mut admin = db.connect();
    admin.batch_execute("SELECT idgen_define_layout('tick', 'sonyflake')").unwrap();
    for round in 0..3 {
        let mut minter = db.connect();
        let pid: i32 = minter.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        minter.query_one("SELECT idgen_next_id('tick')", &[]).unwrap();
        let minting = std::thread::spawn(move || {
            minter.batch_execute("SELECT count(idgen_next_id('tick')) FROM generate_series(1, 2000000)")
        });
        // Minting at far more than 25,600 IDs a second, it spends nearly all its time waiting for
        // the next tick (once generate_series has made its rows: a second is plenty).
        wait_for("the minting backend's query", PATIENCE, || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'SELECT count(%'",
                    &[&pid],
                )
                .unwrap()
                .get::<_, i64>(0)
                == 1
        });
        std::thread::sleep(std::time::Duration::from_millis(1500));
        admin.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
        wait_for_exit(&mut admin, pid);
        let ended = join_within(minting, PATIENCE, "the terminated backend's client");
        assert!(ended.is_err(), "round {round}: the query was not ended by the termination");
        let held: i64 = admin
            .query_one("SELECT count(*) FROM system_nodes WHERE service = 'tick' AND released_at IS NULL", &[])
            .unwrap()
            .get(0);
        assert_eq!(held, 0, "round {round}: the terminated backend's exit left its id held");
    }
}

#[test]
fn a_misspelt_service_is_refused_and_creates_nothing_even_for_a_superuser() {
    let db = TestDb::create("typo");
    let mut admin = db.connect();
    let refused = admin.query_one("SELECT idgen_next_id('ordrs')", &[]).unwrap_err();
    let e = db_error(&refused);
    assert_eq!(e.code().code(), "42704", "{e:?}");
    assert_eq!(e.message(), "idgen_next_id: service \"ordrs\" does not exist");
    assert_eq!(e.hint(), Some("Check the name. To create the service: SELECT idgen_define_layout('ordrs');"));
    // Through the setting too, and in a column default, as a migration would meet it.
    admin.batch_execute("SET idgen.service = 'ordrs'").unwrap();
    assert_eq!(sqlstate(&next_id(&mut admin).unwrap_err()), "42704");
    admin
        .batch_execute("RESET idgen.service; CREATE TABLE t (id bigint DEFAULT idgen_next_id('ordrs'), v int)")
        .unwrap();
    assert_eq!(sqlstate(&admin.batch_execute("INSERT INTO t (v) VALUES (1)").unwrap_err()), "42704");
    let (rows, layouts): (i64, i64) = {
        let row = admin
            .query_one(
                "SELECT (SELECT count(*) FROM system_nodes WHERE service = 'ordrs'),
                        (SELECT count(*) FROM idgen_layouts WHERE service = 'ordrs')",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((rows, layouts), (0, 0), "the typo created no service");

    // The database's own service needs nothing; a service exists once defined, granted or claimed.
    next_id(&mut admin).unwrap();
    define_service(&mut admin, "orders");
    admin.query_one("SELECT idgen_next_id('orders')", &[]).unwrap();
    ensure_login_role(&mut admin, "typo_app");
    admin.query_one("SELECT idgen_grant_service('billing', 'typo_app')", &[]).unwrap();
    admin.query_one("SELECT idgen_next_id('billing')", &[]).unwrap();
    claim(&mut admin, "shipping", "10.0.0.1", 1).unwrap();
    admin.query_one("SELECT idgen_next_id('shipping')", &[]).unwrap();
    // A transaction whose snapshot predates the definition sees the service all the same.
    let mut early = db.connect();
    early.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    define_service(&mut admin, "late");
    early.query_one("SELECT idgen_next_id('late')", &[]).unwrap();
    early.batch_execute("COMMIT").unwrap();
    // A role granted nothing learns nothing about which services exist: it is refused for its grant.
    admin.batch_execute("GRANT USAGE ON SCHEMA public TO typo_app").unwrap();
    let mut app = postgres::Client::connect(&format!("{} user=typo_app", db.dsn()), postgres::NoTls).unwrap();
    assert_eq!(sqlstate(&app.query_one("SELECT idgen_next_id('ordrs')", &[]).unwrap_err()), "42501");
    assert_eq!(sqlstate(&app.query_one("SELECT idgen_next_id('orders')", &[]).unwrap_err()), "42501");
}

#[test]
fn a_layout_defined_in_the_minting_transaction_is_refused_at_once_until_it_commits() {
    // A migration that defines its service and mints in one transaction: the backend's claim commits
    // in a transaction of its own, which would wait for the definition's row (10 s, then a lock
    // timeout that names nothing). It is refused at once, and says what to commit.
    let db = TestDb::create("define_then_mint");
    let mut admin = db.connect();
    admin.batch_execute("BEGIN; SELECT idgen_define_layout('orders', 'sonyflake')").unwrap();
    let started = std::time::Instant::now();
    let err = admin.query_one("SELECT idgen_next_id('orders')", &[]).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000", "{e:?}");
    assert_eq!(
        e.message(),
        "idgen_next_id: service \"orders\" was defined, granted or claimed in this transaction, which has not committed"
    );
    assert_eq!(e.hint(), Some("Commit that first (in a migration step of its own), then mint IDs."), "{e:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "refused at once, not after a lock timeout");
    admin.batch_execute("ROLLBACK").unwrap();
    // Inside a savepoint (a subtransaction) too; once committed, the service mints by its layout.
    admin
        .batch_execute("BEGIN; CREATE TABLE t (id bigint DEFAULT idgen_next_id('orders')); SAVEPOINT s; SELECT idgen_define_layout('orders', 'sonyflake')")
        .unwrap();
    assert_eq!(sqlstate(&admin.batch_execute("INSERT INTO t DEFAULT VALUES").unwrap_err()), "55000");
    admin.batch_execute("ROLLBACK").unwrap();
    // A grant in the transaction: the backend's claim would create the service in a transaction of
    // its own, left behind by a rollback.
    ensure_login_role(&mut admin, "define_then_mint_app");
    admin.batch_execute("BEGIN; SELECT idgen_grant_service('billing', 'define_then_mint_app')").unwrap();
    let err = admin.query_one("SELECT idgen_next_id('billing')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    admin.batch_execute("ROLLBACK").unwrap();
    let left: i64 = admin.query_one("SELECT count(*) FROM system_nodes WHERE service = 'billing'", &[]).unwrap().get(0);
    assert_eq!(left, 0, "the rollback leaves no service behind");
    assert_eq!(sqlstate(&admin.query_one("SELECT idgen_next_id('billing')", &[]).unwrap_err()), "42704");
    // A node's claim in the transaction holds the layout's row (the claim fixes it): refused too. The
    // claim recorded the service's layout in a transaction of its own, so the service exists after
    // a rollback, and mints.
    admin.batch_execute("BEGIN; SELECT idgen_claim('shipping', '10.0.0.1', 1)").unwrap();
    assert_eq!(sqlstate(&admin.query_one("SELECT idgen_next_id('shipping')", &[]).unwrap_err()), "55000");
    admin.batch_execute("ROLLBACK").unwrap();
    admin.query_one("SELECT idgen_next_id('shipping')", &[]).unwrap();
    admin.batch_execute("SELECT idgen_define_layout('orders', 'sonyflake')").unwrap();
    admin
        .batch_execute(
            "BEGIN; CREATE TABLE t (id bigint DEFAULT idgen_next_id('orders')); INSERT INTO t DEFAULT VALUES; COMMIT",
        )
        .unwrap();
    let layout = service_layout(&mut admin, "orders").unwrap();
    assert_eq!(layout, idgen_core::layout::Preset::Sonyflake.layout());
}
