//! The coordinator driven by fakes of every port, in milliseconds: a consumer that records
//! what it was told, a `kafka_offsets` table in memory with the same compare-and-set the
//! writers run, and writers that commit into it (or fail as scripted). Each test ends by
//! checking that every record was written exactly once and the stored positions are where the
//! records end.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use figment::providers::{Format, Toml};
use figment::Figment;
use rdkafka::Offset;

use super::ports::{MoveKind, Undescribed};
use super::*;
use crate::config::TopicSettings;
use crate::mapping::TopicMapper;
use crate::offsets::{OffsetAdvance, Refusal, StoredOffset};
use crate::registry::{RegisteredSchema, RegistryError, SchemaKind};
use crate::schema::{Column, ColumnType, Table};
use crate::writer::{Outcome, WriteResult, WriterEvent};

const TOPIC: &str = "orders";

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

// ---- the database ------------------------------------------------------------------------

/// `kafka_offsets` and the business table, as the fakes share them.
#[derive(Default)]
struct Db {
    rows: HashMap<TopicPartition, StoredOffset>,
    /// Committed rows by (partition, offset), with how often each was written.
    written: BTreeMap<(i32, i64), u32>,
    /// Committed dead letters: partition, offset, kind.
    letters: Vec<(i32, i64, &'static str)>,
    /// Calls to fail before answering again (PostgreSQL away).
    unavailable: u32,
    events: Vec<(TopicPartition, MoveKind, i64)>,
}

impl Db {
    fn next(&self, p: i32) -> Option<i64> {
        self.rows.get(&tp(p)).and_then(|r| r.next_offset)
    }

    fn epoch(&self, p: i32) -> i64 {
        self.rows.get(&tp(p)).map_or(0, |r| r.epoch)
    }

    /// Another consumer (or a restart) claims the partition: a new epoch.
    fn take_over(&mut self, p: i32) {
        let row = self.rows.entry(tp(p)).or_insert_with(|| stored(p, None, 0));
        row.epoch += 1;
        row.reset_from_epoch = None;
    }

    /// `kafka-pg-sink offsets reset`: moves the position, bumps the epoch, remembers the
    /// replaced one (unless a reset is already pending).
    fn operator_reset(&mut self, p: i32, to: i64) {
        let row = self.rows.get_mut(&tp(p)).expect("claimed before");
        row.reset_from_epoch = row.reset_from_epoch.or(Some(row.epoch));
        row.epoch += 1;
        row.next_offset = Some(to);
    }

    fn down(&mut self) -> Result<(), String> {
        if self.unavailable > 0 {
            self.unavailable -= 1;
            return Err("connection refused".into());
        }
        Ok(())
    }

    /// The writers' compare-and-set, with the same two ways of refusing.
    fn commit(&mut self, batch: &Batch) -> Outcome {
        for a in &batch.offsets {
            let row = self.rows.get(&a.tp);
            if row.map(|r| r.epoch) != Some(a.epoch) {
                return Outcome::Refused {
                    why: Refusal::Fenced,
                    matched: 0,
                    expected: batch.offsets.len(),
                };
            }
            if row.and_then(|r| r.next_offset) != a.expected {
                return Outcome::Refused {
                    why: Refusal::Stale,
                    matched: 0,
                    expected: batch.offsets.len(),
                };
            }
        }
        for a in &batch.offsets {
            if let Some(row) = self.rows.get_mut(&a.tp) {
                row.next_offset = Some(a.next);
            }
        }
        for position in rows_of(batch) {
            *self.written.entry(position).or_default() += 1;
        }
        for d in &batch.dead_letters {
            self.letters
                .push((d.record.partition, d.record.offset, d.kind.as_str()));
        }
        Outcome::Committed
    }
}

fn stored(p: i32, next: Option<i64>, epoch: i64) -> StoredOffset {
    StoredOffset {
        tp: tp(p),
        next_offset: next,
        epoch,
        owner_id: None,
        reset_from_epoch: None,
    }
}

/// The records a batch writes rows for.
fn rows_of(batch: &Batch) -> Vec<(i32, i64)> {
    batch
        .writes
        .iter()
        .flat_map(|w| w.copies.iter())
        .flat_map(|c| c.positions.iter().copied())
        .collect()
}

struct FakePositions(Arc<Mutex<Db>>);

impl PositionStore for FakePositions {
    fn group(&self) -> &str {
        "g"
    }

    fn claim(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String> {
        let mut db = self.0.lock().unwrap();
        db.down()?;
        Ok(tps
            .iter()
            .map(|t| {
                db.take_over(t.partition);
                db.rows[t].clone()
            })
            .collect())
    }

    fn read(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, String> {
        let mut db = self.0.lock().unwrap();
        db.down()?;
        Ok(tps.iter().filter_map(|t| db.rows.get(t).cloned()).collect())
    }

    fn reclaim(&self, owned: &[(TopicPartition, i64)]) -> Result<Vec<StoredOffset>, String> {
        let mut db = self.0.lock().unwrap();
        db.down()?;
        let mut claims = Vec::new();
        for (t, epoch) in owned {
            let row = db.rows.get_mut(t).expect("reclaimed rows exist");
            if row.reset_from_epoch == Some(*epoch) {
                row.epoch += 1;
                row.reset_from_epoch = None;
                claims.push(row.clone());
            }
        }
        Ok(claims)
    }

    fn move_to(
        &self,
        t: &TopicPartition,
        epoch: i64,
        expected: Option<i64>,
        to: i64,
        kind: MoveKind,
        _detail: &str,
    ) -> Result<bool, String> {
        let mut db = self.0.lock().unwrap();
        db.down()?;
        let row = db.rows.get_mut(t).expect("claimed before");
        if row.epoch != epoch || row.next_offset != expected {
            return Ok(false);
        }
        row.next_offset = Some(to);
        db.events.push((t.clone(), kind, to));
        Ok(true)
    }
}

/// One answer of the registry.
type Answered = Result<Arc<RegisteredSchema>, RegistryError>;

/// The registry's answers, in order; `NotFound` once they run out.
#[derive(Clone, Default)]
struct FakeSchemas(Arc<Mutex<VecDeque<Answered>>>);

impl Schemas for FakeSchemas {
    fn fetch(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        self.0
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(RegistryError::NotFound(format!("id {id}"))))
    }
}

/// Describes no topic's own table; a table a record names is answered from the script
/// (a routed topic's), then as `t`.
#[derive(Clone, Default)]
struct NoCatalog(Arc<Mutex<VecDeque<Undescribed>>>);

impl Catalog for NoCatalog {
    fn mapper(&self, _: &TopicSettings, topic: &str) -> Result<TopicMapper, String> {
        Err(format!("no table for {topic} in this test"))
    }

