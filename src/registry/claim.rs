//! Executes the core's claim policy against the registry, step by step. This
//! is the only claim path: `idgen_claim` calls it for service nodes, and
//! `backend` for each database backend's own lease.

use super::store::{self, ClaimTimes, OwnRow, Victims, Won};
use crate::clock::{unix_ms, SystemClock};
use crate::diagnostics;
use crate::errors::report;
use idgen_core::generator::Clock;
use idgen_core::input::NodeIdentity;
use idgen_core::messages::{self, WatermarkAhead};
use idgen_core::watermark::{self, HolderKind};
use idgen_core::{ClaimPolicy, ClaimStep, IdgenError, Layout, Outcome};
use pgrx::datum::TimestampWithTimeZone;
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
    layout: &'a Layout,
    times: ClaimTimes,
}

/// Claims a machine id for `node` in the caller's transaction. `function`
/// names the SQL entry point in messages; `max_clock_backward_ms` is how long
/// a backend may wait for a watermark.
pub fn claim(
    function: &str,
    node: &NodeIdentity,
    policy: &ClaimPolicy,
    layout: &Layout,
    max_clock_backward_ms: i64,
) -> Result<Claim, IdgenError> {
    let kind = if node.backend_slot.is_some() { HolderKind::Backend } else { HolderKind::Service };
    let times = ClaimTimes {
        lease_secs: policy.lease_secs(),
        tolerance_ms: watermark::tolerance_ms(kind, policy, max_clock_backward_ms),
        window_ms: watermark::claim_window_ms(kind, policy),
        takeover_idle_secs: policy.takeover_idle_1h_secs,
    };
    let cx = Context { function, node, layout, times };
    Spi::connect_mut(|client| {
        let registry = store::read_registry(client);
        let now = SystemClock.now_unix_ms();
        let floor = registry.floor.map(unix_ms);
        if !watermark::usable(floor, now, times.tolerance_ms) {
            return Err(messages::registry_floor_ahead(function, floor.unwrap_or(now), now));
        }
        let moved = store::release_own_row_ahead(client, node, &times).map(|(machine_id, bound)| WatermarkAhead {
            machine_id,
            bound_unix_ms: unix_ms(bound),
            now_unix_ms: now,
            tolerance_ms: times.tolerance_ms,
        });
        let mut guarded = false;
        for step in policy.steps() {
            // A node's own row serialises its claims exactly (row lock); every other step gives the
            // identity a row it does not have yet, so claims of the identity take turns on its guard.
            if step != ClaimStep::ReuseOwnRow
                && !std::mem::replace(&mut guarded, true)
                && !store::take_identity_guard(client, node)
            {
                return Err(messages::identity_busy(function, node, None));
            }
            if let Some((won, outcome)) = run_step(client, &cx, step)? {
                if let Some(ahead) = &moved {
                    report(messages::moved_past_watermark(function, node, ahead, won.machine_id), PgLogLevel::WARNING);
                }
                let claimed_at_ms = unix_ms(won.claimed_at);
                return Ok(Claim {
                    machine_id: won.machine_id,
                    version: won.version,
                    outcome,
                    lease_until: won.lease_until,
                    claimed_at: won.claimed_at,
                    not_before_unix_ms: watermark::not_before(claimed_at_ms, won.bound.map(unix_ms), floor),
                    issued_until: won.issued_until,
                    registry_epoch: registry.epoch,
                });
            }
        }
        if let Some(ahead) = moved {
            // Nothing else is free: the set-aside row must not stay released by a claim that failed.
            return Err(messages::watermark_ahead(function, node, &ahead));
        }
        let (held, oldest) = store::least_recently_seen(client, &node.service);
        let (error, alert) = messages::exhausted(
            function,
            node,
            held,
            layout.max_machine_id(),
            policy.takeover_idle_1h_secs,
            oldest.as_ref(),
        );
        diagnostics::alert_before_error(&alert);
        Err(error)
    })
}

fn run_step(client: &mut SpiClient, cx: &Context, step: ClaimStep) -> Result<Option<(Won, Outcome)>, IdgenError> {
    let (node, times) = (cx.node, &cx.times);
    Ok(match step {
        ClaimStep::ReuseOwnRow => match store::reuse_own_row(client, node, times) {
            OwnRow::Won(won) => Some((won, Outcome::Reused)),
            OwnRow::Busy(machine_id) => return Err(messages::identity_busy(cx.function, node, Some(machine_id))),
            OwnRow::Absent => None,
        },
        ClaimStep::NeverRegistered => {
            let range = cx.layout.machine_id_range();
            let candidates = store::unregistered_machine_ids(client, &node.service, *range.start(), *range.end());
            // One pass is complete: rows are never deleted by idgen, so no id frees up behind us.
            candidates
                .into_iter()
                .find_map(|machine_id| store::insert_unregistered(client, node, machine_id, times))
                .map(|won| (won, Outcome::New))
        }
        ClaimStep::ReleasedPastCooldown { cooldown_secs } => {
            store::take_over(client, node, Victims::Released { cooldown_secs }, times)
                .map(|(won, _previous)| (won, Outcome::Released))
        }
        ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, alert } => {
            let victims = Victims::Idle { min_idle_secs, cooldown_secs };
            store::take_over(client, node, victims, times).map(|(won, previous)| {
                if alert {
                    let alert =
                        messages::takeover_alert(cx.function, outcome, node, won.machine_id, won.version, &previous);
                    diagnostics::alert(&alert);
                }
                (won, outcome)
            })
        }
    })
}
