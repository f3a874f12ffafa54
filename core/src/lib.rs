//! idgen's pure core. No pgrx here: everything in this crate is plain Rust,
//! unit-tested with `cargo test -p idgen-core`, and used by the extension's
//! thin SQL edge.
//!
//! - [`access`]: which role may act for which service.
//! - [`layout`]: how a 64-bit ID is cut into time, machine id and sequence.
//! - [`generator`]: one backend's Snowflake generator over an injectable clock.
//! - [`lease`]: a backend's leases and how they follow its transactions.
//! - [`policy`]: the claim tiers, their order and thresholds, and the lease.
//! - [`claim`]: the claim itself, step by step, against a store the extension and the simulation implement.
//! - [`watermark`]: what a claim must know of the times earlier holders stamped.
//! - [`history`]: the ownership history's events, and the tenures they show.
//! - [`fleet`]: what the diagnostics tell of a fleet: capacity levels, clock skew, restart loops.
//! - [`tally`]: every refusal counted, recorded in the history or not (shared memory's layout).
//! - [`guard`]: which private guard row a claim locks instead of an advisory lock.
//! - [`input`]: validation of the registry functions' arguments.
//! - [`messages`]: the errors, warnings and alerts people read, made of [`facts`] the edge
//!   reads out of the registry; [`alert`]: what of an alert any listener may hear.
//! - [`format`]: times and durations written for people.
//! - [`error`]: errors as values with their SQLSTATE.

pub mod access;
pub mod alert;
pub mod claim;
pub mod error;
pub mod facts;
pub mod fleet;
pub mod format;
pub mod generator;
pub mod guard;
pub mod history;
pub mod input;
pub mod layout;
pub mod lease;
pub mod messages;
pub mod policy;
pub mod tally;
pub mod watermark;

pub use error::{IdgenError, SqlState};
pub use layout::Layout;
pub use policy::{ClaimPolicy, ClaimStep, Outcome};
