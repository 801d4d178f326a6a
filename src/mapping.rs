//! Row mapping: a Kafka record becomes one row of its topic's table, encoded for binary COPY.
//!
//! The JSON value is scanned once; each field is kept as a borrowed slice of the payload and
//! converted straight into the column's binary form. Fields without a column are ignored;
//! columns without a field take their default (or NULL where the column allows it).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use postgres_types::{ToSql, Type};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::config::{MetadataColumns, TopicSettings, WriteMode};
use crate::pgcopy::{encode_numeric, CopyBuffer};
use crate::schema::{Column, ColumnType, Table};

/// A Kafka record as the mapping sees it, borrowed from the consumer's buffers.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the Unix epoch, when the record carries a timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Only filled when a headers column is configured.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// Which part of the record a metadata column takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    Headers,
}

impl Meta {
    fn name(self) -> &'static str {
        match self {
            Meta::Topic => "topic",
            Meta::Partition => "partition",
            Meta::Offset => "offset",
            Meta::Timestamp => "timestamp",
            Meta::Key => "key",
            Meta::Headers => "headers",
        }
    }

    /// Column types each kind of metadata can be written to.
    fn accepts(self, ty: ColumnType) -> bool {
        use ColumnType::*;
        match self {
            Meta::Topic => ty == Text,
            Meta::Partition => matches!(ty, Int2 | Int4 | Int8 | Numeric),
            Meta::Offset => matches!(ty, Int8 | Numeric),
            Meta::Timestamp => matches!(ty, Timestamptz | Timestamp | Int8),
            Meta::Key => matches!(ty, Text | Bytea | Json | Jsonb),
            Meta::Headers => matches!(ty, Json | Jsonb),
        }
    }
}

/// Where a column's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The value field with the column's name.
    Field,
    Meta(Meta),
}

/// Why one record cannot become a row. The caller adds topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the record has no value (a tombstone); insert mode needs a JSON object")]
    Tombstone,
    #[error("the value is not a JSON object: {0}")]
    NotAnObject(String),
    #[error("column {column} ({sql_type}) is NOT NULL and has no default, but the record has no field {column:?}")]
    MissingField { column: String, sql_type: String },
    #[error("field {column:?} is null but column {column} is NOT NULL")]
    NullForNotNull { column: String },
    #[error("upsert key column {column} has no value in this record")]
    MissingKey { column: String },
    #[error("field {column:?} cannot be written to column {column} ({sql_type}): {reason}")]
    BadValue {
        column: String,
        sql_type: String,
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
#[error("topic {topic:?} → table {table}: {reason}")]
pub struct MappingConfigError {
    pub topic: String,
    pub table: String,
    pub reason: String,
}

/// The mapping of one topic onto its table, built once from the table's description.
pub struct TopicMapper {
    table: Arc<Table>,
    sources: Vec<Source>,
    /// JSON field name → column index, for value fields only.
    fields: HashMap<String, usize>,
    needs_headers: bool,
    /// Upsert key column indices; `None` in insert mode.
    upsert_keys: Option<Arc<[u16]>>,
}

impl fmt::Debug for TopicMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TopicMapper")
            .field("table", &self.table.to_string())
            .field("sources", &self.sources)
            .finish()
    }
}

