//! The idgen.* settings. Only a superuser may change them (PGC_SUSET); each has
//! a range here, and the core's `ClaimPolicy::validate` checks how they relate.

use idgen_core::policy::DAY;
use idgen_core::{ClaimPolicy, IdgenError};
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

const DEFAULTS: ClaimPolicy = ClaimPolicy::DEFAULT;

pub static TAKEOVER_IDLE_7D: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_7d_secs as i32);
pub static TAKEOVER_IDLE_1D: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_1d_secs as i32);
pub static TAKEOVER_IDLE_1H: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_1h_secs as i32);
pub static RELEASE_COOLDOWN: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.release_cooldown_secs as i32);
pub static HEARTBEAT_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.heartbeat_interval_secs as i32);
pub static LEASE_SAFETY_MARGIN: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.lease_safety_margin_secs as i32);

/// Registers the settings; called from `_PG_init`.
pub fn register() {
    let seconds = |name, short, long, setting, min: i64, max: i64| {
        GucRegistry::define_int_guc(
            name,
            short,
            long,
            setting,
            min as i32,
            max as i32,
            GucContext::Suset,
            GucFlags::UNIT_S,
        );
    };
    seconds(
        c"idgen.takeover_idle_7d",
        c"Idle age after which a claim takes back a machine id first (tier idle_7d).",
        c"When no machine id of a service is free, idgen_claim takes back the least recently seen one idle longer than this.",
        &TAKEOVER_IDLE_7D, 2, 365 * DAY,
    );
    seconds(
        c"idgen.takeover_idle_1d",
        c"Idle age for the second take-back tier (idle_1d).",
        c"Used when no machine id is idle longer than idgen.takeover_idle_7d. Must be shorter than it.",
        &TAKEOVER_IDLE_1D,
        2,
        365 * DAY,
    );
    seconds(
        c"idgen.takeover_idle_1h",
        c"Idle age for the last take-back tier (idle_1h), which also raises an alert.",
        c"Also the basis of every lease: a holder stops issuing IDs this long, less idgen.lease_safety_margin, after its last heartbeat.",
        &TAKEOVER_IDLE_1H, 2, 365 * DAY,
    );
    seconds(
        c"idgen.release_cooldown",
        c"How long a released machine id waits before another node may take it.",
        c"Covers clock skew between the releasing node and the next holder. The releasing node itself may claim it back at once.",
        &RELEASE_COOLDOWN, 0, DAY,
    );
    seconds(
        c"idgen.heartbeat_interval",
        c"How often a holder must heartbeat its machine id.",
        c"Must be shorter than the lease (idgen.takeover_idle_1h minus idgen.lease_safety_margin).",
        &HEARTBEAT_INTERVAL,
        1,
        DAY,
    );
    seconds(
        c"idgen.lease_safety_margin",
        c"How much earlier than the shortest take-back age a holder must stop issuing IDs.",
        c"lease_until = last heartbeat + idgen.takeover_idle_1h - this margin. Covers clock skew and heartbeat latency.",
        &LEASE_SAFETY_MARGIN, 0, DAY,
    );
}

/// The policy the registry runs by now, refused when the settings contradict each other.
pub fn claim_policy() -> Result<ClaimPolicy, IdgenError> {
    let policy = ClaimPolicy {
        takeover_idle_7d_secs: TAKEOVER_IDLE_7D.get().into(),
        takeover_idle_1d_secs: TAKEOVER_IDLE_1D.get().into(),
        takeover_idle_1h_secs: TAKEOVER_IDLE_1H.get().into(),
        release_cooldown_secs: RELEASE_COOLDOWN.get().into(),
        heartbeat_interval_secs: HEARTBEAT_INTERVAL.get().into(),
        lease_safety_margin_secs: LEASE_SAFETY_MARGIN.get().into(),
    };
    policy.validate()?;
    Ok(policy)
}
