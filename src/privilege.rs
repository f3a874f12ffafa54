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
use pgrx::spi::Spi;
use std::ffi::CString;

/// Runs `f` as the owner of the idgen extension with a pinned search_path.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the calls below are how fmgr_security_definer switches user and
    // settings; they only touch backend-local state.
    unsafe {
        let nest_level = pg_sys::NewGUCNestLevel();
        // The catalog lookup itself runs under a pinned path, so that no
        // object of the caller's can stand in for a catalog operator.
        set_search_path("pg_catalog, pg_temp");
        let (owner, schema) = extension_owner_and_schema();
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

/// The extension owner and its schema, quoted for a search_path.
fn extension_owner_and_schema() -> (pg_sys::Oid, String) {
    let sql = crate::registry::sql::EXTENSION_OWNER_AND_SCHEMA;
    let row = Spi::get_two::<pg_sys::Oid, String>(sql)
        .unwrap_or_else(|e| panic!("idgen: could not look up the idgen extension: {e}"));
    match row {
        (Some(owner), Some(schema)) => (owner, schema),
        _ => panic!("idgen: the idgen extension is not installed in this database"),
    }
}
