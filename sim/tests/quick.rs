//! The quick size: 10,000 generated schedules (seeds 0 to 9,999) over every covered fault (with
//! idgen 0.7.0 that includes the preconditions of findings F1 to F5: far-ahead and jumping node
//! clocks, server clock steps back after a DROP), the invariants checked after every step. Four tests of 2,500 seeds, so that the test harness runs
//! them on both cores. A failure prints the shrunk schedule's story; replay it with
//! `cargo run -p idgen-sim --release -- --story SEED`.

use idgen_sim::run::{explore, shrink, story};
use idgen_sim::{Faults, Mutations, Schedule};

fn quick(first: u64) {
    let explored = explore(first, 2_500, Faults::ALL, Mutations::NONE);
    if let Some((seed, invariant)) = explored.failure {
        let schedule = Schedule::generate(seed, Faults::ALL, idgen_sim::run::STEPS);
        let shrunk = shrink(&schedule, Mutations::NONE, invariant);
        panic!("seed {seed} breaks \"{}\":\n{}", invariant.name(), story(&shrunk, Mutations::NONE));
    }
    assert_eq!(explored.schedules, 2_500);
    assert!(explored.ids > 2_500 * 10, "the schedules mint: {} IDs", explored.ids);
}

#[test]
fn seeds_0_to_2499() {
    quick(0);
}

#[test]
fn seeds_2500_to_4999() {
    quick(2_500);
}

#[test]
fn seeds_5000_to_7499() {
    quick(5_000);
}

#[test]
fn seeds_7500_to_9999() {
    quick(7_500);
}

/// A seed gives the same schedule and the same story on every machine and every run.
#[test]
fn a_seed_replays_exactly() {
    let a = Schedule::generate(42, Faults::ALL, idgen_sim::run::STEPS);
    let b = Schedule::generate(42, Faults::ALL, idgen_sim::run::STEPS);
    assert_eq!(a, b);
    assert_eq!(story(&a, Mutations::NONE), story(&b, Mutations::NONE));
    assert_ne!(a, Schedule::generate(43, Faults::ALL, idgen_sim::run::STEPS));
}

/// The simulator finds what idgen does not cover: an asynchronous standby promoted, or a restore
/// with the insert trigger disabled, gives duplicates (so the model's failover and restores are
/// real, and the covered runs pass for a reason).
#[test]
fn uncovered_faults_are_found() {
    let mut faults = Faults::ALL;
    faults.uncovered = true;
    let explored = explore(0, 20_000, faults, Mutations::NONE);
    assert!(explored.failure.is_some(), "no uncovered fault broke anything in {} schedules", explored.schedules);
}
