//! Which role may act for which service: the check the registry functions and
//! the backends' claims run (the rule is `idgen_core::access`), and the SQL
//! functions that grant and revoke services.

use super::sql;
use crate::errors::{or_raise, raise};
use idgen_core::access::{self, Caller};
use idgen_core::input;
use idgen_core::watermark::HolderKind;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};

/// Refuses (42501) a `caller` who may not act for `service`. Runs with the
/// extension owner's rights (it reads `idgen_service_members`).
pub fn authorize(client: &mut SpiClient, function: &str, kind: HolderKind, caller: pg_sys::Oid, service: &str) {
    let database = crate::backend::database_name();
    or_raise(access::may_act_for(function, kind, service, database, || standing(client, caller, service)));
}

/// What the registry knows of `caller` for `service`.
fn standing(client: &mut SpiClient, caller: pg_sys::Oid, service: &str) -> Caller {
    let args = [caller.into(), service.to_owned().into()];
    let mut table = client
        .update(sql::CALLER_STANDING, Some(1), &args)
        .unwrap_or_else(|e| panic!("idgen: could not look up the calling role: {e}"));
    let row = table.next().unwrap_or_else(|| panic!("idgen: the calling role {caller:?} is not in pg_roles"));
    let flag = |ordinal| row.get::<bool>(ordinal).ok().flatten().unwrap_or(false);
    Caller {
        role: row.get::<String>(1).ok().flatten().unwrap_or_default(),
        superuser: flag(2),
        extension_owner: flag(3),
        member: flag(4),
    }
}

/// The role a SECURITY DEFINER function is acting for: the session's current role.
pub fn calling_role() -> pg_sys::Oid {
    // SAFETY: backend-local state.
    unsafe { pg_sys::GetOuterUserId() }
}

fn role_oid(client: &mut SpiClient, function: &str, role: &str) -> pg_sys::Oid {
    let found = client
        .update(sql::ROLE_BY_NAME, Some(1), &[role.to_owned().into()])
        .map(|mut table| table.next().and_then(|row| row.get::<pg_sys::Oid>(1).ok().flatten()))
        .unwrap_or_else(|e| panic!("idgen: could not look up role {role:?}: {e}"));
    found.unwrap_or_else(|| raise(access::unknown_role(function, role)))
}

/// Lets `role` (and its members) act for `service`, and call the three registry functions.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idgen_grant_service(service: Option<&str>, role: Option<&str>) -> bool {
    const F: &str = "idgen_grant_service";
    let service = or_raise(input::service_name(F, service));
    let role = or_raise(input::role_name(F, role));
    Spi::connect_mut(|client| {
        let oid = role_oid(client, F, &role);
        let args = [service.into(), oid.into()];
        let new = client
            .update(sql::GRANT_SERVICE, Some(1), &args)
            .map(|mut table| table.next().is_some())
            .unwrap_or_else(|e| panic!("idgen: could not record the grant: {e}"));
        let grant: String = client
            .update(sql::GRANT_EXECUTE_STATEMENT, Some(1), &[oid.into()])
            .map(|mut table| table.next().and_then(|row| row.get::<String>(1).ok().flatten()))
            .unwrap_or_else(|e| panic!("idgen: could not build the GRANT: {e}"))
            .expect("the role exists");
        client.update(&grant, None, &[]).unwrap_or_else(|e| panic!("idgen: {grant} failed: {e}"));
        new
    })
}

/// Takes `service` back from `role`; true when it had been granted. EXECUTE on the
/// registry functions stays (the role may act for other services).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idgen_revoke_service(service: Option<&str>, role: Option<&str>) -> bool {
    const F: &str = "idgen_revoke_service";
    let service = or_raise(input::service_name(F, service));
    let role = or_raise(input::role_name(F, role));
    Spi::connect_mut(|client| {
        let oid = role_oid(client, F, &role);
        client
            .update(sql::REVOKE_SERVICE, Some(1), &[service.into(), oid.into()])
            .map(|mut table| table.next().is_some())
            .unwrap_or_else(|e| panic!("idgen: could not revoke the grant: {e}"))
    })
}
