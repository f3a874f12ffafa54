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
//! lower role may own, rename or replace (see `crate::statements`). An error inside
//! needs no cleanup here: aborting the (sub)transaction restores the user id
//! and the setting, as it does for SECURITY DEFINER functions.

use crate::errors::raise;
use idgen_core::messages;
use pgrx::pg_sys;

/// The library's version.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The versions of the SQL objects this library runs against: its own, and the ones before it
/// whose tables, views and C functions it uses unchanged (so a server whose package was
/// upgraded goes on minting until `ALTER EXTENSION idgen UPDATE`); 0.5.1 changed only comments.
/// Against the objects before 0.7.0 every service has the default layout (and machine ids are
/// `smallint`: statements bind and return them as `integer`, which both compare and cast to).
/// Against the objects before 0.6.0 it serves their `idgen_heartbeat` and `idgen_policy` under
/// their own symbols and shapes, stores no heartbeat reports and records no restarts.
/// Any other version is refused.
pub const SQL_VERSIONS: [&str; 10] =
    [LIBRARY_VERSION, "0.10.1", "0.10.0", "0.9.0", "0.8.0", "0.7.0", "0.6.0", "0.5.1", "0.5.0", "0.4.0"];

/// The SQL versions before per-service layouts (0.7.0): no `idgen_layouts`, every service the default.
const WITHOUT_LAYOUTS: [&str; 4] = ["0.6.0", "0.5.1", "0.5.0", "0.4.0"];

/// The SQL versions before heartbeat reports (clock offset, generator counts) and the history's
/// `restart` events (0.6.0).
const WITHOUT_FLEET_REPORTS: [&str; 3] = ["0.5.1", "0.5.0", "0.4.0"];

/// The SQL versions before the history recorded capacity announcements (0.10.0).
const WITHOUT_CAPACITY_ANNOUNCEMENTS: [&str; 7] = ["0.9.0", "0.8.0", "0.7.0", "0.6.0", "0.5.1", "0.5.0", "0.4.0"];

/// The SQL version whose history has no `watermark_behind` event (the kind came with 0.5.0).
const WITHOUT_WATERMARK_BEHIND: &str = "0.4.0";

/// The installed extension, as `pg_extension` has it.
#[derive(Clone)]
pub struct Installed {
    pub owner: pg_sys::Oid,
    /// The schema it is installed in (`public` by default).
    pub schema: pg_sys::Oid,
    pub version: String,
    /// Created (or updated) by the current transaction, not committed yet.
    pub this_transaction: bool,
}

/// Set while idgen runs as the extension owner (see [`as_extension_owner`]).
static SWITCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether idgen runs as the extension owner now: the role acting at the call must have been read before.
pub fn switched_to_extension_owner() -> bool {
    SWITCHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Marks the switch for as long as it lasts, an error's unwinding included.
struct Switch(bool);

impl Switch {
    fn enter() -> Switch {
        Switch(SWITCHED.swap(true, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        SWITCHED.store(self.0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs `f` as the owner of the idgen extension with the search_path pinned.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    let owner = checked_installation().owner;
    let _switch = Switch::enter();
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
    with_settings(&[(c"search_path", c"pg_catalog, pg_temp")], f)
}

/// Runs `f` with `settings` (name, value) in force, as a function's SET clause puts them: for `f`
/// alone, restored after it (or by the rollback of its error).
pub fn with_settings<R>(settings: &[(&std::ffi::CStr, &std::ffi::CStr)], f: impl FnOnce() -> R) -> R {
    // SAFETY: how fmgr_security_definer applies a function's SET clause; backend-local state only.
    unsafe {
        let nest_level = pg_sys::NewGUCNestLevel();
        for (name, value) in settings {
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
        let result = f();
        pg_sys::AtEOXact_GUC(true, nest_level);
        result
    }
}

/// The installation, refused when missing or of another version than the library.
pub fn checked_installation() -> Installed {
    let installed = installed().unwrap_or_else(|| raise(messages::not_installed()));
    if !SQL_VERSIONS.contains(&installed.version.as_str()) {
        raise(messages::version_mismatch(&installed.version, LIBRARY_VERSION, &SQL_VERSIONS));
    }
    installed
}

/// Refuses (55000) when the installed SQL objects are of a version this library does not run
/// against: for functions that touch no registry but return rows whose shape the SQL declares
/// (another version's declaration would not match what the library builds). Looked up once per
/// transaction and command, so that a view calling it per row pays one lookup.
pub fn ensure_sql_version() {
    static CHECKED: std::sync::Mutex<Option<(pg_sys::TimestampTz, pg_sys::CommandId)>> = std::sync::Mutex::new(None);
    // SAFETY: reads backend-local transaction state.
    let now = unsafe { (pg_sys::GetCurrentTransactionStartTimestamp(), pg_sys::GetCurrentCommandId(false)) };
    let mut checked = CHECKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if *checked != Some(now) {
        *checked = None;
        checked_installation();
        *checked = Some(now);
    }
}

/// Whether the installed objects keep what heartbeats report and the history records `restart`
/// events (0.6.0 on).
pub fn installed_keeps_fleet_reports() -> bool {
    !WITHOUT_FLEET_REPORTS.contains(&checked_installation().version.as_str())
}

/// Whether the installed objects keep each service's layout (0.7.0 on).
pub fn installed_has_layouts() -> bool {
    !WITHOUT_LAYOUTS.contains(&checked_installation().version.as_str())
}

/// Whether the installed registry draws the version its new rows start after (0.7.0 on, with the layouts).
pub fn installed_draws_version_base() -> bool {
    installed_has_layouts()
}

/// Whether the installed objects record the capacity level each alert announced, and have the
/// capacity turn among the claim guards (0.10.0 on). Before, a capacity alert comes with every claim
/// that leaves a service above a level, as it did.
pub fn installed_announces_capacity_changes() -> bool {
    !WITHOUT_CAPACITY_ANNOUNCEMENTS.contains(&checked_installation().version.as_str())
}

/// Whether the installed history records `watermark_behind` events.
pub fn installed_history_records_watermark_behind() -> bool {
    checked_installation().version != WITHOUT_WATERMARK_BEHIND
}

/// The extension's owner, schema and version. Read from `pg_extension` through its name index rather
/// than with SQL (a new backend's first claim would otherwise parse and plan a catalog query, cold),
/// once per statement: within one command nothing creates or drops it.
pub fn installed() -> Option<Installed> {
    type Cached = ((pg_sys::TimestampTz, pg_sys::TimestampTz, pg_sys::CommandId), Option<Installed>);
    static CACHE: parking_lot::Mutex<Option<Cached>> = parking_lot::Mutex::new(None);
    // SAFETY: reads backend-local transaction state.
    let statement = unsafe {
        (
            pg_sys::GetCurrentTransactionStartTimestamp(),
            pg_sys::GetCurrentStatementStartTimestamp(),
            pg_sys::GetCurrentCommandId(false),
        )
    };
    if let Some((at, installed)) = CACHE.lock().as_ref() {
        if *at == statement {
            return installed.clone();
        }
    }
    let found = read_installed();
    *CACHE.lock() = Some((statement, found.clone()));
    found
}

fn read_installed() -> Option<Installed> {
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
            let this_transaction =
                pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::htup::HeapTupleHeaderGetXmin((*tuple).t_data));
            Installed { owner: (*extension).extowner, schema: (*extension).extnamespace, version, this_transaction }
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as i32);
        found
    }
}
