//! Transactions of idgen's own, where no client's transaction is open: a registry writer's, and a
//! backend's exit record on its way out.

use crate::errors::CarriedError;
use pgrx::pg_sys;
use pgrx::PgTryBuilder;

/// A registry write never waits long for a lock: only idgen's own short transactions (and a
/// superuser's hand-written ones) hold registry locks, but the caller itself may, while it waits.
const LOCK_TIMEOUT: &std::ffi::CStr = c"10s";

/// Settings under which idgen's own transactions write the registry, whatever the database's
/// (`ALTER DATABASE … SET`, which a worker's connection applies) or a session's settings are: read
/// write, at READ COMMITTED, with no statement or transaction timeout, and a lock wait of
/// [`LOCK_TIMEOUT`] at most. For the registry writers, and for a backend's exit record (the session
/// is over: nothing needs restoring).
pub fn settle_for_registry_writes() {
    let settings: [(&std::ffi::CStr, &std::ffi::CStr); 7] = [
        (c"default_transaction_read_only", c"off"),
        (c"default_transaction_isolation", c"read committed"),
        (c"default_transaction_deferrable", c"off"),
        (c"statement_timeout", c"0"),
        (c"idle_in_transaction_session_timeout", c"0"),
        (c"transaction_timeout", c"0"),
        (c"lock_timeout", LOCK_TIMEOUT),
    ];
    for (name, value) in settings {
        // SAFETY: plain setting changes of this process; transaction_timeout exists from PostgreSQL 17 on.
        unsafe {
            if pg_sys::GetConfigOption(name.as_ptr(), true, false).is_null() {
                continue;
            }
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_SESSION,
            );
        }
    }
}

/// Runs `body` in a transaction of its own, which commits when `body` says so and aborts
/// otherwise; an error raised inside aborts it and comes back carried. Only where no
/// transaction is open: a background worker, or a backend on its way out.
pub fn in_own_transaction<R>(body: impl FnOnce() -> (R, bool)) -> Result<R, CarriedError> {
    // SAFETY: the standard way a process without a client runs a transaction; an error inside is
    // caught (pgrx copies and flushes it) and the transaction aborted, as PostgresMain does.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let body = std::panic::AssertUnwindSafe(body);
        let outcome =
            PgTryBuilder::new(move || Ok(body())).catch_others(|caught| Err(CarriedError::caught(&caught))).execute();
        match outcome {
            Ok((value, true)) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
                Ok(value)
            }
            Ok((value, false)) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::AbortCurrentTransaction();
                Ok(value)
            }
            Err(carried) => {
                pg_sys::AbortCurrentTransaction();
                Err(carried)
            }
        }
    }
}
