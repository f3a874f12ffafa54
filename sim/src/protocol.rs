//! The registry's calls as the edge runs them on the model: the claim (the core's own,
//! `idgen_core::claim::claim`, over the model's statements), and [`Mirror`], which runs single
//! calls (a claim, a heartbeat, a release, a hand change) in transactions of their own, so that a
//! test can run the same steps against the model and a real cluster and compare their answers
//! (tests/cluster/tests/model_vs_cluster.rs).

use crate::registry::{ClaimedRow, Holding, Key, Ms, Node, Registry, Row, Terms, TxnId, NEG_INF};
use idgen_core::claim::{
    self as core, with_guards_off, CapacityTurn, ClaimSettings, ClaimStore, ClaimTerms, OwnRow, OwnRowAhead, Service,
    TakeOverFrom,
};
use idgen_core::facts::RowFacts;
use idgen_core::fleet::{self, CapacityLevel};
use idgen_core::format::iso_utc;
use idgen_core::history::{Event, EventKind};
use idgen_core::input::NodeIdentity;
use idgen_core::layout::{Layout, Pool, ServiceLayout};
use idgen_core::watermark::HolderKind;
use idgen_core::{guard, ClaimPolicy};

/// Where each service's IDs come from: its layout and the machine ids this server hands out. The
/// extension point for per-service layouts and machine-id pools: today one layout, and the
/// server's `idgen.machine_id_range` for every service; a pool would narrow the range per
/// service, a layout change `layout` (and the generator's, in `world`).
#[derive(Clone, Debug)]
pub struct Topology {
    pub layout: Layout,
    pub first_machine_id: i32,
    pub last_machine_id: i32,
}

impl Topology {
    /// Every machine id of the default layout (`idgen.machine_id_range` unset).
    pub fn default_range() -> Topology {
        Topology {
            layout: Layout::DEFAULT,
            first_machine_id: 0,
            last_machine_id: i32::from(Layout::DEFAULT.max_machine_id()),
        }
    }
}

/// The settings a claim runs by.
#[derive(Clone, Debug)]
pub struct Settings {
    pub policy: ClaimPolicy,
    pub topology: Topology,
    pub max_backward_ms: Ms,
    pub require_synchronous_standby: bool,
}

impl Settings {
    /// The core's `ClaimTerms::of` over the server's whole range, in ms.
    pub fn terms(&self, kind: HolderKind, window: Ms) -> Terms {
        let settings = self.of_claim();
        let range = Pool { first: settings.machine_id_first, last: settings.machine_id_last };
        model_terms(&ClaimTerms::of(kind, &settings, window, range))
    }
}

/// A refusal: the SQLSTATE and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub why: String,
}

pub fn refusal(code: &'static str, why: impl Into<String>) -> Refusal {
    Refusal { code, why: why.into() }
}

/// A claim granted: the row, how, and its not_before.
#[derive(Clone, Debug)]
pub struct Granted {
    pub row: ClaimedRow,
    pub outcome: &'static str,
    pub not_before: Ms,
    pub epoch: i64,
}

impl Settings {
    /// The settings as the core's claim takes them (the capacity levels at their defaults: the model
    /// keeps no history, so nothing is announced).
    fn of_claim(&self) -> ClaimSettings {
        let range = |m: i32| u16::try_from(m).expect("a machine id of the layout");
        ClaimSettings {
            policy: self.policy,
            machine_id_first: range(self.topology.first_machine_id),
            machine_id_last: range(self.topology.last_machine_id),
            capacity_warning: fleet::CAPACITY_WARNING_DEFAULT,
            capacity_critical: fleet::CAPACITY_CRITICAL_DEFAULT,
            require_synchronous_standby: self.require_synchronous_standby,
            max_clock_backward_ms: self.max_backward_ms,
        }
    }
}

/// Claims a machine id for `node` in `txn`, its service of the topology's layout with every
/// machine id of it as its pool: [`claim_in`].
pub fn claim(
    reg: &mut Registry,
    txn: TxnId,
    node: &Node,
    settings: &Settings,
) -> (Result<Granted, Refusal>, Vec<(i32, String)>) {
    let layout = settings.topology.layout;
    claim_in(reg, txn, node, settings, ServiceLayout { layout, pool: Pool::all(&layout) })
}

