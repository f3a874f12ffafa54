//! Each service's ID layout and pool as the registry keeps them (`idgen_private.idgen_layouts`,
//! objects of 0.7.0 on; against older objects every service has the default): read by every
//! claim, recorded and fixed in the transaction of its own that readies a service for its first
//! claim, and defined before that with `idgen_define_layout`. What a layout is, and which are
//! valid, is the core's (`idgen_core::layout`, `idgen_core::input::layout_definition`).
//!
//! A layout never changes once a claim has read it: the claim reads it only after the
//! transaction that fixed it has committed, and `idgen_define_layout` changes only rows that no
//! claim has fixed. So every holder of a service's machine ids, and every decode, cuts IDs the
//! same way.

use super::store;
use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::errors::{or_raise, raise};
use crate::privilege::{as_extension_owner, installed_has_layouts};
use crate::spi::{at, first_row, ok as spi, run, time};
use crate::statements as sql;
use idgen_core::generator::Clock;
use idgen_core::input::{self, LayoutArguments};
use idgen_core::layout::{FieldOrder, IdSpaces, Layout, Pool, ServiceLayout};
use idgen_core::messages;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};

/// The arguments of `sql::$statement` (`RECORD_LAYOUT` or `DEFINE_LAYOUT`, which take the same)
/// recording `defined` for `service`, as `defined_by`.
macro_rules! layout_arguments {
    ($statement:ident, $service:expr, $defined:expr, $defined_by:expr) => {{
        let defined: &ServiceLayout = $defined;
        let l = &defined.layout;
        sql::$statement {
            service: String::from($service),
            preset: defined.preset_name().into(),
            epoch: at(timestamptz(l.epoch_unix_ms).expect("layout epochs fit timestamptz")),
            time_unit_ms: l.time_unit_ms as i32,
            time_bits: l.time_bits as i32,
            machine_bits: l.machine_bits as i32,
            sequence_bits: l.sequence_bits as i32,
            field_order: l.order.label().into(),
            pool_first: i32::from(defined.pool.first),
            pool_last: i32::from(defined.pool.last),
            defined_by: $defined_by,
        }
    }};
}

/// `idgen_layouts.defined_by` of the default a service's first claim records.
pub const FIRST_CLAIM: &str = "first claim";
/// `idgen_layouts.defined_by` of a service of an earlier version: its IDs were cut by the default
/// (the update records it; so does a definition for a service restored from an earlier dump).
pub const EARLIER_VERSION: &str = "update to 0.7.0";

/// A service's layout as the registry records it, and what its claims need to know of it.
pub struct Recorded {
    pub service_layout: ServiceLayout,
    /// Every machine id of the pool below it has a row or a tombstone: where the search for a
    /// never-registered id may start (a hint, never past the truth). `None`: not read (the layout
    /// came from this process's memory); [`unregistered_from`] reads it when a claim needs it.
    pub unregistered_from: Option<i32>,
    /// The layout is fixed and the service's guard rows exist: claims may start.
    pub ready: bool,
}

/// The layout of `service` if the service is ready for claims; none when it must be readied first
/// ([`prepare`], in a transaction of its own).
pub fn ready(client: &mut SpiClient, service: &str) -> Option<Recorded> {
    if !installed_has_layouts() {
        let ready = store::guards_exist(client, service);
        return ready.then_some(Recorded {
            service_layout: ServiceLayout::DEFAULT,
            unregistered_from: Some(i32::from(ServiceLayout::DEFAULT.pool.first)),
            ready,
        });
    }
    if let Some(service_layout) = remembered(service) {
        return Some(Recorded { service_layout, unregistered_from: None, ready: true });
    }
    let recorded = read(client, service).filter(|recorded| recorded.ready)?;
    remember(service, recorded.service_layout);
    Some(recorded)
}

/// The never-registered hint of `service` (see [`Recorded::unregistered_from`]), read now.
pub fn unregistered_from(client: &mut SpiClient, service: &str) -> i32 {
    read(client, service).and_then(|r| r.unregistered_from).unwrap_or(0)
}

/// Readies `service` for claims: its guard rows, and its layout recorded (the default if it was
/// never defined) and fixed. Only in a transaction of its own (a background worker), committed
/// before any claim reads it, so that no claim waits for another session's uncommitted row and
/// no layout changes under a claim.
pub fn prepare(client: &mut SpiClient, service: &str) {
    store::create_guards(client, service);
    if !installed_has_layouts() {
        return;
    }
    record_default_fixed(client, service, FIRST_CLAIM);
}

