//! The ID layout as one value, and the presets a service may choose.
//!
//! Every width, range and the epoch come from a [`Layout`]; nothing else in
//! idgen hard-codes a bit count. Each service has one layout, fixed at its
//! first claim (the registry keeps it), and a [`Pool`]: the machine ids the
//! registry hands out for it, which may be narrower than the machine-id field.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::RangeInclusive;

/// Unix milliseconds of 2025-01-01T00:00:00Z, the epoch of the `snowflake` and `js_safe` presets.
pub const EPOCH_2025_UNIX_MS: i64 = 1_735_689_600_000;
/// Unix milliseconds of 2014-09-01T00:00:00Z, Sonyflake's default start time.
pub const EPOCH_SONYFLAKE_UNIX_MS: i64 = 1_409_529_600_000;
/// The last millisecond any layout may stamp: 9999-12-31T23:59:59.999Z (a timestamptz, and
/// far inside an i64 of milliseconds).
pub const LAST_TIME_UNIX_MS: i64 = 253_402_300_799_999;
/// The widest machine-id field: 16 bits, 65,536 machine ids (Sonyflake's).
pub const MAX_MACHINE_BITS: u32 = 16;
/// The sign bit is always 0: the three fields together take at most 63 bits.
pub const MAX_LAYOUT_BITS: u32 = 63;

/// Where the machine id and the sequence sit below the time field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldOrder {
    /// time | machine id | sequence: Twitter's Snowflake.
    TimeMachineSequence,
    /// time | sequence | machine id: Sonyflake.
    TimeSequenceMachine,
}

impl FieldOrder {
    /// Every order. `idgen_layouts`' CHECK `idgen_layouts_field_order_known` lists the same
    /// labels (core/tests/sql_restates.rs).
    pub const ALL: [FieldOrder; 2] = [FieldOrder::TimeMachineSequence, FieldOrder::TimeSequenceMachine];

    /// The label in SQL (`idgen_layouts.field_order`, `idgen_define_layout(field_order => ...)`).
    pub fn label(self) -> &'static str {
        match self {
            FieldOrder::TimeMachineSequence => "time_machine_sequence",
            FieldOrder::TimeSequenceMachine => "time_sequence_machine",
        }
    }

    pub fn from_label(label: &str) -> Option<FieldOrder> {
        FieldOrder::ALL.into_iter().find(|order| order.label() == label)
    }
}

/// How a 64-bit ID is cut into time, machine id and sequence.
///
/// The sign bit is always 0, and so is every bit above the three fields (a layout of 53 bits
/// makes IDs a JavaScript `Number` holds exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Unix milliseconds at which the time field is 0.
    pub epoch_unix_ms: i64,
    /// Milliseconds per tick of the time field.
    pub time_unit_ms: i64,
    pub time_bits: u32,
    pub machine_bits: u32,
    pub sequence_bits: u32,
    pub order: FieldOrder,
}

/// The parts of an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdParts {
    /// Ticks of `time_unit_ms` since the epoch.
    pub ticks: i64,
    pub machine_id: u16,
    pub sequence: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// A field width out of bounds, or widths adding up to more than 63 bits.
    BadWidths { time: u32, machine: u32, sequence: u32 },
    /// `time_unit_ms` is not positive.
    BadTimeUnit(i64),
    /// The epoch is before 1970.
    EpochBefore1970(i64),
    /// The time field would run past 9999-12-31: its end is `last_unix_ms` (saturated).
    EndsTooLate { last_unix_ms: i64 },
    /// A field value does not fit its width.
    FieldOutOfRange { field: &'static str, value: i64, max: i64 },
    /// A negative ID: the sign bit is never set.
    NegativeId(i64),
    /// An ID with bits set above the layout's fields: no holder of this layout made it.
    AboveLayout { id: i64, max: i64 },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::BadWidths { time, machine, sequence } => write!(
                f,
                "layout widths must be at least 1 bit each, at most {MAX_MACHINE_BITS} for the machine id, and add up to at most {MAX_LAYOUT_BITS} bits; got time {time} + machine {machine} + sequence {sequence}"
            ),
            LayoutError::BadTimeUnit(ms) => write!(f, "layout time unit must be a positive number of milliseconds, got {ms}"),
            LayoutError::EpochBefore1970(ms) => write!(f, "layout epoch must not be before 1970, got Unix ms {ms}"),
            LayoutError::EndsTooLate { last_unix_ms } => {
                write!(f, "layout time field must end by 9999-12-31, it ends at Unix ms {last_unix_ms}")
            }
            LayoutError::FieldOutOfRange { field, value, max } => {
                write!(f, "{field} {value} does not fit the layout (0 to {max})")
            }
            LayoutError::NegativeId(id) => write!(f, "id {id} is negative; idgen ids are never negative"),
            LayoutError::AboveLayout { id, max } => write!(f, "id {id} is above the largest id of the layout ({max})"),
        }
    }
}

