//! Leases handed from a backend to the next backend of its slot, through shared memory
//! (`crate::shared`), so that a new connection's first ID needs no registry write at all.
//!
//! A backend that disconnects parks each lease it holds in its slot ([`park`]) instead of
//! recording its last stamp; the next backend of the slot, of the same database and service, takes
//! it up ([`take`], `idgen_core::lease::BackendLease::adopt`) and goes on under the same row,
//! version and committed window, from after the last stamp. Whatever happens meanwhile is what
//! would happen to the first backend had it stayed: the registry still holds its row with the
//! window that bounds every ID of the lease, until a take-back or a renewal's check says otherwise.
//! What a process cannot learn while the lease sits in memory, a DROP and CREATE of the registry,
//! the lease's registry identity tells (`registry::incarnation`). A server restart or a failover
//! starts with empty shared memory: the next backends claim, and the rows' windows fence them.
//!
//! A parked lease nobody takes up is closed (its last stamp recorded in place of its window, as
//! the exit record did) by its database's registry writer after a while, or when the writer leaves
//! or the server stops ([`close_parked`]), and by a DROP EXTENSION of its database before the drop
//! checks ([`close_parked_here`]). Each entry is held by one process at a time (`BUSY`), so a lease
//! is either taken up or closed, never both.

use crate::clock::timestamptz;
use crate::durability;
use crate::privilege::as_extension_owner;
use crate::registry::store;
use crate::registry::writer::in_own_transaction;
use crate::server;
use crate::shared::{self, parked, ParkedEntry, PARKED_BYTES};
use idgen_core::input::Holding;
use idgen_core::lease::Parked;
use pgrx::pg_sys;
use pgrx::spi::{Spi, SpiClient};
use std::sync::atomic::Ordering;

/// How long a backend waits for a parked lease that another process is closing (a writer's
/// transaction waits at most its lock timeout for a row).
const BUSY_WAIT_MS: i64 = 30_000;

