//! Which role may act for which service.
//!
//! A service's machine ids are claimed, renewed and released by superusers, by
//! the extension's owner, and by roles granted the service
//! (`idgen_grant_service`, directly or through a role they are a member of).
//! A database's own backends may also use the database's own service (named
//! like the database when idgen was created in it; a rename keeps it) without a
//! grant: the single-database case needs no setup.
//!
//! A backend mints only for a service that exists (its database's own, or one
//! defined, granted or claimed): a misspelt name in `idgen_next_id('ordrs')`,
//! run by a superuser in a migration, is refused instead of creating a service.

use crate::error::{IdgenError, SqlState};
use crate::watermark::HolderKind;

/// What the registry knows of the calling role, for one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub role: String,
    pub superuser: bool,
    pub extension_owner: bool,
    /// Granted the service (directly or through membership).
    pub member: bool,
    /// The registry knows the service: a layout defined or recorded for it, a grant of it to any
    /// role, or a registry row.
    pub service_known: bool,
}

/// Refuses, with 42501, a caller who may not act for `service`, and with 42704 a backend of a
/// caller who may, for a service that does not exist (see [`unknown_service`]). `standing`
/// looks the caller up, and is not called when the answer does not depend on
/// the caller (a backend using its database's service): that lookup is a
/// catalog query a new connection would otherwise run cold.
pub fn may_act_for(
    function: &str,
    kind: HolderKind,
    service: &str,
    own_service: &str,
    standing: impl FnOnce() -> Caller,
) -> Result<(), IdgenError> {
    if kind == HolderKind::Backend && service == own_service {
        return Ok(());
    }
    let caller = standing();
    if !(caller.superuser || caller.extension_owner || caller.member) {
        return Err(not_granted(function, service, &caller));
    }
    // After the grant check: a role granted nothing learns nothing of which services exist.
    if kind == HolderKind::Backend && !caller.service_known {
        return Err(unknown_service(function, service));
    }
    Ok(())
}

fn not_granted(function: &str, service: &str, caller: &Caller) -> IdgenError {
    IdgenError::new(
        SqlState::InsufficientPrivilege,
        format!("{function}: role \"{}\" may not act for service \"{service}\"", caller.role),
    )
    .detail("Machine ids of a service are claimed, renewed and released by superusers, the extension's owner, and roles granted the service with idgen_grant_service; a database's own backends may use its own service (named like the database when idgen was created in it).")
    .hint(format!(
        "A superuser can grant it: SELECT idgen_grant_service('{}', '{}');",
        service.replace('\'', "''"),
        caller.role.replace('\'', "''")
    ))
}

/// What makes a service exist, each piece marked `true` when this backend's transaction wrote it and
/// has not committed: its layout row, its grants; and whether it has registry rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    pub layout_ours: Option<bool>,
    pub grants_ours: Vec<bool>,
    pub has_rows: bool,
}

/// Whether a backend's claim for a service must wait for this transaction's commit: the claim commits
/// in a transaction of its own, which would wait for a layout row this transaction wrote, and would
/// create a service that exists only by this transaction's grants (left behind by a rollback).
pub fn created_in_this_transaction(evidence: &Evidence, own_service: bool) -> bool {
    if evidence.layout_ours == Some(true) {
        return true;
    }
    let pieces: Vec<bool> = evidence.layout_ours.into_iter().chain(evidence.grants_ours.iter().copied()).collect();
    !own_service && !evidence.has_rows && !pieces.is_empty() && pieces.iter().all(|&ours| ours)
}

/// A backend was asked to mint for a service the registry does not know: a misspelt name, most
/// likely, which would otherwise become a service of its own.
pub fn unknown_service(function: &str, service: &str) -> IdgenError {
    IdgenError::new(SqlState::UndefinedObject, format!("{function}: service \"{service}\" does not exist"))
        .detail("A database backend mints only for a service that exists: the database's own, or one defined with idgen_define_layout, granted with idgen_grant_service, or claimed by a node.")
        .hint(format!(
            "Check the name. To create the service: SELECT idgen_define_layout('{}');",
            service.replace('\'', "''")
        ))
}

/// `idgen_grant_service` / `idgen_revoke_service` named a role that does not exist.
pub fn unknown_role(function: &str, role: &str) -> IdgenError {
    IdgenError::new(SqlState::UndefinedObject, format!("{function}: role \"{role}\" does not exist"))
        .hint("Pass the role's name as SELECT rolname FROM pg_roles shows it.")
}

