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

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_raw`'s field bytes, or its error.
    fn raw(ty: ColumnType, bytes: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = BytesMut::new();
        write_raw(ty, bytes, &mut out).map(|()| out.to_vec())
    }

    #[test]
    fn a_raw_value_goes_in_whole_or_is_refused_with_the_reason() {
        let any = [0xff, 0x00, b'x'];
        assert_eq!(raw(ColumnType::Bytea, &any), Ok(any.to_vec()));

        assert_eq!(
            raw(ColumnType::Text, "héllo".as_bytes()),
            Ok("héllo".into())
        );
        let err = raw(ColumnType::Text, &any).unwrap_err();
        assert!(err.contains("not UTF-8 text"), "{err}");
        let err = raw(ColumnType::Text, b"a\0b").unwrap_err();
        assert!(err.contains("NUL"), "{err}");

        let sent = br#"{"b": 1,  "a": [true]}"#;
        assert_eq!(raw(ColumnType::Json, sent), Ok(sent.to_vec()), "as sent");
        let mut jsonb = vec![1u8];
        jsonb.extend_from_slice(sent);
        assert_eq!(raw(ColumnType::Jsonb, sent), Ok(jsonb));
        for ty in [ColumnType::Json, ColumnType::Jsonb] {
            let err = raw(ty, b"{not json").unwrap_err();
            assert!(err.contains("not JSON"), "{err}");
            let err = raw(ty, &any).unwrap_err();
            assert!(err.contains("not UTF-8 JSON"), "{err}");
            let err = raw(ty, br#"{"a":"\u0000"}"#).unwrap_err();
            assert!(err.contains("\\u0000"), "{err}");
        }
    }
}
