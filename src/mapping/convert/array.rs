//! A JSON array into a one-dimensional PostgreSQL array, in the binary form `array_recv`
//! reads: each element goes through the element type's scalar converter, so an element is
//! accepted or refused exactly as a column of that type would take or refuse it.
//!
//! The form: the number of dimensions (1, or 0 for an empty array), a flag saying whether any
//! element is NULL, the element type's OID, then per dimension its length and lower bound (1,
//! as PostgreSQL's own arrays start), then each element as a COPY field is written: a length,
//! -1 for NULL, and the element's binary form.

use bytes::{BufMut, BytesMut};
use serde_json::value::RawValue;

use super::{encode_scalar, Hint, Input};
use crate::mapping::pointer::JsonRef;
use crate::schema::ArrayOf;

/// Writes `input`, which must be a JSON array of scalars (or nulls), as an array of
/// `of.element`. A scalar is refused rather than wrapped in a one-element array: a producer
/// sending `5` where a list belongs has a bug the table should not hide. A nested array is
/// refused as well: a column holds one dimension here, and guessing a rectangular shape from
/// ragged JSON would be wrong for some record.
pub(super) fn write_array(
    of: ArrayOf,
    input: Input<'_>,
    hint: Option<Hint>,
    out: &mut BytesMut,
) -> Result<(), String> {
    let elements = elements(input)?;
    if elements.is_empty() {
        // No dimensions at all: PostgreSQL's empty array is `{}`, not one dimension of length 0.
        out.put_i32(0);
        out.put_i32(0);
        out.put_u32(of.element_oid);
        return Ok(());
    }
    let count = i32::try_from(elements.len())
        .map_err(|_| format!("{} elements are too many for an array", elements.len()))?;
    out.put_i32(1);
    let flag_at = out.len();
    out.put_i32(0);
    out.put_u32(of.element_oid);
    out.put_i32(count);
    out.put_i32(1);
    let mut has_null = false;
    for (i, element) in elements.iter().enumerate() {
        // Subscripts as PostgreSQL counts them, so the message matches `SELECT col[n]`.
        let n = i + 1;
        let text = element.get();
        if text == "null" {
            out.put_i32(-1);
            has_null = true;
            continue;
        }
        if text.starts_with('[') {
            return Err(format!(
                "element {n} is an array: multi-dimensional arrays are not supported"
            ));
        }
        let at = out.len();
        out.put_i32(0);
        encode_scalar(*of.element, Input::Json(JsonRef::of(element)), hint, out)
            .map_err(|e| format!("element {n}: {e}"))?;
        let len = i32::try_from(out.len() - at - 4)
            .map_err(|_| format!("element {n} is too large for PostgreSQL"))?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    if has_null {
        out[flag_at..flag_at + 4].copy_from_slice(&1i32.to_be_bytes());
    }
    Ok(())
}

/// The elements of a JSON array, each still unparsed; anything else is an error naming what
/// came instead (a string such as `"{1,2}"`, PostgreSQL's text form, included).
fn elements<'a>(input: Input<'a>) -> Result<Vec<&'a RawValue>, String> {
    match input {
        Input::Json(raw) if raw.get().starts_with('[') => {
            serde_json::from_str(raw.get()).map_err(|e| e.to_string())
        }
        _ => Err(format!("expected a JSON array, got {}", input.shown())),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::schema::ColumnType;

    /// An array as the test reads it back from the binary form: element OID, dimensions
    /// (length, lower bound), and each element's bytes or NULL. Written from PostgreSQL's
    /// `array_recv`, independently of the encoder, and strict about every field.
    #[derive(Debug, PartialEq)]
    struct Decoded {
        element_oid: u32,
        dims: Vec<(i32, i32)>,
        elements: Vec<Option<Vec<u8>>>,
    }

    fn decode(bytes: &[u8]) -> Decoded {
        let mut at = 0;
        let mut take = |n: usize| {
            let part = &bytes[at..at + n];
            at += n;
            part
        };
        let int = |b: &[u8]| i32::from_be_bytes(b.try_into().unwrap());
        let ndim = int(take(4));
        let flags = int(take(4));
        let element_oid = u32::from_be_bytes(take(4).try_into().unwrap());
        let dims: Vec<(i32, i32)> = (0..ndim).map(|_| (int(take(4)), int(take(4)))).collect();
        let count: i32 = dims.iter().map(|d| d.0).product::<i32>() * i32::from(ndim > 0);
        let mut elements = Vec::new();
        for _ in 0..count {
            let len = int(take(4));
            elements.push((len >= 0).then(|| take(len as usize).to_vec()));
        }
        assert_eq!(at, bytes.len(), "nothing after the last element");
        assert_eq!(
            flags,
            i32::from(elements.iter().any(Option::is_none)),
            "the has-null flag"
        );
        Decoded {
            element_oid,
            dims,
            elements,
        }
    }

    const INT8_OID: u32 = 20;

    fn array_of(element: &'static ColumnType, element_oid: u32) -> ArrayOf {
        ArrayOf {
            element,
            element_oid,
        }
    }

    fn json(text: &str) -> Box<RawValue> {
        serde_json::from_str(text).unwrap()
    }

    fn written(of: ArrayOf, text: &str) -> Result<Vec<u8>, String> {
        let raw = json(text);
        let mut out = BytesMut::new();
        write_array(of, Input::Json(JsonRef::of(&raw)), None, &mut out).map(|()| out.to_vec())
    }

    /// What a scalar column of the element type gets for `text`.
    fn scalar(ty: ColumnType, text: &str) -> Result<Vec<u8>, String> {
        let raw = json(text);
        let mut out = BytesMut::new();
        encode_scalar(ty, Input::Json(JsonRef::of(&raw)), None, &mut out).map(|()| out.to_vec())
    }

    #[test]
    fn elements_are_written_as_their_scalar_columns_with_nulls_flagged() {
        let of = array_of(&ColumnType::Int8, INT8_OID);
        let decoded = decode(&written(of, r#"[1, null, "-7"]"#).unwrap());
        assert_eq!(
            decoded,
            Decoded {
                element_oid: INT8_OID,
                dims: vec![(3, 1)],
                elements: vec![
                    Some(1i64.to_be_bytes().to_vec()),
                    None,
                    Some((-7i64).to_be_bytes().to_vec())
                ],
            }
        );
        // The declared element OID is written, whatever the base type (an enum's, a domain's).
        let enum_oid = 16_385;
        let decoded = decode(&written(array_of(&ColumnType::Text, enum_oid), r#"["a"]"#).unwrap());
        assert_eq!(decoded.element_oid, enum_oid);
        assert_eq!(decoded.elements, vec![Some(b"a".to_vec())]);
    }

    #[test]
    fn an_empty_array_has_no_dimensions() {
        let of = array_of(&ColumnType::Text, 25);
        assert_eq!(
            decode(&written(of, "[]").unwrap()),
            Decoded {
                element_oid: 25,
                dims: vec![],
                elements: vec![],
            }
        );
        assert_eq!(decode(&written(of, " [ ] ").unwrap()).dims, vec![]);
    }

    #[test]
    fn nested_arrays_scalars_and_bad_elements_are_refused_by_name() {
        let ints = array_of(&ColumnType::Int4, 23);
        let err = written(ints, "[[1, 2], [3, 4]]").unwrap_err();
        assert!(
            err.contains("element 1 is an array: multi-dimensional"),
            "{err}"
        );
        let err = written(ints, "[1, [2]]").unwrap_err();
        assert!(err.contains("element 2 is an array"), "{err}");
        // Even where a scalar column would keep an array as JSON text.
        for open in [&ColumnType::Text, &ColumnType::Jsonb] {
            let err = written(array_of(open, 25), r#"["a", []]"#).unwrap_err();
            assert!(err.contains("multi-dimensional"), "{err}");
        }
        // A scalar is never wrapped, and PostgreSQL's text form is not parsed.
        for not_an_array in ["5", r#""{1,2}""#, r#"{"a": 1}"#, "true"] {
            let err = written(ints, not_an_array).unwrap_err();
            assert!(
                err.contains("expected a JSON array"),
                "{not_an_array}: {err}"
            );
        }
        let mut out = BytesMut::new();
        let err = write_array(ints, Input::Str("[1]"), None, &mut out).unwrap_err();
        assert!(err.contains(r#"expected a JSON array, got "[1]""#), "{err}");
        // A bad element says which one and why, in the scalar converter's words.
        let err = written(ints, "[1, 2, 1.5]").unwrap_err();
        assert!(err.starts_with("element 3: expected an integer"), "{err}");
        let err = written(ints, "[1, 2147483648]").unwrap_err();
        assert!(
            err.contains("element 2: 2147483648 is out of range"),
            "{err}"
        );
        let err = written(array_of(&ColumnType::Text, 25), r#"["a\u0000"]"#).unwrap_err();
        assert!(
            err.contains("element 1: text cannot contain the NUL"),
            "{err}"
        );
    }

    #[test]
    fn an_element_cannot_itself_be_an_array_type() {
        let inner = ColumnType::Array(array_of(&ColumnType::Int4, 23));
        let nested: &'static ColumnType = Box::leak(Box::new(inner));
        let err = written(array_of(nested, 1007), "[1]").unwrap_err();
        assert!(err.contains("cannot be an array"), "{err}");
    }

    /// Every scalar type the sink writes, with a stand-in element OID.
    const SCALARS: &[ColumnType] = &[
        ColumnType::Text,
        ColumnType::Int2,
        ColumnType::Int4,
        ColumnType::Int8,
        ColumnType::Numeric,
        ColumnType::Float4,
        ColumnType::Float8,
        ColumnType::Bool,
        ColumnType::Timestamptz,
        ColumnType::Timestamp,
        ColumnType::Date,
        ColumnType::Uuid,
        ColumnType::Json,
        ColumnType::Jsonb,
        ColumnType::Bytea,
    ];

    /// JSON values of every shape the converters tell apart, valid and not for each type.
    fn element() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::{json, Value};
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-40_000i32..40_000).prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
            "[0-9]{1,6}(\\.[0-9]{1,4})?".prop_map(Value::String),
            "(true|false|NaN|Infinity)".prop_map(Value::String),
            "[0-9]{4}-(0[1-9]|1[0-2])-[0-2][0-9]( [0-2][0-9]:[0-5][0-9]:[0-5][0-9])?"
                .prop_map(Value::String),
            any::<[u8; 16]>().prop_map(|b| Value::String(uuid::Uuid::from_bytes(b).to_string())),
            "([A-Za-z0-9+/]{4}){0,4}".prop_map(Value::String),
            any::<i32>().prop_map(|n| json!({ "n": n })),
        ]
    }

    proptest! {
        /// The array form round-trips through the decoder, and an element is taken or refused
        /// exactly as a scalar column of its type takes or refuses the same value.
        #[test]
        fn each_element_converts_as_its_scalar_column_would(
            ty in proptest::sample::select(SCALARS),
            values in proptest::collection::vec(element(), 0..8),
        ) {
            let elem: &'static ColumnType = SCALARS.iter().find(|t| **t == ty).unwrap();
            let of = array_of(elem, 4242);
            let text = serde_json::to_string(&values).unwrap();
            let expected: Vec<Result<Option<Vec<u8>>, String>> = values
                .iter()
                .map(|v| match v {
                    serde_json::Value::Null => Ok(None),
                    v => scalar(ty, &v.to_string()).map(Some),
                })
                .collect();
            match written(of, &text) {
                Ok(bytes) => {
                    let decoded = decode(&bytes);
                    prop_assert_eq!(decoded.element_oid, 4242);
                    let dims = if values.is_empty() { vec![] } else { vec![(values.len() as i32, 1)] };
                    prop_assert_eq!(decoded.dims, dims);
                    let scalars: Result<Vec<_>, _> = expected.into_iter().collect();
                    prop_assert_eq!(Ok(decoded.elements), scalars);
                }
                Err(err) => {
                    let first = expected.iter().position(Result::is_err);
                    prop_assert!(first.is_some(), "refused, yet every element converts: {}", err);
                    let n = first.unwrap();
                    let reason = expected[n].clone().unwrap_err();
                    prop_assert_eq!(err, format!("element {}: {}", n + 1, reason));
                }
            }
        }

        /// Typed round trips: integers and text (any Unicode but NUL, escapes included) come
        /// back as the values that were sent, NULLs where they were.
        #[test]
        fn integers_and_text_come_back_as_sent(
            ints in proptest::collection::vec(proptest::option::of(any::<i64>()), 0..20),
            texts in proptest::collection::vec(proptest::option::of("[^\u{0}]*"), 0..20),
        ) {
            let decoded = decode(&written(
                array_of(&ColumnType::Int8, INT8_OID),
                &serde_json::to_string(&ints).unwrap(),
            ).unwrap());
            let back: Vec<Option<i64>> = decoded
                .elements
                .into_iter()
                .map(|e| e.map(|b| i64::from_be_bytes(b.try_into().unwrap())))
                .collect();
            prop_assert_eq!(back, ints);

            let decoded = decode(&written(
                array_of(&ColumnType::Text, 25),
                &serde_json::to_string(&texts).unwrap(),
            ).unwrap());
            let back: Vec<Option<String>> = decoded
                .elements
                .into_iter()
                .map(|e| e.map(|b| String::from_utf8(b).unwrap()))
                .collect();
            prop_assert_eq!(back, texts);
        }
    }
}
