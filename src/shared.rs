//! idgen's shared memory: one area for the whole server, with
//! - the registry writers (`registry::writer`): which process serves which database, how to wake it;
//! - for each backend slot, its mailbox to the writers (a request posted, taken, answered) and the
//!   leases its last backend left for the next one (`registry::handover`);
//! - every refusal counted, recorded in the history or not (`idgen_core::tally`, read by `idgen_metrics`).
//!
//! With idgen in `shared_preload_libraries` the area is requested at server start, as every
//! preloaded library requests its memory. Without, the first backend that needs it allocates it
//! from what the server's shared memory has left ([`area`]): a few hundred kilobytes the server
//! keeps for its lock tables to grow. Should that fail, everything here goes on without: each write
//! starts a writer of its own, and no lease is handed over.
//!
//! Everything in the area is a fixed-size record of atomics (the slots' leases are plain bytes
//! guarded by their entry's state): no lock is taken, and a process that dies leaves nothing held.
//! A crash of any backend makes the server reinitialise its shared memory, and the area with it.

use idgen_core::ClaimPolicy;
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// How many registry writers serve the server's databases at once.
pub const WRITERS: usize = 2;
/// How many leases a slot keeps for its next backend (one per service).
pub const PARKED_PER_SLOT: usize = 2;
/// Room for one parked lease, encoded (`registry::handover`).
pub const PARKED_BYTES: usize = idgen_core::lease::Parked::MAX_ENCODED;

const NAME: &std::ffi::CStr = c"idgen";
/// Changes whenever the layout below does: a library of another layout never shares an area.
const MAGIC: u64 = 0x6964_6765_6e5f_0005;

/// One registry writer's place. `pid` 0: nobody serves from it.
#[repr(C)]
pub struct WriterEntry {
    pub pid: AtomicI32,
    /// Its process's latch, which wakes it.
    pub latch: AtomicPtr<pg_sys::Latch>,
    /// The database it is connected to; 0 before it connects.
    pub database: AtomicU32,
    /// Serving a request now.
    pub busy: AtomicBool,
    /// Asked to leave its database (another one needs a writer).
    pub leave: AtomicBool,
    /// Started with the server (`shared_preload_libraries`), or for one database on demand.
    pub permanent: AtomicBool,
    /// Since when it has waited for a request, Unix ms.
    pub idle_since_ms: AtomicI64,
    /// When a backend asked for a writer to be started here, Unix ms (0: none asked), and for which database.
    pub starting_since_ms: AtomicI64,
    pub starting_database: AtomicU32,
    /// Moves each time a process takes the place: a request taken by one process is answered by it.
    pub incarnation: AtomicU64,
}

/// A mailbox's states. A taken request's state also names who took it, so that one atomic change
/// both takes it and says by whom.
pub mod mail {
    pub const EMPTY: u64 = 0;
    /// A request waits for a writer of its database.
    pub const POSTED: u64 = 1;
    /// The answer is in the request's segment.
    pub const ANSWERED: u64 = 2;
    const TAKEN: u64 = 3;

    /// Taken by the writer in place `index`, in its `incarnation`.
    pub fn taken(index: usize, incarnation: u64) -> u64 {
        TAKEN | (index as u64) << 8 | incarnation << 16
    }

    /// Who took a request in state `state`, if it is taken.
    pub fn taker(state: u64) -> Option<(usize, u64)> {
        (state & 0xff == TAKEN).then_some((((state >> 8) & 0xff) as usize, state >> 16))
    }
}

/// A backend slot's mailbox to the writers: the request itself travels in a dynamic shared memory
/// segment of the backend's, named here.
#[repr(C)]
pub struct Mailbox {
    pub state: AtomicU64,
    pub database: AtomicU32,
    pub segment: AtomicU32,
    pub owner_pid: AtomicI32,
    pub owner_latch: AtomicPtr<pg_sys::Latch>,
}

