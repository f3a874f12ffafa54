//! The registry's SQL functions. Each validates its arguments, checks that the
//! role acting now may act for the service, reads the settings, and hands over
//! to `claim` or `store` with the extension owner's rights
//! (`privilege::as_extension_owner`). They are not SECURITY DEFINER: the role
//! checked is the caller's own, after `SET ROLE` or inside another role's
//! SECURITY DEFINER function. Callers need no right on `system_nodes`.
//!
//! They write in the caller's transaction: the client contract calls them in
//! transactions of their own. PREPARE TRANSACTION after any of them ran (a refused
//! release too: it locks the table to look) is refused, so that no prepared
//! transaction keeps a node's row, a guard or a lock on the registry.

use super::access;
use super::claim::{claim, Refused};
use super::layouts;
use super::prepare_guard;
use super::store;
use super::writer;
use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::diagnostics::alerts;
use crate::durability;
use crate::errors::{or_raise, raise, report};
use crate::history::{self, Who};
use crate::privilege::as_extension_owner;
use crate::settings::{self, claim_policy};
use idgen_core::format::iso_utc;
use idgen_core::generator::Clock;
use idgen_core::history::EventKind;
use idgen_core::watermark::HolderKind;
use idgen_core::{input, messages, watermark, Layout};
use pgrx::datum::{Inet, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use pgrx::{pg_sys, PgLogLevel};

/// Refuses before any work when the registry cannot be written here, with a
/// clearer message than the UPDATE's own.
fn ensure_registry_writable(function: &str) {
    // SAFETY: plain reads of backend-local state.
    let (on_standby, read_only) = unsafe { (pg_sys::RecoveryInProgress(), pg_sys::XactReadOnly) };
    if on_standby || read_only {
        raise(messages::read_only(function, on_standby));
    }
}

/// Refuses (42501) `role` (the one acting at the call, taken before switching to the extension
/// owner) if it may not act for `service`: what it may see of other nodes (the DETAILs of
/// fencing and releases) is its own service's.
fn authorize_service_caller(client: &mut SpiClient, function: &str, role: pg_sys::Oid, service: &str) {
    access::authorize(client, function, HolderKind::Service, role, service);
}

/// Claims a machine id for a service node; see the README's client contract.
#[pg_extern(volatile, parallel_unsafe)]
fn idgen_claim(
    service: Option<&str>,
    host: Option<Inet>,
    port: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(machine_id, i32),
        name!(version, i64),
        name!(outcome, String),
        name!(lease_until, TimestampWithTimeZone),
        name!(not_before, TimestampWithTimeZone),
    ),
> {
    claim_for_node("idgen_claim", service, host, port, None)
}

/// Claims the machine id `machine_id` for a service node that already uses it (a fleet adopting
/// the ids it computes or pins): granted only if it is free, the node's own, or takeable as any
/// claim takes one back; refused with its holder named otherwise (55006).
#[pg_extern(volatile, parallel_unsafe, name = "idgen_claim")]
fn idgen_claim_machine_id(
    service: Option<&str>,
    host: Option<Inet>,
    port: Option<i32>,
    machine_id: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(machine_id, i32),
        name!(version, i64),
        name!(outcome, String),
        name!(lease_until, TimestampWithTimeZone),
        name!(not_before, TimestampWithTimeZone),
    ),
> {
    const F: &str = "idgen_claim";
    let wanted = or_raise(input::machine_id_argument(F, "machine_id", machine_id));
    claim_for_node(F, service, host, port, Some(wanted))
}

#[allow(clippy::type_complexity)]
fn claim_for_node(
    function: &'static str,
    service: Option<&str>,
    host: Option<Inet>,
    port: Option<i32>,
    wanted: Option<u16>,
) -> TableIterator<'static, (i32, i64, String, TimestampWithTimeZone, TimestampWithTimeZone)> {
    let f = function;
    ensure_registry_writable(f);
    // Its reads of the registry (the tombstones, the never-registered ids) would see the
    // transaction's snapshot: a row deleted after it leaves a tombstone the claim cannot see.
    super::refuse_a_transaction_snapshot(|| messages::claim_needs_read_committed(f));
    let node = or_raise(input::node_identity(f, service, host.as_deref(), port));
    let settings = or_raise(settings::claim_settings());
    let role = access::acting_role();
    let who = Who::now(role);
    let granted = as_extension_owner(|| {
        Spi::connect_mut(|client| {
            authorize_service_caller(client, f, role, &node.service);
            let recorded = ready_service(client, f, &node.service);
            prepare_guard::wrote_in_transaction(f);
            claim(client, f, &node, &settings, &who, &recorded, wanted).map_err(|refused| {
                let Refused { error, event, notices } = refused;
                alerts::deliver(&notices, false);
                if let Some(event) = event {
                    writer::record_refusal(client, event);
                }
                error
            })
        })
    });
    let granted = or_raise(granted);
    alerts::deliver(&granted.notices, true);
    let c = granted.claim;
    let not_before = timestamptz(c.not_before_unix_ms).expect("claim times fit timestamptz");
    TableIterator::once((c.machine_id, c.version, c.outcome.label().to_owned(), c.lease_until, not_before))
}

