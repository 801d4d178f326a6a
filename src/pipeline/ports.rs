//! What the pipeline needs from the outside world, as small synchronous interfaces: the Kafka
//! consumer's partition controls, the positions in PostgreSQL, the table catalog, the writers,
//! and whoever watches what happens. The real ones live in `adapters.rs` and
//! `kafka/context.rs`; unit tests drive the pipeline with fakes of each.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;

use crate::batch::Batch;
use crate::config::TopicSettings;
use crate::mapping::TopicMapper;
use crate::offsets::{StoredOffset, TopicPartition};
use crate::registry::{RegisteredSchema, RegistryError};
use crate::stats::Failure;
use crate::writer::{SendError, WriteResult, WriterEvent};

/// What the pipeline needs from the Kafka consumer: the few calls that move its position.
pub trait PartitionControl {
    /// Stops fetching for partitions that rewind, so what would be dropped is not fetched.
    fn pause(&self, tps: &[TopicPartition]);
    /// Fetching restarts after the last delivered record, not at the stored offset: a seek
    /// must follow.
    fn resume(&self, tps: &[TopicPartition]);
    /// Seeks each partition and returns the ones that failed, with the reason.
    fn seek(&self, targets: &[(TopicPartition, Offset)]) -> Vec<(TopicPartition, SeekFailure)>;
    /// The partition's low and high watermarks (first offset, offset after the last).
    fn watermarks(&self, tp: &TopicPartition) -> Result<(i64, i64), String>;
    /// Restarts a partition's fetcher at `offset` by taking it out of the assignment and
    /// putting it back: for a partition in an error state, which a seek cannot move.
    fn restart_at(&self, tp: &TopicPartition, offset: Offset) -> Result<(), String>;
    /// Commits positions to the Kafka group, asynchronously (`kafka.mirror_commits`).
    fn commit_to_kafka(&self, positions: &[(TopicPartition, i64)]);
    /// The consumer's position in each partition, in the order asked: the offset after the
    /// last record *or control marker* handed to the application since its last assign or
    /// seek; `None` before the first one. Transaction markers and aborted records move it
    /// without ever reaching `on_record`.
    fn positions(&self, tps: &[TopicPartition]) -> Vec<Option<i64>>;
}

/// Why a partition could not be seeked, told apart by librdkafka's error code (never by its
/// message text), because one of them has its own remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekFailure {
    /// `RD_KAFKA_RESP_ERR__STATE`: the partition's fetcher stopped on an error (an offset out
    /// of range) and no seek moves it; restarting the fetcher does.
    FetcherStopped(String),
    /// Anything else: retried after a backoff.
    Other(String),
}

impl fmt::Display for SeekFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeekFailure::FetcherStopped(why) | SeekFailure::Other(why) => f.write_str(why),
        }
    }
}

/// Why the sink moved a position by itself; the `kind` of its `kafka_offset_events` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MoveKind {
    /// `auto_offset_reset = "latest"` pinned the start of a partition never committed.
    PinnedLatest,
    /// `offset_out_of_range` moved a position outside the partition's range.
    OutOfRange,
}

impl MoveKind {
    /// The event kind users read in `kafka_offset_events` (README names both).
    pub(crate) fn event_kind(self) -> &'static str {
        match self {
            MoveKind::PinnedLatest => "auto_offset_reset",
            MoveKind::OutOfRange => "out_of_range_reset",
        }
    }
}

/// The positions in PostgreSQL, as the consumer thread uses them. Every call is bounded in
/// time: a hung database must not hold `poll` (and the group membership) unnoticed.
pub(crate) trait PositionStore: Send {
    /// The consumer group, for messages that tell an operator which rows to fix.
    fn group(&self) -> &str;
    /// Takes ownership of partitions (new epochs) and returns where each resumes.
    fn claim(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String>;
    /// Reads positions without claiming.
    fn read(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String>;
    /// Claims back partitions an operator reset, each only if the reset replaced the epoch
    /// given; returns the ones it got.
    fn reclaim(&self, owned: &[(TopicPartition, i64)]) -> Result<Vec<StoredOffset>, String>;
    /// Moves a position under this process's epoch (and recorded as an event); false when the
    /// epoch or the expected position no longer holds.
    fn move_to(
        &self,
        tp: &TopicPartition,
        epoch: i64,
        expected: Option<i64>,
        to: i64,
        kind: MoveKind,
        detail: &str,
    ) -> Result<bool, String>;
}

/// The tables of topics first seen at assignment (pattern subscriptions), and of tables
/// first named by a record (routing by record).
pub(crate) trait Catalog: Send {
    /// The mapping of `topic` onto its table, described now.
    fn mapper(&self, settings: &TopicSettings, topic: &str) -> Result<TopicMapper, String>;
    /// The mappings of several topics onto their tables (an assignment of many topics of a
    /// pattern), described now, in the order asked; each as `mapper` would give it.
    fn mappers(&self, wanted: &[(TopicSettings, Arc<str>)]) -> Vec<Result<TopicMapper, String>> {
        wanted
            .iter()
            .map(|(settings, topic)| self.mapper(settings, topic))
            .collect()
    }
    /// Routing by record: the mapping of `topic`'s records onto `table`, one a record named
    /// and the allow-list allowed, described now.
    fn table_mapper(
        &self,
        settings: &TopicSettings,
        topic: &str,
        table: &str,
    ) -> Result<TopicMapper, Undescribed>;
}

/// Why a table a record named could not be described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undescribed {
    /// The table cannot be used (missing, unsupported columns, a mapping that does not fit):
    /// the sink stops at the record until it is fixed.
    Unusable(String),
    /// PostgreSQL did not answer (connection, timeout, pool): not the record's fault, so it is
    /// read again after a backoff.
    Unavailable(String),
}

/// The Schema Registry, asked only for ids a mapping has not learnt yet (one request per new
/// id). Bounded in time like every call of the consumer thread.
pub(crate) trait Schemas: Send {
    fn fetch(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError>;
}

/// What waiting for a writer produced.
#[derive(Debug)]
pub(crate) enum Received {
    Event(WriterEvent),
    /// Nothing within the wait; the writers are still there.
    Timeout,
    /// Every writer has stopped.
    Closed,
}

/// The writer tasks: one bounded queue each, one stream of results for all.
pub(crate) trait WriterPool: Send {
    /// Hands a batch over without waiting.
    fn try_send(&self, lane: usize, batch: Batch) -> Result<(), SendError>;
    /// A result that has already arrived, if any.
    fn try_recv(&self) -> Option<WriterEvent>;
    /// Waits up to `timeout` for a result.
    fn recv_timeout(&self, timeout: Duration) -> Received;
}

/// Something that happened, for metrics, logs and readiness: the pipeline reports, and never
/// calls the counters itself.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// A batch committed (or committed without a refused record).
    Committed(&'a WriteResult),
    /// A batch did not commit.
    Failed(Failure),
    /// Partitions assigned or revoked; how many are owned now.
    Rebalanced { kind: Rebalance, owned: usize },
    /// Records taken since the last report.
    Consumed(u64),
    /// Once a second: each topic's records taken so far, and the partitions owned.
    Progress {
        topics: &'a [(Arc<str>, u64)],
        owned: usize,
    },
}

/// Which half of a rebalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rebalance {
    Assign,
    Revoke,
}

impl Rebalance {
    /// The metric's `kind` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Rebalance::Assign => "assign",
            Rebalance::Revoke => "revoke",
        }
    }
}

/// Whoever watches the pipeline (stats, metrics, health).
pub(crate) trait Observer: Send {
    fn observe(&self, event: Event<'_>);
}
