//! A bounded soak of service nodes on real time: 16 nodes contend for 6 free
//! machine ids with take-back ages of seconds (set cluster-wide on the
//! clock-step cluster, whose clock stays real here).
//! Nodes mint IDs with the core's generator while their lease lasts,
//! heartbeat with their watermark, and at random release, crash, or lose the
//! database for longer than the 1-hour tier (still minting until their lease
//! deadline, as the contract allows). Afterwards:
//!
//! - no two holders of a machine id were ever inside a live lease at once;
//! - no ID was minted twice;
//! - heartbeats failed only by fencing (55000), claims only with 53000/55P03;
//! - take-backs and fencings happened.
//!
//! Time passes for real, in rounds of at least half a second: a slower machine
//! makes fewer operations per round and the same progress per second.

use idgen_cluster_tests::*;
use idgen_core::generator::{Clock, Generator};
use idgen_core::Layout;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: usize = 4;
const NODES_PER_WORKER: usize = 4;
const FREE_IDS: i32 = 6;
const ROUNDS: usize = 40;
const ROUND: Duration = Duration::from_millis(500);
/// Cluster-wide settings (ALTER SYSTEM on the clock-step cluster, reset after the run): take back after
/// 8 s / 6 s / 4 s idle; a lease of 4 s - 1 s.
const SETTINGS: [(&str, &str); 6] = [
    ("idgen.takeover_idle_7d", "8s"),
    ("idgen.takeover_idle_1d", "6s"),
    ("idgen.takeover_idle_1h", "4s"),
    ("idgen.lease_safety_margin", "1s"),
    ("idgen.release_cooldown", "1s"),
    ("idgen.heartbeat_interval", "1s"),
];
const LEASE: Duration = Duration::from_secs(3);
/// Longer than the 4-second tier: a partitioned node's id is taken back meanwhile.
const PARTITION: Duration = Duration::from_secs(5);

struct RealClock;
impl Clock for RealClock {
    fn now_unix_ms(&mut self) -> i64 {
        (real_unix_secs() * 1000.0) as i64
    }
    fn wait_until(&mut self, unix_ms: i64) {
        while self.now_unix_ms() < unix_ms {
            std::hint::spin_loop();
        }
    }
}

/// A small deterministic generator: the soak needs variety, not quality.
struct XorShift(u64);
impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One grant: the machine id, at a version, to a node.
type GrantKey = (i32, i64);

/// A grant's life as its node lived it: from the claim's answer to the moment it stopped issuing.
#[derive(Debug, Clone)]
struct Tenure {
    grant: GrantKey,
    node: String,
    outcome: String,
    from: Instant,
    until: Instant,
}

struct Running {
    grant: GrantKey,
    outcome: String,
    generator: Generator,
    granted_at: Instant,
    /// The node stops issuing here unless a heartbeat succeeds: send time of the last success + lease.
    deadline: Instant,
    last_stamp_ms: i64,
    partitioned_until: Option<Instant>,
}

#[derive(Default)]
struct Tally {
    tenures: Vec<Tenure>,
    ids: Vec<(i64, GrantKey)>,
    outcomes: BTreeMap<String, usize>,
    fenced: usize,
    released: usize,
    crashed: usize,
    partitions: usize,
    refusals: BTreeMap<String, usize>,
}

struct Node {
    host: String,
    running: Option<Running>,
}

impl Node {
    /// Ends the current tenure at `stopped` (or at the lease deadline, if that came first).
    fn stop(&mut self, stopped: Instant, tally: &mut Tally) {
        if let Some(r) = self.running.take() {
            tally.tenures.push(Tenure {
                grant: r.grant,
                node: self.host.clone(),
                outcome: r.outcome,
                from: r.granted_at,
                until: stopped.min(r.deadline),
            });
        }
    }

