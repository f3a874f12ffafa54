//! Writes a history event in a transaction of its own: a short-lived
//! background worker, started for the event and waited for. PostgreSQL has no
//! autonomous transactions; this is how an event that comes with an error (a
//! refused claim, a lost ownership) outlives the caller's rollback.
//!
//! The event travels as JSON in a dynamic shared memory segment; the worker
//! connects to the caller's database (as the bootstrap superuser), pins its
//! search_path, and inserts it with the statement ownership changes use. When
//! no worker can start (max_worker_processes used up), the event goes to the
//! server log instead, and the caller's error is raised as usual.

use crate::registry::sql;
use idgen_core::history::Event;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

const WORKER_FUNCTION: &str = "idgen_history_recorder";

/// Writes `event` from a background worker and waits for it.
pub fn record(event: &Event) {
    let json = event.to_json();
    let written = unsafe { write_through_worker(&json) };
    if let Err(why) = written {
        pgrx::log!("idgen: history event not recorded ({why}): {json}");
    }
}

/// # Safety
/// Called in a backend inside a transaction; the segment is detached before returning.
unsafe fn write_through_worker(json: &str) -> Result<(), String> {
    let bytes = json.as_bytes();
    let segment = pg_sys::dsm_create(std::mem::size_of::<u64>() + bytes.len(), 0);
    let base = pg_sys::dsm_segment_address(segment) as *mut u8;
    std::ptr::write_unaligned(base as *mut u64, bytes.len() as u64);
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(std::mem::size_of::<u64>()), bytes.len());
    let handle = pg_sys::dsm_segment_handle(segment);
    let result = BackgroundWorkerBuilder::new("idgen history recorder")
        .set_type("idgen history recorder")
        .set_library("idgen")
        .set_function(WORKER_FUNCTION)
        .set_argument(Some(pg_sys::Datum::from(handle)))
        .set_extra(&u32::from(pg_sys::MyDatabaseId).to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(pg_sys::MyProcPid)
        .load_dynamic()
        .map_err(|_| "no background worker slot is free (max_worker_processes)".to_owned())
        .and_then(|worker| worker.wait_for_shutdown().map_err(|status| format!("the recorder ended as {status:?}")));
    pg_sys::dsm_detach(segment);
    result
}

/// The worker: reads the event, inserts it, exits.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idgen_history_recorder(argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    let database: u32 = BackgroundWorker::get_extra().parse().expect("the recorder is given a database oid");
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(database)), None);
    let handle = argument.value() as pg_sys::dsm_handle;
    BackgroundWorker::transaction(|| {
        // SAFETY: the caller keeps the segment until this worker has exited.
        let json = unsafe {
            let segment = pg_sys::dsm_attach(handle);
            if segment.is_null() {
                pgrx::warning!("idgen history recorder: the event's segment is gone");
                return;
            }
            let base = pg_sys::dsm_segment_address(segment) as *const u8;
            let len = std::ptr::read_unaligned(base as *const u64) as usize;
            let bytes = std::slice::from_raw_parts(base.add(std::mem::size_of::<u64>()), len);
            let json = String::from_utf8_lossy(bytes).into_owned();
            pg_sys::dsm_detach(segment);
            json
        };
        Spi::connect_mut(|client| {
            let Some((_, schema)) = crate::privilege::extension_owner_and_schema() else {
                pgrx::log!("idgen history recorder: idgen is not installed in this database: {json}");
                return;
            };
            let path = format!("pg_catalog, {schema}, pg_temp");
            client.update(sql::PIN_SEARCH_PATH, None, &[path.into()]).expect("search_path is set");
            crate::durability::make_commit_durable();
            client.update(sql::INSERT_EVENT, None, &[json.into()]).expect("the event is inserted");
        });
    });
}
