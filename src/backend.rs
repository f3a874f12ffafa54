//! Each backend's own leases on machine ids: the hot path of `idgen_next_id`
//! and the slow path that claims or verifies a lease through the registry.
//!
//! The hot path reads the clock once, compares it with the lease's check
//! deadline and composes the ID: no SPI, no lock shared with other backends
//! (the mutex below is this process's own). The slow path runs when no lease
//! is held or the deadline passed: it verifies the lease (a version-checked
//! heartbeat, or a version-checked read in a read-only transaction) or claims
//! one through `registry::claim`, the same code `idgen_claim` runs.

use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::diagnostics::history;
use crate::durability;
use crate::errors::{or_raise, raise, report};
use crate::privilege::as_extension_owner;
use crate::registry::access;
use crate::registry::claim::claim;
use crate::registry::store::{self, BackendCheck};
use crate::settings;
use idgen_core::generator::{Clock, Stop};
use idgen_core::input;
use idgen_core::lease::{BackendLeases, Terms};
use idgen_core::watermark::HolderKind;
use idgen_core::{messages, watermark, IdgenError, Layout};
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::Spi;
use pgrx::{pg_sys, PgLogLevel};
use std::ffi::c_void;

/// This backend's leases. Only this process locks it.
static STATE: Mutex<State> = Mutex::new(State { leases: BackendLeases::new(), session_service: None });
static DATABASE_NAME: OnceCell<String> = OnceCell::new();

struct State {
    leases: BackendLeases,
    /// Where the lease of `idgen.service` is, for the setting's generation it was resolved at.
    session_service: Option<(u64, usize)>,
}

/// The next ID for `service`. `check_name` validates a service name the
/// backend has not used yet (known names were checked when first used).
#[inline]
pub fn next_id(function: &str, service: &str, check_name: fn(&str) -> Result<String, IdgenError>) -> i64 {
    let mut clock = SystemClock;
    // A renewal leaves a deadline in the future, and each window is at least as long as the lease is old, so
    // a backend stalled past one window gets a longer one next. The bound only guards against a bug.
    for _ in 0..64 {
        let stop = match STATE.lock().leases.get(service).map(|lease| lease.next_id(&mut clock)) {
            Some(Ok(id)) => return id,
            Some(Err(stop)) => stop,
            None => {
                or_raise(check_name(service));
                Stop::LeaseCheckDue
            }
        };
        match stop {
            Stop::LeaseCheckDue => renew(function, service),
            Stop::ClockBehind { behind_ms, allowed_ms } => {
                raise(messages::clock_behind(function, behind_ms, allowed_ms))
            }
            Stop::ClockOutsideLayout { now_unix_ms } => {
                raise(messages::clock_outside_layout(function, now_unix_ms, &Layout::DEFAULT))
            }
        }
    }
    panic!("idgen: {function}: the lease of service \"{service}\" was renewed but is still due for a check")
}

/// The next ID for the session's service: `idgen.service`, or the database's
/// name. The hot path compares the setting's generation, not its text.
#[inline]
pub fn next_id_of_session_service(function: &str) -> i64 {
    let generation = settings::service_generation();
    {
        let mut state = STATE.lock();
        if let Some((resolved_at, index)) = state.session_service {
            if resolved_at == generation {
                if let Ok(id) = state.leases.at(index).next_id(&mut SystemClock) {
                    return id;
                }
            }
        }
    }
    let setting = settings::service_setting();
    let service =
        if setting.is_empty() { database_name().to_owned() } else { or_raise(input::service_setting(&setting)) };
    {
        let mut state = STATE.lock();
        let index = state.leases.index_or_add(&service);
        state.session_service = Some((generation, index));
    }
    next_id(function, &service, |name| Ok(name.to_owned()))
}

/// The current database's name (read once).
pub fn database_name() -> &'static str {
    DATABASE_NAME.get_or_init(|| {
        // SAFETY: reads the catalog for this backend's own database.
        let name = unsafe { pg_sys::get_database_name(pg_sys::MyDatabaseId) };
        assert!(!name.is_null(), "idgen: this backend's database has no name");
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    })
}

