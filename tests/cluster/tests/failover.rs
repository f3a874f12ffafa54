//! No ID twice across a failover, on a real HA engine: a pg_auto_failover formation
//! (scripts/formation.sh, started by scripts/test.sh) with a primary and a synchronous
//! secondary, both at `idgen.require_synchronous_standby = on`. Service nodes claim, mint,
//! heartbeat and release with sessions at `synchronous_commit = off`, and backends insert with
//! `DEFAULT idgen_next_id()`, through a switchover (`pg_autoctl perform failover`) and then a
//! crash of the primary (its keeper and Postgres killed, the monitor fails over by itself). Before that, `idgen_health()` reports a
//! standby that streams asynchronously. Then, on the last primary:
//! - no ID was minted twice;
//! - every claim a node was told about is in the registry's history;
//! - every ID was stamped under a lease that registry knows.

use idgen_cluster_tests::*;
use postgres::{Client, NoTls};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct Formation {
    dir: String,
    port: String,
    /// Both nodes, the writable one first found (target_session_attrs=read-write).
    dsn: String,
}

impl Formation {
    fn from_env() -> Formation {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is not set: run the failover suite through scripts/test.sh"))
        };
        Formation { dir: var("IDGEN_HA_DIR"), port: var("IDGEN_HA_PORT"), dsn: var("IDGEN_HA_DSN") }
    }

    /// (The script's own waits are bounded; this deadline is for anything else it could hang on.)
    fn ctl(&self, command: &str) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/formation.sh");
        let status = status_within(
            std::process::Command::new("bash")
                .arg(script)
                .arg(command)
                .env("IDGEN_HA_DIR", &self.dir)
                .env("IDGEN_HA_PORT", &self.port),
            WORK_PATIENCE,
            &format!("scripts/formation.sh {command}"),
        );
        assert!(status.success(), "scripts/formation.sh {command} failed");
    }

    /// A session on the writable node; a connection attempt gives up after 5 s (then the next is
    /// tried: the primary may have just moved), a statement after five minutes.
    fn connect(&self, dbname: &str) -> Result<Client, postgres::Error> {
        Client::connect(
            &format!("{} dbname={dbname} connect_timeout=5 options='-c statement_timeout=300s'", self.dsn),
            NoTls,
        )
    }

    /// Each node by itself, writable or not, in `dbname`.
    fn each_node(&self, dbname: &str) -> Vec<Client> {
        let port: u16 = self.port.parse().unwrap();
        [port + 1, port + 2]
            .iter()
            .map(|p| connect_to(&format!("host=127.0.0.1 port={p} user=postgres"), dbname))
            .collect()
    }
}

/// (machine_id, version, host, port): a claim as the history records it.
type ClaimKey = (i32, i64, String, i32);

#[derive(Default)]
struct Record {
    /// (machine_id, version, host, port) of every claim a node was told about.
    claims: Vec<ClaimKey>,
    /// Where each claim was granted: the phase (0 before the switchover, 1 before the crash,
    /// 2 after it) and the server's port, for the report of a lost claim.
    granted: Vec<(usize, i32)>,
    phase: usize,
    /// IDs service nodes minted, with the claim they minted under.
    service_ids: Vec<(i64, i32, i64)>,
    /// IDs backends returned from committed inserts.
    backend_ids: Vec<i64>,
}

const DB: &str = "idgen_t_failover";

/// A session of the load, at synchronous_commit = off. Without a statement_timeout: a timeout
/// that cancelled a commit's wait for the synchronous standby would leave the commit local and
/// report it done, an acknowledged claim the standby may never have had. The load's threads are
/// bounded by their join instead.
fn session(formation: &Formation) -> Option<Client> {
    let mut client = formation.connect(DB).ok()?;
    client.batch_execute("SET synchronous_commit = off; SET statement_timeout = 0").ok()?;
    Some(client)
}

/// A service node's life, over and over: claim with a new identity, mint, heartbeat, release.
/// A lost connection is followed to the new primary; ownership lost ends the life at once.
fn service_nodes(formation: Arc<Formation>, record: Arc<Mutex<Record>>, stop: Arc<AtomicBool>, k: usize) {
    let mut serial = 0;
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = client.as_mut() else {
            client = session(&formation);
            continue;
        };
        serial += 1;
        let host = format!("10.0.{k}.1");
        let mut node = match TestNode::claim(c, "orders", &host, 1000 + serial) {
            Ok(node) => node,
            Err(_) => {
                client = None;
                continue;
            }
        };
        let server_port: i32 = match c.query_one("SELECT inet_server_port()", &[]) {
            Ok(row) => row.get(0),
            Err(_) => -1,
        };
        {
            let mut record = record.lock().unwrap();
            let phase = record.phase;
            record.claims.push((node.machine_id, node.version, host.clone(), node.port));
            record.granted.push((phase, server_port));
        }
        'life: for _ in 0..3 {
            let ids = node.mint(200);
            record.lock().unwrap().service_ids.extend(ids.iter().map(|id| (*id, node.machine_id, node.version)));
            loop {
                if stop.load(Ordering::Relaxed) {
                    break 'life;
                }
                let Some(c) = client.as_mut() else {
                    client = session(&formation);
                    continue;
                };
                match node.heartbeat(c) {
                    Ok(()) => break,
                    Err(e) if e.code().map(|s| s.code()) == Some("55000") => break 'life,
                    Err(_) => client = None,
                }
            }
        }
        if let Some(c) = client.as_mut() {
            if node.release(c).is_err() {
                client = None;
            }
        }
    }
}