/// The layout of `service`, readied for claims first if it is not yet (its guard rows created and
/// its layout fixed, in a transaction of their own, so that no claim ever waits for another
/// session's uncommitted guard and no layout changes under a claim; see `idgen_core::guard`).
/// Claims run at READ COMMITTED, so the next read sees them; should they still be missing (not
/// expected), the caller is told to retry (`40001`).
fn ready_service(client: &mut SpiClient, function: &str, service: &str) -> layouts::Recorded {
    if let Some(recorded) = layouts::ready(client, service) {
        return recorded;
    }
    super::writer::prepare_service(function, service);
    layouts::ready(client, service).unwrap_or_else(|| raise(messages::first_claim_must_retry(function, service)))
}

/// Checks a watermark a node reports: infinite ones, and ones after the last time an ID of the
/// service's layout can carry (the node's clock is wrong and it stamped nothing that late), are
/// refused before anything is written; one far ahead of the server clock is kept, with a WARNING.
fn reported_watermark(
    function: &str,
    layout: &Layout,
    machine_id: i32,
    issued_until: Option<TimestampWithTimeZone>,
) -> Option<TimestampWithTimeZone> {
    let reported = issued_until?;
    if reported.is_infinity() || reported.is_neg_infinity() {
        raise(messages::infinite_watermark(function));
    }
    if unix_ms(reported) > layout.last_unix_ms() {
        raise(messages::watermark_beyond_layout(function, unix_ms(reported), layout));
    }
    if let Some(warning) =
        watermark::reported_far_ahead(function, machine_id, unix_ms(reported), SystemClock.now_unix_ms())
    {
        report(warning, PgLogLevel::WARNING);
    }
    Some(reported)
}

/// 0001-01-01T00:00:00Z.
const YEAR_1_UNIX_MS: i64 = -62_135_596_800_000;

/// Warns when a report is behind the watermark the registry held (see
/// `watermark::reported_behind`), and records it in the history (once a minute per service).
/// `held_now` is the watermark after the report: the greater of the report and the one held before,
/// so a report behind that one by more than the allowance is behind this one by as much.
fn report_behind(
    client: &mut SpiClient,
    function: &str,
    held: &input::Holding,
    who: &Who,
    reported: Option<TimestampWithTimeZone>,
    held_now: TimestampWithTimeZone,
) {
    let Some(reported) = reported else { return };
    let now = SystemClock.now_unix_ms();
    let Some(warning) =
        watermark::reported_behind(function, held.machine_id, unix_ms(reported), unix_ms(held_now), now)
    else {
        return;
    };
    if crate::privilege::installed_history_records_watermark_behind() {
        let mut event = history::event(EventKind::WatermarkBehind, &held.node, who);
        event.machine_id = Some(held.machine_id);
        event.version = Some(held.version);
        // A time before year 1 has no ISO form Postgres reads back: the DETAIL shows it.
        event.issued_until = (unix_ms(reported) >= YEAR_1_UNIX_MS).then(|| iso_utc(unix_ms(reported)));
        event.detail = Some(warning.one_line());
        history::record_refusal_here(client, &event);
    }
    report(warning, PgLogLevel::WARNING);
}

/// Renews a claim, with what the node's generator reports; raises 55000 when the caller no longer
/// owns the machine id.
#[pg_extern(volatile, parallel_unsafe, name = "idgen_heartbeat")]
#[allow(clippy::too_many_arguments)]
fn node_heartbeat_reporting(
    service: Option<&str>,
    machine_id: Option<i32>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: default!(Option<TimestampWithTimeZone>, "NULL"),
    clock_backward_waits: default!(Option<i64>, "NULL"),
    clock_backward_refusals: default!(Option<i64>, "NULL"),
    sequence_exhaustions: default!(Option<i64>, "NULL"),
) -> TimestampWithTimeZone {
    const F: &str = "idgen_heartbeat";
    let counts =
        or_raise(input::generator_counts(F, clock_backward_waits, clock_backward_refusals, sequence_exhaustions));
    heartbeat(service, machine_id, host, port, version, issued_until, Some(counts))
}

