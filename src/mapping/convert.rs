//! One value into one column's binary COPY form. Each error says what was wrong with the
//! value; the caller adds the column and the record.

use std::borrow::Cow;

use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use postgres_types::{ToSql, Type};
use serde_json::value::RawValue;

use crate::config::TimeUnit;
use crate::pgcopy::encode_numeric;
use crate::schema::ColumnType;

/// A value from the record as a converter takes it: JSON (a field, a constant, a JSON key),
/// or a plain string (a record key that is not JSON). One type for both, so a decoded key
/// goes to a converter as it is. Borrowed and `Copy`: it never owns record data.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    Json(&'a RawValue),
    Str(&'a str),
}

impl<'a> Input<'a> {
    /// JSON text of the value (a plain string is quoted).
    fn json_text(&self) -> Cow<'a, str> {
        match self {
            Input::Json(raw) => Cow::Borrowed(raw.get()),
            Input::Str(s) => Cow::Owned(serde_json::to_string(s).expect("strings serialise")),
        }
    }

    /// The value as a string, if it is one (JSON escapes resolved).
    fn string(&self) -> Result<Option<Cow<'a, str>>, String> {
        match self {
            Input::Str(s) => Ok(Some(Cow::Borrowed(s))),
            Input::Json(raw) => {
                let text = raw.get();
                if !text.starts_with('"') {
                    return Ok(None);
                }
                if !text.contains('\\') {
                    return Ok(Some(Cow::Borrowed(&text[1..text.len() - 1])));
                }
                serde_json::from_str::<String>(text)
                    .map(|s| Some(Cow::Owned(s)))
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// The literal text of a non-string JSON value (number, bool, object, array).
    fn literal(&self) -> Option<&'a str> {
        match self {
            Input::Json(raw) if !raw.get().starts_with('"') => Some(raw.get()),
            _ => None,
        }
    }

    /// As JSON, so an error tells the string `"1"` from the number `1`; abbreviated.
    fn shown(&self) -> String {
        abbreviate(&self.json_text())
    }
}

/// What a Kafka Connect or Debezium schema says about a field's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// `org.apache.kafka.connect.data.Decimal`: base64 of a big-endian two's-complement
    /// unscaled integer, or a JSON number (`decimal.format=NUMERIC`).
    Decimal { scale: u32 },
    /// `io.debezium.data.VariableScaleDecimal`: `{"scale": s, "value": <base64>}`.
    VariableDecimal,
    /// What an integer time counts: days (Connect and Debezium `Date`), milliseconds
    /// (`Timestamp`), micro- or nanoseconds (Debezium `MicroTimestamp`, `NanoTimestamp`).
    Epoch(TimeUnit),
    /// A string that holds JSON text (`io.debezium.data.Json`).
    JsonText,
}

/// Encodes `value` with postgres-types into the field being written.
fn to_sql<T: ToSql>(value: T, ty: &Type, out: &mut BytesMut) -> Result<(), String> {
    value.to_sql(ty, out).map(|_| ()).map_err(|e| e.to_string())
}

