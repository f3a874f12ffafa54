//! Recording the ownership history (`idgen_history`; the events are
//! `idgen_core::history::Event`). Ownership changes are written in the
//! transaction that makes them, so they exist exactly when the change
//! committed. Events that come with an error (a refused claim, a lost
//! ownership) would roll back with it, so `recorder` writes them from a
//! background worker of its own.

use super::recorder;
use crate::clock::SystemClock;
use crate::registry::sql;
use idgen_core::generator::Clock;
use idgen_core::history::{Event, EventKind};
use idgen_core::input::{Holding, NodeIdentity};
use idgen_core::IdgenError;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use std::sync::atomic::{AtomicBool, Ordering};

/// An event about `node`, with the role that called idgen and this process.
pub fn event(kind: EventKind, node: &NodeIdentity, caller: pg_sys::Oid) -> Event {
    Event {
        host: Some(node.host.clone()),
        port: Some(node.port),
        backend_slot: node.backend_slot,
        role: role_name(caller),
        // SAFETY: backend-local.
        pid: Some(unsafe { pg_sys::MyProcPid }),
        ..Event::new(kind, &node.service)
    }
}

/// A holder learnt that its machine id moved; `told` is what it was told.
pub fn lost_event(held: &Holding, told: &IdgenError, caller: pg_sys::Oid) -> Event {
    let mut event = event(EventKind::OwnershipLost, &held.node, caller);
    event.machine_id = Some(held.machine_id);
    event.version = Some(held.version);
    event.detail = Some(told_text(told));
    event
}

/// What a caller was told, for an event's detail: the message and its DETAIL.
pub fn told_text(error: &IdgenError) -> String {
    format!("{} {}", error.message, error.detail.as_deref().unwrap_or_default()).trim().to_owned()
}

/// Records `event` in the caller's transaction (which runs with the extension owner's rights).
pub fn record(client: &mut SpiClient, event: &Event) {
    if !installed(client) {
        return;
    }
    client
        .update(sql::INSERT_EVENT, None, &[event.to_json().into()])
        .unwrap_or_else(|e| panic!("idgen: could not record a history event: {e}"));
}

/// Records `event` whatever becomes of the caller's transaction: an error is on its way.
pub fn record_independently(client: &mut SpiClient, mut event: Event) {
    if !installed(client) {
        return;
    }
    event.at.get_or_insert_with(|| idgen_core::messages::iso_utc(SystemClock.now_unix_ms()));
    recorder::record(&event);
}

/// Whether the history table exists: a new library runs against an older installation between
/// its install and `ALTER EXTENSION idgen UPDATE`, and must go on claiming meanwhile.
fn installed(client: &mut SpiClient) -> bool {
    static SEEN: AtomicBool = AtomicBool::new(false);
    if SEEN.load(Ordering::Relaxed) {
        return true;
    }
    let found = client
        .select(sql::HISTORY_INSTALLED, Some(1), &[])
        .ok()
        .and_then(|mut rows| rows.next().and_then(|row| row.get::<bool>(1).ok().flatten()))
        .unwrap_or(false);
    SEEN.store(found, Ordering::Relaxed);
    found
}

fn role_name(role: pg_sys::Oid) -> Option<String> {
    // SAFETY: a catalog lookup that returns NULL (noerr) for an unknown role.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}
