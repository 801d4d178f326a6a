//! Writers: each owns one PostgreSQL connection and commits the batches of its partitions,
//! one transaction per batch: fenced offset advance first, then the rows, then COMMIT.
//!
//! A writer never retries on its own. It reports each outcome to the consumer thread, which
//! decides: only the database, re-read after a failure, says what was written.
//!
//! Here: what a writer reports, the consumer thread's handle on it (`Lane`, with the supervisor
//! that reports a writer's death) and its loop. One batch's transaction, and the search for the
//! row PostgreSQL refused, are in `transaction.rs`; how an error is sorted in `errors.rs`; the
//! debug builds' fault injection in `fault.rs`.

use std::collections::HashSet;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokio::sync::mpsc;

use crate::batch::Batch;
use crate::config::PostgresSettings;
use crate::offsets::{self, TopicPartition};
use rdkafka::producer::FutureProducer;

mod copy;
mod copy_first;
mod errors;
#[cfg(debug_assertions)]
mod fault;
#[cfg(test)]
mod pg_model;
mod rounds;
mod savepoint;
mod stale;
mod transaction;
mod unique_rounds;
mod unique_write;

pub(crate) use copy_first::CopyFirst;
pub(crate) use errors::is_toast_unavailable;
pub use transaction::apply_table;
use transaction::{write, Written};

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
    /// Tables whose upserts were written by a plain COPY instead of the merge.
    pub copied: Vec<String>,
    /// Per table, the merges beyond the first that repeated keys cost (`rounds`).
    pub rounds: Vec<(String, u32)>,
    /// Per topic and table, the records left out as older than their key's stored row.
    pub stale: Vec<(String, String, u64)>,
    /// Per table, rows that kept columns Debezium sent as unavailable, and those that became
    /// `toast_unavailable` dead letters.
    pub placeholders: Vec<(String, u64, u64)>,
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

/// What a writer tells the consumer thread.
#[derive(Debug)]
pub enum WriterEvent {
    /// The outcome of one batch (boxed: it is far larger than `Gone`, and events wait in a
    /// channel).
    Done(Box<WriteResult>),
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
    /// Which tables' upserts try a plain COPY first.
    first: CopyFirst,
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
            copied: written.copied,
            rounds: written.rounds,
            stale: written.stale,
            placeholders: written.placeholders,
            offsets: batch.offsets.clone(),
        };
        if results.send(WriterEvent::Done(Box::new(result))).is_err() {
            break;
        }
    }
    if let Some(s) = session {
        let _ = s.conn.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of `panic!("literal")`, of `panic!("{x}")` (a `String`) and of a payload
    /// that is neither, each with the prefix that says the writer panicked.
    #[test]
    fn panic_message_reads_str_and_string_payloads() {
        assert_eq!(panic_message(Box::new("boom")), "panicked: boom");
        assert_eq!(
            panic_message(Box::new(format!("lane {}", 3))),
            "panicked: lane 3"
        );
        assert_eq!(panic_message(Box::new(42_u8)), "panicked: no message");
    }

    /// The real thing: a task that panics is reported with its message.
    #[test]
    fn panic_message_of_a_panicked_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let task = runtime.spawn(async { panic!("fault {}", "injected") });
        let err = runtime.block_on(task).unwrap_err();
        assert!(err.is_panic());
        assert_eq!(panic_message(err.into_panic()), "panicked: fault injected");
    }
}
