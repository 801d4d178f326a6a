//! A record's schema: which one it is (cheaply, so a schema seen before costs no parsing of
//! it), and the columns it asks for. Connect JSON carries its schema in every record; Avro
//! names it by registry id.

use std::hash::{Hash as _, Hasher as _};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::plan::Shape;
use super::types::{avro_fields, connect_fields, find_named};
use super::CheckError;
use crate::config::{Encoding, RecordFormat, TopicSettings};
use crate::registry::{RegisteredSchema, RegistryError, SchemaKind};

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
    /// The Connect envelope's `schema`, as text.
    Connect(&'a str),
    /// Registry ids of the value and, for Avro keys, the key.
    Registry { value: u32, key: Option<u32> },
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

/// Whether the topic's values are Avro in the registry (plain or Debezium).
fn avro_values(settings: &TopicSettings) -> bool {
    settings.format == RecordFormat::Avro
        || (settings.format == RecordFormat::Debezium && settings.encoding == Encoding::Avro)
}

/// The record's schema, if it names or carries one (a tombstone, schemaless Connect JSON or a
/// value the mapping will refuse anyway have none).
pub(crate) fn identify<'a>(
    settings: &TopicSettings,
    value: Option<&'a [u8]>,
    key: Option<&[u8]>,
) -> Option<Found<'a>> {
    let value = value?;
    if avro_values(settings) {
        let value_id = wire_id(value)?;
        let key_id = match settings.key_format {
            Encoding::Avro => key.and_then(wire_id),
            _ => None,
        };
        let identity = u64::from(value_id) | (key_id.map_or(0, |k| u64::from(k) + 1) << 32);
        return Some(Found {
            identity,
            what: Where::Registry {
                value: value_id,
                key: key_id,
            },
        });
    }
    let envelope: Envelope<'_> = serde_json::from_slice(value).ok()?;
    let schema = envelope.schema?.get();
    if schema == "null" {
        return None;
    }
    let mut hasher = std::hash::DefaultHasher::new();
    schema.hash(&mut hasher);
    Some(Found {
        identity: hasher.finish(),
        what: Where::Connect(schema),
    })
}

/// The columns the record's schema asks for; registry schemas are fetched by id (the client
/// caches them).
pub(crate) fn shape(
    settings: &TopicSettings,
    found: &Found<'_>,
    fetch: &mut dyn FnMut(u32) -> Result<RegisteredSchema, RegistryError>,
) -> Result<Shape, CheckError> {
    let debezium = settings.format == RecordFormat::Debezium;
    match &found.what {
        Where::Connect(text) => {
            let schema: Value = serde_json::from_str(text)
                .map_err(|e| CheckError::Record(format!("the record's schema is not JSON: {e}")))?;
            let row = if debezium {
                connect_after(&schema).map_err(CheckError::Record)?
            } else {
                &schema
            };
            Ok(Shape {
                value: connect_fields(row).map_err(CheckError::Record)?,
                key: None,
            })
        }
        Where::Registry { value, key } => {
            let mut get = |id: u32| -> Result<RegisteredSchema, CheckError> {
                fetch(id).map_err(|e| match e {
                    RegistryError::NotFound(what) => CheckError::Record(format!(
                        "the record's schema id {id} is not in the registry ({what})"
                    )),
                    RegistryError::Unavailable(why) => CheckError::Unavailable(why),
                })
            };
            let value_schema = get(*value)?;
            let mut shape = shape_of_schema(&value_schema, debezium).map_err(CheckError::Record)?;
            if let Some(id) = key {
                let key_schema = get(*id)?;
                shape.key = key_fields(&key_schema);
            }
            Ok(shape)
        }
    }
}

/// The columns a registered value schema asks for (also `check --plan`'s, from the latest
/// registered version).
pub(super) fn shape_of_schema(schema: &RegisteredSchema, debezium: bool) -> Result<Shape, String> {
    if schema.kind != SchemaKind::Avro {
        return Err(format!(
            "schema is {:?}; auto_create and auto_evolve read Avro registry schemas",
            schema.kind
        ));
    }
    let root: Value =
        serde_json::from_str(&schema.text).map_err(|e| format!("the schema is not JSON: {e}"))?;
    let row = if debezium { avro_after(&root)? } else { &root };
    if row["type"] != "record" {
        return Err(
            "the value schema is not a record: there are no fields to make columns of".into(),
        );
    }
    Ok(Shape {
        value: avro_fields(&root, row)?,
        key: None,
    })
}

/// A key schema's fields, when it is a record.
pub(super) fn key_fields(schema: &RegisteredSchema) -> Option<Vec<super::types::FieldColumn>> {
    let root: Value = serde_json::from_str(&schema.text).ok()?;
    (schema.kind == SchemaKind::Avro && root["type"] == "record")
        .then(|| avro_fields(&root, &root).ok())
        .flatten()
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
