//! Nodes of services with layouts of their own (idgen 0.7.0), against real servers (started by
//! scripts/test.sh): the node reads its layout from the registry and mints with it, beside
//! backends of the same service in one primary key, for every preset; a node adopts the machine
//! id it asks for, and the registry refuses one held or outside the pool; the release watermark
//! covers a 10 ms tick to its end; a node that cannot read its layout does not mint. No test
//! depends on the machine's speed: each waits for a state within a generous deadline.

use idgen_client::{Config, Error, IdgenNode, Pool, Preset, ServiceLayout, Stop};
use idgen_cluster_tests::*;
use postgres::Client;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn real_unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Defines `service` with `preset` (all of its machine ids, or `pool`) before its first claim.
fn define(admin: &mut Client, service: &str, preset: Preset, pool: Option<(i32, i32)>) {
    let (first, last) = (pool.map(|p| p.0), pool.map(|p| p.1));
    admin
        .query(
            "SELECT idgen_define_layout($1, preset => $2, pool_first => $3, pool_last => $4)",
            &[&service, &preset.name(), &first, &last],
        )
        .unwrap();
}

/// How many of `ids` `idgen_decode(id, service)` does not decode to `machine_id`.
fn not_decoding_to(admin: &mut Client, service: &str, ids: &[i64], machine_id: i32) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[]) id WHERE (idgen_decode(id, $2)).machine_id <> $3",
            &[&ids, &service, &machine_id],
        )
        .unwrap()
        .get(0)
}

/// Starts a node, in a thread of its own, expecting `start` to give up: its error, within
/// [`PATIENCE`] (a refusal retried until `start_timeout`, an hour here, fails the test instead).
fn refused_start(mut config: Config) -> Error {
    config.start_timeout = Duration::from_secs(3600);
    let started = spawn_named(format!("start of {}:{}", config.host, config.port), move || IdgenNode::start(config));
    match join_all(vec![started], PATIENCE, "a start the registry refuses (retried?)").remove(0) {
        Ok(node) => panic!("start claimed machine id {}", node.machine_id()),
        Err(e) => e,
    }
}

/// The SQLSTATE and the text of a refused start.
fn start_refusal(error: &Error) -> (String, String) {
    match error {
        Error::Start(e) => (sqlstate(e).to_owned(), error.to_string()),
        other => panic!("not a refused claim: {other}"),
    }
}

#[test]
fn a_node_of_a_sonyflake_service_mints_ids_that_decode_to_its_machine_id_by_the_services_layout() {
    let db = TestDb::create("client_layout_sonyflake");
    let mut admin = db.connect();
    define(&mut admin, "svc", Preset::Sonyflake, Some((0, 255)));
    let before = real_unix_ms();
    let node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.5.1", 1)).unwrap();
    let sonyflake = Preset::Sonyflake.layout();
    assert_eq!(node.layout(), ServiceLayout { layout: sonyflake, pool: Pool { first: 0, last: 255 } });
    assert_eq!(node.metrics().layout, node.layout());
    assert!((0..=255).contains(&node.machine_id()), "machine id {} outside the pool", node.machine_id());
    let ids: Vec<i64> = (0..2000).map(|_| node.next_id().unwrap()).collect();
    let after = real_unix_ms();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "IDs out of order");
    // The database decodes them by the service's layout: the node's machine id, stamped while it ran.
    assert_eq!(not_decoding_to(&mut admin, "svc", &ids, node.machine_id()), 0);
    let stamped: Vec<i64> = admin
        .query_one(
            "SELECT array_agg(floor(extract(epoch FROM (idgen_decode(id, 'svc')).ts) * 1000)::bigint)
               FROM unnest($1::bigint[]) id",
            &[&ids],
        )
        .unwrap()
        .get(0);
    let tick = |ms: i64| ms - (ms - sonyflake.epoch_unix_ms).rem_euclid(sonyflake.time_unit_ms);
    assert!(stamped.iter().all(|&ms| ms >= tick(before) && ms <= after), "stamps outside {before}..{after}");
    // Sonyflake's own decomposition agrees: machine id in the low 16 bits.
    assert!(ids.iter().all(|id| (id & 0xFFFF) as i32 == node.machine_id()));
    assert!(node.shutdown().unwrap());
}

