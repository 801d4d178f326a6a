//! The consumer thread's coordinator. Records flow one way through it:
//!
//! record → mapping (encode into the lane's open batch) → seal → writer (one transaction:
//! fenced offsets, rows, COMMIT) → result → events (stats, health).
//!
//! The state lives in typed modules with no I/O: `partitions` (ownership, epochs, positions,
//! status) and `lanes` (open batches, in-flight counts, retry times). The coordinator feeds
//! them what the ports answer (`ports`: the consumer, PostgreSQL's positions and catalog, the
//! writers, the observer), so every transition is unit-tested with fakes (`tests`).
//!
//! The rebalance callback and the poll loop run on the same thread, so this state is only ever
//! touched by one thread at a time; the mutex around it is never contended.

use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::config::{BatchSettings, OnError, ResetPolicy};
use crate::dead_letter::{DeadLetter, ErrorKind};
use crate::mapping::{EncodeError, MapError};
use crate::offsets::TopicPartition;
use crate::record::{OwnedRecord, RecordView};
use crate::registry::RegistryError;
use crate::routing::Router;
use crate::writer::SendError;

pub(crate) mod adapters;
mod ends;
mod evolve;
mod fatal;
mod lanes;
mod partitions;
mod ports;
mod rebalance;
mod recovery;
mod results;
mod route;
#[cfg(test)]
mod tests;
mod tick;

pub use fatal::Fatal;
use lanes::Lanes;
use partitions::{Accept, Key, PartitionTable};
pub(crate) use ports::{Catalog, Event, Observer, PositionStore, Received, Schemas, WriterPool};
pub use ports::{PartitionControl, SeekFailure};
use route::Chosen;
pub use route::Route;

/// The choices from the configuration that steer the protocol.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) limits: BatchSettings,
    /// Where a partition without a stored offset starts (`kafka.auto_offset_reset`).
    pub(crate) reset: ResetPolicy,
    /// What a stored offset outside the partition's range becomes (`kafka.offset_out_of_range`).
    pub(crate) out_of_range: ResetPolicy,
    /// Committed positions are mirrored to the Kafka group (`kafka.mirror_commits`).
    pub(crate) mirror_commits: bool,
    /// How long a rebalance may keep retrying its claim before the sink gives up: below
    /// `max.poll.interval.ms`, so the group never drops a member stuck in the callback unseen.
    pub(crate) claim_budget: Duration,
}

/// Everything the pipeline is built from.
pub(crate) struct PipelineParts {
    pub(crate) routes: Vec<Route>,
    pub(crate) router: Router,
    pub(crate) catalog: Box<dyn Catalog>,
    pub(crate) positions: Box<dyn PositionStore>,
    pub(crate) schemas: Box<dyn Schemas>,
    /// How many writers the pool has: a partition's lane is fixed by it.
    pub(crate) lanes: usize,
    pub(crate) writers: Box<dyn WriterPool>,
    pub(crate) observer: Box<dyn Observer>,
    pub(crate) policy: Policy,
}

/// The consumer thread's state.
pub struct Pipeline {
    routes: Vec<Route>,
    route_index: HashMap<Arc<str>, usize>,
    /// Finds the settings for topics first seen at assignment (pattern subscriptions).
    router: Router,
    catalog: Box<dyn Catalog>,
    positions: Box<dyn PositionStore>,
    schemas: Box<dyn Schemas>,
    writers: Box<dyn WriterPool>,
    observer: Box<dyn Observer>,
    table: PartitionTable,
    lanes: Lanes,
    policy: Policy,
    fatal: Option<Fatal>,
    next_batch_id: u64,
    /// Records seen for partitions not (or no longer) owned, to log once in a while.
    dropped: u64,
    /// Records taken and not yet reported (reported before any commit that holds them).
    unreported: u64,
    /// Partitions to pause at the next chance the consumer is at hand.
    to_pause: Vec<TopicPartition>,
    /// Positions to mirror to the Kafka group (`kafka.mirror_commits`).
    to_mirror: Vec<(TopicPartition, i64)>,
    /// The next table's entry in open batches (`route::Target::slot`).
    next_slot: usize,
    last_publish: Instant,
    /// When the owned partitions' epochs were last compared with the database, to notice an
    /// operator's reset even when no record arrives.
    last_epoch_check: Instant,
    /// When positions were last compared with the cursors, for offsets that carry no record.
    last_gap_check: Instant,
    /// Per table (by its batch slot), once looked up: its `auto_create`/`auto_evolve` state, if
    /// its topic uses either.
    evolvers: Vec<Option<Option<crate::ddl::Evolver>>>,
}

