//! The claim: how a node or a backend gets a machine id, step by step, written once against a
//! [`ClaimStore`] that runs each statement. The extension implements the store over SPI
//! (`src/registry/claim.rs`); the simulation over its model of the registry (`sim/src/protocol.rs`),
//! so the simulation checks this code, not a copy of it.
//!
//! A claim reads the settings its caller took ([`ClaimSettings`]), and tells its caller what to say
//! ([`Notice`]s) and, when refused, what to record: where the claim ran decides how those are
//! delivered.

use crate::alert::Alert;
use crate::facts::{RowFacts, WatermarkAhead};
use crate::fleet::{self, CapacityLevel};
use crate::format::iso_utc;
use crate::history::{Event, EventKind};
use crate::input::NodeIdentity;
use crate::layout::{Layout, Pool, ServiceLayout};
use crate::messages;
use crate::watermark::{self, HolderKind};
use crate::{ClaimPolicy, ClaimStep, IdgenError, Outcome};
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;

/// Everything a claim reads of the settings, taken once by the session that claims: a
/// backend's claim runs in a background worker of its own (the extension's registry writer),
/// which runs by the settings the backend saw.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimSettings {
    pub policy: ClaimPolicy,
    /// `idgen.machine_id_range`: the machine ids this server hands out, of every service's pool.
    pub machine_id_first: u16,
    pub machine_id_last: u16,
    pub capacity_warning: f64,
    pub capacity_critical: f64,
    pub require_synchronous_standby: bool,
    pub max_clock_backward_ms: i64,
}

impl ClaimSettings {
    pub fn machine_id_range(&self) -> RangeInclusive<u16> {
        self.machine_id_first..=self.machine_id_last
    }
}

/// What a claim grants (its lease and take-back age), how far ahead of the clock it lets a
/// watermark be, and where it may look (this server's machine-id range).
#[derive(Clone, Copy, Debug)]
pub struct ClaimTerms {
    /// The lease granted, in seconds.
    pub lease_secs: i64,
    /// How far ahead of the clock a watermark may be for the claimant to keep the id.
    pub tolerance_ms: i64,
    /// The window the claimant may issue in before its next write (0 for services).
    pub window_ms: i64,
    /// The shortest take-back age, in seconds: no take-back of the grant before it.
    pub takeover_idle_secs: i64,
    /// The machine ids the claim may hand out: the service's pool within this server's
    /// `idgen.machine_id_range` (or the one id a claim by number asks for).
    pub first_machine_id: i32,
    pub last_machine_id: i32,
}

impl ClaimTerms {
    /// The times a claim or a renewal by a holder of `kind` works with, under `settings`; `window_ms`
    /// is the window it may issue in before its next write, `ids` the machine ids it may hand out.
    pub fn of(kind: HolderKind, settings: &ClaimSettings, window_ms: i64, ids: Pool) -> ClaimTerms {
        let policy = &settings.policy;
        ClaimTerms {
            lease_secs: policy.lease_secs(),
            tolerance_ms: watermark::tolerance_ms(kind, policy, settings.max_clock_backward_ms),
            window_ms,
            takeover_idle_secs: policy.takeover_idle_1h_secs,
            first_machine_id: i32::from(ids.first),
            last_machine_id: i32::from(ids.last),
        }
    }
}

/// The row a claim got, as it wrote it. `T` is the store's time.
#[derive(Clone, Copy, Debug)]
pub struct ClaimedRow<T> {
    pub machine_id: i32,
    pub version: i64,
    pub lease_until: T,
    /// The row's new `last_seen`: the moment of the claim.
    pub claimed_at: T,
    /// The latest time an earlier holder may have stamped; none for a new id.
    pub bound: Option<T>,
    /// The watermark the row holds now.
    pub issued_until: T,
}

/// What the caller's own row looks like to a claim.
pub enum OwnRow<T> {
    /// Won back; `was_released` when the caller had released it.
    Claimed {
        row: ClaimedRow<T>,
        was_released: bool,
    },
    /// The row exists but another transaction has it locked.
    Busy(i32),
    Absent,
}

