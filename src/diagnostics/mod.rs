//! Diagnostics for the person on call: alerts, and the functions behind the views of
//! `sql/diagnostics.sql` (the history they read is written by `crate::history`).
//!
//! - `alerts`: WARNING, LOG and `NOTIFY idgen_alert`.
//! - `nodes`: the policy, node states and live backends the views show.
//! - `explain`: `idgen_explain`, who made an ID.
//! - `writers`: what `idgen_health()` tells of the registry writers.

pub mod alerts;
pub mod explain;
pub mod nodes;
pub mod writers;
