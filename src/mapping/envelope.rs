//! Record formats: where the row's document is inside the value, what the change is (write
//! or delete), and what a Connect schema says about field encodings.

use foldhash::{HashMap, HashMapExt as _};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::depth::{nests_deeper_than, MAX_JSON_DEPTH};
use super::pointer::JsonRef;

use super::convert::{Hint, Input};
use super::pointer;
use super::MapError;
use crate::config::{RecordFormat, TimeUnit};

/// What a record asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Insert or upsert the document.
    Write,
    /// Delete the row with the document's (or the record key's) key.
    Delete,
    /// Empty the table (Debezium `t`); the topic's `truncate` setting says whether it may.
    Truncate,
}

/// A decoded record: the operation, the row document (absent for tombstones and raw values)
/// and field hints from a schema.
pub struct Decoded<'a> {
    pub op: Op,
    /// JSON text of the row document; plain JSON values are validated while they are mapped,
    /// so they are scanned only once.
    pub doc: Option<&'a str>,
    pub hints: Option<Arc<Hints>>,
    /// `doc` is the payload of a known envelope, taken by position and not read yet: if it
    /// turns out not to be one JSON value, the record is not what it looked like and is
    /// decoded again, `Reading::InFull`.
    pub unchecked: bool,
}

/// Field name → encoding, from a Connect struct schema.
pub type Hints = HashMap<String, Hint>;

/// Remembers the hints of the last schema seen: Connect repeats the schema in every record,
/// and it rarely changes, so it is parsed once.
#[derive(Default)]
pub struct HintCache(RefCell<Option<CachedHints>>);

/// A schema's text and its hints for each side read of it (the row itself, or a Debezium
/// event's `after` and `before`: a few at most).
struct CachedHints {
    schema: Arc<str>,
    sides: Vec<(Option<String>, Arc<Hints>)>,
}

impl HintCache {
    /// A value laid out exactly as the JsonConverter writes it, `{"schema":S,"payload":P}`,
    /// whose `S` is the last schema seen, byte for byte: that schema and the text of the
    /// payload, found with a memory compare instead of a scan of the schema (most of a
    /// Connect record's bytes), and only the payload checked to be UTF-8. `P` is not read
    /// here: its reader validates it as one JSON value (it scans it anyway), and a record
    /// whose `P` is not one (another field after it, a second payload) is decoded again in
    /// full. Anything else (spacing, another schema) is `None`.
    fn known_envelope<'a>(&self, value: &'a [u8]) -> Option<(Arc<str>, &'a str)> {
        const HEAD: &[u8] = br#"{"schema":"#;
        const MIDDLE: &[u8] = br#","payload":"#;
        let cached = self.0.borrow();
        let schema = &cached.as_ref()?.schema;
        let payload = trim_json_space(value)
            .strip_prefix(HEAD)?
            .strip_prefix(schema.as_bytes())?
            .strip_prefix(MIDDLE)?
            .strip_suffix(b"}")?;
        let payload = std::str::from_utf8(payload).ok()?;
        Some((schema.clone(), payload))
    }

    /// Keyed by the schema's text itself: comparing it with the last one is a memory compare
    /// (none for the text `known_envelope` handed out), cheaper than hashing it, and never
    /// mistakes one schema for another.
    fn hints(&self, schema: JsonRef<'_>, side: Option<&str>) -> Result<Arc<Hints>, MapError> {
        let text = schema.get();
        let mut cached = self.0.borrow_mut();
        let same = cached.as_ref().is_some_and(|c| {
            std::ptr::eq(c.schema.as_ptr(), text.as_ptr()) && c.schema.len() == text.len()
                || &*c.schema == text
        });
        if !same {
            *cached = None;
        }
        let c = cached.get_or_insert_with(|| CachedHints {
            schema: text.into(),
            sides: Vec::new(),
        });
        if let Some((_, hints)) = c.sides.iter().find(|(s, _)| s.as_deref() == side) {
            return Ok(hints.clone());
        }
        let hints = Arc::new(parse_hints(schema, side)?);
        c.sides.push((side.map(str::to_owned), hints.clone()));
        Ok(hints)
    }
}

