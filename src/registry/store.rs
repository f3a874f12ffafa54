//! Runs the registry's statements (`crate::statements`) for the claim, heartbeat,
//! release, backend-lease and trigger paths, each with its own parameters. Callers run
//! as the extension owner with search_path pinned (`privilege::as_extension_owner`).
//!
//! The statements themselves, and the rule every statement run with the
//! owner's rights follows (no name resolved in a schema a lower role controls,
//! no operator or function resolved through the search_path, no advisory
//! locks), are in `src/statements.rs`.
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

use crate::spi::{at, first_row, ok as spi, run, time};
use crate::statements as sql;
use crate::statements::value::Interval;
use idgen_core::claim::{self as core, CapacityTurn, ClaimTerms, TakeOverFrom};
use idgen_core::facts::RowFacts;
use idgen_core::fleet::CapacityLevel;
use idgen_core::guard;
use idgen_core::history::EventKind;
use idgen_core::input::{GeneratorCounts, Holding, NodeIdentity};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

/// `sql::$statement`'s arguments for `node`: its identity (service, host, port, slot), then the
/// statement's other parameters.
macro_rules! of_node {
    ($statement:ident, $node:expr $(, $field:ident $(: $value:expr)?)* $(,)?) => {{
        let node: &NodeIdentity = $node;
        sql::$statement {
            service: node.service.clone(),
            host: node.host.clone(),
            port: node.port,
            backend_slot: node.backend_slot,
            $($field $(: $value)?),*
        }
    }};
}

/// The row a claim got, from the row of a statement that returns it first (machine id, version,
/// lease, claimed at, bound, watermark: [`sql::REUSE_OWN_HELD_ROW`]'s columns, which
/// `REUSE_OWN_ROW`, `TAKE_RELEASED` and `TAKE_IDLE` begin with).
macro_rules! claimed_row {
    ($row:expr) => {{
        let row = &$row;
        ClaimedRow {
            machine_id: row.machine_id,
            version: row.version,
            lease_until: time(row.lease_until),
            claimed_at: time(row.claimed_at),
            bound: row.bound.map(time),
            issued_until: time(row.issued_until),
        }
    }};
}

/// `sql::$statement`'s arguments for a version-checked write of `held`: the holding (service,
/// machine id, holder's host, port and slot, version), then the statement's other parameters.
macro_rules! of_holding {
    ($statement:ident, $held:expr $(, $field:ident $(: $value:expr)?)* $(,)?) => {{
        let held: &Holding = $held;
        sql::$statement {
            service: held.node.service.clone(),
            machine_id: held.machine_id,
            host: held.node.host.clone(),
            port: held.node.port,
            backend_slot: held.node.backend_slot,
            version: held.version,
            $($field $(: $value)?),*
        }
    }};
}

/// The row a claim got, as it wrote it (`idgen_core::claim::ClaimedRow`).
pub type ClaimedRow = core::ClaimedRow<TimestampWithTimeZone>;
/// What the caller's own row looks like to a claim.
pub type OwnRow = core::OwnRow<TimestampWithTimeZone>;
/// The claimant's own row, set aside by [`release_own_row_ahead`].
pub type OwnRowAhead = core::OwnRowAhead<TimestampWithTimeZone>;

/// The registry's epoch.
pub fn read_epoch(client: &mut SpiClient) -> i64 {
    first_row(run(client, sql::READ_REGISTRY {}, Some(1)))
        .map(|row| row.epoch)
        .unwrap_or_else(|| panic!("idgen: idgen_private.idgen_registry has no row; reinstall the extension"))
}

/// The version a row never registered in this registry starts after: drawn for each registry, so
/// that versions of a registry created again never meet those its predecessor's nodes hold (objects
/// before 0.7.0 keep none: 0, their rows start at 1).
pub fn read_version_base(client: &mut SpiClient) -> i64 {
    if !crate::privilege::installed_draws_version_base() {
        return 0;
    }
    first_row(run(client, sql::READ_VERSION_BASE {}, Some(1)))
        .map(|row| row.version_base)
        .unwrap_or_else(|| panic!("idgen: idgen_private.idgen_registry has no row; reinstall the extension"))
}

/// Whether `service` has its guard rows yet.
pub fn guards_exist(client: &mut SpiClient, service: &str) -> bool {
    first_row(run(client, sql::GUARDS_EXIST { service: service.into() }, Some(1))).is_some_and(|row| row.exist)
}

