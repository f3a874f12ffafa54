//! Registry writes that commit on their own: a short-lived background worker,
//! started for the write and waited for. PostgreSQL has no autonomous
//! transactions; this is how
//! - a database backend's claim, and each renewal of its window, commit before
//!   the backend issues an ID under them, so that no rollback of the caller's
//!   transaction or of a savepoint can take back the record that guards an ID
//!   (the IDs may well reach committed rows: a value kept by an ORM after
//!   `ROLLBACK TO SAVEPOINT`, an array returned by a caught exception block);
//! - a refusal is recorded although its error rolls the caller back
//!   (rate-limited: see `crate::history`);
//! - a service is readied for its first claim (its claim guards created and its layout fixed),
//!   committed, before any claim locks a guard or reads the layout.
//!
//! The request and the answer travel as JSON in a dynamic shared memory segment.
//! The worker connects to the caller's database as the bootstrap superuser,
//! runs the request as the extension owner (`privilege::as_extension_owner`) by
//! the settings the caller took, and exits. The caller's wait is interruptible;
//! a worker left running by an interrupted wait is waited for before the next.

use super::claim::{self, Refused};
use super::layouts;
use super::store::{self, BackendCheck, ClaimTerms};
use crate::clock::{unix_ms, SystemClock};
use crate::diagnostics::alerts::{self, Notice};
use crate::durability;
use crate::errors::CarriedError;
use crate::history::{self, Who};
use crate::privilege::as_extension_owner;
use crate::settings::ClaimSettings;
use idgen_core::generator::Clock;
use idgen_core::history::Event;
use idgen_core::input::{Holding, NodeIdentity};
use idgen_core::layout::Pool;
use idgen_core::lease::Terms;
use idgen_core::watermark::{self, HolderKind};
use idgen_core::{messages, IdgenError};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicPtr, Ordering};

const WORKER_FUNCTION: &str = "idgen_registry_writer";
/// `bgw_type` of the worker, as `pg_stat_activity.backend_type` shows it.
pub const WORKER_TYPE: &str = "idgen registry writer";
/// Room for the answer: a result and a few warnings.
const ANSWER_CAPACITY: usize = 64 * 1024;
/// How long a write waits for a free background worker slot before it fails (`53000`).
const SLOT_WAIT_MS: i64 = 10_000;
/// A registry write never waits long for a lock: only idgen's own short transactions (and a
/// superuser's hand-written ones) hold registry locks, but the caller itself may, while it waits.
const LOCK_TIMEOUT: &std::ffi::CStr = c"10s";

/// What a worker is asked to do. (Serialised once per request: the sizes of the variants do
/// not matter.)
#[derive(Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum Request {
    /// A database backend's lease for `node`: renew `renew` if given (claiming anew if it is
    /// lost), or claim.
    BackendLease { function: String, node: NodeIdentity, renew: Option<Renewal>, settings: ClaimSettings, who: Who },
    /// Ready a service for claims: its guard rows, its layout recorded and fixed.
    PrepareService { service: String },
    /// Record a refusal, unless one of its kind was recorded for its service within the interval.
    RecordRefusal { event: String },
}

/// A lease to renew: what the backend holds, in which registry epoch, for how long a window.
#[derive(Serialize, Deserialize)]
pub struct Renewal {
    pub held: Holding,
    pub epoch: i64,
    pub window_ms: i64,
}

/// What a backend's lease request got.
#[derive(Serialize, Deserialize)]
pub enum LeaseAnswer {
    Renewed { verified_at_unix_ms: i64, lease_until_unix_ms: i64, issued_until_unix_ms: i64 },
    Claimed(Terms),
}

/// The worker's answer.
#[derive(Serialize, Deserialize)]
struct Answer {
    result: Result<Option<LeaseAnswer>, CarriedError>,
    /// WARNINGs for the caller's client: the worker has no client.
    warnings: Vec<IdgenError>,
}

