//! A backend's leases on machine ids, one per service, and how they follow the
//! transactions that wrote them.
//!
//! A backend claims and verifies inside its caller's transaction. If that
//! transaction or a savepoint around the write rolls back, the registry forgets
//! the write, so the backend must forget it too: a rolled-back claim leaves no
//! lease, a rolled-back verification leaves the lease due for another check.
//! Each write is recorded with the subtransaction that made it and undone when
//! that subtransaction aborts.

use crate::generator::{Clock, Generator, Stop};
use crate::input::{Holding, NodeIdentity};
use crate::layout::Layout;

/// A Postgres subtransaction id (1 for the top-level transaction).
pub type SubXactId = u32;

/// What the registry granted or confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    pub machine_id: u16,
    pub version: i64,
    /// The registry incarnation the claim was made in; a lease check in another fails.
    pub registry_epoch: i64,
    /// When the row was claimed (the claim's `last_seen`), Unix ms.
    pub claimed_at_unix_ms: i64,
    /// No ID may be stamped at or before it: after the claim and after every
    /// timestamp an earlier holder of the machine id may have stamped.
    pub not_before_unix_ms: i64,
    /// `last_seen + lease` as the registry has it: no ID may be stamped at or after it.
    pub lease_until_unix_ms: i64,
    /// The watermark the registry holds (`issued_until`): no ID may be stamped at or after it.
    pub issued_until_unix_ms: i64,
}

/// A lease as the backend holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub terms: Terms,
    /// Last time the registry confirmed the lease (claim, heartbeat or read), Unix ms.
    pub verified_at_unix_ms: i64,
    /// The generator's issue count when the lease began.
    issued_before: u64,
}

/// How to undo one write when its subtransaction aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Undo {
    /// The write was a claim: the lease never existed.
    Forget,
    /// The write renewed the lease: go back to what was held before.
    Restore(Held),
}

/// One service's lease in this backend.
#[derive(Clone, Debug)]
pub struct BackendLease {
    service: String,
    /// The identity the lease was claimed under (`idgen.node_host` may change later).
    node: Option<NodeIdentity>,
    /// Created by the first claim; kept across leases so IDs keep growing.
    generator: Option<Generator>,
    held: Option<Held>,
    /// The clock reading from which no ID is issued before the lease is checked.
    check_due_unix_ms: i64,
    /// Writes of open (sub)transactions, innermost last, at most one per subtransaction.
    undo: Vec<(SubXactId, Undo)>,
}

/// When a lease must be checked again: a heartbeat interval after its last
/// confirmation, and never later than its end or the watermark the registry
/// holds, so that every ID stays below what the registry knows.
pub fn check_due(held: &Held, heartbeat_interval_ms: i64) -> i64 {
    held.verified_at_unix_ms
        .saturating_add(heartbeat_interval_ms)
        .min(held.terms.lease_until_unix_ms)
        .min(held.terms.issued_until_unix_ms)
}

