//! A bounded soak: claims, heartbeats and releases race while a "clock" thread
//! ages rows (as hours of silence would), forcing take-backs. Afterwards the
//! invariants users rely on must hold for every recorded event.

use idgen_cluster_tests::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: usize = 12;
const IDENTITIES_PER_WORKER: usize = 20; // 240 nodes for 16 free ids: most must take ids back
const RUN_FOR: Duration = Duration::from_secs(4);
const MAX_OPS_PER_WORKER: usize = 3_000;

/// What one node was told by the registry.
#[derive(Clone, Debug)]
enum Event {
    Granted { machine_id: i16, version: i32, node: String, outcome: String },
    HeartbeatOk { machine_id: i16, version: i32, node: String },
    Fenced,
    Released { machine_id: i16, version: i32, node: String },
    Refused(String),
}

/// A small deterministic generator: the soak needs variety, not quality.
struct XorShift(u64);
impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn racing_claims_heartbeats_releases_and_takebacks_keep_every_grant_unique() {
    let db = Arc::new(TestDb::create("soak"));
    let mut admin = db.connect();
    let free: Vec<i16> = (0..1024).filter(|m| m % 64 == 0).collect();
    fill_registry_except(&mut admin, "soak", &free); // 16 free ids

    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + RUN_FOR;

    let clock = {
        let (db, stop) = (db.clone(), stop.clone());
        thread::spawn(move || {
            let mut client = db.connect();
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
            let mut aged = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = rng.below(1024) as i16;
                // Hours of silence for a random row and for a row some worker holds, and an
                // old release for released rows: supply for take-backs, and fencing of live holders.
                client
                    .execute(
                        "UPDATE system_nodes SET last_seen = last_seen - interval '2 hours', \
                         released_at = released_at - interval '2 minutes' \
                         WHERE machine_id = $1 OR machine_id = (SELECT machine_id FROM system_nodes \
                           WHERE host << '10.77.0.0/16' ORDER BY random() LIMIT 1)",
                        &[&id],
                    )
                    .unwrap();
                aged += 1;
                thread::sleep(Duration::from_millis(2));
            }
            aged
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (db, events) = (db.clone(), events.clone());
            thread::spawn(move || {
                let mut client = db.connect();
                let mut rng = XorShift(w as u64 * 7919 + 1);
                let mut mine = vec![];
                // Nodes that are still running, with the grant they believe they hold.
                let mut running: HashMap<usize, (i16, i32)> = HashMap::new();
                for _ in 0..MAX_OPS_PER_WORKER {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let k = rng.below(IDENTITIES_PER_WORKER);
                    let (host, port) = (format!("10.77.{w}.{k}"), 1000 + k as i32);
                    let node = format!("{host}:{port}");
                    if let Some((id, v)) = running.get(&k).copied() {
                        // A running node's periodic heartbeat: it goes on, or learns it was fenced.
                        match heartbeat(&mut client, "soak", id, &host, port, v) {
                            Ok(()) => {
                                mine.push(Event::HeartbeatOk { machine_id: id, version: v, node });
                                continue;
                            }
                            Err(err) => {
                                assert_eq!(sqlstate(&err), "55000", "heartbeat may only fail by fencing: {err:?}");
                                mine.push(Event::Fenced);
                                running.remove(&k);
                            }
                        }
                    }
                    // The node (re)starts and claims.
                    let granted = match claim(&mut client, "soak", &host, port) {
                        Ok(c) => c,
                        Err(err) => {
                            mine.push(Event::Refused(sqlstate(&err).to_owned()));
                            continue;
                        }
                    };
                    mine.push(Event::Granted {
                        machine_id: granted.machine_id,
                        version: granted.version,
                        node: node.clone(),
                        outcome: granted.outcome.clone(),
                    });
                    let (id, v) = (granted.machine_id, granted.version);
                    // A third of the nodes shut down gracefully at once; the rest keep running.
                    if rng.below(3) == 0 {
                        match release(&mut client, "soak", id, &host, port, v) {
                            Ok(true) => mine.push(Event::Released { machine_id: id, version: v, node }),
                            Ok(false) => mine.push(Event::Fenced),
                            Err(err) => panic!("release failed: {err:?}"),
                        }
                    } else {
                        running.insert(k, (id, v));
                    }
                }
                events.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let aged = clock.join().unwrap();

    let events = events.lock().unwrap().clone();
    let mut grants: HashMap<(i16, i32), String> = HashMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        if let Event::Granted { machine_id, version, node, outcome } = e {
            *outcomes.entry(outcome.clone()).or_default() += 1;
            let previous = grants.insert((*machine_id, *version), node.clone());
            assert!(previous.is_none(), "machine id {machine_id} version {version} granted to {previous:?} and {node}");
        }
    }
    for e in &events {
        match e {
            Event::HeartbeatOk { machine_id, version, node } | Event::Released { machine_id, version, node } => {
                assert_eq!(grants.get(&(*machine_id, *version)), Some(node), "only the grantee may renew or release");
            }
            Event::Refused(code) => assert!(code == "53000" || code == "55P03", "unexpected refusal {code}"),
            _ => {}
        }
    }
    // The registry as left is explained by the grants: each row is its last grant, or that grant released.
    for row in admin.query("SELECT machine_id, version, host(host) || ':' || port, released_at IS NOT NULL FROM system_nodes WHERE host << '10.77.0.0/16'", &[]).unwrap() {
        let (id, version, node, released): (i16, i32, String, bool) = (row.get(0), row.get(1), row.get(2), row.get(3));
        let granted_version = if released { version - 1 } else { version };
        assert_eq!(grants.get(&(id, granted_version)), Some(&node), "row {id} v{version} {node} released={released}");
    }

    let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    let takebacks: usize =
        outcomes.iter().filter(|(o, _)| o.starts_with("idle_") || *o == "released").map(|(_, n)| n).sum();
    println!(
        "soak: {} grants {:?}, {} take-backs, {} heartbeats, {} fenced, {} releases, {} refusals, {} rows aged",
        grants.len(),
        outcomes,
        takebacks,
        count(|e| matches!(e, Event::HeartbeatOk { .. })),
        count(|e| matches!(e, Event::Fenced)),
        count(|e| matches!(e, Event::Released { .. })),
        count(|e| matches!(e, Event::Refused(_))),
        aged
    );
    assert!(
        takebacks > 0 && count(|e| matches!(e, Event::Fenced)) > 0,
        "the soak must exercise take-backs and fencing"
    );
}