    fn table_mapper(
        &self,
        settings: &TopicSettings,
        _: &str,
        _: &str,
    ) -> Result<TopicMapper, Undescribed> {
        match self.0.lock().unwrap().pop_front() {
            Some(answer) => Err(answer),
            None => TopicMapper::new(settings, table())
                .map_err(|e| Undescribed::Unusable(e.to_string())),
        }
    }
}

// ---- the writers -------------------------------------------------------------------------

/// How the fake writer answers a batch.
#[derive(Debug, Clone)]
enum Answer {
    /// Run the compare-and-set against the fake database.
    Write,
    Transient,
    Permanent,
    /// The writer task dies.
    Die,
}

/// A batch as sent: lane, id, advances, rows (partition, offset).
type Sent = (usize, u64, Vec<OffsetAdvance>, Vec<(i32, i64)>);

#[derive(Default)]
struct Writers {
    /// Sent and not answered yet, per lane in order.
    queued: Vec<VecDeque<Batch>>,
    /// Answered and waiting to be received.
    ready: VecDeque<WriterEvent>,
    /// Answers for the next batches, in order; `Write` when empty.
    script: VecDeque<Answer>,
    /// Every batch sent, for assertions: (lane, id, advances, rows).
    sent: Vec<Sent>,
    dead: Vec<usize>,
}

struct FakeWriters {
    state: Arc<Mutex<Writers>>,
    db: Arc<Mutex<Db>>,
    capacity: usize,
}

impl FakeWriters {
    /// Answers the oldest queued batch of any lane (lane order), as a writer would.
    fn answer_one(&self) -> bool {
        let mut w = self.state.lock().unwrap();
        let Some(lane) = (0..w.queued.len()).find(|&l| !w.queued[l].is_empty()) else {
            return false;
        };
        let batch = w.queued[lane].pop_front().expect("found above");
        let answer = w.script.pop_front().unwrap_or(Answer::Write);
        let outcome = match answer {
            Answer::Write => self.db.lock().unwrap().commit(&batch),
            Answer::Transient => Outcome::Transient("connection reset".into()),
            Answer::Permanent => Outcome::Permanent("value too long".into()),
            Answer::Die => {
                w.dead.push(lane);
                w.queued[lane].clear();
                w.ready.push_back(WriterEvent::Gone {
                    lane,
                    reason: "panicked: test".into(),
                });
                return true;
            }
        };
        let committed = matches!(outcome, Outcome::Committed);
        let rows = if committed { rows_of(&batch).len() } else { 0 };
        w.ready.push_back(WriterEvent::Done(Box::new(WriteResult {
            lane,
            batch_id: batch.id,
            records: batch.records,
            rows,
            outcome,
            transaction_time: Duration::from_millis(1),
            batch_age: Duration::from_millis(2),
            dead_letters: 0,
            tables: vec![("t".into(), rows)],
            copied: Vec::new(),
            rounds: Vec::new(),
            placeholders: Vec::new(),
            offsets: batch.offsets.clone(),
        })));
        true
    }
}

impl WriterPool for FakeWriters {
    fn try_send(&self, lane: usize, batch: Batch) -> Result<(), SendError> {
        let mut w = self.state.lock().unwrap();
        if w.dead.contains(&lane) {
            return Err(SendError::Gone);
        }
        if w.queued[lane].len() >= self.capacity {
            return Err(SendError::Full);
        }
        w.sent
            .push((lane, batch.id, batch.offsets.clone(), rows_of(&batch)));
        w.queued[lane].push_back(batch);
        Ok(())
    }

    fn try_recv(&self) -> Option<WriterEvent> {
        self.state.lock().unwrap().ready.pop_front()
    }

    /// The pipeline waits: the writers answer in order.
    fn recv_timeout(&self, _: Duration) -> Received {
        if let Some(e) = self.try_recv() {
            return Received::Event(e);
        }
        assert!(
            self.answer_one(),
            "the pipeline waits for a result with nothing in flight"
        );
        Received::Event(self.try_recv().expect("just answered"))
    }
}

// ---- the consumer and the observer ---------------------------------------------------------

#[derive(Default)]
struct Consumer {
    paused: Vec<TopicPartition>,
    resumed: Vec<TopicPartition>,
    seeks: Vec<(TopicPartition, Offset)>,
    /// Seek failures to report once per partition.
    seek_failures: HashMap<TopicPartition, SeekFailure>,
    restarts: Vec<(TopicPartition, Offset)>,
    watermarks: HashMap<TopicPartition, (i64, i64)>,
    positions: HashMap<TopicPartition, i64>,
    mirrored: Vec<(TopicPartition, i64)>,
}

struct FakeConsumer(Mutex<Consumer>);

impl PartitionControl for FakeConsumer {
    fn pause(&self, tps: &[TopicPartition]) {
        self.0.lock().unwrap().paused.extend_from_slice(tps);
    }
    fn resume(&self, tps: &[TopicPartition]) {
        self.0.lock().unwrap().resumed.extend_from_slice(tps);
    }
    fn seek(&self, targets: &[(TopicPartition, Offset)]) -> Vec<(TopicPartition, SeekFailure)> {
        let mut c = self.0.lock().unwrap();
        c.seeks.extend_from_slice(targets);
        targets
            .iter()
            .filter_map(|(t, _)| c.seek_failures.remove(t).map(|f| (t.clone(), f)))
            .collect()
    }
    fn watermarks(&self, t: &TopicPartition) -> Result<(i64, i64), String> {
        Ok(*self
            .0
            .lock()
            .unwrap()
            .watermarks
            .get(t)
            .unwrap_or(&(0, 1_000_000)))
    }
    fn restart_at(&self, t: &TopicPartition, offset: Offset) -> Result<(), String> {
        self.0.lock().unwrap().restarts.push((t.clone(), offset));
        Ok(())
    }
    fn commit_to_kafka(&self, positions: &[(TopicPartition, i64)]) {
        self.0.lock().unwrap().mirrored.extend_from_slice(positions);
    }
    fn positions(&self, tps: &[TopicPartition]) -> Vec<Option<i64>> {
        let c = self.0.lock().unwrap();
        tps.iter().map(|t| c.positions.get(t).copied()).collect()
    }
}

/// What the observer saw, as short words.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Observer for Seen {
    fn observe(&self, event: Event<'_>) {
        let word = match event {
            Event::Committed(r) => format!("committed {}", r.rows),
            Event::Failed(f) => format!("failed {}", f.label()),
            Event::Rebalanced { kind, owned } => format!("{} {owned}", kind.label()),
            Event::Consumed(n) => format!("consumed {n}"),
            Event::Progress { .. } => return,
        };
        self.0.lock().unwrap().push(word);
    }
}

impl Seen {
    fn failures(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|w| w.starts_with("failed"))
            .cloned()
            .collect()
    }
}

