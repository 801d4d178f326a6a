//! The writers of the hot path: numbers, decimals, dates, times and strings straight into
//! the JSON text, without the formatting machinery.

use std::fmt::Write as _;

use apache_avro::types::Value;
use chrono::{DateTime, Datelike, NaiveDate, Timelike};

use super::{Unit, MAX_DECIMAL_BYTES, MAX_DECIMAL_SCALE};

/// Appends `n` in decimal, zero-padded to `width` digits: the hot path's numbers, without
/// the formatting machinery.
pub(super) fn push_digits(out: &mut String, n: u64, width: usize) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n);
    out.extend(std::iter::repeat_n('0', width.saturating_sub(digits.len())));
    out.push_str(digits);
}

/// Appends a signed integer.
pub(super) fn push_int(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_digits(out, n.unsigned_abs(), 1);
}

pub(super) use crate::mapping::json_write::write_str;

/// A float as the shortest text that reads back to it; whole numbers without a fraction, so
/// they also fit integer columns; NaN and the infinities as the strings the converters take.
pub(super) fn write_float<F: std::fmt::Display + std::fmt::Debug>(
    f: F,
    wide: f64,
    out: &mut String,
) {
    if wide.is_nan() {
        out.push_str("\"NaN\"");
    } else if wide.is_infinite() {
        out.push_str(if wide > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else if wide.fract() == 0.0 && wide.abs() < 1e15 {
        let _ = write!(out, "{f}");
    } else {
        // Debug switches to an exponent for very large and small values (JSON allows it);
        // Display would spell out hundreds of digits.
        let _ = write!(out, "{f:?}");
    }
}

/// A string that holds JSON (`io.debezium.data.Json`), written as that JSON: checked, its
/// surrounding whitespace dropped (a value found in JSON never has any, and the converters
/// rely on that), and its nesting counted from `depth`, where it is written.
pub(super) fn write_json_string(s: &str, depth: usize, out: &mut String) -> Result<(), String> {
    serde_json::from_str::<serde::de::IgnoredAny>(s)
        .map_err(|e| format!("an io.debezium.data.Json string is not JSON: {e}"))?;
    let json = s.trim_matches([' ', '\t', '\n', '\r']);
    if crate::mapping::depth::nests_deeper_than(
        json.as_bytes(),
        super::MAX_JSON_DEPTH.saturating_sub(depth),
    ) {
        return Err(format!(
            "the value nests deeper than {} levels",
            super::MAX_JSON_DEPTH
        ));
    }
    out.push_str(json);
    Ok(())
}

/// A big-endian two's-complement unscaled integer with `scale`, as an exact JSON number.
/// No bytes at all is no number (Java's `BigInteger` refuses it too), not zero.
pub(super) fn write_decimal(bytes: &[u8], scale: i64, out: &mut String) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("a decimal of no bytes".into());
    }
    if bytes.len() > MAX_DECIMAL_BYTES {
        return Err(format!(
            "a decimal of {} bytes is too long (at most {MAX_DECIMAL_BYTES})",
            bytes.len()
        ));
    }
    if scale.unsigned_abs() > MAX_DECIMAL_SCALE.unsigned_abs() {
        return Err(format!(
            "decimal scale {scale} is out of range (-{MAX_DECIMAL_SCALE} to {MAX_DECIMAL_SCALE})"
        ));
    }
    let (negative, digits) = crate::mapping::convert::twos_complement_digits(bytes);
    if negative {
        out.push('-');
    }
    if scale <= 0 {
        out.push_str(&digits);
        if digits != "0" {
            out.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        return Ok(());
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', scale - digits.len()));
        out.push_str(&digits);
    } else {
        let point = digits.len() - scale;
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    }
    Ok(())
}

/// Debezium's `{scale, value}` record as an exact number.
pub(super) fn write_variable_decimal(
    fields: &[(String, Value)],
    out: &mut String,
) -> Result<(), String> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| match v {
                Value::Union(_, inner) => inner.as_ref(),
                v => v,
            })
    };
    let scale = match field("scale") {
        Some(Value::Int(s)) => i64::from(*s),
        _ => return Err("a VariableScaleDecimal without an int scale".into()),
    };
    match field("value") {
        Some(Value::Bytes(b)) => write_decimal(b, scale, out),
        _ => Err("a VariableScaleDecimal without a bytes value".into()),
    }
}

