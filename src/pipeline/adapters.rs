//! The real ports: PostgreSQL through the offset store and the catalog, the writer tasks'
//! channels, and stats and health as the observer.

use std::fmt;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use super::ports::{
    Catalog, Event, MoveKind, Observer, PositionStore, Received, Schemas, Undescribed, WriterPool,
};
use crate::batch::Batch;
use crate::config::TopicSettings;
use crate::health::Health;
use crate::mapping::TopicMapper;
use crate::offsets::{OffsetStore, StoredOffset, TopicPartition};
use crate::registry::{RegisteredSchema, RegistryClient, RegistryError};
use crate::stats::Stats;
use crate::writer::{Lane, SendError, WriterEvent};

/// Runs the consumer thread's database calls on the runtime, each bounded on the client side
/// as well: a statement timeout cannot fire when the server or the network stops answering.
#[derive(Clone)]
pub(crate) struct Blocking {
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl Blocking {
    pub(crate) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        Self { runtime, timeout }
    }

    fn run<T, E: fmt::Display>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let limit = self.timeout;
        // The timer must be made inside the runtime: this thread is not one of its workers.
        match self
            .runtime
            .block_on(async move { tokio::time::timeout(limit, call).await })
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!(
                "PostgreSQL did not answer within {limit:?} ({what})"
            )),
        }
    }
}

/// `kafka_offsets` through the offset store's pool.
pub(crate) struct DbPositions {
    store: Arc<OffsetStore>,
    blocking: Blocking,
}

impl DbPositions {
    pub(crate) fn new(store: Arc<OffsetStore>, blocking: Blocking) -> Self {
        Self { store, blocking }
    }
}

impl PositionStore for DbPositions {
    fn group(&self) -> &str {
        self.store.group()
    }

    fn claim(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String> {
        self.blocking
            .run("claiming partitions", self.store.claim(tps))
    }

    fn read(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String> {
        self.blocking.run("reading positions", self.store.read(tps))
    }

    fn reclaim(&self, owned: &[(TopicPartition, i64)]) -> Result<Vec<StoredOffset>, String> {
        self.blocking
            .run("claiming reset partitions", self.store.reclaim(owned))
    }

    fn move_to(
        &self,
        tp: &TopicPartition,
        epoch: i64,
        expected: Option<i64>,
        to: i64,
        kind: MoveKind,
        detail: &str,
    ) -> Result<bool, String> {
        self.blocking.run(
            "moving a position",
            self.store
                .move_offset(tp, epoch, expected, to, kind.event_kind(), detail),
        )
    }
}

/// Tables described from PostgreSQL's catalog.
pub(crate) struct DbCatalog {
    pool: PgPool,
    blocking: Blocking,
}

impl DbCatalog {
    pub(crate) fn new(pool: PgPool, blocking: Blocking) -> Self {
        Self { pool, blocking }
    }
}

impl Catalog for DbCatalog {
    fn mapper(&self, settings: &TopicSettings, topic: &str) -> Result<TopicMapper, String> {
        self.blocking.run(
            "describing a table",
            TopicMapper::load(&self.pool, settings, topic),
        )
    }

    /// As many at a time as the pool has connections: each description is a few catalog
    /// queries, one round trip after another, so 200 tables took 200 times that in turn.
    /// Each is bounded in time as `mapper` is.
    fn mappers(&self, wanted: &[(TopicSettings, Arc<str>)]) -> Vec<Result<TopicMapper, String>> {
        let at_once = (self.pool.options().get_max_connections() as usize).max(1);
        let gate = Arc::new(tokio::sync::Semaphore::new(at_once));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (settings, topic)) in wanted.iter().enumerate() {
            let (gate, blocking, pool) = (gate.clone(), self.blocking.clone(), self.pool.clone());
            let (settings, topic) = (settings.clone(), topic.clone());
            tasks.spawn_on(
                async move {
                    // The gate is never closed.
                    let _turn = gate.acquire_owned().await;
                    let limit = blocking.timeout;
                    let described =
                        tokio::time::timeout(limit, TopicMapper::load(&pool, &settings, &topic))
                            .await;
                    let described = match described {
                        Ok(Ok(mapper)) => Ok(mapper),
                        Ok(Err(e)) => Err(format!("{e:#}")),
                        Err(_) => Err(format!(
                            "PostgreSQL did not answer within {limit:?} (describing a table)"
                        )),
                    };
                    (i, described)
                },
                &self.blocking.runtime,
            );
        }
        let mut out: Vec<Option<Result<TopicMapper, String>>> =
            wanted.iter().map(|_| None).collect();
        self.blocking.runtime.block_on(async {
            while let Some(done) = tasks.join_next().await {
                if let Ok((i, described)) = done {
                    out[i] = Some(described);
                }
            }
        });
        out.into_iter()
            .map(|d| {
                d.unwrap_or_else(|| Err("describing the table failed (its task panicked)".into()))
            })
            .collect()
    }

    fn table_mapper(
        &self,
        settings: &TopicSettings,
        topic: &str,
        table: &str,
    ) -> Result<TopicMapper, Undescribed> {
        let described = async {
            Ok::<_, String>(
                crate::record_routing::load_mapper(&self.pool, settings, topic, table).await,
            )
        };
        match self.blocking.run("describing a table", described) {
            Ok(Ok(mapper)) => Ok(mapper),
            Ok(Err(e)) if crate::record_routing::is_unavailable(&e) => {
                Err(Undescribed::Unavailable(format!("{e:#}")))
            }
            Ok(Err(e)) => Err(Undescribed::Unusable(format!("{e:#}"))),
            // The call did not finish within the timeout.
            Err(why) => Err(Undescribed::Unavailable(why)),
        }
    }
}

/// The writer tasks' queues and their shared result channel.
pub(crate) struct ChannelPool {
    lanes: Vec<Lane>,
    results: std_mpsc::Receiver<WriterEvent>,
}

impl ChannelPool {
    pub(crate) fn new(lanes: Vec<Lane>, results: std_mpsc::Receiver<WriterEvent>) -> Self {
        Self { lanes, results }
    }

