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
//!   next lease check, and issue in it only once that write has committed: the
//!   bound holds by construction, whatever the caller's transaction does. The
//!   window grows with the lease's age (see [`backend_window_ms`]). When a
//!   backend stops (it disconnects, or its session drops the extension), it
//!   records its last stamp instead ([`crate::lease::BackendLease::closing_watermark_unix_ms`]),
//!   so that the next connection in its slot need not wait for the window.
//! - **Services** report their own watermark, measured on their clock, with
//!   each heartbeat and release. A report far ahead is kept, with a warning
//!   ([`reported_far_ahead`]): refusing it would forget stamps already made.
//! - The registry only ever raises it (`greatest`), whatever a reporter says;
//!   only a backend's own closing record lowers its own window to its last stamp.

use crate::error::{IdgenError, SqlState};
use crate::format::{human_duration, iso_utc};
use crate::policy::{ClaimPolicy, DAY};

/// The shortest window a backend claims or renews. Every write behind a window
/// commits in a transaction of its own (a few milliseconds), so a window is
/// long enough for a connection's first second of IDs; a backend that stops
/// records its last stamp, so the next connection in its slot does not wait.
pub const MIN_BACKEND_WINDOW_MS: i64 = 1_000;

/// A reported watermark further ahead of the server clock than this comes from
/// a clock nobody should trust: it is kept (the node may have stamped up to it),
/// and the caller and the server log are warned.
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

/// The time after which a new holder may stamp: after its claim, and after every
/// timestamp an earlier holder of the id may have used (`bound`: the row's, or
/// for an id whose row was removed by hand, its tombstone's).
pub fn not_before(claimed_at_unix_ms: i64, bound_unix_ms: Option<i64>) -> i64 {
    claimed_at_unix_ms.max(bound_unix_ms.unwrap_or(i64::MIN))
}

/// Whether a watermark lets a claim made at `now` keep the machine id.
pub fn usable(bound_unix_ms: Option<i64>, now_unix_ms: i64, tolerance_ms: i64) -> bool {
    bound_unix_ms.is_none_or(|bound| bound <= now_unix_ms.saturating_add(tolerance_ms))
}

/// A watermark a service reports with a heartbeat or release, when it is further ahead of
/// the server clock than any sane clock: a WARNING. The watermark is kept all the same: the
/// node may have stamped up to it, and only that node's machine id waits for it.
pub fn reported_far_ahead(
    function: &str,
    machine_id: i32,
    reported_unix_ms: i64,
    now_unix_ms: i64,
) -> Option<IdgenError> {
    let ahead_ms = reported_unix_ms.saturating_sub(now_unix_ms);
    if ahead_ms <= MAX_REPORTED_AHEAD_SECS * 1000 {
        return None;
    }
    Some(
        IdgenError::new(
            SqlState::Warning,
            format!("{function}: argument \"issued_until\" is {} ahead of the server clock", human_duration(ahead_ms / 1000)),
        )
        .detail(format!(
            "Got {}; the server clock reads {}. The watermark was kept: no other node gets machine id {machine_id} before that time.",
            iso_utc(reported_unix_ms),
            iso_utc(now_unix_ms)
        ))
        .hint("Check the node's clock (NTP). Its IDs carry that time; correct the clock, then restart the node (it moves to another machine id)."),
    )
}

/// How far behind the registry's watermark a report may be without a warning: a node's clock
/// may be slewed or stepped back a little, and its report is then a little behind its last one.
pub const MAX_REPORTED_BEHIND_MS: i64 = 1_000;

/// A watermark a service reports that is behind what the registry already holds for its
/// machine id (`registry_unix_ms`: its claim's `not_before` or an earlier report): a correct
/// node reports its last stamp or its clock, whichever is later, which never goes back that
/// far. Its clock is behind, or it sends local time as UTC, and it may stamp times an earlier
/// holder used. A WARNING; the registry keeps its own, greater, watermark.
pub fn reported_behind(
    function: &str,
    machine_id: i32,
    reported_unix_ms: i64,
    registry_unix_ms: i64,
    now_unix_ms: i64,
) -> Option<IdgenError> {
    let behind_ms = registry_unix_ms.saturating_sub(reported_unix_ms);
    if behind_ms <= MAX_REPORTED_BEHIND_MS {
        return None;
    }
    Some(
        IdgenError::new(
            SqlState::Warning,
            format!(
                "{function}: argument \"issued_until\" is {} behind the watermark the registry holds for machine id {machine_id}",
                human_duration(behind_ms / 1000)
            ),
        )
        .detail(format!(
            "Got {}; the registry holds {} (the claim's not_before or an earlier report), and the server clock reads {}. A node's watermark is its last stamp or its clock, whichever is later: it never goes back. The registry keeps its own.",
            iso_utc(reported_unix_ms),
            iso_utc(registry_unix_ms),
            iso_utc(now_unix_ms)
        ))
        .hint("Check the node's clock (NTP) and that it reports UTC (timestamptz, not local time as UTC). A node stamping behind not_before may repeat IDs of the id's earlier holder: stop it, fix the clock, restart it."),
    )
}

