//! The registry's SQL: each statement of the claim, heartbeat, release and
//! backend-verification paths, with parameters only. Callers run as the
//! extension owner with search_path pinned to the extension's schema (SECURITY
//! DEFINER functions, or `privilege::as_extension_owner` for backends).
//!
//! Nothing here waits on another session's claim: candidate machine ids are
//! guarded by transaction-level try-locks and rows by `FOR UPDATE SKIP LOCKED`.
//!
//! Times written are `clock_timestamp()`, not `now()`: a backend may claim or
//! renew late in a long transaction, and its lease runs from the write.
//! Comparisons use `now()`, the claimant's transaction start, which can only
//! make rows look younger than they are.
//!
//! Watermarks (`issued_until`, see `idgen_core::watermark`): every write raises
//! it with `greatest`, never lowers it. A claim reads the bound earlier holders
//! left (a node's own row: its `issued_until`; a row taken over:
//! `idgen_holder_bound`, defined once in `sql/registry.sql`) before it writes,
//! and skips rows whose bound is further ahead of the clock than the claimant
//! may wait. Durations are passed as `float8` seconds or milliseconds, so that
//! `float8 * interval` matches pg_catalog's operator exactly.

use idgen_core::input::{Holding, NodeIdentity};
use idgen_core::messages::RowFacts;
use pgrx::datum::{DatumWithOid, Inet, TimestampWithTimeZone};
use pgrx::spi::{SpiClient, SpiHeapTupleData, SpiResult};

/// A row won by a claim.
pub struct Won {
    pub machine_id: i16,
    pub version: i32,
    pub lease_until: TimestampWithTimeZone,
    /// The row's new `last_seen`: the moment of the claim.
    pub claimed_at: TimestampWithTimeZone,
    /// The latest time an earlier holder may have stamped; none for a new id.
    pub bound: Option<TimestampWithTimeZone>,
    /// The watermark the row holds now.
    pub issued_until: TimestampWithTimeZone,
}

/// What the caller's own row looks like to a claim.
pub enum OwnRow {
    Won(Won),
    /// The row exists but another transaction has it locked.
    Busy(i16),
    Absent,
}

/// How a claim treats watermarks, in the units its statements take.
#[derive(Clone, Copy)]
pub struct ClaimTimes {
    /// The lease granted, in seconds.
    pub lease_secs: i64,
    /// How far ahead of the clock a watermark may be for the claimant to keep the id.
    pub tolerance_ms: i64,
    /// The window the claimant may issue in before its next write (0 for services).
    pub window_ms: i64,
    /// The shortest take-back age, in seconds (see `idgen_holder_bound`).
    pub takeover_idle_secs: i64,
}

/// The registry as a whole, read at the start of a claim.
pub struct Registry {
    pub epoch: i64,
    /// No grant may be stamped at or before it; `None` while `-infinity`.
    pub floor: Option<TimestampWithTimeZone>,
}

/// Which rows a take-over may take.
#[derive(Clone, Copy)]
pub enum Victims {
    /// Released rows whose cooldown has passed, longest released first.
    Released { cooldown_secs: i64 },
    /// Rows idle longer than `min_idle_secs` (and not cooling down), least recently seen first.
    Idle { min_idle_secs: i64, cooldown_secs: i64 },
}

/// The columns of [`RowFacts`], for a table or alias `$t`, times as UTC ISO-8601.
#[rustfmt::skip]
macro_rules! facts_columns {
    ($t:literal) => {
        concat!(
            $t, ".machine_id, host(", $t, ".host), ", $t, ".port, ", $t, ".version, ",
            "to_char(", $t, ".last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), ",
            "greatest(0, floor(extract(epoch FROM now() - ", $t, ".last_seen)))::bigint, ",
            "to_char(", $t, ".released_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), ",
            $t, ".backend_slot"
        )
    };
}

/// The columns of [`Won`] after an UPDATE or INSERT of `n`; `$lease` is the
/// parameter holding the lease in seconds, `$bound` the earlier holders' bound.
macro_rules! won_columns {
    ($lease:literal, $bound:literal) => {
        concat!(
            "n.machine_id, n.version, n.last_seen + ",
            $lease,
            "::float8 * interval '1 second', n.last_seen, ",
            $bound,
            ", n.issued_until"
        )
    };
}

/// `idgen_holder_bound` of row `$t`, with the lease in `$5` and the take-back age in `$9` (seconds).
macro_rules! holder_bound {
    ($t:literal) => {
        concat!("idgen_holder_bound(", $t, ", $5::float8 * interval '1 second', $9::float8 * interval '1 second')")
    };
}