/// Writes `input` as column type `ty`. `null` is handled by the caller.
pub fn encode(
    ty: ColumnType,
    input: Input<'_>,
    hint: Option<Hint>,
    out: &mut BytesMut,
) -> Result<(), String> {
    match hint {
        Some(Hint::Decimal { scale }) => {
            // JsonConverter writes a Decimal as base64 of its unscaled integer (the default,
            // `decimal.format=BASE64`) or as a JSON number (`NUMERIC`). A number carries its
            // own scale and is taken as written, as Connect reads it; a string is base64 (a
            // numeric string would be ambiguous: "1234" is valid base64 too).
            let digits = match input.literal() {
                Some(number) if is_json_number(number) => Cow::Borrowed(number),
                _ => Cow::Owned(decimal_from_base64(
                    &expect_string(input, "a base64 decimal or a JSON number")?,
                    scale,
                )?),
            };
            return encode_number_text(ty, &digits, out);
        }
        Some(Hint::VariableDecimal) => {
            let Input::Json(raw) = input else {
                return Err("expected a {scale, value} decimal".into());
            };
            let scale = super::pointer::field(raw, "scale")?.ok_or("decimal without scale")?;
            let scale: u32 = scale
                .get()
                .parse()
                .map_err(|_| "decimal scale is not a number")?;
            let value = super::pointer::field(raw, "value")?.ok_or("decimal without value")?;
            let digits = decimal_from_base64(
                &expect_string(Input::Json(value), "a base64 decimal")?,
                scale,
            )?;
            return encode_number_text(ty, &digits, out);
        }
        Some(Hint::JsonText) if matches!(ty, ColumnType::Json | ColumnType::Jsonb) => {
            let text = expect_string(input, "a string holding JSON")?;
            serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .map_err(|e| format!("not JSON: {e}"))?;
            return write_json_text(ty, &text, out);
        }
        _ => {}
    }
    match ty {
        ColumnType::Text => {
            let s = match input.string()? {
                Some(s) => s,
                // Numbers, booleans, objects and arrays keep their JSON text.
                None => input.json_text(),
            };
            check_text(&s)?;
            out.put_slice(s.as_bytes());
        }
        ColumnType::Int2
        | ColumnType::Int4
        | ColumnType::Int8
        | ColumnType::Float4
        | ColumnType::Float8
        | ColumnType::Numeric => {
            let text = match input.string()? {
                Some(s) => s,
                None => Cow::Owned(
                    input
                        .literal()
                        .filter(|t| is_json_number(t))
                        .ok_or_else(|| format!("expected a number, got {}", input.shown()))?
                        .to_string(),
                ),
            };
            encode_number_text(ty, text.trim(), out)?;
        }
        ColumnType::Bool => match (input.literal(), input.string()?.as_deref()) {
            (Some("true"), _) | (_, Some("true")) => out.put_u8(1),
            (Some("false"), _) | (_, Some("false")) => out.put_u8(0),
            _ => return Err(format!("expected true or false, got {}", input.shown())),
        },
        ColumnType::Timestamptz | ColumnType::Timestamp | ColumnType::Date => {
            let t = match input.string()? {
                Some(s) if ty == ColumnType::Date => parse_date(&s)?,
                Some(s) => parse_timestamp(&s)?,
                None => {
                    // The unit only says how to read an integer; a string is ISO-8601 anyway.
                    let unit = match hint {
                        Some(Hint::Epoch(unit)) => Some(unit),
                        _ => None,
                    };
                    epoch_integer(ty, input, unit)?
                }
            };
            write_time(ty, t, out)?;
        }
        ColumnType::Uuid => {
            let s = expect_string(input, "a UUID string")?;
            let id = uuid::Uuid::parse_str(&s).map_err(|e| format!("{s:?} is not a UUID: {e}"))?;
            out.put_slice(id.as_bytes());
        }
        ColumnType::Json | ColumnType::Jsonb => write_json_text(ty, &input.json_text(), out)?,
        ColumnType::Bytea => {
            let s = expect_string(input, "a base64 string")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(|e| format!("not valid base64: {e}"))?;
            out.put_slice(&bytes);
        }
    }
    Ok(())
}

/// For values JSON can carry only as strings (UUIDs, base64): anything else is an error, never
/// converted.
fn expect_string<'a>(input: Input<'a>, what: &str) -> Result<Cow<'a, str>, String> {
    input
        .string()?
        .ok_or_else(|| format!("expected {what}, got {}", input.shown()))
}

/// A decimal number as text, into any numeric column type.
fn encode_number_text(ty: ColumnType, text: &str, out: &mut BytesMut) -> Result<(), String> {
    match ty {
        ColumnType::Int2 => {
            let v = integer_text(text)?;
            to_sql(
                i16::try_from(v).map_err(|_| format!("{v} is out of range for smallint"))?,
                &Type::INT2,
                out,
            )
        }
        ColumnType::Int4 => {
            let v = integer_text(text)?;
            to_sql(
                i32::try_from(v).map_err(|_| format!("{v} is out of range for integer"))?,
                &Type::INT4,
                out,
            )
        }
        ColumnType::Int8 => to_sql(integer_text(text)?, &Type::INT8, out),
        // Exact: a real's value came from an f32 parse.
        ColumnType::Float4 => to_sql(float_text(ty, text)? as f32, &Type::FLOAT4, out),
        ColumnType::Float8 => to_sql(float_text(ty, text)?, &Type::FLOAT8, out),
        ColumnType::Numeric => encode_numeric(text, out).map_err(|e| e.to_string()),
        ColumnType::Text => {
            out.put_slice(text.as_bytes());
            Ok(())
        }
        other => Err(format!("a number cannot go into a {other:?} column")),
    }
}

