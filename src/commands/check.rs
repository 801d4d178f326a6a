//! `kafka-pg-sink check`: everything `run` would verify, reported at once, without consuming.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::ClientContext;
use secrecy::ExposeSecret;

use super::check_schemas::check_schemas;
use crate::config::{is_secret_key, redact_url, spelled, RecordFormat, Settings, TopicSettings};
use crate::kafka::clients;
use crate::mapping::TopicMapper;
use crate::registry::RegistryClient;
use crate::schema::{Column, ColumnType};
use crate::{migrate, startup};

/// Keeps what librdkafka reports (an authentication failure, a TLS error) so that a failed
/// metadata request can say why, not only that it failed.
#[derive(Default)]
struct CheckContext {
    reasons: Mutex<Vec<String>>,
}

impl CheckContext {
    /// Distinct reasons, two at most: librdkafka repeats itself on every retry, and the message
    /// should stay one line.
    fn remember(&self, reason: String) {
        let mut reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        if !reasons.contains(&reason) && reasons.len() < 2 {
            reasons.push(reason);
        }
    }

    /// `" (reason; reason)"`, or nothing. librdkafka queues its log lines; polling delivers
    /// them to `log` first.
    fn why_for(&self, kafka: &BaseConsumer<CheckContext>) -> String {
        for _ in 0..5 {
            let _ = kafka.poll(Duration::from_millis(50));
        }
        self.why()
    }

    /// The reasons gathered so far; `why_for` polls first so that none are still queued.
    fn why(&self) -> String {
        let reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join("; "))
        }
    }
}

impl ClientContext for CheckContext {
    fn log(&self, _level: RDKafkaLogLevel, _fac: &str, _message: &str) {
        // The error callback carries the same reasons, once each.
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // "All brokers are down" only repeats the failure; the other errors say why.
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::AllBrokersDown) {
            self.remember(reason.to_string());
        }
    }
}

impl ConsumerContext for CheckContext {}

/// Prints what was found; returns an error listing every problem.
pub async fn run(settings: &Settings, plan: bool) -> anyhow::Result<()> {
    let mut out = String::new();
    let mut problems: Vec<String> = Vec::new();
    let _ = writeln!(out, "config: ok");
    let _ = writeln!(
        out,
        "  kafka: {} (group {:?}, protocol {}, auto_offset_reset {}, offset_out_of_range {})",
        settings.kafka.bootstrap_servers,
        settings.kafka.group_id,
        spelled(&settings.kafka.group_protocol),
        spelled(&settings.kafka.auto_offset_reset),
        spelled(&settings.kafka.offset_out_of_range),
    );
    for (k, v) in &settings.kafka.properties {
        let shown = if is_secret_key(k) { "***" } else { v.as_str() };
        let _ = writeln!(out, "  kafka property {k} = {shown}");
    }
    let _ = writeln!(
        out,
        "  postgres: {}",
        redact_url(settings.postgres.url.expose_secret())
    );
    let registry = match &settings.schema_registry {
        Some(r) => {
            let _ = writeln!(out, "  schema registry: {}", r.summary());
            match RegistryClient::new(r) {
                Ok(client) => Some(client),
                Err(e) => {
                    problems.push(e.to_string());
                    None
                }
            }
        }
        None => None,
    };

    let pool = match startup::connect_pool(settings).await {
        Ok(pool) => {
            let version: String = sqlx::query_scalar("SHOW server_version")
                .fetch_one(&pool)
                .await
                .unwrap_or_default();
            let _ = writeln!(out, "postgres: connected (server {version})");
            match migrate::ensure_applied(&pool).await {
                Ok(()) => {
                    let _ = writeln!(
                        out,
                        "migrations: up to date (version {})",
                        migrate::latest_version()
                    );
                }
                Err(e) => problems.push(e.to_string()),
            }
            Some(pool)
        }
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };

    let kafka: Option<BaseConsumer<CheckContext>> = match clients::admin_config(&settings.kafka)
        .create_with_context(CheckContext::default())
        .map_err(clients::redact_config_error)
    {
        Ok(c) => Some(c),
        Err(e) => {
            problems.push(format!("kafka: invalid client settings: {e}"));
            None
        }
    };

    let router = crate::routing::Router::new(&settings.topics)?;
    for topic in &settings.topics {
        // The topics this entry covers: its name, or the existing topics its pattern matches.
        let names: Vec<String> = match (&topic.name, &kafka) {
            (Some(name), _) => vec![name.clone()],
            (None, Some(kafka)) => match kafka.fetch_metadata(None, Duration::from_secs(10)) {
                Ok(md) => {
                    let mut names: Vec<String> = md
                        .topics()
                        .iter()
                        .map(|t| t.name().to_string())
                        .filter(|t| !t.starts_with("__"))
                        .filter(|t| {
                            router
                                .settings_for(t)
                                .is_some_and(|s| s.pattern == topic.pattern)
                        })
                        .collect();
                    names.sort();
                    let _ = writeln!(
                        out,
                        "pattern {:?}: {} matching topic(s) now",
                        topic.label(),
                        names.len()
                    );
                    names
                }
                Err(e) => {
                    problems.push(format!(
                        "cannot reach Kafka at {}: {e}{}",
                        settings.kafka.bootstrap_servers,
                        kafka.context().why_for(kafka)
                    ));
                    Vec::new()
                }
            },
            (None, None) => Vec::new(),
        };
        for name in names {
            let reach = Reach {
                kafka: kafka.as_ref(),
                pool: pool.as_ref(),
                registry: registry.as_ref(),
            };
            check_topic(
                settings,
                topic,
                &name,
                &reach,
                plan,
                &mut out,
                &mut problems,
            )
            .await;
        }
    }

    print!("{out}");
    if problems.is_empty() {
        println!("OK");
        Ok(())
    } else {
        println!("PROBLEMS:");
        for p in &problems {
            println!("  - {p}");
        }
        anyhow::bail!("{} problem(s) found", problems.len())
    }
}

