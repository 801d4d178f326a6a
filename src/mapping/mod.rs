//! Row mapping: a Kafka record becomes one row (or one delete) of its topic's table, encoded
//! for binary COPY.
//!
//! The value is scanned once; fields are borrowed slices of the payload, converted straight
//! into each column's binary form. Where each column's value comes from is decided once per
//! topic (`source`), how the value is laid out by the format (`envelope`), and how a value
//! becomes bytes by the column type (`convert`). This file builds and checks a topic's
//! mapping; `encode` runs it for each record.

mod avro;
mod column_settings;
mod convert;
mod encode;
mod envelope;
mod json_schema;
mod json_write;
mod keys;
mod placeholder;
pub(crate) mod pointer;
mod protobuf;
mod removal;
mod rows;
mod schema_fields;
mod schema_types;
mod soft_delete;
mod source;
#[cfg(test)]
mod test_support;
mod transcode;

use foldhash::{HashMap, HashMapExt as _};
use std::{fmt, sync::Arc};

use anyhow::Context as _;

pub use convert::Hint;
pub(crate) use encode::nests_deeper_than;
pub use encode::MAX_JSON_DEPTH;
pub(crate) use placeholder::Placeholders;
pub use rows::{Placeholded, Presence, Rows, TableRows};
pub(crate) use schema_types::{FieldType, Fit};
pub(crate) use soft_delete::{Marker, SoftDelete};
pub use source::{Meta, Source};

use crate::config::{
    Encoding, OnConflict, OnError, RecordFormat, TimeUnit, TopicSettings, TruncateMode, WriteMode,
};
use crate::registry::{RegisteredSchema, SchemaKind};
use crate::schema::{Column, ColumnType, Table};
use column_settings::{hex_columns, is_time, json_text_columns, time_units, ConfiguredUnit};
use envelope::HintCache;
use keys::upsert_key_names;
use transcode::Decoder;

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
    #[error("the record is not in the Confluent wire format its topic expects: {0}")]
    Wire(String),
    #[error("{0}")]
    Schema(String),
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
    /// The record must be the first of its table in a batch (a truncate that meets rows of
    /// its table already there, so the rows before it commit before the table is emptied):
    /// seal the batch and encode the record again in a fresh one.
    NeedsFreshBatch,
    /// The record is written with registry schema `id`, which this mapping has not learnt:
    /// fetch it (`learn`) and encode the record again.
    NeedSchema(u32),
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
    /// The envelope the (decoded) value has: JSON, Connect JSON, Debezium or raw.
    format: RecordFormat,
    /// How the value's bytes are written; registry formats are transcoded into JSON first.
    value_encoding: Encoding,
    key_encoding: Encoding,
    /// Schema id → its compiled decoder, built once per id (ids are immutable).
    decoders: HashMap<u32, Decoder>,
    sources: Vec<Source>,
    /// Top-level document field → slot, for every field a column reads.
    fields: HashMap<String, usize>,
    /// Per column: the slot its document pointer starts at.
    slot_of: Vec<Option<usize>>,
    needs_headers: bool,
    needs_key: bool,
    /// Upsert key column indices; `None` in insert mode.
    upsert_keys: Option<Arc<[u16]>>,
    /// Every column, the COPY list of upsert rows.
    all_columns: Vec<u16>,
    delete_on_tombstone: bool,
    /// What a Debezium truncate does.
    truncate: TruncateMode,
    /// Deletes mark a column instead of removing the row.
    soft_delete: Option<SoftDelete>,
    /// Insert mode with `on_conflict = "ignore"`: rows are staged by key like upserts, and
    /// the first per key is inserted unless the key has a row.
    ignore_conflicts: bool,
    hints: HintCache,
    /// Per column: the unit configured for its integer times, if any.
    units: Vec<Option<ConfiguredUnit>>,
    /// Per column: its strings are hex (`bytea_encoding`), not base64.
    hex: Vec<bool>,
    /// Per column: its strings hold JSON text (`json_text`), written as that JSON.
    json_text: Vec<bool>,
    /// Debezium upserts: the forms of the unavailable-value placeholder per column, a value
    /// that leaves the stored one as it is.
    placeholders: Option<Placeholders>,
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

