//! Which role may act for which service: the check the registry functions and
//! the backends' claims run (the rule is `idgen_core::access`), the SQL
//! functions that grant and revoke services, and how every session learns that
//! grants changed.
//!
//! The role checked is the one acting at the call: `GetUserId()`, after
//! `SET ROLE` and inside another role's SECURITY DEFINER function (idgen's own
//! functions are not SECURITY DEFINER, so they see it). The registry functions
//! check on every call, and remember an allowed role per service; a backend's
//! leases cache the answer per service for the role it checked. Both hold for the
//! grants' generation ([`grants_generation`]), which moves
//! whenever `idgen_service_members` or role memberships change anywhere (a
//! relcache or syscache invalidation, which every session processes before its
//! next statement), so that a revocation takes effect at once, in open sessions
//! too.

use crate::errors::{or_raise, raise};
use crate::privilege::as_extension_owner;
use crate::spi;
use crate::statements as sql;
use idgen_core::access::{self, Caller};
use idgen_core::input;
use idgen_core::watermark::HolderKind;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Moves whenever who may act for which service may have changed.
static GRANTS_GENERATION: AtomicU64 = AtomicU64::new(0);
/// The oid of `idgen_private.idgen_service_members`, once known (0 before).
static SERVICE_MEMBERS: AtomicU32 = AtomicU32::new(0);

#[inline]
pub fn grants_generation() -> u64 {
    GRANTS_GENERATION.load(Ordering::Relaxed)
}

/// Refuses (42501) a `role` that may not act for `service`. Runs with the extension owner's
/// rights (it reads `idgen_service_members`). A role allowed is remembered for the service until
/// the grants' generation moves (invalidations are processed first: a revocation committed
/// before this call is seen) or the extension changes owner.
pub fn authorize(client: &mut SpiClient, function: &str, kind: HolderKind, role: pg_sys::Oid, service: &str) {
    // SAFETY: what every lock acquisition of the backend does; the callbacks only move counters.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    let key = Allowed {
        role: u32::from(role),
        owner: u32::from(crate::privilege::checked_installation().owner),
        generation: grants_generation(),
        backend: kind == HolderKind::Backend,
        service: service.to_owned(),
    };
    let mut allowed = ALLOWED.lock();
    allowed.retain(|a| a.generation == key.generation);
    if allowed.contains(&key) {
        return;
    }
    drop(allowed);
    let own = super::own::service();
    watch_service_members(client);
    or_raise(access::may_act_for(function, kind, service, &own, || standing(client, function, role, service)));
    let mut allowed = ALLOWED.lock();
    if allowed.len() >= ALLOWED_KEPT {
        allowed.clear();
    }
    allowed.push(key);
}

/// A role found allowed to act for a service, and what the answer depends on.
#[derive(PartialEq, Eq)]
struct Allowed {
    role: u32,
    owner: u32,
    generation: u64,
    backend: bool,
    service: String,
}

/// This backend's remembered answers (a service node's heartbeats ask every few minutes).
static ALLOWED: parking_lot::Mutex<Vec<Allowed>> = parking_lot::Mutex::new(Vec::new());
/// How many answers a backend keeps.
const ALLOWED_KEPT: usize = 256;

/// What the registry knows of `role` for `service`, read with the latest snapshot: in a
/// REPEATABLE READ transaction (or one that imported an old snapshot) the transaction's own
/// snapshot would still show a grant revoked since, and the answer is kept until the grants change.
fn standing(_client: &mut SpiClient, function: &str, role: pg_sys::Oid, service: &str) -> Caller {
    let args = sql::CALLER_STANDING { role: u32::from(role), service: service.into() };
    let caller = spi::first_row_with_latest_snapshot(args).map(|row| Caller {
        role: row.role.unwrap_or_default(),
        superuser: row.superuser.unwrap_or(false),
        extension_owner: row.extension_owner.unwrap_or(false),
        member: row.member.unwrap_or(false),
        service_known: row.service_known.unwrap_or(false),
    });
    // None: dropped while its session went on (Postgres lets a session outlive its role).
    let caller = caller.unwrap_or_else(|| raise(access::acting_role_gone(function, u32::from(role))));
    // The objects before 0.7.0 have no idgen_define_layout to create a service with: there a
    // backend's first ID still creates its service, until the update.
    let service_known = caller.service_known
        || !crate::privilege::installed_has_layouts()
        || spi::first_row_with_latest_snapshot(sql::LAYOUT_EXISTS { service: service.into() }).is_some();
    Caller { service_known, ..caller }
}

/// Whether `service` exists for a backend's claim only by what this transaction wrote and has not
/// committed (an `idgen_define_layout`, an `idgen_grant_service`, an `idgen_claim`), or has its
/// layout row written by it: the claim, which commits in a transaction of its own, would not see
/// it (and create the service anyway, or wait for the row). Free for a transaction that has
/// written nothing (no transaction id), as a new connection's first ID is; always false for the
/// objects before 0.7.0, where a backend's first ID creates its service.
pub fn created_in_this_transaction(client: &mut SpiClient, service: &str) -> bool {
    // SAFETY: reads backend-local transaction state.
    if unsafe { pg_sys::GetTopTransactionIdIfAny() } == pg_sys::InvalidTransactionId
        || !crate::privilege::installed_has_layouts()
    {
        return false;
    }
    let ours = |xmin: i64| {
        // SAFETY: a lookup in this backend's transaction state (its subtransactions included).
        u32::try_from(xmin).is_ok_and(|x| unsafe { pg_sys::TransactionIdIsCurrentTransactionId(x.into()) })
    };
    let evidence = spi::run(client, sql::SERVICE_EVIDENCE { service: service.into() }, Some(1))
        .unwrap_or_else(|e| panic!("idgen: could not read what makes service {service:?} exist: {e}"))
        .into_iter()
        .next()
        .map(|row| access::Evidence {
            layout_ours: row.layout_xmin.map(ours),
            grants_ours: row.grant_xmins.unwrap_or_default().into_iter().map(ours).collect(),
            has_rows: row.has_rows.unwrap_or(false),
        })
        .unwrap_or_default();
    access::created_in_this_transaction(&evidence, service == super::own::service())
}