/// A parked lease's states.
pub mod parked {
    pub const EMPTY: u32 = 0;
    /// One process writes, reads or closes it.
    pub const BUSY: u32 = 1;
    pub const PARKED: u32 = 2;
}

/// A lease left in a slot for its next backend (`registry::handover`).
#[repr(C)]
pub struct ParkedEntry {
    pub state: AtomicU32,
    /// The process that holds it `BUSY`.
    pub busy_pid: AtomicI32,
    pub database: AtomicU32,
    /// When it was parked, and the end of its window, Unix ms.
    pub parked_at_ms: AtomicI64,
    pub window_end_ms: AtomicI64,
    pub len: AtomicU32,
    /// Written and read only by the process that holds the entry `BUSY`.
    pub bytes: UnsafeCell<[u8; PARKED_BYTES]>,
}

/// A lease the process in a slot holds, as the diagnostics tell its row's holder: the row's
/// `last_seen` (the lease's last confirmation) in its database. (A backend that took up a lease
/// started after its row was last written.)
#[repr(C)]
pub struct HeldMark {
    pub pid: AtomicI32,
    pub database: AtomicU32,
    pub last_seen_ms: AtomicI64,
}

/// How many of a backend's leases its slot marks.
pub const HELD_MARKS: usize = 4;

#[repr(C)]
pub struct SlotEntry {
    pub mailbox: Mailbox,
    pub parked: [ParkedEntry; PARKED_PER_SLOT],
    pub held: [HeldMark; HELD_MARKS],
}

#[repr(C)]
pub struct Area {
    magic: u64,
    slots: u32,
    pub writers: [WriterEntry; WRITERS],
    /// When a writer started with the server was last seen running (serving, or waiting for a place), Unix ms.
    pub permanent_seen_ms: AtomicI64,
    /// Requests that found no background worker slot to start a writer, and the last one's time.
    pub slot_refusals: AtomicU64,
    pub last_slot_refusal_ms: AtomicI64,
    /// The last consistent thresholds a process of the server ran by (`settings::policy_in_force`).
    pub last_consistent: KeptPolicy,
    /// Refused claims and ownership losses per (database, service), since the server started.
    pub tally: idgen_core::tally::Tally,
    // followed by `slots` SlotEntry records
}

/// A `ClaimPolicy` every process reads and writes without a lock, with when the process that wrote
/// it last loaded the configuration files (`pg_conf_load_time()`): a process that has not taken a
/// newer reload yet never writes over what a newer one kept. A sequence count, odd while a process
/// writes, around the values (a reader that sees it move reads again).
#[repr(C)]
pub struct KeptPolicy {
    sequence: AtomicU64,
    values: [AtomicI64; 6],
    loaded_at: AtomicI64,
}

impl KeptPolicy {
    /// How often a reader or a writer tries before it gives up (a writer is never held up
    /// between its two changes of the count: it takes no lock and calls nothing).
    const TRIES: usize = 10_000;

    fn values(policy: &ClaimPolicy) -> [i64; 6] {
        [
            policy.takeover_idle_7d_secs,
            policy.takeover_idle_1d_secs,
            policy.takeover_idle_1h_secs,
            policy.release_cooldown_secs,
            policy.heartbeat_interval_secs,
            policy.lease_safety_margin_secs,
        ]
    }

