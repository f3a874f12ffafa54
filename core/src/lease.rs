//! A backend's leases on machine ids, one per service.
//!
//! Every registry write behind a lease (the claim, and each renewal of its
//! window) commits in a transaction of its own before the backend issues an ID
//! under it (the edge's `registry::writer`). No rollback of the caller's
//! transaction or of a savepoint can therefore take back a lease, or the window
//! that covers an ID: what a lease here holds is what the registry committed.
//!
//! A backend that disconnects leaves its leases in its slot ([`Parked`], kept in shared memory by
//! the edge), and the next backend of the slot takes them up ([`BackendLease::adopt`]) without a
//! registry write: the row, its version and its committed window are the slot's, so the lease goes
//! on as if the first backend had stayed, from after the last stamp it made.

use crate::generator::{Clock, Generator, Stop};
use crate::input::{Holding, NodeIdentity};
use crate::layout::{FieldOrder, Layout};
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

/// What confirmed a lease, as the edge names it: the registry generation (moves whenever the registry
/// may have been dropped, as this process learns of it) and the registry itself (its relation's
/// identity, the same in every process: a registry created again has another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    pub generation: u64,
    pub registry: u64,
}

/// A lease its backend left in its slot when it disconnected, for the next backend of the slot.
/// Taking it up writes nothing: the window it issues in was committed before any ID was issued
/// under it, and the row stays the slot's (its identity is the slot's), so nobody else stamps on
/// its machine id before the window's end; the next backend stamps after `stamped_until_unix_ms`,
/// which is after every ID of the lease. A process has no memory of another's invalidations, so the
/// registry is named by its identity (`registry`), which a DROP and CREATE changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    pub service: String,
    pub node: NodeIdentity,
    pub terms: Terms,
    pub verified_at_unix_ms: i64,
    /// Every ID of the lease is at or before it: [`BackendLease::closing_watermark_unix_ms`].
    pub stamped_until_unix_ms: i64,
    /// The registry the lease was confirmed in ([`Confirmation::registry`]).
    pub registry: u64,
}

impl Parked {
    /// The most bytes [`Parked::encode`] writes: a service of 64 four-byte characters and an IPv6 host.
    pub const MAX_ENCODED: usize = 1 + (2 + 4 * crate::input::SERVICE_MAX_CHARS) + (1 + 45) + 4 + 4 + 29 + 2 + 8 * 9;

    /// When the lease must be checked with the registry, whoever holds it: its window's end.
    pub fn window_end_unix_ms(&self) -> i64 {
        self.terms.lease_until_unix_ms.min(self.terms.issued_until_unix_ms)
    }

    /// The lease as bytes, for a slot's record in shared memory (no room there for a text form).
    /// `None` for what no backend's lease has: a node that is not a backend's, names too long.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let (service, host) = (self.service.as_bytes(), self.node.host.as_bytes());
        if self.node.service != self.service || service.len() > 4 * crate::input::SERVICE_MAX_CHARS || host.len() > 45 {
            return None;
        }
        let mut out = Vec::with_capacity(Parked::MAX_ENCODED);
        out.push(ENCODING);
        out.extend_from_slice(&(service.len() as u16).to_le_bytes());
        out.extend_from_slice(service);
        out.push(host.len() as u8);
        out.extend_from_slice(host);
        out.extend_from_slice(&self.node.port.to_le_bytes());
        out.extend_from_slice(&self.node.backend_slot?.to_le_bytes());
        let l = &self.terms.layout;
        out.extend_from_slice(&l.epoch_unix_ms.to_le_bytes());
        out.extend_from_slice(&l.time_unit_ms.to_le_bytes());
        for bits in [l.time_bits, l.machine_bits, l.sequence_bits] {
            out.extend_from_slice(&bits.to_le_bytes());
        }
        out.push(FieldOrder::ALL.iter().position(|o| *o == l.order)? as u8);
        out.extend_from_slice(&self.terms.machine_id.to_le_bytes());
        let t = &self.terms;
        for value in [
            t.version,
            t.registry_epoch,
            t.claimed_at_unix_ms,
            t.not_before_unix_ms,
            t.lease_until_unix_ms,
            t.issued_until_unix_ms,
            self.verified_at_unix_ms,
            self.stamped_until_unix_ms,
            self.registry as i64,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        Some(out)
    }

