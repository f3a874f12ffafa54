//! What the diagnostics tell about a fleet of holders, beyond one claim: how full a service
//! is (two levels), how far a holder's clock is off the server's, and which nodes restart in a
//! loop or which machine ids flap between holders. The defaults of the settings that say when
//! (`idgen.capacity_warning`, `idgen.capacity_critical`, `idgen.clock_skew_alert`,
//! `idgen.restart_loop_window`, `idgen.restart_loop_claims`) live here; the views of
//! `sql/diagnostics.sql` restate the levels' rule, and tests/cluster/tests/one_source.rs ties
//! the two.

use crate::policy::MINUTE;

/// `idgen.capacity_warning`: a service more than this fraction in use is at the warning level.
pub const CAPACITY_WARNING_DEFAULT: f64 = 0.70;
/// `idgen.capacity_critical`: a service more than this fraction in use is at the critical level.
pub const CAPACITY_CRITICAL_DEFAULT: f64 = 0.85;
/// `idgen.clock_skew_alert`: a holder whose clock is further off the server's than this is reported.
pub const CLOCK_SKEW_ALERT_DEFAULT_MS: i64 = 1_000;
/// `idgen.restart_loop_window`: the window the restart and flapping counts look back over.
pub const RESTART_LOOP_WINDOW_DEFAULT_SECS: i64 = 5 * MINUTE;
/// `idgen.restart_loop_claims`: more claims than this by one node (or moves of one machine id
/// between holders) within the window are a loop.
pub const RESTART_LOOP_CLAIMS_DEFAULT: i64 = 3;
/// `idgen.capacity_alert` before 0.6.0, and the value that says it is not set now.
pub const CAPACITY_ALERT_UNSET: f64 = -1.0;

/// How full a service is: `idgen_capacity.level`, the capacity alert's `level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CapacityLevel {
    Warning,
    Critical,
}

impl CapacityLevel {
    pub const ALL: [CapacityLevel; 2] = [CapacityLevel::Warning, CapacityLevel::Critical];

    pub fn label(self) -> &'static str {
        match self {
            CapacityLevel::Warning => "warning",
            CapacityLevel::Critical => "critical",
        }
    }

    /// The setting of the level's threshold.
    pub fn setting(self) -> &'static str {
        match self {
            CapacityLevel::Warning => "idgen.capacity_warning",
            CapacityLevel::Critical => "idgen.capacity_critical",
        }
    }

    /// `idgen_metrics.capacity_level`: 0 below the warning level, 1 warning, 2 critical.
    pub fn metric(level: Option<CapacityLevel>) -> i32 {
        match level {
            None => 0,
            Some(CapacityLevel::Warning) => 1,
            Some(CapacityLevel::Critical) => 2,
        }
    }
}

/// The level of a service with `in_use` of `capacity` machine ids in use: above (strictly) a
/// threshold is at its level.
pub fn capacity_level(in_use: i64, capacity: i64, warning: f64, critical: f64) -> Option<CapacityLevel> {
    if capacity <= 0 {
        return None;
    }
    let used = in_use as f64 / capacity as f64;
    if used > critical {
        Some(CapacityLevel::Critical)
    } else if used > warning {
        Some(CapacityLevel::Warning)
    } else {
        None
    }
}

/// How far (a fraction of the pool, rounded down to whole machine ids) a service must fall below a
/// level's threshold before the level is announced as cleared: a service that hovers at a
/// threshold, a claim and a release at a time, would otherwise alert up and down at every claim.
pub const CLEAR_MARGIN: f64 = 0.05;

/// A change of a service's capacity level worth an alert, from the level announced last: up as
/// soon as a threshold is passed, down (to the lower level, or cleared: `None`) once the service is
/// [`CLEAR_MARGIN`] below the threshold of the level announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelChange {
    Up(CapacityLevel),
    Down(Option<CapacityLevel>),
}

impl LevelChange {
    /// The level announced after this change.
    pub fn level(self) -> Option<CapacityLevel> {
        match self {
            LevelChange::Up(level) => Some(level),
            LevelChange::Down(level) => level,
        }
    }
}

