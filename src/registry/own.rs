//! The database's own service: the one its backends use when `idgen.service` is empty, with no
//! grant. Recorded in the registry (`idgen_registry.own_service`) when idgen is created in the
//! database, so that it follows the database, not its name: a rename (by its owner, who needs no
//! grant of anything) would otherwise hand every role of the database the service of its new name.
//! The record names the database it was made in (`own_database`): a database copied from this one
//! (`CREATE DATABASE … TEMPLATE`, which any role with CREATEDB may run) copies the record, and
//! must not mint for the service of the original; there the own service is the database's name.
//! Read from the registry's one row without SQL (a new connection's first ID plans nothing), and
//! remembered while the registry stands (its generation, `registry::incarnation`).

use super::incarnation;
use pgrx::pg_sys;

/// The database's own service, as recorded; the database's name for objects before 0.8.0, which
/// record none, and in a database copied from the one the record was made in.
pub fn service() -> String {
    type Remembered = Option<(u64, String)>;
    static OWN: parking_lot::Mutex<Remembered> = parking_lot::Mutex::new(None);
    let generation = incarnation::current();
    if let Some((at, name)) = OWN.lock().as_ref() {
        if *at == generation {
            return name.clone();
        }
    }
    let name = recorded().unwrap_or_else(|| crate::server::database_name().to_owned());
    *OWN.lock() = Some((generation, name.clone()));
    name
}

/// `idgen_registry.own_service`, if the registry has the column and its row.
fn recorded() -> Option<String> {
    // SAFETY: a scan of the registry's one row by the catalog snapshot, inside the caller's
    // transaction, as catalog reads are done; the value is copied before the scan ends.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"idgen_private".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return None;
        }
        let registry = pg_sys::get_relname_relid(c"idgen_registry".as_ptr(), schema);
        if registry == pg_sys::InvalidOid {
            return None;
        }
        let relation = pg_sys::table_open(registry, pg_sys::AccessShareLock as i32);
        let descriptor = (*relation).rd_att;
        let column = pg_sys::SPI_fnumber(descriptor, c"own_service".as_ptr());
        let database_column = pg_sys::SPI_fnumber(descriptor, c"own_database".as_ptr());
        let mut found = None;
        if column > 0 {
            let scan = pg_sys::systable_beginscan(
                relation,
                pg_sys::InvalidOid,
                false,
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
            );
            let tuple = pg_sys::systable_getnext(scan);
            // Recorded in another database (this one was copied from it): not this one's.
            let recorded_here = database_column <= 0 || tuple.is_null() || {
                let mut is_null = false;
                let value = pg_sys::heap_getattr(tuple, database_column, descriptor, &mut is_null);
                !is_null && pg_sys::Oid::from(value.value() as u32) == pg_sys::MyDatabaseId
            };
            if !tuple.is_null() && recorded_here {
                let mut is_null = false;
                let value = pg_sys::heap_getattr(tuple, column, descriptor, &mut is_null);
                if !is_null {
                    let text = pg_sys::text_to_cstring(value.cast_mut_ptr());
                    found = Some(std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned());
                }
            }
            pg_sys::systable_endscan(scan);
        }
        pg_sys::table_close(relation, pg_sys::AccessShareLock as i32);
        found
    }
}