/// The claimant's own held row, set aside because its watermark is too far ahead.
pub struct OwnRowAhead<T> {
    pub machine_id: i32,
    /// How long its holders may stamp (the holder bound).
    pub bound: T,
    /// Its issued_until: what its holder reported.
    pub reported: T,
    pub last_seen: T,
}

/// Which rows a take-over may take from their holders.
#[derive(Clone, Copy, Debug)]
pub enum TakeOverFrom {
    /// Released rows whose cooldown has passed, longest released first.
    Released { cooldown_secs: i64 },
    /// Rows idle longer than `min_idle_secs` (and not cooling down), least recently seen first.
    Idle { min_idle_secs: i64, cooldown_secs: i64 },
}

/// The turn to announce a change of a service's capacity level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityTurn {
    /// Taken, until the transaction ends.
    Taken,
    /// Another transaction holds it: it announces; this claim leaves it.
    Busy,
    /// The service has no such guard row (its guard rows were created by the 0.10.0 library against
    /// older objects while they were being updated): announce without one.
    Missing,
}

/// The registry as a claim sees it: one method per statement it runs, in the claimant's
/// transaction. Each says what its statement does; the statements are in `src/statements.rs`.
pub trait ClaimStore {
    /// How the store writes a time (a `timestamptz`, Unix ms in the model).
    type Time: Copy;

    /// Unix ms of a time of this store; `-infinity` is far in the past.
    fn unix_ms(time: Self::Time) -> i64;
    /// Whether a time is neither `-infinity` nor `infinity`.
    fn is_finite(time: Self::Time) -> bool;

