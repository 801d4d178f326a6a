//! Settings: a TOML file, overridden by environment variables, overridden by flags.
//!
//! figment merges the layers so every setting has one name everywhere: `batch.max_wait` in the
//! file is `KAFKA_PG_SINK_BATCH__MAX_WAIT` in the environment and `--set batch.max_wait=…` on the
//! command line.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use bytesize::ByteSize;
use figment::providers::{Env, Format, Serialized, Toml};

use figment::Figment;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;

/// Prefix of the environment variables that override settings (`__` separates levels).
pub const ENV_PREFIX: &str = "KAFKA_PG_SINK_";

/// Everything the sink needs to run; built once at startup and never mutated.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub kafka: KafkaSettings,
    pub postgres: PostgresSettings,
    #[serde(default)]
    pub batch: BatchSettings,
    #[serde(default)]
    pub log: LogSettings,
    #[serde(default)]
    pub http: HttpSettings,
    /// One entry per subscribed topic; each goes to its own table.
    #[serde(default)]
    pub topics: Vec<TopicSettings>,
}

/// Kafka consumer settings; `properties` passes librdkafka options through verbatim.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    pub bootstrap_servers: String,
    #[serde(default = "default_group_id")]
    pub group_id: String,
    #[serde(default)]
    pub group_protocol: GroupProtocol,
    /// Where a partition with no stored offset starts.
    #[serde(default)]
    pub auto_offset_reset: ResetPolicy,
    /// A stored offset outside the partition's range (retention deleted the records, or the
    /// topic was recreated): stop (`fail`, the default), or move to `earliest` or `latest`
    /// and record it.
    #[serde(default = "default_out_of_range")]
    pub offset_out_of_range: ResetPolicy,
    /// Classic protocol only; the `consumer` protocol takes it from the broker.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// librdkafka properties (SASL, SSL, fetch sizes, …), applied after the sink's own.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// How often assigned partitions' watermarks are observed and stored (`kafka_watermarks`).
    #[serde(default = "default_watermark_interval", with = "humantime_serde")]
    pub watermark_interval: Duration,
    /// Also commit each position to the Kafka group after PostgreSQL commits it, for Kafka's
    /// own lag tools. Advisory only: PostgreSQL stays the source of truth.
    #[serde(default)]
    pub mirror_commits: bool,
    /// How long authentication with the brokers may keep failing before `run` gives up with
    /// exit 1: a wrong password or certificate is not something retrying fixes.
    #[serde(default = "default_auth_failure_timeout", with = "humantime_serde")]
    pub auth_failure_timeout: Duration,
}

impl KafkaSettings {
    /// librdkafka's `max.poll.interval.ms` as configured (its default is 300 s): the longest
    /// the consumer thread may stay away from `poll`, rebalance callbacks included.
    pub fn max_poll_interval(&self) -> Duration {
        self.properties
            .get("max.poll.interval.ms")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(300), Duration::from_millis)
    }
}

impl std::fmt::Debug for KafkaSettings {
    /// Property values that look like secrets are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_key(k) { "***" } else { v.as_str() },
                )
            })
            .collect();
        f.debug_struct("KafkaSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("group_id", &self.group_id)
            .field("group_protocol", &self.group_protocol)
            .field("auto_offset_reset", &self.auto_offset_reset)
            .field("offset_out_of_range", &self.offset_out_of_range)
            .field("session_timeout", &self.session_timeout)
            .field("properties", &properties)
            .field("watermark_interval", &self.watermark_interval)
            .field("mirror_commits", &self.mirror_commits)
            .field("auth_failure_timeout", &self.auth_failure_timeout)
            .finish()
    }
}

/// The Kafka group protocol: `classic` (cooperative-sticky) or KIP-848 `consumer`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupProtocol {
    #[default]
    Classic,
    Consumer,
}

/// What to do with a partition that has no offset stored in PostgreSQL yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetPolicy {
    #[default]
    Earliest,
    Latest,
    /// Refuse to start the partition: an operator must set its offset first.
    Fail,
}