/// Claims a machine id for `node` in `txn`, its service of `service`'s layout and pool: the core's
/// claim (`idgen_core::claim::claim`, the one the extension runs) over the model, with the claim's
/// guards the registry's mutations switch off. Returns the grant or the refusal, and the machine
/// ids it set aside with why.
#[allow(clippy::result_large_err)]
pub fn claim_in(
    reg: &mut Registry,
    txn: TxnId,
    node: &Node,
    settings: &Settings,
    service: ServiceLayout,
) -> (Result<Granted, Refusal>, Vec<(i32, String)>) {
    let identity = NodeIdentity {
        service: node.service.clone(),
        host: node.host.clone(),
        port: node.port,
        backend_slot: node.backend_slot,
    };
    let pool_first = i32::from(service.pool.first);
    let service = Service { layout: service, unregistered_from: None };
    let claim_settings = settings.of_claim();
    let off = reg.mutations.claim_guards_off();
    let mut store = ModelStore { reg, txn, pool_first, recorded: Vec::new() };
    let result =
        with_guards_off(&off, || core::claim(&mut store, "idgen_claim", &identity, &claim_settings, service, None));
    let set_aside = store
        .recorded
        .iter()
        .filter(|e| e.event == EventKind::SetAside.label())
        .map(|e| (e.machine_id.unwrap_or(-1), e.detail.clone().unwrap_or_default()))
        .collect();
    let result = match result {
        Ok(granted) => {
            let c = granted.claim;
            let row = ClaimedRow {
                machine_id: c.machine_id,
                version: c.version,
                lease_until: c.lease_until,
                claimed_at: c.claimed_at,
                bound: None,
                issued_until: c.issued_until,
            };
            Ok(Granted { row, outcome: c.outcome.label(), not_before: c.not_before_unix_ms, epoch: c.registry_epoch })
        }
        Err(refused) => Err(refusal(refused.error.sqlstate.code(), refused.error.message)),
    };
    (result, set_aside)
}

/// Claim terms as the model's statements take them: times in ms.
fn model_terms(t: &ClaimTerms) -> Terms {
    Terms {
        lease: t.lease_secs * 1000,
        tolerance: t.tolerance_ms,
        window: t.window_ms,
        takeback_age: t.takeover_idle_secs * 1000,
        first_machine_id: t.first_machine_id,
        last_machine_id: t.last_machine_id,
    }
}

/// The model as the core's claim sees it: each method runs the model's statement of the same name
/// in the claimant's transaction.
struct ModelStore<'a> {
    reg: &'a mut Registry,
    txn: TxnId,
    /// The first machine id of the service's pool: where its never-registered hint starts.
    pool_first: i32,
    /// The history events the claim recorded.
    recorded: Vec<Event>,
}

impl ModelStore<'_> {
    fn node(node: &NodeIdentity) -> Node {
        Node {
            service: node.service.clone(),
            host: node.host.clone(),
            port: node.port,
            backend_slot: node.backend_slot,
        }
    }

    fn terms(t: &ClaimTerms) -> Terms {
        model_terms(t)
    }

    fn row(row: ClaimedRow) -> core::ClaimedRow<Ms> {
        core::ClaimedRow {
            machine_id: row.machine_id,
            version: row.version,
            lease_until: row.lease_until,
            claimed_at: row.claimed_at,
            bound: row.bound,
            issued_until: row.issued_until,
        }
    }

    /// A row as the messages read it (CURRENT_ROW's columns).
    fn facts(&self, row: &Row) -> RowFacts {
        let now = self.reg.now_of(self.txn);
        RowFacts {
            machine_id: row.machine_id,
            host: row.host.clone(),
            port: row.port,
            version: row.version,
            last_seen: iso_utc(row.last_seen),
            idle_secs: (now - row.last_seen).max(0).div_euclid(1000),
            released_at: row.released_at.map(iso_utc),
            backend_slot: row.backend_slot,
        }
    }
}