/// Claims or renews a backend's lease in a transaction of its own; raises what it raises.
pub fn backend_lease(request: Request) -> LeaseAnswer {
    let function = match &request {
        Request::BackendLease { function, .. } => function.clone(),
        _ => unreachable!("backend_lease takes a lease request"),
    };
    match run(&function, &request) {
        Some(answer) => answer,
        None => unreachable!("a lease request gets a lease or raises"),
    }
}

/// Readies `service` for claims (`layouts::prepare`), committed before this returns.
pub fn prepare_service(function: &str, service: &str) {
    run(function, &Request::PrepareService { service: service.to_owned() });
}

/// Records refusal `event` in a transaction of its own, if it is due (`history::refusal_due`;
/// rate-limited in the worker's write too). It never waits
/// for a worker slot: a refusal that finds none is left out (the caller's error is raised either
/// way, and is in the server log), so that a flood of refusals never keeps the slots from the
/// server's other work.
pub fn record_refusal(client: &mut SpiClient, mut event: Event) {
    if !history::refusal_due(client, &event) {
        return;
    }
    // SAFETY: set at process start, never changed.
    if unsafe { !pg_sys::IsUnderPostmaster } {
        return;
    }
    // A worker could not see an extension created by this transaction (and would wait for its
    // locks): the refusal is left out, the caller's error is raised all the same.
    if crate::privilege::installed().is_some_and(|installed| installed.this_transaction) {
        return;
    }
    event.at.get_or_insert_with(|| idgen_core::format::iso_utc(SystemClock.now_unix_ms()));
    let request = Request::RecordRefusal { event: event.to_json() };
    if let Err(why) = start_and_wait(&request, 0) {
        pgrx::debug1!("idgen: refusal not recorded ({}): {}", why.message, event.to_json());
    }
}

/// Runs `request` in a worker, reports its warnings, raises its error.
fn run(function: &str, request: &Request) -> Option<LeaseAnswer> {
    // SAFETY: set at process start, never changed.
    if unsafe { !pg_sys::IsUnderPostmaster } {
        crate::errors::raise(messages::single_user_mode(function));
    }
    // The worker's transaction cannot see an extension this one created and has not committed
    // (and would wait for its locks after a DROP and CREATE here).
    if crate::privilege::checked_installation().this_transaction {
        crate::errors::raise(messages::installed_in_this_transaction(function));
    }
    let answer = start_and_wait(request, SLOT_WAIT_MS).unwrap_or_else(|why| match why.worker_slot {
        true => crate::errors::raise(messages::no_worker_slot(function, SLOT_WAIT_MS)),
        false => CarriedError::from(IdgenError::new(idgen_core::SqlState::SystemError, why.message)).raise(),
    });
    for warning in answer.warnings {
        crate::errors::report(warning, pgrx::PgLogLevel::WARNING);
    }
    answer.result.unwrap_or_else(|e| e.raise())
}

struct NotRun {
    message: String,
    worker_slot: bool,
}

/// A worker of this backend left running by an interrupted wait (the handle lives in TopMemoryContext).
static PENDING: AtomicPtr<pg_sys::BackgroundWorkerHandle> = AtomicPtr::new(std::ptr::null_mut());