impl TopicMapper {
    /// Checks the topic's metadata columns against the table and fixes each column's source.
    pub fn new(topic: &TopicSettings, table: Arc<Table>) -> Result<Self, MappingConfigError> {
        let err = |reason: String| MappingConfigError {
            topic: topic.name.clone(),
            table: table.to_string(),
            reason,
        };
        let mut sources = vec![Source::Field; table.columns.len()];
        for (meta, column) in metadata_pairs(&topic.metadata) {
            let (idx, col) = table.column(column).ok_or_else(|| {
                err(format!(
                    "metadata.{} names column {column:?}, which the table does not have",
                    meta.name()
                ))
            })?;
            if !meta.accepts(col.ty) {
                return Err(err(format!(
                    "metadata.{} cannot go into column {column:?} of type {}",
                    meta.name(),
                    col.sql_type
                )));
            }
            if sources[idx] != Source::Field {
                return Err(err(format!(
                    "column {column:?} is named by two metadata settings"
                )));
            }
            sources[idx] = Source::Meta(meta);
        }
        let fields = table
            .columns
            .iter()
            .enumerate()
            .filter(|(i, _)| sources[*i] == Source::Field)
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let needs_headers = sources.contains(&Source::Meta(Meta::Headers));
        let upsert_keys = match topic.mode {
            WriteMode::Insert => None,
            WriteMode::Upsert => Some(upsert_keys(topic, &table).map_err(err)?),
        };
        Ok(Self {
            table,
            sources,
            fields,
            needs_headers,
            upsert_keys,
        })
    }

    /// Rows for this topic's table, as a batch needs them (upsert keeps one column list).
    pub fn new_rows(&self) -> TableRows {
        TableRows::new(self.table.clone(), self.upsert_keys.clone())
    }

    /// The upsert key's column names; empty in insert mode.
    pub fn key_columns(&self) -> Vec<&str> {
        self.upsert_keys
            .iter()
            .flat_map(|k| k.iter())
            .map(|&i| self.table.columns[i as usize].name.as_str())
            .collect()
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Each column with where its value comes from, for `check`.
    pub fn describe(&self) -> impl Iterator<Item = (&Column, Source)> {
        self.table.columns.iter().zip(self.sources.iter().copied())
    }

    /// Whether the caller must collect the record's headers.
    pub fn needs_headers(&self) -> bool {
        self.needs_headers
    }

    /// Encodes the record as one row into `rows`; on error nothing is written.
    pub fn encode(&self, record: &RecordView<'_>, rows: &mut TableRows) -> Result<(), EncodeError> {
        let value = record.value.ok_or(MapError::Tombstone)?;
        let mut slots: Vec<Option<&RawValue>> = vec![None; self.sources.len()];
        parse_object(value, &self.fields, &mut slots)?;

        // Decide which columns this row carries: the COPY column list must match exactly.
        let include = &mut rows.scratch;
        include.clear();
        for (i, (col, source)) in self.describe().enumerate() {
            let present = match source {
                Source::Meta(_) => true,
                Source::Field => match slots[i] {
                    Some(raw) => {
                        if col.not_null && raw.get() == "null" {
                            return Err(MapError::NullForNotNull {
                                column: col.name.clone(),
                            }
                            .into());
                        }
                        true
                    }
                    None if col.has_default => false,
                    None if col.not_null => {
                        return Err(MapError::MissingField {
                            column: col.name.clone(),
                            sql_type: col.sql_type.clone(),
                        }
                        .into())
                    }
                    None => true,
                },
            };
            if present {
                include.push(i as u16);
            }
        }
        let include = std::mem::take(&mut rows.scratch);
        if let Some(keys) = &self.upsert_keys {
            for &k in keys.iter() {
                let absent = self.sources[k as usize] == Source::Field
                    && slots[k as usize].is_none_or(|raw| raw.get() == "null");
                if absent {
                    rows.scratch = include;
                    return Err(MapError::MissingKey {
                        column: self.table.columns[k as usize].name.clone(),
                    }
                    .into());
                }
            }
        }
        let ordinal = rows.next_ordinal;
        let Some(copy) = rows.buffer_for(&include) else {
            rows.scratch = include;
            return Err(EncodeError::ShapeChanged);
        };
        let extra = usize::from(self.upsert_keys.is_some());
        let mark = copy.begin_row(include.len() + extra);
        let mut result = Ok(());
        for &i in &include {
            let i = i as usize;
            let col = &self.table.columns[i];
            let written = match self.sources[i] {
                Source::Meta(meta) => write_meta(meta, col, record, copy),
                Source::Field => match slots[i] {
                    Some(raw) => write_json(col, raw, copy),
                    None => {
                        copy.null();
                        Ok(())
                    }
                },
            };
            if let Err(reason) = written {
                result = Err(MapError::BadValue {
                    column: col.name.clone(),
                    sql_type: col.sql_type.clone(),
                    reason,
                });
                break;
            }
        }
        match result {
            Ok(()) => {
                if extra == 1 {
                    // The record's position in the batch: the last one per key wins.
                    copy.bytes(&ordinal.to_be_bytes());
                }
                copy.end_row(mark);
                rows.next_ordinal += 1;
            }
            Err(_) => copy.undo_row(mark),
        }
        rows.scratch = include;
        result.map_err(EncodeError::Invalid)
    }
}

/// Resolves the upsert key: configured columns, else the primary key; it must match a unique
/// index so that `ON CONFLICT` can use it.
fn upsert_keys(topic: &TopicSettings, table: &Table) -> Result<Arc<[u16]>, String> {
    let names: Vec<String> = if topic.key.is_empty() {
        if table.primary_key.is_empty() {
            return Err("mode = \"upsert\" needs a key: the table has no primary key, so name the key columns with `key = [...]`".into());
        }
        table.primary_key.clone()
    } else {
        topic.key.clone()
    };
    let mut indices = Vec::with_capacity(names.len());
    for name in &names {
        let (i, _) = table
            .column(name)
            .ok_or_else(|| format!("upsert key column {name:?} is not a column of the table"))?;
        indices.push(i as u16);
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
    Ok(indices.into())
}

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

/// Rows for one table, grouped by column list (a record that omits a defaulted column needs a
/// COPY without that column so that the default applies).
pub struct TableRows {
    pub table: Arc<Table>,
    pub shapes: Vec<(Vec<u16>, CopyBuffer)>,
    /// Upsert key column indices; `None` in insert mode.
    pub upsert_keys: Option<Arc<[u16]>>,
    next_ordinal: i64,
    scratch: Vec<u16>,
}

impl fmt::Debug for TableRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableRows({}, {} rows)", self.table, self.rows())
    }
}

