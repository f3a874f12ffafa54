//! Every refusal counted, recorded in the history or not. The history records a refused claim or an
//! ownership loss at most once a minute per service and kind (a flood of refusals writes next to
//! nothing), so its counts are not the number of refusals. This tally is: a fixed table of
//! counters per (database, service), kept in the server's shared memory by the edge and read by
//! `idgen_metrics` (`refused_claims_since_start`, `ownership_losses_since_start`). It lives as long
//! as the server, as Prometheus expects of a counter: a restart starts it at zero again.
//!
//! No lock: a key's entry is found by probing from its hash, taken with one compare-and-swap, and
//! never given back (counts are since the server started: a dropped database's or extension's
//! stay); counts are atomic additions. Two processes that take an entry for one key at once make
//! two entries, which a reader adds up. A process that dies halfway leaves an entry nobody
//! matches. When every entry is taken, an addition that finds none of its key is not counted and
//! marks the place its probe starts from: a reader of any key starting there learns its count is
//! unknown (`None`), never a number that is too small, and the other keys keep theirs.

use crate::history::EventKind;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many (database, service) pairs a server's tally holds.
pub const ENTRIES: usize = 1024;

/// What a refusal adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A claim refused (service full, watermark ahead, no synchronous standby).
    RefusedClaims,
    /// A holder told its machine id had moved (heartbeat, release, a backend's lease check).
    OwnershipLosses,
}

impl Counter {
    /// The counter an event of `kind` adds to, if any.
    pub fn of(kind: EventKind) -> Option<Counter> {
        if kind.is_refused_claim() {
            Some(Counter::RefusedClaims)
        } else if kind == EventKind::OwnershipLost {
            Some(Counter::OwnershipLosses)
        } else {
            None
        }
    }
}

/// An entry's states.
const EMPTY: u32 = 0;
/// Taken by a process that is writing its key.
const WRITING: u32 = 1;
const READY: u32 = 2;

/// One (database, service)'s counts. All zero is an empty entry (shared memory starts zeroed).
#[repr(C)]
#[derive(Default)]
pub struct Entry {
    state: AtomicU32,
    database: AtomicU32,
    service_hash: AtomicU64,
    refused_claims: AtomicU64,
    ownership_losses: AtomicU64,
}

impl Entry {
    fn counter(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::RefusedClaims => &self.refused_claims,
            Counter::OwnershipLosses => &self.ownership_losses,
        }
    }

    fn holds(&self, database: u32, service_hash: u64) -> bool {
        self.state.load(Ordering::Acquire) == READY
            && self.database.load(Ordering::Relaxed) == database
            && self.service_hash.load(Ordering::Relaxed) == service_hash
    }
}