impl ClaimStore for ModelStore<'_> {
    type Time = Ms;

    fn unix_ms(time: Ms) -> i64 {
        time
    }

    fn is_finite(time: Ms) -> bool {
        time != NEG_INF
    }

    fn now_unix_ms(&mut self) -> i64 {
        self.reg.clock
    }

    /// The model's commits reach the standby when it is synchronous.
    fn make_commit_durable(&mut self) {}

    fn synchronous_standby_streaming(&mut self) -> bool {
        self.reg.synchronous_standby_streaming()
    }

    fn read_epoch(&mut self) -> i64 {
        self.reg.read_registry(self.txn)
    }

    fn read_version_base(&mut self) -> i64 {
        self.reg.read_version_base(self.txn)
    }

    fn take_identity_guard(&mut self, node: &NodeIdentity) -> bool {
        self.reg.take_guard(self.txn, &node.service, guard::identity_guard(node))
    }

    fn reuse_own_held_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<core::ClaimedRow<Ms>> {
        self.reg.reuse_own_held_row(self.txn, &Self::node(node), &Self::terms(terms)).map(Self::row)
    }

    fn reuse_own_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> OwnRow<Ms> {
        let node = Self::node(node);
        if let Some((row, was_released)) = self.reg.reuse_own_row(self.txn, &node, &Self::terms(terms)) {
            return OwnRow::Claimed { row: Self::row(row), was_released };
        }
        match self.reg.own_held_row(self.txn, &node) {
            Some(machine_id) => OwnRow::Busy(machine_id),
            None => OwnRow::Absent,
        }
    }

    fn release_own_row_outside_range(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<(i32, Ms)> {
        let set = self.reg.release_own_row_outside_range(self.txn, &Self::node(node), &Self::terms(terms))?;
        Some((set.machine_id, set.issued_until))
    }

    fn release_own_row_ahead(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<OwnRowAhead<Ms>> {
        let set = self.reg.release_own_row_ahead(self.txn, &Self::node(node), &Self::terms(terms))?;
        Some(OwnRowAhead {
            machine_id: set.machine_id,
            bound: set.bound,
            reported: set.reported,
            last_seen: set.last_seen,
        })
    }

    fn unregistered_from(&mut self, service: &str) -> i32 {
        self.reg.unregistered_from(self.txn, service).unwrap_or(self.pool_first)
    }

    fn advance_unregistered_from(&mut self, service: &str, from: i32) {
        self.reg.advance_unregistered_from(self.txn, service, self.pool_first, from);
    }

    fn unregistered_machine_ids(
        &mut self,
        service: &str,
        first: i32,
        last: i32,
        terms: &ClaimTerms,
    ) -> Vec<(i32, bool)> {
        self.reg.unregistered_machine_ids(self.txn, service, first, last, terms.tolerance_ms)
    }

    fn insert_unregistered(
        &mut self,
        node: &NodeIdentity,
        machine_id: i32,
        terms: &ClaimTerms,
        version_base: i64,
    ) -> Option<core::ClaimedRow<Ms>> {
        let bucket = guard::new_id_guard(machine_id);
        let t = Self::terms(terms);
        self.reg.insert_unregistered(self.txn, &Self::node(node), &t, machine_id, bucket, version_base).map(Self::row)
    }

    fn take_over(
        &mut self,
        node: &NodeIdentity,
        from: TakeOverFrom,
        terms: &ClaimTerms,
    ) -> Option<(core::ClaimedRow<Ms>, RowFacts)> {
        let (min_idle, cooldown) = match from {
            TakeOverFrom::Released { cooldown_secs } => (None, cooldown_secs * 1000),
            TakeOverFrom::Idle { min_idle_secs, cooldown_secs } => (Some(min_idle_secs * 1000), cooldown_secs * 1000),
        };
        let (row, previous) =
            self.reg.take_over(self.txn, &Self::node(node), &Self::terms(terms), min_idle, cooldown)?;
        let previous = self.facts(&previous);
        Some((Self::row(row), previous))
    }

    fn soonest_tombstone_ahead(&mut self, service: &str, terms: &ClaimTerms) -> Option<(i32, Ms)> {
        self.reg.soonest_tombstone_ahead(self.txn, service, &Self::terms(terms))
    }

    fn current_row(&mut self, service: &str, machine_id: i32) -> Option<RowFacts> {
        let row = self.reg.current_row(self.txn, service, machine_id)?;
        Some(self.facts(&row))
    }

    fn row_bound(&mut self, service: &str, machine_id: i32, terms: &ClaimTerms) -> Option<(i64, i64)> {
        self.reg.row_bound(self.txn, service, machine_id, &Self::terms(terms))
    }

    fn least_recently_seen(&mut self, service: &str, terms: &ClaimTerms) -> (i64, Option<RowFacts>) {
        let (held, least) = self.reg.least_recently_seen(self.txn, service, &Self::terms(terms));
        (held, least.map(|row| self.facts(&row)))
    }

    fn highest_registered(&mut self, service: &str, terms: &ClaimTerms) -> Option<i32> {
        self.reg.highest_registered(self.txn, service, &Self::terms(terms))
    }

    fn count_in_use(&mut self, service: &str, cooldown_secs: i64, terms: &ClaimTerms) -> i64 {
        self.reg.count_in_use(self.txn, service, cooldown_secs * 1000, &Self::terms(terms))
    }

    /// The model keeps no history: no capacity level is announced, as before 0.10.0's objects.
    fn records_capacity_announcements(&mut self) -> bool {
        false
    }

    fn capacity_announced(&mut self, _: &str) -> Option<CapacityLevel> {
        None
    }

    fn take_capacity_turn(&mut self, _: &str) -> CapacityTurn {
        CapacityTurn::Missing
    }

    fn keeps_fleet_reports(&mut self) -> bool {
        true
    }

    fn event(&mut self, kind: EventKind, node: &NodeIdentity) -> Event {
        Event {
            host: Some(node.host.clone()),
            port: Some(node.port),
            backend_slot: node.backend_slot,
            ..Event::new(kind, &node.service)
        }
    }

    fn record(&mut self, event: &Event) {
        self.recorded.push(event.clone());
    }
}

/// The registry model driven one call at a time, each in a transaction of its own, at the clock
/// the caller sets (`set_clock`): what a test compares with a real cluster.
pub struct Mirror {
    pub reg: Registry,
    pub settings: Settings,
}

/// A row as both sides can show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowState {
    pub machine_id: i32,
    pub host: String,
    pub port: i32,
    pub backend_slot: Option<i32>,
    pub version: i64,
    pub released: bool,
}