/// Fixes the layout recorded for `service`, if it is not yet: a row of the service is in the
/// registry (the INSERT trigger: a restore, a row written by hand).
pub fn fix(client: &mut SpiClient, service: &str) {
    if installed_has_layouts() {
        spi(run(client, sql::FIX_LAYOUT { service: service.into() }, None));
    }
}

/// Records the default layout of `service` (unless one is recorded) and fixes it, as `defined_by`.
fn record_default_fixed(client: &mut SpiClient, service: &str, defined_by: &str) {
    let args = layout_arguments!(RECORD_LAYOUT, service, &ServiceLayout::DEFAULT, defined_by.into());
    spi(run(client, args, None));
    spi(run(client, sql::FIX_LAYOUT { service: service.into() }, None));
}

/// The layout of `service` as recorded, if any (objects of 0.7.0 on).
fn read(client: &mut SpiClient, service: &str) -> Option<Recorded> {
    let row = first_row(run(client, sql::SERVICE_LAYOUT { service: service.into() }, Some(1)))?;
    let invalid = |why: String| -> ! { raise(messages::layout_row_invalid(service, &why)) };
    let int = |value: Option<i32>, column: &str| -> i32 {
        value.unwrap_or_else(|| invalid(format!("column {column} is NULL")))
    };
    let width = |value: Option<i32>, column: &str| u32::try_from(int(value, column)).unwrap_or(0);
    let order_label = &row.field_order;
    let order = FieldOrder::from_label(order_label).unwrap_or_else(|| invalid(format!("field_order {order_label:?}")));
    let layout = Layout::new(
        row.epoch_unix_ms,
        i64::from(int(row.time_unit_ms, "time_unit_ms")),
        width(row.time_bits, "time_bits"),
        width(row.machine_bits, "machine_bits"),
        width(row.sequence_bits, "sequence_bits"),
        order,
    )
    .unwrap_or_else(|e| invalid(e.to_string()));
    let (first, last) = (int(row.pool_first, "pool_first"), int(row.pool_last, "pool_last"));
    let pool = Pool::new(&layout, i64::from(first), i64::from(last)).unwrap_or_else(|e| invalid(e.to_string()));
    Some(Recorded {
        service_layout: ServiceLayout { layout, pool },
        unregistered_from: Some(int(row.unregistered_from, "unregistered_from")),
        ready: row.ready.unwrap_or(false),
    })
}

/// The layout IDs of `service` are cut by: the recorded one, or the default (a service never claimed
/// nor defined, or objects before 0.7.0).
pub fn recorded_layout(client: &mut SpiClient, service: &str) -> Layout {
    if let Some(remembered) = remembered(service) {
        return remembered.layout;
    }
    let recorded = if installed_has_layouts() { read(client, service) } else { None };
    if let Some(r) = recorded.as_ref().filter(|r| r.ready) {
        remember(service, r.service_layout);
    }
    recorded.map_or(Layout::DEFAULT, |r| r.service_layout.layout)
}

/// Layouts (and pools) fixed for claims that this process read, with the registry generation it
/// read them in. A layout fixed for claims never changes (see the module's doc) while its registry
/// stands: it is remembered per service for the registry's generation (invalidations processed
/// first, so a DROP and CREATE is seen).
static FIXED: parking_lot::Mutex<Vec<(u64, String, ServiceLayout)>> = parking_lot::Mutex::new(Vec::new());
/// How many services' layouts a process keeps.
const FIXED_KEPT: usize = 256;

fn remembered(service: &str) -> Option<ServiceLayout> {
    let generation = super::incarnation::current();
    FIXED.lock().iter().find(|f| f.0 == generation && f.1 == service).map(|f| f.2)
}

fn remember(service: &str, service_layout: ServiceLayout) {
    let generation = super::incarnation::current();
    let mut fixed = FIXED.lock();
    fixed.retain(|f| f.0 == generation);
    if fixed.len() < FIXED_KEPT {
        fixed.push((generation, service.to_owned(), service_layout));
    }
}

/// Moves the never-registered hint of `service` up to `from`, unless another transaction holds the
/// layout's row (see `crate::statements::ADVANCE_UNREGISTERED_FROM`).
pub fn advance_unregistered_from(client: &mut SpiClient, service: &str, from: i32) {
    if installed_has_layouts() {
        spi(run(client, sql::ADVANCE_UNREGISTERED_FROM { service: service.into(), from }, None));
    }
}

