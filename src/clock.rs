//! The real clock behind the generator: the system's wall clock, the same one
//! `clock_timestamp()` reads, so IDs and registry times compare. Also the
//! conversions between Postgres timestamps and Unix milliseconds.

use idgen_core::generator::Clock;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

pub struct SystemClock;

/// Waits sleep in slices at most this long, checking for query cancel between them.
const SLEEP_SLICE_US: i64 = 10_000;

impl SystemClock {
    /// Unix time in microseconds.
    fn now_unix_us() -> i64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: CLOCK_REALTIME always exists; the call only writes `now`.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        now.tv_sec * 1_000_000 + now.tv_nsec / 1_000
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_unix_ms(&mut self) -> i64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: CLOCK_REALTIME always exists; the call only writes `now`.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        now.tv_sec * 1000 + now.tv_nsec / 1_000_000
    }

    /// Sleeps, never spins: a generator that waits for its next tick (its sequence used up, at
    /// 256 IDs per 10 ms for sonyflake) or for a clock stepped back leaves the core to others.
    /// The sleep is measured in microseconds, so it ends just past the millisecond waited for.
    fn wait_until(&mut self, unix_ms: i64) {
        loop {
            pg_sys::check_for_interrupts!();
            let left_us = unix_ms * 1000 - Self::now_unix_us();
            if left_us <= 0 {
                return;
            }
            // SAFETY: a plain sleep; signals cut it short and are handled above.
            unsafe { pg_sys::pg_usleep(left_us.min(SLEEP_SLICE_US) as std::ffi::c_long) };
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

/// The server's clock now, to the microsecond, as `clock_timestamp()` reads it.
pub fn server_now() -> TimestampWithTimeZone {
    // SAFETY: reads the system clock.
    let micros = unsafe { pg_sys::GetCurrentTimestamp() };
    TimestampWithTimeZone::try_from(micros).expect("the clock reads a valid timestamptz")
}

/// Unix milliseconds as a timestamptz, if in its range.
pub fn timestamptz(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from((unix_ms - PG_EPOCH_UNIX_MS) * 1000).ok()
}
