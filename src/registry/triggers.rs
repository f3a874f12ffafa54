//! What keeps the registry's knowledge when someone changes it by hand:
//! - rows deleted or truncated leave their bounds as tombstones, one per machine
//!   id, and TRUNCATE starts a new epoch;
//! - a row inserted for a machine id with a tombstone (a restore, a row written
//!   by hand) takes the tombstone's bound and a newer version, so that its old
//!   holder is fenced and its next holder starts after it;
//! - every change of the grants tells every session to check them again;
//! - a DROP that would remove the extension is refused while its registry
//!   guards machine ids that may still be stamped.
//!
//! These run as whoever changed the table (a superuser, the extension owner)
//! or ran the DROP (possibly the database owner, dropping its schema), and do
//! their work as the extension owner with a pinned search_path. They read the
//! settings through the library, never through SQL text, so that a setting
//! reset without a restart cannot break them.

use super::{refuse_a_transaction_snapshot, store};
use crate::errors::raise;
use crate::privilege::as_extension_owner;
use crate::settings;
use idgen_core::facts::StillStamping;
use idgen_core::input::node_name;
use idgen_core::messages;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

/// How many holders a refused DROP names.
const SHOWN: usize = 5;

/// BEFORE DELETE (per row) and BEFORE TRUNCATE on `system_nodes`.
#[pg_trigger(sql = false)]
fn rows_removed<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, PgHeapTupleError> {
    let policy = settings::policy_in_force();
    let (lease_secs, takeover_secs) = (policy.lease_secs(), policy.takeover_idle_1h_secs);
    match trigger.old() {
        Some(old) => {
            let (service, machine_id) = row_key(&old);
            as_extension_owner(|| {
                Spi::connect_mut(|client| store::tombstone_row(client, &service, machine_id, lease_secs, takeover_secs))
            });
            Ok(Some(old))
        }
        None => {
            // TRUNCATE removes every row version, also those a snapshot taken before it cannot see:
            // the tombstones must be written from what is committed now.
            refuse_a_transaction_snapshot(|| messages::registry_change_needs_read_committed("TRUNCATE"));
            as_extension_owner(|| {
                Spi::connect_mut(|client| store::tombstone_all_and_start_epoch(client, lease_secs, takeover_secs))
            });
            Ok(None)
        }
    }
}

/// The service and machine id of a row of `system_nodes` (machine ids are `smallint` in the objects
/// before 0.7.0).
fn row_key(row: &PgHeapTuple<'_, impl WhoAllocated>) -> (String, i32) {
    let service: Option<String> =
        row.get_by_name("service").unwrap_or_else(|e| panic!("idgen: system_nodes.service: {e}"));
    let machine_id = row
        .get_by_name::<i32>("machine_id")
        .or_else(|_| row.get_by_name::<i16>("machine_id").map(|id| id.map(i32::from)))
        .unwrap_or_else(|e| panic!("idgen: system_nodes.machine_id: {e}"));
    (service.expect("service is not null"), machine_id.expect("machine_id is not null"))
}

/// BEFORE UPDATE OF service, machine_id (per row) on `system_nodes`: a row's key never changes.
#[pg_trigger(sql = false)]
fn key_unchanged<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, PgHeapTupleError> {
    let old = trigger.old().expect("an UPDATE trigger has the old row");
    let new = trigger.new().expect("an UPDATE trigger has the new row");
    let (before, after) = (row_key(&old), row_key(&new));
    if before != after {
        raise(messages::registry_key_changed(&before.0, before.1, &after.0, after.1));
    }
    Ok(Some(new))
}

/// BEFORE UPDATE (per statement) on `idgen_private.idgen_history`: the history is append-only.
#[pg_trigger(sql = false)]
fn history_append_only<'a>(
    _trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    raise(messages::history_append_only())
}

/// AFTER INSERT (per row) on `system_nodes`.
#[pg_trigger(sql = false)]
fn rows_inserted<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, PgHeapTupleError> {
    let new = trigger.new().expect("an INSERT trigger has a new row");
    // Its tombstone merge must see a tombstone written after an older snapshot (the row it replaces,
    // deleted since: the insert no longer conflicts with it).
    refuse_a_transaction_snapshot(messages::insert_needs_read_committed);
    let (service, machine_id) = row_key(&new);
    as_extension_owner(|| {
        Spi::connect_mut(|client| {
            store::merge_tombstone(client, &service, machine_id);
            // Its holder minted by the layout recorded now: no definition may change it any more.
            super::layouts::fix(client, &service);
        })
    });
    Ok(Some(new))
}

