//! Each backend's own leases on machine ids: the hot path of `idgen_next_id`
//! and the slow path that claims or renews a lease through the registry.
//!
//! The hot path reads the clock once, compares it with the lease's check
//! deadline and the registry's generation with the one the lease was confirmed
//! in (`registry::incarnation`: a DROP moves it; reading it first processes pending
//! invalidations, one unlocked read of shared memory when none are queued), and
//! composes the ID: no SPI, no lock shared with other backends (the mutex below
//! is this process's own; the invalidation queue's read lock only when it holds
//! messages, as at any lock the backend takes). For
//! a service other than the database's own it also compares the acting role and
//! the grants' generation with those it last checked (`registry::access`).
//!
//! The slow path runs when no lease is held or the deadline passed. A claim, and
//! each renewal of the window, commit in a transaction of their own
//! (`registry::autonomous`) before any ID is issued under them: whatever the
//! caller's transaction and its savepoints do, every ID this backend returns is
//! covered by a committed claim and a committed watermark. In a read-only
//! transaction the lease is only read back, and serves until the window last
//! committed ends. When the backend exits, it records its last stamp in place of
//! its window, so that the next connection in its slot need not wait.

use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::errors::{or_raise, raise};
use crate::history::Who;
use crate::privilege::as_extension_owner;
use crate::registry::access;
use crate::registry::autonomous::{self, LeaseAnswer, Request};
use crate::registry::incarnation;
use crate::registry::store::{self, BackendCheck};
use crate::server;
use crate::settings;
use idgen_core::generator::{Clock, Stop};
use idgen_core::input;
use idgen_core::lease::{Authorized, BackendLeases};
use idgen_core::watermark::HolderKind;
use idgen_core::{messages, IdgenError, Layout};
use parking_lot::Mutex;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::{AtomicBool, Ordering};

/// This backend's leases. Only this process locks it.
static STATE: Mutex<State> = Mutex::new(State { leases: BackendLeases::new(), session_service: None });
/// Whether the exit hook that records the leases' last stamps is registered.
static CLOSES_AT_EXIT: AtomicBool = AtomicBool::new(false);

struct State {
    leases: BackendLeases,
    /// Where the lease of `idgen.service` is, for the setting's generation it was resolved at.
    session_service: Option<(u64, usize)>,
}

/// The role acting now and the grants' generation: an authorization stands while both are unchanged.
#[inline]
fn acting_now() -> Authorized {
    // SAFETY: backend-local state; idgen_next_id is not SECURITY DEFINER, so this is its caller.
    Authorized { role: u32::from(unsafe { pg_sys::GetUserId() }), grants_generation: access::grants_generation() }
}

/// The next ID for `service`. `check_name` validates a service name the
/// backend has not used yet (known names were checked when first used).
#[inline]
pub fn next_id(function: &str, service: &str, check_name: fn(&str) -> Result<String, IdgenError>) -> i64 {
    let mut clock = SystemClock;
    // A renewal leaves a deadline in the future, and each window is at least as long as the lease is old, so
    // a backend stalled past one window gets a longer one next. The bound only guards against a bug.
    for _ in 0..64 {
        let registry = incarnation::current();
        let (stop, layout) = {
            let mut state = STATE.lock();
            match state.leases.get(service) {
                Some(lease) if !lease.authorized_for(acting_now) => (Stop::LeaseCheckDue, None),
                Some(lease) => match lease.next_id(&mut clock, registry) {
                    Ok(id) => return id,
                    Err(stop) => (stop, lease.held().map(|h| h.terms.layout)),
                },
                None => {
                    drop(state);
                    or_raise(check_name(service));
                    (Stop::LeaseCheckDue, None)
                }
            }
        };
        match stop {
            Stop::LeaseCheckDue => renew(function, service),
            Stop::ClockBehind { behind_ms, allowed_ms } => {
                raise(messages::clock_behind(function, behind_ms, allowed_ms))
            }
            Stop::ClockOutsideLayout { now_unix_ms } => {
                raise(messages::clock_outside_layout(function, now_unix_ms, &layout.unwrap_or(Layout::DEFAULT)))
            }
        }
    }
    panic!("idgen: {function}: the lease of service \"{service}\" was renewed but is still due for a check")
}

