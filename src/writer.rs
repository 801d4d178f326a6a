//! Writers: each owns one PostgreSQL connection and commits the batches of its partitions,
//! one transaction per batch: fenced offset advance first, then the rows, then COMMIT.
//!
//! A writer never retries on its own. It reports each outcome to the consumer thread, which
//! decides: only the database, re-read after a failure, says what was written.

use std::collections::{HashSet, VecDeque};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::mpsc;

use crate::batch::{Batch, TableWrite};
use crate::config::{PostgresSettings, SessionRole};
use crate::dead_letter::{self, DeadLetter};
use crate::offsets::{self, TopicPartition};
use rdkafka::producer::FutureProducer;

/// How a batch transaction ended.
#[derive(Debug)]
pub enum Outcome {
    Committed,
    /// The compare-and-set matched fewer partitions than the batch holds: another consumer
    /// owns one of them now (`Fenced`), or a position is not the one the batch expected
    /// (`Stale`: queued behind a batch that failed). Rolled back.
    Refused {
        why: offsets::Refusal,
        matched: u64,
        expected: usize,
    },
    /// A failure worth retrying (connection, server restart, serialization, timeouts).
    /// The commit may or may not have happened; only a re-read can tell.
    Transient(String),
    /// The data or the schema is wrong; retrying the same batch cannot succeed.
    Permanent(String),
    /// PostgreSQL refused the row of record `offset` of `tp`, whose topic stops on errors. The
    /// rest of the batch committed without it and without the partition's later records, so
    /// the partition's position rests on it (`WriteResult::offsets` as committed).
    RejectedRecord {
        tp: TopicPartition,
        offset: i64,
        reason: String,
    },
}

/// A writer's report on one batch.
#[derive(Debug)]
pub struct WriteResult {
    pub lane: usize,
    pub batch_id: u64,
    pub records: usize,
    /// Rows committed (rows that became dead letters are not rows written).
    pub rows: usize,
    pub outcome: Outcome,
    /// BEGIN to COMMIT.
    pub transaction_time: Duration,
    /// Record first buffered to COMMIT.
    pub batch_age: Duration,
    /// Dead letters written with the batch.
    pub dead_letters: usize,
    /// Rows committed per table (rows that became dead letters excluded).
    pub tables: Vec<(String, usize)>,
    /// The positions the batch moved to, when it committed (ending on a refused record).
    pub offsets: Vec<crate::offsets::OffsetAdvance>,
}

/// Connection settings shared by every writer.
#[derive(Clone)]
pub struct WriterConfig {
    /// The session settings come from here (`SessionRole::Writer`).
    pub postgres: PostgresSettings,
    pub group: String,
    /// Produces dead letters to their topics, where any topic asks for it.
    pub dead_letter_producer: Option<FutureProducer>,
}

/// What a committed batch wrote.
#[derive(Debug, Default)]
struct Written {
    dead_letters: usize,
    /// Rows per table, without the rows PostgreSQL refused and that became dead letters.
    tables: Vec<(String, usize)>,
    /// The record the batch was committed without.
    refused: Option<Refused>,
}

impl Written {
    /// Committed, or committed without a refused record.
    fn take_outcome(&mut self) -> Outcome {
        match self.refused.take() {
            Some(Refused { tp, offset, reason }) => Outcome::RejectedRecord { tp, offset, reason },
            None => Outcome::Committed,
        }
    }
}

/// A row PostgreSQL refused, named by its record.
#[derive(Debug)]
struct Refused {
    tp: TopicPartition,
    offset: i64,
    reason: String,
}

/// What a writer tells the consumer thread.
#[derive(Debug)]
pub enum WriterEvent {
    /// The outcome of one batch.
    Done(WriteResult),
    /// The writer task ended while the sink still needed it (it panicked): every batch it held
    /// is unanswered, so the sink must stop rather than wait.
    Gone { lane: usize, reason: String },
}