/// Creates the guard rows of `service`; only in a transaction of its own (a background worker),
/// so that no claim ever waits for another session's uncommitted guard row.
pub fn create_guards(client: &mut SpiClient, service: &str) {
    let buckets = if crate::privilege::installed_announces_capacity_changes() {
        guard::buckets()
    } else {
        guard::buckets_without_capacity_turn()
    };
    let (first, end) = (buckets.start, buckets.end - 1);
    spi(run(client, sql::CREATE_GUARDS { service: service.into(), first_bucket: first, last_bucket: end }, None));
}

/// Serialises claims that give a service node's identity a new row, without waiting: false
/// when another transaction holds its guard (see `idgen_core::guard`).
pub fn take_identity_guard(client: &mut SpiClient, node: &NodeIdentity) -> bool {
    let args = sql::TAKE_GUARD { service: node.service.clone(), bucket: guard::identity_guard(node) };
    first_row(run(client, args, Some(1))).and_then(|row| row.taken).unwrap_or(false)
}

/// Takes the service's capacity turn until the transaction ends, or says why it cannot.
pub fn take_capacity_turn(client: &mut SpiClient, service: &str) -> CapacityTurn {
    let bucket = guard::CAPACITY_TURN;
    let taken = run(client, sql::TAKE_GUARD { service: service.into(), bucket }, Some(1));
    if first_row(taken).and_then(|row| row.taken).unwrap_or(false) {
        return CapacityTurn::Taken;
    }
    let exists = run(client, sql::GUARD_EXISTS { service: service.into(), bucket }, Some(1));
    if first_row(exists).and_then(|row| row.exists).unwrap_or(false) {
        CapacityTurn::Busy
    } else {
        CapacityTurn::Missing
    }
}

/// The capacity level announced last for the service (`None`: none, or cleared).
pub fn capacity_announced(client: &mut SpiClient, service: &str) -> Option<CapacityLevel> {
    let [warning_event, critical_event, cleared_event] =
        [Some(CapacityLevel::Warning), Some(CapacityLevel::Critical), None]
            .map(|l| EventKind::of_capacity(l).label().to_owned());
    let args = sql::CAPACITY_ANNOUNCED { service: service.into(), warning_event, critical_event, cleared_event };
    let label = first_row(run(client, args, Some(1)))?.event?;
    EventKind::from_label(&label).and_then(EventKind::capacity_announced).flatten()
}

/// Step 1, part 1: the caller's own held row, if its watermark is further
/// ahead than the caller may wait, is released for good and its bound kept,
/// so that the identity can move to another machine id. Returns the machine
/// id and the watermark that set it aside.
pub fn release_own_row_ahead(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTerms) -> Option<OwnRowAhead> {
    let args = of_node!(
        RELEASE_OWN_ROW_AHEAD,
        node,
        lease: Interval::seconds(times.lease_secs),
        tolerance: Interval::milliseconds(times.tolerance_ms),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
    );
    first_row(run(client, args, None)).map(|row| OwnRowAhead {
        machine_id: row.machine_id,
        bound: time(row.bound),
        reported: time(row.reported),
        last_seen: time(row.last_seen),
    })
}

/// Step 1, part 0: the caller's own held row outside this server's machine-id range is released
/// for good, its bound kept, so that the identity moves inside the range. Returns the machine id
/// and the watermark it was left with.
pub fn release_own_row_outside_range(
    client: &mut SpiClient,
    node: &NodeIdentity,
    times: &ClaimTerms,
) -> Option<(i32, TimestampWithTimeZone)> {
    let args = of_node!(
        RELEASE_OWN_ROW_OUTSIDE_RANGE,
        node,
        lease: Interval::seconds(times.lease_secs),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
    );
    first_row(run(client, args, None)).map(|row| (row.machine_id, time(row.issued_until)))
}

/// Step 1, part 2: bump the caller's own row (held, or else released by the
/// caller), unless another transaction has it locked or its watermark is too
/// far ahead. Its own `issued_until` is the bound: the caller is its last holder.
pub fn reuse_own_row(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTerms) -> OwnRow {
    let args = of_node!(
        REUSE_OWN_ROW,
        node,
        lease: Interval::seconds(times.lease_secs),
        tolerance: Interval::milliseconds(times.tolerance_ms),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
        window: Interval::milliseconds(times.window_ms),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
    );
    if let Some(row) = first_row(run(client, args, None)) {
        return OwnRow::Claimed { was_released: row.was_released, row: claimed_row!(row) };
    }
    let args = of_node!(OWN_HELD_ROW, node);
    match first_row(run(client, args, Some(1))).and_then(|row| row.machine_id) {
        Some(machine_id) => OwnRow::Busy(machine_id),
        None => OwnRow::Absent,
    }
}

