//! A model of the registry: the rows of `system_nodes`, `idgen_tombstones` and `idgen_registry`,
//! and one function per statement of `src/statements.rs` that the claim, heartbeat, release,
//! renewal, exit, tombstone and drop paths run, named after it. Times are Unix milliseconds on the
//! server's clock: `clock` is `clock_timestamp()`, a transaction's `start` is `now()`.
//!
//! Transactions read committed rows plus their own writes (READ COMMITTED), lock the rows they
//! write or select `FOR UPDATE`, and commit or abort. `SKIP LOCKED` is "a row locked by another
//! open transaction is skipped"; a statement that would wait for such a lock answers
//! [`Blocked`] instead (its caller's call times out, and nothing was written).
//!
//! Guards a mutation can switch off are read from [`Mutations`]; with none switched off, each
//! function does what its statement does.

use crate::mutation::{Mutation, Mutations};
use std::collections::{BTreeMap, BTreeSet};

/// Unix milliseconds. `NEG_INF` stands for `'-infinity'`.
pub type Ms = i64;
pub const NEG_INF: Ms = i64::MIN;

/// `ts + d`, keeping `-infinity` infinite as Postgres does.
pub fn add(ts: Ms, d: Ms) -> Ms {
    if ts == NEG_INF {
        NEG_INF
    } else {
        ts.saturating_add(d)
    }
}

/// A row of `system_nodes` (the columns the protocol reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub service: String,
    pub machine_id: i32,
    pub host: String,
    pub port: i32,
    pub backend_slot: Option<i32>,
    pub version: i64,
    pub last_seen: Ms,
    pub released_at: Option<Ms>,
    pub issued_until: Ms,
    pub lease_until: Option<Ms>,
    pub takeover_at: Option<Ms>,
}

impl Row {
    fn is_identity(&self, node: &Node) -> bool {
        self.service == node.service
            && self.host == node.host
            && self.port == node.port
            && self.backend_slot.unwrap_or(-1) == node.backend_slot.unwrap_or(-1)
    }
}

/// A row of `idgen_tombstones`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstone {
    pub version: i64,
    pub bound: Ms,
}

pub type Key = (String, i32);

/// The registry's tables as one transaction sees them, or as committed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Tables {
    pub rows: BTreeMap<Key, Row>,
    pub tombstones: BTreeMap<Key, Tombstone>,
    pub epoch: i64,
    /// `idgen_registry.version_base` (0.7.0, finding F3's fix): drawn at CREATE EXTENSION; a row of
    /// a machine id never registered here starts at `version_base + 1`.
    pub version_base: i64,
    /// `idgen_layouts.unregistered_from` of each service whose hint moved from its pool's first
    /// (absent: at its pool's first, as a new or truncated registry's are).
    pub unregistered_from: BTreeMap<String, i32>,
}

impl Tables {
    /// A new registry's tables (CREATE EXTENSION): no rows, its epoch, and its version base.
    pub fn created(epoch: i64) -> Tables {
        Tables { epoch, version_base: version_base_of(epoch), ..Tables::default() }
    }
}

/// The version base a registry of `epoch` draws. idgen draws it at random below 2^52 at CREATE
/// EXTENSION; the model derives it from the epoch the schedule drew (a fixed mix), so that a
/// schedule replays exactly and two registries of one schedule differ as two random draws would.
pub fn version_base_of(epoch: i64) -> i64 {
    let mut z = (epoch as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) & ((1 << 52) - 1)) as i64
}

/// Who calls: a service node (no slot) or a database backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub service: String,
    pub host: String,
    pub port: i32,
    pub backend_slot: Option<i32>,
}

/// What a version-checked statement names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub node: Node,
    pub machine_id: i32,
    pub version: i64,
}

/// What a claim works with (`ClaimTerms` of src/registry/store.rs), in ms.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub lease: Ms,
    pub tolerance: Ms,
    pub window: Ms,
    pub takeback_age: Ms,
    pub first_machine_id: i32,
    pub last_machine_id: i32,
}

/// The claimant's own held row, set aside (RELEASE_OWN_ROW_AHEAD, RELEASE_OWN_ROW_OUTSIDE_RANGE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetAside {
    pub machine_id: i32,
    /// What its holders may have stamped (`holder_bound`).
    pub bound: Ms,
    /// The watermark it had: what its holder reported.
    pub reported: Ms,
    /// The watermark it was left with.
    pub issued_until: Ms,
    pub last_seen: Ms,
}

/// A statement would wait for a row another open transaction holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocked;

pub type TxnId = u64;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lock {
    Row(Key),
    Guard(String, i32),
    /// A service's row of `idgen_layouts`.
    Layout(String),
}

#[derive(Clone, Debug, Default)]
struct Txn {
    /// `now()`: the server clock when it began.
    start: Ms,
    rows: BTreeMap<Key, Option<Row>>,
    tombstones: BTreeMap<Key, Option<Tombstone>>,
    epoch: Option<i64>,
    /// Hints written (`None`: back at the pool's first).
    unregistered_from: BTreeMap<String, Option<i32>>,
    locks: BTreeSet<Lock>,
    /// It ran a statement on the registry: it holds a table lock a DROP's NOWAIT lock meets.
    touched: bool,
}

/// The row a claim step won, as its statement returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedRow {
    pub machine_id: i32,
    pub version: i64,
    pub lease_until: Ms,
    pub claimed_at: Ms,
    pub bound: Option<Ms>,
    pub issued_until: Ms,
}

/// The registry of one database: committed tables (none while the extension is dropped), the open
/// transactions, and the standby's copy.
#[derive(Clone, Debug)]
pub struct Registry {
    pub committed: Option<Tables>,
    /// What a standby has; `None` when the extension was dropped there too.
    pub standby: Option<Tables>,
    /// Commits reach the standby before they are acknowledged.
    pub synchronous: bool,
    txns: BTreeMap<TxnId, Txn>,
    next_txn: TxnId,
    /// `clock_timestamp()` of the statement being run.
    pub clock: Ms,
    pub mutations: Mutations,
}