/// `idgen_heartbeat` as the SQL of 0.4.0 to 0.5.1 declares it: six arguments, under this symbol
/// (0.5.x) or `idgen_heartbeat_wrapper` (0.4.0, src/earlier_symbols.rs). It reports no counts.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn node_heartbeat(
    service: Option<&str>,
    machine_id: Option<i32>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: Option<TimestampWithTimeZone>,
) -> TimestampWithTimeZone {
    heartbeat(service, machine_id, host, port, version, issued_until, None)
}

/// Renews a claim: the registry keeps the node's reports (`counts`, and its clock offset from
/// `issued_until`) where its objects have the columns (0.6.0 on).
fn heartbeat(
    service: Option<&str>,
    machine_id: Option<i32>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: Option<TimestampWithTimeZone>,
    counts: Option<input::GeneratorCounts>,
) -> TimestampWithTimeZone {
    const F: &str = "idgen_heartbeat";
    ensure_registry_writable(F);
    let held = or_raise(input::holding(F, service, machine_id, host.as_deref(), port, version));
    let policy = or_raise(claim_policy());
    let role = access::acting_role();
    let who = Who::now(role);
    let renewed = as_extension_owner(|| {
        Spi::connect_mut(|client| {
            authorize_service_caller(client, F, role, &held.node.service);
            let layout = layouts::recorded_layout(client, &held.node.service);
            or_raise(input::machine_id_in_layout(F, &held.node.service, &layout, held.machine_id));
            let reported = reported_watermark(F, &layout, held.machine_id, issued_until);
            prepare_guard::wrote_in_transaction(F);
            durability::make_commit_durable();
            let lease_secs = policy.lease_secs();
            let counts = counts.filter(|_| crate::privilege::installed_keeps_fleet_reports());
            match store::heartbeat(client, &held, lease_secs, policy.takeover_idle_1h_secs, reported, counts) {
                Some(renewed) => {
                    report_behind(client, F, &held, &who, reported, renewed.watermark);
                    Ok(renewed.lease_until)
                }
                None => {
                    let now = store::current_row(client, &held.node.service, held.machine_id);
                    let error = messages::ownership_lost(F, &held, now.as_ref());
                    writer::record_refusal(client, history::lost_event(&held, &error, &who));
                    Err(error)
                }
            }
        })
    });
    or_raise(renewed)
}

/// Releases a machine id on graceful shutdown; false (with a WARNING) when not held.
#[pg_extern(volatile, parallel_unsafe, name = "idgen_release")]
fn node_release(
    service: Option<&str>,
    machine_id: Option<i32>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> bool {
    const F: &str = "idgen_release";
    ensure_registry_writable(F);
    let held = or_raise(input::holding(F, service, machine_id, host.as_deref(), port, version));
    let policy = or_raise(claim_policy());
    let role = access::acting_role();
    let who = Who::now(role);
    as_extension_owner(|| {
        Spi::connect_mut(|client| {
            authorize_service_caller(client, F, role, &held.node.service);
            let layout = layouts::recorded_layout(client, &held.node.service);
            or_raise(input::machine_id_in_layout(F, &held.node.service, &layout, held.machine_id));
            let reported = reported_watermark(F, &layout, held.machine_id, issued_until);
            // Even a release of an id not held writes (it locks the table to look, and may record
            // the refusal): no prepared transaction may keep that.
            prepare_guard::wrote_in_transaction(F);
            durability::make_commit_durable();
            let (margin, lease, takeover) =
                (policy.lease_safety_margin_secs, policy.lease_secs(), policy.takeover_idle_1h_secs);
            if let Some(released) = store::release(client, &held, margin, reported, lease, takeover) {
                report_behind(client, F, &held, &who, reported, released.issued_until);
                let mut event = history::event(EventKind::Release, &held.node, &who);
                event.machine_id = Some(held.machine_id);
                event.version = Some(released.version);
                event.issued_until = Some(iso_utc(unix_ms(released.issued_until)));
                history::record(client, &event);
                return true;
            }
            // Not held: the registry is left as it is, and the refusal recorded in this
            // transaction (which returns normally), once a minute per service and kind.
            let now = store::current_row(client, &held.node.service, held.machine_id);
            let warning = messages::release_not_held(&held, now.as_ref());
            history::record_refusal_here(client, &history::lost_event(&held, &warning, &who));
            report(warning, PgLogLevel::WARNING);
            false
        })
    })
}
