//! Registry formats (Avro, Protobuf, JSON Schema) become JSON text before they are mapped, so
//! every column source, conversion and mode works for them exactly as for JSON. A transcoder
//! is built once per schema id (ids are immutable) and reused for every record of that id.
//!
//! What each format's values become, so the JSON converters take them without a hint:
//! bytes and fixed → base64 strings; decimals → JSON numbers with their exact digits; dates →
//! `YYYY-MM-DD`; timestamps → RFC 3339 in UTC (`…Z`, every digit of the unit), local
//! timestamps → the same without a zone; years outside 0000–9999 signed (`+10000-01-01`), as
//! chrono reads them; times of day → `HH:MM:SS.ffffff` (nine digits for nanoseconds);
//! durations → `{"months":…,"days":…,"millis":…}`; UUIDs and enums → strings; records and
//! maps → objects; arrays → arrays; unions → their branch; a string declared to hold JSON →
//! that JSON; NaN and infinities → the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.

use std::ops::Range;
use std::sync::Arc;

use crate::registry::{RegisteredSchema, SchemaKind};

/// A schema compiled for decoding: one record's payload into JSON text.
pub(crate) trait Transcoder: Send + Sync {
    /// `payload` is the record value (or key) after the Confluent wire header (magic byte 0
    /// and the 4-byte schema id); for Protobuf it still starts with the message-index array.
    /// Appends one JSON value to `out`. An error says what in the payload is wrong.
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String>;

    /// Whether `to_json` refuses values nested deeper than `MAX_JSON_DEPTH` itself, so the
    /// mapping need not scan its JSON again for depth.
    fn bounds_nesting(&self) -> bool {
        false
    }

    /// The top-level record's field names in the order `to_json_fields` reports them, when
    /// this decoder can report them (its values are records).
    fn top_fields(&self) -> Option<Vec<String>> {
        None
    }

    /// `to_json`, also pushing onto `spans` where in `out` each top-level field's value was
    /// written (in `top_fields` order), so the mapping takes them without scanning the object
    /// again. Each span holds exactly one JSON value. Without `top_fields`, pushes nothing.
    fn to_json_fields(
        &self,
        payload: &[u8],
        out: &mut String,
        spans: &mut Vec<Range<usize>>,
    ) -> Result<(), String> {
        let _ = spans;
        self.to_json(payload, out)
    }
}

/// A learnt schema's decoder, with what the mapping needs to take its fields directly.
#[derive(Clone)]
pub(crate) struct Decoder {
    pub(crate) transcoder: Arc<dyn Transcoder>,
    /// Per top-level field (in `top_fields` order): the slot of the column(s) reading it.
    /// `None` when the mapping scans the JSON instead (Debezium envelopes, keys, no fields).
    pub(crate) slots: Option<Arc<[Option<usize>]>>,
}

/// The Confluent wire format's header: magic byte 0, then the schema id, big-endian.
pub(crate) fn split_header(bytes: &[u8]) -> Result<(u32, &[u8]), String> {
    match bytes {
        [0, a, b, c, d, payload @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), payload)),
        [magic, ..] if *magic != 0 => Err(format!(
            "the first byte is {magic:#04x}, not the magic byte 0 of a registry-encoded record"
        )),
        _ => Err(format!(
            "{} bytes, shorter than the 5-byte header (magic byte and schema id)",
            bytes.len()
        )),
    }
}

/// The decoder for a registered schema.
pub(crate) fn build(schema: &RegisteredSchema) -> Result<Arc<dyn Transcoder>, String> {
    Ok(match schema.kind {
        SchemaKind::Avro => Arc::new(super::avro::AvroTranscoder::new(&schema.text)?),
        SchemaKind::Protobuf => Arc::new(super::protobuf::ProtobufTranscoder::registered(schema)?),
        SchemaKind::Json => Arc::new(super::json_schema::JsonSchemaTranscoder::new(&schema.text)?),
    })
}

#[cfg(test)]
mod tests {
    use super::split_header;

    #[test]
    fn the_header_gives_the_schema_id_and_the_payload() {
        assert_eq!(
            split_header(&[0, 0, 0, 1, 2, 9, 9]),
            Ok((258, &[9u8, 9][..]))
        );
        assert_eq!(split_header(&[0, 0, 0, 0, 7]), Ok((7, &[][..])));
        assert!(split_header(&[1, 0, 0, 0, 7])
            .unwrap_err()
            .contains("magic byte"));
        assert!(split_header(b"{\"id\":1}").unwrap_err().contains("0x7b"));
        assert!(split_header(&[0, 0, 1]).unwrap_err().contains("shorter"));
        assert!(split_header(&[]).is_err());
    }
}