/// Bumps the row the caller still holds, if it is unlocked, in the range and
/// not too far ahead: [`reuse_own_row`] for the usual case, a new connection
/// in a backend slot, in the one statement a new backend then plans.
pub fn reuse_own_held_row(client: &mut SpiClient, node: &NodeIdentity, times: &ClaimTerms) -> Option<ClaimedRow> {
    let args = of_node!(
        REUSE_OWN_HELD_ROW,
        node,
        lease: Interval::seconds(times.lease_secs),
        tolerance: Interval::milliseconds(times.tolerance_ms),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
        window: Interval::milliseconds(times.window_ms),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
    );
    first_row(run(client, args, None)).map(|row| claimed_row!(row))
}

/// Step 2, part 1: machine ids of `first..=last` (a batch of the range) with no row, lowest first,
/// and whether each has a tombstone further ahead than the claimant may wait.
pub fn unregistered_machine_ids(
    client: &mut SpiClient,
    service: &str,
    first: i32,
    last: i32,
    times: &ClaimTerms,
) -> Vec<(i32, bool)> {
    let args = sql::UNREGISTERED_MACHINE_IDS {
        service: service.into(),
        first,
        last,
        tolerance: Interval::milliseconds(times.tolerance_ms),
    };
    spi(run(client, args, None)).into_iter().map(|row| (row.machine_id, row.tombstone_ahead)).collect()
}

/// The highest machine id of the range with a row, if any.
pub fn highest_registered(client: &mut SpiClient, service: &str, times: &ClaimTerms) -> Option<i32> {
    let args = sql::HIGHEST_REGISTERED {
        service: service.into(),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
    };
    first_row(run(client, args, Some(1))).and_then(|row| row.machine_id)
}

/// The tombstone soonest to pass among machine ids with no row whose tombstone is further ahead
/// than the claimant may wait: its machine id and bound.
pub fn soonest_tombstone_ahead(
    client: &mut SpiClient,
    service: &str,
    times: &ClaimTerms,
) -> Option<(i32, TimestampWithTimeZone)> {
    let args = sql::SOONEST_TOMBSTONE_AHEAD {
        service: service.into(),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
        tolerance: Interval::milliseconds(times.tolerance_ms),
    };
    first_row(run(client, args, Some(1))).map(|row| (row.machine_id, time(row.bound)))
}

/// Step 2, part 2: insert the row for `machine_id` unless another claimant is
/// inserting it (its guard row taken) or it was committed meanwhile (no conflict
/// wait: the guard means no uncommitted insert of this id is in flight).
/// A never-registered id has no earlier holder; one whose row was removed by hand
/// has its tombstone's bound.
pub fn insert_unregistered(
    client: &mut SpiClient,
    node: &NodeIdentity,
    machine_id: i32,
    times: &ClaimTerms,
    version_base: i64,
) -> Option<ClaimedRow> {
    let args = of_node!(
        INSERT_UNREGISTERED,
        node,
        lease: Interval::seconds(times.lease_secs),
        tolerance: Interval::milliseconds(times.tolerance_ms),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
        window: Interval::milliseconds(times.window_ms),
        machine_id,
        guard_bucket: guard::new_id_guard(machine_id),
        version_base,
    );
    first_row(run(client, args, None)).map(|row| claimed_row!(row))
}