/// What one holder minted into a preset's table.
fn holder_thread(dsn: String, preset: Preset, kind: &'static str, t: usize) -> std::thread::JoinHandle<usize> {
    let (service, table) = (format!("svc_{}", preset.name()), format!("minted_{}", preset.name()));
    spawn_named(format!("{kind} {t} of {service}"), move || {
        let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
        let mut minted = 0;
        if kind == "node" {
            for round in 0..4 {
                // Restarts: a new identity every other round, the same one (and its id) otherwise.
                let host = format!("10.{}.{t}.1", 1 + preset as usize);
                let node = IdgenNode::start(Config::new(&dsn, &service, &host, 9000 + round / 2)).unwrap();
                let ids: Vec<i64> = (0..1000).map(|_| node.next_id().unwrap()).collect();
                let holder = format!("{host}:{}", 9000 + round / 2);
                client
                    .execute(
                        &format!(
                            "INSERT INTO {table} (id, machine_id, version, holder)
                             SELECT unnest($1::bigint[]), $2, $3, $4"
                        ),
                        &[&ids, &node.machine_id(), &node.version(), &holder],
                    )
                    .unwrap();
                assert!(node.shutdown().unwrap());
                minted += ids.len();
            }
        } else {
            for round in 0..10 {
                // A new connection each round: a backend lease each, and slots reused.
                let mut backend = Client::connect(&dsn, postgres::NoTls).unwrap();
                let session = format!("backend {t}.{round}");
                backend
                    .execute(
                        &format!("INSERT INTO {table} (holder) SELECT $1 FROM generate_series(1, 300)"),
                        &[&session],
                    )
                    .unwrap();
                // The lease the registry granted this backend, as it holds it.
                let updated = backend
                    .execute(
                        &format!(
                            "UPDATE {table} t SET machine_id = l.machine_id, version = l.version, slot = l.backend_slot
                               FROM idgen_backend_leases() l WHERE l.service = $1 AND t.holder = $2"
                        ),
                        &[&service, &session],
                    )
                    .unwrap();
                assert_eq!(updated, 300, "{session}: no lease of {service}");
                minted += 300;
            }
        }
        minted
    })
}

#[test]
fn nodes_and_backends_of_each_preset_share_a_table_with_churn_and_every_id_decodes_to_its_holder() {
    let db = TestDb::create("client_layout_churn");
    let mut admin = db.connect();
    for preset in Preset::ALL {
        define(&mut admin, &format!("svc_{}", preset.name()), preset, None);
        admin
            .batch_execute(&format!(
                "CREATE TABLE minted_{p} (id bigint PRIMARY KEY DEFAULT idgen_next_id('svc_{p}'),
                                          machine_id integer, version bigint, holder text NOT NULL, slot integer)",
                p = preset.name()
            ))
            .unwrap();
    }
    let mut threads = vec![];
    for preset in Preset::ALL {
        for t in 0..2 {
            threads.push(holder_thread(db.dsn(), preset, "node", t));
            threads.push(holder_thread(db.dsn(), preset, "backend", t));
        }
    }
    let minted: usize = join_all(threads, WORK_PATIENCE, "the nodes and backends").into_iter().sum();
    assert_eq!(minted, 3 * 2 * (4 * 1000 + 10 * 300));
    for preset in Preset::ALL {
        let (service, table) = (format!("svc_{}", preset.name()), format!("minted_{}", preset.name()));
        // One primary key: a duplicate would have failed its insert. Every row's holder is known.
        let row = admin
            .query_one(
                &format!(
                    "SELECT count(*), count(DISTINCT id), count(machine_id), max(id),
                            count(*) FILTER (WHERE (idgen_decode(id, $1)).machine_id IS DISTINCT FROM machine_id)
                       FROM {table}"
                ),
                &[&service],
            )
            .unwrap();
        let (rows, distinct, known, max_id, astray): (i64, i64, i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        assert_eq!((rows, distinct, known), (2 * (4000 + 3000), 2 * (4000 + 3000), rows), "{service}");
        assert_eq!(astray, 0, "{service}: IDs decoding to another machine id than their holder's");
        assert!(max_id <= preset.layout().max_id(), "{service}: ID {max_id} above the layout");
        // The registry's history names, for the first and last ID of every holder's lease, the
        // holder that minted it: a node by its address and the version it was granted, a backend
        // by its slot (a connection that takes the slot next reuses the slot's row: the same
        // holder, with no event of its own, so the version named is the slot's first).
        let tenures = admin
            .query(
                &format!(
                    "SELECT min(id), max(id), machine_id, version, holder, slot FROM {table}
                      GROUP BY machine_id, version, holder, slot ORDER BY 1"
                ),
                &[],
            )
            .unwrap();
        for tenure in &tenures {
            let (machine_id, version, holder, slot): (i32, i64, String, Option<i32>) =
                (tenure.get(2), tenure.get(3), tenure.get(4), tenure.get(5));
            for id in [tenure.get::<_, i64>(0), tenure.get(1)] {
                let told = admin
                    .query_one(
                        "SELECT finding, machine_id, version, holder FROM idgen_explain($1, $2)",
                        &[&id, &service],
                    )
                    .unwrap();
                let (finding, named_version, named): (String, Option<i64>, Option<String>) =
                    (told.get(0), told.get(2), told.get(3));
                let named = named.unwrap_or_default();
                assert_eq!(
                    (finding.as_str(), told.get::<_, i32>(1)),
                    ("held", machine_id),
                    "{service}: ID {id} of {holder}"
                );
                match slot {
                    Some(slot) => {
                        let by_slot = format!("backend slot {slot} of ");
                        assert!(
                            named.starts_with(&by_slot),
                            "{service}: ID {id} of {holder} (slot {slot}) named {named}"
                        );
                        assert!(named_version <= Some(version), "{service}: ID {id} of {holder}: {named_version:?}");
                    }
                    None => assert_eq!((named, named_version), (holder.clone(), Some(version)), "{service}: ID {id}"),
                }
            }
        }
    }
}

