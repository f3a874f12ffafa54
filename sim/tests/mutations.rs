//! Each guard switched off, one at a time: the simulator finds a seed whose schedule breaks an
//! invariant with the guard off and none with it on, within a bounded number of seeds. The seeds
//! each search finds are in docs/simulation.md's mutation table (`idgen-sim --mutation NAME --find`).

use idgen_sim::run::{counterexample, faults_for};
use idgen_sim::{Mutation, Mutations};

/// Seeds a search may take: a few times what it takes today, so that a change of the schedules'
/// mix does not fail the test, and a guard nobody notices any more does.
fn caught_within(mutation: Mutation, seeds: u64) {
    let found = counterexample(0, seeds, faults_for(mutation), Mutations::of(mutation));
    let c = found.unwrap_or_else(|| panic!("{}: no counterexample in {seeds} seeds", mutation.name()));
    println!("{}: seed {} breaks \"{}\" ({} seeds tried)", mutation.name(), c.seed, c.invariant.name(), c.tried);
}

#[test]
fn version_check() {
    caught_within(Mutation::VersionCheck, 2_000);
}

#[test]
fn watermark() {
    caught_within(Mutation::Watermark, 2_000);
}

#[test]
fn not_before() {
    caught_within(Mutation::NotBefore, 2_000);
}

#[test]
fn margin() {
    caught_within(Mutation::Margin, 40_000);
}

#[test]
fn epoch() {
    caught_within(Mutation::Epoch, 4_000);
}

#[test]
fn floor() {
    caught_within(Mutation::Floor, 2_000);
}

#[test]
fn savepoint_rule() {
    caught_within(Mutation::SavepointRule, 2_000);
}

#[test]
fn stored_lease_end() {
    caught_within(Mutation::StoredLeaseEnd, 4_000);
}

#[test]
fn twin_rule() {
    caught_within(Mutation::TwinRule, 2_000);
}

#[test]
fn shutdown_under_lock() {
    caught_within(Mutation::ShutdownUnderLock, 2_000);
}

#[test]
fn drop_guard() {
    caught_within(Mutation::DropGuard, 2_000);
}

/// Since 0.7.0 the registry generation closes round two's 2a as well: the DROP's invalidation
/// reaches the dropping session at its own commit, and the leases it kept are checked before its
/// next ID. So the guard alone is no longer noticed; with the generation switched off too, it is.
#[test]
fn drop_forgets_own_leases() {
    let alone = Mutations::of(Mutation::DropForgetsOwnLeases);
    assert_eq!(counterexample(0, 2_000, faults_for(Mutation::DropForgetsOwnLeases), alone), None);
    let both = alone.and(Mutation::RegistryGeneration);
    let found = counterexample(0, 4_000, faults_for(Mutation::DropForgetsOwnLeases), both);
    let c = found.expect("drop-forgets-own-leases and registry-generation: no counterexample in 4,000 seeds");
    println!("both: seed {} breaks \"{}\"", c.seed, c.invariant.name());
}

/// The registry generation matters only when the server's clock steps back behind a DROP's moment
/// (F2's precondition, off in the covered mix): generated schedules reach it first at seed 383,654
/// (`idgen-sim --mutation registry-generation --find --f2`), too far for this stage, so the seed is
/// checked here, and the scripted schedule `step_back_after_a_drop` in tests/regressions.rs.
#[test]
fn registry_generation() {
    let mut faults = faults_for(Mutation::RegistryGeneration);
    faults.steps_back_after_drop = true;
    let found = counterexample(383_654, 1, faults, Mutations::of(Mutation::RegistryGeneration));
    assert_eq!(found.map(|c| c.seed), Some(383_654), "seed 383,654 no longer tells the generation's removal");
}

#[test]
fn granted_lease() {
    caught_within(Mutation::GrantedLease, 4_000);
}

#[test]
fn refused_watermark() {
    caught_within(Mutation::RefusedWatermark, 4_000);
}

/// The release cooldown is no guard of uniqueness: a released row's watermark (the releaser's last
/// stamp, reported after it stopped minting) already keeps its next holder after every stamp, so
/// a row taken at once is as safe as one taken after the cooldown. It decides who gets a released
/// id back first (its own node, on a quick restart). See docs/simulation.md.
#[test]
fn cooldown_is_no_uniqueness_guard() {
    let found = counterexample(0, 2_000, faults_for(Mutation::Cooldown), Mutations::of(Mutation::Cooldown));
    assert_eq!(found, None, "the cooldown now guards something: give it a row in the mutation table");
}

#[test]
fn every_mutation_has_its_test() {
    assert_eq!(Mutation::ALL.len(), 16);
}
