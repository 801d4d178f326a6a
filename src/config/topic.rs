//! One `[[topics]]` entry: which topic (or pattern), which table, and how its records become
//! rows (format, mode, keys, column sources, errors, time units).

use std::collections::BTreeMap;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::default_true;
pub use super::table_from::TableFrom;

/// One subscribed topic (or a pattern of topics) and the table its records go to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// The topic's exact name; or give `pattern`.
    #[serde(default)]
    pub name: Option<String>,
    /// A regular expression: every matching topic, including topics created later.
    #[serde(default)]
    pub pattern: Option<String>,
    /// The target table; `{topic}` is replaced by the (sanitised) topic name. With
    /// `table_from`, `{}` is replaced by the name each record gives.
    pub table: String,
    /// Routing by record: each record names its table in a header or a value field.
    #[serde(default)]
    pub table_from: Option<TableFrom>,
    /// With `table_from`: the only tables (after the template) records may name.
    #[serde(default)]
    pub tables: Vec<String>,
    /// With `table_from`, instead of `tables`: a regex every table name must match whole.
    #[serde(default)]
    pub table_pattern: Option<String>,
    #[serde(default = "default_schema")]
    pub schema: String,
    /// How `{topic}` is turned into a table name.
    #[serde(default)]
    pub sanitize: Sanitize,
    #[serde(default)]
    pub format: RecordFormat,
    /// For `format = "debezium"`: how the change events are written (`json`, or `avro`,
    /// `protobuf`, `json-schema` as Debezium's registry converters write them).
    #[serde(default)]
    pub encoding: Encoding,
    /// How record keys are written: `json` (JSON, or plain text) or a registry format.
    #[serde(default)]
    pub key_format: Encoding,
    /// The full name of the topic's record type, for `check` to find its subject under the
    /// record-name subject strategies (`com.acme.Order`).
    #[serde(default)]
    pub record_name: Option<String>,
    /// `insert` appends; `upsert` inserts or updates by key, the last record per key winning.
    /// Unset means insert, or upsert for `debezium`.
    #[serde(default)]
    pub mode: Option<WriteMode>,
    /// Upsert key columns; empty means the table's primary key.
    #[serde(default)]
    pub key: Vec<String>,
    /// Where the key columns' values come from.
    #[serde(default)]
    pub key_from: KeyFrom,
    /// In upsert mode, a record with a null value (a tombstone) deletes its key's row.
    #[serde(default)]
    pub delete_on_tombstone: bool,
    /// Debezium truncate events (`op = "t"`): stop on them (`fail`), skip them, or empty the
    /// table in the batch's transaction, in order with the rows around them.
    #[serde(default)]
    pub truncate: TruncateMode,
    /// How a delete (tombstone or Debezium `d`) is applied: remove the row, or mark it in
    /// `soft_delete_column` and keep it.
    #[serde(default)]
    pub delete_mode: DeleteMode,
    /// With `delete_mode = "soft"`: the boolean, timestamp or timestamptz column a delete sets
    /// (true, or the delete record's Kafka timestamp) and an upsert clears (false, or NULL).
    #[serde(default)]
    pub soft_delete_column: Option<String>,
    /// Insert mode: what a record whose key already has a row does (`error`: PostgreSQL's
    /// unique violation; `ignore`: nothing, the existing row and the first record per key win).
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// `raw` format: the column that takes the whole value.
    #[serde(default)]
    pub raw_column: Option<String>,
    /// Map every column not otherwise mapped to the value field of the same name.
    #[serde(default = "default_true")]
    pub map_by_name: bool,
    /// Explicit column sources: `"/json/pointer"`, `"key"`, `"key:/pointer"`,
    /// `"meta:offset"`, `"meta:header:<name>"`, `"default"`, or `{ const = <value> }`.
    #[serde(default)]
    pub columns: BTreeMap<String, ColumnSpec>,
    /// Columns that take the record's Kafka metadata instead of a value field.
    #[serde(default)]
    pub metadata: MetadataColumns,
    /// `format = "debezium"`: the value Debezium sends for an unchanged TOASTed column
    /// (its `unavailable.value.placeholder`); such a column keeps its stored value.
    #[serde(default)]
    pub unavailable_value_placeholder: Option<String>,
    /// A record that cannot be written: stop (`fail`) or keep it in `kafka_dead_letters`.
    #[serde(default)]
    pub on_error: OnError,
    /// Also produce dead letters to this topic (at least once: before the batch commits).
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// Larger values (and keys) are errors (per `on_error`) without being decoded.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: ByteSize,
    /// The unit of an integer in a timestamp or timestamptz column when no schema gives one
    /// (unset: epoch milliseconds).
    #[serde(default)]
    pub time_unit: Option<TimeUnit>,
    /// Per column: the unit of its integers, for timestamp, timestamptz and date columns, and
    /// for time, timetz and interval columns (counts since midnight, lengths).
    #[serde(default)]
    pub time_units: BTreeMap<String, TimeUnit>,
    /// Per bytea column: how its strings spell the bytes (base64 unless this says `hex`).
    #[serde(default)]
    pub bytea_encoding: BTreeMap<String, ByteaEncoding>,
    /// json and jsonb columns whose values are strings holding JSON text, written as that
    /// JSON: what a schema's `io.debezium.data.Json` says, for records that come without one
    /// (Debezium with `schemas.enable=false`), where the string alone cannot tell.
    #[serde(default)]
    pub json_text: Vec<String>,
    /// Create the table from the first record's schema when it is missing, in that record's
    /// batch's transaction.
    #[serde(default)]
    pub auto_create: bool,
    /// What a schema field the table lacks does: unset ignores it (as a record's unknown
    /// fields are); `add_columns` adds a nullable column in the batch that first carries it.
    #[serde(default)]
    pub auto_evolve: Option<AutoEvolve>,
}