/// PostgreSQL connection and writer settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSettings {
    /// Kept secret so that it never reaches a log line or a `Debug` print.
    pub url: SecretString,
    /// Writer connections; each owns a disjoint set of partitions and commits on its own.
    #[serde(default = "default_writers")]
    pub writers: usize,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Upper bound for any one statement of a batch transaction.
    #[serde(default = "default_statement_timeout", with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// How long claiming a partition waits for a row lock before fencing the holder.
    #[serde(default = "default_lock_timeout", with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Lets the server end a transaction whose client stopped (SIGSTOP, network partition).
    #[serde(
        default = "default_idle_in_transaction_timeout",
        with = "humantime_serde"
    )]
    pub idle_in_transaction_timeout: Duration,
}

/// Which part of the sink a PostgreSQL session serves. Each gets the session settings that
/// bound what it can hold, from the one place that builds connection options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRole {
    /// A writer's connection: no statement runs forever, and a transaction whose client went
    /// away releases its offset rows.
    Writer,
    /// The shared pool of the consumer thread, the HTTP endpoint and the CLI verbs: claims,
    /// rereads and table descriptions run on the consumer thread, so none runs unbounded.
    Control,
    /// `migrate`: a migration may take long, and its advisory lock waits for another run.
    Migrate,
}

impl PostgresSettings {
    /// Only a URL, the other settings at their defaults: for `migrate`, which reads nothing else.
    pub fn with_url(url: SecretString) -> Self {
        Self {
            url,
            writers: default_writers(),
            connect_timeout: default_connect_timeout(),
            statement_timeout: default_statement_timeout(),
            lock_timeout: default_lock_timeout(),
            idle_in_transaction_timeout: default_idle_in_transaction_timeout(),
        }
    }

    /// Connection options for a session of `role`. A writer's and the pool's sessions name
    /// themselves `kafka-pg-sink`, the only sessions a claim's fence may end; `migrate` names
    /// itself apart, so no fence ever ends a migration. Statements are logged at trace.
    pub fn connect_options(&self, role: SessionRole) -> Result<PgConnectOptions, sqlx::Error> {
        let ms = |d: Duration| d.as_millis().max(1).to_string();
        let name = match role {
            SessionRole::Writer | SessionRole::Control => crate::offsets::APPLICATION_NAME,
            SessionRole::Migrate => "kafka-pg-sink-migrate",
        };
        let options = PgConnectOptions::from_str(self.url.expose_secret())?
            .application_name(name)
            .log_statements(tracing::log::LevelFilter::Trace)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(10));
        Ok(match role {
            SessionRole::Writer => options.options([
                ("statement_timeout", ms(self.statement_timeout)),
                (
                    "idle_in_transaction_session_timeout",
                    ms(self.idle_in_transaction_timeout),
                ),
            ]),
            SessionRole::Control => {
                options.options([("statement_timeout", ms(self.statement_timeout))])
            }
            SessionRole::Migrate => options,
        })
    }
}

/// Limits that close a batch; whichever is reached first wins.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSettings {
    #[serde(default = "default_max_records")]
    pub max_records: usize,
    #[serde(default = "default_max_bytes")]
    pub max_bytes: ByteSize,
    #[serde(default = "default_max_wait", with = "humantime_serde")]
    pub max_wait: Duration,
    /// Sealed batches a writer may hold before the consumer waits for it.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// First and last delay between retries of a failed transaction.
    #[serde(default = "default_retry_min", with = "humantime_serde")]
    pub retry_backoff_min: Duration,
    #[serde(default = "default_retry_max", with = "humantime_serde")]
    pub retry_backoff_max: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_records: default_max_records(),
            max_bytes: default_max_bytes(),
            max_wait: default_max_wait(),
            max_in_flight: default_max_in_flight(),
            retry_backoff_min: default_retry_min(),
            retry_backoff_max: default_retry_max(),
        }
    }
}

/// Log output settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    #[serde(default)]
    pub format: LogFormat,
    /// Interval of the progress line (records/s, rows committed).
    #[serde(default = "default_progress_interval", with = "humantime_serde")]
    pub progress_interval: Duration,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::default(),
            progress_interval: default_progress_interval(),
        }
    }
}

