//! Executes the core's claim policy against the registry, step by step. This
//! is the only claim path: `idgen_claim` calls it for service nodes in the
//! caller's transaction, and `writer` for each database backend's own
//! lease, in a background worker's transaction of its own.
//!
//! A claim reads the settings its caller took (`ClaimSettings`), and tells its
//! caller what to say (`Notice`s) and, when refused, what to record: where the
//! claim ran decides how those are delivered.

use super::layouts::Recorded;
use super::store::{self, ClaimTerms, ClaimedRow, OwnRow, TakeOverFrom};
use crate::clock::{unix_ms, SystemClock};
use crate::diagnostics::alerts::Notice;
use crate::durability;
use crate::history::{self, Who};
use crate::settings::ClaimSettings;
use idgen_core::facts::{RowFacts, WatermarkAhead};
use idgen_core::fleet;
use idgen_core::format::iso_utc;
use idgen_core::generator::Clock;
use idgen_core::history::{Event, EventKind};
use idgen_core::input::NodeIdentity;
use idgen_core::layout::{Layout, Pool};
use idgen_core::messages;
use idgen_core::watermark::{self, HolderKind};
use idgen_core::{ClaimStep, IdgenError, Outcome};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

/// A claimed machine id.
pub struct Claim {
    /// The layout of the service: what the holder's IDs are cut by.
    pub layout: Layout,
    pub machine_id: i32,
    pub version: i64,
    pub outcome: Outcome,
    pub lease_until: TimestampWithTimeZone,
    /// The moment of the claim: the row's new `last_seen`.
    pub claimed_at: TimestampWithTimeZone,
    /// Unix ms after which the holder may stamp: after the claim, and after every
    /// timestamp an earlier holder may have stamped.
    pub not_before_unix_ms: i64,
    /// The watermark the row holds now.
    pub issued_until: TimestampWithTimeZone,
    /// The registry's epoch the claim was made in.
    pub registry_epoch: i64,
}

/// A claim and what to tell people about it.
pub struct Granted {
    pub claim: Claim,
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

/// What a claim needs to know beyond the settings.
struct Context<'a> {
    function: &'a str,
    node: &'a NodeIdentity,
    times: ClaimTerms,
    settings: &'a ClaimSettings,
    who: &'a Who,
    /// The machine ids this server hands out for the service: its pool within idgen.machine_id_range.
    here: Pool,
    /// The service's layout as recorded (its never-registered hint).
    recorded: &'a Recorded,
}

/// The machine id a claim step got: its row, how it got it, and from whom.
struct ClaimedId {
    row: ClaimedRow,
    outcome: Outcome,
    /// The holder a take-back took the id from.
    previous: Option<RowFacts>,
    /// A reuse of the node's own row that it had released.
    was_released: bool,
}

