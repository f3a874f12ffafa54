//! `idgen_explain(id [, service])`: who made an ID, decoded by each service's layout. It runs as
//! the caller and reads the views `idgen_events`, `idgen_nodes` and `idgen_layouts` (through their
//! bound aliases in `idgen_private`, with the search_path pinned, so that nothing in a schema a
//! lower role controls takes part), so it shows only the services the caller may read; the
//! reading of tenures is the core's (`idgen_core::history`).

use crate::clock::timestamptz;
use crate::errors::{or_raise, raise, report};
use crate::spi;
use crate::statements as sql;
use idgen_core::generator::Clock;
use idgen_core::history::{self, EventKind, Finding, Holder, Recorded};
use idgen_core::layout::FieldOrder;
use idgen_core::policy::Outcome;
use idgen_core::{input, messages, Layout};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use pgrx::PgLogLevel;

type ExplainRow = (
    String,
    i32,
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

/// Decodes `id` by each service's layout and names the holder of its machine id at its timestamp,
/// per service that knows that machine id.
#[pg_extern(stable, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn idgen_explain(
    id: Option<i64>,
    service: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(service, String),
        name!(machine_id, i32),
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
    if id < 0 {
        raise(messages::negative_id(F, id));
    }
    let now_ms = crate::clock::SystemClock.now_unix_ms();
    // JIT off, as idgen_health() declares it: compiling these statements' plans took seconds (2.2 s
    // on a 7,050-event history), running them milliseconds.
    let rows = crate::privilege::with_settings(&[(c"jit", c"off")], || {
        crate::privilege::with_pinned_search_path(|| {
            Spi::connect_mut(|client| {
                let mut rows: Vec<ExplainRow> = Vec::new();
                // The registry's own table: read as its owner (the caller may read only the views).
                let first_version =
                    crate::privilege::as_extension_owner(|| crate::registry::store::read_version_base(client)) + 1;
                for (service, purged, layout) in services_of(client, id, service) {
                    // An ID of another layout, or of a time no holder could have stamped yet: not this service's.
                    let Ok(parts) = layout.decompose(id) else { continue };
                    let stamp_ms = layout.unix_ms_of(parts.ticks);
                    if !history::could_be_stamped_by_now(stamp_ms, now_ms) {
                        continue;
                    }
                    let machine_id = i32::from(parts.machine_id);
                    let events = events_of(client, &service, machine_id);
                    let finding = if events.is_empty() {
                        None
                    } else {
                        Some(history::explain(&events, stamp_ms, !purged, first_version))
                    };
                    let explained = match &finding {
                        Some(finding) => history::explained(finding, &service, machine_id, stamp_ms),
                        None => match registry_only(client, &service, machine_id) {
                            Some(explained) => explained,
                            None => continue,
                        },
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
                            parts.sequence as i32,
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
                if rows.is_empty() {
                    raise(messages::explain_nothing_known(F, service));
                }
                rows
            })
        })
    });
    TableIterator::new(rows)
}

/// The services the ID may be of, with whether their history was purged and their layout: every
/// service the caller may read with rows or events (or the one named). Against objects before
/// 0.7.0 every service has the default layout, and only those that know its machine id are read.
fn services_of(client: &mut SpiClient, id: i64, service: Option<&str>) -> Vec<(String, bool, Layout)> {
    let named = service.map(str::to_owned);
    if !crate::privilege::installed_has_layouts() {
        let machine_id = Layout::DEFAULT.decompose(id).map_or(-1, |parts| i32::from(parts.machine_id));
        let args = sql::SERVICES_OF_MACHINE_ID { machine_id, service: named };
        let table = spi::ok(spi::read(client, args, None));
        return table
            .into_iter()
            .map(|row| (row.service.unwrap_or_default(), row.history_purged.unwrap_or(false), Layout::DEFAULT))
            .collect();
    }
    let table = spi::ok(spi::read(client, sql::SERVICES_TO_EXPLAIN { service: named }, None));
    table
        .into_iter()
        .map(|row| {
            let layout = (|| {
                let width = |bits: Option<i32>| bits.and_then(|w| u32::try_from(w).ok());
                let order = FieldOrder::from_label(row.field_order.as_deref()?)?;
                let unit = i64::from(row.time_unit_ms?);
                let (time, machine, sequence) =
                    (width(row.time_bits)?, width(row.machine_bits)?, width(row.sequence_bits)?);
                Layout::new(row.epoch_unix_ms?, unit, time, machine, sequence, order).ok()
            })();
            (row.service.unwrap_or_default(), row.history_purged.unwrap_or(false), layout.unwrap_or(Layout::DEFAULT))
        })
        .collect()
}

fn events_of(client: &mut SpiClient, service: &str, machine_id: i32) -> Vec<Recorded> {
    let args = sql::EVENTS_OF_MACHINE_ID { service: service.into(), machine_id };
    let table = spi::ok(spi::read(client, args, None));
    table
        .into_iter()
        .filter_map(|row| {
            let kind = EventKind::from_label(row.event.as_deref()?)?;
            let holder = |host: Option<String>, port: Option<i32>, backend_slot: Option<i32>| -> Option<Holder> {
                Some(Holder { host: host?, port: port?, backend_slot, role: None, pid: None })
            };
            let mut current = holder(row.host, row.port, row.backend_slot);
            if let Some(h) = current.as_mut() {
                h.role = row.role;
                h.pid = row.pid;
            }
            Some(Recorded {
                at_ms: row.at_unix_ms?,
                kind,
                holder: current,
                version: row.version,
                not_before_ms: row.not_before_unix_ms,
                issued_until_ms: row.issued_until_unix_ms,
                previous_holder: holder(row.previous_host, row.previous_port, row.previous_backend_slot),
                previous_bound_ms: row.previous_bound_unix_ms,
                new_id: row.outcome.as_deref() == Some(Outcome::New.label()),
            })
        })
        .collect()
}

/// No event: what the registry says now, if it has a row for the machine id.
fn registry_only(client: &mut SpiClient, service: &str, machine_id: i32) -> Option<Vec<history::Explained>> {
    let args = sql::NODE_OF_MACHINE_ID { service: service.into(), machine_id };
    let table = spi::ok(spi::read(client, args, Some(1)));
    let row = table.into_iter().next()?;
    let name = idgen_core::input::node_name(&row.host?, row.port?, row.backend_slot);
    let now = messages::explain_registry_holder_now(&name, row.version?);
    let mut rows = history::explained(&Finding::NoHistory, service, machine_id, 0);
    rows[0].detail.push_str(&now);
    Some(rows)
}