/// The next ID for the session's service: `idgen.service`, or the database's
/// name. The hot path compares the setting's generation, not its text.
#[inline]
pub fn next_id_of_session_service(function: &str) -> i64 {
    let generation = settings::settings_generation();
    let registry = incarnation::current();
    {
        let mut state = STATE.lock();
        if let Some((resolved_at, index)) = state.session_service {
            if resolved_at == generation {
                let lease = state.leases.at(index);
                if lease.authorized_for(acting_now) {
                    if let Ok(id) = lease.next_id(&mut SystemClock, registry) {
                        return id;
                    }
                }
            }
        }
    }
    settings::warn_if_contradictory();
    let setting = settings::service_setting();
    let service = if setting.is_empty() {
        server::database_name().to_owned()
    } else {
        or_raise(input::service_setting(&setting))
    };
    {
        let mut state = STATE.lock();
        let index = lease_index(&mut state, &service);
        state.session_service = Some((generation, index));
    }
    next_id(function, &service, |name| Ok(name.to_owned()))
}

/// Where the lease of `service` is kept, created on first use; the database's own service needs no grant.
fn lease_index(state: &mut State, service: &str) -> usize {
    let index = state.leases.index_or_add(service);
    if service == server::database_name() {
        state.leases.at(index).needs_no_grant();
    }
    index
}

/// The slow path: authorize the acting role, then renew the held lease or claim one, each
/// committed on its own before any ID is issued under it.
fn renew(function: &str, service: &str) {
    // SAFETY: plain reads of backend-local state.
    let (in_parallel_worker, on_standby, read_only) =
        unsafe { (pg_sys::ParallelWorkerNumber >= 0, pg_sys::RecoveryInProgress(), pg_sys::XactReadOnly) };
    if in_parallel_worker {
        raise(messages::in_parallel_worker(function));
    }
    let generation = incarnation::confirming();
    let settings = or_raise(settings::claim_settings());
    let heartbeat_ms = settings.policy.heartbeat_interval_secs * 1000;
    let max_backward_ms = settings.max_clock_backward_ms;
    let writable = !(on_standby || read_only);
    let acting = acting_now();
    let (holding, terms, authorized) = {
        let mut state = STATE.lock();
        let index = lease_index(&mut state, service);
        let lease = state.leases.at(index);
        (lease.holding(), lease.held().map(|h| h.terms), lease.authorized_for(|| acting))
    };
    if !authorized {
        let role = pg_sys::Oid::from(acting.role);
        as_extension_owner(|| {
            Spi::connect_mut(|client| access::authorize(client, function, HolderKind::Backend, role, service))
        });
        STATE.lock().leases.get_or_add(service).set_authorized(Some(acting));
    }
    let who = Who::now(pg_sys::Oid::from(acting.role));

    let renewal = match (holding, terms) {
        (Some(held), Some(terms)) if !writable => {
            // A read cannot move the window: the lease serves until the window last committed ends.
            let check = as_extension_owner(|| {
                Spi::connect_mut(|client| {
                    store::read_backend_lease(client, &held, settings.policy.lease_secs(), terms.registry_epoch)
                })
            });
            match check {
                BackendCheck::Confirmed { verified_at, lease_until, issued_until } => {
                    let (verified_ms, until_ms, issued_ms) =
                        (unix_ms(verified_at), unix_ms(lease_until), unix_ms(issued_until));
                    let end_ms = until_ms.min(issued_ms);
                    if end_ms <= verified_ms {
                        raise(messages::lease_expired_read_only(function, &held, end_ms));
                    }
                    let mut state = STATE.lock();
                    state.leases.get_or_add(service).verified(
                        verified_ms,
                        until_ms,
                        issued_ms,
                        max_backward_ms,
                        heartbeat_ms,
                        generation,
                    );
                    return;
                }
                BackendCheck::Busy | BackendCheck::Lost(_) => {
                    STATE.lock().leases.get_or_add(service).lost();
                    raise(messages::no_lease_read_only(function, service, on_standby));
                }
            }
        }
        (Some(held), Some(terms)) => {
            let age_ms = SystemClock.now_unix_ms() - terms.claimed_at_unix_ms;
            Some(autonomous::renewal(held, terms.registry_epoch, &settings, age_ms))
        }
        _ if !writable => raise(messages::no_lease_read_only(function, service, on_standby)),
        _ => None,
    };
    let node = or_raise(input::backend_identity(
        service.to_owned(),
        &settings::node_host(),
        server::port(),
        server::backend_slot(),
    ));
    let request =
        Request::BackendLease { function: function.to_owned(), node: node.clone(), renew: renewal, settings, who };
    let answer = autonomous::backend_lease(request);
    let mut state = STATE.lock();
    let lease = state.leases.get_or_add(service);
    match answer {
        LeaseAnswer::Renewed { verified_at_unix_ms, lease_until_unix_ms, issued_until_unix_ms } => {
            lease.verified(
                verified_at_unix_ms,
                lease_until_unix_ms,
                issued_until_unix_ms,
                max_backward_ms,
                heartbeat_ms,
                generation,
            );
        }
        LeaseAnswer::Claimed(terms) => {
            lease.claimed(node, terms, max_backward_ms, heartbeat_ms, generation);
            drop(state);
            close_at_exit();
        }
    }
}

