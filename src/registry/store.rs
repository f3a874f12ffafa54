//! Runs the registry's statements (`sql.rs`) for the claim, heartbeat,
//! release, backend-lease and trigger paths, with parameters only. Callers run
//! as the extension owner with search_path pinned (`privilege::as_extension_owner`).
//!
//! The statements themselves, and the rule every statement run with the
//! owner's rights follows (no name resolved in a schema a lower role controls,
//! no operator or function resolved through the search_path, no advisory
//! locks), are in `sql.rs`.
//!
//! Times written are `clock_timestamp()`, not `now()`: a backend may claim or
//! renew late in a long transaction, and its lease runs from the write.
//! Comparisons use `now()`, the claimant's transaction start, which can only
//! make rows look younger than they are.
//!
//! Watermarks (`issued_until`, see `idgen_core::watermark`): every write raises
//! it with `GREATEST`; only a backend's own closing record lowers its own
//! window to its last stamp. A claim reads the bound earlier holders left
//! (`idgen_private.holder_bound`, defined once in `sql/registry.sql`; for a
//! machine id whose row was removed by hand, its tombstone) before it writes,
//! and skips rows whose bound is further ahead of the clock than the claimant
//! may wait. Every grant records the lease it gives (`lease_until`,
//! `takeover_at`): take-backs honour it whatever the settings become.
//!
//! Statements that write run without a row limit (`None`), even those that
//! return one row: SPI stops a statement with RETURNING at its limit, before
//! its AFTER STATEMENT triggers fire (the grants' table relies on one).

use super::sql;
use crate::settings::ClaimSettings;
use idgen_core::guard;
use idgen_core::input::{Holding, NodeIdentity};
use idgen_core::messages::RowFacts;
use idgen_core::watermark::{self, HolderKind};
use pgrx::datum::{DatumWithOid, Inet, TimestampWithTimeZone};
use pgrx::spi::{SpiClient, SpiHeapTupleData, SpiResult};

/// A row won by a claim.
pub struct Won {
    pub machine_id: i16,
    pub version: i64,
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
    /// Won back; `was_released` when the caller had released it.
    Won {
        won: Won,
        was_released: bool,
    },
    /// The row exists but another transaction has it locked.
    Busy(i16),
    Absent,
}

/// How a claim treats watermarks and grants leases, in the units its statements take.
#[derive(Clone, Copy)]
pub struct ClaimTimes {
    /// The lease granted, in seconds.
    pub lease_secs: i64,
    /// How far ahead of the clock a watermark may be for the claimant to keep the id.
    pub tolerance_ms: i64,
    /// The window the claimant may issue in before its next write (0 for services).
    pub window_ms: i64,
    /// The shortest take-back age, in seconds: no take-back of the grant before it.
    pub takeover_idle_secs: i64,
    /// This server's `idgen.machine_id_range`: claims hand out nothing outside it.
    pub first_machine_id: i16,
    pub last_machine_id: i16,
}

impl ClaimTimes {
    /// The times a claim or a renewal by a holder of `kind` works with, under `settings`; `window_ms`
    /// is the window it may issue in before its next write.
    pub fn of(kind: HolderKind, settings: &ClaimSettings, window_ms: i64) -> ClaimTimes {
        let policy = &settings.policy;
        ClaimTimes {
            lease_secs: policy.lease_secs(),
            tolerance_ms: watermark::tolerance_ms(kind, policy, settings.max_clock_backward_ms),
            window_ms,
            takeover_idle_secs: policy.takeover_idle_1h_secs,
            first_machine_id: settings.machine_id_first as i16,
            last_machine_id: settings.machine_id_last as i16,
        }
    }
}

/// Which rows a take-over may take.
#[derive(Clone, Copy)]
pub enum Victims {
    /// Released rows whose cooldown has passed, longest released first.
    Released { cooldown_secs: i64 },
    /// Rows idle longer than `min_idle_secs` (and not cooling down), least recently seen first.
    Idle { min_idle_secs: i64, cooldown_secs: i64 },
}