/// The HTTP endpoint: `/metrics` (Prometheus), `/health` and `/ready`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default = "default_listen")]
    pub listen: std::net::SocketAddr,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: default_listen(),
        }
    }
}

/// Human-readable lines or one JSON object per line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

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
    /// The target table; `{topic}` is replaced by the (sanitised) topic name.
    pub table: String,
    #[serde(default = "default_schema")]
    pub schema: String,
    /// How `{topic}` is turned into a table name.
    #[serde(default)]
    pub sanitize: Sanitize,
    #[serde(default)]
    pub format: RecordFormat,
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
    /// Per column: the unit of its integers, for timestamp, timestamptz and date columns.
    #[serde(default)]
    pub time_units: BTreeMap<String, TimeUnit>,
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
}

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

/// Also the `consumer_group` key of `kafka_offsets`: another name has no stored positions.
fn default_group_id() -> String {
    "kafka-pg-sink".into()
}
/// Skipping or re-reading records is a person's decision: stop and say how to continue.
fn default_out_of_range() -> ResetPolicy {
    ResetPolicy::Fail
}
/// librdkafka's own default; only the classic protocol uses it.
fn default_session_timeout() -> Duration {
    Duration::from_secs(45)
}

fn default_auth_failure_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Measured best with two cores shared by Kafka, PostgreSQL and the sink (README).
fn default_writers() -> usize {
    2
}
/// Per attempt, so an unreachable server fails the attempt instead of hanging it.
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}
/// A stuck statement fails its transaction, which is then retried like any transient error.
fn default_statement_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Short: a claim should not wait long on a stopped owner's row locks before ending its session.
fn default_lock_timeout() -> Duration {
    Duration::from_secs(5)
}
/// A second, server-side bound on a writer transaction whose client stopped.
fn default_idle_in_transaction_timeout() -> Duration {
    Duration::from_secs(60)
}
/// With `max_bytes`, bounds a writer's open batch, so memory does not grow with the backlog.
fn default_max_records() -> usize {
    10_000
}
/// Payload bytes; with `max_records`, bounds a writer's open batch.
fn default_max_bytes() -> ByteSize {
    ByteSize::mib(8)
}
/// The latency bound when records trickle in: the longest a record waits for its commit.
fn default_max_wait() -> Duration {
    Duration::from_millis(250)
}
/// Lets the consumer fill the next batch while the writer commits one.
fn default_max_in_flight() -> usize {
    2
}
/// The first retry comes quickly; backoff doubles from here.
fn default_retry_min() -> Duration {
    Duration::from_millis(100)
}
/// The cap, so the sink resumes within half a minute of an outage ending.
fn default_retry_max() -> Duration {
    Duration::from_secs(30)
}
/// Often enough to see progress, rarely enough not to flood the log.
fn default_progress_interval() -> Duration {
    Duration::from_secs(10)
}
/// PostgreSQL's own default schema.
fn default_schema() -> String {
    "public".into()
}
/// Loopback only: metrics are not exposed unless asked for (`0.0.0.0:9464` in containers).
fn default_listen() -> std::net::SocketAddr {
    ([127, 0, 0, 1], 9464).into()
}
/// Also librdkafka's statistics interval: `kafka_lag` and `/ready`'s view of Kafka are about
/// this stale.
fn default_watermark_interval() -> Duration {
    Duration::from_secs(5)
}
/// For settings that are on unless turned off (`http.enabled`, `map_by_name`).
fn default_true() -> bool {
    true
}
/// Larger records are refused before decoding, bounding what one record can cost.
fn default_max_record_bytes() -> ByteSize {
    ByteSize::mib(16)
}

/// Overrides given on the command line; they win over file and environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub bootstrap_servers: Option<String>,
    pub database_url: Option<String>,
    pub group_id: Option<String>,
    pub log_format: Option<LogFormat>,
    /// `key.path=value` pairs; the value is read as TOML, falling back to a plain string.
    pub set: Vec<String>,
}

