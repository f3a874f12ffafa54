//! What idgen tells people: errors, warnings and alerts built from facts read
//! out of the registry. The edge reads the facts; the words live here.

use crate::alert::Alert;
use crate::error::{IdgenError, SqlState};
use crate::facts::{RowFacts, StillStamping, WatermarkAhead};
use crate::fleet::{CapacityLevel, LevelChange};
use crate::format::{human_duration, iso_utc};
use crate::input::{Holding, NodeIdentity};
use crate::layout::{Layout, Pool, ServiceLayout};
use crate::policy::{ClaimPolicy, InForce, Outcome};
use serde_json::json;
use std::ops::RangeInclusive;

/// The registry has no row for this identity at this version: ownership moved.
pub fn ownership_lost(function: &str, held: &Holding, now: Option<&RowFacts>) -> IdgenError {
    let n = &held.node;
    let message = format!(
        "{function}: machine id {} of service \"{}\" is no longer held by {} at version {}",
        held.machine_id,
        n.service,
        n.name(),
        held.version
    );
    let detail = match now {
        None => format!("The registry has no row for machine id {} of service \"{}\".", held.machine_id, n.service),
        Some(row) => match &row.released_at {
            Some(at) if row.is_held_by(n) => {
                format!("It was released at {at} and is at version {} now.", row.version)
            }
            _ => format!("It is now held by {} at version {}, last seen {}.", row.holder(), row.version, row.last_seen),
        },
    };
    IdgenError::new(SqlState::ObjectNotInPrerequisiteState, message)
        .detail(detail)
        .hint("Stop issuing IDs with this machine id at once and exit; on restart, claim again with idgen_claim.")
}

/// Release of something the caller does not hold: a WARNING, not an error.
pub fn release_not_held(held: &Holding, now: Option<&RowFacts>) -> IdgenError {
    let lost = ownership_lost("idgen_release", held, now);
    IdgenError { sqlstate: SqlState::Warning, hint: None, ..lost }
        .hint("Nothing was changed. The caller must not issue IDs with this machine id.")
}

/// Another transaction holds the caller's own row, or is claiming the same identity.
pub fn identity_busy(function: &str, node: &NodeIdentity, machine_id: Option<i32>) -> IdgenError {
    let what = match machine_id {
        Some(id) => format!(
            "Machine id {id} of this node is being claimed, heartbeated, released or taken over by a transaction that has not finished."
        ),
        None => "Another transaction is giving a new machine id to this node, or (rarely) to another new node whose identity shares its guard, and has not finished.".to_owned(),
    };
    IdgenError::new(
        SqlState::LockNotAvailable,
        format!(
            "{function}: the registry entry of {} in service \"{}\" is busy",
            node.name(), node.service
        ),
    )
    .detail(format!("{what} A claim never waits for another session."))
    .hint("Retry in a moment. If it keeps failing, look for an old transaction of this service's role in pg_stat_activity, for a prepared one in pg_prepared_xacts, or for two processes started with the same host and port.")
}

/// A claim of a service whose pool and this server's `idgen.machine_id_range` do not meet.
pub fn pool_outside_range(function: &str, node: &NodeIdentity, pool: &Pool, range: &RangeInclusive<u16>) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: this server hands out no machine id of service \"{}\"", node.service),
    )
    .detail(format!(
        "The service's pool is {}-{}; this server's idgen.machine_id_range is {}-{}. They do not meet.",
        pool.first,
        pool.last,
        range.start(),
        range.end()
    ))
    .hint("A superuser must give this server a range that meets the pool (ALTER SYSTEM SET idgen.machine_id_range = ...; SELECT pg_reload_conf();), or the service must be claimed on a server that hands out its ids.")
}

/// A claim of a specific machine id that the service's pool, or this server's range, does not hold.
pub fn machine_id_not_handed_out(
    function: &str,
    service: &str,
    machine_id: u16,
    pool: &Pool,
    here: Option<&Pool>,
) -> IdgenError {
    let (reason, detail) = if !pool.contains(machine_id) {
        (
            "is outside the service's pool",
            format!("Got {machine_id}; the pool of service \"{service}\" is {}-{}.", pool.first, pool.last),
        )
    } else {
        let range = here.map_or_else(|| "none of the pool".to_owned(), |h| format!("{}-{}", h.first, h.last));
        (
            "is not handed out by this server",
            format!("Got {machine_id}; this server hands out {range} of the pool of service \"{service}\" (idgen.machine_id_range)."),
        )
    };
    IdgenError::new(SqlState::InvalidParameterValue, format!("{function}: argument \"machine_id\" {reason}"))
        .detail(detail)
        .hint("Claim an id of the pool on a server whose idgen.machine_id_range holds it, or claim without machine_id to take any free one.")
}

/// A claim of a specific machine id that someone else holds, or held too recently.
/// A released row's watermark that holds a claim back: what its holders may have stamped, the
/// server clock, and how far ahead of the clock a claimant may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatermarkWait {
    pub bound_unix_ms: i64,
    pub now_unix_ms: i64,
    pub tolerance_ms: i64,
}

/// `idgen_claim` of a machine id by number that is not the claimant's to take now: held by another,
/// or released and cooling down, or released with a watermark further ahead than the claimant may
/// wait (`waiting_for`: the true reason then, whatever the cooldown says).
pub fn machine_id_taken(
    function: &str,
    claimant: &NodeIdentity,
    machine_id: i32,
    holder: &RowFacts,
    cooldown_secs: i64,
    waiting_for: Option<WatermarkWait>,
) -> IdgenError {
    let (what, hint) = match (&holder.released_at, waiting_for) {
        (Some(at), Some(w)) if w.bound_unix_ms > w.now_unix_ms + w.tolerance_ms => (
            format!(
                "It was released at {at} by {}, whose IDs may reach {}: {} ahead of the server clock, more than a claimant waits ({}). It may be claimed from {} on.",
                holder.holder(),
                iso_utc(w.bound_unix_ms),
                human_duration((w.bound_unix_ms - w.now_unix_ms) / 1000),
                human_duration(w.tolerance_ms / 1000),
                iso_utc(w.bound_unix_ms - w.tolerance_ms)
            ),
            "Retry after that time. A holder that releases with its watermark (idgen_release(..., issued_until)) frees its id at once; released by hand without one, the id waits out what the holder may still stamp.",
        ),
        (Some(at), _) => (
            format!("It was released at {at} by {} and cools down for {} after that; only its last holder may claim it before then.", holder.holder(), human_duration(cooldown_secs)),
            "Retry after the cooldown.",
        ),
        (None, _) => (
            format!(
                "It is held by {} at version {}, last seen {} ({} ago), and may not be taken back yet.",
                holder.holder(),
                holder.version,
                holder.last_seen,
                human_duration(holder.idle_secs)
            ),
            "Stop that holder (it releases the id on shutdown), or wait until it has been idle past the take-back tiers; SELECT * FROM idgen_nodes shows its state.",
        ),
    };
    IdgenError::new(
        SqlState::ObjectInUse,
        format!(
            "{function}: machine id {machine_id} of service \"{}\" is in use; {} cannot take it",
            claimant.service,
            claimant.name()
        ),
    )
    .detail(what)
    .hint(hint)
}

/// `idgen_define_layout` for a service whose first claim fixed its layout, with another layout.
pub fn layout_fixed(function: &str, service: &str, fixed_at: &str, now: &ServiceLayout) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: the layout of service \"{service}\" is fixed"),
    )
    .detail(format!(
        "Its first claim fixed it at {fixed_at}: {}, machine ids {}-{}. IDs already minted are cut by it, and so are those of every holder still minting: it never changes.",
        layout_summary(&now.layout),
        now.pool.first,
        now.pool.last
    ))
    .hint("A new layout needs a new service name: define it for that name, then move the column defaults (idgen_next_id('new name')) and the service's nodes to it.")
}

/// A definition for a service the registry knows from before layouts were recorded (rows,
/// tombstones or history restored from a dump of an earlier version), other than the layout
/// its IDs were cut by.
pub fn layout_fixed_by_earlier_ids(function: &str, service: &str, now: &ServiceLayout) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: the layout of service \"{service}\" is fixed"),
    )
    .detail(format!(
        "The registry knows the service from an earlier version of idgen (its rows, tombstones or history, restored from a dump): its IDs were cut by {}, machine ids {}-{}, and so are those of every holder still minting: it never changes.",
        layout_summary(&now.layout),
        now.pool.first,
        now.pool.last
    ))
    .hint("A new layout needs a new service name: define it for that name, then move the column defaults (idgen_next_id('new name')) and the service's nodes to it.")
}

/// A row of `idgen_layouts` that is no layout (written by hand).
pub fn layout_row_invalid(service: &str, why: &str) -> IdgenError {
    IdgenError::new(SqlState::DataCorrupted, format!("idgen: the recorded layout of service \"{service}\" is not valid"))
        .detail(format!("idgen_private.idgen_layouts: {why}."))
        .hint("Someone changed the row by hand. Restore it as it was (the IDs minted so far are cut by it); no ID of the service is issued until then.")
}

