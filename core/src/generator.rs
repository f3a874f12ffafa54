//! The Snowflake generator of one backend and one service, as a state machine
//! over an injectable clock.
//!
//! Rules (each answers a way Snowflake generators have issued duplicates):
//! - IDs only grow: a clock that steps back is waited out up to a limit, and
//!   refused beyond it. Future time is never borrowed. Every holder keeps this
//!   one rule (backends: `idgen.max_clock_backward`; services: the client's
//!   `max_clock_backward`), with the same default, and counts both outcomes.
//! - 2^sequence_bits IDs per tick; when they run out, wait for the next tick.
//! - A lease's first ID is stamped strictly after its `not_before`: after the
//!   claim and after every timestamp an earlier holder of the machine id may
//!   have stamped (see `watermark`), so it cannot meet their IDs.
//! - The caller's lease check rides on the same clock reading as the ID.

use crate::layout::{IdParts, Layout};

/// Where the generator reads time and how it waits.
pub trait Clock {
    /// Unix time in milliseconds.
    fn now_unix_ms(&mut self) -> i64;
    /// Returns at about `unix_ms` (possibly earlier: the generator reads the
    /// clock again). A real clock checks for query cancel while it waits.
    fn wait_until(&mut self, unix_ms: i64);
    /// Whether the generator may wait (again). A clock that keeps stepping back is
    /// never back: a holder that bounds its waits on a clock of its own (the
    /// client, on its monotonic clock) says no once they are used up, and the
    /// generator stops instead of waiting on.
    fn may_wait(&mut self) -> bool {
        true
    }
}

/// How far a clock may step back before a generator refuses instead of waiting, unless its
/// holder is configured otherwise: the default of `idgen.max_clock_backward` and of the client's.
pub const MAX_CLOCK_BACKWARD_DEFAULT_MS: i64 = 2_000;

/// What a generator met on its clock, counted over its life: the holder reports them (a service
/// with its heartbeat), so that the person on call sees every holder's clock in one place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockEvents {
    /// Calls that found the clock behind the last ID and waited until it was back.
    pub backward_waits: u64,
    /// Calls refused because the clock was further behind than allowed.
    pub backward_refusals: u64,
    /// Calls that found their tick's sequence used up and waited for the next tick.
    pub sequence_exhaustions: u64,
}

/// Why no ID was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The clock reached the caller's lease deadline: verify or renew the lease first.
    LeaseCheckDue,
    /// The clock is behind the last issued ID by more than the allowed step.
    ClockBehind { behind_ms: i64, allowed_ms: i64 },
    /// The clock reads a time the layout cannot stamp (before its epoch or past its end).
    ClockOutsideLayout { now_unix_ms: i64 },
}

/// One backend's generator for one service. Holds no lease itself: the caller
/// passes the deadline at which the lease must be checked again.
#[derive(Clone, Debug)]
pub struct Generator {
    layout: Layout,
    machine_id: u16,
    /// Tick of the last ID issued (or the floor below the first one).
    last_ticks: i64,
    /// Sequence of the last ID issued in `last_ticks`; `max_sequence` at a floor.
    last_sequence: u32,
    /// `last_ticks` is a lease's floor, not an issued ID's tick: a clock behind it or a wait
    /// past it is the lease's start, not a step back or an exhausted sequence.
    at_floor: bool,
    max_backward_ms: i64,
    issued: u64,
    events: ClockEvents,
}

impl Generator {
    /// A generator for `machine_id` whose first ID is stamped after `not_before_unix_ms`.
    pub fn new(layout: Layout, machine_id: u16, not_before_unix_ms: i64, max_backward_ms: i64) -> Generator {
        assert!(machine_id <= layout.max_machine_id(), "machine id {machine_id} outside the layout");
        let mut generator = Generator {
            layout,
            machine_id,
            last_ticks: i64::MIN,
            last_sequence: 0,
            at_floor: true,
            max_backward_ms,
            issued: 0,
            events: ClockEvents::default(),
        };
        generator.start_lease(machine_id, not_before_unix_ms);
        generator
    }

