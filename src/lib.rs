//! idgen: a Snowflake machine-id registry and ID generator for PostgreSQL.
//!
//! The rules live in the pgrx-free `idgen-core` crate; this crate is the edge
//! that binds them to Postgres: settings, SQL functions, SPI and alerts.

use pgrx::prelude::*;

mod diagnostics;
mod errors;
mod registry;
mod settings;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/registry.sql", name = "registry", bootstrap);
extension_sql_file!("../sql/registry_api.sql", name = "registry_api", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::register();
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
