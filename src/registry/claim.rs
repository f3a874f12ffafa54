//! Runs the core's claim (`idgen_core::claim`) against the registry: [`SpiStore`] runs each of
//! its statements with `store.rs`. This is the only claim path: `idgen_claim` calls it for service
//! nodes in the caller's transaction, and `writer` for each database backend's own lease, in a
//! background worker's transaction of its own.

use super::layouts::{self, Recorded};
use super::store::{self, ClaimedRow, OwnRow, OwnRowAhead};
use crate::clock::{unix_ms, SystemClock};
use crate::durability;
use crate::history::{self, Who};
use crate::settings::ClaimSettings;
use idgen_core::claim::{self as core, CapacityTurn, ClaimStore, ClaimTerms, TakeOverFrom};
use idgen_core::facts::RowFacts;
use idgen_core::fleet::CapacityLevel;
use idgen_core::generator::Clock;
use idgen_core::history::{Event, EventKind};
use idgen_core::input::NodeIdentity;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

/// A claim and what to tell people about it.
pub type Granted = core::Granted<TimestampWithTimeZone>;
pub use core::Refused;

/// Claims a machine id for `node` in the current transaction, as the extension owner (see
/// `idgen_core::claim::claim`). `recorded` is the service's layout, fixed before this transaction
/// began; `who` is the role that called idgen.
#[allow(clippy::result_large_err)]
pub fn claim(
    client: &mut SpiClient,
    function: &str,
    node: &NodeIdentity,
    settings: &ClaimSettings,
    who: &Who,
    recorded: &Recorded,
    wanted: Option<u16>,
) -> Result<Granted, Refused> {
    let service = core::Service { layout: recorded.service_layout, unregistered_from: recorded.unregistered_from };
    core::claim(&mut SpiStore { client, who }, function, node, settings, service, wanted)
}

/// The registry over SPI, in the claimant's transaction, as the extension owner.
struct SpiStore<'a, 'conn> {
    client: &'a mut SpiClient<'conn>,
    who: &'a Who,
}

impl ClaimStore for SpiStore<'_, '_> {
    type Time = TimestampWithTimeZone;

    fn unix_ms(time: TimestampWithTimeZone) -> i64 {
        unix_ms(time)
    }

    fn is_finite(time: TimestampWithTimeZone) -> bool {
        !time.is_infinity() && !time.is_neg_infinity()
    }

    fn now_unix_ms(&mut self) -> i64 {
        SystemClock.now_unix_ms()
    }

    fn make_commit_durable(&mut self) {
        durability::make_commit_durable();
    }

    fn synchronous_standby_streaming(&mut self) -> bool {
        store::synchronous_standby_streaming(self.client)
    }

    fn read_epoch(&mut self) -> i64 {
        store::read_epoch(self.client)
    }

    fn read_version_base(&mut self) -> i64 {
        store::read_version_base(self.client)
    }

    fn take_identity_guard(&mut self, node: &NodeIdentity) -> bool {
        store::take_identity_guard(self.client, node)
    }

    fn reuse_own_held_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<ClaimedRow> {
        store::reuse_own_held_row(self.client, node, terms)
    }

    fn reuse_own_row(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> OwnRow {
        store::reuse_own_row(self.client, node, terms)
    }

    fn release_own_row_outside_range(
        &mut self,
        node: &NodeIdentity,
        terms: &ClaimTerms,
    ) -> Option<(i32, TimestampWithTimeZone)> {
        store::release_own_row_outside_range(self.client, node, terms)
    }

    fn release_own_row_ahead(&mut self, node: &NodeIdentity, terms: &ClaimTerms) -> Option<OwnRowAhead> {
        store::release_own_row_ahead(self.client, node, terms)
    }

    fn unregistered_from(&mut self, service: &str) -> i32 {
        layouts::unregistered_from(self.client, service)
    }

    fn advance_unregistered_from(&mut self, service: &str, from: i32) {
        layouts::advance_unregistered_from(self.client, service, from);
    }

    fn unregistered_machine_ids(
        &mut self,
        service: &str,
        first: i32,
        last: i32,
        terms: &ClaimTerms,
    ) -> Vec<(i32, bool)> {
        store::unregistered_machine_ids(self.client, service, first, last, terms)
    }

    fn insert_unregistered(
        &mut self,
        node: &NodeIdentity,
        machine_id: i32,
        terms: &ClaimTerms,
        version_base: i64,
    ) -> Option<ClaimedRow> {
        store::insert_unregistered(self.client, node, machine_id, terms, version_base)
    }

    fn take_over(
        &mut self,
        node: &NodeIdentity,
        from: TakeOverFrom,
        terms: &ClaimTerms,
    ) -> Option<(ClaimedRow, RowFacts)> {
        store::take_over(self.client, node, from, terms)
    }

    fn soonest_tombstone_ahead(&mut self, service: &str, terms: &ClaimTerms) -> Option<(i32, TimestampWithTimeZone)> {
        store::soonest_tombstone_ahead(self.client, service, terms)
    }

    fn current_row(&mut self, service: &str, machine_id: i32) -> Option<RowFacts> {
        store::current_row(self.client, service, machine_id)
    }

    fn row_bound(&mut self, service: &str, machine_id: i32, terms: &ClaimTerms) -> Option<(i64, i64)> {
        store::row_bound(self.client, service, machine_id, terms)
    }

    fn least_recently_seen(&mut self, service: &str, terms: &ClaimTerms) -> (i64, Option<RowFacts>) {
        store::least_recently_seen(self.client, service, terms)
    }

    fn highest_registered(&mut self, service: &str, terms: &ClaimTerms) -> Option<i32> {
        store::highest_registered(self.client, service, terms)
    }

    fn count_in_use(&mut self, service: &str, cooldown_secs: i64, terms: &ClaimTerms) -> i64 {
        store::count_in_use(self.client, service, cooldown_secs, terms)
    }

    fn records_capacity_announcements(&mut self) -> bool {
        crate::privilege::installed_announces_capacity_changes()
    }

    fn capacity_announced(&mut self, service: &str) -> Option<CapacityLevel> {
        store::capacity_announced(self.client, service)
    }

    fn take_capacity_turn(&mut self, service: &str) -> CapacityTurn {
        store::take_capacity_turn(self.client, service)
    }

    fn keeps_fleet_reports(&mut self) -> bool {
        crate::privilege::installed_keeps_fleet_reports()
    }

    fn event(&mut self, kind: EventKind, node: &NodeIdentity) -> Event {
        history::event(kind, node, self.who)
    }

    fn record(&mut self, event: &Event) {
        history::record(self.client, event);
    }
}