impl std::error::Error for LayoutError {}

impl Layout {
    /// 41 bits of milliseconds since 2025-01-01 | 10-bit machine id | 12-bit sequence: the
    /// `snowflake` preset, the layout of every service that was never given another.
    pub const DEFAULT: Layout = Preset::Snowflake.layout();

    /// Builds a layout, checking that it describes a non-negative 64-bit ID whose times fit a
    /// timestamptz.
    pub fn new(
        epoch_unix_ms: i64,
        time_unit_ms: i64,
        time_bits: u32,
        machine_bits: u32,
        sequence_bits: u32,
        order: FieldOrder,
    ) -> Result<Layout, LayoutError> {
        let widths_ok = time_bits >= 1
            && (1..=MAX_MACHINE_BITS).contains(&machine_bits)
            && sequence_bits >= 1
            && time_bits.saturating_add(machine_bits).saturating_add(sequence_bits) <= MAX_LAYOUT_BITS;
        if !widths_ok {
            return Err(LayoutError::BadWidths { time: time_bits, machine: machine_bits, sequence: sequence_bits });
        }
        if time_unit_ms <= 0 {
            return Err(LayoutError::BadTimeUnit(time_unit_ms));
        }
        if epoch_unix_ms < 0 {
            return Err(LayoutError::EpochBefore1970(epoch_unix_ms));
        }
        let layout = Layout { epoch_unix_ms, time_unit_ms, time_bits, machine_bits, sequence_bits, order };
        let last = 1i64
            .checked_shl(time_bits)
            .filter(|ticks| *ticks > 0)
            .and_then(|ticks| ticks.checked_mul(time_unit_ms))
            .and_then(|span| span.checked_add(epoch_unix_ms))
            .map(|end| end - 1);
        match last {
            Some(last) if last <= LAST_TIME_UNIX_MS => Ok(layout),
            other => Err(LayoutError::EndsTooLate { last_unix_ms: other.unwrap_or(i64::MAX) }),
        }
    }

    /// The machine ids this layout can carry: `0..=2^machine_bits - 1`.
    pub fn machine_id_range(&self) -> RangeInclusive<u16> {
        0..=self.max_machine_id()
    }

    pub fn max_machine_id(&self) -> u16 {
        ((1u32 << self.machine_bits) - 1) as u16
    }

    pub fn max_sequence(&self) -> u32 {
        ((1u64 << self.sequence_bits) - 1) as u32
    }

    pub fn max_ticks(&self) -> i64 {
        ((1u64 << self.time_bits) - 1) as i64
    }

    /// The bits the three fields take together (63 for the presets but `js_safe`'s 53).
    pub fn total_bits(&self) -> u32 {
        self.time_bits + self.machine_bits + self.sequence_bits
    }

    /// The largest ID of the layout: every field at its maximum.
    pub fn max_id(&self) -> i64 {
        ((1u64 << self.total_bits()) - 1) as i64
    }

    /// IDs one holder can stamp per second at most: a tick's sequence, ticks per second.
    pub fn ids_per_second(&self) -> u64 {
        (u64::from(self.max_sequence()) + 1) * 1000 / self.time_unit_ms as u64
    }

    /// The last Unix millisecond this layout can stamp.
    pub fn last_unix_ms(&self) -> i64 {
        self.tick_end_unix_ms(self.max_ticks())
    }

    /// The bits an ID's machine id occupies: its lowest bit and its width. Pools keep IDs apart only
    /// between layouts whose fields are the same ([`ServiceLayout::id_spaces`]).
    pub fn machine_field(&self) -> (u32, u32) {
        (self.shifts().0, self.machine_bits)
    }

