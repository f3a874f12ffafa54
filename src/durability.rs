//! Registry writes commit as durably as the server's replication allows,
//! whatever the session asked for. A claim acknowledged from a commit that a
//! crash or a failover then loses would let the machine id be granted twice;
//! so would a lost heartbeat (the row looks idle sooner) or a lost watermark.
//!
//! `synchronous_commit` below `on` (`off`, `local`, `remote_write`) is raised
//! to `on` for the rest of the transaction (`SET LOCAL`): the commit waits for
//! the WAL flush and, when `synchronous_standby_names` names standbys, for
//! them to flush it too. `remote_apply` is kept. The cost is one round trip
//! to the standby per claim, heartbeat, release or backend lease renewal,
//! never on the hot path of `idgen_next_id()`.

use pgrx::pg_sys;

/// Raises `synchronous_commit` to at least `on` for the current transaction.
pub fn make_commit_durable() {
    // SAFETY: reads a backend-local setting.
    if unsafe { pg_sys::synchronous_commit } >= pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH as i32 {
        return;
    }
    set_synchronous_commit_locally(c"on");
}

/// Lowers `synchronous_commit` to `local` for the current transaction: the commit flushes the WAL
/// here and does not wait for a standby. Only for writes that narrow nothing a standby must know
/// (a registry writer closing parked leases as it is ended, a backend closing its leases on its
/// way out: a standby without the close keeps the wider windows).
pub fn commit_without_standby() {
    set_synchronous_commit_locally(c"local");
}

/// `SET LOCAL synchronous_commit = value`.
fn set_synchronous_commit_locally(value: &std::ffi::CStr) {
    // SAFETY: sets a backend-local setting the way SET LOCAL does.
    unsafe {
        pg_sys::set_config_option(
            c"synchronous_commit".as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            0,
            false,
        );
    }
}

/// Whether this process's last commit reached the synchronous standbys, when any are named. A
/// commit waits for them, but the wait can end early with the commit only local: a cancel
/// (`pg_cancel_backend`), a termination, the postmaster's death. A registry writer answers no
/// success from such a commit: the caller would mint under a claim a failover can lose.
pub fn last_commit_confirmed() -> bool {
    // SAFETY: reads of this process's last commit position and of the walsenders' shared state; a
    // stale read of the standbys' position is an older, smaller one (not confirmed: the safe side).
    unsafe {
        let control = pg_sys::WalSndCtl;
        if pg_sys::max_wal_senders == 0 || control.is_null() {
            return true;
        }
        let status = std::ptr::read_volatile(&raw const (*control).sync_standbys_status);
        if u32::from(status) & pg_sys::SYNC_STANDBY_DEFINED == 0 {
            return true;
        }
        let flushed = std::ptr::read_volatile(&raw const (*control).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize]);
        pg_sys::XactLastCommitEnd <= flushed
    }
}
