//! Diagnostics for the person on call: alerts, the ownership history, and the
//! functions behind the views of `sql/diagnostics.sql`.
//!
//! - `alerts`: WARNING, LOG and `NOTIFY idgen_alert`.
//! - `history`: recording ownership events, in the caller's transaction or
//!   (with an error on its way) through `recorder`, a background worker.
//! - `nodes`: the policy, node states and live backends the views show.
//! - `explain`: `idgen_explain`, who made an ID.

mod alerts;
pub mod explain;
pub mod history;
pub mod nodes;
pub mod recorder;

pub use alerts::{alert, alert_before_error};
