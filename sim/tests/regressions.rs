//! The findings of earlier rounds, the simulator's findings F1 to F5 and the outside review's wall
//! bound as scripted schedules (src/scripted.rs): each passes with the protocol as built (0.7.0)
//! and breaks an invariant with its fix's guard switched off.

use idgen_sim::run::story;
use idgen_sim::scripted::{self, Scripted};
use idgen_sim::{Invariant, Mutations, World};

fn check(s: Scripted) {
    let guard = s.guard;
    if let Some(also) = s.also {
        // Each guard alone closes it: switched off alone, the other still does.
        for alone in [guard, also] {
            let one = World::run(&s.schedule, Mutations::of(alone), false);
            assert!(one.violation.is_none(), "{} with only {} switched off: {:?}", s.name, alone.name(), one.violation);
        }
    }
    let built = World::run(&s.schedule, Mutations::NONE, false);
    assert!(
        built.violation.is_none(),
        "{} ({}) breaks an invariant with the protocol as built:\n{}",
        s.name,
        s.finding,
        story(&s.schedule, Mutations::NONE)
    );
    let reverted = World::run(&s.schedule, s.reverted(), false);
    assert!(
        reverted.violation.is_some(),
        "{} ({}) passes with {} switched off: the schedule no longer shows the finding:\n{}",
        s.name,
        s.finding,
        guard.name(),
        story(&s.schedule, s.reverted())
    );
}

/// A finding of the simulator: besides [`check`], its guard switched off repeats an ID within the
/// schedule (two IDs equal, not only an invariant that fires before they meet), as it did as built
/// before 0.7.0.
fn check_repeats_an_id(s: Scripted) {
    let reverted = World::run_checking(&s.schedule, s.reverted(), false, true);
    let v = reverted.violation.unwrap_or_else(|| panic!("{}: no ID repeated with its guard switched off", s.name));
    assert_eq!(v.invariant, Invariant::UniqueIds);
    check(s);
}

#[test]
fn reconnect_after_clock_step() {
    check(scripted::reconnect_after_clock_step());
}

#[test]
fn savepoint_rollback() {
    check(scripted::savepoint_rollback());
}

#[test]
fn drop_create_with_the_creating_session() {
    check(scripted::drop_create_with_the_creating_session());
}

#[test]
fn refused_watermark() {
    check(scripted::refused_watermark());
}

#[test]
fn threshold_reload_cuts_a_live_lease() {
    check(scripted::threshold_reload_cuts_a_live_lease());
}

#[test]
fn threshold_reload_and_the_clients_lease() {
    check(scripted::threshold_reload_and_the_clients_lease());
}

#[test]
fn two_live_processes_with_one_identity() {
    check(scripted::two_live_processes_with_one_identity());
}

#[test]
fn shutdown_racing_minting_threads() {
    check(scripted::shutdown_racing_minting_threads());
}

#[test]
fn restore_of_an_older_copy_after_drop_create() {
    check(scripted::restore_of_an_older_copy_after_drop_create());
}

/// Finding F1, fixed in 0.7.0: a node reports its clock before its first ID (`first_report`); the
/// wall bound closes it too.
#[test]
fn far_ahead_clock_before_its_first_report() {
    check_repeats_an_id(scripted::far_ahead_clock_before_its_first_report());
}

/// Finding F2, fixed in 0.7.0 (leases carry the registry generation).
#[test]
fn step_back_after_a_drop() {
    check_repeats_an_id(scripted::step_back_after_a_drop());
}

/// Finding F3, fixed in 0.7.0 (each registry's `version_base`).
#[test]
fn versions_start_again_after_drop_create() {
    check_repeats_an_id(scripted::versions_start_again_after_drop_create());
}

/// Finding F4, fixed in 0.7.0 (a heartbeat never lowers a recorded grant).
#[test]
fn unanswered_heartbeat_shortens_the_grant() {
    check_repeats_an_id(scripted::unanswered_heartbeat_shortens_the_grant());
}

/// Finding F5, fixed in 0.7.0 (invalidations processed before every ID).
#[test]
fn step_back_after_a_drop_inside_a_transaction() {
    check_repeats_an_id(scripted::step_back_after_a_drop_inside_a_transaction());
}

/// The outside review's wall bound (0.7.0): a node's clock jumping ahead after a report.
#[test]
fn clock_jump_ahead_after_a_report() {
    check(scripted::clock_jump_ahead_after_a_report());
}

#[test]
fn every_scripted_schedule_is_tested_here() {
    assert_eq!(scripted::all().len(), 17);
}

#[test]
fn reconnect_takes_up_the_parked_lease() {
    check_repeats_an_id(scripted::reconnect_takes_up_the_parked_lease());
}

#[test]
fn parked_lease_of_a_dropped_registry() {
    check(scripted::parked_lease_of_a_dropped_registry());
}
