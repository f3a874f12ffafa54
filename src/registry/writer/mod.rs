//! Registry writes that commit on their own, in a registry writer: a background worker that
//! writes for the database's backends. PostgreSQL has no autonomous transactions; this is how
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
//! Who writes (`process`): with idgen in `shared_preload_libraries`, [`shared::WRITERS`]
//! writers start with the server, each connecting to the database of the first request it finds
//! and serving that database's requests from then on; a database none serves takes a writer that
//! is idle (it leaves its database and the server starts it again a second later; requests wait
//! for it). No write waits for a free background worker slot. Without preloading, a database's first request starts a writer for it,
//! which stays while requests come (10 s idle) and leaves at once when its database is wanted
//! alone (DROP DATABASE, a rename, a copy); a request that finds no free slot within
//! [`transport::SLOT_WAIT_MS`] fails (`53000`) with the fix. Without idgen's shared memory (`shared`),
//! each request starts a worker of its own.
//!
//! How (`transport`): the request is JSON in a dynamic shared memory segment of the backend's,
//! posted in its slot's mailbox; the writer runs it (`serve`) as the extension owner by the
//! settings the caller took, in transactions of its own (`transaction`), and answers in the same
//! segment. The caller's wait is interruptible; a request it left running is waited for before its
//! next one. A writer ended while it serves a request answers nothing (`ending`).

mod ending;
mod process;
mod segment;
mod serve;
mod transaction;
mod transport;

pub use process::{is_registry_writer, register_at_server_start};
pub use transaction::{in_own_transaction, settle_for_registry_writes};

use crate::clock::SystemClock;
use crate::errors::CarriedError;
use crate::history::{self, Who};
use crate::settings::ClaimSettings;
use idgen_core::generator::Clock;
use idgen_core::history::Event;
use idgen_core::input::{Holding, NodeIdentity};
use idgen_core::lease::Terms;
use idgen_core::watermark;
use idgen_core::{messages, IdgenError};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use serde::{Deserialize, Serialize};

/// What a writer is asked to do. (Serialised once per request: the sizes of the variants do
/// not matter.)
#[derive(Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
enum Request {
    BackendLease(LeaseRequest),
    /// Ready a service for claims: its guard rows, its layout recorded and fixed.
    PrepareService {
        service: String,
    },
    /// Record a refusal, unless one of its kind was recorded for its service within the interval.
    RecordRefusal {
        event: String,
    },
}

/// A database backend's lease for `node`: renew `renew` if given (claiming anew if it is lost), or claim.
#[derive(Serialize, Deserialize)]
pub struct LeaseRequest {
    pub function: String,
    pub node: NodeIdentity,
    pub renew: Option<Renewal>,
    pub settings: ClaimSettings,
    pub who: Who,
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

/// A writer's answer.
#[derive(Serialize, Deserialize)]
struct Answer {
    result: Result<Option<LeaseAnswer>, CarriedError>,
    /// WARNINGs for the caller's client: the writer has no client.
    warnings: Vec<IdgenError>,
    /// The WARNINGs of alerts, for the caller's client alone: the writer logged the alerts.
    alert_warnings: Vec<IdgenError>,
}

impl Answer {
    /// An answer with no warnings.
    fn alone(result: Result<Option<LeaseAnswer>, CarriedError>) -> Answer {
        Answer { result, warnings: Vec::new(), alert_warnings: Vec::new() }
    }
}

/// Claims or renews a backend's lease in a transaction of its own; raises what it raises.
pub fn backend_lease(request: LeaseRequest) -> LeaseAnswer {
    let function = request.function.clone();
    match run(&function, &Request::BackendLease(request)) {
        Some(answer) => answer,
        None => crate::errors::raise(IdgenError::new(
            idgen_core::SqlState::SystemError,
            format!("{function}: the registry writer answered a lease request without a lease"),
        )),
    }
}

/// Readies `service` for claims (`layouts::prepare`), committed before this returns.
pub fn prepare_service(function: &str, service: &str) {
    run(function, &Request::PrepareService { service: service.to_owned() });
}

/// Counts refusal `event` (`history::tally`) and records it in a transaction of its own, if it is
/// due (`history::refusal_due`; rate-limited in the writer too). It never waits for a worker
/// slot: a refusal that finds no writer is left unrecorded (the caller's error is raised either
/// way, and is in the server log), so that a flood of refusals never keeps the slots from the
/// server's other work.
pub fn record_refusal(client: &mut SpiClient, mut event: Event) {
    history::tally(&event);
    if !history::refusal_due(client, &event) {
        return;
    }
    // SAFETY: set at process start, never changed.
    if unsafe { !pg_sys::IsUnderPostmaster } {
        return;
    }
    // A writer could not see an extension created by this transaction (and would wait for its
    // locks): the refusal is left out, the caller's error is raised all the same.
    if crate::privilege::installed().is_some_and(|installed| installed.this_transaction) {
        return;
    }
    event.at.get_or_insert_with(|| idgen_core::format::iso_utc(SystemClock.now_unix_ms()));
    let request = Request::RecordRefusal { event: event.to_json() };
    if let Err(why) = transport::run(&request, 0) {
        pgrx::debug1!("idgen: refusal not recorded ({}): {}", why.message, event.to_json());
    }
}

/// Runs `request` in a writer, reports its warnings, raises its error.
fn run(function: &str, request: &Request) -> Option<LeaseAnswer> {
    // SAFETY: set at process start, never changed.
    if unsafe { !pg_sys::IsUnderPostmaster } {
        crate::errors::raise(messages::single_user_mode(function));
    }
    // The writer's transaction cannot see an extension this one created and has not committed
    // (and would wait for its locks after a DROP and CREATE here).
    if crate::privilege::checked_installation().this_transaction {
        crate::errors::raise(messages::installed_in_this_transaction(function));
    }
    let answer = transport::run(request, transport::SLOT_WAIT_MS).unwrap_or_else(|why| match why.worker_slot {
        true => crate::errors::raise(messages::no_worker_slot(function, transport::SLOT_WAIT_MS)),
        false => CarriedError::from(IdgenError::new(idgen_core::SqlState::SystemError, why.message)).raise(),
    });
    for warning in answer.warnings {
        crate::errors::report(warning, pgrx::PgLogLevel::WARNING);
    }
    for warning in answer.alert_warnings {
        crate::errors::warn_client_only(warning);
    }
    answer.result.unwrap_or_else(|e| e.raise())
}

/// The window a backend asks for at a renewal: see `idgen_core::watermark::backend_window_ms`.
pub fn renewal(held: Holding, epoch: i64, settings: &ClaimSettings, lease_age_ms: i64) -> Renewal {
    Renewal { held, epoch, window_ms: watermark::backend_window_ms(&settings.policy, lease_age_ms) }
}
