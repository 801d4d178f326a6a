//! One value into one column's binary COPY form. Each error says what was wrong with the
//! value; the caller adds the column and the record.
//!
//! `encode` takes a value from the record (JSON, or a key that is plain text) and dispatches
//! on the column type; how numbers, dates and times, and text and JSON become bytes lives
//! beside it (`number`, `datetime`, `text`), and the record's metadata and whole raw value
//! have their own writers (`meta::write_meta`, `text::write_raw`). An array column's value
//! is a JSON array whose elements go through the same scalar converter (`array`). The tests of
//! `encode` for each column type stay in this file, where README's claims point at them.

mod array;
mod clock;
mod datetime;
mod interval;
mod meta;
mod network;
mod number;
mod text;

use std::borrow::Cow;

use crate::mapping::pointer::JsonRef;
use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use postgres_types::{ToSql, Type};

use crate::config::TimeUnit;
use crate::schema::ColumnType;
use datetime::{epoch_integer, parse_date, parse_timestamp, write_time};
use number::{decimal_from_base64, encode_number_text, is_json_number};
use text::{check_text, write_json_text};

pub(crate) use meta::write_meta;
pub(crate) use number::twos_complement_digits;
pub(crate) use text::write_raw;

/// A value from the record as a converter takes it: JSON (a field, a constant, a JSON key),
/// or a plain string (a record key that is not JSON). One type for both, so a decoded key
/// goes to a converter as it is. Borrowed and `Copy`: it never owns record data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input<'a> {
    /// Valid JSON text, borrowed: not yet decoded, so a converter reads only what it needs.
    Json(JsonRef<'a>),
    /// A record key that is not JSON, as its UTF-8 text.
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
    /// (`Timestamp`), micro- or nanoseconds (Debezium `MicroTimestamp`, `NanoTimestamp`);
    /// for a time of day the count since midnight (`Time`, `MicroTime`, `NanoTime`), for an
    /// interval its length (`MicroDuration`).
    Epoch(TimeUnit),
    /// A string that holds JSON text (`io.debezium.data.Json`).
    JsonText,
    /// A bytea column's strings are hex (`[topics.bytea_encoding]`), not base64.
    Hex,
}

/// Encodes `value` with postgres-types into the field being written; its error becomes the
/// reason of a `BadValue`. The one place every converter goes through for PostgreSQL's own
/// binary forms.
fn to_sql<T: ToSql>(value: T, ty: &Type, out: &mut BytesMut) -> Result<(), String> {
    value.to_sql(ty, out).map(|_| ()).map_err(|e| e.to_string())
}

/// Writes `input` as column type `ty`. `null` is handled by the caller.
pub(crate) fn encode(
    ty: ColumnType,
    input: Input<'_>,
    hint: Option<Hint>,
    out: &mut BytesMut,
) -> Result<(), String> {
    match ty {
        ColumnType::Array(of) => array::write_array(of, input, hint, out),
        _ => encode_scalar(ty, input, hint, out),
    }
}