/// The slow path: verify the held lease, or claim one, in the caller's transaction.
fn renew(function: &str, service: &str) {
    let policy = or_raise(settings::claim_policy());
    let heartbeat_ms = policy.heartbeat_interval_secs * 1000;
    let lease_secs = policy.lease_secs();
    let max_backward_ms = settings::max_clock_backward_ms();
    // SAFETY: plain reads of backend-local state.
    let (on_standby, read_only, subxact) =
        unsafe { (pg_sys::RecoveryInProgress(), pg_sys::XactReadOnly, pg_sys::GetCurrentSubTransactionId()) };
    let writable = !(on_standby || read_only);
    // The role calling idgen_next_id: the check below runs with the extension owner's rights.
    // SAFETY: backend-local state.
    let caller = unsafe { pg_sys::GetUserId() };
    let (holding, terms) = {
        let mut state = STATE.lock();
        let lease = state.leases.get(service);
        (lease.as_ref().and_then(|l| l.holding()), lease.and_then(|l| l.held().map(|h| h.terms)))
    };

    as_extension_owner(|| {
        if let (Some(held), Some(terms)) = (holding, terms) {
            let epoch = terms.registry_epoch;
            let check = Spi::connect_mut(|client| {
                if writable {
                    durability::make_commit_durable();
                    // The window grows with the lease's age: see idgen_core::watermark.
                    let age_ms = SystemClock.now_unix_ms() - terms.claimed_at_unix_ms;
                    let window_ms = watermark::backend_window_ms(&policy, age_ms);
                    store::renew_backend_lease(client, &held, lease_secs, epoch, window_ms)
                } else {
                    store::read_backend_lease(client, &held, lease_secs, epoch)
                }
            });
            match check {
                BackendCheck::Held { verified_at, lease_until, issued_until } => {
                    let (verified_ms, until_ms, issued_ms) =
                        (unix_ms(verified_at), unix_ms(lease_until), unix_ms(issued_until));
                    let end_ms = until_ms.min(issued_ms);
                    if end_ms <= verified_ms {
                        // Only a read can find this: a write would have moved both on.
                        raise(messages::lease_expired_read_only(function, &held, end_ms));
                    }
                    let wrote_in = writable.then_some(subxact);
                    let mut state = STATE.lock();
                    let lease = state.leases.get_or_add(service);
                    lease.verified(verified_ms, until_ms, issued_ms, max_backward_ms, heartbeat_ms, wrote_in);
                    return;
                }
                BackendCheck::Busy => raise(messages::identity_busy(function, &held.node, Some(held.machine_id))),
                BackendCheck::Lost(now) => {
                    STATE.lock().leases.get_or_add(service).lost();
                    let warning = messages::backend_lease_lost(function, &held, now.as_ref());
                    let lost = history::lost_event(&held, &warning, caller);
                    Spi::connect_mut(|client| history::record_independently(client, lost));
                    report(warning, PgLogLevel::WARNING);
                }
            }
        }
        if !writable {
            raise(messages::no_lease_read_only(function, service, on_standby));
        }
        Spi::connect_mut(|client| access::authorize(client, function, HolderKind::Backend, caller, service));
        let node = or_raise(input::backend_identity(service.to_owned(), &settings::node_host(), server_port(), slot()));
        let claimed = or_raise(claim(function, &node, &policy, max_backward_ms, caller));
        let terms = Terms {
            machine_id: claimed.machine_id as u16,
            version: claimed.version,
            registry_epoch: claimed.registry_epoch,
            claimed_at_unix_ms: unix_ms(claimed.claimed_at),
            not_before_unix_ms: claimed.not_before_unix_ms,
            lease_until_unix_ms: unix_ms(claimed.lease_until),
            issued_until_unix_ms: unix_ms(claimed.issued_until),
        };
        let mut state = STATE.lock();
        state.leases.get_or_add(service).claimed(node, Layout::DEFAULT, terms, max_backward_ms, heartbeat_ms, subxact);
    });
}

fn server_port() -> i32 {
    // SAFETY: set at postmaster start, never changed.
    unsafe { pg_sys::PostPortNumber }
}

/// This backend's slot on the server: the same number for every connection
/// that lands in the slot, so reconnects reuse the slot's registry row.
fn slot() -> i32 {
    #[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15", feature = "pg16"))]
    // SAFETY: set once at backend start.
    let slot = unsafe { pg_sys::MyBackendId };
    #[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15", feature = "pg16")))]
    // SAFETY: set once at backend start.
    let slot = unsafe { pg_sys::MyProcNumber };
    slot
}

/// Hooks the leases to transaction ends; called from `_PG_init`.
pub fn register_transaction_callbacks() {
    // SAFETY: registers plain functions for the life of the backend.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
    }
}

/// The leases are only locked by this process, and never across a call that
/// can end a transaction; `try_lock` fails only when a FATAL error exits the
/// process from inside the hot path, where nothing is left to undo.
#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(event: pg_sys::XactEvent::Type, _arg: *mut c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            if let Some(mut state) = STATE.try_lock() {
                state.leases.committed();
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => {
            if let Some(mut state) = STATE.try_lock() {
                state.leases.aborted();
            }
        }
        XACT_EVENT_PRE_PREPARE => {
            // The names are copied out so that the lock is released before raising.
            let written = STATE.try_lock().map(|state| state.leases.written_in_open_transaction()).unwrap_or_default();
            if !written.is_empty() {
                raise(messages::prepare_with_lease_write(&written));
            }
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    subxact: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut c_void,
) {
    use pg_sys::SubXactEvent::*;
    let Some(mut state) = STATE.try_lock() else { return };
    match event {
        SUBXACT_EVENT_COMMIT_SUB => state.leases.subxact_committed(subxact, parent),
        SUBXACT_EVENT_ABORT_SUB => state.leases.subxact_aborted(subxact),
        _ => {}
    }
}

/// This backend's leases, one row per service it holds a machine id for.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn idgen_backend_leases() -> TableIterator<
    'static,
    (
        name!(service, String),
        name!(machine_id, i16),
        name!(version, i64),
        name!(backend_slot, Option<i32>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(not_before, Option<TimestampWithTimeZone>),
        name!(verified_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(issued_until, Option<TimestampWithTimeZone>),
        name!(ids_issued, i64),
        name!(last_used_at, Option<TimestampWithTimeZone>),
        name!(uncommitted, bool),
    ),
> {
    let state = STATE.lock();
    let rows: Vec<_> = state
        .leases
        .iter()
        .filter_map(|lease| {
            let held = lease.held()?;
            let holding = lease.holding()?;
            Some((
                lease.service().to_owned(),
                holding.machine_id,
                holding.version,
                holding.node.backend_slot,
                timestamptz(held.terms.claimed_at_unix_ms),
                timestamptz(held.terms.not_before_unix_ms),
                timestamptz(held.verified_at_unix_ms),
                timestamptz(held.terms.lease_until_unix_ms),
                timestamptz(held.terms.issued_until_unix_ms),
                lease.ids_issued() as i64,
                lease.last_issued_unix_ms().and_then(timestamptz),
                lease.written_in_open_transaction(),
            ))
        })
        .collect();
    TableIterator::new(rows)
}
