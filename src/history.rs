//! Recording the ownership history (`idgen_private.idgen_history`; the events
//! are `idgen_core::history::Event`). Ownership changes are written in the
//! transaction that makes them, so they exist exactly when the change
//! committed. Refusals (a claim refused, a heartbeat or release that finds the
//! id moved) come with an error that rolls the caller back, so they are written
//! in a transaction of their own, and at most one of each kind per service per
//! [`REFUSAL_INTERVAL_SECS`]: a flood of refused calls starts next to nothing
//! and writes next to nothing. Each of them is counted all the same ([`tally`]).

use crate::errors::or_raise;
use crate::spi;
use crate::statements as sql;
use idgen_core::history::{Event, EventKind};
use idgen_core::input::{self, Holding, NodeIdentity};
use idgen_core::tally::Counter;
use idgen_core::IdgenError;
use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde::{Deserialize, Serialize};

pub use idgen_core::history::REFUSAL_INTERVAL_SECS;

/// Who acts: the role that called idgen (as of the call) and the server process it called in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Who {
    pub role: Option<String>,
    pub pid: i32,
}

impl Who {
    /// The role acting now in this process.
    pub fn now(role: pg_sys::Oid) -> Who {
        // SAFETY: backend-local.
        Who { role: role_name(role), pid: unsafe { pg_sys::MyProcPid } }
    }
}

/// An event about `node`, by `who`.
pub fn event(kind: EventKind, node: &NodeIdentity, who: &Who) -> Event {
    Event {
        host: Some(node.host.clone()),
        port: Some(node.port),
        backend_slot: node.backend_slot,
        role: who.role.clone(),
        pid: Some(who.pid),
        ..Event::new(kind, &node.service)
    }
}

/// A holder learnt that its machine id moved; `told` is what it was told.
pub fn lost_event(held: &Holding, told: &IdgenError, who: &Who) -> Event {
    let mut event = event(EventKind::OwnershipLost, &held.node, who);
    event.machine_id = Some(held.machine_id);
    event.version = Some(held.version);
    event.detail = Some(told.one_line());
    event
}

/// Records `event` in the current transaction (which runs with the extension owner's rights).
pub fn record(client: &mut SpiClient, event: &Event) {
    insert(client, &event.to_json());
}

/// Counts refusal `event` ([`tally`]) and records it in the current transaction, unless one of
/// its kind was recorded for its service within the interval or another session is recording a
/// refusal now: for a transaction that returns normally (a refused release).
pub fn record_refusal_here(client: &mut SpiClient, event: &Event) {
    tally(event);
    record_refusal_if_due(client, event);
}

/// [`record_refusal_here`] for a refusal counted where it was met (the registry writer's).
pub fn record_refusal_if_due(client: &mut SpiClient, event: &Event) {
    if refusal_due(client, event) {
        record(client, event);
    }
}

/// Counts refused claim or ownership loss `event` in the server's tally (`idgen_core::tally`),
/// which `idgen_metrics` reads: every one, also those the history does not record. Called where
/// a refusal is met, once for each, whatever becomes of the transaction.
pub fn tally(event: &Event) {
    let (Some(area), Some(counter)) = (crate::shared::area(), EventKind::from_label(event.event).and_then(Counter::of))
    else {
        return;
    };
    // SAFETY: set at process start, never changed.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    if !area.tally.add(database, &event.service, counter) {
        pgrx::debug1!("idgen: the refusal tally is full: a refusal of service {} is not counted", event.service);
    }
}

/// `idgen_private.refusals_since_start(service)`, which `idgen_metrics` reads: the claims of
/// `service` refused and the ownership losses its holders were told in this database since the
/// server started, or NULL for a service the caller may not read (`idgen_visibility`) or a count
/// the server could not keep (no shared memory; its tally full).
#[pg_extern(stable, parallel_restricted, sql = false)]
fn refusals_since_start(
    service: &str,
) -> TableIterator<'static, (name!(refused_claims, Option<i64>), name!(ownership_losses, Option<i64>))> {
    let visible = crate::privilege::with_pinned_search_path(|| {
        Spi::connect(|client| {
            let visible = spi::read(client, sql::SERVICE_VISIBLE { service: service.into() }, Some(1));
            spi::first_row(visible).and_then(|row| row.visible).unwrap_or(false)
        })
    });
    // SAFETY: set at process start, never changed.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let count = |counter| {
        let area = crate::shared::area().filter(|_| visible)?;
        area.tally.count(database, service, counter).and_then(|n| i64::try_from(n).ok())
    };
    TableIterator::once((count(Counter::RefusedClaims), count(Counter::OwnershipLosses)))
}