/// How a table follows its records' schema (`auto_evolve`). Only additions: the sink never
/// drops or narrows a column, since other readers of the table may depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoEvolve {
    /// A new field adds a nullable column.
    AddColumns,
}

/// How a bytea column's strings spell their bytes. Base64 is what Kafka Connect and the
/// registry transcoders write, so it is the default; hex is for producers that write
/// PostgreSQL's own `\x…` text or bare hex digits (Debezium's `binary.handling.mode=hex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ByteaEncoding {
    Base64,
    Hex,
}

/// What an integer in a time column counts since 1970-01-01 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Days: date columns only (Kafka Connect's and Debezium's `Date`).
    Days,
    S,
    Ms,
    Us,
    Ns,
}

impl TimeUnit {
    /// For messages: what the number counts.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            TimeUnit::Days => "days since the epoch",
            TimeUnit::S => "epoch seconds",
            TimeUnit::Ms => "epoch milliseconds",
            TimeUnit::Us => "epoch microseconds",
            TimeUnit::Ns => "epoch nanoseconds",
        }
    }
}

/// What a Debezium truncate event does. Failing is the default: emptying a table is not
/// something a sink should start doing unasked, and skipping one silently diverges from the
/// source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TruncateMode {
    /// A `decode` error, per `on_error`.
    #[default]
    Fail,
    /// The record is taken and nothing is written.
    Ignore,
    /// `TRUNCATE` the table in the batch's transaction, after the rows before it and before
    /// the rows after it.
    Apply,
}

/// How deletes reach the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeleteMode {
    /// The row is deleted.
    #[default]
    Hard,
    /// The row stays, marked in `soft_delete_column`.
    Soft,
}

/// What an insert does when its key already has a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// PostgreSQL refuses the row (a `rejected` error, per `on_error`).
    #[default]
    Error,
    /// Insert or do nothing on the key.
    Ignore,
}

