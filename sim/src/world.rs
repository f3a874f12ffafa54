//! The simulated world: a server with its clock and its registry (the model), database backends in
//! slots and service node processes on hosts, each holder driving the real core (`Generator`,
//! `BackendLeases`, `ClaimPolicy::steps`, `watermark::*`), and the checks after every step.
//!
//! What the model replaces is Postgres (the registry's rows and statements, in `registry`), the
//! network, the processes and the clocks. What is glue here restates the edge's code around the
//! core, step for step: `claim` runs the core's own claim (`protocol::claim`), `backend_renew` is
//! `src/backend.rs`'s `renew` with `src/registry/writer/serve.rs`'s `lease_step`, the node is
//! `client/src/node.rs`.

use crate::mutation::{Mutation, Mutations};
pub use crate::protocol::Topology;
use crate::protocol::{self, refusal, Granted, Refusal, Settings};
use crate::registry::{ClaimedRow, Holding, Key, Ms, Node, Registry, Tables, Terms, TxnId, NEG_INF};
use crate::schedule::{Fate, Op, Report, Schedule, Setup, NODE_SKEW_MS, SERVER_SKEW_MS};
use idgen_core::generator::{Clock, Generator, Stop, MAX_CLOCK_BACKWARD_DEFAULT_MS};
use idgen_core::input::NodeIdentity;
use idgen_core::layout::{Layout, EPOCH_2025_UNIX_MS};
use idgen_core::lease::{BackendLeases, Confirmation, Parked, Terms as LeaseTerms, Uptake};
use idgen_core::watermark::{self, HolderKind};
use idgen_core::ClaimPolicy;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The one service every holder mints for: backends (`idgen_next_id('svc')`) and nodes compete
/// for its machine ids. (Per-service layouts and pools: see [`Topology`].)
pub const SERVICE: &str = "svc";
/// The server's address and port: a backend's identity is these and its slot.
const SERVER_HOST: &str = "127.0.0.1";
const SERVER_PORT: i32 = 5432;
const NODE_PORT: i32 = 8080;
/// Where simulated time starts: a year after the layout's epoch.
pub const T0: Ms = EPOCH_2025_UNIX_MS + 365 * 86_400_000;
/// The client's `start_timeout` (how long it waits for `not_before`) and its slack past a wait.
const START_TIMEOUT_MS: Ms = 60_000;
const WAIT_SLACK_MS: Ms = 100;
const DAY_MS: Ms = 86_400_000;
/// `src/registry/writer/process.rs`' `PARKED_CLOSE_AFTER_MS`.
const PARKED_CLOSE_AFTER_MS: Ms = 10_000;

/// Short thresholds, so that take-backs and cooldowns happen within a schedule. Index 0 is the
/// setting at start; a reload picks any. Each is consistent (`ClaimPolicy::validate`), and every
/// margin is at least the skew the clocks may have (schedule::SERVER_SKEW_MS + NODE_SKEW_MS).
pub const POLICIES: [ClaimPolicy; 4] = [
    ClaimPolicy {
        takeover_idle_7d_secs: 240,
        takeover_idle_1d_secs: 120,
        takeover_idle_1h_secs: 60,
        release_cooldown_secs: 5,
        heartbeat_interval_secs: 10,
        lease_safety_margin_secs: 10,
    },
    ClaimPolicy {
        takeover_idle_7d_secs: 90,
        takeover_idle_1d_secs: 45,
        takeover_idle_1h_secs: 20,
        release_cooldown_secs: 3,
        heartbeat_interval_secs: 5,
        lease_safety_margin_secs: 5,
    },
    ClaimPolicy {
        takeover_idle_7d_secs: 600,
        takeover_idle_1d_secs: 300,
        takeover_idle_1h_secs: 120,
        release_cooldown_secs: 10,
        heartbeat_interval_secs: 20,
        lease_safety_margin_secs: 10,
    },
    ClaimPolicy {
        takeover_idle_7d_secs: 240,
        takeover_idle_1d_secs: 120,
        takeover_idle_1h_secs: 60,
        release_cooldown_secs: 5,
        heartbeat_interval_secs: 10,
        lease_safety_margin_secs: 20,
    },
];

/// Which invariant broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// No two IDs issued are equal.
    UniqueIds,
    /// No two holders are inside a live lease of one machine id (their stamp ranges overlap).
    OneLiveHolder,
    /// Every `not_before` is past every earlier holder's stamps.
    NotBeforePastStamps,
    /// No refused call changed the registry.
    RefusedChangedNothing,
}

impl Invariant {
    pub fn name(self) -> &'static str {
        match self {
            Invariant::UniqueIds => "no two IDs equal",
            Invariant::OneLiveHolder => "one live holder per machine id",
            Invariant::NotBeforePastStamps => "not_before past every earlier stamp",
            Invariant::RefusedChangedNothing => "a refused call changes nothing",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub step: usize,
    pub invariant: Invariant,
    pub what: String,
}

/// One holder's tenure of a machine id: from the claim it learned to its last stamp.
#[derive(Clone, Debug)]
struct Tenure {
    holder: String,
    key: Key,
    version: i64,
    not_before: Ms,
    last_stamp: Option<Ms>,
}

/// A database backend: one process in a slot.
struct Backend {
    name: String,
    slot: usize,
    leases: BackendLeases,
    /// The caller's open transaction.
    txn: Option<TxnId>,
    tenure: Option<usize>,
    /// The registry generation as this process knows it (the edge's `registry::incarnation`): it
    /// moves when the process processes the invalidation a DROP sent, at the start of a transaction
    /// at the first relation lock it takes in one (its slow path's), and (0.7.0, F5's fix) before
    /// every ID. Without the last, not inside a statement that takes no new lock (finding F5, the
    /// mutation `generation-before-every-id`). The caller's open transaction stands for such a statement:
    /// the model's steps are single statements (on a server, an idle backend in an open
    /// transaction is told to catch up by the queue the DROP fills, and processes it then).
    seen_generation: u64,
    /// The generation its lease was last confirmed in (`BackendLease`'s, restated for invariant 2).
    lease_generation: u64,
    /// Its slow path took its first relation lock in the caller's open transaction: later ones in
    /// that transaction process no invalidation.
    locked_in_txn: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Live,
    Expired,
    Lost,
    Stopped,
}

/// A service node process (client/src/node.rs).
struct NodeProc {
    name: String,
    status: Status,
    machine_id: i32,
    version: i64,
    generator: Generator,
    /// Sent time of the last good heartbeat (or claim) plus the lease it granted, in true time
    /// (the client's monotonic clock).
    deadline: Ms,
    next_heartbeat: Ms,
    interval: Ms,
    /// The lease the settings gave at its start (what the client used before it read each grant).
    lease_at_start: Ms,
    tenure: usize,
    /// Its heartbeats fail in a row (the story tells the first of them).
    failing: bool,
    /// Its first report was answered (`first_report`, F1's fix): `IdgenNode::start` returns only
    /// then, so no ID before it.
    reported: bool,
    /// `Lease.wall_bound_ms`: the watermark of its last answered report plus the lease granted
    /// with it. It stamps nothing at or past it on its wall clock; meeting it, it reports at once.
    /// `NEG_INF` before its first report.
    wall_bound: Ms,
}

#[derive(Default)]
struct Host {
    /// A constant offset of the host's clock (changed only while none of its processes runs).
    base: Ms,
    /// Drift or steps around the base, within NODE_SKEW_MS.
    drift: Ms,
    procs: Vec<Option<NodeProc>>,
    started: u32,
    partitioned_until: Ms,
}

/// A call that reaches the server later than sent; its answer goes nowhere.
#[derive(Clone, Debug)]
enum Delayed {
    Heartbeat {
        held: Holding,
        report: Option<Ms>,
    },
    Release {
        held: Holding,
        report: Option<Ms>,
    },
    /// The commit of a claim whose client was killed while it ran.
    Commit {
        txn: TxnId,
    },
}

/// The world of one schedule.
pub struct World {
    pub setup: Setup,
    pub mutations: Mutations,
    /// True time (every process's monotonic clock).
    pub now: Ms,
    server_offset: Ms,
    reg: Registry,
    policy: ClaimPolicy,
    topology: Topology,
    machine_ids: i32,
    max_backward_ms: Ms,
    backends: Vec<Option<Backend>>,
    backend_incarnations: Vec<u32>,
    hosts: Vec<Host>,
    delayed: Vec<(Ms, Delayed)>,
    copy: Option<Tables>,
    hand_txn: Option<TxnId>,
    /// The server's clock at the last DROP EXTENSION that succeeded: the clock never steps back
    /// behind it, unless the faults say so (finding F2).
    dropped_floor: Ms,
    /// The latest stamp made under a registry that was then dropped: with F2's steps on, the clock
    /// still never steps back behind it (docs/concepts.md's "not covered"), unless uncovered.
    dropped_stamps: Ms,
    /// The registry generation (src/registry/incarnation.rs): every DROP that succeeded moves it
    /// (the invalidation of `idgen_private.idgen_registry`); each backend learns it when it processes
    /// invalidations.
    registry_generation: u64,
    /// The registry's identity (`incarnation::confirming`'s `registry`): every CREATE EXTENSION gives
    /// a new one.
    registry_identity: u64,
    /// What each slot's last backend left for the next (src/registry/handover.rs): the lease, its
    /// tenure, and when it was parked (true time).
    parked: Vec<Option<(Parked, usize, Ms)>>,
    tenures: Vec<Tenure>,
    by_key: BTreeMap<Key, Vec<usize>>,
    ids: HashMap<i64, usize>,
    pub issued: u64,
    step: usize,
    trace: Option<String>,
    /// Only invariant 1 is checked (to show a guard's removal gives literal duplicate IDs).
    pub ids_only: bool,
    pub violation: Option<Violation>,
}

macro_rules! say {
    ($w:expr, $($arg:tt)*) => {
        if $w.trace.is_some() {
            let line = format!($($arg)*);
            $w.say_line(line);
        }
    };
}

impl World {
    pub fn new(setup: Setup, mutations: Mutations, trace: bool) -> World {
        let topology =
            Topology { layout: Layout::DEFAULT, first_machine_id: 0, last_machine_id: setup.machine_ids - 1 };
        World {
            setup,
            mutations,
            now: T0,
            server_offset: 0,
            reg: Registry::new(setup.epoch, T0, setup.synchronous, mutations),
            policy: POLICIES[0],
            topology,
            machine_ids: setup.machine_ids,
            max_backward_ms: MAX_CLOCK_BACKWARD_DEFAULT_MS,
            backends: (0..setup.slots).map(|_| None).collect(),
            backend_incarnations: vec![0; setup.slots],
            hosts: (0..setup.hosts).map(|_| Host::default()).collect(),
            delayed: Vec::new(),
            copy: None,
            hand_txn: None,
            dropped_floor: NEG_INF,
            dropped_stamps: NEG_INF,
            registry_generation: 0,
            registry_identity: 1,
            parked: vec![None; setup.slots],
            tenures: Vec::new(),
            by_key: BTreeMap::new(),
            ids: HashMap::new(),
            issued: 0,
            step: 0,
            trace: trace.then(String::new),
            ids_only: false,
            violation: None,
        }
    }

