//! The ownership history: what `idgen_history` records, and how `idgen_explain`
//! reads it back into tenures (who held a machine id, and for which stamps).
//!
//! A tenure starts at the claim's `not_before` (its holder stamps strictly
//! after it) and ends at the last time its holder may have stamped: the
//! watermark of its release, or the bound the next holder's take-back
//! recorded for it. A correct registry never lets two tenures of one machine id
//! share a millisecond; `explain` says so when they do.
//!
//! A database backend's claim that reuses its slot's held row is not recorded:
//! ownership does not move, and backends reuse their slot's row on every new
//! connection, so recording it would add a write per connection and fill the
//! history with churn. A service node's claim of the row it still holds is a
//! restart (its earlier process never released the id) and is recorded as a
//! `restart`, so that crash loops show; its tenure ends the earlier process's
//! at the bound the claim waited for, without splitting it from its holder. A
//! reuse that ends a release is recorded as a claim, because the row was free
//! in between.

use crate::fleet::CapacityLevel;
use crate::format::iso_utc;
use crate::input::node_name;
use crate::policy::{Outcome, DAY};
use serde::Serialize;

/// A refusal (a claim refused, a heartbeat or release that found its id moved), and a watermark
/// reported behind the registry's, is recorded at most once per service, kind and this many
/// seconds: a flood of refused calls records one.
pub const REFUSAL_INTERVAL_SECS: i64 = 60;

/// How long `idgen_purge_history()` keeps events unless told otherwise: the default of
/// `idgen.history_retention` (src/settings.rs), which `idgen_purge_history`'s comment states.
pub const HISTORY_RETENTION_DEFAULT_SECS: i64 = 90 * DAY;

/// What happened, as `idgen_history.event` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A node got a machine id nobody else held: new, or its own released row back.
    Claim,
    /// A node got a machine id from another holder (released past cooldown, or idle in a tier).
    TakeBack,
    /// The holder gave the id back (`idgen_release`).
    Release,
    /// A node's own row was set aside because its watermark was further ahead than it may wait.
    SetAside,
    /// A holder learnt that ownership had moved (heartbeat, release, or a backend's lease check).
    OwnershipLost,
    /// A claim failed: every machine id of the service is held and none may be taken back.
    RefusedFull,
    /// A claim failed: the node's own id (and no other) has a watermark too far ahead, or the registry's floor is.
    RefusedWatermark,
    /// A claim failed: `idgen.require_synchronous_standby` is on and no synchronous standby streams.
    RefusedNoStandby,
    /// A holder reported a watermark behind what the registry held for its id (its clock is
    /// behind, or it sends local time as UTC); kept as the registry had it, with a WARNING.
    WatermarkBehind,
    /// A service node claimed the machine id it still held: it restarted without releasing
    /// (a crash, a kill). Outcome `reused`; `previous_version` and `previous_bound` are its
    /// earlier process's version and the latest time that process may have stamped.
    Restart,
    /// A claim changed the service's capacity level to warning (up past `idgen.capacity_warning`,
    /// or down from critical by the margin), announced with an alert; the level announced last is
    /// the one later claims compare with (`crate::fleet::level_change`).
    CapacityWarning,
    /// A claim took the service above `idgen.capacity_critical`, announced with an alert.
    CapacityCritical,
    /// A claim found the service back below the level announced last, by the margin: announced once.
    CapacityCleared,
}

impl EventKind {
    pub const ALL: [EventKind; 13] = [
        EventKind::Claim,
        EventKind::TakeBack,
        EventKind::Release,
        EventKind::SetAside,
        EventKind::OwnershipLost,
        EventKind::RefusedFull,
        EventKind::RefusedWatermark,
        EventKind::RefusedNoStandby,
        EventKind::WatermarkBehind,
        EventKind::Restart,
        EventKind::CapacityWarning,
        EventKind::CapacityCritical,
        EventKind::CapacityCleared,
    ];

