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
//! The slow path runs when no lease is held or the deadline passed. A lease the
//! slot's last backend left (`registry::handover`) is taken up without a write.
//! Otherwise a claim, and each renewal of the window, commit in a transaction of
//! their own (`registry::writer`) before any ID is issued under them: whatever the
//! caller's transaction and its savepoints do, every ID this backend returns is
//! covered by a committed claim and a committed watermark. In a read-only
//! transaction the lease is only read back, and serves until the window last
//! committed ends. When the backend exits, it leaves its leases in its slot for
//! the next backend; where it cannot, it records its last stamp in place of its
//! window, so that the next connection in its slot need not wait.

use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::durability;
use crate::errors::{or_raise, raise};
use crate::history::Who;
use crate::privilege::as_extension_owner;
use crate::registry::access;
use crate::registry::handover;
use crate::registry::incarnation;
use crate::registry::store::{self, BackendCheck};
use crate::registry::writer::{self, LeaseAnswer, LeaseRequest};
use crate::server;
use crate::settings;
use idgen_core::generator::{Clock, Stop};
use idgen_core::input;
use idgen_core::input::Holding;
use idgen_core::lease::{Authorized, BackendLeases, Uptake};
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
    // Each renewal writes a window from the clock as it reads then: one that still leaves the lease due
    // means the clock keeps moving past every window (a clock stepping forward again and again).
    raise(messages::lease_due_after_renewals(function, service))
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
    let service =
        if setting.is_empty() { crate::registry::own::service() } else { or_raise(input::service_setting(&setting)) };
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
    if service == crate::registry::own::service() {
        state.leases.at(index).needs_no_grant();
    }
    index
}

/// The slow path: authorize the acting role, then renew the held lease or claim one, each
/// committed on its own before any ID is issued under it.
fn renew(function: &str, service: &str) {
    renew_lease(function, service);
    mark_held();
}

/// Marks the leases this backend holds in its slot, for the diagnostics (`shared::HeldMark`).
fn mark_held() {
    let Some(slot) = crate::shared::area().and_then(|area| area.slot(server::backend_slot())) else { return };
    // SAFETY: set at process start.
    let (pid, database) = unsafe { (pg_sys::MyProcPid, u32::from(pg_sys::MyDatabaseId)) };
    let state = STATE.lock();
    let mut held = state.leases.iter().filter_map(|l| l.held().map(|h| h.verified_at_unix_ms));
    for mark in &slot.held {
        let (pid, last_seen) = held.next().map_or((0, 0), |at| (pid, at));
        mark.database.store(database, Ordering::Relaxed);
        mark.last_seen_ms.store(last_seen, Ordering::Relaxed);
        mark.pid.store(pid, Ordering::Release);
    }
}

/// Clears this backend's marks in its slot (it leaves).
fn unmark_held() {
    if let Some(slot) = crate::shared::area().and_then(|area| area.slot(server::backend_slot())) {
        slot.held.iter().for_each(|mark| mark.pid.store(0, Ordering::Release));
    }
}

/// The slow path's work: see [`renew`].
fn renew_lease(function: &str, service: &str) {
    // SAFETY: plain reads of backend-local state.
    let (in_parallel_worker, on_standby, read_only) =
        unsafe { (pg_sys::ParallelWorkerNumber >= 0, pg_sys::RecoveryInProgress(), pg_sys::XactReadOnly) };
    if in_parallel_worker {
        raise(messages::in_parallel_worker(function));
    }
    let confirmed = incarnation::confirming();
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
    // Before the grant check, whose answer is remembered: a service this transaction created and then
    // rolled back must not stay allowed.
    if holding.is_none()
        && writable
        && as_extension_owner(|| Spi::connect_mut(|client| access::created_in_this_transaction(client, service)))
    {
        raise(messages::service_created_in_this_transaction(function, service));
    }
    if !authorized {
        let role = pg_sys::Oid::from(acting.role);
        as_extension_owner(|| {
            Spi::connect_mut(|client| access::authorize(client, function, HolderKind::Backend, role, service))
        });
        STATE.lock().leases.get_or_add(service).set_authorized(Some(acting));
    }
    let who = Who::now(pg_sys::Oid::from(acting.role));
    let node = or_raise(input::backend_identity(
        service.to_owned(),
        &settings::node_host(),
        server::port(),
        server::backend_slot(),
    ));
    if holding.is_none() {
        // The slot's last backend left this service's lease: it goes on here, with no write.
        if let Some(parked) = handover::take(service) {
            let uptake = Uptake {
                now_unix_ms: SystemClock.now_unix_ms(),
                max_backward_ms,
                heartbeat_interval_ms: heartbeat_ms,
                machine_ids: settings.machine_id_range(),
                confirmed,
            };
            let adopted = STATE.lock().leases.get_or_add(service).adopt(parked, &node, &uptake).is_ok();
            if adopted {
                close_at_exit();
                return;
            }
        }
    }

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
                        confirmed,
                    );
                    return;
                }
                BackendCheck::Busy => {
                    STATE.lock().leases.get_or_add(service).lost();
                    raise(messages::no_lease_read_only(function, service, on_standby));
                }
                BackendCheck::Lost(now) => {
                    // A loss all the same, which a read cannot record in the history: counted
                    // (as the registry writer counts one), unless the registry was created again.
                    let epoch = as_extension_owner(|| Spi::connect_mut(store::read_epoch));
                    if epoch == terms.registry_epoch {
                        let told = messages::backend_lease_lost(function, &held, now.as_ref());
                        crate::history::tally(&crate::history::lost_event(&held, &told, &who));
                    }
                    STATE.lock().leases.get_or_add(service).lost();
                    raise(messages::no_lease_read_only(function, service, on_standby));
                }
            }
        }
        (Some(held), Some(terms)) => {
            let age_ms = SystemClock.now_unix_ms() - terms.claimed_at_unix_ms;
            Some(writer::renewal(held, terms.registry_epoch, &settings, age_ms))
        }
        _ if !writable => raise(messages::no_lease_read_only(function, service, on_standby)),
        _ => None,
    };
    let request = LeaseRequest { function: function.to_owned(), node: node.clone(), renew: renewal, settings, who };
    let answer = writer::backend_lease(request);
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
                confirmed,
            );
        }
        LeaseAnswer::Claimed(terms) => {
            lease.claimed(node, terms, max_backward_ms, heartbeat_ms, confirmed);
            drop(state);
            close_at_exit();
        }
    }
}

