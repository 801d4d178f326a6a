//! Row mapping: a Kafka record becomes one row (or one delete) of its topic's table, encoded
//! for binary COPY.
//!
//! The value is scanned once; fields are borrowed slices of the payload, converted straight
//! into each column's binary form. Where each column's value comes from is decided once per
//! topic (`source`), how the value is laid out by the format (`envelope`), and how a value
//! becomes bytes by the column type (`convert`). This file builds and checks a topic's
//! mapping; `encode` runs it for each record.

mod convert;
mod encode;
mod envelope;
mod pointer;
mod rows;
mod source;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::{BufMut, BytesMut};
use chrono::DateTime;
use postgres_types::{ToSql, Type};
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

pub use convert::Hint;
pub use encode::MAX_JSON_DEPTH;
pub use rows::{Rows, TableRows};
pub use source::{Meta, Source};

use crate::config::{OnError, RecordFormat, TimeUnit, TopicSettings, WriteMode};
use crate::pgcopy::{encode_numeric, CopyBuffer};
use crate::record::RecordView;
use crate::schema::{Column, ColumnType, Table};
use convert::Input;
use envelope::HintCache;

/// Why one record cannot become a row. The caller adds topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the record has no value (a tombstone); only upsert with delete_on_tombstone = true applies those")]
    Tombstone,
    #[error("the value is not what the format expects: {0}")]
    NotAnObject(String),
    #[error("{0} is not supported")]
    Unsupported(String),
    #[error("a delete (tombstone or Debezium \"d\") needs mode = \"upsert\"")]
    DeleteNeedsUpsert,
    #[error("column {column} ({sql_type}) is NOT NULL and has no default, but the record has no {origin}")]
    MissingField {
        column: String,
        sql_type: String,
        origin: String,
    },
    #[error("{column} is null but the column is NOT NULL")]
    NullForNotNull { column: String },
    #[error("upsert key column {column} has no value in this record")]
    MissingKey { column: String },
    #[error("the record has {bytes} bytes, more than max_record_bytes ({limit})")]
    TooLarge { bytes: usize, limit: u64 },
    #[error("the value nests JSON deeper than {0} levels")]
    TooDeep(usize),
    #[error("{origin} cannot be written to column {column} ({sql_type}): {reason}")]
    BadValue {
        column: String,
        sql_type: String,
        origin: String,
        reason: String,
    },
}

/// Why a record was not added to the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The record itself is bad.
    Invalid(MapError),
    /// An upsert batch holds one column list per table (so the last record per key wins
    /// exactly); this record has another. Seal the batch and encode it again.
    ShapeChanged,
}

impl From<MapError> for EncodeError {
    fn from(e: MapError) -> Self {
        EncodeError::Invalid(e)
    }
}

/// A configuration that cannot work with the table as it is.
#[derive(Debug, thiserror::Error)]
#[error("topic {topic} -> table {table}: {reason}")]
pub struct MappingConfigError {
    pub topic: String,
    pub table: String,
    pub reason: String,
}

/// The mapping of one topic onto its table, built once from the table's description.
pub struct TopicMapper {
    table: Arc<Table>,
    format: RecordFormat,
    sources: Vec<Source>,
    /// Top-level document field → slot, for every field a column reads.
    fields: HashMap<String, usize>,
    /// Per column: the slot its document pointer starts at.
    slot_of: Vec<Option<usize>>,
    needs_headers: bool,
    needs_key: bool,
    /// Upsert key column indices; `None` in insert mode.
    upsert_keys: Option<Arc<[u16]>>,
    delete_on_tombstone: bool,
    hints: HintCache,
    /// Per column: the unit configured for its integer times, if any.
    units: Vec<Option<ConfiguredUnit>>,
    max_record_bytes: u64,
    on_error: OnError,
    dead_letter_topic: Option<Arc<str>>,
}

/// The table and each column's source: enough to recognise a mapping in a log or a failed
/// assertion.
impl fmt::Debug for TopicMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TopicMapper")
            .field("table", &self.table.to_string())
            .field("sources", &self.sources)
            .finish()
    }
}

