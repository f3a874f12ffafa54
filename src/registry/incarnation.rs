//! Whether the registry a backend's leases were confirmed in may be gone.
//!
//! A backend keeps its lease's window in memory and issues under it without reading the registry
//! (the hot path). After `DROP EXTENSION` the drop guard has seen every window end, but a server
//! clock stepped back later reopens a window that just ended; a connected backend would issue
//! under it again while the new registry hands the same machine id to another holder. So the
//! leases carry the registry's generation ([`generation`]): it moves on every invalidation of
//! `idgen_private.idgen_registry` (its DROP among them; a relcache invalidation that every session
//! processes at its next transaction or lock, and the hot path asks for at once: [`current`]) and on
//! a reset of every relation cache, and a lease confirmed in an earlier generation is checked
//! against the registry before its next ID (`idgen_core::lease::BackendLease::next_id`). The check
//! finds another epoch in a registry created again, and the backend claims anew there.
//!
//! Another process knows nothing of this process's invalidations: a lease handed over in shared
//! memory (`registry::handover`) carries the registry's identity instead ([`confirming`]): the
//! relation's oid and the transaction that created its catalog row, which a DROP and CREATE, and any
//! rewrite of the relation, change.

use idgen_core::lease::Confirmation;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Moves whenever the registry may have been dropped.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The oid of `idgen_private.idgen_registry`, once known (0 before, and again after its invalidation).
static REGISTRY: AtomicU32 = AtomicU32::new(0);
/// Its identity ([`identity`]), read with the oid.
static IDENTITY: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// The generation now, for the hot path: invalidations queued since this backend last processed
/// them are processed first. A statement that takes no new lock (a long `INSERT ... SELECT`, the
/// next statement of an open transaction on tables it has locked already) processes none by
/// itself, and would go on issuing under the window of a registry dropped meanwhile. With nothing
/// queued this is one read of shared memory, without a lock (`SIGetDataEntries`' quick test).
#[inline]
pub fn current() -> u64 {
    // SAFETY: what every lock acquisition of the backend does; the callbacks only move counters.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    generation()
}

/// What a lease asked for now is confirmed in: the generation, read before the registry is (an
/// invalidation that arrives meanwhile moves the generation past it, and the lease is checked again
/// at its next ID), and the registry's identity. Learns, first, which relation to watch (a DROP and
/// CREATE gives the registry a new oid, learnt at the next check after the old one's invalidation).
pub fn confirming() -> Confirmation {
    let generation = generation();
    if REGISTRY.load(Ordering::Relaxed) == 0 {
        let (oid, identity) = look_up().unwrap_or((0, 0));
        IDENTITY.store(identity, Ordering::Relaxed);
        REGISTRY.store(oid, Ordering::Relaxed);
    }
    Confirmation { generation, registry: IDENTITY.load(Ordering::Relaxed) }
}

/// The oid of `idgen_private.idgen_registry` and its identity: the oid, and the raw xmin of its
/// `pg_class` row (kept when the row is frozen), which only a new row has otherwise.
fn look_up() -> Option<(u32, u64)> {
    // SAFETY: catalog lookups by name in a transaction (the caller's, before it reads the registry).
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"idgen_private".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return None;
        }
        let tuple = pg_sys::SearchSysCache2(
            pg_sys::SysCacheIdentifier::RELNAMENSP as i32,
            pg_sys::Datum::from(c"idgen_registry".as_ptr()),
            pg_sys::Datum::from(schema),
        );
        if tuple.is_null() {
            return None;
        }
        let class = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple);
        let oid = u32::from((*class).oid);
        let xmin = u32::from((*(*tuple).t_data).t_choice.t_heap.t_xmin);
        pg_sys::ReleaseSysCache(tuple);
        Some((oid, u64::from(oid) << 32 | u64::from(xmin)))
    }
}

/// Hooks the generation to the registry's invalidations; called from `_PG_init`.
pub fn register_invalidation_callback() {
    // SAFETY: registers a plain function for the life of the backend; it only moves counters.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(relation_changed), pg_sys::Datum::from(0)) };
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn relation_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // Unknown (0): a lease may have been confirmed by a registry this backend could not see yet when
    // it looked (created by another session meanwhile): any invalidation may be its DROP.
    let watched = REGISTRY.load(Ordering::Relaxed);
    if relid == pg_sys::InvalidOid || watched == 0 || u32::from(relid) == watched {
        if relid != pg_sys::InvalidOid {
            REGISTRY.store(0, Ordering::Relaxed);
        }
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}