    fn off(&self, m: Mutation) -> bool {
        self.mutations.has(m)
    }

    /// The story so far, one line per event.
    pub fn story(&self) -> &str {
        self.trace.as_deref().unwrap_or("")
    }

    fn say_line(&mut self, line: String) {
        let (now, offset, step) = (self.now - T0, self.server_offset, self.step);
        if let Some(trace) = self.trace.as_mut() {
            let _ = writeln!(
                trace,
                "{step:>4} t={:>9.3}s srv{:+.3}s | {line}",
                now as f64 / 1000.0,
                offset as f64 / 1000.0
            );
        }
    }

    /// The server's clock: `clock_timestamp()`, and what backends stamp with.
    pub fn server_clock(&self) -> Ms {
        self.now + self.server_offset
    }

    fn host_clock(&self, host: usize) -> Ms {
        self.now + self.hosts[host].base + self.hosts[host].drift
    }

    /// The settings in effect, as the edge reads them (the margin mutation zeroes the margin).
    fn policy(&self) -> ClaimPolicy {
        let mut p = self.policy;
        if self.off(Mutation::Margin) {
            p.lease_safety_margin_secs = 0;
        }
        p
    }

    fn terms(&self, kind: HolderKind, window: Ms) -> Terms {
        self.settings().terms(kind, window)
    }

    fn fail(&mut self, invariant: Invariant, what: String) {
        if self.ids_only && invariant != Invariant::UniqueIds {
            return;
        }
        if self.violation.is_none() {
            say!(self, "!! VIOLATION ({}): {what}", invariant.name());
            self.violation = Some(Violation { step: self.step, invariant, what });
        }
    }

    /// Runs a whole schedule; stops at the first violation.
    pub fn run(schedule: &Schedule, mutations: Mutations, trace: bool) -> World {
        World::run_checking(schedule, mutations, trace, false)
    }

    /// [`World::run`], checking only that no two IDs are equal when `ids_only`.
    pub fn run_checking(schedule: &Schedule, mutations: Mutations, trace: bool, ids_only: bool) -> World {
        let mut world = World::new(schedule.setup, mutations, trace);
        world.ids_only = ids_only;
        for (i, op) in schedule.ops.iter().enumerate() {
            world.step = i;
            world.apply(*op);
            world.check_live_holders();
            if world.violation.is_some() {
                break;
            }
        }
        world
    }

    // ---- bookkeeping of tenures and IDs: invariants 1 and 3 ----

    fn new_tenure(&mut self, holder: &str, row: &ClaimedRow, not_before: Ms) -> usize {
        let key = (SERVICE.to_owned(), row.machine_id);
        let index = self.tenures.len();
        let earlier = self.by_key.get(&key).cloned().unwrap_or_default();
        for k in earlier {
            if let Some(stamp) = self.tenures[k].last_stamp {
                if stamp > not_before {
                    let t = &self.tenures[k];
                    let what = format!(
                        "{holder} claimed machine id {} v{} with not_before {} but {} (v{}) stamped {}",
                        row.machine_id,
                        row.version,
                        rel(not_before),
                        t.holder,
                        t.version,
                        rel(stamp)
                    );
                    self.fail(Invariant::NotBeforePastStamps, what);
                }
            }
        }
        self.tenures.push(Tenure {
            holder: holder.to_owned(),
            key: key.clone(),
            version: row.version,
            not_before,
            last_stamp: None,
        });
        self.by_key.entry(key).or_default().push(index);
        index
    }

    fn stamped(&mut self, tenure: usize, id: i64) {
        self.issued += 1;
        let parts = self.topology.layout.decompose(id).expect("a generator's ID decodes");
        let ts = self.topology.layout.unix_ms_of(parts.ticks);
        if let Some(first) = self.ids.insert(id, tenure) {
            let (a, b) = (&self.tenures[first], &self.tenures[tenure]);
            let what = format!(
                "ID {id} (machine id {}, {} seq {}) issued by {} (v{}) and again by {} (v{})",
                parts.machine_id,
                rel(ts),
                parts.sequence,
                a.holder,
                a.version,
                b.holder,
                b.version
            );
            self.fail(Invariant::UniqueIds, what);
        }
        let key = self.tenures[tenure].key.clone();
        let later: Vec<usize> = self.by_key[&key].iter().copied().filter(|k| *k > tenure).collect();
        for k in later {
            if ts > self.tenures[k].not_before {
                let (a, b) = (&self.tenures[tenure], &self.tenures[k]);
                let what = format!(
                    "{} (v{}) stamped {} on machine id {} after {} (v{}) claimed it with not_before {}",
                    a.holder,
                    a.version,
                    rel(ts),
                    key.1,
                    b.holder,
                    b.version,
                    rel(b.not_before)
                );
                self.fail(Invariant::NotBeforePastStamps, what);
            }
        }
        let t = &mut self.tenures[tenure];
        t.last_stamp = Some(t.last_stamp.map_or(ts, |s| s.max(ts)));
    }

    // ---- invariant 2: at most one holder inside a live lease, by stamp ranges ----

    /// Every tenure that may stamp now, with the highest timestamp it may still stamp.
    fn live_tenures(&self) -> Vec<(usize, Ms)> {
        let mut live = Vec::new();
        let server = self.server_clock();
        for b in self.backends.iter().flatten() {
            if b.lease_generation != self.next_id_generation(b) {
                continue; // its hot path checks the lease against the registry before it issues
            }
            let (Some(tenure), Some(lease)) = (b.tenure, b.leases.iter().next()) else { continue };
            let Some(held) = lease.held() else { continue };
            let due = idgen_core::lease::check_due(held, self.policy.heartbeat_interval_secs * 1000);
            if held.terms.version == self.tenures[tenure].version
                && server < due
                && server > held.terms.not_before_unix_ms
            {
                live.push((tenure, due - 1));
            }
        }
        // A lease parked in a slot is a holder too: the slot's next backend may take it up and stamp
        // until its check is due.
        for (lease, tenure, _) in self.parked.iter().flatten() {
            if lease.registry != self.registry_identity && !self.off(Mutation::HandoverRegistry) {
                continue;
            }
            let due = lease
                .verified_at_unix_ms
                .saturating_add(self.policy.heartbeat_interval_secs * 1000)
                .min(lease.window_end_unix_ms());
            if server < due && server > lease.stamped_until_unix_ms.max(lease.terms.not_before_unix_ms) {
                live.push((*tenure, due - 1));
            }
        }
        for (h, host) in self.hosts.iter().enumerate() {
            for p in host.procs.iter().flatten() {
                let clock = self.host_clock(h);
                let bound = if self.off(Mutation::WallBound) { i64::MAX } else { p.wall_bound };
                let stamping = matches!(p.status, Status::Live | Status::Expired)
                    && self.now < p.deadline
                    && (p.reported || self.off(Mutation::FirstReport))
                    && clock < bound;
                if stamping && clock > self.tenures[p.tenure].not_before {
                    live.push((p.tenure, (clock + (p.deadline - self.now)).min(bound) - 1));
                }
            }
        }
        live
    }

