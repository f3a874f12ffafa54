//! A backend's leases on machine ids, one per service.
//!
//! Every registry write behind a lease (the claim, and each renewal of its
//! window) commits in a transaction of its own before the backend issues an ID
//! under it (the edge's `registry::autonomous`). No rollback of the caller's
//! transaction or of a savepoint can therefore take back a lease, or the window
//! that covers an ID: what a lease here holds is what the registry committed.

use crate::generator::{Clock, Generator, Stop};
use crate::input::{Holding, NodeIdentity};
use crate::layout::Layout;
use serde::{Deserialize, Serialize};

/// What the registry granted or confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terms {
    /// The layout of the service, fixed at its first claim: what the IDs of this lease are cut by.
    pub layout: Layout,
    pub machine_id: u16,
    pub version: i64,
    /// The registry incarnation the claim was made in; a lease check in another fails.
    pub registry_epoch: i64,
    /// When the row was claimed (the claim's `last_seen`), Unix ms.
    pub claimed_at_unix_ms: i64,
    /// No ID may be stamped at or before it: after the claim and after every
    /// timestamp an earlier holder of the machine id may have stamped.
    pub not_before_unix_ms: i64,
    /// The row's `lease_until`: no ID may be stamped at or after it.
    pub lease_until_unix_ms: i64,
    /// The watermark the registry holds (`issued_until`): no ID may be stamped at or after it.
    pub issued_until_unix_ms: i64,
}

/// A lease as the backend holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLease {
    pub terms: Terms,
    /// Last time the registry confirmed the lease (claim, renewal or read), Unix ms.
    pub verified_at_unix_ms: i64,
    /// The generator's issue count when the lease began.
    issued_before: u64,
}

/// The role a lease was last authorized for, and the generation of the grants then: while
/// both are unchanged the authorization stands (see the edge's `registry::access`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authorized {
    pub role: u32,
    pub grants_generation: u64,
}

/// One service's lease in this backend.
#[derive(Clone, Debug)]
pub struct BackendLease {
    service: String,
    /// The identity the lease was claimed under (`idgen.node_host` may change later).
    node: Option<NodeIdentity>,
    /// Created by the first claim; kept across leases so IDs keep growing.
    generator: Option<Generator>,
    held: Option<HeldLease>,
    /// The clock reading from which no ID is issued before the lease is checked.
    check_due_unix_ms: i64,
    /// Whether using the service takes a grant (every service but the database's own).
    grant_needed: bool,
    /// Who may use the service without asking the registry again; `None`: ask.
    authorized: Option<Authorized>,
    /// The generation of the registry (see [`BackendLease::next_id`]) the lease was last confirmed in.
    confirmed_in: u64,
}

/// When a lease must be checked again: a heartbeat interval after its last
/// confirmation, and never later than its end or the watermark the registry
/// holds, so that every ID stays below what the registry knows.
pub fn check_due(held: &HeldLease, heartbeat_interval_ms: i64) -> i64 {
    held.verified_at_unix_ms
        .saturating_add(heartbeat_interval_ms)
        .min(held.terms.lease_until_unix_ms)
        .min(held.terms.issued_until_unix_ms)
}