/// Whether the bound of a claimant's own held row comes from its holder's lease rather than from
/// what it reported: a service node whose report is within the claimant's tolerance while its
/// lease runs on is alive, or may be (an earlier process of the identity, or a second one). A
/// backend's bound is its window, what it may have stamped.
pub fn held_by_live_holder(kind: HolderKind, reported_unix_ms: i64, now_unix_ms: i64, tolerance_ms: i64) -> bool {
    kind == HolderKind::Service && reported_unix_ms <= now_unix_ms + tolerance_ms
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
        assert_eq!(backend_window_ms(&P, 7_500), 7_500);
        assert_eq!(backend_window_ms(&P, 3 * 60 * 60 * 1000), 5 * MINUTE * 1000);
        // A lease renewed at the end of each window: 1, 2, 4, ... s, then every 5 minutes. Each renewal is
        // a transaction of its own, so a connection's first second of IDs costs one write.
        let (mut age, mut renewals) = (0i64, 0);
        while age < 5 * MINUTE * 1000 {
            age += backend_window_ms(&P, age);
            renewals += 1;
        }
        assert_eq!(renewals, 10, "renewals before the window reaches the heartbeat interval");
    }

    #[test]
    fn not_before_is_the_latest_of_claim_and_watermark() {
        assert_eq!(not_before(100, None), 100);
        assert_eq!(not_before(100, Some(40)), 100);
        assert_eq!(not_before(100, Some(140)), 140);
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
    fn a_reported_watermark_more_than_a_day_ahead_is_kept_with_a_warning() {
        let now = 1_800_000_000_000;
        assert_eq!(reported_far_ahead("idgen_heartbeat", 3, now + DAY * 1000, now), None);
        assert_eq!(reported_far_ahead("idgen_heartbeat", 3, now - 10 * DAY * 1000, now), None, "low is harmless");
        assert_eq!(
            reported_behind("idgen_heartbeat", 3, now - 1_000, now, now),
            None,
            "a little behind is a slewed clock"
        );
        assert_eq!(reported_behind("idgen_heartbeat", 3, now + 5_000, now, now), None);
        let behind = reported_behind("idgen_heartbeat", 3, 0, now, now + 7).unwrap();
        assert_eq!(behind.sqlstate.code(), "01000");
        assert!(
            behind.message.contains("behind the watermark the registry holds for machine id 3"),
            "{}",
            behind.message
        );
        assert!(behind.detail.as_deref().unwrap().starts_with("Got 1970-01-01T00:00:00.000Z; the registry holds "));
        assert!(behind.hint.as_deref().unwrap().contains("UTC"));
        let warning = reported_far_ahead("idgen_heartbeat", 3, now + DAY * 1000 + 1_000, now).unwrap();
        assert_eq!(warning.sqlstate, SqlState::Warning);
        assert_eq!(warning.message, "idgen_heartbeat: argument \"issued_until\" is 1d 1s ahead of the server clock");
        let detail = warning.detail.unwrap();
        assert!(detail.contains("the server clock reads 2027-01-15T08:00:00.000Z"), "{detail}");
        assert!(
            detail.contains("The watermark was kept: no other node gets machine id 3 before that time"),
            "{detail}"
        );
    }

    #[test]
    fn a_held_row_is_a_live_holders_while_its_report_is_not_ahead() {
        let now = 1_796_000_000_000;
        // A service node that reported its clock just now, within a lease: a live holder.
        assert!(held_by_live_holder(HolderKind::Service, now - 5_000, now, 2_000));
        // One that reported stamps far ahead: its clock ran ahead.
        assert!(!held_by_live_holder(HolderKind::Service, now + 60_000, now, 2_000));
        // A backend's bound is its window, what it may have stamped: never a live twin.
        assert!(!held_by_live_holder(HolderKind::Backend, now - 5_000, now, 2_000));
    }
}