/// The role acting at the call was dropped while its session went on.
pub fn acting_role_gone(function: &str, role_oid: u32) -> IdgenError {
    IdgenError::new(
        SqlState::InsufficientPrivilege,
        format!("{function}: the role acting at the call no longer exists"),
    )
    .detail(format!("Role {role_oid} was dropped while this session went on; it may act for no service."))
    .hint("Reconnect as an existing role.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(superuser: bool, owner: bool, member: bool) -> Caller {
        Caller { role: "app".into(), superuser, extension_owner: owner, member, service_known: true }
    }

    #[test]
    fn superusers_owners_and_members_may_act_for_any_service() {
        for c in [caller(true, false, false), caller(false, true, false), caller(false, false, true)] {
            let decided = may_act_for("idgen_claim", HolderKind::Service, "orders", "shop", || c.clone());
            assert!(decided.is_ok(), "{c:?}");
        }
    }

    #[test]
    fn backends_may_use_their_database_service_and_nothing_else_ungranted() {
        let nobody = || caller(false, false, false);
        let unasked = || -> Caller { panic!("the caller's standing does not decide this") };
        assert!(may_act_for("idgen_next_id", HolderKind::Backend, "shop", "shop", unasked).is_ok());
        // A service node (or an idgen_claim call) gets no such default.
        assert!(may_act_for("idgen_claim", HolderKind::Service, "shop", "shop", nobody).is_err());
        let err = may_act_for("idgen_next_id", HolderKind::Backend, "o'rders", "shop", nobody).unwrap_err();
        assert_eq!(err.sqlstate.code(), "42501");
        assert_eq!(err.message, "idgen_next_id: role \"app\" may not act for service \"o'rders\"");
        assert_eq!(
            err.hint.as_deref(),
            Some("A superuser can grant it: SELECT idgen_grant_service('o''rders', 'app');")
        );
    }

    #[test]
    fn a_backend_mints_for_no_service_that_does_not_exist_whoever_asks() {
        let unknown = |superuser, member| Caller { service_known: false, ..caller(superuser, false, member) };
        for c in [unknown(true, false), unknown(false, false)] {
            let err = may_act_for("idgen_next_id", HolderKind::Backend, "o'rdrs", "shop", || c.clone()).unwrap_err();
            let expected = if c.superuser { "42704" } else { "42501" };
            assert_eq!(err.sqlstate.code(), expected, "{c:?}: the grant is checked first");
        }
        let err =
            may_act_for("idgen_next_id", HolderKind::Backend, "o'rdrs", "shop", || unknown(true, false)).unwrap_err();
        assert_eq!(err.message, "idgen_next_id: service \"o'rdrs\" does not exist");
        assert_eq!(
            err.hint.as_deref(),
            Some("Check the name. To create the service: SELECT idgen_define_layout('o''rdrs');")
        );
        // The database's own service always exists; a node's claim creates its service.
        let unasked = || -> Caller { panic!("the caller's standing does not decide this") };
        assert!(may_act_for("idgen_next_id", HolderKind::Backend, "shop", "shop", unasked).is_ok());
        assert!(may_act_for("idgen_claim", HolderKind::Service, "o'rdrs", "shop", || unknown(true, false)).is_ok());
    }

    #[test]
    fn a_claim_waits_for_this_transaction_only_for_what_it_wrote_alone() {
        let evidence = |layout_ours, grants_ours: &[bool], has_rows| Evidence {
            layout_ours,
            grants_ours: grants_ours.to_vec(),
            has_rows,
        };
        // A layout row this transaction wrote: the claim would wait for it, whatever else there is.
        assert!(created_in_this_transaction(&evidence(Some(true), &[false], true), true));
        // Only this transaction's grants: a rollback would leave the claim's service behind.
        assert!(created_in_this_transaction(&evidence(None, &[true, true], false), false));
        // Anything committed, registry rows, or the database's own service: it exists already.
        assert!(!created_in_this_transaction(&evidence(Some(false), &[true], false), false));
        assert!(!created_in_this_transaction(&evidence(None, &[true, false], false), false));
        assert!(!created_in_this_transaction(&evidence(None, &[true], true), false));
        assert!(!created_in_this_transaction(&evidence(None, &[true], false), true));
        // Nothing at all: not created here (the existence check refuses it).
        assert!(!created_in_this_transaction(&Evidence::default(), false));
    }
}