/// The table, laid out to live in shared memory (`#[repr(C)]`, atomics only, zero is empty).
#[repr(C)]
pub struct Tally {
    entries: [Entry; ENTRIES],
    /// Per place a probe starts from: additions that found every entry taken and none of their key.
    uncounted: [AtomicU64; ENTRIES],
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            entries: std::array::from_fn(|_| Entry::default()),
            uncounted: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Tally {
    /// Adds one to `counter` of `service` in `database`; false when the table had no room for it.
    pub fn add(&self, database: u32, service: &str, counter: Counter) -> bool {
        let hash = service_hash(service);
        for entry in self.probe(database, hash) {
            if entry.holds(database, hash) {
                entry.counter(counter).fetch_add(1, Ordering::Relaxed);
                return true;
            }
            if entry.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                entry.database.store(database, Ordering::Relaxed);
                entry.service_hash.store(hash, Ordering::Relaxed);
                entry.state.store(READY, Ordering::Release);
                entry.counter(counter).fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        // Also when another process is taking the last entry for this key: its reader learns
        // that one addition is missing.
        self.uncounted[start(database, hash)].fetch_add(1, Ordering::Relaxed);
        false
    }

    /// The count of `counter` for `service` in `database` since the table was created; `None`
    /// when an addition whose probe starts where this key's does went uncounted for want of room.
    pub fn count(&self, database: u32, service: &str, counter: Counter) -> Option<u64> {
        let hash = service_hash(service);
        if self.uncounted[start(database, hash)].load(Ordering::Relaxed) > 0 {
            return None;
        }
        let mut sum = 0u64;
        for entry in self.probe(database, hash) {
            match entry.state.load(Ordering::Acquire) {
                EMPTY => break,
                _ if entry.holds(database, hash) => {
                    sum = sum.saturating_add(entry.counter(counter).load(Ordering::Relaxed));
                }
                _ => {}
            }
        }
        Some(sum)
    }

    /// The entries a key may have, in the order it takes them: from its hash on, round the table.
    /// Entries are never emptied, so a key's entries all come before the first empty one.
    fn probe(&self, database: u32, hash: u64) -> impl Iterator<Item = &Entry> {
        let start = start(database, hash);
        (0..ENTRIES).map(move |i| &self.entries[(start + i) % ENTRIES])
    }
}

/// Where a key's probe starts.
fn start(database: u32, hash: u64) -> usize {
    (hash ^ u64::from(database).wrapping_mul(0x9e37_79b9_7f4a_7c15)) as usize % ENTRIES
}

/// FNV-1a (64 bits) of the service's name: stable across builds, so that two libraries that share
/// a table agree. Two services of one database with one hash would share counts (odds 2^-64).
fn service_hash(service: &str) -> u64 {
    service.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_service_of_each_database_apart() {
        let tally = Tally::default();
        assert!(tally.add(1, "orders", Counter::RefusedClaims));
        assert!(tally.add(1, "orders", Counter::RefusedClaims));
        assert!(tally.add(1, "orders", Counter::OwnershipLosses));
        assert!(tally.add(2, "orders", Counter::RefusedClaims));
        assert!(tally.add(1, "payments", Counter::RefusedClaims));
        assert_eq!(tally.count(1, "orders", Counter::RefusedClaims), Some(2));
        assert_eq!(tally.count(1, "orders", Counter::OwnershipLosses), Some(1));
        assert_eq!(tally.count(2, "orders", Counter::RefusedClaims), Some(1));
        assert_eq!(tally.count(2, "orders", Counter::OwnershipLosses), Some(0));
        assert_eq!(tally.count(1, "payments", Counter::RefusedClaims), Some(1));
        assert_eq!(tally.count(1, "invoices", Counter::RefusedClaims), Some(0));
    }

    #[test]
    fn only_refused_claims_and_ownership_losses_count() {
        let counted: Vec<_> = EventKind::ALL.into_iter().filter_map(|k| Counter::of(k).map(|c| (k, c))).collect();
        assert_eq!(
            counted,
            [
                (EventKind::OwnershipLost, Counter::OwnershipLosses),
                (EventKind::RefusedFull, Counter::RefusedClaims),
                (EventKind::RefusedWatermark, Counter::RefusedClaims),
                (EventKind::RefusedNoStandby, Counter::RefusedClaims),
            ]
        );
    }

    #[test]
    fn concurrent_additions_are_all_counted() {
        let tally = Tally::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for i in 0..2_000 {
                        tally.add(7, &format!("service-{}", i % 40), Counter::RefusedClaims);
                    }
                });
            }
        });
        let total: u64 =
            (0..40).map(|i| tally.count(7, &format!("service-{i}"), Counter::RefusedClaims).unwrap()).sum();
        assert_eq!(total, 16_000);
        assert_eq!(tally.count(7, "service-0", Counter::RefusedClaims), Some(400));
    }

    #[test]
    fn a_full_table_says_unknown_for_a_service_without_an_entry_and_keeps_counting_the_others() {
        let tally = Tally::default();
        for i in 0..ENTRIES {
            assert!(tally.add(1, &format!("s{i}"), Counter::RefusedClaims));
        }
        assert_eq!(tally.count(1, "late", Counter::RefusedClaims), Some(0), "nothing missed yet");
        assert!(!tally.add(1, "late", Counter::RefusedClaims));
        assert_eq!(tally.count(1, "late", Counter::RefusedClaims), None);
        // The services that have an entry keep counting, and read their counts, but for the few
        // whose probe starts where the missed one's does.
        let late = start(1, service_hash("late"));
        let others: Vec<String> =
            (0..ENTRIES).map(|i| format!("s{i}")).filter(|s| start(1, service_hash(s)) != late).collect();
        assert!(others.len() >= ENTRIES - 8, "{} of {ENTRIES}", others.len());
        for s in &others {
            assert!(tally.add(1, s, Counter::RefusedClaims));
            assert_eq!(tally.count(1, s, Counter::RefusedClaims), Some(2), "{s}");
        }
    }

    #[test]
    fn an_addition_that_misses_makes_its_keys_count_unknown_not_too_small() {
        // Another process took the last entry for this very key and has not made it ready yet.
        let tally = Tally::default();
        for i in 0..ENTRIES - 1 {
            assert!(tally.add(1, &format!("s{i}"), Counter::RefusedClaims));
        }
        let last = tally.entries.iter().find(|e| e.state.load(Ordering::Relaxed) == EMPTY).unwrap();
        last.state.store(WRITING, Ordering::Relaxed);
        assert!(!tally.add(1, "orders", Counter::RefusedClaims));
        last.database.store(1, Ordering::Relaxed);
        last.service_hash.store(service_hash("orders"), Ordering::Relaxed);
        last.state.store(READY, Ordering::Release);
        last.refused_claims.fetch_add(1, Ordering::Relaxed);
        assert_eq!(tally.count(1, "orders", Counter::RefusedClaims), None, "2 refusals, 1 counted");
    }

    #[test]
    fn an_entry_left_halfway_by_a_dead_process_is_passed_over() {
        let tally = Tally::default();
        let hash = service_hash("orders");
        let first = tally.probe(1, hash).next().unwrap();
        first.state.store(WRITING, Ordering::Relaxed);
        assert!(tally.add(1, "orders", Counter::RefusedClaims));
        assert_eq!(tally.count(1, "orders", Counter::RefusedClaims), Some(1));
    }

    #[test]
    fn the_service_hash_is_fnv_1a() {
        // The published FNV-1a 64 test vectors: a library of another build must agree.
        assert_eq!(service_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(service_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(service_hash("foobar"), 0x8594_4171_f739_67e8);
    }
}
