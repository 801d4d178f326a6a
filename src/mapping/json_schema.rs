//! JSON Schema records (Confluent's wire format): the payload after the header already is JSON
//! text, so it is only checked and copied, and maps exactly as a plain JSON record does.
//!
//! Records are not validated against the schema: the registry's serializer validates on the
//! producer's side, and the table's columns and converters are what the sink enforces. The
//! schema is only checked to be JSON, so a registry answer that is not a schema fails when the
//! transcoder is built, not on every record.

use serde::de::IgnoredAny;

use super::transcode::Transcoder;

/// A registered JSON Schema; holds nothing, since records are not validated against it.
pub(crate) struct JsonSchemaTranscoder;

impl JsonSchemaTranscoder {
    /// Checks that `schema_text` is JSON; what it says is not used.
    pub(crate) fn new(schema_text: &str) -> Result<Self, String> {
        serde_json::from_str::<IgnoredAny>(schema_text)
            .map_err(|e| format!("the JSON Schema is not JSON: {e}"))?;
        Ok(Self)
    }
}

impl Transcoder for JsonSchemaTranscoder {
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        let text = std::str::from_utf8(payload).map_err(|e| {
            format!(
                "the payload is not UTF-8 (byte {} is not): JSON Schema records are JSON text",
                e.valid_up_to()
            )
        })?;
        // One whole JSON value: trailing text after it is an error too.
        serde_json::from_str::<IgnoredAny>(text)
            .map_err(|e| format!("the payload is not JSON: {e}"))?;
        out.push_str(text);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(payload: &[u8]) -> Result<String, String> {
        let mut out = String::from("before:");
        JsonSchemaTranscoder::new(r#"{"type":"object"}"#)?.to_json(payload, &mut out)?;
        Ok(out)
    }

    #[test]
    fn the_payload_is_copied_as_it_is() {
        let record = r#"{"id": 7, "name": "a\"b", "tags": ["x"], "n": 1.50}"#;
        assert_eq!(json(record.as_bytes()), Ok(format!("before:{record}")));
        assert_eq!(json(b" 12 "), Ok("before: 12 ".into()));
    }

    #[test]
    fn a_payload_that_is_not_one_json_value_is_refused() {
        let err = json(b"{\"id\": 1").unwrap_err();
        assert!(err.starts_with("the payload is not JSON"), "{err}");
        let err = json(b"{} {}").unwrap_err();
        assert!(err.contains("trailing characters"), "{err}");
        let err = json(b"").unwrap_err();
        assert!(err.starts_with("the payload is not JSON"), "{err}");
        let err = json(b"\"caf\xe9\"").unwrap_err();
        assert!(err.contains("not UTF-8 (byte 4"), "{err}");
    }

    #[test]
    fn a_schema_that_is_not_json_is_refused_when_built() {
        let err = JsonSchemaTranscoder::new("type: object").err().unwrap();
        assert!(err.starts_with("the JSON Schema is not JSON"), "{err}");
        // Not validated against, so any JSON is taken, even one no validator would.
        assert!(JsonSchemaTranscoder::new("true").is_ok());
    }

    #[test]
    fn deep_nesting_is_checked_without_recursing() {
        // The check walks the text with a stack of its own: no depth overflows it. How deep a
        // record may nest is the mapping's limit (`MAX_JSON_DEPTH`), applied after this.
        let n = 100_000;
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(json(deep.as_bytes()).map(|s| s.len()), Ok(7 + 2 * n));
        let err = json(&deep.as_bytes()[..2 * n - 1]).unwrap_err();
        assert!(err.contains("EOF while parsing a list"), "{err}");
    }
}