/// A take-over: lock one victim row without waiting, hand it to the claimant.
/// Returns the won row (columns 1-6) and the previous holder's facts (7-14).
/// Parameters: $1-$4 the claimant, $5 lease (s), $6 minimum idle age (s), $7
/// cooldown (s), $8 tolerance (ms), $9 take-back age (s), $10 window (ms).
macro_rules! take_over_sql {
    ($filter:literal, $order:literal) => {
        concat!(
            "WITH victim AS (SELECT v.*, ",
            holder_bound!("v"),
            " AS bound FROM system_nodes v WHERE v.service = $1 AND ",
            $filter,
            " AND ",
            holder_bound!("v"),
            " <= clock_timestamp() + $8::float8 * interval '1 millisecond'",
            " ORDER BY ",
            $order,
            ", v.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
            "UPDATE system_nodes n SET host = $2, port = $3, backend_slot = $4, version = n.version + 1, ",
            "last_seen = clock_timestamp(), released_at = NULL, ",
            "issued_until = greatest(v.bound, clock_timestamp() + $10::float8 * interval '1 millisecond') ",
            "FROM victim v WHERE n.service = v.service AND n.machine_id = v.machine_id ",
            "RETURNING ",
            won_columns!("$5", "v.bound"),
            ", ",
            facts_columns!("v")
        )
    };
}

const TAKE_RELEASED: &str =
    take_over_sql!("v.released_at <= now() - $7::float8 * interval '1 second'", "v.released_at");
const TAKE_IDLE: &str = take_over_sql!(
    "v.last_seen < now() - $6::float8 * interval '1 second' AND (v.released_at IS NULL OR v.released_at <= now() - $7::float8 * interval '1 second')",
    "v.last_seen"
);

/// The caller's own rows: `$1..$4` are service, host, port and backend_slot.
macro_rules! own_identity {
    ($t:literal) => {
        concat!(
            $t,
            ".service = $1 AND ",
            $t,
            ".host = $2 AND ",
            $t,
            ".port = $3 AND ",
            $t,
            ".backend_slot IS NOT DISTINCT FROM $4"
        )
    };
}

/// The row a holding names, still held: `$1..$6` are service, machine_id,
/// host, port, backend_slot and version.
macro_rules! holding_matches {
    () => {
        "service = $1 AND machine_id = $2 AND host = $3 AND port = $4 AND backend_slot IS NOT DISTINCT FROM $5 \
         AND version = $6 AND released_at IS NULL"
    };
}

/// Serialises claims of one identity without waiting (a second claimant gets
/// `None` at once), and reads the registry's epoch and floor.
pub fn try_lock_identity(client: &mut SpiClient, node: &NodeIdentity) -> Option<Registry> {
    let sql = "SELECT pg_try_advisory_xact_lock(hashtext(concat_ws('/', 'idgen/node', $1, $2, $4)), $3), \
                      r.epoch, nullif(r.floor, '-infinity') \
               FROM idgen_registry r";
    let args = [text(&node.service), text(&node.host), node.port.into(), node.backend_slot.into()];
    let row = first_row(client.update(sql, Some(1), &args))
        .unwrap_or_else(|| panic!("idgen: idgen_registry has no row; reinstall the extension"));
    column::<bool>(&row, 1).then(|| Registry { epoch: column(&row, 2), floor: spi(row.get(3)) })
}

/// Step 1, part 1: the caller's own held row, if its watermark is further
/// ahead than the caller may wait, is released for good and its bound kept,
/// so that the identity can move to another machine id. Returns the machine
/// id and the watermark that set it aside.
pub fn release_own_row_ahead(
    client: &mut SpiClient,
    node: &NodeIdentity,
    times: &ClaimTimes,
) -> Option<(i16, TimestampWithTimeZone)> {
    let sql = concat!(
        "WITH own AS (SELECT o.service, o.machine_id, o.issued_until FROM system_nodes o WHERE ",
        own_identity!("o"),
        " AND o.released_at IS NULL AND o.issued_until > clock_timestamp() + $8::float8 * interval '1 millisecond' ",
        "FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version + 1, released_at = clock_timestamp(), ",
        "issued_until = greatest(n.issued_until, ",
        holder_bound!("n"),
        ") FROM own WHERE n.service = own.service AND n.machine_id = own.machine_id ",
        "RETURNING n.machine_id, own.issued_until"
    );
    let args = claim_args(node, times, None);
    first_row(client.update(sql, Some(1), &args)).map(|row| (column(&row, 1), column(&row, 2)))
}

