//! A fresh database and topic for each benchmark run.

use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

use crate::data;

/// Where the services are.
pub struct Env {
    pub kafka: String,
    pub admin_url: String,
    /// The Schema Registry's API root; only the Avro and Protobuf scenarios need one.
    registry: anyhow::Result<String>,
    /// The producer's `compression.type`: users' producers compress, and a compressed fetch
    /// decompresses to several times its size in the sink's prefetch.
    pub compression: String,
}

/// The variable `name`, or an error saying how to get the services that set it.
fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .with_context(|| {
            format!("{name} is not set: run `scripts/dev-services.sh up` and `eval \"$(scripts/dev-services.sh env)\"`")
        })
}

impl Env {
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            kafka: var("KAFKA_BOOTSTRAP_SERVERS")?,
            admin_url: var("DATABASE_URL")?,
            registry: var("SCHEMA_REGISTRY_URL"),
            compression: "none".into(),
        })
    }

    /// `SCHEMA_REGISTRY_URL`, or the error to stop with when a scenario needs it.
    pub fn registry(&self) -> anyhow::Result<&str> {
        self.registry.as_deref().map_err(|e| {
            anyhow::anyhow!("the avro and protobuf scenarios need a Schema Registry: {e}")
        })
    }

    pub fn kafka_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.kafka);
        c
    }
}

/// Drops and recreates the benchmark database, migrated, with its tables.
pub async fn fresh_database(env: &Env, name: &str) -> anyhow::Result<(String, PgPool)> {
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&env.admin_url)
        .await?;
    admin
        .execute(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str())
        .await?;
    admin
        .execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await?;
    admin.close().await;
    let mut url = url::Url::parse(&env.admin_url)?;
    url.set_path(name);
    let url = url.to_string();
    kafka_pg_sink::migrate::apply(&url.clone().into()).await?;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await?;
    pool.execute(data::TABLE_DDL).await?;
    pool.execute(data::TRICKLE_DDL).await?;
    pool.execute(data::SPARSE_DDL).await?;
    Ok((url, pool))
}

/// Deletes (if present) and creates a topic.
pub async fn fresh_topic(env: &Env, name: &str, partitions: i32) -> anyhow::Result<()> {
    fresh_topics(env, &[(name.to_string(), partitions)]).await
}

/// Deletes (if present) and creates topics, each with its partition count, in one request
/// each way: the `tables` scenario makes hundreds.
pub async fn fresh_topics(env: &Env, topics: &[(String, i32)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = env.kafka_config().create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let names: Vec<&str> = topics.iter().map(|(n, _)| n.as_str()).collect();
    let _ = admin.delete_topics(&names, &options).await;
    // Deletion is asynchronous in the broker: retry creation until the names are free.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut missing: Vec<&(String, i32)> = topics.iter().collect();
    while !missing.is_empty() {
        let new: Vec<NewTopic> = missing
            .iter()
            .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
            .collect();
        let results = admin.create_topics(&new, &options).await?;
        let mut failed = Vec::new();
        for (topic, result) in missing.iter().zip(results) {
            if let Err((_, e)) = result {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "cannot create topic {}: {e}",
                    topic.0
                );
                tracing::debug!(error = %e, topic = %topic.0, "topic not yet deleted; retrying");
                failed.push(*topic);
            }
        }
        missing = failed;
        if !missing.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Produces orders `0..n` keyed by id, order `i` to partition `i % partitions`, each value
/// as `value` encodes it; how long it took and the values' total bytes.
pub async fn produce(
    env: &Env,
    topic: &str,
    n: u64,
    partitions: i32,
    value: impl Fn(u64) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<(Duration, u64)> {
    produce_to(env, n, |i| (topic, (i % partitions as u64) as i32), value).await
}

/// `produce`, order `i` to the topic and partition `place` gives it.
pub async fn produce_to<'t>(
    env: &Env,
    n: u64,
    place: impl Fn(u64) -> (&'t str, i32),
    value: impl Fn(u64) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<(Duration, u64)> {
    let producer: FutureProducer = env
        .kafka_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "262144")
        .set("compression.type", &env.compression)
        .create()?;
    let started = Instant::now();
    let mut pending = Vec::with_capacity(10_000);
    let mut bytes = 0;
    for i in 0..n {
        let (key, value) = (data::key(i), value(i)?);
        bytes += value.len() as u64;
        let (topic, partition) = place(i);
        let record = FutureRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition(partition);
        pending.push(producer.send_result(record).map_err(|(e, _)| e)?);
        if pending.len() == 10_000 {
            for d in pending.drain(..) {
                d.await?.map_err(|(e, _)| e)?;
            }
        }
    }
    for d in pending {
        d.await?.map_err(|(e, _)| e)?;
    }
    producer.flush(Duration::from_secs(60))?;
    Ok((started.elapsed(), bytes))
}