    /// What [`Parked::encode`] wrote, or `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Parked> {
        let mut r = Reader(bytes);
        if r.take(1)?[0] != ENCODING {
            return None;
        }
        let service_len = u16::from_le_bytes(r.array()?) as usize;
        let service = String::from_utf8(r.take(service_len)?.to_vec()).ok()?;
        let host_len = r.take(1)?[0] as usize;
        let host = String::from_utf8(r.take(host_len)?.to_vec()).ok()?;
        let port = i32::from_le_bytes(r.array()?);
        let backend_slot = Some(i32::from_le_bytes(r.array()?));
        let layout = Layout {
            epoch_unix_ms: i64::from_le_bytes(r.array()?),
            time_unit_ms: i64::from_le_bytes(r.array()?),
            time_bits: u32::from_le_bytes(r.array()?),
            machine_bits: u32::from_le_bytes(r.array()?),
            sequence_bits: u32::from_le_bytes(r.array()?),
            order: *FieldOrder::ALL.get(r.take(1)?[0] as usize)?,
        };
        let machine_id = u16::from_le_bytes(r.array()?);
        let mut next = || r.array().map(i64::from_le_bytes);
        let terms = Terms {
            layout,
            machine_id,
            version: next()?,
            registry_epoch: next()?,
            claimed_at_unix_ms: next()?,
            not_before_unix_ms: next()?,
            lease_until_unix_ms: next()?,
            issued_until_unix_ms: next()?,
        };
        let (verified_at_unix_ms, stamped_until_unix_ms, registry) = (next()?, next()?, next()? as u64);
        if !r.0.is_empty() {
            return None;
        }
        let node = NodeIdentity { service: service.clone(), host, port, backend_slot };
        Some(Parked { service, node, terms, verified_at_unix_ms, stamped_until_unix_ms, registry })
    }
}

/// The version of [`Parked::encode`]'s format: a record of another is not taken up.
const ENCODING: u8 = 1;

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

/// Why a parked lease was not taken up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAdopted {
    /// Another service's, or another identity's (`idgen.node_host` changed since).
    OtherHolder,
    /// Confirmed in a registry that is not the one there now (dropped, perhaps created again).
    OtherRegistry,
    /// This backend holds a lease of the service already.
    AlreadyHeld,
    /// Its machine id is outside the ids this server hands out now (`idgen.machine_id_range` was
    /// changed): a claim moves the slot inside them, as it moves a backend that reconnects.
    OutsideRange,
    /// The clock is further behind its last stamp than a backend waits: a claim sets the row aside
    /// and takes another machine id, rather than refuse every new connection of the slot.
    ClockBehind,
}