impl TableRows {
    pub fn new(table: Arc<Table>, upsert_keys: Option<Arc<[u16]>>) -> Self {
        Self {
            table,
            shapes: Vec::new(),
            upsert_keys,
            next_ordinal: 0,
            scratch: Vec::new(),
        }
    }

    /// The buffer for rows with these columns; `None` when an upsert batch already holds
    /// another column list.
    fn buffer_for(&mut self, columns: &[u16]) -> Option<&mut CopyBuffer> {
        let pos = match self.shapes.iter().position(|(c, _)| c == columns) {
            Some(pos) => pos,
            None if self.upsert_keys.is_some() && !self.shapes.is_empty() => return None,
            None => {
                self.shapes.push((columns.to_vec(), CopyBuffer::new()));
                self.shapes.len() - 1
            }
        };
        Some(&mut self.shapes[pos].1)
    }

    pub fn rows(&self) -> usize {
        self.shapes.iter().map(|(_, b)| b.rows()).sum()
    }

    pub fn bytes(&self) -> usize {
        self.shapes.iter().map(|(_, b)| b.len()).sum()
    }
}

/// Fills `slots` with the value's fields that have a column, borrowing from the payload.
fn parse_object<'de>(
    value: &'de [u8],
    fields: &HashMap<String, usize>,
    slots: &mut [Option<&'de RawValue>],
) -> Result<(), MapError> {
    let mut de = serde_json::Deserializer::from_slice(value);
    de.deserialize_map(ObjectVisitor { fields, slots })
        .and_then(|()| de.end())
        .map_err(|e| MapError::NotAnObject(e.to_string()))
}

