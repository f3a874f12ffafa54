//! Alerts for the person on call: a LOG line that always reaches the server log
//! (the alert's one line there), a WARNING to the client alone, and a NOTIFY on
//! `idgen_alert` without the holders' addresses (any role can LISTEN).
//!
//! A claim made in a background worker's transaction (a backend's) announces
//! there, where it commits, and hands the WARNING to the backend that waits.

use idgen_core::alert::{Alert, ALERT_CHANNEL};
use idgen_core::{IdgenError, SqlState};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub use idgen_core::claim::Notice;

/// The LOG line, and the NOTIFY when the transaction is going to commit (a NOTIFY from a
/// transaction that fails is never delivered, so an alert that comes with an error lives in the log).
pub fn announce(alert: &Alert, committing: bool) {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, format!("idgen_alert {}", alert.payload), "idgen")
        .report(PgLogLevel::LOG);
    if committing {
        let payload = alert.for_listeners().to_string();
        crate::spi::run_alone(crate::statements::NOTIFY_ALERT { channel: ALERT_CHANNEL.into(), payload })
            .unwrap_or_else(|e| panic!("idgen: could not send NOTIFY {ALERT_CHANNEL}: {e}"));
    }
}

/// The WARNING the client reads for an alert.
pub fn warning_of(alert: &Alert) -> IdgenError {
    IdgenError::new(SqlState::Warning, alert.message.clone()).detail(format!("idgen_alert {}", alert.payload))
}

/// Delivers notices in the session of the claim: alerts announced (and told the client), warnings
/// reported.
pub fn deliver(notices: &[Notice], committing: bool) {
    for notice in notices {
        match notice {
            Notice::Warning(w) => crate::errors::report(w.clone(), PgLogLevel::WARNING),
            Notice::Alert(alert) => {
                announce(alert, committing);
                crate::errors::warn_client_only(warning_of(alert));
            }
        }
    }
}
