//! The only code that runs SQL: the statements of `crate::statements`, never a text of its own.
//! A call gives the statement's arguments struct (`sql::TAKE_IDLE { service, .. }`), which names
//! its statement and binds each field as the type the statement declares ([`Datums`]), and gets
//! back the rows it declares (`sql::rows::TAKE_RELEASED`), each column read by name as its declared
//! type ([`Columns`]): a statement and its callers cannot drift apart, or the crate does not
//! compile. tests/cluster/tests/one_source.rs checks each declaration against the server's.
//!
//! Each statement is planned once per process and its plan kept ([`plan`]): Postgres' plan cache
//! revalidates a kept plan when anything it uses changes (an `ALTER EXTENSION idgen UPDATE`, a DROP
//! and CREATE, any DDL on its tables), parsing the text again. Every name in the text is qualified
//! and the search_path is pinned around it (`crate::privilege`), so a new parse resolves the same
//! objects, never one planted since.

use crate::statements::{value, Arguments, Bind, FromRow, Read, Statement};
use pgrx::datum::{DatumWithOid, Inet, Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiHeapTupleData, SpiResult, SpiTupleTable};
use pgrx::{FromDatum, IntoDatum};
use std::collections::HashMap;

/// Runs `statement` with `args`, at most `limit` rows (SPI's read-write execution: it sees the
/// transaction's own writes).
///
/// Not `SpiClient::update`, which assigns the transaction an id before anything runs: a statement
/// that only reads (or writes no row) must leave none, or a read of the registry would wait at
/// commit for a synchronous standby, and fail on a hot standby. Postgres assigns one at the first
/// row a statement writes or locks; the kept plan was prepared read-write, so SPI runs it so.
pub fn run<A: Arguments>(client: &mut SpiClient, args: A, limit: Option<i64>) -> SpiResult<Vec<A::Row>> {
    let plan = plan(client, A::STATEMENT, true)?;
    client.select(plan, limit, &Datums::of(args)).map(rows::<A>)
}

/// Runs read-only `statement` as its caller sees the database (SPI's read-only execution).
pub fn read<A: Arguments>(client: &SpiClient, args: A, limit: Option<i64>) -> SpiResult<Vec<A::Row>> {
    let plan = plan(client, A::STATEMENT, false)?;
    client.select(plan, limit, &Datums::of(args)).map(rows::<A>)
}

/// Each row of `table` as `A`'s statement declares it.
fn rows<A: Arguments>(table: SpiTupleTable) -> Vec<A::Row> {
    table.map(|row| A::Row::read(&mut Columns::Spi { row: &row, statement: A::STATEMENT.name, read: 0 })).collect()
}