/// Registers, once, the exit hook that leaves the leases for the slot's next backend.
fn close_at_exit() {
    if !CLOSES_AT_EXIT.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a plain function for the life of the backend.
        unsafe { pg_sys::before_shmem_exit(Some(close_leases_at_exit), pg_sys::Datum::from(0)) };
    }
}

/// Records every held lease's last stamp (see `BackendLease::closing_watermark_unix_ms`) in the
/// current transaction, as the extension owner, and forgets the leases: the next ID claims anew.
/// The session that drops the extension does this first, with the leases parked in its database
/// (`handover::close_parked_here`), so that they count as what they stamped, not as their windows.
pub fn close_leases(client: &mut SpiClient) {
    let closings = {
        let mut state = STATE.lock();
        let services: Vec<String> = state.leases.iter().map(|l| l.service().to_owned()).collect();
        let closings: Vec<_> = services.iter().filter_map(|s| state.leases.closing_of(s)).collect();
        state.leases.lose_all();
        closings
    };
    record_closings(client, &closings);
    handover::close_parked_here(client);
}

fn record_closings(client: &mut SpiClient, closings: &[(Holding, i64, i64)]) {
    for (held, closing_ms, epoch) in closings {
        if let Some(closing) = timestamptz(*closing_ms) {
            store::close_backend_lease(client, held, *epoch, closing);
        }
    }
}

/// The backend's state, in the exit hook. A FATAL error raised while the generator waits for its
/// clock (`pg_terminate_backend`, a fast shutdown, `DROP DATABASE … WITH (FORCE)` during a wait for
/// the next tick or for a clock stepped back) leaves through `proc_exit` from inside `next_id`,
/// whose frame holds the lock and never resumes: taking it again would hang the exit for good. A
/// backend runs one thread, so a lock held here is held by that abandoned frame; the wait changes
/// nothing before it returns, so what the lock guards is whole.
fn state_at_exit() -> parking_lot::MutexGuard<'static, State> {
    if let Some(state) = STATE.try_lock() {
        return state;
    }
    // SAFETY: the holder is a frame of this thread that proc_exit abandoned (see above); no other
    // thread exists to hold it.
    unsafe { STATE.force_unlock() };
    STATE.lock()
}

/// The exit hook: each held lease is left in the slot for the next backend (no write); one that
/// cannot be (no shared memory, the slot's entries hold other services' leases, the registry may
/// be gone, or the backend ends with an error: terminated, a server shutting down, whose shared
/// memory goes with it) has its last stamp recorded, in
/// a transaction of its own, as PostgreSQL's own clean-up of temporary tables does. Nothing that
/// record can fail at matters: the window it would have lowered stays, which only makes the next
/// holder wait for it.
#[pg_guard]
unsafe extern "C-unwind" fn close_leases_at_exit(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // A client that disconnects (or whose connection drops) ends its backend with 0; a FATAL error
    // (pg_terminate_backend, a server shutting down) with 1.
    let terminated = code != 0;
    unmark_held();
    let unparked: Vec<(Holding, i64, i64)> = {
        let mut state = state_at_exit();
        let generation = incarnation::generation();
        let services: Vec<String> = state.leases.iter().map(|l| l.service().to_owned()).collect();
        let mut unparked = Vec::new();
        for service in services {
            let lease = state.leases.get_or_add(&service);
            let parked = !terminated && lease.park(generation).is_some_and(|p| handover::park(&p));
            if !parked {
                unparked.extend(state.leases.closing_of(&service));
            }
        }
        state.leases.lose_all();
        unparked
    };
    if unparked.is_empty() {
        return;
    }
    // SAFETY: no transaction may be open on the way out; this ends whatever was.
    unsafe { pg_sys::AbortOutOfAnyTransaction() };
    // A session's own settings (read only, a short statement_timeout) must not make the record fail.
    writer::settle_for_registry_writes();
    let closed = writer::in_own_transaction(|| {
        // Without waiting for a standby: a fast shutdown (a switchover's demotion) ends backends
        // with one SIGTERM, and a commit waiting for a standby the switchover took away would then
        // hang the backend and the server's shutdown for good. The record only narrows the rows'
        // windows: a standby that misses it keeps them whole, which fences more, never less.
        durability::commit_without_standby();
        as_extension_owner(|| Spi::connect_mut(|client| record_closings(client, &unparked)));
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