// ---- the harness -------------------------------------------------------------------------

struct Harness {
    pipeline: Pipeline,
    consumer: FakeConsumer,
    db: Arc<Mutex<Db>>,
    writers: Arc<Mutex<Writers>>,
    answering: FakeWriters,
    seen: Seen,
    schemas: FakeSchemas,
    catalog: NoCatalog,
    /// The test's clock: every tick moves it past every deadline and backoff.
    clock: Instant,
}

fn topic_settings(extra: &str) -> TopicSettings {
    // Routed by record, the table is a template.
    let table = if extra.contains("table_from") {
        "{}"
    } else {
        "t"
    };
    Figment::from(Toml::string(&format!(
        "name = \"{TOPIC}\"\ntable = \"{table}\"\n{extra}"
    )))
    .extract()
    .expect("valid topic settings")
}

fn column(name: &str, ty: ColumnType, not_null: bool) -> Column {
    Column {
        name: name.into(),
        ty,
        sql_type: format!("{ty:?}").to_lowercase(),
        not_null,
        has_default: false,
        default_sql: None,
    }
}

/// `t (id int8 primary key, note text)`.
fn table() -> Arc<Table> {
    Arc::new(Table {
        oid: 1,
        schema: "public".into(),
        name: "t".into(),
        columns: vec![
            column("id", ColumnType::Int8, true),
            column("note", ColumnType::Text, false),
        ],
        skipped: vec![],
        rules: crate::schema::RowRules::default(),
        primary_key: vec!["id".into()],
        unique_keys: vec![vec!["id".into()]],
    })
}

struct Setup {
    lanes: usize,
    max_records: usize,
    max_in_flight: usize,
    reset: ResetPolicy,
    topic: &'static str,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            lanes: 1,
            max_records: 3,
            max_in_flight: 2,
            reset: ResetPolicy::Earliest,
            topic: "",
        }
    }
}

impl Harness {
    fn new(setup: Setup) -> Self {
        let settings = topic_settings(setup.topic);
        let mapper = TopicMapper::new(&settings, table()).expect("the mapping fits the table");
        let db = Arc::new(Mutex::new(Db::default()));
        let writers = Arc::new(Mutex::new(Writers {
            queued: (0..setup.lanes).map(|_| VecDeque::new()).collect(),
            ..Writers::default()
        }));
        let pool = |state: &Arc<Mutex<Writers>>| FakeWriters {
            state: state.clone(),
            db: db.clone(),
            capacity: setup.max_in_flight,
        };
        let seen = Seen::default();
        let schemas = FakeSchemas::default();
        let limits = BatchSettings {
            max_records: setup.max_records,
            max_in_flight: setup.max_in_flight,
            ..BatchSettings::default()
        };
        let catalog = NoCatalog::default();
        let route = match crate::record_routing::TablePicker::new(&settings).expect("valid") {
            None => Route::one(TOPIC.into(), mapper),
            Some(picker) => Route::by_record(TOPIC.into(), &settings, picker, Vec::new()),
        };
        let pipeline = Pipeline::new(PipelineParts {
            routes: vec![route],
            router: Router::new(std::slice::from_ref(&settings)).expect("valid routes"),
            catalog: Box::new(catalog.clone()),
            positions: Box::new(FakePositions(db.clone())),
            schemas: Box::new(schemas.clone()),
            lanes: setup.lanes,
            writers: Box::new(pool(&writers)),
            observer: Box::new(seen.clone()),
            policy: Policy {
                limits,
                reset: setup.reset,
                out_of_range: ResetPolicy::Fail,
                mirror_commits: true,
                claim_budget: Duration::from_secs(5),
            },
        });
        Self {
            pipeline,
            consumer: FakeConsumer(Mutex::new(Consumer::default())),
            answering: pool(&writers),
            db,
            writers,
            seen,
            schemas,
            catalog,
            clock: Instant::now(),
        }
    }

    fn assign(&mut self, partitions: &[i32]) -> Vec<(TopicPartition, Offset)> {
        let tps: Vec<TopicPartition> = partitions.iter().map(|&p| tp(p)).collect();
        self.pipeline.on_assign(&self.consumer, &tps, &|| false)
    }