/// Why a batch could not be handed to its writer.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// More batches than `max_in_flight` are queued: the caller's accounting is wrong.
    Full,
    /// The writer task has stopped.
    Gone,
}

/// The consumer thread's handle on one writer. The queue holds at most `max_in_flight`
/// batches, the same bound the consumer thread keeps, so memory cannot grow past it.
pub struct Lane {
    sender: mpsc::Sender<Batch>,
}

impl Lane {
    /// Starts a writer task and its supervisor; results (and the writer's death) arrive on
    /// `events`. Join the returned handle at shutdown: it ends when the writer does.
    pub fn spawn(
        id: usize,
        config: WriterConfig,
        max_in_flight: usize,
        events: std_mpsc::Sender<WriterEvent>,
        runtime: &tokio::runtime::Handle,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel(max_in_flight.max(1));
        let writer = runtime.spawn(run(id, config, receiver, events.clone()));
        let supervisor = runtime.spawn(async move {
            let reason = match writer.await {
                // The queue closed: the consumer thread is done with this writer.
                Ok(()) => return,
                Err(e) if e.is_panic() => panic_message(e.into_panic()),
                Err(e) => e.to_string(),
            };
            tracing::error!(lane = id, %reason, "writer task died");
            let _ = events.send(WriterEvent::Gone { lane: id, reason });
        });
        (Self { sender }, supervisor)
    }

    /// Hands a sealed batch to the writer without waiting.
    pub fn send(&self, batch: Batch) -> Result<(), SendError> {
        self.sender.try_send(batch).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::Gone,
        })
    }
}

/// A panic's message, for the error that stops the sink.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    format!("panicked: {text}")
}

/// A writer's connection and what it has set up on it.
struct Session {
    conn: PgConnection,
    /// Staging tables created on this connection (temporary tables live per session).
    staged: HashSet<String>,
}

/// One batch at a time, in order, so a lane's partitions commit in sequence; every batch gets a
/// result, and after a failure the next batch starts on a fresh connection.
async fn run(
    id: usize,
    config: WriterConfig,
    mut batches: mpsc::Receiver<Batch>,
    results: std_mpsc::Sender<WriterEvent>,
) {
    let mut session: Option<Session> = None;
    #[cfg(debug_assertions)]
    let mut fault = fault::WriterPanic::from_env(id);
    while let Some(mut batch) = batches.recv().await {
        #[cfg(debug_assertions)]
        fault.before_batch();
        let started = Instant::now();
        let mut written = Written::default();
        let outcome = match write(&mut session, &config, &mut batch).await {
            Ok(mut w) => {
                let outcome = w.take_outcome();
                written = w;
                outcome
            }
            Err(outcome) => {
                // The connection's state is unknown after a failure: start afresh.
                if let Some(s) = session.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), s.conn.close()).await;
                }
                outcome
            }
        };
        let result = WriteResult {
            lane: id,
            batch_id: batch.id,
            records: batch.records,
            rows: written.tables.iter().map(|(_, n)| n).sum(),
            outcome,
            transaction_time: started.elapsed(),
            batch_age: batch.opened_at.elapsed(),
            dead_letters: written.dead_letters,
            tables: written.tables,
            offsets: batch.offsets.clone(),
        };
        if results.send(WriterEvent::Done(result)).is_err() {
            break;
        }
    }
    if let Some(s) = session {
        let _ = s.conn.close().await;
    }
}

