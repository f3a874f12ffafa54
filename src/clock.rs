//! The real clock behind the generator: the system's wall clock, the same one
//! `clock_timestamp()` reads, so IDs and registry times compare. Also the
//! conversions between Postgres timestamps and Unix milliseconds.

use idgen_core::generator::Clock;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

pub struct SystemClock;

/// Waits this short are spun: sleeping would overshoot the next millisecond.
const SPIN_MS: i64 = 2;
/// Longer waits sleep in slices this long, checking for query cancel between them.
const SLEEP_SLICE_MS: i64 = 10;

impl Clock for SystemClock {
    #[inline]
    fn now_unix_ms(&mut self) -> i64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: CLOCK_REALTIME always exists; the call only writes `now`.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        now.tv_sec * 1000 + now.tv_nsec / 1_000_000
    }

    fn wait_until(&mut self, unix_ms: i64) {
        loop {
            pg_sys::check_for_interrupts!();
            let left = unix_ms - self.now_unix_ms();
            if left <= 0 {
                return;
            }
            if left <= SPIN_MS {
                std::hint::spin_loop();
            } else {
                // SAFETY: a plain sleep; signals cut it short and are handled above.
                unsafe { pg_sys::pg_usleep((left - 1).min(SLEEP_SLICE_MS) as std::ffi::c_long * 1000) };
            }
        }
    }
}

/// Unix ms of 2000-01-01, Postgres' timestamp epoch.
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// A finite timestamptz as Unix milliseconds (rounded down).
pub fn unix_ms(ts: TimestampWithTimeZone) -> i64 {
    let micros: pg_sys::TimestampTz = ts.into();
    micros.div_euclid(1000) + PG_EPOCH_UNIX_MS
}

/// Unix milliseconds as a timestamptz, if in its range.
pub fn timestamptz(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from((unix_ms - PG_EPOCH_UNIX_MS) * 1000).ok()
}