/// AFTER INSERT, UPDATE, DELETE or TRUNCATE (per statement) on `idgen_service_members`.
#[pg_trigger(sql = false)]
fn grants_changed<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let relid = trigger.relid().expect("a table trigger has its table");
    super::access::announce_grants_changed(relid);
    Ok(None)
}

/// The event trigger `idgen_drop_guard` (ddl_command_start of DROP EXTENSION, DROP SCHEMA,
/// DROP OWNED and ALTER EXTENSION).
#[pg_extern(sql = false)]
fn drop_guard(fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: an event trigger is called with its EventTriggerData as the context.
    let (parsetree, command) = unsafe {
        let data = (*fcinfo).context as *mut pg_sys::EventTriggerData;
        if data.is_null() || (*data).type_ != pg_sys::NodeTag::T_EventTriggerData {
            return;
        }
        let tag = std::ffi::CStr::from_ptr(pg_sys::GetCommandTagName((*data).tag)).to_string_lossy().into_owned();
        ((*data).parsetree, tag)
    };
    // SAFETY: the parse tree of the command the trigger fires for.
    let Some(drop) = (unsafe { drops_idgen(parsetree) }) else { return };
    // This trigger runs before the command's own permission checks. Only a role with the rights of
    // the extension's owner may drop the extension: anyone else is left to those checks (DROP
    // EXTENSION, DROP OWNED) or refused here (the owner of idgen's schema, whose DROP SCHEMA ...
    // CASCADE would take the extension with it), before this takes any lock or reads anything.
    // SAFETY: a catalog lookup for the current user.
    let may_drop = unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), drop.owner) };
    match (&drop.kind, may_drop) {
        (DropKind::Schema(name), false) => raise(messages::schema_drop_takes_idgen(name)),
        (DropKind::OwnedBySchemaOwner(name), false) => raise(messages::owned_drop_takes_idgen(name)),
        (_, false) => return,
        // An object leaving the extension can be dropped on its own, with no check at all.
        (DropKind::Member, true) => raise(messages::member_removal_refused()),
        _ => {}
    }
    refuse_a_transaction_snapshot(|| messages::registry_change_needs_read_committed(&command));
    let policy = settings::policy_in_force();
    let stamping = as_extension_owner(|| {
        Spi::connect_mut(|client| {
            // No window or report may commit between this check and the DROP; a registry write in
            // flight makes the DROP fail at once rather than queue every claim behind it. Who holds
            // the tables is read first: a failed lock ends the transaction's reads.
            let holders = store::registry_lock_holders(client);
            if !store::lock_against_writes(client) {
                raise(messages::drop_registry_busy(&command, &holders));
            }
            // This session's own leases count as what they stamped, not as their windows.
            crate::backend::close_leases(client);
            store::still_stamping(client, policy.lease_secs(), policy.takeover_idle_1h_secs)
        })
    });
    if stamping.is_empty() {
        return;
    }
    let shown: Vec<StillStamping> = stamping
        .iter()
        .take(SHOWN)
        .map(|s| StillStamping {
            service: s.service.clone(),
            machine_id: s.machine_id,
            holder: match &s.holder {
                Some((host, port, slot)) => {
                    let pid = crate::diagnostics::nodes::slot_pid_of(host, *port, *slot);
                    let name = node_name(host, *port, *slot);
                    pid.map_or(name.clone(), |pid| format!("{name}, pid {pid}"))
                }
                None => "a row deleted by hand".to_owned(),
            },
            until_unix_ms: crate::clock::unix_ms(s.bound),
        })
        .collect();
    raise(messages::drop_refused(&command, stamping.len() as i64, &shown));
}

/// A command that would drop the idgen extension, and the role whose rights it takes.
struct IdgenDrop {
    kind: DropKind,
    /// The extension's owner.
    owner: pg_sys::Oid,
}

enum DropKind {
    Extension,
    /// DROP SCHEMA ... CASCADE of the schema idgen is installed in (its name).
    Schema(String),
    /// DROP OWNED BY the extension's owner.
    OwnedByOwner,
    /// DROP OWNED BY the owner of the schema idgen is installed in (the schema's name): the schema
    /// goes, and the extension with it, whoever the extension's owner is.
    OwnedBySchemaOwner(String),
    /// ALTER EXTENSION idgen DROP ...: an object leaves the extension.
    Member,
}

