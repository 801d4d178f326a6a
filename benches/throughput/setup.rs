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
}

impl Env {
    pub fn from_env() -> anyhow::Result<Self> {
        let get = |name: &str| {
            std::env::var(name).with_context(|| {
                format!("{name} is not set: run `scripts/dev-services.sh up` and `eval \"$(scripts/dev-services.sh env)\"`")
            })
        };
        Ok(Self {
            kafka: get("KAFKA_BOOTSTRAP_SERVERS")?,
            admin_url: get("DATABASE_URL")?,
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
    Ok((url, pool))
}

/// Deletes (if present) and creates a topic.
pub async fn fresh_topic(env: &Env, name: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = env.kafka_config().create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let _ = admin.delete_topics(&[name], &options).await;
    // Deletion is asynchronous in the broker: retry creation until the name is free.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let result = admin.create_topics([&topic], &options).await?;
        match result.into_iter().next() {
            Some(Ok(_)) => return Ok(()),
            Some(Err((_, e))) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "topic not yet deleted; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Some(Err((_, e))) => anyhow::bail!("cannot create topic {name}: {e}"),
            None => anyhow::bail!("no result creating topic {name}"),
        }
    }
}

/// Produces orders `0..n` keyed by id, order `i` to partition `i % partitions`.
pub async fn produce(env: &Env, topic: &str, n: u64, partitions: i32) -> anyhow::Result<Duration> {
    let producer: FutureProducer = env
        .kafka_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "262144")
        .create()?;
    let started = Instant::now();
    let mut pending = Vec::with_capacity(10_000);
    for i in 0..n {
        let (key, value) = (data::key(i), data::order(i));
        let record = FutureRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition((i % partitions as u64) as i32);
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
    Ok(started.elapsed())
}