/// A unit the configuration gives a time column's integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfiguredUnit {
    /// From `[topics.time_units]`: said of this column, so a schema that disagrees is an error
    /// (one of the two is wrong, and either reading could be silently off by 1,000×).
    Column(TimeUnit),
    /// From the topic's `time_unit`: meant for records without a schema, so a schema that
    /// gives the field's unit wins.
    Topic(TimeUnit),
}

impl TopicMapper {
    /// The mapping of `topic` onto the table its settings route it to, described from the
    /// catalog. The sink, `check` and `dead-letters replay` all come here, so they agree on
    /// which table a topic writes and how.
    pub async fn load(
        pool: &sqlx::PgPool,
        settings: &TopicSettings,
        topic: &str,
    ) -> anyhow::Result<Self> {
        let table = crate::schema::describe(
            pool,
            &settings.schema,
            &crate::routing::table_name(settings, topic),
        )
        .await
        .with_context(|| format!("topic {topic:?}"))?;
        Ok(Self::new(settings, Arc::new(table))?)
    }

    /// Checks the topic's settings against the table and fixes each column's source.
    pub fn new(topic: &TopicSettings, table: Arc<Table>) -> Result<Self, MappingConfigError> {
        let err = |reason: String| MappingConfigError {
            topic: topic.label(),
            table: table.to_string(),
            reason,
        };
        let mode = topic.write_mode();
        let key_names = match mode {
            WriteMode::Insert => Vec::new(),
            WriteMode::Upsert => upsert_key_names(topic, &table).map_err(err)?,
        };
        let sources = source::plan(topic, &table, &key_names).map_err(err)?;
        let mut fields = HashMap::new();
        let mut slot_of = vec![None; sources.len()];
        for (i, s) in sources.iter().enumerate() {
            if let Source::Doc(path) = s {
                if let Some(first) = path.first() {
                    let next = fields.len();
                    slot_of[i] = Some(*fields.entry(first.clone()).or_insert(next));
                }
            }
        }
        let upsert_keys = match mode {
            WriteMode::Insert => None,
            WriteMode::Upsert => Some(
                key_names
                    .iter()
                    .map(|k| {
                        table
                            .column(k)
                            .map(|(i, _)| i as u16)
                            .expect("checked by upsert_key_names")
                    })
                    .collect::<Arc<[u16]>>(),
            ),
        };
        let units = time_units(topic, &table).map_err(err)?;
        let needs_headers = sources
            .iter()
            .any(|s| matches!(s, Source::Meta(Meta::Headers | Meta::Header(_))));
        let needs_key = sources
            .iter()
            .any(|s| matches!(s, Source::Key(_) | Source::KeyAuto(_)));
        Ok(Self {
            format: topic.format,
            delete_on_tombstone: topic.delete_on_tombstone,
            table,
            sources,
            fields,
            slot_of,
            needs_headers,
            needs_key,
            upsert_keys,
            hints: HintCache::default(),
            units,
            max_record_bytes: topic.max_record_bytes.as_u64(),
            on_error: topic.on_error,
            dead_letter_topic: topic.dead_letter_topic.as_deref().map(Arc::from),
        })
    }

    /// What to do with a record that cannot be written.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// Where dead letters are also produced, if anywhere.
    pub fn dead_letter_topic(&self) -> Option<&Arc<str>> {
        self.dead_letter_topic.as_ref()
    }

    /// For messages, dead letters and `check`'s list of columns the sink never writes.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Rows for this topic's table, as a batch needs them (upsert keeps one column list).
    pub fn new_rows(&self) -> TableRows {
        TableRows::new(
            self.table.clone(),
            self.upsert_keys.clone(),
            self.on_error == OnError::DeadLetter,
        )
    }

    /// Each column with where its value comes from, for `check`.
    pub fn describe(&self) -> impl Iterator<Item = (&Column, &Source)> {
        self.table.columns.iter().zip(self.sources.iter())
    }

    /// The upsert key's column names; empty in insert mode.
    pub fn key_columns(&self) -> Vec<&str> {
        self.upsert_keys
            .iter()
            .flat_map(|k| k.iter())
            .map(|&i| self.table.columns[i as usize].name.as_str())
            .collect()
    }

    /// For `check`: the unit configured for column `i`'s integer times, if any.
    pub(crate) fn time_unit(&self, i: usize) -> Option<TimeUnit> {
        self.units[i].map(|(ConfiguredUnit::Column(u) | ConfiguredUnit::Topic(u))| u)
    }

