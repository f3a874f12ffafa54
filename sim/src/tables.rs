//! Several services writing one table, each with its own layout and pool: their nodes claim
//! through the core's claim (`protocol::claim_in`, the claim the extension runs) in one registry,
//! mint with the core's generator, release and claim again, and every ID goes into one table. The
//! invariant: no two IDs of the table are equal.
//!
//! A seed draws the services' layouts and pools ([`Config::generate`]: machine ids up to 65,535,
//! the registry's integer machine ids) and a run of claims, mints and releases ([`run`]). idgen's
//! own reading of each pair of services (`ServiceLayout::id_spaces`: apart; pools that share ids;
//! pools apart at other bits, which `idgen_define_layout` warns of and `idgen_health()` reports as
//! `pools_apart_at_other_bits`) says where the table may hold a duplicate: a configuration whose
//! every pair is apart must never make one.

use crate::mutation::Mutations;
use crate::protocol::{claim_in, Settings, Topology};
use crate::registry::{Holding, Ms, Node, Registry};
use crate::rng::Rng;
use idgen_core::generator::{Attempt, Generator, MAX_CLOCK_BACKWARD_DEFAULT_MS};
use idgen_core::layout::{FieldOrder, IdSpaces, Layout, Pool, ServiceLayout, EPOCH_2025_UNIX_MS};
use idgen_core::ClaimPolicy;
use std::collections::BTreeMap;

/// One service of the table: its name, layout and pool.
#[derive(Clone, Debug)]
pub struct TableService {
    pub name: String,
    pub layout: ServiceLayout,
}

/// The services that write one table.
#[derive(Clone, Debug)]
pub struct Config {
    pub services: Vec<TableService>,
}

impl Config {
    /// Two or three services. Half the seeds give them one set of field widths and order (pools then
    /// decide), the others each their own; small fields, so that a few claims and mints meet, and
    /// now and then a 16-bit machine id with a pool above 32,767.
    pub fn generate(seed: u64) -> Config {
        let mut rng = Rng::new(seed ^ 0x7AB1_E5ED);
        let fields = |rng: &mut Rng| {
            let machine_bits = if rng.chance(1, 6) { 16 } else { rng.range(2, 4) as u32 };
            let sequence_bits = rng.range(1, 3) as u32;
            let order = FieldOrder::ALL[rng.below(2) as usize];
            (machine_bits, sequence_bits, order)
        };
        let shared = rng.chance(1, 2).then(|| fields(&mut rng));
        let count = rng.range(2, 3) as usize;
        let services = (0..count)
            .map(|i| {
                let (machine_bits, sequence_bits, order) = shared.unwrap_or_else(|| fields(&mut rng));
                let layout = Layout::new(EPOCH_2025_UNIX_MS, 1, 41, machine_bits, sequence_bits, order)
                    .expect("a layout of 41 time bits");
                let max = i64::from(layout.max_machine_id());
                let size = rng.range(1, 3).min(max + 1);
                let first = if max >= 32_768 && rng.chance(1, 2) {
                    rng.range(32_768, 32_768 + 6)
                } else {
                    rng.range(0, (max + 1 - size).min(6))
                };
                let pool = Pool::new(&layout, first, first + size - 1).expect("a pool of the layout");
                TableService { name: format!("svc{i}"), layout: ServiceLayout { layout, pool } }
            })
            .collect();
        Config { services }
    }