    fn visit(&mut self, client: &mut postgres::Client, rng: &mut XorShift, tally: &mut Tally) {
        let Some(r) = self.running.as_mut() else {
            return self.claim(client, tally);
        };
        let now = Instant::now();
        let reachable = r.partitioned_until.is_none_or(|until| now >= until);
        if reachable {
            r.partitioned_until = None;
            let watermark = r.last_stamp_ms.max(RealClock.now_unix_ms());
            let sent = Instant::now();
            let result = client.query_one(
                "SELECT idgen_heartbeat('soak', $1, $2::text::inet, 8080, $3, to_timestamp($4::float8 / 1000))",
                &[&r.grant.0, &self.host, &r.grant.1, &(watermark as f64)],
            );
            match result {
                Ok(_) => r.deadline = sent + LEASE,
                Err(err) => {
                    assert_eq!(sqlstate(&err), "55000", "a heartbeat may only fail by fencing: {err:?}");
                    tally.fenced += 1;
                    return self.stop(Instant::now(), tally);
                }
            }
        }
        // Issue while the lease lasts, whether or not the database can be reached.
        for _ in 0..20 {
            if Instant::now() >= r.deadline {
                break;
            }
            let id = r.generator.next_id(&mut RealClock, i64::MAX).expect("the clock is in the layout");
            r.last_stamp_ms = Layout::DEFAULT.unix_ms_of(Layout::DEFAULT.decompose(id).unwrap().ticks);
            tally.ids.push((id, r.grant));
        }
        if !reachable {
            return;
        }
        match rng.below(100) {
            0..=2 => {
                let released: bool = client
                    .query_one(
                        "SELECT idgen_release('soak', $1, $2::text::inet, 8080, $3, to_timestamp($4::float8 / 1000))",
                        &[&r.grant.0, &self.host, &r.grant.1, &(r.last_stamp_ms as f64)],
                    )
                    .unwrap()
                    .get(0);
                if released {
                    tally.released += 1;
                } else {
                    tally.fenced += 1;
                }
                self.stop(Instant::now(), tally);
            }
            3..=5 => {
                tally.crashed += 1;
                self.stop(Instant::now(), tally);
            }
            6..=9 => {
                tally.partitions += 1;
                r.partitioned_until = Some(Instant::now() + PARTITION);
            }
            _ => {}
        }
    }