/// A layout in words: `snowflake: 41 bits of 1 ms since 2025-01-01T00:00:00.000Z | 10-bit machine id | 12-bit sequence`.
pub fn layout_summary(layout: &Layout) -> String {
    let (second, third) = match layout.order {
        crate::layout::FieldOrder::TimeMachineSequence => {
            (format!("{}-bit machine id", layout.machine_bits), format!("{}-bit sequence", layout.sequence_bits))
        }
        crate::layout::FieldOrder::TimeSequenceMachine => {
            (format!("{}-bit sequence", layout.sequence_bits), format!("{}-bit machine id", layout.machine_bits))
        }
    };
    let name = crate::layout::Preset::of(layout).map_or(crate::layout::Preset::CUSTOM, crate::layout::Preset::name);
    format!(
        "{name}: {} bits of {} ms since {} | {second} | {third}",
        layout.time_bits,
        layout.time_unit_ms,
        iso_utc(layout.epoch_unix_ms)
    )
}

/// The registry cannot be written: a read-only transaction, or a standby.
pub fn read_only(function: &str, on_standby: bool) -> IdgenError {
    let (where_, hint) = if on_standby {
        ("on a standby server", "Call it on the primary.")
    } else {
        ("in a read-only transaction", "Call it outside the read-only transaction (SET TRANSACTION READ WRITE, or default_transaction_read_only = off).")
    };
    IdgenError::new(SqlState::ReadOnlySqlTransaction, format!("{function}: cannot write the registry {where_}"))
        .detail("Claims, heartbeats and releases update system_nodes.")
        .hint(hint)
}

/// Every machine id of the service is held and none may be taken back.
pub fn exhausted(
    function: &str,
    claimant: &NodeIdentity,
    held: i64,
    here: &Pool,
    pool: &Pool,
    shortest_idle_secs: i64,
    oldest: Option<&RowFacts>,
) -> (IdgenError, Alert) {
    let service = &claimant.service;
    let oldest_text = match oldest {
        Some(row) => format!(
            " The least recently seen holder is machine id {} at {}, idle {} (last seen {}).",
            row.machine_id,
            row.holder(),
            human_duration(row.idle_secs),
            row.last_seen
        ),
        None => String::new(),
    };
    let error = IdgenError::new(
        SqlState::InsufficientResources,
        format!("{function}: no machine id is free for service \"{service}\""),
    )
    .detail(format!(
        "{held} of {} machine ids ({} to {}: {}) are held; none was released past its cooldown or idle for more than {}.{oldest_text}",
        here.size(),
        here.first,
        here.last,
        if here != pool { "the service's pool within idgen.machine_id_range" } else { "the service's pool" },
        human_duration(shortest_idle_secs)
    ))
    .hint(format!(
        "Someone must look: SELECT * FROM system_nodes WHERE service = '{}' ORDER BY last_seen; find why so many nodes registered, and release the ids of nodes that are stopped for good.",
        service.replace('\'', "''")
    ));
    let alert = Alert {
        message: format!(
            "{function}: machine ids of service \"{service}\" are exhausted; {} could not start",
            claimant.name()
        ),
        payload: json!({
            "event": "exhausted",
            "service": service,
            "machine_id": null,
            "held": held,
            "holder": holder_json(claimant, None),
            "previous_holder": oldest.map(row_json),
            "idle_seconds": oldest.map(|r| r.idle_secs),
        }),
    };
    (error, alert)
}

/// A claim changed the service's capacity level from the one announced last (`previous`): up past
/// a threshold, or down below the level announced by the margin (`fleet::level_change`). `used` of
/// `capacity` machine ids are held or cooling down (a claim gets none of them without taking it
/// back); `warning` and `critical` are the levels' settings.
#[allow(clippy::too_many_arguments)]
pub fn capacity_alert(
    function: &str,
    claimant: &NodeIdentity,
    machine_id: i32,
    new_version: i64,
    used: i64,
    capacity: i64,
    change: LevelChange,
    previous: Option<CapacityLevel>,
    (warning, critical): (f64, f64),
) -> Alert {
    let fraction = used as f64 / capacity as f64;
    let threshold_of = |level: CapacityLevel| match level {
        CapacityLevel::Warning => warning,
        CapacityLevel::Critical => critical,
    };
    // The threshold passed: the new level's going up, the level left's going down.
    let passed = match change {
        LevelChange::Up(level) => level,
        LevelChange::Down(_) => previous.unwrap_or(CapacityLevel::Warning),
    };
    let threshold = threshold_of(passed);
    let now = change.level().map_or("cleared", CapacityLevel::label);
    let (is, side) = match change {
        LevelChange::Up(_) => ("is", "above"),
        LevelChange::Down(_) => ("is down to", "below"),
    };
    Alert {
        message: format!(
            "{function}: service \"{}\" {is} {:.0}% full ({used} of {capacity} machine ids in use), {side} {} ({:.0}%): {now}",
            claimant.service,
            fraction * 100.0,
            passed.setting(),
            threshold * 100.0,
        ),
        payload: json!({
            "event": "capacity",
            "service": claimant.service,
            "machine_id": machine_id,
            "holder": holder_json(claimant, Some(new_version)),
            "held": used,
            "capacity": capacity,
            "used_fraction": (fraction * 1000.0).round() / 1000.0,
            "level": now,
            "previous_level": previous.map(CapacityLevel::label),
            "threshold": threshold,
        }),
    }
}

/// `idgen.require_synchronous_standby` is on and no synchronous standby is streaming.
pub fn no_synchronous_standby(function: &str) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: no synchronous standby is attached, and idgen.require_synchronous_standby is on"),
    )
    .detail("A failover could lose this claim's commit and hand the machine id out twice, so no machine id is granted. Heartbeats and releases go on.")
    .hint("Retry once a synchronous standby streams again (pg_stat_replication.sync_state 'sync' or 'quorum'), or turn idgen.require_synchronous_standby off.")
}

/// A node's own machine id is outside the ids this server hands out for its service (its pool
/// within `idgen.machine_id_range`; `here`): it moves inside.
pub fn moved_into_range(function: &str, node: &NodeIdentity, from: i32, here: &Pool, to: i32) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!(
            "{function}: machine id {from} of service \"{}\" is outside the machine ids this server hands out for it ({}-{}: its pool within idgen.machine_id_range); {} moves to machine id {to}",
            node.service,
            here.first,
            here.last,
            node.name()
        ),
    )
    .detail(format!("Machine id {from} was released with its watermark; no server may hand it out before that watermark has passed."))
}

/// A node that holds one machine id claims another by number: it leaves the one it holds.
pub fn moved_to_wanted(function: &str, node: &NodeIdentity, from: i32, to: i32) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!(
            "{function}: {} of service \"{}\" claimed machine id {to} by number and leaves machine id {from}",
            node.name(),
            node.service
        ),
    )
    .detail(format!(
        "Machine id {from} was released with its watermark; no node gets it before that watermark has passed."
    ))
}

/// A take-back that a person should hear about (the policy alerts on the 1-hour tier):
/// event `<outcome>_takeover`, e.g. `idle_1h_takeover`.
pub fn takeover_alert(
    function: &str,
    outcome: Outcome,
    claimant: &NodeIdentity,
    machine_id: i32,
    new_version: i64,
    previous: &RowFacts,
) -> Alert {
    Alert {
        message: format!(
            "{function}: took back machine id {machine_id} of service \"{}\" from {}, idle only {}",
            claimant.service,
            previous.holder(),
            human_duration(previous.idle_secs)
        ),
        payload: json!({
            "event": format!("{}_takeover", outcome.label()),
            "service": claimant.service,
            "machine_id": machine_id,
            "holder": holder_json(claimant, Some(new_version)),
            "previous_holder": row_json(previous),
            "idle_seconds": previous.idle_secs,
        }),
    }
}

/// A backend found that its lease moved: a WARNING, then it claims another.
pub fn backend_lease_lost(function: &str, held: &Holding, now: Option<&RowFacts>) -> IdgenError {
    let lost = ownership_lost(function, held, now);
    IdgenError { sqlstate: SqlState::Warning, hint: None, ..lost }.hint(
        "idgen claims another machine id for this backend before issuing the next ID. If this repeats, look for another server registering with the same idgen.node_host and port.",
    )
}

/// A backend's lease was granted by a registry that is gone: the extension was dropped and
/// created again, or the registry truncated (a new epoch). Not an ownership loss: no other holder
/// took the id from it.
pub fn backend_lease_of_old_registry(function: &str, held: &Holding, epoch: i64, now_epoch: i64) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!(
            "{function}: the registry that granted machine id {} of service \"{}\" to this backend is gone",
            held.machine_id, held.node.service
        ),
    )
    .detail(format!(
        "The lease was granted in registry epoch {epoch}; the registry is now at epoch {now_epoch} (the extension was created again, or its registry truncated). No other holder took the id from this backend."
    ))
    .hint("idgen claims a machine id from the new registry for this backend before issuing the next ID; nothing is needed.")
}

