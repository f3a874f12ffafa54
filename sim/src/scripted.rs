//! Scripted schedules: each finding of the earlier rounds and of the simulator (F1 to F5, and the
//! outside review's wall bound) as the steps that showed it, with the guard whose removal reverts
//! its fix. Each passes with the protocol as built (0.7.0) and breaks an invariant with its guard
//! switched off (tests/regressions.rs, docs/simulation.md).

use crate::mutation::Mutation;
use crate::schedule::{Fate, Faults, Op, Report, Schedule, Setup};

/// A named schedule and the guard that its finding's fix added.
pub struct Scripted {
    pub name: &'static str,
    /// Where the finding came from.
    pub finding: &'static str,
    pub schedule: Schedule,
    /// The guard that, switched off, brings the finding back.
    pub guard: Mutation,
    /// A later guard that closes the finding too (defence in depth): switched off with `guard`.
    pub also: Option<Mutation>,
}

impl Scripted {
    /// The guards the finding needs switched off to come back.
    pub fn reverted(&self) -> crate::mutation::Mutations {
        let guard = crate::mutation::Mutations::of(self.guard);
        self.also.map_or(guard, |also| guard.and(also))
    }
}

/// A setup with a synchronous standby and a first registry of epoch 7.
fn setup(machine_ids: i32, slots: usize, hosts: usize, faults: Faults) -> Setup {
    Setup {
        machine_ids,
        slots,
        hosts,
        synchronous: true,
        require_synchronous_standby: false,
        epoch: 7,
        faults,
        handover: false,
    }
}

fn faults(f: impl FnOnce(&mut Faults)) -> Faults {
    let mut faults = Faults::NONE;
    f(&mut faults);
    faults
}

fn scripted(name: &'static str, finding: &'static str, guard: Mutation, setup: Setup, ops: Vec<Op>) -> Scripted {
    Scripted { name, finding, schedule: Schedule { seed: 0, setup, ops }, guard, also: None }
}

const MINT: Op = Op::Mint { slot: 0, n: 3, cancelled: false, read_only: false };

/// Every scripted schedule.
pub fn all() -> Vec<Scripted> {
    vec![
        reconnect_after_clock_step(),
        savepoint_rollback(),
        drop_create_with_the_creating_session(),
        refused_watermark(),
        threshold_reload_cuts_a_live_lease(),
        threshold_reload_and_the_clients_lease(),
        two_live_processes_with_one_identity(),
        shutdown_racing_minting_threads(),
        restore_of_an_older_copy_after_drop_create(),
        far_ahead_clock_before_its_first_report(),
        step_back_after_a_drop(),
        versions_start_again_after_drop_create(),
        unanswered_heartbeat_shortens_the_grant(),
        step_back_after_a_drop_inside_a_transaction(),
        clock_jump_ahead_after_a_report(),
        reconnect_takes_up_the_parked_lease(),
        parked_lease_of_a_dropped_registry(),
    ]
}

/// Round one: a backend mints, the server clock steps back, the backend reconnects in its slot.
pub fn reconnect_after_clock_step() -> Scripted {
    scripted(
        "reconnect_after_clock_step",
        "round one: a reconnect after a clock step",
        Mutation::Watermark,
        setup(2, 1, 0, faults(|f| f.clock_steps = true)),
        vec![
            MINT,
            Op::Advance { ms: 400 },
            MINT,
            Op::Exit { slot: 0, record: false },
            Op::ServerClock { offset: -2_500 },
            MINT,
            Op::Advance { ms: 2_500 },
            MINT,
        ],
    )
}

/// Round two, 1: a savepoint mints, rolls back, its IDs reach committed rows; after a clock step
/// back a new connection takes the machine id its claim had (the claim was rolled back with it).
pub fn savepoint_rollback() -> Scripted {
    scripted(
        "savepoint_rollback",
        "round two, 1: a rolled-back savepoint's IDs reach committed rows",
        Mutation::SavepointRule,
        setup(
            2,
            2,
            0,
            faults(|f| {
                f.rollbacks = true;
                f.clock_steps = true;
            }),
        ),
        vec![
            Op::Begin { slot: 0 },
            MINT,
            Op::Rollback { slot: 0 },
            Op::Exit { slot: 0, record: true },
            Op::ServerClock { offset: -2_500 },
            Op::Mint { slot: 1, n: 3, cancelled: false, read_only: false },
            Op::Advance { ms: 2_500 },
            Op::Mint { slot: 1, n: 3, cancelled: false, read_only: false },
        ],
    )
}

