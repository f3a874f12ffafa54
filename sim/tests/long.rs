//! The long size, as a test: ignored by default. The documented command is the binary (release
//! build, a time budget); this runs the same search in the test harness:
//!
//!     IDGEN_SIM_SCHEDULES=1000000 IDGEN_SIM_SEED=1000000 \
//!         cargo test -p idgen-sim --release --test long -- --ignored --nocapture

use idgen_sim::run::{explore, shrink, story, STEPS};
use idgen_sim::{Faults, Mutations, Schedule};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
#[ignore = "the long size: hours (see docs/simulation.md)"]
fn long() {
    let (first, count) = (env("IDGEN_SIM_SEED", 1_000_000), env("IDGEN_SIM_SCHEDULES", 1_000_000));
    let explored = explore(first, count, Faults::ALL, Mutations::NONE);
    if let Some((seed, invariant)) = explored.failure {
        let schedule = Schedule::generate(seed, Faults::ALL, STEPS);
        panic!(
            "seed {seed} breaks \"{}\":\n{}",
            invariant.name(),
            story(&shrink(&schedule, Mutations::NONE, invariant), Mutations::NONE)
        );
    }
    println!("{} schedules from seed {first}, {} IDs: no invariant broken", explored.schedules, explored.ids);
}
