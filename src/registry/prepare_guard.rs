//! No PREPARE TRANSACTION after a registry write: a prepared transaction would keep the rows
//! it locked (and the lease it granted) for as long as it stays prepared, while its holder has
//! gone on. The registry functions note their writes here; the PREPARE is refused (0A000).

use crate::errors::raise;
use idgen_core::messages;
use parking_lot::Mutex;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::c_void;

/// The registry functions that wrote in the open transaction (a PREPARE would strand their locks).
static WROTE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Notes that `function` wrote the registry in the open transaction.
pub fn wrote_in_transaction(function: &'static str) {
    let mut wrote = WROTE.lock();
    if !wrote.contains(&function) {
        wrote.push(function);
    }
}

/// Hooks the PREPARE refusal to transaction ends; called from `_PG_init`.
pub fn register_transaction_callback() {
    // SAFETY: registers a plain function for the life of the backend.
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(event: pg_sys::XactEvent::Type, _arg: *mut c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_PREPARE => {
            // Copied out, so that the lock is released before raising.
            let wrote: Vec<String> = WROTE.lock().iter().map(|f| (*f).to_owned()).collect();
            if !wrote.is_empty() {
                WROTE.lock().clear();
                raise(messages::prepare_after_registry_write(&wrote));
            }
        }
        XACT_EVENT_COMMIT
        | XACT_EVENT_PARALLEL_COMMIT
        | XACT_EVENT_ABORT
        | XACT_EVENT_PARALLEL_ABORT
        | XACT_EVENT_PREPARE => {
            if let Some(mut wrote) = WROTE.try_lock() {
                wrote.clear();
            }
        }
        _ => {}
    }
}
