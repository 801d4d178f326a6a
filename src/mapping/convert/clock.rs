//! Times of day: `time` and `timetz`, from `HH:MM[:SS[.f…]]` strings (timetz with a zone
//! offset) or from an integer count since midnight in a stated unit, into the forms
//! PostgreSQL's `time_send` and `timetz_send` write: microseconds since midnight as an int64,
//! and for timetz then the zone's offset in seconds *west* of UTC as an int32 (`+02:00` is
//! -7200).

use bytes::{BufMut, BytesMut};

use super::number::is_json_number;
use super::Input;
use crate::config::TimeUnit;

/// Microseconds in a day: `24:00:00` is the last time PostgreSQL accepts.
pub(super) const MICROS_PER_DAY: i64 = 86_400_000_000;

/// timetz offsets PostgreSQL accepts lie strictly within ±16 hours (`TZDISP_LIMIT`).
const ZONE_LIMIT_SECONDS: i32 = 16 * 3600;

/// A `time` value: a zone in the text is refused, not dropped (PostgreSQL would ignore it,
/// and a producer sending one means a time the column cannot hold).
pub(super) fn write_time(
    input: Input<'_>,
    unit: Option<TimeUnit>,
    out: &mut BytesMut,
) -> Result<(), String> {
    let micros = match input.string()? {
        Some(s) => {
            let (micros, zone) = parse_clock(&s)?;
            if zone.is_some() {
                return Err(format!(
                    "{s:?} has a zone offset, which a time without time zone cannot keep"
                ));
            }
            micros
        }
        None => since_midnight(input, unit)?,
    };
    out.put_i64(micros);
    Ok(())
}

/// A `timetz` value: with no offset in the text (or from an integer) the zone is UTC, as for
/// timestamps.
pub(super) fn write_timetz(
    input: Input<'_>,
    unit: Option<TimeUnit>,
    out: &mut BytesMut,
) -> Result<(), String> {
    let (micros, east) = match input.string()? {
        Some(s) => {
            let (micros, zone) = parse_clock(&s)?;
            (micros, zone.unwrap_or(0))
        }
        None => (since_midnight(input, unit)?, 0),
    };
    out.put_i64(micros);
    out.put_i32(-east);
    Ok(())
}

/// An integer count since midnight; its unit must be stated (a schema's `Time`, `MicroTime`
/// or `NanoTime`, or the column's `time_units`): no unit is assumed for a time of day.
fn since_midnight(input: Input<'_>, unit: Option<TimeUnit>) -> Result<i64, String> {
    let text = input
        .literal()
        .filter(|t| is_json_number(t))
        .ok_or_else(|| format!("expected a time of day (HH:MM:SS), got {}", input.shown()))?;
    let Some(unit) = unit else {
        return Err(format!(
            "{text} is an integer time of day without a unit: give the column one in [topics.time_units] (s, ms, us, ns)"
        ));
    };
    let n: i64 = text
        .parse()
        .map_err(|_| format!("expected an integer, got {}", input.shown()))?;
    let micros = integer_micros(n, unit)
        .filter(|m| (0..=MICROS_PER_DAY).contains(m))
        .ok_or_else(|| format!("{n} ({}) is not between 00:00 and 24:00", unit.describe()))?;
    Ok(micros)
}

/// `n` in `unit` as microseconds, finer digits dropped toward the past (as for timestamps);
/// `None` on overflow or for days.
pub(super) fn integer_micros(n: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Days => None,
        TimeUnit::S => n.checked_mul(1_000_000),
        TimeUnit::Ms => n.checked_mul(1_000),
        TimeUnit::Us => Some(n),
        TimeUnit::Ns => Some(n.div_euclid(1_000)),
    }
}