impl Mirror {
    /// A fresh registry with the default settings, at `clock`, whose rows never registered start
    /// at `version_base + 1` (the real registry's `idgen_registry.version_base`, read from it).
    pub fn new(clock: Ms, version_base: i64) -> Mirror {
        let mut reg = Registry::new(1, clock, true, crate::mutation::Mutations::NONE);
        if let Some(tables) = reg.committed.as_mut() {
            tables.version_base = version_base;
        }
        reg.replicate();
        Mirror {
            reg,
            settings: Settings {
                policy: ClaimPolicy::DEFAULT,
                topology: Topology::default_range(),
                max_backward_ms: idgen_core::generator::MAX_CLOCK_BACKWARD_DEFAULT_MS,
                require_synchronous_standby: false,
            },
        }
    }

    /// The server's clock (`clock_timestamp()`, and `now()` of the next call's transaction).
    pub fn set_clock(&mut self, clock: Ms) {
        self.reg.clock = clock;
    }

    /// `idgen_claim`, or a backend's claim (a node with a slot).
    pub fn claim(&mut self, node: &Node) -> Result<Granted, Refusal> {
        let txn = self.reg.begin();
        let (result, _) = claim(&mut self.reg, txn, node, &self.settings);
        match &result {
            Ok(_) => self.reg.commit(txn),
            Err(_) => self.reg.abort(txn),
        }
        result
    }

    /// `idgen_heartbeat` with a report: the lease granted (`lease_until`), or the refusal.
    pub fn heartbeat(&mut self, held: &Holding, reported: Option<Ms>) -> Result<Ms, Refusal> {
        check_report(reported, &self.settings.topology.layout)?;
        let p = self.settings.policy;
        let txn = self.reg.begin();
        let answer = self.reg.heartbeat(txn, held, p.lease_secs() * 1000, reported, p.takeover_idle_1h_secs * 1000);
        self.reg.commit(txn);
        match answer {
            Ok(Some((lease_until, _))) => Ok(lease_until),
            Ok(None) => Err(refusal("55000", "not held at this version")),
            Err(_) => Err(refusal("55P03", "its row is locked")),
        }
    }

    /// `idgen_release` with a report: true when released.
    pub fn release(&mut self, held: &Holding, reported: Option<Ms>) -> Result<bool, Refusal> {
        check_report(reported, &self.settings.topology.layout)?;
        let txn = self.reg.begin();
        let policy = &self.settings.policy;
        let (margin, lease, takeback) =
            (policy.lease_safety_margin_secs * 1000, policy.lease_secs() * 1000, policy.takeover_idle_1h_secs * 1000);
        let answer = self.reg.release(txn, held, margin, reported, lease, takeback);
        self.reg.commit(txn);
        match answer {
            Ok(found) => Ok(found.is_some()),
            Err(_) => Err(refusal("55P03", "its row is locked")),
        }
    }