/// Step 1, part 2: bump the caller's own row (held, or else released by the
/// caller), unless another transaction has it locked or its watermark is too
/// far ahead. Its own `issued_until` is the bound: the caller is its last holder.
pub fn reuse_own_row(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTimes) -> OwnRow {
    let sql = concat!(
        "WITH own AS (SELECT o.service, o.machine_id, o.issued_until AS bound FROM system_nodes o WHERE ",
        own_identity!("o"),
        " AND o.issued_until <= clock_timestamp() + $8::float8 * interval '1 millisecond' ",
        "AND (o.released_at IS NULL OR NOT EXISTS (SELECT FROM system_nodes h WHERE ",
        own_identity!("h"),
        " AND h.released_at IS NULL)) ",
        "ORDER BY o.released_at IS NOT NULL, o.machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET version = n.version + 1, last_seen = clock_timestamp(), released_at = NULL, ",
        "issued_until = greatest(n.issued_until, clock_timestamp() + $10::float8 * interval '1 millisecond') ",
        "FROM own WHERE n.service = own.service AND n.machine_id = own.machine_id ",
        "RETURNING ",
        won_columns!("$5", "own.bound")
    );
    let args = claim_args(node, times, None);
    if let Some(won) = first_row(client.update(sql, Some(1), &args)).map(|row| won(&row)) {
        return OwnRow::Won(won);
    }
    let sql =
        concat!("SELECT n.machine_id FROM system_nodes n WHERE ", own_identity!("n"), " AND n.released_at IS NULL");
    match first_value::<i16>(client.update(sql, Some(1), &args[..4])) {
        Some(machine_id) => OwnRow::Busy(machine_id),
        None => OwnRow::Absent,
    }
}

/// Step 2, part 1: machine ids in `first..=last` with no row, lowest first, as of now.
pub fn unregistered_machine_ids(client: &mut SpiClient, service: &str, first: u16, last: u16) -> Vec<i16> {
    let sql = "SELECT m::smallint FROM generate_series($2::integer, $3::integer) AS m \
               WHERE NOT EXISTS (SELECT 1 FROM system_nodes n WHERE n.service = $1 AND n.machine_id = m) \
               ORDER BY m";
    let args = [text(service), i32::from(first).into(), i32::from(last).into()];
    let table = spi(client.update(sql, None, &args));
    table.map(|row| spi(row.get::<i16>(1)).expect("machine_id is not null")).collect()
}

/// Step 2, part 2: insert the row for `machine_id` unless another claimant is
/// inserting it (try-lock taken) or it was committed meanwhile (no conflict wait:
/// the try-lock guarantees no uncommitted insert of this id is in flight).
/// A never-registered id has no earlier holder: its bound is none.
pub fn insert_unregistered(
    client: &mut SpiClient,
    node: &NodeIdentity,
    machine_id: i16,
    times: &ClaimTimes,
) -> Option<Won> {
    let sql = concat!(
        "INSERT INTO system_nodes AS n (service, machine_id, host, port, backend_slot, version, last_seen, issued_until) ",
        "SELECT $1, $11, $2, $3, $4, 1, clock_timestamp(), clock_timestamp() + $10::float8 * interval '1 millisecond' ",
        "WHERE pg_try_advisory_xact_lock(hashtext('idgen/machine_id/' || $1), $11) ",
        "ON CONFLICT DO NOTHING ",
        "RETURNING ",
        won_columns!("$5", "NULL::timestamptz")
    );
    let args = claim_args(node, times, Some(machine_id));
    first_row(client.update(sql, Some(1), &args)).map(|row| won(&row))
}

/// Steps 3 to 6: take one victim row over for the claimant.
pub fn take_over(
    client: &mut SpiClient,
    node: &NodeIdentity,
    victims: Victims,
    times: &ClaimTimes,
) -> Option<(Won, RowFacts)> {
    let (sql, min_idle_secs, cooldown_secs) = match victims {
        Victims::Released { cooldown_secs } => (TAKE_RELEASED, 0, cooldown_secs),
        Victims::Idle { min_idle_secs, cooldown_secs } => (TAKE_IDLE, min_idle_secs, cooldown_secs),
    };
    let mut args = claim_args(node, times, None);
    args[5] = (min_idle_secs as f64).into();
    args[6] = (cooldown_secs as f64).into();
    let table = client.update(sql, Some(1), &args);
    first_row(table).map(|row| (won(&row), row_facts(&row, 7)))
}