/// One value of a scalar type: a column's, or an array's element (which must not be an
/// array itself: PostgreSQL has no arrays of arrays, only more dimensions).
fn encode_scalar(
    ty: ColumnType,
    input: Input<'_>,
    hint: Option<Hint>,
    out: &mut BytesMut,
) -> Result<(), String> {
    if let ColumnType::Array(_) = ty {
        return Err("an array's element cannot be an array".into());
    }
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
        ColumnType::Bytea if hint == Some(Hint::Hex) => {
            let s = expect_string(input, "a hex string")?;
            // PostgreSQL's own text form starts with `\x`; Debezium's hex mode writes the bare
            // digits. Either way, pairs of hex digits and nothing else.
            let digits = s.strip_prefix("\\x").unwrap_or(&s);
            if digits.len() % 2 != 0 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "{} is not hex (pairs of 0-9a-f, optionally after \\x)",
                    input.shown()
                ));
            }
            for pair in digits.as_bytes().chunks(2) {
                let hex = std::str::from_utf8(pair).expect("ASCII digits");
                out.put_u8(u8::from_str_radix(hex, 16).expect("hex digits"));
            }
        }
        ColumnType::Bytea => {
            let s = expect_string(input, "a base64 string")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(|e| format!("not valid base64: {e}"))?;
            out.put_slice(&bytes);
        }
        ColumnType::Time => clock::write_time(input, epoch_unit(hint), out)?,
        ColumnType::Timetz => clock::write_timetz(input, epoch_unit(hint), out)?,
        ColumnType::Interval => interval::write_interval(input, epoch_unit(hint), out)?,
        ColumnType::Inet | ColumnType::Cidr => {
            let s = expect_string(input, "an IP address string")?;
            network::write_inet(&s, ty == ColumnType::Cidr, out)?;
        }
        ColumnType::Macaddr | ColumnType::Macaddr8 => {
            let s = expect_string(input, "a MAC address string")?;
            let len = if ty == ColumnType::Macaddr { 6 } else { 8 };
            network::write_mac(&s, len, out)?;
        }
        // Refused on entry: an array is never converted as a scalar.
        ColumnType::Array(_) => {}
    }
    Ok(())
}

/// The unit an integer counts in, when a schema or the configuration states one.
fn epoch_unit(hint: Option<Hint>) -> Option<TimeUnit> {
    match hint {
        Some(Hint::Epoch(unit)) => Some(unit),
        _ => None,
    }
}

/// For values JSON can carry only as strings (UUIDs, base64): anything else is an error, never
/// converted.
fn expect_string<'a>(input: Input<'a>, what: &str) -> Result<Cow<'a, str>, String> {
    input
        .string()?
        .ok_or_else(|| format!("expected {what}, got {}", input.shown()))
}

