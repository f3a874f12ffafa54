//! The registry writers' processes: which one serves a request, how one is started, and each
//! writer's life: take a place, connect to a database, serve its requests, close the leases parked
//! in it that nobody took up, and leave.

use super::ending::{install_sigterm_handler, last_writes_first, terminating};
use super::segment::respond;
use super::transaction::settle_for_registry_writes;
use crate::registry::handover;
use crate::shared::{self, mail, Area, WriterEntry, WRITERS};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

/// `bgw_type` of the writers, as `pg_stat_activity.backend_type` shows it.
pub const WORKER_TYPE: &str = "idgen registry writer";
/// A writer serving the registry through the mailboxes.
const WRITER_FUNCTION: &str = "idgen_registry_writer";
/// A writer started for one request (without idgen's shared memory).
const ONE_REQUEST_FUNCTION: &str = "idgen_registry_writer_once";
/// The argument of a writer started with the server; a writer started for a database gets its place.
const PERMANENT: u64 = 1 << 32;
/// A writer started for a database leaves it after this long without a request (and nothing
/// parked in it).
const IDLE_EXIT_MS: i64 = 10_000;
/// How often an idle writer looks whether its database is wanted alone, and the longest it sleeps.
const PROBE_MS: i64 = 200;
/// A lease parked this long and not taken up is closed by its database's writer (`handover`).
pub const PARKED_CLOSE_AFTER_MS: i64 = 10_000;
/// How long a writer asked to be started may take to show up before another start is tried.
const START_GRACE_MS: i64 = 10_000;
/// A writer started with the server that ran this recently is coming back (the server starts it
/// again a second after it leaves): a request waits for it, and takes no worker slot.
const PERMANENT_BACK_WITHIN_MS: i64 = 5_000;

/// Whether a writer for the caller's database is coming, or none could be started.
pub(super) enum Start {
    Coming,
    NoSlot,
}

/// From `_PG_init` while the server preloads idgen: the writers that start with the server and are
/// started again whenever one leaves (a second later), so that no write ever needs a free slot.
pub fn register_at_server_start() {
    for index in 0..WRITERS {
        BackgroundWorkerBuilder::new(&format!("{WORKER_TYPE} {}", index + 1))
            .set_type(WORKER_TYPE)
            .set_library("idgen")
            .set_function(WRITER_FUNCTION)
            .set_argument(Some(pg_sys::Datum::from(PERMANENT | index as u64)))
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(Duration::from_secs(1)))
            .load();
    }
}

/// Whether this process is one of idgen's registry writers (its `_PG_init` defines no settings:
/// it runs by the settings its callers took).
pub fn is_registry_writer() -> bool {
    // SAFETY: MyBgworkerEntry is set before the worker's library is loaded, NULL elsewhere.
    unsafe {
        let entry = pg_sys::MyBgworkerEntry;
        if entry.is_null() {
            return false;
        }
        let function = std::ffi::CStr::from_ptr((*entry).bgw_function_name.as_ptr()).to_bytes();
        function == WRITER_FUNCTION.as_bytes() || function == ONE_REQUEST_FUNCTION.as_bytes()
    }
}

// ---- the caller's side: a writer for its database