    /// A hand `UPDATE` that makes a row look silent for `ms` more: its times moved back.
    pub fn age(&mut self, machine_id: i32, service: &str, ms: Ms) {
        let key: Key = (service.to_owned(), machine_id);
        if let Some(tables) = self.reg.committed.as_mut() {
            if let Some(row) = tables.rows.get_mut(&key) {
                row.last_seen -= ms;
                row.lease_until = row.lease_until.map(|t| t - ms);
                row.takeover_at = row.takeover_at.map(|t| t - ms);
                row.released_at = row.released_at.map(|t| t - ms);
            }
        }
    }

    /// `tests/cluster`'s `set_idle`: the row's holder looks silent for `idle` at `now` (last_seen goes
    /// back to `now - idle`, and the lease and take-back time it was granted with it).
    pub fn set_idle(&mut self, service: &str, machine_id: i32, now: Ms, idle: Ms) {
        let key: Key = (service.to_owned(), machine_id);
        if let Some(row) = self.reg.committed.as_mut().and_then(|t| t.rows.get_mut(&key)) {
            let shift = row.last_seen - (now - idle);
            row.last_seen -= shift;
            row.lease_until = row.lease_until.map(|t| t - shift);
            row.takeover_at = row.takeover_at.map(|t| t - shift);
        }
    }

    /// Rows as they are in a real registry (read from it), in place of the model's.
    pub fn load(&mut self, rows: Vec<Row>) {
        let tables = self.reg.committed.get_or_insert_with(Default::default);
        tables.rows = rows.into_iter().map(|r| ((r.service.clone(), r.machine_id), r)).collect();
        self.reg.replicate();
    }

    /// The registry's epoch.
    pub fn epoch(&self) -> i64 {
        self.reg.committed.as_ref().map_or(0, |t| t.epoch)
    }

    /// A backend's exit record (CLOSE_BACKEND_LEASE): true when it lowered the watermark.
    pub fn close_backend(&mut self, held: &Holding, last_stamp: Ms) -> bool {
        let epoch = self.epoch();
        let txn = self.reg.begin();
        let closed = self.reg.close_backend_lease(txn, held, epoch, last_stamp) == Ok(true);
        self.reg.commit(txn);
        closed
    }

    /// `DELETE FROM system_nodes WHERE machine_id = ...` (with its trigger).
    pub fn delete(&mut self, service: &str, machine_id: i32) {
        let key: Key = (service.to_owned(), machine_id);
        let p = self.settings.policy;
        let txn = self.reg.begin();
        let _ = self.reg.tombstone_row(txn, &key, p.lease_secs() * 1000, p.takeover_idle_1h_secs * 1000);
        let _ = self.reg.delete_row(txn, &key);
        self.reg.commit(txn);
    }

    /// The rows of `service`, by machine id.
    pub fn rows(&self, service: &str) -> Vec<RowState> {
        let Some(tables) = &self.reg.committed else { return Vec::new() };
        tables.rows.values().filter(|r| r.service == service).map(row_state).collect()
    }

    /// The watermark a row holds.
    pub fn issued_until(&self, service: &str, machine_id: i32) -> Option<Ms> {
        self.reg.committed.as_ref()?.rows.get(&(service.to_owned(), machine_id)).map(|r| r.issued_until)
    }
}

fn row_state(r: &Row) -> RowState {
    RowState {
        machine_id: r.machine_id,
        host: r.host.clone(),
        port: r.port,
        backend_slot: r.backend_slot,
        version: r.version,
        released: r.released_at.is_some(),
    }
}

/// What `reported_watermark` (src/registry/api.rs) refuses before writing anything.
fn check_report(reported: Option<Ms>, layout: &Layout) -> Result<(), Refusal> {
    match reported {
        Some(ms) if ms == i64::MAX => Err(refusal("22023", "an infinite watermark")),
        Some(ms) if ms > layout.last_unix_ms() => Err(refusal("22023", "a watermark after the layout's end")),
        _ => Ok(()),
    }
}