/// Round two, 2a: a session holding a lease drops and creates the extension, and goes on minting.
/// Since 0.7.0 the registry generation closes it too: the DROP's invalidation reaches the dropping
/// session at its own commit, and its leases are checked before its next ID.
pub fn drop_create_with_the_creating_session() -> Scripted {
    let mut s = scripted(
        "drop_create_with_the_creating_session",
        "round two, 2a: DROP/CREATE EXTENSION with the creating session",
        Mutation::DropForgetsOwnLeases,
        setup(2, 2, 0, faults(|f| f.drop_create = true)),
        vec![
            MINT,
            Op::Drop { slot: 0 },
            Op::Create { epoch: 8 },
            Op::Mint { slot: 1, n: 3, cancelled: false, read_only: false },
            MINT,
        ],
    );
    s.also = Some(Mutation::RegistryGeneration);
    s
}

/// Round two, 3: a node whose clock runs more than a day ahead reports it; the report must be kept
/// (and the node stop if it is refused), or the id's next holder starts a day below its stamps.
/// Since 0.7.0 the clock must jump there after the node's first report (F1's fix reports it
/// before the first ID), and the wall bound closes it too: a node whose report was refused stamps
/// nothing past its last answered one. Both are switched off to bring it back.
pub fn refused_watermark() -> Scripted {
    let mut s = scripted(
        "refused_watermark",
        "round two, 3: a refused watermark is forgotten",
        Mutation::RefusedWatermark,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.far_ahead_clocks = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::HostBase { host: 0, base: 2 * 86_400_000 },
            Op::Advance { ms: 10_000 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Partition { host: 0, ms: 200_000 },
            Op::Advance { ms: 35_000 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Advance { ms: 36_000 },
            MINT,
        ],
    );
    s.also = Some(Mutation::WallBound);
    s
}

/// Round two, 6: thresholds lowered by a reload; a take-back must wait for the lease as granted.
pub fn threshold_reload_cuts_a_live_lease() -> Scripted {
    scripted(
        "threshold_reload_cuts_a_live_lease",
        "round two, 6: a reload of lower thresholds cuts live leases short",
        Mutation::StoredLeaseEnd,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.reloads = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Reload { policy: 1, range: 0 },
            Op::Partition { host: 0, ms: 200_000 },
            Op::Advance { ms: 25_000 },
            MINT,
            Op::NodeMint { host: 0, process: 0, n: 3 },
        ],
    )
}

/// Round two, attacker round 2 (1): the client kept the lease length it read at its start; after a
/// reload that shortened leases and an outage it minted past the shorter lease its heartbeat got.
pub fn threshold_reload_and_the_clients_lease() -> Scripted {
    scripted(
        "threshold_reload_and_the_clients_lease",
        "round two, attacker round 2: the client's lease taken from the settings at its start",
        Mutation::GrantedLease,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.reloads = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Reload { policy: 1, range: 0 },
            // Heartbeats keep the grant of the start until it has run out (F4's fix); the one at
            // 50 s grants the shorter lease.
            Op::Advance { ms: 50_000 },
            Op::Partition { host: 0, ms: 200_000 },
            Op::Advance { ms: 21_000 },
            MINT,
            Op::NodeMint { host: 0, process: 0, n: 3 },
        ],
    )
}

/// Round two, 4: two live processes with one identity.
pub fn two_live_processes_with_one_identity() -> Scripted {
    scripted(
        "two_live_processes_with_one_identity",
        "round two, 4: two live processes with one identity",
        Mutation::TwinRule,
        setup(2, 0, 1, faults(|f| f.twins = true)),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Advance { ms: 2_000 },
            Op::Start { host: 0, fate: Fate::Delivered, twin: true },
            Op::NodeMint { host: 0, process: 1, n: 3 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
        ],
    )
}

