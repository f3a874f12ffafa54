//! How idgen writes times and durations for people: UTC ISO-8601 instants and short
//! human durations. Plain functions, shared by messages, events and the edge.

/// Seconds in a minute, an hour, a day.
pub const MINUTE: i64 = 60;
pub const HOUR: i64 = 60 * MINUTE;
pub const DAY: i64 = 24 * HOUR;

/// Unix milliseconds as `2025-01-01T00:00:00.000Z` (proleptic Gregorian, UTC).
pub fn iso_utc(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(86_400_000);
    let ms_of_day = unix_ms.rem_euclid(86_400_000);
    // Civil date from days since 1970-01-01 (era-based algorithm, valid for all i64 days in range).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, sec, ms) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1_000 % 60, ms_of_day % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}.{ms:03}Z")
}

/// "3d 4h 5m 6s", leaving out zero parts; "0s" for zero. Negative values read as 0s.
pub fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    let parts = [(secs / DAY, "d"), (secs % DAY / HOUR, "h"), (secs % HOUR / MINUTE, "m"), (secs % MINUTE, "s")];
    let text: Vec<String> = parts.iter().filter(|(n, _)| *n > 0).map(|(n, u)| format!("{n}{u}")).collect();
    if text.is_empty() {
        "0s".to_owned()
    } else {
        text.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates_match_known_instants() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(1_735_689_600_000), "2025-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(1_796_000_000_123), "2026-11-30T00:53:20.123Z");
        assert_eq!(iso_utc(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso_utc(3_934_712_855_551), "2094-09-07T15:47:35.551Z");
    }

    #[test]
    fn human_durations_read_naturally() {
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(-5), "0s");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(3600), "1h");
        assert_eq!(human_duration(7 * DAY + 2 * HOUR + 3 * MINUTE + 4), "7d 2h 3m 4s");
    }
}