/// Strict: `1.5` or `1e3` into an integer column is an error, never rounded or truncated.
fn integer_text(text: &str) -> Result<i64, String> {
    text.parse::<i64>()
        .map_err(|_| format!("expected an integer, got {}", abbreviate(text)))
}

/// A `real` (`Float4`) or `double precision` value. Also `NaN` and `±Infinity`, which JSON
/// cannot hold as numbers, so producers send strings. A number is parsed once at the column's
/// width (rounded to the nearest value, no double rounding); one the type cannot hold is an
/// error, as in PostgreSQL's own input, never silently Infinity or 0.
fn float_text(ty: ColumnType, text: &str) -> Result<f64, String> {
    match text {
        "NaN" => return Ok(f64::NAN),
        "Infinity" => return Ok(f64::INFINITY),
        "-Infinity" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    let bad = || format!("expected a number, got {}", abbreviate(text));
    // Rust's parser also takes `inf` and `nan` (any case, signed): not numbers here.
    if !is_json_number(text)
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return Err(bad());
    }
    let (value, name) = if ty == ColumnType::Float4 {
        (text.parse::<f32>().map(f64::from).ok(), "real")
    } else {
        (text.parse::<f64>().ok(), "double precision")
    };
    let value = value.ok_or_else(bad)?;
    if value.is_infinite() {
        return Err(format!("{} is out of range for {name}", abbreviate(text)));
    }
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    if value == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return Err(format!(
            "{} is too small for {name}: it would become 0",
            abbreviate(text)
        ));
    }
    Ok(value)
}

/// The first character is enough: in valid JSON only numbers start with `-` or a digit. Also
/// keeps Rust's `inf` and `+1` out of float parsing.
fn is_json_number(text: &str) -> bool {
    text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// The text goes in as is, never re-serialised; jsonb's binary form is that text after a
/// version byte.
fn write_json_text(ty: ColumnType, text: &str, out: &mut BytesMut) -> Result<(), String> {
    check_json_text(text)?;
    if ty == ColumnType::Jsonb {
        out.put_u8(1); // jsonb binary format version
    }
    out.put_slice(text.as_bytes());
    Ok(())
}

/// `timestamp` without time zone stores the UTC wall-clock time, as offset-less input is read.
/// PostgreSQL keeps microseconds: finer digits are dropped toward the past (floor), the same
/// for times before and after 2000 (postgres-types alone would truncate toward 2000).
fn write_time(ty: ColumnType, t: DateTime<Utc>, out: &mut BytesMut) -> Result<(), String> {
    if t.timestamp() < PG_EARLIEST_SECONDS {
        return Err(format!(
            "{} is before PostgreSQL's earliest time, 4714-11-24 BC",
            t.to_rfc3339()
        ));
    }
    let t = DateTime::from_timestamp_micros(t.timestamp_micros())
        .ok_or_else(|| format!("{} is out of range", t.to_rfc3339()))?;
    match ty {
        ColumnType::Timestamptz => to_sql(t, &Type::TIMESTAMPTZ, out),
        ColumnType::Timestamp => to_sql(t.naive_utc(), &Type::TIMESTAMP, out),
        ColumnType::Date => to_sql(t.date_naive(), &Type::DATE, out),
        _ => to_sql(t.timestamp_millis(), &Type::INT8, out),
    }
}

/// An integer time in `unit`; with no unit, epoch milliseconds, except that a date below
/// 10,000,000 in magnitude counts days (Kafka Connect's `Date`: no epoch-milliseconds value
/// that small names another day than 1970-01-01 or 1969-12-31).
fn epoch_integer(
    ty: ColumnType,
    input: Input<'_>,
    unit: Option<TimeUnit>,
) -> Result<DateTime<Utc>, String> {
    let text = input
        .literal()
        .filter(|t| is_json_number(t))
        .ok_or_else(|| {
            format!(
                "expected an ISO-8601 string or an integer, got {}",
                input.shown()
            )
        })?;
    let n: i64 = text
        .parse()
        .map_err(|e: std::num::ParseIntError| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                format!("{} is out of range", abbreviate(text))
            }
            _ => format!("expected an integer, got {}", abbreviate(text)),
        })?;
    let unit = unit.unwrap_or(if ty == ColumnType::Date && n.unsigned_abs() < 10_000_000 {
        TimeUnit::Days
    } else {
        TimeUnit::Ms
    });
    from_epoch(n, unit).ok_or_else(|| format!("{n} ({}) is out of range", unit.describe()))
}

