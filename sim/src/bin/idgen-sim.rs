//! The long size: `idgen-sim --schedules N --seed S [--minutes M] [--mutation NAME] [--story SEED]`.
use idgen_sim::run::{explore, run, shrink, story, STEPS};
use idgen_sim::{Faults, Mutation, Mutations, Schedule};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let schedules: u64 = arg("--schedules").map_or(u64::MAX, |s| s.parse().expect("--schedules N"));
    let first: u64 = arg("--seed").map_or(0, |s| s.parse().expect("--seed S"));
    let budget = arg("--minutes").map(|m| Duration::from_secs_f64(m.parse::<f64>().expect("--minutes M") * 60.0));
    let mutations = match arg("--mutation") {
        Some(name) => Mutations::of(Mutation::from_name(&name).unwrap_or_else(|| panic!("no mutation {name}"))),
        None => Mutations::NONE,
    };
    let mut faults = Faults::ALL;
    faults.uncovered = args.iter().any(|a| a == "--uncovered");
    if let Some(seed) = arg("--story") {
        let seed: u64 = seed.parse().expect("--story SEED");
        let schedule = Schedule::generate(seed, faults, STEPS);
        let shrunk = match run(&schedule, mutations).violation {
            Some(v) => shrink(&schedule, mutations, v.invariant),
            None => schedule,
        };
        print!("{}", story(&shrunk, mutations));
        return;
    }
    let started = Instant::now();
    let (mut done, mut ids, mut seed) = (0u64, 0u64, first);
    let mut last_report = Instant::now();
    while done < schedules && budget.is_none_or(|b| started.elapsed() < b) {
        let batch = 1_000.min(schedules - done);
        let explored = explore(seed, batch, faults, mutations);
        done += explored.schedules;
        ids += explored.ids;
        seed += explored.schedules;
        if let Some((seed, invariant)) = explored.failure {
            println!("seed {seed} breaks \"{}\" after {done} schedules; shrunk:", invariant.name());
            let schedule = Schedule::generate(seed, faults, STEPS);
            print!("{}", story(&shrink(&schedule, mutations, invariant), mutations));
            std::process::exit(1);
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            println!("{done} schedules (seeds {first}..{seed}), {ids} IDs, {:.0?}: no invariant broken", started.elapsed());
            last_report = Instant::now();
        }
    }
    println!(
        "{done} schedules (seeds {first}..{seed}), {ids} IDs, {:.1?}: no invariant broken",
        started.elapsed()
    );
}
