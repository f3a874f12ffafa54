//! Time watermarks: what every holder of a machine id must know about the
//! timestamps earlier holders may have stamped.
//!
//! The invariant: every timestamp a later holder of a machine id stamps is
//! strictly greater than every timestamp any earlier holder stamped. Memory
//! does not survive a holder, so the registry keeps, per machine id, an upper
//! bound of what its holders may have stamped (`system_nodes.issued_until`),
//! and every claim returns `not_before`, the time after which the new holder
//! may stamp.
//!
//! - **Backends** write the end of the window they may issue in before their
//!   next lease check, before issuing in it: the bound holds by construction.
//!   The window grows with the lease's age (see [`backend_window_ms`]), so a
//!   short-lived connection leaves a watermark only a few milliseconds ahead
//!   and the next connection in its slot need not wait.
//! - **Services** report their own watermark, measured on their clock, with
//!   each heartbeat and release (see [`check_reported_watermark`]).
//! - The registry only ever raises it (`greatest`), whatever a reporter says.

use crate::error::{IdgenError, SqlState};
use crate::messages::iso_utc;
use crate::policy::{human_duration, ClaimPolicy, DAY};

/// The shortest window a backend claims or renews: long enough to issue a
/// first ID after the claim's millisecond, short enough that the next
/// connection in the slot rarely waits for it.
pub const MIN_BACKEND_WINDOW_MS: i64 = 4;

/// A reported watermark further ahead of the server clock than this is not a
/// clock anyone should trust: it is refused, not recorded.
pub const MAX_REPORTED_AHEAD_SECS: i64 = DAY;

/// Who holds a machine id: the two kinds wait for a watermark in different places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderKind {
    /// A database backend: it waits inside the caller's statement.
    Backend,
    /// A service node: it waits before it starts issuing, outside the database.
    Service,
}

/// The window a backend may issue in after a write to the registry: as long as
/// the lease is old, at least [`MIN_BACKEND_WINDOW_MS`], at most one heartbeat
/// interval. Renewals are then logarithmic in a lease's first interval and one
/// per interval after it.
pub fn backend_window_ms(policy: &ClaimPolicy, lease_age_ms: i64) -> i64 {
    let heartbeat_ms = policy.heartbeat_interval_secs.saturating_mul(1000);
    lease_age_ms.clamp(MIN_BACKEND_WINDOW_MS, heartbeat_ms.max(MIN_BACKEND_WINDOW_MS))
}

/// The window a claim grants before the holder's next write: a backend's
/// shortest window; a service reports its own watermark, so none.
pub fn claim_window_ms(kind: HolderKind, policy: &ClaimPolicy) -> i64 {
    match kind {
        HolderKind::Backend => backend_window_ms(policy, 0),
        HolderKind::Service => 0,
    }
}

/// How far ahead of the claim a machine id's watermark may be for the claim to
/// keep it and have the holder wait. A backend waits as it waits out a small
/// clock step back (`idgen.max_clock_backward`); a service may wait up to the
/// clock skew the lease already allows between hosts (`idgen.lease_safety_margin`).
pub fn tolerance_ms(kind: HolderKind, policy: &ClaimPolicy, max_clock_backward_ms: i64) -> i64 {
    match kind {
        HolderKind::Backend => max_clock_backward_ms,
        HolderKind::Service => policy.lease_safety_margin_secs.saturating_mul(1000),
    }
}

/// The time after which a new holder may stamp: after its claim, after every
/// timestamp an earlier holder of the id may have used (`bound`), and after
/// the registry's floor (see the README: rows removed while holders lived).
pub fn not_before(claimed_at_unix_ms: i64, bound_unix_ms: Option<i64>, floor_unix_ms: Option<i64>) -> i64 {
    claimed_at_unix_ms.max(bound_unix_ms.unwrap_or(i64::MIN)).max(floor_unix_ms.unwrap_or(i64::MIN))
}