/// A configuration problem, phrased for the person who has to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("configuration: `--set {0}` must look like key.path=value")]
    BadSet(String),
    #[error("configuration: {0}")]
    Invalid(String),
}

impl Settings {
    /// Loads the layers in order of precedence and validates the result.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut settings: Settings = layers(file, overrides)?.extract().map_err(Box::new)?;
        for (key, value) in settings.kafka.properties.iter_mut() {
            *value = expand_env(value).map_err(|var| {
                ConfigError::Invalid(format!(
                    "kafka.properties.{key} refers to ${{{var}}}, which is not set"
                ))
            })?;
        }
        settings.postgres.url = resolve_database_url(&settings.postgres.url)?;
        settings.validate()?;
        Ok(settings)
    }

    /// The log format, read before anything else so that even configuration errors are
    /// logged the way the operator asked for.
    pub fn peek_log_format(file: Option<&Path>, overrides: &Overrides) -> LogFormat {
        layers(file, overrides)
            .ok()
            .and_then(|f| f.extract_inner("log.format").ok())
            .unwrap_or_default()
    }

    /// Only the database URL, for commands (`migrate`) that need nothing else.
    pub fn load_database_url(
        file: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<SecretString, ConfigError> {
        let url: SecretString = layers(file, overrides)?
            .extract_inner("postgres.url")
            .map_err(Box::new)?;
        resolve_database_url(&url)
    }

    /// Checks that cannot be expressed in the types.
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.topics.is_empty() {
            return invalid(
                "no [[topics]] configured: name at least one topic and its table".into(),
            );
        }
        if self.kafka.bootstrap_servers.trim().is_empty() {
            return invalid("kafka.bootstrap_servers is empty".into());
        }
        if self.kafka.group_id.trim().is_empty() {
            return invalid("kafka.group_id is empty".into());
        }
        let mut seen = std::collections::HashSet::new();
        for topic in &self.topics {
            let label = topic.label();
            match (&topic.name, &topic.pattern) {
                (Some(_), Some(_)) => {
                    return invalid(format!("topic {label}: give name or pattern, not both"))
                }
                (None, None) => {
                    return invalid("every [[topics]] entry needs a name or a pattern".into())
                }
                (Some(name), None) if name.is_empty() => {
                    return invalid("a topic name is empty".into())
                }
                (None, Some(pattern)) => {
                    regex::Regex::new(pattern).map_err(|e| {
                        ConfigError::Invalid(format!("topic pattern {pattern:?}: {e}"))
                    })?;
                }
                _ => {}
            }
            if topic.table.is_empty() || topic.schema.is_empty() {
                return invalid(format!("topic {label}: table and schema must not be empty"));
            }
            if topic.name.is_some() && topic.table.contains("{topic}") {
                // Fine: the name is known, the template resolves at startup.
            }
            if !seen.insert(label.clone()) {
                return invalid(format!("topic {label} is configured twice"));
            }
            let mode = topic.write_mode();
            if topic.format == RecordFormat::Debezium && mode == WriteMode::Insert {
                return invalid(format!("topic {label}: format = \"debezium\" applies changes and needs mode = \"upsert\""));
            }
            if topic.delete_on_tombstone && mode != WriteMode::Upsert {
                return invalid(format!(
                    "topic {label}: delete_on_tombstone needs mode = \"upsert\""
                ));
            }
            if topic.key_from != KeyFrom::Value && mode != WriteMode::Upsert {
                return invalid(format!("topic {label}: key_from needs mode = \"upsert\""));
            }
            if topic.time_unit == Some(TimeUnit::Days) {
                return invalid(format!("topic {label}: time_unit applies to timestamp columns, where \"days\" does not fit; give date columns their unit in [topics.time_units]"));
            }
            if topic.dead_letter_topic.is_some() && topic.on_error != OnError::DeadLetter {
                return invalid(format!(
                    "topic {label}: dead_letter_topic needs on_error = \"dead_letter\""
                ));
            }
            match (topic.format, &topic.raw_column) {
                (RecordFormat::Raw, None) => {
                    return invalid(format!("topic {label}: format = \"raw\" needs raw_column, the column that takes the value"))
                }
                (RecordFormat::Raw, Some(_)) => {}
                (_, Some(_)) => return invalid(format!("topic {label}: raw_column only applies to format = \"raw\"")),
                _ => {}
            }
        }
        if self.postgres.writers == 0 || self.postgres.writers > 64 {
            return invalid(format!(
                "postgres.writers must be between 1 and 64, not {}",
                self.postgres.writers
            ));
        }
        if self.batch.max_records == 0 || self.batch.max_bytes.as_u64() == 0 {
            return invalid("batch.max_records and batch.max_bytes must be positive".into());
        }
        if self.batch.max_in_flight == 0 {
            return invalid("batch.max_in_flight must be at least 1".into());
        }
        if self.batch.max_wait.is_zero() {
            return invalid("batch.max_wait must be positive".into());
        }
        for key in self.kafka.properties.keys() {
            if matches!(
                key.as_str(),
                "enable.auto.commit"
                    | "enable.auto.offset.store"
                    | "group.id"
                    | "bootstrap.servers"
                    // Start positions are always explicit and an out-of-range position is
                    // handled by `offset_out_of_range`; librdkafka must never move one.
                    | "auto.offset.reset"
            ) {
                return invalid(format!(
                    "kafka.properties.{key} is managed by the sink; use the kafka.* setting or drop it"
                ));
            }
        }
        Ok(())
    }
}

