//! `kafka-pg-sink check`: everything `run` would verify, reported at once, without consuming.

use std::fmt::Write as _;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use secrecy::ExposeSecret;

use crate::config::{is_secret_key, redact_url, Settings};
use crate::mapping::{Source, TopicMapper};
use crate::{consumer, migrate, schema, startup};

/// Prints what was found; returns an error listing every problem.
pub async fn run(settings: &Settings) -> anyhow::Result<()> {
    let mut out = String::new();
    let mut problems: Vec<String> = Vec::new();
    let _ = writeln!(out, "config: ok");
    let _ = writeln!(
        out,
        "  kafka: {} (group {:?}, protocol {:?})",
        settings.kafka.bootstrap_servers, settings.kafka.group_id, settings.kafka.group_protocol
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

    let kafka: Option<BaseConsumer> = match consumer::client_config(&settings.kafka).create() {
        Ok(c) => Some(c),
        Err(e) => {
            problems.push(format!("kafka: invalid client settings: {e}"));
            None
        }
    };

    for topic in &settings.topics {
        let _ = writeln!(
            out,
            "topic {:?} -> {}.{}",
            topic.name, topic.schema, topic.table
        );
        if let Some(kafka) = &kafka {
            match kafka.fetch_metadata(Some(&topic.name), Duration::from_secs(10)) {
                Ok(md) => match md.topics().first() {
                    Some(t) if t.error().is_none() => {
                        let _ = writeln!(out, "  kafka: {} partitions", t.partitions().len());
                    }
                    Some(t) => problems.push(format!(
                        "topic {:?}: {:?} (does it exist?)",
                        topic.name,
                        t.error()
                    )),
                    None => problems.push(format!(
                        "topic {:?}: not in the broker's metadata",
                        topic.name
                    )),
                },
                Err(e) => problems.push(format!(
                    "cannot reach Kafka at {} for topic {:?}: {e}",
                    settings.kafka.bootstrap_servers, topic.name
                )),
            }
        }
        let Some(pool) = &pool else { continue };
        let table = match schema::describe(pool, &topic.schema, &topic.table).await {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("topic {:?}: {e}", topic.name));
                continue;
            }
        };
        match TopicMapper::new(topic, table.into()) {
            Ok(mapper) => {
                for (col, source) in mapper.describe() {
                    let from = match source {
                        Source::Field => format!("field {:?}", col.name),
                        Source::Meta(m) => format!("metadata {m:?}").to_lowercase(),
                    };
                    let constraint = match (col.not_null, col.has_default) {
                        (_, true) => "default when absent",
                        (true, false) => "required",
                        (false, false) => "NULL when absent",
                    };
                    let _ = writeln!(
                        out,
                        "  {:<24} {:<28} <- {from} ({constraint})",
                        col.name, col.sql_type
                    );
                }
                for skipped in &mapper.table().skipped {
                    let _ = writeln!(out, "  {skipped:<24} (generated: never written)");
                }
            }
            Err(e) => problems.push(e.to_string()),
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
