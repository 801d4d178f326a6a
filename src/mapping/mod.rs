//! Row mapping: a Kafka record becomes one row (or one delete) of its topic's table, encoded
//! for binary COPY.
//!
//! The value is scanned once; fields are borrowed slices of the payload, converted straight
//! into each column's binary form. Where each column's value comes from is decided once per
//! topic (`source`), how the value is laid out by the format (`envelope`), and how a value
//! becomes bytes by the column type (`convert`).

mod convert;
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
pub use rows::{Rows, TableRows};
pub use source::{Meta, Source};

use crate::config::{OnError, RecordFormat, TimeUnit, TopicSettings, WriteMode};
use crate::pgcopy::{encode_numeric, CopyBuffer};
use crate::record::{OwnedRecord, RecordView};
use crate::schema::{Column, ColumnType, Table};
use convert::Input;
use envelope::{HintCache, Op};

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

/// A column's value for one record.
enum Value<'a> {
    Absent,
    Null,
    In(Input<'a>, Option<Hint>),
    Meta(&'a Meta),
    Raw(&'a [u8]),
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

    /// Whether the caller must collect the record's headers: a column maps them, or a record
    /// may become a dead letter, which keeps the whole record.
    pub fn needs_headers(&self) -> bool {
        self.needs_headers || self.on_error == OnError::DeadLetter
    }

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
        if let Some(value) = record.value {
            if self.format != RecordFormat::Raw && nests_deeper_than(value, MAX_JSON_DEPTH) {
                return Err(MapError::TooDeep(MAX_JSON_DEPTH).into());
            }
        }
        let decoded = envelope::decode(
            self.format,
            record.value,
            self.delete_on_tombstone,
            &self.hints,
        )?;
        let key = match record.key {
            Some(k) if self.needs_key || decoded.op == Op::Delete => {
                Some(envelope::key_document(self.format, k)?)
            }
            _ => None,
        };
        let mut slots: Vec<Option<&RawValue>> = vec![None; self.fields.len()];
        if let Some(doc) = decoded.doc {
            if self.fields.is_empty() {
                // Nothing to read from it, but a malformed value is still an error.
                serde_json::from_str::<IgnoredAny>(doc)
                    .map_err(|e| MapError::NotAnObject(e.to_string()))?;
            } else {
                pointer::parse_object(doc, &self.fields, &mut slots)?;
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
        }
    }

    /// Names the column, its type and where the value came from, so the error says what to fix.
    fn bad_value(&self, i: usize, reason: String) -> MapError {
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
        slots: &[Option<&'a RawValue>],
        key: Option<Input<'a>>,
        hints: Option<&envelope::Hints>,
    ) -> Result<Value<'a>, String> {
        let json = |raw: Option<&'a RawValue>, hint: Option<Hint>| match raw {
            None => Value::Absent,
            Some(r) if r.get() == "null" => Value::Null,
            Some(r) => Value::In(Input::Json(r), hint),
        };
        Ok(match &self.sources[i] {
            Source::Doc(path) => match (path.split_first(), doc) {
                (_, None) => Value::Absent,
                (None, Some(doc)) => {
                    let whole: &RawValue = serde_json::from_str(doc).map_err(|e| e.to_string())?;
                    json(Some(whole), None)
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
            Source::Const(raw) => json(Some(raw), None),
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
        let result = (|| {
            for (i, col) in self.table.columns.iter().enumerate() {
                let value = value_of(i)?;
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
        let Some(shape) = rows.buffer_for(&include) else {
            rows.scratch = include;
            return Err(EncodeError::ShapeChanged);
        };
        let copy = &mut shape.buffer;
        let mark = copy.begin_row(include.len() + usize::from(upsert));
        let mut written = Ok(());
        for &i in &include {
            let i = i as usize;
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
                }
                copy.end_row(mark);
                shape.note(
                    ordinal,
                    record,
                    keep.then(|| OwnedRecord::from_view(record)),
                );
                rows.next_ordinal += 1;
            }
            Err(_) => copy.undo_row(mark),
        }
        rows.scratch = include;
        written.map_err(EncodeError::Invalid)
    }

    /// Deletes get their own COPY of key columns and ordinal, so the merge can tell whether a
    /// key's last record in the batch was a delete or an upsert.
    fn encode_delete<'a>(
        &'a self,
        record: &RecordView<'a>,
        rows: &mut TableRows,
        value_of: impl Fn(usize) -> Result<Value<'a>, MapError>,
        key: Option<Input<'a>>,
    ) -> Result<(), EncodeError> {
        let Some(keys) = self.upsert_keys.clone() else {
            return Err(MapError::DeleteNeedsUpsert.into());
        };
        let mut values = Vec::with_capacity(keys.len());
        for &k in keys.iter() {
            let k = k as usize;
            let mut value = value_of(k)?;
            // A tombstone has no document: a key column read from the value is looked up in
            // the record key instead (Debezium keys carry the key columns by name).
            if let (Value::Absent, Source::Doc(path), Some(Input::Json(raw))) =
                (&value, &self.sources[k], key)
            {
                value = match pointer::descend(raw, path).map_err(|r| self.bad_value(k, r))? {
                    Some(v) if v.get() != "null" => Value::In(Input::Json(v), None),
                    _ => Value::Absent,
                };
            }
            if matches!(value, Value::Absent | Value::Null) {
                return Err(MapError::MissingKey {
                    column: self.table.columns[k].name.clone(),
                }
                .into());
            }
            values.push((k, value));
        }
        let ordinal = rows.next_ordinal;
        let keep = rows.keep_origins;
        let deletes = rows.deletes.get_or_insert_with(|| Rows::new(keys.to_vec()));
        let copy = &mut deletes.buffer;
        let mark = copy.begin_row(values.len() + 1);
        for (k, value) in &values {
            if let Err(reason) = self.write_value(*k, value, record, copy) {
                copy.undo_row(mark);
                return Err(self.bad_value(*k, reason).into());
            }
        }
        copy.bytes(&ordinal.to_be_bytes());
        copy.end_row(mark);
        deletes.note(
            ordinal,
            record,
            keep.then(|| OwnedRecord::from_view(record)),
        );
        rows.next_ordinal += 1;
        Ok(())
    }

    /// Absent and null both write NULL here: whether either is allowed was settled before the
    /// row began.
    fn write_value(
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
                let hint = self.time_hint(i, *hint)?;
                copy.field(|out| convert::encode(col.ty, *input, hint, out))
            }
            Value::Meta(meta) => write_meta(meta, col, record, copy),
            Value::Raw(bytes) => copy.field(|out| write_raw(col.ty, bytes, out)),
        }
    }
}

/// Deeper JSON is refused before it is decoded: PostgreSQL's json parsers stop at their stack
/// limit with an error no retry can fix, and real records nest a handful of levels.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether `json` opens more than `limit` nested objects or arrays (strings are skipped), in
/// one pass without recursion.
fn nests_deeper_than(json: &[u8], limit: usize) -> bool {
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