/// What happens to a record the sink cannot write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop at the record, with an error naming it; the position stays there.
    #[default]
    Fail,
    /// Write it to `kafka_dead_letters` in the batch's transaction and go on.
    DeadLetter,
}

impl TopicSettings {
    /// The mode in effect: Debezium change events are always upserts (and deletes).
    pub fn write_mode(&self) -> WriteMode {
        match (self.mode, self.format) {
            (Some(mode), _) => mode,
            (None, RecordFormat::Debezium) => WriteMode::Upsert,
            (None, _) => WriteMode::Insert,
        }
    }

    /// The name or pattern, for messages.
    pub fn label(&self) -> String {
        match (&self.name, &self.pattern) {
            (Some(name), _) => name.clone(),
            (None, Some(pattern)) => format!("/{pattern}/"),
            (None, None) => "<unnamed>".into(),
        }
    }
}

/// An explicit column source: a string spec, or a constant.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum ColumnSpec {
    Source(String),
    Const {
        #[serde(rename = "const")]
        value: serde_json::Value,
    },
}

/// How a record value is decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordFormat {
    /// A JSON object whose fields map onto columns by name.
    #[default]
    Json,
    /// The whole value into one column (`raw_column`), untouched.
    Raw,
    /// Kafka Connect's JsonConverter envelope `{"schema": …, "payload": …}`.
    ConnectJson,
    /// A Debezium change event: `after` is upserted, `op = "d"` deletes `before`'s key.
    Debezium,
    /// Avro in the Confluent wire format (schema id from a Schema Registry); a record's fields
    /// map onto columns by name, as for JSON.
    Avro,
    /// Protobuf in the Confluent wire format (schema id and message indexes).
    Protobuf,
    /// JSON in the Confluent wire format with a JSON Schema in the registry.
    JsonSchema,
}

impl RecordFormat {
    /// The registry format a value in this format is written in, if it is one.
    pub fn registry_encoding(self) -> Option<Encoding> {
        match self {
            RecordFormat::Avro => Some(Encoding::Avro),
            RecordFormat::Protobuf => Some(Encoding::Protobuf),
            RecordFormat::JsonSchema => Some(Encoding::JsonSchema),
            _ => None,
        }
    }
}

/// How the bytes of a value (`encoding`, for `format = "debezium"`) or a key (`key_format`)
/// are written: plain JSON, or a registry format in the Confluent wire format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// JSON (a key may also be plain text).
    #[default]
    Json,
    Avro,
    Protobuf,
    JsonSchema,
}

impl Encoding {
    /// Whether its schema comes from the registry.
    pub fn uses_registry(self) -> bool {
        self != Encoding::Json
    }
}

/// The placeholder Debezium sends for an unchanged TOASTed column unless its
/// `unavailable.value.placeholder` says otherwise (`unavailable_value_placeholder`).
pub const DEFAULT_PLACEHOLDER: &str = "__debezium_unavailable_value";

/// How rows reach the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    #[default]
    Insert,
    Upsert,
}

/// Where upsert key columns take their values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyFrom {
    /// From the value (fields of the same name, or the columns' explicit sources).
    #[default]
    Value,
    /// From the record key: a JSON object's fields by name, or a plain string or number into
    /// the single key column.
    Key,
    /// From the record's topic, partition and offset (the metadata columns).
    Offset,
}

/// How `{topic}` becomes part of a table name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sanitize {
    /// Lower case; anything but letters, digits and `_` becomes `_`; at most 63 bytes.
    #[default]
    Snake,
    /// The topic name as it is (quoted in SQL).
    None,
}

/// Column names for record metadata; each is optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataColumns {
    pub topic: Option<String>,
    pub partition: Option<String>,
    pub offset: Option<String>,
    pub timestamp: Option<String>,
    pub key: Option<String>,
    pub headers: Option<String>,
}

// Serde defaults; README's settings tables list each with its meaning.

