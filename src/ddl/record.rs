//! A record's schema: which one it is (cheaply, so a schema seen before costs no parsing of
//! it), and the columns it asks for. Connect JSON carries its schema in every record; the
//! registry formats name it by id (and Protobuf its message by the index array after the id).

use std::hash::{Hash as _, Hasher as _};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::plan::Shape;
use super::types::{
    avro_fields, connect_fields, find_named, json_schema_fields, protobuf_fields, FieldColumn,
};
use super::CheckError;
use crate::config::{Encoding, RecordFormat, TopicSettings};
use crate::proto::{compile_registered, message_index_len, record_message};
use crate::registry::{RegisteredSchema, RegistryError, SchemaKind};

/// The message-index array that names a schema's first message (a count of 0), as `check
/// --plan` reads the latest schema.
pub(super) const FIRST_MESSAGE: &[u8] = &[0];

/// Where a record's schema is, borrowed from the record: a schema seen before costs no copy.
#[derive(Debug, Clone)]
pub(crate) struct Found<'a> {
    /// The same for the same schema (and key schema).
    pub(crate) identity: u64,
    what: Where<'a>,
}

/// The schema's text or its registry ids.
#[derive(Debug, Clone)]
enum Where<'a> {
    /// The Connect envelopes' `schema`s, as text: the value's, and the key's when the key is
    /// an envelope too (Debezium's key: the source table's primary key as a struct).
    Connect {
        value: &'a str,
        key: Option<&'a str>,
    },
    /// The registry schemas of the value and, for a registry-format key, the key.
    Registry {
        value: Named<'a>,
        key: Option<Named<'a>>,
    },
}

/// A schema a record names in the Confluent wire format.
#[derive(Debug, Clone, Copy)]
struct Named<'a> {
    encoding: Encoding,
    id: u32,
    /// Protobuf's message-index array after the id, as the record has it (empty otherwise):
    /// records of one schema id may be of different messages.
    indexes: &'a [u8],
}

/// A schema is known by its id and message: the encoding is the topic's, the same for all.
impl std::hash::Hash for Named<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
        self.indexes.hash(state);
    }
}

/// The envelope's schema, borrowed; the payload is skipped unparsed into values.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
}

/// The Confluent wire format's schema id: magic byte 0, then four bytes big-endian.
fn wire_id(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// The registry format the topic's values are written in, if any (plain or Debezium).
fn value_encoding(settings: &TopicSettings) -> Option<Encoding> {
    match settings.format {
        RecordFormat::Debezium => Some(settings.encoding).filter(|e| e.uses_registry()),
        format => format.registry_encoding(),
    }
}

/// The schema a wire-format record names; `None` without the header (or with a malformed
/// message-index array), which the mapping refuses with its own words.
fn named(bytes: &[u8], encoding: Encoding) -> Option<Named<'_>> {
    let id = wire_id(bytes)?;
    let indexes = match encoding {
        Encoding::Protobuf => {
            let rest = &bytes[5..];
            &rest[..message_index_len(rest)?]
        }
        _ => &[],
    };
    Some(Named {
        encoding,
        id,
        indexes,
    })
}

/// The record's schema, if it names or carries one (a tombstone, schemaless Connect JSON or a
/// value the mapping will refuse anyway have none).
pub(crate) fn identify<'a>(
    settings: &TopicSettings,
    value: Option<&'a [u8]>,
    key: Option<&'a [u8]>,
) -> Option<Found<'a>> {
    let value = value?;
    if let Some(encoding) = value_encoding(settings) {
        let value = named(value, encoding)?;
        let key = match settings.key_format {
            Encoding::Json => None,
            encoding => key.and_then(|k| named(k, encoding)),
        };
        let mut hasher = std::hash::DefaultHasher::new();
        (value, key).hash(&mut hasher);
        return Some(Found {
            identity: hasher.finish(),
            what: Where::Registry { value, key },
        });
    }
    let schema = envelope_schema(value)?;
    let key = key.and_then(envelope_schema);
    let mut hasher = std::hash::DefaultHasher::new();
    (schema, key).hash(&mut hasher);
    Some(Found {
        identity: hasher.finish(),
        what: Where::Connect { value: schema, key },
    })
}

/// A Connect JSON envelope's schema, unless the bytes are no envelope or carry `null`.
fn envelope_schema(bytes: &[u8]) -> Option<&str> {
    let envelope: Envelope<'_> = serde_json::from_slice(bytes).ok()?;
    Some(envelope.schema?.get()).filter(|s| *s != "null")
}