    /// Where the machine id and the sequence sit: their shifts.
    #[inline]
    fn shifts(&self) -> (u32, u32) {
        match self.order {
            FieldOrder::TimeMachineSequence => (self.sequence_bits, 0),
            FieldOrder::TimeSequenceMachine => (0, self.machine_bits),
        }
    }

    /// Packs the three fields into an ID, refusing any field wider than its slot.
    pub fn compose(&self, parts: IdParts) -> Result<i64, LayoutError> {
        check_field("time", parts.ticks, self.max_ticks())?;
        check_field("machine id", i64::from(parts.machine_id), i64::from(self.max_machine_id()))?;
        check_field("sequence", i64::from(parts.sequence), i64::from(self.max_sequence()))?;
        Ok(self.pack(parts))
    }

    /// Packs fields the caller has already kept in range (the generator, on its
    /// hot path); [`Layout::compose`] checks them first.
    #[inline]
    pub fn pack(&self, parts: IdParts) -> i64 {
        debug_assert!(self.compose_checks(parts), "field out of range: {parts:?}");
        let (machine_shift, sequence_shift) = self.shifts();
        (parts.ticks << (self.machine_bits + self.sequence_bits))
            | (i64::from(parts.machine_id) << machine_shift)
            | (i64::from(parts.sequence) << sequence_shift)
    }

    fn compose_checks(&self, parts: IdParts) -> bool {
        (0..=self.max_ticks()).contains(&parts.ticks)
            && parts.machine_id <= self.max_machine_id()
            && parts.sequence <= self.max_sequence()
    }

    /// Splits an ID into its fields.
    pub fn decompose(&self, id: i64) -> Result<IdParts, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId(id));
        }
        if id > self.max_id() {
            return Err(LayoutError::AboveLayout { id, max: self.max_id() });
        }
        let (machine_shift, sequence_shift) = self.shifts();
        let sequence = ((id >> sequence_shift) & i64::from(self.max_sequence())) as u32;
        let machine_id = ((id >> machine_shift) & i64::from(self.max_machine_id())) as u16;
        let ticks = id >> (self.machine_bits + self.sequence_bits);
        Ok(IdParts { ticks, machine_id, sequence })
    }

    /// Ticks since the epoch for a Unix millisecond, refusing times before the
    /// epoch or past the end of the time field.
    pub fn ticks_at(&self, unix_ms: i64) -> Result<i64, LayoutError> {
        let since = unix_ms.saturating_sub(self.epoch_unix_ms);
        if since < 0 {
            return Err(LayoutError::FieldOutOfRange { field: "time", value: since, max: self.max_ticks() });
        }
        let ticks = since / self.time_unit_ms;
        check_field("time", ticks, self.max_ticks())?;
        Ok(ticks)
    }

    /// The tick a Unix millisecond falls in, unchecked: negative before the
    /// epoch, possibly past `max_ticks`.
    #[inline]
    pub fn ticks_floor(&self, unix_ms: i64) -> i64 {
        let since_epoch = unix_ms - self.epoch_unix_ms;
        // Millisecond ticks (the default) need no division on the generator's hot path.
        if self.time_unit_ms == 1 {
            since_epoch
        } else {
            since_epoch.div_euclid(self.time_unit_ms)
        }
    }

    /// The Unix millisecond at which a tick begins.
    pub fn unix_ms_of(&self, ticks: i64) -> i64 {
        self.epoch_unix_ms + ticks * self.time_unit_ms
    }

    /// The last Unix millisecond of a tick: a holder that stamped in the tick may have done so
    /// until then, so that is the watermark it leaves (a later holder starts after the tick).
    pub fn tick_end_unix_ms(&self, ticks: i64) -> i64 {
        self.unix_ms_of(ticks) + (self.time_unit_ms - 1)
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::DEFAULT
    }
}

fn check_field(field: &'static str, value: i64, max: i64) -> Result<(), LayoutError> {
    if (0..=max).contains(&value) {
        Ok(())
    } else {
        Err(LayoutError::FieldOutOfRange { field, value, max })
    }
}

