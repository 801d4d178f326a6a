//! Text and JSON as PostgreSQL stores them: NUL refused where text or json cannot hold it,
//! JSON written as sent, and a raw value whole into json, jsonb, text or bytea.

use bytes::{BufMut, BytesMut};
use serde::de::IgnoredAny;

use crate::schema::ColumnType;

/// PostgreSQL text cannot hold NUL; catching it here names the field instead of failing the batch.
pub(super) fn check_text(s: &str) -> Result<(), String> {
    if s.contains('\0') {
        return Err("text cannot contain the NUL character (\\u0000)".into());
    }
    Ok(())
}

/// json and jsonb reject `\u0000` escapes; the rest of the text is valid JSON already.
pub(super) fn check_json_text(text: &str) -> Result<(), String> {
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

/// The text goes in as is, never re-serialised; jsonb's binary form is that text after a
/// version byte.
pub(super) fn write_json_text(
    ty: ColumnType,
    text: &str,
    out: &mut BytesMut,
) -> Result<(), String> {
    check_json_text(text)?;
    if ty == ColumnType::Jsonb {
        out.put_u8(1); // jsonb binary format version
    }
    out.put_slice(text.as_bytes());
    Ok(())
}

/// The whole value into a json, jsonb, text or bytea column.
pub(crate) fn write_raw(ty: ColumnType, bytes: &[u8], out: &mut BytesMut) -> Result<(), String> {
    match ty {
        ColumnType::Bytea => out.put_slice(bytes),
        ColumnType::Text => {
            let s = std::str::from_utf8(bytes)
                .map_err(|_| "the value is not UTF-8 text".to_string())?;
            check_text(s)?;
            out.put_slice(bytes);
        }
        _ => {
            let s = std::str::from_utf8(bytes)
                .map_err(|_| "the value is not UTF-8 JSON".to_string())?;
            serde_json::from_str::<IgnoredAny>(s)
                .map_err(|e| format!("the value is not JSON: {e}"))?;
            check_json_text(s)?;
            if ty == ColumnType::Jsonb {
                out.put_u8(1);
            }
            out.put_slice(bytes);
        }
    }
    Ok(())
}
