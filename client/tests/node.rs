//! The client contract, kept by `idgen-client` against real servers (started by
//! scripts/test.sh): many nodes and backends with churn, a partition from the database, a
//! take-over while partitioned, a restart, a graceful shutdown against a kill, a shutdown
//! racing minting threads, a refused watermark, and two processes with one identity. No test
//! depends on the machine's speed: each waits for a state, never for a time, and gives up
//! with a message after a generous deadline.

use idgen_client::{Config, Error, IdgenNode, Status};
use idgen_cluster_tests::*;

mod common;
use common::{heal, partition, partitionable_role, short_leases, stamped_ms};
use postgres::Client;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Waits for a state, however long the machine takes within [`PATIENCE`] (`what` names it).
fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_for(what, PATIENCE, done);
}

/// Claims for `host` until the registry grants it (53000: no id free yet), within [`PATIENCE`].
fn claim_when_free(admin: &mut Client, host: &str) -> Claimed {
    let mut claimed = None;
    wait_until(&format!("a machine id for {host}"), || match claim(admin, "svc", host, 1) {
        Ok(c) => {
            claimed = Some(c);
            true
        }
        Err(e) => {
            assert_eq!(sqlstate(&e), "53000", "{e:?}");
            std::thread::sleep(Duration::from_millis(100));
            false
        }
    });
    claimed.unwrap()
}

#[test]
fn many_nodes_and_backends_mint_into_one_table_with_churn_and_never_collide() {
    let db = TestDb::create("client_churn");
    let mut admin = db.connect();
    define_service(&mut admin, "shop");
    admin
        .batch_execute("CREATE TABLE minted (id bigint PRIMARY KEY DEFAULT idgen_next_id('shop'), by_node boolean)")
        .unwrap();
    let mut threads = vec![];
    for t in 0..6 {
        let dsn = db.dsn();
        threads.push(spawn_named(format!("node {t}"), move || {
            let mut ids = vec![];
            for round in 0..4 {
                // Restarts: a new identity every other round, the same one otherwise.
                let node =
                    IdgenNode::start(Config::new(&dsn, "shop", &format!("10.0.{t}.1"), 9000 + round / 2)).unwrap();
                ids.extend((0..3000).map(|_| node.next_id().unwrap()));
                assert!(node.shutdown().unwrap());
            }
            let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
            client.execute("INSERT INTO minted (id, by_node) SELECT unnest($1::bigint[]), true", &[&ids]).unwrap();
            ids.len()
        }));
    }
    for b in 0..2 {
        let dsn = db.dsn();
        threads.push(spawn_named(format!("backend {b}"), move || {
            for _ in 0..20 {
                let mut backend = Client::connect(&dsn, postgres::NoTls).unwrap();
                backend
                    .batch_execute("INSERT INTO minted (by_node) SELECT false FROM generate_series(1, 500)")
                    .unwrap();
            }
            20 * 500
        }));
    }
    let minted: usize = join_all(threads, WORK_PATIENCE, "the nodes and backends").into_iter().sum();
    // Every ID went into one primary key: a duplicate would have failed its insert.
    let rows: i64 = db.connect().query_one("SELECT count(DISTINCT id) FROM minted", &[]).unwrap().get(0);
    assert_eq!(rows as usize, minted);
    assert_eq!(minted, 6 * 4 * 3000 + 2 * 20 * 500);
}