/// The layouts a service can be given by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    /// 41 bits of ms since 2025-01-01 | 10-bit machine id | 12-bit sequence: until 2094-09-07,
    /// 4,096,000 IDs/s per holder, 1,024 machine ids. The default.
    Snowflake,
    /// Sonyflake v1's default, bit for bit: 39 bits of 10 ms since 2014-09-01 | 8-bit sequence |
    /// 16-bit machine id: until 2188-11-16, 25,600 IDs/s per holder, 65,536 machine ids.
    Sonyflake,
    /// Every ID at most 2^53 - 1, so a JavaScript `Number` holds it exactly: 37 bits of 10 ms
    /// since 2025-01-01 | 8-bit machine id | 8-bit sequence: until 2068-07-21, 25,600 IDs/s per
    /// holder, 256 machine ids. Ten bits fewer than `snowflake`, taken from the time unit (10 ms
    /// ticks), the lifetime (43 years) and the machine ids (256), not from a holder's rate.
    JsSafe,
}

impl Preset {
    /// Every preset. `idgen_layouts`' CHECK `idgen_layouts_preset_known` lists the same names
    /// and `custom` (core/tests/sql_restates.rs).
    pub const ALL: [Preset; 3] = [Preset::Snowflake, Preset::Sonyflake, Preset::JsSafe];
    /// The name of a layout that is no preset.
    pub const CUSTOM: &'static str = "custom";

    pub fn name(self) -> &'static str {
        match self {
            Preset::Snowflake => "snowflake",
            Preset::Sonyflake => "sonyflake",
            Preset::JsSafe => "js_safe",
        }
    }

    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|preset| preset.name() == name)
    }

    pub const fn layout(self) -> Layout {
        match self {
            Preset::Snowflake => Layout {
                epoch_unix_ms: EPOCH_2025_UNIX_MS,
                time_unit_ms: 1,
                time_bits: 41,
                machine_bits: 10,
                sequence_bits: 12,
                order: FieldOrder::TimeMachineSequence,
            },
            Preset::Sonyflake => Layout {
                epoch_unix_ms: EPOCH_SONYFLAKE_UNIX_MS,
                time_unit_ms: 10,
                time_bits: 39,
                machine_bits: 16,
                sequence_bits: 8,
                order: FieldOrder::TimeSequenceMachine,
            },
            Preset::JsSafe => Layout {
                epoch_unix_ms: EPOCH_2025_UNIX_MS,
                time_unit_ms: 10,
                time_bits: 37,
                machine_bits: 8,
                sequence_bits: 8,
                order: FieldOrder::TimeMachineSequence,
            },
        }
    }

    /// The preset a layout is, if any.
    pub fn of(layout: &Layout) -> Option<Preset> {
        Preset::ALL.into_iter().find(|preset| preset.layout() == *layout)
    }
}

/// The machine ids the registry hands out for a service: all of its layout's, or fewer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool {
    pub first: u16,
    pub last: u16,
}

impl Pool {
    /// Every machine id of the layout.
    pub fn all(layout: &Layout) -> Pool {
        Pool { first: 0, last: layout.max_machine_id() }
    }

    /// `first..=last`, inside the layout's machine-id field.
    pub fn new(layout: &Layout, first: i64, last: i64) -> Result<Pool, LayoutError> {
        let max = i64::from(layout.max_machine_id());
        check_field("pool_first", first, max)?;
        check_field("pool_last", last, max)?;
        if first > last {
            return Err(LayoutError::FieldOutOfRange { field: "pool_first", value: first, max: last });
        }
        Ok(Pool { first: first as u16, last: last as u16 })
    }

    pub fn size(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    pub fn contains(&self, machine_id: u16) -> bool {
        (self.first..=self.last).contains(&machine_id)
    }

    /// The machine ids of the pool inside `range` (a server's `idgen.machine_id_range`), if any.
    pub fn within(&self, range: &RangeInclusive<u16>) -> Option<Pool> {
        let (first, last) = (self.first.max(*range.start()), self.last.min(*range.end()));
        (first <= last).then_some(Pool { first, last })
    }
}

/// A service's layout and pool, as the registry keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceLayout {
    pub layout: Layout,
    pub pool: Pool,
}