/// `"YYYY-MM-DD"` of `days` since 1970-01-01.
pub(super) fn write_date(days: i64, out: &mut String) -> Result<(), String> {
    let date = i32::try_from(days)
        .ok()
        .and_then(|d| d.checked_add(719_163))
        .and_then(NaiveDate::from_num_days_from_ce_opt)
        .ok_or_else(|| format!("date {days} (days since 1970) is out of range"))?;
    out.push('"');
    write_ymd(date, out);
    out.push('"');
    Ok(())
}

/// `YYYY-MM-DD`, with a sign for years outside 0000–9999 (as chrono writes and reads `%Y`).
pub(super) fn write_ymd(date: NaiveDate, out: &mut String) {
    let year = date.year();
    if year < 0 {
        out.push('-');
    } else if year > 9999 {
        out.push('+');
    }
    push_digits(out, u64::from(year.unsigned_abs()), 4);
    out.push('-');
    push_digits(out, u64::from(date.month()), 2);
    out.push('-');
    push_digits(out, u64::from(date.day()), 2);
}

/// `n` `unit`s since the epoch as a quoted ISO timestamp with every digit of the unit;
/// `zone` adds `Z`.
pub(super) fn write_timestamp(
    n: i64,
    unit: Unit,
    zone: bool,
    out: &mut String,
) -> Result<(), String> {
    let per = unit.per_second();
    let t = DateTime::from_timestamp(n.div_euclid(per), 0)
        .ok_or_else(|| format!("timestamp {n} is out of range"))?
        .naive_utc();
    out.push('"');
    write_ymd(t.date(), out);
    out.push('T');
    push_digits(out, u64::from(t.hour()), 2);
    out.push(':');
    push_digits(out, u64::from(t.minute()), 2);
    out.push(':');
    push_digits(out, u64::from(t.second()), 2);
    out.push('.');
    push_digits(out, n.rem_euclid(per).unsigned_abs(), unit.digits());
    out.push_str(if zone { "Z\"" } else { "\"" });
    Ok(())
}

/// `n` `unit`s since midnight as a quoted `HH:MM:SS.ffffff` (nine digits for nanoseconds).
pub(super) fn write_time_of_day(n: i64, unit: Unit, out: &mut String) -> Result<(), String> {
    let per = unit.per_second();
    if !(0..=86_400 * per).contains(&n) {
        return Err(format!("time of day {n} is not between 00:00 and 24:00"));
    }
    let (seconds, fraction) = (n / per, n % per);
    let (width, fraction) = match unit {
        Unit::Nanos => (9, fraction),
        Unit::Micros => (6, fraction),
        Unit::Millis => (6, fraction * 1000),
    };
    out.push('"');
    push_digits(out, (seconds / 3600).unsigned_abs(), 2);
    out.push(':');
    push_digits(out, (seconds / 60 % 60).unsigned_abs(), 2);
    out.push(':');
    push_digits(out, (seconds % 60).unsigned_abs(), 2);
    out.push('.');
    push_digits(out, fraction.unsigned_abs(), width);
    out.push('"');
    Ok(())
}

/// Microseconds of a duration as ISO 8601 seconds (`PT-1.500000S`), so the interval
/// converter reads it without being told a unit.
pub(super) fn write_micro_duration(n: i64, out: &mut String) {
    let us = n.unsigned_abs();
    out.push_str(if n < 0 { "\"PT-" } else { "\"PT" });
    push_digits(out, us / 1_000_000, 1);
    out.push('.');
    push_digits(out, us % 1_000_000, 6);
    out.push_str("S\"");
}