/// The registry kind an encoding's schemas have.
fn schema_kind(encoding: Encoding) -> Option<SchemaKind> {
    match encoding {
        Encoding::Json => None,
        Encoding::Avro => Some(SchemaKind::Avro),
        Encoding::Protobuf => Some(SchemaKind::Protobuf),
        Encoding::JsonSchema => Some(SchemaKind::Json),
    }
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
        let name = crate::routing::table_name(settings, topic);
        let table = crate::ddl::describe(pool, settings, &name)
            .await
            .with_context(|| format!("topic {topic:?}"))?;
        let settings = crate::ddl::settings_for(settings, &table);
        Ok(Self::new(&settings, Arc::new(table))?)
    }

    /// Checks the topic's settings against the table and fixes each column's source.
    pub fn new(topic: &TopicSettings, table: Arc<Table>) -> Result<Self, MappingConfigError> {
        let err = |reason: String| MappingConfigError {
            topic: topic.label(),
            table: table.to_string(),
            reason,
        };
        let mode = topic.write_mode();
        let ignore_conflicts = mode == WriteMode::Insert && topic.on_conflict == OnConflict::Ignore;
        let key_names = match mode {
            WriteMode::Insert if ignore_conflicts => upsert_key_names(topic, &table)
                .map_err(|e| err(format!("on_conflict = \"ignore\": {e}")))?,
            WriteMode::Insert => Vec::new(),
            WriteMode::Upsert => upsert_key_names(topic, &table).map_err(err)?,
        };
        let mut sources = source::plan(topic, &table, &key_names).map_err(err)?;
        let soft_delete = soft_delete::resolve(topic, &table, &mut sources).map_err(err)?;
        if let Some(soft) = soft_delete {
            let name = &table.columns[soft.column as usize].name;
            if key_names.contains(name) {
                return Err(err(format!(
                    "soft_delete_column {name:?} is a key column; a delete cannot change the key"
                )));
            }
        }
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
            WriteMode::Insert if !ignore_conflicts => None,
            WriteMode::Insert | WriteMode::Upsert => Some(
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
        let hex = hex_columns(topic, &table).map_err(err)?;
        let json_text = json_text_columns(topic, &table).map_err(err)?;
        let placeholders =
            Placeholders::for_topic(topic, &table, &sources, upsert_keys.as_deref(), &hex);
        let needs_headers = sources
            .iter()
            .any(|s| matches!(s, Source::Meta(Meta::Headers | Meta::Header(_))));
        let needs_key = sources
            .iter()
            .any(|s| matches!(s, Source::Key(_) | Source::KeyAuto(_)));
        Ok(Self {
            format: match topic.format.registry_encoding() {
                Some(_) => RecordFormat::Json,
                None => topic.format,
            },
            value_encoding: topic.format.registry_encoding().unwrap_or(topic.encoding),
            key_encoding: topic.key_format,
            decoders: HashMap::new(),
            delete_on_tombstone: topic.delete_on_tombstone,
            truncate: topic.truncate,
            soft_delete,
            ignore_conflicts,
            sources,
            fields,
            slot_of,
            needs_headers,
            needs_key,
            upsert_keys,
            all_columns: (0..table.columns.len() as u16).collect(),
            table,
            hints: HintCache::default(),
            units,
            hex,
            json_text,
            placeholders,
            max_record_bytes: topic.max_record_bytes.as_u64(),
            on_error: topic.on_error,
            dead_letter_topic: topic.dead_letter_topic.as_deref().map(Arc::from),
        })
    }

    /// Whether values or keys of this topic need schemas from the registry.
    pub fn uses_registry(&self) -> bool {
        self.value_encoding.uses_registry() || self.key_encoding.uses_registry()
    }

    /// Compiles the schema registered under `id` for this topic's records (after `encode`
    /// asked for it with `NeedSchema`). A schema of another kind than the topic's format, or
    /// one that does not compile, is the record's error (`schema`), never retried.
    pub fn learn(&mut self, id: u32, schema: &RegisteredSchema) -> Result<(), MapError> {
        let expected = [self.value_encoding, self.key_encoding]
            .into_iter()
            .filter_map(schema_kind)
            .collect::<Vec<_>>();
        if !expected.contains(&schema.kind) {
            return Err(MapError::Schema(format!(
                "schema {id} is a {:?} schema, but the topic reads {}",
                schema.kind,
                expected
                    .iter()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
        let decoder = transcode::build(schema)
            .map_err(|e| MapError::Schema(format!("schema {id} cannot be used: {e}")))?;
        // A plain registry format's value is the row itself: its fields go straight to their
        // slots. (Debezium's row is inside the envelope, and keys are read by pointer.)
        let slots = match (self.format, decoder.top_fields()) {
            (RecordFormat::Json, Some(names)) => {
                Some(names.iter().map(|n| self.fields.get(n).copied()).collect())
            }
            _ => None,
        };
        self.decoders.insert(
            id,
            Decoder {
                transcoder: decoder,
                slots,
            },
        );
        Ok(())
    }

    /// For `check`: the registry formats of the value and the key (`None` for plain JSON).
    pub fn registry_kinds(&self) -> (Option<SchemaKind>, Option<SchemaKind>) {
        (
            schema_kind(self.value_encoding),
            schema_kind(self.key_encoding),
        )
    }

    /// For `check`: the fields a registered value schema gives the row (the `after` record's
    /// for Debezium).
    pub fn schema_fields(&self, schema: &RegisteredSchema) -> Result<Vec<String>, String> {
        schema_fields::row_fields(schema, self.format == RecordFormat::Debezium)
    }

    /// For `check`: the type of each field a registered value schema gives the row (the
    /// `after` record's for Debezium), to hold against the columns that take whole fields.
    pub(crate) fn schema_field_types(
        &self,
        schema: &RegisteredSchema,
    ) -> Result<Vec<FieldType>, String> {
        schema_types::row_field_types(schema, self.format == RecordFormat::Debezium)
    }

    /// For `check`: how a field's type fits the column it goes into.
    pub(crate) fn field_fit(field: &FieldType, col: &Column) -> Fit {
        schema_types::fit(field.shapes, col)
    }

    /// For `check`: the columns that take a whole top-level field of the row (not a pointer
    /// into one), by that field: their values are the field's, so its type is theirs.
    pub(crate) fn columns_by_whole_field(&self) -> Vec<(&Column, &str)> {
        self.table
            .columns
            .iter()
            .zip(&self.sources)
            .filter_map(|(col, source)| match source {
                Source::Doc(path) if path.len() == 1 => Some((col, path[0].as_str())),
                _ => None,
            })
            .collect()
    }

    /// For `check`: the columns that read the row document, by the top-level field each reads.
    pub fn columns_by_field(&self) -> Vec<(&Column, &str)> {
        self.table
            .columns
            .iter()
            .zip(&self.sources)
            .filter_map(|(col, source)| match source {
                Source::Doc(path) => path.first().map(|f| (col, f.as_str())),
                _ => None,
            })
            .collect()
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
        let mut rows = TableRows::new(
            self.table.clone(),
            self.upsert_keys.clone(),
            self.on_error == OnError::DeadLetter,
        );
        rows.soft_delete = self.soft_delete;
        rows.first_wins = self.ignore_conflicts;
        rows
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

    /// For `check`: whether column `i` reads its strings as hex.
    pub(crate) fn reads_hex(&self, i: usize) -> bool {
        self.hex[i]
    }

    /// For `check`: whether column `i` reads its strings as JSON text (`json_text`).
    pub(crate) fn reads_json_text(&self, i: usize) -> bool {
        self.json_text[i]
    }

    /// For `check`'s note: column `i` is json or jsonb, fed from the record's JSON without
    /// `json_text`, on a topic whose records may come without a schema; a string there is
    /// stored as a JSON string, which is wrong when it holds JSON text (Debezium's `Json`
    /// with `schemas.enable=false`) and nothing in the record can say so.
    pub(crate) fn may_store_json_text_as_string(&self, i: usize) -> bool {
        matches!(
            self.table.columns[i].ty,
            ColumnType::Json | ColumnType::Jsonb
        ) && !self.json_text[i]
            && matches!(self.sources[i], Source::Doc(_))
            // Registry formats arrive transcoded as `Json`: their encoding tells them apart.
            && self.value_encoding == Encoding::Json
            && matches!(
                self.format,
                RecordFormat::Json | RecordFormat::ConnectJson | RecordFormat::Debezium
            )
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

    /// For `check`'s warning: the top-level field of a registered value schema column `i`
    /// takes whole, if it does. Such a column sees a bare integer only when that field's type
    /// is one; a logical time type (Avro `timestamp-micros`, Debezium `MicroTimestamp`, ...)
    /// states its unit, so `check` asks the schema before warning.
    pub(crate) fn value_schema_field(&self, i: usize) -> Option<&str> {
        schema_kind(self.value_encoding)?;
        match &self.sources[i] {
            Source::Doc(path) if path.len() == 1 => Some(path[0].as_str()),
            _ => None,
        }
    }

    /// Whether the caller must collect the record's headers: a column maps them, or a record
    /// may become a dead letter, which keeps the whole record.
    pub fn needs_headers(&self) -> bool {
        self.needs_headers || self.on_error == OnError::DeadLetter
    }
}

#[cfg(test)]
mod tests;