impl BackendLease {
    pub fn new(service: String) -> BackendLease {
        BackendLease {
            service,
            node: None,
            generator: None,
            held: None,
            check_due_unix_ms: i64::MIN,
            grant_needed: true,
            authorized: None,
            confirmed_in: 0,
        }
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    pub fn held(&self) -> Option<&HeldLease> {
        self.held.as_ref()
    }

    /// What the registry should still show for the current lease.
    pub fn holding(&self) -> Option<Holding> {
        let (held, node) = (self.held.as_ref()?, self.node.as_ref()?);
        Some(Holding { node: node.clone(), machine_id: i32::from(held.terms.machine_id), version: held.terms.version })
    }

    /// IDs issued under the current lease.
    pub fn ids_issued(&self) -> u64 {
        match (&self.generator, &self.held) {
            (Some(g), Some(h)) => g.issued() - h.issued_before,
            _ => 0,
        }
    }

    /// Unix ms of the tick of the last ID issued under the current lease, if any.
    pub fn last_issued_unix_ms(&self) -> Option<i64> {
        (self.ids_issued() > 0).then(|| self.generator.as_ref().map(Generator::last_unix_ms)).flatten()
    }

    /// The watermark the current lease may leave when its holder stops issuing: the end of the
    /// tick of its last stamp, or its `not_before` if it stamped nothing. Every ID of this lease,
    /// and every earlier holder's (they are at or before `not_before`), is at or before it. The
    /// window the registry holds was never reached (no ID is stamped at or past it), so this
    /// lies before it but for the rest of the last tick, which a later holder skips anyway (its
    /// first ID is in the tick after its `not_before`'s).
    pub fn closing_watermark_unix_ms(&self) -> Option<i64> {
        let held = self.held.as_ref()?;
        let generator = self.generator.as_ref().filter(|_| self.ids_issued() > 0);
        let last = generator.map_or(i64::MIN, Generator::last_tick_end_unix_ms);
        Some(last.max(held.terms.not_before_unix_ms))
    }

    /// The hot path: an ID, or why not. No lease means the check is due, and so does a lease
    /// confirmed in another `registry_generation` than the current one: a token the edge moves
    /// whenever the registry may have been dropped (and created again), so that no ID is issued
    /// under the window of a registry that is gone, whatever the clock reads since.
    #[inline]
    pub fn next_id(&mut self, clock: &mut impl Clock, registry_generation: u64) -> Result<i64, Stop> {
        match &mut self.generator {
            Some(generator) if self.confirmed_in == registry_generation => {
                generator.next_id(clock, self.check_due_unix_ms)
            }
            _ => Err(Stop::LeaseCheckDue),
        }
    }

    /// The registry committed a claim by `node` that granted `terms`, asked for in
    /// `registry_generation`. The generator goes on from lease to lease (its IDs keep growing)
    /// while the service's layout stays; a layout of a registry created since (DROP and CREATE
    /// EXTENSION) starts a new one.
    pub fn claimed(
        &mut self,
        node: NodeIdentity,
        terms: Terms,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        registry_generation: u64,
    ) {
        if self.generator.as_ref().is_some_and(|g| *g.layout() != terms.layout) {
            self.generator = None;
        }
        let generator = self.generator.get_or_insert_with(|| {
            Generator::new(terms.layout, terms.machine_id, terms.not_before_unix_ms, max_backward_ms)
        });
        generator.start_lease(terms.machine_id, terms.not_before_unix_ms);
        generator.set_max_backward_ms(max_backward_ms);
        let held =
            HeldLease { terms, verified_at_unix_ms: terms.claimed_at_unix_ms, issued_before: generator.issued() };
        self.node = Some(node);
        self.confirmed_in = registry_generation;
        self.set_held(Some(held), heartbeat_interval_ms);
    }

    /// The registry confirmed the lease at `verified_at_unix_ms` with the given end and
    /// watermark, asked for in `registry_generation`: committed by a renewal, or read in a
    /// read-only transaction.
    pub fn verified(
        &mut self,
        verified_at_unix_ms: i64,
        lease_until_unix_ms: i64,
        issued_until_unix_ms: i64,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        registry_generation: u64,
    ) {
        let Some(before) = self.held else { return };
        self.confirmed_in = registry_generation;
        if let Some(generator) = &mut self.generator {
            generator.set_max_backward_ms(max_backward_ms);
        }
        let terms = Terms { lease_until_unix_ms, issued_until_unix_ms, ..before.terms };
        self.set_held(Some(HeldLease { terms, verified_at_unix_ms, ..before }), heartbeat_interval_ms);
    }

    /// The lease is gone (moved, released, or left by this backend): stop issuing from it.
    pub fn lost(&mut self) {
        self.set_held(None, 0);
    }

    /// Whether `acting` may use the service without asking the registry: no grant is needed,
    /// or the last check was for the same role and the same generation of the grants.
    #[inline]
    pub fn authorized_for(&self, acting: impl FnOnce() -> Authorized) -> bool {
        !self.grant_needed || self.authorized == Some(acting())
    }

    /// The service takes no grant (the database's own): no role is ever checked for it.
    pub fn needs_no_grant(&mut self) {
        self.grant_needed = false;
    }

    pub fn set_authorized(&mut self, authorized: Option<Authorized>) {
        self.authorized = authorized;
    }

    fn set_held(&mut self, held: Option<HeldLease>, heartbeat_interval_ms: i64) {
        self.held = held;
        self.check_due_unix_ms = held.as_ref().map_or(i64::MIN, |h| check_due(h, heartbeat_interval_ms));
    }
}

/// All of a backend's leases, one per service it has issued IDs for.
#[derive(Debug, Default)]
pub struct BackendLeases {
    leases: Vec<BackendLease>,
}

impl BackendLeases {
    pub const fn new() -> BackendLeases {
        BackendLeases { leases: Vec::new() }
    }