/// The columns the record's schema asks for; registry schemas are fetched by id (the client
/// caches them), and a `.proto` is compiled here once per schema the topic meets (`Evolver`
/// remembers each record schema it has held against the table).
pub(crate) fn shape(
    settings: &TopicSettings,
    found: &Found<'_>,
    fetch: &mut dyn FnMut(u32) -> Result<RegisteredSchema, RegistryError>,
) -> Result<Shape, CheckError> {
    let debezium = settings.format == RecordFormat::Debezium;
    match &found.what {
        Where::Connect { value, key } => {
            let schema: Value = serde_json::from_str(value)
                .map_err(|e| CheckError::Record(format!("the record's schema is not JSON: {e}")))?;
            let row = if debezium {
                connect_after(&schema).map_err(CheckError::Record)?
            } else {
                &schema
            };
            // A key schema that is no struct (a plain string key) names no key columns.
            let key = key
                .and_then(|k| serde_json::from_str::<Value>(k).ok())
                .and_then(|k| connect_fields(&k).ok())
                .filter(|fields| !fields.is_empty());
            Ok(Shape {
                value: connect_fields(row).map_err(CheckError::Record)?,
                key,
            })
        }
        Where::Registry { value, key } => {
            let mut get = |named: &Named<'_>| -> Result<RegisteredSchema, CheckError> {
                let id = named.id;
                let schema = fetch(id).map_err(|e| match e {
                    RegistryError::NotFound(what) => CheckError::Record(format!(
                        "the record's schema id {id} is not in the registry ({what})"
                    )),
                    RegistryError::Unavailable(why) => CheckError::Unavailable(why),
                })?;
                if schema.kind != kind_of(named.encoding) {
                    return Err(CheckError::Record(format!(
                        "the record's schema id {id} is a {:?} schema, and the topic reads {:?}",
                        schema.kind, named.encoding
                    )));
                }
                Ok(schema)
            };
            let value_schema = get(value)?;
            let mut shape = shape_of_schema(&value_schema, value.indexes, debezium)
                .map_err(CheckError::Record)?;
            if let Some(named) = key {
                let key_schema = get(named)?;
                shape.key = key_fields(&key_schema, named.indexes);
            }
            Ok(shape)
        }
    }
}

/// The registry's kind of schema for an encoding.
fn kind_of(encoding: Encoding) -> SchemaKind {
    match encoding {
        Encoding::Protobuf => SchemaKind::Protobuf,
        Encoding::JsonSchema => SchemaKind::Json,
        Encoding::Avro | Encoding::Json => SchemaKind::Avro,
    }
}

/// The columns a registered value schema asks for (also `check --plan`'s, from the latest
/// registered version); `indexes` names a Protobuf record's message.
pub(super) fn shape_of_schema(
    schema: &RegisteredSchema,
    indexes: &[u8],
    debezium: bool,
) -> Result<Shape, String> {
    let value = match schema.kind {
        SchemaKind::Avro => {
            let root: Value = serde_json::from_str(&schema.text)
                .map_err(|e| format!("the schema is not JSON: {e}"))?;
            let row = if debezium { avro_after(&root)? } else { &root };
            if row["type"] != "record" {
                return Err(
                    "the value schema is not a record: there are no fields to make columns of"
                        .into(),
                );
            }
            avro_fields(&root, row)?
        }
        _ if debezium => {
            return Err(format!(
                "auto_create and auto_evolve read Debezium's JSON and Avro change events, not {:?} ones",
                schema.kind
            ))
        }
        SchemaKind::Protobuf => {
            protobuf_fields(&record_message(&compile_registered(schema)?, indexes)?)
        }
        SchemaKind::Json => {
            let root: Value = serde_json::from_str(&schema.text)
                .map_err(|e| format!("the JSON Schema is not JSON: {e}"))?;
            json_schema_fields(&root, &root)?
        }
    };
    Ok(Shape { value, key: None })
}

/// A key schema's fields, when it is a record (an Avro record, a Protobuf message, a JSON
/// Schema object with properties); `indexes` names a Protobuf key's message.
pub(super) fn key_fields(schema: &RegisteredSchema, indexes: &[u8]) -> Option<Vec<FieldColumn>> {
    match schema.kind {
        SchemaKind::Avro => {
            let root: Value = serde_json::from_str(&schema.text).ok()?;
            (root["type"] == "record")
                .then(|| avro_fields(&root, &root).ok())
                .flatten()
        }
        SchemaKind::Protobuf => {
            let file = compile_registered(schema).ok()?;
            Some(protobuf_fields(&record_message(&file, indexes).ok()?))
        }
        SchemaKind::Json => {
            let root: Value = serde_json::from_str(&schema.text).ok()?;
            json_schema_fields(&root, &root).ok()
        }
    }
}

/// Debezium's `after` struct in a Connect change-event schema.
fn connect_after(schema: &Value) -> Result<&Value, String> {
    schema["fields"]
        .as_array()
        .and_then(|fields| fields.iter().find(|f| f["field"] == "after"))
        .ok_or_else(|| "the change event's schema has no `after` field".to_string())
}

/// Debezium's `after` record in an Avro change-event schema (a union with null, or a name).
fn avro_after(root: &Value) -> Result<&Value, String> {
    let after = root["fields"]
        .as_array()
        .and_then(|fields| fields.iter().find(|f| f["name"] == "after"))
        .ok_or("the change event's schema has no `after` field")?;
    let mut ty = &after["type"];
    if let Some(branches) = ty.as_array() {
        ty = branches
            .iter()
            .find(|b| *b != "null")
            .ok_or("`after` is only null")?;
    }
    if let Some(name) = ty.as_str() {
        ty =
            find_named(root, name).ok_or_else(|| format!("`after` names unknown type {name:?}"))?;
    }
    Ok(ty)
}
