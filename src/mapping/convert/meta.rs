//! A record's metadata (topic, partition, offset, timestamp, key, headers) into the column
//! that names it, fitted to that column's type.

use bytes::BufMut;
use chrono::DateTime;
use postgres_types::Type;
use serde_json::value::RawValue;

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
                    encode(col.ty, Input::Json(raw), None, out)
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
