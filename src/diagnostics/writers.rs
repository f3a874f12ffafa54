//! What `idgen_health()` tells of the registry writers (`registry::writer`): preloaded writers that
//! do not run, a worker budget parallel query can use up, and writes that found no slot.

use crate::shared::{self, WRITERS};
use idgen_core::messages::{self, Finding, WORKER_SLOTS_EXHAUSTED_SHOWN_SECS};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// How long the server may run without a preloaded writer before that is a finding (a writer that
/// moves to another database is started again a second later).
const WRITERS_MISSING_AFTER_MS: i64 = 10_000;

/// `idgen_private.writer_findings()`, which `idgen_health()` reads (sql/diagnostics.sql).
#[pg_extern(stable, parallel_restricted, sql = false)]
#[allow(clippy::type_complexity)]
fn writer_findings() -> TableIterator<
    'static,
    (
        name!(severity, String),
        name!(finding, String),
        name!(subject, String),
        name!(detail, String),
        name!(action, String),
    ),
> {
    let rows =
        findings().into_iter().map(|f| (f.severity.to_owned(), f.finding.to_owned(), f.subject, f.detail, f.action));
    TableIterator::new(rows.collect::<Vec<_>>())
}

fn findings() -> Vec<Finding> {
    let mut found = Vec::new();
    let now = shared::now_ms();
    let area = shared::area();
    if shared::preloaded() {
        // SAFETY: set at postmaster start.
        let up_ms = now - crate::clock::unix_ms(unsafe { pg_sys::PgStartTime }.try_into().expect("a start time"));
        let seen = area.map_or(0, |a| a.permanent_seen_ms.load(Ordering::Acquire));
        if up_ms > WRITERS_MISSING_AFTER_MS && now - seen > WRITERS_MISSING_AFTER_MS {
            found.push(messages::registry_writers_missing(WRITERS));
        }
    } else {
        let (workers, parallel) = (setting("max_worker_processes"), setting("max_parallel_workers"));
        if workers - parallel < 2 {
            found.push(messages::worker_budget(workers, parallel));
        }
    }
    if let Some(area) = area {
        let (refusals, last) =
            (area.slot_refusals.load(Ordering::Acquire), area.last_slot_refusal_ms.load(Ordering::Acquire));
        if refusals > 0 && now - last < WORKER_SLOTS_EXHAUSTED_SHOWN_SECS * 1000 {
            found.push(messages::worker_slots_exhausted(refusals, &idgen_core::format::iso_utc(last)));
        }
    }
    found
}

/// The server's value of an integer setting (as the configuration sets it, not a session's SET).
fn setting(name: &str) -> i64 {
    let name = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: returns a pointer into the setting's own storage, copied at once.
    unsafe {
        let value = pg_sys::GetConfigOptionResetString(name.as_ptr());
        if value.is_null() {
            return 0;
        }
        std::ffi::CStr::from_ptr(value).to_str().ok().and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}