/// `None` out of chrono's range, so the caller names the value instead of panicking; never
/// a multiplication that could wrap. Negative values count back from 1970 with a
/// non-negative sub-second part: -1 µs is 1969-12-31 23:59:59.999999.
fn from_epoch(n: i64, unit: TimeUnit) -> Option<DateTime<Utc>> {
    match unit {
        TimeUnit::Days => NaiveDate::from_ymd_opt(1970, 1, 1)?
            .checked_add_signed(chrono::Duration::try_days(n)?)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc()),
        TimeUnit::S => DateTime::from_timestamp(n, 0),
        TimeUnit::Ms => DateTime::from_timestamp_millis(n),
        TimeUnit::Us => DateTime::from_timestamp_micros(n),
        TimeUnit::Ns => Some(DateTime::from_timestamp_nanos(n)),
    }
}

/// PostgreSQL's earliest timestamp and date, 4714-11-24 BC (Julian day 0), in Unix seconds.
/// Its latest lies beyond chrono's range, so only this end needs a check.
const PG_EARLIEST_SECONDS: i64 = -210_866_803_200;

/// PostgreSQL text cannot hold NUL; catching it here names the field instead of failing the batch.
pub fn check_text(s: &str) -> Result<(), String> {
    if s.contains('\0') {
        return Err("text cannot contain the NUL character (\\u0000)".into());
    }
    Ok(())
}

/// json and jsonb reject `\u0000` escapes; the rest of the text is valid JSON already.
pub fn check_json_text(text: &str) -> Result<(), String> {
    // Walk escapes pairwise: in `\\u0000` the backslash is escaped and "u0000" is plain text,
    // which PostgreSQL stores; only a real `\u0000` escape is a NUL.
    let mut bytes = text.as_bytes().iter();
    while let Some(b) = bytes.next() {
        if *b == b'\\' {
            if bytes.as_slice().starts_with(b"u0000") {
                return Err("JSON for json/jsonb cannot contain \\u0000".into());
            }
            bytes.next();
        }
    }
    Ok(())
}

/// An ISO-8601 timestamp: RFC 3339, a space instead of `T`, or no offset (UTC assumed).
pub fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(t) = DateTime::parse_from_str(s, fmt) {
            return Ok(t.with_timezone(&Utc));
        }
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    Err(format!("{s:?} is not an ISO-8601 timestamp"))
}

/// Strict `YYYY-MM-DD`: a timestamp into a date column would silently lose its time.
fn parse_date(s: &str) -> Result<DateTime<Utc>, String> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc())
        .map_err(|_| format!("{s:?} is not an ISO-8601 date (YYYY-MM-DD)"))
}

