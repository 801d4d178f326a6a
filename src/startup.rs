//! Wiring: from settings to a running sink, and the `migrate` entry point.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::BaseConsumer;
use secrecy::ExposeSecret;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::config::{KafkaSettings, SessionRole, Settings};
use crate::health::Health;
use crate::kafka::context::SinkContext;
use crate::kafka::{self, clients};
use crate::mapping::TopicMapper;
use crate::offsets::{OffsetStore, Owner};
use crate::pipeline::adapters::{
    Blocking, ChannelPool, DbCatalog, DbPositions, NoRegistry, RegistrySchemas, Telemetry,
};
use crate::pipeline::{Pipeline, PipelineParts, Policy, Route};
use crate::record_routing::{self, TablePicker};
use crate::registry::RegistryClient;
use crate::routing::Router;
use crate::shutdown::Shutdown;
use crate::stats::Stats;
use crate::watermarks::Watermarks;
use crate::writer::{Lane, WriterConfig};
use crate::{http, meters};

/// A small pool for claims, rewinds and startup queries; batches use the writers' own
/// connections.
pub async fn connect_pool(settings: &Settings) -> anyhow::Result<PgPool> {
    let options = settings
        .postgres
        .connect_options(SessionRole::Control)
        .context("postgres.url")?;
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(settings.postgres.connect_timeout)
        .connect_with(options)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot connect to PostgreSQL at {}: {e}",
                crate::config::redact_url(settings.postgres.url.expose_secret())
            )
        })
}

/// Describes the table of every topic named in the configuration and builds its mapping;
/// fails on the first problem. Pattern topics are routed when they are first assigned.
pub async fn build_routes(settings: &Settings, pool: &PgPool) -> anyhow::Result<Vec<Route>> {
    let mut routes = Vec::new();
    for topic in &settings.topics {
        let Some(name) = &topic.name else { continue };
        let route = match TablePicker::new(topic).map_err(anyhow::Error::msg)? {
            None => Route::one(
                name.as_str().into(),
                TopicMapper::load(pool, topic, name).await?,
            ),
            Some(picker) => {
                let mut mappers = Vec::new();
                for table in picker.listed() {
                    mappers.push(record_routing::load_mapper(pool, topic, name, table).await?);
                }
                if !mappers.is_empty() {
                    let tables: Vec<_> = mappers.iter().map(|m| &**m.table()).collect();
                    record_routing::unclaimed_column_settings(topic, &tables)
                        .map_err(anyhow::Error::msg)?;
                }
                Route::by_record(name.as_str().into(), topic, picker, mappers)
            }
        };
        routes.push(route);
    }
    Ok(routes)
}

/// Identifies this process in `kafka_offsets.owner_id`, for operators reading the table.
fn owner_id() -> Owner {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    Owner::Sink(format!("{host}/{}/{}", std::process::id(), &nonce[..8]))
}