    /// The consumer hands over records `offsets` of partition `p`, `{"id": offset}` each
    /// (with a note unless `sparse`), and moves its position past them.
    fn deliver(&mut self, p: i32, offsets: impl IntoIterator<Item = i64>) {
        for offset in offsets {
            self.deliver_value(
                p,
                offset,
                &format!(r#"{{"id": {offset}, "note": "n{offset}"}}"#),
            );
        }
    }

    fn deliver_value(&mut self, p: i32, offset: i64, value: &str) {
        self.deliver_bytes(p, offset, value.as_bytes());
    }

    fn deliver_bytes(&mut self, p: i32, offset: i64, value: &[u8]) {
        let key = offset.to_string();
        let record = RecordView {
            topic: TOPIC,
            partition: p,
            offset,
            timestamp: Some(1_700_000_000_000),
            key: Some(key.as_bytes()),
            value: Some(value),
            headers: &[],
        };
        self.pipeline.on_record(&record);
        self.consumer
            .0
            .lock()
            .unwrap()
            .positions
            .insert(tp(p), offset + 1);
    }

    /// Time passes past every deadline and backoff, and the poll loop ticks.
    fn tick(&mut self) {
        self.clock += Duration::from_secs(3600);
        self.pipeline.on_tick(&self.consumer, self.clock);
    }

    /// The consumer reports the end of partition `p`'s log.
    fn end_of(&mut self, p: i32) {
        self.pipeline
            .on_end_of_partition(&self.consumer, &tp(p), self.clock);
    }

    /// The writers answer everything queued, and the pipeline takes the answers in.
    fn answer_all(&mut self) {
        while self.answering.answer_one() {}
        self.tick();
    }

    fn script(&self, answers: &[Answer]) {
        self.writers
            .lock()
            .unwrap()
            .script
            .extend(answers.iter().cloned());
    }

    fn sent(&self) -> Vec<Sent> {
        self.writers.lock().unwrap().sent.clone()
    }

    fn seeks(&self) -> Vec<(TopicPartition, Offset)> {
        std::mem::take(&mut self.consumer.0.lock().unwrap().seeks)
    }

    /// Every offset of `expected` written exactly once, nothing else.
    fn assert_written_once(&self, p: i32, expected: std::ops::Range<i64>) {
        let db = self.db.lock().unwrap();
        let got: Vec<(i64, u32)> = db
            .written
            .iter()
            .filter(|((part, _), _)| *part == p)
            .map(|((_, o), n)| (*o, *n))
            .collect();
        let want: Vec<(i64, u32)> = expected.map(|o| (o, 1)).collect();
        assert_eq!(got, want, "partition {p}: (offset, times written)");
    }
}

// ---- the tests ---------------------------------------------------------------------------

#[test]
fn records_become_batches_that_commit_in_order_and_move_the_position() {
    let mut h = Harness::new(Setup::default());
    assert_eq!(h.assign(&[0]), vec![(tp(0), Offset::Beginning)]);
    h.deliver(0, 0..7);
    // Full at 3 records: two batches sealed, the 7th waits for max_wait.
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        (
            sent[0].2[0].expected,
            sent[0].2[0].next,
            sent[1].2[0].expected,
            sent[1].2[0].next
        ),
        (None, 3, Some(3), 6)
    );
    h.answer_all(); // commits both, and the tick seals the 7th
    h.answer_all();
    h.assert_written_once(0, 0..7);
    assert_eq!(h.db.lock().unwrap().next(0), Some(7));
    let c = h.consumer.0.lock().unwrap();
    assert_eq!(
        c.mirrored.last(),
        Some(&(tp(0), 7)),
        "mirrored to the group"
    );
}

/// A batch fails transiently while the next one is already in flight: the second is refused
/// (its expected position never came to be), the lane rewinds once to the stored offset, and
/// what is read again is written exactly once.
#[test]
fn a_failure_chained_after_a_transient_error_rewinds_once_and_loses_nothing() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..3);
    h.answer_all();
    h.script(&[Answer::Transient]);
    h.deliver(0, 3..9); // two batches in flight: 3..6 fails, 6..9 is stale
    assert_eq!(h.sent().len(), 3);
    h.answer_all();
    assert_eq!(h.seen.failures(), vec!["failed transient", "failed stale"]);
    assert_eq!(
        h.consumer.0.lock().unwrap().paused,
        vec![tp(0)],
        "paused once while rewinding"
    );
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Offset(3))]);
    // Records fetched before the seek are dropped while rewinding; after it, read again.
    h.deliver(0, 3..9);
    h.answer_all();
    h.deliver(0, 9..10);
    h.answer_all();
    h.answer_all();
    h.assert_written_once(0, 0..10);
    assert_eq!(h.db.lock().unwrap().next(0), Some(10));
}

/// A record sealed into a batch after a failure came back (while waiting for room) must not
/// be sent: it chains onto the failure.
#[test]
fn a_batch_sealed_while_a_failure_arrives_is_dropped_not_sent() {
    let mut h = Harness::new(Setup {
        max_in_flight: 1,
        ..Setup::default()
    });
    h.assign(&[0]);
    h.script(&[Answer::Transient]);
    h.deliver(0, 0..3); // sent, in flight
    h.deliver(0, 3..6); // sealing waits for room, gets the failure, drops this batch
    assert_eq!(h.sent().len(), 1, "the chained batch was never sent");
    h.tick();
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    h.deliver(0, 0..6);
    h.answer_all();
    h.assert_written_once(0, 0..6);
}

/// A revoke with two batches in flight waits for both and commits the open one, then writes
/// nothing more for the partition.
#[test]
fn a_revoke_with_two_batches_in_flight_finishes_them_and_then_takes_nothing() {
    let mut h = Harness::new(Setup {
        lanes: 2,
        ..Setup::default()
    });
    h.assign(&[0, 1]);
    h.deliver(0, 0..8); // two full batches in flight, two records open
    h.deliver(1, 0..2);
    h.pipeline.on_revoke(&[tp(0)]);
    h.assert_written_once(0, 0..8);
    assert_eq!(h.db.lock().unwrap().next(0), Some(8));
    assert!(
        !h.pipeline.owned().contains(&tp(0)),
        "partition 0 is given up"
    );
    let before = h.sent().len();
    h.deliver(0, 8..12); // a stale fetch after the revoke
    h.answer_all(); // the tick seals partition 1's batch at max_wait
    h.answer_all();
    assert!(
        h.sent()
            .iter()
            .skip(before)
            .all(|(_, _, adv, _)| adv.iter().all(|a| a.tp != tp(0))),
        "nothing written for a revoked partition"
    );
    h.assert_written_once(0, 0..8);
    h.assert_written_once(1, 0..2);
    let seen = h.seen.0.lock().unwrap().clone();
    assert!(seen.contains(&"revoke 1".to_string()), "{seen:?}");
}

/// After an operator's reset, the owner at the reset follows it; a zombie that lost the
/// partition before the reset is fenced and writes nothing, even though the epoch it holds
/// is "older" the same way.
#[test]
fn an_operators_reset_is_followed_by_the_owner_and_fences_a_zombie() {
    let mut owner = Harness::new(Setup::default());
    owner.assign(&[0]);
    owner.deliver(0, 0..3);
    owner.answer_all();
    owner.db.lock().unwrap().operator_reset(0, 1);
    owner.tick(); // the epoch check notices the reset of the epoch it holds
    assert_eq!(owner.seeks(), vec![(tp(0), Offset::Offset(1))]);
    let epoch = owner.db.lock().unwrap().epoch(0);
    owner.deliver(0, 1..4);
    owner.answer_all();
    assert_eq!(owner.db.lock().unwrap().epoch(0), epoch, "no other claim");
    assert_eq!(owner.db.lock().unwrap().next(0), Some(4));

    // A zombie: claimed at epoch 1, taken over (epoch 2), then the new owner's epoch was reset.
    let mut zombie = Harness::new(Setup::default());
    zombie.assign(&[0]);
    zombie.deliver(0, 0..3);
    {
        let mut db = zombie.db.lock().unwrap();
        db.take_over(0);
        db.operator_reset(0, 0);
    }
    zombie.answer_all();
    assert_eq!(zombie.seen.failures(), vec!["failed fenced"]);
    zombie.tick();
    assert!(
        zombie.seeks().is_empty(),
        "a zombie does not follow the reset"
    );
    zombie.deliver(0, 0..3);
    zombie.answer_all();
    let db = zombie.db.lock().unwrap();
    assert!(db.written.is_empty(), "the zombie wrote nothing");
    assert_eq!(
        db.rows[&tp(0)].reset_from_epoch,
        Some(2),
        "left for the owner"
    );
}

