//! Running registry SQL with the extension owner's rights from functions that
//! are not SECURITY DEFINER.
//!
//! idgen's SQL functions run as their caller, so that the role acting *now*
//! (after `SET ROLE`, inside another role's SECURITY DEFINER function) is the
//! one checked; only the registry work switches, exactly as a SECURITY
//! DEFINER function would: the owner's user id, a locked-down security
//! context, and a pinned search_path. The path is `pg_catalog, pg_temp`: every
//! statement names idgen's objects in `idgen_private`, a schema of the
//! extension's owner, and nothing in the schema idgen is installed in, which a
//! lower role may own, rename or replace (see `registry::sql`). An error inside
//! needs no cleanup here: aborting the (sub)transaction restores the user id
//! and the setting, as it does for SECURITY DEFINER functions.

use crate::errors::raise;
use idgen_core::{messages, IdgenError, SqlState};
use pgrx::pg_sys;

/// The library's version: it runs only against the SQL objects of the same version.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The installed extension, as `pg_extension` has it.
pub struct Installed {
    pub owner: pg_sys::Oid,
    /// The schema it is installed in (`public` by default).
    pub schema: pg_sys::Oid,
    pub version: String,
}

/// Runs `f` as the owner of the idgen extension with the search_path pinned.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    let owner = checked_installation().owner;
    with_pinned_search_path(|| {
        // SAFETY: how fmgr_security_definer switches user; backend-local state only.
        unsafe {
            let (mut saved_user, mut saved_context) = (pg_sys::InvalidOid, 0);
            pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
            pg_sys::SetUserIdAndSecContext(owner, saved_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
            let result = f();
            pg_sys::SetUserIdAndSecContext(saved_user, saved_context);
            result
        }
    })
}

/// Runs `f` as the caller with the search_path pinned to `pg_catalog, pg_temp`.
pub fn with_pinned_search_path<R>(f: impl FnOnce() -> R) -> R {
    checked_installation();
    // SAFETY: how fmgr_security_definer applies a function's SET clause; backend-local state only.
    unsafe {
        let nest_level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        let result = f();
        pg_sys::AtEOXact_GUC(true, nest_level);
        result
    }
}

/// The installation, refused when missing or of another version than the library.
pub fn checked_installation() -> Installed {
    let installed = installed().unwrap_or_else(|| {
        raise(
            IdgenError::new(
                SqlState::ObjectNotInPrerequisiteState,
                "idgen: the idgen extension is not installed in this database",
            )
            .hint("CREATE EXTENSION idgen;"),
        )
    });
    if installed.version != LIBRARY_VERSION {
        raise(messages::version_mismatch(&installed.version, LIBRARY_VERSION));
    }
    installed
}

/// The extension's owner, schema and version. Read from `pg_extension` through its name index rather
/// than with SQL: a new backend's first claim would otherwise parse and plan a catalog query, cold.
pub fn installed() -> Option<Installed> {
    // SAFETY: a catalog scan by index inside the caller's transaction, as get_extension_oid
    // does; the tuple is read before the scan ends.
    unsafe {
        let catalog = pg_sys::table_open(pg_sys::ExtensionRelationId, pg_sys::AccessShareLock as i32);
        let mut key = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_extname as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_NAMEEQ),
            pg_sys::Datum::from(c"idgen".as_ptr()),
        );
        let scan = pg_sys::systable_beginscan(
            catalog,
            pg_sys::Oid::from(pg_sys::ExtensionNameIndexId),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let found = (!tuple.is_null()).then(|| {
            let extension = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_extension>(tuple);
            let mut is_null = false;
            let version = pg_sys::heap_getattr(
                tuple,
                pg_sys::Anum_pg_extension_extversion as i32,
                (*catalog).rd_att,
                &mut is_null,
            );
            let version = if is_null {
                String::new()
            } else {
                let text = pg_sys::text_to_cstring(version.cast_mut_ptr());
                std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned()
            };
            Installed { owner: (*extension).extowner, schema: (*extension).extnamespace, version }
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as i32);
        found
    }
}