impl BackendLease {
    pub fn new(service: String) -> BackendLease {
        BackendLease { service, node: None, generator: None, held: None, check_due_unix_ms: i64::MIN, undo: Vec::new() }
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    pub fn held(&self) -> Option<&Held> {
        self.held.as_ref()
    }

    /// What the registry should still show for the current lease.
    pub fn holding(&self) -> Option<Holding> {
        let (held, node) = (self.held.as_ref()?, self.node.as_ref()?);
        Some(Holding { node: node.clone(), machine_id: held.terms.machine_id as i16, version: held.terms.version })
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

    /// The hot path: an ID, or why not. No lease means the check is due.
    #[inline]
    pub fn next_id(&mut self, clock: &mut impl Clock) -> Result<i64, Stop> {
        match &mut self.generator {
            Some(generator) => generator.next_id(clock, self.check_due_unix_ms),
            None => Err(Stop::LeaseCheckDue),
        }
    }

    /// A claim by `node`, written by subtransaction `subxact`, granted `terms`.
    pub fn claimed(
        &mut self,
        node: NodeIdentity,
        layout: Layout,
        terms: Terms,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        subxact: SubXactId,
    ) {
        let generator = self
            .generator
            .get_or_insert_with(|| Generator::new(layout, terms.machine_id, terms.not_before_unix_ms, max_backward_ms));
        generator.start_lease(terms.machine_id, terms.not_before_unix_ms);
        generator.set_max_backward_ms(max_backward_ms);
        let held = Held { terms, verified_at_unix_ms: terms.claimed_at_unix_ms, issued_before: generator.issued() };
        // Whatever was held before is lost or superseded: undoing this claim, or any
        // (sub)transaction around it, leaves nothing.
        self.undo.clear();
        self.undo.push((subxact, Undo::Forget));
        self.node = Some(node);
        self.set_held(Some(held), heartbeat_interval_ms);
    }

    /// The registry confirmed the lease at `verified_at_unix_ms` with the given
    /// end and watermark. `wrote_in` is the subtransaction that updated the
    /// row, or `None` for a read (nothing to undo).
    #[allow(clippy::too_many_arguments)]
    pub fn verified(
        &mut self,
        verified_at_unix_ms: i64,
        lease_until_unix_ms: i64,
        issued_until_unix_ms: i64,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        wrote_in: Option<SubXactId>,
    ) {
        let Some(before) = self.held else { return };
        if let Some(subxact) = wrote_in {
            if self.undo.last().map(|(id, _)| *id) != Some(subxact) {
                self.undo.push((subxact, Undo::Restore(before)));
            }
        }
        if let Some(generator) = &mut self.generator {
            generator.set_max_backward_ms(max_backward_ms);
        }
        let terms = Terms { lease_until_unix_ms, issued_until_unix_ms, ..before.terms };
        self.set_held(Some(Held { terms, verified_at_unix_ms, ..before }), heartbeat_interval_ms);
    }

    /// The registry says the lease is gone: stop issuing from it. Nothing
    /// written in this transaction can bring it back.
    pub fn lost(&mut self) {
        self.undo.clear();
        self.set_held(None, 0);
    }

    /// Subtransaction `subxact` committed into `parent`: its writes now belong to the parent.
    pub fn subxact_committed(&mut self, subxact: SubXactId, parent: SubXactId) {
        for entry in self.undo.iter_mut().filter(|(id, _)| *id == subxact) {
            entry.0 = parent;
        }
        // One entry per subtransaction: the parent's earlier state is the one to go back to.
        let mut seen_parent = false;
        self.undo.retain(|(id, _)| {
            let keep = *id != parent || !seen_parent;
            seen_parent |= *id == parent;
            keep
        });
    }

    /// Subtransaction `subxact` rolled back: undo what it wrote. The lease is
    /// then due for a check, which claims anew if nothing is held.
    pub fn subxact_aborted(&mut self, subxact: SubXactId) {
        while let Some(&(id, undo)) = self.undo.last() {
            if id != subxact {
                break;
            }
            self.undo.pop();
            self.apply(undo);
        }
    }

    pub fn committed(&mut self) {
        self.undo.clear();
    }

    pub fn aborted(&mut self) {
        while let Some((_, undo)) = self.undo.pop() {
            self.apply(undo);
        }
    }

    /// Whether the open transaction wrote this lease (a PREPARE would strand it).
    pub fn written_in_open_transaction(&self) -> bool {
        !self.undo.is_empty()
    }

    fn apply(&mut self, undo: Undo) {
        let held = match undo {
            Undo::Forget => None,
            Undo::Restore(before) => Some(before),
        };
        // Check again before the next ID either way: the undone write may have been the last confirmation.
        self.held = held;
        self.check_due_unix_ms = i64::MIN;
    }

    fn set_held(&mut self, held: Option<Held>, heartbeat_interval_ms: i64) {
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

    pub fn subxact_committed(&mut self, subxact: SubXactId, parent: SubXactId) {
        self.leases.iter_mut().for_each(|l| l.subxact_committed(subxact, parent));
    }

    pub fn subxact_aborted(&mut self, subxact: SubXactId) {
        self.leases.iter_mut().for_each(|l| l.subxact_aborted(subxact));
    }

    pub fn committed(&mut self) {
        self.leases.iter_mut().for_each(BackendLease::committed);
    }

    pub fn aborted(&mut self) {
        self.leases.iter_mut().for_each(BackendLease::aborted);
    }

    /// Services whose lease the open transaction wrote.
    pub fn written_in_open_transaction(&self) -> Vec<String> {
        self.leases.iter().filter(|l| l.written_in_open_transaction()).map(|l| l.service.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::EPOCH_2025_UNIX_MS;

    const T0: i64 = EPOCH_2025_UNIX_MS + 5_000_000;
    const HB: i64 = 300_000;
    const LEASE: i64 = 3_300_000;

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

    fn claimed_in(subxact: SubXactId) -> BackendLease {
        let mut lease = BackendLease::new("orders".into());
        lease.claimed(backend(), Layout::DEFAULT, terms(4, 2, T0), 2_000, HB, subxact);
        lease
    }

    #[test]
    fn no_lease_means_no_id() {
        let mut lease = BackendLease::new("orders".into());
        assert_eq!(lease.next_id(&mut StillClock(T0)), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_claim_issues_until_the_heartbeat_interval_then_asks_for_a_check() {
        let mut lease = claimed_in(1);
        lease.committed();
        assert!(lease.next_id(&mut StillClock(T0 + 1)).is_ok());
        assert!(lease.next_id(&mut StillClock(T0 + HB - 1)).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + HB)), Err(Stop::LeaseCheckDue));
        assert_eq!(lease.ids_issued(), 2);
        // A write-verification moves the deadline on.
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, Some(1));
        lease.committed();
        assert!(lease.next_id(&mut StillClock(T0 + HB)).is_ok());
    }

    #[test]
    fn a_read_verification_never_extends_past_the_lease_end() {
        let mut lease = claimed_in(1);
        lease.committed();
        // Read-only checks confirm ownership but cannot move lease_until.
        lease.verified(T0 + LEASE - 10, T0 + LEASE, T0 + LEASE, 2_000, HB, None);
        assert!(lease.next_id(&mut StillClock(T0 + LEASE - 1)).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + LEASE)), Err(Stop::LeaseCheckDue));
        assert!(!lease.written_in_open_transaction());
    }

    #[test]
    fn a_rolled_back_claim_leaves_no_lease() {
        let mut lease = claimed_in(1);
        assert!(lease.next_id(&mut StillClock(T0 + 1)).is_ok());
        assert!(lease.written_in_open_transaction());
        lease.aborted();
        assert!(lease.held().is_none());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 2)), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_claim_in_a_rolled_back_savepoint_is_forgotten_but_an_outer_one_stays() {
        // Claimed in savepoint 2, rolled back to it.
        let mut lease = claimed_in(2);
        lease.subxact_aborted(2);
        assert!(lease.held().is_none());
        // Claimed in savepoint 3 which is released into 1, then an unrelated savepoint 4 aborts.
        lease.claimed(backend(), Layout::DEFAULT, terms(5, 3, T0 + 10), 2_000, HB, 3);
        lease.subxact_committed(3, 1);
        lease.subxact_aborted(4);
        assert_eq!(lease.held().map(|h| h.terms.machine_id), Some(5));
        lease.committed();
        lease.aborted(); // a later transaction aborting does not touch a committed lease
        assert_eq!(lease.held().map(|h| h.terms.version), Some(3));
        assert!(lease.next_id(&mut StillClock(T0 + 11)).is_ok());
    }

    #[test]
    fn a_committed_savepoint_claim_still_dies_with_its_transaction() {
        let mut lease = claimed_in(2);
        lease.subxact_committed(2, 1);
        lease.aborted();
        assert!(lease.held().is_none());
    }

    #[test]
    fn a_rolled_back_verification_restores_the_old_lease_due_for_a_check() {
        let mut lease = claimed_in(1);
        lease.committed();
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, Some(7));
        lease.verified(T0 + 2 * HB, T0 + 2 * HB + LEASE, T0 + 2 * HB + LEASE, 2_000, HB, Some(7));
        lease.subxact_aborted(7);
        let held = lease.held().unwrap();
        assert_eq!((held.verified_at_unix_ms, held.terms.lease_until_unix_ms), (T0, T0 + LEASE));
        assert_eq!(lease.next_id(&mut StillClock(T0 + 1)), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn nested_writes_undo_to_the_state_before_each_savepoint() {
        let mut lease = claimed_in(1);
        lease.committed();
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, Some(2)); // in savepoint 2
        lease.verified(T0 + 2 * HB, T0 + 2 * HB + LEASE, T0 + 2 * HB + LEASE, 2_000, HB, Some(3)); // in savepoint 3 inside 2
        lease.subxact_committed(3, 2);
        // Savepoint 2 now holds both writes; its abort goes back to before the first one.
        lease.subxact_aborted(2);
        assert_eq!(lease.held().unwrap().verified_at_unix_ms, T0);
        assert!(!lease.written_in_open_transaction());
    }

    #[test]
    fn a_lost_lease_stays_lost_whatever_rolls_back() {
        let mut lease = claimed_in(1);
        lease.committed();
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, Some(2));
        lease.lost();
        lease.subxact_aborted(2);
        lease.aborted();
        assert!(lease.held().is_none());
    }