/// `postgres.url` as every command uses it: `${NAME}` read from the environment, then
/// checked to be a URL. One function, so `migrate` connects exactly as `run` and `check` do.
/// Errors name the variable or the problem, never the URL (it may hold a password).
fn resolve_database_url(url: &SecretString) -> Result<SecretString, ConfigError> {
    let url = expand_env(url.expose_secret()).map_err(|var| {
        ConfigError::Invalid(format!(
            "postgres.url refers to ${{{var}}}, which is not set"
        ))
    })?;
    url::Url::parse(&url)
        .map_err(|e| ConfigError::Invalid(format!("postgres.url is not a valid URL: {e}")))?;
    Ok(url.into())
}

/// File, then environment, then flags: later layers win.
fn layers(file: Option<&Path>, overrides: &Overrides) -> Result<Figment, ConfigError> {
    let mut figment = Figment::new();
    if let Some(file) = file {
        if !file.exists() {
            return Err(ConfigError::Invalid(format!(
                "config file {} does not exist",
                file.display()
            )));
        }
        figment = figment.merge(Toml::file(file));
    }
    // The conventional variables first, so the prefixed ones can still override them.
    figment = figment
        .merge(
            Env::raw()
                .only(&["KAFKA_BOOTSTRAP_SERVERS"])
                .map(|_| "kafka.bootstrap_servers".into()),
        )
        .merge(
            Env::raw()
                .only(&["DATABASE_URL"])
                .map(|_| "postgres.url".into()),
        )
        // KAFKA_PG_SINK_CONFIG names the file (read by the command line), not a setting.
        .merge(Env::prefixed(ENV_PREFIX).ignore(&["CONFIG"]).split("__"));
    let flags = [
        (
            "kafka.bootstrap_servers",
            overrides.bootstrap_servers.clone(),
        ),
        ("postgres.url", overrides.database_url.clone()),
        ("kafka.group_id", overrides.group_id.clone()),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            figment = figment.merge(Serialized::default(key, value));
        }
    }
    if let Some(format) = overrides.log_format {
        figment = figment.merge(Serialized::default("log.format", format));
    }
    for pair in &overrides.set {
        let (key, raw) = pair
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| ConfigError::BadSet(pair.clone()))?;
        let value: figment::value::Value = raw
            .parse::<toml_value::Parsed>()
            .map(|p| p.0)
            .unwrap_or_else(|_| raw.to_string().into());
        figment = figment.merge(Serialized::default(key.trim(), value));
    }
    Ok(figment)
}

/// The TOML value parser behind `--set`, so `--set batch.max_records=500` becomes a number.
mod toml_value {
    use std::str::FromStr;

    /// A value parsed from a `--set` right-hand side.
    pub(super) struct Parsed(pub figment::value::Value);