/// Visits the top-level object; unknown fields are skipped without being decoded.
struct ObjectVisitor<'a, 'de> {
    fields: &'a HashMap<String, usize>,
    slots: &'a mut [Option<&'de RawValue>],
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match self.fields.get(key.as_ref()) {
                // Duplicate keys: the last one wins, as in most JSON readers.
                Some(&i) => self.slots[i] = Some(map.next_value::<&'de RawValue>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Reads an object key without allocating unless it contains escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The JSON text of a string value, unescaped; `None` when the value is not a string.
fn json_str(raw: &RawValue) -> Result<Option<Cow<'_, str>>, String> {
    let text = raw.get();
    if !text.starts_with('"') {
        return Ok(None);
    }
    if !text.contains('\\') {
        return Ok(Some(Cow::Borrowed(&text[1..text.len() - 1])));
    }
    serde_json::from_str::<String>(text)
        .map(|s| Some(Cow::Owned(s)))
        .map_err(|e| e.to_string())
}

fn is_json_number(text: &str) -> bool {
    text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// Encodes `value` with postgres-types into the field being written.
fn to_sql<T: ToSql>(value: T, ty: &Type, out: &mut BytesMut) -> Result<(), String> {
    value.to_sql(ty, out).map(|_| ()).map_err(|e| e.to_string())
}

/// Writes one JSON value into a column; the error says what was wrong with the value.
fn write_json(col: &Column, raw: &RawValue, copy: &mut CopyBuffer) -> Result<(), String> {
    let text = raw.get();
    if text == "null" {
        copy.null();
        return Ok(());
    }
    copy.field(|out| encode_json_value(col.ty, raw, out))
}

fn encode_json_value(ty: ColumnType, raw: &RawValue, out: &mut BytesMut) -> Result<(), String> {
    let text = raw.get();
    match ty {
        ColumnType::Text => {
            let s = match json_str(raw)? {
                Some(s) => s,
                // Numbers, booleans, objects and arrays keep their JSON text.
                None => Cow::Borrowed(text),
            };
            check_text(&s)?;
            out.put_slice(s.as_bytes());
        }
        ColumnType::Int2 => {
            let v = integer(raw)?;
            to_sql(
                i16::try_from(v).map_err(|_| format!("{v} is out of range for smallint"))?,
                &Type::INT2,
                out,
            )?
        }
        ColumnType::Int4 => {
            let v = integer(raw)?;
            to_sql(
                i32::try_from(v).map_err(|_| format!("{v} is out of range for integer"))?,
                &Type::INT4,
                out,
            )?
        }
        ColumnType::Int8 => to_sql(integer(raw)?, &Type::INT8, out)?,
        ColumnType::Float4 => to_sql(float(raw)? as f32, &Type::FLOAT4, out)?,
        ColumnType::Float8 => to_sql(float(raw)?, &Type::FLOAT8, out)?,
        ColumnType::Numeric => {
            let digits = match json_str(raw)? {
                Some(s) => s,
                None if is_json_number(text) => Cow::Borrowed(text),
                None => return Err(format!("expected a number, got {}", abbreviate(text))),
            };
            encode_numeric(digits.trim(), out).map_err(|e| e.to_string())?
        }
        ColumnType::Bool => match text {
            "true" | "\"true\"" => out.put_u8(1),
            "false" | "\"false\"" => out.put_u8(0),
            _ => return Err(format!("expected true or false, got {}", abbreviate(text))),
        },
        ColumnType::Timestamptz => to_sql(timestamp(raw)?, &Type::TIMESTAMPTZ, out)?,
        ColumnType::Timestamp => to_sql(timestamp(raw)?.naive_utc(), &Type::TIMESTAMP, out)?,
        ColumnType::Date => to_sql(date(raw)?, &Type::DATE, out)?,
        ColumnType::Uuid => {
            let s = json_str(raw)?
                .ok_or_else(|| format!("expected a UUID string, got {}", abbreviate(text)))?;
            let id = uuid::Uuid::parse_str(&s).map_err(|e| format!("{s:?} is not a UUID: {e}"))?;
            out.put_slice(id.as_bytes());
        }
        ColumnType::Json => {
            check_json_text(text)?;
            out.put_slice(text.as_bytes());
        }
        ColumnType::Jsonb => {
            check_json_text(text)?;
            out.put_u8(1); // jsonb binary format version
            out.put_slice(text.as_bytes());
        }
        ColumnType::Bytea => {
            let s = json_str(raw)?
                .ok_or_else(|| format!("expected a base64 string, got {}", abbreviate(text)))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(|e| format!("not valid base64: {e}"))?;
            out.put_slice(&bytes);
        }
    }
    Ok(())
}

/// PostgreSQL text cannot hold NUL; catching it here names the field instead of failing the batch.
fn check_text(s: &str) -> Result<(), String> {
    if s.contains('\0') {
        return Err("text cannot contain the NUL character (\\u0000)".into());
    }
    Ok(())
}

/// json and jsonb reject `\u0000` escapes; the rest of the text is valid JSON already.
fn check_json_text(text: &str) -> Result<(), String> {
    if text.contains("\\u0000") {
        return Err("JSON for json/jsonb cannot contain \\u0000".into());
    }
    Ok(())
}

fn integer(raw: &RawValue) -> Result<i64, String> {
    let text = raw.get();
    let digits = match json_str(raw)? {
        Some(s) => s,
        None => Cow::Borrowed(text),
    };
    digits
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("expected an integer, got {}", abbreviate(text)))
}

fn float(raw: &RawValue) -> Result<f64, String> {
    let text = raw.get();
    match json_str(raw)? {
        Some(s) => match s.as_ref() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other
                .trim()
                .parse()
                .map_err(|_| format!("expected a number, got {}", abbreviate(text))),
        },
        None if is_json_number(text) => text
            .parse()
            .map_err(|_| format!("expected a number, got {}", abbreviate(text))),
        None => Err(format!("expected a number, got {}", abbreviate(text))),
    }
}

