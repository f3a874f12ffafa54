//! How a registry writer is ended (SIGTERM: the server stops, a switchover demotes it, a superuser
//! ends it): at once, even from a commit that waits for a synchronous standby, and without
//! answering a request it was serving then.

use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGTERM: the server stops, or a superuser ended this writer.
static TERMINATING: AtomicBool = AtomicBool::new(false);

/// Whether this writer was asked to end. An answer it has not written by then is not written: its
/// commit may have stopped waiting for the synchronous standby (the caller is told the writer
/// ended, as a client is told its connection ended).
pub(super) fn terminating() -> bool {
    TERMINATING.load(Ordering::SeqCst)
}

/// SAFETY: once, at the writer's start, before its signals are unblocked. (The writer of one
/// request needs it too: PostgreSQL's bgworker_die raises FATAL from the handler itself, which
/// during a commit's wait for the standby aborts a committed transaction: a PANIC.)
pub(super) unsafe fn install_sigterm_handler() {
    // SAFETY: a handler that only sets flags and the latch.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(on_sigterm));
        #[cfg(feature = "pg18")]
        pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(on_sigterm));
    }
}

/// As PostgreSQL's `die()`: a wait for a synchronous standby, a lock or a statement ends at the
/// next interrupt check. (pgrx's handler only sets a flag: a commit waiting for a standby that had
/// gone never ended, and the server's fast shutdown, or a switchover's demotion, waited for it.)
unsafe extern "C-unwind" fn on_sigterm(_signal: std::ffi::c_int) {
    // SAFETY: what die() does, from a signal handler: errno kept for the code it interrupted.
    unsafe {
        let errno = *libc::__errno_location();
        TERMINATING.store(true, Ordering::SeqCst);
        (&raw mut pg_sys::ProcDiePending).write_volatile(1);
        (&raw mut pg_sys::InterruptPending).write_volatile(1);
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = errno;
    }
}

/// Lets the writer's last writes run (the leases parked in its database closed) before it leaves:
/// the end that SIGTERM asked for waits for them.
pub(super) fn last_writes_first() {
    // SAFETY: a flag of this process's, set by its own SIGTERM handler.
    unsafe { (&raw mut pg_sys::ProcDiePending).write_volatile(0) };
}
