//! Guards the simulator can switch off, one at a time, to show that it notices: each is removed in
//! the registry model, in the glue around the real core, or (the claim's, `Claim*`) in the core's
//! own claim, through idgen-core's `mutations` feature (`idgen_core::claim::ClaimGuard`), which the
//! extension is never built with.

use idgen_core::claim::ClaimGuard;

/// One guard of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Heartbeats, releases, renewals, reads and exit records match any version of the row.
    VersionCheck,
    /// Claims read no bound from the row (`holder_bound`): `not_before` is the claim's moment.
    Watermark,
    /// Holders ignore `not_before`: their first stamp may be right after the claim's moment.
    NotBefore,
    /// A released row can be taken at once.
    Cooldown,
    /// No safety margin: the lease is the whole 1-hour tier, a service may wait for no skew.
    Margin,
    /// Backends' renewals, reads and exit records do not check the registry's epoch.
    Epoch,
    /// Rows deleted or truncated by hand leave no tombstone (no floor for their machine ids).
    Floor,
    /// A backend's claim and renewals are written in the caller's transaction, not committed on
    /// their own (the registry writer).
    SavepointRule,
    /// Take-backs read no stored `lease_until`/`takeover_at`: today's settings stand in.
    StoredLeaseEnd,
    /// A held service row's reuse is bounded by its last report, not its holder's whole lease: a
    /// second live process with the identity shares the machine id.
    TwinRule,
    /// The client's shutdown reads its watermark before it stops its minting threads.
    ShutdownUnderLock,
    /// DROP EXTENSION does not check what may still be stamped.
    DropGuard,
    /// The session that drops the extension records its leases' last stamps but keeps the leases
    /// (it goes on minting under them in whatever registry exists next).
    DropForgetsOwnLeases,
    /// The client keeps the lease length it read from the settings at its start, not the one each
    /// answer grants.
    GrantedLease,
    /// A report more than a day ahead is refused (nothing written), and the client retries it as
    /// if it were a lost connection.
    RefusedWatermark,
    /// Backends' leases carry no registry generation (0.6.0): a DROP reaches a connected backend of
    /// the dropped registry only when the window it holds in memory ends (finding F2).
    RegistryGeneration,
    /// F1's fix switched off: a node mints from its claim on, before the registry holds its clock
    /// (`client/src/node.rs` `first_report` skipped).
    FirstReport,
    /// F3's fix switched off: every registry's versions start at 1 (`idgen_registry.version_base`
    /// 0), so a node of a dropped registry may name the version of a row of the new one.
    VersionBase,
    /// F4's fix switched off: a heartbeat sets `lease_until` and `takeover_at` from today's
    /// settings, even below what the row recorded (no `GREATEST`).
    GreatestGrant,
    /// F5's fix switched off: a backend processes invalidations only when a transaction starts or
    /// its slow path takes its first lock in one, not before every ID (`incarnation::current()`).
    GenerationBeforeEveryId,
    /// The client's wall bound switched off: a node stamps up to its deadline on whatever its wall
    /// clock reads, even past its last answered report plus the lease granted with it.
    WallBound,
    /// A backend takes up the lease its slot's last backend left whatever registry it was confirmed
    /// in (`src/registry/handover.rs` without the registry's identity).
    HandoverRegistry,
    /// A backend that takes up a lease stamps after the lease's `not_before`, not after the last
    /// stamp of the backend that left it.
    HandoverLastStamp,
    /// DROP EXTENSION leaves the leases parked in the slots where they are (as a drop past the event
    /// trigger would: `session_replication_role = replica`); it still refuses while their windows run.
    DropLeavesParked,
    /// A release without a watermark (by hand) lowers the watermark to the clock plus the margin,
    /// below what the holder may still stamp until it learns of the release (0.7.0).
    ReleaseKeepsBound,
    /// The core's claim: the claimant's `not_before` is the claim's moment, not after the bound its
    /// row read (`ClaimGuard::HolderBound`; the statements still read it, unlike `Watermark`).
    ClaimHolderBound,
    /// The core's claim hands out any machine id of `idgen.machine_id_range`, not only the service's
    /// pool within it (`ClaimGuard::Pool`).
    ClaimPool,
}