impl Registry {
    pub fn new(epoch: i64, clock: Ms, synchronous: bool, mutations: Mutations) -> Registry {
        let tables = Tables::created(epoch);
        Registry {
            committed: Some(tables.clone()),
            standby: Some(tables),
            synchronous,
            txns: BTreeMap::new(),
            next_txn: 1,
            clock,
            mutations,
        }
    }

    fn off(&self, m: Mutation) -> bool {
        self.mutations.has(m)
    }

    pub fn installed(&self) -> bool {
        self.committed.is_some()
    }

    // ---- transactions ----

    pub fn begin(&mut self) -> TxnId {
        let id = self.next_txn;
        self.next_txn += 1;
        self.txns.insert(id, Txn { start: self.clock, ..Txn::default() });
        id
    }

    pub fn is_open(&self, txn: TxnId) -> bool {
        self.txns.contains_key(&txn)
    }

    /// Commits `txn`: its writes become the committed tables (and the standby's, if synchronous).
    pub fn commit(&mut self, txn: TxnId) {
        let Some(t) = self.txns.remove(&txn) else { return };
        let Some(tables) = self.committed.as_mut() else { return };
        for (key, row) in t.rows {
            match row {
                Some(row) => tables.rows.insert(key, row),
                None => tables.rows.remove(&key),
            };
        }
        for (key, tomb) in t.tombstones {
            match tomb {
                Some(tomb) => tables.tombstones.insert(key, tomb),
                None => tables.tombstones.remove(&key),
            };
        }
        if let Some(epoch) = t.epoch {
            tables.epoch = epoch;
        }
        for (service, hint) in t.unregistered_from {
            match hint {
                Some(hint) => tables.unregistered_from.insert(service, hint),
                None => tables.unregistered_from.remove(&service),
            };
        }
        if self.synchronous {
            self.replicate();
        }
    }

    pub fn abort(&mut self, txn: TxnId) {
        self.txns.remove(&txn);
    }

    /// Every open transaction ends (a server restart or a failover).
    pub fn abort_all(&mut self) {
        self.txns.clear();
    }

    /// The standby catches up.
    pub fn replicate(&mut self) {
        self.standby = self.committed.clone();
    }

    /// The standby is promoted: whatever it had not received is gone.
    pub fn fail_over(&mut self) {
        self.abort_all();
        self.committed = self.standby.clone();
    }

    /// Whether a transaction other than `except` has used the registry and is still open.
    pub fn other_open_user(&self, except: Option<TxnId>) -> bool {
        self.txns.iter().any(|(id, t)| Some(*id) != except && t.touched)
    }

    /// The tables as `txn` sees them: committed rows and its own writes.
    pub fn view(&self, txn: TxnId) -> Tables {
        let mut tables = self.committed.clone().unwrap_or_default();
        if let Some(t) = self.txns.get(&txn) {
            for (key, row) in &t.rows {
                match row {
                    Some(row) => tables.rows.insert(key.clone(), row.clone()),
                    None => tables.rows.remove(key),
                };
            }
            for (key, tomb) in &t.tombstones {
                match tomb {
                    Some(tomb) => tables.tombstones.insert(key.clone(), *tomb),
                    None => tables.tombstones.remove(key),
                };
            }
            if let Some(epoch) = t.epoch {
                tables.epoch = epoch;
            }
            for (service, hint) in &t.unregistered_from {
                match hint {
                    Some(hint) => tables.unregistered_from.insert(service.clone(), *hint),
                    None => tables.unregistered_from.remove(service),
                };
            }
        }
        tables
    }

    fn txn(&mut self, txn: TxnId) -> &mut Txn {
        let t = self.txns.get_mut(&txn).expect("a statement runs in an open transaction");
        t.touched = true;
        t
    }

    /// `now()` of `txn`: its start.
    pub fn now_of(&self, txn: TxnId) -> Ms {
        self.now(txn)
    }

    fn now(&self, txn: TxnId) -> Ms {
        self.txns.get(&txn).map_or(self.clock, |t| t.start)
    }

    /// Whether another open transaction holds `lock`.
    fn locked_by_other(&self, txn: TxnId, lock: &Lock) -> bool {
        self.txns.iter().any(|(id, t)| *id != txn && t.locks.contains(lock))
    }

    /// `FOR UPDATE SKIP LOCKED`: takes the lock, or says it is another's.
    fn try_lock(&mut self, txn: TxnId, lock: Lock) -> bool {
        if self.locked_by_other(txn, &lock) {
            return false;
        }
        self.txn(txn).locks.insert(lock);
        true
    }

    fn put_row(&mut self, txn: TxnId, row: Row) {
        let key = (row.service.clone(), row.machine_id);
        let t = self.txn(txn);
        t.locks.insert(Lock::Row(key.clone()));
        t.rows.insert(key, Some(row));
    }

    fn put_tombstone(&mut self, txn: TxnId, key: Key, tomb: Option<Tombstone>) {
        self.txn(txn).tombstones.insert(key, tomb);
    }

    /// `idgen_private.holder_bound(n, lease, takeover_age)`.
    pub fn holder_bound(&self, r: &Row, lease: Ms, takeback_age: Ms) -> Ms {
        if r.backend_slot.is_none() && r.released_at.is_none() {
            // The mutation "stored lease end": the terms the holder was granted are not read back.
            let (lease_until, takeover_at) =
                if self.off(Mutation::StoredLeaseEnd) { (None, None) } else { (r.lease_until, r.takeover_at) };
            let granted = lease_until.map_or(lease, |until| until - r.last_seen);
            add(r.issued_until, granted).max(takeover_at.unwrap_or(r.last_seen + takeback_age))
        } else {
            r.issued_until
        }
    }

