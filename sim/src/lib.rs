//! A deterministic simulation of idgen's uniqueness protocol (issue 23).
//!
//! The real core decides for every holder (`Generator`, `BackendLeases`, `ClaimPolicy::steps`,
//! `watermark::*`); [`registry`] models Postgres (the registry's rows and the statements of
//! `src/statements.rs`), and [`world`] the processes, the network and the clocks. A seeded
//! [`schedule`] injects faults; the invariants are checked after every step; a failing schedule is
//! shrunk ([`run::shrink`]) and told as a story, one line per event. See docs/simulation.md.

pub mod mutation;
pub mod protocol;
pub mod registry;
pub mod rng;
pub mod run;
pub mod schedule;
pub mod scripted;
pub mod tables;
pub mod world;

pub use mutation::{Mutation, Mutations};
pub use schedule::{Faults, Op, Schedule, Setup};
pub use world::{Invariant, Violation, World};
