//! Where each column's value comes from, decided once per topic and table.

use serde_json::value::RawValue;

use super::pointer;
use crate::config::{ColumnSpec, KeyFrom, MetadataColumns, RecordFormat, TopicSettings};
use crate::schema::{ColumnType, Table};

/// Which part of the record a metadata column takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meta {
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    Headers,
    /// One header's value, by name.
    Header(String),
}

impl Meta {
    /// The inverse of `name`; `None` lets the caller list the names that are accepted.
    fn parse(name: &str) -> Option<Meta> {
        Some(match name {
            "topic" => Meta::Topic,
            "partition" => Meta::Partition,
            "offset" => Meta::Offset,
            "timestamp" => Meta::Timestamp,
            "key" => Meta::Key,
            "headers" => Meta::Headers,
            other => Meta::Header(other.strip_prefix("header:")?.to_string()),
        })
    }

    /// The name used in configuration (`meta:<name>`).
    pub fn name(&self) -> String {
        match self {
            Meta::Topic => "topic".into(),
            Meta::Partition => "partition".into(),
            Meta::Offset => "offset".into(),
            Meta::Timestamp => "timestamp".into(),
            Meta::Key => "key".into(),
            Meta::Headers => "headers".into(),
            Meta::Header(h) => format!("header:{h}"),
        }
    }

    /// Column types each kind of metadata can be written to.
    fn accepts(&self, ty: ColumnType) -> bool {
        use ColumnType::*;
        match self {
            Meta::Topic => ty == Text,
            Meta::Partition => matches!(ty, Int2 | Int4 | Int8 | Numeric),
            Meta::Offset => matches!(ty, Int8 | Numeric),
            Meta::Timestamp => matches!(ty, Timestamptz | Timestamp | Int8),
            Meta::Key => matches!(ty, Text | Bytea | Json | Jsonb),
            Meta::Headers => matches!(ty, Json | Jsonb),
            Meta::Header(_) => matches!(ty, Text | Bytea),
        }
    }
}

/// Where a column's value comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A JSON pointer into the row document (a field of the same name by default).
    Doc(Vec<String>),
    /// The record key: all of it, or a pointer into a JSON key.
    Key(Vec<String>),
    /// `key_from = "key"`: the key's field of this name if the key is an object, else the
    /// whole key.
    KeyAuto(String),
    Meta(Meta),
    Const(Box<RawValue>),
    /// The whole value, untouched (`format = "raw"`).
    Raw,
    /// Never written: the column's default applies.
    Default,
}

impl Source {
    /// For `check`: where the value comes from, in the words of the configuration.
    pub fn describe(&self) -> String {
        let ptr = |p: &[String]| {
            if p.is_empty() {
                String::new()
            } else {
                format!(
                    "/{}",
                    p.iter()
                        .map(|t| t.replace('~', "~0").replace('/', "~1"))
                        .collect::<Vec<_>>()
                        .join("/")
                )
            }
        };
        match self {
            Source::Doc(p) if p.len() == 1 => format!("field {:?}", p[0]),
            Source::Doc(p) => format!("value {:?}", ptr(p)),
            Source::Key(p) if p.is_empty() => "the record key".into(),
            Source::Key(p) => format!("key {:?}", ptr(p)),
            Source::KeyAuto(name) => format!("key field {name:?} (or the whole key)"),
            Source::Meta(m) => format!("metadata {}", m.name()),
            Source::Const(v) => format!("constant {}", v.get()),
            Source::Raw => "the whole value".into(),
            Source::Default => "its default".into(),
        }
    }
}

/// The toml crate hands a TOML date or time to serde as a one-field map under this private
/// name; unconverted, the constant would be that map, not the date.
const TOML_DATETIME_FIELD: &str = "$__toml_private_datetime";

/// A constant's TOML dates and times as their text (`2024-01-31`), as if written as strings,
/// so a date constant fills a date column instead of becoming an odd JSON object.
fn toml_datetimes_as_strings(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) if map.len() == 1 && map.contains_key(TOML_DATETIME_FIELD) => {
            map.into_iter().next().map_or(Value::Null, |(_, text)| text)
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, toml_datetimes_as_strings(v)))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(toml_datetimes_as_strings).collect())
        }
        other => other,
    }
}