    #[test]
    fn ids_keep_growing_across_a_forgotten_lease() {
        let mut lease = claimed_in(1);
        let first = lease.next_id(&mut StillClock(T0 + 50)).unwrap();
        lease.aborted();
        // Re-claimed with the same machine id and an earlier-looking claim time.
        lease.claimed(backend(), Layout::DEFAULT, terms(4, 3, T0 + 10), 2_000, HB, 1);
        let second = lease.next_id(&mut StillClock(T0 + 50)).unwrap();
        assert!(second > first);
        assert_eq!(lease.ids_issued(), 1);
        assert_eq!(lease.last_issued_unix_ms(), Some(T0 + 51));
    }

    #[test]
    fn leases_are_kept_per_service() {
        let mut all = BackendLeases::new();
        all.get_or_add("a").claimed(backend(), Layout::DEFAULT, terms(1, 1, T0), 2_000, HB, 1);
        all.get_or_add("b");
        assert!(all.get("a").unwrap().held().is_some());
        assert!(all.get("b").unwrap().held().is_none());
        assert!(all.get("c").is_none());
        let b = all.index_or_add("b");
        assert_eq!((b, all.index_or_add("c"), all.at(b).service()), (1, 2, "b"));
        let holding = all.get("a").unwrap().holding().unwrap();
        assert_eq!((holding.machine_id, holding.version, holding.node.backend_slot), (1, 1, Some(3)));
        assert_eq!(all.written_in_open_transaction(), vec!["a"]);
        all.aborted();
        assert_eq!(all.iter().count(), 3, "aborting forgets leases, not the services");
        assert!(all.iter().all(|l| l.held().is_none()));
    }

