//! idgen: a Snowflake machine-id registry and ID generator for PostgreSQL.
//!
//! The rules live in the pgrx-free `idgen-core` crate; this crate is the edge
//! that binds them to Postgres: settings, SQL functions, SPI and alerts.
//!
//! - `registry`: `system_nodes`, `idgen_claim` / `idgen_heartbeat` / `idgen_release`, the
//!   registry writes that commit on their own, the leases handed from a backend to the next, and
//!   the triggers that keep what is removed by hand.
//! - `history`: writing the ownership history, and counting every refusal (the tally).
//! - `shared`: idgen's shared memory (the writers, the slots' mailboxes and parked leases, the tally).
//! - `ids`: `idgen_next_id` and the functions that read IDs back.
//! - `backend`: each backend's own leases (hot path, slow path, the record it leaves at exit).
//! - `privilege`: the switch to the extension owner's rights, with the search_path pinned.
//! - `statements`, `spi`: every statement idgen runs, and the one module that runs them.
//! - `diagnostics`: alerts, and what the views, `idgen_health()` and `idgen_explain` compute.
//! - `earlier_symbols`: the C symbols older versions' SQL declared with other arguments, guarded.
//! - `clock`, `settings`, `errors`, `durability`, `server`: the small pieces around them.

use pgrx::prelude::*;

mod backend;
mod clock;
mod diagnostics;
mod durability;
mod earlier_symbols;
mod errors;
mod history;
mod ids;
mod privilege;
mod registry;
mod server;
mod settings;
mod shared;
mod spi;
mod statements;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!("../sql/registry.sql", name = "registry");
extension_sql_file!("../sql/registry_api.sql", name = "registry_api", finalize);
extension_sql_file!("../sql/history.sql", name = "history", requires = ["registry", policy]);
extension_sql_file!(
    "../sql/diagnostics.sql",
    name = "diagnostics",
    requires = [
        "registry",
        "history",
        policy,
        node_state,
        idgen_node_name,
        idgen_slot_pid,
        idgen_slot_holder_pid,
        idgen_backend_row_here,
        idgen_explain
    ]
);
extension_sql_file!(
    "../sql/generator.sql",
    name = "generator",
    requires = [
        idgen_next_id,
        idgen_next_id_for_service,
        idgen_decode,
        idgen_decode_for_service,
        idgen_min_id,
        idgen_min_id_for_service,
        idgen_max_id,
        idgen_max_id_for_service,
        idgen_backend_leases
    ]
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // No Rust backtrace ever reaches a client, whatever RUST_BACKTRACE the server was started
    // with: pgrx would append one to the DETAIL of every error raised through Rust. (Set before
    // anything can capture one; a backend is single-threaded.)
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    // Every process, a registry writer too, learns what invalidates what it remembers.
    registry::access::register_invalidation_callbacks();
    registry::incarnation::register_invalidation_callback();
    // idgen's registry writers run by the settings their callers took (`registry::writer`):
    // defining them would cost a writer's start more than its work.
    if registry::writer::is_registry_writer() {
        return;
    }
    settings::register();
    // SAFETY: set by the postmaster while it loads shared_preload_libraries.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        // The settings the server starts with, when consistent, stay in force until a reload
        // brings consistent ones (`settings::in_force`).
        shared::request_at_server_start(settings::keep_if_consistent);
        registry::writer::register_at_server_start();
    }
    registry::prepare_guard::register_transaction_callback();
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