    /// The server's clock now, Unix ms.
    fn now_unix_ms(&mut self) -> i64;
    /// The claim's commit waits for the synchronous standbys (a claim must survive a failover).
    fn make_commit_durable(&mut self);
    /// SYNCHRONOUS_STANDBY_STREAMING.
    fn synchronous_standby_streaming(&mut self) -> bool;
    /// READ_REGISTRY's epoch.
    fn read_epoch(&mut self) -> i64;
    /// READ_REGISTRY's version base: a never-registered id's row starts after it.
    fn read_version_base(&mut self) -> i64;
    /// TAKE_GUARD of the identity's guard: false when another transaction holds it.
    fn take_identity_guard(&mut self, node: &NodeIdentity) -> bool;
    /// REUSE_OWN_HELD_ROW.
    fn reuse_own_held_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<ClaimedRow<Self::Time>>;
    /// REUSE_OWN_ROW, and OWN_HELD_ROW when it finds none it may reuse.
    fn reuse_own_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> OwnRow<Self::Time>;
    /// RELEASE_OWN_ROW_OUTSIDE_RANGE: the machine id set aside and the watermark it was left with.
    fn release_own_row_outside_range(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<(i32, Self::Time)>;
    /// RELEASE_OWN_ROW_AHEAD.
    fn release_own_row_ahead(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<OwnRowAhead<Self::Time>>;
    /// The service's hint: every machine id of its pool below it has a row or a tombstone.
    fn unregistered_from(&mut self, service: &str) -> i32;
    /// Moves the hint up to `from` (the statement checks every id below it has a row).
    fn advance_unregistered_from(&mut self, service: &str, from: i32);
    /// UNREGISTERED_MACHINE_IDS of `first..=last`: lowest first, with whether each has a
    /// tombstone further ahead than the claimant may wait.
    fn unregistered_machine_ids(
        &mut self,
        service: &str,
        first: i32,
        last: i32,
        terms: &ClaimTerms,
    ) -> Vec<(i32, bool)>;
    /// INSERT_UNREGISTERED (with the new id's guard).
    fn insert_unregistered(
        &mut self,
        node: &NodeIdentity,
        machine_id: i32,
        terms: &ClaimTerms,
        version_base: i64,
    ) -> Option<ClaimedRow<Self::Time>>;
    /// TAKE_RELEASED or TAKE_IDLE: the row taken and its previous holder.
    fn take_over(
        &mut self,
        node: &NodeIdentity,
        from: TakeOverFrom,
        terms: &ClaimTerms,
    ) -> Option<(ClaimedRow<Self::Time>, RowFacts)>;
    /// SOONEST_TOMBSTONE_AHEAD: its machine id and bound.
    fn soonest_tombstone_ahead(&mut self, service: &str, terms: &ClaimTerms) -> Option<(i32, Self::Time)>;
    /// CURRENT_ROW.
    fn current_row(&mut self, service: &str, machine_id: i32) -> Option<RowFacts>;
    /// ROW_BOUND: the row's bound and the server clock, Unix ms.
    fn row_bound(&mut self, service: &str, machine_id: i32, terms: &ClaimTerms) -> Option<(i64, i64)>;
    /// COUNT_HELD and LEAST_RECENTLY_SEEN of the range.
    fn least_recently_seen(&mut self, service: &str, terms: &ClaimTerms) -> (i64, Option<RowFacts>);
    /// HIGHEST_REGISTERED of the range.
    fn highest_registered(&mut self, service: &str, terms: &ClaimTerms) -> Option<i32>;
    /// COUNT_IN_USE of the range.
    fn count_in_use(&mut self, service: &str, cooldown_secs: i64, terms: &ClaimTerms) -> i64;
    /// Whether the installed objects record capacity announcements (0.10.0 on): before, none is
    /// recorded and every claim above a level alerts.
    fn records_capacity_announcements(&mut self) -> bool;
    /// CAPACITY_ANNOUNCED.
    fn capacity_announced(&mut self, service: &str) -> Option<CapacityLevel>;
    /// TAKE_GUARD of the service's capacity turn.
    fn take_capacity_turn(&mut self, service: &str) -> CapacityTurn;
    /// Whether the installed objects record a service node's restarts (fleet reports).
    fn keeps_fleet_reports(&mut self) -> bool;
    /// A new history event of `kind` about `node`, naming who calls.
    fn event(&mut self, kind: EventKind, node: &NodeIdentity) -> Event;
    /// Records an ownership change in the history, in the claim's transaction.
    fn record(&mut self, event: &Event);
}

/// Something a claim tells people besides its result.
#[derive(Clone, Debug)]
pub enum Notice {
    /// A WARNING for the client.
    Warning(IdgenError),
    /// An alert: announced where the claim's transaction runs, and a WARNING for the client.
    Alert(Alert),
}

/// A claimed machine id.
#[derive(Clone, Debug)]
pub struct Claim<T> {
    /// The layout of the service: what the holder's IDs are cut by.
    pub layout: Layout,
    pub machine_id: i32,
    pub version: i64,
    pub outcome: Outcome,
    pub lease_until: T,
    /// The moment of the claim: the row's new `last_seen`.
    pub claimed_at: T,
    /// Unix ms after which the holder may stamp: after the claim, and after every
    /// timestamp an earlier holder may have stamped.
    pub not_before_unix_ms: i64,
    /// The watermark the row holds now.
    pub issued_until: T,
    /// The registry's epoch the claim was made in (0 for a service node: its lease is not tied to it).
    pub registry_epoch: i64,
}

/// A claim and what to tell people about it.
pub struct Granted<T> {
    pub claim: Claim<T>,
    pub notices: Vec<Notice>,
}

/// A refused claim: the error, the event that records it (rate-limited, in a transaction
/// that survives the error; none when the refusal is no news: another transaction holds the
/// node's row or guard for a moment), and what to tell people.
pub struct Refused {
    pub error: IdgenError,
    pub event: Option<Event>,
    pub notices: Vec<Notice>,
}

/// The service a claim is for, as recorded before the claim's transaction began.
#[derive(Clone, Copy, Debug)]
pub struct Service {
    pub layout: ServiceLayout,
    /// The never-registered hint, if read (see [`ClaimStore::unregistered_from`]).
    pub unregistered_from: Option<i32>,
}

/// What a claim needs to know beyond the store.
struct Context<'a> {
    function: &'a str,
    node: &'a NodeIdentity,
    times: ClaimTerms,
    settings: &'a ClaimSettings,
    /// The machine ids this server hands out for the service: its pool within idgen.machine_id_range.
    here: Pool,
    service: Service,
}

/// The machine id a claim step got: its row, how it got it, and from whom.
struct ClaimedId<T> {
    row: ClaimedRow<T>,
    outcome: Outcome,
    /// The holder a take-back took the id from.
    previous: Option<RowFacts>,
    /// A reuse of the node's own row that it had released.
    was_released: bool,
}

/// Claims a machine id for `node` in the store's transaction: any free one of the ids this server
/// hands out for the service (its pool within idgen.machine_id_range), or, for `wanted`, that one
/// only (a fleet adopting the ids it already uses). `function` names the SQL entry point in
/// messages. Ownership changes go into the history in this transaction; a refusal comes back with
/// its event for the caller to record where it survives the error. (A refusal is the cold path:
/// its size does not matter.)
#[allow(clippy::result_large_err)]
pub fn claim<S: ClaimStore>(
    store: &mut S,
    function: &str,
    node: &NodeIdentity,
    settings: &ClaimSettings,
    service: Service,
    wanted: Option<u16>,
) -> Result<Granted<S::Time>, Refused> {
    let kind = if node.backend_slot.is_some() { HolderKind::Backend } else { HolderKind::Service };
    let policy = &settings.policy;
    let pool = service.layout.pool;
    let range = settings.machine_id_range();
    let mut notices = Vec::new();
    let refuse = |error| Refused { error, event: None, notices: Vec::new() };
    let here =
        if guard_on(ClaimGuard::Pool) { pool.within(&range) } else { Pool::all(&service.layout.layout).within(&range) };
    let ids = match (here, wanted) {
        (Some(here), None) => here,
        (Some(here), Some(id)) if here.contains(id) => Pool { first: id, last: id },
        (here, Some(id)) => {
            return Err(refuse(messages::machine_id_not_handed_out(function, &node.service, id, &pool, here.as_ref())))
        }
        (None, None) => return Err(refuse(messages::pool_outside_range(function, node, &pool, &range))),
    };
    let here = here.unwrap_or(ids);
    let times = ClaimTerms::of(kind, settings, watermark::claim_window_ms(kind, policy), ids);
    let cx = Context { function, node, times, settings, here, service };
    store.make_commit_durable();
    if settings.require_synchronous_standby && !store.synchronous_standby_streaming() {
        let error = messages::no_synchronous_standby(function);
        return Err(refused(store, &cx, EventKind::RefusedNoStandby, None, error, notices));
    }
    // A backend's lease is tied to its registry's epoch; a service node's is not.
    let epoch = if kind == HolderKind::Backend { store.read_epoch() } else { 0 };
    let now = store.now_unix_ms();
    // Most claims reuse the claimant's own row: a backend slot whose row the slot still holds, a node
    // restarting. No set-aside can precede that reuse (the identity holds at most one row,
    // system_nodes_node_identity, and it is reused only in the range and not too far ahead; with no
    // held row both set-asides find nothing), so it is tried first, alone. A backend reuses its held
    // row only (the statement a new backend plans the least); a node, its released row too.
    let reused = match kind {
        HolderKind::Backend => store.reuse_own_held_row(node, &times).map(|row| ClaimedId {
            row,
            outcome: Outcome::Reused,
            previous: None,
            was_released: false,
        }),
        HolderKind::Service => match store.reuse_own_row(node, &times) {
            OwnRow::Claimed { row, was_released } => {
                Some(ClaimedId { row, outcome: Outcome::Reused, previous: None, was_released })
            }
            // A held row it cannot reuse (its holder may be a live twin, or its bound is ahead), or
            // one another transaction writes: the steps below set it aside, or say it is busy.
            OwnRow::Busy(_) | OwnRow::Absent => None,
        },
    };
    let (outside, moved) = match reused {
        Some(_) => (None, None),
        None => (
            store.release_own_row_outside_range(node, &times),
            store.release_own_row_ahead(node, &times).map(|own| WatermarkAhead {
                machine_id: own.machine_id,
                bound_unix_ms: S::unix_ms(own.bound),
                now_unix_ms: now,
                tolerance_ms: times.tolerance_ms,
                held_since_unix_ms: watermark::held_by_live_holder(
                    kind,
                    S::unix_ms(own.reported),
                    now,
                    times.tolerance_ms,
                )
                .then(|| S::unix_ms(own.last_seen)),
            }),
        ),
    };
    let mut claimed = reused;
    let mut guarded = false;
    for step in policy.steps() {
        if claimed.is_some() {
            break;
        }
        // A node's own row serialises its claims exactly (row lock); every other step gives a
        // service node's identity a row it does not have yet, so its claims take turns on its
        // guard. (A backend's slot is held by one process at a time, which waits for its own
        // registry writes: it needs no guard.)
        if step != ClaimStep::ReuseOwnRow
            && kind == HolderKind::Service
            && !std::mem::replace(&mut guarded, true)
            && !store.take_identity_guard(node)
        {
            return Err(Refused { error: messages::identity_busy(function, node, None), event: None, notices });
        }
        match run_step(store, &cx, step, &mut notices) {
            Ok(step_claimed) => claimed = step_claimed,
            Err(busy) => return Err(Refused { error: busy, event: None, notices }),
        }
    }
    if let Some(claimed_id) = claimed {
        let row = &claimed_id.row;
        if let Some((from, left_at)) = outside {
            let (warning, why) = match wanted {
                Some(_) => (
                    messages::moved_to_wanted(function, node, from, row.machine_id),
                    format!("its node claimed machine id {} by number", row.machine_id),
                ),
                None => (
                    messages::moved_into_range(function, node, from, &here, row.machine_id),
                    format!(
                        "outside the machine ids this server hands out for the service ({}-{}: its pool within idgen.machine_id_range)",
                        here.first, here.last
                    ),
                ),
            };
            notices.push(Notice::Warning(warning));
            record_set_aside(store, &cx, from, S::unix_ms(left_at), why);
        }
        if let Some(ahead) = &moved {
            notices.push(Notice::Warning(messages::moved_past_watermark(function, node, ahead, row.machine_id)));
            let why = if ahead.held_since_unix_ms.is_some() {
                "it was still held: its holder may be issuing until its lease ends"
            } else {
                "its bound (what its holders may have stamped) was further ahead than the claimant may wait"
            }
            .to_owned();
            record_set_aside(store, &cx, ahead.machine_id, ahead.bound_unix_ms, why);
        }
        let bound = row.bound.filter(|_| guard_on(ClaimGuard::HolderBound));
        let not_before_unix_ms = watermark::not_before(S::unix_ms(row.claimed_at), bound.map(S::unix_ms));
        record_gain(store, &cx, &claimed_id, not_before_unix_ms);
        // Only claims that take a free id make the service fuller (a take-back from an idle
        // holder leaves it as full as it was, and the 1-hour tier alerts on its own); they also
        // announce that a level cleared, the next time one finds it so.
        if matches!(claimed_id.outcome, Outcome::New | Outcome::Released) || claimed_id.was_released {
            announce_capacity_change(store, &cx, row, &mut notices);
        }
        let claim = Claim {
            layout: service.layout.layout,
            machine_id: row.machine_id,
            version: row.version,
            outcome: claimed_id.outcome,
            lease_until: row.lease_until,
            claimed_at: row.claimed_at,
            not_before_unix_ms,
            issued_until: row.issued_until,
            registry_epoch: epoch,
        };
        return Ok(Granted { claim, notices });
    }
    // Nothing now: a machine id held back by its watermark (the node's own, set aside above, or one
    // whose row was removed by hand) is free once its time has passed; otherwise the service is full.
    let ahead = moved.or_else(|| {
        store.soonest_tombstone_ahead(&node.service, &times).map(|(machine_id, bound)| WatermarkAhead {
            machine_id,
            bound_unix_ms: S::unix_ms(bound),
            now_unix_ms: now,
            tolerance_ms: times.tolerance_ms,
            held_since_unix_ms: None,
        })
    });
    if let Some(ahead) = ahead {
        let error = messages::watermark_ahead(function, node, &ahead);
        return Err(refused(store, &cx, EventKind::RefusedWatermark, Some(ahead.machine_id), error, notices));
    }
    if let Some(id) = wanted {
        // The one id asked for is someone else's (or its row is being written by another claim).
        let error = match store.current_row(&node.service, i32::from(id)) {
            Some(holder) => {
                let waiting_for = store.row_bound(&node.service, i32::from(id), &times).map(|(bound, now)| {
                    messages::WatermarkWait { bound_unix_ms: bound, now_unix_ms: now, tolerance_ms: times.tolerance_ms }
                });
                messages::machine_id_taken(
                    function,
                    node,
                    i32::from(id),
                    &holder,
                    policy.release_cooldown_secs,
                    waiting_for,
                )
            }
            None => messages::identity_busy(function, node, Some(i32::from(id))),
        };
        return Err(Refused { error, event: None, notices });
    }
    let (held, oldest) = store.least_recently_seen(&node.service, &times);
    let (error, alert) =
        messages::exhausted(function, node, held, &here, &pool, policy.takeover_idle_1h_secs, oldest.as_ref());
    notices.push(Notice::Alert(alert));
    Err(refused(store, &cx, EventKind::RefusedFull, None, error, notices))
}

/// A refused claim, with the event that records it.
fn refused<S: ClaimStore>(
    store: &mut S,
    cx: &Context,
    kind: EventKind,
    machine_id: Option<i32>,
    error: IdgenError,
    notices: Vec<Notice>,
) -> Refused {
    let mut event = store.event(kind, cx.node);
    event.machine_id = machine_id;
    event.detail = Some(error.one_line());
    Refused { error, event: Some(event), notices }
}

/// Records that the claimant left its own machine id (with the watermark it left) to claim another.
fn record_set_aside<S: ClaimStore>(store: &mut S, cx: &Context, machine_id: i32, watermark_ms: i64, why: String) {
    let mut event = store.event(EventKind::SetAside, cx.node);
    event.machine_id = Some(machine_id);
    event.issued_until = Some(iso_utc(watermark_ms));
    event.detail = Some(why);
    store.record(&event);
}

/// Records an ownership change, or a service node's restart: its claim of the row it still held
/// (a backend's reuse of its slot's row is neither; see `crate::history`).
fn record_gain<S: ClaimStore>(store: &mut S, cx: &Context, claimed_id: &ClaimedId<S::Time>, not_before_unix_ms: i64) {
    let row = &claimed_id.row;
    // A backend slot's own row, held or released by its last backend's end: no change of holder.
    if claimed_id.outcome == Outcome::Reused && cx.node.backend_slot.is_some() {
        return;
    }
    let previous_bound = row.bound.filter(|b| S::is_finite(*b)).map(|bound| iso_utc(S::unix_ms(bound)));
    if claimed_id.outcome == Outcome::Reused && !claimed_id.was_released {
        if !store.keeps_fleet_reports() {
            return;
        }
        let mut event = store.event(EventKind::Restart, cx.node);
        event.machine_id = Some(row.machine_id);
        event.version = Some(row.version);
        event.outcome = Some(claimed_id.outcome.label());
        event.not_before = Some(iso_utc(not_before_unix_ms));
        event.previous_version = Some(row.version - 1);
        event.previous_bound = previous_bound;
        store.record(&event);
        return;
    }
    let mut event = store.event(EventKind::of_claim(claimed_id.outcome), cx.node);
    event.machine_id = Some(row.machine_id);
    event.version = Some(row.version);
    event.outcome = Some(claimed_id.outcome.label());
    event.not_before = Some(iso_utc(not_before_unix_ms));
    if let Some(previous) = &claimed_id.previous {
        event.previous_host = Some(previous.host.clone());
        event.previous_port = Some(previous.port);
        event.previous_backend_slot = previous.backend_slot;
        event.previous_version = Some(previous.version);
        event.previous_idle_seconds = Some(previous.idle_secs);
        event.previous_bound = previous_bound;
    }
    store.record(&event);
}

/// Alerts when the claim changed the service's capacity level from the one announced last: up
/// past `idgen.capacity_warning` or `idgen.capacity_critical`, or down below the level announced by
/// the margin (`fleet::level_change`); the history records each announcement, which later claims
/// compare with. Counting what is in use reads every row of the service: it is done only when a
/// level is announced or the highest registered machine id says enough rows could be in use to
/// pass one. One claim at a time announces (the service's capacity turn): claims that cross a
/// threshold together alert once.
fn announce_capacity_change<S: ClaimStore>(
    store: &mut S,
    cx: &Context,
    row: &ClaimedRow<S::Time>,
    notices: &mut Vec<Notice>,
) {
    let service = cx.node.service.as_str();
    let capacity = i64::from(cx.here.size());
    let levels = (cx.settings.capacity_warning, cx.settings.capacity_critical);
    let (warning, critical) = levels;
    // Before 0.10.0's objects, no announcement is recorded: every claim above a level alerts.
    let recorded = store.records_capacity_announcements();
    let announced = if recorded { store.capacity_announced(service) } else { None };
    let here_times =
        ClaimTerms { first_machine_id: i32::from(cx.here.first), last_machine_id: i32::from(cx.here.last), ..cx.times };
    let at_most = store
        .highest_registered(service, &here_times)
        .map_or(0, |highest| i64::from(highest) - i64::from(cx.here.first) + 1);
    if !fleet::level_may_change(announced, at_most, capacity, warning, critical) {
        return;
    }
    let cooldown = cx.settings.policy.release_cooldown_secs;
    let mut in_use = store.count_in_use(service, cooldown, &here_times);
    if fleet::level_change(announced, in_use, capacity, warning, critical).is_none() {
        return;
    }
    let announced = if recorded {
        if store.take_capacity_turn(service) == CapacityTurn::Busy {
            return;
        }
        // Read both again with the turn: a claim that held it before may have announced a change,
        // and claims committed since the count.
        in_use = store.count_in_use(service, cooldown, &here_times);
        store.capacity_announced(service)
    } else {
        announced
    };
    let Some(change) = fleet::level_change(announced, in_use, capacity, warning, critical) else {
        return;
    };
    let alert = messages::capacity_alert(
        cx.function,
        cx.node,
        row.machine_id,
        row.version,
        in_use,
        capacity,
        change,
        announced,
        levels,
    );
    if recorded {
        let mut event = store.event(EventKind::of_capacity(change.level()), cx.node);
        event.detail = Some(alert.message.clone());
        store.record(&event);
    }
    notices.push(Notice::Alert(alert));
}

fn run_step<S: ClaimStore>(
    store: &mut S,
    cx: &Context,
    step: ClaimStep,
    notices: &mut Vec<Notice>,
) -> Result<Option<ClaimedId<S::Time>>, IdgenError> {
    let (node, times) = (cx.node, &cx.times);
    let claimed = |row, outcome, previous| ClaimedId { row, outcome, previous, was_released: false };
    Ok(match step {
        ClaimStep::ReuseOwnRow => match store.reuse_own_row(node, times) {
            OwnRow::Claimed { row, was_released } => {
                Some(ClaimedId { row, outcome: Outcome::Reused, previous: None, was_released })
            }
            OwnRow::Busy(machine_id) => return Err(messages::identity_busy(cx.function, node, Some(machine_id))),
            OwnRow::Absent => None,
        },
        ClaimStep::NeverRegistered => never_registered(store, cx).map(|row| claimed(row, Outcome::New, None)),
        ClaimStep::ReleasedPastCooldown { cooldown_secs } => store
            .take_over(node, TakeOverFrom::Released { cooldown_secs }, times)
            .map(|(row, previous)| claimed(row, Outcome::Released, Some(previous))),
        ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, alert } => {
            let from = TakeOverFrom::Idle { min_idle_secs, cooldown_secs };
            store.take_over(node, from, times).map(|(row, previous)| {
                if alert {
                    notices.push(Notice::Alert(messages::takeover_alert(
                        cx.function,
                        outcome,
                        node,
                        row.machine_id,
                        row.version,
                        &previous,
                    )));
                }
                claimed(row, outcome, Some(previous))
            })
        }
    })
}