/// Writes refusal `event` (as JSON) unless one of its kind was recorded for its service within
/// the interval: the write of the worker that [`refusal_due`] led to.
pub fn write_refusal(client: &mut SpiClient, event: &str) {
    let args = sql::INSERT_REFUSAL {
        event: event.into(),
        refusal_interval: sql::value::Interval::seconds(REFUSAL_INTERVAL_SECS),
    };
    spi::ok(spi::run(client, args, None));
}

/// The turn to record a refusal, held until this transaction ends: taken first, so that the check
/// for one recorded recently, made after it, sees every refusal committed before (at most one is
/// recorded per service, kind and interval, however many sessions are refused at once).
fn take_refusal_turn(client: &mut SpiClient) -> bool {
    let turn = spi::run(client, sql::TAKE_REFUSAL_TURN {}, Some(1)).ok();
    turn.and_then(|rows| rows.into_iter().next()).and_then(|row| row.taken).unwrap_or(false)
}

/// Inserts an event (`INSERT_EVENT`). When nothing was inserted, its number was taken: the
/// numbering went back (a restore over a live database resets it to the dump's; a failover). The
/// numbering then moves past the last event, never back, and the event draws again: a number taken
/// by an event another session was recording meanwhile (not visible to the renumbering) is passed at
/// the next attempt. One attempt was not enough after a failover, and the event was lost.
fn insert(client: &mut SpiClient, event: &str) {
    for _ in 0..EVENT_ID_ATTEMPTS {
        let inserted = spi::run(client, sql::INSERT_EVENT { event: event.into() }, None)
            .map(|rows| !rows.is_empty())
            .unwrap_or_else(|e| panic!("idgen: could not record a history event: {e}"));
        if inserted {
            return;
        }
        spi::run(client, sql::RESYNC_EVENT_IDS {}, None)
            .unwrap_or_else(|e| panic!("idgen: could not renumber the history: {e}"));
    }
}

/// How many numbers an event may draw before it is given up.
const EVENT_ID_ATTEMPTS: usize = 8;

/// Whether refusal `event` is to be recorded whatever becomes of the caller's transaction (an
/// error is on its way): only when none of its kind was recorded for its service within the
/// interval, and no other session is recording one at the moment. The caller then hands it to
/// a background worker (`registry::writer::record_refusal`). A refusal is thus recorded
/// once a minute per service and kind, at most one worker runs for refusals at a time, and a
/// refused call never waits for one.
pub fn refusal_due(client: &mut SpiClient, event: &Event) -> bool {
    let args = sql::REFUSAL_RECORDED_RECENTLY {
        service: event.service.clone(),
        event: event.event.into(),
        refusal_interval: sql::value::Interval::seconds(REFUSAL_INTERVAL_SECS),
    };
    take_refusal_turn(client) && {
        let recorded = spi::run(client, args, Some(1)).ok();
        !recorded.and_then(|rows| rows.into_iter().next()).and_then(|row| row.recorded).unwrap_or(false)
    }
}

fn role_name(role: pg_sys::Oid) -> Option<String> {
    // SAFETY: a catalog lookup that returns NULL (noerr) for an unknown role.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

/// The age `idgen_purge_history(older_than)` removes events by: `older_than`, or the retention
/// when it is NULL; refused (22023) when not positive. Declared in sql/history.sql, in
/// idgen_private.
#[pg_extern(sql = false)]
fn purge_age(older_than: Option<Interval>, retention: Option<Interval>) -> Interval {
    match older_than {
        Some(age) => {
            let parts = (age.months(), age.days(), age.micros());
            or_raise(input::positive_age("idgen_purge_history", "older_than", parts, &age.to_string()));
            age
        }
        None => or_raise(input::required("idgen_purge_history", "retention", retention)),
    }
}