/// A backend with no lease cannot claim one here.
pub fn no_lease_read_only(function: &str, service: &str, on_standby: bool) -> IdgenError {
    let (where_, hint) = if on_standby {
        ("on a standby server", "Generate IDs on the primary.")
    } else {
        (
            "in a read-only transaction",
            "Call it in a read-write transaction once (e.g. SET TRANSACTION READ WRITE); the lease then serves read-only transactions too, until it needs renewing.",
        )
    };
    IdgenError::new(
        SqlState::ReadOnlySqlTransaction,
        format!("{function}: this backend holds no machine id for service \"{service}\" and cannot claim one {where_}"),
    )
    .detail("A backend claims its machine id in system_nodes before its first ID.")
    .hint(hint)
}

/// A backend's lease (or the window its last write covered) ran out, and only a write can renew it.
pub fn lease_expired_read_only(function: &str, held: &Holding, covered_until_unix_ms: i64) -> IdgenError {
    IdgenError::new(
        SqlState::ReadOnlySqlTransaction,
        format!(
            "{function}: the lease of machine id {} of service \"{}\" covers IDs up to {} only and cannot be renewed in a read-only transaction",
            held.machine_id,
            held.node.service,
            iso_utc(covered_until_unix_ms)
        ),
    )
    .detail("A backend issues IDs only before its lease_until and before the watermark (issued_until) it last wrote to system_nodes, so that the next holder of the machine id starts after them; moving either on takes a write.")
    .hint("Call it in a read-write transaction.")
}

/// The clock is behind the last issued ID by more than the allowed step.
pub fn clock_behind(function: &str, behind_ms: i64, allowed_ms: i64) -> IdgenError {
    IdgenError::new(
        SqlState::SystemError,
        format!("{function}: the server clock is {behind_ms} ms behind the last ID this backend issued"),
    )
    .detail(format!(
        "idgen waits out a clock that steps back by up to idgen.max_clock_backward ({allowed_ms} ms) and refuses to issue IDs beyond that, so IDs never repeat. No ID was issued."
    ))
    .hint("Check the server's time synchronisation (NTP), then retry once the clock has caught up. A new connection is no way around it: its claim waits for the same watermark, or takes another machine id.")
}

/// The facts of a watermark ahead, for a DETAIL.
fn watermark_ahead_facts(ahead: &WatermarkAhead) -> String {
    if let Some(seen) = ahead.held_since_unix_ms {
        return format!(
            "It is held by this identity, last seen at {}, whose lease lets it issue IDs until {}: it may be an earlier process of this node that has not exited, or another process started with the same address and port.",
            iso_utc(seen),
            iso_utc(ahead.bound_unix_ms)
        );
    }
    format!(
        "Its watermark, the latest time an earlier holder may have stamped IDs with it, is {}: {} ms ahead of the server clock ({}), longer than a claim may wait ({} ms).",
        iso_utc(ahead.bound_unix_ms),
        ahead.bound_unix_ms - ahead.now_unix_ms,
        iso_utc(ahead.now_unix_ms),
        ahead.tolerance_ms
    )
}

/// The caller's own machine id was set aside for its watermark, and another was claimed: a WARNING.
pub fn moved_past_watermark(function: &str, node: &NodeIdentity, ahead: &WatermarkAhead, to: i32) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!(
            "{function}: machine id {} of service \"{}\" cannot be used before {}; {} claimed machine id {to} instead",
            ahead.machine_id,
            node.service,
            iso_utc(ahead.bound_unix_ms),
            node.name()
        ),
    )
    .detail(format!(
        "{} {}",
        watermark_ahead_facts(ahead),
        if ahead.held_since_unix_ms.is_some() {
            "It is released: that holder's next heartbeat fails, and the id comes back into use once its lease has ended."
        } else {
            "It is released and comes back into use once the clock has passed it."
        }
    ))
    .hint(if ahead.held_since_unix_ms.is_some() {
        "Expected after a crash: that process's next heartbeat fails with 55000 and it stops. Otherwise give every process its own address and port; a process that releases its id on shutdown (idgen_release) gets it back when it restarts."
    } else {
        "The server clock (or this node's) was ahead earlier, or stepped back: check time synchronisation (NTP)."
    })
}

/// The caller's own machine id cannot be used yet and no other is free.
pub fn watermark_ahead(function: &str, node: &NodeIdentity, ahead: &WatermarkAhead) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!(
            "{function}: machine id {} of service \"{}\" cannot be used before {}, and no other machine id is free",
            ahead.machine_id,
            node.service,
            iso_utc(ahead.bound_unix_ms)
        ),
    )
    .detail(format!("{} No ID was issued.", watermark_ahead_facts(ahead)))
    .hint(if ahead.held_since_unix_ms.is_some() {
        "Retry after that time, or stop the other process and let it release its id (idgen_release). Do not delete the row: its holder may be issuing IDs with it."
    } else {
        "Retry once the server clock has passed the watermark, and check time synchronisation (NTP). Do not delete the row or lower its issued_until: the IDs stamped up to it would be issued again."
    })
}

/// A node reported an infinite watermark.
pub fn infinite_watermark(function: &str) -> IdgenError {
    IdgenError::new(SqlState::InvalidParameterValue, format!("{function}: argument \"issued_until\" must be finite"))
        .detail(
            "It is the latest timestamp the node has stamped in an ID, or its clock's reading. Nothing was changed.",
        )
        .hint("Pass the node's watermark, or NULL to let the server's clock stand in for it.")
}

/// A node reported a watermark after the last time an ID can carry: its clock is wrong, and it
/// stamped nothing that late. Refused, so that it stops (the reference client does).
pub fn watermark_beyond_layout(function: &str, reported_unix_ms: i64, layout: &Layout) -> IdgenError {
    IdgenError::new(
        SqlState::InvalidParameterValue,
        format!("{function}: argument \"issued_until\" is after the last time an ID can carry"),
    )
    .detail(format!(
        "Got {}; no ID stamps a time after {}, so the node's clock is wrong. Nothing was changed: the node must stop issuing IDs.",
        iso_utc(reported_unix_ms),
        iso_utc(layout.last_unix_ms())
    ))
    .hint("Correct the node's clock (NTP), then restart it: it claims again and starts after every ID its machine id carried.")
}

/// The clock reads a time the layout cannot stamp.
pub fn clock_outside_layout(function: &str, now_unix_ms: i64, layout: &Layout) -> IdgenError {
    IdgenError::new(
        SqlState::DatetimeFieldOverflow,
        format!("{function}: the server clock reads {}, outside the ID layout's time range", iso_utc(now_unix_ms)),
    )
    .detail(layout_range_detail(layout))
    .hint("Check the server's clock. No ID was issued.")
}

/// `idgen_min_id` / `idgen_max_id` given a time the layout cannot stamp.
/// `unix_ms` is the time given, or `Err(text)` for a value with no time (`infinity`, `-infinity`).
pub fn time_outside_layout(function: &str, argument: &str, unix_ms: Result<i64, &str>, layout: &Layout) -> IdgenError {
    let shown = unix_ms.map_or_else(str::to_owned, iso_utc);
    IdgenError::new(
        SqlState::DatetimeFieldOverflow,
        format!("{function}: argument \"{argument}\" is outside the ID layout's time range"),
    )
    .detail(format!("Got {shown}. {}", layout_range_detail(layout)))
}

/// `idgen_decode` given a negative number.
pub fn negative_id(function: &str, id: i64) -> IdgenError {
    IdgenError::new(SqlState::NumericValueOutOfRange, format!("{function}: argument \"id\" is negative"))
        .detail(format!("Got {id}; idgen IDs are never negative (their sign bit is always 0)."))
}

/// An ID that a layout cannot have made: negative, or with bits set above its fields.
pub fn id_outside_layout(function: &str, id: i64, why: &crate::layout::LayoutError, layout: &Layout) -> IdgenError {
    match why {
        crate::layout::LayoutError::AboveLayout { max, .. } => IdgenError::new(
            SqlState::NumericValueOutOfRange,
            format!("{function}: argument \"id\" is above the largest ID of the layout"),
        )
        .detail(format!("Got {id}; the largest ID of the layout ({}) is {max}.", layout_summary(layout))),
        _ => negative_id(function, id),
    }
}

/// PREPARE TRANSACTION after idgen's SQL functions wrote the registry in the transaction.
pub fn prepare_after_registry_write(functions: &[String]) -> IdgenError {
    IdgenError::new(
        SqlState::FeatureNotSupported,
        "cannot PREPARE a transaction in which idgen wrote the registry",
    )
    .detail(format!(
        "The transaction called {}. A prepared transaction keeps its row locks until COMMIT PREPARED or ROLLBACK PREPARED, which may be never: the node's own row and its claim guards would stay locked, and its claim would depend on another session's decision.",
        functions.join(", ")
    ))
    .hint("Call idgen_claim, idgen_heartbeat and idgen_release in transactions of their own (autocommit), as the client contract says.")
}

