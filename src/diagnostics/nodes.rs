//! What the views of `sql/diagnostics.sql` compute in Rust: the policy as the
//! claim uses it, each row's state by the core's rule (never re-typed in SQL),
//! and which live backend sits in a backend row's slot.

use crate::errors::or_raise;
use crate::settings;
use idgen_core::input::{self, node_name};
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

/// The effective idgen policy, one row: what the claim, the views and `idgen_health()` run by.
#[pg_extern(stable, parallel_safe)]
#[allow(clippy::type_complexity)]
fn idgen_policy() -> TableIterator<
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
    let p = settings::policy_as_set();
    let range = settings::machine_id_range();
    let problem = settings::configured_value_refused()
        .or_else(|| p.validate().err())
        .map(|e| format!("{} {}", e.message, e.detail.unwrap_or_default()));
    TableIterator::once((
        interval(p.lease_secs().max(0)),
        interval(p.heartbeat_interval_secs),
        interval(p.lease_safety_margin_secs),
        interval(p.release_cooldown_secs),
        interval(p.takeover_idle_1h_secs),
        interval(p.takeover_idle_1d_secs),
        interval(p.takeover_idle_7d_secs),
        settings::capacity_alert(),
        interval(settings::history_retention_secs()),
        range.len() as i32,
        i32::from(*range.start()),
        i32::from(*range.end()),
        settings::require_synchronous_standby(),
        problem,
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
    settings::policy_as_set().node_state(ages).label()
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
    let last_seen: pg_sys::TimestampTz = last_seen?.into();
    process_start(pid).filter(|started| *started <= last_seen).map(|_| pid)
}

/// When process `pid` started, from this transaction's snapshot of the backends' status.
fn process_start(pid: i32) -> Option<pg_sys::TimestampTz> {
    // SAFETY: the snapshot is built once per transaction and lives until it ends; each entry is
    // a plain struct copied into it.
    unsafe {
        let count = pg_sys::pgstat_fetch_stat_numbackends();
        (1..=count).find_map(|index| {
            let entry = local_status(index);
            (!entry.is_null() && (*entry).backendStatus.st_procpid == pid)
                .then(|| (*entry).backendStatus.st_proc_start_timestamp)
        })
    }
}

#[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15"))]
unsafe fn local_status(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    pg_sys::pgstat_fetch_stat_local_beentry(index)
}

#[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15")))]
unsafe fn local_status(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    pg_sys::pgstat_get_local_beentry_by_index(index)
}

/// [`idgen_slot_pid`] for a holder's address, port and slot.
pub fn slot_pid_of(host: &str, port: i32, backend_slot: Option<i32>) -> Option<i32> {
    let slot = backend_slot?;
    // SAFETY: set at postmaster start.
    let our_port = unsafe { pg_sys::PostPortNumber };
    let ours = |text: &str| text.split('/').next().unwrap_or_default().trim().parse::<std::net::IpAddr>().ok();
    if port != our_port || ours(host).is_none() || ours(host) != ours(&settings::node_host()) {
        return None;
    }
    process_in_slot(slot)
}

/// The pid of the live process in `slot`, if any.
#[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15", feature = "pg16"))]
fn process_in_slot(slot: i32) -> Option<i32> {
    // A PGPROC keeps its backendId after its process exits, so the slot is looked up where
    // backends register it (sinvaladt.c), which clears it at exit.
    unsafe extern "C-unwind" {
        fn BackendIdGetProc(backend_id: std::ffi::c_int) -> *mut pg_sys::PGPROC;
    }
    if slot <= 0 {
        return None;
    }
    // SAFETY: exported by the server; takes its own lock and returns NULL for a free slot.
    let proc = unsafe { BackendIdGetProc(slot) };
    // SAFETY: a PGPROC in shared memory, alive while its slot is taken.
    (!proc.is_null()).then(|| unsafe { (*proc).pid }).filter(|pid| *pid != 0)
}

/// From 17 on a slot is the PGPROC's index (`ProcNumber`); ProcArrayLock
/// (`MainLWLockArray[4]`) keeps it from changing while it is read.
#[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15", feature = "pg16")))]
fn process_in_slot(slot: i32) -> Option<i32> {
    const PROC_ARRAY_LOCK: usize = 4;
    // SAFETY: ProcGlobal is set up at startup; the entry is read under ProcArrayLock, shared.
    unsafe {
        let global = pg_sys::ProcGlobal;
        if global.is_null() || slot < 0 || slot as u32 >= (*global).allProcCount {
            return None;
        }
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(PROC_ARRAY_LOCK)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        let pid = (*(*global).allProcs.add(slot as usize)).pid;
        pg_sys::LWLockRelease(lock);
        (pid != 0).then_some(pid)
    }
}