/// `latest` is pinned at the claim: a rewind before the first commit returns there, not to a
/// newer end.
#[test]
fn a_rewind_under_latest_returns_to_the_pinned_start() {
    let mut h = Harness::new(Setup {
        reset: ResetPolicy::Latest,
        ..Setup::default()
    });
    h.consumer
        .0
        .lock()
        .unwrap()
        .watermarks
        .insert(tp(0), (0, 50));
    assert_eq!(h.assign(&[0]), vec![(tp(0), Offset::Offset(50))]);
    assert_eq!(
        h.db.lock().unwrap().events,
        vec![(tp(0), MoveKind::PinnedLatest, 50)]
    );
    h.script(&[Answer::Transient]);
    h.deliver(0, 50..53);
    // The end moved on meanwhile; the rewind must not skip 50..53.
    h.consumer
        .0
        .lock()
        .unwrap()
        .watermarks
        .insert(tp(0), (0, 80));
    h.answer_all();
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Offset(50))]);
    h.deliver(0, 50..53);
    h.answer_all();
    h.assert_written_once(0, 50..53);
}

/// Upsert records that carry different columns share a batch: nothing seals it early.
#[test]
fn a_record_whose_shape_differs_stays_in_the_batch() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic: "mode = \"upsert\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.deliver(0, 0..2);
    h.deliver_value(0, 2, r#"{"id": 2}"#); // no note: another column list
    assert!(
        h.sent().is_empty(),
        "the shape change did not seal the batch"
    );
    h.tick(); // max_wait seals it
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].3, vec![(0, 0), (0, 1), (0, 2)]);
    h.answer_all();
    h.assert_written_once(0, 0..3);
}

/// A writer that dies stops the sink: nothing waits for its answers, nothing more is sent to
/// it, and what it committed before stays.
#[test]
fn a_writer_that_dies_stops_the_sink_without_hanging() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..3);
    h.answer_all();
    h.script(&[Answer::Die]);
    h.deliver(0, 3..6);
    h.deliver(0, 6..9);
    h.pipeline.drain(); // would hang waiting for the dead writer's answers
    match h.pipeline.take_fatal() {
        Some(Fatal::WriterGone { lane: 0, .. }) => {}
        other => panic!("expected WriterGone, got {other:?}"),
    }
    let before = h.sent().len();
    h.deliver(0, 9..12);
    h.pipeline.drain();
    assert_eq!(h.sent().len(), before, "nothing sent to a dead writer");
    h.assert_written_once(0, 0..3);
    assert_eq!(h.db.lock().unwrap().next(0), Some(3));
}

/// Transaction markers: the consumer's position passes offsets that no record reaches the
/// pipeline for; they are committed like records, under the fence, in order.
#[test]
fn an_offset_only_advance_moves_past_transaction_markers() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        ..Setup::default()
    });
    h.assign(&[0]);
    h.deliver(0, 0..3); // records 0..3, then a commit marker at 3
    h.consumer.0.lock().unwrap().positions.insert(tp(0), 4);
    h.tick(); // the gap joins the open batch, and max_wait seals it
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].2[0].expected, sent[0].2[0].next), (None, 4));
    assert_eq!(sent[0].3, vec![(0, 0), (0, 1), (0, 2)]);
    h.answer_all();
    assert_eq!(h.db.lock().unwrap().next(0), Some(4));
    // An aborted transaction alone (records 4..9 and their marker): a batch without rows.
    h.consumer.0.lock().unwrap().positions.insert(tp(0), 10);
    h.tick(); // the gap opens a batch: its max_wait starts now
    h.answer_all(); // sealed
    h.answer_all(); // committed
    assert_eq!(h.db.lock().unwrap().next(0), Some(10));
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].3.is_empty(), "no rows, only the advance");
    h.assert_written_once(0, 0..3);
}

/// A backlog's last batch does not wait `max_wait`: once every partition of its lane has
/// reported the end of its log, the batch after a full one is sealed at once, with the
/// transaction marker past the last record in its advance.
#[test]
fn a_backlogs_last_batch_is_sealed_when_its_partitions_reach_their_ends() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0, 1]);
    h.deliver(0, 0..4); // full at 3 (a backlog), offset 3 open
    assert_eq!(h.sent().len(), 1);
    h.consumer.0.lock().unwrap().positions.insert(tp(0), 5); // a marker at 4
    h.end_of(0);
    assert_eq!(h.sent().len(), 1, "partition 1 may still fill the batch");
    h.deliver(1, 0..1);
    h.end_of(1);
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "sealed without a tick");
    let next: Vec<(i32, i64)> = sent[1].2.iter().map(|a| (a.tp.partition, a.next)).collect();
    assert!(next.contains(&(0, 5)) && next.contains(&(1, 1)), "{next:?}");
    assert_eq!(sent[1].3.len(), 2, "{:?}", sent[1].3);
    h.answer_all();
    h.assert_written_once(0, 0..4);
    h.assert_written_once(1, 0..1);
    let db = h.db.lock().unwrap();
    assert_eq!((db.next(0), db.next(1)), (Some(5), Some(1)));
}

/// Records that trickle in keep batching for `max_wait` at the end of their partition, and so
/// does a lane after its backlog's last batch went: only a batch after a full one is sealed
/// early.
#[test]
fn a_trickle_still_waits_for_max_wait_at_the_end_of_its_partition() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..2);
    h.end_of(0);
    assert!(h.sent().is_empty(), "never full: a trickle");
    h.tick();
    assert_eq!(h.sent().len(), 1, "sealed by max_wait");
    h.answer_all();
    h.deliver(0, 2..6); // full at 3, offset 5 open
    h.end_of(0);
    assert_eq!(h.sent().len(), 3, "the backlog's last batch");
    h.answer_all();
    h.deliver(0, 6..7);
    h.end_of(0);
    assert_eq!(h.sent().len(), 3, "caught up: batching by the clock again");
    h.tick();
    h.answer_all();
    assert_eq!(h.sent().len(), 4);
    h.assert_written_once(0, 0..7);
    assert_eq!(h.db.lock().unwrap().next(0), Some(7));
}