/// The library runs against SQL objects of another version of the extension.
pub fn version_mismatch(installed: &str, library: &str, runs_against: &[&str]) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("idgen: this database has version {installed} of the extension, but the server runs its library {library}"),
    )
    .detail(format!(
        "The library runs against the SQL objects of versions {} only: its registry statements and functions are written for them. Nothing was changed.",
        runs_against.join(" and ")
    ))
    .hint("Run ALTER EXTENSION idgen UPDATE in this database.")
}

/// A function declared in SQL with another number of arguments than the library's (an
/// installation no version check caught: its objects were changed by hand).
pub fn declared_otherwise(function: &str, declared: i64, expected: i64) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: its SQL declaration does not match this library"),
    )
    .detail(format!(
        "It was called with {declared} arguments; the library's {function} takes {expected}. Nothing was changed."
    ))
    .hint("Run ALTER EXTENSION idgen UPDATE in this database.")
}

/// How to change several thresholds (the HINT of a contradiction while the last consistent ones
/// are in force).
pub const SETTINGS_CHANGE_TOGETHER: &str = "Set every threshold that must change with ALTER SYSTEM SET, then reload once (SELECT pg_reload_conf()): a reload takes them together. Or change them one at a time in an order that keeps them consistent: docs/operations.md#changing-the-thresholds.";

/// The thresholds in force, as the messages name them.
pub fn thresholds(policy: &ClaimPolicy) -> String {
    format!(
        "idgen.takeover_idle_7d {}, idgen.takeover_idle_1d {}, idgen.takeover_idle_1h {}, idgen.release_cooldown {}, idgen.heartbeat_interval {}, idgen.lease_safety_margin {}",
        human_duration(policy.takeover_idle_7d_secs),
        human_duration(policy.takeover_idle_1d_secs),
        human_duration(policy.takeover_idle_1h_secs),
        human_duration(policy.release_cooldown_secs),
        human_duration(policy.heartbeat_interval_secs),
        human_duration(policy.lease_safety_margin_secs)
    )
}

/// The thresholds as set contradict each other (`contradiction`, from `ClaimPolicy::validate`) and
/// the last consistent ones, `kept`, stay in force: `idgen_policy().problem`, and the DETAIL of
/// the WARNING below.
pub fn settings_kept(contradiction: &IdgenError, kept: &ClaimPolicy) -> IdgenError {
    IdgenError::new(SqlState::InvalidParameterValue, "idgen settings are inconsistent")
        .detail(format!(
            "{} Claims and renewals go on by the last consistent settings until they are corrected: {}.",
            contradiction.detail.clone().unwrap_or_default(),
            thresholds(kept)
        ))
        .hint(SETTINGS_CHANGE_TOGETHER)
}

/// `idgen_policy().problem` and the detail of `idgen_health()`'s `settings_inconsistent`, when the
/// thresholds as set contradict each other.
pub fn settings_problem(in_force: &InForce) -> Option<String> {
    match in_force {
        InForce::AsSet(_) => None,
        InForce::Kept { kept, contradiction } => Some(settings_kept(contradiction, kept).one_line()),
        InForce::Refused(refusal) => Some(format!(
            "{} No machine id is claimed or renewed until they are corrected: no consistent ones are known (none since the server started, or, without idgen preloaded, since a crash restart).",
            refusal.one_line()
        )),
    }
}

/// The WARNING a backend gives at its first use of idgen after the thresholds came to contradict
/// each other while the last consistent ones stay in force (`settings_kept`).
pub fn settings_contradict_kept(kept: &IdgenError) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        "idgen: the idgen.* settings contradict each other; claims and renewals go on by the last consistent ones",
    )
    .detail(kept.detail.clone().unwrap_or_default())
    .hint(format!(
        "{SETTINGS_CHANGE_TOGETHER} SELECT * FROM idgen_health() shows the finding settings_inconsistent meanwhile."
    ))
}

/// The WARNING a backend gives at its first use of idgen after the thresholds came to
/// contradict each other, none consistent having been in force since the server started
/// (`refusal` is what `ClaimPolicy::validate` says).
pub fn settings_contradict(refusal: &IdgenError) -> IdgenError {
    IdgenError::new(SqlState::Warning, "idgen: the idgen.* settings contradict each other; no machine id is claimed or renewed until they are corrected")
        .detail(refusal.detail.clone().unwrap_or_default())
        .hint("Correct them (ALTER SYSTEM SET ..., then SELECT pg_reload_conf()); SELECT * FROM idgen_health() shows the finding settings_inconsistent meanwhile. IDs are still issued inside leases already granted.")
}

/// A configured value of `setting` (postgresql.conf, ALTER SYSTEM, ALTER DATABASE/ROLE ... SET,
/// the connection's options) that its check refused (`why`): Postgres kept another value.
pub fn configured_value_refused(setting: &str, value: &str, why: &IdgenError) -> IdgenError {
    IdgenError::new(
        SqlState::InvalidParameterValue,
        format!("idgen: the configured value of setting \"{setting}\" was refused; no machine id is claimed or renewed until it is corrected"),
    )
    .detail(format!(
        "The configuration sets it to {value:?}: {}{} The server kept another value, which is not what was configured (another address, service or range of machine ids).",
        why.message,
        why.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    ))
    .hint(format!("Correct it where it is set (postgresql.conf, ALTER SYSTEM, ALTER DATABASE or ALTER ROLE ... SET, the connection's options: cluster-wide settings cannot be set there), then reload, or reconnect (a line removed from the file, a role's or database's value, an option). After LOAD 'idgen', ALTER SYSTEM SET {setting} checks the value."))
}

/// A registry write, which commits in a transaction of its own, asked for in the transaction that
/// created (or updated) the extension: the other transaction cannot see it yet.
pub fn installed_in_this_transaction(function: &str) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: idgen was created or updated in this transaction, which has not committed"),
    )
    .detail("Every registry write behind an ID commits in a transaction of its own, which cannot see this transaction's CREATE EXTENSION (or ALTER EXTENSION) before it commits. Nothing was changed.")
    .hint("Commit the CREATE EXTENSION first (in a migration of its own), then mint IDs or claim.")
}

/// A backend's first ID for `service` in a transaction that created the service (defined its
/// layout, granted it or claimed it) and has not committed: the claim commits in a transaction of its
/// own, which would not see it (or wait for its row).
pub fn service_created_in_this_transaction(function: &str, service: &str) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("{function}: service \"{service}\" was defined, granted or claimed in this transaction, which has not committed"),
    )
    .detail("A backend claims its machine id in a transaction of its own, which cannot see this transaction's idgen_define_layout, idgen_grant_service or idgen_claim before it commits (it would wait for the layout's row, or create the service anyway). Nothing was changed.")
    .hint("Commit that first (in a migration step of its own), then mint IDs.")
}

/// A registry write had no background worker to commit it in a transaction of its own.
pub fn no_worker_slot(function: &str, waited_ms: i64) -> IdgenError {
    IdgenError::new(
        SqlState::InsufficientResources,
        format!("{function}: no background worker slot is free to start idgen's registry writer"),
    )
    .detail(format!(
        "idgen is not in shared_preload_libraries: a claim, and each renewal of a backend's window, commit in a registry writer started on demand, before any ID is issued under them, and none could start in {waited_ms} ms (every slot of max_worker_processes is taken: parallel queries, which any role may run, replication, other extensions). No ID was issued."
    ))
    .hint("Add idgen to shared_preload_libraries and restart the server: its registry writers then start with it and need no free slot. Meanwhile, see what holds the slots: SELECT backend_type, count(*) FROM pg_stat_activity GROUP BY 1.")
}

/// A backend's lease still due for a check after every renewal its statement made: the server clock
/// moved past each window as soon as it was written.
pub fn lease_due_after_renewals(function: &str, service: &str) -> IdgenError {
    IdgenError::new(
        SqlState::SystemError,
        format!("{function}: the lease of service \"{service}\" was renewed, and the server clock moved past its window again at once"),
    )
    .detail("Each renewal commits a window that starts at the server clock as the registry writer reads it; the backend then read a clock past its end, 64 times. The clock steps forward, or the writer and the backend read different clocks. No ID was issued.")
    .hint("Check the server's time synchronisation (chronyc tracking, timedatectl), then retry.")
}

