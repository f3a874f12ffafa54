//! Executes the core's claim policy against the registry, step by step. This
//! is the only claim path: `idgen_claim` calls it for service nodes, and
//! `backend` for each database backend's own lease.

use super::store::{self, ClaimTimes, OwnRow, Victims, Won};
use crate::clock::{unix_ms, SystemClock};
use crate::diagnostics;
use crate::diagnostics::history;
use crate::durability;
use crate::errors::report;
use crate::settings;
use idgen_core::generator::Clock;
use idgen_core::history::EventKind;
use idgen_core::input::NodeIdentity;
use idgen_core::messages::{self, iso_utc, RowFacts, WatermarkAhead};
use idgen_core::watermark::{self, HolderKind};
use idgen_core::{ClaimPolicy, ClaimStep, IdgenError, Outcome};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::spi::{Spi, SpiClient};
use pgrx::PgLogLevel;

/// A claimed machine id.
pub struct Claim {
    pub machine_id: i16,
    pub version: i64,
    pub outcome: Outcome,
    pub lease_until: TimestampWithTimeZone,
    /// The moment of the claim: the row's new `last_seen`.
    pub claimed_at: TimestampWithTimeZone,
    /// Unix ms after which the holder may stamp: after the claim, after every
    /// timestamp an earlier holder may have stamped, after the registry's floor.
    pub not_before_unix_ms: i64,
    /// The watermark the row holds now.
    pub issued_until: TimestampWithTimeZone,
    /// The registry's epoch the claim was made in.
    pub registry_epoch: i64,
}

/// What a claim needs to know beyond the policy.
struct Context<'a> {
    function: &'a str,
    node: &'a NodeIdentity,
    times: ClaimTimes,
    /// The role that called idgen, for the history.
    caller: pg_sys::Oid,
}

/// What a claim step won.
struct Gained {
    won: Won,
    outcome: Outcome,
    /// The holder a take-back took the id from.
    previous: Option<RowFacts>,
    /// A reuse of the node's own row that it had released.
    was_released: bool,
}