    impl FromStr for Parsed {
        type Err = ();
        fn from_str(raw: &str) -> Result<Self, ()> {
            // Parse `v = <raw>` as a TOML document and take `v`.
            let doc = format!("v = {raw}");
            let data = <figment::providers::Toml as figment::providers::Format>::string(&doc);
            let figment = figment::Figment::from(data);
            figment.find_value("v").map(Parsed).map_err(|_| ())
        }
    }
}

/// Replaces `${NAME}` with the environment variable NAME, so secrets can stay out of the file.
/// Returns the name of the first variable that is not set.
fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        out.push_str(&std::env::var(name).map_err(|_| name.to_string())?);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Returns `url` with any password replaced, for logs and `check` output.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            // A password can also hide in the query string (`?password=`).
            let pairs: Vec<(String, String)> = parsed
                .query_pairs()
                .map(|(k, v)| {
                    let v = if is_secret_key(&k) {
                        "***".into()
                    } else {
                        v.into_owned()
                    };
                    (k.into_owned(), v)
                })
                .collect();
            if !pairs.is_empty() {
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        Err(_) => "<unparseable url>".into(),
    }
}

/// A setting's value spelled as the configuration writes it (`connect-json`, `dead_letter`),
/// so output can be copied back into a file; `Debug` names are Rust's, not the user's.
pub(crate) fn spelled<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => format!("<{e}>"),
    }
}