/// Whether `parsetree` drops the idgen extension: itself, the schema it is in (with CASCADE), its
/// owner's objects or those of its schema's owner (the schema with them), or one of its objects out
/// of it (ALTER EXTENSION idgen DROP).
///
/// # Safety
/// `parsetree` is a parse tree node of the current command.
unsafe fn drops_idgen(parsetree: *mut pg_sys::Node) -> Option<IdgenDrop> {
    unsafe {
        let installed = crate::privilege::installed()?;
        if parsetree.is_null() {
            return None;
        }
        let kind = match (*parsetree).type_ {
            pg_sys::NodeTag::T_DropStmt => {
                let stmt = parsetree as *mut pg_sys::DropStmt;
                let names = list_of_names((*stmt).objects);
                match (*stmt).removeType {
                    pg_sys::ObjectType::OBJECT_EXTENSION => {
                        names.iter().any(|n| n.to_bytes() == b"idgen").then_some(DropKind::Extension)
                    }
                    pg_sys::ObjectType::OBJECT_SCHEMA if (*stmt).behavior == pg_sys::DropBehavior::DROP_CASCADE => {
                        names
                            .iter()
                            .find(|n| pg_sys::get_namespace_oid(n.as_ptr(), true) == installed.schema)
                            .map(|n| DropKind::Schema(n.to_string_lossy().into_owned()))
                    }
                    _ => None,
                }
            }
            pg_sys::NodeTag::T_AlterExtensionContentsStmt => {
                let stmt = parsetree as *mut pg_sys::AlterExtensionContentsStmt;
                let idgen =
                    !(*stmt).extname.is_null() && std::ffi::CStr::from_ptr((*stmt).extname).to_bytes() == b"idgen";
                (idgen && (*stmt).action < 0).then_some(DropKind::Member)
            }
            pg_sys::NodeTag::T_DropOwnedStmt => {
                let stmt = parsetree as *mut pg_sys::DropOwnedStmt;
                let roles: Vec<pg_sys::Oid> = list_items((*stmt).roles)
                    .into_iter()
                    .map(|role| pg_sys::get_rolespec_oid(role as *const pg_sys::RoleSpec, true))
                    .collect();
                let schema_owner = namespace_owner(installed.schema);
                if roles.contains(&installed.owner) {
                    Some(DropKind::OwnedByOwner)
                } else if schema_owner.is_some_and(|owner| roles.contains(&owner)) {
                    let name = pg_sys::get_namespace_name(installed.schema);
                    let name = if name.is_null() {
                        String::new()
                    } else {
                        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
                    };
                    Some(DropKind::OwnedBySchemaOwner(name))
                } else {
                    None
                }
            }
            _ => None,
        }?;
        Some(IdgenDrop { kind, owner: installed.owner })
    }
}

/// The owner of schema `schema`, from the catalog cache.
///
/// # Safety
/// In a transaction.
unsafe fn namespace_owner(schema: pg_sys::Oid) -> Option<pg_sys::Oid> {
    unsafe {
        let tuple =
            pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::NAMESPACEOID as i32, pg_sys::Datum::from(schema));
        if tuple.is_null() {
            return None;
        }
        let owner = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_namespace>(tuple)).nspowner;
        pg_sys::ReleaseSysCache(tuple);
        Some(owner)
    }
}

/// The pointers of a parse tree's list.
unsafe fn list_items(list: *mut pg_sys::List) -> Vec<*mut std::ffi::c_void> {
    unsafe {
        if list.is_null() {
            return Vec::new();
        }
        (0..(*list).length as usize).map(|k| (*(*list).elements.add(k)).ptr_value).collect()
    }
}

/// The names of a list of String nodes (a DROP's objects).
unsafe fn list_of_names(list: *mut pg_sys::List) -> Vec<&'static std::ffi::CStr> {
    unsafe {
        list_items(list)
            .into_iter()
            .filter(|item| !item.is_null() && (*(*item as *mut pg_sys::Node)).type_ == pg_sys::NodeTag::T_String)
            .map(|item| std::ffi::CStr::from_ptr((*(item as *mut pg_sys::String)).sval))
            .collect()
    }
}