/// A burst that ends with a full batch, then a pause with nothing to take: a record after the
/// pause is a trickle, and the end of its partition (which librdkafka may report only then)
/// does not seal its batch early. A pause with records open, waiting for the ends to be
/// reported, is still the backlog's end.
#[test]
fn after_the_consumer_ran_out_of_records_an_end_does_not_seal_early() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..3); // full: a backlog
    h.pipeline.on_idle();
    h.deliver(0, 3..4);
    h.end_of(0);
    assert_eq!(h.sent().len(), 1, "a trickle waits for max_wait");
    h.tick();
    h.answer_all();
    assert_eq!(h.sent().len(), 2);
    h.deliver(0, 4..8); // full again, offset 7 open
    h.pipeline.on_idle();
    h.end_of(0);
    assert_eq!(
        h.sent().len(),
        4,
        "the backlog's last batch, its end reported late"
    );
    h.answer_all();
    h.assert_written_once(0, 0..8);
}

/// The end of a partition this process does not own (revoked meanwhile) changes nothing.
#[test]
fn the_end_of_a_partition_not_owned_is_ignored() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..4);
    h.end_of(7);
    assert_eq!(h.sent().len(), 1);
    h.end_of(0);
    assert_eq!(h.sent().len(), 2);
    h.answer_all();
    h.assert_written_once(0, 0..4);
}

/// A position left over from the previous assignment is not trusted: it would skip records.
#[test]
fn a_position_from_before_the_assignment_is_not_a_gap() {
    let mut h = Harness::new(Setup::default());
    h.consumer.0.lock().unwrap().positions.insert(tp(0), 500);
    h.assign(&[0]);
    h.tick();
    h.answer_all();
    assert!(
        h.sent().is_empty(),
        "nothing committed from a stale position"
    );
    assert_eq!(h.db.lock().unwrap().next(0), None);
}

/// A claim retries while PostgreSQL is away, and gives up (stopping the sink with nothing
/// assigned) once the claim budget is spent.
#[test]
fn a_claim_retries_while_postgres_is_away_then_gives_up() {
    let mut h = Harness::new(Setup::default());
    h.db.lock().unwrap().unavailable = 2;
    assert_eq!(h.assign(&[0]), vec![(tp(0), Offset::Beginning)]);
    assert!(!h.pipeline.has_fatal());

    let mut h = Harness::new(Setup::default());
    h.pipeline.policy.claim_budget = Duration::from_millis(1);
    h.db.lock().unwrap().unavailable = 100;
    assert!(h.assign(&[0]).is_empty(), "nothing starts");
    assert!(matches!(h.pipeline.take_fatal(), Some(Fatal::Other(m)) if m.contains("cannot claim")));
}

/// A partition whose stored offset is outside its range stops the sink under `fail`, with
/// nothing started.
#[test]
fn a_stored_offset_out_of_range_stops_under_fail() {
    let mut h = Harness::new(Setup::default());
    h.db.lock()
        .unwrap()
        .rows
        .insert(tp(0), stored(0, Some(5), 1));
    h.consumer
        .0
        .lock()
        .unwrap()
        .watermarks
        .insert(tp(0), (10, 20));
    assert!(h.assign(&[0]).is_empty());
    assert!(matches!(
        h.pipeline.take_fatal(),
        Some(Fatal::OutOfRange {
            stored: 5,
            low: 10,
            ..
        })
    ));
}

/// A seek that finds the fetcher stopped restarts it instead; another failure is retried.
#[test]
fn a_stopped_fetcher_is_restarted_and_other_seek_failures_retried() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.script(&[Answer::Transient]);
    h.deliver(0, 0..3);
    h.consumer
        .0
        .lock()
        .unwrap()
        .seek_failures
        .insert(tp(0), SeekFailure::Other("timed out".into()));
    h.answer_all();
    assert_eq!(h.seeks().len(), 1);
    h.deliver(0, 0..3);
    assert!(h.sent().len() == 1, "still rewinding: nothing taken");
    h.consumer
        .0
        .lock()
        .unwrap()
        .seek_failures
        .insert(tp(0), SeekFailure::FetcherStopped("Erroneous state".into()));
    h.tick();
    assert_eq!(
        h.consumer.0.lock().unwrap().restarts,
        vec![(tp(0), Offset::Beginning)]
    );
    h.deliver(0, 0..3);
    h.answer_all();
    h.assert_written_once(0, 0..3);
}

/// A permanent refusal stops the sink; what committed before stays, the rest is unwritten.
#[test]
fn a_permanent_refusal_stops_with_the_position_at_the_batch() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..3);
    h.answer_all();
    h.script(&[Answer::Permanent]);
    h.deliver(0, 3..6);
    h.pipeline.drain();
    assert!(matches!(
        h.pipeline.take_fatal(),
        Some(Fatal::Rejected { .. })
    ));
    assert_eq!(h.db.lock().unwrap().next(0), Some(3));
    h.assert_written_once(0, 0..3);
    assert_eq!(h.seen.failures(), vec!["failed rejected"]);
}

/// The consumed count is reported before any commit that holds the records.
#[test]
fn consumed_records_are_reported_before_their_commit() {
    let mut h = Harness::new(Setup::default());
    h.assign(&[0]);
    h.deliver(0, 0..3);
    h.answer_all();
    let seen = h.seen.0.lock().unwrap().clone();
    let consumed = seen.iter().position(|w| w == "consumed 3");
    let committed = seen.iter().position(|w| w == "committed 3");
    assert!(consumed.is_some() && consumed < committed, "{seen:?}");
    assert_eq!(seen.first().map(String::as_str), Some("assign 1"));
}