/// Whether a watermark lets a claim made at `now` keep the machine id.
pub fn usable(bound_unix_ms: Option<i64>, now_unix_ms: i64, tolerance_ms: i64) -> bool {
    bound_unix_ms.is_none_or(|bound| bound <= now_unix_ms.saturating_add(tolerance_ms))
}

/// Checks a watermark a service reports with a heartbeat or release.
pub fn check_reported_watermark(function: &str, reported_unix_ms: i64, now_unix_ms: i64) -> Result<(), IdgenError> {
    let ahead_ms = reported_unix_ms.saturating_sub(now_unix_ms);
    if ahead_ms <= MAX_REPORTED_AHEAD_SECS * 1000 {
        return Ok(());
    }
    Err(IdgenError::new(
        SqlState::InvalidParameterValue,
        format!("{function}: argument \"issued_until\" is too far in the future"),
    )
    .detail(format!(
        "Got {}, {} ahead of the server clock ({}); a watermark more than {} ahead is refused. Nothing was changed.",
        iso_utc(reported_unix_ms),
        human_duration(ahead_ms / 1000),
        iso_utc(now_unix_ms),
        human_duration(MAX_REPORTED_AHEAD_SECS)
    ))
    .hint("Check the node's clock (NTP). The node must not issue IDs past its lease deadline unless a heartbeat succeeds."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MINUTE;

    const P: ClaimPolicy = ClaimPolicy::DEFAULT;

    #[test]
    fn a_backend_window_grows_with_the_lease_up_to_one_heartbeat_interval() {
        assert_eq!(backend_window_ms(&P, 0), MIN_BACKEND_WINDOW_MS);
        assert_eq!(backend_window_ms(&P, 1), MIN_BACKEND_WINDOW_MS);
        assert_eq!(backend_window_ms(&P, 750), 750);
        assert_eq!(backend_window_ms(&P, 3 * 60 * 60 * 1000), 5 * MINUTE * 1000);
        // A lease renewed at the end of each window: 4, 8, 16, ... ms, then every 5 minutes.
        let (mut age, mut renewals) = (0i64, 0);
        while age < 5 * MINUTE * 1000 {
            age += backend_window_ms(&P, age);
            renewals += 1;
        }
        assert!(renewals <= 18, "{renewals} renewals before the window reaches the heartbeat interval");
    }

    #[test]
    fn not_before_is_the_latest_of_claim_watermark_and_floor() {
        assert_eq!(not_before(100, None, None), 100);
        assert_eq!(not_before(100, Some(40), Some(70)), 100);
        assert_eq!(not_before(100, Some(140), Some(70)), 140);
        assert_eq!(not_before(100, Some(140), Some(170)), 170);
    }

    #[test]
    fn a_watermark_is_usable_up_to_the_tolerance_and_not_past_it() {
        let tolerance = tolerance_ms(HolderKind::Backend, &P, 2_000);
        assert_eq!(tolerance, 2_000);
        assert!(usable(None, 1_000, tolerance));
        assert!(usable(Some(3_000), 1_000, tolerance));
        assert!(!usable(Some(3_001), 1_000, tolerance));
        // A service may wait out the skew the lease margin allows: 5 minutes by default.
        assert_eq!(tolerance_ms(HolderKind::Service, &P, 2_000), 5 * MINUTE * 1000);
    }

    #[test]
    fn a_reported_watermark_more_than_a_day_ahead_is_refused_with_the_facts() {
        let now = 1_800_000_000_000;
        assert!(check_reported_watermark("idgen_heartbeat", now + DAY * 1000, now).is_ok());
        assert!(check_reported_watermark("idgen_heartbeat", now - 10 * DAY * 1000, now).is_ok(), "low is harmless");
        let err = check_reported_watermark("idgen_heartbeat", now + DAY * 1000 + 1_000, now).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::InvalidParameterValue);
        assert_eq!(err.message, "idgen_heartbeat: argument \"issued_until\" is too far in the future");
        let detail = err.detail.unwrap();
        assert!(detail.contains("1d 1s ahead of the server clock (2027-01-15T08:00:00.000Z)"), "{detail}");
    }
}