fn my_database() -> u32 {
    // SAFETY: set at backend start.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

fn my_pid() -> i32 {
    // SAFETY: set at process start.
    unsafe { pg_sys::MyProcPid }
}

/// Leaves `lease` in this backend's slot for the next backend; false when it cannot (no shared
/// memory, no free entry in the slot: both hold live leases of other services), and the caller
/// records its last stamp instead.
pub fn park(lease: &Parked) -> bool {
    let Some(bytes) = lease.encode() else { return false };
    let Some(slot) = shared::area().and_then(|area| area.slot(server::backend_slot())) else { return false };
    let now = shared::now_ms();
    // An empty entry first; else one whose lease's window has ended, which may be overwritten:
    // whoever took it up would renew it first, and the registry's row bounds its IDs by that window.
    let empty = slot.parked.iter().map(|entry| (entry, parked::EMPTY));
    let ended = slot.parked.iter().map(|entry| (entry, parked::PARKED));
    for (entry, state) in empty.chain(ended) {
        let free = entry.state.load(Ordering::Acquire) == state
            && (state == parked::EMPTY || entry.window_end_ms.load(Ordering::Acquire) <= now);
        if free && hold(entry, state) {
            // SAFETY: this process holds the entry BUSY: nobody else reads or writes its bytes.
            unsafe { (&mut *entry.bytes.get())[..bytes.len()].copy_from_slice(&bytes) };
            entry.len.store(bytes.len() as u32, Ordering::Relaxed);
            entry.database.store(my_database(), Ordering::Relaxed);
            entry.parked_at_ms.store(now, Ordering::Relaxed);
            entry.window_end_ms.store(lease.window_end_unix_ms(), Ordering::Relaxed);
            entry.state.store(parked::PARKED, Ordering::Release);
            return true;
        }
    }
    false
}

/// Takes the entry for this process if it is in `state`.
fn hold(entry: &ParkedEntry, state: u32) -> bool {
    if entry.state.compare_exchange(state, parked::BUSY, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    entry.busy_pid.store(my_pid(), Ordering::Release);
    true
}

/// The lease the entry holds (this process holds the entry BUSY).
fn read(entry: &ParkedEntry) -> Option<Parked> {
    let len = (entry.len.load(Ordering::Relaxed) as usize).min(PARKED_BYTES);
    // SAFETY: this process holds the entry BUSY.
    Parked::decode(unsafe { &(&*entry.bytes.get())[..len] })
}

/// The lease of `service` that this database's last backend in this slot left, taken out of the
/// slot for this backend to take up; `None` if there is none.
pub fn take(service: &str) -> Option<Parked> {
    let slot = shared::area().and_then(|area| area.slot(server::backend_slot()))?;
    let database = my_database();
    for entry in &slot.parked {
        let waited_since = shared::now_ms();
        loop {
            match entry.state.load(Ordering::Acquire) {
                parked::PARKED if entry.database.load(Ordering::Acquire) == database => {
                    if !hold(entry, parked::PARKED) {
                        continue;
                    }
                    match read(entry) {
                        Some(lease) if lease.service == service => {
                            entry.state.store(parked::EMPTY, Ordering::Release);
                            return Some(lease);
                        }
                        Some(_) => entry.state.store(parked::PARKED, Ordering::Release),
                        None => entry.state.store(parked::EMPTY, Ordering::Release),
                    }
                    break;
                }
                parked::BUSY => {
                    // Being closed by another process: this slot's row is written now. Wait, so
                    // that a claim of this backend does not meet that write.
                    let holder = entry.busy_pid.load(Ordering::Acquire);
                    if holder == my_pid() || !shared::alive(holder) {
                        let _ = entry.state.compare_exchange(
                            parked::BUSY,
                            parked::EMPTY,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        break;
                    }
                    if shared::now_ms() - waited_since >= BUSY_WAIT_MS {
                        break;
                    }
                    shared::sleep_on_latch(1);
                    pg_sys::check_for_interrupts!();
                }
                _ => break,
            }
        }
    }
    None
}

/// The parked leases of `database` for which `which(parked_at_ms)` holds, taken out of their slots.
fn take_all(database: u32, which: impl Fn(i64) -> bool) -> Vec<(&'static ParkedEntry, Option<Parked>)> {
    let Some(area) = shared::area() else { return Vec::new() };
    area.slots()
        .flat_map(|slot| slot.parked.iter())
        .filter(|entry| {
            entry.state.load(Ordering::Acquire) == parked::PARKED
                && entry.database.load(Ordering::Acquire) == database
                && which(entry.parked_at_ms.load(Ordering::Acquire))
                && hold(entry, parked::PARKED)
        })
        .map(|entry| (entry, read(entry)))
        .collect()
}

/// Whether any lease is parked in `database`.
pub fn any_parked(database: u32) -> bool {
    shared::area().is_some_and(|area| {
        area.slots().flat_map(|slot| slot.parked.iter()).any(|entry| {
            entry.state.load(Ordering::Acquire) != parked::EMPTY && entry.database.load(Ordering::Acquire) == database
        })
    })
}

/// Records each lease's last stamp in place of its window, if its row is still its own.
fn close(client: &mut SpiClient, leases: &[(&'static ParkedEntry, Option<Parked>)]) {
    for lease in leases.iter().filter_map(|(_, lease)| lease.as_ref()) {
        let held = Holding {
            node: lease.node.clone(),
            machine_id: i32::from(lease.terms.machine_id),
            version: lease.terms.version,
        };
        if let Some(closing) = timestamptz(lease.stamped_until_unix_ms) {
            store::close_backend_lease(client, &held, lease.terms.registry_epoch, closing);
        }
    }
}

fn release(leases: &[(&'static ParkedEntry, Option<Parked>)]) {
    for (entry, _) in leases {
        entry.state.store(parked::EMPTY, Ordering::Release);
    }
}

/// In a registry writer connected to `database` (no transaction open): closes the leases parked
/// in it for which `which(parked_at_ms)` holds, in a durable transaction of its own. Whatever
/// fails leaves the rows' windows as they were, which fences the ids until they end.
/// `wait_for_standby`: false only for a writer being ended, whose standby may be gone (a standby
/// that misses the close keeps the leases' whole windows: they fence more, never less).
pub fn close_parked(database: u32, which: impl Fn(i64) -> bool, wait_for_standby: bool) {
    let leases = take_all(database, which);
    if leases.is_empty() {
        return;
    }
    let closed = in_own_transaction(|| {
        as_extension_owner(|| {
            Spi::connect_mut(|client| {
                if wait_for_standby {
                    durability::make_commit_durable();
                } else {
                    durability::commit_without_standby();
                }
                close(client, &leases);
            })
        });
        ((), true)
    });
    release(&leases);
    if let Err(e) = closed {
        pgrx::log!("idgen: the last stamps of {} parked leases were not recorded: {}", leases.len(), e.message);
    }
}

/// In the session that drops idgen, before the drop checks: closes every lease parked in this
/// database in the session's transaction, so that they count as what they stamped, not as their
/// windows. (Should the drop fail, the windows stay, and fence the ids until they end.)
pub fn close_parked_here(client: &mut SpiClient) {
    let leases = take_all(my_database(), |_| true);
    close(client, &leases);
    release(&leases);
}