    pub fn label(self) -> &'static str {
        match self {
            EventKind::Claim => "claim",
            EventKind::TakeBack => "take_back",
            EventKind::Release => "release",
            EventKind::SetAside => "set_aside",
            EventKind::OwnershipLost => "ownership_lost",
            EventKind::RefusedFull => "refused_full",
            EventKind::RefusedWatermark => "refused_watermark",
            EventKind::RefusedNoStandby => "refused_no_standby",
            EventKind::WatermarkBehind => "watermark_behind",
            EventKind::Restart => "restart",
            EventKind::CapacityWarning => "capacity_warning",
            EventKind::CapacityCritical => "capacity_critical",
            EventKind::CapacityCleared => "capacity_cleared",
        }
    }

    pub fn from_label(label: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|kind| kind.label() == label)
    }

    /// A claim that failed: what `idgen_metrics.refused_claims` counts. (A heartbeat or release
    /// that found its id moved is an `OwnershipLost`, counted as `ownership_losses`.)
    pub fn is_refused_claim(self) -> bool {
        match self {
            EventKind::RefusedFull | EventKind::RefusedWatermark | EventKind::RefusedNoStandby => true,
            EventKind::Claim
            | EventKind::TakeBack
            | EventKind::Release
            | EventKind::SetAside
            | EventKind::OwnershipLost
            | EventKind::WatermarkBehind
            | EventKind::Restart
            | EventKind::CapacityWarning
            | EventKind::CapacityCritical
            | EventKind::CapacityCleared => false,
        }
    }

    /// A node got (or got back) a machine id: what `restart_loop` counts per node. (An id moves
    /// between holders only by a take-back, what `id_flapping` counts per machine id.)
    pub fn is_gain(self) -> bool {
        matches!(self, EventKind::Claim | EventKind::TakeBack | EventKind::Restart)
    }

    /// The event that announces a service's capacity level (`None`: cleared).
    pub fn of_capacity(level: Option<CapacityLevel>) -> EventKind {
        match level {
            Some(CapacityLevel::Warning) => EventKind::CapacityWarning,
            Some(CapacityLevel::Critical) => EventKind::CapacityCritical,
            None => EventKind::CapacityCleared,
        }
    }

    /// The capacity level this event announced: `Some(None)` for a clearing, `None` for an event
    /// that announces no level.
    pub fn capacity_announced(self) -> Option<Option<CapacityLevel>> {
        EventKind::ALL_CAPACITY_LEVELS.into_iter().find(|level| EventKind::of_capacity(*level) == self)
    }

    const ALL_CAPACITY_LEVELS: [Option<CapacityLevel>; 3] =
        [None, Some(CapacityLevel::Warning), Some(CapacityLevel::Critical)];

    /// The event of a successful claim with this outcome.
    pub fn of_claim(outcome: Outcome) -> EventKind {
        match outcome {
            Outcome::New | Outcome::Reused => EventKind::Claim,
            Outcome::Released | Outcome::Idle7d | Outcome::Idle1d | Outcome::Idle1h => EventKind::TakeBack,
        }
    }
}

/// One row of `idgen_history`, as JSON whose keys are its columns (the edge
/// inserts it with `json_populate_record`). Times are ISO-8601 text; `at`
/// left out means the server clock at the insert.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Event {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    pub event: &'static str,
    pub service: String,
    pub machine_id: Option<i32>,
    pub version: Option<i64>,
    pub host: Option<String>,
    pub port: Option<i32>,
    pub backend_slot: Option<i32>,
    pub role: Option<String>,
    pub pid: Option<i32>,
    pub outcome: Option<&'static str>,
    pub not_before: Option<String>,
    pub issued_until: Option<String>,
    pub previous_host: Option<String>,
    pub previous_port: Option<i32>,
    pub previous_backend_slot: Option<i32>,
    pub previous_version: Option<i64>,
    pub previous_idle_seconds: Option<i64>,
    pub previous_bound: Option<String>,
    pub detail: Option<String>,
}

impl Event {
    pub fn new(kind: EventKind, service: &str) -> Event {
        Event { event: kind.label(), service: service.to_owned(), ..Event::default() }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events serialise")
    }
}

/// An event read back for `explain`, times in Unix milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub at_ms: i64,
    pub kind: EventKind,
    pub holder: Option<Holder>,
    pub version: Option<i64>,
    pub not_before_ms: Option<i64>,
    pub issued_until_ms: Option<i64>,
    pub previous_holder: Option<Holder>,
    pub previous_bound_ms: Option<i64>,
    /// A claim of an id nobody had held (outcome `new`). A claim the update to 0.5.0 recorded
    /// for a holder it found is not: the history does not know how long it had held the id.
    pub new_id: bool,
}

