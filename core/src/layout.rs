//! The Snowflake ID layout as one value.
//!
//! Every width, range and the epoch come from a [`Layout`]; nothing else in
//! idgen hard-codes a bit count. The registry takes its machine-id range from
//! here, so a future per-service layout changes the range in one place.

use std::fmt;
use std::ops::RangeInclusive;

/// Unix milliseconds of 2025-01-01T00:00:00Z, the default epoch.
pub const EPOCH_2025_UNIX_MS: i64 = 1_735_689_600_000;

/// How a 64-bit ID is cut into time, machine id and sequence.
///
/// The sign bit is always 0, so the other three fields add up to 63 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Unix milliseconds at which the time field is 0.
    pub epoch_unix_ms: i64,
    /// Milliseconds per tick of the time field.
    pub time_unit_ms: i64,
    pub time_bits: u32,
    pub machine_bits: u32,
    pub sequence_bits: u32,
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
    /// The three widths do not add up to 63, or a width is out of bounds.
    BadWidths { time: u32, machine: u32, sequence: u32 },
    /// `time_unit_ms` is not positive.
    BadTimeUnit(i64),
    /// A field value does not fit its width.
    FieldOutOfRange { field: &'static str, value: i64, max: i64 },
    /// A negative ID: the sign bit is never set by this layout.
    NegativeId(i64),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::BadWidths { time, machine, sequence } => write!(
                f,
                "layout widths must add up to 63 bits with a machine id of 1 to 15 bits, got time {time} + machine {machine} + sequence {sequence}"
            ),
            LayoutError::BadTimeUnit(ms) => write!(f, "layout time unit must be positive, got {ms} ms"),
            LayoutError::FieldOutOfRange { field, value, max } => {
                write!(f, "{field} {value} does not fit the layout (0 to {max})")
            }
            LayoutError::NegativeId(id) => write!(f, "id {id} is negative; idgen ids are never negative"),
        }
    }
}

impl std::error::Error for LayoutError {}

impl Layout {
    /// 41 bits of milliseconds since 2025-01-01 | 10-bit machine id | 12-bit sequence.
    pub const DEFAULT: Layout = Layout {
        epoch_unix_ms: EPOCH_2025_UNIX_MS,
        time_unit_ms: 1,
        time_bits: 41,
        machine_bits: 10,
        sequence_bits: 12,
    };