    /// The bound a claim reads from a row: `holder_bound`, unless the watermark is switched off.
    fn claim_bound(&self, r: &Row, lease: Ms, takeback_age: Ms) -> Ms {
        if self.off(Mutation::Watermark) {
            NEG_INF
        } else {
            self.holder_bound(r, lease, takeback_age)
        }
    }

    /// The bound of the claimant's own held row, for reuse: a held service row's includes its
    /// holder's whole lease, unless the twin rule is switched off (it was its last report only).
    fn own_bound(&self, r: &Row, lease: Ms, takeback_age: Ms) -> Ms {
        if self.off(Mutation::TwinRule) && !self.off(Mutation::Watermark) {
            r.issued_until
        } else {
            self.claim_bound(r, lease, takeback_age)
        }
    }

    fn in_range(mid: i32, t: &Terms) -> bool {
        mid >= t.first_machine_id && mid <= t.last_machine_id
    }

    // ---- the statements ----

    /// READ_REGISTRY.
    pub fn read_registry(&mut self, txn: TxnId) -> i64 {
        self.txn(txn);
        self.view(txn).epoch
    }

    /// SYNCHRONOUS_STANDBY_STREAMING.
    pub fn synchronous_standby_streaming(&self) -> bool {
        self.synchronous
    }

    /// TAKE_GUARD.
    pub fn take_guard(&mut self, txn: TxnId, service: &str, bucket: i32) -> bool {
        self.try_lock(txn, Lock::Guard(service.to_owned(), bucket))
    }

    /// Sets a claimed row's grant: version, last_seen, lease_until, takeover_at, watermark.
    fn granted(&mut self, txn: TxnId, mut row: Row, watermark: Ms, t: &Terms) -> ClaimedRow {
        let now = self.clock;
        row.version += 1;
        row.last_seen = now;
        row.lease_until = Some(now + t.lease);
        row.takeover_at = Some(now + t.takeback_age);
        row.released_at = None;
        row.issued_until = watermark;
        let claimed = ClaimedRow {
            machine_id: row.machine_id,
            version: row.version,
            lease_until: now + t.lease,
            claimed_at: now,
            bound: None,
            issued_until: watermark,
        };
        self.put_row(txn, row);
        claimed
    }

    /// REUSE_OWN_HELD_ROW.
    pub fn reuse_own_held_row(&mut self, txn: TxnId, node: &Node, t: &Terms) -> Option<ClaimedRow> {
        let view = self.view(txn);
        let clock = self.clock;
        let own = view.rows.values().find(|o| {
            o.is_identity(node)
                && o.released_at.is_none()
                && Self::in_range(o.machine_id, t)
                && self.own_bound(o, t.lease, t.takeback_age) <= clock + t.tolerance
        })?;
        if !self.try_lock(txn, Lock::Row((own.service.clone(), own.machine_id))) {
            return None;
        }
        let bound = self.own_bound(own, t.lease, t.takeback_age);
        let watermark = own.issued_until.max(bound).max(clock + t.window);
        let mut claimed = self.granted(txn, own.clone(), watermark, t);
        claimed.bound = Some(bound);
        Some(claimed)
    }

    /// REUSE_OWN_ROW: the claimant's own row, held, or else one it released. The flag: it was released.
    pub fn reuse_own_row(&mut self, txn: TxnId, node: &Node, t: &Terms) -> Option<(ClaimedRow, bool)> {
        let view = self.view(txn);
        let clock = self.clock;
        let holds = view.rows.values().any(|h| h.is_identity(node) && h.released_at.is_none());
        let mut candidates: Vec<&Row> = view
            .rows
            .values()
            .filter(|o| {
                o.is_identity(node)
                    && Self::in_range(o.machine_id, t)
                    && self.own_bound(o, t.lease, t.takeback_age) <= clock + t.tolerance
                    && (o.released_at.is_none() || !holds)
            })
            .collect();
        candidates.sort_by_key(|o| (o.released_at.is_some(), o.machine_id));
        for own in candidates {
            if !self.try_lock(txn, Lock::Row((own.service.clone(), own.machine_id))) {
                continue;
            }
            let was_released = own.released_at.is_some();
            let bound = self.own_bound(own, t.lease, t.takeback_age);
            let watermark = own.issued_until.max(bound).max(clock + t.window);
            let mut claimed = self.granted(txn, own.clone(), watermark, t);
            claimed.bound = Some(bound);
            return Some((claimed, was_released));
        }
        None
    }

    /// OWN_HELD_ROW: the claimant's held row, locked or not.
    pub fn own_held_row(&mut self, txn: TxnId, node: &Node) -> Option<i32> {
        self.txn(txn);
        self.view(txn).rows.values().find(|n| n.is_identity(node) && n.released_at.is_none()).map(|n| n.machine_id)
    }

    /// Sets the claimant's own held row aside (RELEASE_OWN_ROW_AHEAD and _OUTSIDE_RANGE share this
    /// write): a new version, released now, its bound kept as the watermark.
    fn set_aside(
        &mut self,
        txn: TxnId,
        node: &Node,
        t: &Terms,
        which: impl Fn(&Registry, &Row) -> bool,
    ) -> Option<SetAside> {
        let view = self.view(txn);
        let own = view.rows.values().find(|o| o.is_identity(node) && o.released_at.is_none() && which(self, o))?;
        if !self.try_lock(txn, Lock::Row((own.service.clone(), own.machine_id))) {
            return None;
        }
        let bound = self.own_bound(own, t.lease, t.takeback_age);
        let mut row = own.clone();
        row.version += 1;
        row.released_at = Some(self.clock);
        row.issued_until = row.issued_until.max(bound);
        let answer = SetAside {
            machine_id: row.machine_id,
            bound,
            reported: own.issued_until,
            issued_until: row.issued_until,
            last_seen: own.last_seen,
        };
        self.put_row(txn, row);
        Some(answer)
    }