    /// The lease of `service`, if this backend has used the service before.
    #[inline]
    pub fn get(&mut self, service: &str) -> Option<&mut BackendLease> {
        self.leases.iter_mut().find(|l| l.service == service)
    }

    /// The lease of `service`, created empty on first use. The caller has
    /// checked the name.
    pub fn get_or_add(&mut self, service: &str) -> &mut BackendLease {
        let index = self.index_or_add(service);
        &mut self.leases[index]
    }

    /// Where the lease of `service` is kept, created empty on first use. An
    /// index stays valid for the life of the backend: leases are never removed.
    pub fn index_or_add(&mut self, service: &str) -> usize {
        self.leases.iter().position(|l| l.service == service).unwrap_or_else(|| {
            self.leases.push(BackendLease::new(service.to_owned()));
            self.leases.len() - 1
        })
    }

    /// The lease at an index from [`BackendLeases::index_or_add`].
    #[inline]
    pub fn at(&mut self, index: usize) -> &mut BackendLease {
        &mut self.leases[index]
    }

    pub fn iter(&self) -> impl Iterator<Item = &BackendLease> {
        self.leases.iter()
    }

    /// Every held lease with the watermark it may leave: what a backend records when it stops.
    pub fn closings(&self) -> Vec<(Holding, i64)> {
        self.leases.iter().filter_map(|l| Some((l.holding()?, l.closing_watermark_unix_ms()?))).collect()
    }

