//! Settings: a TOML file, overridden by environment variables, overridden by flags.
//!
//! figment merges the layers so every setting has one name everywhere: `batch.max_wait` in the
//! file is `KAFKA_PG_SINK_BATCH__MAX_WAIT` in the environment and `--set batch.max_wait=…` on the
//! command line.
//!
//! One concept per file: the Kafka consumer (`kafka.rs`), PostgreSQL and its session roles
//! (`postgres.rs`), a topic and its mapping options (`topic.rs`), batch limits (`batch.rs`), the
//! HTTP endpoint (`http.rs`), log output (`log.rs`), and what must not leak (`secrets.rs`).
//! Here: the whole, its layers, the command-line overrides and the checks across settings.

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};

use figment::Figment;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

mod batch;
mod http;
mod kafka;
mod log;
mod postgres;
mod registry;
mod secrets;
pub(crate) mod table_from;
mod topic;

pub use batch::BatchSettings;
pub use http::HttpSettings;
pub use kafka::{GroupProtocol, KafkaSettings, ResetPolicy};
pub use log::{LogFormat, LogSettings};
pub use postgres::{PostgresSettings, SessionRole};
pub use registry::{RegistrySettings, SubjectPart, SubjectStrategy};
pub(crate) use secrets::spelled;
use secrets::{expand_env, expand_env_in_url};
pub use secrets::{is_secret_key, redact_url};
pub use topic::{
    AutoEvolve, ByteaEncoding, ColumnSpec, DeleteMode, Encoding, KeyFrom, MetadataColumns,
    OnConflict, OnError, RecordFormat, Sanitize, TableFrom, TimeUnit, TopicSettings, TruncateMode,
    WriteMode, DEFAULT_PLACEHOLDER,
};

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
    /// Where the binary formats' schemas come from; none unless configured.
    #[serde(default)]
    pub schema_registry: Option<RegistrySettings>,
}