/// An ISO-8601 string (offset optional, UTC assumed) or integer epoch milliseconds.
fn timestamp(raw: &RawValue) -> Result<DateTime<Utc>, String> {
    let text = raw.get();
    match json_str(raw)? {
        Some(s) => parse_timestamp(&s),
        None => {
            let ms: i64 = text.parse().map_err(|_| {
                format!(
                    "expected an ISO-8601 string or epoch milliseconds, got {}",
                    abbreviate(text)
                )
            })?;
            DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("{ms} ms is out of range"))
        }
    }
}

fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(t) = DateTime::parse_from_str(s, fmt) {
            return Ok(t.with_timezone(&Utc));
        }
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    Err(format!("{s:?} is not an ISO-8601 timestamp"))
}

fn date(raw: &RawValue) -> Result<NaiveDate, String> {
    match json_str(raw)? {
        Some(s) => NaiveDate::parse_from_str(&s, "%Y-%m-%d")
            .map_err(|_| format!("{s:?} is not an ISO-8601 date (YYYY-MM-DD)")),
        None => timestamp(raw).map(|t| t.date_naive()),
    }
}

fn write_meta(
    meta: Meta,
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
                    check_text(s)?;
                    out.put_slice(key);
                    Ok(())
                }
                _ => {
                    let s = std::str::from_utf8(key)
                        .map_err(|_| "the record key is not UTF-8 JSON".to_string())?;
                    let raw: &RawValue = serde_json::from_str(s)
                        .map_err(|e| format!("the record key is not JSON: {e}"))?;
                    encode_json_value(col.ty, raw, out)
                }
            }),
        },
        Meta::Headers => copy.field(|out| {
            let mut map = serde_json::Map::new();
            for (name, value) in r.headers {
                let v = match value {
                    None => serde_json::Value::Null,
                    Some(bytes) => match std::str::from_utf8(bytes) {
                        Ok(s) => serde_json::Value::String(s.to_owned()),
                        Err(_) => serde_json::Value::String(
                            base64::engine::general_purpose::STANDARD.encode(bytes),
                        ),
                    },
                };
                map.insert((*name).to_owned(), v);
            }
            let text = serde_json::Value::Object(map).to_string();
            check_json_text(&text)?;
            if col.ty == ColumnType::Jsonb {
                out.put_u8(1);
            }
            out.put_slice(text.as_bytes());
            Ok(())
        }),
    }
}

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