/// Whether the IDs of two services (or two databases, or two servers) can be told apart by their
/// configuration alone, whatever their holders do: what keeps ID spaces apart when their rows meet in
/// one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdSpaces {
    /// The machine-id field sits at the same bits and the pools share no id: no ID of one equals an ID
    /// of the other.
    Apart,
    /// The pools share ids: the two hand out the same machine ids, and their IDs meet (as two services
    /// of one registry always may, unless given disjoint pools).
    Shared,
    /// The pools share no id, but the machine-id fields sit at other bits: a machine id of one and
    /// another of the other can make the same ID (snowflake's machine id 512 and an 11-bit-machine,
    /// 11-bit-sequence layout's machine id 1024, at sequence 0). Disjoint pools separate nothing here.
    OtherBits,
}

impl ServiceLayout {
    /// What a service that was never given a layout uses: `snowflake`, every machine id.
    pub const DEFAULT: ServiceLayout = ServiceLayout { layout: Layout::DEFAULT, pool: Pool { first: 0, last: 1023 } };

    /// How the IDs of this service and `other` relate (see [`IdSpaces`]).
    pub fn id_spaces(&self, other: &ServiceLayout) -> IdSpaces {
        let disjoint = self.pool.last < other.pool.first || other.pool.last < self.pool.first;
        match (disjoint, self.layout.machine_field() == other.layout.machine_field()) {
            (false, _) => IdSpaces::Shared,
            (true, true) => IdSpaces::Apart,
            (true, false) => IdSpaces::OtherBits,
        }
    }

