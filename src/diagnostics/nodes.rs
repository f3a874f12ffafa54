//! What the views of `sql/diagnostics.sql` compute in Rust: the policy as the
//! claim uses it, each row's state by the core's rule (never re-typed in SQL),
//! and which live backend sits in a backend row's slot.

use crate::errors::or_raise;
use crate::server;
use crate::settings;
use idgen_core::input::{self, node_name};
use idgen_core::layout::ServiceLayout;
use idgen_core::messages;
use idgen_core::policy::RowAges;
use pgrx::datum::{Inet, Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;

fn interval(secs: i64) -> Interval {
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    Interval::new(0, days as i32, rest * 1_000_000).expect("settings fit an interval")
}

/// Seconds from `ts` to the transaction's start (the `now()` the claim compares with).
fn age_secs(ts: TimestampWithTimeZone) -> f64 {
    // SAFETY: reads backend-local transaction state.
    let now = unsafe { pg_sys::GetCurrentTransactionStartTimestamp() };
    let ts: pg_sys::TimestampTz = ts.into();
    now.saturating_sub(ts) as f64 / 1e6
}

fn interval_ms(ms: i64) -> Interval {
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    Interval::new(0, days as i32, rest * 1_000).expect("settings fit an interval")
}

/// Why the settings are inconsistent, as `idgen_policy().problem` says it, or None.
fn settings_problem() -> Option<String> {
    settings::configured_value_refused()
        .map(|e| e.one_line())
        .or_else(|| messages::settings_problem(&settings::in_force()))
}

/// `idgen.machine_id_range` as the views read it (count, first, last). The views of 0.7.0 on meet it
/// with each service's pool; those before take it as every service's capacity, and all their services
/// have the default layout: for them it is the part of the default pool inside the range.
fn range_for_views() -> (i32, i32, i32) {
    let range = settings::machine_id_range();
    let (first, last) = (i32::from(*range.start()), i32::from(*range.end()));
    if crate::privilege::installed_has_layouts() {
        return (last - first + 1, first, last);
    }
    match ServiceLayout::DEFAULT.pool.within(&range) {
        Some(pool) => (pool.size() as i32, i32::from(pool.first), i32::from(pool.last)),
        None => (0, first, last),
    }
}

/// The effective idgen policy, one row: what the claim, the views and `idgen_health()` run by.
#[pg_extern(stable, parallel_safe, name = "idgen_policy")]
#[allow(clippy::type_complexity)]
fn policy() -> TableIterator<
    'static,
    (
        name!(lease, Interval),
        name!(heartbeat_interval, Interval),
        name!(lease_safety_margin, Interval),
        name!(release_cooldown, Interval),
        name!(takeover_idle_1h, Interval),
        name!(takeover_idle_1d, Interval),
        name!(takeover_idle_7d, Interval),
        name!(capacity_warning, f64),
        name!(capacity_critical, f64),
        name!(history_retention, Interval),
        name!(machine_ids, i32),
        name!(machine_id_first, i32),
        name!(machine_id_last, i32),
        name!(require_synchronous_standby, bool),
        name!(problem, Option<String>),
        name!(clock_skew_alert, Interval),
        name!(restart_loop_window, Interval),
        name!(restart_loop_claims, i32),
        name!(deprecated_capacity_alert, Option<f64>),
        name!(inverted_capacity_warning, Option<f64>),
    ),
> {
    crate::privilege::ensure_sql_version();
    let p = settings::policy_in_force();
    let (machine_ids, machine_id_first, machine_id_last) = range_for_views();
    TableIterator::once((
        interval(p.lease_secs().max(0)),
        interval(p.heartbeat_interval_secs),
        interval(p.lease_safety_margin_secs),
        interval(p.release_cooldown_secs),
        interval(p.takeover_idle_1h_secs),
        interval(p.takeover_idle_1d_secs),
        interval(p.takeover_idle_7d_secs),
        settings::capacity_warning(),
        settings::capacity_critical(),
        interval(settings::history_retention_secs()),
        machine_ids,
        machine_id_first,
        machine_id_last,
        settings::require_synchronous_standby(),
        settings_problem(),
        interval_ms(settings::clock_skew_alert_ms()),
        interval(settings::restart_loop_window_secs()),
        settings::restart_loop_claims(),
        settings::deprecated_capacity_alert(),
        settings::inverted_capacity_warning(),
    ))
}

/// `idgen_policy()` as the SQL of 0.4.0 to 0.5.1 declares it (symbol `idgen_policy_wrapper`, which
/// `src/earlier_symbols.rs` forwards here), for a database not updated yet: `capacity_alert` is
/// `idgen.capacity_warning`, the level at which a claim alerts first. Today's is [`policy`].
#[pg_extern(stable, parallel_safe, sql = false)]
#[allow(clippy::type_complexity)]
fn policy_of_0_5() -> TableIterator<
    'static,
    (
        name!(lease, Interval),
        name!(heartbeat_interval, Interval),
        name!(lease_safety_margin, Interval),
        name!(release_cooldown, Interval),
        name!(takeover_idle_1h, Interval),
        name!(takeover_idle_1d, Interval),
        name!(takeover_idle_7d, Interval),
        name!(capacity_alert, f64),
        name!(history_retention, Interval),
        name!(machine_ids, i32),
        name!(machine_id_first, i32),
        name!(machine_id_last, i32),
        name!(require_synchronous_standby, bool),
        name!(problem, Option<String>),
    ),
> {
    crate::privilege::ensure_sql_version();
    let p = settings::policy_in_force();
    let (machine_ids, machine_id_first, machine_id_last) = range_for_views();
    TableIterator::once((
        interval(p.lease_secs().max(0)),
        interval(p.heartbeat_interval_secs),
        interval(p.lease_safety_margin_secs),
        interval(p.release_cooldown_secs),
        interval(p.takeover_idle_1h_secs),
        interval(p.takeover_idle_1d_secs),
        interval(p.takeover_idle_7d_secs),
        settings::capacity_warning(),
        interval(settings::history_retention_secs()),
        machine_ids,
        machine_id_first,
        machine_id_last,
        settings::require_synchronous_standby(),
        settings_problem(),
    ))
}

/// The state of a registry row (see `idgen_core::policy::NodeState`), by the lease it records.
#[pg_extern(stable, parallel_safe, name = "idgen_node_state")]
fn node_state(
    last_seen: Option<TimestampWithTimeZone>,
    released_at: Option<TimestampWithTimeZone>,
    lease_until: Option<TimestampWithTimeZone>,
    takeover_at: Option<TimestampWithTimeZone>,
) -> &'static str {
    crate::privilege::ensure_sql_version();
    let last_seen = or_raise(input::required("idgen_node_state", "last_seen", last_seen));
    let ages = RowAges {
        idle_secs: age_secs(last_seen),
        released_secs: released_at.map(age_secs),
        lease_left_secs: lease_until.map(|t| -age_secs(t)),
        takeover_left_secs: takeover_at.map(|t| -age_secs(t)),
    };
    settings::policy_in_force().node_state(ages).label()
}