    /// Switches to a new lease. Its first ID is stamped after the tick of
    /// `not_before_unix_ms` and after every ID this generator issued before, so
    /// IDs keep growing. A `not_before` ahead of the clock is waited out like a
    /// step back (up to the allowed step), never borrowed.
    pub fn start_lease(&mut self, machine_id: u16, not_before_unix_ms: i64) {
        assert!(machine_id <= self.layout.max_machine_id(), "machine id {machine_id} outside the layout");
        let claim_ticks = self.layout.ticks_floor(not_before_unix_ms);
        self.machine_id = machine_id;
        self.at_floor = true;
        self.last_ticks = self.last_ticks.max(claim_ticks);
        // Marks the floor tick as used up: the next ID needs a later tick.
        self.last_sequence = self.layout.max_sequence();
    }

    pub fn set_max_backward_ms(&mut self, max_backward_ms: i64) {
        self.max_backward_ms = max_backward_ms;
    }

    /// IDs issued over this generator's life.
    pub fn issued(&self) -> u64 {
        self.issued
    }

    /// What it met on its clock over its life.
    pub fn clock_events(&self) -> ClockEvents {
        self.events
    }

    /// Unix millisecond at which the tick of the last issued ID began (or the floor's): the time
    /// the ID decodes to.
    pub fn last_unix_ms(&self) -> i64 {
        self.layout.unix_ms_of(self.last_ticks)
    }

    /// The last Unix millisecond of the tick of the last issued ID (or the floor's): an ID's tick
    /// is stamped until its end, so this is the watermark its holder leaves.
    pub fn last_tick_end_unix_ms(&self) -> i64 {
        self.layout.tick_end_unix_ms(self.last_ticks)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// One attempt at `now_unix_ms`: an ID, a time to wait for, or a refusal.
    #[inline]
    pub fn try_issue(&mut self, now_unix_ms: i64) -> Attempt {
        let ticks = self.layout.ticks_floor(now_unix_ms);
        if ticks > self.last_ticks {
            if ticks < 0 || ticks > self.layout.max_ticks() {
                return Attempt::Refused(Stop::ClockOutsideLayout { now_unix_ms });
            }
            self.last_ticks = ticks;
            self.last_sequence = 0;
            self.at_floor = false;
        } else if ticks == self.last_ticks {
            if self.last_sequence >= self.layout.max_sequence() {
                let why = if self.at_floor { Wait::NotBefore } else { Wait::SequenceExhausted };
                return Attempt::Wait { until_unix_ms: self.layout.unix_ms_of(ticks + 1), why };
            }
            self.last_sequence += 1;
        } else {
            // Behind the last ID: by how far, measured from where the clock would have to return to.
            let behind_ms = self.layout.unix_ms_of(self.last_ticks) - now_unix_ms;
            if behind_ms > self.max_backward_ms {
                return Attempt::Refused(Stop::ClockBehind { behind_ms, allowed_ms: self.max_backward_ms });
            }
            let resume_tick =
                if self.last_sequence >= self.layout.max_sequence() { self.last_ticks + 1 } else { self.last_ticks };
            let why = if self.at_floor { Wait::NotBefore } else { Wait::ClockStepBack };
            return Attempt::Wait { until_unix_ms: self.layout.unix_ms_of(resume_tick), why };
        }
        self.issued += 1;
        Attempt::Issued(self.layout.pack(IdParts {
            ticks: self.last_ticks,
            machine_id: self.machine_id,
            sequence: self.last_sequence,
        }))
    }

    /// The next ID, reading `clock` once per attempt. Stops with
    /// [`Stop::LeaseCheckDue`] when the reading reaches `lease_check_due_unix_ms`.
    /// Counts, once per call, a step back it waited out, a sequence it found used up, and a
    /// step back it refused.
    #[inline]
    pub fn next_id(&mut self, clock: &mut impl Clock, lease_check_due_unix_ms: i64) -> Result<i64, Stop> {
        let (mut stepped_back, mut exhausted) = (false, false);
        let result = loop {
            let now = clock.now_unix_ms();
            if now >= lease_check_due_unix_ms {
                break Err(Stop::LeaseCheckDue);
            }
            match self.try_issue(now) {
                Attempt::Issued(id) => break Ok(id),
                Attempt::Wait { until_unix_ms, why } => {
                    stepped_back |= why == Wait::ClockStepBack;
                    exhausted |= why == Wait::SequenceExhausted;
                    if !clock.may_wait() {
                        // Out of waiting: a clock still behind is refused as too far behind; any
                        // other wait ran into the caller's deadline.
                        break Err(match why {
                            Wait::ClockStepBack => Stop::ClockBehind {
                                behind_ms: self.layout.unix_ms_of(self.last_ticks) - now,
                                allowed_ms: self.max_backward_ms,
                            },
                            Wait::NotBefore | Wait::SequenceExhausted => Stop::LeaseCheckDue,
                        });
                    }
                    clock.wait_until(until_unix_ms)
                }
                Attempt::Refused(stop) => break Err(stop),
            }
        };
        if stepped_back || exhausted || matches!(result, Err(Stop::ClockBehind { .. })) {
            self.count(stepped_back, exhausted, &result);
        }
        result
    }

    #[cold]
    fn count(&mut self, stepped_back: bool, exhausted: bool, result: &Result<i64, Stop>) {
        self.events.backward_waits += u64::from(stepped_back);
        self.events.sequence_exhaustions += u64::from(exhausted);
        self.events.backward_refusals += u64::from(matches!(result, Err(Stop::ClockBehind { .. })));
    }
}

/// Why a generator waits before it can issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The lease's floor (`not_before`, or the last ID of an earlier lease) is not behind it yet.
    NotBefore,
    /// The clock stepped back behind the last ID, by no more than allowed.
    ClockStepBack,
    /// The tick's sequence is used up.
    SequenceExhausted,
}