    /// For `check`'s warning: column `i` is a time column fed from the record's JSON with no
    /// unit configured, so an integer there is read as epoch milliseconds (dates: days when
    /// small) unless a schema comes with it and says otherwise.
    pub(crate) fn guesses_time_unit(&self, i: usize) -> bool {
        is_time(self.table.columns[i].ty)
            && self.units[i].is_none()
            && matches!(
                self.sources[i],
                Source::Doc(_) | Source::Key(_) | Source::KeyAuto(_)
            )
    }

    /// Whether the caller must collect the record's headers: a column maps them, or a record
    /// may become a dead letter, which keeps the whole record.
    pub fn needs_headers(&self) -> bool {
        self.needs_headers || self.on_error == OnError::DeadLetter
    }
}

/// The column types an integer time can go into.
fn is_time(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Timestamptz | ColumnType::Timestamp | ColumnType::Date
    )
}

/// Each column's configured time unit: its `time_units` entry, else the topic's `time_unit`
/// for timestamp columns. Entries must name time columns, and `days` only dates.
fn time_units(topic: &TopicSettings, table: &Table) -> Result<Vec<Option<ConfiguredUnit>>, String> {
    let mut units: Vec<Option<ConfiguredUnit>> = table
        .columns
        .iter()
        .map(|c| {
            topic
                .time_unit
                .filter(|_| matches!(c.ty, ColumnType::Timestamptz | ColumnType::Timestamp))
                .map(ConfiguredUnit::Topic)
        })
        .collect();
    for (name, &unit) in &topic.time_units {
        let (i, col) = table
            .column(name)
            .ok_or_else(|| format!("time_units.{name}: column {name:?} is not in the table"))?;
        if !is_time(col.ty) {
            return Err(format!(
                "time_units.{name}: column {name:?} is {}; a time unit applies to timestamp, timestamptz and date columns",
                col.sql_type
            ));
        }
        if unit == TimeUnit::Days && col.ty != ColumnType::Date {
            return Err(format!(
                "time_units.{name}: \"days\" fits date columns only; {name:?} is {}",
                col.sql_type
            ));
        }
        units[i] = Some(ConfiguredUnit::Column(unit));
    }
    Ok(units)
}

/// Resolves the upsert key: configured columns, else the primary key; it must match a unique
/// index so that `ON CONFLICT` can use it.
fn upsert_key_names(topic: &TopicSettings, table: &Table) -> Result<Vec<String>, String> {
    let names: Vec<String> = if !topic.key.is_empty() {
        topic.key.clone()
    } else if !table.primary_key.is_empty() {
        table.primary_key.clone()
    } else {
        return Err("mode = \"upsert\" needs a key: the table has no primary key, so name the key columns with `key = [...]`".into());
    };
    for name in &names {
        if table.column(name).is_none() {
            return Err(format!(
                "upsert key column {name:?} is not a column of the table"
            ));
        }
    }
    let mut wanted = names.clone();
    wanted.sort();
    let indexed = table.unique_keys.iter().any(|cols| {
        let mut cols = cols.clone();
        cols.sort();
        cols == wanted
    });
    if !indexed {
        return Err(format!(
            "upsert key ({}) is not the primary key or a unique index of the table; ON CONFLICT needs one",
            names.join(", ")
        ));
    }
    Ok(names)
}

/// Encodes with postgres-types; its error becomes the reason of a `BadValue`.
fn to_sql<T: ToSql>(value: T, ty: &Type, out: &mut BytesMut) -> Result<(), String> {
    value.to_sql(ty, out).map(|_| ()).map_err(|e| e.to_string())
}

/// The whole value into a json, jsonb, text or bytea column.
fn write_raw(ty: ColumnType, bytes: &[u8], out: &mut BytesMut) -> Result<(), String> {
    match ty {
        ColumnType::Bytea => out.put_slice(bytes),
        ColumnType::Text => {
            let s = std::str::from_utf8(bytes)
                .map_err(|_| "the value is not UTF-8 text".to_string())?;
            convert::check_text(s)?;
            out.put_slice(bytes);
        }
        _ => {
            let s = std::str::from_utf8(bytes)
                .map_err(|_| "the value is not UTF-8 JSON".to_string())?;
            serde_json::from_str::<IgnoredAny>(s)
                .map_err(|e| format!("the value is not JSON: {e}"))?;
            convert::check_json_text(s)?;
            if ty == ColumnType::Jsonb {
                out.put_u8(1);
            }
            out.put_slice(bytes);
        }
    }
    Ok(())
}