/// The registry's epoch.
pub fn read_epoch(client: &mut SpiClient) -> i64 {
    first_value(client.update(sql::READ_REGISTRY, Some(1), &[]))
        .unwrap_or_else(|| panic!("idgen: idgen_private.idgen_registry has no row; reinstall the extension"))
}

/// Whether `service` has its guard rows yet.
pub fn guards_exist(client: &mut SpiClient, service: &str) -> bool {
    first_value::<bool>(client.update(sql::GUARDS_EXIST, Some(1), &[text(service)])).unwrap_or(false)
}

/// Creates the guard rows of `service`; only in a transaction of its own (a background worker),
/// so that no claim ever waits for another session's uncommitted guard row.
pub fn create_guards(client: &mut SpiClient, service: &str) {
    let (first, end) = (guard::buckets().start, guard::buckets().end - 1);
    spi(client.update(sql::CREATE_GUARDS, None, &[text(service), first.into(), end.into()]));
}

/// Serialises claims that give a service node's identity a new row, without waiting: false
/// when another transaction holds its guard (see `idgen_core::guard`).
pub fn take_identity_guard(client: &mut SpiClient, node: &NodeIdentity) -> bool {
    let args = [text(&node.service), guard::identity_guard(node).into()];
    first_value::<bool>(client.update(sql::TAKE_GUARD, Some(1), &args)).unwrap_or(false)
}

/// Step 1, part 1: the caller's own held row, if its watermark is further
/// ahead than the caller may wait, is released for good and its bound kept,
/// so that the identity can move to another machine id. Returns the machine
/// id and the watermark that set it aside.
pub fn release_own_row_ahead(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTimes) -> Option<OwnRowAhead> {
    let sql = sql::RELEASE_OWN_ROW_AHEAD;
    let args = claim_args(node, times, []);
    first_row(client.update(sql, None, &args)).map(|row| OwnRowAhead {
        machine_id: column(&row, 1),
        bound: column(&row, 2),
        reported: column(&row, 3),
        last_seen: column(&row, 4),
    })
}

/// The claimant's own row, set aside by [`release_own_row_ahead`].
pub struct OwnRowAhead {
    pub machine_id: i16,
    /// How long its holders may stamp (the holder bound).
    pub bound: TimestampWithTimeZone,
    /// Its issued_until: what its holder reported.
    pub reported: TimestampWithTimeZone,
    pub last_seen: TimestampWithTimeZone,
}

/// Step 1, part 0: the caller's own held row outside this server's machine-id range is released
/// for good, its bound kept, so that the identity moves inside the range. Returns the machine id
/// and the watermark it was left with.
pub fn release_own_row_outside_range(
    client: &mut SpiClient,
    node: &NodeIdentity,
    times: &ClaimTimes,
) -> Option<(i16, TimestampWithTimeZone)> {
    let sql = sql::RELEASE_OWN_ROW_OUTSIDE_RANGE;
    let args = claim_args(node, times, range_args(times));
    first_row(client.update(sql, None, &args)).map(|row| (column(&row, 1), column(&row, 2)))
}

/// Step 1, part 2: bump the caller's own row (held, or else released by the
/// caller), unless another transaction has it locked or its watermark is too
/// far ahead. Its own `issued_until` is the bound: the caller is its last holder.
pub fn reuse_own_row(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTimes) -> OwnRow {
    let args = claim_args(node, times, range_args(times));
    if let Some(row) = first_row(client.update(sql::REUSE_OWN_ROW, None, &args)) {
        return OwnRow::Won { won: won(&row), was_released: column(&row, 7) };
    }
    match first_value::<i16>(client.update(sql::OWN_HELD_ROW, Some(1), &args[..4])) {
        Some(machine_id) => OwnRow::Busy(machine_id),
        None => OwnRow::Absent,
    }
}

/// Bumps the row the caller still holds, if it is unlocked, in the range and
/// not too far ahead: [`reuse_own_row`] for the usual case, a new connection
/// in a backend slot, in the one statement a new backend then plans.
pub fn reuse_own_held_row(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTimes) -> Option<Won> {
    let args = claim_args(node, times, range_args(times));
    first_row(client.update(sql::REUSE_OWN_HELD_ROW, None, &args)).map(|row| won(&row))
}

