//! The ID functions: `idgen_next_id` (the column default) and the helpers that
//! read IDs back: `idgen_decode`, `idgen_min_id`, `idgen_max_id`.

use crate::backend;
use crate::clock::{timestamptz, unix_ms};
use crate::errors::raise;
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

/// The parts of an ID: when it was stamped, by which machine id, at which sequence.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_decode(id: i64, fcinfo: pg_sys::FunctionCallInfo) -> pgrx::composite_type!('static, "idgen_id_parts") {
    let layout = Layout::DEFAULT;
    let parts = layout.decompose(id).unwrap_or_else(|_| raise(messages::negative_id("idgen_decode", id)));
    let ts = timestamptz(layout.unix_ms_of(parts.ticks)).expect("layout times fit timestamptz");
    let type_oid = result_type(fcinfo);
    let fill = || -> Result<_, Box<dyn std::error::Error>> {
        let mut tuple = PgHeapTuple::new_composite_type_by_oid(type_oid)?;
        tuple.set_by_name("ts", ts)?;
        tuple.set_by_name("machine_id", parts.machine_id as i16)?;
        tuple.set_by_name("sequence", parts.sequence as i32)?;
        Ok(tuple)
    };
    fill().unwrap_or_else(|e| panic!("idgen_decode: cannot build idgen_id_parts: {e}"))
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

/// The smallest ID that can be stamped in the millisecond of `ts`.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_min_id(ts: TimestampWithTimeZone) -> i64 {
    let layout = Layout::DEFAULT;
    let ticks = ticks_of("idgen_min_id", &layout, ts);
    compose(&layout, IdParts { ticks, machine_id: 0, sequence: 0 })
}

/// The largest ID that can be stamped in the millisecond of `ts`.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_max_id(ts: TimestampWithTimeZone) -> i64 {
    let layout = Layout::DEFAULT;
    let ticks = ticks_of("idgen_max_id", &layout, ts);
    compose(&layout, IdParts { ticks, machine_id: layout.max_machine_id(), sequence: layout.max_sequence() })
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