    fn check_live_holders(&mut self) {
        let live = self.live_tenures();
        for (i, &(a, ceiling_a)) in live.iter().enumerate() {
            for &(b, ceiling_b) in &live[i + 1..] {
                if self.tenures[a].key != self.tenures[b].key {
                    continue;
                }
                let ((early, ceiling), late) = if a < b { ((a, ceiling_a), b) } else { ((b, ceiling_b), a) };
                let (e, l) = (&self.tenures[early], &self.tenures[late]);
                if ceiling > l.not_before {
                    let what = format!(
                        "{} (v{}) may stamp up to {} on machine id {} while {} (v{}) stamps after {}",
                        e.holder,
                        e.version,
                        rel(ceiling),
                        e.key.1,
                        l.holder,
                        l.version,
                        rel(l.not_before)
                    );
                    self.fail(Invariant::OneLiveHolder, what);
                    return;
                }
            }
        }
    }

    /// Invariant 4, after a refused call: the committed registry is what it was before the call.
    fn unchanged_after_refusal(&mut self, before: &Option<Tables>, call: &str, r: &Refusal) {
        if &self.reg.committed != before {
            let what = format!("{call} was refused ({} {}) yet the registry changed", r.code, r.why);
            self.fail(Invariant::RefusedChangedNothing, what);
        }
    }

    // ---- the steps ----

    pub fn apply(&mut self, op: Op) {
        self.reg.clock = self.server_clock();
        match op {
            Op::Advance { ms } => {
                let target = self.now + ms;
                self.advance_to(target);
            }
            Op::ServerClock { offset } => {
                let mut offset = offset.clamp(-SERVER_SKEW_MS, SERVER_SKEW_MS);
                let f = self.setup.faults;
                let floor = match (f.uncovered, f.steps_back_after_drop) {
                    (true, _) => NEG_INF,
                    (false, true) => self.dropped_stamps,
                    (false, false) => self.dropped_floor,
                };
                if floor != NEG_INF {
                    offset = offset.max(floor + 1 - self.now);
                }
                say!(self, "server clock steps {:+}ms to {}", offset - self.server_offset, rel(self.now + offset));
                self.server_offset = offset;
            }
            Op::NodeClock { host, drift } => {
                let drift = drift.clamp(-NODE_SKEW_MS, NODE_SKEW_MS);
                // A clock ahead of the server beyond the margin is outside what any lease absorbs:
                // a host running far ahead keeps its offset constant.
                if host < self.hosts.len() && self.hosts[host].base <= 0 {
                    say!(self, "n{host} clock steps {:+}ms (drift {drift:+}ms)", drift - self.hosts[host].drift);
                    self.hosts[host].drift = drift;
                }
            }
            Op::HostBase { host, base } => {
                // A clock running far ahead may also jump there under a running process (an NTP
                // step, a VM restored): the client's wall bound keeps it from stamping past what the
                // registry holds for it. Other changes of the base only while none runs.
                let jump = self.setup.faults.far_ahead_clocks && base > DAY_MS / 2;
                if host < self.hosts.len() && (jump || self.hosts[host].procs.iter().all(Option::is_none)) {
                    say!(self, "n{host} clock set {:+.3}s from true time", base as f64 / 1000.0);
                    self.hosts[host].base = base;
                    if base > 0 {
                        self.hosts[host].drift = 0;
                    }
                }
            }
            Op::Begin { slot } => self.begin(slot),
            Op::Mint { slot, n, cancelled, read_only } => self.backend_mint(slot, n, cancelled, read_only),
            Op::Commit { slot } => self.end_caller_txn(slot, true),
            Op::Rollback { slot } => self.end_caller_txn(slot, false),
            Op::Exit { slot, record } => self.backend_exit(slot, record),
            Op::ServerCrash => {
                say!(self, "server crashes and restarts: every backend dies, open transactions abort");
                self.server_restart();
            }
            Op::Failover => {
                let lost = self.reg.committed != self.reg.standby;
                say!(
                    self,
                    "failover to the {} standby{}",
                    if self.setup.synchronous { "synchronous" } else { "asynchronous" },
                    if lost { ": commits it had not received are lost" } else { "" }
                );
                self.reg.fail_over();
                self.server_restart();
            }
            Op::Replicate => self.reg.replicate(),
            Op::Start { host, fate, twin } => self.node_start(host, fate, twin),
            Op::NodeMint { host, process, n } => self.node_mint(host, process, n),
            Op::Heartbeat { host, process, fate, report } => self.node_heartbeat(host, process, fate, report),
            Op::Partition { host, ms } => {
                if host < self.hosts.len() {
                    say!(self, "n{host} is cut off from the server for {}ms", ms);
                    self.hosts[host].partitioned_until = self.now + ms;
                }
            }
            Op::Shutdown { host, process, fate, race_ms } => self.node_shutdown(host, process, fate, race_ms),
            Op::Crash { host, process } => {
                if let Some(p) = self.hosts.get_mut(host).and_then(|h| h.procs.get_mut(process)).and_then(Option::take)
                {
                    say!(self, "{} is killed (no release)", p.name);
                }
            }
            Op::Reload { policy, range } => self.reload(policy, range),
            Op::Drop { slot } => self.drop_extension(slot),
            Op::Create { epoch } => {
                if !self.reg.installed() {
                    say!(self, "CREATE EXTENSION idgen (epoch {epoch})");
                    self.reg.committed = Some(Tables::created(epoch));
                    self.registry_identity += 1;
                    if self.setup.synchronous {
                        self.reg.replicate();
                    }
                }
            }
            Op::Truncate => self.truncate(),
            Op::Delete { machine_id } => self.delete(machine_id),
            Op::TakeCopy => {
                if let Some(tables) = &self.reg.committed {
                    self.copy = Some(tables.clone());
                    say!(self, "pg_dump takes a copy of the registry ({} rows)", tables.rows.len());
                }
            }
            Op::Restore { triggers } => self.restore(triggers),
            Op::HandLock { machine_id } => self.hand_lock(machine_id),
            Op::HandRelease { machine_id } => self.hand_release(machine_id),
            Op::HandUnlock => {
                if let Some(txn) = self.hand_txn.take() {
                    say!(self, "the superuser's transaction commits (its row lock goes)");
                    self.reg.commit(txn);
                }
            }
        }
    }

    /// Moves true time to `target`: node heartbeats fall due, delayed calls arrive.
    fn advance_to(&mut self, target: Ms) {
        for _ in 0..100_000 {
            let next_heartbeat = self
                .hosts
                .iter()
                .enumerate()
                .flat_map(|(h, host)| host.procs.iter().enumerate().map(move |(p, proc_)| (h, p, proc_)))
                .filter_map(|(h, p, proc_)| {
                    let proc_ = proc_.as_ref()?;
                    matches!(proc_.status, Status::Live | Status::Expired).then_some((proc_.next_heartbeat, h, p))
                })
                .min();
            let next_delayed = self.delayed.iter().enumerate().map(|(i, (at, _))| (*at, i)).min();
            let heartbeat_first = match (next_heartbeat, next_delayed) {
                (Some((at, ..)), Some((d, _))) => at <= d,
                (Some(_), None) => true,
                _ => false,
            };
            if heartbeat_first {
                let (at, h, p) = next_heartbeat.expect("chosen");
                if at > target {
                    break;
                }
                self.now = self.now.max(at);
                self.reg.clock = self.server_clock();
                let fate = if self.hosts[h].partitioned_until > self.now { Fate::LostBefore } else { Fate::Delivered };
                self.node_heartbeat(h, p, fate, Report::Honest);
            } else if let Some((at, i)) = next_delayed {
                if at > target {
                    break;
                }
                self.now = self.now.max(at);
                self.reg.clock = self.server_clock();
                let (_, call) = self.delayed.remove(i);
                self.arrive_late(call);
            } else {
                break;
            }
        }
        self.now = self.now.max(target);
        self.reg.clock = self.server_clock();
        // The database's writer closes the leases parked for 10 s that nobody took up.
        if self.setup.handover
            && self.reg.installed()
            && self.parked.iter().flatten().any(|(_, _, at)| self.now - at >= PARKED_CLOSE_AFTER_MS)
        {
            let txn = self.reg.begin();
            let now = self.now;
            let closed = self.close_parked(txn, |at| now - at >= PARKED_CLOSE_AFTER_MS);
            self.reg.commit(txn);
            say!(self, "the registry writer closes {closed} lease(s) parked for 10 s");
        }
    }

    fn server_restart(&mut self) {
        self.reg.abort_all();
        self.hand_txn = None;
        // Shared memory starts empty: what the slots held for their next backends is gone.
        self.parked.iter_mut().for_each(|p| *p = None);
        for slot in 0..self.backends.len() {
            if let Some(b) = self.backends[slot].take() {
                say!(self, "{} dies with the server (no exit record)", b.name);
            }
        }
    }

