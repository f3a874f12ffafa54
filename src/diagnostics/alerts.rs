//! Alerts for the person on call: a WARNING to the client, a LOG line that
//! always reaches the server log, and a NOTIFY on `idgen_alert` without the
//! holders' addresses (any role can LISTEN).

use idgen_core::messages::{Alert, ALERT_CHANNEL};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Raises an alert in a transaction that goes on to commit.
pub fn alert(alert: &Alert) {
    warn_and_log(alert);
    let payload = alert.for_listeners().to_string();
    Spi::run_with_args(crate::registry::sql::NOTIFY_ALERT, &[ALERT_CHANNEL.into(), payload.into()])
        .unwrap_or_else(|e| panic!("idgen: could not send NOTIFY {ALERT_CHANNEL}: {e}"));
}

/// Raises an alert in a transaction that is about to fail. A NOTIFY would be
/// discarded with the transaction, so the server log is where it lands.
pub fn alert_before_error(alert: &Alert) {
    warn_and_log(alert);
}

fn warn_and_log(alert: &Alert) {
    let payload = alert.payload.to_string();
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, alert.message.clone(), "idgen")
        .set_detail(format!("idgen_alert {payload}"))
        .report(PgLogLevel::WARNING);
    // LOG reaches the server log unless log_min_messages is fatal or panic.
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, format!("idgen_alert {payload}"), "idgen")
        .report(PgLogLevel::LOG);
}
