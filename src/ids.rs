//! The ID functions: `idgen_next_id` (the column default) and the helpers that
//! read IDs back: `idgen_decode`, `idgen_min_id`, `idgen_max_id`.

use crate::backend;
use crate::clock::{timestamptz, unix_ms};
use crate::errors::{or_raise, raise};
use idgen_core::layout::IdParts;
use idgen_core::{input, messages, Layout};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The next ID for the session's service (`idgen.service`, or the database's name).
#[pg_extern(volatile, parallel_unsafe, name = "idgen_next_id")]
fn idgen_next_id() -> i64 {
    backend::next_id_of_session_service("idgen_next_id")
}

/// The next ID for `service`.
#[pg_extern(volatile, parallel_unsafe, name = "idgen_next_id")]
fn idgen_next_id_for_service(service: Option<&str>) -> i64 {
    const F: &str = "idgen_next_id";
    match service {
        Some(service) => backend::next_id(F, service, |name| input::service_name(F, Some(name))),
        None => raise(input::service_name(F, None).expect_err("a NULL service is refused")),
    }
}

/// The parts of an ID of the default layout: when it was stamped, by which machine id, at which sequence.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_decode(id: i64, fcinfo: pg_sys::FunctionCallInfo) -> pgrx::composite_type!('static, "idgen_id_parts") {
    decoded("idgen_decode", &Layout::DEFAULT, id, fcinfo)
}

/// The parts of an ID of `service`'s layout.
#[pg_extern(stable, strict, parallel_restricted, name = "idgen_decode")]
fn idgen_decode_for_service(
    id: i64,
    service: &str,
    fcinfo: pg_sys::FunctionCallInfo,
) -> pgrx::composite_type!('static, "idgen_id_parts") {
    const F: &str = "idgen_decode";
    decoded(F, &layout_of(F, service), id, fcinfo)
}

/// The layout of `service` as recorded (the default for a service never claimed nor defined).
fn layout_of(function: &str, service: &str) -> Layout {
    let service = or_raise(input::service_name(function, Some(service)));
    crate::registry::layouts::of_service(&service)
}

fn decoded(
    function: &str,
    layout: &Layout,
    id: i64,
    fcinfo: pg_sys::FunctionCallInfo,
) -> pgrx::composite_type!('static, "idgen_id_parts") {
    let parts = layout.decompose(id).unwrap_or_else(|e| raise(messages::id_outside_layout(function, id, &e, layout)));
    let ts = timestamptz(layout.unix_ms_of(parts.ticks)).expect("layout times fit timestamptz");
    let type_oid = result_type(fcinfo);
    let fill = || -> Result<_, Box<dyn std::error::Error>> {
        let mut tuple = PgHeapTuple::new_composite_type_by_oid(type_oid)?;
        tuple.set_by_name("ts", ts)?;
        // integer since 0.7.0; smallint in the objects before (a machine id of the default layout fits).
        if tuple.set_by_name("machine_id", i32::from(parts.machine_id)).is_err() {
            tuple.set_by_name("machine_id", parts.machine_id as i16)?;
        }
        tuple.set_by_name("sequence", parts.sequence as i32)?;
        Ok(tuple)
    };
    fill().unwrap_or_else(|e| panic!("{function}: cannot build idgen_id_parts: {e}"))
}

/// The function's declared result type, found through the function itself (no
/// lookup by name on the search_path) and kept in `fn_extra` for the rest of
/// the query, as Postgres' own functions do.
fn result_type(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Oid {
    // SAFETY: fcinfo and its flinfo are valid for the call; fn_extra lives in fn_mcxt as long as flinfo does.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if (*flinfo).fn_extra.is_null() {
            let cached = pg_sys::MemoryContextAlloc((*flinfo).fn_mcxt, std::mem::size_of::<pg_sys::Oid>()).cast();
            *cached = pg_sys::get_func_rettype((*flinfo).fn_oid);
            (*flinfo).fn_extra = cached.cast();
        }
        *(*flinfo).fn_extra.cast::<pg_sys::Oid>()
    }
}

/// The smallest ID that can be stamped in the millisecond of `ts` (default layout).
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_min_id(ts: TimestampWithTimeZone) -> i64 {
    min_id("idgen_min_id", &Layout::DEFAULT, ts)
}

/// The largest ID that can be stamped in the millisecond of `ts` (default layout).
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_max_id(ts: TimestampWithTimeZone) -> i64 {
    max_id("idgen_max_id", &Layout::DEFAULT, ts)
}

/// The smallest ID of `service`'s layout that can be stamped in the tick of `ts`.
#[pg_extern(stable, strict, parallel_restricted, name = "idgen_min_id")]
fn idgen_min_id_for_service(ts: TimestampWithTimeZone, service: &str) -> i64 {
    const F: &str = "idgen_min_id";
    min_id(F, &layout_of(F, service), ts)
}

/// The largest ID of `service`'s layout that can be stamped in the tick of `ts`.
#[pg_extern(stable, strict, parallel_restricted, name = "idgen_max_id")]
fn idgen_max_id_for_service(ts: TimestampWithTimeZone, service: &str) -> i64 {
    const F: &str = "idgen_max_id";
    max_id(F, &layout_of(F, service), ts)
}

fn min_id(function: &str, layout: &Layout, ts: TimestampWithTimeZone) -> i64 {
    let ticks = ticks_of(function, layout, ts);
    compose(layout, IdParts { ticks, machine_id: 0, sequence: 0 })
}

fn max_id(function: &str, layout: &Layout, ts: TimestampWithTimeZone) -> i64 {
    let ticks = ticks_of(function, layout, ts);
    compose(layout, IdParts { ticks, machine_id: layout.max_machine_id(), sequence: layout.max_sequence() })
}

fn ticks_of(function: &str, layout: &Layout, ts: TimestampWithTimeZone) -> i64 {
    let given = if ts.is_infinity() {
        Err("infinity")
    } else if ts.is_neg_infinity() {
        Err("-infinity")
    } else {
        Ok(unix_ms(ts))
    };
    given
        .ok()
        .and_then(|ms| layout.ticks_at(ms).ok())
        .unwrap_or_else(|| raise(messages::time_outside_layout(function, "ts", given, layout)))
}

fn compose(layout: &Layout, parts: IdParts) -> i64 {
    layout.compose(parts).expect("fields come from the layout's own ranges")
}
