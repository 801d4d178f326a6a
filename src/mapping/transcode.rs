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

/// A schema compiled for decoding: one record's payload into JSON text.
#[allow(dead_code)] // wired into encode with the registry formats
pub(crate) trait Transcoder: Send + Sync {
    /// `payload` is the record value (or key) after the Confluent wire header (magic byte 0
    /// and the 4-byte schema id); for Protobuf it still starts with the message-index array.
    /// Appends one JSON value to `out`. An error says what in the payload is wrong.
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String>;
}