#[test]
fn a_partitioned_node_issues_until_its_deadline_then_stops_and_resumes_as_owner() {
    let (_turn, cluster, _settings) = short_leases(None);
    let db = TestDb::create_on(&cluster.dsn, "client_partition");
    let role = "idgen_t_client_partition";
    let dsn = partitionable_role(&db, role, "svc");
    let node = IdgenNode::start(Config::new(&dsn, "svc", "10.0.0.1", 1)).unwrap();
    let before = node.next_id().unwrap();
    wait_until("a heartbeat", || node.metrics().heartbeats_ok > 0);

    let mut admin = db.connect();
    partition(&mut admin, &db, role);
    // Until the deadline every call issues; from it on, every call refuses.
    let mut issued_while_partitioned = 0;
    let give_up = std::time::Instant::now() + PATIENCE;
    loop {
        assert!(std::time::Instant::now() < give_up, "the node kept issuing for {PATIENCE:?} while partitioned");
        match node.next_id() {
            Ok(id) => {
                assert!(id > before);
                issued_while_partitioned += 1;
            }
            Err(Error::LeaseExpired) => break,
            Err(e) => panic!("{e}"),
        }
    }
    wait_until("the heartbeat to see the lease expire", || node.status() == Status::Expired);
    assert!(matches!(node.next_id(), Err(Error::LeaseExpired)));
    let metrics = node.metrics();
    assert!(metrics.heartbeats_failed > 0 && metrics.time_to_deadline.is_none(), "{metrics:?}");
    assert_eq!(metrics.ids_issued, issued_while_partitioned + 1);

    // Reconnected, it still owns its id: a heartbeat succeeds and it issues again.
    heal(&mut admin, &db, role);
    wait_until("a heartbeat after the partition", || node.status() == Status::Live);
    assert!(node.next_id().unwrap() > before);
}

#[test]
fn a_reload_that_shortens_the_lease_reaches_the_node_once_the_grant_it_holds_has_ended() {
    // A lease of about two minutes (take-back after 120 s, margin 2 s), heartbeats every second.
    let (cluster, _turn) = clock_cluster_turn();
    let long = [
        ("idgen.takeover_idle_7d", "400s"),
        ("idgen.takeover_idle_1d", "200s"),
        ("idgen.takeover_idle_1h", "120s"),
        ("idgen.lease_safety_margin", "2s"),
        ("idgen.heartbeat_interval", "1s"),
        ("idgen.release_cooldown", "1s"),
    ];
    let _long = SystemSettings::set(&cluster.dsn, &long);
    let db = TestDb::create_on(&cluster.dsn, "client_lease_reload");
    let node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    node.next_id().unwrap();
    let deadline = || node.metrics().time_to_deadline.unwrap_or_default();
    let two_heartbeats = || {
        let before = node.metrics().heartbeats_ok;
        wait_until("two heartbeats", || node.metrics().heartbeats_ok > before + 1);
    };
    assert!(deadline() > Duration::from_secs(60), "{:?}", node.metrics());

    // The registry now grants 4 s (take-back after 6 s, margin 2 s), but not in place of the grant
    // the node holds: a heartbeat's answer may be lost after its commit, and the node would then go
    // on under that grant. The node is told the grant the registry still keeps for it.
    let _short = SystemSettings::set(&cluster.dsn, &[("idgen.takeover_idle_1h", "6s")]);
    two_heartbeats();
    assert!(deadline() > Duration::from_secs(60), "the grant the node holds was cut short: {:?}", node.metrics());

    // Once that grant has ended on the server's clock (stepped on, not waited for), each heartbeat
    // grants 4 s, and the node stops issuing when that lease ends.
    cluster.offset(125.0);
    two_heartbeats();
    assert!(
        deadline() <= Duration::from_secs(4),
        "the node keeps a lease the registry no longer grants: {:?}",
        node.metrics()
    );
    cluster.set("+0");
}

