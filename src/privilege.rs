//! Running registry SQL with the extension owner's rights from a function that
//! is not SECURITY DEFINER.
//!
//! `idgen_next_id()` cannot be SECURITY DEFINER: that costs a user switch and a
//! search_path change on every call. Only its slow path (claim or verify a
//! lease) touches `system_nodes`, so only that path switches, exactly as a
//! SECURITY DEFINER function would: the owner's user id, a locked-down
//! security context, and search_path pinned to `pg_catalog, <extension
//! schema>, pg_temp`. An error inside needs no cleanup here: aborting the
//! (sub)transaction restores the user id and the setting, as it does for
//! SECURITY DEFINER functions.

use pgrx::pg_sys;
use std::ffi::CString;

/// Runs `f` as the owner of the idgen extension with a pinned search_path.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the calls below are how fmgr_security_definer switches user and
    // settings; they only touch backend-local state.
    unsafe {
        let (owner, schema) = extension_owner_and_schema()
            .unwrap_or_else(|| panic!("idgen: the idgen extension is not installed in this database"));
        let nest_level = pg_sys::NewGUCNestLevel();
        set_search_path(&format!("pg_catalog, {schema}, pg_temp"));

        let (mut saved_user, mut saved_context) = (pg_sys::InvalidOid, 0);
        pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
        pg_sys::SetUserIdAndSecContext(owner, saved_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);

        let result = f();

        pg_sys::SetUserIdAndSecContext(saved_user, saved_context);
        pg_sys::AtEOXact_GUC(true, nest_level);
        result
    }
}

unsafe fn set_search_path(value: &str) {
    let name = c"search_path";
    let value = CString::new(value).expect("schema names have no NUL");
    pg_sys::set_config_option(
        name.as_ptr(),
        value.as_ptr(),
        pg_sys::GucContext::PGC_USERSET,
        pg_sys::GucSource::PGC_S_SESSION,
        pg_sys::GucAction::GUC_ACTION_SAVE,
        true,
        0,
        false,
    );
}

/// The extension owner and its schema, quoted for a search_path. Read from
/// `pg_extension` through its name index rather than with SQL: a new backend's
/// first claim would otherwise parse and plan a catalog join, cold.
pub fn extension_owner_and_schema() -> Option<(pg_sys::Oid, String)> {
    // SAFETY: a catalog scan by index inside the caller's transaction, as
    // get_extension_oid does; the tuple is read before the scan ends.
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
            ((*extension).extowner, (*extension).extnamespace)
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as i32);
        let (owner, namespace) = found?;
        let name = pg_sys::get_namespace_name(namespace);
        assert!(!name.is_null(), "idgen: the idgen extension's schema {namespace:?} does not exist");
        let quoted = std::ffi::CStr::from_ptr(pg_sys::quote_identifier(name)).to_string_lossy().into_owned();
        Some((owner, quoted))
    }
}
