//! The machine-id registry: `system_nodes` and the functions that write it.
//!
//! - `access`: which role may act for which service, idgen_grant_service / idgen_revoke_service,
//!   and how sessions learn that grants changed.
//! - `incarnation`: the registry's generation, which a DROP moves, so that backends check their
//!   leases before issuing under a registry that is gone.
//! - `claim`: the store the core's claim (`idgen_core::claim`) runs its statements with, over SPI.
//! - `layouts`: each service's layout and pool, idgen_define_layout.
//! - `own`: the database's own service, recorded when idgen was created in it.
//! - `store`: runs the registry's statements (`crate::statements`) with their parameters.
//! - `api`: the SQL functions `idgen_claim`, `idgen_heartbeat`, `idgen_release`.
//! - `prepare_guard`: refuses a PREPARE TRANSACTION after a registry write (0A000).
//! - `writer`: registry writes that commit on their own, in the registry writers (background workers).
//! - `handover`: leases a backend leaves in its slot for the next one, through shared memory.
//! - `triggers`: tombstones of rows removed by hand, restored rows, grants changed, the drop guard.

pub mod access;
pub mod api;
pub mod claim;
pub mod handover;
pub mod incarnation;
pub mod layouts;
pub mod own;
pub mod prepare_guard;
pub mod store;
pub mod triggers;
pub mod writer;

use crate::errors::raise;
use idgen_core::IdgenError;
use pgrx::pg_sys;

/// Refuses, with `refusal`, a registry read that decides a write (a claim, a DROP or TRUNCATE
/// check, a restored row's tombstone merge) in a transaction at REPEATABLE READ or SERIALIZABLE:
/// it would see the transaction's snapshot, not the windows, reports and tombstones committed
/// since (a claim would grant an id before its removed holder's bound, a DROP forget a holder). At
/// READ COMMITTED each statement reads what is committed when it runs, after its locks.
pub(crate) fn refuse_a_transaction_snapshot(refusal: impl FnOnce() -> IdgenError) {
    // SAFETY: reads backend-local transaction state.
    if unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 } {
        raise(refusal());
    }
}
