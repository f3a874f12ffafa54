//! Several services writing one table (`idgen_sim::tables`): each with its layout and pool,
//! claiming through the core's claim in one registry and minting with the core's generator.

use idgen_core::layout::IdSpaces;
use idgen_sim::tables::{run, search, Config};
use idgen_sim::{Mutation, Mutations};

/// Seeds each check runs: every run takes well under a millisecond.
const SEEDS: u64 = 4_000;

/// Where idgen keeps every pair of services apart (the same field widths and order, pools that
/// share no machine id), the table never holds two equal IDs; where it finds two, idgen's reading
/// of their services says why (their pools share ids, or sit apart at other bits).
#[test]
fn no_two_ids_of_one_table_are_equal_where_idgen_keeps_the_services_apart() {
    let (mut apart, mut duplicates) = (0, 0);
    for seed in 0..SEEDS {
        let config = Config::generate(seed);
        let outcome = run(&config, seed, Mutations::NONE);
        assert!(outcome.granted > 0, "seed {seed}: no claim was granted");
        apart += u64::from(config.apart());
        if let Some(d) = outcome.duplicate {
            duplicates += 1;
            let spaces = config.spaces(&d.first.0, &d.second.0);
            assert!(
                matches!(spaces, Some(IdSpaces::Shared | IdSpaces::OtherBits)),
                "seed {seed}: {d:?} from services idgen reads as {spaces:?} ({config:?})"
            );
        }
    }
    // Both kinds of configuration are reached: the check above is not vacuous.
    assert!(apart >= SEEDS / 10, "{apart} configurations kept apart");
    assert!(duplicates >= SEEDS / 20, "{duplicates} runs with a duplicate");
}

/// This round's finding (two layouts whose pools were disjoint made 19,112 duplicates): a
/// generated search finds it, and idgen reads the pair as `pools_apart_at_other_bits`.
#[test]
fn two_layouts_with_disjoint_pools_at_other_bits_are_found_and_reported() {
    let found = search(0, SEEDS, Mutations::NONE, |config| {
        config.pairs().iter().all(|(_, _, spaces)| *spaces != IdSpaces::Shared)
    });
    let (seed, config, d) = found.expect("a duplicate from pools apart at other bits");
    assert_eq!(config.spaces(&d.first.0, &d.second.0), Some(IdSpaces::OtherBits), "seed {seed}: {d:?}");
    println!("seed {seed}: {d:?}");
}

/// The core's claim hands out only the service's pool: with that guard off, services that idgen
/// keeps apart meet in the table.
#[test]
fn claim_pool() {
    let found = search(0, SEEDS, Mutations::of(Mutation::ClaimPool), Config::apart);
    let (seed, config, d) = found.expect("claim-pool: no counterexample");
    assert!(run(&config, seed, Mutations::NONE).duplicate.is_none(), "seed {seed} fails as built");
    println!("claim-pool: seed {seed}: {d:?}");
}