/// What a backend that takes up a parked lease holds it against, besides its identity.
#[derive(Clone, Debug)]
pub struct Uptake {
    pub now_unix_ms: i64,
    pub max_backward_ms: i64,
    pub heartbeat_interval_ms: i64,
    /// The machine ids this server hands out (`idgen.machine_id_range`).
    pub machine_ids: std::ops::RangeInclusive<u16>,
    /// What the backend confirms the lease in: its generation, and the registry there now.
    pub confirmed: Confirmation,
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
    /// What the lease was last confirmed in (see [`BackendLease::next_id`]).
    confirmed: Confirmation,
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
            confirmed: Confirmation::default(),
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
            Some(generator) if self.confirmed.generation == registry_generation => {
                generator.next_id(clock, self.check_due_unix_ms)
            }
            _ => Err(Stop::LeaseCheckDue),
        }
    }

    /// The registry committed a claim by `node` that granted `terms`, asked for in
    /// `confirmed`. The generator goes on from lease to lease (its IDs keep growing)
    /// while the service's layout stays; a layout of a registry created since (DROP and CREATE
    /// EXTENSION) starts a new one.
    pub fn claimed(
        &mut self,
        node: NodeIdentity,
        terms: Terms,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        confirmed: Confirmation,
    ) {
        self.begin(node, terms, terms.claimed_at_unix_ms, max_backward_ms, heartbeat_interval_ms, confirmed);
    }

    fn begin(
        &mut self,
        node: NodeIdentity,
        terms: Terms,
        verified_at_unix_ms: i64,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        confirmed: Confirmation,
    ) {
        if self.generator.as_ref().is_some_and(|g| *g.layout() != terms.layout) {
            self.generator = None;
        }
        let generator = self.generator.get_or_insert_with(|| {
            Generator::new(terms.layout, terms.machine_id, terms.not_before_unix_ms, max_backward_ms)
        });
        generator.start_lease(terms.machine_id, terms.not_before_unix_ms);
        generator.set_max_backward_ms(max_backward_ms);
        let held = HeldLease { terms, verified_at_unix_ms, issued_before: generator.issued() };
        self.node = Some(node);
        self.confirmed = confirmed;
        self.set_held(Some(held), heartbeat_interval_ms);
    }

    /// The lease to leave in the slot when this backend disconnects: none unless one is held and was
    /// confirmed in `generation_now` (a registry dropped meanwhile leaves nothing to take up).
    pub fn park(&self, generation_now: u64) -> Option<Parked> {
        let held = self.held.as_ref()?;
        if self.confirmed.generation != generation_now {
            return None;
        }
        Some(Parked {
            service: self.service.clone(),
            node: self.node.clone()?,
            terms: held.terms,
            verified_at_unix_ms: held.verified_at_unix_ms,
            stamped_until_unix_ms: self.closing_watermark_unix_ms()?,
            registry: self.confirmed.registry,
        })
    }

    /// Takes up `parked`, which the backend before this one in the slot left, if it is this
    /// service's under this backend's identity `node` and was confirmed in the registry there is now
    /// (`uptake.confirmed.registry`, read in this process's generation). The lease goes on as it
    /// was (row, version, window, the time it was claimed and last confirmed) and stamps only after
    /// every ID the earlier backend stamped under it. Where a claim would move the slot (its machine
    /// id left the range, its stamps ahead of a clock stepped back), it is not taken up.
    pub fn adopt(&mut self, parked: Parked, node: &NodeIdentity, uptake: &Uptake) -> Result<(), NotAdopted> {
        if self.held.is_some() {
            return Err(NotAdopted::AlreadyHeld);
        }
        if parked.service != self.service || parked.node != *node {
            return Err(NotAdopted::OtherHolder);
        }
        if parked.registry != uptake.confirmed.registry {
            return Err(NotAdopted::OtherRegistry);
        }
        if !uptake.machine_ids.contains(&parked.terms.machine_id) {
            return Err(NotAdopted::OutsideRange);
        }
        let not_before_unix_ms = parked.terms.not_before_unix_ms.max(parked.stamped_until_unix_ms);
        if not_before_unix_ms > uptake.now_unix_ms.saturating_add(uptake.max_backward_ms) {
            return Err(NotAdopted::ClockBehind);
        }
        let terms = Terms { not_before_unix_ms, ..parked.terms };
        let (backward, heartbeat) = (uptake.max_backward_ms, uptake.heartbeat_interval_ms);
        self.begin(parked.node, terms, parked.verified_at_unix_ms, backward, heartbeat, uptake.confirmed);
        Ok(())
    }

    /// The registry confirmed the lease at `verified_at_unix_ms` with the given end and
    /// watermark, asked for in `confirmed`: committed by a renewal, or read in a
    /// read-only transaction.
    pub fn verified(
        &mut self,
        verified_at_unix_ms: i64,
        lease_until_unix_ms: i64,
        issued_until_unix_ms: i64,
        max_backward_ms: i64,
        heartbeat_interval_ms: i64,
        confirmed: Confirmation,
    ) {
        let Some(before) = self.held else { return };
        self.confirmed = confirmed;
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

    /// The lease of `service` with the registry epoch it was granted in, if held: what is recorded
    /// for it alone when it cannot be parked.
    pub fn closing_of(&self, service: &str) -> Option<(Holding, i64, i64)> {
        let lease = self.leases.iter().find(|l| l.service == service)?;
        Some((lease.holding()?, lease.closing_watermark_unix_ms()?, lease.held()?.terms.registry_epoch))
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
    /// The registry they are confirmed in.
    const CONF: Confirmation = Confirmation { generation: GEN, registry: 42 };

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
        lease.claimed(backend(), terms(4, 2, T0), 2_000, HB, CONF);
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
        lease.verified(T0 + HB, T0 + HB + LEASE, T0 + HB + LEASE, 2_000, HB, CONF);
        assert!(lease.next_id(&mut StillClock(T0 + HB), GEN).is_ok());
    }

    #[test]
    fn a_read_verification_never_extends_past_the_lease_end() {
        let mut lease = claimed();
        // Read-only checks confirm ownership but cannot move lease_until.
        lease.verified(T0 + LEASE - 10, T0 + LEASE, T0 + LEASE, 2_000, HB, CONF);
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
        lease.claimed(backend(), terms(4, 3, T0 + 10), 2_000, HB, CONF);
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
        later.claimed(backend(), t, 2_000, HB, CONF);
        assert_eq!(later.closing_watermark_unix_ms(), Some(T0 + 5_000));
    }

    #[test]
    fn leases_are_kept_per_service_and_closed_together() {
        let mut all = BackendLeases::new();
        all.get_or_add("a").claimed(backend(), terms(1, 1, T0), 2_000, HB, CONF);
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
        lease.claimed(backend(), terms, 2_000, HB, CONF);
        assert!(lease.next_id(&mut StillClock(T0 + 9), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 10), GEN), Err(Stop::LeaseCheckDue));
        // A write moved the watermark on; a read-only check that finds it behind its lease end stops there too.
        lease.verified(T0 + 10, T0 + 10 + LEASE, T0 + 30, 2_000, HB, CONF);
        assert!(lease.next_id(&mut StillClock(T0 + 29), GEN).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 30), GEN), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn a_lease_stamps_strictly_after_its_not_before() {
        // An earlier holder may have stamped up to T0 + 1500: the backend waits that out.
        let mut lease = BackendLease::new("orders".into());
        let terms = Terms { not_before_unix_ms: T0 + 1_500, ..terms(4, 2, T0) };
        lease.claimed(backend(), terms, 2_000, HB, CONF);
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
        lease.verified(T0 + 2, T0 + 2 + LEASE, T0 + 2 + LEASE, 2_000, HB, Confirmation { generation: GEN + 1, ..CONF });
        assert!(lease.next_id(&mut StillClock(T0 + 3), GEN + 1).is_ok());
        assert_eq!(lease.next_id(&mut StillClock(T0 + 4), GEN), Err(Stop::LeaseCheckDue));
    }

    /// A backend taking up a lease at `now` with the default settings, in [`CONF`].
    fn uptake(now: i64) -> Uptake {
        Uptake {
            now_unix_ms: now,
            max_backward_ms: 2_000,
            heartbeat_interval_ms: HB,
            machine_ids: 0..=1023,
            confirmed: CONF,
        }
    }

    /// A lease parked after `n` IDs stamped at T0 + 100 (and after), by the first backend of slot 3.
    fn parked_after(n: usize) -> (Parked, Vec<i64>) {
        let mut lease = claimed();
        let ids: Vec<i64> = (0..n).map(|_| lease.next_id(&mut StillClock(T0 + 100), GEN).unwrap()).collect();
        (lease.park(GEN).expect("a held lease parks"), ids)
    }

    #[test]
    fn a_parked_lease_goes_on_in_the_next_backend_of_the_slot_after_every_id_stamped_under_it() {
        let (parked, before) = parked_after(3);
        assert_eq!(parked.stamped_until_unix_ms, T0 + 100, "the end of the last stamp's tick");
        assert_eq!(parked.window_end_unix_ms(), T0 + LEASE);
        let mut next = BackendLease::new("orders".into());
        // Taken up in another process: its own generation, the same registry.
        let other_process = Uptake { confirmed: Confirmation { generation: 1, ..CONF }, ..uptake(T0 + 99) };
        next.adopt(parked, &backend(), &other_process).unwrap();
        let held = next.held().unwrap();
        assert_eq!((held.terms.machine_id, held.terms.version), (4, 2), "the same row, no new version");
        assert_eq!(held.terms.claimed_at_unix_ms, T0, "its age goes on (its windows keep growing)");
        assert_eq!(held.verified_at_unix_ms, T0, "and so does its check: due a heartbeat after the last");
        // The clock reads the millisecond of the earlier IDs (or one before, stepped back): the
        // next ID waits for the next millisecond, not a repeat of a sequence.
        let mut clock = StillClock(T0 + 99);
        let id = next.next_id(&mut clock, 1).unwrap();
        assert!(before.iter().all(|b| id > *b), "{id} after {before:?}");
        assert_eq!(clock.0, T0 + 101);
        assert_eq!(next.next_id(&mut StillClock(T0 + HB), 1), Err(Stop::LeaseCheckDue), "checked as before");
    }

    #[test]
    fn a_parked_lease_that_stamped_nothing_starts_after_its_not_before() {
        let (parked, _) = parked_after(0);
        assert_eq!(parked.stamped_until_unix_ms, T0);
        let mut next = BackendLease::new("orders".into());
        next.adopt(parked, &backend(), &uptake(T0)).unwrap();
        assert_eq!(next.held().unwrap().terms.not_before_unix_ms, T0);
    }

    #[test]
    fn a_parked_lease_is_taken_up_only_by_its_service_identity_and_registry() {
        let (parked, _) = parked_after(1);
        let adopt = |service: &str, node: NodeIdentity, confirmed: Confirmation| {
            BackendLease::new(service.into()).adopt(parked.clone(), &node, &Uptake { confirmed, ..uptake(T0 + 100) })
        };
        assert_eq!(adopt("billing", backend(), CONF), Err(NotAdopted::OtherHolder));
        let moved = NodeIdentity { host: "10.0.0.9".into(), ..backend() };
        assert_eq!(adopt("orders", moved, CONF), Err(NotAdopted::OtherHolder), "idgen.node_host changed");
        let other_slot = NodeIdentity { backend_slot: Some(4), ..backend() };
        assert_eq!(adopt("orders", other_slot, CONF), Err(NotAdopted::OtherHolder));
        // DROP and CREATE EXTENSION since: another registry, whatever the clock and the window say.
        let created_again = Confirmation { registry: 43, ..CONF };
        assert_eq!(adopt("orders", backend(), created_again), Err(NotAdopted::OtherRegistry));
        let mut holding = claimed();
        assert_eq!(holding.adopt(parked.clone(), &backend(), &uptake(T0 + 100)), Err(NotAdopted::AlreadyHeld));
        // A range that no longer holds its machine id (4): a claim moves the slot inside it.
        let moved_range = Uptake { machine_ids: 100..=199, ..uptake(T0 + 100) };
        assert_eq!(
            BackendLease::new("orders".into()).adopt(parked.clone(), &backend(), &moved_range),
            Err(NotAdopted::OutsideRange)
        );
        // A clock stepped back further than a backend waits: a claim moves the slot to another id.
        let behind = uptake(T0 + 100 - 2_001);
        assert_eq!(
            BackendLease::new("orders".into()).adopt(parked.clone(), &backend(), &behind),
            Err(NotAdopted::ClockBehind)
        );
        assert!(BackendLease::new("orders".into())
            .adopt(parked.clone(), &backend(), &uptake(T0 + 100 - 2_000))
            .is_ok());
        assert!(adopt("orders", backend(), CONF).is_ok());
    }

    #[test]
    fn a_lease_of_a_registry_dropped_since_its_confirmation_is_not_parked() {
        let mut lease = claimed();
        lease.next_id(&mut StillClock(T0 + 1), GEN).unwrap();
        assert!(lease.park(GEN + 1).is_none(), "the generation moved: the registry may be gone");
        lease.lost();
        assert!(lease.park(GEN).is_none(), "nothing held, nothing to park");
    }

    #[test]
    fn a_lease_that_cannot_be_parked_is_recorded_alone() {
        let mut all = BackendLeases::new();
        all.get_or_add("a").claimed(backend(), terms(1, 1, T0), 2_000, HB, CONF);
        all.get_or_add("b");
        assert_eq!(all.closing_of("a").map(|(h, at, epoch)| (h.machine_id, at, epoch)), Some((1, T0, 1)));
        assert!(all.closing_of("b").is_none());
    }

    #[test]
    fn a_parked_lease_reads_back_as_written_within_its_room() {
        let (parked, _) = parked_after(2);
        assert_eq!(Parked::decode(&parked.encode().unwrap()), Some(parked.clone()));
        // The longest a backend's can be: 64 four-byte characters, an IPv6 address, a Sonyflake layout.
        let longest = Parked {
            service: "\u{1F600}".repeat(crate::input::SERVICE_MAX_CHARS),
            node: NodeIdentity {
                service: "\u{1F600}".repeat(crate::input::SERVICE_MAX_CHARS),
                host: "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255".into(),
                ..backend()
            },
            terms: Terms { layout: crate::layout::Preset::Sonyflake.layout(), version: i64::MAX, ..parked.terms },
            registry: u64::MAX,
            ..parked.clone()
        };
        let bytes = longest.encode().unwrap();
        assert_eq!(bytes.len(), Parked::MAX_ENCODED);
        assert_eq!(Parked::decode(&bytes), Some(longest));
        // Anything else is not taken for a lease.
        assert_eq!(Parked::decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(Parked::decode(&[bytes.as_slice(), &[0]].concat()), None);
        assert_eq!(Parked::decode(&[&[9u8][..], &bytes[1..]].concat()), None, "another format");
        let service_node = Parked { node: NodeIdentity { backend_slot: None, ..parked.node.clone() }, ..parked };
        assert_eq!(service_node.encode(), None, "only a backend's lease is parked");
    }
}