    fn claim(&mut self, client: &mut postgres::Client, tally: &mut Tally) {
        let row = client.query_one(
            "SELECT machine_id, version, outcome, floor(extract(epoch FROM not_before) * 1000)::bigint \
             FROM idgen_claim('soak', $1::text::inet, 8080)",
            &[&self.host],
        );
        let row = match row {
            Ok(row) => row,
            Err(err) => {
                let code = sqlstate(&err).to_owned();
                // 55000: a node restarting after a crash while its old row's lease runs and every
                // other id is taken waits for that lease (its old process may still be stamping).
                let waits_for_its_old_lease =
                    code == "55000" && db_error(&err).message().ends_with("and no other machine id is free");
                assert!(code == "53000" || code == "55P03" || waits_for_its_old_lease, "unexpected refusal {err:?}");
                *tally.refusals.entry(code).or_default() += 1;
                return;
            }
        };
        let granted_at = Instant::now();
        let (machine_id, version, outcome, not_before_ms): (i32, i64, String, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        *tally.outcomes.entry(outcome.clone()).or_default() += 1;
        self.running = Some(Running {
            grant: (machine_id, version),
            outcome,
            generator: Generator::new(Layout::DEFAULT, machine_id as u16, not_before_ms, 2_000),
            granted_at,
            deadline: granted_at + LEASE,
            last_stamp_ms: not_before_ms,
            partitioned_until: None,
        });
    }
}

#[test]
fn holders_never_overlap_and_no_id_is_minted_twice_through_takebacks_fencing_and_partitions() {
    // The thresholds are cluster-wide: the soak runs on the clock-step cluster (its clock left real),
    // where no other test runs meanwhile.
    let cluster = ClockCluster::from_env();
    cluster.set("+0");
    let _settings = SystemSettings::set(&cluster.dsn, &SETTINGS);
    let db = Arc::new(TestDb::create_on(&cluster.dsn, "soak"));
    let mut admin = db.connect();
    let free: Vec<i32> = (0..FREE_IDS).collect();
    fill_registry_except(&mut admin, "soak", &free);
    // The other ids stay busy for good: contention is among the soak's nodes.
    admin
        .batch_execute("UPDATE system_nodes SET last_seen = now() + interval '10 years', issued_until = now() + interval '10 years'")
        .unwrap();

    let tally = Arc::new(Mutex::new(Tally::default()));
    let rounds = Arc::new(Barrier::new(WORKERS));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (db, tally, round) = (db.clone(), tally.clone(), rounds.clone());
            // A worker that fails releases the others from the round's barrier, with its message.
            spawn_party(format!("soak worker {w}"), &rounds, move || {
                let mut client = db.connect();
                let mut rng = XorShift(w as u64 * 7_919 + 17);
                let mut nodes: Vec<Node> =
                    (0..NODES_PER_WORKER).map(|k| Node { host: format!("10.77.{w}.{k}"), running: None }).collect();
                let mut mine = Tally::default();
                for _ in 0..ROUNDS {
                    let started = Instant::now();
                    for node in &mut nodes {
                        node.visit(&mut client, &mut rng, &mut mine);
                    }
                    if let Some(rest) = ROUND.checked_sub(started.elapsed()) {
                        thread::sleep(rest);
                    }
                    round.wait();
                }
                let end = Instant::now();
                for node in &mut nodes {
                    node.stop(end, &mut mine);
                }
                let mut all = tally.lock().unwrap();
                all.tenures.extend(mine.tenures);
                all.ids.extend(mine.ids);
                for (o, n) in mine.outcomes {
                    *all.outcomes.entry(o).or_default() += n;
                }
                for (o, n) in mine.refusals {
                    *all.refusals.entry(o).or_default() += n;
                }
                all.fenced += mine.fenced;
                all.released += mine.released;
                all.crashed += mine.crashed;
                all.partitions += mine.partitions;
            })
        })
        .collect();
    join_all(workers, WORK_PATIENCE, "the soak workers");
    let tally = tally.lock().unwrap();

    // No two holders of a machine id inside a live lease at once.
    let mut by_id: HashMap<i32, Vec<&Tenure>> = HashMap::new();
    for t in &tally.tenures {
        by_id.entry(t.grant.0).or_default().push(t);
    }
    for tenures in by_id.values_mut() {
        tenures.sort_by_key(|t| t.from);
        for pair in tenures.windows(2) {
            assert!(
                pair[0].until <= pair[1].from,
                "machine id {} held by {} (v{}) until {:?} after {} (v{}, {}) took it",
                pair[0].grant.0,
                pair[0].node,
                pair[0].grant.1,
                pair[0].until - pair[1].from,
                pair[1].node,
                pair[1].grant.1,
                pair[1].outcome
            );
        }
    }
    // No ID twice.
    let mut seen: HashMap<i64, GrantKey> = HashMap::with_capacity(tally.ids.len());
    for &(id, grant) in &tally.ids {
        if let Some(first) = seen.insert(id, grant) {
            panic!("ID {id} minted under grant {first:?} and again under {grant:?}");
        }
    }

    let takebacks: usize =
        tally.outcomes.iter().filter(|(o, _)| o.starts_with("idle_") || *o == "released").map(|(_, n)| n).sum();
    println!(
        "soak: {} grants {:?}, {} take-backs, {} fenced, {} released, {} crashed, {} partitions, refusals {:?}, {} IDs",
        tally.tenures.len(),
        tally.outcomes,
        takebacks,
        tally.fenced,
        tally.released,
        tally.crashed,
        tally.partitions,
        tally.refusals,
        tally.ids.len()
    );
    assert!(takebacks > 0 && tally.fenced > 0, "the soak must exercise take-backs and fencing");
}