/// Decodes Connect's Decimal: base64 of a big-endian two's-complement unscaled integer.
pub fn decimal_from_base64(b64: &str, scale: u32) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| format!("decimal is not valid base64: {e}"))?;
    if bytes.len() > 128 {
        return Err("decimal is too long".into());
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // Magnitude of a two's-complement number: invert and add one when negative.
    let mut magnitude: Vec<u8> = if negative {
        bytes.iter().map(|b| !b).collect()
    } else {
        bytes
    };
    if negative {
        for b in magnitude.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    // Repeated division by 10 of the big-endian bytes.
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in magnitude.iter_mut() {
            let cur = (rem << 8) | *b as u32;
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    let scale = scale as usize;
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let mut text = String::with_capacity(digits.len() + 2);
    if negative {
        text.push('-');
    }
    let point = digits.len() - scale;
    text.push_str(std::str::from_utf8(&digits[..point]).expect("ascii digits"));
    if scale > 0 {
        text.push('.');
        text.push_str(std::str::from_utf8(&digits[point..]).expect("ascii digits"));
    }
    Ok(text)
}

/// Shortens a value for an error message so a huge field does not flood the log.
pub fn abbreviate(text: &str) -> String {
    const MAX: usize = 64;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_decimals_decode_exactly() {
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        assert_eq!(
            decimal_from_base64(&b64(&[0x30, 0x39]), 2).unwrap(),
            "123.45"
        );
        assert_eq!(
            decimal_from_base64(&b64(&[0xcf, 0xc7]), 2).unwrap(),
            "-123.45"
        );
        assert_eq!(decimal_from_base64(&b64(&[0x05]), 3).unwrap(), "0.005");
        assert_eq!(decimal_from_base64(&b64(&[0x00]), 0).unwrap(), "0");
        assert_eq!(decimal_from_base64(&b64(&[0xff]), 1).unwrap(), "-0.1");
        let big = (i128::MAX).to_be_bytes();
        assert_eq!(
            decimal_from_base64(&b64(&big), 0).unwrap(),
            i128::MAX.to_string()
        );
    }

    /// The field's binary COPY form, or the error.
    fn encoded(ty: ColumnType, json: &str, hint: Option<Hint>) -> Result<Vec<u8>, String> {
        let raw: Box<RawValue> = serde_json::from_str(json).unwrap();
        let mut out = BytesMut::new();
        encode(ty, Input::Json(&raw), hint, &mut out).map(|()| out.to_vec())
    }

    fn numeric(text: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_numeric(text, &mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn connect_decimals_come_as_base64_or_as_json_numbers() {
        let decimal = Some(Hint::Decimal { scale: 2 });
        let n = ColumnType::Numeric;
        assert_eq!(encoded(n, r#""MDk=""#, decimal), Ok(numeric("123.45")));
        assert_eq!(encoded(n, "123.45", decimal), Ok(numeric("123.45")));
        // A number is taken as written, whatever the schema's scale.
        assert_eq!(encoded(n, "-1.005", decimal), Ok(numeric("-1.005")));
        assert_eq!(encoded(n, "1e3", decimal), Ok(numeric("1000")));
        assert_eq!(
            encoded(ColumnType::Int8, "12", Some(Hint::Decimal { scale: 0 })),
            Ok(12i64.to_be_bytes().to_vec())
        );
        let fraction = encoded(ColumnType::Int8, "1.5", Some(Hint::Decimal { scale: 0 }));
        assert!(fraction.unwrap_err().contains("expected an integer"));
        // Strings are base64: "123.45" is not, and is not read as a number either.
        let err = encoded(n, r#""123.45""#, decimal).unwrap_err();
        assert!(err.contains("not valid base64"), "{err}");
        let err = encoded(n, "true", decimal).unwrap_err();
        assert!(err.contains("a base64 decimal or a JSON number"), "{err}");
    }

    #[test]
    fn floats_take_numbers_and_numeric_strings_but_never_overflow() {
        let f8 = |json: &str| {
            encoded(ColumnType::Float8, json, None)
                .map(|b| f64::from_be_bytes(b.try_into().unwrap()))
        };
        let f4 = |json: &str| {
            encoded(ColumnType::Float4, json, None)
                .map(|b| f32::from_be_bytes(b.try_into().unwrap()))
        };
        assert_eq!(f8("1.5"), Ok(1.5));
        assert_eq!(
            f8(r#""1.5""#),
            Ok(1.5),
            "numeric strings, as for integers and numeric"
        );
        assert_eq!(f8("-2.5e-3"), Ok(-0.0025));
        assert_eq!(f8("1.7976931348623157e308"), Ok(f64::MAX));
        assert_eq!(
            f8("5e-324"),
            Ok(5e-324),
            "the smallest subnormal still fits"
        );
        assert_eq!(f8("0e-999"), Ok(0.0), "zero written small is still zero");
        assert!(f8(r#""NaN""#).unwrap().is_nan());
        assert_eq!(f8(r#""Infinity""#), Ok(f64::INFINITY));
        assert_eq!(f8(r#""-Infinity""#), Ok(f64::NEG_INFINITY));
        for refused in ["1e400", "-1e400", r#""1e400""#] {
            let err = f8(refused).unwrap_err();
            assert!(
                err.contains("out of range for double precision"),
                "{refused}: {err}"
            );
        }
        let err = f8("1e-400").unwrap_err();
        assert!(err.contains("would become 0"), "{err}");
        for refused in [
            r#""inf""#,
            r#""-nan""#,
            r#""infinity""#,
            r#""1.5x""#,
            "true",
        ] {
            assert!(f8(refused).is_err(), "{refused}");
        }

        assert_eq!(f4("1.25"), Ok(1.25));
        assert_eq!(f4(r#""-1.25""#), Ok(-1.25));
        assert_eq!(f4("3.4028235e38"), Ok(f32::MAX));
        // Finite as a double, too large for real: refused, never Infinity.
        for refused in ["1e39", "-3.5e38", "1e300"] {
            let err = f4(refused).unwrap_err();
            assert!(err.contains("out of range for real"), "{refused}: {err}");
        }
        let err = f4("1e-50").unwrap_err();
        assert!(err.contains("would become 0"), "{err}");
        // Rounded once, to the nearest real, as PostgreSQL's float4 input does.
        assert_eq!(f4("16777217"), Ok(16_777_216.0));
        assert_eq!(f4("0.1"), Ok(0.1f32));
        assert!(f4(r#""NaN""#).unwrap().is_nan());
    }

    /// What PostgreSQL gets for a timestamptz, as RFC 3339 with microseconds.
    fn tstz(json: &str, unit: Option<TimeUnit>) -> Result<String, String> {
        let bytes = encoded(ColumnType::Timestamptz, json, unit.map(Hint::Epoch))?;
        let micros = i64::from_be_bytes(bytes.try_into().unwrap());
        // PostgreSQL counts microseconds from 2000-01-01.
        let t = DateTime::from_timestamp_micros(micros + 946_684_800_000_000).unwrap();
        Ok(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
    }

    fn date(json: &str, unit: Option<TimeUnit>) -> Result<String, String> {
        let bytes = encoded(ColumnType::Date, json, unit.map(Hint::Epoch))?;
        let days = i32::from_be_bytes(bytes.try_into().unwrap());
        Ok(
            (NaiveDate::from_ymd_opt(2000, 1, 1).unwrap() + chrono::Duration::days(days.into()))
                .to_string(),
        )
    }

    #[test]
    fn every_time_unit_reads_integers_before_and_after_1970() {
        use TimeUnit::*;
        let at = |json: &str, unit| tstz(json, Some(unit)).unwrap();
        assert_eq!(at("1700000000", S), "2023-11-14T22:13:20.000000Z");
        assert_eq!(at("1700000000123", Ms), "2023-11-14T22:13:20.123000Z");
        assert_eq!(at("1700000000123456", Us), "2023-11-14T22:13:20.123456Z");
        assert_eq!(at("1700000000123456789", Ns), "2023-11-14T22:13:20.123456Z");
        for unit in [S, Ms, Us, Ns] {
            assert_eq!(at("0", unit), "1970-01-01T00:00:00.000000Z");
        }
        // Before 1970 the sub-second part counts forward from the earlier second.
        assert_eq!(at("-1", S), "1969-12-31T23:59:59.000000Z");
        assert_eq!(at("-1", Ms), "1969-12-31T23:59:59.999000Z");
        assert_eq!(at("-1", Us), "1969-12-31T23:59:59.999999Z");
        assert_eq!(at("-1500", Us), "1969-12-31T23:59:59.998500Z");
        assert_eq!(
            at("-1", Ns),
            "1969-12-31T23:59:59.999999Z",
            "floor, not toward 2000"
        );
        assert_eq!(at("-1000", Ns), "1969-12-31T23:59:59.999999Z");
        assert_eq!(at("-1001", Ns), "1969-12-31T23:59:59.999998Z");
        assert_eq!(at("-86400000001", Us), "1969-12-30T23:59:59.999999Z");
        assert_eq!(at("999", Ns), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at("-62135596800", S), "0001-01-01T00:00:00.000000Z");
        // Nanoseconds cover all of i64; the coarser units overflow chrono's range, an error.
        assert_eq!(at(&i64::MAX.to_string(), Ns), "2262-04-11T23:47:16.854775Z");
        assert_eq!(at(&i64::MIN.to_string(), Ns), "1677-09-21T00:12:43.145224Z");
        for unit in [S, Ms, Us] {
            for n in [i64::MAX, i64::MIN] {
                let err = tstz(&n.to_string(), Some(unit)).unwrap_err();
                assert!(err.contains("out of range"), "{n} {unit:?}: {err}");
            }
        }
        // Beyond i64: an error, never a wrap.
        let err = tstz("9223372036854775808", Some(Ns)).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        // PostgreSQL's earliest time is the limit, not chrono's.
        assert_eq!(at("-210866803200", S), "-4713-11-24T00:00:00.000000Z");
        let err = tstz("-210866803201", Some(S)).unwrap_err();
        assert!(err.contains("before PostgreSQL's earliest time"), "{err}");
        // Fractions are not integers in any unit.
        assert!(tstz("1.5", Some(S)).is_err());
        // A unit says how to read integers; an ISO string is read as such.
        assert_eq!(
            tstz(r#""2023-11-14T22:13:20.5Z""#, Some(Us)).unwrap(),
            "2023-11-14T22:13:20.500000Z"
        );

        let day = |json: &str, unit| date(json, unit).unwrap();
        assert_eq!(day("19675", Some(Days)), "2023-11-14");
        assert_eq!(day("-1", Some(Days)), "1969-12-31");
        assert_eq!(day("-1", Some(S)), "1969-12-31");
        assert_eq!(day("-1", Some(Us)), "1969-12-31");
        assert_eq!(day("1700000000123456", Some(Us)), "2023-11-14");
        assert_eq!(day("1700000000", Some(S)), "2023-11-14");
        // With no unit, dates keep their rule: small integers are days, others milliseconds.
        assert_eq!(day("19675", None), "2023-11-14");
        assert_eq!(
            day("-2440588", None),
            "-4713-11-24",
            "PostgreSQL's earliest date"
        );
        let err = date("-2440589", None).unwrap_err();
        assert!(err.contains("before PostgreSQL's earliest time"), "{err}");
        let err = date("-9999999", None).unwrap_err();
        assert!(err.contains("before PostgreSQL's earliest time"), "{err}");
        assert_eq!(day("1700000000123", None), "2023-11-14");
        assert_eq!(day("-10000000", None), "1969-12-31");
        for n in [i64::MAX, i64::MIN] {
            let err = date(&n.to_string(), None).unwrap_err();
            assert!(err.contains("out of range"), "{err}");
            let err = date(&n.to_string(), Some(Days)).unwrap_err();
            assert!(err.contains("out of range"), "{err}");
        }
        // With no unit, timestamps are epoch milliseconds.
        assert_eq!(tstz("-1", None).unwrap(), "1969-12-31T23:59:59.999000Z");
    }

    #[test]
    fn timestamps_accept_iso_strings_and_epoch_units() {
        let utc = |s: &str| parse_timestamp(s).unwrap().timestamp_millis();
        assert_eq!(utc("2023-11-14T22:13:20Z"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14T23:13:20+01:00"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14 22:13:20"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14T22:13:20.5"), 1_700_000_000_500);
        assert!(parse_timestamp("yesterday").is_err());
        assert_eq!(
            from_epoch(19_675, TimeUnit::Days).unwrap().to_rfc3339(),
            "2023-11-14T00:00:00+00:00"
        );
        assert_eq!(
            from_epoch(1_700_000_000_000_000, TimeUnit::Us)
                .unwrap()
                .timestamp_millis(),
            1_700_000_000_000
        );
    }

    #[test]
    fn text_takes_strings_and_the_json_text_of_anything_else() {
        let t = ColumnType::Text;
        assert_eq!(encoded(t, r#""a\"b""#, None), Ok(br#"a"b"#.to_vec()));
        assert_eq!(encoded(t, "12.50", None), Ok(b"12.50".to_vec()));
        assert_eq!(encoded(t, "true", None), Ok(b"true".to_vec()));
        assert_eq!(
            encoded(t, r#"{"a":[1]}"#, None),
            Ok(br#"{"a":[1]}"#.to_vec())
        );
        assert_eq!(encoded(t, "[1, 2]", None), Ok(b"[1, 2]".to_vec()));
        let err = encoded(t, r#""a\u0000b""#, None).unwrap_err();
        assert!(err.contains("NUL"), "{err}");
    }

    #[test]
    fn integers_refuse_fractions_and_what_does_not_fit() {
        assert_eq!(
            encoded(ColumnType::Int4, r#"" 42""#, None),
            Ok(42i32.to_be_bytes().to_vec())
        );
        for fraction in ["1.5", r#""1.5""#] {
            let err = encoded(ColumnType::Int4, fraction, None).unwrap_err();
            assert!(err.contains("expected an integer"), "{fraction}: {err}");
        }
        let err = encoded(ColumnType::Int2, "32768", None).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        assert!(encoded(ColumnType::Int8, "true", None).is_err());
    }

    #[test]
    fn booleans_are_true_or_false_as_json_or_strings_and_nothing_else() {
        let b = ColumnType::Bool;
        assert_eq!(encoded(b, "true", None), Ok(vec![1]));
        assert_eq!(encoded(b, "false", None), Ok(vec![0]));
        assert_eq!(encoded(b, r#""true""#, None), Ok(vec![1]));
        assert_eq!(encoded(b, r#""false""#, None), Ok(vec![0]));
        for other in ["1", "0", r#""yes""#, r#""TRUE""#, r#""""#, "[]"] {
            let err = encoded(b, other, None).unwrap_err();
            assert!(err.contains("expected true or false"), "{other}: {err}");
        }
    }

    #[test]
    fn dates_refuse_strings_that_are_not_dates() {
        // 2024-01-31 is 8796 days after 2000-01-01.
        assert_eq!(
            encoded(ColumnType::Date, r#""2024-01-31""#, None),
            Ok(8796i32.to_be_bytes().to_vec())
        );
        for bad in [
            r#""2024-13-01""#,
            r#""2024-02-30""#,
            r#""yesterday""#,
            r#""""#,
        ] {
            assert!(encoded(ColumnType::Date, bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn uuids_must_be_uuid_strings() {
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(
            encoded(ColumnType::Uuid, &format!("{id:?}"), None),
            Ok(uuid::Uuid::parse_str(id).unwrap().as_bytes().to_vec())
        );
        let err = encoded(ColumnType::Uuid, r#""not-a-uuid""#, None).unwrap_err();
        assert!(err.contains("is not a UUID"), "{err}");
        for other in ["123", "true", r#"{"id":1}"#] {
            let err = encoded(ColumnType::Uuid, other, None).unwrap_err();
            assert!(err.contains("a UUID string"), "{other}: {err}");
        }
    }

    #[test]
    fn json_is_stored_as_sent_but_never_with_nul() {
        let sent = r#"{"b": 1,  "a": [true]}"#;
        assert_eq!(
            encoded(ColumnType::Json, sent, None),
            Ok(sent.as_bytes().to_vec())
        );
        let mut jsonb = vec![1u8];
        jsonb.extend_from_slice(sent.as_bytes());
        assert_eq!(encoded(ColumnType::Jsonb, sent, None), Ok(jsonb));
        for ty in [ColumnType::Json, ColumnType::Jsonb] {
            let err = encoded(ty, r#"{"j":"a\u0000b"}"#, None).unwrap_err();
            assert!(err.contains("\\u0000"), "{err}");
            // An escaped backslash then "u0000" is six characters of text, not a NUL.
            let text = r#"{"j":"a\\u0000b"}"#;
            assert!(encoded(ty, text, None).is_ok(), "{text}");
            let nul_after_backslash = r#"{"j":"a\\\u0000b"}"#;
            assert!(encoded(ty, nul_after_backslash, None).is_err());
        }
    }

    #[test]
    fn bytea_takes_standard_base64_and_refuses_anything_else() {
        assert_eq!(
            encoded(ColumnType::Bytea, r#""/wA=""#, None),
            Ok(vec![0xff, 0x00])
        );
        // `_` and `-` are the URL-safe alphabet, not the standard one.
        for bad in [r#""***""#, r#""_wA=""#, r#""/wA""#] {
            let err = encoded(ColumnType::Bytea, bad, None).unwrap_err();
            assert!(err.contains("not valid base64"), "{bad}: {err}");
        }
        let err = encoded(ColumnType::Bytea, "12", None).unwrap_err();
        assert!(err.contains("a base64 string"), "{err}");
    }
}
