//! The consumer thread's state: which partitions it owns, the batches it is filling, and what
//! its writers are doing. Records flow one way through it:
//!
//! record → mapping (encode into the lane's open batch) → seal → writer (one transaction:
//! fenced offsets, rows, COMMIT) → result → stats.
//!
//! The rebalance callback and the poll loop run on the same thread, so this state is only ever
//! touched by one thread at a time; the mutex around it is never contended.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::Offset;

use crate::batch::{Batch, OpenBatch};
use crate::config::OnError;
use crate::config::{BatchSettings, ResetPolicy};
use crate::dead_letter::{DeadLetter, ErrorKind};
use crate::health::Health;
use crate::mapping::{EncodeError, MapError, TopicMapper};
use crate::offsets::{OffsetAdvance, OffsetStore, Refusal, TopicPartition};
use crate::record::{OwnedRecord, RecordView};
use crate::routing::Router;
use crate::stats::{Failure, Stats};
use crate::writer::{Lane, Outcome, SendError, WriteResult, WriterEvent};
use sqlx::PgPool;

mod assignment;
mod recovery;

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

/// A topic and the mapping of its records onto its table.
pub struct Route {
    pub topic: Arc<str>,
    pub mapper: TopicMapper,
    /// Records taken, for the metric.
    pub consumed: u64,
}

/// Where an owned partition stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Records are taken and batched.
    Active,
    /// A transaction failed: records are dropped until the stored offset is re-read and the
    /// consumer rewound to it.
    Rewinding,
    /// Another consumer claimed it (or its start is refused): nothing more is written for it.
    Fenced,
}

/// One owned partition.
struct PartitionState {
    tp: TopicPartition,
    lane: usize,
    epoch: i64,
    status: Status,
    /// What the database will hold once every sealed batch commits: the `expected` value of
    /// the next batch's compare-and-set.
    sealed_next: Option<i64>,
    /// Last offset in the lane's open batch, if the partition has records there.
    open_last: Option<i64>,
    /// Whether the consumer's position now reflects this assignment (or rewind): librdkafka
    /// resets it when a fetch restarts, but an unassign is applied asynchronously, so until a
    /// record arrives or the position reads as unset once, it may still be the old one.
    position_trusted: bool,
}

impl PartitionState {
    /// The next offset expected from Kafka; anything below it was already taken. Derived, so
    /// it cannot drift from the batch and the compare-and-set it is checked against.
    fn cursor(&self) -> Option<i64> {
        self.open_last.map(|last| last + 1).or(self.sealed_next)
    }
}

/// A writer connection and the batch being filled for it.
struct LaneState {
    lane: Lane,
    open: OpenBatch,
    /// Partitions with records in `open`.
    members: Vec<(usize, i32)>,
    in_flight: usize,
    failures: u32,
    /// Set while the lane's partitions wait to be re-read and rewound.
    retry_at: Option<Instant>,
    /// The writer task died: nothing in flight will be answered, nothing more can be sent.
    gone: bool,
}

/// Why the sink must stop; reported after everything complete is committed.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    #[error("record {tp}@{offset} cannot be written: {reason}. The stored position stays at this record; fix the producer or the table and restart")]
    Mapping {
        tp: TopicPartition,
        offset: i64,
        reason: String,
    },
    #[error("PostgreSQL rejected a batch ({batch}): {reason}. Nothing of it was written; fix the table or the data and restart")]
    Rejected { batch: String, reason: String },
    #[error("PostgreSQL refused record {tp}@{offset}: {reason}. Everything before it is committed and the stored position rests on this record; fix the table or the data and restart")]
    RejectedRecord {
        tp: TopicPartition,
        offset: i64,
        reason: String,
    },
    #[error("{tp} has no stored offset and kafka.auto_offset_reset = \"fail\": set its offset in kafka_offsets or choose earliest/latest")]
    NoStoredOffset { tp: TopicPartition },
    #[error("{tp} resumes at offset {stored}, outside its range {low}..{high}: {why}. Nothing was skipped yet. To continue, set kafka.offset_out_of_range = \"earliest\" (or \"latest\"), or move the position: kafka-pg-sink offsets reset --group-id {group} --topic {topic} --partition {partition} --to-offset {low}")]
    OutOfRange {
        tp: TopicPartition,
        group: String,
        topic: String,
        partition: i32,
        stored: i64,
        low: i64,
        high: i64,
        why: &'static str,
    },
    #[error("writer {lane} stopped unexpectedly ({reason}); what it had not committed is read again at the next start, from the stored offsets")]
    WriterGone { lane: usize, reason: String },
    #[error("{0}")]
    Other(String),
}

