//! The registry's calls as the edge runs them on the model: the claim (`src/registry/claim.rs`,
//! the core's `ClaimPolicy::steps` over the model's statements), and [`Mirror`], which runs single
//! calls (a claim, a heartbeat, a release, a hand change) in transactions of their own, so that a
//! test can run the same steps against the model and a real cluster and compare their answers
//! (tests/cluster/tests/model_vs_cluster.rs).

use crate::registry::{ClaimedRow, Holding, Key, Ms, Node, Registry, Row, Terms, TxnId, NEG_INF};
use idgen_core::input::NodeIdentity;
use idgen_core::layout::Layout;
use idgen_core::watermark::{self, HolderKind};
use idgen_core::{guard, ClaimPolicy, ClaimStep};

/// Where each service's IDs come from: its layout and the machine ids this server hands out. The
/// extension point for per-service layouts and machine-id pools: today one layout, and the
/// server's `idgen.machine_id_range` for every service; a pool would narrow the range per
/// service, a layout change `layout` (and the generator's, in `world`).
#[derive(Clone, Debug)]
pub struct Topology {
    pub layout: Layout,
    pub first_machine_id: i16,
    pub last_machine_id: i16,
}

impl Topology {
    /// Every machine id of the default layout (`idgen.machine_id_range` unset).
    pub fn default_range() -> Topology {
        Topology {
            layout: Layout::DEFAULT,
            first_machine_id: 0,
            last_machine_id: Layout::DEFAULT.max_machine_id() as i16,
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
    /// `ClaimTerms::of` (src/registry/store.rs), in ms.
    pub fn terms(&self, kind: HolderKind, window: Ms) -> Terms {
        let p = &self.policy;
        Terms {
            lease: p.lease_secs() * 1000,
            tolerance: watermark::tolerance_ms(kind, p, self.max_backward_ms),
            window,
            takeback_age: p.takeover_idle_1h_secs * 1000,
            first_machine_id: self.topology.first_machine_id,
            last_machine_id: self.topology.last_machine_id,
        }
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

/// Claims a machine id for `node` in `txn`: the claim of src/registry/claim.rs, step for step.
/// Returns the grant or the refusal, and the machine ids it set aside with why.
pub fn claim(
    reg: &mut Registry,
    txn: TxnId,
    node: &Node,
    settings: &Settings,
) -> (Result<Granted, Refusal>, Vec<(i16, String)>) {
    let mut set_aside = Vec::new();
    let kind = if node.backend_slot.is_some() { HolderKind::Backend } else { HolderKind::Service };
    let policy = settings.policy;
    let t = settings.terms(kind, watermark::claim_window_ms(kind, &policy));
    if settings.require_synchronous_standby && !reg.synchronous_standby_streaming() {
        let r = refusal("55000", "no synchronous standby streams (idgen.require_synchronous_standby)");
        return (Err(r), set_aside);
    }
    let epoch = reg.read_registry(txn);
    let mut claimed = reg.reuse_own_held_row(txn, node, &t).map(|row| (row, "reused"));
    let mut moved = None;
    if claimed.is_none() {
        if let Some((m, _, _)) = reg.release_own_row_outside_range(txn, node, &t) {
            set_aside.push((m, "outside idgen.machine_id_range".to_owned()));
        }
        moved = reg.release_own_row_ahead(txn, node, &t);
        if let Some((m, bound, _)) = moved {
            set_aside.push((m, format!("its holders may stamp until {bound} (a new version fences them)")));
        }
    }
    let core_node = NodeIdentity {
        service: node.service.clone(),
        host: node.host.clone(),
        port: node.port,
        backend_slot: node.backend_slot,
    };
    let mut guarded = false;
    for step in policy.steps() {
        if claimed.is_some() {
            break;
        }
        // A service node's identity takes its guard before any step that gives it a new row.
        if step != ClaimStep::ReuseOwnRow
            && kind == HolderKind::Service
            && !std::mem::replace(&mut guarded, true)
            && !reg.take_guard(txn, &node.service, guard::identity_guard(&core_node))
        {
            return (Err(refusal("55P03", "the identity's guard is held by another claim")), set_aside);
        }
        claimed = match step {
            ClaimStep::ReuseOwnRow => match reg.reuse_own_row(txn, node, &t) {
                Some((row, _)) => Some((row, "reused")),
                None => match reg.own_held_row(txn, node) {
                    Some(m) => {
                        return (Err(refusal("55P03", format!("its row (machine id {m}) is locked"))), set_aside)
                    }
                    None => None,
                },
            },
            ClaimStep::NeverRegistered => {
                let candidates = reg.unregistered_machine_ids(txn, &node.service, &t);
                candidates
                    .into_iter()
                    .find_map(|m| reg.insert_unregistered(txn, node, &t, m, guard::new_id_guard(i32::from(m))))
                    .map(|row| (row, "new"))
            }
            ClaimStep::ReleasedPastCooldown { cooldown_secs } => {
                reg.take_over(txn, node, &t, None, cooldown_secs * 1000).map(|(row, _)| (row, "released"))
            }
            ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, .. } => reg
                .take_over(txn, node, &t, Some(min_idle_secs * 1000), cooldown_secs * 1000)
                .map(|(row, _)| (row, outcome.label())),
        };
    }
    if let Some((row, outcome)) = claimed {
        let not_before = watermark::not_before(row.claimed_at, row.bound.filter(|b| *b != NEG_INF));
        return (Ok(Granted { row, outcome, not_before, epoch }), set_aside);
    }
    let ahead = moved.map(|(m, bound, _)| (m, bound)).or_else(|| reg.soonest_tombstone_ahead(txn, &node.service, &t));
    let r = match ahead {
        Some((m, bound)) => refusal("55000", format!("machine id {m} is held back until {bound}")),
        None => refusal("53000", "no machine id is free"),
    };
    (Err(r), set_aside)
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
    pub machine_id: i16,
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
    pub fn age(&mut self, machine_id: i16, service: &str, ms: Ms) {
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
    pub fn set_idle(&mut self, service: &str, machine_id: i16, now: Ms, idle: Ms) {
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
    pub fn delete(&mut self, service: &str, machine_id: i16) {
        let key: Key = (service.to_owned(), machine_id);
        let p = self.settings.policy;
        let txn = self.reg.begin();
        self.reg.tombstone_row(txn, &key, p.lease_secs() * 1000, p.takeover_idle_1h_secs * 1000);
        let _ = self.reg.delete_row(txn, &key);
        self.reg.commit(txn);
    }

    /// The rows of `service`, by machine id.
    pub fn rows(&self, service: &str) -> Vec<RowState> {
        let Some(tables) = &self.reg.committed else { return Vec::new() };
        tables.rows.values().filter(|r| r.service == service).map(row_state).collect()
    }

    /// The watermark a row holds.
    pub fn issued_until(&self, service: &str, machine_id: i16) -> Option<Ms> {
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