/// Two services of this registry whose pools share no machine id (kept apart, by intent) while their
/// machine-id fields sit at other bits: their IDs can be equal all the same.
pub fn pools_apart_at_other_bits(
    function: &str,
    service: &str,
    layout: &ServiceLayout,
    other: &str,
    other_layout: &ServiceLayout,
) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!("{function}: the pools of services \"{service}\" and \"{other}\" share no machine id, yet their IDs can be equal"),
    )
    .detail(other_bits_detail(service, layout, other, other_layout))
    .hint("If their IDs may meet (one table, a merge, replication), give both the same field widths and order (machine_bits, sequence_bits, field_order) before their first claims; idgen_health() reports this pair as pools_apart_at_other_bits until then.")
}

fn other_bits_detail(service: &str, layout: &ServiceLayout, other: &str, other_layout: &ServiceLayout) -> String {
    let field = |l: &ServiceLayout| {
        let (shift, width) = l.layout.machine_field();
        format!("bits {}-{}", shift, shift + width - 1)
    };
    format!(
        "Pools keep IDs apart only where the machine id sits at the same bits: \"{service}\" has pool {}-{} at {}, \"{other}\" pool {}-{} at {}, so a machine id of one and another of the other make the same ID.",
        layout.pool.first,
        layout.pool.last,
        field(layout),
        other_layout.pool.first,
        other_layout.pool.last,
        field(other_layout)
    )
}

/// `idgen_health()`'s finding for such a pair (see [`pools_apart_at_other_bits`]).
pub fn pools_apart_at_other_bits_finding(
    service: &str,
    layout: &ServiceLayout,
    other: &str,
    other_layout: &ServiceLayout,
) -> Finding {
    Finding {
        severity: "warning",
        finding: "pools_apart_at_other_bits",
        subject: format!("{service}, {other}"),
        detail: other_bits_detail(service, layout, other, other_layout),
        action: "If their IDs may meet (one table, a merge, replication), they are not apart: give the services the same field widths and order (a fixed layout cannot change: give a new service name its layout), or keep their IDs out of each other's tables.".to_owned(),
    }
}

/// A finding of `idgen_health()`: its severity, name, subject, what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub severity: &'static str,
    pub finding: &'static str,
    pub subject: String,
    pub detail: String,
    pub action: String,
}

/// idgen is preloaded, yet none of its registry writers runs (the server could not start them).
pub fn registry_writers_missing(writers: usize) -> Finding {
    Finding {
        severity: "critical",
        finding: "registry_writers_missing",
        subject: "idgen registry writer".to_owned(),
        detail: format!(
            "idgen is in shared_preload_libraries, but none of its {writers} registry writers runs: a new connection's first ID and each renewal of a backend's window wait for one, and then fail. The server log says why none started (too many background workers: max_worker_processes)."
        ),
        action: "Raise max_worker_processes (idgen's writers count against it, as every preloaded library's workers do) and restart the server.".to_owned(),
    }
}

/// Without preloading, parallel query may take every background worker slot by the server's settings.
pub fn worker_budget(max_worker_processes: i64, max_parallel_workers: i64) -> Finding {
    Finding {
        severity: "warning",
        finding: "worker_budget",
        subject: "max_parallel_workers".to_owned(),
        detail: format!(
            "idgen is not in shared_preload_libraries, and max_parallel_workers ({max_parallel_workers}) lets parallel queries take every background worker slot (max_worker_processes {max_worker_processes}, of which the logical replication launcher takes one): a new connection's first ID, or a renewal, then waits 1.5 s for a slot and fails (53000)."
        ),
        action: "Add idgen to shared_preload_libraries and restart the server: its registry writers then start with it and need no free slot. Short of that, keep max_parallel_workers at most max_worker_processes - 2 (any role may still raise its own).".to_owned(),
    }
}

/// Registry writes failed for want of a background worker slot (not preloaded).
pub fn worker_slots_exhausted(refusals: u64, last_at: &str) -> Finding {
    Finding {
        severity: "warning",
        finding: "worker_slots_exhausted",
        subject: "idgen registry writer".to_owned(),
        detail: format!(
            "{refusals} registry writes found no free background worker slot since the server started, the last at {last_at}: each failed a backend's first ID or renewal (53000)."
        ),
        action: "Add idgen to shared_preload_libraries and restart the server: its registry writers then start with it and need no free slot. See what holds the slots: SELECT backend_type, count(*) FROM pg_stat_activity GROUP BY 1.".to_owned(),
    }
}

/// How long a refusal for want of a slot stays a finding of `idgen_health()`.
pub const WORKER_SLOTS_EXHAUSTED_SHOWN_SECS: i64 = 3_600;

/// `idgen_next_id` inside a parallel worker (a PARALLEL SAFE wrapper around it).
/// A single-user backend has no postmaster to start the registry writer.
pub fn single_user_mode(function: &str) -> IdgenError {
    IdgenError::new(SqlState::FeatureNotSupported, format!("{function} cannot write the registry in single-user mode"))
        .detail("A claim and each renewal of a backend's window commit in a background worker of their own, which only a running server can start. No ID was issued.")
        .hint("Start the server normally to mint IDs.")
}

pub fn in_parallel_worker(function: &str) -> IdgenError {
    IdgenError::new(SqlState::FeatureNotSupported, format!("{function} cannot run in a parallel worker"))
        .detail(
            "A parallel worker holds no machine id of its own and must not claim one for a query that ends with it.",
        )
        .hint("idgen_next_id is PARALLEL UNSAFE: do not wrap it in a function declared PARALLEL SAFE.")
}

/// `DROP EXTENSION idgen` (or a DROP that would cascade to it) while holders may still stamp.
/// `count` machine ids in all; `shown` the first few, latest first.
pub fn drop_refused(command: &str, count: i64, shown: &[StillStamping]) -> IdgenError {
    let latest = shown.iter().map(|s| s.until_unix_ms).max().unwrap_or(i64::MIN);
    let list: Vec<String> = shown
        .iter()
        .map(|s| {
            format!(
                "service \"{}\" machine id {} ({}) until {}",
                s.service,
                s.machine_id,
                s.holder,
                iso_utc(s.until_unix_ms)
            )
        })
        .collect();
    IdgenError::new(
        SqlState::ObjectInUse,
        format!("{command}: the idgen registry still guards machine ids that may be stamped"),
    )
    .detail(format!(
        "{count} machine id{} may be stamped until {} at the latest: {}{}. A registry created afterwards would hand them out again while their holders use them.",
        if count == 1 { "" } else { "s" },
        iso_utc(latest),
        list.join("; "),
        if (shown.len() as i64) < count { "; and others" } else { "" }
    ))
    .hint("Stop those holders and let them release their ids (idgen_release), or wait until then; a database backend records its last stamp when it disconnects (pg_terminate_backend ends one). Only for a database whose IDs can be thrown away: a superuser may run ALTER EVENT TRIGGER idgen_drop_guard DISABLE first.")
}

/// The owner of idgen's schema (not of idgen) drops the schema with CASCADE.
pub fn schema_drop_takes_idgen(schema: &str) -> IdgenError {
    schema_owner_takes_idgen("DROP SCHEMA", schema)
}

/// The owner of idgen's schema (not of idgen) drops what it owns, the schema among it.
pub fn owned_drop_takes_idgen(schema: &str) -> IdgenError {
    schema_owner_takes_idgen("DROP OWNED", schema)
}

fn schema_owner_takes_idgen(command: &str, schema: &str) -> IdgenError {
    IdgenError::new(
        SqlState::InsufficientPrivilege,
        format!("{command}: schema \"{schema}\" holds the extension idgen, which only its owner may drop"),
    )
    .detail(format!("{command} would drop the schema with the objects of its owner, and idgen's registry, its grants and its history with it."))
    .hint("Ask a superuser (the extension's owner) to drop the extension first, or drop the schema's other objects one by one.")
}

/// A DROP or TRUNCATE of the registry in a transaction that reads through an older snapshot.
pub fn registry_change_needs_read_committed(command: &str) -> IdgenError {
    IdgenError::new(SqlState::FeatureNotSupported, format!("{command} must run at READ COMMITTED"))
        .detail("At REPEATABLE READ or SERIALIZABLE its check would read the registry as the transaction's snapshot shows it, not the windows and reports committed since, and could forget a holder that is still stamping.")
        .hint("Run it in a transaction of its own at READ COMMITTED (SET TRANSACTION ISOLATION LEVEL READ COMMITTED).")
}

/// A row inserted into `system_nodes` (a restore, by hand) in a transaction at REPEATABLE READ or
/// SERIALIZABLE: its tombstone merge would miss a tombstone written after the snapshot.
pub fn insert_needs_read_committed() -> IdgenError {
    registry_change_needs_read_committed("INSERT INTO system_nodes")
}

/// A claim in a transaction at REPEATABLE READ or SERIALIZABLE.
pub fn claim_needs_read_committed(function: &str) -> IdgenError {
    IdgenError::new(SqlState::FeatureNotSupported, format!("{function} must run at READ COMMITTED"))
        .detail("At REPEATABLE READ or SERIALIZABLE the claim would read the registry as the transaction's snapshot shows it, not the rows removed and the bounds recorded since, and could grant a machine id before its last holder has stopped stamping.")
        .hint("Claim in a transaction of its own at READ COMMITTED (the default; SET TRANSACTION ISOLATION LEVEL READ COMMITTED).")
}