/// `HH:MM`, `HH:MM:SS` or `HH:MM:SS.f…` (two-digit fields; digits past microseconds dropped
/// toward the past, as PostgreSQL's timestamps keep microseconds), then optionally a zone:
/// `Z`, or `+`/`-` with `HH`, `HH:MM`, `HHMM` or `HH:MM:SS`. Returns microseconds since
/// midnight and the offset in seconds east of UTC. `24:00:00` is the only time past 23:59:59
/// (PostgreSQL's end of day); leap seconds are refused.
pub(super) fn parse_clock(s: &str) -> Result<(i64, Option<i32>), String> {
    let bad = |why: &str| format!("{s:?} is not a time of day (HH:MM:SS[.ffffff]): {why}");
    let zone_at = s.find(['Z', 'z', '+', '-']).unwrap_or(s.len());
    let (clock, zone) = s.split_at(zone_at);
    let mut parts = clock.split(':');
    let field = |p: Option<&str>, name: &str, max: i64| -> Result<i64, String> {
        let p = p.ok_or_else(|| bad(&format!("no {name}")))?;
        if p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("{name} must be two digits")));
        }
        let v: i64 = p.parse().expect("two digits");
        if v > max {
            return Err(bad(&format!("{name} {v} is out of range")));
        }
        Ok(v)
    };
    let hours = field(parts.next(), "hours", 24)?;
    let minutes = field(parts.next(), "minutes", 59)?;
    let (seconds, micros) = match parts.next() {
        None => (0, 0),
        Some(sec) => {
            let (whole, fraction) = sec.split_once('.').unwrap_or((sec, ""));
            if sec.contains('.') && fraction.is_empty() {
                return Err(bad("no digits after the decimal point"));
            }
            if !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("the fraction must be digits"));
            }
            let seconds = field(Some(whole), "seconds", 59)?;
            let mut micros = 0i64;
            for (i, b) in fraction.bytes().take(6).enumerate() {
                micros += i64::from(b - b'0') * 10i64.pow(5 - i as u32);
            }
            (seconds, micros)
        }
    };
    if parts.next().is_some() {
        return Err(bad("too many fields"));
    }
    let total = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros;
    if total > MICROS_PER_DAY {
        return Err(bad("past 24:00:00"));
    }
    let zone = match zone {
        "" => None,
        "Z" | "z" => Some(0),
        _ => Some(parse_offset(zone).ok_or_else(|| bad("the zone offset is not ±HH[:MM[:SS]]"))?),
    };
    if let Some(east) = zone {
        if east.abs() >= ZONE_LIMIT_SECONDS {
            return Err(bad("the zone offset is beyond ±15:59:59"));
        }
    }
    Ok((total, zone))
}