/// Who held a machine id: a node's address, a backend's slot, and who it ran as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub host: String,
    pub port: i32,
    pub backend_slot: Option<i32>,
    pub role: Option<String>,
    pub pid: Option<i32>,
}

impl Holder {
    pub fn name(&self) -> String {
        node_name(&self.host, self.port, self.backend_slot)
    }
}

/// One holder's time with a machine id, as the stamps it may have made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    pub holder: Holder,
    pub version: i64,
    /// Its stamps are strictly after this (the claim's `not_before`).
    pub after_ms: i64,
    /// Its stamps are at or before this; `None` while it may still be stamping.
    pub until_ms: Option<i64>,
    /// True when the history has no end for it and the next holder's start stands in.
    pub end_assumed: bool,
}

impl Tenure {
    fn covers(&self, stamp_ms: i64) -> bool {
        stamp_ms > self.after_ms && self.until_ms.is_none_or(|until| stamp_ms <= until)
    }
}

/// The tenures the events of one machine id show, oldest first. Events must
/// be in the order they were recorded.
pub fn tenures(events: &[Recorded]) -> Vec<Tenure> {
    let mut out: Vec<Tenure> = Vec::new();
    for event in events {
        match event.kind {
            EventKind::Claim | EventKind::TakeBack | EventKind::Restart => {
                let (Some(holder), Some(version), Some(after_ms)) =
                    (event.holder.clone(), event.version, event.not_before_ms)
                else {
                    continue;
                };
                if let Some(open) = out.last_mut().filter(|t| t.until_ms.is_none()) {
                    match (event.kind, event.previous_bound_ms) {
                        // A take-back records how long the holder it took from may have stamped,
                        // a restart how long the node's earlier process may have.
                        (EventKind::TakeBack | EventKind::Restart, Some(bound)) => open.until_ms = Some(bound),
                        // A claim over an open tenure: its end was not recorded (a row deleted by
                        // hand, or a history purged in between); the new start is the best bound.
                        _ => {
                            open.until_ms = Some(after_ms);
                            open.end_assumed = true;
                        }
                    }
                }
                out.push(Tenure { holder, version, after_ms, until_ms: None, end_assumed: false });
            }
            EventKind::Release | EventKind::SetAside => {
                if let Some(open) = out.last_mut().filter(|t| t.until_ms.is_none()) {
                    open.until_ms = Some(event.issued_until_ms.unwrap_or(event.at_ms));
                }
            }
            EventKind::OwnershipLost
            | EventKind::RefusedFull
            | EventKind::RefusedWatermark
            | EventKind::RefusedNoStandby
            | EventKind::WatermarkBehind
            | EventKind::CapacityWarning
            | EventKind::CapacityCritical
            | EventKind::CapacityCleared => {}
        }
    }
    out
}

/// What the history says about a stamp of a machine id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// One holder may have stamped it.
    Held(Tenure),
    /// More than one holder may have stamped it: the registry failed, or was changed by hand.
    Overlap(Vec<Tenure>),
    /// The retained history starts after the stamp.
    BeforeHistory { first_ms: i64 },
    /// The stamp falls where no holder may have stamped (between a release and the next claim,
    /// or before the id was first registered): not an ID this registry's holders made.
    Unheld { previous: Option<Tenure>, next: Option<Tenure> },
    /// The history has no event for this machine id.
    NoHistory,
}

impl Finding {
    /// The label in `idgen_explain.finding`.
    pub fn label(&self) -> &'static str {
        match self {
            Finding::Held(_) => "held",
            Finding::Overlap(_) => "overlap",
            Finding::BeforeHistory { .. } => "before_history",
            Finding::Unheld { .. } => "unheld",
            Finding::NoHistory => "no_history",
        }
    }
}