    fn reload(&mut self, policy: usize, range: usize) {
        let policy = POLICIES[policy % POLICIES.len()];
        let last = self.machine_ids - 1;
        let (first, last) = match range % 3 {
            0 => (0, last),
            1 => (0, (last - 1).max(0)),
            _ => (1.min(last), last),
        };
        say!(
            self,
            "settings reloaded: takeover_idle_1h {}s, margin {}s, heartbeat {}s, cooldown {}s (lease {}s); machine_id_range {first}-{last}",
            policy.takeover_idle_1h_secs,
            policy.lease_safety_margin_secs,
            policy.heartbeat_interval_secs,
            policy.release_cooldown_secs,
            policy.lease_secs()
        );
        self.policy = policy;
        self.topology.first_machine_id = first;
        self.topology.last_machine_id = last;
    }

    // ---- the claim ----

    /// The settings in effect, for a claim.
    fn settings(&self) -> Settings {
        Settings {
            policy: self.policy(),
            topology: self.topology.clone(),
            max_backward_ms: self.max_backward_ms,
            require_synchronous_standby: self.setup.require_synchronous_standby,
        }
    }

    /// The core's claim over the model (`protocol::claim`), telling what it set aside.
    fn claim(&mut self, txn: TxnId, node: &Node) -> Result<Granted, Refusal> {
        let settings = self.settings();
        let (result, set_aside) = protocol::claim(&mut self.reg, txn, node, &settings);
        for (m, why) in set_aside {
            say!(self, "  the claim sets machine id {m} aside: {why}");
        }
        result
    }

    // ---- database backends (src/backend.rs, src/registry/writer/) ----

    fn backend_identity(slot: usize) -> Node {
        Node { service: SERVICE.into(), host: SERVER_HOST.into(), port: SERVER_PORT, backend_slot: Some(slot as i32) }
    }

    /// The backend in `slot`, connecting a new one if none is.
    fn connect(&mut self, slot: usize) -> Backend {
        if let Some(b) = self.backends[slot].take() {
            return b;
        }
        self.backend_incarnations[slot] += 1;
        let name = format!("b{slot}#{}", self.backend_incarnations[slot]);
        say!(self, "{name} connects (backend slot {slot})");
        let generation = self.registry_generation;
        Backend {
            name,
            slot,
            leases: BackendLeases::new(),
            txn: None,
            tenure: None,
            seen_generation: generation,
            lease_generation: generation,
            locked_in_txn: false,
        }
    }

    /// The backend processes the invalidations sent since it last did: the registry generation
    /// reaches it (a transaction's start, a relation lock it did not hold, `AcceptInvalidationMessages`).
    fn accept_invalidations(&self, b: &mut Backend) {
        b.seen_generation = self.registry_generation;
    }

    /// The generation the backend's next ID compares its lease with: a next statement outside a
    /// transaction starts one, which processes invalidations; inside one, the process's own.
    fn next_id_generation(&self, b: &Backend) -> u64 {
        if self.off(Mutation::RegistryGeneration) {
            0
        } else if b.txn.is_none() || !self.off(Mutation::GenerationBeforeEveryId) {
            self.registry_generation
        } else {
            b.seen_generation
        }
    }

    /// The generation the hot path compares a lease with, and the slow path confirms it in: the
    /// process's own; a constant with the guard switched off (0.6.0: leases carry none).
    fn hot_generation(&self, b: &Backend) -> u64 {
        if self.off(Mutation::RegistryGeneration) {
            0
        } else {
            b.seen_generation
        }
    }

    fn begin(&mut self, slot: usize) {
        if slot >= self.backends.len() {
            return;
        }
        let mut b = self.connect(slot);
        if b.txn.is_none() {
            b.txn = Some(self.reg.begin());
            self.accept_invalidations(&mut b);
            b.locked_in_txn = false;
            say!(self, "{} BEGIN", b.name);
        }
        self.backends[slot] = Some(b);
    }

    fn end_caller_txn(&mut self, slot: usize, commit: bool) {
        let Some(b) = self.backends.get_mut(slot).and_then(Option::as_mut) else { return };
        let Some(txn) = b.txn.take() else { return };
        let name = b.name.clone();
        if commit {
            say!(self, "{name} COMMIT");
            self.reg.commit(txn);
        } else {
            say!(self, "{name} ROLLBACK (a savepoint's rollback: the IDs it got stay in the client's hands)");
            self.reg.abort(txn);
        }
    }

    fn backend_mint(&mut self, slot: usize, n: u8, cancelled: bool, read_only: bool) {
        if slot >= self.backends.len() {
            return;
        }
        let mut b = self.connect(slot);
        if b.txn.is_none() {
            // A statement of its own: its transaction starts by processing invalidations.
            self.accept_invalidations(&mut b);
            b.locked_in_txn = false;
        }
        let mut cancelled = cancelled;
        let mut got = Vec::new();
        let mut refused = None;
        for _ in 0..n {
            match self.backend_next_id(&mut b, &mut cancelled, read_only) {
                Ok((id, tenure)) => {
                    got.push(id);
                    self.stamped(tenure, id);
                }
                Err(r) => {
                    refused = Some(r);
                    break;
                }
            }
        }
        if !got.is_empty() {
            let how = if read_only { " (read only)" } else { "" };
            say!(
                self,
                "{} idgen_next_id(){how} x{} -> {}",
                b.name,
                got.len(),
                describe_ids(&self.topology.layout, &got)
            );
        }
        if let Some(r) = refused {
            say!(self, "{} idgen_next_id() refused: {} {}", b.name, r.code, r.why);
            // The error ends the caller's transaction.
            if let Some(txn) = b.txn.take() {
                self.reg.abort(txn);
            }
        }
        self.backends[slot] = Some(b);
    }

    /// `backend::next_id`: the hot path, and the slow path when the lease is due for a check.
    fn backend_next_id(
        &mut self,
        b: &mut Backend,
        cancelled: &mut bool,
        read_only: bool,
    ) -> Result<(i64, usize), Refusal> {
        if !self.off(Mutation::GenerationBeforeEveryId) {
            // F5's fix (0.7.0, src/backend.rs: `incarnation::current()`): invalidations processed
            // on the hot path, before every ID.
            self.accept_invalidations(b);
        }
        for _ in 0..64 {
            let stop = {
                let generation = self.hot_generation(b);
                let lease = b.leases.get_or_add(SERVICE);
                let mut clock = WorldClock { world: self, host: None, give_up: None };
                match lease.next_id(&mut clock, generation) {
                    Ok(id) => return Ok((id, b.tenure.expect("an ID is issued under a tenure"))),
                    Err(stop) => stop,
                }
            };
            match stop {
                Stop::LeaseCheckDue if read_only => self.backend_read(b)?,
                Stop::LeaseCheckDue => self.backend_renew(b, cancelled)?,
                Stop::ClockBehind { behind_ms, allowed_ms } => {
                    return Err(refusal(
                        "55000",
                        format!("clock {behind_ms}ms behind the last ID (waits {allowed_ms}ms)"),
                    ))
                }
                Stop::ClockOutsideLayout { .. } => return Err(refusal("22008", "clock outside the layout")),
            }
        }
        panic!("a backend's lease was renewed 64 times and is still due (a model bug)")
    }

    /// `backend::renew` and the registry writer's `lease_step`: renew the held lease or claim, in a
    /// transaction of its own, committed before any ID is issued under it.
    fn backend_renew(&mut self, b: &mut Backend, cancelled: &mut bool) -> Result<(), Refusal> {
        let generation = self.slow_path_generation(b);
        let policy = self.policy();
        if policy.validate().is_err() {
            return Err(refusal("22023", "idgen settings are inconsistent"));
        }
        if !self.reg.installed() {
            return Err(refusal("55000", "idgen is not installed"));
        }
        if self.adopt(b, generation) {
            return Ok(());
        }
        let heartbeat_ms = policy.heartbeat_interval_secs * 1000;
        let slot = b.slot;
        let node = Self::backend_identity(slot);
        let held = {
            let lease = b.leases.get_or_add(SERVICE);
            lease.held().map(|h| h.terms)
        };
        let renewal = held.map(|terms| {
            let holding =
                Holding { node: node.clone(), machine_id: i32::from(terms.machine_id), version: terms.version };
            let window = watermark::backend_window_ms(&policy, self.server_clock() - terms.claimed_at_unix_ms);
            (holding, terms.registry_epoch, window)
        });
        // The savepoint rule: the writes commit on their own, whatever the caller's transaction does.
        let in_caller = self.off(Mutation::SavepointRule) && b.txn.is_some();
        let txn = if in_caller { b.txn.expect("checked") } else { self.reg.begin() };
        let before = self.reg.committed.clone();
        let answer = self.lease_step(txn, &node, renewal.as_ref());
        match answer {
            Ok(answer) => {
                if !in_caller {
                    self.reg.commit(txn);
                }
                if std::mem::take(cancelled) {
                    say!(self, "{} is cancelled while the registry writer commits: no answer", b.name);
                    return Err(refusal("57014", "canceling statement due to user request"));
                }
                let lease = b.leases.get_or_add(SERVICE);
                match answer {
                    LeaseAnswer::Renewed { verified, lease_until, issued_until } => {
                        lease.verified(
                            verified,
                            lease_until,
                            issued_until,
                            self.max_backward_ms,
                            heartbeat_ms,
                            Confirmation { generation, registry: self.registry_identity },
                        );
                        b.lease_generation = generation;
                        say!(self, "{} renews its window to {}", b.name, rel(issued_until));
                    }
                    LeaseAnswer::Claimed(granted) => {
                        let mut not_before = granted.not_before;
                        if self.off(Mutation::NotBefore) {
                            not_before = granted.row.claimed_at;
                        }
                        let terms = LeaseTerms {
                            layout: self.topology.layout,
                            machine_id: granted.row.machine_id as u16,
                            version: granted.row.version,
                            registry_epoch: granted.epoch,
                            claimed_at_unix_ms: granted.row.claimed_at,
                            not_before_unix_ms: not_before,
                            lease_until_unix_ms: granted.row.lease_until,
                            issued_until_unix_ms: granted.row.issued_until,
                        };
                        let identity = NodeIdentity {
                            service: SERVICE.into(),
                            host: SERVER_HOST.into(),
                            port: SERVER_PORT,
                            backend_slot: Some(slot as i32),
                        };
                        lease.claimed(
                            identity,
                            terms,
                            self.max_backward_ms,
                            heartbeat_ms,
                            Confirmation { generation, registry: self.registry_identity },
                        );
                        b.lease_generation = generation;
                        let name = b.name.clone();
                        say!(
                            self,
                            "{name} claims machine id {} v{} ({}), not_before {}, window to {}",
                            granted.row.machine_id,
                            granted.row.version,
                            granted.outcome,
                            rel(granted.not_before),
                            rel(granted.row.issued_until)
                        );
                        b.tenure = Some(self.new_tenure(&name, &granted.row, not_before));
                    }
                }
                Ok(())
            }
            Err(r) => {
                self.reg.abort(txn);
                if in_caller {
                    b.txn = None;
                }
                self.unchanged_after_refusal(&before, "a backend's claim", &r);
                Err(r)
            }
        }
    }

