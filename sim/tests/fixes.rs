//! The fixes proposed for the simulator's findings, taken by the model: each closes its finding's
//! scripted schedule, and generated schedules that reach the finding as built reach nothing with
//! the fix. (F3's and F4's fixes are what the generated runs' covered mix takes: tests/quick.rs.
//! F2's is built in 0.7.0: tests/regressions.rs.)

use idgen_sim::run::STEPS;
use idgen_sim::scripted;
use idgen_sim::{Faults, Fixes, Mutations, Schedule, World};

/// The first of `seeds` seeds (from 0) whose schedule, with `faults` and `fixes`, breaks an invariant.
fn first_failure(seeds: u64, faults: Faults, fixes: Fixes) -> Option<u64> {
    (0..seeds).find(|&seed| {
        let mut schedule = Schedule::generate(seed, faults, STEPS);
        schedule.setup.fixes = fixes;
        World::run(&schedule, Mutations::NONE, false).violation.is_some()
    })
}

fn closes(mut s: Schedule, fixes: Fixes) {
    s.setup.fixes = fixes;
    let world = World::run(&s, Mutations::NONE, false);
    assert!(world.violation.is_none(), "{:?}", world.violation);
}

#[test]
fn f1_a_node_that_reports_before_it_mints_is_covered() {
    let fix = Fixes { report_before_minting: true, ..Fixes::default() };
    closes(scripted::far_ahead_clock_before_its_first_report().schedule, fix);
    let mut faults = Faults::ALL;
    faults.far_ahead_clocks = true;
    let found = first_failure(3_000, faults, Fixes::default());
    assert!(found.is_some(), "far-ahead clocks break nothing as built: the search no longer reaches F1");
    assert_eq!(first_failure(3_000, faults, fix), None);
}

#[test]
fn f5_a_backend_that_processes_invalidations_before_every_id_is_covered() {
    let fix = Fixes { generation_before_every_id: true, ..Fixes::default() };
    closes(scripted::step_back_after_a_drop_inside_a_transaction().schedule, fix);
    let mut faults = Faults::ALL;
    faults.steps_back_after_drop = true;
    assert_eq!(first_failure(3_000, faults, fix), None);
}