/// The layout IDs of `service` are cut by, as the decoding functions read it: the recorded one,
/// or the default for a service never claimed nor defined. Read once per statement.
pub fn of_service(service: &str) -> Layout {
    /// The statement (its transaction's start and command) the layouts were read in, and them.
    type Cached = ((pg_sys::TimestampTz, pg_sys::CommandId), Vec<(String, Layout)>);
    static CACHE: std::sync::Mutex<Option<Cached>> = std::sync::Mutex::new(None);
    // SAFETY: reads backend-local transaction state.
    let statement = unsafe { (pg_sys::GetCurrentTransactionStartTimestamp(), pg_sys::GetCurrentCommandId(false)) };
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if cache.as_ref().is_none_or(|(at, _)| *at != statement) {
        *cache = Some((statement, Vec::new()));
    }
    let (_, known) = cache.as_mut().expect("just set");
    if let Some((_, layout)) = known.iter().find(|(name, _)| name == service) {
        return *layout;
    }
    let layout = as_extension_owner(|| Spi::connect_mut(|client| recorded_layout(client, service)));
    known.push((service.to_owned(), layout));
    layout
}

type LayoutRow = (
    String,
    String,
    TimestampWithTimeZone,
    i32,
    i32,
    i32,
    i32,
    String,
    i32,
    i32,
    i32,
    i64,
    TimestampWithTimeZone,
    TimestampWithTimeZone,
    String,
    Option<TimestampWithTimeZone>,
);

/// Defines the layout and pool of a service before its first claim: a preset, changed by the parts
/// given. Until a claim fixes it, it may be defined again; from then on it never changes (55000),
/// but a definition equal to it is answered with it. Returns the layout as recorded.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn idgen_define_layout(
    service: Option<&str>,
    preset: default!(Option<&str>, "'snowflake'"),
    pool_first: default!(Option<i32>, "NULL"),
    pool_last: default!(Option<i32>, "NULL"),
    epoch: default!(Option<TimestampWithTimeZone>, "NULL"),
    time_unit_ms: default!(Option<i32>, "NULL"),
    time_bits: default!(Option<i32>, "NULL"),
    machine_bits: default!(Option<i32>, "NULL"),
    sequence_bits: default!(Option<i32>, "NULL"),
    field_order: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(service, String),
        name!(preset, String),
        name!(epoch, TimestampWithTimeZone),
        name!(time_unit_ms, i32),
        name!(time_bits, i32),
        name!(machine_bits, i32),
        name!(sequence_bits, i32),
        name!(field_order, String),
        name!(pool_first, i32),
        name!(pool_last, i32),
        name!(machine_ids, i32),
        name!(ids_per_second, i64),
        name!(ends_at, TimestampWithTimeZone),
        name!(defined_at, TimestampWithTimeZone),
        name!(defined_by, String),
        name!(fixed_at, Option<TimestampWithTimeZone>),
    ),
> {
    const F: &str = "idgen_define_layout";
    let service = or_raise(input::service_name(F, service));
    let epoch_unix_ms = epoch.map(|ts| match (ts.is_infinity(), ts.is_neg_infinity()) {
        (true, _) => Err("infinity"),
        (_, true) => Err("-infinity"),
        _ => Ok(unix_ms(ts)),
    });
    let arguments = LayoutArguments {
        preset,
        pool_first,
        pool_last,
        epoch_unix_ms,
        time_unit_ms,
        time_bits,
        machine_bits,
        sequence_bits,
        field_order,
    };
    let defined = or_raise(input::layout_definition(F, &arguments, SystemClock.now_unix_ms()));
    let definer = role_name(super::access::acting_role());
    super::prepare_guard::wrote_in_transaction(F);
    // A layout lost at a failover would leave the service to the default at its first claim.
    crate::durability::make_commit_durable();
    let row = as_extension_owner(|| {
        Spi::connect_mut(|client| {
            // A service the registry holds rows, tombstones or history of has IDs out there, cut by the
            // layout it has: that is fixed, whichever way the rows came (claims, a restore, a hand
            // INSERT). With no layout recorded (restored from a dump of an earlier version) its IDs were
            // cut by the default.
            let has_ids = first_row(run(client, sql::SERVICE_HAS_IDS { service: service.clone() }, Some(1)))
                .and_then(|row| row.has_ids)
                .unwrap_or(false);
            if has_ids {
                if read(client, &service).is_none() {
                    if defined != ServiceLayout::DEFAULT {
                        raise(messages::layout_fixed_by_earlier_ids(F, &service, &ServiceLayout::DEFAULT));
                    }
                    record_default_fixed(client, &service, EARLIER_VERSION);
                }
                fix(client, &service);
            }
            let args = layout_arguments!(DEFINE_LAYOUT, &service, &defined, definer);
            let wrote = first_row(run(client, args, None)).is_some();
            let row = first_row(run(client, sql::LAYOUT_OF { service: service.clone() }, Some(1)))
                .unwrap_or_else(|| panic!("idgen: the layout of {service:?} was just written"));
            let recorded = read(client, &service).map(|r| r.service_layout);
            if !wrote && recorded != Some(defined) {
                let fixed_at = row.fixed_at.map(|t| unix_ms(time(t))).unwrap_or_default();
                let now = recorded.unwrap_or(ServiceLayout::DEFAULT);
                raise(messages::layout_fixed(F, &service, &idgen_core::format::iso_utc(fixed_at), &now));
            }
            for (other, other_layout) in layouts(client, sql::OTHER_LAYOUTS { service: service.clone() }) {
                if defined.id_spaces(&other_layout) == IdSpaces::OtherBits {
                    crate::errors::report(
                        messages::pools_apart_at_other_bits(F, &service, &defined, &other, &other_layout),
                        pgrx::PgLogLevel::WARNING,
                    );
                }
            }
            layout_row(&service, row, &defined)
        })
    });
    TableIterator::once(row)
}