    /// RELEASE_OWN_ROW_AHEAD.
    pub fn release_own_row_ahead(&mut self, txn: TxnId, node: &Node, t: &Terms) -> Option<SetAside> {
        let limit = self.clock + t.tolerance;
        self.set_aside(txn, node, t, |reg, o| reg.own_bound(o, t.lease, t.takeback_age) > limit)
    }

    /// RELEASE_OWN_ROW_OUTSIDE_RANGE.
    pub fn release_own_row_outside_range(&mut self, txn: TxnId, node: &Node, t: &Terms) -> Option<SetAside> {
        self.set_aside(txn, node, t, |_, o| !Self::in_range(o.machine_id, t))
    }

    /// UNREGISTERED_MACHINE_IDS: the ids of `first..=last` with no row, lowest first, and whether
    /// each has a tombstone further ahead than `tolerance`.
    pub fn unregistered_machine_ids(
        &mut self,
        txn: TxnId,
        service: &str,
        first: i32,
        last: i32,
        tolerance: Ms,
    ) -> Vec<(i32, bool)> {
        self.txn(txn);
        let view = self.view(txn);
        let limit = self.clock + tolerance;
        (first..=last)
            .filter(|m| !view.rows.contains_key(&(service.to_owned(), *m)))
            .map(|m| (m, view.tombstones.get(&(service.to_owned(), m)).is_some_and(|tomb| tomb.bound > limit)))
            .collect()
    }

    /// READ_LAYOUT's `unregistered_from`: `None` when at the pool's first.
    pub fn unregistered_from(&mut self, txn: TxnId, service: &str) -> Option<i32> {
        self.txn(txn);
        self.view(txn).unregistered_from.get(service).copied()
    }

    /// ADVANCE_UNREGISTERED_FROM: the hint moves up to `from` when every id from it to `from` has a
    /// row and no other transaction holds the service's layout row. The statement's `EXISTS (...
    /// FOR UPDATE SKIP LOCKED)` is uncorrelated: a one-time filter that locks the layout row first,
    /// whether the hint then moves or not.
    pub fn advance_unregistered_from(&mut self, txn: TxnId, service: &str, pool_first: i32, from: i32) {
        if !self.try_lock(txn, Lock::Layout(service.to_owned())) {
            return;
        }
        let view = self.view(txn);
        let hint = view.unregistered_from.get(service).copied().unwrap_or(pool_first);
        let rows = view.rows.keys().filter(|(s, m)| s == service && (hint..from).contains(m)).count();
        if hint < from && rows as i64 == i64::from(from - hint) {
            self.txn(txn).unregistered_from.insert(service.to_owned(), Some(from));
        }
    }

    /// READ_REGISTRY's version base (0 with F3's fix switched off: versions start again at 1).
    pub fn read_version_base(&mut self, txn: TxnId) -> i64 {
        self.txn(txn);
        if self.off(Mutation::VersionBase) {
            0
        } else {
            self.view(txn).version_base
        }
    }

    /// SOONEST_TOMBSTONE_AHEAD.
    pub fn soonest_tombstone_ahead(&mut self, txn: TxnId, service: &str, t: &Terms) -> Option<(i32, Ms)> {
        self.txn(txn);
        let view = self.view(txn);
        let limit = self.clock + t.tolerance;
        view.tombstones
            .iter()
            .filter(|((s, m), tomb)| {
                s == service && Self::in_range(*m, t) && tomb.bound > limit && !view.rows.contains_key(&(s.clone(), *m))
            })
            .map(|((_, m), tomb)| (*m, tomb.bound))
            .min_by_key(|(m, bound)| (*bound, *m))
    }

    /// INSERT_UNREGISTERED, with the AFTER INSERT trigger (MERGE_TOMBSTONE) it fires.
    pub fn insert_unregistered(
        &mut self,
        txn: TxnId,
        node: &Node,
        t: &Terms,
        machine_id: i32,
        guard_bucket: i32,
        version_base: i64,
    ) -> Option<ClaimedRow> {
        let view = self.view(txn);
        let key = (node.service.clone(), machine_id);
        let tomb = view.tombstones.get(&key).copied();
        let now = self.clock;
        if tomb.is_some_and(|tomb| tomb.bound > now + t.tolerance) {
            return None;
        }
        if !self.take_guard(txn, &node.service, guard_bucket) {
            return None;
        }
        // ON CONFLICT DO NOTHING: a row committed (or written by this transaction) meanwhile; an
        // insert of another open transaction holds the guard, so none is in flight here.
        if view.rows.contains_key(&key) || self.locked_by_other(txn, &Lock::Row(key.clone())) {
            return None;
        }
        // The unique index of held identities: a claimant inserts only when it holds no row.
        if view.rows.values().any(|r| r.is_identity(node) && r.released_at.is_none()) {
            return None;
        }
        let issued_until = tomb.map_or(now + t.window, |tomb| tomb.bound.max(now + t.window));
        let row = Row {
            service: node.service.clone(),
            machine_id,
            host: node.host.clone(),
            port: node.port,
            backend_slot: node.backend_slot,
            version: tomb.map_or(version_base, |tomb| tomb.version) + 1,
            last_seen: now,
            released_at: None,
            issued_until,
            lease_until: Some(now + t.lease),
            takeover_at: Some(now + t.takeback_age),
        };
        let claimed = ClaimedRow {
            machine_id,
            version: row.version,
            lease_until: now + t.lease,
            claimed_at: now,
            bound: tomb.map(|tomb| tomb.bound),
            issued_until,
        };
        self.put_row(txn, row);
        self.merge_tombstone(txn, &node.service, machine_id);
        Some(claimed)
    }