/// Metadata fitted to the column's type (a timestamp into timestamptz, timestamp or bigint; a
/// key into bytea, text or json), so tables keep their own layout.
fn write_meta(
    meta: &Meta,
    col: &Column,
    r: &RecordView<'_>,
    copy: &mut CopyBuffer,
) -> Result<(), String> {
    match meta {
        Meta::Topic => {
            copy.bytes(r.topic.as_bytes());
            Ok(())
        }
        Meta::Partition => copy.field(|out| write_int(col.ty, r.partition as i64, out)),
        Meta::Offset => copy.field(|out| write_int(col.ty, r.offset, out)),
        Meta::Timestamp => match r.timestamp {
            None => {
                copy.null();
                Ok(())
            }
            Some(ms) => copy.field(|out| {
                let t = DateTime::from_timestamp_millis(ms)
                    .ok_or_else(|| format!("timestamp {ms} out of range"))?;
                match col.ty {
                    ColumnType::Timestamptz => to_sql(t, &Type::TIMESTAMPTZ, out),
                    ColumnType::Timestamp => to_sql(t.naive_utc(), &Type::TIMESTAMP, out),
                    _ => to_sql(ms, &Type::INT8, out),
                }
            }),
        },
        Meta::Key => match r.key {
            None => {
                copy.null();
                Ok(())
            }
            Some(key) => copy.field(|out| match col.ty {
                ColumnType::Bytea => {
                    out.put_slice(key);
                    Ok(())
                }
                ColumnType::Text => {
                    let s = std::str::from_utf8(key)
                        .map_err(|_| "the record key is not UTF-8".to_string())?;
                    convert::check_text(s)?;
                    out.put_slice(key);
                    Ok(())
                }
                _ => {
                    let s = std::str::from_utf8(key)
                        .map_err(|_| "the record key is not UTF-8 JSON".to_string())?;
                    let raw: &RawValue = serde_json::from_str(s)
                        .map_err(|e| format!("the record key is not JSON: {e}"))?;
                    convert::encode(col.ty, Input::Json(raw), None, out)
                }
            }),
        },
        // The last header of that name, as the record's newest word on it.
        Meta::Header(name) => match r.headers.iter().rev().find(|(k, _)| *k == name.as_bytes()) {
            Some((_, Some(value))) => copy.field(|out| {
                if col.ty == ColumnType::Text {
                    let s = std::str::from_utf8(value).map_err(|_| {
                        format!("header {name:?} is not UTF-8; a bytea column keeps any value")
                    })?;
                    if s.contains('\0') {
                        return Err(format!(
                            "header {name:?} holds NUL, which text cannot store; a bytea column keeps any value"
                        ));
                    }
                }
                out.put_slice(value);
                Ok(())
            }),
            _ => {
                copy.null();
                Ok(())
            }
        },
        Meta::Headers => copy.field(|out| {
            let text = crate::headers::to_json(r.headers.iter().copied()).to_string();
            convert::check_json_text(&text)?;
            if col.ty == ColumnType::Jsonb {
                out.put_u8(1);
            }
            out.put_slice(text.as_bytes());
            Ok(())
        }),
    }
}

/// Partition and offset into any integer or numeric column; a value that does not fit is an
/// error, never wrapped.
fn write_int(ty: ColumnType, v: i64, out: &mut BytesMut) -> Result<(), String> {
    match ty {
        ColumnType::Int2 => to_sql(
            i16::try_from(v).map_err(|_| format!("{v} does not fit smallint"))?,
            &Type::INT2,
            out,
        ),
        ColumnType::Int4 => to_sql(
            i32::try_from(v).map_err(|_| format!("{v} does not fit integer"))?,
            &Type::INT4,
            out,
        ),
        ColumnType::Numeric => encode_numeric(&v.to_string(), out).map_err(|e| e.to_string()),
        _ => to_sql(v, &Type::INT8, out),
    }
}

#[cfg(test)]
mod tests;