    /// Keeps `policy`, read from the configuration loaded at `loaded_at`, unless what is kept was
    /// loaded later (or is the same). Gives up rather than wait.
    pub fn store(&self, policy: &ClaimPolicy, loaded_at: i64) {
        if self.load().is_some_and(|(kept, kept_at)| kept == *policy && kept_at >= loaded_at) {
            return;
        }
        for _ in 0..Self::TRIES {
            let sequence = self.sequence.load(Ordering::Acquire);
            if sequence.is_multiple_of(2)
                && self.sequence.compare_exchange(sequence, sequence + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                if sequence == 0 || self.loaded_at.load(Ordering::Relaxed) <= loaded_at {
                    for (slot, value) in self.values.iter().zip(Self::values(policy)) {
                        slot.store(value, Ordering::Relaxed);
                    }
                    self.loaded_at.store(loaded_at, Ordering::Relaxed);
                }
                self.sequence.store(sequence + 2, Ordering::Release);
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// The policy kept, if one was, and when the configuration it was read from was loaded.
    pub fn load(&self) -> Option<(ClaimPolicy, i64)> {
        for _ in 0..Self::TRIES {
            let before = self.sequence.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before.is_multiple_of(2) {
                let v: Vec<i64> = self.values.iter().map(|slot| slot.load(Ordering::Relaxed)).collect();
                let loaded_at = self.loaded_at.load(Ordering::Relaxed);
                std::sync::atomic::fence(Ordering::Acquire);
                if self.sequence.load(Ordering::Relaxed) == before {
                    let policy = ClaimPolicy {
                        takeover_idle_7d_secs: v[0],
                        takeover_idle_1d_secs: v[1],
                        takeover_idle_1h_secs: v[2],
                        release_cooldown_secs: v[3],
                        heartbeat_interval_secs: v[4],
                        lease_safety_margin_secs: v[5],
                    };
                    return Some((policy, loaded_at));
                }
            }
            std::hint::spin_loop();
        }
        None
    }
}

// SAFETY: every field shared between processes is an atomic, or bytes guarded by an atomic state.
unsafe impl Sync for Area {}
unsafe impl Sync for SlotEntry {}

impl Area {
    /// The entry of backend slot `slot` (`server::backend_slot`), if the area has one for it.
    pub fn slot(&self, slot: i32) -> Option<&SlotEntry> {
        let index = usize::try_from(slot).ok().filter(|i| *i < self.slots as usize)?;
        // SAFETY: the records follow the header; `index` is within their number.
        Some(unsafe { &*self.slots_base().add(index) })
    }

    /// Every slot's entry.
    pub fn slots(&self) -> impl Iterator<Item = &SlotEntry> {
        // SAFETY: as in `slot`.
        (0..self.slots as usize).map(move |i| unsafe { &*self.slots_base().add(i) })
    }

    fn slots_base(&self) -> *const SlotEntry {
        // SAFETY: the area was allocated with room for the header and the records.
        unsafe { (self as *const Area as *const u8).add(header_size()).cast() }
    }
}

fn header_size() -> usize {
    std::mem::size_of::<Area>().next_multiple_of(std::mem::align_of::<SlotEntry>())
}

/// The number of slot records: every backend slot number (`server::backend_slot`) the server can hand out.
fn slot_count() -> usize {
    // SAFETY: set before shared memory is sized, never changed after.
    (unsafe { pg_sys::MaxBackends } as usize) + 1
}

fn area_size() -> usize {
    header_size() + slot_count() * std::mem::size_of::<SlotEntry>()
}

/// This process's pointer to the area (null: not attached yet, or none).
static AREA: AtomicPtr<Area> = AtomicPtr::new(std::ptr::null_mut());
/// The area was requested at server start (`shared_preload_libraries`).
static PRELOADED: AtomicBool = AtomicBool::new(false);
/// This process tried to allocate the area late and could not.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// Whether idgen was loaded with the server (`shared_preload_libraries`): its writers then started with it.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// The area, allocated on first use when idgen was not preloaded; `None` when it cannot be.
pub fn area() -> Option<&'static Area> {
    let existing = AREA.load(Ordering::Acquire);
    if !existing.is_null() {
        // SAFETY: shared memory stays mapped at the same address for the life of the process.
        return Some(unsafe { &*existing });
    }
    // SAFETY: set at process start, never changed.
    if PRELOADED.load(Ordering::Relaxed) || UNAVAILABLE.load(Ordering::Relaxed) || unsafe { !pg_sys::IsUnderPostmaster }
    {
        return None;
    }
    let attached = attach_late();
    if attached.is_null() {
        UNAVAILABLE.store(true, Ordering::Relaxed);
        return None;
    }
    AREA.store(attached, Ordering::Release);
    // SAFETY: as above.
    Some(unsafe { &*attached })
}

/// Called in the postmaster once the area is ready (the settings the server started with are kept).
static mut ON_READY: Option<fn()> = None;

/// From `_PG_init` while the server preloads idgen: the area is requested with the server's own;
/// `on_ready` runs in the postmaster once it is there.
pub fn request_at_server_start(on_ready: fn()) {
    PRELOADED.store(true, Ordering::Relaxed);
    // SAFETY: the postmaster, single-threaded, before shared memory is created.
    unsafe { ON_READY = Some(on_ready) };
    // SAFETY: hooks chained as every preloaded library chains them, once, in the postmaster.
    unsafe {
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_hook);
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_hook);
    }
}