/// Round two, 5: a shutdown racing minting threads, then a restart on a corrected clock.
pub fn shutdown_racing_minting_threads() -> Scripted {
    scripted(
        "shutdown_racing_minting_threads",
        "round two, 5: the client's release watermark below IDs it issued",
        Mutation::ShutdownUnderLock,
        setup(1, 0, 1, faults(|f| f.clock_steps = true)),
        vec![
            Op::NodeClock { host: 0, drift: 1_900 },
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Shutdown { host: 0, process: 0, fate: Fate::Delivered, race_ms: 25 },
            Op::NodeClock { host: 0, drift: 0 },
            Op::Advance { ms: 1_000 },
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Advance { ms: 900 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
        ],
    )
}

/// The simulator's own: after DROP/CREATE, versions start again at 1, so an older copy's row
/// restored over a new-registry tombstone keeps the version a backend of the dropped registry
/// holds; only the epoch fences that backend.
pub fn restore_of_an_older_copy_after_drop_create() -> Scripted {
    scripted(
        "restore_of_an_older_copy_after_drop_create",
        "the simulator (seed 281230 with the epoch switched off): the epoch fences a backend of a dropped registry",
        Mutation::Epoch,
        setup(
            2,
            3,
            1,
            faults(|f| {
                f.drop_create = true;
                f.restores = true;
            }),
        ),
        vec![
            Op::Mint { slot: 1, n: 2, cancelled: false, read_only: false },
            Op::Mint { slot: 2, n: 2, cancelled: false, read_only: false },
            Op::Advance { ms: 71_400 },
            Op::Mint { slot: 1, n: 1, cancelled: false, read_only: false },
            Op::Mint { slot: 0, n: 1, cancelled: false, read_only: false },
            Op::TakeCopy,
            Op::Advance { ms: 14_900 },
            Op::Drop { slot: 2 },
            Op::Create { epoch: 8 },
            Op::Mint { slot: 1, n: 2, cancelled: false, read_only: false },
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Restore { triggers: true },
            Op::NodeMint { host: 0, process: 0, n: 2 },
            Op::Mint { slot: 0, n: 1, cancelled: false, read_only: false },
        ],
    )
}

/// Finding F1 of the simulator: a node whose clock runs far ahead of the server's minted from its
/// claim on (0.6.0), and until its first heartbeat the registry bounded it by the claim's time plus
/// its lease. Cut off before that heartbeat, its id was taken back with a not_before a day below
/// the stamps it made. Fixed in 0.7.0: `IdgenNode::start` reports the node's clock
/// (`first_report`) and returns only once that is answered. The wall bound closes it too (before
/// its first report a node's bound is `-infinity`: it reports at once and stamps nothing), so both
/// are switched off to bring it back.
pub fn far_ahead_clock_before_its_first_report() -> Scripted {
    let mut s = scripted(
        "far_ahead_clock_before_its_first_report",
        "the simulator, finding F1: a far-ahead node clock before its first report",
        Mutation::FirstReport,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.far_ahead_clocks = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::HostBase { host: 0, base: 86_400_000 },
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Partition { host: 0, ms: 200_000 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Advance { ms: 45_000 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Advance { ms: 16_000 },
            MINT,
            Op::Heartbeat { host: 0, process: 0, fate: Fate::Delivered, report: Report::Honest },
            // A day later the backend's clock reaches the node's stamps: the same IDs.
            Op::Advance { ms: 86_383_999 },
            MINT,
        ],
    );
    s.also = Some(Mutation::WallBound);
    s
}

/// Finding F2 of the simulator (the long run, seed 1025007): DROP EXTENSION passes once every bound
/// is at or below the clock; the server's clock then steps back a little, and a backend of the
/// dropped registry, still connected, issued again under the window it held in memory (its hot
/// path reads no registry), while the new registry handed its machine id to another backend with a
/// not_before at its claim. Fixed in 0.7.0: leases carry the registry generation, which the DROP
/// moves; the backend's next statement starts a transaction, which processes the DROP's
/// invalidation, and its lease is checked against the registry before its next ID.
pub fn step_back_after_a_drop() -> Scripted {
    scripted(
        "step_back_after_a_drop",
        "the simulator, finding F2: a server clock step back after DROP EXTENSION",
        Mutation::RegistryGeneration,
        setup(
            2,
            2,
            0,
            faults(|f| {
                f.drop_create = true;
                f.clock_steps = true;
                f.steps_back_after_drop = true;
            }),
        ),
        vec![
            Op::Mint { slot: 1, n: 1, cancelled: false, read_only: false },
            Op::Advance { ms: 1_300 },
            Op::Mint { slot: 1, n: 1, cancelled: false, read_only: false },
            Op::Advance { ms: 1_400 },
            Op::Drop { slot: 0 },
            Op::ServerClock { offset: -1_100 },
            Op::Create { epoch: 8 },
            Op::Mint { slot: 0, n: 1, cancelled: false, read_only: false },
            Op::Mint { slot: 1, n: 1, cancelled: false, read_only: false },
        ],
    )
}

/// Finding F3 of the simulator (the long run, seed 1238064): versions start again at 1 after
/// DROP/CREATE EXTENSION (0.6.0), and a service heartbeat carries no epoch. A node cut off across
/// the DROP (its lease past, so the DROP passes) and a second process of its identity, which claims
/// the same machine id at the same version in the new registry: the first one's heartbeat was
/// accepted for the second one's row, and both minted on one machine id. Fixed in 0.7.0: each
/// registry draws its `version_base` at CREATE EXTENSION, and a row never registered starts after
/// it, so the first process's version matches nothing (55000: it stops).
pub fn versions_start_again_after_drop_create() -> Scripted {
    scripted(
        "versions_start_again_after_drop_create",
        "the simulator, finding F3: a heartbeat of a dropped registry's lease accepted by the new one",
        Mutation::VersionBase,
        setup(
            3,
            1,
            1,
            faults(|f| {
                f.drop_create = true;
                f.twins = true;
                f.messages = true;
            }),
        ),
        vec![
            MINT,
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Partition { host: 0, ms: 70_500 },
            Op::Advance { ms: 61_000 },
            Op::Drop { slot: 0 },
            Op::Create { epoch: 8 },
            MINT,
            Op::Advance { ms: 9_600 },
            Op::Start { host: 0, fate: Fate::Delivered, twin: true },
            Op::Advance { ms: 2_000 },
            Op::NodeMint { host: 0, process: 1, n: 2 },
            Op::NodeMint { host: 0, process: 0, n: 2 },
        ],
    )
}

/// Finding F4 of the simulator (the long run, seed 2164602): a reload shortens the lease; a
/// heartbeat commits the shorter grant (`lease_until`, `takeover_at`) but its answer is lost, so
/// the node keeps the deadline of the grant before; cut off, its id was taken back at the shorter
/// `takeover_at` while it may still stamp (0.6.0). Fixed in 0.7.0: HEARTBEAT and
/// HEARTBEAT_REPORTING never lower `lease_until` nor `takeover_at` (`GREATEST`, src/statements.rs).
pub fn unanswered_heartbeat_shortens_the_grant() -> Scripted {
    scripted(
        "unanswered_heartbeat_shortens_the_grant",
        "the simulator, finding F4: a heartbeat whose answer is lost shortens the grant the node holds",
        Mutation::GreatestGrant,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.reloads = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::Reload { policy: 1, range: 0 },
            Op::Heartbeat { host: 0, process: 0, fate: Fate::LostAfterCommit, report: Report::Honest },
            Op::Partition { host: 0, ms: 100_000 },
            Op::Advance { ms: 21_000 },
            MINT,
            Op::NodeMint { host: 0, process: 0, n: 3 },
        ],
    )
}

/// Finding F5 of the simulator (0.7.0): F2 with the backend of the dropped registry inside work
/// that began before the DROP. The registry generation moves in a process only when it processes
/// invalidations: at the start of a transaction, at the first relation lock it takes in one (its
/// slow path's), or when it is idle and told to catch up (the sinval queue's catchup signal, which
/// DROP and CREATE EXTENSION queue enough messages to send: an idle backend in an open transaction
/// is saved that way, `ProcessCatchupEvent inside transaction` at DEBUG4). Its hot path takes no
/// lock, so a statement that runs across the DROP (a PL/pgSQL batch that sleeps or waits for a lock
/// between IDs) compares the generation it has not moved, and issues under the window it holds
/// beside the id's new holder. The model's statements are single steps: its open caller transaction
/// stands for that statement (it processes nothing until its slow path's first lock). Fixed in 0.7.0:
/// the hot path calls `incarnation::current()`, which runs `AcceptInvalidationMessages()` before
/// every ID (src/backend.rs, src/registry/incarnation.rs); tests/cluster/tests/drop_create.rs shows
/// it on a server.
pub fn step_back_after_a_drop_inside_a_transaction() -> Scripted {
    let mut faults = Faults::NONE;
    faults.rollbacks = true;
    faults.drop_create = true;
    faults.clock_steps = true;
    faults.steps_back_after_drop = true;
    scripted(
        "step_back_after_a_drop_inside_a_transaction",
        "the simulator, finding F5: a server clock step back after DROP EXTENSION, the backend inside a transaction",
        Mutation::GenerationBeforeEveryId,
        setup(2, 2, 0, faults),
        vec![
            Op::Begin { slot: 1 },
            Op::Mint { slot: 1, n: 1, cancelled: false, read_only: false },
            Op::Advance { ms: 1_400 },
            Op::Drop { slot: 0 },
            Op::Create { epoch: 8 },
            Op::ServerClock { offset: -1_100 },
            Op::Mint { slot: 0, n: 3, cancelled: false, read_only: false },
            Op::Mint { slot: 1, n: 3, cancelled: false, read_only: false },
        ],
    )
}

/// The outside review (0.7.0): a node's wall clock jumps a day ahead after a report, while it runs.
/// Its deadline is on its monotonic clock, so without a bound on its wall clock it stamps a day
/// ahead of what the registry holds for it (its last report plus the lease); cut off before its
/// next report, its id is taken back with a not_before a day below those stamps. As built, the
/// client never stamps at or past `wall_bound_ms` (the watermark of its last answered report plus
/// the lease granted with it, `client/src/node.rs`): meeting it, `next_id` answers
/// `Error::ClockAhead` and the heartbeat thread reports at once.
pub fn clock_jump_ahead_after_a_report() -> Scripted {
    scripted(
        "clock_jump_ahead_after_a_report",
        "the outside review: a node's wall clock jumping ahead after a report",
        Mutation::WallBound,
        setup(
            1,
            1,
            1,
            faults(|f| {
                f.far_ahead_clocks = true;
                f.messages = true;
            }),
        ),
        vec![
            Op::Start { host: 0, fate: Fate::Delivered, twin: false },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Partition { host: 0, ms: 200_000 },
            Op::HostBase { host: 0, base: 86_400_000 },
            Op::NodeMint { host: 0, process: 0, n: 3 },
            Op::Advance { ms: 61_000 },
            MINT,
        ],
    )
}

/// 0.8.0's lease handover: a backend mints, disconnects, and the next backend of its slot takes up
/// the lease it left, in the same millisecond. It stamps after the last stamp the first one made,
/// not after the lease's `not_before` (which the first backend's IDs are after).
pub fn reconnect_takes_up_the_parked_lease() -> Scripted {
    let mut setup = setup(1, 1, 0, Faults::NONE);
    setup.handover = true;
    scripted(
        "reconnect_takes_up_the_parked_lease",
        "0.8.0: a reconnect takes up its slot's lease with no write",
        Mutation::HandoverLastStamp,
        setup,
        vec![MINT, Op::Exit { slot: 0, record: true }, MINT],
    )
}

/// 0.8.0's lease handover across a DROP and CREATE: a lease parked in slot 0 while the registry is
/// dropped (past the drop guard, which would have closed it) and created again, and the server's
/// clock stepped back into its window. The registry's identity keeps the slot's next backend from
/// taking it up: it claims in the new registry, where slot 1's backend holds the same machine id.
pub fn parked_lease_of_a_dropped_registry() -> Scripted {
    let mut setup = setup(
        1,
        2,
        0,
        faults(|f| {
            f.drop_create = true;
            f.clock_steps = true;
            f.steps_back_after_drop = true;
        }),
    );
    setup.handover = true;
    let mut s = scripted(
        "parked_lease_of_a_dropped_registry",
        "0.8.0: a lease parked across a DROP and CREATE",
        Mutation::HandoverRegistry,
        setup,
        vec![
            MINT,
            Op::Advance { ms: 300 },
            MINT,
            Op::Exit { slot: 0, record: true },
            Op::Advance { ms: 1_500 },
            Op::Drop { slot: 1 },
            Op::Create { epoch: 8 },
            Op::ServerClock { offset: -2_000 },
            Op::Mint { slot: 1, n: 2, cancelled: false, read_only: false },
            MINT,
        ],
    );
    s.also = Some(Mutation::DropLeavesParked);
    s
}
