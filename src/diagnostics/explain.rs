//! `idgen_explain(id [, service])`: who made an ID. It runs as the caller and
//! reads the views `idgen_events` and `idgen_nodes` (through their bound
//! aliases in `idgen_private`, with the search_path pinned, so that nothing in
//! a schema a lower role controls takes part), so it shows only the services
//! the caller may read; the reading of tenures is the core's
//! (`idgen_core::history`).

use crate::clock::timestamptz;
use crate::errors::{or_raise, raise, report};
use crate::spi;
use crate::statements as sql;
use idgen_core::history::{self, EventKind, Finding, Holder, Recorded};
use idgen_core::policy::Outcome;
use idgen_core::{input, messages, Layout};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient, SpiHeapTupleData};
use pgrx::PgLogLevel;

type ExplainRow = (
    String,
    i16,
    Option<TimestampWithTimeZone>,
    i32,
    String,
    Option<String>,
    Option<String>,
    Option<i32>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    String,
);

/// Decodes `id` and names the holder of its machine id at its timestamp, per service.
#[pg_extern(stable, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn idgen_explain(
    id: Option<i64>,
    service: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(service, String),
        name!(machine_id, i16),
        name!(stamped_at, Option<TimestampWithTimeZone>),
        name!(sequence, i32),
        name!(finding, String),
        name!(holder, Option<String>),
        name!(role, Option<String>),
        name!(pid, Option<i32>),
        name!(version, Option<i64>),
        name!(stamps_after, Option<TimestampWithTimeZone>),
        name!(stamps_until, Option<TimestampWithTimeZone>),
        name!(detail, String),
    ),
> {
    const F: &str = "idgen_explain";
    let id = or_raise(input::required(F, "id", id));
    let layout = Layout::DEFAULT;
    let parts = layout.decompose(id).unwrap_or_else(|_| raise(messages::negative_id(F, id)));
    let stamp_ms = layout.unix_ms_of(parts.ticks);
    let machine_id = parts.machine_id as i16;
    let sequence = parts.sequence as i32;
    let rows = crate::privilege::with_pinned_search_path(|| {
        Spi::connect_mut(|client| {
            let services = services_of(client, machine_id, service);
            if services.is_empty() {
                raise(messages::explain_nothing_known(F, machine_id, service));
            }
            let mut rows: Vec<ExplainRow> = Vec::new();
            for (service, purged) in services {
                let events = events_of(client, &service, machine_id);
                let finding = if events.is_empty() { None } else { Some(history::explain(&events, stamp_ms, !purged)) };
                let explained = match &finding {
                    Some(finding) => history::explained(finding, &service, machine_id, stamp_ms),
                    None => registry_only(client, &service, machine_id),
                };
                if let Some(Finding::Overlap(holders)) = &finding {
                    report(
                        messages::explain_overlapping_tenures(F, &service, machine_id, stamp_ms, holders.len()),
                        PgLogLevel::WARNING,
                    );
                }
                for e in explained {
                    let t = e.tenure.as_ref();
                    rows.push((
                        service.clone(),
                        machine_id,
                        timestamptz(stamp_ms),
                        sequence,
                        e.finding.to_owned(),
                        t.map(|t| t.holder.name()),
                        t.and_then(|t| t.holder.role.clone()),
                        t.and_then(|t| t.holder.pid),
                        t.map(|t| t.version),
                        t.and_then(|t| timestamptz(t.after_ms)),
                        t.and_then(|t| t.until_ms).and_then(timestamptz),
                        e.detail,
                    ));
                }
            }
            rows
        })
    });
    TableIterator::new(rows)
}

/// The services to explain the ID in, with whether their history was purged.
fn services_of(client: &mut SpiClient, machine_id: i16, service: Option<&str>) -> Vec<(String, bool)> {
    let args = [machine_id.into(), service.map(str::to_owned).into()];
    let table = spi::ok(spi::read(client, &sql::SERVICES_OF_MACHINE_ID, None, &args));
    table.map(|row| (get(&row, 1).unwrap_or_default(), get(&row, 2).unwrap_or(false))).collect()
}

fn events_of(client: &mut SpiClient, service: &str, machine_id: i16) -> Vec<Recorded> {
    let args = [service.to_owned().into(), machine_id.into()];
    let table = spi::ok(spi::read(client, &sql::EVENTS_OF_MACHINE_ID, None, &args));
    table
        .filter_map(|row| {
            let kind = EventKind::from_label(&get::<String>(&row, 2)?)?;
            let holder = |first: usize| -> Option<Holder> {
                Some(Holder {
                    host: get(&row, first)?,
                    port: get(&row, first + 1)?,
                    backend_slot: get(&row, first + 2),
                    role: None,
                    pid: None,
                })
            };
            let mut current = holder(3);
            if let Some(h) = current.as_mut() {
                h.role = get(&row, 6);
                h.pid = get(&row, 7);
            }
            Some(Recorded {
                at_ms: get(&row, 1)?,
                kind,
                holder: current,
                version: get(&row, 8),
                not_before_ms: get(&row, 9),
                issued_until_ms: get(&row, 10),
                previous_holder: holder(11),
                previous_bound_ms: get(&row, 14),
                new_id: get::<String>(&row, 15).as_deref() == Some(Outcome::New.label()),
            })
        })
        .collect()
}

/// No event: what the registry says now.
fn registry_only(client: &mut SpiClient, service: &str, machine_id: i16) -> Vec<history::Explained> {
    let args = [service.to_owned().into(), machine_id.into()];
    let table = spi::ok(spi::read(client, &sql::NODE_OF_MACHINE_ID, Some(1), &args));
    let now = table.into_iter().next().and_then(|row| {
        let name = idgen_core::input::node_name(&get::<String>(&row, 1)?, get(&row, 2)?, get(&row, 3));
        Some(messages::explain_registry_holder_now(&name, get::<i64>(&row, 4)?))
    });
    let finding = Finding::NoHistory;
    let mut rows = history::explained(&finding, service, machine_id, 0);
    rows[0].detail.push_str(&now.unwrap_or_default());
    rows
}

fn get<T: pgrx::FromDatum + pgrx::IntoDatum>(row: &SpiHeapTupleData, ordinal: usize) -> Option<T> {
    row.get::<T>(ordinal).unwrap_or_else(|e| panic!("idgen_explain: column {ordinal}: {e}"))
}