/// A topic's metadata error as a sentence: a missing topic is named as such, anything else
/// gets librdkafka's own description rather than its enum name.
fn topic_problem(name: &str, error: Option<RDKafkaRespErr>) -> String {
    match error.map(RDKafkaErrorCode::from) {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            format!("topic {name:?} does not exist")
        }
        Some(code) => format!("topic {name:?}: {code}"),
        None => format!("topic {name:?}: no metadata"),
    }
}

/// An integer in a time column without a schema is read by a default, which is silently
/// wrong by a factor of 1,000 when the producer counts in another unit: say so, and how to
/// state the unit. A warning, not a problem: the default may well be right.
fn unstated_unit_warning(topic: &TopicSettings, col: &Column) -> String {
    let when = match topic.format {
        RecordFormat::ConnectJson | RecordFormat::Debezium => {
            "an integer in a record without a schema"
        }
        _ => "an integer",
    };
    let (reading, setting) = if col.ty.scalar_part() == ColumnType::Date {
        (
            "days since the epoch when below 10,000,000 in magnitude, else epoch milliseconds",
            format!(
                "[topics.time_units] {} = \"days\" (or s, ms, us, ns)",
                col.name
            ),
        )
    } else {
        (
            "epoch milliseconds",
            format!(
                "time_unit = \"us\" (s, ms, us, ns) or [topics.time_units] {} = \"us\"",
                col.name
            ),
        )
    };
    format!(
        "column {} ({}) reads {when} as {reading}; if the producer counts in another unit, set {setting}",
        col.name, col.sql_type
    )
}

/// A string in a json column is stored as a JSON string unless something says it holds JSON
/// text: a schema's `io.debezium.data.Json`, or `json_text`. Records without a schema (plain
/// JSON, Connect JSON and Debezium with `schemas.enable=false`) cannot say it, so name the
/// setting. A note, not a warning: the column may well hold objects, or strings meant as such.
fn json_text_note(topic: &TopicSettings, col: &Column) -> String {
    let when = match topic.format {
        RecordFormat::ConnectJson | RecordFormat::Debezium => {
            "a string in a record without a schema (e.g. Debezium's io.debezium.data.Json with schemas.enable=false)"
        }
        _ => "a string",
    };
    format!(
        "column {} ({}) stores {when} as a JSON string; if such strings hold JSON text, set json_text = [{:?}]",
        col.name, col.sql_type, col.name
    )
}

/// The services `check` reached (`None` where it could not), for each topic's checks.
#[derive(Clone, Copy)]
struct Reach<'a> {
    kafka: Option<&'a BaseConsumer<CheckContext>>,
    pool: Option<&'a sqlx::PgPool>,
    registry: Option<&'a RegistryClient>,
}

/// One topic: its partitions in Kafka, its table and the mapping onto it.
async fn check_topic(
    settings: &Settings,
    topic: &TopicSettings,
    name: &str,
    reach: &Reach<'_>,
    plan: bool,
    out: &mut String,
    problems: &mut Vec<String>,
) {
    let Reach {
        kafka,
        pool,
        registry,
    } = *reach;
    let table_name = crate::routing::table_name(topic, name);
    let _ = writeln!(
        out,
        "topic {name:?} -> {}.{table_name} (format {}, mode {}, key_from {}, on_error {})",
        topic.schema,
        spelled(&topic.format),
        spelled(&topic.write_mode()),
        spelled(&topic.key_from),
        spelled(&topic.on_error),
    );
    if let Some(kafka) = kafka {
        match kafka.fetch_metadata(Some(name), Duration::from_secs(10)) {
            Ok(md) => match md.topics().first() {
                Some(t) if t.error().is_none() => {
                    let _ = writeln!(out, "  kafka: {} partitions", t.partitions().len());
                }
                Some(t) => problems.push(topic_problem(name, t.error())),
                None => problems.push(format!("topic {name:?}: not in the broker's metadata")),
            },
            Err(e) => problems.push(format!(
                "cannot reach Kafka at {} for topic {name:?}: {e}{}",
                settings.kafka.bootstrap_servers,
                kafka.context().why_for(kafka)
            )),
        }
    }
    let Some(pool) = pool else { return };
    let mappers = match crate::record_routing::TablePicker::new(topic) {
        Ok(None) => vec![(None, TopicMapper::load(pool, topic, name).await)],
        Ok(Some(picker)) => {
            let _ = writeln!(out, "  routed by record: {}", picker.describe());
            let loaded = crate::record_routing::load_listed(pool, topic, name, &picker).await;
            // As at startup: a per-column entry no listed table has is a problem.
            let described: Vec<_> = loaded
                .iter()
                .filter_map(|(_, m)| m.as_ref().ok().map(|m| &**m.table()))
                .collect();
            if !described.is_empty() {
                if let Err(e) = crate::record_routing::unclaimed_column_settings(topic, &described)
                {
                    problems.push(e);
                }
            }
            loaded
        }
        Err(e) => return problems.push(e),
    };
    for (routed, loaded) in mappers {
        if let Some(table) = &routed {
            let _ = writeln!(out, "  table {table}:");
        }
        let checked = check_mapping(settings, topic, name, loaded, registry, out, problems).await;
        // Only a topic's own table is ever created or changed (never one a record names).
        if let (true, None, Some(mapper)) = (plan, &routed, checked) {
            super::plan::print(settings, topic, name, &mapper, registry, out, problems).await;
        }
    }
}