/// Backends inserting with the column default; every few inserts a new connection (a new slot or a reused one).
fn backends(formation: Arc<Formation>, record: Arc<Mutex<Record>>, stop: Arc<AtomicBool>) {
    let mut client: Option<Client> = None;
    let mut inserts = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = client.as_mut() else {
            client = session(&formation);
            continue;
        };
        match c.query("INSERT INTO minted (k) SELECT g FROM generate_series(1, 100) g RETURNING id", &[]) {
            Ok(rows) => record.lock().unwrap().backend_ids.extend(rows.iter().map(|r| r.get::<_, i64>(0))),
            Err(_) => client = None,
        }
        inserts += 1;
        if inserts % 10 == 0 {
            client = None;
        }
    }
}

/// Sets the flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn wait_for_claims(record: &Mutex<Record>, at_least: usize) {
    wait_for(&format!("{at_least} claims"), PATIENCE, || record.lock().unwrap().claims.len() >= at_least);
}

#[test]
fn no_id_twice_across_a_switchover_and_a_crash_of_the_primary() {
    let formation = Arc::new(Formation::from_env());
    {
        let mut admin = formation.connect("postgres").unwrap();
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {DB}")).unwrap();
        let mut db = formation.connect(DB).unwrap();
        db.batch_execute(
            "CREATE EXTENSION idgen;
             CREATE TABLE minted (id bigint PRIMARY KEY DEFAULT idgen_next_id('orders'), k int);",
        )
        .unwrap();
        // Released ids come back after a second, so that nodes restarting under new identities take them
        // over (take-backs are claims too). Claims are refused while no synchronous standby streams:
        // pg_auto_failover drops synchronous replication when it finds the secondary unhealthy, and
        // during a switchover it has left the old primary writable, asynchronously, for seconds (its
        // goal changed from draining to wait_primary); claims acknowledged there were lost (182 in one
        // run on a busy machine). The settings are each server's: set on both.
        for mut node in formation.each_node("postgres") {
            for statement in [
                "LOAD 'idgen'",
                "ALTER SYSTEM SET idgen.release_cooldown = '1s'",
                "ALTER SYSTEM SET idgen.require_synchronous_standby = on",
                "SELECT pg_reload_conf()",
            ] {
                node.batch_execute(statement).unwrap();
            }
        }
    }
    // idgen_health() tells the operator when a failover can lose a claim: a standby that streams
    // asynchronously. With the synchronous secondary back, nothing to report.
    let replication_findings = |formation: &Formation| -> Vec<String> {
        let mut db = formation.connect(DB).unwrap();
        db.query("SELECT severity || ' ' || finding FROM idgen_health() WHERE subject = 'replication'", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    assert_eq!(replication_findings(&formation), Vec::<String>::new());
    formation.ctl("async");
    assert_eq!(replication_findings(&formation), ["warning replication_async"]);
    formation.ctl("sync");
    assert_eq!(replication_findings(&formation), Vec::<String>::new());
    // On-call reads the standby too: the registry's views, its health and decoding take no
    // transaction id (a standby has none to give). The standby explains an ID the primary minted
    // once it has replayed the claim behind it (until then: 42704, the machine id is not known).
    let mut primary = formation.connect(DB).unwrap();
    define_service(&mut primary, "orders");
    let minted: i64 = primary.query_one("SELECT idgen_next_id('orders')", &[]).unwrap().get(0);
    let mut standbys = 0;
    for mut node in formation.each_node(DB) {
        if node.query_one("SELECT pg_is_in_recovery()", &[]).unwrap().get(0) {
            node.batch_execute(
                "SELECT * FROM idgen_nodes; SELECT * FROM idgen_health();
                 SELECT * FROM idgen_decode(idgen_min_id(now(), 'orders'), 'orders')",
            )
            .unwrap();
            wait_for("the standby to explain the ID the primary minted", PATIENCE, || {
                match node.query("SELECT finding FROM idgen_explain($1, 'orders')", &[&minted]) {
                    Ok(rows) => !rows.is_empty(),
                    Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => false,
                    Err(e) => panic!("idgen_explain on the standby: {e}"),
                }
            });
            standbys += 1;
        }
    }
    assert_eq!(standbys, 1, "one of the two nodes is a standby");

    let record = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // The load stops however this test ends, a failed wait included.
    let _stop_on_exit = StopOnDrop(stop.clone());
    let mut threads = vec![];
    for k in 0..4 {
        let (f, r, s) = (formation.clone(), record.clone(), stop.clone());
        threads.push(spawn_named(format!("service nodes {k}"), move || service_nodes(f, r, s, k)));
    }
    for b in 0..2 {
        let (f, r, s) = (formation.clone(), record.clone(), stop.clone());
        threads.push(spawn_named(format!("backends {b}"), move || backends(f, r, s)));
    }

    // Load before, through and after each failover: progress is counted in claims, not in seconds.
    wait_for_claims(&record, 40);
    formation.ctl("failover");
    record.lock().unwrap().phase = 1;
    let after_switchover = record.lock().unwrap().claims.len();
    wait_for_claims(&record, after_switchover + 40);
    formation.ctl("crash-primary");
    let survivor_port: i32;
    // The survivor runs alone from here on, and no failover follows: let it grant without a standby.
    {
        // Its keeper may still be restarting it: the first connections can be refused.
        let mut survivor = None;
        wait_for("a connection to the survivor", PATIENCE, || {
            survivor = formation.connect("postgres").ok();
            survivor.is_some()
        });
        let mut survivor = survivor.unwrap();
        survivor_port = survivor.query_one("SELECT inet_server_port()", &[]).unwrap().get(0);
        for statement in
            ["LOAD 'idgen'", "ALTER SYSTEM SET idgen.require_synchronous_standby = off", "SELECT pg_reload_conf()"]
        {
            survivor.batch_execute(statement).unwrap();
        }
    }
    record.lock().unwrap().phase = 2;
    let after_crash = record.lock().unwrap().claims.len();
    wait_for_claims(&record, after_crash + 40);
    stop.store(true, Ordering::Relaxed);
    join_all(threads, WORK_PATIENCE, "the load's threads");

    let record = record.lock().unwrap();
    let mut primary = formation.connect(DB).unwrap();
    // The crashed node stays down: the claims granted without a standby are on the survivor alone.
    let primary_port: i32 = primary.query_one("SELECT inet_server_port()", &[]).unwrap().get(0);
    assert_eq!(primary_port, survivor_port, "the primary is no longer the survivor: the crashed node came back");
    // 1. No ID twice, among all minted by nodes and by backends.
    let all: Vec<i64> =
        record.service_ids.iter().map(|(id, _, _)| *id).chain(record.backend_ids.iter().copied()).collect();
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert!(record.backend_ids.len() > 1000 && record.service_ids.len() > 10_000, "too little load to mean anything");
    assert_eq!(distinct.len(), all.len(), "{} duplicate IDs", all.len() - distinct.len());
    // 2. Every claim a node was told about survived both failovers (a claim of a new id or a
    //    take-back is recorded in the same transaction; nodes here never reuse an identity).
    let known: HashSet<ClaimKey> = primary
        .query(
            "SELECT machine_id, version, host(host), port FROM idgen_private.idgen_history WHERE event IN ('claim', 'take_back')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let lost: Vec<(&ClaimKey, &(usize, i32))> =
        record.claims.iter().zip(&record.granted).filter(|(c, _)| !known.contains(c)).collect();
    // What the primary knows of each lost claim's identity, for the report.
    let mut traces = vec![];
    for ((_, _, host, port), _) in &lost {
        let mut rows = |sql: &str| -> Vec<String> {
            primary
                .query(sql, &[host, port])
                .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect())
                .unwrap_or_else(|e| vec![e.to_string()])
        };
        let history = rows(
            "SELECT concat_ws(' ', at, event, machine_id, version, outcome) FROM idgen_private.idgen_history
              WHERE host = $1::text::inet AND port = $2 ORDER BY event_id",
        );
        let nodes = rows(
            "SELECT concat_ws(' ', machine_id, version, last_seen, released_at) FROM system_nodes
              WHERE host = $1::text::inet AND port = $2",
        );
        traces.push(format!("{host}:{port}: history {history:?}, rows {nodes:?}"));
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged claims are missing on the new primary (claim, (phase, server port)): {lost:?}; {traces:?}",
        lost.len(),
        record.claims.len()
    );
    // 3. Every ID was stamped under a lease the new primary knows: nodes' under their (known) claims;
    //    backends' under a machine id the registry shows a backend holding.
    let leases: HashSet<(i32, i64)> = known.iter().map(|(m, v, _, _)| (*m, *v)).collect();
    assert!(record.service_ids.iter().all(|(_, m, v)| leases.contains(&(*m, *v))));
    let backend_ids: HashSet<i32> = primary
        .query(
            "SELECT machine_id FROM system_nodes WHERE backend_slot IS NOT NULL
             UNION SELECT machine_id FROM idgen_private.idgen_history
              WHERE backend_slot IS NOT NULL AND machine_id IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let unknown: Vec<i64> = record
        .backend_ids
        .iter()
        .filter(|id| !backend_ids.contains(&(((**id >> 12) & 1023) as i32)))
        .copied()
        .collect();
    assert!(unknown.is_empty(), "{} backend IDs under machine ids the new primary never gave a backend", unknown.len());
    drop(primary);

    // Torn down cleanly: no process of the formation is left.
    formation.ctl("stop");
}