/// Claims a machine id for `node` in the current transaction, as the extension owner: any free
/// one of the ids this server hands out for the service (its pool within idgen.machine_id_range),
/// or, for `wanted`, that one only (a fleet adopting the ids it already uses). `recorded` is the
/// service's layout, fixed before this transaction began. `function` names the SQL entry point in
/// messages; `who` is the role that called idgen. Ownership changes go into the history in this
/// transaction; a refusal comes back with its event for the caller to record where it survives the
/// error. (A refusal is the cold path: its size does not matter.)
#[allow(clippy::result_large_err)]
pub fn claim(
    client: &mut SpiClient,
    function: &str,
    node: &NodeIdentity,
    settings: &ClaimSettings,
    who: &Who,
    recorded: &Recorded,
    wanted: Option<u16>,
) -> Result<Granted, Refused> {
    let kind = if node.backend_slot.is_some() { HolderKind::Backend } else { HolderKind::Service };
    let policy = &settings.policy;
    let pool = recorded.service_layout.pool;
    let range = settings.machine_id_range();
    let mut notices = Vec::new();
    let refuse = |error| Refused { error, event: None, notices: Vec::new() };
    let here = pool.within(&range);
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
    let cx = Context { function, node, times, settings, who, here, recorded };
    durability::make_commit_durable();
    if settings.require_synchronous_standby && !store::synchronous_standby_streaming(client) {
        let error = messages::no_synchronous_standby(function);
        return Err(refused(&cx, EventKind::RefusedNoStandby, None, error, notices));
    }
    // A backend's lease is tied to its registry's epoch; a service node's is not.
    let epoch = if kind == HolderKind::Backend { store::read_epoch(client) } else { 0 };
    let now = SystemClock.now_unix_ms();
    // Most claims reuse the claimant's own row: a backend slot whose row the slot still holds, a node
    // restarting. No set-aside can precede that reuse (the identity holds at most one row,
    // system_nodes_node_identity, and it is reused only in the range and not too far ahead; with no
    // held row both set-asides find nothing), so it is tried first, alone. A backend reuses its held
    // row only (the statement a new backend plans the least); a node, its released row too.
    let reused = match kind {
        HolderKind::Backend => store::reuse_own_held_row(client, node, &times).map(|row| ClaimedId {
            row,
            outcome: Outcome::Reused,
            previous: None,
            was_released: false,
        }),
        HolderKind::Service => match store::reuse_own_row(client, node, &times) {
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
            store::release_own_row_outside_range(client, node, &times),
            store::release_own_row_ahead(client, node, &times).map(|own| WatermarkAhead {
                machine_id: own.machine_id,
                bound_unix_ms: unix_ms(own.bound),
                now_unix_ms: now,
                tolerance_ms: times.tolerance_ms,
                held_since_unix_ms: watermark::held_by_live_holder(
                    kind,
                    unix_ms(own.reported),
                    now,
                    times.tolerance_ms,
                )
                .then(|| unix_ms(own.last_seen)),
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
            && !store::take_identity_guard(client, node)
        {
            return Err(Refused { error: messages::identity_busy(function, node, None), event: None, notices });
        }
        match run_step(client, &cx, step, &mut notices) {
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
            record_set_aside(client, &cx, from, unix_ms(left_at), why);
        }
        if let Some(ahead) = &moved {
            notices.push(Notice::Warning(messages::moved_past_watermark(function, node, ahead, row.machine_id)));
            let why = if ahead.held_since_unix_ms.is_some() {
                "it was still held: its holder may be issuing until its lease ends"
            } else {
                "its bound (what its holders may have stamped) was further ahead than the claimant may wait"
            }
            .to_owned();
            record_set_aside(client, &cx, ahead.machine_id, ahead.bound_unix_ms, why);
        }
        let claimed_at_ms = unix_ms(row.claimed_at);
        let not_before_unix_ms = watermark::not_before(claimed_at_ms, row.bound.map(unix_ms));
        record_gain(client, &cx, &claimed_id, not_before_unix_ms);
        // Only claims that take a free id make the service fuller (a take-back from an idle
        // holder leaves it as full as it was, and the 1-hour tier alerts on its own); they also
        // announce that a level cleared, the next time one finds it so.
        if matches!(claimed_id.outcome, Outcome::New | Outcome::Released) || claimed_id.was_released {
            announce_capacity_change(client, &cx, row, &mut notices);
        }
        let claim = Claim {
            layout: recorded.service_layout.layout,
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
        store::soonest_tombstone_ahead(client, &node.service, &times).map(|(machine_id, bound)| WatermarkAhead {
            machine_id,
            bound_unix_ms: unix_ms(bound),
            now_unix_ms: now,
            tolerance_ms: times.tolerance_ms,
            held_since_unix_ms: None,
        })
    });
    if let Some(ahead) = ahead {
        let error = messages::watermark_ahead(function, node, &ahead);
        return Err(refused(&cx, EventKind::RefusedWatermark, Some(ahead.machine_id), error, notices));
    }
    if let Some(id) = wanted {
        // The one id asked for is someone else's (or its row is being written by another claim).
        let error = match store::current_row(client, &node.service, i32::from(id)) {
            Some(holder) => {
                let waiting_for = store::row_bound(client, &node.service, i32::from(id), &times).map(|(bound, now)| {
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
    let (held, oldest) = store::least_recently_seen(client, &node.service, &times);
    let (error, alert) =
        messages::exhausted(function, node, held, &here, &pool, policy.takeover_idle_1h_secs, oldest.as_ref());
    notices.push(Notice::Alert(alert));
    Err(refused(&cx, EventKind::RefusedFull, None, error, notices))
}

/// A refused claim, with the event that records it.
fn refused(cx: &Context, kind: EventKind, machine_id: Option<i32>, error: IdgenError, notices: Vec<Notice>) -> Refused {
    let mut event = history::event(kind, cx.node, cx.who);
    event.machine_id = machine_id;
    event.detail = Some(error.one_line());
    Refused { error, event: Some(event), notices }
}

/// Records that the claimant left its own machine id (with the watermark it left) to claim another.
fn record_set_aside(client: &mut SpiClient, cx: &Context, machine_id: i32, watermark_ms: i64, why: String) {
    let mut event = history::event(EventKind::SetAside, cx.node, cx.who);
    event.machine_id = Some(machine_id);
    event.issued_until = Some(iso_utc(watermark_ms));
    event.detail = Some(why);
    history::record(client, &event);
}

/// Records an ownership change, or a service node's restart: its claim of the row it still held
/// (a backend's reuse of its slot's row is neither; see `idgen_core::history`).
fn record_gain(client: &mut SpiClient, cx: &Context, claimed_id: &ClaimedId, not_before_unix_ms: i64) {
    let row = &claimed_id.row;
    // A backend slot's own row, held or released by its last backend's end: no change of holder.
    if claimed_id.outcome == Outcome::Reused && cx.node.backend_slot.is_some() {
        return;
    }
    if claimed_id.outcome == Outcome::Reused && !claimed_id.was_released {
        if !crate::privilege::installed_keeps_fleet_reports() {
            return;
        }
        let mut event = history::event(EventKind::Restart, cx.node, cx.who);
        event.machine_id = Some(row.machine_id);
        event.version = Some(row.version);
        event.outcome = Some(claimed_id.outcome.label());
        event.not_before = Some(iso_utc(not_before_unix_ms));
        event.previous_version = Some(row.version - 1);
        event.previous_bound =
            row.bound.filter(|b| !b.is_infinity() && !b.is_neg_infinity()).map(|bound| iso_utc(unix_ms(bound)));
        history::record(client, &event);
        return;
    }
    let mut event = history::event(EventKind::of_claim(claimed_id.outcome), cx.node, cx.who);
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
        event.previous_bound =
            row.bound.filter(|b| !b.is_infinity() && !b.is_neg_infinity()).map(|bound| iso_utc(unix_ms(bound)));
    }
    history::record(client, &event);
}

/// Alerts when the claim changed the service's capacity level from the one announced last: up
/// past `idgen.capacity_warning` or `idgen.capacity_critical`, or down below the level announced by
/// the margin (`fleet::level_change`); the history records each announcement, which later claims
/// compare with. Counting what is in use reads every row of the service: it is done only when a
/// level is announced or the highest registered machine id says enough rows could be in use to
/// pass one. One claim at a time announces (the service's capacity turn): claims that cross a
/// threshold together alert once.
fn announce_capacity_change(client: &mut SpiClient, cx: &Context, row: &ClaimedRow, notices: &mut Vec<Notice>) {
    let service = cx.node.service.as_str();
    let capacity = i64::from(cx.here.size());
    let levels = (cx.settings.capacity_warning, cx.settings.capacity_critical);
    let (warning, critical) = levels;
    // Before 0.10.0's objects, no announcement is recorded: every claim above a level alerts.
    let recorded = crate::privilege::installed_announces_capacity_changes();
    let announced = if recorded { store::capacity_announced(client, service) } else { None };
    let here_times =
        ClaimTerms { first_machine_id: i32::from(cx.here.first), last_machine_id: i32::from(cx.here.last), ..cx.times };
    let at_most = store::highest_registered(client, service, &here_times)
        .map_or(0, |highest| i64::from(highest) - i64::from(cx.here.first) + 1);
    if !fleet::level_may_change(announced, at_most, capacity, warning, critical) {
        return;
    }
    let cooldown = cx.settings.policy.release_cooldown_secs;
    let count = |client: &mut SpiClient| store::count_in_use(client, service, cooldown, &here_times);
    let mut in_use = count(client);
    if fleet::level_change(announced, in_use, capacity, warning, critical).is_none() {
        return;
    }
    let announced = if recorded {
        if store::take_capacity_turn(client, service) == store::CapacityTurn::Busy {
            return;
        }
        // Read both again with the turn: a claim that held it before may have announced a change,
        // and claims committed since the count.
        in_use = count(client);
        store::capacity_announced(client, service)
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
        let mut event = history::event(EventKind::of_capacity(change.level()), cx.node, cx.who);
        event.detail = Some(alert.message.clone());
        history::record(client, &event);
    }
    notices.push(Notice::Alert(alert));
}

fn run_step(
    client: &mut SpiClient,
    cx: &Context,
    step: ClaimStep,
    notices: &mut Vec<Notice>,
) -> Result<Option<ClaimedId>, IdgenError> {
    let (node, times) = (cx.node, &cx.times);
    let claimed = |row, outcome, previous| ClaimedId { row, outcome, previous, was_released: false };
    Ok(match step {
        ClaimStep::ReuseOwnRow => match store::reuse_own_row(client, node, times) {
            OwnRow::Claimed { row, was_released } => {
                Some(ClaimedId { row, outcome: Outcome::Reused, previous: None, was_released })
            }
            OwnRow::Busy(machine_id) => return Err(messages::identity_busy(cx.function, node, Some(machine_id))),
            OwnRow::Absent => None,
        },
        ClaimStep::NeverRegistered => never_registered(client, cx).map(|row| claimed(row, Outcome::New, None)),
        ClaimStep::ReleasedPastCooldown { cooldown_secs } => {
            store::take_over(client, node, TakeOverFrom::Released { cooldown_secs }, times)
                .map(|(row, previous)| claimed(row, Outcome::Released, Some(previous)))
        }
        ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, alert } => {
            let from = TakeOverFrom::Idle { min_idle_secs, cooldown_secs };
            store::take_over(client, node, from, times).map(|(row, previous)| {
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
const UNREGISTERED_BATCH: i32 = 64;

/// Claim step 2: the lowest machine id of the range with no row, in batches from the service's
/// hint (every id of its pool below the hint has a row), so that a claim in a pool of 65,536 with
/// half of it held looks at a few ids, not at the half. An id whose tombstone is further ahead than
/// the claimant may wait is skipped; a claimant that finds an id's guard taken, or its row written
/// meanwhile, tries the next. One pass is complete: only a hand DELETE removes a row, and its
/// tombstone guards the id. The hint moves up to the first id this claim did not see registered
/// (the statement checks that every id below it has a row).
fn never_registered(client: &mut SpiClient, cx: &Context) -> Option<ClaimedRow> {
    let (first, last) = (cx.times.first_machine_id, cx.times.last_machine_id);
    let hint =
        cx.recorded.unregistered_from.unwrap_or_else(|| super::layouts::unregistered_from(client, &cx.node.service));
    let pool_first = i32::from(cx.recorded.service_layout.pool.first);
    // The hint speaks of the ids from the pool's first; a range that starts past it searches alone.
    let contiguous = first <= hint.max(pool_first);
    let mut from = if contiguous { first.max(hint) } else { first };
    let mut unseen: Option<i32> = None;
    let version_base = store::read_version_base(client);
    while from <= last {
        let to = from.saturating_add(UNREGISTERED_BATCH - 1).min(last);
        for (machine_id, tombstone_ahead) in
            store::unregistered_machine_ids(client, &cx.node.service, from, to, &cx.times)
        {
            let row = if tombstone_ahead {
                None
            } else {
                store::insert_unregistered(client, cx.node, machine_id, &cx.times, version_base)
            };
            let Some(row) = row else {
                unseen.get_or_insert(machine_id);
                continue;
            };
            if contiguous {
                super::layouts::advance_unregistered_from(client, &cx.node.service, unseen.unwrap_or(machine_id + 1));
            }
            return Some(row);
        }
        from = to + 1;
    }
    None
}