/// Why a schema could not be learnt.
enum Learn {
    /// The record's own problem (an unknown id, a schema of the wrong kind): a dead letter or
    /// a stop, by `on_error`.
    Refused(MapError),
    /// The registry did not answer: retried, never a dead letter.
    Unavailable(String),
}

/// How often owned partitions are compared with the database for operators' resets.
const EPOCH_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How often consumer positions are compared with the cursors (a local call, no request).
const GAP_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// How long a wait for a writer goes before it says what it waits for.
const SLOW_WRITER_NOTICE: Duration = Duration::from_secs(30);

impl Pipeline {
    /// Owns no partitions yet: they arrive with the first assignment.
    pub(crate) fn new(mut parts: PipelineParts) -> Self {
        let mut next_slot = 0;
        for target in parts.routes.iter_mut().flat_map(|r| r.targets.iter_mut()) {
            target.slot = next_slot;
            next_slot += 1;
        }
        let route_index = parts
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.topic.clone(), i))
            .collect();
        let now = Instant::now();
        Self {
            routes: parts.routes,
            route_index,
            router: parts.router,
            catalog: parts.catalog,
            positions: parts.positions,
            schemas: parts.schemas,
            writers: parts.writers,
            observer: parts.observer,
            table: PartitionTable::default(),
            lanes: Lanes::new(parts.lanes, parts.policy.limits.clone()),
            policy: parts.policy,
            fatal: None,
            next_batch_id: 0,
            dropped: 0,
            unreported: 0,
            to_pause: Vec::new(),
            to_mirror: Vec::new(),
            next_slot,
            last_publish: now,
            last_epoch_check: now,
            last_gap_check: now,
            evolvers: Vec::new(),
        }
    }

    /// Topic names and patterns to subscribe to.
    pub fn subscription(&self) -> Vec<String> {
        self.router.subscription()
    }

    /// Whether a header list must be built for records of `topic`.
    pub fn needs_headers(&self, topic: &str) -> bool {
        self.route_index
            .get(topic)
            .is_some_and(|&i| self.routes[i].needs_headers())
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

    /// The key of `tp`, if its topic is routed.
    fn key_of(&self, tp: &TopicPartition) -> Option<Key> {
        self.route_index
            .get(&tp.topic)
            .map(|&route| (route, tp.partition))
    }

    // ---- records -------------------------------------------------------------------------

    /// Takes one record: encodes it into its lane's open batch, sealing the batch when full.
    pub fn on_record(&mut self, record: &RecordView<'_>) {
        let Some(&route) = self.route_index.get(record.topic) else {
            self.note_dropped(record, "not a configured topic");
            return;
        };
        let key = (route, record.partition);
        let lane = match self.table.accept(key, record.offset) {
            Accept::Take { lane } => lane,
            Accept::NotOwned => {
                self.note_dropped(record, "partition not assigned here");
                return;
            }
            // Rewinding or fenced: the record will be read again by whoever owns it.
            Accept::Stopped => return,
            Accept::AlreadyTaken { cursor } => {
                tracing::debug!(
                    topic = record.topic,
                    partition = record.partition,
                    offset = record.offset,
                    cursor,
                    "skipping a record already taken"
                );
                return;
            }
        };
        self.unreported += 1;
        self.routes[route].consumed += 1;
        let target = match self.routes[route].choose(record, &*self.catalog, &mut self.next_slot) {
            Chosen::Target(t) => t,
            Chosen::Nothing => {
                self.taken(lane, key, record);
                return;
            }
            Chosen::Refused(e) => {
                if self.dead_letter(lane, route, None, record, (e.kind, e.why)) {
                    self.taken(lane, key, record);
                }
                return;
            }
            Chosen::Unavailable(why) => {
                // As for a registry that does not answer: nothing of the record is taken, and
                // the lane rewinds after a backoff to read it again, while polling goes on.
                tracing::warn!(topic = record.topic, partition = record.partition, offset = record.offset, error = %why, "cannot describe the table the record names; retrying after a backoff");
                self.unreported -= 1;
                self.routes[route].consumed -= 1;
                self.begin_rewind(lane);
                return;
            }
            Chosen::Unusable(why) => {
                // The record is not taken: after a fix (the table created) a restart reads it.
                self.table.stop(key);
                self.set_fatal(Fatal::Mapping {
                    tp: TopicPartition::new(self.routes[route].topic.clone(), record.partition),
                    offset: record.offset,
                    reason: why,
                });
                return;
            }
        };
        let (mut encoded, ddl_need) = match self.evolve(lane, route, target, record) {
            evolve::Evolved::Go(need) => (self.encode_into(lane, route, target, record), need),
            evolve::Evolved::Invalid(e) => (Err(EncodeError::Invalid(e)), 0),
            evolve::Evolved::Stop => return,
        };
        // A value and its key may each bring a schema id not seen yet.
        for _ in 0..2 {
            let Err(EncodeError::NeedSchema(id)) = encoded else {
                break;
            };
            match self.learn_schema(route, target, id) {
                Ok(()) => encoded = self.encode_into(lane, route, target, record),
                Err(Learn::Refused(e)) => encoded = Err(EncodeError::Invalid(e)),
                Err(Learn::Unavailable(why)) => {
                    // Not the record's fault: nothing of it is taken, and the lane rewinds
                    // after a backoff to read it again, while polling goes on.
                    tracing::warn!(topic = record.topic, partition = record.partition, offset = record.offset, schema = id, error = %why, "cannot fetch the record's schema; retrying after a backoff");
                    self.unreported -= 1;
                    self.routes[route].consumed -= 1;
                    self.begin_rewind(lane);
                    return;
                }
            }
        }
        if encoded == Err(EncodeError::NeedsFreshBatch) {
            // The record must come first in its table's batch (a truncate): start a new one.
            self.seal_and_send(lane);
            // Sealing may have waited for a result that started a rewind: then this record
            // must not enter the new batch (it will be read again).
            if !self.table.is_active(key) {
                return;
            }
            encoded = self.encode_into(lane, route, target, record);
        }
        if let Err(e) = encoded {
            let error = match e {
                EncodeError::Invalid(e) => e,
                EncodeError::NeedsFreshBatch => {
                    MapError::Unsupported("a record that does not fit a fresh batch".into())
                }
                EncodeError::NeedSchema(id) => {
                    MapError::Schema(format!("schema {id} is still unknown after it was fetched"))
                }
            };
            let error = (ErrorKind::of(&error), error.to_string());
            if !self.dead_letter(lane, route, Some(target), record, error) {
                return;
            }
        }
        self.note_ddl_need(route, target, lane, ddl_need);
        self.taken(lane, key, record);
    }

    /// The record is in the lane's open batch (as rows, a dead letter, or nothing): its
    /// partition's position moves past it with the batch, which is sealed when full.
    fn taken(&mut self, lane: usize, key: Key, record: &RecordView<'_>) {
        if self.table.took(key, record.offset) {
            self.lanes.join(lane, key);
        }
        let bytes = record.value.map_or(0, <[u8]>::len) + record.key.map_or(0, <[u8]>::len);
        if self.lanes.added(lane, bytes) {
            self.seal_and_send(lane);
        }
    }

    /// Its own function because a record is encoded again after a column-list change sealed
    /// the batch.
    fn encode_into(
        &mut self,
        lane: usize,
        route: usize,
        target: usize,
        record: &RecordView<'_>,
    ) -> Result<(), EncodeError> {
        let Route { topic, targets, .. } = &self.routes[route];
        let target = &targets[target];
        let open = self.lanes.open_mut(lane);
        let rows = open.table_rows(target.slot, topic, &target.mapper);
        let encoded = target.mapper.encode(record, rows);
        // Whether the table's rows close the batch (`Lanes::added`).
        let count = rows.rows();
        open.note_rows(count);
        encoded
    }

    /// Fetches schema `id` and teaches it to the target's mapping.
    fn learn_schema(&mut self, route: usize, target: usize, id: u32) -> Result<(), Learn> {
        match self.schemas.fetch(id) {
            Ok(schema) => self.routes[route].targets[target]
                .mapper
                .learn(id, &schema)
                .map_err(Learn::Refused),
            Err(RegistryError::NotFound(what)) => Err(Learn::Refused(MapError::Schema(format!(
                "the record's schema id {id} is not in the registry ({what})"
            )))),
            Err(RegistryError::Unavailable(why)) => Err(Learn::Unavailable(why)),
        }
    }

    /// A record that cannot be written: kept as a dead letter in this batch's transaction (the
    /// position moves past it like any record; true), or the sink stops at it (false).
    fn dead_letter(
        &mut self,
        lane: usize,
        route: usize,
        target: Option<usize>,
        record: &RecordView<'_>,
        (kind, error): (ErrorKind, String),
    ) -> bool {
        let r = &self.routes[route];
        let topic = &r.topic;
        if r.on_error() == OnError::DeadLetter {
            let letter = DeadLetter {
                topic: topic.clone(),
                record: OwnedRecord::from_view(record),
                kind,
                message: error.clone(),
                table: r.table_label(target),
                produce_to: r.dead_letter_topic().cloned(),
            };
            tracing::warn!(topic = record.topic, partition = record.partition, offset = record.offset, error = %error, "record dead-lettered");
            self.lanes.open_mut(lane).dead_letters.push(letter);
            return true;
        }
        let fatal = Fatal::Mapping {
            tp: TopicPartition::new(topic.clone(), record.partition),
            offset: record.offset,
            reason: error,
        };
        // Everything before this record is complete: commit it so the position is here.
        self.table.stop((route, record.partition));
        self.set_fatal(fatal);
        false
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

    // ---- batches -------------------------------------------------------------------------

    /// Closes a lane's open batch and hands it to its writer, waiting if the writer is full.
    fn seal_and_send(&mut self, lane: usize) {
        let Some(members) = self.lanes.take_members(lane) else {
            return;
        };
        let advances = self.table.seal(&members);
        self.next_batch_id += 1;
        let mut batch = self.lanes.open_mut(lane).seal(self.next_batch_id, advances);
        self.attach_ddl(lane, &mut batch);
        while !self.lanes.has_room(lane) {
            if !self.wait_for_result() {
                return;
            }
        }
        if self.lanes.is_rewinding(lane) || self.lanes.get(lane).is_gone() {
            // A failure came back while waiting: this batch chains onto it and is dropped;
            // the rewind re-reads it from Kafka.
            return;
        }
        self.send(lane, batch);
    }

    /// A writer that is gone is fatal: its batches would never be answered.
    fn send(&mut self, lane: usize, batch: Batch) {
        tracing::trace!(
            lane,
            batch = batch.id,
            records = batch.records,
            "batch sealed"
        );
        match self.writers.try_send(lane, batch) {
            Ok(()) => self.lanes.sent(lane),
            Err(SendError::Gone) => self.writer_gone(lane, "its queue is closed".into()),
            Err(SendError::Full) => self.set_fatal(Fatal::Other(format!(
                "writer {lane}'s queue is full although fewer than max_in_flight batches are in flight"
            ))),
        }
    }

    /// Seals every batch that has waited `max_wait`; returns when the next one is due.
    fn flush_due(&mut self, now: Instant) -> Option<Instant> {
        let (due, next) = self.lanes.due(now);
        for lane in due {
            self.lanes.caught_up(lane);
            self.seal_and_send(lane);
        }
        next
    }

    /// Seals everything open and waits until every writer is idle (shutdown, fatal errors).
    pub fn drain(&mut self) {
        for lane in 0..self.lanes.count() {
            self.seal_and_send(lane);
        }
        self.wait_until(|_| true);
        self.report_consumed();
    }
}