/// For settings that are on unless turned off (`http.enabled`, `map_by_name`).
fn default_true() -> bool {
    true
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
        if let Some(registry) = &mut settings.schema_registry {
            registry.resolve()?;
        }
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
        if self.kafka.memory_budget < kafka::MIN_MEMORY_BUDGET {
            return invalid(format!(
                "kafka.memory_budget is {}; it must be at least {} (README, Sizing)",
                self.kafka.memory_budget.display().iec(),
                kafka::MIN_MEMORY_BUDGET.display().iec()
            ));
        }
        if let Some(id) = &self.kafka.group_instance_id {
            kafka::check_group_instance_id(id, self.kafka.group_protocol).map_err(|m| {
                ConfigError::Invalid(format!("kafka.group_instance_id {id:?}: {m}"))
            })?;
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
            table_from::validate(topic).map_err(ConfigError::Invalid)?;
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
            match &topic.unavailable_value_placeholder {
                Some(_) if topic.format != RecordFormat::Debezium => {
                    return invalid(format!("topic {label}: unavailable_value_placeholder applies to format = \"debezium\" (its unchanged TOASTed columns)"));
                }
                Some(p) if p.is_empty() => {
                    return invalid(format!("topic {label}: unavailable_value_placeholder is empty; Debezium's default is {:?}", DEFAULT_PLACEHOLDER));
                }
                _ => {}
            }
            if topic.truncate != TruncateMode::Fail && topic.format != RecordFormat::Debezium {
                return invalid(format!(
                    "topic {label}: truncate applies to format = \"debezium\" (its op \"t\" events)"
                ));
            }
            match (topic.delete_mode, &topic.soft_delete_column) {
                (DeleteMode::Soft, None) => return invalid(format!("topic {label}: delete_mode = \"soft\" needs soft_delete_column, the column a delete sets")),
                (DeleteMode::Hard, Some(_)) => return invalid(format!("topic {label}: soft_delete_column needs delete_mode = \"soft\"")),
                (DeleteMode::Soft, Some(_)) if !(topic.format == RecordFormat::Debezium || topic.delete_on_tombstone) => {
                    return invalid(format!("topic {label}: delete_mode = \"soft\" needs deletes: format = \"debezium\", or mode = \"upsert\" with delete_on_tombstone = true"))
                }
                _ => {}
            }
            if topic.on_conflict == OnConflict::Ignore && mode != WriteMode::Insert {
                return invalid(format!("topic {label}: on_conflict = \"ignore\" applies to mode = \"insert\" (upsert already resolves conflicts: the last record wins)"));
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
            let reads_registry = topic.format.registry_encoding().is_some()
                || topic.encoding.uses_registry()
                || topic.key_format.uses_registry();
            if reads_registry && self.schema_registry.is_none() {
                return invalid(format!("topic {label}: its records carry registry schema ids (format, encoding or key_format); configure [schema_registry] url"));
            }
            if topic.encoding != Encoding::Json && topic.format != RecordFormat::Debezium {
                return invalid(format!("topic {label}: encoding applies to format = \"debezium\"; for plain records give format = \"avro\", \"protobuf\" or \"json-schema\""));
            }
            if let Some(reason) = topic::schema_change_problem(topic) {
                return invalid(format!("topic {label}: {reason}"));
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
                    | "group.instance.id"
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
    let url = expand_env_in_url(url.expose_secret()).map_err(|var| {
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

/// The `[kafka]` settings of a minimal configuration plus `extra` lines (settings, or a
/// `[kafka.properties]` table), for the unit tests of what the Kafka clients are given. The
/// brokers named are never reached.
#[cfg(test)]
pub(crate) fn kafka_for_test(extra: &str) -> KafkaSettings {
    let file = tests::write(&format!(
        "[kafka]\nbootstrap_servers = \"k:9092\"\n{extra}\n[postgres]\nurl = \"postgres://h/db\"\n[[topics]]\nname = \"t\"\ntable = \"t\"\n"
    ));
    Settings::load(Some(file.path()), &Overrides::default())
        .expect("a valid test configuration")
        .kafka
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytesize::ByteSize;

    use super::*;

    /// The settings file of a test; removed when dropped.
    pub(super) fn write(contents: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), contents).unwrap();
        file
    }

    /// The least a valid file holds: everything else takes its default.
    pub(super) const MINIMAL: &str = r#"
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
        assert_eq!(k.group_protocol, GroupProtocol::Auto);
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

    /// Registry formats (value, Debezium encoding or key) need `[schema_registry]`; `encoding`
    /// belongs to Debezium only; with the section they load.
    #[test]
    fn truncate_soft_deletes_and_on_conflict_are_refused_where_they_cannot_apply() {
        for (extra, expected) in [
            (
                "truncate = \"apply\"",
                "truncate applies to format = \"debezium\"",
            ),
            (
                "mode = \"upsert\"\ndelete_on_tombstone = true\ndelete_mode = \"soft\"",
                "needs soft_delete_column",
            ),
            (
                "soft_delete_column = \"gone\"",
                "needs delete_mode = \"soft\"",
            ),
            (
                "mode = \"upsert\"\ndelete_mode = \"soft\"\nsoft_delete_column = \"gone\"",
                "needs deletes",
            ),
            (
                "mode = \"upsert\"\non_conflict = \"ignore\"",
                "applies to mode = \"insert\"",
            ),
            (
                "unavailable_value_placeholder = \"x\"",
                "unavailable_value_placeholder applies to format = \"debezium\"",
            ),
            (
                "format = \"debezium\"\nunavailable_value_placeholder = \"\"",
                "unavailable_value_placeholder is empty",
            ),
        ] {
            let file = write(&format!("{MINIMAL}{extra}\n"));
            let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
            assert!(err.to_string().contains(expected), "{extra}: {err}");
        }
        for extra in [
            "format = \"debezium\"\ntruncate = \"apply\"\ndelete_mode = \"soft\"\nsoft_delete_column = \"gone\"",
            "mode = \"upsert\"\ndelete_on_tombstone = true\ndelete_mode = \"soft\"\nsoft_delete_column = \"gone\"",
            "on_conflict = \"ignore\"",
            "format = \"debezium\"\nunavailable_value_placeholder = \"~gone~\"",
        ] {
            let file = write(&format!("{MINIMAL}{extra}\n"));
            let loaded = Settings::load(Some(file.path()), &Overrides::default());
            assert!(loaded.is_ok(), "{extra}: {:?}", loaded.err());
        }
    }

    #[test]
    fn registry_formats_need_a_schema_registry() {
        for extra in [
            "format = \"avro\"",
            "format = \"protobuf\"",
            "format = \"json-schema\"",
            "format = \"debezium\"\nencoding = \"avro\"",
            "key_format = \"avro\"",
        ] {
            let file = write(&format!("{MINIMAL}{extra}\n"));
            let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
            assert!(
                err.to_string().contains("[schema_registry]"),
                "{extra}: {err}"
            );
            let file = write(&format!(
                "{MINIMAL}{extra}\n[schema_registry]\nurl = \"http://r:8081\"\n"
            ));
            let loaded = Settings::load(Some(file.path()), &Overrides::default());
            assert!(loaded.is_ok(), "{extra}: {:?}", loaded.err());
        }
        let file = write(&format!(
            "{MINIMAL}encoding = \"avro\"\n[schema_registry]\nurl = \"http://r:8081\"\n"
        ));
        let err = Settings::load(Some(file.path()), &Overrides::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("encoding applies to format = \"debezium\""),
            "{err}"
        );
    }

    /// README's complete Debezium + Avro example loads as written.
    #[test]
    fn the_debezium_avro_example_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/debezium-avro.toml");
        let s = Settings::load(Some(&path), &Overrides::default()).expect("the example loads");
        let t = &s.topics[0];
        assert_eq!(
            (t.format, t.encoding, t.key_format),
            (RecordFormat::Debezium, Encoding::Avro, Encoding::Avro)
        );
        assert!(s.schema_registry.is_some());
    }

    /// Each property the sink manages itself is refused by name, not silently overridden.
    #[test]
    fn every_managed_kafka_property_is_refused() {
        for key in [
            "enable.auto.commit",
            "enable.auto.offset.store",
            "group.id",
            "group.instance.id",
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
