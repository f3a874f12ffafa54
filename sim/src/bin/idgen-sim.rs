//! The simulator's command line (docs/simulation.md):
//! - the long size: `idgen-sim [--schedules N] [--seed S] [--minutes M] [--keep-going]`: stops at the
//!   first failing seed (with `--keep-going`, goes on) and prints its shrunk story;
//! - a seed's story: `idgen-sim --story SEED [--mutation NAME[,NAME]] [--ids-only] [--uncovered]`;
//! - a scripted schedule's story, as built and with its guard off: `idgen-sim --scripted NAME`;
//! - a guard's counterexample: `idgen-sim --mutation NAME[,NAME] --find [--schedules N] [--ids-only]`.
use idgen_sim::run::{counterexample_checking, explore, run, run_ids_only, shrink, story, story_checking, STEPS};
use idgen_sim::Invariant;
use idgen_sim::{Faults, Mutation, Mutations, Schedule};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let schedules: u64 = arg("--schedules").map_or(u64::MAX, |s| s.parse().expect("--schedules N"));
    let first: u64 = arg("--seed").map_or(0, |s| s.parse().expect("--seed S"));
    let budget = arg("--minutes").map(|m| Duration::from_secs_f64(m.parse::<f64>().expect("--minutes M") * 60.0));
    // Guards switched off: one name, or several joined by commas.
    let mutation = arg("--mutation");
    let mutations = mutation.iter().flat_map(|names| names.split(',')).fold(Mutations::NONE, |ms, name| {
        ms.and(Mutation::from_name(name).unwrap_or_else(|| panic!("no mutation {name}")))
    });
    let mut faults = Faults::ALL;
    faults.uncovered = args.iter().any(|a| a == "--uncovered");
    if let (Some(m), true) = (mutation, args.iter().any(|a| a == "--find")) {
        // The first seed that tells the mutation from the protocol as built.
        let ids_only = args.iter().any(|a| a == "--ids-only");
        match counterexample_checking(first, schedules.min(1_000_000), faults, mutations, ids_only) {
            Some(c) => {
                // Where it breaks, and how short a schedule still breaks it.
                let schedule = Schedule::generate(c.seed, faults, STEPS);
                let outcome = if ids_only { run_ids_only(&schedule, mutations) } else { run(&schedule, mutations) };
                let step = outcome.violation.map_or(0, |v| v.step);
                let shrunk = shrink(&schedule, mutations, c.invariant).ops.len();
                println!(
                    "{m}: seed {} breaks \"{}\" at step {step}, shrunk to {shrunk} steps ({} seeds tried)",
                    c.seed,
                    c.invariant.name(),
                    c.tried
                )
            }
            None => println!("{m}: no counterexample in {} seeds", schedules.min(1_000_000)),
        }
        return;
    }
    if let Some(name) = arg("--scripted") {
        // A scripted schedule's story, as built and with its guard switched off.
        let s = idgen_sim::scripted::all()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no schedule {name}"));
        println!("# {}: {}\n## as built", s.name, s.finding);
        print!("{}", story(&s.schedule, Mutations::NONE));
        let also = s.also.map_or(String::new(), |also| format!(" and {}", also.name()));
        println!("## with {}{also} switched off", s.guard.name());
        print!("{}", story(&s.schedule, s.reverted()));
        return;
    }
    if let Some(seed) = arg("--story") {
        let seed: u64 = seed.parse().expect("--story SEED");
        let schedule = Schedule::generate(seed, faults, STEPS);
        let ids_only = args.iter().any(|a| a == "--ids-only");
        let outcome = if ids_only { run_ids_only(&schedule, mutations) } else { run(&schedule, mutations) };
        let shrunk = match outcome.violation {
            Some(v) => shrink(&schedule, mutations, if ids_only { Invariant::UniqueIds } else { v.invariant }),
            None => schedule,
        };
        print!("{}", story_checking(&shrunk, mutations, ids_only));
        return;
    }
    // --keep-going: a failing seed is told (shrunk) and the search goes on (up to 20 failures).
    let keep_going = args.iter().any(|a| a == "--keep-going");
    let mut failures = 0u64;
    let started = Instant::now();
    let (mut done, mut ids, mut seed) = (0u64, 0u64, first);
    let mut last_report = Instant::now();
    while done < schedules && budget.is_none_or(|b| started.elapsed() < b) {
        let batch = 1_000.min(schedules - done);
        let explored = explore(seed, batch, faults, mutations);
        done += explored.schedules;
        ids += explored.ids;
        seed += explored.schedules;
        if let Some((failed, invariant)) = explored.failure {
            println!("seed {failed} breaks \"{}\" after {done} schedules; shrunk:", invariant.name());
            let schedule = Schedule::generate(failed, faults, STEPS);
            print!("{}", story(&shrink(&schedule, mutations, invariant), mutations));
            failures += 1;
            if !keep_going || failures >= 20 {
                std::process::exit(1);
            }
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            println!(
                "{done} schedules (seeds {first}..{seed}), {ids} IDs, {:.0?}: {failures} failing seed(s) so far",
                started.elapsed()
            );
            last_report = Instant::now();
        }
    }
    let verdict = if failures == 0 {
        "no invariant broken".to_owned()
    } else {
        format!("{failures} failing seed(s), told above")
    };
    println!(
        "{done} schedules (seeds {first}..{seed}), {ids} IDs, {} steps, {:.1?}: {verdict}",
        done * STEPS as u64,
        started.elapsed()
    );
    // Which faults the schedules drew (each schedule keeps each fault of the mix with probability 1/2).
    let mut tally: Vec<(&str, u64)> = Vec::new();
    for s in first..seed {
        for name in Schedule::generate(s, faults, 0).setup.faults.names() {
            match tally.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => tally.push((name, 1)),
            }
        }
    }
    let tally: Vec<String> = tally.iter().map(|(name, count)| format!("{name} {count}")).collect();
    println!("schedules per fault: {}", tally.join(", "));
}
