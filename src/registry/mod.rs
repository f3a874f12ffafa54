//! The machine-id registry: `system_nodes` and the functions that write it.
//!
//! - `claim`: runs the core's claim policy (the tier order lives in `idgen_core::policy`).
//! - `store`: every SQL statement the registry runs.
//! - `api`: the SQL functions `idgen_claim`, `idgen_heartbeat`, `idgen_release`.

pub mod api;
pub mod claim;
pub mod store;
