//! Calendar formatting and parsing: RFC 3339 (persisted baselines, UDS messages) and the
//! compact UTC stamp used for quarantined files by the civil-date arithmetic below, and
//! HTTP dates (`Retry-After`) by the `httpdate` crate. All in UTC; pure functions over
//! [`Timestamp`].

use std::time::{Duration, UNIX_EPOCH};

use component::Timestamp;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Days since 1970-01-01 to a civil (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Civil date to days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    nanos: u32,
}

fn to_civil(t: Timestamp) -> Civil {
    let secs = t.as_nanos() / NANOS_PER_SEC;
    let nanos = (t.as_nanos() % NANOS_PER_SEC) as u32;
    let days = (secs / 86_400) as i64;
    let rem = (secs % 86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: rem / 3600,
        minute: (rem % 3600) / 60,
        second: rem % 60,
        nanos,
    }
}

/// RFC 3339 in UTC with nanoseconds, trailing zeros trimmed (Go's `time.RFC3339Nano`):
/// `2026-05-19T10:11:12.5Z`, `2026-05-19T10:11:12Z`.
pub fn rfc3339_nanos(t: Timestamp) -> String {
    let c = to_civil(t);
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    if c.nanos > 0 {
        let frac = format!("{:09}", c.nanos);
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// RFC 3339 in UTC, whole seconds (`saved_at` of the persisted baseline).
pub fn rfc3339_secs(t: Timestamp) -> String {
    rfc3339_nanos(Timestamp::from_secs(t.as_nanos() / NANOS_PER_SEC))
}

/// `YYYYMMDDTHHMMSS.nnnnnnnnnZ`, the suffix of a quarantined corrupt file.
pub fn compact_stamp(t: Timestamp) -> String {
    let c = to_civil(t);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.nanos
    )
}

fn parse_digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `(year, month, day)`, `(hour, minute, second)`, nanoseconds, UTC offset in seconds.
fn from_parts(
    (y, mo, d): (i64, u32, u32),
    (h, mi, se): (u32, u32, u32),
    nanos: u64,
    offset_secs: i64,
) -> Option<Timestamp> {
    if !(1..=12).contains(&mo) || d == 0 || d > 31 || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Reject dates like Feb 30 by round-tripping through the day count.
    let days = days_from_civil(y, mo, d);
    if civil_from_days(days) != (y, mo, d) {
        return None;
    }
    let secs =
        days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(se) - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    Some(Timestamp::from_nanos(
        secs.checked_mul(NANOS_PER_SEC)?.checked_add(nanos)?,
    ))
}

/// Parse RFC 3339 (`2026-05-19T10:11:12.123Z`, `...+02:00`). Times before 1970 are rejected.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let y = i64::from(parse_digits(s.get(0..4)?)?);
    let mo = parse_digits(s.get(5..7)?)?;
    let d = parse_digits(s.get(8..10)?)?;
    let h = parse_digits(s.get(11..13)?)?;
    let mi = parse_digits(s.get(14..16)?)?;
    let se = parse_digits(s.get(17..19)?)?;
    let mut rest = s.get(19..)?;
    let mut nanos: u64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 9 {
            return None;
        }
        let digits = frac.get(..n)?;
        nanos = u64::from(parse_digits(digits)?) * 10u64.pow(9 - n as u32);
        rest = frac.get(n..)?;
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6
            && (o.starts_with('+') || o.starts_with('-'))
            && o.as_bytes()[3] == b':' =>
        {
            let oh = i64::from(parse_digits(o.get(1..3)?)?);
            let om = i64::from(parse_digits(o.get(4..6)?)?);
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    from_parts((y, mo, d), (h, mi, se), nanos, offset)
}

/// Parse an HTTP date (`Retry-After`) with the `httpdate` crate, in any of the three forms
/// RFC 7231 requires recipients to accept: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`, two-digit years below 70 are 20xx) and
/// asctime (`Sun Nov  6 08:49:37 1994`). Each form's exact layout is required, the weekday
/// must match the date, and times before 1970 or beyond [`Timestamp`]'s range are `None`.
pub fn parse_http_date(s: &str) -> Option<Timestamp> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    let since = t.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since.as_nanos())
        .ok()
        .map(Timestamp::from_nanos)
}