/// Steps 3 to 6: take one victim row over for the claimant.
pub fn take_over(
    client: &mut SpiClient,
    node: &NodeIdentity,
    from: TakeOverFrom,
    times: &ClaimTerms,
) -> Option<(ClaimedRow, RowFacts)> {
    // The twins share their parameters but for the tier's own (see `sql::TAKE_RELEASED`).
    macro_rules! take_over {
        ($statement:ident $(, $field:ident: $value:expr)*) => {
            first_row(run(
                client,
                of_node!(
                    $statement,
                    node,
                    lease: Interval::seconds(times.lease_secs),
                    takeback_age: Interval::seconds(times.takeover_idle_secs),
                    window: Interval::milliseconds(times.window_ms),
                    tolerance: Interval::milliseconds(times.tolerance_ms),
                    first_machine_id: times.first_machine_id,
                    last_machine_id: times.last_machine_id,
                    $($field: $value),*
                ),
                None,
            ))
        };
    }
    let won = match from {
        TakeOverFrom::Released { cooldown_secs } => {
            take_over!(TAKE_RELEASED, cooldown: Interval::seconds(cooldown_secs))
        }
        TakeOverFrom::Idle { min_idle_secs, cooldown_secs } => take_over!(
            TAKE_IDLE,
            cooldown: Interval::seconds(cooldown_secs),
            min_idle: Interval::seconds(min_idle_secs)
        ),
    };
    won.map(|row| {
        let claimed = claimed_row!(row);
        let previous = RowFacts {
            machine_id: row.previous_machine_id,
            host: row.previous_host,
            port: row.previous_port,
            version: row.previous_version,
            last_seen: row.previous_last_seen,
            idle_secs: row.previous_idle_secs,
            released_at: row.previous_released_at,
            backend_slot: row.previous_backend_slot,
        };
        (claimed, previous)
    })
}

/// The row of `machine_id` as it stands, if any.
pub fn current_row(client: &mut SpiClient, service: &str, machine_id: i32) -> Option<RowFacts> {
    first_row(run(client, sql::CURRENT_ROW { service: service.into(), machine_id }, Some(1))).map(row_facts)
}

/// The bound of a machine id's row and the server clock, Unix ms (see `sql::ROW_BOUND`).
pub fn row_bound(client: &mut SpiClient, service: &str, machine_id: i32, times: &ClaimTerms) -> Option<(i64, i64)> {
    let args = sql::ROW_BOUND {
        service: service.into(),
        machine_id,
        lease: Interval::seconds(times.lease_secs),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
    };
    first_row(run(client, args, Some(1))).map(|row| (row.bound_unix_ms, row.now_unix_ms))
}

/// How many ids of the range the service holds and its least recently seen holder there.
pub fn least_recently_seen(client: &mut SpiClient, service: &str, times: &ClaimTerms) -> (i64, Option<RowFacts>) {
    let (first_machine_id, last_machine_id) = (times.first_machine_id, times.last_machine_id);
    let held = sql::COUNT_HELD { service: service.into(), first_machine_id, last_machine_id };
    let held = first_row(run(client, held, Some(1))).and_then(|row| row.held).unwrap_or(0);
    let least = sql::LEAST_RECENTLY_SEEN { service: service.into(), first_machine_id, last_machine_id };
    (held, first_row(run(client, least, Some(1))).map(row_facts))
}

/// Whether a synchronous standby streams from this server now.
pub fn synchronous_standby_streaming(client: &mut SpiClient) -> bool {
    first_row(run(client, sql::SYNCHRONOUS_STANDBY_STREAMING {}, Some(1)))
        .and_then(|row| row.streaming)
        .unwrap_or(false)
}

/// A version-checked heartbeat: a new grant of `lease_secs`, no take-back before
/// `takeover_secs`. Waits for a concurrent take-over of the same row to finish,
/// because its answer depends on that take-over's outcome. Raises the watermark
/// to the node's report, or to the server clock when the node reports none.
/// With `counts` (objects of 0.6.0 on), the row also keeps what the node reported at this
/// version: its clock offset (the report minus the server clock) and its generator's counts.
pub fn heartbeat(
    client: &mut SpiClient,
    held: &Holding,
    lease_secs: i64,
    takeover_secs: i64,
    reported: Option<TimestampWithTimeZone>,
    counts: Option<GeneratorCounts>,
) -> Option<Renewed> {
    let reported = reported.map(at);
    // The server's clock, read once for the row's times (as clock_timestamp() would be).
    let now = at(crate::clock::server_now());
    let renewed = match counts {
        Some(c) => run(
            client,
            of_holding!(
                HEARTBEAT_REPORTING,
                held,
                lease: Interval::seconds(lease_secs),
                reported,
                takeback_age: Interval::seconds(takeover_secs),
                clock_backward_waits: c.clock_backward_waits,
                clock_backward_refusals: c.clock_backward_refusals,
                sequence_exhaustions: c.sequence_exhaustions,
                now,
            ),
            None,
        ),
        None => run(
            client,
            of_holding!(
                HEARTBEAT,
                held,
                lease: Interval::seconds(lease_secs),
                reported,
                takeback_age: Interval::seconds(takeover_secs),
                now,
            ),
            None,
        ),
    };
    first_row(renewed).map(|row| Renewed { lease_until: time(row.lease_until), watermark: time(row.watermark) })
}