/// The consumer thread's state.
pub struct Pipeline {
    routes: Vec<Route>,
    route_index: HashMap<Arc<str>, usize>,
    /// Finds the settings for topics first seen at assignment (pattern subscriptions).
    router: Router,
    /// Describes the tables of such topics.
    catalog: PgPool,
    partitions: HashMap<(usize, i32), PartitionState>,
    lanes: Vec<LaneState>,
    results: std_mpsc::Receiver<WriterEvent>,
    store: Arc<OffsetStore>,
    runtime: tokio::runtime::Handle,
    limits: BatchSettings,
    reset: ResetPolicy,
    out_of_range: ResetPolicy,
    stats: Arc<Stats>,
    fatal: Option<Fatal>,
    next_batch_id: u64,
    /// Records seen for partitions not (or no longer) owned, to log once in a while.
    dropped: u64,
    /// Partitions to pause at the next chance the consumer is at hand.
    to_pause: Vec<TopicPartition>,
    /// Positions to mirror to the Kafka group (`kafka.mirror_commits`).
    to_mirror: Vec<(TopicPartition, i64)>,
    mirror_commits: bool,
    health: Arc<Health>,
    last_publish: Instant,
    /// When the owned partitions' epochs were last compared with the database, to notice an
    /// operator's reset even when no record arrives.
    last_epoch_check: Instant,
    /// When positions were last compared with the cursors, for offsets that carry no record.
    last_gap_check: Instant,
    /// The longest any one database call of the consumer thread may take.
    db_timeout: Duration,
    /// How long a rebalance may keep retrying its claim before the sink gives up: below
    /// `max.poll.interval.ms`, so the group never drops a member stuck in the callback unseen.
    claim_budget: Duration,
}

/// Everything the pipeline is built from.
pub struct PipelineParts {
    pub routes: Vec<Route>,
    pub router: Router,
    pub catalog: PgPool,
    pub lanes: Vec<Lane>,
    pub results: std_mpsc::Receiver<WriterEvent>,
    pub store: Arc<OffsetStore>,
    pub runtime: tokio::runtime::Handle,
    pub limits: BatchSettings,
    pub reset: ResetPolicy,
    pub out_of_range: ResetPolicy,
    pub stats: Arc<Stats>,
    pub health: Arc<Health>,
    pub mirror_commits: bool,
    pub db_timeout: Duration,
    pub claim_budget: Duration,
}

