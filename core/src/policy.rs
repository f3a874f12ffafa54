//! The claim policy: which machine id a claim takes, in which order, and how
//! long a lease lasts. This is the one place the tier order is written down;
//! `idgen_claim` and (later) each backend's own claim both execute
//! [`ClaimPolicy::steps`].

use crate::error::{IdgenError, SqlState};
use crate::format::human_duration;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a claim got its machine id. The label is part of the SQL API (`outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The caller's own row (same service, host and port).
    Reused,
    /// The lowest machine id never registered for the service.
    New,
    /// A machine id released by its holder, whose cooldown has passed.
    Released,
    /// Taken back from a holder idle longer than the 7-day tier.
    Idle7d,
    /// Taken back from a holder idle longer than the 1-day tier.
    Idle1d,
    /// Taken back from a holder idle longer than the 1-hour tier (raises an alert).
    Idle1h,
}

impl Outcome {
    /// Every outcome, in the order the claim's steps reach them. `idgen_history`'s CHECK
    /// `idgen_history_outcome_known` lists the same labels (core/tests/sql_restates.rs).
    pub const ALL: [Outcome; 6] =
        [Outcome::Reused, Outcome::New, Outcome::Released, Outcome::Idle7d, Outcome::Idle1d, Outcome::Idle1h];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Reused => "reused",
            Outcome::New => "new",
            Outcome::Released => "released",
            Outcome::Idle7d => "idle_7d",
            Outcome::Idle1d => "idle_1d",
            Outcome::Idle1h => "idle_1h",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One attempt of a claim. A claim runs the steps in order and stops at the first that yields a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimStep {
    /// The caller's own row: same machine id, next version.
    ReuseOwnRow,
    /// The lowest machine id in the layout's range that has no row yet.
    NeverRegistered,
    /// A released row whose cooldown has passed.
    ReleasedPastCooldown { cooldown_secs: i64 },
    /// The least recently seen row idle for longer than `min_idle_secs`, never one
    /// released less than `cooldown_secs` ago.
    IdleTakeover { outcome: Outcome, min_idle_secs: i64, cooldown_secs: i64, alert: bool },
}

/// The settings the registry runs by, in seconds. Defaults follow the design:
/// take back after 7 days, then 1 day, then (with an alert) 1 hour idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimPolicy {
    pub takeover_idle_7d_secs: i64,
    pub takeover_idle_1d_secs: i64,
    pub takeover_idle_1h_secs: i64,
    /// How long a released machine id waits before another node may take it.
    pub release_cooldown_secs: i64,
    /// How often a holder must heartbeat.
    pub heartbeat_interval_secs: i64,
    /// How much sooner than the shortest take-back age a holder stops issuing.
    pub lease_safety_margin_secs: i64,
}

pub use crate::format::{DAY, HOUR, MINUTE};

impl ClaimPolicy {
    pub const DEFAULT: ClaimPolicy = ClaimPolicy {
        takeover_idle_7d_secs: 7 * DAY,
        takeover_idle_1d_secs: DAY,
        takeover_idle_1h_secs: HOUR,
        release_cooldown_secs: MINUTE,
        heartbeat_interval_secs: 5 * MINUTE,
        lease_safety_margin_secs: 5 * MINUTE,
    };

    /// The tier order, once. Reuse first, then never-registered ids, then
    /// released ones, then ever shorter idle ages; only the last alerts.
    pub fn steps(&self) -> [ClaimStep; 6] {
        let cooldown_secs = self.release_cooldown_secs;
        [
            ClaimStep::ReuseOwnRow,
            ClaimStep::NeverRegistered,
            ClaimStep::ReleasedPastCooldown { cooldown_secs },
            ClaimStep::IdleTakeover {
                outcome: Outcome::Idle7d,
                min_idle_secs: self.takeover_idle_7d_secs,
                cooldown_secs,
                alert: false,
            },
            ClaimStep::IdleTakeover {
                outcome: Outcome::Idle1d,
                min_idle_secs: self.takeover_idle_1d_secs,
                cooldown_secs,
                alert: false,
            },
            ClaimStep::IdleTakeover {
                outcome: Outcome::Idle1h,
                min_idle_secs: self.takeover_idle_1h_secs,
                cooldown_secs,
                alert: true,
            },
        ]
    }

    /// How long after its last heartbeat a holder may issue IDs:
    /// the shortest take-back age minus the safety margin.
    pub fn lease_secs(&self) -> i64 {
        self.takeover_idle_1h_secs - self.lease_safety_margin_secs
    }

    /// Checks that the settings together keep the lease safe. Each setting's
    /// own range is enforced when it is set; this checks how they relate.
    pub fn validate(&self) -> Result<(), IdgenError> {
        let p = self;
        let rules: [(bool, String); 6] = [
            (
                p.takeover_idle_1h_secs > 0 && p.release_cooldown_secs >= 0 && p.lease_safety_margin_secs >= 0,
                "idle ages must be positive, cooldown and margin not negative".to_owned(),
            ),
            (
                p.takeover_idle_1d_secs > p.takeover_idle_1h_secs,
                format!("idgen.takeover_idle_1d ({}) must be longer than idgen.takeover_idle_1h ({})",
                    human_duration(p.takeover_idle_1d_secs), human_duration(p.takeover_idle_1h_secs)),
            ),
            (
                p.takeover_idle_7d_secs > p.takeover_idle_1d_secs,
                format!("idgen.takeover_idle_7d ({}) must be longer than idgen.takeover_idle_1d ({})",
                    human_duration(p.takeover_idle_7d_secs), human_duration(p.takeover_idle_1d_secs)),
            ),
            (
                p.lease_safety_margin_secs < p.takeover_idle_1h_secs,
                format!("idgen.lease_safety_margin ({}) must be shorter than idgen.takeover_idle_1h ({})",
                    human_duration(p.lease_safety_margin_secs), human_duration(p.takeover_idle_1h_secs)),
            ),
            (
                p.heartbeat_interval_secs > 0 && p.heartbeat_interval_secs < p.lease_secs(),
                format!("idgen.heartbeat_interval ({}) must be shorter than the lease, idgen.takeover_idle_1h minus idgen.lease_safety_margin ({})",
                    human_duration(p.heartbeat_interval_secs), human_duration(p.lease_secs().max(0))),
            ),
            (
                // A released id must not become idle-eligible while still cooling down.
                p.release_cooldown_secs < p.takeover_idle_1h_secs,
                format!("idgen.release_cooldown ({}) must be shorter than idgen.takeover_idle_1h ({})",
                    human_duration(p.release_cooldown_secs), human_duration(p.takeover_idle_1h_secs)),
            ),
        ];
        match rules.into_iter().find(|(ok, _)| !ok) {
            None => Ok(()),
            Some((_, why)) => Err(IdgenError::new(SqlState::InvalidParameterValue, "idgen settings are inconsistent")
                .detail(format!("{why}."))
                .hint("A superuser must correct the idgen.* settings (SHOW idgen.takeover_idle_1h; ALTER SYSTEM SET ...). No machine id is handed out or renewed until then.")),
        }
    }
}

/// What claims run by, given the settings as set and the last consistent ones any process of the
/// server ran by: the settings as set when they are consistent; else the last consistent ones (a
/// reload that made the settings contradict each other changes nothing until it is corrected, so
/// that changing them one at a time, in any order, stops no claim); else none.
#[derive(Clone, Debug, PartialEq)]
pub enum InForce {
    AsSet(ClaimPolicy),
    /// The settings as set contradict each other (`contradiction`): the last consistent ones stay.
    Kept {
        kept: ClaimPolicy,
        contradiction: IdgenError,
    },
    /// They contradict each other and none were consistent since the server started.
    Refused(IdgenError),
}

impl InForce {
    pub fn of(as_set: ClaimPolicy, last_consistent: Option<ClaimPolicy>) -> InForce {
        match (as_set.validate(), last_consistent) {
            (Ok(()), _) => InForce::AsSet(as_set),
            (Err(contradiction), Some(kept)) => InForce::Kept { kept, contradiction },
            (Err(refusal), None) => InForce::Refused(refusal),
        }
    }

    /// The policy claims run by, or why there is none.
    pub fn policy(&self) -> Result<ClaimPolicy, IdgenError> {
        match self {
            InForce::AsSet(policy) | InForce::Kept { kept: policy, .. } => Ok(*policy),
            InForce::Refused(refusal) => Err(refusal.clone()),
        }
    }
}

/// Where a registry row stands, as `idgen_nodes.state` shows it. Derived from the
/// same thresholds and the same comparisons the claim steps use, so that a row a
/// view calls `idle_1d` is exactly one the 1-day tier may take back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Held, inside its lease: its holder may be issuing IDs.
    Live,
    /// Held, past its lease (its holder must have stopped issuing), not yet takeable.
    PastLease,
    /// Held and idle long enough for the 1-hour tier (and not the longer ones).
    Idle1h,
    /// Held and idle long enough for the 1-day tier.
    Idle1d,
    /// Held and idle long enough for the 7-day tier.
    Idle7d,
    /// Released less than the cooldown ago: only its last holder may claim it.
    Cooling,
    /// Released and past its cooldown: the next claim of the service may take it.
    Released,
    /// The views only ([`NodeState::as_shown`]): a live backend row of this server with no process in
    /// its slot. Its backend exited and left the lease for the slot's next backend (or for the
    /// registry writer to close); the claim treats it as `Live`.
    Parked,
    /// The views only ([`NodeState::as_shown`]): released past the cooldown with a watermark still
    /// ahead (a release by hand keeps the holder's bound); no claim takes it before that time.
    Fenced,
}

impl NodeState {
    pub const ALL: [NodeState; 9] = [
        NodeState::Live,
        NodeState::PastLease,
        NodeState::Idle1h,
        NodeState::Idle1d,
        NodeState::Idle7d,
        NodeState::Cooling,
        NodeState::Released,
        NodeState::Parked,
        NodeState::Fenced,
    ];

    /// The states of the claim's rule ([`ClaimPolicy::node_state`], SQL `idgen_node_state`): all
    /// but those only the views show.
    pub const OF_CLAIM: [NodeState; 7] = [
        NodeState::Live,
        NodeState::PastLease,
        NodeState::Idle1h,
        NodeState::Idle1d,
        NodeState::Idle7d,
        NodeState::Cooling,
        NodeState::Released,
    ];

    /// The state `idgen_nodes` shows for a row in this state by the claim's rule (the view's CASE in
    /// sql/diagnostics.sql restates it): `Parked` for a live backend row of this server with no
    /// process in its slot, `Fenced` for a released row whose watermark is still ahead.
    pub fn as_shown(self, backend_here_without_process: bool, watermark_ahead: bool) -> NodeState {
        match self {
            NodeState::Live if backend_here_without_process => NodeState::Parked,
            NodeState::Released if watermark_ahead => NodeState::Fenced,
            state => state,
        }
    }

    /// The label in `idgen_nodes.state`.
    pub fn label(self) -> &'static str {
        match self {
            NodeState::Live => "live",
            NodeState::PastLease => "past_lease",
            NodeState::Idle1h => "idle_1h",
            NodeState::Idle1d => "idle_1d",
            NodeState::Idle7d => "idle_7d",
            NodeState::Cooling => "cooling_down",
            NodeState::Released => "released",
            NodeState::Parked => "parked",
            NodeState::Fenced => "fenced",
        }
    }
}

/// The times of a registry row a state depends on, in seconds relative to now (the
/// transaction's start, as the claim measures them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowAges {
    /// Since `last_seen`.
    pub idle_secs: f64,
    /// Since `released_at`, if released.
    pub released_secs: Option<f64>,
    /// Until the `lease_until` the holder was granted; `None` when the row does not record it
    /// (written by hand, or before idgen 0.4.0): then the lease of the settings now stands in.
    pub lease_left_secs: Option<f64>,
    /// Until the `takeover_at` the holder was granted (no take-back before it); `None` as above.
    pub takeover_left_secs: Option<f64>,
}

impl ClaimPolicy {
    /// The state of a row. A lease is honoured as granted: a row is live until the
    /// `lease_until` it records and takeable no sooner than its `takeover_at`, whatever
    /// the settings are now; the tiers (by today's settings) then order the take-backs.
    /// Ages are measured as the claim measures them: a row is past an age when it is
    /// strictly older (`last_seen < now - age`).
    pub fn node_state(&self, row: RowAges) -> NodeState {
        if let Some(released) = row.released_secs {
            return if released >= self.release_cooldown_secs as f64 {
                NodeState::Released
            } else {
                NodeState::Cooling
            };
        }
        let lease_left = row.lease_left_secs.unwrap_or(self.lease_secs() as f64 - row.idle_secs);
        if lease_left > 0.0 {
            return NodeState::Live;
        }
        if row.takeover_left_secs.is_some_and(|left| left >= 0.0) {
            return NodeState::PastLease;
        }
        let past = |age: i64| row.idle_secs > age as f64;
        if past(self.takeover_idle_7d_secs) {
            NodeState::Idle7d
        } else if past(self.takeover_idle_1d_secs) {
            NodeState::Idle1d
        } else if past(self.takeover_idle_1h_secs) {
            NodeState::Idle1h
        } else {
            NodeState::PastLease
        }
    }
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        ClaimPolicy::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_run_reuse_new_released_then_7d_1d_1h_and_only_1h_alerts() {
        let steps = ClaimPolicy::DEFAULT.steps();
        assert_eq!(steps[0], ClaimStep::ReuseOwnRow);
        assert_eq!(steps[1], ClaimStep::NeverRegistered);
        assert_eq!(steps[2], ClaimStep::ReleasedPastCooldown { cooldown_secs: 60 });
        assert_eq!(
            steps[3],
            ClaimStep::IdleTakeover {
                outcome: Outcome::Idle7d,
                min_idle_secs: 7 * DAY,
                cooldown_secs: 60,
                alert: false
            }
        );
        assert_eq!(
            steps[4],
            ClaimStep::IdleTakeover { outcome: Outcome::Idle1d, min_idle_secs: DAY, cooldown_secs: 60, alert: false }
        );
        assert_eq!(
            steps[5],
            ClaimStep::IdleTakeover { outcome: Outcome::Idle1h, min_idle_secs: HOUR, cooldown_secs: 60, alert: true }
        );
    }

    #[test]
    fn steps_follow_the_settings() {
        let p = ClaimPolicy {
            takeover_idle_7d_secs: 300,
            takeover_idle_1d_secs: 200,
            takeover_idle_1h_secs: 100,
            ..ClaimPolicy::DEFAULT
        };
        let idle: Vec<i64> = p
            .steps()
            .iter()
            .filter_map(|s| match s {
                ClaimStep::IdleTakeover { min_idle_secs, .. } => Some(*min_idle_secs),
                _ => None,
            })
            .collect();
        assert_eq!(idle, vec![300, 200, 100]);
    }

    #[test]
    fn outcome_labels_are_the_documented_ones() {
        let labels: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["reused", "new", "released", "idle_7d", "idle_1d", "idle_1h"]);
    }

    #[test]
    fn default_lease_is_55_minutes_and_defaults_are_consistent() {
        assert_eq!(ClaimPolicy::DEFAULT.lease_secs(), 55 * MINUTE);
        assert_eq!(ClaimPolicy::DEFAULT.validate(), Ok(()));
    }

    #[test]
    fn contradicting_settings_keep_the_last_consistent_ones_in_force() {
        let lowered = ClaimPolicy { takeover_idle_1h_secs: 3 * MINUTE, ..ClaimPolicy::DEFAULT };
        // The 1-hour tier lowered to 3 minutes first: the margin (5 minutes) contradicts it.
        match InForce::of(lowered, Some(ClaimPolicy::DEFAULT)) {
            InForce::Kept { kept, contradiction } => {
                assert_eq!(kept, ClaimPolicy::DEFAULT);
                assert!(contradiction.detail.unwrap().contains("idgen.lease_safety_margin (5m) must be shorter"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(InForce::of(lowered, Some(ClaimPolicy::DEFAULT)).policy(), Ok(ClaimPolicy::DEFAULT));
        // Then the margin and the heartbeat lowered too: consistent, in force as set.
        let both = ClaimPolicy { lease_safety_margin_secs: MINUTE, heartbeat_interval_secs: MINUTE, ..lowered };
        assert_eq!(InForce::of(both, Some(ClaimPolicy::DEFAULT)), InForce::AsSet(both));
        assert_eq!(InForce::of(both, None).policy(), Ok(both));
        // Nothing consistent was ever in force: refused, with the reason.
        let refused = InForce::of(lowered, None).policy().unwrap_err();
        assert_eq!(refused.sqlstate, SqlState::InvalidParameterValue);
        assert!(refused.detail.unwrap().contains("idgen.lease_safety_margin (5m) must be shorter"));
    }

    #[test]
    fn inconsistent_settings_are_refused_with_the_reason() {
        let cases = [
            (
                ClaimPolicy { takeover_idle_1d_secs: HOUR, ..ClaimPolicy::DEFAULT },
                "idgen.takeover_idle_1d (1h) must be longer than idgen.takeover_idle_1h (1h)",
            ),
            (
                ClaimPolicy { takeover_idle_7d_secs: DAY, ..ClaimPolicy::DEFAULT },
                "idgen.takeover_idle_7d (1d) must be longer",
            ),
            (
                ClaimPolicy { lease_safety_margin_secs: HOUR, ..ClaimPolicy::DEFAULT },
                "idgen.lease_safety_margin (1h) must be shorter",
            ),
            (
                ClaimPolicy { heartbeat_interval_secs: 55 * MINUTE, ..ClaimPolicy::DEFAULT },
                "idgen.heartbeat_interval (55m) must be shorter than the lease",
            ),
            (
                ClaimPolicy { release_cooldown_secs: 2 * HOUR, ..ClaimPolicy::DEFAULT },
                "idgen.release_cooldown (2h) must be shorter",
            ),
        ];
        for (policy, fragment) in cases {
            let err = policy.validate().unwrap_err();
            assert_eq!(err.sqlstate, SqlState::InvalidParameterValue);
            assert!(err.detail.as_deref().unwrap().contains(fragment), "{err}");
            assert!(err.hint.is_some());
        }
    }

    /// A row whose times were recorded as the default settings grant them.
    fn granted(idle_secs: f64, released_secs: Option<f64>) -> RowAges {
        RowAges {
            idle_secs,
            released_secs,
            lease_left_secs: Some(55.0 * 60.0 - idle_secs),
            takeover_left_secs: Some(HOUR as f64 - idle_secs),
        }
    }

    #[test]
    fn node_states_follow_the_tiers_the_claim_uses() {
        let p = ClaimPolicy::DEFAULT;
        let h = HOUR as f64;
        let cases = [
            (0.0, None, NodeState::Live),
            (55.0 * 60.0 - 0.5, None, NodeState::Live),
            (55.0 * 60.0, None, NodeState::PastLease),
            (h, None, NodeState::PastLease), // the claim takes rows strictly older than the age
            (h + 0.5, None, NodeState::Idle1h),
            (24.0 * h + 1.0, None, NodeState::Idle1d),
            (7.0 * 24.0 * h + 1.0, None, NodeState::Idle7d),
            (9.0 * 24.0 * h, Some(59.0), NodeState::Cooling),
            (0.0, Some(60.0), NodeState::Released),
        ];
        for (idle, released, state) in cases {
            assert_eq!(p.node_state(granted(idle, released)), state, "idle {idle}, released {released:?}");
            // A row that records no terms gets the same states from today's settings.
            let unrecorded = RowAges { lease_left_secs: None, takeover_left_secs: None, ..granted(idle, released) };
            assert_eq!(p.node_state(unrecorded), state, "unrecorded: idle {idle}, released {released:?}");
        }
        let labels: Vec<&str> = NodeState::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(
            labels,
            ["live", "past_lease", "idle_1h", "idle_1d", "idle_7d", "cooling_down", "released", "parked", "fenced"]
        );
    }

    #[test]
    fn a_lease_is_honoured_as_granted_whatever_the_settings_are_now() {
        // Granted 55 minutes 12 seconds ago, then the tiers were lowered to seconds.
        let lowered = ClaimPolicy {
            takeover_idle_7d_secs: 30,
            takeover_idle_1d_secs: 20,
            takeover_idle_1h_secs: 10,
            lease_safety_margin_secs: 2,
            heartbeat_interval_secs: 2,
            release_cooldown_secs: 1,
        };
        assert_eq!(lowered.node_state(granted(12.0, None)), NodeState::Live, "inside the lease it was given");
        assert_eq!(lowered.node_state(granted(56.0 * 60.0, None)), NodeState::PastLease, "before its takeover_at");
        assert_eq!(lowered.node_state(granted(HOUR as f64 + 1.0, None)), NodeState::Idle7d, "and takeable after it");
    }

    #[test]
    fn the_views_show_parked_and_fenced_rows_of_the_claims_live_and_released_ones() {
        use NodeState::*;
        assert_eq!(Live.as_shown(true, true), Parked);
        assert_eq!(Live.as_shown(false, true), Live);
        assert_eq!(Released.as_shown(true, true), Fenced);
        assert_eq!(Released.as_shown(true, false), Released);
        for state in [PastLease, Idle1h, Idle1d, Idle7d, Cooling] {
            assert_eq!(state.as_shown(true, true), state, "only live and released rows are shown otherwise");
        }
    }
}