fn start_and_wait(request: &Request, slot_wait_ms: i64) -> Result<Answer, NotRun> {
    wait_for_pending();
    let json = serde_json::to_vec(request).expect("requests serialise");
    // SAFETY: a segment of our own, detached before returning (or by the resource owner if the
    // wait is interrupted; the worker keeps its own mapping until it exits).
    unsafe {
        let segment = pg_sys::dsm_create(HEADER + json.len() + ANSWER_CAPACITY, 0);
        let base = pg_sys::dsm_segment_address(segment) as *mut u8;
        std::ptr::write_unaligned(base as *mut u64, json.len() as u64);
        std::ptr::write_unaligned(base.add(8) as *mut u64, 0);
        std::ptr::copy_nonoverlapping(json.as_ptr(), base.add(HEADER), json.len());
        let handle = start(pg_sys::dsm_segment_handle(segment), slot_wait_ms);
        let Some(handle) = handle else {
            pg_sys::dsm_detach(segment);
            return Err(NotRun { message: "no background worker slot is free".into(), worker_slot: true });
        };
        PENDING.store(handle, Ordering::SeqCst);
        let status = pg_sys::WaitForBackgroundWorkerShutdown(handle);
        PENDING.store(std::ptr::null_mut(), Ordering::SeqCst);
        pg_sys::pfree(handle.cast());
        let answer_len = std::ptr::read_unaligned(base.add(8) as *const u64) as usize;
        let answer = (answer_len > 0).then(|| {
            let bytes = std::slice::from_raw_parts(base.add(HEADER + json.len()), answer_len);
            serde_json::from_slice::<Answer>(bytes)
        });
        pg_sys::dsm_detach(segment);
        match answer {
            Some(Ok(answer)) => Ok(answer),
            Some(Err(e)) => Err(NotRun {
                message: format!("idgen: the registry writer's answer is unreadable: {e}"),
                worker_slot: false,
            }),
            None => Err(NotRun {
                message: format!(
                    "idgen: the registry writer ended without an answer ({}); see the server log",
                    if status == pg_sys::BgwHandleStatus::BGWH_POSTMASTER_DIED {
                        "the postmaster died"
                    } else {
                        "it failed"
                    }
                ),
                worker_slot: false,
            }),
        }
    }
}

/// Two u64s: the request's length, then the answer's (0 until the worker writes it).
const HEADER: usize = 16;

/// Registers the worker, waiting for a free slot up to `slot_wait_ms`.
unsafe fn start(segment: pg_sys::dsm_handle, slot_wait_ms: i64) -> Option<*mut pg_sys::BackgroundWorkerHandle> {
    let builder = BackgroundWorkerBuilder::new(WORKER_TYPE)
        .set_type(WORKER_TYPE)
        .set_library("idgen")
        .set_function(WORKER_FUNCTION)
        .set_argument(Some(pg_sys::Datum::from(segment)))
        .set_extra(&u32::from(pg_sys::MyDatabaseId).to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(pg_sys::MyProcPid);
    let mut worker: pg_sys::BackgroundWorker = (&builder).into();
    let mut waited_ms = 0;
    let mut pause_ms = 1;
    loop {
        let mut handle: *mut pg_sys::BackgroundWorkerHandle = std::ptr::null_mut();
        // The handle must outlive an interrupted wait: TopMemoryContext, freed after the wait.
        let previous = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let registered = pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle);
        pg_sys::MemoryContextSwitchTo(previous);
        if registered {
            return Some(handle);
        }
        if waited_ms >= slot_wait_ms {
            return None;
        }
        pg_sys::check_for_interrupts!();
        pg_sys::pg_usleep(pause_ms * 1000);
        waited_ms += pause_ms;
        pause_ms = (pause_ms * 2).min(50);
    }
}

/// Waits for a worker an interrupted wait left running: two writes of one backend never run at once.
fn wait_for_pending() {
    let pending = PENDING.load(Ordering::SeqCst);
    if pending.is_null() {
        return;
    }
    // SAFETY: the handle was allocated in TopMemoryContext by `start`, and is freed once.
    unsafe {
        pg_sys::WaitForBackgroundWorkerShutdown(pending);
        PENDING.store(std::ptr::null_mut(), Ordering::SeqCst);
        pg_sys::pfree(pending.cast());
    }
}

