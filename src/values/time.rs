//! Times and durations: parsed from the command line, and written for
//! people in one format each.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The one duration format for people (docs/design.md, "Choices and their
/// reasons"): the two largest units of `d`, `h`, `m`, `s` and `ms` the
/// duration has, the rest cut off, never rounded up: `250ms`, `1s 640ms`,
/// `3m 5s`, `2h 14m`, `3d 1h`; `0s` under a millisecond. It reads back as a
/// duration option (`--timeout 2h 14m`).
pub fn human_duration(duration: Duration) -> String {
    const UNITS: [(u128, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let ms = duration.as_millis();
    let Some(largest) = UNITS.iter().position(|(size, _)| ms >= *size) else {
        return "0s".to_owned();
    };
    let (size, unit) = UNITS[largest];
    let mut text = format!("{}{unit}", ms / size);
    if let Some((next, small)) = UNITS.get(largest + 1) {
        let count = ms % size / next;
        if count > 0 {
            text.push_str(&format!(" {count}{small}"));
        }
    }
    text
}

/// A server timestamp (milliseconds since the epoch: a node's ctime or
/// mtime, the run record's times) as a time, never before the epoch.
pub fn server_time(millis: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64)
}

/// How finely [`rfc3339`] writes a time.
#[derive(Debug, Clone, Copy)]
pub enum Precision {
    Seconds,
    Millis,
}

/// A time as RFC 3339, UTC: `2026-11-22T10:00:00Z` or, to the millisecond,
/// `2026-11-22T10:00:00.123Z`.
pub fn rfc3339(time: SystemTime, precision: Precision) -> String {
    match precision {
        Precision::Seconds => humantime::format_rfc3339_seconds(time).to_string(),
        Precision::Millis => humantime::format_rfc3339_millis(time).to_string(),
    }
}

/// A duration given as humantime (`30s`, `1m 30s`, `250ms`) or as a bare,
/// possibly fractional, number of seconds (as `flock -w` takes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;

    /// The errors leave humantime's own wording ("expected number at 0")
    /// out: a user needs to know what to write instead.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        const HOW: &str = "use a number with a unit, like 30s, 5m or 1h (a bare number is seconds)";
        let text = text.trim();
        if text.starts_with('-') {
            return Err(format!("a duration cannot be negative; {HOW}"));
        }
        if text.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            let seconds: f64 = text.parse().map_err(|_| format!("not a duration; {HOW}"))?;
            return Duration::try_from_secs_f64(seconds)
                .map(Seconds)
                .map_err(|_| "too long a duration".to_owned());
        }
        humantime::parse_duration(text)
            .map(Seconds)
            .map_err(|err| match err {
                humantime::DurationError::NumberOverflow => "too long a duration".to_owned(),
                _ => format!("not a duration; {HOW}"),
            })
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&human_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_times() {
        let t = server_time(1_795_341_600_123);
        assert_eq!(rfc3339(t, Precision::Seconds), "2026-11-22T10:00:00Z");
        assert_eq!(rfc3339(t, Precision::Millis), "2026-11-22T10:00:00.123Z");
        assert_eq!(server_time(-5), UNIX_EPOCH);
    }

    #[test]
    fn durations() {
        let secs = |s: &str| s.parse::<Seconds>().map(|d| d.0);
        assert_eq!(secs("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(secs("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(secs("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(secs("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(secs("10"), Ok(Duration::from_secs(10)));
        assert_eq!(secs("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(secs("0"), Ok(Duration::ZERO));
        for bad in [
            "",
            "-1",
            "abc",
            "1.2.3",
            "10 parsecs",
            "1e999",
            "nan",
            "-5s",
        ] {
            let err = secs(bad).expect_err(bad);
            assert!(
                err.contains("like 30s, 5m or 1h") && !err.contains(" at "),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            secs("99999999999999999999999999999s"),
            Err("too long a duration".to_owned())
        );
    }

    #[test]
    fn one_duration_format() {
        let ms = |ms: u64| human_duration(Duration::from_millis(ms));
        let s = |secs: u64| human_duration(Duration::from_secs(secs));
        assert_eq!(human_duration(Duration::ZERO), "0s");
        assert_eq!(human_duration(Duration::from_micros(999)), "0s");
        assert_eq!(ms(250), "250ms");
        assert_eq!(ms(1_640), "1s 640ms");
        assert_eq!(ms(30_002), "30s 2ms");
        assert_eq!(s(59), "59s");
        // Cut, never rounded up: not a minute yet.
        assert_eq!(ms(59_999), "59s 999ms");
        // Two units: the milliseconds of a minute are left out.
        assert_eq!(ms(60_500), "1m");
        assert_eq!(s(185), "3m 5s");
        assert_eq!(s(2 * 3600 + 14 * 60 + 3), "2h 14m");
        assert_eq!(s(2 * 3600 + 59), "2h");
        assert_eq!(s(3 * 86400 + 3600 + 59), "3d 1h");
        assert_eq!(s(400 * 86400), "400d");
        // Every form reads back, as a duration option takes it.
        for text in ["250ms", "1s 640ms", "3m 5s", "2h 14m", "3d 1h", "0s"] {
            let back = text.parse::<Seconds>().unwrap().0;
            assert_eq!(human_duration(back), text);
        }
        assert_eq!(
            Seconds(Duration::from_millis(1_500)).to_string(),
            "1s 500ms"
        );
    }
}