/// The role acting now: the one idgen checks and records. Read before switching to the
/// extension owner (after it, this would be the owner).
pub fn acting_role() -> pg_sys::Oid {
    // idgen's own switch, not Postgres' flag for it: every SECURITY DEFINER function sets that,
    // and a claim inside one acts as the function's owner, as documented.
    assert!(
        !crate::privilege::switched_to_extension_owner(),
        "idgen: the acting role is read after switching to the extension owner"
    );
    // SAFETY: backend-local state.
    unsafe { pg_sys::GetUserId() }
}

/// Learns, once, which relation's invalidations mean "the grants changed".
fn watch_service_members(client: &mut SpiClient) {
    if SERVICE_MEMBERS.load(Ordering::Relaxed) != 0 {
        return;
    }
    let oid = spi::run(client, sql::SERVICE_MEMBERS_OID {}, Some(1))
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .and_then(|row| row.relation);
    if let Some(oid) = oid {
        SERVICE_MEMBERS.store(oid, Ordering::Relaxed);
    }
}

/// Hooks the grants' generation to the invalidations of the grants' table, of roles and their
/// memberships, and of databases (their owners); called from `_PG_init`.
pub fn register_invalidation_callbacks() {
    // SAFETY: registers plain functions for the life of the backend; they only bump a counter.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relation_changed), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM as i32,
            Some(roles_changed),
            pg_sys::Datum::from(0),
        );
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::AUTHOID as i32,
            Some(roles_changed),
            pg_sys::Datum::from(0),
        );
        // A database's owner is a member of pg_database_owner: a new owner changes memberships too.
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::DATABASEOID as i32,
            Some(roles_changed),
            pg_sys::Datum::from(0),
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let watched = SERVICE_MEMBERS.load(Ordering::Relaxed);
    if relid == pg_sys::InvalidOid || watched == 0 || u32::from(relid) == watched {
        // Learnt again at the next check: a DROP and CREATE EXTENSION gives the table a new oid,
        // whose invalidations the old one would miss.
        SERVICE_MEMBERS.store(0, Ordering::Relaxed);
        GRANTS_GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn roles_changed(_arg: pg_sys::Datum, _cache_id: std::ffi::c_int, _hash: u32) {
    GRANTS_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Tells every session, at this transaction's commit, that the grants changed: the trigger of
/// `idgen_service_members` calls it for every change, however made.
pub fn announce_grants_changed(relid: pg_sys::Oid) {
    // SAFETY: queues a relcache invalidation of the grants' table, sent at commit.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
}

fn role_oid(client: &mut SpiClient, function: &str, role: &str) -> pg_sys::Oid {
    let found = spi::run(client, sql::ROLE_BY_NAME { role_name: role.into() }, Some(1))
        .map(|rows| rows.into_iter().next().and_then(|row| row.role))
        .unwrap_or_else(|e| panic!("idgen: could not look up role {role:?}: {e}"));
    found.map(pg_sys::Oid::from).unwrap_or_else(|| raise(access::unknown_role(function, role)))
}

/// Lets `role` (and its members) act for `service`.
#[pg_extern(volatile, parallel_unsafe)]
fn idgen_grant_service(service: Option<&str>, role: Option<&str>) -> bool {
    const F: &str = "idgen_grant_service";
    let service = or_raise(input::service_name(F, service));
    let role = or_raise(input::role_name(F, role));
    super::prepare_guard::wrote_in_transaction(F);
    as_extension_owner(|| {
        Spi::connect_mut(|client| {
            let oid = role_oid(client, F, &role);
            spi::run(client, sql::GRANT_SERVICE { service, role: u32::from(oid) }, None)
                .map(|granted| !granted.is_empty())
                .unwrap_or_else(|e| panic!("idgen: could not record the grant: {e}"))
        })
    })
}

/// Takes `service` back from `role`; true when it had been granted.
#[pg_extern(volatile, parallel_unsafe)]
fn idgen_revoke_service(service: Option<&str>, role: Option<&str>) -> bool {
    const F: &str = "idgen_revoke_service";
    let service = or_raise(input::service_name(F, service));
    let role = or_raise(input::role_name(F, role));
    super::prepare_guard::wrote_in_transaction(F);
    as_extension_owner(|| {
        Spi::connect_mut(|client| {
            let oid = role_oid(client, F, &role);
            spi::run(client, sql::REVOKE_SERVICE { service, role: u32::from(oid) }, None)
                .map(|revoked| !revoked.is_empty())
                .unwrap_or_else(|e| panic!("idgen: could not revoke the grant: {e}"))
        })
    })
}