/// JSON's own whitespace around a value trimmed (`trim_ascii` would also take a form feed,
/// which JSON refuses).
fn trim_json_space(value: &[u8]) -> &[u8] {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = value.iter().position(|b| !space(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !space(b))
        .map_or(start, |e| e + 1);
    &value[start..end]
}

/// Whether the value is to be read in full, or may first be tried as a known envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    Known,
    InFull,
}

/// Finds the row document in `value` as `format` lays it out; `InFull` for a record whose
/// `unchecked` payload turned out not to be one JSON value.
pub fn decode<'a>(
    format: RecordFormat,
    value: Option<&'a [u8]>,
    delete_on_tombstone: bool,
    cache: &HintCache,
    reading: Reading,
) -> Result<Decoded<'a>, MapError> {
    let Some(value) = value else {
        // Debezium follows every delete with a tombstone; deleting again is harmless.
        if delete_on_tombstone || format == RecordFormat::Debezium {
            return Ok(Decoded::without_row(Op::Delete));
        }
        return Err(MapError::Tombstone);
    };
    // Only the payload of a known envelope is left to read; one level down, inside it.
    let known = match reading {
        Reading::Known if matches!(format, RecordFormat::ConnectJson | RecordFormat::Debezium) => {
            cache.known_envelope(value)
        }
        _ => None,
    };
    if let Some((_, payload)) = &known {
        too_deep(payload.as_bytes(), MAX_JSON_DEPTH - 1)?;
    }
    match format {
        RecordFormat::Raw => Ok(Decoded::without_row(Op::Write)),
        // Registry formats reach here transcoded into JSON, as `Json` (see `TopicMapper`).
        RecordFormat::Json
        | RecordFormat::Avro
        | RecordFormat::Protobuf
        | RecordFormat::JsonSchema => {
            let doc = std::str::from_utf8(value)
                .map_err(|e| MapError::NotAnObject(format!("the value is not UTF-8: {e}")))?;
            Ok(Decoded {
                op: Op::Write,
                doc: Some(doc),
                hints: None,
                unchecked: false,
            })
        }
        RecordFormat::ConnectJson => {
            if let Some((schema, payload)) = known {
                if payload == "null" {
                    return decode(format, None, delete_on_tombstone, cache, reading);
                }
                return Ok(Decoded {
                    op: Op::Write,
                    doc: Some(payload),
                    hints: Some(cache.hints(JsonRef::written(&schema), None)?),
                    unchecked: true,
                });
            }
            let Envelope {
                top,
                schema,
                payload,
                ..
            } = read_envelope(value)?;
            match payload {
                // JsonConverter writes a null value as {"schema": null, "payload": null}.
                Some(p) if p.get() == "null" => {
                    decode(format, None, delete_on_tombstone, cache, reading)
                }
                Some(p) => {
                    let hints = match schema {
                        Some(s) if s.get() != "null" => Some(cache.hints(s, None)?),
                        _ => None,
                    };
                    Ok(Decoded {
                        op: Op::Write,
                        doc: Some(p.get()),
                        hints,
                        unchecked: false,
                    })
                }
                // No envelope (schemas.enable=false): the value is the row.
                None => Ok(Decoded {
                    op: Op::Write,
                    doc: Some(top.get()),
                    hints: None,
                    unchecked: false,
                }),
            }
        }
        RecordFormat::Debezium => {
            // The event's fields: in the payload, or read with the envelope when there is none.
            let known_schema: Arc<str>;
            let (schema, [op, before, after]) = match known {
                // Reading the fields validates the payload as one object, so a known envelope
                // is read once; one that is not what it looked like is read again in full.
                Some((schema, payload)) => {
                    match pointer::fields(payload, ["op", "before", "after"]) {
                        Ok(fields) => {
                            known_schema = schema;
                            (Some(JsonRef::written(&known_schema)), fields)
                        }
                        Err(_) => {
                            return decode(
                                format,
                                Some(value),
                                delete_on_tombstone,
                                cache,
                                Reading::InFull,
                            )
                        }
                    }
                }
                None => {
                    let envelope = read_envelope(value)?;
                    let fields = match envelope.payload {
                        Some(payload) => pointer::fields(payload.get(), ["op", "before", "after"])
                            .map_err(MapError::NotAnObject)?,
                        None => envelope.event,
                    };
                    (envelope.schema.filter(|s| s.get() != "null"), fields)
                }
            };
            // Borrowed unless escaped, as Debezium never writes it.
            let op = op
                .and_then(|op| {
                    let text = op.get();
                    serde_json::from_str::<&str>(text)
                        .map(Cow::Borrowed)
                        .or_else(|_| serde_json::from_str::<String>(text).map(Cow::Owned))
                        .ok()
                })
                .ok_or_else(|| {
                    MapError::NotAnObject("a Debezium event needs an \"op\" field".into())
                })?;
            let (op, side) = match op.as_ref() {
                "c" | "r" | "u" => (Op::Write, "after"),
                "d" => (Op::Delete, "before"),
                // No row and no key: nothing more of the event is read.
                "t" => return Ok(Decoded::without_row(Op::Truncate)),
                other => {
                    return Err(MapError::Unsupported(format!(
                        "Debezium op {other:?} (only c, r, u, d and, with truncate, t are applied)"
                    )))
                }
            };
            let doc = if op == Op::Write { after } else { before };
            let doc = doc.filter(|d| d.get() != "null");
            if op == Op::Write && doc.is_none() {
                return Err(MapError::NotAnObject(
                    "a Debezium create or update without \"after\"".into(),
                ));
            }
            let hints = match schema {
                Some(s) => Some(cache.hints(s, Some(side))?),
                None => None,
            };
            Ok(Decoded {
                op,
                doc: doc.map(JsonRef::get),
                hints,
                unchecked: false,
            })
        }
    }
}