/// Whether this process is idgen's registry writer (its `_PG_init` defines no settings: it runs
/// by the settings its caller took).
pub fn is_registry_writer() -> bool {
    // SAFETY: MyBgworkerEntry is set before the worker's library is loaded, NULL elsewhere.
    unsafe {
        let entry = pg_sys::MyBgworkerEntry;
        !entry.is_null()
            && std::ffi::CStr::from_ptr((*entry).bgw_function_name.as_ptr()).to_bytes() == WORKER_FUNCTION.as_bytes()
    }
}

/// The worker: reads the request, runs it in transactions of its own, writes the answer, exits.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idgen_registry_writer(argument: pg_sys::Datum) {
    // SAFETY: the standard start of a background worker; the segment stays until the caller detaches.
    unsafe {
        pg_sys::BackgroundWorkerUnblockSignals();
        let extra = std::ffi::CStr::from_ptr((*pg_sys::MyBgworkerEntry).bgw_extra.as_ptr());
        let database: u32 =
            extra.to_str().ok().and_then(|s| s.parse().ok()).expect("the writer is given a database oid");
        pg_sys::BackgroundWorkerInitializeConnectionByOid(pg_sys::Oid::from(database), pg_sys::InvalidOid, 0);
        settle_for_registry_writes();
        let segment = pg_sys::dsm_attach(argument.value() as pg_sys::dsm_handle);
        if segment.is_null() {
            // The caller gave up before this worker started: nothing was asked of it any more.
            return;
        }
        let base = pg_sys::dsm_segment_address(segment) as *mut u8;
        let request_len = std::ptr::read_unaligned(base as *const u64) as usize;
        let request = std::slice::from_raw_parts(base.add(HEADER), request_len);
        let answer = match serde_json::from_slice::<Request>(request) {
            Ok(request) => serve(request),
            Err(e) => Answer { result: Err(unreadable(e)), warnings: Vec::new() },
        };
        let mut bytes = serde_json::to_vec(&answer).expect("answers serialise");
        if bytes.len() > ANSWER_CAPACITY {
            let too_big = Answer { result: answer.result, warnings: Vec::new() };
            bytes = serde_json::to_vec(&too_big).expect("answers serialise");
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(HEADER + request_len), bytes.len().min(ANSWER_CAPACITY));
        std::ptr::write_unaligned(base.add(8) as *mut u64, bytes.len().min(ANSWER_CAPACITY) as u64);
        pg_sys::dsm_detach(segment);
    }
}

fn unreadable(e: serde_json::Error) -> CarriedError {
    CarriedError::from(IdgenError::new(idgen_core::SqlState::SystemError, format!("idgen: unreadable request: {e}")))
}

fn serve(request: Request) -> Answer {
    match request {
        Request::BackendLease { function, node, renew, settings, who } => {
            serve_backend_lease(&function, &node, renew, &settings, &who)
        }
        Request::PrepareService { service } => {
            let done = in_own_transaction(|| {
                as_extension_owner(|| {
                    Spi::connect_mut(|client| {
                        durability::make_commit_durable();
                        layouts::prepare(client, &service)
                    })
                });
                ((), true)
            });
            Answer { result: done.map(|()| None), warnings: Vec::new() }
        }
        Request::RecordRefusal { event } => {
            let done = in_own_transaction(|| {
                as_extension_owner(|| {
                    Spi::connect_mut(|client| {
                        durability::make_commit_durable();
                        history::write_refusal(client, &event);
                    })
                });
                ((), true)
            });
            Answer { result: done.map(|()| None), warnings: Vec::new() }
        }
    }
}

/// What a lease request did in its first transaction, and what to record after it.
struct LeaseStep {
    result: Result<LeaseAnswer, IdgenError>,
    notices: Vec<Notice>,
    /// Events to record whatever became of the first transaction, and whether each is a
    /// refusal (rate-limited).
    record_after: Vec<(Event, bool)>,
}