    /// `backend::renew` in a read-only transaction: the lease is read back in the caller's
    /// transaction and serves until the window last committed ends; no claim, no write.
    fn backend_read(&mut self, b: &mut Backend) -> Result<(), Refusal> {
        let generation = self.slow_path_generation(b);
        let policy = self.policy();
        if policy.validate().is_err() {
            return Err(refusal("22023", "idgen settings are inconsistent"));
        }
        if self.reg.installed() && self.adopt(b, generation) {
            return Ok(());
        }
        let slot = b.slot;
        let held = b.leases.get_or_add(SERVICE).held().map(|h| h.terms);
        let Some(terms) = held.filter(|_| self.reg.installed()) else {
            return Err(refusal("25006", "no lease to read in a read-only transaction"));
        };
        let holding = Holding {
            node: Self::backend_identity(slot),
            machine_id: i32::from(terms.machine_id),
            version: terms.version,
        };
        let txn = b.txn.unwrap_or_else(|| self.reg.begin());
        let read = self.reg.read_backend_lease(txn, &holding, policy.lease_secs() * 1000, terms.registry_epoch);
        if b.txn.is_none() {
            self.reg.commit(txn);
        }
        let lease = b.leases.get_or_add(SERVICE);
        match read {
            Some((verified, lease_until, issued_until)) => {
                if lease_until.min(issued_until) <= verified {
                    return Err(refusal("25006", "the lease's committed window ended (read-only transaction)"));
                }
                let heartbeat_ms = policy.heartbeat_interval_secs * 1000;
                lease.verified(
                    verified,
                    lease_until,
                    issued_until,
                    self.max_backward_ms,
                    heartbeat_ms,
                    Confirmation { generation, registry: self.registry_identity },
                );
                b.lease_generation = generation;
                Ok(())
            }
            None => {
                lease.lost();
                Err(refusal("25006", "the lease moved; no claim in a read-only transaction"))
            }
        }
    }

    /// `backend::renew` with no lease held: the lease the slot's last backend left is taken up, with no
    /// registry write (`handover::take`, `BackendLease::adopt`). It goes on under its tenure.
    fn adopt(&mut self, b: &mut Backend, generation: u64) -> bool {
        if b.leases.get_or_add(SERVICE).held().is_some() {
            return false;
        }
        let Some((mut parked, tenure, _)) = self.parked[b.slot].take() else { return false };
        let registry = if self.off(Mutation::HandoverRegistry) { parked.registry } else { self.registry_identity };
        if self.off(Mutation::HandoverLastStamp) {
            parked.stamped_until_unix_ms = parked.terms.not_before_unix_ms;
        }
        let (machine_id, version, stamped) =
            (parked.terms.machine_id, parked.terms.version, parked.stamped_until_unix_ms);
        let node = Self::identity_of(b.slot);
        let uptake = Uptake {
            now_unix_ms: self.server_clock(),
            max_backward_ms: self.max_backward_ms,
            heartbeat_interval_ms: self.policy().heartbeat_interval_secs * 1000,
            machine_ids: u16::try_from(self.topology.first_machine_id).unwrap_or(0)
                ..=u16::try_from(self.topology.last_machine_id).unwrap_or(0),
            confirmed: Confirmation { generation, registry },
        };
        match b.leases.get_or_add(SERVICE).adopt(parked, &node, &uptake) {
            Ok(()) => {
                b.lease_generation = generation;
                b.tenure = Some(tenure);
                say!(
                    self,
                    "{} takes up the lease its slot's last backend left: machine id {machine_id} v{version}, after {}",
                    b.name,
                    rel(stamped)
                );
                true
            }
            Err(why) => {
                say!(self, "{} leaves the parked lease of machine id {machine_id} v{version}: {why:?}", b.name);
                false
            }
        }
    }

    fn identity_of(slot: usize) -> NodeIdentity {
        NodeIdentity {
            service: SERVICE.into(),
            host: SERVER_HOST.into(),
            port: SERVER_PORT,
            backend_slot: Some(slot as i32),
        }
    }

    /// `backend::renew`'s `incarnation::confirming()`: the generation a lease asked for now is
    /// confirmed in, read before the registry is; then the slow path's first relation lock in the
    /// transaction (pg_extension's, or the registry's in a read-only one) processes invalidations,
    /// so that one that arrived moves the generation past it and the next ID checks again.
    fn slow_path_generation(&self, b: &mut Backend) -> u64 {
        let generation = self.hot_generation(b);
        if !b.locked_in_txn {
            self.accept_invalidations(b);
            b.locked_in_txn = b.txn.is_some();
        }
        generation
    }

    fn lease_step(
        &mut self,
        txn: TxnId,
        node: &Node,
        renewal: Option<&(Holding, i64, Ms)>,
    ) -> Result<LeaseAnswer, Refusal> {
        if let Some((held, epoch, window)) = renewal {
            let t = self.terms(HolderKind::Backend, *window);
            if let Some((verified, lease_until, issued_until)) =
                self.reg.renew_backend_lease(txn, held, t.lease, *epoch, *window, t.takeback_age)
            {
                return Ok(LeaseAnswer::Renewed { verified, lease_until, issued_until });
            }
            if self.reg.read_backend_lease(txn, held, t.lease, *epoch).is_some() {
                return Err(refusal("55P03", "its row is locked (a take-over in flight)"));
            }
            // Lost: claim anew in the same transaction.
        }
        self.claim(txn, node).map(LeaseAnswer::Claimed)
    }

    fn backend_exit(&mut self, slot: usize, record: bool) {
        let Some(b) = self.backends.get_mut(slot).and_then(Option::take) else { return };
        if let Some(txn) = b.txn {
            self.reg.abort(txn);
        }
        if record && self.setup.handover && self.park(&b) {
            return;
        }
        if record && self.reg.installed() {
            let txn = self.reg.begin();
            let closed = self.close_leases(txn, &b);
            self.reg.commit(txn);
            say!(self, "{} disconnects; its exit record {}", b.name, closed);
        } else {
            say!(self, "{} disconnects with no exit record", b.name);
        }
    }

    /// The exit hook with shared memory (`handover::park`): the lease stays in the slot for the next
    /// backend, if the slot's entry is free (or holds a lease whose window ended).
    fn park(&mut self, b: &Backend) -> bool {
        let generation = self.hot_generation(b);
        let Some(lease) = b.leases.iter().next().and_then(|l| l.park(generation)) else { return false };
        let Some(tenure) = b.tenure else { return false };
        let server = self.server_clock();
        if self.parked[b.slot].as_ref().is_some_and(|(p, _, _)| p.window_end_unix_ms() > server) {
            return false;
        }
        say!(
            self,
            "{} disconnects; leaves machine id {} v{} in its slot (stamped until {})",
            b.name,
            lease.terms.machine_id,
            lease.terms.version,
            rel(lease.stamped_until_unix_ms)
        );
        self.parked[b.slot] = Some((lease, tenure, self.now));
        true
    }