impl Pipeline {
    /// Owns no partitions yet: they arrive with the first assignment.
    pub fn new(parts: PipelineParts) -> Self {
        let route_index = parts
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.topic.clone(), i))
            .collect();
        let lanes = parts
            .lanes
            .into_iter()
            .map(|lane| LaneState {
                lane,
                open: OpenBatch::default(),
                members: Vec::new(),
                in_flight: 0,
                failures: 0,
                retry_at: None,
                gone: false,
            })
            .collect();
        Self {
            routes: parts.routes,
            route_index,
            router: parts.router,
            catalog: parts.catalog,
            partitions: HashMap::new(),
            lanes,
            results: parts.results,
            store: parts.store,
            runtime: parts.runtime,
            limits: parts.limits,
            reset: parts.reset,
            out_of_range: parts.out_of_range,
            stats: parts.stats,
            fatal: None,
            next_batch_id: 0,
            dropped: 0,
            to_pause: Vec::new(),
            to_mirror: Vec::new(),
            mirror_commits: parts.mirror_commits,
            health: parts.health,
            last_publish: Instant::now(),
            last_epoch_check: Instant::now(),
            last_gap_check: Instant::now(),
            db_timeout: parts.db_timeout,
            claim_budget: parts.claim_budget,
        }
    }

    /// Every database call the consumer thread makes goes through here, bounded by
    /// `db_timeout` on the client side as well (a statement timeout cannot fire when the server
    /// or the network stops answering), so a hung database cannot hold `poll` unnoticed.
    fn db<T, E: fmt::Display>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let limit = self.db_timeout;
        // The timer must be made inside the runtime: this thread is not one of its workers.
        match self
            .runtime
            .block_on(async move { tokio::time::timeout(limit, call).await })
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!(
                "PostgreSQL did not answer within {:?} ({what})",
                self.db_timeout
            )),
        }
    }

    /// Topic names and patterns to subscribe to.
    pub fn subscription(&self) -> Vec<String> {
        self.router.subscription()
    }

    /// The route of `topic`, building it on first sight (a topic matched by a pattern):
    /// its table is described and its mapping checked before any record is read.
    fn route_for(&mut self, topic: &Arc<str>) -> Result<usize, Fatal> {
        if let Some(&i) = self.route_index.get(topic) {
            return Ok(i);
        }
        let settings = self
            .router
            .settings_for(topic)
            .ok_or_else(|| {
                Fatal::Other(format!(
                    "topic {topic} was assigned but matches no [[topics]] entry"
                ))
            })?
            .clone();
        let mapper = self
            .db(
                "describing a table",
                TopicMapper::load(&self.catalog, &settings, topic),
            )
            .map_err(Fatal::Other)?;
        tracing::info!(%topic, table = %mapper.table(), "new topic routed");
        self.routes.push(Route {
            topic: topic.clone(),
            mapper,
            consumed: 0,
        });
        self.route_index
            .insert(topic.clone(), self.routes.len() - 1);
        Ok(self.routes.len() - 1)
    }

    /// Whether a header list must be built for records of `topic`.
    pub fn needs_headers(&self, topic: &str) -> bool {
        self.route_index
            .get(topic)
            .is_some_and(|&i| self.routes[i].mapper.needs_headers())
    }

    /// Taken after `drain`, so the error is reported once everything complete is committed.
    pub fn take_fatal(&mut self) -> Option<Fatal> {
        self.fatal.take()
    }

    /// The poll loop checks it after every step, to stop taking records at once.
    pub fn has_fatal(&self) -> bool {
        self.fatal.is_some()
    }

    /// The first reason wins: later ones are usually its consequences.
    fn set_fatal(&mut self, fatal: Fatal) {
        if self.fatal.is_none() {
            tracing::error!(error = %fatal, "stopping");
            self.fatal = Some(fatal);
        }
    }

    /// The key of `tp`'s state, if its topic is routed.
    fn key_of(&self, tp: &TopicPartition) -> Option<(usize, i32)> {
        self.route_index
            .get(&tp.topic)
            .map(|&route| (route, tp.partition))
    }

    /// The state of `tp`, if this consumer owns it.
    fn state(&self, tp: &TopicPartition) -> Option<&PartitionState> {
        self.key_of(tp).and_then(|k| self.partitions.get(&k))
    }

    /// The state of `tp`, if this consumer owns it, to change.
    fn state_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionState> {
        let key = self.key_of(tp)?;
        self.partitions.get_mut(&key)
    }

    /// Picks the writer for a partition: fixed, so a partition's batches commit in order.
    fn lane_of(&self, route: usize, partition: i32) -> usize {
        (route.wrapping_mul(7919) + partition as usize) % self.lanes.len()
    }

    // ---- records -------------------------------------------------------------------------

    /// Takes one record: encodes it into its lane's open batch, sealing the batch when full.
    pub fn on_record(&mut self, record: &RecordView<'_>) {
        let Some(&route) = self.route_index.get(record.topic) else {
            self.note_dropped(record, "not a configured topic");
            return;
        };
        let Some(p) = self.partitions.get_mut(&(route, record.partition)) else {
            self.note_dropped(record, "partition not assigned here");
            return;
        };
        if p.status != Status::Active {
            // Rewinding or fenced: the record will be read again by whoever owns it.
            return;
        }
        if let Some(cursor) = p.cursor() {
            if record.offset < cursor {
                tracing::debug!(tp = %p.tp, offset = record.offset, cursor, "skipping a record already taken");
                return;
            }
        }
        Stats::add(&self.stats.records_consumed, 1);
        self.routes[route].consumed += 1;
        p.position_trusted = true;
        let lane_idx = p.lane;
        let mut encoded = self.encode_into(lane_idx, route, record);
        if encoded == Err(EncodeError::ShapeChanged) {
            // An upsert batch keeps one column list per table: start a new batch.
            self.seal_and_send(lane_idx);
            // Sealing may have waited for a result that started a rewind: then this record
            // must not enter the new batch (it will be read again).
            if self
                .partitions
                .get(&(route, record.partition))
                .map(|p| p.status)
                != Some(Status::Active)
            {
                return;
            }
            encoded = self.encode_into(lane_idx, route, record);
        }
        let p = self
            .partitions
            .get_mut(&(route, record.partition))
            .expect("checked above; sealing does not remove partitions");
        if let Err(e) = encoded {
            let error = match e {
                EncodeError::Invalid(e) => e,
                EncodeError::ShapeChanged => {
                    MapError::Unsupported("a column list that does not fit a fresh batch".into())
                }
            };
            let Route { topic, mapper, .. } = &self.routes[route];
            if mapper.on_error() == OnError::DeadLetter {
                // Kept in this batch's transaction; the position moves past it like any record.
                self.lanes[lane_idx].open.dead_letters.push(DeadLetter {
                    topic: topic.clone(),
                    record: OwnedRecord::from_view(record),
                    kind: ErrorKind::of(&error),
                    message: error.to_string(),
                    table: mapper.table().to_string(),
                    produce_to: mapper.dead_letter_topic().cloned(),
                });
                tracing::warn!(tp = %p.tp, offset = record.offset, error = %error, "record dead-lettered");
            } else {
                let fatal = Fatal::Mapping {
                    tp: p.tp.clone(),
                    offset: record.offset,
                    reason: error.to_string(),
                };
                // Everything before this record is complete: commit it so the position is here.
                p.status = Status::Fenced;
                self.set_fatal(fatal);
                return;
            }
        }
        let lane = &mut self.lanes[lane_idx];
        if p.open_last.is_none() {
            lane.members.push((route, record.partition));
        }
        p.open_last = Some(record.offset);
        lane.open
            .record_added(record.value.map_or(0, <[u8]>::len) + record.key.map_or(0, <[u8]>::len));
        if lane.open.records >= self.limits.max_records
            || lane.open.bytes as u64 >= self.limits.max_bytes.as_u64()
        {
            self.seal_and_send(lane_idx);
        }
    }

    /// Its own function because a record is encoded again after a column-list change sealed
    /// the batch.
    fn encode_into(
        &mut self,
        lane_idx: usize,
        route: usize,
        record: &RecordView<'_>,
    ) -> Result<(), EncodeError> {
        let Route { topic, mapper, .. } = &self.routes[route];
        let rows = self.lanes[lane_idx].open.table_rows(route, topic, mapper);
        mapper.encode(record, rows)
    }

    /// Counts every such record but logs only at powers of two, so a flood of them does not
    /// flood the log.
    fn note_dropped(&mut self, record: &RecordView<'_>, why: &str) {
        self.dropped += 1;
        if self.dropped.is_power_of_two() {
            tracing::debug!(
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                why,
                "ignoring a record"
            );
        }
    }

    /// Closes a lane's open batch and hands it to its writer, waiting if the writer is full.
    /// A batch with members but no records still commits: it advances past offsets that hold
    /// no record (transaction markers, aborted records).
    fn seal_and_send(&mut self, lane_idx: usize) {
        if self.lanes[lane_idx].members.is_empty() {
            return;
        }
        if self.lanes[lane_idx].gone {
            return;
        }
        let members = std::mem::take(&mut self.lanes[lane_idx].members);
        let mut advances = Vec::with_capacity(members.len());
        for key in members {
            let p = self
                .partitions
                .get_mut(&key)
                .expect("members are owned partitions");
            let last = p
                .open_last
                .take()
                .expect("members have records in the open batch");
            advances.push(OffsetAdvance {
                tp: p.tp.clone(),
                epoch: p.epoch,
                expected: p.sealed_next,
                next: last + 1,
            });
            p.sealed_next = Some(last + 1);
        }
        self.next_batch_id += 1;
        let batch = self.lanes[lane_idx].open.seal(self.next_batch_id, advances);
        while self.lanes[lane_idx].in_flight >= self.limits.max_in_flight {
            if !self.wait_for_result() {
                return;
            }
        }
        if self.lanes[lane_idx].retry_at.is_some() {
            // A failure came back while waiting: this batch chains onto it and is dropped;
            // the rewind re-reads it from Kafka.
            return;
        }
        self.send(lane_idx, batch);
    }

    /// A writer that is gone is fatal: its batches would never be answered.
    fn send(&mut self, lane_idx: usize, batch: Batch) {
        tracing::trace!(
            lane = lane_idx,
            batch = batch.id,
            records = batch.records,
            "batch sealed"
        );
        match self.lanes[lane_idx].lane.send(batch) {
            Ok(()) => self.lanes[lane_idx].in_flight += 1,
            Err(SendError::Gone) => self.writer_gone(lane_idx, "its queue is closed".into()),
            Err(SendError::Full) => self.set_fatal(Fatal::Other(format!(
                "writer {lane_idx}'s queue is full although fewer than max_in_flight batches are in flight"
            ))),
        }
    }

    /// Seals every batch that has waited `max_wait`; returns when the next one is due.
    pub fn flush_due(&mut self, now: Instant) -> Option<Instant> {
        let mut next = None::<Instant>;
        for i in 0..self.lanes.len() {
            if let Some(opened) = self.lanes[i].open.opened_at {
                let due = opened + self.limits.max_wait;
                if due <= now {
                    self.seal_and_send(i);
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            if let Some(retry) = self.lanes[i].retry_at {
                next = Some(next.map_or(retry, |n| n.min(retry)));
            }
        }
        next
    }

    /// Seals everything open and waits until every writer is idle (shutdown, fatal errors).
    pub fn drain(&mut self) {
        for i in 0..self.lanes.len() {
            self.seal_and_send(i);
        }
        self.wait_until(|_| true);
    }

    // ---- writer results ------------------------------------------------------------------

    /// Applies every result that has arrived, without blocking.
    pub fn poll_results(&mut self) {
        while let Ok(event) = self.results.try_recv() {
            self.on_event(event);
        }
    }

    /// Blocks for one result; false if the writers are gone.
    fn wait_for_result(&mut self) -> bool {
        match self.results.recv() {
            Ok(event) => {
                self.on_event(event);
                true
            }
            Err(_) => {
                for i in 0..self.lanes.len() {
                    self.writer_gone(i, "every writer has stopped".into());
                }
                false
            }
        }
    }

    /// A result, or a writer's death.
    fn on_event(&mut self, event: WriterEvent) {
        match event {
            WriterEvent::Done(result) => self.apply(result),
            WriterEvent::Gone { lane, reason } => self.writer_gone(lane, reason),
        }
    }

    /// A dead writer stops the sink: its batches will never be answered, so waiting for them
    /// would hang. What it committed is in the database; the rest is read again at restart.
    fn writer_gone(&mut self, lane_idx: usize, reason: String) {
        let lane = &mut self.lanes[lane_idx];
        if lane.gone {
            return;
        }
        lane.gone = true;
        lane.in_flight = 0;
        lane.open.clear();
        lane.members.clear();
        for p in self.partitions.values_mut().filter(|p| p.lane == lane_idx) {
            p.status = Status::Fenced;
            p.open_last = None;
        }
        self.set_fatal(Fatal::WriterGone {
            lane: lane_idx,
            reason,
        });
    }

    /// Waits until the selected lanes have nothing in flight.
    fn wait_until(&mut self, selected: impl Fn(usize) -> bool) {
        while (0..self.lanes.len()).any(|i| selected(i) && self.lanes[i].in_flight > 0) {
            if !self.wait_for_result() {
                return;
            }
        }
    }

    /// What a committed transaction (whole, or without a refused record) means for the
    /// counters and the positions mirrored to Kafka.
    fn committed(&mut self, result: &WriteResult) {
        self.stats.committed_batch(
            result.records,
            result.rows,
            result.transaction_time,
            result.batch_age,
            &result.tables,
            result.dead_letters,
        );
        if self.mirror_commits {
            self.to_mirror
                .extend(result.offsets.iter().map(|a| (a.tp.clone(), a.next)));
        }
    }

    /// Every writer outcome lands here, so in-flight counts, stats and rewinds change only on
    /// the consumer thread.
    fn apply(&mut self, result: WriteResult) {
        let lane_idx = result.lane;
        if self.lanes[lane_idx].gone {
            return;
        }
        self.lanes[lane_idx].in_flight -= 1;
        match result.outcome {
            Outcome::Committed => {
                self.committed(&result);
                self.lanes[lane_idx].failures = 0;
                tracing::trace!(
                    lane = lane_idx,
                    batch = result.batch_id,
                    ms = result.transaction_time.as_millis() as u64,
                    "batch committed"
                );
            }
            Outcome::Refused {
                why: Refusal::Fenced,
                matched,
                expected,
            } => {
                self.stats.failed_batch(Failure::Fenced);
                tracing::warn!(lane = lane_idx, batch = %describe(&result.offsets), matched, expected, "batch fenced: a partition changed owner; re-reading stored offsets");
                self.begin_rewind(lane_idx);
            }
            Outcome::Refused {
                why: Refusal::Stale,
                ..
            } => {
                // Queued behind a failure that already started the rewind: not news.
                self.stats.failed_batch(Failure::Stale);
                tracing::debug!(lane = lane_idx, batch = %describe(&result.offsets), "batch queued behind a failed one refused; rewinding");
                self.begin_rewind(lane_idx);
            }
            Outcome::Transient(reason) => {
                self.stats.failed_batch(Failure::Transient);
                tracing::warn!(lane = lane_idx, batch = %describe(&result.offsets), error = %reason, "batch transaction failed; nothing of it counts as written, rewinding to the stored offsets");
                self.begin_rewind(lane_idx);
            }
            Outcome::Permanent(reason) => {
                self.stats.failed_batch(Failure::Rejected);
                self.begin_rewind(lane_idx);
                self.set_fatal(Fatal::Rejected {
                    batch: describe(&result.offsets),
                    reason,
                });
            }
            Outcome::RejectedRecord {
                ref tp,
                offset,
                ref reason,
            } => {
                // The rest of the batch committed; the record's partition rests on it.
                self.committed(&result);
                self.stats.failed_batch(Failure::Rejected);
                if let Some(p) = self.state_mut(tp) {
                    p.sealed_next = Some(offset);
                    p.status = Status::Fenced;
                }
                // The open batch holds the partition's later records: it must not commit (one
                // already sent fails its compare-and-set).
                self.begin_rewind(lane_idx);
                self.set_fatal(Fatal::RejectedRecord {
                    tp: tp.clone(),
                    offset,
                    reason: reason.clone(),
                });
            }
        }
    }

    /// What the poll loop does between records: pending pauses, mirrored commits, metrics, the
    /// check for operators' resets, and rewinds whose time has come.
    pub fn tick(&mut self, ctl: &dyn PartitionControl, now: Instant) {
        self.apply_pauses(ctl);
        self.mirror(ctl);
        if now.duration_since(self.last_publish) >= Duration::from_secs(1) {
            self.last_publish = now;
            for route in &self.routes {
                Stats::consumed_from(&route.topic, route.consumed);
            }
            // Gauges are refreshed, or they expire (a revoked partition's must).
            Stats::assigned(self.partitions.len());
        }
        if now.duration_since(self.last_epoch_check) >= EPOCH_CHECK_INTERVAL {
            self.last_epoch_check = now;
            self.check_epochs();
        }
        if now.duration_since(self.last_gap_check) >= GAP_CHECK_INTERVAL {
            self.last_gap_check = now;
            self.advance_past_gaps(ctl, now);
        }
        self.recover_due(ctl, now);
    }

    /// Moves positions past offsets that carry no deliverable record: the commit or abort
    /// marker that ends every transaction, aborted records, compaction gaps. The consumer's
    /// position is past them, but no record reaches `on_record`, so without this the stored
    /// position would stop short of the end for good. The gap joins the lane's open batch like a
    /// record would (extending the partition's range there, or as a member without rows), so it
    /// commits under the same fence, in order, and at most once per batch.
    ///
    /// Only called between records, never while one is being added: a record the consumer
    /// handed over has always been taken into the open batch by then, so everything below the
    /// position is either in a batch or was never deliverable.
    fn advance_past_gaps(&mut self, ctl: &dyn PartitionControl, now: Instant) {
        let active: Vec<((usize, i32), TopicPartition)> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.status == Status::Active)
            .map(|(k, p)| (*k, p.tp.clone()))
            .collect();
        if active.is_empty() {
            return;
        }
        let tps: Vec<TopicPartition> = active.iter().map(|(_, tp)| tp.clone()).collect();
        let positions = ctl.positions(&tps);
        for ((key, _), position) in active.into_iter().zip(positions) {
            let Some(p) = self.partitions.get_mut(&key) else {
                continue;
            };
            let Some(position) = position else {
                p.position_trusted = true;
                continue;
            };
            if !p.position_trusted {
                continue;
            }
            // Without a cursor (never committed, nothing taken yet) everything below the
            // position since the start was undeliverable; the compare-and-set expects NULL.
            let cursor = p.cursor();
            if cursor.is_some_and(|c| position <= c) {
                continue;
            }
            tracing::trace!(tp = %p.tp, from = ?cursor, to = position, "advancing past offsets without records");
            let lane = &mut self.lanes[p.lane];
            if p.open_last.is_none() {
                lane.members.push(key);
                lane.open.opened_at.get_or_insert(now);
            }
            p.open_last = Some(position - 1);
        }
    }

    /// Commits the positions PostgreSQL has committed to the Kafka group as well, for Kafka's
    /// own lag tools; only for partitions still owned, so a revoked one is never touched.
    fn mirror(&mut self, ctl: &dyn PartitionControl) {
        if self.to_mirror.is_empty() {
            return;
        }
        let mut latest: HashMap<TopicPartition, i64> = HashMap::new();
        for (tp, next) in self.to_mirror.drain(..) {
            let e = latest.entry(tp).or_insert(next);
            *e = (*e).max(next);
        }
        let owned: Vec<(TopicPartition, i64)> = latest
            .into_iter()
            .filter(|(tp, _)| self.state(tp).is_some_and(|p| p.status != Status::Fenced))
            .collect();
        ctl.commit_to_kafka(&owned);
    }
}