impl Decoded<'_> {
    /// A record that gives no row document: a delete by key, a truncate, a raw value.
    fn without_row(op: Op) -> Self {
        Decoded {
            op,
            doc: None,
            hints: None,
            unchecked: false,
        }
    }
}

/// The record key as a document: JSON when it parses (unwrapping a Connect envelope), else
/// a plain string. Either way it is what a converter takes, so a key column needs no second
/// decoding.
pub fn key_document(format: RecordFormat, key: &[u8]) -> Result<Input<'_>, MapError> {
    if let Ok(raw) = serde_json::from_slice::<&RawValue>(key).map(JsonRef::of) {
        if matches!(format, RecordFormat::ConnectJson | RecordFormat::Debezium)
            && raw.get().starts_with('{')
        {
            if let (_, Some(payload)) = envelope_parts(raw)? {
                return Ok(Input::Json(payload));
            }
        }
        return Ok(Input::Json(raw));
    }
    match std::str::from_utf8(key) {
        Ok(s) => Ok(Input::Str(s)),
        Err(_) => Err(MapError::NotAnObject(
            "the record key is neither JSON nor UTF-8 text".into(),
        )),
    }
}

/// A value read as a possible Connect envelope, in one pass over its text.
struct Envelope<'a> {
    /// The whole value.
    top: JsonRef<'a>,
    /// Only where there is a payload (`schema` alone is no envelope).
    schema: Option<JsonRef<'a>>,
    payload: Option<JsonRef<'a>>,
    /// `op`, `before`, `after` at the top: a Debezium event without an envelope.
    event: [Option<JsonRef<'a>>; 3],
}