/// `+HH`, `+HH:MM`, `+HHMM`, `+HH:MM:SS` (or `-`), in seconds east of UTC.
fn parse_offset(zone: &str) -> Option<i32> {
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &zone[1..];
    let two = |p: &str| -> Option<i32> {
        (p.len() == 2 && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse().expect("digits"))
    };
    let (h, m, s) = match rest.split(':').collect::<Vec<_>>()[..] {
        [hhmm] if hhmm.len() == 4 => (two(hhmm.get(..2)?)?, two(hhmm.get(2..)?)?, 0),
        [hh] => (two(hh)?, 0, 0),
        [hh, mm] => (two(hh)?, two(mm)?, 0),
        [hh, mm, ss] => (two(hh)?, two(mm)?, two(ss)?),
        _ => return None,
    };
    if m > 59 || s > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60 + s))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::mapping::pointer::JsonRef;

    fn run(
        f: fn(Input<'_>, Option<TimeUnit>, &mut BytesMut) -> Result<(), String>,
        json: &str,
        unit: Option<TimeUnit>,
    ) -> Result<Vec<u8>, String> {
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
        let mut out = BytesMut::new();
        f(Input::Json(JsonRef::of(&raw)), unit, &mut out).map(|()| out.to_vec())
    }

    /// `time_recv`'s reading: an int64 of microseconds, which must lie within the day.
    fn decode_time(bytes: &[u8]) -> i64 {
        assert_eq!(bytes.len(), 8);
        let t = i64::from_be_bytes(bytes.try_into().unwrap());
        assert!((0..=MICROS_PER_DAY).contains(&t), "time_recv refuses {t}");
        t
    }

    /// `timetz_recv`'s reading: microseconds, then the zone in seconds west of UTC.
    fn decode_timetz(bytes: &[u8]) -> (i64, i32) {
        assert_eq!(bytes.len(), 12);
        let zone = i32::from_be_bytes(bytes[8..].try_into().unwrap());
        assert!(
            zone.abs() < ZONE_LIMIT_SECONDS,
            "timetz_recv refuses zone {zone}"
        );
        (decode_time(&bytes[..8]), zone)
    }

    /// PostgreSQL's text output of a time (`time_out`), from the decoded microseconds.
    fn time_text(t: i64) -> String {
        let (s, us) = (t / 1_000_000, t % 1_000_000);
        let base = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
        if us == 0 {
            base
        } else {
            format!("{base}.{us:06}").trim_end_matches('0').to_string()
        }
    }

    #[test]
    fn times_of_day_are_microseconds_since_midnight() {
        let t = |json: &str| run(write_time, json, None).map(|b| time_text(decode_time(&b)));
        assert_eq!(t(r#""00:00""#).unwrap(), "00:00:00");
        assert_eq!(t(r#""13:45:07""#).unwrap(), "13:45:07");
        assert_eq!(t(r#""13:45:07.5""#).unwrap(), "13:45:07.5");
        assert_eq!(t(r#""23:59:59.999999""#).unwrap(), "23:59:59.999999");
        assert_eq!(
            t(r#""23:59:59.999999999""#).unwrap(),
            "23:59:59.999999",
            "nanoseconds dropped toward the past, never up into 24:00"
        );
        assert_eq!(t(r#""24:00:00""#).unwrap(), "24:00:00");
        for bad in [
            r#""25:00:00""#,
            r#""24:00:01""#,
            r#""24:00:00.000001""#,
            r#""12:60:00""#,
            r#""12:00:60""#,
            r#""1:00:00""#,
            r#""12:00:00.""#,
            r#""12:00:00.5x""#,
            r#""12""#,
            r#""12:00:00:00""#,
            r#""noon""#,
            r#""""#,
        ] {
            let err = t(bad).unwrap_err();
            assert!(err.contains("is not a time of day"), "{bad}: {err}");
        }
        let err = t(r#""12:00:00+02:00""#).unwrap_err();
        assert!(err.contains("zone offset"), "{err}");
        let err = t("true").unwrap_err();
        assert!(err.contains("expected a time of day"), "{err}");
    }

    #[test]
    fn integer_times_need_a_unit_and_must_lie_within_the_day() {
        let t = |json: &str, unit| run(write_time, json, unit).map(|b| decode_time(&b));
        let err = t("1000", None).unwrap_err();
        assert!(err.contains("without a unit"), "{err}");
        assert_eq!(t("45000000000", Some(TimeUnit::Us)), Ok(45_000_000_000));
        assert_eq!(t("45000000", Some(TimeUnit::Ms)), Ok(45_000_000_000));
        assert_eq!(t("45000", Some(TimeUnit::S)), Ok(45_000_000_000));
        assert_eq!(t("45000000001999", Some(TimeUnit::Ns)), Ok(45_000_000_001));
        assert_eq!(t("86400000", Some(TimeUnit::Ms)), Ok(MICROS_PER_DAY));
        for (n, unit) in [
            ("86400001", TimeUnit::Ms),
            ("-1", TimeUnit::Us),
            ("9223372036854775807", TimeUnit::S),
            ("1.5", TimeUnit::S),
        ] {
            assert!(t(n, Some(unit)).is_err(), "{n} {unit:?}");
        }
    }

    #[test]
    fn timetz_writes_the_zone_west_of_utc() {
        let tz = |json: &str| run(write_timetz, json, None).map(|b| decode_timetz(&b));
        assert_eq!(tz(r#""10:00:00+02:00""#), Ok((36_000_000_000, -7200)));
        assert_eq!(tz(r#""10:00:00-05""#), Ok((36_000_000_000, 18_000)));
        assert_eq!(tz(r#""10:00:00+0530""#), Ok((36_000_000_000, -19_800)));
        assert_eq!(tz(r#""10:00:00+05:30:15""#), Ok((36_000_000_000, -19_815)));
        assert_eq!(tz(r#""10:00:00Z""#), Ok((36_000_000_000, 0)));
        assert_eq!(tz(r#""10:00:00""#), Ok((36_000_000_000, 0)), "UTC assumed");
        assert_eq!(tz(r#""10:00:00+15:59""#), Ok((36_000_000_000, -57_540)));
        for bad in [
            r#""10:00:00+16:00""#,
            r#""10:00:00+2""#,
            r#""10:00:00+02:60""#,
            r#""10:00:00+02:0""#,
            r#""10:00:00+""#,
            r#""10:00:00 CET""#,
            r#""25:00:00+01""#,
        ] {
            assert!(tz(bad).is_err(), "{bad}");
        }
        let from_int = run(write_timetz, "1000", Some(TimeUnit::Ms)).map(|b| decode_timetz(&b));
        assert_eq!(from_int, Ok((1_000_000, 0)));
    }

    proptest! {
        /// Any time of day and offset, written as text, comes back through the decoder as the
        /// same microseconds and the offset with its sign turned west.
        #[test]
        fn any_time_and_zone_round_trips(
            micros in 0i64..MICROS_PER_DAY,
            east in -(ZONE_LIMIT_SECONDS - 1)..ZONE_LIMIT_SECONDS,
            zone_seconds in any::<bool>(),
        ) {
            let east = if zone_seconds { east } else { east / 60 * 60 };
            let (s, us) = (micros / 1_000_000, micros % 1_000_000);
            let clock = format!("{:02}:{:02}:{:02}.{us:06}", s / 3600, s / 60 % 60, s % 60);
            let a = east.abs();
            let sign = if east < 0 { '-' } else { '+' };
            let zone = if zone_seconds {
                format!("{sign}{:02}:{:02}:{:02}", a / 3600, a / 60 % 60, a % 60)
            } else {
                format!("{sign}{:02}{:02}", a / 3600, a / 60 % 60)
            };
            let json = format!("\"{clock}{zone}\"");
            prop_assert_eq!(run(write_timetz, &json, None).map(|b| decode_timetz(&b)), Ok((micros, -east)));
            let json = format!("\"{clock}\"");
            let back = run(write_time, &json, None).map(|b| decode_time(&b));
            prop_assert_eq!(back, Ok(micros));
            prop_assert_eq!(parse_clock(&time_text(micros)).map(|p| p.0), Ok(micros));
        }
    }
}
