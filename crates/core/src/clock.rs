//! Wall-clock time and the calendar, in one place: unix seconds for the
//! catalog and the lock, dates for messages and retention buckets.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in unix seconds (0 if the clock is before 1970).
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Now, in nanoseconds since 1970 (for tokens that must differ between
/// calls in the same second).
pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// `YYYY-MM-DD HH:MM:SS UTC` for unix seconds, without a date crate.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01.
///
/// Works in 400-year eras (146 097 days each, the calendar's full cycle)
/// with years starting on March 1st, so the leap day is the last day of a
/// year and month lengths follow a simple linear formula.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    const DAYS_PER_ERA: i64 = 146_097;
    // 1970-01-01 is day 719 468 counted from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(DAYS_PER_ERA);
    let day_of_era = z.rem_euclid(DAYS_PER_ERA); // 0..=146096
                                                 // Years into the era: remove the leap days of every 4th, 100th and 400th
                                                 // year before dividing by 365.
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524
        - day_of_era / (DAYS_PER_ERA - 1))
        / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: 31,30,31,30,31 repeating, i.e. 153 days per 5 months.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(1_795_370_400), "2026-11-22 18:00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(format_utc(4_107_542_400), "2100-03-01 00:00:00 UTC");
        assert_eq!(format_utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    }

    /// Every day from 1900 to 2400 follows the previous one by the calendar.
    #[test]
    fn civil_days_are_consecutive() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut prev = civil_from_days(-25_567); // 1900-01-01
        assert_eq!(prev, (1900, 1, 1));
        for days in -25_566..157_000 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = prev;
            let expected = if pd < month_len(py, pm) {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), expected, "day {days}");
            prev = (y, m, d);
        }
    }
}