    /// TAKE_RELEASED (`cooldown: Some`) and TAKE_IDLE (`min_idle: Some`): the victim row, taken over
    /// for the claimant. Returns the row and the victim as it was.
    pub fn take_over(
        &mut self,
        txn: TxnId,
        node: &Node,
        t: &Terms,
        min_idle: Option<Ms>,
        cooldown: Ms,
    ) -> Option<(ClaimedRow, Row)> {
        let view = self.view(txn);
        let now = self.now(txn);
        let clock = self.clock;
        let cooldown = if self.off(Mutation::Cooldown) { 0 } else { cooldown };
        let stored_terms = !self.off(Mutation::StoredLeaseEnd);
        let mut victims: Vec<&Row> = view
            .rows
            .values()
            .filter(|v| {
                v.service == node.service
                    && Self::in_range(v.machine_id, t)
                    && self.claim_bound(v, t.lease, t.takeback_age) <= clock + t.tolerance
                    && match min_idle {
                        None => v.released_at.is_some_and(|at| at <= now - cooldown),
                        Some(min_idle) => {
                            v.last_seen < now - min_idle
                                && (!stored_terms || v.takeover_at.is_none_or(|at| at < now))
                                && v.released_at.is_none_or(|at| at <= now - cooldown)
                        }
                    }
            })
            .collect();
        match min_idle {
            None => victims.sort_by_key(|v| (v.released_at, v.machine_id)),
            Some(_) => victims.sort_by_key(|v| (v.last_seen, v.machine_id)),
        }
        for victim in victims {
            if !self.try_lock(txn, Lock::Row((victim.service.clone(), victim.machine_id))) {
                continue;
            }
            let bound = self.claim_bound(victim, t.lease, t.takeback_age);
            let mut row = victim.clone();
            row.host = node.host.clone();
            row.port = node.port;
            row.backend_slot = node.backend_slot;
            let previous = victim.clone();
            let mut claimed = self.granted(txn, row, bound.max(clock + t.window), t);
            claimed.bound = Some(bound);
            return Some((claimed, previous));
        }
        None
    }

    /// CURRENT_ROW.
    pub fn current_row(&mut self, txn: TxnId, service: &str, machine_id: i32) -> Option<Row> {
        self.txn(txn);
        self.view(txn).rows.get(&(service.to_owned(), machine_id)).cloned()
    }

    /// ROW_BOUND: the row's bound (when finite) and the clock.
    pub fn row_bound(&mut self, txn: TxnId, service: &str, machine_id: i32, t: &Terms) -> Option<(Ms, Ms)> {
        let row = self.current_row(txn, service, machine_id)?;
        let bound = self.holder_bound(&row, t.lease, t.takeback_age);
        (bound != NEG_INF).then_some((bound, self.clock))
    }

    /// The rows of `service` in the terms' range.
    fn rows_in_range(&mut self, txn: TxnId, service: &str, t: &Terms) -> Vec<Row> {
        self.txn(txn);
        let view = self.view(txn);
        view.rows.into_values().filter(|r| r.service == service && Self::in_range(r.machine_id, t)).collect()
    }

    /// COUNT_HELD and LEAST_RECENTLY_SEEN.
    pub fn least_recently_seen(&mut self, txn: TxnId, service: &str, t: &Terms) -> (i64, Option<Row>) {
        let rows = self.rows_in_range(txn, service, t);
        let least = rows.iter().min_by_key(|r| (r.last_seen, r.machine_id)).cloned();
        (rows.len() as i64, least)
    }

    /// HIGHEST_REGISTERED.
    pub fn highest_registered(&mut self, txn: TxnId, service: &str, t: &Terms) -> Option<i32> {
        self.rows_in_range(txn, service, t).iter().map(|r| r.machine_id).max()
    }

    /// COUNT_IN_USE: held, cooling down, or released with a watermark still ahead.
    pub fn count_in_use(&mut self, txn: TxnId, service: &str, cooldown: Ms, t: &Terms) -> i64 {
        let (now, clock) = (self.now(txn), self.clock);
        let rows = self.rows_in_range(txn, service, t);
        rows.iter().filter(|r| r.released_at.is_none_or(|at| at > now - cooldown) || r.issued_until > clock).count()
            as i64
    }

    /// The held row a version-checked statement names, if it matches (the version check can be
    /// switched off).
    fn matching(&self, view: &Tables, held: &Holding, epoch: Option<i64>) -> Option<Row> {
        let row = view.rows.get(&(held.node.service.clone(), held.machine_id))?;
        let version_ok = self.off(Mutation::VersionCheck) || row.version == held.version;
        let epoch_ok = self.off(Mutation::Epoch) || epoch.is_none_or(|e| e == view.epoch);
        (row.is_identity(&held.node) && version_ok && row.released_at.is_none() && epoch_ok).then(|| row.clone())
    }