    /// Builds a layout, checking that it describes a non-negative 64-bit ID.
    ///
    /// The machine id is stored in a SMALLINT column, so it may use at most 15 bits.
    pub fn new(
        epoch_unix_ms: i64,
        time_unit_ms: i64,
        time_bits: u32,
        machine_bits: u32,
        sequence_bits: u32,
    ) -> Result<Layout, LayoutError> {
        let widths_ok =
            time_bits >= 1 && (1..=15).contains(&machine_bits) && time_bits + machine_bits + sequence_bits == 63;
        if !widths_ok {
            return Err(LayoutError::BadWidths { time: time_bits, machine: machine_bits, sequence: sequence_bits });
        }
        if time_unit_ms <= 0 {
            return Err(LayoutError::BadTimeUnit(time_unit_ms));
        }
        Ok(Layout { epoch_unix_ms, time_unit_ms, time_bits, machine_bits, sequence_bits })
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

    /// The last Unix millisecond this layout can stamp.
    pub fn last_unix_ms(&self) -> i64 {
        self.epoch_unix_ms + self.max_ticks() * self.time_unit_ms + (self.time_unit_ms - 1)
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
        (parts.ticks << (self.machine_bits + self.sequence_bits))
            | (i64::from(parts.machine_id) << self.sequence_bits)
            | i64::from(parts.sequence)
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
        let sequence = (id & i64::from(self.max_sequence())) as u32;
        let machine_id = ((id >> self.sequence_bits) & i64::from(self.max_machine_id())) as u16;
        let ticks = id >> (self.machine_bits + self.sequence_bits);
        Ok(IdParts { ticks, machine_id, sequence })
    }

    /// Ticks since the epoch for a Unix millisecond, refusing times before the
    /// epoch or past the end of the time field.
    pub fn ticks_at(&self, unix_ms: i64) -> Result<i64, LayoutError> {
        let since = unix_ms - self.epoch_unix_ms;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_has_1024_machine_ids_and_4096_sequences() {
        let l = Layout::DEFAULT;
        assert_eq!(l.machine_id_range(), 0..=1023);
        assert_eq!(l.max_sequence(), 4095);
        assert_eq!(l.max_ticks(), (1i64 << 41) - 1);
    }

    #[test]
    fn default_time_field_lasts_until_2094() {
        // 2^41 ms is about 69.7 years after 2025-01-01: the field ends in 2094-09.
        let last = Layout::DEFAULT.last_unix_ms();
        assert_eq!(crate::format::iso_utc(last), "2094-09-07T15:47:35.551Z");
        let year_2094_start = 3_913_142_400_000; // 2094-01-01T00:00:00Z
        let year_2095_start = 3_944_678_400_000; // 2095-01-01T00:00:00Z
        assert!(last > year_2094_start && last < year_2095_start, "last ms {last}");
        assert!(Layout::DEFAULT.ticks_at(last).is_ok());
        assert!(Layout::DEFAULT.ticks_at(last + 1).is_err());
    }

    #[test]
    fn compose_and_decompose_round_trip_at_the_field_limits() {
        let l = Layout::DEFAULT;
        for parts in [
            IdParts { ticks: 0, machine_id: 0, sequence: 0 },
            IdParts { ticks: l.max_ticks(), machine_id: 1023, sequence: 4095 },
            IdParts { ticks: 123_456_789, machine_id: 512, sequence: 7 },
        ] {
            let id = l.compose(parts).unwrap();
            assert!(id >= 0);
            assert_eq!(l.decompose(id).unwrap(), parts);
        }
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
    }

    #[test]
    fn layouts_that_are_not_63_bits_or_overflow_smallint_are_refused() {
        assert!(Layout::new(0, 1, 41, 10, 12).is_ok());
        assert!(Layout::new(0, 1, 41, 10, 13).is_err());
        assert!(Layout::new(0, 1, 32, 16, 15).is_err(), "16-bit machine ids do not fit SMALLINT");
        assert!(Layout::new(0, 1, 63, 0, 0).is_err());
        assert!(Layout::new(0, 0, 41, 10, 12).is_err());
        let small = Layout::new(0, 10, 45, 8, 10).unwrap();
        assert_eq!(small.machine_id_range(), 0..=255);
    }

    /// docs/test_vectors.json, the reference for clients in other languages, matches this code.
    #[test]
    fn the_published_test_vectors_hold_both_ways() {
        let doc: serde_json::Value = serde_json::from_str(include_str!("../../docs/test_vectors.json")).unwrap();
        let layout = Layout::DEFAULT;
        let l = &doc["layout"];
        assert_eq!(l["epoch_unix_ms"], EPOCH_2025_UNIX_MS);
        assert_eq!((l["time_unit_ms"].as_i64(), l["time_bits"].as_u64()), (Some(1), Some(41)));
        assert_eq!((l["machine_bits"].as_u64(), l["sequence_bits"].as_u64()), (Some(10), Some(12)));
        let vectors = doc["vectors"].as_array().unwrap();
        assert!(vectors.len() >= 10);
        for v in vectors {
            let id = v["id"].as_i64().unwrap();
            assert_eq!(v["id_text"].as_str().unwrap(), id.to_string());
            let parts = IdParts {
                ticks: layout.ticks_at(v["unix_ms"].as_i64().unwrap()).unwrap(),
                machine_id: v["machine_id"].as_u64().unwrap() as u16,
                sequence: v["sequence"].as_u64().unwrap() as u32,
            };
            assert_eq!(layout.compose(parts), Ok(id), "{v}");
            assert_eq!(layout.decompose(id), Ok(parts), "{v}");
            assert_eq!(crate::format::iso_utc(layout.unix_ms_of(parts.ticks)), v["iso"].as_str().unwrap());
        }
        for v in doc["invalid"].as_array().unwrap() {
            assert!(layout.ticks_at(v["unix_ms"].as_i64().unwrap()).is_err(), "{v}");
        }
    }
}