/// How messages name a node: `10.0.0.5:8080`, or `backend slot 7 of 127.0.0.1:5432`.
/// NULL when there is no node (no host or port).
#[pg_extern(immutable, parallel_safe)]
fn idgen_node_name(host: Option<Inet>, port: Option<i32>, backend_slot: Option<i32>) -> Option<String> {
    let host = host?.0.split('/').next().unwrap_or_default().to_owned();
    Some(node_name(&host, port?, backend_slot))
}

/// The pid of the process in backend slot `backend_slot` of this server, when the row
/// is one of this server's backends (host `idgen.node_host`, this port); NULL otherwise.
#[pg_extern(stable, parallel_restricted)]
fn idgen_slot_pid(host: Option<Inet>, port: Option<i32>, backend_slot: Option<i32>) -> Option<i32> {
    slot_pid_of(&host?.0, port?, backend_slot)
}

/// The pid of the process in backend slot `backend_slot` of this server when it is the row's
/// holder: a backend row of this server, and the process started before the row was last
/// written (every claim and renewal of a backend writes `last_seen`, after the backend
/// started). A process that took the slot later (any client, a replication worker) has not
/// used the row: NULL.
#[pg_extern(stable, parallel_restricted, name = "idgen_slot_pid")]
fn idgen_slot_holder_pid(
    host: Option<Inet>,
    port: Option<i32>,
    backend_slot: Option<i32>,
    last_seen: Option<TimestampWithTimeZone>,
) -> Option<i32> {
    let pid = slot_pid_of(&host?.0, port?, backend_slot)?;
    let last_seen = last_seen?;
    // A backend that took up the lease its slot's last backend left started after the row's last
    // write: it marks the leases it holds in its slot (`backend::mark_held`).
    let marked = crate::shared::area().and_then(|area| area.slot(backend_slot?)).is_some_and(|slot| {
        // SAFETY: set at backend start.
        let database = u32::from(unsafe { pg_sys::MyDatabaseId });
        let last_seen_ms = crate::clock::unix_ms(last_seen);
        slot.held.iter().any(|mark| {
            mark.pid.load(std::sync::atomic::Ordering::Acquire) == pid
                && mark.database.load(std::sync::atomic::Ordering::Relaxed) == database
                && mark.last_seen_ms.load(std::sync::atomic::Ordering::Relaxed) == last_seen_ms
        })
    });
    if marked {
        return Some(pid);
    }
    let last_seen: pg_sys::TimestampTz = last_seen.into();
    server::process_start(pid).filter(|started| *started <= last_seen).map(|_| pid)
}

/// [`idgen_slot_pid`] for a holder's address, port and slot.
pub fn slot_pid_of(host: &str, port: i32, backend_slot: Option<i32>) -> Option<i32> {
    let slot = backend_slot?;
    if !holder_here(host, port) {
        return None;
    }
    server::process_in_slot(slot)
}

/// Whether a holder's address and port are this server's (`idgen.node_host`, its port), on a
/// primary: a standby's registry rows are its primary's, whatever the addresses.
fn holder_here(host: &str, port: i32) -> bool {
    let address = |text: &str| text.split('/').next().unwrap_or_default().trim().parse::<std::net::IpAddr>().ok();
    // SAFETY: reads shared recovery state.
    let on_standby = unsafe { pg_sys::RecoveryInProgress() };
    !on_standby && port == server::port() && address(host).is_some() && address(host) == address(&settings::node_host())
}

/// Whether a registry row is a backend row of this server (a backend slot, and the address and
/// port of this server, a primary): the views show such a row inside its lease with no process
/// in it as `parked`.
#[pg_extern(stable, parallel_safe)]
fn idgen_backend_row_here(host: Option<Inet>, port: Option<i32>, backend_slot: Option<i32>) -> bool {
    match (host, port, backend_slot) {
        (Some(host), Some(port), Some(_)) => holder_here(&host.0, port),
        _ => false,
    }
}