    /// `handover::close_parked`: the parked leases for which `which(parked_at)` holds are taken out
    /// of their slots and their last stamps recorded in place of their windows, in `txn`.
    fn close_parked(&mut self, txn: TxnId, which: impl Fn(Ms) -> bool) -> usize {
        let mut closed = 0;
        for slot in 0..self.parked.len() {
            if !self.parked[slot].as_ref().is_some_and(|(_, _, at)| which(*at)) {
                continue;
            }
            let Some((lease, _, _)) = self.parked[slot].take() else { continue };
            let held = Holding {
                node: Self::backend_identity(slot),
                machine_id: i32::from(lease.terms.machine_id),
                version: lease.terms.version,
            };
            if let Ok(true) =
                self.reg.close_backend_lease(txn, &held, lease.terms.registry_epoch, lease.stamped_until_unix_ms)
            {
                closed += 1;
            }
        }
        closed
    }

    /// `backend::close_leases`: each held lease's last stamp in place of its window.
    fn close_leases(&mut self, txn: TxnId, b: &Backend) -> String {
        let epochs: Vec<i64> = b.leases.iter().filter_map(|l| l.held().map(|h| h.terms.registry_epoch)).collect();
        let mut said = String::from("writes nothing");
        for ((holding, closing), epoch) in b.leases.closings().into_iter().zip(epochs) {
            let held = Holding {
                node: Node {
                    service: holding.node.service.clone(),
                    host: holding.node.host.clone(),
                    port: holding.node.port,
                    backend_slot: holding.node.backend_slot,
                },
                machine_id: holding.machine_id,
                version: holding.version,
            };
            if let Ok(true) = self.reg.close_backend_lease(txn, &held, epoch, closing) {
                said = format!("lowers machine id {}'s watermark to its last stamp {}", held.machine_id, rel(closing));
            }
        }
        said
    }

    // ---- service nodes (client/src/node.rs) ----

    fn node_identity(host: usize) -> Node {
        Node { service: SERVICE.into(), host: format!("10.0.0.{}", host + 1), port: NODE_PORT, backend_slot: None }
    }

    fn node_start(&mut self, host: usize, fate: Fate, twin: bool) {
        if host >= self.hosts.len() {
            return;
        }
        if !twin && self.hosts[host].procs.iter().any(Option::is_some) {
            return;
        }
        self.hosts[host].started += 1;
        let name = format!("n{host}#{}", self.hosts[host].started);
        let node = Self::node_identity(host);
        // The client retries a claim without an answer; the abandoned attempt either committed or
        // was ended before the retry.
        if let Fate::Delayed(ms) = fate {
            if self.reg.installed() && self.hosts[host].partitioned_until <= self.now {
                let txn = self.reg.begin();
                match self.claim(txn, &node) {
                    Ok(g) => {
                        say!(self, "{name} is killed while its claim of machine id {} v{} runs: the transaction stays open {ms}ms", g.row.machine_id, g.row.version);
                        self.delayed.push((self.now + ms, Delayed::Commit { txn }));
                    }
                    Err(_) => self.reg.abort(txn),
                }
            }
            return;
        }
        let mut fate = fate;
        let granted = loop {
            if self.hosts[host].partitioned_until > self.now || matches!(fate, Fate::LostBefore) {
                say!(self, "{name} idgen_claim: no answer (never reached the server)");
                if matches!(fate, Fate::LostBefore) {
                    fate = Fate::Delivered;
                    continue;
                }
                return;
            }
            let sent = self.now;
            let Some((granted, lease_ms)) = self.node_claim(&name, &node) else { return };
            if matches!(fate, Fate::LostAfterCommit | Fate::Delayed(_)) {
                say!(
                    self,
                    "{name} idgen_claim committed machine id {} v{}, but its answer is lost: it retries",
                    granted.row.machine_id,
                    granted.row.version
                );
                fate = Fate::Delivered;
                continue;
            }
            break (granted, lease_ms, sent);
        };
        let (granted, lease_ms, sent) = granted;
        let row = granted.row.clone();
        let not_before = if self.off(Mutation::NotBefore) { row.claimed_at } else { granted.not_before };
        say!(
            self,
            "{name} idgen_claim -> machine id {} v{} ({}), not_before {}, lease {}s",
            row.machine_id,
            row.version,
            granted.outcome,
            rel(granted.not_before),
            lease_ms / 1000
        );
        // No ID at or before not_before: waited for within start_timeout, else released unused.
        if self.host_clock(host) <= not_before {
            let wait = not_before + 1 - self.host_clock(host);
            if wait > START_TIMEOUT_MS {
                say!(self, "{name} its clock is {}ms behind not_before: releases the id unused and exits", wait);
                let held = Holding { node: node.clone(), machine_id: row.machine_id, version: row.version };
                let txn = self.reg.begin();
                let p = self.policy();
                let _ = self.reg.release(
                    txn,
                    &held,
                    p.lease_safety_margin_secs * 1000,
                    Some(not_before),
                    p.lease_secs() * 1000,
                    p.takeover_idle_1h_secs * 1000,
                );
                self.reg.commit(txn);
                return;
            }
            self.advance_to(self.now + wait);
        }
        let policy = self.policy();
        let tenure = self.new_tenure(&name, &row, not_before);
        let interval = policy.heartbeat_interval_secs * 1000;
        let proc_ = NodeProc {
            name,
            status: Status::Live,
            machine_id: row.machine_id,
            version: row.version,
            generator: Generator::new(self.topology.layout, row.machine_id as u16, not_before, self.max_backward_ms),
            deadline: sent + lease_ms,
            next_heartbeat: sent + interval,
            interval,
            lease_at_start: policy.lease_secs() * 1000,
            tenure,
            failing: false,
            reported: false,
            wall_bound: NEG_INF,
        };
        let procs = &mut self.hosts[host].procs;
        let index = match procs.iter().position(Option::is_none) {
            Some(i) => {
                procs[i] = Some(proc_);
                i
            }
            None => {
                procs.push(Some(proc_));
                procs.len() - 1
            }
        };
        if !self.off(Mutation::FirstReport) {
            // F1's fix (0.7.0, `first_report`): a heartbeat with the node's clock before any ID.
            let fate = if self.hosts[host].partitioned_until > self.now { Fate::LostBefore } else { Fate::Delivered };
            self.node_heartbeat(host, index, fate, Report::Honest);
        }
    }

    /// One `idgen_claim` in a transaction of its own: the grant and the lease it gives.
    fn node_claim(&mut self, name: &str, node: &Node) -> Option<(Granted, Ms)> {
        if !self.reg.installed() {
            say!(self, "{name} idgen_claim refused: idgen is not installed");
            return None;
        }
        if self.policy().validate().is_err() {
            say!(self, "{name} idgen_claim refused: 22023 settings inconsistent");
            return None;
        }
        let before = self.reg.committed.clone();
        let txn = self.reg.begin();
        match self.claim(txn, node) {
            Ok(granted) => {
                self.reg.commit(txn);
                let lease_ms = granted.row.lease_until - self.server_clock();
                Some((granted, lease_ms))
            }
            Err(r) => {
                self.reg.abort(txn);
                say!(self, "{name} idgen_claim refused: {} {}", r.code, r.why);
                self.unchanged_after_refusal(&before, "idgen_claim", &r);
                None
            }
        }
    }

    fn take_proc(&mut self, host: usize, process: usize) -> Option<NodeProc> {
        self.hosts.get_mut(host)?.procs.get_mut(process)?.take()
    }

    fn put_proc(&mut self, host: usize, process: usize, p: NodeProc) {
        self.hosts[host].procs[process] = Some(p);
    }

    fn node_mint(&mut self, host: usize, process: usize, n: u8) {
        let Some(mut p) = self.take_proc(host, process) else { return };
        let mut got = Vec::new();
        let mut stop = None;
        for _ in 0..n {
            match self.node_next_id(host, &mut p) {
                Ok(id) => {
                    got.push(id);
                    self.stamped(p.tenure, id);
                }
                Err(why) => {
                    stop = Some(why);
                    break;
                }
            }
        }
        if !got.is_empty() {
            say!(self, "{} next_id x{} -> {}", p.name, got.len(), describe_ids(&self.topology.layout, &got));
        }
        if let Some(why) = stop {
            say!(self, "{} next_id refused: {why}", p.name);
        }
        self.put_proc(host, process, p);
    }

    /// `IdgenNode::next_id`.
    fn node_next_id(&mut self, host: usize, p: &mut NodeProc) -> Result<i64, String> {
        match p.status {
            Status::Live | Status::Expired => {}
            Status::Lost => return Err("ownership lost".into()),
            Status::Stopped => return Err("stopped".into()),
        }
        if self.now >= p.deadline {
            return Err("lease expired".into());
        }
        if !p.reported && !self.off(Mutation::FirstReport) {
            return Err("its first report is not answered yet (it does not start before)".into());
        }
        let give_up = p.deadline.min(self.now + self.max_backward_ms + WAIT_SLACK_MS);
        // Never at or past the wall bound (what the registry holds for it), unless switched off.
        let wall_bound = if self.off(Mutation::WallBound) { i64::MAX } else { p.wall_bound };
        let wall_deadline = (self.host_clock(host) + (p.deadline - self.now)).min(wall_bound);
        let mut clock = WorldClock { world: self, host: Some(host), give_up: Some(give_up) };
        match p.generator.next_id(&mut clock, wall_deadline) {
            Ok(id) => Ok(id),
            Err(Stop::LeaseCheckDue) if self.host_clock(host) >= wall_bound => {
                // Error::ClockAhead: the heartbeat thread reports now.
                p.next_heartbeat = p.next_heartbeat.min(self.now);
                Err(format!("ClockAhead: its clock is at or past its wall bound {}: it reports now", rel(wall_bound)))
            }
            Err(stop) => Err(format!("{stop:?}")),
        }
    }