fn serve_backend_lease(
    function: &str,
    node: &NodeIdentity,
    renew: Option<Renewal>,
    settings: &ClaimSettings,
    who: &Who,
) -> Answer {
    let first = in_own_transaction(|| {
        let step = as_extension_owner(|| {
            Spi::connect_mut(|client| {
                durability::make_commit_durable();
                lease_step(client, function, node, renew.as_ref(), settings, who)
            })
        });
        // A refused claim's writes (a set-aside) are undone; what it refused is recorded after.
        let commit = step.result.is_ok();
        if commit {
            announce(&step.notices);
        }
        (step, commit)
    });
    let step = match first {
        Ok(step) => step,
        Err(carried) => return Answer { result: Err(carried), warnings: Vec::new() },
    };
    if !step.record_after.is_empty() {
        let recorded = in_own_transaction(|| {
            as_extension_owner(|| {
                Spi::connect_mut(|client| {
                    durability::make_commit_durable();
                    for (event, refusal) in &step.record_after {
                        if *refusal {
                            history::record_refusal_here(client, event);
                        } else {
                            history::record(client, event);
                        }
                    }
                })
            });
            ((), true)
        });
        if let Err(e) = recorded {
            pgrx::log!("idgen: history events not recorded ({}): {:?}", e.message, step.record_after.len());
        }
    }
    if step.result.is_err() {
        // Alerts of a refused claim: the log has them (a NOTIFY would need a commit).
        for notice in &step.notices {
            if let Notice::Alert(alert) = notice {
                alerts::announce(alert, false);
            }
        }
    }
    let warnings = step
        .notices
        .iter()
        .map(|n| match n {
            Notice::Warning(w) => w.clone(),
            Notice::Alert(alert) => alerts::warning_of(alert),
        })
        .collect();
    Answer { result: step.result.map(Some).map_err(CarriedError::from), warnings }
}

fn announce(notices: &[Notice]) {
    for notice in notices {
        if let Notice::Alert(alert) = notice {
            alerts::announce(alert, true);
        }
    }
}

fn lease_step(
    client: &mut SpiClient,
    function: &str,
    node: &NodeIdentity,
    renew: Option<&Renewal>,
    settings: &ClaimSettings,
    who: &Who,
) -> LeaseStep {
    let mut notices = Vec::new();
    let mut record_after = Vec::new();
    if let Some(renewal) = renew {
        // A renewal touches its own row only: the range does not matter.
        let pool = Pool { first: 0, last: u16::MAX };
        let times = ClaimTerms::of(HolderKind::Backend, settings, renewal.window_ms, pool);
        match store::renew_backend_lease(client, &renewal.held, &times, renewal.epoch, renewal.window_ms) {
            BackendCheck::Confirmed { verified_at, lease_until, issued_until } => {
                let answer = LeaseAnswer::Renewed {
                    verified_at_unix_ms: unix_ms(verified_at),
                    lease_until_unix_ms: unix_ms(lease_until),
                    issued_until_unix_ms: unix_ms(issued_until),
                };
                return LeaseStep { result: Ok(answer), notices, record_after };
            }
            BackendCheck::Busy => {
                let held = &renewal.held;
                let busy = messages::identity_busy(function, &held.node, Some(held.machine_id));
                return LeaseStep { result: Err(busy), notices, record_after };
            }
            BackendCheck::Lost(now) => {
                // A registry created again, or truncated, is not a loss to another holder: say so,
                // and count no ownership loss (the metrics' alarm).
                let now_epoch = store::read_epoch(client);
                if now_epoch != renewal.epoch {
                    let warning =
                        messages::backend_lease_of_old_registry(function, &renewal.held, renewal.epoch, now_epoch);
                    notices.push(Notice::Warning(warning));
                } else {
                    let warning = messages::backend_lease_lost(function, &renewal.held, now.as_ref());
                    record_after.push((history::lost_event(&renewal.held, &warning, who), false));
                    notices.push(Notice::Warning(warning));
                }
            }
        }
    }
    // This transaction commits on its own: a service may be readied for claims in it.
    let recorded = layouts::ready(client, &node.service).unwrap_or_else(|| {
        layouts::prepare(client, &node.service);
        layouts::ready(client, &node.service).expect("a service readied in this transaction is ready")
    });
    match claim::claim(client, function, node, settings, who, &recorded, None) {
        Ok(granted) => {
            notices.extend(granted.notices);
            let c = granted.claim;
            let terms = Terms {
                layout: c.layout,
                machine_id: u16::try_from(c.machine_id).expect("machine ids fit 16 bits"),
                version: c.version,
                registry_epoch: c.registry_epoch,
                claimed_at_unix_ms: unix_ms(c.claimed_at),
                not_before_unix_ms: c.not_before_unix_ms,
                lease_until_unix_ms: unix_ms(c.lease_until),
                issued_until_unix_ms: unix_ms(c.issued_until),
            };
            // The lost event recorded with the claim, in its transaction.
            for (event, _) in record_after.drain(..) {
                history::record(client, &event);
            }
            LeaseStep { result: Ok(LeaseAnswer::Claimed(terms)), notices, record_after }
        }
        Err(Refused { error, event, notices: refusal_notices }) => {
            notices.extend(refusal_notices);
            record_after.extend(event.map(|e| (e, true)));
            LeaseStep { result: Err(error), notices, record_after }
        }
    }
}