/// The outcome of one [`Generator::try_issue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    Issued(i64),
    /// Nothing can be issued before `until_unix_ms`.
    Wait {
        until_unix_ms: i64,
        why: Wait,
    },
    Refused(Stop),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::EPOCH_2025_UNIX_MS;

    /// A clock that only moves when told to, or when waited on.
    struct FakeClock {
        now: i64,
        /// Readings to return before `now`, e.g. a step back.
        script: Vec<i64>,
        waits: Vec<i64>,
    }

    impl FakeClock {
        fn at(now: i64) -> FakeClock {
            FakeClock { now, script: Vec::new(), waits: Vec::new() }
        }
    }

    impl Clock for FakeClock {
        fn now_unix_ms(&mut self) -> i64 {
            if !self.script.is_empty() {
                self.now = self.script.remove(0);
            }
            self.now
        }
        fn wait_until(&mut self, unix_ms: i64) {
            self.waits.push(unix_ms);
            self.now = self.now.max(unix_ms);
        }
    }

    const T0: i64 = EPOCH_2025_UNIX_MS + 1_000_000;
    const NO_DEADLINE: i64 = i64::MAX;
    const L: Layout = Layout::DEFAULT;

    fn generator_claimed_at(claimed_at: i64) -> Generator {
        Generator::new(L, 7, claimed_at, 2_000)
    }

    #[test]
    fn ids_grow_strictly_and_carry_time_machine_and_sequence() {
        let mut g = generator_claimed_at(T0 - 10);
        let mut clock = FakeClock::at(T0);
        let a = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        let b = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        clock.now += 1;
        let c = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert!(a < b && b < c);
        assert_eq!(L.decompose(a).unwrap(), IdParts { ticks: T0 - EPOCH_2025_UNIX_MS, machine_id: 7, sequence: 0 });
        assert_eq!(L.decompose(b).unwrap().sequence, 1);
        assert_eq!(L.decompose(c).unwrap(), IdParts { ticks: T0 + 1 - EPOCH_2025_UNIX_MS, machine_id: 7, sequence: 0 });
        assert_eq!(g.issued(), 3);
    }

    #[test]
    fn never_issues_at_or_before_the_claim_moment() {
        // Claimed within millisecond T0: the clock still reads T0, so the first ID must wait for T0 + 1.
        let mut g = generator_claimed_at(T0);
        let mut clock = FakeClock::at(T0);
        let id = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(clock.waits, vec![T0 + 1]);
        assert_eq!(L.decompose(id).unwrap().ticks, T0 + 1 - EPOCH_2025_UNIX_MS);
        // A clock reading before the claim is a clock behind the floor: waited out, not stamped early.
        let mut g = generator_claimed_at(T0);
        let mut clock = FakeClock::at(T0 - 5);
        let id = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(L.decompose(id).unwrap().ticks, T0 + 1 - EPOCH_2025_UNIX_MS);
        // Waiting out the lease's start is neither a step back nor an exhausted sequence.
        assert_eq!(g.clock_events(), ClockEvents::default());
    }

    #[test]
    fn an_exhausted_sequence_waits_for_the_next_millisecond() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0);
        let ids: Vec<i64> = (0..=L.max_sequence()).map(|_| g.next_id(&mut clock, NO_DEADLINE).unwrap()).collect();
        assert!(clock.waits.is_empty(), "4096 IDs fit in one millisecond");
        assert_eq!(L.decompose(*ids.last().unwrap()).unwrap().sequence, 4095);
        let next = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(clock.waits, vec![T0 + 1], "waited for the next millisecond, did not borrow it");
        assert_eq!(g.clock_events(), ClockEvents { sequence_exhaustions: 1, ..ClockEvents::default() });
        assert_eq!(
            L.decompose(next).unwrap(),
            IdParts { ticks: T0 + 1 - EPOCH_2025_UNIX_MS, machine_id: 7, sequence: 0 }
        );
        assert!(ids.windows(2).all(|w| w[0] < w[1]) && next > *ids.last().unwrap());
    }

    #[test]
    fn a_small_step_back_is_waited_out_without_reusing_time() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0);
        let before = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        // The clock steps back 1.5 s, then the generator waits until it is back at T0.
        clock.script = vec![T0 - 1_500];
        let after = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(clock.waits, vec![T0]);
        assert!(after > before);
        assert_eq!(L.decompose(after).unwrap().ticks, T0 - EPOCH_2025_UNIX_MS, "continues the same tick's sequence");
        assert_eq!(L.decompose(after).unwrap().sequence, 1);
        assert_eq!(g.clock_events(), ClockEvents { backward_waits: 1, ..ClockEvents::default() });
    }

    #[test]
    fn a_large_step_back_is_refused_and_issues_nothing() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0);
        g.next_id(&mut clock, NO_DEADLINE).unwrap();
        clock.now = T0 - 2_001;
        assert_eq!(g.next_id(&mut clock, NO_DEADLINE), Err(Stop::ClockBehind { behind_ms: 2_001, allowed_ms: 2_000 }));
        assert!(clock.waits.is_empty());
        assert_eq!(g.issued(), 1);
        assert_eq!(g.clock_events(), ClockEvents { backward_refusals: 1, ..ClockEvents::default() });
        // Exactly the allowed step is waited out.
        clock.now = T0 - 2_000;
        assert!(g.next_id(&mut clock, NO_DEADLINE).is_ok());
        assert_eq!(g.clock_events(), ClockEvents { backward_waits: 1, backward_refusals: 1, sequence_exhaustions: 0 });
        // With no tolerance at all, any step back is refused.
        let mut strict = Generator::new(L, 1, T0 - 1, 0);
        let mut clock = FakeClock::at(T0);
        strict.next_id(&mut clock, NO_DEADLINE).unwrap();
        clock.now = T0 - 1;
        assert!(matches!(strict.next_id(&mut clock, NO_DEADLINE), Err(Stop::ClockBehind { behind_ms: 1, .. })));
    }

    /// A clock that steps back again whenever it is waited on, and allows `waits` waits.
    struct Sawtooth {
        now: i64,
        waits: u32,
    }

    impl Clock for Sawtooth {
        fn now_unix_ms(&mut self) -> i64 {
            self.now
        }
        fn wait_until(&mut self, _unix_ms: i64) {
            self.waits -= 1;
            self.now -= 1;
        }
        fn may_wait(&mut self) -> bool {
            self.waits > 0
        }
    }

    #[test]
    fn a_clock_that_never_comes_back_is_refused_once_its_waits_are_used_up() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0);
        g.next_id(&mut clock, NO_DEADLINE).unwrap();
        // Each step is small, but the clock never returns: the generator stops when told it may
        // wait no more, instead of waiting forever.
        let mut sawtooth = Sawtooth { now: T0 - 100, waits: 5 };
        assert_eq!(g.next_id(&mut sawtooth, NO_DEADLINE), Err(Stop::ClockBehind { behind_ms: 105, allowed_ms: 2_000 }));
        assert_eq!(sawtooth.waits, 0);
        assert_eq!(g.clock_events(), ClockEvents { backward_waits: 1, backward_refusals: 1, sequence_exhaustions: 0 });
        assert_eq!(g.issued(), 1);
        // Out of waiting for the next tick: the caller's deadline, not a clock fault.
        let mut g = generator_claimed_at(T0);
        assert_eq!(g.next_id(&mut Sawtooth { now: T0, waits: 0 }, NO_DEADLINE), Err(Stop::LeaseCheckDue));
    }

    #[test]
    fn the_lease_check_uses_the_same_reading_and_stops_before_issuing() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0);
        assert!(g.next_id(&mut clock, T0 + 1).is_ok());
        clock.now = T0 + 1;
        assert_eq!(g.next_id(&mut clock, T0 + 1), Err(Stop::LeaseCheckDue));
        assert_eq!(g.issued(), 1);
        // A wait that crosses the deadline stops too, instead of issuing past it.
        let mut g = generator_claimed_at(T0);
        let mut clock = FakeClock::at(T0);
        assert_eq!(g.next_id(&mut clock, T0 + 1), Err(Stop::LeaseCheckDue));
        assert_eq!(g.issued(), 0);
    }

    #[test]
    fn a_new_lease_continues_above_every_earlier_id() {
        let mut g = generator_claimed_at(T0 - 1);
        let mut clock = FakeClock::at(T0 + 100);
        let old = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        // Re-claimed (e.g. after a rollback) with an earlier-looking claim time and another machine id.
        g.start_lease(3, T0);
        let new = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert!(new > old);
        assert_eq!(g.clock_events(), ClockEvents::default(), "a new lease's floor is no exhausted sequence");
        let parts = L.decompose(new).unwrap();
        assert_eq!((parts.machine_id, parts.ticks), (3, T0 + 101 - EPOCH_2025_UNIX_MS));
        // A claim later than every issued ID sets the floor instead.
        g.start_lease(4, T0 + 500);
        let later = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(L.decompose(later).unwrap().ticks, T0 + 501 - EPOCH_2025_UNIX_MS);
    }

    #[test]
    fn times_the_layout_cannot_stamp_are_refused() {
        let end = L.last_unix_ms();
        let mut g = Generator::new(L, 1, end - 5, 2_000);
        let mut clock = FakeClock::at(end);
        assert!(g.next_id(&mut clock, NO_DEADLINE).is_ok(), "the last millisecond still works");
        clock.now = end + 1;
        assert_eq!(g.next_id(&mut clock, NO_DEADLINE), Err(Stop::ClockOutsideLayout { now_unix_ms: end + 1 }));
        let mut g = Generator::new(L, 1, EPOCH_2025_UNIX_MS - 100, 2_000);
        let mut clock = FakeClock::at(EPOCH_2025_UNIX_MS - 10);
        assert_eq!(
            g.next_id(&mut clock, NO_DEADLINE),
            Err(Stop::ClockOutsideLayout { now_unix_ms: EPOCH_2025_UNIX_MS - 10 })
        );
    }

    #[test]
    fn coarser_time_units_stamp_ticks_not_milliseconds() {
        let layout =
            Layout::new(EPOCH_2025_UNIX_MS, 10, 43, 8, 10, crate::layout::FieldOrder::TimeMachineSequence).unwrap();
        let mut g = Generator::new(layout, 200, T0 - 20, 2_000);
        let mut clock = FakeClock::at(T0 + 5);
        let id = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(layout.decompose(id).unwrap(), IdParts { ticks: 100_000, machine_id: 200, sequence: 0 });
        // Stamped in the tick [T0, T0 + 9]: the watermark it leaves covers the whole tick.
        assert_eq!((g.last_unix_ms(), g.last_tick_end_unix_ms()), (T0, T0 + 9));
    }

    #[test]
    fn a_sonyflake_holder_waits_for_the_next_10_ms_tick_when_its_256_sequences_are_used() {
        let layout = crate::layout::Preset::Sonyflake.layout();
        // Claimed in the tick before: the first ID is in the clock's tick.
        let mut g = Generator::new(layout, 40_000, T0 - 10, 2_000);
        let mut clock = FakeClock::at(T0 + 3);
        let tick = layout.ticks_floor(T0 + 3);
        let ids: Vec<i64> = (0..256).map(|_| g.next_id(&mut clock, NO_DEADLINE).unwrap()).collect();
        assert!(clock.waits.is_empty());
        let next = g.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(clock.waits, vec![layout.unix_ms_of(tick + 1)], "one wait, for the start of the next tick");
        assert_eq!(layout.decompose(next).unwrap(), IdParts { ticks: tick + 1, machine_id: 40_000, sequence: 0 });
        assert!(ids.windows(2).all(|w| w[0] < w[1]) && next > ids[255]);
        assert_eq!(g.clock_events().sequence_exhaustions, 1);
        // A lease whose not_before falls anywhere in a tick starts after that whole tick.
        let mut later = Generator::new(layout, 7, layout.tick_end_unix_ms(tick + 1), 2_000);
        let first = later.next_id(&mut clock, NO_DEADLINE).unwrap();
        assert_eq!(layout.decompose(first).unwrap().ticks, tick + 2);
    }
}