    /// The node's report: its last stamp or its clock, whichever is later.
    fn report_of(&self, host: usize, p: &NodeProc) -> Ms {
        p.generator.last_unix_ms().max(self.host_clock(host))
    }

    fn node_heartbeat(&mut self, host: usize, process: usize, fate: Fate, report: Report) {
        let Some(mut p) = self.take_proc(host, process) else { return };
        if matches!(p.status, Status::Live | Status::Expired) {
            self.heartbeat_of(host, &mut p, fate, report);
        }
        self.put_proc(host, process, p);
    }

    fn heartbeat_of(&mut self, host: usize, p: &mut NodeProc, fate: Fate, report: Report) {
        let sent = self.now;
        let honest = self.report_of(host, p);
        let node = Self::node_identity(host);
        let version = match report {
            Report::WrongVersion(d) => p.version + d,
            _ => p.version,
        };
        let held = Holding { node, machine_id: p.machine_id, version };
        let reported = match report {
            Report::Honest | Report::WrongVersion(_) => honest,
            Report::Ahead(ms) => honest + ms,
            Report::Infinite => i64::MAX,
            Report::BeyondLayout => self.topology.layout.last_unix_ms() + 1,
        };
        let failed = |w: &mut World, p: &mut NodeProc, why: &str| {
            if !std::mem::replace(&mut p.failing, true) {
                say!(
                    w,
                    "{} heartbeat v{} report {}: {why} (retried until one gets through)",
                    p.name,
                    held.version,
                    rel(reported)
                );
            }
            if w.now >= p.deadline && p.status == Status::Live {
                p.status = Status::Expired;
                say!(w, "{} passes its deadline: it stops issuing until a heartbeat succeeds", p.name);
            }
            p.next_heartbeat = w.now + (p.interval / 4).clamp(50, 1_000);
        };
        if self.hosts[host].partitioned_until > self.now || fate == Fate::LostBefore {
            return failed(self, p, "no answer (never reached the server)");
        }
        if let Fate::Delayed(ms) = fate {
            self.delayed.push((self.now + ms, Delayed::Heartbeat { held: held.clone(), report: Some(reported) }));
            return failed(self, p, &format!("no answer in time (it reaches the server {ms}ms later)"));
        }
        // Refused before anything is written (src/registry/api.rs: reported_watermark).
        if !self.reg.installed() {
            // No idgen_heartbeat to call (42883): not a refusal of the lease; the client retries.
            return failed(self, p, "idgen is not installed");
        }
        let refused = if reported == i64::MAX {
            Some(refusal("22023", "an infinite watermark"))
        } else if reported > self.topology.layout.last_unix_ms() {
            Some(refusal("22023", "a watermark after the last time an ID can carry"))
        } else if self.off(Mutation::RefusedWatermark) && reported > self.server_clock() + DAY_MS {
            Some(refusal("22023", "a watermark more than a day ahead (refused, nothing written)"))
        } else if self.policy().validate().is_err() {
            Some(refusal("22023", "idgen settings are inconsistent"))
        } else {
            None
        };
        if let Some(r) = refused {
            if self.off(Mutation::RefusedWatermark) && r.code == "22023" {
                // The old client took the refusal for a passing error and went on stamping.
                return failed(self, p, &format!("refused {} {}: retried", r.code, r.why));
            }
            say!(
                self,
                "{} heartbeat v{} report {}: refused {} {}: stops for good",
                p.name,
                held.version,
                rel(reported),
                r.code,
                r.why
            );
            p.status = Status::Lost;
            return;
        }
        let policy = self.policy();
        let before = self.reg.committed.clone();
        let txn = self.reg.begin();
        let answer = self.reg.heartbeat(
            txn,
            &held,
            policy.lease_secs() * 1000,
            Some(reported),
            policy.takeover_idle_1h_secs * 1000,
        );
        match answer {
            Ok(Some((lease_until, _))) => {
                self.reg.commit(txn);
                if fate == Fate::LostAfterCommit {
                    return failed(self, p, "committed, but the answer is lost");
                }
                let granted = lease_until - self.server_clock();
                let lease = if self.off(Mutation::GrantedLease) { p.lease_at_start } else { granted };
                p.deadline = sent + lease;
                p.wall_bound = reported.saturating_add(lease);
                p.status = Status::Live;
                p.failing = false;
                p.reported = true;
                p.next_heartbeat = sent + p.interval;
                say!(
                    self,
                    "{} heartbeat v{} report {} -> lease {}s",
                    p.name,
                    held.version,
                    rel(reported),
                    lease / 1000
                );
            }
            Ok(None) => {
                self.reg.commit(txn);
                let r = refusal("55000", "the machine id is no longer held at this version");
                self.unchanged_after_refusal(&before, "idgen_heartbeat", &r);
                if fate == Fate::LostAfterCommit {
                    return failed(self, p, "refused, and the answer is lost");
                }
                say!(self, "{} heartbeat v{} refused 55000 (ownership moved): stops for good", p.name, held.version);
                p.status = Status::Lost;
            }
            Err(_) => {
                self.reg.abort(txn);
                failed(self, p, "waits for a row lock past its call timeout")
            }
        }
    }

    fn arrive_late(&mut self, call: Delayed) {
        if let Delayed::Commit { txn } = call {
            if self.reg.is_open(txn) {
                say!(self, "the killed node's claim commits (nobody will use it)");
                self.reg.commit(txn);
            }
            return;
        }
        if !self.reg.installed() {
            return;
        }
        let policy = self.policy();
        let txn = self.reg.begin();
        let (what, done) = match &call {
            Delayed::Heartbeat { held, report, .. } => {
                let r = self.reg.heartbeat(
                    txn,
                    held,
                    policy.lease_secs() * 1000,
                    *report,
                    policy.takeover_idle_1h_secs * 1000,
                );
                ("heartbeat", matches!(r, Ok(Some(_))))
            }
            Delayed::Release { held, report, .. } => {
                let r = self.reg.release(
                    txn,
                    held,
                    policy.lease_safety_margin_secs * 1000,
                    *report,
                    policy.lease_secs() * 1000,
                    policy.takeover_idle_1h_secs * 1000,
                );
                ("release", matches!(r, Ok(Some(_))))
            }
            Delayed::Commit { .. } => unreachable!("handled above"),
        };
        self.reg.commit(txn);
        let (Delayed::Heartbeat { held, .. } | Delayed::Release { held, .. }) = &call else { return };
        say!(
            self,
            "a delayed {what} of {} v{} reaches the server: {}",
            held.node.host,
            held.version,
            if done { "applied" } else { "matches nothing" }
        );
    }

    fn node_shutdown(&mut self, host: usize, process: usize, fate: Fate, race_ms: Ms) {
        let Some(mut p) = self.take_proc(host, process) else { return };
        let lost = p.status == Status::Lost;
        let report = if self.off(Mutation::ShutdownUnderLock) {
            // The watermark is read, then a minting thread that passed its status check stamps.
            let report = self.report_of(host, &p);
            self.advance_to(self.now + race_ms);
            if let Ok(id) = self.node_next_id(host, &mut p) {
                say!(
                    self,
                    "{} a thread racing the shutdown stamps {}",
                    p.name,
                    describe_ids(&self.topology.layout, &[id])
                );
                self.stamped(p.tenure, id);
            }
            p.status = Status::Stopped;
            report
        } else {
            // Stopped under the generator's lock first: no ID after the watermark is read.
            p.status = Status::Stopped;
            self.report_of(host, &p)
        };
        if lost {
            say!(self, "{} shuts down (its lease was lost: nothing to release)", p.name);
            return;
        }
        let held = Holding { node: Self::node_identity(host), machine_id: p.machine_id, version: p.version };
        match fate {
            _ if self.hosts[host].partitioned_until > self.now || fate == Fate::LostBefore || !self.reg.installed() => {
                say!(self, "{} shuts down; its release never reaches the server", p.name);
            }
            Fate::Delayed(ms) => {
                say!(self, "{} shuts down; its release (watermark {}) arrives {ms}ms later", p.name, rel(report));
                self.delayed.push((self.now + ms, Delayed::Release { held, report: Some(report) }));
            }
            _ => {
                let txn = self.reg.begin();
                let policy = self.policy();
                let r = self.reg.release(
                    txn,
                    &held,
                    policy.lease_safety_margin_secs * 1000,
                    Some(report),
                    policy.lease_secs() * 1000,
                    policy.takeover_idle_1h_secs * 1000,
                );
                self.reg.commit(txn);
                let outcome = match r {
                    Ok(Some((version, issued_until))) => {
                        format!("released (v{version}, watermark {})", rel(issued_until))
                    }
                    Ok(None) => "false: not held at this version".into(),
                    Err(_) => "waits for a row lock past its call timeout".into(),
                };
                say!(self, "{} shuts down: idgen_release(v{}, {}) -> {outcome}", p.name, p.version, rel(report));
            }
        }
    }