/// PostgreSQL's own default schema.
fn default_schema() -> String {
    "public".into()
}
/// Larger records are refused before decoding, bounding what one record can cost.
fn default_max_record_bytes() -> ByteSize {
    ByteSize::mib(16)
}

/// Why a topic's settings cannot use `auto_create`/`auto_evolve`, for the configuration check.
pub(crate) fn schema_change_problem(topic: &TopicSettings) -> Option<String> {
    if !topic.auto_create && topic.auto_evolve.is_none() {
        return None;
    }
    if topic.table_from.is_some() {
        // A name a record gives is never DDL (README's routing promise); listed tables exist.
        return Some("auto_create and auto_evolve apply to a topic's one table; with table_from the records name tables that must exist: create them yourself and remove auto_create/auto_evolve".into());
    }
    let reads_schema = match topic.format {
        RecordFormat::ConnectJson
        | RecordFormat::Avro
        | RecordFormat::Protobuf
        | RecordFormat::JsonSchema => true,
        RecordFormat::Debezium => matches!(topic.encoding, Encoding::Json | Encoding::Avro),
        _ => false,
    };
    if matches!(topic.format, RecordFormat::Json | RecordFormat::Raw) {
        return Some(format!(
            "auto_create and auto_evolve take the columns from the records' schema, and format = \"{}\" records carry none: create the table yourself (CREATE TABLE ...) and remove auto_create/auto_evolve, or use a format with a schema (connect-json, avro, protobuf, json-schema, debezium)",
            if topic.format == RecordFormat::Raw { "raw" } else { "json" }
        ));
    }
    if !reads_schema {
        return Some("auto_create and auto_evolve read Debezium's JSON and Avro change events; for Debezium in protobuf or json-schema create the table yourself".into());
    }
    if topic.auto_evolve.is_some() && !topic.map_by_name {
        return Some(
            "auto_evolve adds columns that take their field by name: it needs map_by_name = true"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Toml};

    use super::*;

    /// Protobuf and JSON Schema topics may create and evolve their tables; Debezium change
    /// events in those encodings are refused, saying to create the table.
    #[test]
    fn registry_formats_take_auto_create_but_debezium_only_in_json_or_avro() {
        let topic = |extra: &str| -> TopicSettings {
            figment::Figment::from(Toml::string(&format!(
                "name = \"t\"\ntable = \"t\"\nauto_create = true\n{extra}"
            )))
            .extract()
            .unwrap()
        };
        for ok in [
            "format = \"protobuf\"",
            "format = \"json-schema\"",
            "format = \"avro\"",
            "format = \"debezium\"\nencoding = \"avro\"",
        ] {
            assert_eq!(schema_change_problem(&topic(ok)), None, "{ok}");
        }
        for refused in ["protobuf", "json-schema"] {
            let why = schema_change_problem(&topic(&format!(
                "format = \"debezium\"\nencoding = \"{refused}\""
            )))
            .expect("refused");
            assert!(why.contains("create the table yourself"), "{why}");
        }
    }

    /// Routing by record and schema changes together are refused, whichever setting is on: a
    /// table a record names is never created or altered.
    #[test]
    fn table_from_with_auto_create_or_auto_evolve_is_refused() {
        for ddl in ["auto_create = true", "auto_evolve = \"add_columns\""] {
            let topic: TopicSettings = figment::Figment::from(Toml::string(&format!(
                "name = \"t\"\nformat = \"connect-json\"\ntable = \"{{}}\"\ntable_from = {{ header = \"h\" }}\ntables = [\"a\"]\n{ddl}"
            )))
            .extract()
            .unwrap();
            let why = schema_change_problem(&topic).expect("refused");
            assert!(why.contains("table_from"), "{why}");
            let without = TopicSettings {
                table_from: None,
                ..topic
            };
            assert_eq!(schema_change_problem(&without), None);
        }
    }
}