/// The change to announce for a service with `in_use` of `capacity` machine ids in use, whose
/// level announced last was `announced` (`None`: none, or cleared); `None` when nothing changed.
pub fn level_change(
    announced: Option<CapacityLevel>,
    in_use: i64,
    capacity: i64,
    warning: f64,
    critical: f64,
) -> Option<LevelChange> {
    let now = capacity_level(in_use, capacity, warning, critical);
    if now > announced {
        return now.map(LevelChange::Up);
    }
    // The margin in whole machine ids (rounded down): a level is kept while that many more in use
    // would still be above it.
    let margin = (CLEAR_MARGIN * capacity as f64).floor() as i64;
    let kept = capacity_level(in_use.saturating_add(margin), capacity, warning, critical);
    (kept < announced).then_some(LevelChange::Down(kept))
}

/// Whether a service of which at most `at_most` machine ids are in use may need an alert: only a
/// service with a level announced can clear, and only one that may be above a threshold can rise.
/// Counting what is in use reads every row of the service; this spares it.
pub fn level_may_change(
    announced: Option<CapacityLevel>,
    at_most: i64,
    capacity: i64,
    warning: f64,
    critical: f64,
) -> bool {
    announced.is_some() || capacity_level(at_most, capacity, warning, critical).is_some()
}

/// The warning level in force: one set above the critical level is taken as the critical one. An
/// alert threshold set wrong must not stop claims (and with them every new connection's
/// `DEFAULT idgen_next_id()`): `idgen_health()` reports it instead.
pub fn effective_capacity_warning(warning: f64, critical: f64) -> f64 {
    warning.min(critical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_is_at_a_level_once_strictly_above_its_threshold() {
        let level = |in_use| capacity_level(in_use, 100, 0.70, 0.85);
        assert_eq!(level(70), None);
        assert_eq!(level(71), Some(CapacityLevel::Warning));
        assert_eq!(level(85), Some(CapacityLevel::Warning));
        assert_eq!(level(86), Some(CapacityLevel::Critical));
        assert_eq!(capacity_level(0, 0, 0.7, 0.85), None);
        assert_eq!(CapacityLevel::metric(level(86)), 2);
        assert_eq!(CapacityLevel::metric(None), 0);
    }

    #[test]
    fn a_level_is_announced_once_when_it_is_passed_and_once_when_it_clears_by_the_margin() {
        use LevelChange::{Down, Up};
        let change = |announced, in_use| level_change(announced, in_use, 100, 0.70, 0.85);
        let (warning, critical) = (Some(CapacityLevel::Warning), Some(CapacityLevel::Critical));
        assert_eq!(change(None, 70), None);
        assert_eq!(change(None, 71), Some(Up(CapacityLevel::Warning)));
        assert_eq!(change(warning, 71), None, "announced already");
        assert_eq!(change(warning, 85), None);
        assert_eq!(change(warning, 86), Some(Up(CapacityLevel::Critical)));
        assert_eq!(change(None, 90), Some(Up(CapacityLevel::Critical)), "both passed at once: one alert");
        // Hovering at a threshold announces nothing; falling by the margin does, once.
        assert_eq!(change(warning, 70), None);
        assert_eq!(change(warning, 66), None);
        assert_eq!(change(warning, 65), Some(Down(None)));
        assert_eq!(change(None, 65), None);
        assert_eq!(change(critical, 85), None);
        assert_eq!(change(critical, 80), Some(Down(warning)));
        assert_eq!(change(critical, 40), Some(Down(None)));
        assert_eq!(Down(warning).level(), warning);
        // A tiny pool has no margin (5 % of 4 ids is none): 3 of 4 is above 70 %, 2 of 4 clears it.
        assert_eq!(level_change(None, 3, 4, 0.70, 0.85), Some(Up(CapacityLevel::Warning)));
        assert_eq!(level_change(warning, 2, 4, 0.70, 0.85), Some(Down(None)));
    }

    #[test]
    fn only_a_service_that_may_be_above_a_level_or_has_one_announced_is_counted() {
        assert!(!level_may_change(None, 70, 100, 0.70, 0.85));
        assert!(level_may_change(None, 71, 100, 0.70, 0.85));
        assert!(level_may_change(Some(CapacityLevel::Warning), 3, 100, 0.70, 0.85));
    }

    #[test]
    fn a_warning_level_above_the_critical_one_is_taken_as_the_critical_one() {
        assert_eq!(effective_capacity_warning(CAPACITY_WARNING_DEFAULT, CAPACITY_CRITICAL_DEFAULT), 0.70);
        assert_eq!(effective_capacity_warning(0.8, 0.8), 0.8);
        assert_eq!(effective_capacity_warning(0.9, 0.8), 0.8);
    }
}