impl Mutation {
    pub const ALL: [Mutation; 27] = [
        Mutation::VersionCheck,
        Mutation::Watermark,
        Mutation::NotBefore,
        Mutation::Cooldown,
        Mutation::Margin,
        Mutation::Epoch,
        Mutation::Floor,
        Mutation::SavepointRule,
        Mutation::StoredLeaseEnd,
        Mutation::TwinRule,
        Mutation::ShutdownUnderLock,
        Mutation::DropGuard,
        Mutation::DropForgetsOwnLeases,
        Mutation::GrantedLease,
        Mutation::RefusedWatermark,
        Mutation::RegistryGeneration,
        Mutation::FirstReport,
        Mutation::VersionBase,
        Mutation::GreatestGrant,
        Mutation::GenerationBeforeEveryId,
        Mutation::WallBound,
        Mutation::HandoverRegistry,
        Mutation::HandoverLastStamp,
        Mutation::DropLeavesParked,
        Mutation::ReleaseKeepsBound,
        Mutation::ClaimHolderBound,
        Mutation::ClaimPool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutation::VersionCheck => "version-check",
            Mutation::Watermark => "watermark",
            Mutation::NotBefore => "not-before",
            Mutation::Cooldown => "cooldown",
            Mutation::Margin => "margin",
            Mutation::Epoch => "epoch",
            Mutation::Floor => "floor",
            Mutation::SavepointRule => "savepoint-rule",
            Mutation::StoredLeaseEnd => "stored-lease-end",
            Mutation::TwinRule => "twin-rule",
            Mutation::ShutdownUnderLock => "shutdown-under-lock",
            Mutation::DropGuard => "drop-guard",
            Mutation::DropForgetsOwnLeases => "drop-forgets-own-leases",
            Mutation::GrantedLease => "granted-lease",
            Mutation::RefusedWatermark => "refused-watermark",
            Mutation::RegistryGeneration => "registry-generation",
            Mutation::FirstReport => "first-report",
            Mutation::VersionBase => "version-base",
            Mutation::GreatestGrant => "greatest-grant",
            Mutation::GenerationBeforeEveryId => "generation-before-every-id",
            Mutation::WallBound => "wall-bound",
            Mutation::HandoverRegistry => "handover-registry",
            Mutation::HandoverLastStamp => "handover-last-stamp",
            Mutation::DropLeavesParked => "drop-leaves-parked",
            Mutation::ReleaseKeepsBound => "release-keeps-bound",
            Mutation::ClaimHolderBound => "claim-holder-bound",
            Mutation::ClaimPool => "claim-pool",
        }
    }

    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }

    fn bit(self) -> u32 {
        1 << Mutation::ALL.iter().position(|m| *m == self).expect("listed")
    }
}

/// The guards switched off (none: the protocol as built).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mutations(u32);

impl Mutations {
    pub const NONE: Mutations = Mutations(0);

    pub fn of(m: Mutation) -> Mutations {
        Mutations(m.bit())
    }

    pub fn has(self, m: Mutation) -> bool {
        self.0 & m.bit() != 0
    }

    /// The guards of the core's claim switched off.
    pub fn claim_guards_off(self) -> Vec<ClaimGuard> {
        [(Mutation::ClaimHolderBound, ClaimGuard::HolderBound), (Mutation::ClaimPool, ClaimGuard::Pool)]
            .into_iter()
            .filter(|(m, _)| self.has(*m))
            .map(|(_, guard)| guard)
            .collect()
    }

    /// These and `m` switched off.
    pub fn and(self, m: Mutation) -> Mutations {
        Mutations(self.0 | m.bit())
    }
}