/// The parameters every claim statement shares: $1-$4 the claimant, $5 lease
/// (s), $6 and $7 take-over ages (s, set by `take_over`), $8 tolerance (ms),
/// $9 take-back age (s), $10 window (ms), and $11 a machine id when given.
fn claim_args(node: &NodeIdentity, times: &ClaimTimes, machine_id: Option<i16>) -> Vec<DatumWithOid<'static>> {
    let mut args = identity_args(node);
    args.extend([
        (times.lease_secs as f64).into(),
        0f64.into(),
        0f64.into(),
        (times.tolerance_ms as f64).into(),
        (times.takeover_idle_secs as f64).into(),
        (times.window_ms as f64).into(),
    ]);
    args.extend(machine_id.map(DatumWithOid::from));
    args
}

/// The row of `machine_id` as it stands, if any.
pub fn current_row(client: &mut SpiClient, service: &str, machine_id: i16) -> Option<RowFacts> {
    let sql =
        concat!("SELECT ", facts_columns!("n"), " FROM system_nodes n WHERE n.service = $1 AND n.machine_id = $2");
    first_row(client.update(sql, Some(1), &[text(service), machine_id.into()])).map(|row| row_facts(&row, 1))
}

/// How many ids the service holds and its least recently seen holder.
pub fn least_recently_seen(client: &mut SpiClient, service: &str) -> (i64, Option<RowFacts>) {
    let count = "SELECT count(*) FROM system_nodes WHERE service = $1";
    let held = first_value::<i64>(client.update(count, Some(1), &[text(service)])).unwrap_or(0);
    let sql = concat!(
        "SELECT ",
        facts_columns!("n"),
        " FROM system_nodes n WHERE n.service = $1 ORDER BY n.last_seen, n.machine_id LIMIT 1"
    );
    (held, first_row(client.update(sql, Some(1), &[text(service)])).map(|row| row_facts(&row, 1)))
}

/// A version-checked heartbeat. Waits for a concurrent take-over of the same
/// row to finish, because its answer depends on that take-over's outcome.
/// Raises the watermark to the node's report, or to the server clock when the
/// node reports none.
pub fn heartbeat(
    client: &mut SpiClient,
    held: &Holding,
    lease_secs: i64,
    reported: Option<TimestampWithTimeZone>,
) -> Option<TimestampWithTimeZone> {
    let sql = concat!(
        "UPDATE system_nodes SET last_seen = clock_timestamp(), ",
        "issued_until = greatest(issued_until, coalesce($8, clock_timestamp())) WHERE ",
        holding_matches!(),
        " RETURNING last_seen + $7::float8 * interval '1 second'"
    );
    let mut args = holding_args(held, Some(lease_secs));
    args.push(reported.into());
    first_value(client.update(sql, Some(1), &args))
}

/// A version-checked release: bumps the version and starts the cooldown. The
/// watermark rises to the node's report, or, when it reports none, to the
/// server clock plus the clock skew the lease margin allows between hosts.
pub fn release(
    client: &mut SpiClient,
    held: &Holding,
    margin_secs: i64,
    reported: Option<TimestampWithTimeZone>,
) -> bool {
    let sql = concat!(
        "UPDATE system_nodes SET version = version + 1, released_at = t.now, ",
        "issued_until = greatest(issued_until, coalesce($8, t.now + $7::float8 * interval '1 second')) ",
        "FROM (SELECT clock_timestamp() AS now) t WHERE ",
        holding_matches!(),
        " RETURNING version"
    );
    let mut args = holding_args(held, Some(margin_secs));
    args.push(reported.into());
    first_value::<i32>(client.update(sql, Some(1), &args)).is_some()
}

/// What a backend's check of its lease found.
pub enum BackendCheck {
    /// Still held at this version; the lease now runs until `lease_until`, and
    /// the registry's watermark is `issued_until`.
    Held { verified_at: TimestampWithTimeZone, lease_until: TimestampWithTimeZone, issued_until: TimestampWithTimeZone },
    /// Held at this version, but another transaction has the row locked (a take-over in flight).
    Busy,
    /// The version moved, the row was released, it is gone, or the registry is another one (epoch).
    Lost(Option<RowFacts>),
}