/// Parses one explicit column spec.
pub fn parse_spec(spec: &ColumnSpec) -> Result<Source, String> {
    let text = match spec {
        ColumnSpec::Const { value } => {
            let value = toml_datetimes_as_strings(value.clone());
            let raw = RawValue::from_string(value.to_string()).map_err(|e| e.to_string())?;
            return Ok(Source::Const(raw));
        }
        ColumnSpec::Source(text) => text.as_str(),
    };
    if text == "default" {
        return Ok(Source::Default);
    }
    if text == "key" {
        return Ok(Source::Key(Vec::new()));
    }
    if let Some(p) = text.strip_prefix("key:") {
        return Ok(Source::Key(pointer::parse(p)?));
    }
    if let Some(m) = text.strip_prefix("meta:") {
        return Meta::parse(m).map(Source::Meta).ok_or_else(|| {
            format!("unknown metadata {m:?}: topic, partition, offset, timestamp, key, headers or header:<name>")
        });
    }
    let p = text.strip_prefix("value:").unwrap_or(text);
    if p.starts_with('/') || p.is_empty() {
        return Ok(Source::Doc(pointer::parse(p)?));
    }
    Err(format!(
        "{text:?} is not a column source: use \"/json/pointer\", \"key\", \"key:/pointer\", \"meta:<name>\", \"default\" or {{ const = <value> }}"
    ))
}

/// The `metadata` table as (kind, column) pairs, so it is planned like the explicit `columns`.
fn metadata_pairs(m: &MetadataColumns) -> impl Iterator<Item = (Meta, &str)> {
    [
        (Meta::Topic, &m.topic),
        (Meta::Partition, &m.partition),
        (Meta::Offset, &m.offset),
        (Meta::Timestamp, &m.timestamp),
        (Meta::Key, &m.key),
        (Meta::Headers, &m.headers),
    ]
    .into_iter()
    .filter_map(|(meta, col)| col.as_deref().map(|c| (meta, c)))
}

/// Decides every column's source. `keys` are the upsert key columns (empty for insert).
pub fn plan(topic: &TopicSettings, table: &Table, keys: &[String]) -> Result<Vec<Source>, String> {
    let mut sources: Vec<Option<Source>> = vec![None; table.columns.len()];
    let index = |name: &str| {
        table
            .column(name)
            .map(|(i, _)| i)
            .ok_or_else(|| format!("column {name:?} is not in the table"))
    };
    for (name, spec) in &topic.columns {
        let i = index(name).map_err(|e| format!("columns.{name}: {e}"))?;
        sources[i] = Some(parse_spec(spec).map_err(|e| format!("columns.{name}: {e}"))?);
    }
    for (meta, name) in metadata_pairs(&topic.metadata) {
        let i = index(name).map_err(|e| format!("metadata names {name:?}: {e}"))?;
        if sources[i].is_some() {
            return Err(format!(
                "column {name:?} has two sources (metadata and columns)"
            ));
        }
        sources[i] = Some(Source::Meta(meta));
    }
    if let Some(raw) = &topic.raw_column {
        let i = index(raw).map_err(|e| format!("raw_column: {e}"))?;
        let ty = table.columns[i].ty;
        if !matches!(
            ty,
            ColumnType::Json | ColumnType::Jsonb | ColumnType::Text | ColumnType::Bytea
        ) {
            return Err(format!(
                "raw_column {raw:?} must be json, jsonb, text or bytea, not {}",
                table.columns[i].sql_type
            ));
        }
        sources[i] = Some(Source::Raw);
    }
    match topic.key_from {
        KeyFrom::Value => {}
        KeyFrom::Key => {
            for k in keys {
                let i = index(k)?;
                if sources[i].is_none() {
                    sources[i] = Some(Source::KeyAuto(k.clone()));
                }
            }
        }
        KeyFrom::Offset => {
            for k in keys {
                let i = index(k)?;
                if !matches!(
                    sources[i],
                    Some(Source::Meta(Meta::Topic | Meta::Partition | Meta::Offset))
                ) {
                    return Err(format!(
                        "key_from = \"offset\": key column {k:?} must be one of the metadata topic, partition and offset columns"
                    ));
                }
            }
        }
    }
    let by_name = topic.map_by_name && topic.format != RecordFormat::Raw;
    let mut out = Vec::with_capacity(sources.len());
    for (i, source) in sources.into_iter().enumerate() {
        let col = &table.columns[i];
        let source = source.unwrap_or_else(|| {
            if by_name {
                Source::Doc(vec![col.name.clone()])
            } else {
                Source::Default
            }
        });
        if topic.format == RecordFormat::Raw && matches!(source, Source::Doc(_)) {
            return Err(format!(
                "column {:?}: format = \"raw\" has no fields to point into",
                col.name
            ));
        }
        if let Source::Meta(m) = &source {
            if !m.accepts(col.ty) {
                return Err(format!(
                    "metadata.{} cannot go into column {:?} of type {}",
                    m.name(),
                    col.name,
                    col.sql_type
                ));
            }
        }
        if matches!(source, Source::Default) && col.not_null && !col.has_default {
            return Err(format!(
                "column {:?} is NOT NULL without a default, and nothing is mapped to it",
                col.name
            ));
        }
        out.push(source);
    }
    Ok(out)
}
