//! `interval` from ISO 8601 durations (`P1Y2M3DT4H5M6.5S`, Debezium's
//! `io.debezium.time.Interval`), from an integer count in a stated unit (Debezium's
//! `MicroDuration`: microseconds), from Avro's `duration` (`{months, days, millis}`) and from
//! Protobuf's `Duration` (`"1.5s"`), into
//! the form `interval_send` writes: microseconds as an int64, then days and months as int32s.
//!
//! PostgreSQL keeps the three apart because none converts exactly into another (a month has
//! 28 to 31 days, a day 23 to 25 hours across a DST change), so nothing here converts either:
//! years and months go to months (a year is 12), weeks and days to days (a week is 7), hours,
//! minutes and seconds to microseconds. A fraction is accepted only where it stays exact:
//! in hours, minutes and seconds, down to the microsecond. `P1.5Y` or `P0.5D` would need a
//! convention of days per month or hours per day, so they are refused, and so is a duration
//! finer than a microsecond.

use bytes::{BufMut, BytesMut};

use super::clock::integer_micros;
use super::number::is_json_number;
use super::Input;
use crate::config::TimeUnit;

/// An interval as PostgreSQL stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Interval {
    pub(super) micros: i64,
    pub(super) days: i32,
    pub(super) months: i32,
}

/// Writes `input` as an interval: an ISO 8601 string, an integer in `unit`, or an Avro
/// duration object.
pub(super) fn write_interval(
    input: Input<'_>,
    unit: Option<TimeUnit>,
    out: &mut BytesMut,
) -> Result<(), String> {
    let interval = match (input.string()?, input) {
        (Some(s), _) if s.ends_with('s') => proto_seconds(&s)?,
        (Some(s), _) => parse_iso(&s)?,
        (None, Input::Json(raw)) if raw.get().starts_with('{') => avro_duration(raw.get())?,
        (None, _) => integer(input, unit)?,
    };
    out.put_i64(interval.micros);
    out.put_i32(interval.days);
    out.put_i32(interval.months);
    Ok(())
}

/// An integer count of `unit`s, all of it time (microseconds): `MicroDuration` is Debezium's
/// estimate of the whole interval in microseconds, so `86400000000` is `24:00:00`, not
/// `1 day` (PostgreSQL compares the two as equal). Without a unit it is refused.
fn integer(input: Input<'_>, unit: Option<TimeUnit>) -> Result<Interval, String> {
    let text = input
        .literal()
        .filter(|t| is_json_number(t))
        .ok_or_else(|| {
            format!(
                "expected an ISO 8601 duration (P1DT2H), got {}",
                input.shown()
            )
        })?;
    let Some(unit) = unit else {
        return Err(format!(
            "{text} is an integer interval without a unit: a MicroDuration schema or the column's [topics.time_units] entry states it"
        ));
    };
    let n: i64 = text
        .parse()
        .map_err(|_| format!("expected an integer, got {}", input.shown()))?;
    if unit == TimeUnit::Ns && n % 1_000 != 0 {
        return Err(format!("{n} ns is finer than PostgreSQL's microseconds"));
    }
    let micros = integer_micros(n, unit)
        .ok_or_else(|| format!("{n} ({}) is out of range for an interval", unit.describe()))?;
    Ok(Interval {
        micros,
        ..Interval::default()
    })
}

/// Avro's `duration` as the transcoder writes it: unsigned months, days and milliseconds.
fn avro_duration(text: &str) -> Result<Interval, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Duration {
        months: u32,
        days: u32,
        millis: u32,
    }
    let d: Duration = serde_json::from_str(text).map_err(|e| {
        format!("expected an ISO 8601 duration or an Avro duration {{months, days, millis}}: {e}")
    })?;
    let field = |v: u32, name: &str| {
        i32::try_from(v).map_err(|_| format!("{v} {name} is out of range for an interval"))
    };
    Ok(Interval {
        micros: i64::from(d.millis) * 1_000,
        days: field(d.days, "days")?,
        months: field(d.months, "months")?,
    })
}

