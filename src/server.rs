//! Facts about this server and this backend, read from Postgres itself: the database's name,
//! the port, the backend's slot and the processes in the slots. The one place that knows how
//! they differ between major versions (PostgreSQL 17 numbers slots by `ProcNumber`).

use once_cell::sync::OnceCell;
use pgrx::pg_sys;

static DATABASE_NAME: OnceCell<String> = OnceCell::new();

/// The current database's name (read once).
pub fn database_name() -> &'static str {
    DATABASE_NAME.get_or_init(|| {
        // SAFETY: reads the catalog for this backend's own database.
        let name = unsafe { pg_sys::get_database_name(pg_sys::MyDatabaseId) };
        assert!(!name.is_null(), "idgen: this backend's database has no name");
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    })
}

/// This server's port.
pub fn port() -> i32 {
    // SAFETY: set at postmaster start, never changed.
    unsafe { pg_sys::PostPortNumber }
}

/// This backend's slot on the server: the same number for every connection
/// that lands in the slot, so reconnects reuse the slot's registry row.
pub fn backend_slot() -> i32 {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    // SAFETY: set once at backend start.
    let slot = unsafe { pg_sys::MyBackendId };
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    // SAFETY: set once at backend start.
    let slot = unsafe { pg_sys::MyProcNumber };
    slot
}

/// When process `pid` started, from this transaction's snapshot of the backends' status.
pub fn process_start(pid: i32) -> Option<pg_sys::TimestampTz> {
    // SAFETY: the snapshot is built once per transaction and lives until it ends; each entry is
    // a plain struct copied into it.
    unsafe {
        let count = pg_sys::pgstat_fetch_stat_numbackends();
        (1..=count).find_map(|index| {
            let entry = local_status(index);
            (!entry.is_null() && (*entry).backendStatus.st_procpid == pid)
                .then(|| (*entry).backendStatus.st_proc_start_timestamp)
        })
    }
}

#[cfg(feature = "pg15")]
unsafe fn local_status(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    pg_sys::pgstat_fetch_stat_local_beentry(index)
}

#[cfg(not(feature = "pg15"))]
unsafe fn local_status(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    pg_sys::pgstat_get_local_beentry_by_index(index)
}

/// The pid of the live process in `slot`, if any.
#[cfg(any(feature = "pg15", feature = "pg16"))]
pub fn process_in_slot(slot: i32) -> Option<i32> {
    // A PGPROC keeps its backendId after its process exits, so the slot is looked up where
    // backends register it (sinvaladt.c), which clears it at exit.
    unsafe extern "C-unwind" {
        fn BackendIdGetProc(backend_id: std::ffi::c_int) -> *mut pg_sys::PGPROC;
    }
    if slot <= 0 {
        return None;
    }
    // SAFETY: exported by the server; takes its own lock and returns NULL for a free slot.
    let proc = unsafe { BackendIdGetProc(slot) };
    // SAFETY: a PGPROC in shared memory, alive while its slot is taken.
    (!proc.is_null()).then(|| unsafe { (*proc).pid }).filter(|pid| *pid != 0)
}

/// From 17 on a slot is the PGPROC's index (`ProcNumber`); ProcArrayLock
/// (`MainLWLockArray[4]`) keeps it from changing while it is read.
#[cfg(not(any(feature = "pg15", feature = "pg16")))]
pub fn process_in_slot(slot: i32) -> Option<i32> {
    const PROC_ARRAY_LOCK: usize = 4;
    // SAFETY: ProcGlobal is set up at startup; the entry is read under ProcArrayLock, shared.
    unsafe {
        let global = pg_sys::ProcGlobal;
        if global.is_null() || slot < 0 || slot as u32 >= (*global).allProcCount {
            return None;
        }
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(PROC_ARRAY_LOCK)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        let pid = (*(*global).allProcs.add(slot as usize)).pid;
        pg_sys::LWLockRelease(lock);
        (pid != 0).then_some(pid)
    }
}