    /// The preset's name, or `custom`.
    pub fn preset_name(&self) -> &'static str {
        Preset::of(&self.layout).map_or(Preset::CUSTOM, Preset::name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::iso_utc;

    const TMS: FieldOrder = FieldOrder::TimeMachineSequence;

    #[test]
    fn disjoint_pools_keep_ids_apart_only_at_the_same_bits() {
        let snowflake = Layout::DEFAULT;
        let wide = Layout::new(EPOCH_2025_UNIX_MS, 1, 41, 11, 11, TMS).unwrap();
        let a = ServiceLayout { layout: snowflake, pool: Pool { first: 512, last: 1023 } };
        let b = ServiceLayout { layout: wide, pool: Pool { first: 1024, last: 2047 } };
        // The review's case: the same ID from machine id 512 of one and machine id 1024 of the other.
        let one = snowflake.compose(IdParts { ticks: 60_642_000, machine_id: 512, sequence: 0 }).unwrap();
        let other = wide.compose(IdParts { ticks: 60_642_000, machine_id: 1024, sequence: 0 }).unwrap();
        assert_eq!(one, other);
        assert_eq!(a.id_spaces(&b), IdSpaces::OtherBits);
        let c = ServiceLayout { layout: snowflake, pool: Pool { first: 0, last: 511 } };
        assert_eq!(a.id_spaces(&c), IdSpaces::Apart);
        assert_eq!(c.id_spaces(&a), IdSpaces::Apart);
        // Another epoch, the same field: still apart (the machine field differs in every ID).
        let later = ServiceLayout { layout: Layout { epoch_unix_ms: EPOCH_2025_UNIX_MS + 1, ..snowflake }, ..c };
        assert_eq!(a.id_spaces(&later), IdSpaces::Apart);
        assert_eq!(a.id_spaces(&ServiceLayout::DEFAULT), IdSpaces::Shared);
        // Sonyflake's machine id sits at bit 0: apart from snowflake's by no pool.
        let sony = ServiceLayout { layout: Preset::Sonyflake.layout(), pool: Pool { first: 2048, last: 4095 } };
        assert_eq!(a.id_spaces(&sony), IdSpaces::OtherBits);
    }

    #[test]
    fn default_layout_has_1024_machine_ids_and_4096_sequences() {
        let l = Layout::DEFAULT;
        assert_eq!(l.machine_id_range(), 0..=1023);
        assert_eq!(l.max_sequence(), 4095);
        assert_eq!(l.max_ticks(), (1i64 << 41) - 1);
        assert_eq!(ServiceLayout::DEFAULT.pool, Pool::all(&l));
        assert_eq!(ServiceLayout::DEFAULT.preset_name(), "snowflake");
    }

    #[test]
    fn default_time_field_lasts_until_2094() {
        // 2^41 ms is about 69.7 years after 2025-01-01: the field ends in 2094-09.
        let last = Layout::DEFAULT.last_unix_ms();
        assert_eq!(iso_utc(last), "2094-09-07T15:47:35.551Z");
        assert!(Layout::DEFAULT.ticks_at(last).is_ok());
        assert!(Layout::DEFAULT.ticks_at(last + 1).is_err());
    }

    /// The figures the docs give for each preset: its end, IDs per second per holder, machine ids.
    #[test]
    fn each_preset_lasts_rates_and_counts_as_documented() {
        let facts: Vec<(&str, String, u64, u32, u32)> = Preset::ALL
            .iter()
            .map(|p| {
                let l = p.layout();
                (
                    p.name(),
                    iso_utc(l.last_unix_ms()),
                    l.ids_per_second(),
                    u32::from(l.max_machine_id()) + 1,
                    l.total_bits(),
                )
            })
            .collect();
        assert_eq!(
            facts,
            [
                ("snowflake", "2094-09-07T15:47:35.551Z".to_owned(), 4_096_000, 1_024, 63),
                ("sonyflake", "2188-11-16T03:28:58.879Z".to_owned(), 25_600, 65_536, 63),
                ("js_safe", "2068-07-21T06:52:14.719Z".to_owned(), 25_600, 256, 53),
            ]
        );
        for preset in Preset::ALL {
            let l = preset.layout();
            let built =
                Layout::new(l.epoch_unix_ms, l.time_unit_ms, l.time_bits, l.machine_bits, l.sequence_bits, l.order);
            assert_eq!(built, Ok(l), "{}", preset.name());
            assert_eq!(Preset::from_name(preset.name()), Some(preset));
            assert_eq!(Preset::of(&l), Some(preset));
        }
        assert_eq!(Preset::from_name("custom"), None);
    }

    #[test]
    fn every_js_safe_id_is_a_safe_javascript_integer_to_the_end_of_its_time() {
        let l = Preset::JsSafe.layout();
        const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
        assert_eq!(l.max_id(), MAX_SAFE_INTEGER);
        let last = l.compose(IdParts { ticks: l.max_ticks(), machine_id: 255, sequence: 255 }).unwrap();
        assert_eq!(last, MAX_SAFE_INTEGER);
        // One tick later there is no ID: the time is refused, not wrapped or overflowed.
        assert!(l.ticks_at(l.last_unix_ms() + 1).is_err());
        assert!(l.compose(IdParts { ticks: l.max_ticks() + 1, machine_id: 0, sequence: 0 }).is_err());
        assert_eq!(
            l.decompose(MAX_SAFE_INTEGER + 1),
            Err(LayoutError::AboveLayout { id: 1 << 53, max: MAX_SAFE_INTEGER })
        );
    }

    #[test]
    fn sonyflake_puts_the_sequence_above_the_machine_id() {
        let l = Preset::Sonyflake.layout();
        let parts = IdParts { ticks: 5, machine_id: 0xABCD, sequence: 0x12 };
        let id = l.compose(parts).unwrap();
        assert_eq!(id, (5 << 24) | (0x12 << 16) | 0xABCD);
        assert_eq!(l.decompose(id), Ok(parts));
        // 10 ms ticks: 2014-09-01T00:00:00.019Z is tick 1, from its start to its end.
        assert_eq!(l.ticks_at(EPOCH_SONYFLAKE_UNIX_MS + 19), Ok(1));
        assert_eq!(
            (l.unix_ms_of(1), l.tick_end_unix_ms(1)),
            (EPOCH_SONYFLAKE_UNIX_MS + 10, EPOCH_SONYFLAKE_UNIX_MS + 19)
        );
    }

    #[test]
    fn compose_and_decompose_round_trip_at_the_field_limits() {
        for layout in Preset::ALL.map(Preset::layout) {
            let max_machine_id = layout.max_machine_id();
            for parts in [
                IdParts { ticks: 0, machine_id: 0, sequence: 0 },
                IdParts { ticks: layout.max_ticks(), machine_id: max_machine_id, sequence: layout.max_sequence() },
                IdParts { ticks: 123_456_789, machine_id: max_machine_id / 2, sequence: 7 },
            ] {
                let id = layout.compose(parts).unwrap();
                assert!(id >= 0);
                assert_eq!(layout.decompose(id).unwrap(), parts);
            }
        }
        let l = Layout::DEFAULT;
        assert_eq!(l.compose(IdParts { ticks: l.max_ticks(), machine_id: 1023, sequence: 4095 }).unwrap(), i64::MAX);
    }

    #[test]
    fn fields_wider_than_their_slot_are_refused_not_masked() {
        let l = Layout::DEFAULT;
        assert!(matches!(
            l.compose(IdParts { ticks: 1, machine_id: 1024, sequence: 0 }),
            Err(LayoutError::FieldOutOfRange { field: "machine id", value: 1024, max: 1023 })
        ));
        assert!(l.compose(IdParts { ticks: 1, machine_id: 0, sequence: 4096 }).is_err());
        assert!(l.compose(IdParts { ticks: l.max_ticks() + 1, machine_id: 0, sequence: 0 }).is_err());
        assert!(l.compose(IdParts { ticks: -1, machine_id: 0, sequence: 0 }).is_err());
    }

    #[test]
    fn negative_ids_do_not_decode() {
        assert_eq!(Layout::DEFAULT.decompose(-5), Err(LayoutError::NegativeId(-5)));
    }

    #[test]
    fn times_before_the_epoch_are_refused() {
        assert!(Layout::DEFAULT.ticks_at(EPOCH_2025_UNIX_MS - 1).is_err());
        assert_eq!(Layout::DEFAULT.ticks_at(EPOCH_2025_UNIX_MS + 42).unwrap(), 42);
        assert!(Layout::DEFAULT.ticks_at(i64::MIN).is_err());
    }

    #[test]
    fn layouts_out_of_bounds_are_refused() {
        assert!(Layout::new(0, 1, 41, 10, 12, TMS).is_ok());
        assert!(Layout::new(0, 1, 41, 10, 13, TMS).is_err(), "64 bits");
        assert!(Layout::new(0, 1, 38, 17, 8, TMS).is_err(), "17-bit machine ids");
        assert!(Layout::new(0, 1, 63, 0, 0, TMS).is_err());
        assert!(Layout::new(0, 1, 45, 10, 0, TMS).is_err(), "no sequence");
        assert_eq!(Layout::new(0, 0, 41, 10, 12, TMS), Err(LayoutError::BadTimeUnit(0)));
        assert_eq!(Layout::new(-1, 1, 41, 10, 12, TMS), Err(LayoutError::EpochBefore1970(-1)));
        // 2^45 seconds is a million years: no timestamptz reaches that far.
        assert!(matches!(Layout::new(0, 1000, 45, 8, 10, TMS), Err(LayoutError::EndsTooLate { .. })));
        assert!(matches!(Layout::new(0, i64::MAX, 45, 8, 10, TMS), Err(LayoutError::EndsTooLate { .. })));
        let small = Layout::new(0, 10, 43, 8, 10, TMS).unwrap();
        assert_eq!(small.machine_id_range(), 0..=255);
        let sixteen = Layout::new(EPOCH_2025_UNIX_MS, 10, 39, 16, 8, FieldOrder::TimeSequenceMachine).unwrap();
        assert_eq!(sixteen.max_machine_id(), 65_535);
    }

    #[test]
    fn pools_stay_inside_the_field_and_meet_a_server_range() {
        let l = Preset::Sonyflake.layout();
        assert_eq!(Pool::all(&l).size(), 65_536);
        let pool = Pool::new(&l, 0, 255).unwrap();
        assert_eq!((pool.size(), pool.contains(255), pool.contains(256)), (256, true, false));
        assert!(Pool::new(&Layout::DEFAULT, 0, 1024).is_err());
        assert!(Pool::new(&l, 10, 9).is_err());
        assert!(Pool::new(&l, -1, 9).is_err());
        assert_eq!(pool.within(&(100..=1023)), Some(Pool { first: 100, last: 255 }));
        assert_eq!(pool.within(&(512..=1023)), None);
    }

    #[test]
    fn field_orders_have_their_sql_labels() {
        let labels: Vec<&str> = FieldOrder::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, ["time_machine_sequence", "time_sequence_machine"]);
        assert_eq!(FieldOrder::from_label("time_sequence_machine"), Some(FieldOrder::TimeSequenceMachine));
        assert_eq!(FieldOrder::from_label("machine_time_sequence"), None);
    }
}
