//! Running schedules: one seed, many seeds, and shrinking a failing schedule to a short story.

use crate::mutation::Mutations;
use crate::schedule::{Faults, Op, Schedule};
use crate::world::{Invariant, World};

/// How many steps a generated schedule has.
pub const STEPS: usize = 160;

/// What one schedule did.
pub struct Outcome {
    pub violation: Option<crate::world::Violation>,
    pub issued: u64,
}

/// Runs `schedule` with the guards `mutations` switched off.
pub fn run(schedule: &Schedule, mutations: Mutations) -> Outcome {
    let world = World::run(schedule, mutations, false);
    Outcome { violation: world.violation, issued: world.issued }
}

/// Runs `schedule` checking only that no two IDs are equal.
pub fn run_ids_only(schedule: &Schedule, mutations: Mutations) -> Outcome {
    let world = World::run_checking(schedule, mutations, false, true);
    Outcome { violation: world.violation, issued: world.issued }
}

/// What a run over many seeds found.
pub struct Explored {
    pub schedules: u64,
    pub ids: u64,
    /// The first failing seed and what broke.
    pub failure: Option<(u64, Invariant)>,
}

/// Runs the schedules of seeds `first..first + count`, stopping at the first that fails.
pub fn explore(first: u64, count: u64, faults: Faults, mutations: Mutations) -> Explored {
    let mut explored = Explored { schedules: 0, ids: 0, failure: None };
    for seed in first..first + count {
        let schedule = Schedule::generate(seed, faults, STEPS);
        let outcome = run(&schedule, mutations);
        explored.schedules += 1;
        explored.ids += outcome.issued;
        if let Some(v) = outcome.violation {
            explored.failure = Some((seed, v.invariant));
            break;
        }
    }
    explored
}

/// A seed whose schedule breaks an invariant with a guard switched off, and none with it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counterexample {
    pub seed: u64,
    pub invariant: Invariant,
    /// Seeds tried to find it (this one included).
    pub tried: u64,
}

/// The first seed of `first..first + count` that tells `mutations` from the protocol as built.
pub fn counterexample(first: u64, count: u64, faults: Faults, mutations: Mutations) -> Option<Counterexample> {
    counterexample_checking(first, count, faults, mutations, false)
}

/// [`counterexample`]; with `ids_only`, a seed counts only if two IDs are equal.
pub fn counterexample_checking(
    first: u64,
    count: u64,
    faults: Faults,
    mutations: Mutations,
    ids_only: bool,
) -> Option<Counterexample> {
    (first..first + count).find_map(|seed| {
        let schedule = Schedule::generate(seed, faults, STEPS);
        let outcome = if ids_only { run_ids_only(&schedule, mutations) } else { run(&schedule, mutations) };
        let broken = outcome.violation?;
        run(&schedule, Mutations::NONE).violation.is_none().then_some(Counterexample {
            seed,
            invariant: broken.invariant,
            tried: seed - first + 1,
        })
    })
}

/// The shortest schedule found that still breaks `invariant`: chunks of steps removed while it
/// still fails (delta debugging), then single steps, then shorter time advances. Bounded: every
/// pass removes something or ends.
pub fn shrink(schedule: &Schedule, mutations: Mutations, invariant: Invariant) -> Schedule {
    let ids_only = invariant == Invariant::UniqueIds;
    let check = |s: &Schedule| if ids_only { run_ids_only(s, mutations) } else { run(s, mutations) };
    let fails = |s: &Schedule| check(s).violation.is_some_and(|v| v.invariant == invariant);
    let mut best = schedule.clone();
    // Steps after the violation never matter.
    if let Some(v) = check(&best).violation {
        best.ops.truncate(v.step + 1);
    }
    let mut chunk = best.ops.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        while i < best.ops.len() {
            let mut candidate = best.clone();
            let end = (i + chunk).min(candidate.ops.len());
            candidate.ops.drain(i..end);
            if fails(&candidate) {
                best = candidate;
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    // Shorter waits, where a shorter one still fails.
    for i in 0..best.ops.len() {
        if let Op::Advance { ms } = best.ops[i] {
            for shorter in [1, ms / 10, ms / 2] {
                if shorter >= 1 && shorter < ms {
                    let mut candidate = best.clone();
                    candidate.ops[i] = Op::Advance { ms: shorter };
                    if fails(&candidate) {
                        best = candidate;
                        break;
                    }
                }
            }
        }
    }
    best
}

/// The story of `schedule`: the setup, then one line per event, up to the violation.
pub fn story(schedule: &Schedule, mutations: Mutations) -> String {
    story_checking(schedule, mutations, false)
}

/// [`story`], checking only that no two IDs are equal when `ids_only`.
pub fn story_checking(schedule: &Schedule, mutations: Mutations, ids_only: bool) -> String {
    let world = World::run_checking(schedule, mutations, true, ids_only);
    let s = &schedule.setup;
    let mut out = format!(
        "seed {}: machine ids 0-{}, {} backend slot(s), {} node host(s), {} standby{}; faults: {}\n",
        schedule.seed,
        s.machine_ids - 1,
        s.slots,
        s.hosts,
        if s.synchronous { "synchronous" } else { "asynchronous" },
        if s.require_synchronous_standby { ", require_synchronous_standby" } else { "" },
        s.faults.names().join(", ")
    );
    out.push_str(world.story());
    match &world.violation {
        Some(v) => out.push_str(&format!("=> step {} breaks \"{}\": {}\n", v.step, v.invariant.name(), v.what)),
        None => out.push_str("=> no invariant broken\n"),
    }
    out
}