/// Protobuf's `google.protobuf.Duration` in its proto3 JSON form, as the Protobuf reader
/// writes it: seconds with up to nine decimals and a lower-case `s` (`"1.5s"`, `"-0.25s"`),
/// all of it time. PostgreSQL keeps microseconds: finer digits (a Go `time.Duration` or Java
/// `Duration` measured in nanoseconds) are dropped toward the past, as for timestamps, so a
/// column created for a `Duration` takes every value one can hold.
fn proto_seconds(s: &str) -> Result<Interval, String> {
    let bad = |why: &str| format!("{s:?} is not a protobuf duration (1.5s): {why}");
    let number = &s[..s.len() - 1];
    let (sign, whole, fraction) = decimal(number)
        .filter(|_| !number.contains(','))
        .ok_or_else(|| bad("not a number of seconds"))?;
    let nanos = match fraction {
        None => 0,
        Some((digits, places)) if places <= 9 => digits * 10i128.pow(9 - places),
        Some(_) => return Err(bad("more than nine decimals")),
    };
    let micros = i64::try_from((sign * (whole * 1_000_000_000 + nanos)).div_euclid(1000))
        .map_err(|_| bad("out of range for an interval"))?;
    Ok(Interval {
        micros,
        ..Interval::default()
    })
}

/// `[-]P[nY][nM][nW][nD][T[nH][nM][nS]]`, each component in this order at most once, each `n`
/// with an optional sign of its own (Debezium writes `P0Y0M-1DT0H0M0S`) and a leading `-`
/// negating the whole; at least one component, and one after a `T`.
pub(super) fn parse_iso(s: &str) -> Result<Interval, String> {
    let bad = |why: String| format!("{s:?} is not an ISO 8601 duration (P1Y2M3DT4H5M6.5S): {why}");
    let (negate, rest) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let rest = rest
        .strip_prefix('P')
        .ok_or_else(|| bad("it must start with P".into()))?;
    let (date, time) = match rest.split_once('T') {
        Some((date, "")) => return Err(bad(format!("nothing after T in {date:?}T"))),
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut months: i128 = 0;
    let mut days: i128 = 0;
    let mut micros: i128 = 0;
    let mut seen = 0;
    for (part, designators) in [(date, "YMWD"), (time.unwrap_or(""), "HMS")] {
        let mut next = 0; // index into `designators`: each at most once, in order
        let mut rest = part;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| c.is_ascii_alphabetic())
                .ok_or_else(|| bad(format!("{rest:?} has no unit")))?;
            let (number, tail) = rest.split_at(end);
            let unit = tail.chars().next().expect("found a letter");
            rest = &tail[1..];
            let at = designators[next..]
                .find(unit)
                .map(|i| next + i)
                .ok_or_else(|| {
                    bad(format!(
                        "unknown or out-of-order unit {unit:?} (date units Y M W D, then T and H M S)"
                    ))
                })?;
            next = at + 1;
            seen += 1;
            let (sign, whole, fraction) = decimal(number)
                .ok_or_else(|| bad(format!("{number:?} before {unit} is not a number")))?;
            if designators == "YMWD" {
                if fraction.is_some() {
                    return Err(bad(format!(
                        "a fraction of {unit} has no exact length; fractions are for H, M and S"
                    )));
                }
                match unit {
                    'Y' => months += sign * whole * 12,
                    'M' => months += sign * whole,
                    'W' => days += sign * whole * 7,
                    _ => days += sign * whole,
                }
                continue;
            }
            let per: i128 = match unit {
                'H' => 3_600_000_000,
                'M' => 60_000_000,
                _ => 1_000_000,
            };
            let part = match fraction {
                None => 0,
                Some((digits, places)) => {
                    let ten = 10i128.pow(places);
                    if digits * per % ten != 0 {
                        return Err(bad(format!("{number}{unit} is finer than a microsecond")));
                    }
                    digits * per / ten
                }
            };
            micros += sign * (whole * per + part);
        }
    }
    if seen == 0 {
        return Err(bad("no component".into()));
    }
    let sign = if negate { -1 } else { 1 };
    let out_of_range = |what: &str| bad(format!("its {what} are out of range for an interval"));
    Ok(Interval {
        micros: i64::try_from(micros * sign)
            .map_err(|_| out_of_range("hours, minutes and seconds"))?,
        days: i32::try_from(days * sign).map_err(|_| out_of_range("days"))?,
        months: i32::try_from(months * sign).map_err(|_| out_of_range("months"))?,
    })
}

/// A fraction's digits as an integer and how many there are (`.05` is `(5, 2)`).
type Fraction = (i128, u32);