/// Registers, once, the exit hook that records the leases' last stamps.
fn close_at_exit() {
    if !CLOSES_AT_EXIT.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a plain function for the life of the backend.
        unsafe { pg_sys::before_shmem_exit(Some(close_leases_at_exit), pg_sys::Datum::from(0)) };
    }
}

/// Records every held lease's last stamp (see `BackendLease::closing_watermark_unix_ms`) in the
/// current transaction, as the extension owner, and forgets the leases: the next ID claims anew.
/// The session that drops the extension does this first, so that its own leases count as what
/// they stamped, not as their windows.
pub fn close_leases(client: &mut SpiClient) {
    let (closings, epochs): (Vec<_>, Vec<_>) = {
        let mut state = STATE.lock();
        let epochs: Vec<i64> = state.leases.iter().filter_map(|l| l.held().map(|h| h.terms.registry_epoch)).collect();
        let closings = state.leases.closings();
        state.leases.lose_all();
        (closings, epochs)
    };
    for ((held, closing_ms), epoch) in closings.iter().zip(epochs) {
        if let Some(closing) = timestamptz(*closing_ms) {
            store::close_backend_lease(client, held, epoch, closing);
        }
    }
}

/// The exit hook: a transaction of its own, as PostgreSQL's own clean-up of temporary tables
/// does. Nothing it can fail at matters: the window it would have lowered stays, which only makes
/// the next holder wait for it.
#[pg_guard]
unsafe extern "C-unwind" fn close_leases_at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    if STATE.lock().leases.closings().is_empty() {
        return;
    }
    // SAFETY: no transaction may be open on the way out; this ends whatever was.
    unsafe { pg_sys::AbortOutOfAnyTransaction() };
    // A session's own settings (read only, a short statement_timeout) must not make the record fail.
    autonomous::settle_for_registry_writes();
    let closed = autonomous::in_own_transaction(|| {
        as_extension_owner(|| Spi::connect_mut(close_leases));
        ((), true)
    });
    if let Err(e) = closed {
        pgrx::log!("idgen: the last stamps of this backend's leases were not recorded: {}", e.message);
    }
}

/// This backend's leases, one row per service it holds a machine id for.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn idgen_backend_leases() -> TableIterator<
    'static,
    (
        name!(service, String),
        name!(machine_id, i32),
        name!(version, i64),
        name!(backend_slot, Option<i32>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(not_before, Option<TimestampWithTimeZone>),
        name!(verified_at, Option<TimestampWithTimeZone>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(issued_until, Option<TimestampWithTimeZone>),
        name!(ids_issued, i64),
        name!(last_used_at, Option<TimestampWithTimeZone>),
    ),
> {
    crate::privilege::ensure_sql_version();
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
            ))
        })
        .collect();
    TableIterator::new(rows)
}
