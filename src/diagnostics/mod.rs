//! Diagnostics for the person on call: alerts, the ownership history, and the
//! functions behind the views of `sql/diagnostics.sql`.
//!
//! - `alerts`: WARNING, LOG and `NOTIFY idgen_alert`.
//! - `history`: recording ownership events in the transaction of the change, and
//!   refusals (rate-limited) in a transaction of their own.
//! - `nodes`: the policy, node states and live backends the views show.
//! - `explain`: `idgen_explain`, who made an ID.

pub mod alerts;
pub mod explain;
pub mod history;
pub mod nodes;
