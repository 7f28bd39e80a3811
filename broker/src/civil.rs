//! Calendar dates from day counts and back, proleptic Gregorian, UTC — for file
//! names and timestamps without a date-time dependency (Howard Hinnant's algorithms,
//! <https://howardhinnant.github.io/date_algorithms.html>).

/// (year, month, day) of a count of days since 1970-01-01, proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a (year, month, day), proleptic Gregorian (Howard
/// Hinnant's `days_from_civil`); the inverse of [`civil_from_days`] for valid dates.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `secs` (Unix seconds) as `(year, month, day, seconds into the day)`, UTC.
pub fn utc_date(secs: i64) -> (i64, u32, u32, i64) {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    (y, m, d, secs.rem_euclid(86_400))
}