/// Claims a machine id for `node` in the caller's transaction. `function`
/// names the SQL entry point in messages; `max_clock_backward_ms` is how long
/// a backend may wait for a watermark; `caller` is the role that called idgen.
/// Ownership changes go into the history in this transaction; refusals are
/// recorded on their own, as the error will roll this transaction back.
pub fn claim(
    function: &str,
    node: &NodeIdentity,
    policy: &ClaimPolicy,
    max_clock_backward_ms: i64,
    caller: pg_sys::Oid,
) -> Result<Claim, IdgenError> {
    let kind = if node.backend_slot.is_some() { HolderKind::Backend } else { HolderKind::Service };
    let range = settings::machine_id_range();
    let times = ClaimTimes {
        lease_secs: policy.lease_secs(),
        tolerance_ms: watermark::tolerance_ms(kind, policy, max_clock_backward_ms),
        window_ms: watermark::claim_window_ms(kind, policy),
        takeover_idle_secs: policy.takeover_idle_1h_secs,
        first_machine_id: *range.start() as i16,
        last_machine_id: *range.end() as i16,
    };
    let cx = Context { function, node, times, caller };
    durability::make_commit_durable();
    Spi::connect_mut(|client| {
        if settings::require_synchronous_standby() && !store::synchronous_standby_streaming(client) {
            let error = messages::no_synchronous_standby(function);
            return Err(refused(client, &cx, EventKind::RefusedNoStandby, None, error));
        }
        let registry = store::read_registry(client);
        let now = SystemClock.now_unix_ms();
        let floor = registry.floor.map(unix_ms);
        if !watermark::usable(floor, now, times.tolerance_ms) {
            let error = messages::registry_floor_ahead(function, floor.unwrap_or(now), now);
            return Err(refused(client, &cx, EventKind::RefusedWatermark, None, error));
        }
        // Most claims are a new connection in a backend slot whose row the slot still holds. No set-aside
        // can precede the reuse of a held row (the identity holds at most one, system_nodes_node_identity,
        // and it is reused only in the range and not too far ahead), so that is tried first, alone: such
        // a claim is then this statement and the floor's read above. Anything else takes the steps below.
        let reused = store::reuse_own_held_row(client, node, &times).map(|won| Gained {
            won,
            outcome: Outcome::Reused,
            previous: None,
            was_released: false,
        });
        let (outside, moved) = match reused {
            Some(_) => (None, None),
            None => (
                store::release_own_row_outside_range(client, node, &times),
                store::release_own_row_ahead(client, node, &times).map(|(machine_id, bound)| WatermarkAhead {
                    machine_id,
                    bound_unix_ms: unix_ms(bound),
                    now_unix_ms: now,
                    tolerance_ms: times.tolerance_ms,
                }),
            ),
        };
        let mut gained = reused;
        let mut guarded = false;
        for step in policy.steps() {
            if gained.is_some() {
                break;
            }
            // A node's own row serialises its claims exactly (row lock); every other step gives the
            // identity a row it does not have yet, so claims of the identity take turns on its guard.
            if step != ClaimStep::ReuseOwnRow
                && !std::mem::replace(&mut guarded, true)
                && !store::take_identity_guard(client, node)
            {
                return Err(messages::identity_busy(function, node, None));
            }
            gained = run_step(client, &cx, step)?;
        }
        if let Some(gained) = gained {
            let won = &gained.won;
            if let Some((from, left_at)) = outside {
                report(messages::moved_into_range(function, node, from, &range, won.machine_id), PgLogLevel::WARNING);
                let why = format!("outside idgen.machine_id_range ({}-{})", range.start(), range.end());
                record_set_aside(client, &cx, from, unix_ms(left_at), why);
            }
            if let Some(ahead) = &moved {
                report(messages::moved_past_watermark(function, node, ahead, won.machine_id), PgLogLevel::WARNING);
                let why = "its watermark was further ahead than the claimant may wait".to_owned();
                record_set_aside(client, &cx, ahead.machine_id, ahead.bound_unix_ms, why);
            }
            let claimed_at_ms = unix_ms(won.claimed_at);
            let not_before_unix_ms = watermark::not_before(claimed_at_ms, won.bound.map(unix_ms), floor);
            record_gain(client, &cx, &gained, not_before_unix_ms);
            // Only claims that take a free id make the service fuller (a take-back from an idle
            // holder leaves it as full as it was, and the 1-hour tier alerts on its own).
            if matches!(gained.outcome, Outcome::New | Outcome::Released) || gained.was_released {
                alert_if_nearly_full(client, &cx, policy, won);
            }
            return Ok(Claim {
                machine_id: won.machine_id,
                version: won.version,
                outcome: gained.outcome,
                lease_until: won.lease_until,
                claimed_at: won.claimed_at,
                not_before_unix_ms,
                issued_until: won.issued_until,
                registry_epoch: registry.epoch,
            });
        }
        if let Some(ahead) = moved {
            // Nothing else is free: the set-aside row must not stay released by a claim that failed.
            let error = messages::watermark_ahead(function, node, &ahead);
            return Err(refused(client, &cx, EventKind::RefusedWatermark, Some(ahead.machine_id), error));
        }
        let (held, oldest) = store::least_recently_seen(client, &node.service, &times);
        let (error, alert) =
            messages::exhausted(function, node, held, &range, policy.takeover_idle_1h_secs, oldest.as_ref());
        diagnostics::alert_before_error(&alert);
        Err(refused(client, &cx, EventKind::RefusedFull, None, error))
    })
}

/// Records a refused claim where it outlives the rollback the error brings, and passes the error on.
fn refused(
    client: &mut SpiClient,
    cx: &Context,
    kind: EventKind,
    machine_id: Option<i16>,
    error: IdgenError,
) -> IdgenError {
    let mut event = history::event(kind, cx.node, cx.caller);
    event.machine_id = machine_id;
    event.detail = Some(history::told_text(&error));
    history::record_independently(client, event);
    error
}