/// Reads the top-level fields an envelope can have in the same scan that validates the
/// value; a value that is not an object (or not UTF-8) is read whole, as `parse_raw` reads it.
/// Its nesting is bounded as every record's is.
fn read_envelope(value: &[u8]) -> Result<Envelope<'_>, MapError> {
    let object = std::str::from_utf8(trim_json_space(value))
        .ok()
        .filter(|t| t.starts_with('{'));
    let Some(text) = object else {
        too_deep(value, MAX_JSON_DEPTH)?;
        return Ok(Envelope {
            top: parse_raw(value)?,
            schema: None,
            payload: None,
            event: [None; 3],
        });
    };
    too_deep(text.as_bytes(), MAX_JSON_DEPTH)?;
    let [schema, payload, op, before, after] =
        pointer::fields(text, ["schema", "payload", "op", "before", "after"])
            .map_err(MapError::NotAnObject)?;
    Ok(Envelope {
        // `fields` read all of it as one JSON object, and the whitespace around it is trimmed.
        top: JsonRef::written(text),
        schema: payload.and(schema),
        payload,
        event: [op, before, after],
    })
}

/// `TooDeep` where `json` nests deeper than `limit`.
fn too_deep(json: &[u8], limit: usize) -> Result<(), MapError> {
    if nests_deeper_than(json, limit) {
        Err(MapError::TooDeep(MAX_JSON_DEPTH))
    } else {
        Ok(())
    }
}

/// Validated but not built into a tree: only a few envelope fields are read, borrowed from
/// the consumer's buffer. Invalid JSON is a decode error.
fn parse_raw(value: &[u8]) -> Result<JsonRef<'_>, MapError> {
    serde_json::from_slice::<&RawValue>(value)
        .map(JsonRef::of)
        .map_err(|e| MapError::NotAnObject(e.to_string()))
}

/// `schema` and `payload` of a Connect envelope, if `top` is an object that has a payload.
#[allow(clippy::type_complexity)]
fn envelope_parts(
    top: JsonRef<'_>,
) -> Result<(Option<JsonRef<'_>>, Option<JsonRef<'_>>), MapError> {
    if !top.get().starts_with('{') {
        return Ok((None, None));
    }
    let payload = pointer::field(top, "payload").map_err(MapError::NotAnObject)?;
    if payload.is_none() {
        return Ok((None, None));
    }
    let schema = pointer::field(top, "schema").map_err(MapError::NotAnObject)?;
    Ok((schema, payload))
}