    /// HEARTBEAT: a new grant and the watermark raised to the report (or the clock). Returns the
    /// lease granted (`lease_until`) and the watermark held before; `Ok(None)` when nothing matched.
    pub fn heartbeat(
        &mut self,
        txn: TxnId,
        held: &Holding,
        lease: Ms,
        reported: Option<Ms>,
        takeback_age: Ms,
    ) -> Result<Option<(Ms, Ms)>, Blocked> {
        let view = self.view(txn);
        let Some(mut row) = self.matching(&view, held, None) else {
            self.txn(txn);
            return Ok(None);
        };
        if self.locked_by_other(txn, &Lock::Row((row.service.clone(), row.machine_id))) {
            return Err(Blocked);
        }
        let now = self.clock;
        let before = row.issued_until;
        row.last_seen = now;
        // F4's fix (0.7.0): a heartbeat never lowers the grant a row records, so that a node that
        // never got the answer is not cut short.
        if !self.off(Mutation::GreatestGrant) {
            row.lease_until = Some(row.lease_until.map_or(now + lease, |until| until.max(now + lease)));
            row.takeover_at = Some(row.takeover_at.map_or(now + takeback_age, |at| at.max(now + takeback_age)));
        } else {
            row.lease_until = Some(now + lease);
            row.takeover_at = Some(now + takeback_age);
        }
        row.issued_until = row.issued_until.max(reported.unwrap_or(now));
        // RETURNING lease_until: the grant the row records (the longer one kept).
        let lease_until = row.lease_until.unwrap_or(now + lease);
        self.put_row(txn, row);
        Ok(Some((lease_until, before)))
    }

    /// RELEASE: a new version, the cooldown starts, the watermark rises to the report (or the clock
    /// plus `margin`). Returns the new version and watermark; `Ok(None)` when nothing matched.
    /// RELEASE: without a report (a release by hand), the watermark rises to what the holder may
    /// still stamp as it holds the row (`holder_bound`), and at least to the clock plus `margin`.
    #[allow(clippy::too_many_arguments)]
    pub fn release(
        &mut self,
        txn: TxnId,
        held: &Holding,
        margin: Ms,
        reported: Option<Ms>,
        lease: Ms,
        takeback_age: Ms,
    ) -> Result<Option<(i64, Ms)>, Blocked> {
        let view = self.view(txn);
        let Some(mut row) = self.matching(&view, held, None) else {
            self.txn(txn);
            return Ok(None);
        };
        if self.locked_by_other(txn, &Lock::Row((row.service.clone(), row.machine_id))) {
            return Err(Blocked);
        }
        let now = self.clock;
        let bound =
            if self.off(Mutation::ReleaseKeepsBound) { NEG_INF } else { self.holder_bound(&row, lease, takeback_age) };
        row.version += 1;
        row.released_at = Some(now);
        row.issued_until = row.issued_until.max(reported.unwrap_or((now + margin).max(bound)));
        let answer = (row.version, row.issued_until);
        self.put_row(txn, row);
        Ok(Some(answer))
    }

    /// RENEW_BACKEND_LEASE: (last_seen, lease_until, issued_until), or nothing (no match, or locked).
    pub fn renew_backend_lease(
        &mut self,
        txn: TxnId,
        held: &Holding,
        lease: Ms,
        epoch: i64,
        window: Ms,
        takeback_age: Ms,
    ) -> Option<(Ms, Ms, Ms)> {
        let view = self.view(txn);
        let Some(mut row) = self.matching(&view, held, Some(epoch)) else {
            self.txn(txn);
            return None;
        };
        if !self.try_lock(txn, Lock::Row((row.service.clone(), row.machine_id))) {
            return None;
        }
        let now = self.clock;
        row.last_seen = now;
        row.lease_until = Some(now + lease);
        row.takeover_at = Some(now + takeback_age);
        row.issued_until = row.issued_until.max(now + window);
        let answer = (now, now + lease, row.issued_until);
        self.put_row(txn, row);
        Some(answer)
    }

    /// READ_BACKEND_LEASE: (clock, lease end, issued_until), if still held at this version and epoch.
    pub fn read_backend_lease(&mut self, txn: TxnId, held: &Holding, lease: Ms, epoch: i64) -> Option<(Ms, Ms, Ms)> {
        self.txn(txn);
        let view = self.view(txn);
        let row = self.matching(&view, held, Some(epoch))?;
        Some((self.clock, row.lease_until.unwrap_or(row.last_seen + lease), row.issued_until))
    }

    /// CLOSE_BACKEND_LEASE: the last stamp in place of the window, if the row is still its own.
    pub fn close_backend_lease(
        &mut self,
        txn: TxnId,
        held: &Holding,
        epoch: i64,
        last_stamp: Ms,
    ) -> Result<bool, Blocked> {
        let view = self.view(txn);
        let Some(mut row) = self.matching(&view, held, Some(epoch)) else {
            self.txn(txn);
            return Ok(false);
        };
        if self.locked_by_other(txn, &Lock::Row((row.service.clone(), row.machine_id))) {
            return Err(Blocked);
        }
        // 0.8.0: the row is released too (an ended session holds no id of the pool).
        row.issued_until = row.issued_until.min(last_stamp);
        row.released_at = Some(self.clock);
        row.version += 1;
        self.put_row(txn, row);
        Ok(true)
    }

    /// TOMBSTONE_ROW (the DELETE trigger), or nothing when tombstones are switched off.
    /// The lowering of the service's hint waits for a claim that holds its layout row (an
    /// `UPDATE`): `Blocked` then, and nothing is written.
    pub fn tombstone_row(&mut self, txn: TxnId, key: &Key, lease: Ms, takeback_age: Ms) -> Result<(), Blocked> {
        self.txn(txn);
        let view = self.view(txn);
        let Some(row) = view.rows.get(key) else { return Ok(()) };
        // LOWER_UNREGISTERED_FROM: the hint goes back to the removed row's machine id.
        if view.unregistered_from.get(&key.0).is_some_and(|hint| *hint > key.1) {
            if !self.try_lock(txn, Lock::Layout(key.0.clone())) {
                return Err(Blocked);
            }
            self.txn(txn).unregistered_from.insert(key.0.clone(), Some(key.1));
        }
        if self.off(Mutation::Floor) {
            return Ok(());
        }
        let bound = self.holder_bound(row, lease, takeback_age);
        let tomb = match view.tombstones.get(key) {
            Some(old) => Tombstone { version: old.version.max(row.version), bound: old.bound.max(bound) },
            None => Tombstone { version: row.version, bound },
        };
        self.put_tombstone(txn, key.clone(), Some(tomb));
        Ok(())
    }