/// Shortens a value for an error message so a huge field does not flood the log.
fn abbreviate(text: &str) -> String {
    const MAX: usize = 64;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RecordFormat;

    fn col(name: &str, ty: ColumnType, not_null: bool, has_default: bool) -> Column {
        Column {
            name: name.into(),
            ty,
            sql_type: format!("{ty:?}").to_lowercase(),
            not_null,
            has_default,
        }
    }

    fn mapper(columns: Vec<Column>, metadata: MetadataColumns) -> TopicMapper {
        let table = Arc::new(Table {
            schema: "public".into(),
            name: "t".into(),
            columns,
            skipped: vec![],
            oid: 1,
            primary_key: vec![],
            unique_keys: vec![],
        });
        let topic = TopicSettings {
            name: "topic".into(),
            table: "t".into(),
            schema: "public".into(),
            format: RecordFormat::Json,
            mode: WriteMode::Insert,
            key: vec![],
            metadata,
        };
        TopicMapper::new(&topic, table).unwrap()
    }

    fn record(value: &str) -> RecordView<'_> {
        RecordView {
            topic: "topic",
            partition: 3,
            offset: 42,
            timestamp: Some(1_700_000_000_000),
            key: Some(b"k1"),
            value: Some(value.as_bytes()),
            headers: &[],
        }
    }

    fn encode(m: &TopicMapper, value: &str) -> Result<TableRows, MapError> {
        let mut rows = m.new_rows();
        match m.encode(&record(value), &mut rows) {
            Ok(()) => Ok(rows),
            Err(EncodeError::Invalid(e)) => Err(e),
            Err(EncodeError::ShapeChanged) => panic!("insert mode never changes shape"),
        }
    }

    #[test]
    fn fields_map_by_name_and_unknown_fields_are_ignored() {
        let m = mapper(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("name", ColumnType::Text, false, false),
            ],
            MetadataColumns::default(),
        );
        let rows = encode(&m, r#"{"name":"a\"b","id":7,"extra":{"x":[1,2]}}"#).unwrap();
        assert_eq!(rows.rows(), 1);
        assert_eq!(rows.shapes[0].0, vec![0, 1]);
    }

    #[test]
    fn missing_defaulted_columns_are_left_out_of_the_row() {
        let m = mapper(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("created", ColumnType::Timestamptz, true, true),
            ],
            MetadataColumns::default(),
        );
        let mut rows = encode(&m, r#"{"id":1}"#).unwrap();
        m.encode(
            &record(r#"{"id":2,"created":"2024-01-01T00:00:00Z"}"#),
            &mut rows,
        )
        .unwrap();
        let shapes: Vec<_> = rows
            .shapes
            .iter()
            .map(|(c, b)| (c.clone(), b.rows()))
            .collect();
        assert_eq!(shapes, vec![(vec![0], 1), (vec![0, 1], 1)]);
    }

    #[test]
    fn errors_name_the_column_and_the_problem() {
        let m = mapper(
            vec![
                col("id", ColumnType::Int4, true, false),
                col("note", ColumnType::Text, false, false),
            ],
            MetadataColumns::default(),
        );
        assert!(
            matches!(encode(&m, r#"{"note":"x"}"#), Err(MapError::MissingField { column, .. }) if column == "id")
        );
        assert!(matches!(
            encode(&m, r#"{"id":null}"#),
            Err(MapError::NullForNotNull { .. })
        ));
        let too_big = encode(&m, r#"{"id":3000000000}"#).unwrap_err().to_string();
        assert!(too_big.contains("out of range"), "{too_big}");
        assert!(matches!(
            encode(&m, r#"[1]"#),
            Err(MapError::NotAnObject(_))
        ));
        assert!(matches!(
            encode(&m, r#"{"id":1"#),
            Err(MapError::NotAnObject(_))
        ));
        let nul = encode(&m, r#"{"id":1,"note":"a\u0000b"}"#)
            .unwrap_err()
            .to_string();
        assert!(nul.contains("NUL"), "{nul}");
    }

    #[test]
    fn a_failed_record_leaves_the_batch_untouched() {
        let m = mapper(
            vec![col("id", ColumnType::Int2, true, false)],
            MetadataColumns::default(),
        );
        let mut rows = encode(&m, r#"{"id":1}"#).unwrap();
        let before = rows.bytes();
        assert!(m.encode(&record(r#"{"id":99999}"#), &mut rows).is_err());
        assert_eq!((rows.rows(), rows.bytes()), (1, before));
    }

    #[test]
    fn timestamps_accept_iso_strings_and_epoch_millis() {
        let utc = |s: &str| parse_timestamp(s).unwrap().timestamp_millis();
        assert_eq!(utc("2023-11-14T22:13:20Z"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14T23:13:20+01:00"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14 22:13:20"), 1_700_000_000_000);
        assert_eq!(utc("2023-11-14T22:13:20.5"), 1_700_000_000_500);
        let raw: &RawValue = serde_json::from_str("1700000000000").unwrap();
        assert_eq!(
            timestamp(raw).unwrap().timestamp_millis(),
            1_700_000_000_000
        );
        assert!(parse_timestamp("yesterday").is_err());
    }

    #[test]
    fn metadata_columns_must_fit_their_type() {
        let table = Arc::new(Table {
            schema: "public".into(),
            name: "t".into(),
            columns: vec![col("off", ColumnType::Text, true, false)],
            skipped: vec![],
            oid: 1,
            primary_key: vec![],
            unique_keys: vec![],
        });
        let topic = TopicSettings {
            name: "topic".into(),
            table: "t".into(),
            schema: "public".into(),
            format: RecordFormat::Json,
            mode: WriteMode::Insert,
            key: vec![],
            metadata: MetadataColumns {
                offset: Some("off".into()),
                ..Default::default()
            },
        };
        let err = TopicMapper::new(&topic, table).unwrap_err().to_string();
        assert!(err.contains("metadata.offset"), "{err}");
    }

    #[test]
    fn a_tombstone_is_an_error_not_a_silent_drop() {
        let m = mapper(
            vec![col("id", ColumnType::Int8, true, false)],
            MetadataColumns::default(),
        );
        let mut rows = m.new_rows();
        let mut r = record("");
        r.value = None;
        assert_eq!(
            m.encode(&r, &mut rows),
            Err(EncodeError::Invalid(MapError::Tombstone))
        );
    }

    proptest::proptest! {
        /// Whatever bytes arrive, mapping returns a row or an error; it never panics and never
        /// leaves half a row behind.
        #[test]
        fn arbitrary_values_never_panic(value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let m = mapper(
                vec![
                    col("id", ColumnType::Int8, true, false),
                    col("n", ColumnType::Numeric, false, false),
                    col("t", ColumnType::Timestamptz, false, false),
                    col("j", ColumnType::Jsonb, false, false),
                ],
                MetadataColumns::default(),
            );
            let mut rows = m.new_rows();
            let mut r = record("");
            r.value = Some(&value);
            let before = rows.bytes();
            if m.encode(&r, &mut rows).is_err() {
                proptest::prop_assert_eq!(rows.bytes(), before);
            }
        }

        #[test]
        fn arbitrary_json_objects_never_panic(
            fields in proptest::collection::vec(("[a-z]{1,3}", "(null|true|-?[0-9]{1,25}(\\.[0-9]{1,5})?|\"[^\"\\\\]{0,10}\"|\\[\\]|\\{\\})"), 0..6)
        ) {
            let m = mapper(
                vec![
                    col("a", ColumnType::Int2, false, false),
                    col("b", ColumnType::Numeric, false, false),
                    col("c", ColumnType::Date, false, true),
                    col("d", ColumnType::Bool, false, false),
                    col("e", ColumnType::Uuid, false, false),
                ],
                MetadataColumns::default(),
            );
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let value = format!("{{{}}}", body.join(","));
            let mut rows = m.new_rows();
            let mut r = record("");
            r.value = Some(value.as_bytes());
            let _ = m.encode(&r, &mut rows);
        }
    }
}