/// Records that the claimant left its own machine id (with the watermark it left) to claim another.
fn record_set_aside(client: &mut SpiClient, cx: &Context, machine_id: i16, watermark_ms: i64, why: String) {
    let mut event = history::event(EventKind::SetAside, cx.node, cx.caller);
    event.machine_id = Some(machine_id);
    event.issued_until = Some(iso_utc(watermark_ms));
    event.detail = Some(why);
    history::record(client, &event);
}

/// Records an ownership change. A reuse of a held row is not one (see `idgen_core::history`).
fn record_gain(client: &mut SpiClient, cx: &Context, gained: &Gained, not_before_unix_ms: i64) {
    if gained.outcome == Outcome::Reused && !gained.was_released {
        return;
    }
    let won = &gained.won;
    let mut event = history::event(EventKind::of_claim(gained.outcome), cx.node, cx.caller);
    event.machine_id = Some(won.machine_id);
    event.version = Some(won.version);
    event.outcome = Some(gained.outcome.label());
    event.not_before = Some(iso_utc(not_before_unix_ms));
    if let Some(previous) = &gained.previous {
        event.previous_host = Some(previous.host.clone());
        event.previous_port = Some(previous.port);
        event.previous_backend_slot = previous.backend_slot;
        event.previous_version = Some(previous.version);
        event.previous_idle_seconds = Some(previous.idle_secs);
        event.previous_bound =
            won.bound.filter(|b| !b.is_infinity() && !b.is_neg_infinity()).map(|bound| iso_utc(unix_ms(bound)));
    }
    history::record(client, &event);
}

/// Alerts when the claim left the service more than `idgen.capacity_alert` full.
fn alert_if_nearly_full(client: &mut SpiClient, cx: &Context, policy: &ClaimPolicy, won: &Won) {
    let capacity = i64::from(cx.times.last_machine_id) - i64::from(cx.times.first_machine_id) + 1;
    let threshold = settings::capacity_alert();
    let in_use = store::count_in_use(client, &cx.node.service, policy.release_cooldown_secs, &cx.times);
    if in_use as f64 / capacity as f64 > threshold {
        let alert =
            messages::capacity_alert(cx.function, cx.node, won.machine_id, won.version, in_use, capacity, threshold);
        diagnostics::alert(&alert);
    }
}

fn run_step(client: &mut SpiClient, cx: &Context, step: ClaimStep) -> Result<Option<Gained>, IdgenError> {
    let (node, times) = (cx.node, &cx.times);
    let gained = |won, outcome, previous| Gained { won, outcome, previous, was_released: false };
    Ok(match step {
        ClaimStep::ReuseOwnRow => match store::reuse_own_row(client, node, times) {
            OwnRow::Won { won, was_released } => {
                Some(Gained { won, outcome: Outcome::Reused, previous: None, was_released })
            }
            OwnRow::Busy(machine_id) => return Err(messages::identity_busy(cx.function, node, Some(machine_id))),
            OwnRow::Absent => None,
        },
        ClaimStep::NeverRegistered => {
            let (first, last) = (times.first_machine_id as u16, times.last_machine_id as u16);
            let candidates = store::unregistered_machine_ids(client, &node.service, first, last);
            // One pass is complete: rows are never deleted by idgen, so no id frees up behind us.
            candidates
                .into_iter()
                .find_map(|machine_id| store::insert_unregistered(client, node, machine_id, times))
                .map(|won| gained(won, Outcome::New, None))
        }
        ClaimStep::ReleasedPastCooldown { cooldown_secs } => {
            store::take_over(client, node, Victims::Released { cooldown_secs }, times)
                .map(|(won, previous)| gained(won, Outcome::Released, Some(previous)))
        }
        ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, alert } => {
            let victims = Victims::Idle { min_idle_secs, cooldown_secs };
            store::take_over(client, node, victims, times).map(|(won, previous)| {
                if alert {
                    let alert =
                        messages::takeover_alert(cx.function, outcome, node, won.machine_id, won.version, &previous);
                    diagnostics::alert(&alert);
                }
                gained(won, outcome, Some(previous))
            })
        }
    })
}