/// One batch, one transaction; returns what it wrote. A batch PostgreSQL refuses for a row of
/// a topic that stops on errors is searched for the first such row, then written again without
/// that record and its partition's later records: `batch.offsets` then end on the record.
async fn write(
    session: &mut Option<Session>,
    config: &WriterConfig,
    batch: &mut Batch,
) -> Result<Written, Outcome> {
    let failed = match transact(session, config, batch).await {
        Err(outcome @ Outcome::Permanent(_)) => outcome,
        done => return done,
    };
    let Some(Session { conn, staged }) = session.as_mut() else {
        return Err(failed);
    };
    if batch.writes.iter().all(|w| w.dead_letters.is_some()) {
        return Err(failed);
    }
    // The failed transaction took the staging tables it created with it.
    staged.clear();
    let refused = match find_refused(conn, staged, batch).await {
        Ok(Some(refused)) => refused,
        Ok(None) => return Err(failed),
        Err(e) => return Err(classify(e)),
    };
    staged.clear();
    tracing::warn!(tp = %refused.tp, offset = refused.offset, error = %refused.reason,
        "row refused by PostgreSQL: writing the batch without it and its partition's later records");
    let offsets = batch.offsets.clone();
    leave_out(batch, &refused);
    match transact(session, config, batch).await {
        Ok(mut written) => {
            written.refused = Some(refused);
            Ok(written)
        }
        Err(outcome) => {
            batch.offsets = offsets;
            Err(match outcome {
                Outcome::Permanent(reason) => Outcome::Permanent(format!(
                    "record {}@{} was refused ({}); without it and its partition's later records the batch still failed: {reason}",
                    refused.tp, refused.offset, refused.reason
                )),
                other => other,
            })
        }
    }
}

/// Applies the batch's rows under savepoints, splitting refused ranges, until the first
/// refused row of a topic that stops on errors stands alone; then rolls everything back.
/// `None` when no single row explains the failure.
async fn find_refused(
    conn: &mut PgConnection,
    staged: &mut HashSet<String>,
    batch: &Batch,
) -> Result<Option<Refused>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let mut dead = Vec::new();
    let mut found = None;
    for write in &batch.writes {
        found = apply_rows(&mut tx, write, staged, &mut dead, true).await?;
        if found.is_some() {
            break;
        }
    }
    tx.rollback().await?;
    Ok(found)
}

/// Leaves the refused record and its partition's later records out of `batch`; the
/// partition's advance then ends on the record, so a restart meets it again.
fn leave_out(batch: &mut Batch, refused: &Refused) {
    let (tp, offset) = (&refused.tp, refused.offset);
    for write in batch.writes.iter_mut().filter(|w| w.topic == tp.topic) {
        let rows = write.rows();
        write.left_out = Some((tp.partition, offset));
        // Each record of a topic that stops on errors is a row: those left out are not
        // committed records either.
        batch.records -= rows - write.rows();
    }
    for advance in batch.offsets.iter_mut().filter(|a| a.tp == *tp) {
        advance.next = offset;
    }
    batch.dead_letters.retain(|d| {
        d.topic != tp.topic || d.record.partition != tp.partition || d.record.offset < offset
    });
}

/// The batch's one transaction.
async fn transact(
    session: &mut Option<Session>,
    config: &WriterConfig,
    batch: &Batch,
) -> Result<Written, Outcome> {
    if session.is_none() {
        let options = config
            .postgres
            .connect_options(SessionRole::Writer)
            .map_err(|e| Outcome::Permanent(e.to_string()))?;
        let connected = tokio::time::timeout(config.postgres.connect_timeout, options.connect())
            .await
            .map_err(|_| Outcome::Transient("timed out connecting to PostgreSQL".into()))?
            .map_err(classify)?;
        *session = Some(Session {
            conn: connected,
            staged: HashSet::new(),
        });
    }
    let Session { conn, staged } = session.as_mut().expect("connected above");
    let mut tx = conn.begin().await.map_err(classify)?;
    let matched = offsets::advance(&mut tx, &config.group, &batch.offsets)
        .await
        .map_err(classify)?;
    if matched != batch.offsets.len() as u64 {
        let why = offsets::refusal(&mut tx, &config.group, &batch.offsets)
            .await
            .map_err(classify)?;
        let _ = tx.rollback().await;
        return Err(Outcome::Refused {
            why,
            matched,
            expected: batch.offsets.len(),
        });
    }
    let mut dead = batch.dead_letters.clone();
    let mut tables = Vec::with_capacity(batch.writes.len());
    for write in &batch.writes {
        let before = dead.len();
        apply_table(&mut tx, write, staged, &mut dead)
            .await
            .map_err(classify)?;
        // A refused row became a dead letter instead of a row.
        tables.push((write.table.clone(), write.rows() - (dead.len() - before)));
    }
    if !dead.is_empty() {
        dead_letter::insert(&mut tx, &config.group, &dead)
            .await
            .map_err(classify)?;
        if let Some(producer) = &config.dead_letter_producer {
            dead_letter::produce(producer, &dead)
                .await
                .map_err(Outcome::Transient)?;
        }
    }
    tx.commit().await.map_err(classify)?;
    Ok(Written {
        dead_letters: dead.len(),
        tables,
        refused: None,
    })
}