/// Shortens a value for an error message so a huge field does not flood the log.
fn abbreviate(text: &str) -> String {
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
    use chrono::{DateTime, NaiveDate};

    use super::datetime::{from_epoch, parse_timestamp};
    use super::*;
    use crate::pgcopy::encode_numeric;

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
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
        let mut out = BytesMut::new();
        encode(ty, Input::Json(JsonRef::of(&raw)), hint, &mut out).map(|()| out.to_vec())
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

    #[test]
    fn bytea_takes_hex_where_the_column_says_so_and_base64_stays_the_default() {
        let hex = Some(Hint::Hex);
        let b = ColumnType::Bytea;
        assert_eq!(encoded(b, r#""\\xff00""#, hex), Ok(vec![0xff, 0x00]));
        assert_eq!(encoded(b, r#""FF00ab""#, hex), Ok(vec![0xff, 0x00, 0xab]));
        assert_eq!(encoded(b, r#""""#, hex), Ok(vec![]));
        for bad in [
            r#""/wA=""#,
            r#""fff""#,
            r#""\\xzz""#,
            r#""0x00""#,
            r#""ff 00""#,
        ] {
            let err = encoded(b, bad, hex).unwrap_err();
            assert!(err.contains("is not hex"), "{bad}: {err}");
        }
        let err = encoded(b, "12", hex).unwrap_err();
        assert!(err.contains("a hex string"), "{err}");
        // Without the setting, hex text is not base64 and is refused, never reinterpreted.
        let err = encoded(b, r#""\\xff00""#, None).unwrap_err();
        assert!(err.contains("not valid base64"), "{err}");
    }

    #[test]
    fn the_new_types_dispatch_to_their_encoders() {
        let us = Some(Hint::Epoch(TimeUnit::Us));
        assert_eq!(
            encoded(ColumnType::Time, r#""01:00:00""#, None),
            Ok(3_600_000_000i64.to_be_bytes().to_vec())
        );
        assert_eq!(
            encoded(ColumnType::Time, "5", us),
            Ok(5i64.to_be_bytes().to_vec())
        );
        let mut tz = 0i64.to_be_bytes().to_vec();
        tz.extend_from_slice(&(-3600i32).to_be_bytes());
        assert_eq!(
            encoded(ColumnType::Timetz, r#""00:00:00+01""#, None),
            Ok(tz)
        );
        let mut iv = 7i64.to_be_bytes().to_vec();
        iv.extend_from_slice(&0i32.to_be_bytes());
        iv.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(encoded(ColumnType::Interval, "7", us), Ok(iv));
        assert_eq!(
            encoded(ColumnType::Inet, r#""1.2.3.4""#, None),
            Ok(vec![2, 32, 0, 4, 1, 2, 3, 4])
        );
        assert_eq!(
            encoded(ColumnType::Cidr, r#""1.2.0.0/16""#, None),
            Ok(vec![2, 16, 1, 4, 1, 2, 0, 0])
        );
        assert_eq!(
            encoded(ColumnType::Macaddr, r#""01:02:03:04:05:06""#, None),
            Ok(vec![1, 2, 3, 4, 5, 6])
        );
        assert_eq!(
            encoded(ColumnType::Macaddr8, r#""01:02:03:04:05:06""#, None),
            Ok(vec![1, 2, 3, 0xff, 0xfe, 4, 5, 6])
        );
        for (ty, json) in [
            (ColumnType::Inet, "1234"),
            (ColumnType::Cidr, r#""1.2.3.4/16""#),
            (ColumnType::Macaddr, "true"),
            (ColumnType::Time, r#""25:00:00""#),
            (ColumnType::Interval, r#""P1X""#),
        ] {
            assert!(encoded(ty, json, None).is_err(), "{ty:?} {json}");
        }
    }

    #[test]
    fn an_input_is_json_or_plain_text_and_plain_text_reads_as_a_json_string() {
        let json = |text: &str| -> Box<serde_json::value::RawValue> {
            serde_json::from_str(text).unwrap()
        };
        let escaped = json(r#""a\"b""#);
        let number = json("12.5");
        let plain = Input::Str(r#"a"b"#);

        // A JSON string without escapes is borrowed; with them it is decoded once.
        let unescaped = json(r#""ab""#);
        assert!(matches!(
            Input::Json(JsonRef::of(&unescaped)).string(),
            Ok(Some(Cow::Borrowed("ab")))
        ));
        assert!(
            matches!(Input::Json(JsonRef::of(&escaped)).string(), Ok(Some(Cow::Owned(s))) if s == r#"a"b"#)
        );
        assert!(matches!(plain.string(), Ok(Some(Cow::Borrowed(r#"a"b"#)))));
        assert!(matches!(
            Input::Json(JsonRef::of(&number)).string(),
            Ok(None)
        ));

        // Only a non-string JSON value has a literal; plain text never does.
        assert_eq!(Input::Json(JsonRef::of(&number)).literal(), Some("12.5"));
        assert_eq!(Input::Json(JsonRef::of(&escaped)).literal(), None);
        assert_eq!(Input::Str("12.5").literal(), None);

        // As JSON, plain text is quoted, so it reads like the string it stands for.
        assert_eq!(plain.json_text(), r#""a\"b""#);
        assert_eq!(Input::Json(JsonRef::of(&number)).json_text(), "12.5");
        assert_eq!(Input::Str("12.5").shown(), r#""12.5""#);
        let long = "x".repeat(100);
        assert!(Input::Str(&long).shown().ends_with("(102 bytes)"));

        // A plain-text key converts as the JSON string would.
        let mut out = BytesMut::new();
        encode(ColumnType::Int8, Input::Str("42"), None, &mut out).unwrap();
        assert_eq!(out.to_vec(), 42i64.to_be_bytes());
        let mut out = BytesMut::new();
        encode(ColumnType::Jsonb, plain, None, &mut out).unwrap();
        assert_eq!(out.to_vec(), b"\x01\"a\\\"b\"".to_vec());
        let err = encode(
            ColumnType::Int8,
            Input::Str("4.2"),
            None,
            &mut BytesMut::new(),
        );
        assert!(err.unwrap_err().contains("expected an integer"));
    }
}
