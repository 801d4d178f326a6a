//! Numbers into integer, floating-point and numeric columns: strict, so a value is written
//! exactly or refused, never rounded into another integer, wrapped or silently made infinite.

use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use postgres_types::Type;

use super::{abbreviate, to_sql};
use crate::pgcopy::encode_numeric;
use crate::schema::ColumnType;

/// A decimal number as text, into any numeric column type.
pub(super) fn encode_number_text(
    ty: ColumnType,
    text: &str,
    out: &mut BytesMut,
) -> Result<(), String> {
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
pub(super) fn is_json_number(text: &str) -> bool {
    text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// Decodes Connect's Decimal: base64 of a big-endian two's-complement unscaled integer.
pub(super) fn decimal_from_base64(b64: &str, scale: u32) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| format!("decimal is not valid base64: {e}"))?;
    if bytes.len() > 128 {
        return Err("decimal is too long".into());
    }
    let (negative, digits) = twos_complement_digits(&bytes);
    let scale = scale as usize;
    // At least one digit before the point.
    let digits = match (scale + 1).checked_sub(digits.len()) {
        Some(zeros) if zeros > 0 => "0".repeat(zeros) + &digits,
        _ => digits,
    };
    let point = digits.len() - scale;
    let mut text = String::with_capacity(digits.len() + 2);
    if negative {
        text.push('-');
    }
    text.push_str(&digits[..point]);
    if scale > 0 {
        text.push('.');
        text.push_str(&digits[point..]);
    }
    Ok(text)
}

/// The sign and the decimal digits of the magnitude of a big-endian two's-complement
/// integer (Connect's and Avro's unscaled decimals): through `i128` when it fits, by long
/// division when it is wider. No bytes is zero.
pub(crate) fn twos_complement_digits(bytes: &[u8]) -> (bool, String) {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    if bytes.len() <= 16 {
        let fill = if negative { 0xff } else { 0 };
        let mut wide = [fill; 16];
        wide[16 - bytes.len()..].copy_from_slice(bytes);
        return (
            negative,
            i128::from_be_bytes(wide).unsigned_abs().to_string(),
        );
    }
    // Magnitude of a two's-complement number: invert and add one when negative.
    let mut magnitude: Vec<u8> = if negative {
        bytes.iter().map(|b| !b).collect()
    } else {
        bytes.to_vec()
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
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    if digits.is_empty() {
        digits.push('0');
    }
    (negative, digits.iter().rev().collect())
}

/// Partition and offset into any integer or numeric column; a value that does not fit is an
/// error, never wrapped.
pub(super) fn write_int(ty: ColumnType, v: i64, out: &mut BytesMut) -> Result<(), String> {
    match ty {
        ColumnType::Int2 => to_sql(
            i16::try_from(v).map_err(|_| format!("{v} does not fit smallint"))?,
            &Type::INT2,
            out,
        ),
        ColumnType::Int4 => to_sql(
            i32::try_from(v).map_err(|_| format!("{v} does not fit integer"))?,
            &Type::INT4,
            out,
        ),
        ColumnType::Numeric => encode_numeric(&v.to_string(), out).map_err(|e| e.to_string()),
        _ => to_sql(v, &Type::INT8, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_int`'s field bytes, or its error.
    fn int(ty: ColumnType, v: i64) -> Result<Vec<u8>, String> {
        let mut out = BytesMut::new();
        write_int(ty, v, &mut out).map(|()| out.to_vec())
    }

    fn numeric(text: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_numeric(text, &mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn partitions_and_offsets_narrow_to_each_integer_type_at_its_bounds_and_never_wrap() {
        let (min2, max2) = (i64::from(i16::MIN), i64::from(i16::MAX));
        assert_eq!(
            int(ColumnType::Int2, max2),
            Ok(i16::MAX.to_be_bytes().to_vec())
        );
        assert_eq!(
            int(ColumnType::Int2, min2),
            Ok(i16::MIN.to_be_bytes().to_vec())
        );
        for v in [max2 + 1, min2 - 1, i64::MAX, i64::MIN] {
            assert_eq!(
                int(ColumnType::Int2, v),
                Err(format!("{v} does not fit smallint"))
            );
        }

        let (min4, max4) = (i64::from(i32::MIN), i64::from(i32::MAX));
        assert_eq!(
            int(ColumnType::Int4, max4),
            Ok(i32::MAX.to_be_bytes().to_vec())
        );
        assert_eq!(
            int(ColumnType::Int4, min4),
            Ok(i32::MIN.to_be_bytes().to_vec())
        );
        assert_eq!(
            int(ColumnType::Int4, max2 + 1),
            Ok(32_768i32.to_be_bytes().to_vec())
        );
        for v in [max4 + 1, min4 - 1, i64::MAX, i64::MIN] {
            assert_eq!(
                int(ColumnType::Int4, v),
                Err(format!("{v} does not fit integer"))
            );
        }

        for v in [i64::MAX, i64::MIN, 0, -1] {
            assert_eq!(int(ColumnType::Int8, v), Ok(v.to_be_bytes().to_vec()));
        }
    }

    #[test]
    fn integers_into_numeric_keep_every_digit_of_i64() {
        // 42: one base-10000 digit, weight 0, positive, no scale.
        assert_eq!(
            int(ColumnType::Numeric, 42),
            Ok(vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 42])
        );
        for v in [i64::MAX, i64::MIN, 0, -1] {
            assert_eq!(
                int(ColumnType::Numeric, v),
                Ok(numeric(&v.to_string())),
                "{v}"
            );
        }
        assert_ne!(
            int(ColumnType::Numeric, i64::MAX),
            int(ColumnType::Numeric, i64::MAX - 1),
            "no rounding through a float"
        );
    }
}
