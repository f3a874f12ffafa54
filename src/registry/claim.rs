//! Executes the core's claim policy against the registry, step by step. This
//! is the only claim path: `idgen_claim` calls it for service nodes, and
//! `backend` for each database backend's own lease.

use super::store::{self, OwnRow, Victims, Won};
use crate::diagnostics;
use idgen_core::input::NodeIdentity;
use idgen_core::messages;
use idgen_core::{ClaimPolicy, ClaimStep, IdgenError, Layout, Outcome};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::{Spi, SpiClient};

/// A claimed machine id.
pub struct Claim {
    pub machine_id: i16,
    pub version: i32,
    pub outcome: Outcome,
    pub lease_until: TimestampWithTimeZone,
    /// The moment of the claim: the row's new `last_seen`.
    pub claimed_at: TimestampWithTimeZone,
}

/// Claims a machine id for `node` in the caller's transaction. `function`
/// names the SQL entry point in messages.
pub fn claim(function: &str, node: &NodeIdentity, policy: &ClaimPolicy, layout: &Layout) -> Result<Claim, IdgenError> {
    Spi::connect_mut(|client| {
        if !store::try_lock_identity(client, node) {
            return Err(messages::identity_busy(function, node, None));
        }
        for step in policy.steps() {
            if let Some(claim) = run_step(client, function, node, policy, layout, step)? {
                return Ok(claim);
            }
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

fn run_step(
    client: &mut SpiClient,
    function: &str,
    node: &NodeIdentity,
    policy: &ClaimPolicy,
    layout: &Layout,
    step: ClaimStep,
) -> Result<Option<Claim>, IdgenError> {
    let lease_secs = policy.lease_secs();
    let claim = |won: Won, outcome| Claim {
        machine_id: won.machine_id,
        version: won.version,
        outcome,
        lease_until: won.lease_until,
        claimed_at: won.claimed_at,
    };
    Ok(match step {
        ClaimStep::ReuseOwnRow => match store::reuse_own_row(client, node, lease_secs) {
            OwnRow::Won(won) => Some(claim(won, Outcome::Reused)),
            OwnRow::Busy(machine_id) => return Err(messages::identity_busy(function, node, Some(machine_id))),
            OwnRow::Absent => None,
        },
        ClaimStep::NeverRegistered => {
            let range = layout.machine_id_range();
            let candidates = store::unregistered_machine_ids(client, &node.service, *range.start(), *range.end());
            // One pass is complete: rows are never deleted by idgen, so no id frees up behind us.
            candidates
                .into_iter()
                .find_map(|machine_id| store::insert_unregistered(client, node, machine_id, lease_secs))
                .map(|won| claim(won, Outcome::New))
        }
        ClaimStep::ReleasedPastCooldown { cooldown_secs } => {
            store::take_over(client, node, Victims::Released { cooldown_secs }, lease_secs)
                .map(|(won, _previous)| claim(won, Outcome::Released))
        }
        ClaimStep::IdleTakeover { outcome, min_idle_secs, cooldown_secs, alert } => {
            let victims = Victims::Idle { min_idle_secs, cooldown_secs };
            store::take_over(client, node, victims, lease_secs).map(|(won, previous)| {
                if alert {
                    let alert =
                        messages::takeover_alert(function, outcome, node, won.machine_id, won.version, &previous);
                    diagnostics::alert(&alert);
                }
                claim(won, outcome)
            })
        }
    })
}
