//! A record's metadata (topic, partition, offset, timestamp, key, headers) into the column
//! that names it, fitted to that column's type.

use bytes::BufMut;
use chrono::DateTime;
use postgres_types::Type;
use serde_json::value::RawValue;

use crate::mapping::pointer::JsonRef;

use super::number::write_int;
use super::text::{check_json_text, check_text};
use super::{encode, to_sql, Input};
use crate::mapping::Meta;
use crate::pgcopy::CopyBuffer;
use crate::record::RecordView;
use crate::schema::{Column, ColumnType};

/// Metadata fitted to the column's type (a timestamp into timestamptz, timestamp or bigint; a
/// key into bytea, text or json), so tables keep their own layout.
pub(crate) fn write_meta(
    meta: &Meta,
    col: &Column,
    r: &RecordView<'_>,
    copy: &mut CopyBuffer,
) -> Result<(), String> {
    match meta {
        Meta::Topic => {
            copy.bytes(r.topic.as_bytes());
            Ok(())
        }
        Meta::Partition => copy.field(|out| write_int(col.ty, r.partition as i64, out)),
        Meta::Offset => copy.field(|out| write_int(col.ty, r.offset, out)),
        Meta::Timestamp => match r.timestamp {
            None => {
                copy.null();
                Ok(())
            }
            Some(ms) => copy.field(|out| {
                let t = DateTime::from_timestamp_millis(ms)
                    .ok_or_else(|| format!("timestamp {ms} out of range"))?;
                match col.ty {
                    ColumnType::Timestamptz => to_sql(t, &Type::TIMESTAMPTZ, out),
                    ColumnType::Timestamp => to_sql(t.naive_utc(), &Type::TIMESTAMP, out),
                    _ => to_sql(ms, &Type::INT8, out),
                }
            }),
        },
        Meta::Key => match r.key {
            None => {
                copy.null();
                Ok(())
            }
            Some(key) => copy.field(|out| match col.ty {
                ColumnType::Bytea => {
                    out.put_slice(key);
                    Ok(())
                }
                ColumnType::Text => {
                    let s = std::str::from_utf8(key)
                        .map_err(|_| "the record key is not UTF-8".to_string())?;
                    check_text(s)?;
                    out.put_slice(key);
                    Ok(())
                }
                _ => {
                    let s = std::str::from_utf8(key)
                        .map_err(|_| "the record key is not UTF-8 JSON".to_string())?;
                    let raw: &RawValue = serde_json::from_str(s)
                        .map_err(|e| format!("the record key is not JSON: {e}"))?;
                    encode(col.ty, Input::Json(JsonRef::of(raw)), None, out)
                }
            }),
        },
        // The last header of that name, as the record's newest word on it.
        Meta::Header(name) => match r.headers.iter().rev().find(|(k, _)| *k == name.as_bytes()) {
            Some((_, Some(value))) => copy.field(|out| {
                if col.ty == ColumnType::Text {
                    let s = std::str::from_utf8(value).map_err(|_| {
                        format!("header {name:?} is not UTF-8; a bytea column keeps any value")
                    })?;
                    if s.contains('\0') {
                        return Err(format!(
                            "header {name:?} holds NUL, which text cannot store; a bytea column keeps any value"
                        ));
                    }
                }
                out.put_slice(value);
                Ok(())
            }),
            _ => {
                copy.null();
                Ok(())
            }
        },
        Meta::Headers => copy.field(|out| {
            let text = crate::headers::to_json(r.headers.iter().copied()).to_string();
            check_json_text(&text)?;
            if col.ty == ColumnType::Jsonb {
                out.put_u8(1);
            }
            out.put_slice(text.as_bytes());
            Ok(())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::Header;

    const HEADERS: &[Header<'static>] = &[
        (b"trace", Some(b"first")),
        (b"bin", Some(&[0xff, 0x00])),
        (b"nul", Some(b"a\0b")),
        (b"empty", None),
        (b"trace", Some(b"last")),
    ];

    fn record() -> RecordView<'static> {
        RecordView {
            topic: "orders",
            partition: 3,
            offset: 42,
            timestamp: Some(1_700_000_000_123),
            key: Some(br#"{"id": 7}"#),
            value: Some(b"{}"),
            headers: HEADERS,
        }
    }

    /// The one field `write_meta` writes: `None` for NULL, or the error.
    fn written(meta: Meta, ty: ColumnType, r: &RecordView<'_>) -> Result<Option<Vec<u8>>, String> {
        let col = Column {
            name: "c".into(),
            ty,
            sql_type: format!("{ty:?}").to_lowercase(),
            not_null: false,
            has_default: false,
            default_sql: None,
        };
        let mut copy = CopyBuffer::new();
        let mark = copy.begin_row(1);
        let start = copy.len();
        write_meta(&meta, &col, r, &mut copy)?;
        copy.end_row(mark);
        let field = &copy.as_bytes()[start..];
        let len = i32::from_be_bytes(field[..4].try_into().unwrap());
        assert_eq!(
            field.len(),
            4 + len.max(0) as usize,
            "one field, nothing else"
        );
        Ok((len >= 0).then(|| field[4..].to_vec()))
    }

    #[test]
    fn topic_partition_and_offset_fit_their_columns() {
        let r = record();
        assert_eq!(
            written(Meta::Topic, ColumnType::Text, &r),
            Ok(Some(b"orders".to_vec()))
        );
        assert_eq!(
            written(Meta::Partition, ColumnType::Int2, &r),
            Ok(Some(3i16.to_be_bytes().to_vec()))
        );
        assert_eq!(
            written(Meta::Partition, ColumnType::Int4, &r),
            Ok(Some(3i32.to_be_bytes().to_vec()))
        );
        assert_eq!(
            written(Meta::Offset, ColumnType::Int8, &r),
            Ok(Some(42i64.to_be_bytes().to_vec()))
        );
        let wide = RecordView {
            partition: 40_000,
            ..record()
        };
        let err = written(Meta::Partition, ColumnType::Int2, &wide).unwrap_err();
        assert_eq!(err, "40000 does not fit smallint");
    }

    #[test]
    fn the_timestamp_fits_timestamptz_timestamp_or_bigint_and_a_missing_one_is_null() {
        let r = record();
        // PostgreSQL counts microseconds from 2000-01-01.
        let pg = (1_700_000_000_123i64 * 1000 - 946_684_800_000_000).to_be_bytes();
        assert_eq!(
            written(Meta::Timestamp, ColumnType::Timestamptz, &r),
            Ok(Some(pg.to_vec()))
        );
        assert_eq!(
            written(Meta::Timestamp, ColumnType::Timestamp, &r),
            Ok(Some(pg.to_vec()))
        );
        assert_eq!(
            written(Meta::Timestamp, ColumnType::Int8, &r),
            Ok(Some(1_700_000_000_123i64.to_be_bytes().to_vec()))
        );
        let none = RecordView {
            timestamp: None,
            ..record()
        };
        assert_eq!(
            written(Meta::Timestamp, ColumnType::Timestamptz, &none),
            Ok(None)
        );
        let far = RecordView {
            timestamp: Some(i64::MAX),
            ..record()
        };
        let err = written(Meta::Timestamp, ColumnType::Timestamptz, &far).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
    }

    #[test]
    fn the_key_fits_bytea_text_or_json_and_a_missing_one_is_null() {
        let r = record();
        let key = br#"{"id": 7}"#.to_vec();
        assert_eq!(
            written(Meta::Key, ColumnType::Bytea, &r),
            Ok(Some(key.clone()))
        );
        assert_eq!(
            written(Meta::Key, ColumnType::Text, &r),
            Ok(Some(key.clone()))
        );
        assert_eq!(
            written(Meta::Key, ColumnType::Json, &r),
            Ok(Some(key.clone()))
        );
        let mut jsonb = vec![1u8];
        jsonb.extend_from_slice(&key);
        assert_eq!(written(Meta::Key, ColumnType::Jsonb, &r), Ok(Some(jsonb)));

        let none = RecordView {
            key: None,
            ..record()
        };
        assert_eq!(written(Meta::Key, ColumnType::Text, &none), Ok(None));

        let binary = RecordView {
            key: Some(&[0xff, 0x00]),
            ..record()
        };
        assert_eq!(
            written(Meta::Key, ColumnType::Bytea, &binary),
            Ok(Some(vec![0xff, 0x00]))
        );
        let err = written(Meta::Key, ColumnType::Text, &binary).unwrap_err();
        assert!(err.contains("not UTF-8"), "{err}");
        let err = written(Meta::Key, ColumnType::Json, &binary).unwrap_err();
        assert!(err.contains("not UTF-8 JSON"), "{err}");

        let plain = RecordView {
            key: Some(b"o-1"),
            ..record()
        };
        let err = written(Meta::Key, ColumnType::Jsonb, &plain).unwrap_err();
        assert!(err.contains("not JSON"), "{err}");
        let nul = RecordView {
            key: Some(b"a\0b"),
            ..record()
        };
        let err = written(Meta::Key, ColumnType::Text, &nul).unwrap_err();
        assert!(err.contains("NUL"), "{err}");
    }

    #[test]
    fn a_header_column_takes_the_last_header_of_its_name_or_null() {
        let r = record();
        let header = |name: &str| Meta::Header(name.into());
        assert_eq!(
            written(header("trace"), ColumnType::Text, &r),
            Ok(Some(b"last".to_vec())),
            "the last of a repeated name"
        );
        assert_eq!(written(header("absent"), ColumnType::Text, &r), Ok(None));
        assert_eq!(written(header("empty"), ColumnType::Bytea, &r), Ok(None));
        assert_eq!(
            written(header("bin"), ColumnType::Bytea, &r),
            Ok(Some(vec![0xff, 0x00]))
        );
        assert_eq!(
            written(header("nul"), ColumnType::Bytea, &r),
            Ok(Some(b"a\0b".to_vec()))
        );
        let err = written(header("bin"), ColumnType::Text, &r).unwrap_err();
        assert!(err.contains("\"bin\" is not UTF-8"), "{err}");
        let err = written(header("nul"), ColumnType::Text, &r).unwrap_err();
        assert!(err.contains("\"nul\" holds NUL"), "{err}");
    }

    #[test]
    fn the_headers_column_takes_every_header_as_json() {
        let r = RecordView {
            headers: &[(b"a", Some(b"1")), (b"a", None)],
            ..record()
        };
        let json = br#"[{"name":"a","value":"1"},{"name":"a","value":null}]"#.to_vec();
        assert_eq!(
            written(Meta::Headers, ColumnType::Json, &r),
            Ok(Some(json.clone()))
        );
        let mut jsonb = vec![1u8];
        jsonb.extend_from_slice(&json);
        assert_eq!(
            written(Meta::Headers, ColumnType::Jsonb, &r),
            Ok(Some(jsonb))
        );
        let none = RecordView {
            headers: &[],
            ..record()
        };
        assert_eq!(
            written(Meta::Headers, ColumnType::Json, &none),
            Ok(Some(b"[]".to_vec()))
        );
    }
}