/// Step 2, part 1: machine ids in the range with no row, lowest first, as of now, but those
/// whose tombstone is further ahead than the claimant may wait.
pub fn unregistered_machine_ids(client: &mut SpiClient, service: &str, times: &ClaimTimes) -> Vec<i16> {
    let sql = sql::UNREGISTERED_MACHINE_IDS;
    let args = [
        text(service),
        i32::from(times.first_machine_id).into(),
        i32::from(times.last_machine_id).into(),
        (times.tolerance_ms as f64).into(),
    ];
    let table = spi(client.update(sql, None, &args));
    table.map(|row| spi(row.get::<i16>(1)).expect("machine_id is not null")).collect()
}

/// The tombstone soonest to pass among machine ids with no row whose tombstone is further ahead
/// than the claimant may wait: its machine id and bound.
pub fn soonest_tombstone_ahead(
    client: &mut SpiClient,
    service: &str,
    times: &ClaimTimes,
) -> Option<(i16, TimestampWithTimeZone)> {
    let [first, last] = range_args(times);
    let args = [text(service), first, last, (times.tolerance_ms as f64).into()];
    first_row(client.update(sql::SOONEST_TOMBSTONE_AHEAD, Some(1), &args)).map(|row| (column(&row, 1), column(&row, 2)))
}

/// Step 2, part 2: insert the row for `machine_id` unless another claimant is
/// inserting it (its guard row taken) or it was committed meanwhile (no conflict
/// wait: the guard means no uncommitted insert of this id is in flight).
/// A never-registered id has no earlier holder; one whose row was removed by hand
/// has its tombstone's bound.
pub fn insert_unregistered(
    client: &mut SpiClient,
    node: &NodeIdentity,
    machine_id: i16,
    times: &ClaimTimes,
) -> Option<Won> {
    let sql = sql::INSERT_UNREGISTERED;
    let args = claim_args(node, times, [machine_id.into(), guard::new_id_guard(machine_id).into()]);
    first_row(client.update(sql, None, &args)).map(|row| won(&row))
}

/// Steps 3 to 6: take one victim row over for the claimant.
pub fn take_over(
    client: &mut SpiClient,
    node: &NodeIdentity,
    victims: Victims,
    times: &ClaimTimes,
) -> Option<(Won, RowFacts)> {
    let (sql, min_idle_secs, cooldown_secs) = match victims {
        Victims::Released { cooldown_secs } => (sql::TAKE_RELEASED, 0, cooldown_secs),
        Victims::Idle { min_idle_secs, cooldown_secs } => (sql::TAKE_IDLE, min_idle_secs, cooldown_secs),
    };
    let mut args = claim_args(node, times, range_args(times));
    args[5] = (min_idle_secs as f64).into();
    args[6] = (cooldown_secs as f64).into();
    let table = client.update(sql, None, &args);
    first_row(table).map(|row| (won(&row), row_facts(&row, 7)))
}

/// The parameters every claim statement shares: $1-$4 the claimant, $5 lease
/// (s), $6 and $7 take-over ages (s, set by `take_over`), $8 tolerance (ms),
/// $9 take-back age (s, the grant's and `holder_bound`'s), $10 window (ms),
/// then `extra` from $11 on.
fn claim_args(
    node: &NodeIdentity,
    times: &ClaimTimes,
    extra: impl IntoIterator<Item = DatumWithOid<'static>>,
) -> Vec<DatumWithOid<'static>> {
    let mut args = identity_args(node);
    args.extend([
        (times.lease_secs as f64).into(),
        0f64.into(),
        0f64.into(),
        (times.tolerance_ms as f64).into(),
        (times.takeover_idle_secs as f64).into(),
        (times.window_ms as f64).into(),
    ]);
    args.extend(extra);
    args
}

