//! idgen: a Snowflake machine-id registry and ID generator for PostgreSQL.
//!
//! The rules live in the pgrx-free `idgen-core` crate; this crate is the edge
//! that binds them to Postgres: settings, SQL functions, SPI and alerts.
//!
//! - `registry`: `system_nodes` and `idgen_claim` / `idgen_heartbeat` / `idgen_release`.
//! - `ids`: `idgen_next_id` and the functions that read IDs back.
//! - `backend`: each backend's own leases (hot path, slow path, transaction hooks).
//! - `privilege`: the slow path's switch to the extension owner's rights.
//! - `diagnostics`: alerts, the ownership history, and what the views and `idgen_explain` compute.
//! - `clock`, `settings`, `errors`: the small pieces around them.

use pgrx::prelude::*;

mod backend;
mod clock;
mod diagnostics;
mod durability;
mod errors;
mod ids;
mod privilege;
mod registry;
mod settings;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/types.sql", name = "types", bootstrap);
extension_sql_file!("../sql/registry.sql", name = "registry");
extension_sql_file!("../sql/registry_api.sql", name = "registry_api", finalize);
extension_sql_file!("../sql/history.sql", name = "history", requires = ["registry"]);
extension_sql_file!(
    "../sql/diagnostics.sql",
    name = "diagnostics",
    requires = ["registry", "history", idgen_policy, idgen_node_state, idgen_node_name, idgen_slot_pid, idgen_explain]
);
extension_sql_file!(
    "../sql/generator.sql",
    name = "generator",
    requires =
        [idgen_next_id, idgen_next_id_for_service, idgen_decode, idgen_min_id, idgen_max_id, idgen_backend_leases]
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::register();
    backend::register_transaction_callbacks();
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests.rs");
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
