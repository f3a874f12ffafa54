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
}

/// What the caller's own row looks like to a claim.
pub enum OwnRow {
    Won(Won),
    /// The row exists but another transaction has it locked.
    Busy(i16),
    Absent,
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

/// A take-over: lock one victim row without waiting, hand it to the claimant.
/// Returns the won row (columns 1-4) and the previous holder's facts (5-12).
macro_rules! take_over_sql {
    ($filter:literal, $order:literal) => {
        concat!(
            "WITH victim AS (SELECT * FROM system_nodes WHERE service = $1 AND ",
            $filter,
            " ORDER BY ",
            $order,
            ", machine_id LIMIT 1 FOR UPDATE SKIP LOCKED) ",
            "UPDATE system_nodes n SET host = $2, port = $3, backend_slot = $4, version = n.version + 1, ",
            "last_seen = clock_timestamp(), released_at = NULL ",
            "FROM victim v WHERE n.service = v.service AND n.machine_id = v.machine_id ",
            "RETURNING n.machine_id, n.version, n.last_seen + $5 * interval '1 second', n.last_seen, ",
            facts_columns!("v")
        )
    };
}

const TAKE_RELEASED: &str = take_over_sql!("released_at <= now() - $6 * interval '1 second'", "released_at");
const TAKE_IDLE: &str = take_over_sql!(
    "last_seen < now() - $6 * interval '1 second' AND (released_at IS NULL OR released_at <= now() - $7 * interval '1 second')",
    "last_seen"
);

/// The row a holding names, still held: `$1..$6` are service, machine_id,
/// host, port, backend_slot and version.
macro_rules! holding_matches {
    () => {
        "service = $1 AND machine_id = $2 AND host = $3 AND port = $4 AND backend_slot IS NOT DISTINCT FROM $5 \
         AND version = $6 AND released_at IS NULL"
    };
}

/// Serialises claims of one identity without waiting: a second claimant fails at once.
pub fn try_lock_identity(client: &mut SpiClient, node: &NodeIdentity) -> bool {
    let sql = "SELECT pg_try_advisory_xact_lock(hashtext(concat_ws('/', 'idgen/node', $1, $2, $4)), $3)";
    let args = [text(&node.service), text(&node.host), node.port.into(), node.backend_slot.into()];
    first_value(client.update(sql, Some(1), &args)).unwrap_or(false)
}

/// Step 1: bump the caller's own row, unless another transaction has it locked.
pub fn reuse_own_row(client: &mut SpiClient, node: &NodeIdentity, lease_secs: i64) -> OwnRow {
    let sql = "WITH own AS (SELECT service, machine_id FROM system_nodes \
                 WHERE service = $1 AND host = $2 AND port = $3 AND backend_slot IS NOT DISTINCT FROM $4 \
                 FOR UPDATE SKIP LOCKED) \
               UPDATE system_nodes n SET version = n.version + 1, last_seen = clock_timestamp(), released_at = NULL \
               FROM own WHERE n.service = own.service AND n.machine_id = own.machine_id \
               RETURNING n.machine_id, n.version, n.last_seen + $5 * interval '1 second', n.last_seen";
    let mut args = identity_args(node);
    args.push(lease_secs.into());
    if let Some(won) = first_row(client.update(sql, Some(1), &args)).map(|row| won(&row)) {
        return OwnRow::Won(won);
    }
    let sql = "SELECT machine_id FROM system_nodes \
               WHERE service = $1 AND host = $2 AND port = $3 AND backend_slot IS NOT DISTINCT FROM $4";
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
pub fn insert_unregistered(
    client: &mut SpiClient,
    node: &NodeIdentity,
    machine_id: i16,
    lease_secs: i64,
) -> Option<Won> {
    let sql = "INSERT INTO system_nodes (service, machine_id, host, port, backend_slot, version, last_seen) \
               SELECT $1, $2, $3, $4, $5, 1, clock_timestamp() \
               WHERE pg_try_advisory_xact_lock(hashtext('idgen/machine_id/' || $1), $2) \
               ON CONFLICT DO NOTHING \
               RETURNING machine_id, version, last_seen + $6 * interval '1 second', last_seen";
    let args = [
        text(&node.service),
        machine_id.into(),
        inet(&node.host),
        node.port.into(),
        node.backend_slot.into(),
        lease_secs.into(),
    ];
    first_row(client.update(sql, Some(1), &args)).map(|row| won(&row))
}

/// Steps 3 to 6: take one victim row over for the claimant.
pub fn take_over(
    client: &mut SpiClient,
    node: &NodeIdentity,
    victims: Victims,
    lease_secs: i64,
) -> Option<(Won, RowFacts)> {
    let mut args =
        vec![text(&node.service), inet(&node.host), node.port.into(), node.backend_slot.into(), lease_secs.into()];
    let sql = match victims {
        Victims::Released { cooldown_secs } => {
            args.push(cooldown_secs.into());
            TAKE_RELEASED
        }
        Victims::Idle { min_idle_secs, cooldown_secs } => {
            args.extend([min_idle_secs.into(), cooldown_secs.into()]);
            TAKE_IDLE
        }
    };
    let table = client.update(sql, Some(1), &args);
    first_row(table).map(|row| (won(&row), row_facts(&row, 5)))
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
pub fn heartbeat(client: &mut SpiClient, held: &Holding, lease_secs: i64) -> Option<TimestampWithTimeZone> {
    let sql = concat!(
        "UPDATE system_nodes SET last_seen = clock_timestamp() WHERE ",
        holding_matches!(),
        " RETURNING last_seen + $7 * interval '1 second'"
    );
    let args = holding_args(held, Some(lease_secs));
    first_value(client.update(sql, Some(1), &args))
}

/// A version-checked release: bumps the version and starts the cooldown.
pub fn release(client: &mut SpiClient, held: &Holding) -> bool {
    let sql = concat!(
        "UPDATE system_nodes SET version = version + 1, released_at = clock_timestamp() WHERE ",
        holding_matches!(),
        " RETURNING version"
    );
    first_value::<i32>(client.update(sql, Some(1), &holding_args(held, None))).is_some()
}

/// What a backend's check of its lease found.
pub enum BackendCheck {
    /// Still held at this version; the lease now runs until `lease_until`.
    Held { verified_at: TimestampWithTimeZone, lease_until: TimestampWithTimeZone },
    /// Held at this version, but another transaction has the row locked (a take-over in flight).
    Busy,
    /// The version moved, the row was released, or it is gone.
    Lost(Option<RowFacts>),
}

/// A backend's version-checked heartbeat: renews the lease unless another
/// transaction has the row locked (never waits, unlike a service heartbeat).
pub fn renew_backend_lease(client: &mut SpiClient, held: &Holding, lease_secs: i64) -> BackendCheck {
    let sql = concat!(
        "WITH own AS (SELECT service, machine_id FROM system_nodes WHERE ",
        holding_matches!(),
        " FOR UPDATE SKIP LOCKED) ",
        "UPDATE system_nodes n SET last_seen = clock_timestamp() ",
        "FROM own WHERE n.service = own.service AND n.machine_id = own.machine_id ",
        "RETURNING n.last_seen, n.last_seen + $7 * interval '1 second'"
    );
    if let Some(row) = first_row(client.update(sql, Some(1), &holding_args(held, Some(lease_secs)))) {
        return BackendCheck::Held { verified_at: column(&row, 1), lease_until: column(&row, 2) };
    }
    match read_backend_lease(client, held, lease_secs) {
        BackendCheck::Held { .. } => BackendCheck::Busy,
        other => other,
    }
}

/// A backend's version-checked read, for read-only transactions: confirms
/// ownership without moving `lease_until`.
pub fn read_backend_lease(client: &mut SpiClient, held: &Holding, lease_secs: i64) -> BackendCheck {
    let sql = concat!(
        "SELECT clock_timestamp(), last_seen + $7 * interval '1 second' FROM system_nodes WHERE ",
        holding_matches!()
    );
    match first_row(client.update(sql, Some(1), &holding_args(held, Some(lease_secs)))) {
        Some(row) => BackendCheck::Held { verified_at: column(&row, 1), lease_until: column(&row, 2) },
        None => BackendCheck::Lost(current_row(client, &held.node.service, held.machine_id)),
    }
}

fn identity_args(node: &NodeIdentity) -> Vec<DatumWithOid<'static>> {
    vec![text(&node.service), inet(&node.host), node.port.into(), node.backend_slot.into()]
}

/// Arguments for [`holding_matches`], plus the lease length as `$7` when given.
fn holding_args(held: &Holding, lease_secs: Option<i64>) -> Vec<DatumWithOid<'static>> {
    let n = &held.node;
    let mut args = vec![
        text(&n.service),
        held.machine_id.into(),
        inet(&n.host),
        n.port.into(),
        n.backend_slot.into(),
        held.version.into(),
    ];
    args.extend(lease_secs.map(DatumWithOid::from));
    args
}

fn won(row: &SpiHeapTupleData) -> Won {
    Won { machine_id: column(row, 1), version: column(row, 2), lease_until: column(row, 3), claimed_at: column(row, 4) }
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