/// A backend's version-checked heartbeat: renews the lease and raises the
/// watermark to the end of its next window, unless another transaction has
/// the row locked (never waits, unlike a service heartbeat).
pub fn renew_backend_lease(
    client: &mut SpiClient,
    held: &Holding,
    lease_secs: i64,
    epoch: i64,
    window_ms: i64,
) -> BackendCheck {
    let sql = concat!(
        "WITH own AS (SELECT service, machine_id FROM system_nodes WHERE ",
        holding_matches!(),
        " AND EXISTS (SELECT FROM idgen_registry r WHERE r.epoch = $8) FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET last_seen = clock_timestamp(), ",
        "issued_until = greatest(n.issued_until, clock_timestamp() + $9::float8 * interval '1 millisecond') ",
        "FROM own WHERE n.service = own.service AND n.machine_id = own.machine_id ",
        "RETURNING n.last_seen, n.last_seen + $7::float8 * interval '1 second', n.issued_until"
    );
    let mut args = holding_args(held, Some(lease_secs));
    args.extend([epoch.into(), (window_ms as f64).into()]);
    if let Some(row) = first_row(client.update(sql, Some(1), &args)) {
        return BackendCheck::Held {
            verified_at: column(&row, 1),
            lease_until: column(&row, 2),
            issued_until: column(&row, 3),
        };
    }
    match read_backend_lease(client, held, lease_secs, epoch) {
        BackendCheck::Held { .. } => BackendCheck::Busy,
        other => other,
    }
}

/// A backend's version-checked read, for read-only transactions: confirms
/// ownership without moving `lease_until` or the watermark.
pub fn read_backend_lease(client: &mut SpiClient, held: &Holding, lease_secs: i64, epoch: i64) -> BackendCheck {
    let sql = concat!(
        "SELECT clock_timestamp(), last_seen + $7::float8 * interval '1 second', issued_until FROM system_nodes WHERE ",
        holding_matches!(),
        " AND EXISTS (SELECT FROM idgen_registry r WHERE r.epoch = $8)"
    );
    let mut args = holding_args(held, Some(lease_secs));
    args.push(epoch.into());
    match first_row(client.update(sql, Some(1), &args)) {
        Some(row) => BackendCheck::Held {
            verified_at: column(&row, 1),
            lease_until: column(&row, 2),
            issued_until: column(&row, 3),
        },
        None => BackendCheck::Lost(current_row(client, &held.node.service, held.machine_id)),
    }
}

fn identity_args(node: &NodeIdentity) -> Vec<DatumWithOid<'static>> {
    vec![text(&node.service), inet(&node.host), node.port.into(), node.backend_slot.into()]
}

/// Arguments for [`holding_matches`], plus a duration in seconds as `$7` when given.
fn holding_args(held: &Holding, secs: Option<i64>) -> Vec<DatumWithOid<'static>> {
    let n = &held.node;
    let mut args = vec![
        text(&n.service),
        held.machine_id.into(),
        inet(&n.host),
        n.port.into(),
        n.backend_slot.into(),
        held.version.into(),
    ];
    args.extend(secs.map(|secs| DatumWithOid::from(secs as f64)));
    args
}

fn won(row: &SpiHeapTupleData) -> Won {
    Won {
        machine_id: column(row, 1),
        version: column(row, 2),
        lease_until: column(row, 3),
        claimed_at: column(row, 4),
        bound: spi(row.get(5)),
        issued_until: column(row, 6),
    }
}

fn row_facts(row: &SpiHeapTupleData, first: usize) -> RowFacts {
    RowFacts {
        machine_id: column(row, first),
        host: column(row, first + 1),
        port: column(row, first + 2),
        version: column(row, first + 3),
        last_seen: column(row, first + 4),
        idle_secs: column(row, first + 5),
        released_at: spi(row.get::<String>(first + 6)),
        backend_slot: spi(row.get::<i32>(first + 7)),
    }
}

fn column<T: pgrx::FromDatum + pgrx::IntoDatum>(row: &SpiHeapTupleData, ordinal: usize) -> T {
    spi(row.get::<T>(ordinal)).unwrap_or_else(|| panic!("idgen: registry column {ordinal} is unexpectedly NULL"))
}

fn first_row(table: SpiResult<pgrx::spi::SpiTupleTable>) -> Option<SpiHeapTupleData> {
    spi(table).next()
}

fn first_value<T: pgrx::FromDatum + pgrx::IntoDatum>(table: SpiResult<pgrx::spi::SpiTupleTable>) -> Option<T> {
    first_row(table).and_then(|row| spi(row.get::<T>(1)))
}

fn text(value: &str) -> DatumWithOid<'static> {
    value.to_owned().into()
}

fn inet(host: &str) -> DatumWithOid<'static> {
    Inet(host.to_owned()).into()
}

/// SPI reports SQL errors by raising them; an `Err` here is a bug in idgen's own statements.
fn spi<T>(result: SpiResult<T>) -> T {
    result.unwrap_or_else(|e| panic!("idgen: registry statement failed: {e}"))
}