/// An UPDATE would move a registry row to another service or machine id.
pub fn registry_key_changed(service: &str, machine_id: i32, new_service: &str, new_machine_id: i32) -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        format!("system_nodes: the row of machine id {machine_id} of service \"{service}\" cannot become machine id {new_machine_id} of service \"{new_service}\""),
    )
    .detail("A row's service and machine_id never change: its holder may still be stamping IDs with that machine id, and a moved row would leave nothing behind to keep the next holder after them.")
    .hint("Release the id (idgen_release) and let the new holder claim one; or DELETE the row (its bound stays as a tombstone) and INSERT the new one.")
}

/// ALTER EXTENSION idgen DROP: an object would leave the extension.
pub fn member_removal_refused() -> IdgenError {
    IdgenError::new(SqlState::ObjectInUse, "ALTER EXTENSION idgen DROP: no object may leave the extension idgen")
        .detail("An object out of the extension could be dropped on its own (the registry's table among them), and nothing would check that its holders have stopped stamping.")
        .hint("Only for a database whose IDs can be thrown away: a superuser may run ALTER EVENT TRIGGER idgen_drop_guard DISABLE first.")
}

/// An UPDATE of the history.
pub fn history_append_only() -> IdgenError {
    IdgenError::new(SqlState::ObjectNotInPrerequisiteState, "idgen_history is append-only")
        .detail("Events are never changed; old ones are removed by idgen_purge_history().")
}

/// Another transaction used the registry (a write, or a read) when a DROP of it was checked.
/// A session holding a lock on idgen's tables, as a refusal to wait for it names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: i32,
    pub role: String,
    pub application: String,
    pub state: String,
    /// When its transaction began (ISO), if it has one.
    pub since: Option<String>,
}

pub fn drop_registry_busy(command: &str, holders: &[LockHolder]) -> IdgenError {
    let named = holders
        .iter()
        .map(|h| {
            let since = h.since.as_deref().map(|s| format!(", in a transaction since {s}")).unwrap_or_default();
            format!("pid {} (role {}, application {:?}, {}{since})", h.pid, h.role, h.application, h.state)
        })
        .collect::<Vec<_>>()
        .join("; ");
    let held_by = if holders.is_empty() {
        "No session holds its tables now: the one that did has just ended, or a prepared transaction holds them (pg_prepared_xacts).".to_owned()
    } else {
        format!("Held now by {named}.")
    };
    let end = holders.iter().map(|h| format!("SELECT pg_terminate_backend({});", h.pid)).collect::<Vec<_>>().join(" ");
    IdgenError::new(SqlState::LockNotAvailable, format!("{command}: the idgen registry is in use by another transaction"))
        .detail(format!("A DROP of the registry must hold off every claim, renewal and report while it checks that nothing may still be stamped; it does not queue behind a transaction that reads or writes the registry, which would stop every claim behind it. {held_by}"))
        .hint(if holders.is_empty() {
            "Retry in a moment; a prepared transaction ends with COMMIT PREPARED or ROLLBACK PREPARED.".to_owned()
        } else {
            format!("Retry once their transactions end, or end them: {end}")
        })
}

fn layout_range_detail(layout: &Layout) -> String {
    format!("IDs can stamp times from {} to {}.", iso_utc(layout.epoch_unix_ms), iso_utc(layout.last_unix_ms()))
}

fn row_json(row: &RowFacts) -> serde_json::Value {
    let mut value = json!({
        "machine_id": row.machine_id,
        "host": row.host,
        "port": row.port,
        "version": row.version,
        "last_seen": row.last_seen,
    });
    with_backend_slot(&mut value, row.backend_slot);
    value
}

fn holder_json(node: &NodeIdentity, version: Option<i64>) -> serde_json::Value {
    let mut value = json!({ "host": node.host, "port": node.port });
    if let Some(version) = version {
        value["version"] = json!(version);
    }
    with_backend_slot(&mut value, node.backend_slot);
    value
}

/// Backend holders carry their slot; service holders have no such key.
fn with_backend_slot(value: &mut serde_json::Value, backend_slot: Option<i32>) {
    if let Some(slot) = backend_slot {
        value["backend_slot"] = json!(slot);
    }
}

/// `idgen_explain` found neither a registry row nor events of `machine_id` the caller may read.
pub fn explain_nothing_known(function: &str, service: Option<&str>) -> IdgenError {
    let within = match service {
        Some(s) => format!("service \"{s}\""),
        None => "any service you may read".to_owned(),
    };
    IdgenError::new(SqlState::UndefinedObject, format!("{function}: the ID's machine id is not known in {within}"))
        .detail("Decoded by each service's layout, its machine id has neither a registry row nor an event there, or you may not read the service (idgen_visibility).")
        .hint("Check the ID and the service name; a role sees the services granted to it with idgen_grant_service, pg_monitor sees all.")
}

/// `idgen_explain` found `holders` tenures of one machine id that overlap at `stamp_ms`.
pub fn explain_overlapping_tenures(
    function: &str,
    service: &str,
    machine_id: i32,
    stamp_ms: i64,
    holders: usize,
) -> IdgenError {
    IdgenError::new(
        SqlState::Warning,
        format!(
            "{function}: {holders} holders of machine id {machine_id} of service \"{service}\" may have stamped the same millisecond"
        ),
    )
    .detail(format!("Their tenures overlap at {}: two of them may have made the same ID. That is a bug in idgen, or the registry or its history was changed by hand.", iso_utc(stamp_ms)))
    .hint("Keep the history (do not purge it), look for duplicate IDs of this service around that time, and report it with the rows below.")
}

/// What `idgen_explain` adds when only the registry knows a machine id: who holds it now.
pub fn explain_registry_holder_now(holder: &str, version: i64) -> String {
    format!(" The registry shows it held by {holder} at version {version} now; whether it held it then is not known.")
}

/// A first claim of `service` that cannot see the guard rows it just had created (not expected at READ COMMITTED).
pub fn first_claim_must_retry(function: &str, service: &str) -> IdgenError {
    IdgenError::new(
        SqlState::SerializationFailure,
        format!("{function}: the first claim of service \"{service}\" must be retried"),
    )
    .detail("Its claim guards were just created, after this transaction's snapshot was taken, which cannot see them.")
    .hint("Retry the transaction (the client contract retries 40001).")
}