/// A kept plan: it lives as long as the process.
struct Kept(&'static OwnedPreparedStatement);
// SAFETY: a backend runs one thread; the plan is only ever used by it.
unsafe impl Send for Kept {}

/// This process's kept plans, by statement and whether it runs read-write.
static PLANS: parking_lot::Mutex<Option<HashMap<(&'static str, bool), Kept>>> = parking_lot::Mutex::new(None);

/// The kept plan of `statement`, prepared on first use. The lock is not held while a statement
/// runs: a statement's triggers run statements of their own.
fn plan(client: &SpiClient, statement: &Statement, read_write: bool) -> SpiResult<&'static OwnedPreparedStatement> {
    let key = (statement.name, read_write);
    if let Some(Kept(plan)) = PLANS.lock().as_ref().and_then(|plans| plans.get(&key)) {
        return Ok(plan);
    }
    let types: Vec<pgrx::PgOid> = statement.params.iter().map(|p| pgrx::PgOid::from(type_oid(p.sql_type))).collect();
    let prepared = if read_write {
        client.prepare_mut(statement.text, &types)?
    } else {
        client.prepare(statement.text, &types)?
    };
    let plan: &'static OwnedPreparedStatement = Box::leak(Box::new(prepared.keep()));
    PLANS.lock().get_or_insert_with(HashMap::new).insert(key, Kept(plan));
    Ok(plan)
}

/// Runs `statement` in a connection of its own (for callers that hold no SPI client).
pub fn run_alone<A: Arguments>(args: A) -> SpiResult<()> {
    pgrx::spi::Spi::connect_mut(|client| run(client, args, None).map(|_| ()))
}

/// Runs read-only `statement` with the latest snapshot rather than the transaction's (which, in
/// REPEATABLE READ or with an imported snapshot, may be old): its first row, none when it returns
/// no row. SPI must be connected.
pub fn first_row_with_latest_snapshot<A: Arguments>(args: A) -> Option<A::Row> {
    let statement = A::STATEMENT;
    let args = Datums::of(args);
    let plan = raw_plan(statement);
    let mut values: Vec<pg_sys::Datum> =
        args.iter().map(|arg| arg.datum().map_or(pg_sys::Datum::from(0), |d| d.sans_lifetime())).collect();
    let nulls: Vec<std::ffi::c_char> =
        args.iter().map(|arg| if arg.datum().is_some() { b' ' } else { b'n' } as std::ffi::c_char).collect();
    // SAFETY: SPI is connected (the caller holds its client); the row is read in the SPI
    // procedure's memory context.
    unsafe {
        let status = pg_sys::SPI_execute_snapshot(
            plan,
            values.as_mut_ptr(),
            nulls.as_ptr(),
            pg_sys::GetLatestSnapshot(),
            std::ptr::null_mut(),
            true,
            false,
            1,
        );
        assert_eq!(status, pg_sys::SPI_OK_SELECT as i32, "idgen: {} failed", statement.name);
        (pg_sys::SPI_processed > 0).then(|| {
            let table = pg_sys::SPI_tuptable;
            let (tuple, descriptor) = (*(*table).vals, (*table).tupdesc);
            A::Row::read(&mut Columns::Raw { tuple, descriptor, statement: statement.name, read: 0 })
        })
    }
}

/// Kept plans run by hand (a snapshot of their own), by statement.
static RAW_PLANS: parking_lot::Mutex<Option<HashMap<&'static str, usize>>> = parking_lot::Mutex::new(None);

/// The kept plan of read-only `statement` for `SPI_execute_snapshot`. SPI must be connected.
fn raw_plan(statement: &Statement) -> pg_sys::SPIPlanPtr {
    if let Some(plan) = RAW_PLANS.lock().as_ref().and_then(|plans| plans.get(statement.name)) {
        return *plan as pg_sys::SPIPlanPtr;
    }
    let text = std::ffi::CString::new(statement.text).expect("statements have no NUL");
    let mut types: Vec<pg_sys::Oid> = statement.params.iter().map(|p| type_oid(p.sql_type)).collect();
    // SAFETY: SPI is connected; the plan is kept for the life of the process.
    let plan = unsafe {
        let plan = pg_sys::SPI_prepare(text.as_ptr(), types.len() as i32, types.as_mut_ptr());
        assert!(!plan.is_null(), "idgen: could not plan {}", statement.name);
        pg_sys::SPI_keepplan(plan);
        plan
    };
    RAW_PLANS.lock().get_or_insert_with(HashMap::new).insert(statement.name, plan as usize);
    plan
}

/// The first row of a result.
pub fn first_row<R>(rows: SpiResult<Vec<R>>) -> Option<R> {
    ok(rows).into_iter().next()
}

/// SPI reports SQL errors by raising them; an `Err` here is a bug in idgen's own statements.
pub fn ok<T>(result: SpiResult<T>) -> T {
    result.unwrap_or_else(|e| panic!("idgen: a statement failed: {e}"))
}

/// A statement's arguments as SPI binds them, each with the oid of the type its statement
/// declares (the one its plan was prepared with).
struct Datums(Vec<DatumWithOid<'static>>);

impl Datums {
    fn of<A: Arguments>(args: A) -> Vec<DatumWithOid<'static>> {
        let mut datums = Datums(Vec::with_capacity(A::STATEMENT.params.len()));
        args.bind(&mut datums);
        debug_assert_eq!(datums.0.len(), A::STATEMENT.params.len());
        datums.0
    }

    fn push<T: pgrx::IntoDatum>(&mut self, value: Option<T>, sql_type: &str) {
        let oid = type_oid(sql_type);
        self.0.push(match value {
            // SAFETY: `oid` is the type `T` converts to (the Bind method names both).
            Some(value) => unsafe { DatumWithOid::new(value, oid) },
            None => DatumWithOid::null_oid(oid),
        });
    }
}

impl Bind for Datums {
    fn text(&mut self, value: Option<value::text>) {
        self.push(value, "text");
    }
    fn inet(&mut self, value: Option<value::inet>) {
        self.push(value.map(Inet), "inet");
    }
    fn smallint(&mut self, value: Option<value::smallint>) {
        self.push(value, "smallint");
    }
    fn integer(&mut self, value: Option<value::integer>) {
        self.push(value, "integer");
    }
    fn bigint(&mut self, value: Option<value::bigint>) {
        self.push(value, "bigint");
    }
    fn float8(&mut self, value: Option<value::float8>) {
        self.push(value, "float8");
    }
    fn oid(&mut self, value: Option<value::oid>) {
        self.push(value.map(pg_sys::Oid::from), "oid");
    }
    fn interval(&mut self, value: Option<value::interval>) {
        self.push(value.map(|d| Interval::from_micros(d.micros)), "interval");
    }
    fn timestamptz(&mut self, value: Option<value::timestamptz>) {
        self.push(value.map(time), "timestamptz");
    }
}

/// A server time as the statements take it.
pub fn at(time: TimestampWithTimeZone) -> value::Timestamptz {
    value::Timestamptz { micros: time.into() }
}

/// One row a statement returned, read column by column in order ([`Read`]): a row of an SPI
/// result, or the tuple SPI left for a statement run by hand.
enum Columns<'a, 'conn> {
    Spi { row: &'a SpiHeapTupleData<'conn>, statement: &'static str, read: usize },
    Raw { tuple: *mut pg_sys::HeapTupleData, descriptor: pg_sys::TupleDesc, statement: &'static str, read: usize },
}

impl Columns<'_, '_> {
    /// The next column as `T`; `None` when it is NULL. A column of another type than declared is a
    /// bug in idgen's statement or declaration.
    fn next<T: FromDatum + IntoDatum>(&mut self) -> Option<T> {
        match self {
            Columns::Spi { row, statement, read } => {
                *read += 1;
                row.get::<T>(*read).unwrap_or_else(|e| panic!("idgen: {statement} column {read}: {e}"))
            }
            Columns::Raw { tuple, descriptor, statement, read } => {
                *read += 1;
                let ordinal = *read as i32;
                // SAFETY: the tuple and its descriptor are SPI's, alive while this reads them; the
                // column's type is checked before its datum is read as `T`.
                unsafe {
                    let type_oid = pg_sys::SPI_gettypeid(*descriptor, ordinal);
                    assert!(
                        T::is_compatible_with(type_oid),
                        "idgen: {statement} column {read} is of type oid {}, not the one declared",
                        u32::from(type_oid)
                    );
                    let mut is_null = false;
                    let datum = pg_sys::SPI_getbinval(*tuple, *descriptor, ordinal, &mut is_null);
                    T::from_polymorphic_datum(datum, is_null, type_oid)
                }
            }
        }
    }
}

impl Read for Columns<'_, '_> {
    fn text(&mut self) -> Option<value::text> {
        match self {
            // The text as the server prints it, made valid UTF-8 lossily: read by hand, this is the
            // caller's role name (`CALLER_STANDING`), which in a database whose encoding is not UTF-8
            // may be bytes pgrx refuses to read as a String (it panics).
            Columns::Raw { tuple, descriptor, read, .. } => {
                *read += 1;
                // SAFETY: the tuple and its descriptor are SPI's, alive while this reads them; the
                // value is a C string SPI allocated, copied before anything else runs.
                unsafe {
                    let printed = pg_sys::SPI_getvalue(*tuple, *descriptor, *read as i32);
                    (!printed.is_null()).then(|| std::ffi::CStr::from_ptr(printed).to_string_lossy().into_owned())
                }
            }
            Columns::Spi { .. } => self.next(),
        }
    }
    fn boolean(&mut self) -> Option<value::boolean> {
        self.next()
    }
    fn integer(&mut self) -> Option<value::integer> {
        self.next()
    }
    fn bigint(&mut self) -> Option<value::bigint> {
        self.next()
    }
    fn bigint_array(&mut self) -> Option<value::bigint_array> {
        self.next()
    }
    fn oid(&mut self) -> Option<value::oid> {
        self.next::<pg_sys::Oid>().map(u32::from)
    }
    fn timestamptz(&mut self) -> Option<value::timestamptz> {
        self.next::<TimestampWithTimeZone>().map(at)
    }
}

/// A time the statements returned, as pgrx keeps it.
pub fn time(time: value::Timestamptz) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(time.micros).expect("a timestamptz read from Postgres")
}

/// The type oid of a parameter type as `crate::statements` spells it.
fn type_oid(sql_type: &str) -> pg_sys::Oid {
    match sql_type {
        "text" => pg_sys::TEXTOID,
        "inet" => pg_sys::INETOID,
        "smallint" => pg_sys::INT2OID,
        "integer" => pg_sys::INT4OID,
        "bigint" => pg_sys::INT8OID,
        "float8" => pg_sys::FLOAT8OID,
        "interval" => pg_sys::INTERVALOID,
        "timestamptz" => pg_sys::TIMESTAMPTZOID,
        "oid" => pg_sys::OIDOID,
        other => panic!("idgen: a statement declares a parameter of unknown type {other}"),
    }
}