/// A record in a registry format whose schema cannot be fetched (the registry is down) is not
/// the record's fault: nothing is dead-lettered, the lane rewinds and reads it again later.
/// An id the registry does not have is the record's fault: a `schema` dead letter.
#[test]
fn a_registry_that_does_not_answer_is_retried_and_an_unknown_id_is_a_dead_letter() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic: "format = \"avro\"\non_error = \"dead_letter\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.schemas.0.lock().unwrap().extend([
        Err(RegistryError::Unavailable("connection refused".into())),
        Err(RegistryError::Unavailable("connection refused".into())),
    ]);
    let framed = [0u8, 0, 0, 0, 42, 2, 0x61];
    h.deliver_bytes(0, 0, &framed);
    h.tick();
    assert!(
        h.sent().is_empty(),
        "nothing taken while the registry is away"
    );
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    h.deliver_bytes(0, 0, &framed); // still away
    h.tick();
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    assert!(
        h.db.lock().unwrap().letters.is_empty(),
        "never a dead letter"
    );
    // Back, but it has no schema 42.
    h.deliver_bytes(0, 0, &framed);
    h.answer_all();
    h.answer_all();
    let db = h.db.lock().unwrap();
    assert_eq!(db.letters, vec![(0, 0, "schema")]);
    assert_eq!(db.next(0), Some(1), "the position moves past the letter");
    assert!(db.written.is_empty());
}

/// A schema of another kind than the topic reads is refused as the record's error; a payload
/// without the wire header is a `decode` letter and asks the registry nothing.
#[test]
fn a_schema_of_the_wrong_kind_and_a_record_without_the_header_are_dead_letters() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic: "format = \"avro\"\non_error = \"dead_letter\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.schemas
        .0
        .lock()
        .unwrap()
        .push_back(Ok(Arc::new(RegisteredSchema {
            kind: SchemaKind::Protobuf,
            text: "syntax = \"proto3\";".into(),
            imports: Vec::new(),
        })));
    h.deliver_bytes(0, 0, &[0, 0, 0, 0, 7, 0]);
    h.deliver_bytes(0, 1, br#"{"id": 1}"#);
    h.answer_all();
    h.answer_all();
    let db = h.db.lock().unwrap();
    assert_eq!(db.letters, vec![(0, 0, "schema"), (0, 1, "decode")]);
    assert_eq!(db.next(0), Some(2));
    assert!(
        h.schemas.0.lock().unwrap().is_empty(),
        "one fetch, for id 7"
    );
}

/// A registered schema that does not compile is the record's error (`schema`), never retried.
#[test]
fn a_schema_that_does_not_compile_is_a_dead_letter() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic: "format = \"avro\"\non_error = \"dead_letter\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.schemas
        .0
        .lock()
        .unwrap()
        .push_back(Ok(Arc::new(RegisteredSchema {
            kind: SchemaKind::Avro,
            text: r#"{"type": "record", "name": "R", "fields": [{"name": "id"}]}"#.into(),
            imports: Vec::new(),
        })));
    h.deliver_bytes(0, 0, &[0, 0, 0, 0, 9, 2]);
    h.answer_all();
    h.answer_all();
    let db = h.db.lock().unwrap();
    assert_eq!(db.letters, vec![(0, 0, "schema")]);
    assert_eq!(db.next(0), Some(1));
}

/// Routed by record: PostgreSQL not answering while the table a record names is described is
/// not the record's fault: nothing is taken or dead-lettered, the sink does not stop, and
/// the lane rewinds to read the record again; once described, it lands. A table that cannot
/// be used still stops the sink at its record.
#[test]
fn a_database_that_does_not_answer_while_a_routed_table_is_described_is_retried() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic:
            "table_from = { field = \"/tbl\" }\ntable_pattern = \"t\"\non_error = \"dead_letter\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.catalog.0.lock().unwrap().extend([
        Undescribed::Unavailable("pool timed out while waiting for an open connection".into()),
        Undescribed::Unavailable("PostgreSQL did not answer within 10s".into()),
    ]);
    let value = r#"{"id": 0, "note": "n0", "tbl": "t"}"#;
    h.deliver_value(0, 0, value);
    h.tick();
    assert!(
        h.sent().is_empty(),
        "nothing taken while PostgreSQL is away"
    );
    assert!(!h.pipeline.has_fatal(), "not a stop");
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    h.deliver_value(0, 0, value); // still away
    h.tick();
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    assert!(!h.pipeline.has_fatal());
    h.deliver_value(0, 0, value);
    h.answer_all();
    h.answer_all();
    {
        let db = h.db.lock().unwrap();
        assert!(db.letters.is_empty(), "never a dead letter");
        assert_eq!(db.next(0), Some(1));
    }
    assert!(!h.pipeline.has_fatal());

    let mut h = Harness::new(Setup {
        max_records: 100,
        topic:
            "table_from = { field = \"/tbl\" }\ntable_pattern = \"t\"\non_error = \"dead_letter\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    h.catalog.0.lock().unwrap().push_back(Undescribed::Unusable(
        "table public.t does not exist".into(),
    ));
    h.deliver_value(0, 0, value);
    assert!(
        matches!(h.pipeline.take_fatal(), Some(Fatal::Mapping { reason, .. }) if reason.contains("does not exist"))
    );
}

/// A batch spread over several tables fills per table: it holds up to `max_records` rows of
/// each, and `TABLE_SHARES` times `max_records` records in all, so each table's COPY carries
/// more rows; one table reaching `max_records` rows still closes it, as a batch of one table
/// always closed at `max_records` records.
#[test]
fn a_batch_of_many_tables_fills_per_table() {
    let mut h = Harness::new(Setup {
        max_records: 10,
        topic: "table_from = { field = \"/tbl\" }\ntable_pattern = \"t[0-9]\"",
        ..Setup::default()
    });
    h.assign(&[0]);
    let value = |o: i64, table: i64| format!(r#"{{"id": {o}, "note": "n{o}", "tbl": "t{table}"}}"#);
    // Eight tables in turn: five rows each when 40 records (4 × 10) close the batch.
    for o in 0..45 {
        h.deliver_value(0, o, &value(o, o % 8));
    }
    let sent = h.sent();
    assert_eq!(sent.len(), 1, "one batch sealed");
    // Rows come table by table: in offset order, they are the first 40 records.
    let mut rows = sent[0].3.clone();
    rows.sort_unstable();
    assert_eq!(rows, (0..40).map(|o| (0, o)).collect::<Vec<_>>());
    assert_eq!(lanes::TABLE_SHARES * 10, 40);
    // Then one table takes ten rows: it closes the batch at its tenth, with the five records
    // of other tables still open before them.
    for o in 45..55 {
        h.deliver_value(0, o, &value(o, 9));
    }
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].3.len(), 15);
    h.answer_all();
    h.answer_all();
    h.assert_written_once(0, 0..55);
}