/// One mapping of a topic: its columns and their sources, and the registry's schemas; the
/// mapping, when it loaded, for `--plan`.
async fn check_mapping(
    settings: &Settings,
    topic: &TopicSettings,
    name: &str,
    loaded: anyhow::Result<TopicMapper>,
    registry: Option<&RegistryClient>,
    out: &mut String,
    problems: &mut Vec<String>,
) -> Option<TopicMapper> {
    match loaded {
        Ok(mut mapper) => {
            let keys = mapper.key_columns();
            if !keys.is_empty() {
                // Insert mode has a key only to ignore conflicts on it.
                let what = match topic.write_mode() {
                    crate::config::WriteMode::Insert => "on_conflict = \"ignore\" key",
                    crate::config::WriteMode::Upsert => "upsert key",
                };
                let _ = writeln!(out, "  {what}: ({})", keys.join(", "));
            }
            let mut warnings = Vec::new();
            let mut notes = Vec::new();
            // Time columns fed by a registered value schema's field: warned about once the
            // schema says whether an integer without a unit can reach them.
            let mut ask_schema = Vec::new();
            for (i, (col, source)) in mapper.describe().enumerate() {
                let constraint = match (col.not_null, col.has_default) {
                    (_, true) => "default when absent",
                    (true, false) => "required",
                    (false, false) => "NULL when absent",
                };
                let unit = mapper
                    .time_unit(i)
                    .map(|u| format!(", integers in {}", spelled(&u)))
                    .unwrap_or_default();
                let hex = if mapper.reads_hex(i) { ", hex" } else { "" };
                let json_text = if mapper.reads_json_text(i) {
                    ", strings are JSON text"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "  {:<24} {:<28} <- {} ({constraint}{unit}{hex}{json_text})",
                    col.name,
                    col.sql_type,
                    source.describe()
                );
                if mapper.guesses_time_unit(i) {
                    match mapper.value_schema_field(i) {
                        Some(field) => ask_schema.push((col.clone(), field.to_string())),
                        None => warnings.push(unstated_unit_warning(topic, col)),
                    }
                }
                if mapper.may_store_json_text_as_string(i) {
                    notes.push(json_text_note(topic, col));
                }
            }
            for w in warnings {
                let _ = writeln!(out, "  warning: {w}");
            }
            for n in notes {
                let _ = writeln!(out, "  note: {n}");
            }
            for skipped in &mapper.table().skipped {
                let _ = writeln!(out, "  {skipped:<24} (generated: never written)");
            }
            let mut value_types = None;
            if mapper.table().oid == crate::ddl::MISSING_OID {
                let _ = writeln!(out, "  table does not exist yet: auto_create creates it from the first record's schema");
                match crate::ddl::key_source(topic) {
                    Ok(Some(source)) => {
                        let _ = writeln!(out, "  its primary key: {source}");
                    }
                    Ok(None) => {}
                    Err(e) => problems.push(format!("topic {name:?}: {e}")),
                }
            } else if let Some(registry) = registry {
                value_types =
                    check_schemas(settings, topic, name, &mut mapper, registry, out, problems)
                        .await;
            }
            for (col, field) in ask_schema {
                // A field the schema lacks leaves the column NULL; an unknown schema may hold
                // anything, so it is warned about as before.
                let told = value_types.as_ref().is_some_and(|types| {
                    types
                        .iter()
                        .find(|t| t.name == field)
                        .is_none_or(|t| !t.shapes.may_be_number())
                });
                if !told {
                    let _ = writeln!(out, "  warning: {}", unstated_unit_warning(topic, &col));
                }
            }
            Some(mapper)
        }
        Err(e) => {
            problems.push(format!("{e:#}"));
            None
        }
    }
}