/// Settings under which idgen's own transactions write the registry, whatever the database's
/// (`ALTER DATABASE … SET`, which a worker's connection applies) or a session's settings are: read
/// write, at READ COMMITTED, with no statement or transaction timeout, and a lock wait of
/// [`LOCK_TIMEOUT`] at most. For the registry writer, and for a backend's exit record (the session
/// is over: nothing needs restoring).
pub fn settle_for_registry_writes() {
    let settings: [(&std::ffi::CStr, &std::ffi::CStr); 7] = [
        (c"default_transaction_read_only", c"off"),
        (c"default_transaction_isolation", c"read committed"),
        (c"default_transaction_deferrable", c"off"),
        (c"statement_timeout", c"0"),
        (c"idle_in_transaction_session_timeout", c"0"),
        (c"transaction_timeout", c"0"),
        (c"lock_timeout", LOCK_TIMEOUT),
    ];
    for (name, value) in settings {
        // SAFETY: plain setting changes of this process; transaction_timeout exists from PostgreSQL 17 on.
        unsafe {
            if pg_sys::GetConfigOption(name.as_ptr(), true, false).is_null() {
                continue;
            }
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_SESSION,
            );
        }
    }
}

/// Runs `body` in a transaction of its own, which commits when `body` says so and aborts
/// otherwise; an error raised inside aborts it and comes back carried. Only where no
/// transaction is open: a background worker, or a backend on its way out.
pub fn in_own_transaction<R>(body: impl FnOnce() -> (R, bool)) -> Result<R, CarriedError> {
    // SAFETY: the standard way a process without a client runs a transaction; an error inside is
    // caught (pgrx copies and flushes it) and the transaction aborted, as PostgresMain does.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let body = std::panic::AssertUnwindSafe(body);
        let outcome =
            PgTryBuilder::new(move || Ok(body())).catch_others(|caught| Err(CarriedError::caught(&caught))).execute();
        match outcome {
            Ok((value, true)) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
                Ok(value)
            }
            Ok((value, false)) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::AbortCurrentTransaction();
                Ok(value)
            }
            Err(carried) => {
                pg_sys::AbortCurrentTransaction();
                Err(carried)
            }
        }
    }
}

/// The window a backend asks for at a renewal: see `idgen_core::watermark::backend_window_ms`.
pub fn renewal(held: Holding, epoch: i64, settings: &ClaimSettings, lease_age_ms: i64) -> Renewal {
    Renewal { held, epoch, window_ms: watermark::backend_window_ms(&settings.policy, lease_age_ms) }
}