/// IMF-fixdate for a timestamp (used by tests and the test server). Sub-second parts are
/// dropped. Every [`Timestamp`] (u64 nanoseconds: up to the year 2554) is in the range
/// `httpdate` formats (before the year 9999).
pub fn http_date(t: Timestamp) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_nanos(t.as_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-05-19T10:11:12Z
    const T: u64 = 1_779_185_472;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339_nanos(Timestamp::ZERO), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nanos(Timestamp::from_secs(T)),
            "2026-05-19T10:11:12Z"
        );
        assert_eq!(
            rfc3339_nanos(Timestamp::from_nanos(T * NANOS_PER_SEC + 500_000_000)),
            "2026-05-19T10:11:12.5Z"
        );
        assert_eq!(
            rfc3339_nanos(Timestamp::from_nanos(T * NANOS_PER_SEC + 123_456_789)),
            "2026-05-19T10:11:12.123456789Z"
        );
        assert_eq!(
            compact_stamp(Timestamp::from_nanos(T * NANOS_PER_SEC + 7)),
            "20260519T101112.000000007Z"
        );
        // Leap day.
        assert_eq!(
            rfc3339_secs(Timestamp::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn rfc3339_round_trips_and_honours_offsets() {
        for n in [
            0u64,
            1,
            951_782_400_123_000_000,
            T * NANOS_PER_SEC + 987_654_321,
        ] {
            let t = Timestamp::from_nanos(n);
            assert_eq!(parse_rfc3339(&rfc3339_nanos(t)), Some(t));
        }
        assert_eq!(
            parse_rfc3339("2026-05-19T12:11:12+02:00"),
            Some(Timestamp::from_secs(T))
        );
        assert_eq!(
            parse_rfc3339("2026-05-19T09:11:12-01:00"),
            Some(Timestamp::from_secs(T))
        );
        for bad in [
            "",
            "2026-02-30T00:00:00Z",
            "2026-05-19 10:11:12Z",
            "2026-05-19T10:11:12",
            "1969-12-31T23:59:59Z",
            "2026-05-19T10:11:12.Z",
            "2026-13-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let t = Timestamp::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            parse_http_date(&http_date(Timestamp::from_secs(T))),
            Some(Timestamp::from_secs(T))
        );
        assert_eq!(parse_http_date("tomorrow"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        // Surrounding whitespace is ignored; sub-seconds are not formatted.
        assert_eq!(
            parse_http_date("  Sun, 06 Nov 1994 08:49:37 GMT\t"),
            Some(t)
        );
        assert_eq!(
            http_date(Timestamp::from_nanos(784_111_777_999_999_999)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }

    /// Where `httpdate` is stricter than the hand-written parser it replaced: each form's
    /// exact layout, a weekday that matches the date, no leap second, no non-ASCII.
    #[test]
    fn http_dates_must_be_well_formed() {
        for bad in [
            "Mon, 06 Nov 1994 08:49:37 GMT",    // 1994-11-06 was a Sunday
            "Sun,  06 Nov 1994 08:49:37 GMT",   // extra space
            "Sun, 6 Nov 1994 08:49:37 GMT",     // one-digit day in IMF-fixdate
            "Sun, 06 Nov 1994 8:49:37 GMT",     // one-digit hour
            "Sun, 06 nov 1994 08:49:37 GMT",    // month names are case-sensitive
            "Sun, 31 Jun 1994 08:49:37 GMT",    // no June 31
            "Thu, 31 Dec 1998 23:59:60 GMT",    // leap second
            "Wed, 31 Dec 1969 23:59:59 GMT",    // before 1970
            "Sun, 06 Nov 1994 08:49:37 GMT ü",  // trailing garbage
            "Sunday, 06-Nov-1994 08:49:37 GMT", // four-digit year in RFC 850
            "Sun Nov 6 08:49:37 1994",          // asctime pads the day with a space
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
        // RFC 850 two-digit years: below 70 is 20xx, else 19xx.
        assert_eq!(
            parse_http_date("Wednesday, 06-Nov-69 08:49:37 GMT"),
            parse_http_date("Wed, 06 Nov 2069 08:49:37 GMT")
        );
        assert!(parse_http_date("Wed, 06 Nov 2069 08:49:37 GMT").is_some());
        // Representable by httpdate (up to 9999) but not as u64 nanoseconds (2554).
        assert_eq!(parse_http_date("Wed, 01 Jan 2600 00:00:00 GMT"), None);
        assert_eq!(parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT"), None);
    }
}