/// Describes every table as `t`, and records how it was asked: by `mapper` one topic at a
/// time, or by `mappers` several together.
#[derive(Clone, Default)]
struct RecordingCatalog(Arc<Mutex<Vec<Vec<String>>>>);

impl Catalog for RecordingCatalog {
    fn mapper(&self, settings: &TopicSettings, topic: &str) -> Result<TopicMapper, String> {
        self.0.lock().unwrap().push(vec![format!("one {topic}")]);
        TopicMapper::new(settings, table()).map_err(|e| e.to_string())
    }

    fn mappers(&self, wanted: &[(TopicSettings, Arc<str>)]) -> Vec<Result<TopicMapper, String>> {
        self.0
            .lock()
            .unwrap()
            .push(wanted.iter().map(|(_, t)| t.to_string()).collect());
        wanted
            .iter()
            .map(|(s, _)| TopicMapper::new(s, table()).map_err(|e| e.to_string()))
            .collect()
    }

    fn table_mapper(
        &self,
        _: &TopicSettings,
        _: &str,
        _: &str,
    ) -> Result<TopicMapper, Undescribed> {
        Err(Undescribed::Unusable("not routed by record".into()))
    }
}

/// An assignment that brings many topics of a pattern describes their tables together
/// (`Catalog::mappers`, which the database describes several at a time), each topic once
/// whatever its partitions, and not the topics already routed; one new topic is described
/// where it is met, as before.
#[test]
fn an_assignment_describes_the_tables_of_its_new_topics_together() {
    let h = Harness::new(Setup::default());
    let pattern: TopicSettings =
        Figment::from(Toml::string("pattern = \"pat-.*\"\ntable = \"in_{topic}\""))
            .extract()
            .unwrap();
    let catalog = RecordingCatalog::default();
    let pipeline = Pipeline::new(PipelineParts {
        routes: Vec::new(),
        router: Router::new(std::slice::from_ref(&pattern)).unwrap(),
        catalog: Box::new(catalog.clone()),
        positions: Box::new(FakePositions(h.db.clone())),
        schemas: Box::new(FakeSchemas::default()),
        lanes: 2,
        writers: Box::new(FakeWriters {
            state: h.writers.clone(),
            db: h.db.clone(),
            capacity: 2,
        }),
        observer: Box::new(Seen::default()),
        policy: Policy {
            limits: BatchSettings::default(),
            reset: ResetPolicy::Earliest,
            out_of_range: ResetPolicy::Fail,
            mirror_commits: false,
            claim_budget: Duration::from_secs(5),
        },
    });
    let at = |topic: &str, p: i32| TopicPartition::new(topic, p);
    let described = pipeline.describe_ahead(&[
        at("pat-a", 0),
        at("pat-a", 1),
        at("pat-b", 0),
        at("pat-c", 0),
        at("other", 0),
    ]);
    assert_eq!(
        *catalog.0.lock().unwrap(),
        vec![vec!["pat-a", "pat-b", "pat-c"]],
        "one call for the three new topics, each once; none for a topic no entry matches"
    );
    let mut topics: Vec<&str> = described.keys().map(|t| &**t).collect();
    topics.sort_unstable();
    assert_eq!(topics, ["pat-a", "pat-b", "pat-c"]);
    assert!(described.values().all(Result::is_ok));

    assert!(
        pipeline
            .describe_ahead(&[at("pat-d", 0), at("pat-d", 1)])
            .is_empty(),
        "a single new topic is described where it is met"
    );
    assert_eq!(catalog.0.lock().unwrap().len(), 1);
}

mod evolve;

/// The worst max/min ratio of stored positions over 8 partitions of `per` records each, taken
/// through the poll loop's turns of `per_turn` records while the writers commit as they go
/// (one batch answered after every record). Counted from a tenth of the backlog stored until
/// the first partition is done, as the integration test `fairness::` does. Checks that every
/// record was written exactly once.
fn worst_ratio_served_in_turns(per: i64, per_turn: usize) -> f64 {
    use crate::kafka::turns::{Took, Turns};
    let mut h = Harness::new(Setup {
        lanes: 2,
        max_records: 50,
        max_in_flight: 2,
        ..Setup::default()
    });
    let parts: Vec<i32> = (0..8).collect();
    h.assign(&parts);
    let mut queues: Vec<(i32, VecDeque<i64>)> =
        parts.iter().map(|&p| (p, (0..per).collect())).collect();
    let mut turns = Turns::new(per_turn);
    let mut worst = 1.0f64;
    loop {
        let round = turns.round(
            &mut queues,
            |_| 1,
            |(p, q)| {
                let Some(offset) = q.pop_front() else {
                    return Took::Empty;
                };
                h.deliver(*p, [offset]);
                h.answering.answer_one();
                h.pipeline.on_results();
                let db = h.db.lock().unwrap();
                let stored: Vec<i64> = (0..8).map(|p| db.next(p).unwrap_or(0)).collect();
                let (max, min) = (stored.iter().max(), stored.iter().min());
                let (max, min) = (*max.unwrap_or(&0), *min.unwrap_or(&0));
                if stored.iter().sum::<i64>() >= per * 8 / 10 && max < per {
                    worst = worst.max(if min == 0 {
                        f64::INFINITY
                    } else {
                        max as f64 / min as f64
                    });
                }
                Took::Item
            },
        );
        if round.idle() {
            break;
        }
    }
    h.answer_all();
    h.answer_all();
    for p in parts {
        h.assert_written_once(p, 0..per);
        assert_eq!(h.db.lock().unwrap().next(p), Some(per), "partition {p}");
    }
    worst
}

/// Partitions served in short turns commit in step: the furthest stored position is at most
/// twice the least (the issue's target). Served one whole fetched chunk (a quarter of the
/// backlog) after another, as librdkafka's shared queue hands them over, they are not: the
/// check can fail.
#[test]
fn partitions_served_in_turns_commit_in_step_and_each_record_once() {
    let in_turns = worst_ratio_served_in_turns(2000, 8);
    assert!(in_turns <= 2.0, "in turns of 8: {in_turns:.2}");
    let by_chunk = worst_ratio_served_in_turns(2000, 500);
    assert!(by_chunk > 2.0, "by chunks of 500: {by_chunk:.2}");
}