    // ---- hand work on the registry ----

    fn drop_extension(&mut self, slot: usize) {
        if !self.reg.installed() || slot >= self.backends.len() {
            return;
        }
        let mut session = self.connect(slot);
        if session.txn.is_some() {
            self.backends[slot] = Some(session);
            return;
        }
        let before = self.reg.committed.clone();
        let txn = self.reg.begin();
        if !self.reg.lock_registry_for_drop(txn) {
            self.reg.abort(txn);
            say!(self, "{} DROP EXTENSION idgen refused 55P03: a transaction uses the registry", session.name);
            self.backends[slot] = Some(session);
            return;
        }
        // This session's own leases count as what they stamped, and it forgets them; so do the
        // leases parked in the slots.
        self.close_leases(txn, &session);
        if !self.off(Mutation::DropLeavesParked) {
            self.close_parked(txn, |_| true);
        }
        if !self.off(Mutation::DropForgetsOwnLeases) {
            session.leases.lose_all();
        }
        let policy = self.policy();
        let stamping = self.reg.still_stamping(txn, policy.lease_secs() * 1000, policy.takeover_idle_1h_secs * 1000);
        if !stamping.is_empty() && !self.off(Mutation::DropGuard) {
            self.reg.abort(txn);
            let r = refusal("55006", format!("{} machine id(s) may still be stamped", stamping.len()));
            say!(
                self,
                "{} DROP EXTENSION idgen refused 55006: machine id {} may be stamped until {}",
                session.name,
                stamping[0].0 .1,
                rel(stamping[0].1)
            );
            self.unchanged_after_refusal(&before, "DROP EXTENSION", &r);
            self.backends[slot] = Some(session);
            return;
        }
        self.reg.abort(txn);
        self.reg.committed = None;
        // The DROP invalidates the registry's table: every session's generation moves when it
        // processes that; the dropping session does at its own commit.
        self.registry_generation += 1;
        self.accept_invalidations(&mut session);
        self.dropped_floor = self.dropped_floor.max(self.server_clock());
        let latest = self.tenures.iter().filter_map(|t| t.last_stamp).max().unwrap_or(NEG_INF);
        self.dropped_stamps = self.dropped_stamps.max(latest);
        if self.setup.synchronous {
            self.reg.replicate();
        }
        say!(self, "{} DROP EXTENSION idgen: the registry is gone", session.name);
        self.backends[slot] = Some(session);
    }

    /// A superuser's command that takes the registry's tables whole: it waits for every open
    /// transaction that uses them (here: it is not run while one is open).
    fn hand_txn_or_wait(&mut self, what: &str) -> Option<TxnId> {
        if !self.reg.installed() {
            return None;
        }
        if self.reg.other_open_user(None) {
            say!(self, "{what} waits for an open transaction; the DBA gives up");
            return None;
        }
        Some(self.reg.begin())
    }

    fn truncate_in(&mut self, txn: TxnId) {
        let policy = self.policy();
        self.reg.tombstone_all(txn, policy.lease_secs() * 1000, policy.takeover_idle_1h_secs * 1000);
        self.reg.new_epoch(txn);
        let keys: Vec<Key> = self.reg.view(txn).rows.keys().cloned().collect();
        for key in keys {
            let _ = self.reg.delete_row(txn, &key);
        }
    }

    fn truncate(&mut self) {
        let Some(txn) = self.hand_txn_or_wait("TRUNCATE system_nodes") else { return };
        self.truncate_in(txn);
        self.reg.commit(txn);
        say!(self, "TRUNCATE system_nodes: every row leaves its tombstone, a new epoch begins");
    }

    fn delete(&mut self, machine_id: i32) {
        if !self.reg.installed() {
            return;
        }
        let key = (SERVICE.to_owned(), machine_id);
        let txn = self.reg.begin();
        if !self.reg.view(txn).rows.contains_key(&key) {
            self.reg.abort(txn);
            return;
        }
        let policy = self.policy();
        let tombstoned =
            self.reg.tombstone_row(txn, &key, policy.lease_secs() * 1000, policy.takeover_idle_1h_secs * 1000);
        if tombstoned.is_err() || self.reg.delete_row(txn, &key).is_err() {
            self.reg.abort(txn);
            say!(self, "DELETE of machine id {machine_id} waits for a row lock; the DBA gives up");
            return;
        }
        self.reg.commit(txn);
        say!(self, "DELETE FROM system_nodes WHERE machine_id = {machine_id} (its tombstone stays)");
    }

    fn restore(&mut self, triggers: bool) {
        let Some(copy) = self.copy.clone() else { return };
        let Some(txn) = self.hand_txn_or_wait("a restore") else { return };
        self.truncate_in(txn);
        let mut restored = 0;
        for row in copy.rows.into_values() {
            restored += usize::from(self.reg.insert_row(txn, row, triggers));
        }
        self.reg.commit(txn);
        say!(
            self,
            "the older copy is restored: TRUNCATE, then {restored} rows inserted{}",
            if triggers { " (each takes its tombstone)" } else { " with triggers disabled" }
        );
    }

    /// docs/operations.md's freeing of an id by hand: `idgen_release` of the row as it stands (its
    /// holder, version), with no watermark, while the holder may still be minting.
    fn hand_release(&mut self, machine_id: i32) {
        let Some(txn) = self.hand_txn_or_wait("idgen_release by hand") else { return };
        let key = (SERVICE.to_owned(), machine_id);
        let Some(row) = self.reg.view(txn).rows.get(&key).cloned().filter(|r| r.released_at.is_none()) else {
            self.reg.abort(txn);
            return;
        };
        self.reg.abort(txn);
        let node = Node {
            service: row.service.clone(),
            host: row.host.clone(),
            port: row.port,
            backend_slot: row.backend_slot,
        };
        let held = Holding { node, machine_id, version: row.version };
        let policy = self.policy();
        let txn = self.reg.begin();
        let (margin, lease, takeback) =
            (policy.lease_safety_margin_secs * 1000, policy.lease_secs() * 1000, policy.takeover_idle_1h_secs * 1000);
        match self.reg.release(txn, &held, margin, None, lease, takeback) {
            Ok(Some((version, watermark))) => {
                self.reg.commit(txn);
                say!(self, "a DBA frees machine id {machine_id} by hand (idgen_release, no watermark): v{version}, watermark {}", rel(watermark));
            }
            _ => self.reg.abort(txn),
        }
    }

    fn hand_lock(&mut self, machine_id: i32) {
        if self.hand_txn.is_some() || !self.reg.installed() {
            return;
        }
        let txn = self.reg.begin();
        let key = (SERVICE.to_owned(), machine_id);
        if self.reg.view(txn).rows.contains_key(&key) && self.reg.lock_row(txn, &key) {
            say!(self, "a superuser's open transaction locks machine id {machine_id}'s row");
            self.hand_txn = Some(txn);
        } else {
            self.reg.abort(txn);
        }
    }
}

/// What a backend's registry write answered.
enum LeaseAnswer {
    Renewed { verified: Ms, lease_until: Ms, issued_until: Ms },
    Claimed(Granted),
}

/// A holder's clock on the world: the server's (backends) or a host's (nodes). Waiting moves true
/// time on (the holder's thread sleeps); a node gives up waiting at `give_up` (its monotonic clock).
struct WorldClock<'a> {
    world: &'a mut World,
    host: Option<usize>,
    give_up: Option<Ms>,
}

impl Clock for WorldClock<'_> {
    fn now_unix_ms(&mut self) -> i64 {
        match self.host {
            None => self.world.server_clock(),
            Some(h) => self.world.host_clock(h),
        }
    }

    fn wait_until(&mut self, unix_ms: i64) {
        let left = (unix_ms - self.now_unix_ms()).max(1);
        let until = match self.give_up {
            Some(give_up) => (self.world.now + left).min(give_up).max(self.world.now + 1),
            None => self.world.now + left,
        };
        assert!(until - self.world.now <= 10 * 60_000, "a holder waits more than ten minutes (a model bug)");
        // The holder sleeps; time passes for everyone (heartbeats of other nodes fall due).
        self.world.now = until;
        self.world.reg.clock = self.world.server_clock();
    }

    fn may_wait(&mut self) -> bool {
        self.give_up.is_none_or(|give_up| self.world.now < give_up)
    }
}

/// A time as the story shows it: seconds since the simulation's start.
pub fn rel(ms: Ms) -> String {
    if ms == NEG_INF {
        "-infinity".into()
    } else if ms == i64::MAX {
        "infinity".into()
    } else {
        format!("{:.3}s", (ms - T0) as f64 / 1000.0)
    }
}

fn describe_ids(layout: &Layout, ids: &[i64]) -> String {
    let parts: Vec<String> = ids
        .iter()
        .map(|id| {
            let p = layout.decompose(*id).expect("decodes");
            format!("m{}@{}#{}", p.machine_id, rel(layout.unix_ms_of(p.ticks)), p.sequence)
        })
        .collect();
    parts.join(" ")
}