/// idgen is called in a database where the extension is not installed.
pub fn not_installed() -> IdgenError {
    IdgenError::new(
        SqlState::ObjectNotInPrerequisiteState,
        "idgen: the idgen extension is not installed in this database",
    )
    .hint("CREATE EXTENSION idgen;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::node_name;

    fn node(host: &str, port: i32) -> NodeIdentity {
        NodeIdentity { service: "orders".into(), host: host.into(), port, backend_slot: None }
    }

    fn row(host: &str, port: i32, version: i64, released_at: Option<&str>) -> RowFacts {
        RowFacts {
            machine_id: 5,
            host: host.into(),
            port,
            version,
            last_seen: "2026-11-29T08:00:00.000000Z".into(),
            idle_secs: 3_780,
            released_at: released_at.map(Into::into),
            backend_slot: None,
        }
    }

    fn holding() -> Holding {
        Holding { node: node("10.0.0.5", 8080), machine_id: 5, version: 3 }
    }

    #[test]
    fn a_claim_by_machine_id_names_why_it_cannot_have_it() {
        let pool = Pool { first: 0, last: 255 };
        let outside = machine_id_not_handed_out("idgen_claim", "fleet", 300, &pool, Some(&pool));
        assert_eq!(
            (outside.sqlstate.code(), outside.message.as_str()),
            ("22023", "idgen_claim: argument \"machine_id\" is outside the service's pool")
        );
        assert_eq!(outside.detail.as_deref(), Some("Got 300; the pool of service \"fleet\" is 0-255."));
        let range = machine_id_not_handed_out("idgen_claim", "fleet", 7, &pool, Some(&Pool { first: 100, last: 255 }));
        assert_eq!(range.message, "idgen_claim: argument \"machine_id\" is not handed out by this server");
        assert!(range.detail.unwrap().contains("this server hands out 100-255 of the pool"));
        let none = machine_id_not_handed_out("idgen_claim", "fleet", 7, &pool, None);
        assert!(none.detail.unwrap().contains("this server hands out none of the pool"));
        let held = machine_id_taken("idgen_claim", &node("10.0.0.6", 1), 5, &row("10.0.0.9", 9090, 4, None), 60, None);
        assert_eq!(held.sqlstate.code(), "55006");
        assert_eq!(
            held.message,
            "idgen_claim: machine id 5 of service \"orders\" is in use; 10.0.0.6:1 cannot take it"
        );
        assert!(held.detail.unwrap().starts_with(
            "It is held by 10.0.0.9:9090 at version 4, last seen 2026-11-29T08:00:00.000000Z (1h 3m ago)"
        ));
        let cooling = machine_id_taken(
            "idgen_claim",
            &node("10.0.0.6", 1),
            5,
            &row("10.0.0.9", 9090, 4, Some("2026-11-29T08:00:01Z")),
            60,
            None,
        );
        assert!(cooling
            .detail
            .unwrap()
            .starts_with("It was released at 2026-11-29T08:00:01Z by 10.0.0.9:9090 and cools down for 1m"));
        // Released by hand without a watermark: the wait is what its holder may still stamp, not the cooldown.
        let now = 1_796_000_000_000;
        let wait = WatermarkWait { bound_unix_ms: now + 3_000_000, now_unix_ms: now, tolerance_ms: 300_000 };
        let fenced = machine_id_taken(
            "idgen_claim",
            &node("10.0.0.6", 1),
            5,
            &row("10.0.0.9", 9090, 4, Some("2026-11-29T08:00:01Z")),
            60,
            Some(wait),
        );
        let detail = fenced.detail.unwrap();
        assert!(detail.contains("whose IDs may reach") && detail.contains("50m ahead of the server clock"), "{detail}");
        assert!(!detail.contains("cools down"), "{detail}");
        assert!(fenced.hint.unwrap().starts_with("Retry after that time."));
        // A watermark within what a claimant waits: the cooldown is the reason.
        let near = WatermarkWait { bound_unix_ms: now + 1_000, ..wait };
        let cooling = machine_id_taken(
            "idgen_claim",
            &node("10.0.0.6", 1),
            5,
            &row("10.0.0.9", 9090, 4, Some("2026-11-29T08:00:01Z")),
            60,
            Some(near),
        );
        assert!(cooling.detail.unwrap().contains("cools down"));
        let range_error = pool_outside_range("idgen_claim", &node("10.0.0.6", 1), &pool, &(512..=1023));
        assert_eq!(range_error.sqlstate.code(), "55000");
        assert!(range_error
            .detail
            .unwrap()
            .contains("The service's pool is 0-255; this server's idgen.machine_id_range is 512-1023."));
    }

    #[test]
    fn a_fixed_layout_is_told_in_words() {
        let sony = crate::layout::Preset::Sonyflake.layout();
        assert_eq!(
            layout_summary(&sony),
            "sonyflake: 39 bits of 10 ms since 2014-09-01T00:00:00.000Z | 8-bit sequence | 16-bit machine id"
        );
        let fixed = layout_fixed(
            "idgen_define_layout",
            "orders",
            "2026-11-29T08:00:00.000Z",
            &ServiceLayout { layout: sony, pool: Pool { first: 0, last: 255 } },
        );
        assert_eq!(
            (fixed.sqlstate.code(), fixed.message.as_str()),
            ("55000", "idgen_define_layout: the layout of service \"orders\" is fixed")
        );
        assert!(fixed.detail.unwrap().starts_with("Its first claim fixed it at 2026-11-29T08:00:00.000Z: sonyflake: "));
        let js = crate::layout::Preset::JsSafe.layout();
        let above = id_outside_layout("idgen_decode", 1 << 53, &js.decompose(1 << 53).unwrap_err(), &js);
        assert_eq!(
            (above.sqlstate.code(), above.message.as_str()),
            ("22003", "idgen_decode: argument \"id\" is above the largest ID of the layout")
        );
        assert!(above.detail.unwrap().ends_with("is 9007199254740991."));
        assert_eq!(
            id_outside_layout("idgen_decode", -1, &js.decompose(-1).unwrap_err(), &js),
            negative_id("idgen_decode", -1)
        );
        assert_eq!(layout_row_invalid("orders", "field_order \"x\"").sqlstate.code(), "XX001");
    }

    #[test]
    fn ownership_lost_names_the_new_holder() {
        let err = ownership_lost("idgen_heartbeat", &holding(), Some(&row("10.0.0.9", 9090, 4, None)));
        assert_eq!(err.sqlstate.code(), "55000");
        assert_eq!(
            err.message,
            "idgen_heartbeat: machine id 5 of service \"orders\" is no longer held by 10.0.0.5:8080 at version 3"
        );
        assert_eq!(
            err.detail.as_deref(),
            Some("It is now held by 10.0.0.9:9090 at version 4, last seen 2026-11-29T08:00:00.000000Z.")
        );
        assert!(err.hint.unwrap().contains("exit"));
    }

    #[test]
    fn ownership_lost_says_when_the_row_is_gone_or_released() {
        let gone = ownership_lost("idgen_heartbeat", &holding(), None);
        assert_eq!(gone.detail.as_deref(), Some("The registry has no row for machine id 5 of service \"orders\"."));
        let released = ownership_lost(
            "idgen_heartbeat",
            &holding(),
            Some(&row("10.0.0.5", 8080, 4, Some("2026-11-29T08:01:00Z"))),
        );
        assert_eq!(
            released.detail.as_deref(),
            Some("It was released at 2026-11-29T08:01:00Z and is at version 4 now.")
        );
        // Same identity, a newer version and not released: a newer claim by the same host and port.
        let reclaimed = ownership_lost("idgen_heartbeat", &holding(), Some(&row("10.0.0.5", 8080, 4, None)));
        assert!(reclaimed.detail.unwrap().starts_with("It is now held by 10.0.0.5:8080 at version 4"));
    }

    #[test]
    fn release_of_what_is_not_held_is_a_warning() {
        let w = release_not_held(&holding(), None);
        assert_eq!(w.sqlstate, SqlState::Warning);
        assert!(w.message.starts_with("idgen_release: machine id 5"));
        assert!(w.hint.unwrap().starts_with("Nothing was changed"));
    }

    #[test]
    fn exhaustion_names_service_count_and_least_recently_seen_holder() {
        let (err, alert) = exhausted(
            "idgen_claim",
            &node("10.0.0.1", 1),
            1024,
            &Pool { first: 0, last: 1023 },
            &Pool { first: 0, last: 1023 },
            3600,
            Some(&row("10.0.0.7", 8080, 2, None)),
        );
        assert_eq!(err.sqlstate.code(), "53000");
        assert_eq!(err.message, "idgen_claim: no machine id is free for service \"orders\"");
        let detail = err.detail.unwrap();
        assert!(detail.starts_with("1024 of 1024 machine ids (0 to 1023: the service's pool) are held"), "{detail}");
        assert!(detail.contains("machine id 5 at 10.0.0.7:8080, idle 1h 3m"), "{detail}");
        assert!(err.hint.unwrap().starts_with("Someone must look"));
        assert_eq!(alert.payload["event"], "exhausted");
        assert_eq!(alert.payload["held"], 1024);
        assert_eq!(alert.payload["previous_holder"]["host"], "10.0.0.7");
        assert_eq!(alert.payload["idle_seconds"], 3780);
    }

    #[test]
    fn exhaustion_hint_quotes_the_service_literal_safely() {
        let claimant = NodeIdentity { service: "o'brien".into(), host: "::1".into(), port: 1, backend_slot: None };
        let (err, _) = exhausted(
            "idgen_claim",
            &claimant,
            1,
            &Pool { first: 0, last: 0 },
            &Pool { first: 0, last: 255 },
            60,
            None,
        );
        assert!(err
            .detail
            .as_deref()
            .unwrap()
            .starts_with("1 of 1 machine ids (0 to 0: the service's pool within idgen.machine_id_range) are held"));
        assert!(err.hint.unwrap().contains("service = 'o''brien'"));
    }

    #[test]
    fn idle_1h_alert_carries_new_and_previous_holder() {
        let alert = takeover_alert(
            "idgen_claim",
            Outcome::Idle1h,
            &node("2001:db8::9", 9090),
            5,
            8,
            &row("10.0.0.7", 8080, 7, None),
        );
        assert_eq!(alert.payload["event"], "idle_1h_takeover");
        assert_eq!(
            alert.message,
            "idgen_claim: took back machine id 5 of service \"orders\" from 10.0.0.7:8080, idle only 1h 3m"
        );
        let p = &alert.payload;
        assert_eq!((p["service"].as_str(), p["machine_id"].as_i64()), (Some("orders"), Some(5)));
        assert_eq!(p["holder"], json!({"host": "2001:db8::9", "port": 9090, "version": 8}));
        assert_eq!(p["previous_holder"]["version"], 7);
        assert_eq!(p["idle_seconds"], 3780);
    }

    #[test]
    fn read_only_errors_say_where_and_what_to_do() {
        let standby = read_only("idgen_heartbeat", true);
        assert_eq!(
            (standby.sqlstate.code(), standby.message.as_str()),
            ("25006", "idgen_heartbeat: cannot write the registry on a standby server")
        );
        assert_eq!(standby.hint.as_deref(), Some("Call it on the primary."));
        assert!(read_only("idgen_claim", false).message.ends_with("in a read-only transaction"));
    }

    #[test]
    fn ipv6_endpoints_are_bracketed() {
        assert_eq!(node_name("::1", 80, None), "[::1]:80");
        assert_eq!(node_name("10.0.0.1", 80, None), "10.0.0.1:80");
    }

    #[test]
    fn generator_errors_name_the_cause_and_carry_their_sqlstate() {
        let behind = clock_behind("idgen_next_id", 2_500, 2_000);
        assert_eq!(behind.sqlstate.code(), "58000");
        assert_eq!(behind.message, "idgen_next_id: the server clock is 2500 ms behind the last ID this backend issued");
        assert!(behind.detail.unwrap().contains("idgen.max_clock_backward (2000 ms)"));
        let past = time_outside_layout("idgen_min_id", "ts", Ok(0), &Layout::DEFAULT);
        assert_eq!(past.sqlstate.code(), "22008");
        assert_eq!(
            past.detail.as_deref(),
            Some("Got 1970-01-01T00:00:00.000Z. IDs can stamp times from 2025-01-01T00:00:00.000Z to 2094-09-07T15:47:35.551Z.")
        );
        let before = time_outside_layout("idgen_min_id", "ts", Err("-infinity"), &Layout::DEFAULT);
        assert!(before.detail.unwrap().starts_with("Got -infinity. "));
        assert_eq!(negative_id("idgen_decode", -1).sqlstate.code(), "22003");
        let ro = no_lease_read_only("idgen_next_id", "orders", false);
        assert_eq!(ro.sqlstate.code(), "25006");
        assert!(ro.message.ends_with("cannot claim one in a read-only transaction"), "{}", ro.message);
        let prep = prepare_after_registry_write(&["idgen_claim".to_owned(), "idgen_release".to_owned()]);
        assert_eq!(prep.sqlstate.code(), "0A000");
        assert!(prep.detail.unwrap().starts_with("The transaction called idgen_claim, idgen_release."));
    }

    #[test]
    fn backend_holders_carry_their_slot_in_alerts() {
        let mut previous = row("127.0.0.1", 5432, 3, None);
        previous.backend_slot = Some(12);
        let claimant = NodeIdentity { backend_slot: Some(4), ..node("127.0.0.1", 5432) };
        let alert = takeover_alert("idgen_next_id", Outcome::Idle1h, &claimant, 5, 4, &previous);
        assert!(alert.message.contains("from backend slot 12 of 127.0.0.1:5432"), "{}", alert.message);
        assert_eq!(alert.payload["holder"]["backend_slot"], 4);
        assert_eq!(alert.payload["previous_holder"]["backend_slot"], 12);
    }

    #[test]
    fn watermark_errors_name_the_id_its_watermark_and_a_safe_way_on() {
        let ahead = WatermarkAhead {
            machine_id: 3,
            bound_unix_ms: 1_796_000_000_123,
            now_unix_ms: 1_796_000_000_123 - 3_600_000,
            tolerance_ms: 2_000,
            held_since_unix_ms: None,
        };
        let claimant = NodeIdentity { backend_slot: Some(4), ..node("127.0.0.1", 5432) };
        let err = watermark_ahead("idgen_next_id", &claimant, &ahead);
        assert_eq!(err.sqlstate.code(), "55000");
        assert_eq!(
            err.message,
            "idgen_next_id: machine id 3 of service \"orders\" cannot be used before 2026-11-30T00:53:20.123Z, and no other machine id is free"
        );
        assert!(err.detail.unwrap().contains("3600000 ms ahead of the server clock (2026-11-29T23:53:20.123Z)"));
        let hint = err.hint.unwrap();
        assert!(hint.contains("Do not delete the row") && !hint.contains("reconnect"), "{hint}");
        let moved = moved_past_watermark("idgen_next_id", &claimant, &ahead, 9);
        assert_eq!(moved.sqlstate, SqlState::Warning);
        assert!(
            moved.message.ends_with("backend slot 4 of 127.0.0.1:5432 claimed machine id 9 instead"),
            "{}",
            moved.message
        );
    }

    #[test]
    fn a_claim_beside_a_live_holder_of_its_identity_says_so() {
        let now = 1_796_000_000_000;
        let ahead = WatermarkAhead {
            machine_id: 0,
            bound_unix_ms: now + 3_300_000,
            now_unix_ms: now,
            tolerance_ms: 2_000,
            held_since_unix_ms: Some(now - 5_000),
        };
        let moved = moved_past_watermark("idgen_claim", &node("10.0.0.5", 8080), &ahead, 2);
        assert!(moved.message.ends_with("10.0.0.5:8080 claimed machine id 2 instead"), "{}", moved.message);
        let detail = moved.detail.unwrap();
        assert!(detail.contains("held by this identity, last seen at 2026-11-30T00:53:15.000Z"), "{detail}");
        assert!(detail.ends_with("once its lease has ended."), "{detail}");
        assert!(moved.hint.unwrap().contains("next heartbeat fails with 55000"));
    }

    #[test]
    fn a_library_of_another_version_says_how_to_update() {
        let err = version_mismatch("0.3.0", "0.5.0", &["0.5.0", "0.4.0"]);
        assert_eq!(err.sqlstate.code(), "55000");
        assert_eq!(
            err.message,
            "idgen: this database has version 0.3.0 of the extension, but the server runs its library 0.5.0"
        );
        assert!(err.detail.as_deref().unwrap().contains("versions 0.5.0 and 0.4.0 only"));
        let otherwise = declared_otherwise("idgen_heartbeat", 5, 6);
        assert_eq!(otherwise.sqlstate.code(), "55000");
        assert!(otherwise.hint.unwrap().contains("ALTER EXTENSION idgen UPDATE"));
        let why = crate::input::node_host_setting("db1.internal").unwrap_err();
        let configured = configured_value_refused("idgen.node_host", "db1.internal", &why);
        assert_eq!(configured.sqlstate.code(), "22023");
        assert!(configured.detail.unwrap().starts_with(
            "The configuration sets it to \"db1.internal\": setting \"idgen.node_host\" is not an IP address"
        ));
        let refusal = crate::ClaimPolicy { takeover_idle_1h_secs: 2 * 86_400, ..crate::ClaimPolicy::DEFAULT }
            .validate()
            .unwrap_err();
        let warning = settings_contradict(&refusal);
        assert_eq!(warning.sqlstate.code(), "01000");
        let detail = warning.detail.unwrap();
        assert!(detail.contains("must be longer than idgen.takeover_idle_1h (2d)"), "{detail}");
        assert_eq!(err.hint.as_deref(), Some("Run ALTER EXTENSION idgen UPDATE in this database."));
    }

    #[test]
    fn a_refused_drop_names_what_may_still_be_stamped_and_until_when() {
        let shown = [
            StillStamping {
                service: "orders".into(),
                machine_id: 3,
                holder: "10.0.0.5:8080".into(),
                until_unix_ms: 1_796_000_000_123,
            },
            StillStamping {
                service: "shop".into(),
                machine_id: 0,
                holder: "backend slot 4 of 127.0.0.1:5432 (pid 77)".into(),
                until_unix_ms: 1_796_000_000_000,
            },
        ];
        let err = drop_refused("DROP EXTENSION", 3, &shown);
        assert_eq!(err.sqlstate.code(), "55006");
        assert_eq!(err.message, "DROP EXTENSION: the idgen registry still guards machine ids that may be stamped");
        let detail = err.detail.unwrap();
        assert!(detail.starts_with("3 machine ids may be stamped until 2026-11-30T00:53:20.123Z at the latest: service \"orders\" machine id 3 (10.0.0.5:8080) until 2026-11-30T00:53:20.123Z; service \"shop\""), "{detail}");
        assert!(detail.contains("; and others. A registry created afterwards"), "{detail}");
        assert!(err.hint.unwrap().contains("ALTER EVENT TRIGGER idgen_drop_guard DISABLE"));
        let one = drop_refused("DROP SCHEMA", 1, &shown[..1]);
        assert!(one.detail.unwrap().starts_with("1 machine id may be stamped"));
    }

    #[test]
    fn no_hint_advises_a_reconnect_that_would_reissue_time() {
        let behind = clock_behind("idgen_next_id", 10_000, 2_000);
        assert!(!behind.hint.unwrap().contains(", or reconnect"));
    }

    #[test]
    fn listeners_hear_no_addresses() {
        let alert = takeover_alert(
            "idgen_claim",
            Outcome::Idle1h,
            &node("10.0.0.9", 9090),
            5,
            8,
            &row("10.0.0.7", 8080, 7, None),
        );
        let heard = alert.for_listeners();
        assert_eq!(
            heard,
            json!({"event": "idle_1h_takeover", "service": "orders", "machine_id": 5, "idle_seconds": 3780})
        );
        assert!(alert.payload["previous_holder"]["host"] == "10.0.0.7", "the log keeps them");
    }
}