/// Whether an ID decoded by some service's layout to `stamp_ms` could be that service's: no holder
/// stamps further ahead of the server clock than a reported watermark may be
/// ([`crate::watermark::MAX_REPORTED_AHEAD_SECS`]). An ID of another layout decodes to any time,
/// often decades ahead: `idgen_explain` then does not name a holder of this service.
pub fn could_be_stamped_by_now(stamp_ms: i64, now_ms: i64) -> bool {
    stamp_ms <= now_ms.saturating_add(crate::watermark::MAX_REPORTED_AHEAD_SECS * 1000)
}

/// Who may have stamped `stamp_ms` with the machine id whose events these are.
/// `history_complete` is true when no event of the service was purged (the
/// first event of this id is then really its first).
pub fn explain(events: &[Recorded], stamp_ms: i64, history_complete: bool, first_version: i64) -> Finding {
    let all = tenures(events);
    let covering: Vec<Tenure> = all.iter().filter(|t| t.covers(stamp_ms)).cloned().collect();
    match covering.len() {
        1 => return Finding::Held(covering.into_iter().next().expect("one")),
        n if n > 1 => return Finding::Overlap(covering),
        _ => {}
    }
    let Some(first) = events.first() else { return Finding::NoHistory };
    let first_ms = all.first().map_or(first.at_ms, |t| t.after_ms);
    if stamp_ms <= first_ms && !(history_complete && first_is_new(events, first_version)) {
        return Finding::BeforeHistory { first_ms };
    }
    let previous = all.iter().rev().find(|t| t.after_ms < stamp_ms).cloned();
    let next = all.iter().find(|t| t.after_ms >= stamp_ms).cloned();
    Finding::Unheld { previous, next }
}

/// Whether the first claim of the history made the row: a new id at the registry's first version
/// (`first_version`, the version after its version base). A later version means a tombstone: rows
/// removed by hand had holders before.
fn first_is_new(events: &[Recorded], first_version: i64) -> bool {
    events.iter().find(|e| matches!(e.kind, EventKind::Claim | EventKind::TakeBack)).is_some_and(|e| {
        e.kind == EventKind::Claim && e.new_id && e.previous_holder.is_none() && e.version == Some(first_version)
    })
}

/// One row of `idgen_explain`: a finding, the tenure it names if any, and what it means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    pub finding: &'static str,
    pub tenure: Option<Tenure>,
    pub detail: String,
}