    /// Forgets every lease (after recording [`BackendLeases::closings`]): the next ID claims anew.
    pub fn lose_all(&mut self) {
        self.leases.iter_mut().for_each(BackendLease::lost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::EPOCH_2025_UNIX_MS;

    const T0: i64 = EPOCH_2025_UNIX_MS + 5_000_000;
    const HB: i64 = 300_000;
    const LEASE: i64 = 3_300_000;
    /// The registry generation the tests' leases are confirmed in.
    const GEN: u64 = 7;

    struct StillClock(i64);
    impl Clock for StillClock {
        fn now_unix_ms(&mut self) -> i64 {
            self.0
        }
        fn wait_until(&mut self, unix_ms: i64) {
            self.0 = self.0.max(unix_ms);
        }
    }

    fn terms(machine_id: u16, version: i64, at: i64) -> Terms {
        Terms {
            layout: Layout::DEFAULT,
            machine_id,
            version,
            registry_epoch: 1,
            claimed_at_unix_ms: at,
            not_before_unix_ms: at,
            lease_until_unix_ms: at + LEASE,
            issued_until_unix_ms: at + LEASE,
        }
    }

    fn backend() -> NodeIdentity {
        NodeIdentity { service: "orders".into(), host: "127.0.0.1".into(), port: 5432, backend_slot: Some(3) }
    }

    fn claimed() -> BackendLease {
        let mut lease = BackendLease::new("orders".into());
        lease.claimed(backend(), terms(4, 2, T0), 2_000, HB, GEN);
        lease
    }

    #[test]
    fn no_lease_means_no_id() {
        let mut lease = BackendLease::new("orders".into());
        assert_eq!(lease.next_id(&mut StillClock(T0), GEN), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_claim_issues_until_the_heartbeat_interval_then_asks_for_a_check() {
        let mut lease = claimed();
        assert!(lease.next_id(&mut StillClock(T0 + 1), GEN).is_ok());
        assert!(lease.next_id(&mut StillClock(T0 + HB - 1), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + HB), GEN), Err(Stop::LeaseCheckDue));
        assert_eq!(lease.ids_issued(), 2);
        // A committed renewal moves the deadline on.
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, GEN);
        assert!(lease.next_id(&mut StillClock(T0 + HB), GEN).is_ok());
    }

    #[test]
    fn a_read_verification_never_extends_past_the_lease_end() {
        let mut lease = claimed();
        // Read-only checks confirm ownership but cannot move lease_until.
        lease.verified(T0 + LEASE - 10, T0 + LEASE, T0 + LEASE, 2_000, HB, GEN);
        assert!(lease.next_id(&mut StillClock(T0 + LEASE - 1), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + LEASE), GEN), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_lost_lease_issues_nothing_until_claimed_again() {
        let mut lease = claimed();
        lease.next_id(&mut StillClock(T0 + 1), GEN).unwrap();
        lease.lost();
        assert!(lease.held().is_none());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 2), GEN), Err(Stop::LeaseCheckDue));
        assert_eq!(lease.closing_watermark_unix_ms(), None, "a lost lease leaves nothing to record");
    }

    #[test]
    fn ids_keep_growing_across_leases() {
        let mut lease = claimed();
        let first = lease.next_id(&mut StillClock(T0 + 50), GEN).unwrap();
        lease.lost();
        // Re-claimed with the same machine id and an earlier-looking claim time.
        lease.claimed(backend(), terms(4, 3, T0 + 10), 2_000, HB, GEN);
        let second = lease.next_id(&mut StillClock(T0 + 50), GEN).unwrap();
        assert!(second > first);
        assert_eq!(lease.ids_issued(), 1);
        assert_eq!(lease.last_issued_unix_ms(), Some(T0 + 51));
    }

    #[test]
    fn a_closing_lease_leaves_its_last_stamp_or_its_not_before() {
        let mut lease = claimed();
        assert_eq!(lease.closing_watermark_unix_ms(), Some(T0), "nothing stamped: not_before");
        lease.next_id(&mut StillClock(T0 + 700), GEN).unwrap();
        lease.next_id(&mut StillClock(T0 + 900), GEN).unwrap();
        assert_eq!(lease.closing_watermark_unix_ms(), Some(T0 + 900));
        // Never below not_before, which covers the earlier holders of the id.
        let mut later = BackendLease::new("orders".into());
        let t = Terms { not_before_unix_ms: T0 + 5_000, ..terms(4, 2, T0) };
        later.claimed(backend(), t, 2_000, HB, GEN);
        assert_eq!(later.closing_watermark_unix_ms(), Some(T0 + 5_000));
    }

