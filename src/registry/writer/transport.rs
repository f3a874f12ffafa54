//! The caller's side of a request: its segment, its slot's mailbox, finding or starting a writer
//! for its database, and the wait for the answer.

use super::process::{self, Start};
use super::segment::{NotRun, Segment};
use super::{Answer, Request};
use crate::server;
use crate::shared::{self, mail, Area, Mailbox};
use pgrx::pg_sys;
use std::sync::atomic::Ordering;

/// How long a request waits for a background worker slot when it must start a writer (without
/// idgen preloaded): then it fails (`53000`), well before a client's usual timeouts.
pub const SLOT_WAIT_MS: i64 = 1_500;
/// How long a posted request may wait for a writer to take it before it fails: writers move
/// between databases and start within seconds, and run each request within the registry's lock
/// timeout.
const WRITER_WAIT_MS: i64 = 60_000;
/// How often a waiting caller looks again (it is woken at once when answered).
const POLL_MS: i64 = 20;

/// Runs `request` in a writer and returns its answer. `slot_wait_ms`: how long to wait for a
/// worker slot when a writer must be started (0: do not wait).
pub(super) fn run(request: &Request, slot_wait_ms: i64) -> Result<Answer, NotRun> {
    let json = serde_json::to_vec(request).expect("requests serialise");
    match shared::area().and_then(|area| Some((area, area.slot(server::backend_slot())?))) {
        Some((area, slot)) => through_mailbox(area, &slot.mailbox, &json, slot_wait_ms),
        None => alone(&json, slot_wait_ms),
    }
}

/// Withdraws a request nobody took yet when the caller stops waiting (an error, a cancel).
struct Posted<'a>(&'a Mailbox);

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        let _ = self.0.state.compare_exchange(mail::POSTED, mail::EMPTY, Ordering::AcqRel, Ordering::Acquire);
    }
}

fn through_mailbox(area: &Area, mailbox: &Mailbox, json: &[u8], slot_wait_ms: i64) -> Result<Answer, NotRun> {
    settle_previous(area, mailbox)?;
    // SAFETY: set at backend start.
    let database = u32::from(unsafe { pg_sys::MyDatabaseId });
    let segment = Segment::create(json);
    mailbox.database.store(database, Ordering::Relaxed);
    mailbox.segment.store(segment.handle(), Ordering::Relaxed);
    // SAFETY: set at process start.
    mailbox.owner_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Relaxed);
    mailbox.owner_latch.store(shared::my_latch(), Ordering::Relaxed);
    mailbox.state.store(mail::POSTED, Ordering::Release);
    let posted = Posted(mailbox);
    let started = shared::now_ms();
    let mut no_slot_since: Option<i64> = None;
    loop {
        match mailbox.state.load(Ordering::Acquire) {
            mail::ANSWERED => {
                let answer = segment.answer();
                mailbox.state.store(mail::EMPTY, Ordering::Release);
                std::mem::forget(posted);
                return answer.unwrap_or_else(|| Err(NotRun::writer_ended("it wrote nothing")));
            }
            state if mail::taker(state).is_some() => {
                if !taker_alive(area, state) {
                    mailbox.state.store(mail::EMPTY, Ordering::Release);
                    std::mem::forget(posted);
                    return Err(NotRun::writer_ended("it exited"));
                }
            }
            mail::POSTED => match process::ensure_writer(area, database) {
                Start::Coming => no_slot_since = None,
                Start::NoSlot => {
                    let since = *no_slot_since.get_or_insert(shared::now_ms());
                    if shared::now_ms() - since >= slot_wait_ms {
                        drop(posted);
                        area.slot_refusals.fetch_add(1, Ordering::AcqRel);
                        area.last_slot_refusal_ms.store(shared::now_ms(), Ordering::Release);
                        return Err(NotRun::no_slot());
                    }
                }
            },
            _ => {
                // Emptied under us: only a caller's own withdrawal does that.
                std::mem::forget(posted);
                return Err(NotRun::writer_ended("the request was withdrawn"));
            }
        }
        if mailbox.state.load(Ordering::Acquire) == mail::POSTED && shared::now_ms() - started >= WRITER_WAIT_MS {
            drop(posted);
            return Err(NotRun {
                message: format!(
                    "idgen: no registry writer took the request within {} s; see the server log",
                    WRITER_WAIT_MS / 1000
                ),
                worker_slot: false,
            });
        }
        shared::sleep_on_latch(POLL_MS);
        pg_sys::check_for_interrupts!();
    }
}

/// Whether the writer that took a request (its mailbox is in `state`) is still the one in its place.
fn taker_alive(area: &Area, state: u64) -> bool {
    let Some((index, incarnation)) = mail::taker(state) else { return false };
    let Some(writer) = area.writers.get(index) else { return false };
    writer.incarnation.load(Ordering::Acquire) == incarnation && shared::alive(writer.load_pid())
}

/// Waits for a request left running in this slot (by an interrupted wait, or a backend before
/// this one that died waiting) to be answered: two writes of one slot never run at once.
fn settle_previous(area: &Area, mailbox: &Mailbox) -> Result<(), NotRun> {
    loop {
        match mailbox.state.load(Ordering::Acquire) {
            state if taker_alive(area, state) => {
                shared::sleep_on_latch(POLL_MS);
                pg_sys::check_for_interrupts!();
            }
            mail::POSTED if mailbox.owner_pid.load(Ordering::Acquire) != unsafe_my_pid() => {
                // Posted by a backend of this slot that is gone: nobody waits for it.
                let _ = mailbox.state.compare_exchange(mail::POSTED, mail::EMPTY, Ordering::AcqRel, Ordering::Acquire);
            }
            _ => {
                mailbox.state.store(mail::EMPTY, Ordering::Release);
                return Ok(());
            }
        }
    }
}

fn unsafe_my_pid() -> i32 {
    // SAFETY: set at process start.
    unsafe { pg_sys::MyProcPid }
}

/// Without idgen's shared memory: a writer started for this request alone, given its segment.
fn alone(json: &[u8], slot_wait_ms: i64) -> Result<Answer, NotRun> {
    process::wait_for_pending();
    let segment = Segment::create(json);
    let Some(handle) = process::start_for_one(segment.handle(), slot_wait_ms) else {
        return Err(NotRun::no_slot());
    };
    let died = process::wait_for_one(handle);
    segment
        .answer()
        .unwrap_or_else(|| Err(NotRun::writer_ended(if died { "the postmaster died" } else { "it failed" })))
}