#[test]
fn a_node_partitioned_past_a_take_over_stops_before_the_new_holders_epoch_and_for_good() {
    // One machine id for the service: the other node can only get it by taking it over.
    let (_turn, cluster, _settings) = short_leases(Some("0-0"));
    let db = TestDb::create_on(&cluster.dsn, "client_takeover");
    let role = "idgen_t_client_takeover";
    let dsn = partitionable_role(&db, role, "svc");
    let node = IdgenNode::start(Config::new(&dsn, "svc", "10.0.0.1", 1)).unwrap();
    let mut last = node.next_id().unwrap();
    let mut admin = db.connect();
    partition(&mut admin, &db, role);
    let give_up = std::time::Instant::now() + PATIENCE;
    while let Ok(id) = node.next_id() {
        assert!(std::time::Instant::now() < give_up, "the node kept issuing for {PATIENCE:?} while partitioned");
        last = id;
    }
    // Another node takes the id once the first is idle past the 1-hour tier (6 s here).
    let mut taken = (String::new(), String::new());
    wait_until("the id to be taken over", || {
        match admin.query_one("SELECT outcome, not_before::text FROM idgen_claim('svc', '10.0.0.2', 1)", &[]) {
            Ok(row) => {
                taken = (row.get::<_, String>(0), row.get::<_, String>(1));
                true
            }
            Err(e) => {
                assert_eq!(sqlstate(&e), "53000", "{e:?}");
                std::thread::sleep(Duration::from_millis(100));
                false
            }
        }
    });
    assert_eq!(taken.0, "idle_1h");
    // The old node's last ID is stamped before the new holder's epoch begins.
    let before_epoch: bool =
        admin.query_one("SELECT (idgen_decode($1)).ts <= $2::text::timestamptz", &[&last, &taken.1]).unwrap().get(0);
    assert!(before_epoch, "ID {last} stamped in the new holder's epoch (after {})", taken.1);
    // Back in touch, it learns the id moved, and stops for good.
    heal(&mut admin, &db, role);
    wait_until("the heartbeat to learn the id moved", || matches!(node.status(), Status::Lost { .. }));
    match node.next_id() {
        Err(Error::OwnershipLost { detail, .. }) => assert!(detail.contains("10.0.0.2:1"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restarted_node_gets_its_id_back_and_starts_after_its_watermark() {
    let db = TestDb::create("client_restart");
    let first = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    let last = (0..5000).map(|_| first.next_id().unwrap()).max().unwrap();
    assert!(first.shutdown().unwrap(), "a graceful shutdown releases");
    let second = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    assert_eq!(second.machine_id(), first.machine_id());
    assert_eq!(second.version(), first.version() + 2, "released, then reused");
    let next = second.next_id().unwrap();
    assert!(next > last && (next >> 22) > (last >> 22), "stamped after the watermark: {next} after {last}");
}

/// The lines a child prints on stdout, read on a thread of their own so that no read can hang.
struct Output(mpsc::Receiver<String>);

impl Output {
    /// The next `n` lines, within [`PATIENCE`] each.
    fn take(&self, n: usize) -> Vec<String> {
        (0..n).map(|k| recv_within(&self.0, PATIENCE, &format!("line {} of {n} from the node", k + 1))).collect()
    }

    /// Every line until the child closes its stdout, within [`PATIENCE`].
    fn rest(&self) -> Vec<String> {
        let mut lines = vec![];
        loop {
            match self.0.recv_timeout(PATIENCE) {
                Ok(line) => lines.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => return lines,
                Err(e) => panic!("the node neither printed nor exited: {e}"),
            }
        }
    }
}

/// Runs the example binary, returning it (and the rest of its output) once it has printed `ids`
/// IDs. The child is killed if the test fails while it runs.
fn run_node(dsn: &str, host: &str, ids: usize) -> (GuardedChild, Output, Vec<i64>) {
    let mut child = spawn_guarded(
        Command::new(env!("CARGO_BIN_EXE_idgen-node"))
            .args(["--dsn", dsn, "--service", "svc", "--host", host, "--port", "1", "--rate", "1000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        &format!("idgen-node for {host}"),
    );
    let stdout = child.child().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    spawn_named(format!("stdout of idgen-node for {host}"), move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let output = Output(rx);
    let printed: Vec<i64> = output.take(ids).iter().map(|l| l.parse().unwrap()).collect();
    (child, output, printed)
}

/// The child's exit status, within [`PATIENCE`].
fn exit_status(child: &mut GuardedChild) -> std::process::ExitStatus {
    child.wait_within(PATIENCE)
}

/// Ctrl-C to the child.
fn interrupt(child: &GuardedChild) {
    let sent = status_within(Command::new("kill").args(["-INT", &child.id().to_string()]), PATIENCE, "kill -INT");
    assert!(sent.success(), "kill -INT {}: {sent}", child.id());
}

#[test]
fn a_graceful_shutdown_releases_and_a_kill_leaves_the_id_to_the_tiers() {
    let (_turn, cluster, _settings) = short_leases(Some("0-0"));
    let db = TestDb::create_on(&cluster.dsn, "client_shutdown");
    let mut admin = db.connect();
    let released = |admin: &mut Client| -> bool {
        admin.query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'svc'", &[]).unwrap().get(0)
    };
    // Ctrl-C: the node stops issuing and releases.
    let (mut child, rest, _) = run_node(&db.dsn(), "10.0.0.1", 10);
    interrupt(&child);
    assert!(rest.rest().iter().all(|l| l.parse::<i64>().is_ok()), "only IDs on stdout");
    assert!(exit_status(&mut child).success());
    assert!(released(&mut admin));
    // kill -9: nothing is released; the id stays the node's until the 1-hour tier takes it back.
    let (mut child, _rest, printed) = run_node(&db.dsn(), "10.0.0.1", 10);
    child.child().kill().unwrap();
    exit_status(&mut child);
    assert!(!released(&mut admin));
    let err = claim(&mut admin, "svc", "10.0.0.2", 1).unwrap_err();
    assert_eq!(sqlstate(&err), "53000", "a live holder's id is not free");
    let taken = claim_when_free(&mut admin, "10.0.0.2");
    assert_eq!((taken.machine_id, taken.outcome.as_str()), ((printed[0] >> 12 & 1023) as i32, "idle_1h"));
}

/// A clock that reads one instant.
struct Frozen(i64);

impl idgen_core::generator::Clock for Frozen {
    fn now_unix_ms(&mut self) -> i64 {
        self.0
    }

    fn wait_until(&mut self, _unix_ms: i64) {
        panic!("a frozen clock never gets there");
    }
}

/// Defines `service` with the layout of a vectors entry (before its first claim): its preset, and
/// every part as the file gives it.
fn define_layout_of_entry(admin: &mut Client, service: &str, entry: &serde_json::Value) {
    let l = &entry["layout"];
    let preset = match entry["preset"].as_str().unwrap() {
        "custom" => "snowflake",
        preset => preset,
    };
    let part = |key: &str| l[key].as_i64().unwrap() as i32;
    admin
        .query(
            "SELECT idgen_define_layout($1, preset => $2, epoch => $3::text::timestamptz, time_unit_ms => $4,
                    time_bits => $5, machine_bits => $6, sequence_bits => $7, field_order => $8)",
            &[
                &service,
                &preset,
                &l["epoch"].as_str().unwrap(),
                &part("time_unit_ms"),
                &part("time_bits"),
                &part("machine_bits"),
                &part("sequence_bits"),
                &l["field_order"].as_str().unwrap(),
            ],
        )
        .unwrap();
}

#[test]
fn the_published_test_vectors_hold_for_the_nodes_generator_and_for_the_database() {
    let doc: serde_json::Value = serde_json::from_str(include_str!("../../docs/test_vectors.json")).unwrap();
    let db = TestDb::create("client_vectors");
    let mut client = db.connect();
    let entries = doc["layouts"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "the three presets and a custom layout");
    for (k, entry) in entries.iter().enumerate() {
        let name = entry["name"].as_str().unwrap();
        let service = format!("vectors_{name}");
        define_layout_of_entry(&mut client, &service, entry);
        // The node takes its layout from the registry at its claim: it is the file's, part for part.
        let node = IdgenNode::start(Config::new(&db.dsn(), &service, "10.0.7.1", k as i32 + 1)).unwrap();
        let recorded = node.layout();
        assert!(node.shutdown().unwrap());
        let l = &entry["layout"];
        let layout = recorded.layout;
        assert_eq!(
            (
                layout.epoch_unix_ms,
                layout.time_unit_ms,
                i64::from(layout.time_bits),
                i64::from(layout.machine_bits),
                i64::from(layout.sequence_bits),
                layout.order.label(),
            ),
            (
                l["epoch_unix_ms"].as_i64().unwrap(),
                l["time_unit_ms"].as_i64().unwrap(),
                l["time_bits"].as_i64().unwrap(),
                l["machine_bits"].as_i64().unwrap(),
                l["sequence_bits"].as_i64().unwrap(),
                l["field_order"].as_str().unwrap(),
            ),
            "{name}"
        );
        assert_eq!(recorded.preset_name(), entry["preset"].as_str().unwrap());
        let (machine_bits, sequence_bits) = (l["machine_bits"].as_i64().unwrap(), l["sequence_bits"].as_i64().unwrap());
        let (machine_shift, sequence_shift) = match l["field_order"].as_str().unwrap() {
            "time_machine_sequence" => (sequence_bits, 0),
            _ => (0, machine_bits),
        };
        for v in entry["vectors"].as_array().unwrap() {
            let (unix_ms, tick_ms, machine_id, sequence, id) = (
                v["unix_ms"].as_i64().unwrap(),
                v["tick_unix_ms"].as_i64().unwrap(),
                v["machine_id"].as_i64().unwrap(),
                v["sequence"].as_i64().unwrap(),
                v["id"].as_i64().unwrap(),
            );
            // The generator a node mints with, on the layout it read: from a floor just before the
            // tick, its IDs in the tick count the sequence from 0.
            let mut generator = idgen_core::generator::Generator::new(layout, machine_id as u16, tick_ms - 1, 0);
            let minted: Vec<i64> =
                (0..=sequence).map(|_| generator.next_id(&mut Frozen(unix_ms), i64::MAX).unwrap()).collect();
            assert_eq!(minted.last(), Some(&id), "{name} {v}");
            // The database reads and builds the same IDs by the service's layout.
            let row = client
                .query_one(
                    "SELECT idgen_min_id($1::text::timestamptz, $5) | ($2::bigint << $6::int) | ($3::bigint << $7::int),
                            idgen_max_id($1::text::timestamptz, $5),
                            to_char((d).ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), (d).machine_id, (d).sequence
                       FROM (SELECT idgen_decode($4, $5) AS d) x",
                    &[
                        &v["iso"].as_str().unwrap(),
                        &machine_id,
                        &sequence,
                        &id,
                        &service,
                        &(machine_shift as i32),
                        &(sequence_shift as i32),
                    ],
                )
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), id, "{name} {v}");
            let low_bits = (1i64 << (machine_bits + sequence_bits)) - 1;
            assert_eq!(row.get::<_, i64>(1), (id & !low_bits) | low_bits, "{name} {v}");
            assert_eq!(row.get::<_, String>(2), v["tick_iso"].as_str().unwrap(), "{name} {v}");
            assert_eq!((i64::from(row.get::<_, i32>(3)), i64::from(row.get::<_, i32>(4))), (machine_id, sequence));
        }
        // Outside the layout the generator refuses, and so does the database: nothing wraps.
        for v in entry["invalid"].as_array().unwrap() {
            let unix_ms = v["unix_ms"].as_i64().unwrap();
            // From a floor a tick before: the clock's tick is a new one, and outside the layout.
            let mut generator = idgen_core::generator::Generator::new(layout, 0, unix_ms - layout.time_unit_ms, 0);
            assert_eq!(
                generator.next_id(&mut Frozen(unix_ms), i64::MAX),
                Err(idgen_client::Stop::ClockOutsideLayout { now_unix_ms: unix_ms }),
                "{name} {v}"
            );
            let refused = client
                .query_one("SELECT idgen_min_id($1::text::timestamptz, $2)", &[&v["iso"].as_str().unwrap(), &service])
                .unwrap_err();
            assert_eq!(sqlstate(&refused), "22008", "{name} {v}: {refused:?}");
        }
    }
}

#[test]
fn a_node_survives_a_database_restart_and_still_releases_at_shutdown() {
    let (cluster, _turn) = clock_cluster_turn();
    let db = TestDb::create_on(&cluster.dsn, "client_restart_server");
    let node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
    let before = node.next_id().unwrap();
    cluster.restart();
    // The lease is the node's own: it issues on while the server restarts.
    assert!(node.next_id().unwrap() > before);
    // Its connection died with the restart, unnoticed between heartbeats: the release reconnects.
    assert!(node.shutdown().unwrap());
    let released: bool = db
        .connect()
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'svc'", &[])
        .unwrap()
        .get(0);
    assert!(released);
}

/// A node's wall clock `offset_ms` ahead of this process's (which the server shares).
fn clock_ahead(offset_ms: i64) -> idgen_client::WallClockFn {
    Arc::new(move || real_unix_ms() + offset_ms)
}

fn real_unix_ms() -> i64 {
    (real_unix_secs() * 1000.0) as i64
}

/// Eight threads mint on `node` until it stops; another shuts it down once each has minted 100
/// IDs. Returns every ID they got, and whether the shutdown released the id.
fn shutdown_while_minting(node: IdgenNode) -> (Vec<i64>, bool) {
    let node = Arc::new(node);
    let barrier = Arc::new(Barrier::new(9));
    let minters: Vec<_> = (0..8)
        .map(|m| {
            let (node, minted_100) = (node.clone(), barrier.clone());
            // A minter that fails releases the shutdown from the barrier, with its message.
            spawn_party(format!("minter {m}"), &barrier, move || {
                let mut ids = vec![];
                loop {
                    match node.next_id() {
                        Ok(id) => ids.push(id),
                        Err(Error::Stopped) => return ids,
                        Err(e) => panic!("{e}"),
                    }
                    if ids.len() == 100 {
                        minted_100.wait();
                    }
                }
            })
        })
        .collect();
    barrier.wait();
    let released = node.shutdown().unwrap();
    let ids = join_all(minters, WORK_PATIENCE, "the minters").into_iter().flatten().collect();
    (ids, released)
}

/// The watermark the registry holds for `machine_id` of service "svc", in Unix ms.
fn registry_watermark_ms(client: &mut Client, machine_id: i32) -> i64 {
    client
        .query_one(
            "SELECT floor(extract(epoch FROM issued_until) * 1000)::bigint FROM system_nodes \
             WHERE service = 'svc' AND machine_id = $1",
            &[&machine_id],
        )
        .unwrap()
        .get(0)
}

#[test]
fn the_watermark_released_at_shutdown_bounds_every_id_of_threads_racing_it() {
    let db = TestDb::create("client_shutdown_race");
    let mut admin = db.connect();
    for round in 0..20 {
        let node = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
        let machine_id = node.machine_id();
        let (ids, released) = shutdown_while_minting(node);
        assert!(released, "round {round}");
        let last = ids.iter().map(|&id| stamped_ms(id)).max().unwrap();
        let watermark = registry_watermark_ms(&mut admin, machine_id);
        assert!(last <= watermark, "round {round}: an ID stamped at {last} after the released watermark {watermark}");
    }
}

#[test]
fn a_node_that_ran_ahead_and_restarts_on_a_corrected_clock_repeats_no_id() {
    let db = TestDb::create("client_restart_ahead");
    for round in 0..3 {
        // Three seconds ahead: within the skew a lease absorbs.
        let mut config = Config::new(&db.dsn(), "svc", "10.0.0.1", 1);
        config.wall_clock = clock_ahead(3_000);
        let (before, released) = shutdown_while_minting(IdgenNode::start(config).unwrap());
        assert!(released);
        // Restarted with its clock corrected: it gets its id back, and waits for what it stamped.
        let again = IdgenNode::start(Config::new(&db.dsn(), "svc", "10.0.0.1", 1)).unwrap();
        let after: Vec<i64> = (0..20_000).map(|_| again.next_id().unwrap()).collect();
        again.shutdown().unwrap();
        let first_after = after.iter().min().unwrap();
        let last_before = before.iter().max().unwrap();
        assert!(first_after > last_before, "round {round}: {first_after} after the restart, {last_before} before it");
    }
}

#[test]
fn a_refused_watermark_ends_the_lease_for_good() {
    let db = TestDb::create("client_refused_watermark");
    // A clock that jumps past the last time an ID can carry: the server refuses such a watermark
    // (22023), and the node must not go on as if its lease were merely late.
    let jump = Arc::new(AtomicBool::new(false));
    let mut config = Config::new(&db.dsn(), "svc", "10.0.0.1", 1);
    config.heartbeat_interval = Some(Duration::from_millis(100));
    config.wall_clock = Arc::new({
        let jump = jump.clone();
        move || if jump.load(Ordering::Relaxed) { 4_200_000_000_000 } else { real_unix_ms() }
    });
    let node = IdgenNode::start(config).unwrap();
    node.next_id().unwrap();
    jump.store(true, Ordering::Relaxed);
    wait_until("the heartbeat to be refused", || matches!(node.status(), Status::Lost { .. }));
    match node.next_id() {
        Err(Error::OwnershipLost { detail, .. }) => {
            assert!(detail.contains("after the last time an ID can carry") && detail.contains("22023"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    // Nothing was written by the refused report.
    let kept: bool = db
        .connect()
        .query_one("SELECT issued_until < now() + interval '1 day' FROM system_nodes WHERE service = 'svc'", &[])
        .unwrap()
        .get(0);
    assert!(kept);
}

#[test]
fn a_second_process_with_the_same_identity_never_prints_an_id_of_the_first() {
    let (_turn, cluster, _settings) = short_leases(None);
    let db = TestDb::create_on(&cluster.dsn, "client_twins");
    // A supervisor starts a node again while the first still runs (or a fleet shares one address).
    let (mut first, first_out, mut printed) = run_node(&db.dsn(), "10.0.0.7", 100);
    let (mut second, second_out, second_printed) = run_node(&db.dsn(), "10.0.0.7", 100);
    // The first learns at its next heartbeat that its id was set aside, and exits (status 3).
    let status = exit_status(&mut first);
    printed.extend(first_out.rest().iter().map(|l| l.parse::<i64>().unwrap()));
    assert_eq!(status.code(), Some(3), "the first node stops once its id is gone");
    let mut theirs = second_printed;
    theirs.extend(second_out.take(100).iter().map(|l| l.parse::<i64>().unwrap()));
    interrupt(&second);
    theirs.extend(second_out.rest().iter().map(|l| l.parse::<i64>().unwrap()));
    assert!(exit_status(&mut second).success());
    let machine_ids =
        |ids: &[i64]| -> std::collections::BTreeSet<i64> { ids.iter().map(|id| id >> 12 & 1023).collect() };
    assert_eq!(machine_ids(&printed).len(), 1);
    assert!(
        machine_ids(&printed).is_disjoint(&machine_ids(&theirs)),
        "the second process minted on the first one's id"
    );
    let both: Vec<&i64> = printed.iter().filter(|id| theirs.contains(id)).collect();
    assert!(both.is_empty(), "{} IDs printed by both", both.len());
}