    /// TOMBSTONE_ALL (the TRUNCATE trigger). A TRUNCATE waits for every other transaction that
    /// used the registry (its caller's `hand_txn_or_wait`), so nothing blocks it here.
    pub fn tombstone_all(&mut self, txn: TxnId, lease: Ms, takeback_age: Ms) {
        let keys: Vec<Key> = self.view(txn).rows.keys().cloned().collect();
        for key in keys {
            let _ = self.tombstone_row(txn, &key, lease, takeback_age);
        }
        // RESET_UNREGISTERED_FROM: every hint back to its pool's first.
        let hints: Vec<String> = self.view(txn).unregistered_from.into_keys().collect();
        for service in hints {
            self.txn(txn).unregistered_from.insert(service, None);
        }
    }

    /// NEW_EPOCH.
    pub fn new_epoch(&mut self, txn: TxnId) {
        let epoch = self.view(txn).epoch + 1;
        self.txn(txn).epoch = Some(epoch);
    }

    /// MERGE_TOMBSTONE (the INSERT trigger): the row takes its tombstone's bound and a newer version.
    pub fn merge_tombstone(&mut self, txn: TxnId, service: &str, machine_id: i32) {
        let key = (service.to_owned(), machine_id);
        let view = self.view(txn);
        let Some(tomb) = view.tombstones.get(&key).copied() else { return };
        self.put_tombstone(txn, key.clone(), None);
        if let Some(mut row) = view.rows.get(&key).cloned() {
            row.issued_until = row.issued_until.max(tomb.bound);
            row.version = row.version.max(tomb.version + 1);
            self.put_row(txn, row);
        }
    }

    /// A row removed by hand (DELETE, or each row of a TRUNCATE), after its trigger ran.
    pub fn delete_row(&mut self, txn: TxnId, key: &Key) -> Result<(), Blocked> {
        if self.locked_by_other(txn, &Lock::Row(key.clone())) {
            return Err(Blocked);
        }
        let t = self.txn(txn);
        t.locks.insert(Lock::Row(key.clone()));
        t.rows.insert(key.clone(), None);
        Ok(())
    }

    /// A row inserted by hand or by a restore; the trigger merges its tombstone unless triggers are
    /// disabled. False when it conflicts (its key, or its identity's held row).
    pub fn insert_row(&mut self, txn: TxnId, row: Row, triggers: bool) -> bool {
        let view = self.view(txn);
        let key = (row.service.clone(), row.machine_id);
        let identity_taken = row.released_at.is_none()
            && view.rows.values().any(|r| {
                r.released_at.is_none()
                    && r.service == row.service
                    && r.host == row.host
                    && r.port == row.port
                    && r.backend_slot == row.backend_slot
            });
        if view.rows.contains_key(&key) || identity_taken || self.locked_by_other(txn, &Lock::Row(key.clone())) {
            return false;
        }
        let (service, machine_id) = key;
        self.put_row(txn, row);
        if triggers {
            self.merge_tombstone(txn, &service, machine_id);
        }
        true
    }

    /// A superuser's `SELECT ... FOR UPDATE` of one row (a hand-held lock), without waiting.
    pub fn lock_row(&mut self, txn: TxnId, key: &Key) -> bool {
        self.try_lock(txn, Lock::Row(key.clone()))
    }

    /// LOCK_REGISTRY_FOR_DROP: false (55P03) when another open transaction uses the registry.
    pub fn lock_registry_for_drop(&mut self, txn: TxnId) -> bool {
        if self.other_open_user(Some(txn)) {
            return false;
        }
        self.txn(txn);
        true
    }

