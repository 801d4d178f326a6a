//! `kafka-pg-sink lag`: how far behind each partition is, from the stored positions and the
//! watermarks Kafka reports now. Works with no sink running; fits cron and health checks.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;

use crate::config::Settings;
use crate::kafka::clients;
use crate::routing::Router;
use crate::startup;

/// One partition's position and lag.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub next_offset: Option<i64>,
    pub low_watermark: i64,
    pub high_watermark: i64,
    pub lag: i64,
    pub owner_id: Option<String>,
    pub seconds_since_commit: Option<f64>,
}

/// A stored position, as `kafka_offsets` holds it.
#[derive(sqlx::FromRow)]
struct StoredRow {
    topic: String,
    partition: i32,
    next_offset: Option<i64>,
    owner_id: Option<String>,
    seconds_since_commit: Option<f64>,
}

/// Every partition of the configured topics.
#[derive(Debug, Serialize)]
pub struct LagReport {
    pub consumer_group: String,
    pub partitions: Vec<PartitionLag>,
    pub total_lag: i64,
}

/// The configured topics that exist now (names, and topics matching the patterns), with
/// their partition counts.
pub fn topics(settings: &Settings, kafka: &BaseConsumer) -> anyhow::Result<Vec<(String, i32)>> {
    let router = Router::new(&settings.topics)?;
    let metadata = kafka
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot reach Kafka at {}: {e}",
                settings.kafka.bootstrap_servers
            )
        })?;
    let mut out: Vec<(String, i32)> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.name().starts_with("__"))
        .filter(|t| router.settings_for(t.name()).is_some())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect();
    out.sort();
    Ok(out)
}

/// Reads positions from PostgreSQL and watermarks from Kafka.
pub async fn report(settings: &Settings) -> anyhow::Result<LagReport> {
    let pool = startup::connect_pool(settings).await?;
    let kafka: BaseConsumer = clients::admin_config(&settings.kafka)
        .create()
        .map_err(clients::redact_config_error)?;
    let group = &settings.kafka.group_id;
    let stored: Vec<StoredRow> = sqlx::query_as(
        "SELECT topic, partition, next_offset, owner_id,
                extract(epoch FROM now() - committed_at)::float8 AS seconds_since_commit
           FROM kafka_offsets WHERE consumer_group = $1",
    )
    .bind(group)
    .fetch_all(&pool)
    .await?;
    let stored: HashMap<(String, i32), StoredRow> = stored
        .into_iter()
        .map(|r| ((r.topic.clone(), r.partition), r))
        .collect();
    let mut partitions = Vec::new();
    for (topic, count) in topics(settings, &kafka)? {
        for partition in 0..count {
            let (low, high) = kafka
                .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                .map_err(|e| anyhow::anyhow!("watermarks of {topic}/{partition}: {e}"))?;
            let row = stored.get(&(topic.clone(), partition));
            let next = row.and_then(|r| r.next_offset);
            // Never read: the whole partition is behind (what `earliest` would read).
            let lag = (high - next.unwrap_or(low)).max(0);
            partitions.push(PartitionLag {
                topic: topic.clone(),
                partition,
                next_offset: next,
                low_watermark: low,
                high_watermark: high,
                lag,
                owner_id: row.and_then(|r| r.owner_id.clone()),
                seconds_since_commit: row.and_then(|r| r.seconds_since_commit),
            });
        }
    }
    let total_lag = partitions.iter().map(|p| p.lag).sum();
    Ok(LagReport {
        consumer_group: group.clone(),
        partitions,
        total_lag,
    })
}

/// Prints the report; fails (exit 1) when `max_lag` is given and the total exceeds it.
pub async fn run(settings: &Settings, json: bool, max_lag: Option<i64>) -> anyhow::Result<()> {
    let report = report(settings).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", table(&report));
    }
    if let Some(max) = max_lag {
        if report.total_lag > max {
            anyhow::bail!("lag {} exceeds --max-lag {max}", report.total_lag);
        }
    }
    Ok(())
}

/// For people; `--format json` is for programs. Per-topic totals rely on `report` listing
/// partitions grouped by topic.
fn table(r: &LagReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "consumer group {:?}", r.consumer_group);
    let _ = writeln!(
        out,
        "{:<32} {:>5} {:>12} {:>12} {:>12} {:>10}  {:>12}  owner",
        "topic", "part", "next offset", "low", "high", "lag", "last commit"
    );
    let mut per_topic: Vec<(&str, i64)> = Vec::new();
    for p in &r.partitions {
        let next = p.next_offset.map_or("-".to_string(), |n| n.to_string());
        let since = p
            .seconds_since_commit
            .map_or("never".to_string(), |s| format!("{s:.0}s ago"));
        let _ = writeln!(
            out,
            "{:<32} {:>5} {:>12} {:>12} {:>12} {:>10}  {:>12}  {}",
            p.topic,
            p.partition,
            next,
            p.low_watermark,
            p.high_watermark,
            p.lag,
            since,
            p.owner_id.as_deref().unwrap_or("-")
        );
        match per_topic.last_mut() {
            Some((t, lag)) if *t == p.topic => *lag += p.lag,
            _ => per_topic.push((&p.topic, p.lag)),
        }
    }
    for (topic, lag) in per_topic {
        let _ = writeln!(out, "total {topic}: {lag}");
    }
    let _ = writeln!(out, "total lag: {}", r.total_lag);
    out
}
