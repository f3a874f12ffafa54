//! The registry's SQL functions. Each validates its arguments, reads the
//! settings, and hands over to `claim` or `store`. They run as the extension
//! owner (SECURITY DEFINER, search_path pinned), so callers need EXECUTE on
//! them and a grant of the service (`idgen_grant_service` gives both), and no
//! right at all on `system_nodes`.

use super::access;
use super::claim::claim;
use super::store;
use crate::clock::{timestamptz, unix_ms, SystemClock};
use crate::diagnostics::history;
use crate::durability;
use crate::errors::{or_raise, raise, report};
use crate::settings::{self, claim_policy};
use idgen_core::generator::Clock;
use idgen_core::history::EventKind;
use idgen_core::messages::iso_utc;
use idgen_core::watermark::HolderKind;
use idgen_core::{input, messages, watermark, Layout};
use pgrx::datum::{Inet, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::Spi;
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

/// Refuses (42501) a calling role that may not act for `service`: what it may
/// see of other nodes (the DETAILs of fencing and releases) is its own service's.
fn may_act_for(function: &str, service: &str) {
    Spi::connect_mut(|client| {
        access::authorize(client, function, HolderKind::Service, access::calling_role(), service)
    });
}

/// Claims a machine id for a service node; see the README's client contract.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idgen_claim(
    service: Option<&str>,
    host: Option<Inet>,
    port: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(machine_id, i16),
        name!(version, i64),
        name!(outcome, String),
        name!(lease_until, TimestampWithTimeZone),
        name!(not_before, TimestampWithTimeZone),
    ),
> {
    const F: &str = "idgen_claim";
    ensure_registry_writable(F);
    let node = or_raise(input::node_identity(F, service, host.as_deref(), port));
    may_act_for(F, &node.service);
    let policy = or_raise(claim_policy());
    let caller = access::calling_role();
    let claimed = or_raise(claim(F, &node, &policy, settings::max_clock_backward_ms(), caller));
    let not_before = timestamptz(claimed.not_before_unix_ms).expect("claim times fit timestamptz");
    TableIterator::once((
        claimed.machine_id,
        claimed.version,
        claimed.outcome.label().to_owned(),
        claimed.lease_until,
        not_before,
    ))
}

/// Checks a watermark a node reports, against the server clock.
fn reported_watermark(function: &str, issued_until: Option<TimestampWithTimeZone>) -> Option<TimestampWithTimeZone> {
    let reported = issued_until?;
    if reported.is_infinity() || reported.is_neg_infinity() {
        raise(messages::infinite_watermark(function));
    }
    or_raise(watermark::check_reported_watermark(function, unix_ms(reported), SystemClock.now_unix_ms()));
    Some(reported)
}

/// Renews a claim; raises 55000 when the caller no longer owns the machine id.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idgen_heartbeat(
    service: Option<&str>,
    machine_id: Option<i16>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> TimestampWithTimeZone {
    const F: &str = "idgen_heartbeat";
    ensure_registry_writable(F);
    let held = or_raise(input::holding(F, &Layout::DEFAULT, service, machine_id, host.as_deref(), port, version));
    may_act_for(F, &held.node.service);
    let reported = reported_watermark(F, issued_until);
    let policy = or_raise(claim_policy());
    durability::make_commit_durable();
    Spi::connect_mut(|client| match store::heartbeat(client, &held, policy.lease_secs(), reported) {
        Some(lease_until) => lease_until,
        None => {
            let now = store::current_row(client, &held.node.service, held.machine_id);
            let error = messages::ownership_lost(F, &held, now.as_ref());
            history::record_independently(client, history::lost_event(&held, &error, access::calling_role()));
            raise(error)
        }
    })
}

/// Releases a machine id on graceful shutdown; false (with a WARNING) when not held.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idgen_release(
    service: Option<&str>,
    machine_id: Option<i16>,
    host: Option<Inet>,
    port: Option<i32>,
    version: Option<i64>,
    issued_until: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> bool {
    const F: &str = "idgen_release";
    ensure_registry_writable(F);
    let held = or_raise(input::holding(F, &Layout::DEFAULT, service, machine_id, host.as_deref(), port, version));
    may_act_for(F, &held.node.service);
    let reported = reported_watermark(F, issued_until);
    let policy = or_raise(claim_policy());
    durability::make_commit_durable();
    Spi::connect_mut(|client| {
        if let Some((version, issued_until)) = store::release(client, &held, policy.lease_safety_margin_secs, reported)
        {
            let mut event = history::event(EventKind::Release, &held.node, access::calling_role());
            event.machine_id = Some(held.machine_id);
            event.version = Some(version);
            event.issued_until = Some(iso_utc(unix_ms(issued_until)));
            history::record(client, &event);
            return true;
        }
        let now = store::current_row(client, &held.node.service, held.machine_id);
        let warning = messages::release_not_held(&held, now.as_ref());
        history::record_independently(client, history::lost_event(&held, &warning, access::calling_role()));
        report(warning, PgLogLevel::WARNING);
        false
    })
}