/// How many machine ids a claim looks at in one statement for a never-registered one.
pub const UNREGISTERED_BATCH: i32 = 64;

/// Claim step 2: the lowest machine id of the range with no row, in batches from the service's
/// hint (every id of its pool below the hint has a row), so that a claim in a pool of 65,536 with
/// half of it held looks at a few ids, not at the half. An id whose tombstone is further ahead than
/// the claimant may wait is skipped; a claimant that finds an id's guard taken, or its row written
/// meanwhile, tries the next. One pass is complete: only a hand DELETE removes a row, and its
/// tombstone guards the id. The hint moves up to the first id this claim did not see registered
/// (the statement checks that every id below it has a row).
fn never_registered<S: ClaimStore>(store: &mut S, cx: &Context) -> Option<ClaimedRow<S::Time>> {
    let (first, last) = (cx.times.first_machine_id, cx.times.last_machine_id);
    let service = cx.node.service.as_str();
    let hint = cx.service.unregistered_from.unwrap_or_else(|| store.unregistered_from(service));
    let pool_first = i32::from(cx.service.layout.pool.first);
    // The hint speaks of the ids from the pool's first; a range that starts past it searches alone.
    let contiguous = first <= hint.max(pool_first);
    let mut from = if contiguous { first.max(hint) } else { first };
    let mut unseen: Option<i32> = None;
    let version_base = store.read_version_base();
    while from <= last {
        let to = from.saturating_add(UNREGISTERED_BATCH - 1).min(last);
        for (machine_id, tombstone_ahead) in store.unregistered_machine_ids(service, from, to, &cx.times) {
            let row = if tombstone_ahead {
                None
            } else {
                store.insert_unregistered(cx.node, machine_id, &cx.times, version_base)
            };
            let Some(row) = row else {
                unseen.get_or_insert(machine_id);
                continue;
            };
            if contiguous {
                store.advance_unregistered_from(service, unseen.unwrap_or(machine_id + 1));
            }
            return Some(row);
        }
        from = to + 1;
    }
    None
}

