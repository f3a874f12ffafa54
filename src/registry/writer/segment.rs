//! A request's dynamic shared memory segment: the request, then room for its answer. The caller
//! creates it and reads the answer; the writer reads the request and writes the answer.

use super::serve::serve;
use super::{Answer, Request};
use crate::errors::CarriedError;
use idgen_core::IdgenError;
use pgrx::pg_sys;

/// Room for the answer: a result and a few warnings.
const ANSWER_CAPACITY: usize = 64 * 1024;
/// Two u64s: the request's length, then the answer's (0 until the writer writes it).
const HEADER: usize = 16;

pub(super) struct NotRun {
    pub message: String,
    /// No writer could be started: no background worker slot was free in time.
    pub worker_slot: bool,
}

impl NotRun {
    pub(super) fn no_slot() -> NotRun {
        NotRun { message: "no background worker slot is free".into(), worker_slot: true }
    }

    pub(super) fn writer_ended(why: &str) -> NotRun {
        NotRun {
            message: format!("idgen: the registry writer ended without an answer ({why}); see the server log"),
            worker_slot: false,
        }
    }
}

/// A dynamic shared memory segment holding a request, with room for its answer.
pub(super) struct Segment(*mut pg_sys::dsm_segment);

impl Segment {
    pub(super) fn create(json: &[u8]) -> Segment {
        // SAFETY: a segment of this process's, written before anyone else learns its handle.
        unsafe {
            let segment = pg_sys::dsm_create(HEADER + json.len() + ANSWER_CAPACITY, 0);
            let base = pg_sys::dsm_segment_address(segment) as *mut u8;
            std::ptr::write_unaligned(base as *mut u64, json.len() as u64);
            std::ptr::write_unaligned(base.add(8) as *mut u64, 0);
            std::ptr::copy_nonoverlapping(json.as_ptr(), base.add(HEADER), json.len());
            Segment(segment)
        }
    }

    pub(super) fn handle(&self) -> pg_sys::dsm_handle {
        // SAFETY: an attached segment.
        unsafe { pg_sys::dsm_segment_handle(self.0) }
    }

    /// The answer the writer wrote, if any.
    pub(super) fn answer(&self) -> Option<Result<Answer, NotRun>> {
        // SAFETY: the writer wrote the answer and its length before it said so.
        unsafe {
            let base = pg_sys::dsm_segment_address(self.0) as *const u8;
            let request_len = std::ptr::read_unaligned(base as *const u64) as usize;
            let answer_len = std::ptr::read_unaligned(base.add(8) as *const u64) as usize;
            (answer_len > 0).then(|| {
                let bytes = std::slice::from_raw_parts(base.add(HEADER + request_len), answer_len);
                serde_json::from_slice::<Answer>(bytes).map_err(|e| NotRun {
                    message: format!("idgen: the registry writer's answer is unreadable: {e}"),
                    worker_slot: false,
                })
            })
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: attached by `create`; a writer still attached keeps it alive for itself.
        unsafe { pg_sys::dsm_detach(self.0) };
    }
}

/// Reads the request at `base`, runs it and writes the answer after it (see `transport`).
pub(super) unsafe fn respond(base: *mut u8) {
    // SAFETY: the caller's layout: two lengths, the request, room for the answer.
    unsafe {
        let request_len = std::ptr::read_unaligned(base as *const u64) as usize;
        let request = std::slice::from_raw_parts(base.add(HEADER), request_len);
        let answer = match serde_json::from_slice::<Request>(request) {
            Ok(request) => serve(request),
            Err(e) => Answer::alone(Err(unreadable(e))),
        };
        if super::ending::terminating() || (answer.result.is_ok() && !crate::durability::last_commit_confirmed()) {
            // Ended while serving, or the wait for the synchronous standby ended early: the commit
            // may be only local. No answer: the caller is told the writer ended without one.
            return;
        }
        let mut bytes = serde_json::to_vec(&answer).expect("answers serialise");
        if bytes.len() > ANSWER_CAPACITY {
            let too_big = Answer::alone(answer.result);
            bytes = serde_json::to_vec(&too_big).expect("answers serialise");
        }
        let len = bytes.len().min(ANSWER_CAPACITY);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(HEADER + request_len), len);
        std::ptr::write_unaligned(base.add(8) as *mut u64, len as u64);
    }
}

fn unreadable(e: serde_json::Error) -> CarriedError {
    CarriedError::from(IdgenError::new(idgen_core::SqlState::SystemError, format!("idgen: unreadable request: {e}")))
}
