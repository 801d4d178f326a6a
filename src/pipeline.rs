//! The consumer thread's state: which partitions it owns, the batches it is filling, and what
//! its writers are doing. Records flow one way through it:
//!
//! record → mapping (encode into the lane's open batch) → seal → writer (one transaction:
//! fenced offsets, rows, COMMIT) → result → stats.
//!
//! The rebalance callback and the poll loop run on the same thread, so this state is only ever
//! touched by one thread at a time; the mutex around it is never contended.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::Offset;

use crate::batch::{Batch, OpenBatch};
use crate::config::OnError;
use crate::config::{BatchSettings, ResetPolicy};
use crate::dead_letter::{DeadLetter, ErrorKind, OwnedRecord};
use crate::health::Health;
use crate::mapping::{EncodeError, MapError, RecordView, TopicMapper};
use crate::offsets::{OffsetAdvance, OffsetStore, StoredOffset, TopicPartition};
use crate::routing::Router;
use crate::stats::Stats;
use crate::writer::{Lane, Outcome, WriteResult};
use sqlx::PgPool;

/// What the pipeline needs from the Kafka consumer: the few calls that move its position.
pub trait PartitionControl {
    fn pause(&self, tps: &[TopicPartition]);
    fn resume(&self, tps: &[TopicPartition]);
    /// Seeks each partition and returns the ones that failed, with the reason.
    fn seek(&self, targets: &[(TopicPartition, Offset)]) -> Vec<(TopicPartition, String)>;
    /// The partition's low and high watermarks (first offset, offset after the last).
    fn watermarks(&self, tp: &TopicPartition) -> Result<(i64, i64), String>;
    /// Restarts a partition's fetcher at `offset` by taking it out of the assignment and
    /// putting it back: for a partition in an error state, which a seek cannot move.
    fn restart_at(&self, tp: &TopicPartition, offset: Offset) -> Result<(), String>;
    /// Commits positions to the Kafka group, asynchronously (`kafka.mirror_commits`).
    fn commit_to_kafka(&self, positions: &[(TopicPartition, i64)]);
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
    /// The next offset expected from Kafka; anything below it was already taken.
    cursor: Option<i64>,
    /// Last offset in the lane's open batch, if the partition has records there.
    open_last: Option<i64>,
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
    #[error("a writer task stopped unexpectedly")]
    WriterGone,
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
    results: std_mpsc::Receiver<WriteResult>,
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
}

/// Everything the pipeline is built from.
pub struct PipelineParts {
    pub routes: Vec<Route>,
    pub router: Router,
    pub catalog: PgPool,
    pub lanes: Vec<Lane>,
    pub results: std_mpsc::Receiver<WriteResult>,
    pub store: Arc<OffsetStore>,
    pub runtime: tokio::runtime::Handle,
    pub limits: BatchSettings,
    pub reset: ResetPolicy,
    pub out_of_range: ResetPolicy,
    pub stats: Arc<Stats>,
    pub health: Arc<Health>,
    pub mirror_commits: bool,
}

impl Pipeline {
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
        let table_name = crate::routing::table_name(&settings, topic);
        let table = self
            .runtime
            .block_on(crate::schema::describe(
                &self.catalog,
                &settings.schema,
                &table_name,
            ))
            .map_err(|e| Fatal::Other(format!("topic {topic}: {e}")))?;
        let mapper = TopicMapper::new(&settings, Arc::new(table))
            .map_err(|e| Fatal::Other(e.to_string()))?;
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

    pub fn take_fatal(&mut self) -> Option<Fatal> {
        self.fatal.take()
    }

    pub fn has_fatal(&self) -> bool {
        self.fatal.is_some()
    }