    pub(crate) fn len(&self) -> usize {
        self.lanes.len()
    }
}

impl WriterPool for ChannelPool {
    fn try_send(&self, lane: usize, batch: Batch) -> Result<(), SendError> {
        match self.lanes.get(lane) {
            Some(l) => l.send(batch),
            None => Err(SendError::Gone),
        }
    }

    fn try_recv(&self) -> Option<WriterEvent> {
        self.results.try_recv().ok()
    }

    fn recv_timeout(&self, timeout: Duration) -> Received {
        match self.results.recv_timeout(timeout) {
            Ok(event) => Received::Event(event),
            Err(std_mpsc::RecvTimeoutError::Timeout) => Received::Timeout,
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Received::Closed,
        }
    }
}

/// Stats (progress line, summary, Prometheus) and readiness, fed by the pipeline's events.
pub(crate) struct Telemetry {
    pub(crate) stats: Arc<Stats>,
    pub(crate) health: Arc<Health>,
}

impl Observer for Telemetry {
    fn observe(&self, event: Event<'_>) {
        match event {
            Event::Committed(r) => self.stats.committed_batch(r),
            Event::Failed(why) => self.stats.failed_batch(why),
            Event::Rebalanced { kind, owned } => {
                self.health.set_assigned(owned);
                self.stats.rebalance(kind.label(), owned);
            }
            Event::Consumed(n) => Stats::add(&self.stats.records_consumed, n),
            Event::Progress { topics, owned } => {
                for (topic, total) in topics {
                    Stats::consumed_from(topic, *total);
                }
                // Gauges are refreshed, or they expire (a revoked partition's must).
                Stats::assigned(owned);
            }
        }
    }
}

/// The Schema Registry through its client (whose cache makes every id one request), on the
/// runtime, bounded by the client's own timeouts and once more on the whole call.
pub(crate) struct RegistrySchemas {
    client: Arc<RegistryClient>,
    runtime: tokio::runtime::Handle,
    /// Every URL tried once, each within the client's timeout, and some slack.
    limit: Duration,
}

impl RegistrySchemas {
    pub(crate) fn new(
        client: Arc<RegistryClient>,
        runtime: tokio::runtime::Handle,
        limit: Duration,
    ) -> Self {
        Self {
            client,
            runtime,
            limit,
        }
    }
}

impl Schemas for RegistrySchemas {
    fn fetch(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        let client = self.client.clone();
        let limit = self.limit;
        self.runtime
            .block_on(async move { tokio::time::timeout(limit, client.schema_by_id(id)).await })
            .unwrap_or_else(|_| {
                Err(RegistryError::Unavailable(format!(
                    "the schema registry did not answer within {limit:?}"
                )))
            })
    }
}

/// Without `[schema_registry]` no topic reads a registry format (the configuration refuses
/// it), so nothing asks; if something did, the answer names the missing section.
pub(crate) struct NoRegistry;

impl Schemas for NoRegistry {
    fn fetch(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        Err(RegistryError::Unavailable(format!(
            "schema {id} was asked for, but no [schema_registry] is configured"
        )))
    }
}