/// $11-$12: the machine-id range.
fn range_args(times: &ClaimTimes) -> [DatumWithOid<'static>; 2] {
    [times.first_machine_id.into(), times.last_machine_id.into()]
}

/// The row of `machine_id` as it stands, if any.
pub fn current_row(client: &mut SpiClient, service: &str, machine_id: i16) -> Option<RowFacts> {
    let sql = sql::CURRENT_ROW;
    first_row(client.update(sql, Some(1), &[text(service), machine_id.into()])).map(|row| row_facts(&row, 1))
}

/// How many ids of the range the service holds and its least recently seen holder there.
pub fn least_recently_seen(client: &mut SpiClient, service: &str, times: &ClaimTimes) -> (i64, Option<RowFacts>) {
    let [first, last] = range_args(times);
    let args = [text(service), first, last];
    let held = first_value::<i64>(client.update(sql::COUNT_HELD, Some(1), &args)).unwrap_or(0);
    let sql = sql::LEAST_RECENTLY_SEEN;
    (held, first_row(client.update(sql, Some(1), &args)).map(|row| row_facts(&row, 1)))
}

/// Whether a synchronous standby streams from this server now.
pub fn synchronous_standby_streaming(client: &mut SpiClient) -> bool {
    first_value::<bool>(client.update(sql::SYNCHRONOUS_STANDBY_STREAMING, Some(1), &[])).unwrap_or(false)
}

/// A version-checked heartbeat: a new grant of `lease_secs`, no take-back before
/// `takeover_secs`. Waits for a concurrent take-over of the same row to finish,
/// because its answer depends on that take-over's outcome. Raises the watermark
/// to the node's report, or to the server clock when the node reports none.
pub fn heartbeat(
    client: &mut SpiClient,
    held: &Holding,
    lease_secs: i64,
    takeover_secs: i64,
    reported: Option<TimestampWithTimeZone>,
) -> Option<Renewed> {
    let sql = sql::HEARTBEAT;
    let mut args = holding_args(held, Some(lease_secs));
    args.extend([reported.into(), (takeover_secs as f64).into()]);
    first_row(client.update(sql, None, &args))
        .map(|row| Renewed { lease_until: column(&row, 1), watermark_before: column(&row, 2) })
}

/// What a heartbeat granted, and the watermark it found.
pub struct Renewed {
    /// The lease granted.
    pub lease_until: TimestampWithTimeZone,
    /// The watermark the registry held before the report.
    pub watermark_before: TimestampWithTimeZone,
}

/// A version-checked release: bumps the version and starts the cooldown. The
/// watermark rises to the node's report, or, when it reports none, to the
/// server clock plus the clock skew the lease margin allows between hosts.
/// Nothing when not held.
pub fn release(
    client: &mut SpiClient,
    held: &Holding,
    margin_secs: i64,
    reported: Option<TimestampWithTimeZone>,
) -> Option<Released> {
    let sql = sql::RELEASE;
    let mut args = holding_args(held, Some(margin_secs));
    args.push(reported.into());
    first_row(client.update(sql, None, &args)).map(|row| Released {
        version: column(&row, 1),
        issued_until: column(&row, 2),
        watermark_before: column(&row, 3),
    })
}

/// What a release left: the new version and watermark, and the watermark held before.
pub struct Released {
    pub version: i64,
    pub issued_until: TimestampWithTimeZone,
    pub watermark_before: TimestampWithTimeZone,
}