/// The rows `idgen_explain` shows for a finding about the stamp `stamp_ms` of `machine_id` in `service`.
pub fn explained(finding: &Finding, service: &str, machine_id: i32, stamp_ms: i64) -> Vec<Explained> {
    let label = finding.label();
    let stamp = iso_utc(stamp_ms);
    let held = |t: &Tenure| {
        let until = match (t.until_ms, t.end_assumed) {
            (None, _) => "and may still be stamping".to_owned(),
            (Some(until), false) => format!("until {}", iso_utc(until)),
            (Some(until), true) => format!("until at most {} (its end was not recorded)", iso_utc(until)),
        };
        format!(
            "{} held machine id {machine_id} of service \"{service}\" at version {}: it stamps after {} {until}.",
            t.holder.name(),
            t.version,
            iso_utc(t.after_ms)
        )
    };
    match finding {
        Finding::Held(t) => vec![Explained { finding: label, tenure: Some(t.clone()), detail: held(t) }],
        Finding::Overlap(all) => all
            .iter()
            .map(|t| Explained {
                finding: label,
                tenure: Some(t.clone()),
                detail: format!("{} Another holder may have stamped the same millisecond ({stamp}): a bug, or the registry was changed by hand.", held(t)),
            })
            .collect(),
        Finding::BeforeHistory { first_ms } => vec![Explained {
            finding: label,
            tenure: None,
            detail: format!(
                "The history of machine id {machine_id} of service \"{service}\" starts at {}, after this ID was stamped ({stamp}): older events were purged (idgen.history_retention) or predate idgen 0.3.0.",
                iso_utc(*first_ms)
            ),
        }],
        Finding::Unheld { previous, next } => {
            let before = match previous.as_ref().and_then(|t| t.until_ms.map(|u| (t, u))) {
                Some((t, until)) => format!(" {} stopped at {}.", t.holder.name(), iso_utc(until)),
                None => " It was not registered before.".to_owned(),
            };
            let after = next
                .as_ref()
                .map(|t| format!(" {} started after {}.", t.holder.name(), iso_utc(t.after_ms)))
                .unwrap_or_default();
            vec![Explained {
                finding: label,
                tenure: None,
                detail: format!(
                    "No holder of machine id {machine_id} of service \"{service}\" may have stamped at {stamp}.{before}{after} This ID was not made by this registry's holders of the service, or one of them issued outside its lease."
                ),
            }]
        }
        Finding::NoHistory => vec![Explained {
            finding: label,
            tenure: None,
            detail: format!("The history has no event for machine id {machine_id} of service \"{service}\"."),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_decoded_into_the_future_is_no_services() {
        let now = 1_800_000_000_000;
        assert!(could_be_stamped_by_now(now, now));
        assert!(could_be_stamped_by_now(now + 86_400_000, now), "a day ahead: a holder's clock may be");
        assert!(!could_be_stamped_by_now(now + 86_400_001, now));
    }

    fn holder(port: i32) -> Holder {
        Holder { host: "10.0.0.1".into(), port, backend_slot: None, role: None, pid: None }
    }

    fn claim(at: i64, port: i32, version: i64) -> Recorded {
        Recorded {
            at_ms: at,
            kind: EventKind::Claim,
            holder: Some(holder(port)),
            version: Some(version),
            not_before_ms: Some(at),
            issued_until_ms: None,
            previous_holder: None,
            previous_bound_ms: None,
            new_id: version == 1,
        }
    }

    fn take_back(at: i64, port: i32, version: i64, previous: i32, bound: i64) -> Recorded {
        Recorded {
            kind: EventKind::TakeBack,
            previous_holder: Some(holder(previous)),
            previous_bound_ms: Some(bound),
            not_before_ms: Some(at.max(bound)),
            new_id: false,
            ..claim(at, port, version)
        }
    }

    fn release(at: i64, watermark: i64) -> Recorded {
        Recorded {
            at_ms: at,
            kind: EventKind::Release,
            holder: None,
            version: None,
            not_before_ms: None,
            issued_until_ms: Some(watermark),
            previous_holder: None,
            previous_bound_ms: None,
            new_id: false,
        }
    }

    #[test]
    fn a_take_back_chain_names_each_holder_for_its_own_stamps() {
        // A claims at 100; B takes it back at 200 (A may have stamped until 150); C at 300 (B until 320).
        let events = [claim(100, 1, 1), take_back(200, 2, 2, 1, 150), take_back(300, 3, 3, 2, 320)];
        let held = |stamp| match explain(&events, stamp, true, 1) {
            Finding::Held(t) => (t.holder.port, t.version),
            other => panic!("{stamp}: {other:?}"),
        };
        assert_eq!(held(101), (1, 1));
        assert_eq!(held(150), (1, 1));
        assert_eq!(held(201), (2, 2));
        assert_eq!(held(320), (2, 2));
        assert_eq!(held(321), (3, 3));
        assert_eq!(held(10_000), (3, 3));
        // Between A's bound and B's start nobody stamped.
        assert!(matches!(explain(&events, 170, true, 1), Finding::Unheld { .. }));
        // Each tenure ends at or before the next one starts.
        assert!(tenures(&events).windows(2).all(|t| t[0].until_ms.is_some_and(|until| until <= t[1].after_ms)));
    }

    #[test]
    fn stamps_before_the_retained_history_are_said_to_be_unknown() {
        let events = [take_back(500, 2, 7, 1, 450)];
        assert_eq!(explain(&events, 400, false, 1), Finding::BeforeHistory { first_ms: 500 });
        // A complete history that starts with a new id: nobody held it before.
        let events = [claim(500, 1, 1)];
        assert!(matches!(explain(&events, 400, true, 1), Finding::Unheld { previous: None, .. }));
        assert_eq!(explain(&events, 400, false, 1), Finding::BeforeHistory { first_ms: 500 });
        // A holder the update to 0.5.0 found at version 1: it may have stamped before.
        let found = Recorded { new_id: false, ..claim(500, 1, 1) };
        assert_eq!(explain(&[found], 400, true, 1), Finding::BeforeHistory { first_ms: 500 });
        assert_eq!(explain(&[], 400, true, 1), Finding::NoHistory);
        // A registry's first version follows its version base; a later one means a tombstone (rows
        // removed by hand had holders before).
        let base = 4_000_000_000_000;
        let events = [Recorded { new_id: true, ..claim(500, 1, base + 1) }];
        assert!(matches!(explain(&events, 400, true, base + 1), Finding::Unheld { previous: None, .. }));
        let events = [Recorded { new_id: true, ..claim(500, 1, base + 4) }];
        assert_eq!(explain(&events, 400, true, base + 1), Finding::BeforeHistory { first_ms: 500 });
    }

    #[test]
    fn a_release_ends_a_tenure_at_its_watermark_and_a_reuse_after_it_starts_a_new_one() {
        let events = [claim(100, 1, 1), release(200, 210), claim(400, 1, 3)];
        assert!(matches!(explain(&events, 205, true, 1), Finding::Held(t) if t.version == 1));
        assert!(matches!(explain(&events, 300, true, 1), Finding::Unheld { .. }));
        assert!(matches!(explain(&events, 401, true, 1), Finding::Held(t) if t.version == 3));
    }

    #[test]
    fn two_holders_that_may_have_stamped_the_same_millisecond_are_an_overlap() {
        // B's take-back recorded A's bound as 250, yet B started at 200: B did not wait for A.
        let mut bad = take_back(200, 2, 2, 1, 250);
        bad.not_before_ms = Some(200);
        let events = [claim(100, 1, 1), bad];
        match explain(&events, 220, true, 1) {
            Finding::Overlap(holders) => assert_eq!(holders.len(), 2),
            other => panic!("{other:?}"),
        }
        let all = tenures(&events);
        assert!(all[0].until_ms.is_some_and(|until| until > all[1].after_ms), "{all:?}");
    }

    #[test]
    fn a_restart_by_the_same_holder_ends_its_earlier_tenure_at_the_bound_it_waited_for() {
        // A claims at 100, is killed, and claims its held row back at 400 (version 2): its
        // earlier process may have stamped until 350, the restart stamps after 400.
        let restart = Recorded {
            kind: EventKind::Restart,
            previous_holder: Some(holder(1)),
            previous_bound_ms: Some(350),
            new_id: false,
            ..claim(400, 1, 2)
        };
        let events = [claim(100, 1, 1), restart];
        let all = tenures(&events);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!((all[0].until_ms, all[0].end_assumed), (Some(350), false), "its end is recorded, not assumed");
        assert!(matches!(explain(&events, 300, true, 1), Finding::Held(t) if t.version == 1 && t.holder.port == 1));
        assert!(matches!(explain(&events, 401, true, 1), Finding::Held(t) if t.version == 2 && t.holder.port == 1));
        assert!(matches!(explain(&events, 380, true, 1), Finding::Unheld { .. }));
        assert!(EventKind::Restart.is_gain() && !EventKind::Restart.is_refused_claim());
    }

    #[test]
    fn a_claim_over_an_open_tenure_ends_it_at_the_new_start() {
        // A row deleted by hand, then registered again: the history has no end for A.
        let events = [claim(100, 1, 1), claim(300, 2, 1)];
        let first = &tenures(&events)[0];
        assert_eq!(first.until_ms, Some(300));
        assert!(first.end_assumed);
        assert!(matches!(explain(&events, 301, true, 1), Finding::Held(t) if t.holder.port == 2));
    }

    #[test]
    fn events_serialise_with_their_columns_as_keys() {
        let mut event = Event::new(EventKind::TakeBack, "orders");
        event.machine_id = Some(3);
        event.outcome = Some(Outcome::Idle1h.label());
        let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(json["event"], "take_back");
        assert_eq!(json["outcome"], "idle_1h");
        assert_eq!(json["machine_id"], 3);
        assert!(json.get("at").is_none(), "the server stamps it");
        assert!(json["previous_bound"].is_null());
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_label(kind.label()), Some(kind));
        }
        assert_eq!(EventKind::of_claim(Outcome::Reused), EventKind::Claim);
        assert_eq!(EventKind::of_claim(Outcome::Released), EventKind::TakeBack);
    }
}