/// Makes sure a writer will take a request of `database`: wakes one that serves it or serves none
/// yet; else (preloaded) asks an idle one to move, or (not preloaded) starts one.
pub(super) fn ensure_writer(area: &Area, database: u32) -> Start {
    let writers = &area.writers;
    let serving = |w: &WriterEntry| w.load_pid() != 0 && !w.leave.load(Ordering::Acquire);
    let mut coming = false;
    for w in writers.iter().filter(|w| serving(w) && w.database.load(Ordering::Acquire) == database) {
        shared::wake(w.latch.load(Ordering::Acquire));
        if !w.busy.load(Ordering::Acquire) {
            return Start::Coming;
        }
        coming = true;
    }
    if let Some(w) = writers.iter().find(|w| serving(w) && w.database.load(Ordering::Acquire) == 0) {
        shared::wake(w.latch.load(Ordering::Acquire));
        return Start::Coming;
    }
    if coming {
        return Start::Coming;
    }
    let now = shared::now_ms();
    let being_started =
        |w: &WriterEntry| w.load_pid() == 0 && now - w.starting_since_ms.load(Ordering::Acquire) < START_GRACE_MS;
    if writers.iter().any(|w| being_started(w) && w.starting_database.load(Ordering::Acquire) == database) {
        return Start::Coming;
    }
    let permanent_ones = writers.iter().any(|w| w.load_pid() != 0 && w.permanent.load(Ordering::Acquire))
        || now - area.permanent_seen_ms.load(Ordering::Acquire) < PERMANENT_BACK_WITHIN_MS;
    if !permanent_ones {
        for (index, w) in writers.iter().enumerate() {
            let since = w.starting_since_ms.load(Ordering::Acquire);
            if w.load_pid() != 0 || now - since < START_GRACE_MS {
                continue;
            }
            if w.starting_since_ms.compare_exchange(since, now, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            w.starting_database.store(database, Ordering::Release);
            if start_for_database(index, database) {
                return Start::Coming;
            }
            w.starting_since_ms.store(0, Ordering::Release);
            return Start::NoSlot;
        }
    }
    // Every place serves another database: the one idle longest moves (a permanent writer is
    // started again at once, free; a writer started for a database frees its place).
    let idle = writers
        .iter()
        .filter(|w| serving(w) && !w.busy.load(Ordering::Acquire) && w.database.load(Ordering::Acquire) != database)
        .min_by_key(|w| w.idle_since_ms.load(Ordering::Acquire));
    if let Some(w) = idle {
        w.leave.store(true, Ordering::Release);
        shared::wake(w.latch.load(Ordering::Acquire));
    }
    Start::Coming
}

/// Starts a writer for `database` in place `index`; false when no background worker slot is free.
fn start_for_database(index: usize, database: u32) -> bool {
    BackgroundWorkerBuilder::new(WORKER_TYPE)
        .set_type(WORKER_TYPE)
        .set_library("idgen")
        .set_function(WRITER_FUNCTION)
        .set_argument(Some(pg_sys::Datum::from(index as u64)))
        .set_extra(&database.to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic()
        .is_ok()
}

// ---- a writer's life

/// A registry writer: started with the server (`PERMANENT`), or for one database in a place.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idgen_registry_writer(argument: pg_sys::Datum) {
    // SAFETY: this process's SIGTERM handler, before pgrx unblocks the signals.
    unsafe { install_sigterm_handler() };
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    let argument = argument.value() as u64;
    let permanent = argument & PERMANENT != 0;
    let Some(area) = shared::area() else { return };
    let Some(index) = take_place(area, permanent, (argument & 0xffff_ffff) as usize) else { leave(permanent) };
    let me = &area.writers[index];
    // SAFETY: registers a plain function for the life of the process.
    unsafe { pg_sys::before_shmem_exit(Some(free_place), pg_sys::Datum::from(index)) };
    let mut database = 0;
    if !permanent {
        database = BackgroundWorker::get_extra().parse().unwrap_or(0);
        if database == 0 {
            leave(false);
        }
        connect(me, database);
    }
    let (mut last_request, mut last_probe, mut last_parked) = (shared::now_ms(), 0, shared::now_ms());
    loop {
        if terminating() {
            // The server stops (or a superuser ended this writer): the leases parked in its
            // database are closed now, while it can still write (unless the database is going),
            // without waiting for a standby that may be gone. The end that SIGTERM asked for waits
            // for this write.
            last_writes_first();
            if database != 0 && !wanted_alone(database) {
                handover::close_parked(database, |_| true, false);
            }
            leave(permanent);
        }
        // Barriers (DROP DATABASE waits for every process to absorb one), and what else a backend
        // answers between statements.
        pg_sys::check_for_interrupts!();
        if permanent {
            area.permanent_seen_ms.store(shared::now_ms(), Ordering::Release);
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: what every process does with a reload.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if me.leave.load(Ordering::Acquire) {
            if database != 0 {
                handover::close_parked(database, parked_long_enough, true);
            }
            leave(permanent);
        }
        if let Some(slot) = take_request(area, index, database) {
            if database == 0 {
                database = slot.mailbox.database.load(Ordering::Acquire);
                connect(me, database);
            }
            me.busy.store(true, Ordering::Release);
            answer(&slot.mailbox);
            me.idle_since_ms.store(shared::now_ms(), Ordering::Release);
            me.busy.store(false, Ordering::Release);
            last_request = shared::now_ms();
            continue;
        }
        if database != 0 {
            let now = shared::now_ms();
            if now - last_probe >= PROBE_MS {
                last_probe = now;
                if wanted_alone(database) {
                    // DROP DATABASE, a rename or a copy waits for every connection to leave: no
                    // write into it now.
                    leave(permanent);
                }
            }
            if now - last_parked >= 1_000 {
                last_parked = now;
                handover::close_parked(database, parked_long_enough, true);
            }
            // A writer started for its database leaves once idle, and once nothing parked in its
            // database waits to be closed (it closes what was parked long enough, above).
            if !permanent && now - last_request >= IDLE_EXIT_MS && !handover::any_parked(database) {
                leave(false);
            }
        }
        shared::sleep_on_latch(PROBE_MS);
    }
}

fn parked_long_enough(parked_at_ms: i64) -> bool {
    shared::now_ms() - parked_at_ms >= PARKED_CLOSE_AFTER_MS
}

/// Ends the process: a permanent writer with 1 (the server starts it again), another with 0.
fn leave(permanent: bool) -> ! {
    // SAFETY: the exit callbacks free the place.
    unsafe { pg_sys::proc_exit(i32::from(permanent)) };
    // PostgreSQL 15's bindings declare proc_exit as not returning, 18's do not.
    #[allow(unreachable_code)]
    {
        unreachable!("proc_exit returned")
    }
}

/// Takes a place among the writers: a permanent writer any free one, a writer started for a
/// database the one it was started for. Should writers started for databases (while none of the
/// server's ran) hold every place, a permanent writer asks an idle one to leave and waits.
fn take_place(area: &Area, permanent: bool, index: usize) -> Option<usize> {
    // SAFETY: set at process start.
    let pid = unsafe { pg_sys::MyProcPid };
    let take = |i: usize| {
        let w = &area.writers[i];
        if w.pid.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        w.incarnation.fetch_add(1, Ordering::AcqRel);
        w.latch.store(shared::my_latch(), Ordering::Release);
        w.database.store(0, Ordering::Release);
        w.busy.store(false, Ordering::Release);
        w.leave.store(false, Ordering::Release);
        w.permanent.store(permanent, Ordering::Release);
        w.idle_since_ms.store(shared::now_ms(), Ordering::Release);
        w.starting_since_ms.store(0, Ordering::Release);
        true
    };
    if !permanent {
        return (index < WRITERS && take(index)).then_some(index);
    }
    loop {
        if let Some(i) = (0..WRITERS).find(|i| take(*i)) {
            return Some(i);
        }
        if terminating() {
            return None;
        }
        // It runs, and serves as soon as a place frees: idgen_health() is not to say none runs.
        area.permanent_seen_ms.store(shared::now_ms(), Ordering::Release);
        let idle_started_for_a_database = area
            .writers
            .iter()
            .find(|w| w.load_pid() != 0 && !w.permanent.load(Ordering::Acquire) && !w.busy.load(Ordering::Acquire));
        if let Some(w) = idle_started_for_a_database {
            w.leave.store(true, Ordering::Release);
            shared::wake(w.latch.load(Ordering::Acquire));
        }
        shared::sleep_on_latch(PROBE_MS);
        pg_sys::check_for_interrupts!();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn free_place(_code: std::ffi::c_int, index: pg_sys::Datum) {
    let Some(area) = shared::area() else { return };
    let Some(w) = area.writers.get(index.value()) else { return };
    w.database.store(0, Ordering::Release);
    w.busy.store(false, Ordering::Release);
    w.latch.store(std::ptr::null_mut(), Ordering::Release);
    // SAFETY: set at process start.
    let _ = w.pid.compare_exchange(unsafe { pg_sys::MyProcPid }, 0, Ordering::AcqRel, Ordering::Acquire);
}

fn connect(me: &WriterEntry, database: u32) {
    me.database.store(database, Ordering::Release);
    // SAFETY: a background worker with a database connection, connecting once.
    unsafe { pg_sys::BackgroundWorkerInitializeConnectionByOid(pg_sys::Oid::from(database), pg_sys::InvalidOid, 0) };
    settle_for_registry_writes();
}

/// The first request posted for `database` (any database, for a writer not connected yet), taken.
fn take_request(area: &Area, index: usize, database: u32) -> Option<&crate::shared::SlotEntry> {
    let incarnation = area.writers[index].incarnation.load(Ordering::Acquire);
    area.slots().find(|slot| {
        let m = &slot.mailbox;
        m.state.load(Ordering::Acquire) == mail::POSTED
            && (database == 0 || m.database.load(Ordering::Acquire) == database)
            && m.state
                .compare_exchange(mail::POSTED, mail::taken(index, incarnation), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    })
}

/// Runs the request in `mailbox` and answers it.
fn answer(mailbox: &crate::shared::Mailbox) {
    // SAFETY: the segment the caller named; it stays mapped here until detached, even if the caller
    // has gone.
    unsafe {
        let segment = pg_sys::dsm_attach(mailbox.segment.load(Ordering::Acquire));
        if !segment.is_null() {
            respond(pg_sys::dsm_segment_address(segment) as *mut u8);
            pg_sys::dsm_detach(segment);
        }
    }
    mailbox.state.store(mail::ANSWERED, Ordering::Release);
    shared::wake(mailbox.owner_latch.load(Ordering::Acquire));
}

/// Whether someone waits to have `database` alone: DROP DATABASE, ALTER DATABASE … RENAME or SET
/// TABLESPACE, or CREATE DATABASE copying it, each of which waits for every connection to leave.
/// They hold its lock in a mode that conflicts with a connection's.
fn wanted_alone(database: u32) -> bool {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: 0,
        locktag_field2: pg_sys::DatabaseRelationId.to_u32(),
        locktag_field3: database,
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    };
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a session lock taken without waiting and released at once, outside any transaction.
    unsafe {
        match pg_sys::LockAcquire(&tag, mode, true, true) {
            pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => true,
            _ => {
                pg_sys::LockRelease(&tag, mode, true);
                false
            }
        }
    }
}

// ---- one request, one writer (without idgen's shared memory)

/// A one-request writer of this backend left running by an interrupted wait (the handle lives in
/// TopMemoryContext).
static PENDING: AtomicPtr<pg_sys::BackgroundWorkerHandle> = AtomicPtr::new(std::ptr::null_mut());

/// Starts a writer for the request in `segment`, waiting for a free slot up to `slot_wait_ms`.
pub(super) fn start_for_one(
    segment: pg_sys::dsm_handle,
    slot_wait_ms: i64,
) -> Option<*mut pg_sys::BackgroundWorkerHandle> {
    let builder = BackgroundWorkerBuilder::new(WORKER_TYPE)
        .set_type(WORKER_TYPE)
        .set_library("idgen")
        .set_function(ONE_REQUEST_FUNCTION)
        .set_argument(Some(pg_sys::Datum::from(segment)))
        // SAFETY: set at backend start.
        .set_extra(&u32::from(unsafe { pg_sys::MyDatabaseId }).to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        // SAFETY: set at process start.
        .set_notify_pid(unsafe { pg_sys::MyProcPid });
    let mut worker: pg_sys::BackgroundWorker = (&builder).into();
    let mut waited_ms = 0;
    let mut pause_ms = 1;
    loop {
        let mut handle: *mut pg_sys::BackgroundWorkerHandle = std::ptr::null_mut();
        // SAFETY: the handle must outlive an interrupted wait: TopMemoryContext, freed after the wait.
        let registered = unsafe {
            let previous = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
            let registered = pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle);
            pg_sys::MemoryContextSwitchTo(previous);
            registered
        };
        if registered {
            PENDING.store(handle, Ordering::SeqCst);
            return Some(handle);
        }
        if waited_ms >= slot_wait_ms {
            return None;
        }
        pg_sys::check_for_interrupts!();
        // SAFETY: a plain sleep.
        unsafe { pg_sys::pg_usleep(pause_ms * 1000) };
        waited_ms += pause_ms;
        pause_ms = (pause_ms * 2).min(50);
    }
}

/// Waits for the writer `handle` to end; whether the postmaster died meanwhile.
pub(super) fn wait_for_one(handle: *mut pg_sys::BackgroundWorkerHandle) -> bool {
    // SAFETY: the handle from `start_for_one`, freed once.
    unsafe {
        let status = pg_sys::WaitForBackgroundWorkerShutdown(handle);
        PENDING.store(std::ptr::null_mut(), Ordering::SeqCst);
        pg_sys::pfree(handle.cast());
        status == pg_sys::BgwHandleStatus::BGWH_POSTMASTER_DIED
    }
}

/// Waits for a writer an interrupted wait left running: two writes of one backend never run at once.
pub(super) fn wait_for_pending() {
    let pending = PENDING.load(Ordering::SeqCst);
    if !pending.is_null() {
        wait_for_one(pending);
    }
}

/// The writer of one request: reads it from its segment, runs it in transactions of its own,
/// writes the answer, exits.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idgen_registry_writer_once(argument: pg_sys::Datum) {
    // SAFETY: the standard start of a background worker; the segment stays until the caller detaches.
    unsafe {
        install_sigterm_handler();
        pg_sys::BackgroundWorkerUnblockSignals();
        let database: u32 = BackgroundWorker::get_extra().parse().expect("the writer is given a database oid");
        pg_sys::BackgroundWorkerInitializeConnectionByOid(pg_sys::Oid::from(database), pg_sys::InvalidOid, 0);
        settle_for_registry_writes();
        let segment = pg_sys::dsm_attach(argument.value() as pg_sys::dsm_handle);
        if segment.is_null() {
            // The caller gave up before this writer started: nothing was asked of it any more.
            return;
        }
        respond(pg_sys::dsm_segment_address(segment) as *mut u8);
        pg_sys::dsm_detach(segment);
    }
}