/// A guard of the claim that a simulation may switch off to show that it notices (the `mutations`
/// feature; the extension is never built with it, and without it every guard is on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimGuard {
    /// The claimant stamps after the bound its row read (what earlier holders may have stamped),
    /// not only after the claim's moment.
    HolderBound,
    /// The claim hands out the service's pool within `idgen.machine_id_range`, not any id of the range.
    Pool,
}

#[cfg(feature = "mutations")]
std::thread_local! {
    static SWITCHED_OFF: std::cell::Cell<(bool, bool)> = const { std::cell::Cell::new((false, false)) };
}

/// Runs `f` with `off` switched off on this thread (the simulation's mutation searches).
#[cfg(feature = "mutations")]
pub fn with_guards_off<R>(off: &[ClaimGuard], f: impl FnOnce() -> R) -> R {
    let switched = (off.contains(&ClaimGuard::HolderBound), off.contains(&ClaimGuard::Pool));
    let before = SWITCHED_OFF.with(|s| s.replace(switched));
    let result = f();
    SWITCHED_OFF.with(|s| s.set(before));
    result
}

#[cfg(feature = "mutations")]
fn guard_on(guard: ClaimGuard) -> bool {
    let (holder_bound, pool) = SWITCHED_OFF.with(|s| s.get());
    match guard {
        ClaimGuard::HolderBound => !holder_bound,
        ClaimGuard::Pool => !pool,
    }
}

#[cfg(not(feature = "mutations"))]
fn guard_on(_: ClaimGuard) -> bool {
    true
}