/// A batch's ranges for messages: `orders/0@100..350, orders/3@..20`.
fn describe(offsets: &[OffsetAdvance]) -> String {
    offsets
        .iter()
        .map(|a| match a.expected {
            Some(from) => format!("{}@{}..{}", a.tp, from, a.next),
            None => format!("{}@..{}", a.tp, a.next),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How often owned partitions are compared with the database for operators' resets.
const EPOCH_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How often consumer positions are compared with the cursors (a local call, no request).
const GAP_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// Where a partition starts: its stored offset, else what the reset policy says.
fn start_offset(stored: Option<i64>, reset: ResetPolicy) -> Option<Offset> {
    match (stored, reset) {
        (Some(offset), _) => Some(Offset::Offset(offset)),
        (None, ResetPolicy::Earliest) => Some(Offset::Beginning),
        (None, ResetPolicy::Latest) => Some(Offset::End),
        (None, ResetPolicy::Fail) => None,
    }
}

/// Capped exponential backoff with full jitter, so restarted sinks do not retry in lockstep.
fn backoff(limits: &BatchSettings, attempt: u32) -> Duration {
    let base = limits.retry_backoff_min.as_millis() as u64;
    let cap = limits.retry_backoff_max.as_millis() as u64;
    let exp = base
        .saturating_mul(1u64 << attempt.min(20))
        .min(cap)
        .max(base);
    Duration::from_millis(rand::rng().random_range(base..=exp))
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    /// README: "capped exponential backoff with jitter", between `retry_backoff_min` and
    /// `retry_backoff_max`.
    #[test]
    fn backoff_grows_from_the_minimum_to_the_cap_with_jitter() {
        let limits = BatchSettings {
            retry_backoff_min: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(30),
            ..BatchSettings::default()
        };
        let min = limits.retry_backoff_min;
        let max = limits.retry_backoff_max;
        assert_eq!(
            backoff(&limits, 0),
            min,
            "the first retry waits the minimum"
        );
        for attempt in 0..64 {
            // Exponential: attempt n waits at most min·2ⁿ, and never more than the cap.
            let ceiling = min.saturating_mul(1u32 << attempt.min(20)).min(max);
            for _ in 0..200 {
                let d = backoff(&limits, attempt);
                assert!(d >= min && d <= ceiling, "attempt {attempt}: {d:?}");
            }
        }
        // Late attempts reach the cap's neighbourhood; jitter spreads them below it.
        let late: Vec<Duration> = (0..200).map(|_| backoff(&limits, 30)).collect();
        assert!(late.iter().any(|d| *d > max / 2), "{late:?}");
        assert!(late.iter().all(|d| *d <= max), "{late:?}");
        let distinct: std::collections::BTreeSet<_> = late.iter().collect();
        assert!(
            distinct.len() > 100,
            "jitter: {} distinct of 200",
            distinct.len()
        );
        // Growth: the mean wait rises attempt by attempt until the cap.
        let mean = |attempt| {
            (0..400)
                .map(|_| backoff(&limits, attempt).as_millis())
                .sum::<u128>()
                / 400
        };
        assert!(
            mean(1) < mean(4) && mean(4) < mean(8),
            "{} {} {}",
            mean(1),
            mean(4),
            mean(8)
        );
    }
}