/// What a heartbeat granted, and the watermark the row holds after it.
pub struct Renewed {
    /// The lease granted.
    pub lease_until: TimestampWithTimeZone,
    /// The watermark the registry holds now: the report, or the one held before if that was later.
    pub watermark: TimestampWithTimeZone,
}

/// A version-checked release: bumps the version and starts the cooldown. The watermark rises to
/// the node's report; when it reports none (a release by hand), to what its holder may still stamp
/// until it learns of the release (`lease_secs` and `takeover_secs` stand in for rows that record no
/// terms), and at least to the server clock plus the clock skew the lease margin allows between
/// hosts. Nothing when not held.
pub fn release(
    client: &mut SpiClient,
    held: &Holding,
    margin_secs: i64,
    reported: Option<TimestampWithTimeZone>,
    lease_secs: i64,
    takeover_secs: i64,
) -> Option<Released> {
    let args = of_holding!(
        RELEASE,
        held,
        margin: Interval::seconds(margin_secs),
        reported: reported.map(at),
        lease: Interval::seconds(lease_secs),
        takeback_age: Interval::seconds(takeover_secs),
    );
    first_row(run(client, args, None))
        .map(|row| Released { version: row.version, issued_until: time(row.issued_until) })
}

/// What a release left: the new version and watermark.
pub struct Released {
    pub version: i64,
    pub issued_until: TimestampWithTimeZone,
}

/// How many machine ids of `service` in the range a claim cannot get without a take-back, or before
/// their time: held, cooling down, or fenced (released with a watermark still ahead).
pub fn count_in_use(client: &mut SpiClient, service: &str, cooldown_secs: i64, times: &ClaimTerms) -> i64 {
    let args = sql::COUNT_IN_USE {
        service: service.into(),
        cooldown: Interval::seconds(cooldown_secs),
        first_machine_id: times.first_machine_id,
        last_machine_id: times.last_machine_id,
    };
    first_row(run(client, args, Some(1))).and_then(|row| row.in_use).unwrap_or(0)
}

/// What a backend's check of its lease found.
pub enum BackendCheck {
    /// Still held at this version; the lease now runs until `lease_until`, and
    /// the registry's watermark is `issued_until`.
    Confirmed {
        verified_at: TimestampWithTimeZone,
        lease_until: TimestampWithTimeZone,
        issued_until: TimestampWithTimeZone,
    },
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
    times: &ClaimTerms,
    epoch: i64,
    window_ms: i64,
) -> BackendCheck {
    let args = of_holding!(
        RENEW_BACKEND_LEASE,
        held,
        lease: Interval::seconds(times.lease_secs),
        epoch,
        window: Interval::milliseconds(window_ms),
        takeback_age: Interval::seconds(times.takeover_idle_secs),
    );
    if let Some(row) = first_row(run(client, args, None)) {
        return BackendCheck::Confirmed {
            verified_at: time(row.verified_at),
            lease_until: time(row.lease_until),
            issued_until: time(row.issued_until),
        };
    }
    match read_backend_lease(client, held, times.lease_secs, epoch) {
        BackendCheck::Confirmed { .. } => BackendCheck::Busy,
        other => other,
    }
}

/// A backend that stops records its last stamp in place of its window, if the row is still its own.
pub fn close_backend_lease(client: &mut SpiClient, held: &Holding, epoch: i64, closing: TimestampWithTimeZone) {
    let args = of_holding!(
        CLOSE_BACKEND_LEASE,
        held,
        epoch,
        last_stamp: at(closing),
    );
    spi(run(client, args, None));
}

/// A row deleted by hand leaves its bound and version as its machine id's tombstone; its service's
/// never-registered hint goes back to it.
pub fn tombstone_row(client: &mut SpiClient, service: &str, machine_id: i32, lease_secs: i64, takeover_secs: i64) {
    let args = sql::TOMBSTONE_ROW {
        service: service.into(),
        machine_id,
        lease: Interval::seconds(lease_secs),
        takeback_age: Interval::seconds(takeover_secs),
    };
    spi(run(client, args, None));
    if crate::privilege::installed_has_layouts() {
        spi(run(client, sql::LOWER_UNREGISTERED_FROM { service: service.into(), machine_id }, None));
    }
}