/// The services' layouts and pools a statement lists (see `sql::OTHER_LAYOUTS`); a row that is no
/// valid layout (written by hand) is left out: the claim refuses it with its reason.
fn layouts(
    client: &mut SpiClient,
    args: impl sql::Arguments<Row = sql::rows::OTHER_LAYOUTS>,
) -> Vec<(String, ServiceLayout)> {
    spi(run(client, args, None))
        .into_iter()
        .filter_map(|row| {
            let order = FieldOrder::from_label(row.field_order.as_deref()?)?;
            let width = |bits: Option<i32>| bits.and_then(|v| u32::try_from(v).ok());
            let layout = Layout::new(
                row.epoch_unix_ms?,
                i64::from(row.time_unit_ms?),
                width(row.time_bits)?,
                width(row.machine_bits)?,
                width(row.sequence_bits)?,
                order,
            )
            .ok()?;
            let pool = Pool::new(&layout, i64::from(row.pool_first?), i64::from(row.pool_last?)).ok()?;
            Some((row.service?, ServiceLayout { layout, pool }))
        })
        .collect()
}

/// `idgen_health()`'s findings on the layouts the caller may read: pairs of services whose pools
/// share no machine id at other bits (`pools_apart_at_other_bits`). Read as the caller.
#[pg_extern(stable, parallel_restricted, sql = false)]
#[allow(clippy::type_complexity)]
fn layout_findings() -> TableIterator<
    'static,
    (
        name!(severity, String),
        name!(finding, String),
        name!(subject, String),
        name!(detail, String),
        name!(action, String),
    ),
> {
    let all = crate::privilege::with_pinned_search_path(|| {
        Spi::connect_mut(
            |client| if installed_has_layouts() { layouts(client, sql::VISIBLE_LAYOUTS {}) } else { Vec::new() },
        )
    });
    let mut found = Vec::new();
    for (i, (service, layout)) in all.iter().enumerate() {
        for (other, other_layout) in &all[i + 1..] {
            if layout.id_spaces(other_layout) == IdSpaces::OtherBits {
                let f = messages::pools_apart_at_other_bits_finding(service, layout, other, other_layout);
                found.push((f.severity.to_owned(), f.finding.to_owned(), f.subject, f.detail, f.action));
            }
        }
    }
    TableIterator::new(found)
}

/// The answer of `idgen_define_layout`: the row of [`sql::LAYOUT_OF`], with what the layout means.
fn layout_row(service: &str, row: sql::rows::LAYOUT_OF, recorded: &ServiceLayout) -> LayoutRow {
    let layout = &recorded.layout;
    (
        service.to_owned(),
        row.preset,
        time(row.epoch),
        row.time_unit_ms,
        row.time_bits,
        row.machine_bits,
        row.sequence_bits,
        row.field_order,
        row.pool_first,
        row.pool_last,
        recorded.pool.size() as i32,
        layout.ids_per_second() as i64,
        timestamptz(layout.last_unix_ms()).expect("layouts end by 9999"),
        time(row.defined_at),
        row.defined_by,
        row.fixed_at.map(time),
    )
}

/// The name of a role, as `idgen_layouts.defined_by` records it.
fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: looks the role up in the syscache; a missing role is an error (noerr = false).
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, false);
        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}
