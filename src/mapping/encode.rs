//! One record into its table's rows: the hot path, run for every record a sink consumes.
//!
//! The record is decoded by its format, its document scanned once into the slots the columns
//! read, and each column's value written straight into the batch's COPY buffer. Nothing here
//! is decided per record that `TopicMapper::new` could decide once.

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::convert::{self, write_meta, write_raw, Hint, Input};
use super::envelope::{self, Op};
use super::pointer::JsonRef;
use super::rows::presence_mask;
use super::transcode;
use super::{pointer, ConfiguredUnit, EncodeError, MapError, Meta, Source, TableRows, TopicMapper};
use crate::config::RecordFormat;
use crate::pgcopy::CopyBuffer;
use crate::record::{OwnedRecord, RecordView};
use std::sync::Arc;

/// A registry-encoded value as JSON, with what its decoder knows of it.
struct Transcoded {
    json: String,
    /// The decoder refused nesting deeper than `MAX_JSON_DEPTH`.
    bounded: bool,
    /// Where each top-level field's value is in `json`, and each field's slot.
    fields: Option<FieldSpans>,
}

/// Per top-level field: where its value was written, and the slot that takes it.
type FieldSpans = (Vec<std::ops::Range<usize>>, Arc<[Option<usize>]>);

/// A column's value for one record, borrowed from the record or the mapping: found for every
/// column before the row begins, so a missing or null value fails the record with nothing
/// written.
pub(super) enum Value<'a> {
    /// Nothing there: the column is left out (its default applies) or is an error.
    Absent,
    /// JSON `null`, or a tombstone's raw value.
    Null,
    /// A value for a converter, with what the record's schema says about its encoding.
    In(Input<'a>, Option<Hint>),
    /// Record metadata, fitted to the column by `write_meta`.
    Meta(&'a Meta),
    /// The whole value (`format = "raw"`).
    Raw(&'a [u8]),
}

impl TopicMapper {
    /// Encodes the record into `rows` as one row or one delete; on error nothing is written.
    pub fn encode(&self, record: &RecordView<'_>, rows: &mut TableRows) -> Result<(), EncodeError> {
        let bytes = record.value.map_or(0, <[u8]>::len) + record.key.map_or(0, <[u8]>::len);
        if bytes as u64 > self.max_record_bytes {
            return Err(MapError::TooLarge {
                bytes,
                limit: self.max_record_bytes,
            }
            .into());
        }
        // Registry formats are read as the JSON they transcode to; the text lives as long as
        // this call, like the record it came from.
        let transcoded_value;
        let mut bounded = false;
        let mut spans = None;
        let mut text = None;
        let value = match record.value {
            Some(v) if self.value_encoding.uses_registry() => {
                transcoded_value = self.transcode(v, true)?;
                bounded = transcoded_value.bounded;
                spans = transcoded_value.fields.as_ref();
                text = Some(transcoded_value.json.as_str());
                Some(transcoded_value.json.as_bytes())
            }
            other => other,
        };
        if let Some(value) = value {
            // A transcoder that bounds nesting itself spares the record a second scan.
            // Envelopes are checked as they are read (a known schema need not be scanned).
            if !matches!(
                self.format,
                RecordFormat::Raw | RecordFormat::ConnectJson | RecordFormat::Debezium
            ) && !bounded
                && nests_deeper_than(value, MAX_JSON_DEPTH)
            {
                return Err(MapError::TooDeep(MAX_JSON_DEPTH).into());
            }
        }
        let mut decoded = match (text, self.format) {
            // A transcoder's JSON text is already a `str`, and in this format the row itself.
            (Some(json), RecordFormat::Json) => envelope::Decoded {
                op: Op::Write,
                doc: Some(json),
                hints: None,
                unchecked: false,
            },
            _ => envelope::decode(
                self.format,
                value,
                self.delete_on_tombstone,
                &self.hints,
                envelope::Reading::Known,
            )?,
        };
        if decoded.op == Op::Truncate {
            return self.encode_truncate(record, rows);
        }
        let transcoded_key;
        let key = match record.key {
            Some(k) if self.needs_key || decoded.op == Op::Delete => {
                if self.key_encoding.uses_registry() {
                    transcoded_key = self.transcode(k, false)?;
                    let raw: &RawValue = serde_json::from_str(&transcoded_key.json)
                        .map_err(|e| MapError::Wire(format!("the decoded key: {e}")))?;
                    Some(Input::Json(JsonRef::of(raw)))
                } else {
                    Some(envelope::key_document(self.format, k)?)
                }
            }
            _ => None,
        };
        let mut slots: Vec<Option<JsonRef<'_>>> = vec![None; self.fields.len()];
        if let (Some(doc), Some((spans, slot_of_field))) = (decoded.doc, spans) {
            // The transcoder wrote each field as one JSON value and said where.
            for (span, slot) in spans.iter().zip(slot_of_field.iter()) {
                if let (Some(slot), Some(text)) = (slot, doc.get(span.clone())) {
                    slots[*slot] = Some(JsonRef::written(text));
                }
            }
        } else if let Some(doc) = decoded.doc {
            if let Err(e) = self.read_document(doc, &mut slots) {
                if !decoded.unchecked {
                    return Err(e.into());
                }
                // A known envelope's payload, taken by position, that is not one JSON value:
                // the record is not what it looked like, and is read like any other.
                decoded = envelope::decode(
                    self.format,
                    value,
                    self.delete_on_tombstone,
                    &self.hints,
                    envelope::Reading::InFull,
                )?;
                slots.fill(None);
                if let Some(doc) = decoded.doc {
                    self.read_document(doc, &mut slots)?;
                }
            }
        }
        let hints = decoded.hints.as_deref();
        let value_of = |i: usize| -> Result<Value<'_>, MapError> {
            self.value(i, record, decoded.doc, &slots, key, hints)
                .map_err(|reason| self.bad_value(i, reason))
        };
        match decoded.op {
            Op::Write => self.encode_write(record, rows, value_of),
            Op::Delete => self.encode_delete(record, rows, value_of, key),
            Op::Truncate => unreachable!("returned above"),
        }
    }

    /// Reads the row document's fields into their slots, validating it as one JSON object.
    fn read_document<'a>(
        &self,
        doc: &'a str,
        slots: &mut [Option<JsonRef<'a>>],
    ) -> Result<(), MapError> {
        if self.fields.is_empty() {
            // Nothing to read from it, but a malformed value is still an error.
            serde_json::from_str::<IgnoredAny>(doc)
                .map(|_| ())
                .map_err(|e| MapError::NotAnObject(e.to_string()))
        } else {
            pointer::parse_object(doc, &self.fields, slots)
        }
    }

    /// A registry-encoded value or key as JSON text, by the decoder of its schema id; an id
    /// not learnt yet is asked for (`NeedSchema`), never guessed. `fields`: where the decoder
    /// can say, where each top-level field was written (for a value that is the row).
    fn transcode(&self, bytes: &[u8], fields: bool) -> Result<Transcoded, EncodeError> {
        let (id, payload) = transcode::split_header(bytes).map_err(MapError::Wire)?;
        let Some(decoder) = self.decoders.get(&id) else {
            return Err(EncodeError::NeedSchema(id));
        };
        let mut json = String::with_capacity(payload.len() * 2 + 16);
        let wrong = |e| MapError::Wire(format!("schema {id}: {e}"));
        let t = &decoder.transcoder;
        let fields = match &decoder.slots {
            Some(slots) if fields => {
                let mut spans = Vec::with_capacity(slots.len());
                t.to_json_fields(payload, &mut json, &mut spans)
                    .map_err(wrong)?;
                // A decoder that reported other than one span per field is not trusted.
                (spans.len() == slots.len()).then(|| (spans, slots.clone()))
            }
            _ => {
                t.to_json(payload, &mut json).map_err(wrong)?;
                None
            }
        };
        Ok(Transcoded {
            json,
            bounded: t.bounds_nesting(),
            fields,
        })
    }

    /// Names the column, its type and where the value came from, so the error says what to fix.
    pub(super) fn bad_value(&self, i: usize, reason: String) -> MapError {
        let col = &self.table.columns[i];
        MapError::BadValue {
            column: col.name.clone(),
            sql_type: col.sql_type.clone(),
            origin: self.sources[i].describe(),
            reason,
        }
    }

    /// Finds column `i`'s value for this record.
    fn value<'a>(
        &'a self,
        i: usize,
        record: &RecordView<'a>,
        doc: Option<&'a str>,
        slots: &[Option<JsonRef<'a>>],
        key: Option<Input<'a>>,
        hints: Option<&envelope::Hints>,
    ) -> Result<Value<'a>, String> {
        let json = |raw: Option<JsonRef<'a>>, hint: Option<Hint>| match raw {
            None => Value::Absent,
            Some(r) if r.get() == "null" => Value::Null,
            Some(r) => Value::In(Input::Json(r), hint),
        };
        Ok(match &self.sources[i] {
            Source::Doc(path) => match (path.split_first(), doc) {
                (_, None) => Value::Absent,
                (None, Some(doc)) => {
                    let whole: &RawValue = serde_json::from_str(doc).map_err(|e| e.to_string())?;
                    json(Some(JsonRef::of(whole)), None)
                }
                (Some((first, rest)), Some(_)) => {
                    let start = self.slot_of[i].and_then(|s| slots[s]);
                    let hint = if rest.is_empty() {
                        hints.and_then(|h| h.get(first).copied())
                    } else {
                        None
                    };
                    match start {
                        Some(raw) => json(pointer::descend(raw, rest)?, hint),
                        None => Value::Absent,
                    }
                }
            },
            Source::Key(path) => match key {
                None => Value::Absent,
                Some(Input::Str(s)) if path.is_empty() => Value::In(Input::Str(s), None),
                Some(Input::Str(_)) => Value::Absent,
                Some(Input::Json(raw)) => json(pointer::descend(raw, path)?, None),
            },
            Source::KeyAuto(name) => match key {
                None => Value::Absent,
                Some(Input::Str(s)) => Value::In(Input::Str(s), None),
                Some(Input::Json(raw)) if raw.get().starts_with('{') => {
                    json(pointer::field(raw, name)?, None)
                }
                Some(Input::Json(raw)) => json(Some(raw), None),
            },
            Source::Meta(m) => Value::Meta(m),
            Source::Const(raw) => json(Some(JsonRef::of(raw)), None),
            Source::Raw => match record.value {
                Some(v) => Value::Raw(v),
                None => Value::Null,
            },
            Source::Default => Value::Absent,
        })
    }

    /// On error the partial row is undone and the scratch list kept for reuse, so the batch is
    /// exactly as it was before this record.
    fn encode_write<'a>(
        &'a self,
        record: &RecordView<'a>,
        rows: &mut TableRows,
        value_of: impl Fn(usize) -> Result<Value<'a>, MapError>,
    ) -> Result<(), EncodeError> {
        let mut values = Vec::with_capacity(self.sources.len());
        let mut include = std::mem::take(&mut rows.scratch);
        include.clear();
        // Columns that hold Debezium's placeholder: carried by none, and marked "keep".
        let mut unavailable: Vec<u16> = Vec::new();
        let result = (|| {
            for (i, col) in self.table.columns.iter().enumerate() {
                let value = value_of(i)?;
                let placeholder = match (&self.placeholders, &value) {
                    (Some(p), Value::In(Input::Json(raw), _)) => p.is_placeholder(i, raw.get()),
                    _ => false,
                };
                if placeholder {
                    unavailable.push(i as u16);
                    values.push(Value::Absent);
                    continue;
                }
                let present = match (&value, &self.sources[i]) {
                    (_, Source::Default) => false,
                    (Value::Absent, _) if col.has_default => false,
                    (Value::Absent, source) if col.not_null => {
                        return Err(MapError::MissingField {
                            column: col.name.clone(),
                            sql_type: col.sql_type.clone(),
                            origin: source.describe(),
                        })
                    }
                    // Left out of an upsert's column list, the column is neither inserted (its
                    // NULL applies to a new row) nor updated: a partial record (CDC with only
                    // the changed columns) must not erase what it does not carry.
                    (Value::Absent, _) if self.upsert_keys.is_some() => false,
                    (Value::Null, _) if col.not_null => {
                        return Err(MapError::NullForNotNull {
                            column: self.sources[i].describe(),
                        })
                    }
                    _ => true,
                };
                if present {
                    include.push(i as u16);
                }
                values.push(value);
            }
            if let Some(keys) = &self.upsert_keys {
                for &k in keys.iter() {
                    if matches!(values[k as usize], Value::Absent | Value::Null) {
                        return Err(MapError::MissingKey {
                            column: self.table.columns[k as usize].name.clone(),
                        });
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            rows.scratch = include;
            return Err(e.into());
        }
        let ordinal = rows.next_ordinal;
        let upsert = self.upsert_keys.is_some();
        let keep = rows.keep_origins;
        let mut mask = std::mem::take(&mut rows.mask_scratch);
        // An upsert row has every column, so records that carry different columns share one
        // COPY and one merge; the mask says which of them the record carried.
        let columns: &[u16] = if upsert {
            presence_mask(&include, self.table.columns.len(), &mut mask);
            if !unavailable.is_empty() {
                // The unavailable columns' bits follow the presence bits, which a row without
                // any lacks (the merge's check tells the two apart by the mask's length).
                let mut extra = Vec::new();
                presence_mask(&unavailable, self.table.columns.len(), &mut extra);
                mask.extend_from_slice(&extra);
            }
            &self.all_columns
        } else {
            &include
        };
        let shape = rows.buffer_for(columns);
        let copy = &mut shape.buffer;
        let mark = copy.begin_row(columns.len() + 2 * usize::from(upsert));
        let mut written = Ok(());
        for &i in columns {
            let i = i as usize;
            if upsert && mask[i / 8] & (1 << (i % 8)) == 0 {
                copy.null();
                continue;
            }
            if let Err(reason) = self.write_value(i, &values[i], record, copy) {
                written = Err(self.bad_value(i, reason));
                break;
            }
        }
        match written {
            Ok(()) => {
                if upsert {
                    // The record's position in the batch: the last one per key wins.
                    copy.bytes(&ordinal.to_be_bytes());
                    copy.bytes(&mask);
                }
                copy.end_row(mark);
                shape.note(
                    ordinal,
                    record,
                    keep.then(|| OwnedRecord::from_view(record)),
                );
                rows.next_ordinal += 1;
                if upsert {
                    rows.presence.note(&include);
                }
                if !unavailable.is_empty() {
                    rows.placeholders.note(ordinal, &unavailable);
                }
            }
            Err(_) => copy.undo_row(mark),
        }
        rows.scratch = include;
        rows.mask_scratch = mask;
        written.map_err(EncodeError::Invalid)
    }

    /// Absent and null both write NULL here: whether either is allowed was settled before the
    /// row began.
    pub(super) fn write_value(
        &self,
        i: usize,
        value: &Value<'_>,
        record: &RecordView<'_>,
        copy: &mut CopyBuffer,
    ) -> Result<(), String> {
        let col = &self.table.columns[i];
        match value {
            Value::Absent | Value::Null => {
                copy.null();
                Ok(())
            }
            Value::In(input, hint) => {
                let hint = match (self.hex[i], self.json_text[i]) {
                    (true, _) => Some(Hint::Hex),
                    // Configured for the column, so it holds with or without a schema.
                    (_, true) => Some(Hint::JsonText),
                    _ => self.time_hint(i, *hint)?,
                };
                copy.field(|out| convert::encode(col.ty, *input, hint, out))
            }
            Value::Meta(meta) => write_meta(meta, col, record, copy),
            Value::Raw(bytes) => copy.field(|out| write_raw(col.ty, bytes, out)),
        }
    }

    /// The schema's hint for column `i` with the configured unit applied: a column's own unit
    /// must agree with a schema that gives one; the topic's unit fills in where none does.
    fn time_hint(&self, i: usize, schema: Option<Hint>) -> Result<Option<Hint>, String> {
        Ok(match (self.units[i], schema) {
            (None, hint) => hint,
            (Some(ConfiguredUnit::Column(unit)), Some(Hint::Epoch(given))) if given != unit => {
                return Err(format!(
                    "the record's schema gives {} but time_units says {}",
                    given.describe(),
                    unit.describe()
                ))
            }
            (Some(ConfiguredUnit::Column(unit)), _) => Some(Hint::Epoch(unit)),
            (Some(ConfiguredUnit::Topic(_)), Some(hint)) => Some(hint),
            (Some(ConfiguredUnit::Topic(unit)), None) => Some(Hint::Epoch(unit)),
        })
    }
}

/// Deeper JSON is refused before it is decoded: PostgreSQL's json parsers stop at their stack
/// limit with an error no retry can fix, and real records nest a handful of levels.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether `json` opens more than `limit` nested objects or arrays (strings are skipped), in
/// one pass without recursion.
///
/// Nothing can nest deeper than the number of `{` and `[` bytes it holds, and real records
/// hold a few: counting them with memchr's vector search settles almost every record at a
/// fraction of the cost of the exact byte-by-byte walk (which was 7% of the consumer thread
/// for Connect envelopes), and only a value with more openers than `limit` is walked.
pub(crate) fn nests_deeper_than(json: &[u8], limit: usize) -> bool {
    if memchr::memchr2_iter(b'{', b'[', json).nth(limit).is_none() {
        return false;
    }
    nests_deeper_than_exactly(json, limit)
}

/// The exact walk behind `nests_deeper_than`, for values with more openers than the limit.
pub(super) fn nests_deeper_than_exactly(json: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}