    #[test]
    fn no_id_is_stamped_at_or_past_the_watermark_the_registry_holds() {
        // The registry recorded a window of 10 ms: the backend must check (and write a new one) first.
        let mut lease = BackendLease::new("orders".into());
        let terms = Terms { issued_until_unix_ms: T0 + 10, ..terms(4, 2, T0) };
        lease.claimed(backend(), Layout::DEFAULT, terms, 2_000, HB, 1);
        lease.committed();
        assert!(lease.next_id(&mut StillClock(T0 + 9)).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 10)), Err(Stop::LeaseCheckDue));
        // A write moved the watermark on; a read-only check that finds it behind its lease end stops there too.
        lease.verified(T0 + 10, T0 + 10 + LEASE, T0 + 30, 2_000, HB, None);
        assert!(lease.next_id(&mut StillClock(T0 + 29)).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 30)), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_lease_stamps_strictly_after_its_not_before() {
        // An earlier holder may have stamped up to T0 + 1500: the backend waits that out.
        let mut lease = BackendLease::new("orders".into());
        let terms = Terms { not_before_unix_ms: T0 + 1_500, ..terms(4, 2, T0) };
        lease.claimed(backend(), Layout::DEFAULT, terms, 2_000, HB, 1);
        let mut clock = StillClock(T0);
        let id = lease.next_id(&mut clock).unwrap();
        assert_eq!(Layout::DEFAULT.decompose(id).unwrap().ticks, T0 + 1_501 - EPOCH_2025_UNIX_MS);
        assert_eq!(clock.0, T0 + 1_501, "waited, did not stamp early");
    }
}