    /// idgen's reading of each pair of services.
    pub fn pairs(&self) -> Vec<(usize, usize, IdSpaces)> {
        let n = self.services.len();
        (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .map(|(a, b)| (a, b, self.services[a].layout.id_spaces(&self.services[b].layout)))
            .collect()
    }

    /// Whether idgen keeps every pair of services apart.
    pub fn apart(&self) -> bool {
        self.pairs().iter().all(|(_, _, spaces)| *spaces == IdSpaces::Apart)
    }

    /// How idgen reads the pair of services `a` and `b`.
    pub fn spaces(&self, a: &str, b: &str) -> Option<IdSpaces> {
        let of = |name: &str| self.services.iter().find(|s| s.name == name);
        Some(of(a)?.layout.id_spaces(&of(b)?.layout))
    }
}

/// Two makers of one ID: (service, machine id) each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub id: i64,
    pub first: (String, i32),
    pub second: (String, i32),
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct TableRun {
    pub duplicate: Option<Duplicate>,
    pub issued: u64,
    /// Claims granted and refused.
    pub granted: u64,
    pub refused: u64,
}

/// A node of one of the services, and what it holds.
struct Holder {
    service: usize,
    node: Node,
    held: Option<(i32, i64, Generator)>,
}

/// How many steps a run takes.
const STEPS: usize = 80;

/// Runs `config` with the schedule of `seed` and the guards `mutations` switched off.
pub fn run(config: &Config, seed: u64, mutations: Mutations) -> TableRun {
    let mut rng = Rng::new(seed);
    let mut clock: Ms = EPOCH_2025_UNIX_MS + 86_400_000;
    let mut reg = Registry::new(1, clock, true, mutations);
    let policy = ClaimPolicy::DEFAULT;
    let settings = Settings {
        policy,
        topology: Topology { layout: Layout::DEFAULT, first_machine_id: 0, last_machine_id: i32::from(u16::MAX) },
        max_backward_ms: MAX_CLOCK_BACKWARD_DEFAULT_MS,
        require_synchronous_standby: false,
    };
    let mut holders: Vec<Holder> = Vec::new();
    for (service, s) in config.services.iter().enumerate() {
        for k in 0..rng.range(1, 3) {
            let node =
                Node { service: s.name.clone(), host: format!("10.0.{service}.{k}"), port: 9000, backend_slot: None };
            holders.push(Holder { service, node, held: None });
        }
    }
    let mut table: BTreeMap<i64, (String, i32)> = BTreeMap::new();
    let mut outcome = TableRun { duplicate: None, issued: 0, granted: 0, refused: 0 };
    for _ in 0..STEPS {
        clock += rng.range(0, 2);
        reg.clock = clock;
        let pick = rng.below(holders.len() as u64) as usize;
        let h = &mut holders[pick];
        let service = &config.services[h.service];
        match h.held.as_mut() {
            None => {
                let txn = reg.begin();
                let (result, _) = claim_in(&mut reg, txn, &h.node, &settings, service.layout);
                match result {
                    Ok(granted) => {
                        reg.commit(txn);
                        outcome.granted += 1;
                        let machine_id = granted.row.machine_id;
                        let id = u16::try_from(machine_id).expect("a machine id of the layout");
                        let generator = Generator::new(
                            service.layout.layout,
                            id,
                            granted.not_before,
                            MAX_CLOCK_BACKWARD_DEFAULT_MS,
                        );
                        h.held = Some((machine_id, granted.row.version, generator));
                    }
                    Err(_) => {
                        reg.abort(txn);
                        outcome.refused += 1;
                    }
                }
            }
            Some(_) if rng.chance(1, 8) => {
                let (machine_id, version, generator) = h.held.take().expect("held");
                let held = Holding { node: h.node.clone(), machine_id, version };
                let last = generator.last_tick_end_unix_ms().max(clock);
                let txn = reg.begin();
                let lease = policy.lease_secs() * 1000;
                let margin = policy.lease_safety_margin_secs * 1000;
                let _ = reg.release(txn, &held, margin, Some(last), lease, policy.takeover_idle_1h_secs * 1000);
                reg.commit(txn);
            }
            Some((machine_id, _, generator)) => {
                for _ in 0..rng.range(1, 4) {
                    let Attempt::Issued(id) = generator.try_issue(clock) else { break };
                    outcome.issued += 1;
                    let maker = (service.name.clone(), *machine_id);
                    if let Some(earlier) = table.insert(id, maker.clone()) {
                        outcome.duplicate.get_or_insert(Duplicate { id, first: earlier, second: maker });
                    }
                }
            }
        }
    }
    outcome
}

/// A seed of `first..first + count` whose run puts two equal IDs into the table, among the
/// configurations `wanted` accepts: the seed, its configuration and the duplicate.
pub fn search(
    first: u64,
    count: u64,
    mutations: Mutations,
    wanted: impl Fn(&Config) -> bool,
) -> Option<(u64, Config, Duplicate)> {
    (first..first + count).find_map(|seed| {
        let config = Config::generate(seed);
        if !wanted(&config) {
            return None;
        }
        let duplicate = run(&config, seed, mutations).duplicate?;
        Some((seed, config, duplicate))
    })
}