#[test]
fn a_node_adopts_the_machine_id_it_asks_for_and_the_registry_refuses_it_to_a_second() {
    let db = TestDb::create("client_layout_adopt");
    let mut admin = db.connect();
    define(&mut admin, "svc", Preset::Sonyflake, Some((0, 999)));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.6.1", 1);
    config.machine_id = Some(777);
    let first = IdgenNode::start(config).unwrap();
    assert_eq!(first.machine_id(), 777);
    let before = first.next_id().unwrap();
    assert_eq!(not_decoding_to(&mut admin, "svc", &[before], 777), 0);

    // Another node asking for it: refused at once (55006, not retried), naming the holder.
    let mut second = Config::new(&db.dsn(), "svc", "10.0.6.2", 1);
    second.machine_id = Some(777);
    let (code, text) = start_refusal(&refused_start(second));
    assert_eq!(code, "55006", "{text}");
    assert!(text.contains("10.0.6.1:1"), "the refusal does not name the holder: {text}");
    // The holder minted on, and still holds it.
    let after: Vec<i64> = (0..1000).map(|_| first.next_id().unwrap()).collect();
    assert!(after[0] > before);
    assert_eq!(not_decoding_to(&mut admin, "svc", &after, 777), 0);
    let held: Vec<(String, i32)> = admin
        .query("SELECT host(host), machine_id FROM system_nodes WHERE service = 'svc' AND released_at IS NULL", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(held, [("10.0.6.1".to_owned(), 777)]);

    // Outside the pool (and outside any 16-bit field): 22023, not retried, nothing claimed.
    for outside in [1000, 70_000] {
        let mut config = Config::new(&db.dsn(), "svc", "10.0.6.3", 1);
        config.machine_id = Some(outside);
        let (code, text) = start_refusal(&refused_start(config));
        assert_eq!(code, "22023", "{outside}: {text}");
    }
    let rows: i64 = admin.query_one("SELECT count(*) FROM system_nodes WHERE host = '10.0.6.3'", &[]).unwrap().get(0);
    assert_eq!(rows, 0);

    // Released, the id goes back to the node that asks for it again (its own).
    assert!(first.shutdown().unwrap());
    let mut again = Config::new(&db.dsn(), "svc", "10.0.6.1", 1);
    again.machine_id = Some(777);
    let again = IdgenNode::start(again).unwrap();
    assert_eq!(again.machine_id(), 777);
    assert!(again.next_id().unwrap() > *after.last().unwrap());
    assert!(again.shutdown().unwrap());
}

#[test]
fn a_server_before_0_7_0_mints_with_the_default_layout_and_refuses_an_adoption_locally() {
    let db = TestDb::empty_on(&base_dsn(), "client_layout_old_server");
    let mut admin = db.connect();
    admin.batch_execute("CREATE EXTENSION idgen VERSION '0.6.0'").unwrap();
    let mut config = Config::new(&db.dsn(), "svc", "10.0.6.4", 1);
    config.machine_id = Some(5);
    match IdgenNode::start(config) {
        Err(e @ Error::MachineIdNotSupported { machine_id: 5, .. }) => {
            assert!(e.to_string().contains("0.6.0"), "{e}")
        }
        other => panic!("{:?}", other.map(|n| n.machine_id())),
    }
    let rows: i64 = admin.query_one("SELECT count(*) FROM system_nodes", &[]).unwrap().get(0);
    assert_eq!(rows, 0, "nothing claimed");
    // Without one, the node claims (smallint machine ids), mints with the default layout, heartbeats
    // and releases.
    let mut config = Config::new(&db.dsn(), "svc", "10.0.6.4", 1);
    config.heartbeat_interval = Some(Duration::from_millis(200));
    let node = IdgenNode::start(config).unwrap();
    assert_eq!(node.layout(), ServiceLayout::DEFAULT);
    let id = node.next_id().unwrap();
    let decoded: i16 = admin.query_one("SELECT machine_id FROM idgen_decode($1)", &[&id]).unwrap().get(0);
    assert_eq!(i32::from(decoded), node.machine_id());
    wait_for("two heartbeats against 0.6.0", PATIENCE, || node.metrics().heartbeats_ok > 1);
    assert_eq!(node.metrics().heartbeats_failed, 0);
    assert!(node.shutdown().unwrap());
}

#[test]
fn a_sonyflake_nodes_release_watermark_covers_its_last_ten_millisecond_tick_to_its_end() {
    let db = TestDb::create("client_layout_watermark");
    let mut admin = db.connect();
    define(&mut admin, "svc", Preset::Sonyflake, None);
    let layout = Preset::Sonyflake.layout();
    // The node's clock runs on the real one until it is stopped 3 ms into a tick: its IDs and its
    // release all see that instant, 6 ms before the tick ends.
    let stopped = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.6.5", 1);
    config.wall_clock = Arc::new({
        let stopped = stopped.clone();
        move || match stopped.load(Ordering::SeqCst) {
            0 => real_unix_ms(),
            at => at,
        }
    });
    let node = IdgenNode::start(config).unwrap();
    let now = real_unix_ms();
    let tick_start = layout.unix_ms_of(layout.ticks_floor(now) + 1);
    stopped.store(tick_start + 3, Ordering::SeqCst);
    let ids: Vec<i64> = (0..10).map(|_| node.next_id().unwrap()).collect();
    let last_tick = layout.decompose(*ids.last().unwrap()).unwrap().ticks;
    assert_eq!(layout.unix_ms_of(last_tick), tick_start, "all in the stopped clock's tick");
    assert!(node.shutdown().unwrap());
    let watermark: i64 = admin
        .query_one(
            "SELECT floor(extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes
              WHERE service = 'svc' AND host = '10.0.6.5' AND released_at IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    let tick_end = layout.tick_end_unix_ms(last_tick);
    assert_eq!(tick_end, tick_start + 9);
    assert!(watermark >= tick_end, "released with watermark {watermark}, inside the last ID's tick (ends {tick_end})");
}

#[test]
fn a_node_whose_role_cannot_read_the_layout_fails_to_start_and_leaves_its_claim_released() {
    let db = TestDb::create("client_layout_unreadable");
    let mut admin = db.connect();
    let role = "idgen_t_layout_reader";
    ensure_login_role(&mut admin, role);
    admin
        .batch_execute(&format!(
            "SELECT idgen_grant_service('svc', '{role}');
             REVOKE SELECT ON idgen_layouts FROM PUBLIC;"
        ))
        .unwrap();
    let dsn = format!("{} user={role}", db.dsn());
    let started = Instant::now();
    match IdgenNode::start(Config::new(&dsn, "svc", "10.0.6.6", 1)) {
        Err(e @ Error::Layout { .. }) => {
            let text = e.to_string();
            assert!(text.contains("42501") && text.contains("idgen_layouts"), "{text}");
            assert!(text.contains("the claim was released"), "{text}");
        }
        other => panic!("{:?}", other.map(|n| n.layout())),
    }
    assert!(started.elapsed() < PATIENCE, "a refused read is not retried");
    let released: bool = admin
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE host = '10.0.6.6'", &[])
        .unwrap()
        .get(0);
    assert!(released, "the claim was left held");
}

#[test]
fn a_node_that_does_not_see_its_services_layout_fails_to_start_rather_than_guess() {
    let db = TestDb::create("client_layout_unseen");
    let mut admin = db.connect();
    let role = "idgen_t_layout_unseen";
    ensure_login_role(&mut admin, role);
    // A registry whose view shows the role no row, as when its grant goes between the claim and
    // the read: the view as installed, filtered to nothing.
    admin
        .batch_execute(&format!(
            "SELECT idgen_grant_service('svc', '{role}');
             DO $$ BEGIN
               EXECUTE format('CREATE OR REPLACE VIEW idgen_layouts WITH (security_barrier) AS SELECT * FROM (%s) v WHERE false',
                              rtrim(pg_get_viewdef('idgen_layouts'), ';'));
             END $$;"
        ))
        .unwrap();
    let dsn = format!("{} user={role}", db.dsn());
    match IdgenNode::start(Config::new(&dsn, "svc", "10.0.6.8", 1)) {
        Err(e @ Error::Layout { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&format!("role \"{role}\" does not see its row")), "{text}");
            assert!(text.contains("the claim was released"), "{text}");
        }
        other => panic!("{:?}", other.map(|n| n.layout())),
    }
    let released: bool = admin
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE host = '10.0.6.8'", &[])
        .unwrap()
        .get(0);
    assert!(released, "the claim was left held");
}

#[test]
fn a_layout_view_planted_on_the_search_path_is_not_what_the_node_reads() {
    // idgen in a schema of its own; a lower role that may create in public plants an
    // idgen_layouts there that would make a snowflake service mint as js_safe.
    let db = TestDb::empty_on(&base_dsn(), "client_layout_planted");
    let mut admin = db.connect();
    ensure_login_role(&mut admin, "idgen_t_attacker");
    admin
        .batch_execute(
            "CREATE SCHEMA idgen_app; CREATE EXTENSION idgen SCHEMA idgen_app;
             GRANT CREATE ON SCHEMA public TO PUBLIC;
             SET ROLE idgen_t_attacker;
             CREATE VIEW public.idgen_layouts AS
             SELECT 'svc'::text AS service, 'js_safe'::text AS preset, '2025-01-01Z'::timestamptz AS epoch,
                    10 AS time_unit_ms, 37 AS time_bits, 8 AS machine_bits, 8 AS sequence_bits,
                    'time_machine_sequence'::text AS field_order, 0 AS pool_first, 255 AS pool_last;
             GRANT SELECT ON public.idgen_layouts TO PUBLIC;
             RESET ROLE;",
        )
        .unwrap();
    let node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.6.9", 1)).unwrap();
    assert_eq!(node.layout(), ServiceLayout::DEFAULT, "the node read the planted view");
    let id = node.next_id().unwrap();
    let decoded: i32 =
        admin.query_one("SELECT machine_id FROM idgen_app.idgen_decode($1, 'svc')", &[&id]).unwrap().get(0);
    assert_eq!(decoded, node.machine_id());
    assert!(node.shutdown().unwrap());
}

#[test]
fn the_clock_past_a_js_safe_layout_is_refused_with_that_layouts_range() {
    let db = TestDb::create("client_layout_js_safe_end");
    let mut admin = db.connect();
    define(&mut admin, "svc", Preset::JsSafe, None);
    let layout = Preset::JsSafe.layout();
    let jump = Arc::new(AtomicI64::new(0));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.6.7", 1);
    config.wall_clock = Arc::new({
        let jump = jump.clone();
        move || match jump.load(Ordering::SeqCst) {
            0 => real_unix_ms(),
            at => at,
        }
    });
    let node = IdgenNode::start(config).unwrap();
    assert!(node.next_id().unwrap() < 1 << 53, "above JavaScript's largest safe integer");
    // One millisecond past js_safe's last (2068): within any 63-bit layout's range, not this one's.
    jump.store(layout.last_unix_ms() + 1, Ordering::SeqCst);
    match node.next_id() {
        Err(e @ Error::Clock { stop: Stop::ClockOutsideLayout { .. }, layout: refused_by }) => {
            assert_eq!(refused_by, layout);
            let text = e.to_string();
            assert!(text.contains("js_safe") && text.contains("2068-07-21T06:52:14.719Z"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    jump.store(0, Ordering::SeqCst);
    assert!(node.shutdown().unwrap());
}