    fn set_fatal(&mut self, fatal: Fatal) {
        if self.fatal.is_none() {
            tracing::error!(error = %fatal, "stopping");
            self.fatal = Some(fatal);
        }
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
        if let Some(cursor) = p.cursor {
            if record.offset < cursor {
                tracing::debug!(tp = %p.tp, offset = record.offset, cursor, "skipping a record already taken");
                return;
            }
        }
        Stats::add(&self.stats.records_consumed, 1);
        self.routes[route].consumed += 1;
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
        p.cursor = Some(record.offset + 1);
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
    fn seal_and_send(&mut self, lane_idx: usize) {
        if self.lanes[lane_idx].open.is_empty() {
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

    fn send(&mut self, lane_idx: usize, batch: Batch) {
        tracing::trace!(
            lane = lane_idx,
            batch = batch.id,
            records = batch.records,
            "batch sealed"
        );
        if self.lanes[lane_idx].lane.send(batch).is_err() {
            self.set_fatal(Fatal::WriterGone);
            return;
        }
        self.lanes[lane_idx].in_flight += 1;
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
        while let Ok(result) = self.results.try_recv() {
            self.apply(result);
        }
    }

    /// Blocks for one result; false if the writers are gone.
    fn wait_for_result(&mut self) -> bool {
        match self.results.recv() {
            Ok(result) => {
                self.apply(result);
                true
            }
            Err(_) => {
                self.set_fatal(Fatal::WriterGone);
                false
            }
        }
    }

    /// Waits until the selected lanes have nothing in flight.
    fn wait_until(&mut self, selected: impl Fn(usize) -> bool) {
        while (0..self.lanes.len()).any(|i| selected(i) && self.lanes[i].in_flight > 0) {
            if !self.wait_for_result() {
                return;
            }
        }
    }

    fn apply(&mut self, result: WriteResult) {
        let lane_idx = result.lane;
        self.lanes[lane_idx].in_flight -= 1;
        match result.outcome {
            Outcome::Committed => {
                self.stats.committed_batch(
                    result.records,
                    result.rows,
                    result.transaction_time,
                    result.batch_age,
                    &result.tables,
                    result.dead_letters,
                );
                self.lanes[lane_idx].failures = 0;
                if self.mirror_commits {
                    self.to_mirror
                        .extend(result.offsets.iter().map(|a| (a.tp.clone(), a.next)));
                }
                tracing::trace!(
                    lane = lane_idx,
                    batch = result.batch_id,
                    ms = result.transaction_time.as_millis() as u64,
                    "batch committed"
                );
            }
            Outcome::Fenced { matched, expected } => {
                self.stats.failed_batch("fenced");
                tracing::warn!(lane = lane_idx, batch = %describe(&result.offsets), matched, expected, "batch fenced: a partition changed owner or position; re-reading stored offsets");
                self.begin_rewind(lane_idx);
            }
            Outcome::Transient(reason) => {
                self.stats.failed_batch("transient");
                tracing::warn!(lane = lane_idx, batch = %describe(&result.offsets), error = %reason, "batch transaction failed; nothing of it counts as written, rewinding to the stored offsets");
                self.begin_rewind(lane_idx);
            }
            Outcome::Permanent(reason) => {
                self.stats.failed_batch("rejected");
                self.begin_rewind(lane_idx);
                self.set_fatal(Fatal::Rejected {
                    batch: describe(&result.offsets),
                    reason,
                });
            }
        }
    }

    /// After a failure nothing buffered or in flight for the lane counts: drop the open batch,
    /// stop taking its partitions' records and schedule the re-read and rewind. A failure that
    /// arrives while a rewind is already scheduled adds the partitions that became active since.
    fn begin_rewind(&mut self, lane_idx: usize) {
        let lane = &mut self.lanes[lane_idx];
        lane.open.clear();
        lane.members.clear();
        if lane.retry_at.is_none() {
            lane.failures += 1;
            lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
        }
        let mut paused = 0;
        for p in self.partitions.values_mut().filter(|p| p.lane == lane_idx) {
            p.open_last = None;
            if p.status == Status::Active {
                p.status = Status::Rewinding;
                p.cursor = None;
                self.to_pause.push(p.tp.clone());
                paused += 1;
            }
        }
        tracing::info!(lane = lane_idx, partitions = paused, "rewind scheduled");
    }

    /// Compares the owned partitions' epochs with the database: a partition an operator reset
    /// is rewound (and claimed again) even if no record arrives for it.
    fn check_epochs(&mut self) {
        let owned: Vec<TopicPartition> = self
            .partitions
            .values()
            .filter(|p| p.status == Status::Active)
            .map(|p| p.tp.clone())
            .collect();
        if owned.is_empty() {
            return;
        }
        let Ok(stored) = self.runtime.block_on(self.store.read(&owned)) else {
            return; // The database is away; the writers will notice.
        };
        let mut lanes = Vec::new();
        for s in stored.iter().filter(|s| s.reset_by_operator()) {
            let Some(&route) = self.route_index.get(&s.tp.topic) else {
                continue;
            };
            if let Some(p) = self.partitions.get(&(route, s.tp.partition)) {
                if p.epoch != s.epoch {
                    lanes.push(p.lane);
                }
            }
        }
        lanes.sort_unstable();
        lanes.dedup();
        for lane in lanes {
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            self.begin_rewind(lane);
            // Recover at once rather than after a backoff: nothing failed.
            self.lanes[lane].retry_at = Some(Instant::now());
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
            .filter(|(tp, _)| {
                self.route_index
                    .get(&tp.topic)
                    .and_then(|&r| self.partitions.get(&(r, tp.partition)))
                    .is_some_and(|p| p.status != Status::Fenced)
            })
            .collect();
        ctl.commit_to_kafka(&owned);
    }

    /// Pauses partitions that stopped taking records, so they stop fetching what will be
    /// dropped anyway.
    pub fn apply_pauses(&mut self, ctl: &dyn PartitionControl) {
        if self.to_pause.is_empty() {
            return;
        }
        // Only partitions still owned and still not taking records: a pause outlives a
        // revoke in librdkafka and would silently stall the partition if it came back.
        let tps: Vec<TopicPartition> = std::mem::take(&mut self.to_pause)
            .into_iter()
            .filter(|tp| {
                self.route_index
                    .get(&tp.topic)
                    .and_then(|&r| self.partitions.get(&(r, tp.partition)))
                    .is_some_and(|p| p.status != Status::Active)
            })
            .collect();
        ctl.pause(&tps);
    }

    /// Re-reads stored offsets for lanes whose retry time has come and rewinds the consumer.
    pub fn recover_due(&mut self, ctl: &dyn PartitionControl, now: Instant) {
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
        for lane_idx in 0..self.lanes.len() {
            let lane = &self.lanes[lane_idx];
            if lane.in_flight > 0 || lane.retry_at.is_none_or(|t| t > now) {
                continue;
            }
            self.recover(lane_idx, ctl);
        }
    }

    fn recover(&mut self, lane_idx: usize, ctl: &dyn PartitionControl) {
        let rewinding: Vec<TopicPartition> = self
            .partitions
            .values()
            .filter(|p| p.lane == lane_idx && p.status == Status::Rewinding)
            .map(|p| p.tp.clone())
            .collect();
        if rewinding.is_empty() {
            self.lanes[lane_idx].retry_at = None;
            return;
        }
        let stored = match self.runtime.block_on(self.store.read(&rewinding)) {
            Ok(stored) => stored,
            Err(e) => {
                let lane = &mut self.lanes[lane_idx];
                lane.failures += 1;
                let delay = backoff(&self.limits, lane.failures);
                lane.retry_at = Some(Instant::now() + delay);
                tracing::warn!(lane = lane_idx, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot read stored offsets; will retry");
                return;
            }
        };
        let stored: HashMap<TopicPartition, StoredOffset> =
            stored.into_iter().map(|s| (s.tp.clone(), s)).collect();
        let mut targets = Vec::new();
        let mut fenced = Vec::new();
        let mut reclaim = Vec::new();
        for tp in &rewinding {
            let Some(&route) = self.route_index.get(&tp.topic) else {
                continue;
            };
            let p = self
                .partitions
                .get_mut(&(route, tp.partition))
                .expect("rewinding partitions are owned");
            match stored.get(tp) {
                Some(s) if s.epoch == p.epoch => {
                    p.sealed_next = s.next_offset;
                    p.cursor = s.next_offset;
                    match start_offset(s.next_offset, self.reset) {
                        Some(offset) => targets.push((tp.clone(), offset)),
                        None => {
                            p.status = Status::Fenced;
                            let tp = tp.clone();
                            self.set_fatal(Fatal::NoStoredOffset { tp });
                        }
                    }
                }
                Some(s) if s.reset_by_operator() => reclaim.push(tp.clone()),
                _ => {
                    // Claimed by another consumer (or the row was removed): not ours anymore.
                    p.status = Status::Fenced;
                    fenced.push(tp.clone());
                }
            }
        }
        // An operator moved these positions (`offsets reset`): take them back and continue
        // from where the operator put them.
        if !reclaim.is_empty() {
            match self.runtime.block_on(self.store.claim(&reclaim)) {
                Ok(claims) => {
                    for claim in claims {
                        let Some(&route) = self.route_index.get(&claim.tp.topic) else {
                            continue;
                        };
                        let Some(p) = self.partitions.get_mut(&(route, claim.tp.partition)) else {
                            continue;
                        };
                        p.epoch = claim.epoch;
                        p.sealed_next = claim.next_offset;
                        p.cursor = claim.next_offset;
                        tracing::warn!(tp = %claim.tp, next_offset = ?claim.next_offset, "position reset by an operator: continuing from there");
                        if let Some(offset) = start_offset(claim.next_offset, self.reset) {
                            targets.push((claim.tp, offset));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim partitions reset by an operator; will retry");
                    let lane = &mut self.lanes[lane_idx];
                    lane.failures += 1;
                    lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
                    return;
                }
            }
        }
        if !fenced.is_empty() {
            tracing::warn!(partitions = ?fenced, "fenced: another consumer owns these partitions now; writing nothing more for them");
        }
        let tps: Vec<TopicPartition> = targets.iter().map(|(tp, _)| tp.clone()).collect();
        // Resume first: resuming restarts fetching after the last delivered record, and the
        // seek that follows moves it to the stored offset (older fetches are discarded).
        ctl.resume(&tps);
        let failed = ctl.seek(&targets);
        let mut failed = failed;
        for (tp, offset) in &targets {
            if let Some((_, why)) = failed.iter().find(|(f, _)| f == tp) {
                // A partition whose fetch ended in an error (an offset out of range) is in a
                // state no seek leaves; restarting its fetcher does.
                if why.contains("Erroneous state") {
                    match ctl.restart_at(tp, *offset) {
                        Ok(()) => {
                            tracing::info!(%tp, "fetcher restarted at the stored offset");
                            failed.retain(|(f, _)| f != tp);
                        }
                        Err(e) => {
                            tracing::warn!(%tp, error = %e, "restarting the fetcher failed; will retry");
                            continue;
                        }
                    }
                } else {
                    tracing::warn!(%tp, error = %why, "seek failed; will retry");
                    continue;
                }
            }
            let route = self.route_index[&tp.topic];
            if let Some(p) = self.partitions.get_mut(&(route, tp.partition)) {
                p.status = Status::Active;
            }
        }
        let lane = &mut self.lanes[lane_idx];
        if failed.is_empty() {
            lane.retry_at = None;
            tracing::info!(
                lane = lane_idx,
                partitions = targets.len(),
                "rewound to stored offsets"
            );
        } else {
            let failed_tps: Vec<TopicPartition> = failed.into_iter().map(|(tp, _)| tp).collect();
            ctl.pause(&failed_tps);
            lane.failures += 1;
            lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
        }
    }

    // ---- rebalances ----------------------------------------------------------------------

    /// Claims newly assigned partitions and returns where each must start. Blocks (retrying
    /// with backoff) while PostgreSQL is unreachable: a partition must not start anywhere but
    /// at its stored offset.
    pub fn assign(
        &mut self,
        ctl: &dyn PartitionControl,
        tps: &[TopicPartition],
        stop: &dyn Fn() -> bool,
    ) -> Vec<(TopicPartition, Offset)> {
        let mut routed = Vec::with_capacity(tps.len());
        for tp in tps {
            match self.route_for(&tp.topic) {
                Ok(_) => routed.push(tp.clone()),
                // Unroutable partitions are not started; the sink stops with the reason.
                Err(fatal) => self.set_fatal(fatal),
            }
        }
        let tps = routed;
        if tps.is_empty() {
            return Vec::new();
        }
        // An eager protocol may hand back a partition this consumer still holds: finish it first.
        let held: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| {
                self.partitions
                    .contains_key(&(self.route_index[&tp.topic], tp.partition))
            })
            .cloned()
            .collect();
        if !held.is_empty() {
            self.revoke(&held);
        }
        let mut attempt = 0;
        let claims = loop {
            match self.runtime.block_on(self.store.claim(&tps)) {
                Ok(claims) => break claims,
                Err(e) => {
                    attempt += 1;
                    if stop() {
                        return Vec::new();
                    }
                    let delay = backoff(&self.limits, attempt);
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot claim assigned partitions in PostgreSQL; retrying");
                    std::thread::sleep(delay);
                }
            }
        };
        let mut starts = Vec::with_capacity(claims.len());
        for mut claim in claims {
            // A stored position outside the partition's range would make librdkafka jump.
            if let Some(stored) = claim.next_offset {
                match self.check_range(ctl, &claim.tp, claim.epoch, stored) {
                    Ok(next) => claim.next_offset = Some(next),
                    Err(fatal) => {
                        self.set_fatal(fatal);
                        continue;
                    }
                }
            }
            let route = self.route_index[&claim.tp.topic];
            let lane = self.lane_of(route, claim.tp.partition);
            let (status, offset) = match start_offset(claim.next_offset, self.reset) {
                Some(offset) => (Status::Active, offset),
                None => {
                    self.set_fatal(Fatal::NoStoredOffset {
                        tp: claim.tp.clone(),
                    });
                    (Status::Fenced, Offset::End)
                }
            };
            tracing::debug!(tp = %claim.tp, epoch = claim.epoch, next_offset = ?claim.next_offset, "claimed");
            self.partitions.insert(
                (route, claim.tp.partition),
                PartitionState {
                    tp: claim.tp.clone(),
                    lane,
                    epoch: claim.epoch,
                    status,
                    sealed_next: claim.next_offset,
                    cursor: claim.next_offset,
                    open_last: None,
                },
            );
            starts.push((claim.tp, offset));
        }
        self.health.set_assigned(self.partitions.len());
        self.stats.rebalance("assign", self.partitions.len());
        starts
    }

    /// Compares a stored position with the partition's range and applies
    /// `offset_out_of_range`; returns where the partition resumes.
    fn check_range(
        &mut self,
        ctl: &dyn PartitionControl,
        tp: &TopicPartition,
        epoch: i64,
        stored: i64,
    ) -> Result<i64, Fatal> {
        let (low, high) = match ctl.watermarks(tp) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(%tp, error = %e, "cannot read the partition's watermarks; not checking its range");
                return Ok(stored);
            }
        };
        if (low..=high).contains(&stored) {
            return Ok(stored);
        }
        let why = if stored < low {
            "the records before the low watermark were deleted (retention or delete-records)"
        } else {
            "the partition has fewer records than the stored position (the topic was recreated?)"
        };
        let to = match self.out_of_range {
            ResetPolicy::Fail => {
                return Err(Fatal::OutOfRange {
                    tp: tp.clone(),
                    group: self.store.group().to_string(),
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    stored,
                    low,
                    high,
                    why,
                })
            }
            ResetPolicy::Earliest => low,
            ResetPolicy::Latest => high,
        };
        let detail = format!("stored {stored} outside {low}..{high}: {why}");
        match self.runtime.block_on(self.store.move_offset(
            tp,
            epoch,
            Some(stored),
            to,
            "out_of_range_reset",
            &detail,
        )) {
            Ok(true) => {
                tracing::error!(%tp, from = stored, to, low, high, why, "offset out of range: moved by kafka.offset_out_of_range; recorded in kafka_offset_events");
                Ok(to)
            }
            Ok(false) => Err(Fatal::Other(format!(
                "{tp}: fenced while resetting its out-of-range offset"
            ))),
            Err(e) => Err(Fatal::Other(format!(
                "{tp}: cannot record the out-of-range reset: {e}"
            ))),
        }
    }

    /// A consumer error. An offset out of range while running (retention overtook the sink)
    /// is found by checking every owned partition against its watermarks.
    pub fn on_consumer_error(
        &mut self,
        ctl: &dyn PartitionControl,
        error: &rdkafka::error::KafkaError,
    ) {
        use rdkafka::types::RDKafkaErrorCode;
        let out_of_range = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        );
        if !out_of_range {
            tracing::warn!(error = %error, "consumer error");
            return;
        }
        tracing::warn!(error = %error, "a partition's position fell out of its range; checking the owned partitions");
        let active: Vec<(usize, i32)> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.status == Status::Active)
            .map(|(k, _)| *k)
            .collect();
        for key in active {
            let Some(p) = self.partitions.get(&key) else {
                continue;
            };
            let (tp, epoch, cursor, lane) = (p.tp.clone(), p.epoch, p.cursor, p.lane);
            let Some(position) = cursor else { continue };
            let Ok((low, high)) = ctl.watermarks(&tp) else {
                continue;
            };
            if (low..=high).contains(&position) {
                continue;
            }
            // Finish what is in flight for the lane, so the stored offset is the position.
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            let stored = self
                .partitions
                .get(&key)
                .and_then(|p| p.sealed_next)
                .unwrap_or(position);
            match self.check_range(ctl, &tp, epoch, stored) {
                Ok(_) => self.begin_rewind(lane),
                Err(fatal) => self.set_fatal(fatal),
            }
        }
    }

    /// Gives partitions up: what is buffered for them is committed (or fails) before this
    /// returns, and nothing is written for them afterwards.
    pub fn revoke(&mut self, tps: &[TopicPartition]) {
        let keys: Vec<(usize, i32)> = tps
            .iter()
            .filter_map(|tp| self.route_index.get(&tp.topic).map(|&r| (r, tp.partition)))
            .filter(|k| self.partitions.contains_key(k))
            .collect();
        let mut lanes: Vec<usize> = keys.iter().map(|k| self.partitions[k].lane).collect();
        lanes.sort_unstable();
        lanes.dedup();
        for &lane in &lanes {
            self.seal_and_send(lane);
        }
        self.wait_until(|i| lanes.contains(&i));
        for key in &keys {
            self.partitions.remove(key);
        }
        self.health.set_assigned(self.partitions.len());
        self.stats.rebalance("revoke", self.partitions.len());
    }

    /// Every partition currently owned, for a full revoke.
    pub fn owned(&self) -> Vec<TopicPartition> {
        self.partitions.values().map(|p| p.tp.clone()).collect()
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