/// How many machine ids of `service` in the range a claim cannot get without a take-back (held or cooling down).
pub fn count_in_use(client: &mut SpiClient, service: &str, cooldown_secs: i64, times: &ClaimTimes) -> i64 {
    let [first, last] = range_args(times);
    let args = [text(service), (cooldown_secs as f64).into(), first, last];
    first_value::<i64>(client.update(sql::COUNT_IN_USE, Some(1), &args)).unwrap_or(0)
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

/// A backend's version-checked renewal: grants the lease again and raises the
/// watermark to the end of its next window, unless another transaction has
/// the row locked (never waits, unlike a service heartbeat).
pub fn renew_backend_lease(
    client: &mut SpiClient,
    held: &Holding,
    times: &ClaimTimes,
    epoch: i64,
    window_ms: i64,
) -> BackendCheck {
    let sql = sql::RENEW_BACKEND_LEASE;
    let mut args = holding_args(held, Some(times.lease_secs));
    args.extend([epoch.into(), (window_ms as f64).into(), (times.takeover_idle_secs as f64).into()]);
    if let Some(row) = first_row(client.update(sql, None, &args)) {
        return BackendCheck::Held {
            verified_at: column(&row, 1),
            lease_until: column(&row, 2),
            issued_until: column(&row, 3),
        };
    }
    match read_backend_lease(client, held, times.lease_secs, epoch) {
        BackendCheck::Held { .. } => BackendCheck::Busy,
        other => other,
    }
}

/// A backend that stops records its last stamp in place of its window, if the row is still its own.
pub fn close_backend_lease(client: &mut SpiClient, held: &Holding, epoch: i64, closing: TimestampWithTimeZone) {
    let mut args = holding_args(held, None);
    args.extend([epoch.into(), closing.into()]);
    spi(client.update(sql::CLOSE_BACKEND_LEASE, None, &args));
}

/// A row deleted by hand leaves its bound and version as its machine id's tombstone.
pub fn tombstone_row(client: &mut SpiClient, service: &str, machine_id: i16, lease_secs: i64, takeover_secs: i64) {
    let args = [text(service), machine_id.into(), (lease_secs as f64).into(), (takeover_secs as f64).into()];
    spi(client.update(sql::TOMBSTONE_ROW, None, &args));
}

/// Every row truncated leaves its tombstone, and a new epoch begins.
pub fn tombstone_all_and_start_epoch(client: &mut SpiClient, lease_secs: i64, takeover_secs: i64) {
    spi(client.update(sql::TOMBSTONE_ALL, None, &[(lease_secs as f64).into(), (takeover_secs as f64).into()]));
    spi(client.update(sql::NEW_EPOCH, None, &[]));
}

/// A row inserted for a machine id with a tombstone takes its bound and a newer version.
pub fn merge_tombstone(client: &mut SpiClient, service: &str, machine_id: i16) {
    spi(client.update(sql::MERGE_TOMBSTONE, None, &[text(service), machine_id.into()]));
}

/// One row or tombstone whose holder may still be stamping.
pub struct Stamping {
    pub service: String,
    pub machine_id: i16,
    /// The holder's address, port and slot; none for a tombstone.
    pub holder: Option<(String, i32, Option<i32>)>,
    pub bound: TimestampWithTimeZone,
}

/// Holds off every write to the registry until this transaction ends (a DROP being checked);
/// false, at once, when a write is in flight.
pub fn lock_against_writes(client: &mut SpiClient) -> bool {
    pgrx::PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
        spi(client.update(sql::LOCK_REGISTRY_FOR_DROP, None, &[]));
        true
    }))
    // The error aborts the DROP's transaction just after (the caller raises its own).
    .catch_when(pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| false)
    .execute()
}

/// Every row and tombstone whose bound is ahead of the clock, latest first.
pub fn still_stamping(client: &mut SpiClient, lease_secs: i64, takeover_secs: i64) -> Vec<Stamping> {
    let args = [(lease_secs as f64).into(), (takeover_secs as f64).into()];
    spi(client.update(sql::STILL_STAMPING, None, &args))
        .map(|row| Stamping {
            service: column(&row, 1),
            machine_id: column(&row, 2),
            holder: spi(row.get::<String>(3)).map(|host| (host, column(&row, 4), spi(row.get::<i32>(5)))),
            bound: column(&row, 6),
        })
        .collect()
}

/// A backend's version-checked read, for read-only transactions: confirms
/// ownership without moving `lease_until` or the watermark.
pub fn read_backend_lease(client: &mut SpiClient, held: &Holding, lease_secs: i64, epoch: i64) -> BackendCheck {
    let sql = sql::READ_BACKEND_LEASE;
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