static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request_hook() {
    // SAFETY: the postmaster's shmem request phase.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(area_size());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup_hook() {
    // SAFETY: the postmaster (or a crash restart) creating shared memory.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let area = init_struct();
        AREA.store(area, Ordering::Release);
    }
    // SAFETY: set once, by request_at_server_start, before shared memory is created.
    if let Some(ready) = unsafe { ON_READY } {
        ready();
    }
}

/// The area, created (zeroed) under AddinShmemInitLock if nobody has yet. Raises what
/// ShmemInitStruct raises.
unsafe fn init_struct() -> *mut Area {
    // SAFETY: the standard way to create or find an add-in's shared memory.
    unsafe {
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let size = area_size();
        let area = pg_sys::ShmemInitStruct(NAME.as_ptr(), size, &mut found) as *mut Area;
        if !found {
            std::ptr::write_bytes(area.cast::<u8>(), 0, size);
            (*area).magic = MAGIC;
            (*area).slots = slot_count() as u32;
        }
        pg_sys::LWLockRelease(lock);
        if (*area).magic != MAGIC {
            return std::ptr::null_mut();
        }
        area
    }
}

/// Allocates (or finds) the area after server start. An allocation the server refuses (its shared
/// memory is used up) leaves the process without: it is not an error anyone needs to see.
fn attach_late() -> *mut Area {
    pgrx::PgTryBuilder::new(|| {
        // SAFETY: see init_struct.
        unsafe { init_struct() }
    })
    .catch_others(|_| {
        // SAFETY: ShmemInitStruct raises with AddinShmemInitLock held by this process.
        unsafe {
            let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
            if pg_sys::LWLockHeldByMe(lock) {
                pg_sys::LWLockRelease(lock);
            }
        }
        pgrx::log!("idgen: no shared memory left for its area ({} bytes): leases are not handed over", area_size());
        std::ptr::null_mut()
    })
    .execute()
}

/// Unix ms now, by the server's clock.
pub fn now_ms() -> i64 {
    use idgen_core::generator::Clock;
    crate::clock::SystemClock.now_unix_ms()
}

/// This process's latch.
pub fn my_latch() -> *mut pg_sys::Latch {
    // SAFETY: set at process start.
    unsafe { pg_sys::MyLatch }
}

/// Wakes the process whose latch this is (a null latch: nobody).
pub fn wake(latch: *mut pg_sys::Latch) {
    if !latch.is_null() {
        // SAFETY: a latch in a PGPROC, which lives in shared memory as long as the server does.
        unsafe { pg_sys::SetLatch(latch) };
    }
}

/// Sleeps on this process's latch for at most `ms`, then resets it; returns early when it is set.
pub fn sleep_on_latch(ms: i64) {
    // SAFETY: the process's own latch; the wait ends at postmaster death.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}

/// Whether process `pid` still lives.
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

impl WriterEntry {
    pub fn load_pid(&self) -> i32 {
        self.pid.load(Ordering::Acquire)
    }
}