    /// STILL_STAMPING: every row and tombstone whose bound is ahead of the clock.
    pub fn still_stamping(&mut self, txn: TxnId, lease: Ms, takeback_age: Ms) -> Vec<(Key, Ms)> {
        self.txn(txn);
        let view = self.view(txn);
        let clock = self.clock;
        let rows = view.rows.iter().map(|(k, r)| (k.clone(), self.holder_bound(r, lease, takeback_age)));
        let tombs = view.tombstones.iter().map(|(k, t)| (k.clone(), t.bound));
        rows.chain(tombs).filter(|(_, bound)| *bound > clock).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Ms = 1_800_000_000_000;
    const LEASE: Ms = 50_000;
    const TAKEBACK: Ms = 60_000;

    fn terms() -> Terms {
        Terms {
            lease: LEASE,
            tolerance: 10_000,
            window: 0,
            takeback_age: TAKEBACK,
            first_machine_id: 0,
            last_machine_id: 3,
        }
    }

    fn node(host: &str) -> Node {
        Node { service: "svc".into(), host: host.into(), port: 8080, backend_slot: None }
    }

    /// A registry whose versions start at 1 (`version_base` 0: one updated from 0.6.0 with rows).
    fn registry() -> Registry {
        let mut reg = Registry::new(1, T, true, Mutations::NONE);
        reg.committed.as_mut().unwrap().version_base = 0;
        reg.replicate();
        reg
    }

    #[test]
    fn a_created_registrys_rows_start_after_its_version_base() {
        let mut reg = Registry::new(1, T, true, Mutations::NONE);
        let base = reg.committed.as_ref().unwrap().version_base;
        assert_eq!(base, version_base_of(1));
        assert!((0..1 << 52).contains(&base));
        assert_ne!(version_base_of(1), version_base_of(2), "two registries draw different bases");
        assert_eq!(claimed(&mut reg, "10.0.0.1", 0).version, base + 1);
        // With the version base switched off, versions start again at 1 (F3).
        let mut reg = Registry::new(1, T, true, Mutations::of(Mutation::VersionBase));
        assert_eq!(claimed(&mut reg, "10.0.0.1", 0).version, 1);
    }

    /// A committed claim of a never-registered id by `host`.
    fn claimed(reg: &mut Registry, host: &str, machine_id: i32) -> ClaimedRow {
        let txn = reg.begin();
        let base = reg.read_version_base(txn);
        let row = reg.insert_unregistered(txn, &node(host), &terms(), machine_id, machine_id, base).unwrap();
        reg.commit(txn);
        row
    }

    #[test]
    fn a_held_service_rows_bound_is_its_report_plus_its_lease_and_at_least_its_takeover_at() {
        let mut reg = registry();
        claimed(&mut reg, "10.0.0.1", 0);
        let row = reg.committed.as_ref().unwrap().rows[&("svc".to_owned(), 0)].clone();
        assert_eq!(reg.holder_bound(&row, 1, 1), (T + LEASE).max(T + TAKEBACK));
        let reported = Row { issued_until: T + 86_400_000, ..row.clone() };
        assert_eq!(reg.holder_bound(&reported, 1, 1), T + 86_400_000 + LEASE);
        // Released, or a backend's: the watermark alone; -infinity stays infinite.
        assert_eq!(reg.holder_bound(&Row { released_at: Some(T), ..row.clone() }, 1, 1), T);
        let backend = Row { backend_slot: Some(3), issued_until: NEG_INF, ..row };
        assert_eq!(reg.holder_bound(&backend, 1, 1), NEG_INF);
        assert_eq!(add(NEG_INF, 5), NEG_INF);
    }

    #[test]
    fn skip_locked_skips_a_row_another_open_transaction_holds() {
        let mut reg = registry();
        claimed(&mut reg, "10.0.0.1", 0);
        claimed(&mut reg, "10.0.0.2", 1);
        reg.clock = T + 10 * TAKEBACK;
        let holder = reg.begin();
        assert!(reg.lock_row(holder, &("svc".to_owned(), 0)));
        let claimant = reg.begin();
        let (row, _) = reg.take_over(claimant, &node("10.0.0.3"), &terms(), Some(TAKEBACK), 0).unwrap();
        assert_eq!(row.machine_id, 1, "the least recently seen row is locked: the next one is taken");
        // A heartbeat waits for the lock instead: blocked.
        let held = Holding { node: node("10.0.0.1"), machine_id: 0, version: 1 };
        let other = reg.begin();
        assert_eq!(reg.heartbeat(other, &held, LEASE, None, TAKEBACK), Err(Blocked));
    }

    #[test]
    fn a_transaction_sees_what_is_committed_and_its_own_writes_only() {
        let mut reg = registry();
        let a = reg.begin();
        reg.insert_unregistered(a, &node("10.0.0.1"), &terms(), 0, 0, 0).unwrap();
        let b = reg.begin();
        assert!(reg.view(b).rows.is_empty(), "an uncommitted insert is not seen");
        assert!(reg.insert_unregistered(b, &node("10.0.0.2"), &terms(), 0, 0, 0).is_none(), "its guard is held");
        reg.commit(a);
        assert_eq!(reg.view(b).rows.len(), 1, "read committed: seen after its commit");
        let c = reg.begin();
        reg.delete_row(c, &("svc".to_owned(), 0)).unwrap();
        reg.abort(c);
        assert_eq!(reg.committed.as_ref().unwrap().rows.len(), 1, "an aborted transaction wrote nothing");
    }

    #[test]
    fn heartbeats_and_releases_match_their_version_only() {
        let mut reg = registry();
        claimed(&mut reg, "10.0.0.1", 0);
        let txn = reg.begin();
        let stale = Holding { node: node("10.0.0.1"), machine_id: 0, version: 2 };
        assert_eq!(reg.heartbeat(txn, &stale, LEASE, Some(T), TAKEBACK), Ok(None));
        let held = Holding { version: 1, ..stale };
        reg.clock = T + 1_000;
        assert_eq!(reg.heartbeat(txn, &held, LEASE, Some(T + 5_000), TAKEBACK), Ok(Some((T + 1_000 + LEASE, T))));
        assert_eq!(
            reg.release(txn, &held, 0, Some(T + 2_000), 60_000, 60_000),
            Ok(Some((2, T + 5_000))),
            "the watermark never goes down"
        );
        assert_eq!(reg.heartbeat(txn, &held, LEASE, None, TAKEBACK), Ok(None), "released: nothing matches");
    }

    #[test]
    fn truncate_leaves_tombstones_and_a_new_epoch_and_an_insert_takes_its_tombstone() {
        let mut reg = registry();
        claimed(&mut reg, "10.0.0.1", 0);
        let txn = reg.begin();
        reg.tombstone_all(txn, LEASE, TAKEBACK);
        reg.new_epoch(txn);
        reg.delete_row(txn, &("svc".to_owned(), 0)).unwrap();
        reg.commit(txn);
        let tables = reg.committed.clone().unwrap();
        assert_eq!(tables.epoch, 2);
        assert_eq!(tables.tombstones[&("svc".to_owned(), 0)], Tombstone { version: 1, bound: T + TAKEBACK });
        // Too far ahead for the claimant: skipped; once it passes, the new row continues from it.
        let txn = reg.begin();
        assert_eq!(
            reg.unregistered_machine_ids(txn, "svc", 0, 3, 10_000),
            vec![(0, true), (1, false), (2, false), (3, false)]
        );
        reg.clock = T + TAKEBACK;
        let row = reg.insert_unregistered(txn, &node("10.0.0.2"), &terms(), 0, 0, 0).unwrap();
        assert_eq!((row.version, row.bound, row.issued_until), (2, Some(T + TAKEBACK), T + TAKEBACK));
        assert!(reg.view(txn).tombstones.is_empty(), "the tombstone is consumed");
    }
}