/// Runs the sink until shutdown; an error means it stopped for a reason an operator must see.
pub async fn run(settings: Settings, shutdown: Shutdown) -> anyhow::Result<()> {
    let pool = connect_pool(&settings).await?;
    crate::migrate::ensure_applied(&pool).await?;
    let routes = build_routes(&settings, &pool).await?;
    let owner = owner_id();
    tracing::info!(
        group = %settings.kafka.group_id,
        owner = %owner,
        protocol = ?settings.kafka.group_protocol,
        writers = settings.postgres.writers,
        tables = ?routes.iter().map(|r| format!("{} -> {}", r.topic, r.table_label(None))).collect::<Vec<_>>(),
        patterns = ?settings.topics.iter().filter_map(|t| t.pattern.as_deref()).collect::<Vec<_>>(),
        "starting"
    );
    let store = Arc::new(OffsetStore::new(
        pool.clone(),
        settings.kafka.group_id.clone(),
        &owner,
        settings.postgres.lock_timeout,
    ));
    let runtime = tokio::runtime::Handle::current();
    let writer_config = WriterConfig {
        postgres: settings.postgres.clone(),
        group: settings.kafka.group_id.clone(),
        dead_letter_producer: if settings
            .topics
            .iter()
            .any(|t| t.dead_letter_topic.is_some())
        {
            Some(
                clients::dead_letter_producer_config(&settings.kafka)
                    .create()
                    .map_err(clients::redact_config_error)
                    .context("creating the dead-letter producer")?,
            )
        } else {
            None
        },
    };
    let (results_tx, results_rx) = std::sync::mpsc::channel();
    let (lanes, writer_tasks): (Vec<Lane>, Vec<_>) = (0..settings.postgres.writers)
        .map(|i| {
            Lane::spawn(
                i,
                writer_config.clone(),
                settings.batch.max_in_flight,
                results_tx.clone(),
                &runtime,
            )
        })
        .unzip();
    drop(results_tx);
    let stats = Arc::new(Stats::default());
    let summary = stats.clone();
    let health = Arc::new(Health::default());
    let watermarks = Arc::new(Watermarks::default());
    // Every background task, joined after the shutdown signal.
    let mut tasks = vec![watermarks.spawn_recorder(
        pool.clone(),
        settings.kafka.group_id.clone(),
        settings.kafka.watermark_interval,
        shutdown.clone(),
    )];
    if settings.http.enabled {
        let handle = meters::install(settings.kafka.watermark_interval * 3)?;
        let (_, task) = http::serve(
            settings.http.listen,
            handle,
            health.clone(),
            pool.clone(),
            shutdown.clone(),
        )
        .await?;
        tasks.push(task);
    }
    tasks.push(stats.spawn_progress_log(settings.log.progress_interval, shutdown.clone()));
    let router = Router::new(&settings.topics)?;
    // Every database call of the consumer thread is bounded on the client side as well.
    let blocking = Blocking::new(
        runtime.clone(),
        settings.postgres.statement_timeout + settings.postgres.connect_timeout,
    );
    let writers = ChannelPool::new(lanes, results_rx);
    let schemas: Box<dyn crate::pipeline::Schemas> = match &settings.schema_registry {
        Some(registry) => {
            let client = Arc::new(RegistryClient::new(registry)?);
            let limit =
                registry.timeout * registry.urls.len().max(1) as u32 + Duration::from_secs(1);
            Box::new(RegistrySchemas::new(client, runtime.clone(), limit))
        }
        None => Box::new(NoRegistry),
    };
    let pipeline = Pipeline::new(PipelineParts {
        routes,
        router,
        catalog: Box::new(DbCatalog::new(pool.clone(), blocking.clone())),
        positions: Box::new(DbPositions::new(store, blocking)),
        schemas,
        lanes: writers.len(),
        writers: Box::new(writers),
        observer: Box::new(Telemetry {
            stats,
            health: health.clone(),
        }),
        policy: Policy {
            limits: settings.batch.clone(),
            reset: settings.kafka.auto_offset_reset,
            out_of_range: settings.kafka.offset_out_of_range,
            mirror_commits: settings.kafka.mirror_commits,
            claim_budget: settings.kafka.max_poll_interval() / 2,
        },
    });
    let topics = pipeline.subscription();
    let prefetch = crate::kafka::budget::Prefetch::of(settings.kafka.memory_budget);
    tracing::info!(
        budget = %settings.kafka.memory_budget.display().iec(),
        queues = prefetch.queues,
        prefetch_at_most = %prefetch.worst_case().display().iec(),
        "memory budget"
    );
    let context = SinkContext::new(
        pipeline,
        shutdown.clone(),
        watermarks,
        health,
        prefetch.queues,
    );
    // Asked before the consumer exists: its protocol is fixed when it is created.
    let kafka_settings = {
        let kafka = settings.kafka.clone();
        let shutdown = shutdown.clone();
        tokio::task::spawn_blocking(move || {
            let protocol = kafka::protocol::resolve(&kafka, &shutdown);
            KafkaSettings {
                group_protocol: protocol,
                ..kafka
            }
        })
        .await
        .context("resolving kafka.group_protocol")?
    };
    let consumer: BaseConsumer<SinkContext> = clients::client_config(&kafka_settings)
        .create_with_context(context)
        .map_err(clients::redact_config_error)
        .context("creating the Kafka consumer")?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let thread_shutdown = shutdown.clone();
    let auth_failure_timeout = settings.kafka.auth_failure_timeout;
    std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || {
            let result = kafka::poll::run(consumer, topics, thread_shutdown, auth_failure_timeout);
            let _ = done_tx.send(result);
        })
        .context("starting the consumer thread")?;
    let result = done_rx.await.context("the consumer thread panicked")?;
    if let Some(id) = &kafka_settings.group_instance_id {
        // librdkafka sends no LeaveGroup for a static member: the log line above is about
        // this process, not the group's view of it.
        tracing::info!(
            group_instance_id = %id,
            session_timeout = ?kafka_settings.session_timeout,
            "static member: the group keeps this process's partitions for the session timeout; \
             a process started under the same id takes them back at once"
        );
    }
    // The pipeline (and with it every lane's queue) is gone with the consumer: the writers
    // finish what they hold and end; wait for them so nothing runs past the summary.
    for task in writer_tasks {
        let _ = task.await;
    }
    // Stop the progress line, the watermark recorder and the HTTP endpoint, and wait for each,
    // so the summary is the last line and no query outlives the pool.
    shutdown.trigger();
    for task in tasks {
        // Bounded: a scraper holding a request open must not keep the process alive.
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    summary.log_summary();
    pool.close().await;
    result.map_err(anyhow::Error::from)
}