    #[test]
    fn leases_are_kept_per_service_and_closed_together() {
        let mut all = BackendLeases::new();
        all.get_or_add("a").claimed(backend(), terms(1, 1, T0), 2_000, HB, GEN);
        all.get_or_add("b");
        assert!(all.get("a").unwrap().held().is_some());
        assert!(all.get("b").unwrap().held().is_none());
        assert!(all.get("c").is_none());
        let b = all.index_or_add("b");
        assert_eq!((b, all.index_or_add("c"), all.at(b).service()), (1, 2, "b"));
        let holding = all.get("a").unwrap().holding().unwrap();
        assert_eq!((holding.machine_id, holding.version, holding.node.backend_slot), (1, 1, Some(3)));
        let closings = all.closings();
        assert_eq!(closings.len(), 1, "only held leases have something to record");
        assert_eq!((closings[0].0.machine_id, closings[0].1), (1, T0));
        all.lose_all();
        assert_eq!(all.iter().count(), 3, "losing leases keeps the services");
        assert!(all.iter().all(|l| l.held().is_none()));
    }

    #[test]
    fn an_authorization_stands_for_its_role_and_generation_only() {
        let mut lease = BackendLease::new("a".into());
        let checked = Authorized { role: 10, grants_generation: 3 };
        assert!(!lease.authorized_for(|| checked), "nobody is authorized before a check");
        lease.set_authorized(Some(checked));
        assert!(lease.authorized_for(|| checked));
        assert!(!lease.authorized_for(|| Authorized { role: 11, ..checked }), "another role (SET ROLE) asks again");
        assert!(!lease.authorized_for(|| Authorized { grants_generation: 4, ..checked }), "so do changed grants");
        let mut own = BackendLease::new("shop".into());
        own.needs_no_grant();
        assert!(own.authorized_for(|| unreachable!("the database's own service asks nobody")));
    }

    #[test]
    fn no_id_is_stamped_at_or_past_the_watermark_the_registry_holds() {
        // The registry recorded a window of 10 ms: the backend must check (and write a new one) first.
        let mut lease = BackendLease::new("orders".into());
        let terms = Terms { issued_until_unix_ms: T0 + 10, ..terms(4, 2, T0) };
        lease.claimed(backend(), terms, 2_000, HB, GEN);
        assert!(lease.next_id(&mut StillClock(T0 + 9), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 10), GEN), Err(Stop::LeaseCheckDue));
        // A write moved the watermark on; a read-only check that finds it behind its lease end stops there too.
        lease.verified(T0 + 10, T0 + 10 + LEASE, T0 + 30, 2_000, HB, GEN);
        assert!(lease.next_id(&mut StillClock(T0 + 29), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 30), GEN), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_lease_stamps_strictly_after_its_not_before() {
        // An earlier holder may have stamped up to T0 + 1500: the backend waits that out.
        let mut lease = BackendLease::new("orders".into());
        let terms = Terms { not_before_unix_ms: T0 + 1_500, ..terms(4, 2, T0) };
        lease.claimed(backend(), terms, 2_000, HB, GEN);
        let mut clock = StillClock(T0);
        let id = lease.next_id(&mut clock, GEN).unwrap();
        assert_eq!(Layout::DEFAULT.decompose(id).unwrap().ticks, T0 + 1_501 - EPOCH_2025_UNIX_MS);
        assert_eq!(clock.0, T0 + 1_501, "waited, did not stamp early");
    }

    #[test]
    fn a_lease_of_an_earlier_registry_generation_issues_nothing_before_it_is_confirmed_again() {
        // The registry was dropped (and perhaps created again) since the lease was confirmed: its
        // window may still be ahead of the clock (a clock stepped back since), but it belongs to a
        // registry that is gone.
        let mut lease = claimed();
        assert!(lease.next_id(&mut StillClock(T0 + 1), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 2), GEN + 1), Err(Stop::LeaseCheckDue));
        assert_eq!(lease.ids_issued(), 1);
        // Confirmed in the current generation, it issues again.
        lease.verified(T0 + 2, T0 + 2 + LEASE, T0 + 2 + LEASE, 2_000, HB, GEN + 1);
        assert!(lease.next_id(&mut StillClock(T0 + 3), GEN + 1).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 4), GEN), Err(Stop::LeaseCheckDue));
    }
}