/// Writes one table's rows. Where rejected rows become dead letters, the rows are applied
/// under a savepoint; a range PostgreSQL refuses for a row's data is split in halves until
/// each refused row stands alone and is dead-lettered, in record order, so the rest commits.
pub async fn apply_table(
    conn: &mut PgConnection,
    write: &TableWrite,
    staged: &mut HashSet<String>,
    dead: &mut Vec<DeadLetter>,
) -> Result<(), sqlx::Error> {
    // Only a search returns a refused row; otherwise it is an error.
    apply_rows(conn, write, staged, dead, false)
        .await
        .map(|_| ())
}

/// `apply_table`, and with `search` also for a topic that stops on errors: its first refused
/// row, once it stands alone, is returned (the savepoint left to the caller's rollback).
async fn apply_rows(
    conn: &mut PgConnection,
    write: &TableWrite,
    staged: &mut HashSet<String>,
    dead: &mut Vec<DeadLetter>,
    search: bool,
) -> Result<Option<Refused>, sqlx::Error> {
    if let Some((id, setup)) = &write.setup {
        if !staged.contains(id) {
            for statement in setup {
                sqlx::query(statement)
                    .persistent(false)
                    .execute(&mut *conn)
                    .await?;
            }
            staged.insert(id.clone());
        }
    }
    let (lo, hi) = write.span();
    if write.dead_letters.is_none() && !search {
        return apply_range(conn, write, lo, hi).await.map(|()| None);
    }
    let mut ranges = VecDeque::from([(lo, hi)]);
    while let Some((lo, hi)) = ranges.pop_front() {
        sqlx::query("SAVEPOINT kps_rows")
            .execute(&mut *conn)
            .await?;
        match apply_range(conn, write, lo, hi).await {
            Ok(()) => {
                sqlx::query("RELEASE SAVEPOINT kps_rows")
                    .execute(&mut *conn)
                    .await?;
            }
            Err(e) if is_row_error(&e) => {
                sqlx::query("ROLLBACK TO SAVEPOINT kps_rows")
                    .execute(&mut *conn)
                    .await?;
                let ordinals = write.ordinals_in(lo, hi);
                match ordinals.len() {
                    0 => return Err(e),
                    1 if write.dead_letters.is_none() => {
                        let reason = describe_db_error(&e);
                        let (partition, offset) = write.position_of(ordinals[0]).ok_or(e)?;
                        return Ok(Some(Refused {
                            tp: TopicPartition::new(write.topic.clone(), partition),
                            offset,
                            reason,
                        }));
                    }
                    1 => {
                        let message = describe_db_error(&e);
                        let letter = write.dead_letter(ordinals[0], message).ok_or(e)?;
                        tracing::warn!(topic = %letter.topic, partition = letter.record.partition, offset = letter.record.offset,
                            error = %letter.message, "row rejected by PostgreSQL: dead-lettered");
                        dead.push(letter);
                    }
                    n => {
                        let mid = ordinals[n / 2];
                        ranges.push_front((mid, hi));
                        ranges.push_front((lo, mid));
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Copies the rows whose ordinals fall in `lo..hi`, then runs the table's statements.
async fn apply_range(
    conn: &mut PgConnection,
    write: &TableWrite,
    lo: i64,
    hi: i64,
) -> Result<(), sqlx::Error> {
    for staged in &write.copies {
        let from = staged.ordinals.partition_point(|&o| o < lo);
        let to = staged.ordinals.partition_point(|&o| o < hi);
        if from == to {
            continue;
        }
        let data = match write.left_out {
            None => staged.data.subset(from, to),
            Some(_) if !(from..to).any(|i| staged.keeps(i, write.left_out)) => continue,
            Some(_) => staged
                .data
                .subset_where(from, to, |i| staged.keeps(i, write.left_out)),
        };
        let mut copy = conn.copy_in_raw(&staged.statement).await?;
        if let Err(e) = copy.send(data).await {
            let _ = copy.abort("send failed").await;
            return Err(e);
        }
        copy.finish().await?;
    }
    for statement in &write.statements {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Errors caused by one row's data (SQLSTATE classes 22 and 23), as opposed to errors of the
/// connection, the schema or the server.
fn is_row_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("22") || c.starts_with("23")),
        _ => false,
    }
}

/// PostgreSQL's message with its SQLSTATE, the table, column and constraint it names, and
/// its detail.
fn describe_db_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let mut notes = vec![format!("SQLSTATE {code}")];
            let message = match db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                Some(pg) => {
                    match (pg.schema(), pg.table()) {
                        (Some(schema), Some(table)) => {
                            notes.push(format!("table {schema}.{table}"))
                        }
                        (None, Some(table)) => notes.push(format!("table {table}")),
                        _ => {}
                    }
                    notes.extend(pg.column().map(|c| format!("column {c}")));
                    notes.extend(pg.constraint().map(|c| format!("constraint {c}")));
                    notes.extend(pg.detail().map(str::to_string));
                    pg.message()
                }
                None => db.message(),
            };
            format!("{message} ({})", notes.join("; "))
        }
        other => other.to_string(),
    }
}

/// Sorts an error into retry-worthy or not, by SQLSTATE class where there is one.
fn classify(e: sqlx::Error) -> Outcome {
    match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let message = describe_db_error(&e);
            match &code[..code.len().min(2)] {
                // data exception, integrity violation, syntax/access (missing table, column,
                // privilege): the same batch fails the same way every time.
                "22" | "23" | "42" => Outcome::Permanent(message),
                _ => Outcome::Transient(message),
            }
        }
        _ => Outcome::Transient(e.to_string()),
    }
}

/// Fault injection for the integration tests, compiled into debug builds only: a writer that
/// dies must stop the sink, never hang it, and nothing else can make a writer panic on purpose.
#[cfg(debug_assertions)]
mod fault {
    /// `KPS_FAULT_WRITER_PANIC=<lane>:<batches>` panics writer `lane` before its next batch
    /// once it has committed `batches`.
    pub(super) struct WriterPanic {
        after: Option<u64>,
        seen: u64,
    }

    impl WriterPanic {
        /// Reads the variable once, when the writer starts.
        pub(super) fn from_env(lane: usize) -> Self {
            let after = std::env::var("KPS_FAULT_WRITER_PANIC").ok().and_then(|v| {
                let (l, n) = v.split_once(':')?;
                (l.parse::<usize>().ok()? == lane).then(|| n.parse().ok())?
            });
            Self { after, seen: 0 }
        }

        /// Panics when the count is reached.
        pub(super) fn before_batch(&mut self) {
            if self.after.is_some_and(|n| self.seen >= n) {
                panic!("fault injected by KPS_FAULT_WRITER_PANIC");
            }
            self.seen += 1;
        }
    }
}