/// Every row truncated leaves its tombstone, every never-registered hint goes back to its pool's
/// start, and a new epoch begins.
pub fn tombstone_all_and_start_epoch(client: &mut SpiClient, lease_secs: i64, takeover_secs: i64) {
    spi(run(
        client,
        sql::TOMBSTONE_ALL { lease: Interval::seconds(lease_secs), takeback_age: Interval::seconds(takeover_secs) },
        None,
    ));
    if crate::privilege::installed_has_layouts() {
        spi(run(client, sql::RESET_UNREGISTERED_FROM {}, None));
    }
    spi(run(client, sql::NEW_EPOCH {}, None));
}

/// A row inserted for a machine id with a tombstone takes its bound and a newer version.
pub fn merge_tombstone(client: &mut SpiClient, service: &str, machine_id: i32) {
    spi(run(client, sql::MERGE_TOMBSTONE { service: service.into(), machine_id }, None));
}

/// One row or tombstone whose holder may still be stamping.
pub struct Stamping {
    pub service: String,
    pub machine_id: i32,
    /// The holder's address, port and slot; none for a tombstone.
    pub holder: Option<(String, i32, Option<i32>)>,
    pub bound: TimestampWithTimeZone,
}

/// Holds off every write to the registry until this transaction ends (a DROP being checked);
/// false, at once, when a write is in flight.
/// The sessions that hold a lock on the registry's tables now (see `sql::REGISTRY_LOCK_HOLDERS`).
pub fn registry_lock_holders(client: &mut SpiClient) -> Vec<idgen_core::messages::LockHolder> {
    spi(run(client, sql::REGISTRY_LOCK_HOLDERS {}, None))
        .into_iter()
        .map(|row| idgen_core::messages::LockHolder {
            pid: row.pid,
            role: row.role,
            application: row.application,
            state: row.state,
            since: row.since,
        })
        .collect()
}

pub fn lock_against_writes(client: &mut SpiClient) -> bool {
    pgrx::PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
        spi(run(client, sql::LOCK_REGISTRY_FOR_DROP {}, None));
        if crate::privilege::installed_has_layouts() {
            spi(run(client, sql::LOCK_LAYOUTS_FOR_DROP {}, None));
        }
        true
    }))
    // The error aborts the DROP's transaction just after (the caller raises its own).
    .catch_when(pgrx::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| false)
    .execute()
}

/// Every row and tombstone whose bound is ahead of the clock, latest first.
pub fn still_stamping(client: &mut SpiClient, lease_secs: i64, takeover_secs: i64) -> Vec<Stamping> {
    let args =
        sql::STILL_STAMPING { lease: Interval::seconds(lease_secs), takeback_age: Interval::seconds(takeover_secs) };
    spi(run(client, args, None))
        .into_iter()
        .map(|row| Stamping {
            service: row.service,
            machine_id: row.machine_id,
            holder: row.host.zip(row.port).map(|(host, port)| (host, port, row.backend_slot)),
            bound: time(row.bound),
        })
        .collect()
}

/// A backend's version-checked read, for read-only transactions: confirms
/// ownership without moving `lease_until` or the watermark.
pub fn read_backend_lease(client: &mut SpiClient, held: &Holding, lease_secs: i64, epoch: i64) -> BackendCheck {
    let args = of_holding!(
        READ_BACKEND_LEASE,
        held,
        lease: Interval::seconds(lease_secs),
        epoch,
    );
    match first_row(run(client, args, Some(1))) {
        Some(row) => BackendCheck::Confirmed {
            verified_at: time(row.verified_at),
            lease_until: time(row.lease_until),
            issued_until: time(row.issued_until),
        },
        None => BackendCheck::Lost(current_row(client, &held.node.service, held.machine_id)),
    }
}

/// The facts of a registry row as [`sql::CURRENT_ROW`] (and [`sql::LEAST_RECENTLY_SEEN`]) return them.
fn row_facts(row: sql::rows::CURRENT_ROW) -> RowFacts {
    RowFacts {
        machine_id: row.machine_id,
        host: row.host,
        port: row.port,
        version: row.version,
        last_seen: row.last_seen,
        idle_secs: row.idle_secs,
        released_at: row.released_at,
        backend_slot: row.backend_slot,
    }
}