/// A decimal with an optional sign: the sign (1 or -1), its whole part, and the fraction's
/// digits and their count if it has one (`.` or `,`, as ISO 8601 allows). At most 18 digits
/// each side, so the arithmetic above cannot overflow an i128.
fn decimal(s: &str) -> Option<(i128, i128, Option<Fraction>)> {
    let (sign, digits) = match s.as_bytes().first()? {
        b'-' => (-1, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, s),
    };
    let (whole, fraction) = match digits.split_once(['.', ',']) {
        Some((w, f)) => (w, Some(f)),
        None => (digits, None),
    };
    let number = |d: &str| -> Option<i128> {
        (!d.is_empty() && d.len() <= 18 && d.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.parse().expect("digits"))
    };
    let whole = number(whole)?;
    let fraction = match fraction {
        None => None,
        Some(f) => Some((number(f)?, f.len() as u32)),
    };
    Some((sign, whole, fraction))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::mapping::pointer::JsonRef;

    /// `interval_recv`'s reading of the binary form: time, then days, then months.
    fn decode(bytes: &[u8]) -> Interval {
        assert_eq!(bytes.len(), 16);
        Interval {
            micros: i64::from_be_bytes(bytes[..8].try_into().unwrap()),
            days: i32::from_be_bytes(bytes[8..12].try_into().unwrap()),
            months: i32::from_be_bytes(bytes[12..].try_into().unwrap()),
        }
    }

    fn written(json: &str, unit: Option<TimeUnit>) -> Result<Interval, String> {
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
        let mut out = BytesMut::new();
        write_interval(Input::Json(JsonRef::of(&raw)), unit, &mut out).map(|()| decode(&out))
    }

    fn iv(months: i32, days: i32, micros: i64) -> Interval {
        Interval {
            micros,
            days,
            months,
        }
    }

    #[test]
    fn iso_durations_keep_months_days_and_time_apart() {
        let ok = |s: &str| written(&format!("{s:?}"), None).unwrap();
        assert_eq!(ok("P1DT2H"), iv(0, 1, 7_200_000_000));
        assert_eq!(ok("PT0.5S"), iv(0, 0, 500_000));
        assert_eq!(ok("P1Y2M3DT4H5M6.78S"), iv(14, 3, 14_706_780_000));
        assert_eq!(ok("P2W"), iv(0, 14, 0));
        assert_eq!(ok("P1W1D"), iv(0, 8, 0));
        assert_eq!(ok("PT1.5H"), iv(0, 0, 5_400_000_000));
        assert_eq!(ok("PT0.000001S"), iv(0, 0, 1));
        assert_eq!(ok("PT0,5S"), iv(0, 0, 500_000), "ISO's decimal comma");
        assert_eq!(ok("P0D"), iv(0, 0, 0));
        assert_eq!(ok("-P1M2DT3S"), iv(-1, -2, -3_000_000));
        // Debezium's io.debezium.time.Interval spells every component, each with its sign.
        assert_eq!(ok("P0Y0M-1DT0H0M-0.5S"), iv(0, -1, -500_000));
        assert_eq!(ok("P1Y-2M0DT-4H5M0S"), iv(10, 0, -14_100_000_000));
        assert_eq!(ok("-P-1D"), iv(0, 1, 0));
        assert_eq!(ok("P178956970Y7M"), iv(i32::MAX, 0, 0));
        assert_eq!(ok("PT2562047788H"), iv(0, 0, 9_223_372_036_800_000_000));
        for (bad, why) in [
            ("1 day", "must start with P"),
            ("P", "no component"),
            ("PT", "nothing after T"),
            ("P1DT", "nothing after T"),
            ("P1X", "unknown or out-of-order unit"),
            ("P1d", "unknown or out-of-order unit"),
            ("P1H", "unknown or out-of-order unit"),
            ("PT1D", "unknown or out-of-order unit"),
            ("P1D1Y", "unknown or out-of-order unit"),
            ("P1D1D", "unknown or out-of-order unit"),
            ("P1", "has no unit"),
            ("P1.5Y", "no exact length"),
            ("P0.5D", "no exact length"),
            ("PT0.0000001S", "finer than a microsecond"),
            ("P1e3D", "unknown or out-of-order unit"),
            ("PT-S", "is not a number"),
            ("P178956971Y", "out of range"),
            ("PT2562048000H", "out of range"),
            ("P9999999999999999999D", "is not a number"),
        ] {
            let err = written(&format!("{bad:?}"), None).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn protobuf_durations_are_seconds_with_up_to_nine_decimals() {
        let ok = |s: &str| written(&format!("{s:?}"), None);
        assert_eq!(ok("1.5s"), Ok(iv(0, 0, 1_500_000)));
        assert_eq!(ok("-0.25s"), Ok(iv(0, 0, -250_000)));
        assert_eq!(ok("0s"), Ok(iv(0, 0, 0)));
        assert_eq!(ok("86400s"), Ok(iv(0, 0, 86_400_000_000)));
        assert_eq!(ok("1.000001000s"), Ok(iv(0, 0, 1_000_001)));
        // Nanoseconds are dropped toward the past, as for timestamps.
        assert_eq!(ok("1.000000001s"), Ok(iv(0, 0, 1_000_000)));
        assert_eq!(ok("1.999999999s"), Ok(iv(0, 0, 1_999_999)));
        assert_eq!(ok("-0.000001999s"), Ok(iv(0, 0, -2)));
        assert_eq!(ok("-0.000000001s"), Ok(iv(0, 0, -1)));
        assert_eq!(
            ok("-315576000000.999999999s"),
            Ok(iv(0, 0, -315_576_000_001_000_000))
        );
        for (bad, why) in [
            ("1.0000000000s", "more than nine decimals"),
            ("s", "not a number"),
            ("1,5s", "not a number"),
            ("1.5 s", "not a number"),
            ("1.5S", "must start with P"),
        ] {
            let err = ok(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn integers_need_a_unit_and_avro_durations_map_field_by_field() {
        assert_eq!(
            written("-1500000", Some(TimeUnit::Us)),
            Ok(iv(0, 0, -1_500_000))
        );
        assert_eq!(
            written("86400000000", Some(TimeUnit::Us)),
            Ok(iv(0, 0, 86_400_000_000)),
            "all of it time: 24:00:00"
        );
        assert_eq!(written("3", Some(TimeUnit::S)), Ok(iv(0, 0, 3_000_000)));
        assert_eq!(written("2000", Some(TimeUnit::Ns)), Ok(iv(0, 0, 2)));
        let err = written("1500", Some(TimeUnit::Ns)).unwrap_err();
        assert!(err.contains("finer than"), "{err}");
        let err = written("1500", None).unwrap_err();
        assert!(err.contains("without a unit"), "{err}");
        let err = written("9223372036854775807", Some(TimeUnit::S)).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        assert!(written("1.5", Some(TimeUnit::S)).is_err());
        assert!(written("true", None).is_err());

        assert_eq!(
            written(r#"{"months":14,"days":3,"millis":1500}"#, None),
            Ok(iv(14, 3, 1_500_000))
        );
        for bad in [
            r#"{"months":4294967295,"days":0,"millis":0}"#,
            r#"{"months":1,"days":0}"#,
            r#"{"months":1,"days":0,"millis":0,"x":1}"#,
        ] {
            assert!(written(bad, None).is_err(), "{bad}");
        }
    }

    /// An interval written as ISO 8601 the way a producer could: each field its own
    /// component, the time as seconds with six decimals.
    fn iso(i: Interval) -> String {
        let (sign, us) = if i.micros < 0 {
            ("-", i.micros.unsigned_abs())
        } else {
            ("", i.micros.unsigned_abs())
        };
        format!(
            "P{}M{}DT{sign}{}.{:06}S",
            i.months,
            i.days,
            us / 1_000_000,
            us % 1_000_000
        )
    }

    proptest! {
        /// Any interval PostgreSQL can hold, written as ISO 8601, decodes to the same three
        /// fields; so does the same time split into hours, minutes and seconds.
        #[test]
        fn any_interval_round_trips_through_iso_8601(
            months in any::<i32>(),
            days in any::<i32>(),
            micros in any::<i64>(),
        ) {
            let i = iv(months, days, micros);
            prop_assert_eq!(written(&format!("{:?}", iso(i)), None), Ok(i));
            let us = micros.unsigned_abs();
            let sign = if micros < 0 { "-" } else { "" };
            let split = format!(
                "P{months}M{days}DT{sign}{}H{sign}{}M{sign}{}.{:06}S",
                us / 3_600_000_000,
                us / 60_000_000 % 60,
                us / 1_000_000 % 60,
                us % 1_000_000
            );
            prop_assert_eq!(written(&format!("{split:?}"), None), Ok(i));
            prop_assert_eq!(written(&micros.to_string(), Some(TimeUnit::Us)), Ok(iv(0, 0, micros)));
        }
    }
}