/// Whether a configuration key names a secret (password, key, token) whose value must be hidden.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "sasl.jaas.config",
        "ssl.key.pem",
        "private",
    ]
    .iter()
    .any(|s| key.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_role_gets_the_bounds_it_needs() {
        let pg = PostgresSettings {
            statement_timeout: Duration::from_secs(7),
            idle_in_transaction_timeout: Duration::from_secs(9),
            ..PostgresSettings::with_url(SecretString::from("postgres://u:p@127.0.0.1:5432/db"))
        };
        let writer = pg.connect_options(SessionRole::Writer).unwrap();
        assert_eq!(writer.get_application_name(), Some("kafka-pg-sink"));
        let options = writer.get_options().unwrap_or_default();
        assert!(
            options.contains("statement_timeout=7000")
                && options.contains("idle_in_transaction_session_timeout=9000"),
            "{options}"
        );
        let control = pg.connect_options(SessionRole::Control).unwrap();
        assert_eq!(control.get_application_name(), Some("kafka-pg-sink"));
        let options = control.get_options().unwrap_or_default();
        assert!(
            options.contains("statement_timeout=7000") && !options.contains("idle_in"),
            "{options}"
        );
        // A fence ends only `kafka-pg-sink` sessions; a migration is never one of them.
        let migrate = pg.connect_options(SessionRole::Migrate).unwrap();
        assert_eq!(
            migrate.get_application_name(),
            Some("kafka-pg-sink-migrate")
        );
        assert_eq!(migrate.get_options(), None);
    }

    fn write(contents: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), contents).unwrap();
        file
    }

    const MINIMAL: &str = r#"
        [kafka]
        bootstrap_servers = "k:9092"
        [postgres]
        url = "postgres://u:hunter2@h/db"
        [[topics]]
        name = "orders"
        table = "orders"
    "#;

    #[test]
    fn defaults_fill_the_gaps() {
        let file = write(MINIMAL);
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        assert_eq!(s.kafka.group_id, "kafka-pg-sink");
        assert_eq!(s.batch.max_records, 10_000);
        assert_eq!(s.topics[0].schema, "public");
        assert_eq!(s.kafka.auto_offset_reset, ResetPolicy::Earliest);
        assert_eq!(
            s.kafka.offset_out_of_range,
            ResetPolicy::Fail,
            "a gap is never skipped unless asked"
        );
    }

    /// Every default README's settings tables promise, one assertion each, so a default that
    /// drifts fails here rather than surprising an operator.
    #[test]
    fn every_documented_default_holds() {
        let file = write(MINIMAL);
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();

        let k = &s.kafka;
        assert_eq!(k.group_id, "kafka-pg-sink");
        assert_eq!(k.group_protocol, GroupProtocol::Classic);
        assert_eq!(k.auto_offset_reset, ResetPolicy::Earliest);
        assert_eq!(k.watermark_interval, Duration::from_secs(5));
        assert!(!k.mirror_commits);
        assert_eq!(k.auth_failure_timeout, Duration::from_secs(60));
        assert_eq!(k.offset_out_of_range, ResetPolicy::Fail);
        assert_eq!(k.session_timeout, Duration::from_secs(45));
        assert!(k.properties.is_empty());

        let p = &s.postgres;
        assert_eq!(p.writers, 2);
        assert_eq!(p.connect_timeout, Duration::from_secs(10));
        assert_eq!(p.statement_timeout, Duration::from_secs(60));
        assert_eq!(p.lock_timeout, Duration::from_secs(5));
        assert_eq!(p.idle_in_transaction_timeout, Duration::from_secs(60));

        let b = &s.batch;
        assert_eq!(b.max_records, 10_000);
        assert_eq!(b.max_bytes, ByteSize::mib(8));
        assert_eq!(b.max_wait, Duration::from_millis(250));
        assert_eq!(b.max_in_flight, 2);
        assert_eq!(b.retry_backoff_min, Duration::from_millis(100));
        assert_eq!(b.retry_backoff_max, Duration::from_secs(30));

        assert!(s.http.enabled);
        assert_eq!(
            s.http.listen,
            "127.0.0.1:9464".parse::<std::net::SocketAddr>().unwrap()
        );

        assert_eq!(s.log.format, LogFormat::Text);
        assert_eq!(s.log.progress_interval, Duration::from_secs(10));

        let t = &s.topics[0];
        assert_eq!(t.schema, "public");
        assert_eq!(t.sanitize, Sanitize::Snake);
        assert_eq!(t.format, RecordFormat::Json);
        assert_eq!(t.write_mode(), WriteMode::Insert);
        assert!(t.key.is_empty(), "empty means the primary key");
        assert_eq!(t.key_from, KeyFrom::Value);
        assert!(!t.delete_on_tombstone);
        assert_eq!(t.raw_column, None);
        assert!(t.map_by_name);
        assert!(t.columns.is_empty());
        assert_eq!(t.on_error, OnError::Fail);
        assert_eq!(t.dead_letter_topic, None);
        assert_eq!(t.max_record_bytes, ByteSize::mib(16));
        assert_eq!(t.time_unit, None, "unset reads epoch milliseconds");
        assert!(t.time_units.is_empty());

        // Debezium's default mode is upsert: its events carry updates and deletes.
        let file = write(&format!("{MINIMAL}format = \"debezium\"\n"));
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        assert_eq!(s.topics[0].write_mode(), WriteMode::Upsert);
    }

    #[test]
    fn flags_and_set_override_the_file() {
        let file = write(MINIMAL);
        let overrides = Overrides {
            group_id: Some("g2".into()),
            set: vec!["batch.max_records=7".into(), "batch.max_wait=1s".into()],
            ..Default::default()
        };
        let s = Settings::load(Some(file.path()), &overrides).unwrap();
        assert_eq!(s.kafka.group_id, "g2");
        assert_eq!(s.batch.max_records, 7);
        assert_eq!(s.batch.max_wait, Duration::from_secs(1));
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let file = write(&format!("{MINIMAL}\n[batch]\nmax_recs = 5\n"));
        let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("max_recs"), "{err}");
    }

    #[test]
    fn a_topic_time_unit_of_days_is_refused() {
        let file = write(&format!("{MINIMAL}time_unit = \"days\"\n"));
        let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("[topics.time_units]"), "{err}");
        let file = write(&format!("{MINIMAL}time_unit = \"us\"\n"));
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        assert_eq!(s.topics[0].time_unit, Some(TimeUnit::Us));
    }

    #[test]
    fn managed_kafka_properties_are_refused() {
        let file = write(&format!(
            "{MINIMAL}\n[kafka.properties]\n\"enable.auto.commit\" = \"true\"\n"
        ));
        let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("enable.auto.commit"), "{err}");
    }

    /// Each property the sink manages itself is refused by name, not silently overridden.
    #[test]
    fn every_managed_kafka_property_is_refused() {
        for key in [
            "enable.auto.commit",
            "enable.auto.offset.store",
            "group.id",
            "bootstrap.servers",
            "auto.offset.reset",
        ] {
            let file = write(&format!(
                "{MINIMAL}\n[kafka.properties]\n\"{key}\" = \"x\"\n"
            ));
            let err = Settings::load(Some(file.path()), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("kafka.properties.{key} is managed by the sink")),
                "{key}: {err}"
            );
        }
        // Everything else passes through.
        let file = write(&format!(
            "{MINIMAL}\n[kafka.properties]\n\"fetch.queue.backoff.ms\" = \"50\"\n"
        ));
        Settings::load(Some(file.path()), &Overrides::default()).unwrap();
    }

    /// Every name README lists as secret-looking is hidden in `Debug`; other values show.
    #[test]
    fn every_secret_looking_property_is_redacted() {
        let secrets = [
            "sasl.password",
            "ssl.key.password",
            "sasl.oauthbearer.client.secret",
            "some.token",
            "sasl.jaas.config",
            "ssl.keystore.private",
            "ssl.key.pem",
            "SSL.KEY.PASSWORD",
        ];
        let mut toml =
            format!("{MINIMAL}\n[kafka.properties]\n\"client.rack\" = \"rack-visible\"\n");
        for (i, key) in secrets.iter().enumerate() {
            toml.push_str(&format!("\"{key}\" = \"hidden-{i}\"\n"));
        }
        let file = write(&toml);
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        let debug = format!("{s:?}");
        for (i, key) in secrets.iter().enumerate() {
            assert!(is_secret_key(key), "{key}");
            assert!(!debug.contains(&format!("hidden-{i}")), "{key}: {debug}");
            assert!(
                debug.contains(&format!("\"{key}\": \"***\"")),
                "{key}: {debug}"
            );
        }
        assert!(debug.contains("rack-visible"), "{debug}");
        assert!(!is_secret_key("client.rack"));
    }

    #[test]
    fn secrets_can_come_from_the_environment() {
        std::env::set_var("KPS_TEST_SECRET", "s3cret");
        assert_eq!(expand_env("a-${KPS_TEST_SECRET}-b").unwrap(), "a-s3cret-b");
        assert_eq!(
            expand_env("${KPS_TEST_UNSET_VAR}"),
            Err("KPS_TEST_UNSET_VAR".into())
        );
        assert_eq!(
            expand_env("no vars, ${ unterminated").unwrap(),
            "no vars, ${ unterminated"
        );
    }

    #[test]
    fn migrate_reads_the_url_as_run_does() {
        let file = write(MINIMAL);
        // A flag, so that a DATABASE_URL in the test's environment does not win.
        let overrides = Overrides {
            database_url: Some("postgres://u:${KPS_TEST_URL_PASSWORD}@h/db".into()),
            ..Default::default()
        };
        let err = Settings::load_database_url(Some(file.path()), &overrides)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("${KPS_TEST_URL_PASSWORD}, which is not set"),
            "{err}"
        );
        std::env::set_var("KPS_TEST_URL_PASSWORD", "from-env");
        let url = Settings::load_database_url(Some(file.path()), &overrides).unwrap();
        let settings = Settings::load(Some(file.path()), &overrides).unwrap();
        assert_eq!(url.expose_secret(), "postgres://u:from-env@h/db");
        assert_eq!(url.expose_secret(), settings.postgres.url.expose_secret());
    }

    #[test]
    fn the_password_never_shows_in_debug_output() {
        let file = write(&format!(
            "{MINIMAL}\n[kafka.properties]\n\"sasl.password\" = \"kafka-hunter2\"\n"
        ));
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        assert!(!format!("{s:?}").contains("hunter2"), "{s:?}");
        assert!(!redact_url(s.postgres.url.expose_secret()).contains("hunter2"));
        assert!(!redact_url("postgres://h/db?password=hunter2").contains("hunter2"));
    }
}