/// Reads `{"type":"struct","fields":[…]}` (or, for Debezium, the struct of `field`).
fn parse_hints(schema: JsonRef<'_>, field: Option<&str>) -> Result<Hints, MapError> {
    let schema: serde_json::Value =
        serde_json::from_str(schema.get()).map_err(|e| MapError::NotAnObject(e.to_string()))?;
    let mut row = &schema;
    if let Some(name) = field {
        match schema["fields"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["field"] == name))
        {
            Some(s) => row = s,
            None => return Ok(Hints::new()),
        }
    }
    let mut hints = Hints::new();
    for f in row["fields"].as_array().into_iter().flatten() {
        let Some(name) = f["field"].as_str() else {
            continue;
        };
        let hint = match f["name"].as_str().unwrap_or_default() {
            "org.apache.kafka.connect.data.Decimal" => {
                let scale = f["parameters"]["scale"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .or_else(|| f["parameters"]["scale"].as_u64().map(|s| s as u32))
                    .unwrap_or(0);
                Hint::Decimal { scale }
            }
            "io.debezium.data.VariableScaleDecimal" => Hint::VariableDecimal,
            "org.apache.kafka.connect.data.Date" | "io.debezium.time.Date" => {
                Hint::Epoch(TimeUnit::Days)
            }
            "org.apache.kafka.connect.data.Timestamp" | "io.debezium.time.Timestamp" => {
                Hint::Epoch(TimeUnit::Ms)
            }
            "io.debezium.time.MicroTimestamp" => Hint::Epoch(TimeUnit::Us),
            "io.debezium.time.NanoTimestamp" => Hint::Epoch(TimeUnit::Ns),
            // Times of day count from midnight, MicroDuration an interval's length; the unit
            // is all a converter needs (a time or interval column reads them as such).
            "org.apache.kafka.connect.data.Time" | "io.debezium.time.Time" => {
                Hint::Epoch(TimeUnit::Ms)
            }
            "io.debezium.time.MicroTime" | "io.debezium.time.MicroDuration" => {
                Hint::Epoch(TimeUnit::Us)
            }
            "io.debezium.time.NanoTime" => Hint::Epoch(TimeUnit::Ns),
            "io.debezium.data.Json" => Hint::JsonText,
            _ => continue,
        };
        hints.insert(name.to_string(), hint);
    }
    Ok(hints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debezium_events_become_writes_and_deletes() {
        let cache = HintCache::default();
        let create = br#"{"before":null,"after":{"id":1,"n":"a"},"op":"c","source":{}}"#;
        let d = decode(
            RecordFormat::Debezium,
            Some(create),
            false,
            &cache,
            Reading::Known,
        )
        .unwrap();
        assert_eq!((d.op, d.doc), (Op::Write, Some(r#"{"id":1,"n":"a"}"#)));
        let delete = br#"{"schema":{"type":"struct","fields":[{"field":"before","type":"struct","fields":[{"field":"day","type":"int32","name":"io.debezium.time.Date"}]}]},
                          "payload":{"before":{"id":1},"after":null,"op":"d"}}"#;
        let d = decode(
            RecordFormat::Debezium,
            Some(delete),
            false,
            &cache,
            Reading::Known,
        )
        .unwrap();
        assert_eq!((d.op, d.doc), (Op::Delete, Some(r#"{"id":1}"#)));
        assert_eq!(
            d.hints.unwrap().get("day"),
            Some(&Hint::Epoch(TimeUnit::Days))
        );
        let tombstone =
            decode(RecordFormat::Debezium, None, false, &cache, Reading::Known).unwrap();
        assert_eq!(tombstone.op, Op::Delete);
        // Whether a truncate may apply is the topic's setting, decided by the mapper.
        let truncate = br#"{"op":"t","before":null,"after":null}"#;
        let t = decode(
            RecordFormat::Debezium,
            Some(truncate),
            false,
            &cache,
            Reading::Known,
        )
        .unwrap();
        assert_eq!((t.op, t.doc), (Op::Truncate, None));
        let message = br#"{"op":"m"}"#;
        assert!(matches!(
            decode(
                RecordFormat::Debezium,
                Some(message),
                false,
                &cache,
                Reading::Known
            ),
            Err(MapError::Unsupported(_))
        ));
    }

    #[test]
    fn connect_envelopes_give_the_payload_and_schema_hints() {
        let cache = HintCache::default();
        let v = br#"{"schema":{"type":"struct","fields":[{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]},"payload":{"price":"MDk="}}"#;
        let d = decode(
            RecordFormat::ConnectJson,
            Some(v),
            false,
            &cache,
            Reading::Known,
        )
        .unwrap();
        assert_eq!(d.doc, Some(r#"{"price":"MDk="}"#));
        assert_eq!(
            d.hints.unwrap().get("price"),
            Some(&Hint::Decimal { scale: 2 })
        );
        let plain = br#"{"price":1}"#;
        assert_eq!(
            decode(
                RecordFormat::ConnectJson,
                Some(plain),
                false,
                &cache,
                Reading::Known
            )
            .unwrap()
            .doc,
            Some(r#"{"price":1}"#)
        );
        assert!(matches!(
            decode(RecordFormat::Json, None, false, &cache, Reading::Known),
            Err(MapError::Tombstone)
        ));
        assert_eq!(
            decode(RecordFormat::Json, None, true, &cache, Reading::Known)
                .unwrap()
                .op,
            Op::Delete
        );
    }

    #[test]
    fn a_known_schema_is_recognised_by_its_bytes_and_anything_else_is_read_in_full() {
        let cache = HintCache::default();
        let schema = r#"{"type":"struct","fields":[{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"}]}"#;
        let record = |payload: &str| format!(r#"{{"schema":{schema},"payload":{payload}}}"#);
        // The row document, the day's hint and whether the document is still to be
        // validated, owned.
        let owned = |d: Decoded<'_>| {
            let day = d.hints.and_then(|h| h.get("day").copied());
            (d.doc.map(str::to_owned), day, d.unchecked)
        };
        let read = |v: &str| {
            decode(
                RecordFormat::ConnectJson,
                Some(v.as_bytes()),
                false,
                &cache,
                Reading::Known,
            )
            .map(owned)
        };
        let in_full = |v: &str| {
            decode(
                RecordFormat::ConnectJson,
                Some(v.as_bytes()),
                false,
                &cache,
                Reading::InFull,
            )
            .map(owned)
        };
        let known = |v: &str| {
            cache
                .known_envelope(v.as_bytes())
                .map(|(s, p)| (s.to_string(), p.to_owned()))
        };
        let date = Some(Hint::Epoch(TimeUnit::Days));
        // Unknown at first: read in full, and the schema remembered.
        assert!(known(&record(r#"{"day":1}"#)).is_none());
        assert_eq!(
            read(&record(r#"{"day":1}"#)).unwrap(),
            (Some(r#"{"day":1}"#.into()), date, false)
        );
        // Now the same layout is found by comparing bytes, with the same answer, its payload
        // left for the mapping to validate as it reads it.
        assert_eq!(
            known(&record(r#"{"day":2}"#)),
            Some((schema.to_owned(), r#"{"day":2}"#.to_owned()))
        );
        assert_eq!(
            read(&record(r#"{"day":2}"#)).unwrap(),
            (Some(r#"{"day":2}"#.into()), date, true)
        );
        // A field after the payload, or a second payload, looks known by position, but what
        // it hands over is not one JSON value; read in full, they give the real payload.
        let extra = format!(r#"{{"schema":{schema},"payload":{{"day":3}},"x":1}}"#);
        let twice = format!(r#"{{"schema":{schema},"payload":{{"day":3}},"payload":{{"day":4}}}}"#);
        assert_eq!(
            read(&extra).unwrap().0.as_deref(),
            Some(r#"{"day":3},"x":1"#)
        );
        assert_eq!(
            in_full(&extra).unwrap(),
            (Some(r#"{"day":3}"#.into()), date, false)
        );
        assert_eq!(
            in_full(&twice).unwrap(),
            (Some(r#"{"day":4}"#.into()), date, false)
        );
        // Spacing or another schema is not the known layout at all.
        let spaced = format!(r#"{{"schema": {schema},"payload":{{"day":3}}}}"#);
        let other = r#"{"schema":{"type":"struct","fields":[]},"payload":{"day":3}}"#;
        for v in [&spaced, other] {
            assert!(known(v).is_none(), "{v}");
            assert!(!read(v).unwrap().2, "{v}");
        }
        // And another schema's record is read with that schema's hints, not the last one's:
        // the compare is what keeps a changed schema from being read with old hints.
        assert_eq!(read(other).unwrap().1, None);
        assert_eq!(read(&record(r#"{"day":5}"#)).unwrap().1, date);
        // A payload that is not UTF-8 is not taken by position either.
        let mut latin1 = record(r#"{"day":"x"}"#).into_bytes();
        let at = latin1.len() - 4;
        latin1[at] = 0xe9;
        assert!(cache.known_envelope(&latin1).is_none());
        assert!(decode(
            RecordFormat::ConnectJson,
            Some(&latin1),
            false,
            &cache,
            Reading::Known
        )
        .is_err());
        // A broken payload is an error read in full, and so is one nesting too deep with the
        // envelope around it, known schema or not.
        assert!(in_full(&record(r#"{"day":}"#)).is_err());
        let nested = |n: usize| format!(r#"{{"d":{}1{}}}"#, "[".repeat(n), "]".repeat(n));
        assert!(read(&record(&nested(MAX_JSON_DEPTH - 3))).is_ok());
        for deep in [record(&nested(MAX_JSON_DEPTH - 1)), nested(MAX_JSON_DEPTH)] {
            assert!(matches!(read(&deep), Err(MapError::TooDeep(_))), "{deep}");
        }
    }

    #[test]
    fn a_known_debezium_envelope_is_read_once_and_a_malformed_one_in_full() {
        let cache = HintCache::default();
        let schema = r#"{"type":"struct","fields":[{"field":"after","type":"struct","fields":[{"field":"day","type":"int32","name":"io.debezium.time.Date"}]},{"field":"before","type":"struct","fields":[{"field":"at","type":"int64","name":"io.debezium.time.MicroTimestamp"}]}]}"#;
        let event = |payload: &str| format!(r#"{{"schema":{schema},"payload":{payload}}}"#);
        let read = |v: &str| {
            decode(
                RecordFormat::Debezium,
                Some(v.as_bytes()),
                false,
                &cache,
                Reading::Known,
            )
            .map(|d| {
                let hints = d
                    .hints
                    .map(|h| (h.get("day").copied(), h.get("at").copied()));
                (d.op, d.doc.map(str::to_owned), hints)
            })
        };
        let after = Some((Some(Hint::Epoch(TimeUnit::Days)), None));
        let before = Some((None, Some(Hint::Epoch(TimeUnit::Us))));
        let create = |n: u32| {
            event(&format!(
                r#"{{"op":"c","after":{{"day":{n}}},"source":{{"x":"y"}}}}"#
            ))
        };
        for n in 1..3 {
            // The first read in full, the second known by its schema's bytes: the same answer.
            assert_eq!(
                read(&create(n)).unwrap(),
                (Op::Write, Some(format!(r#"{{"day":{n}}}"#)), after)
            );
        }
        assert!(cache.known_envelope(create(3).as_bytes()).is_some());
        // The other side of the same schema has its own hints.
        let delete = event(r#"{"op":"d","before":{"at":5},"after":null}"#);
        assert_eq!(
            read(&delete).unwrap(),
            (Op::Delete, Some(r#"{"at":5}"#.into()), before)
        );
        // An escaped op is still an op.
        let escaped = event(r#"{"op":"\u0063","after":{"day":4}}"#);
        assert_eq!(read(&escaped).unwrap().0, Op::Write);
        // What follows the payload decides, as when it is read in full; a broken event (in
        // its `source`, which is not mapped) is an error.
        let extra = format!(
            r#"{{"schema":{schema},"payload":{{"op":"c","after":{{"day":5}}}},"payload":{{"op":"d","before":{{"at":6}}}}}}"#
        );
        assert_eq!(
            read(&extra).unwrap(),
            (Op::Delete, Some(r#"{"at":6}"#.into()), before)
        );
        let broken = event(r#"{"op":"c","after":{"day":5},"source":{"x":}}"#);
        assert!(read(&broken).is_err());
    }

    #[test]
    fn keys_are_json_or_plain_text() {
        assert!(matches!(
            key_document(RecordFormat::Json, b"o-1"),
            Ok(Input::Str("o-1"))
        ));
        assert!(
            matches!(key_document(RecordFormat::Json, b"42"), Ok(Input::Json(r)) if r.get() == "42")
        );
        let connect = br#"{"schema":{"type":"struct"},"payload":{"id":7}}"#;
        assert!(
            matches!(key_document(RecordFormat::Debezium, connect), Ok(Input::Json(r)) if r.get() == r#"{"id":7}"#)
        );
        assert!(key_document(RecordFormat::Json, &[0xff, 0xfe]).is_err());
    }
}
