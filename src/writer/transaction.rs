//! One batch's transaction: the fenced advance, the rows, the dead letters, COMMIT; and when
//! PostgreSQL refuses a row of a topic that stops on errors, the search for that row and the
//! batch written again without it and its partition's later records.

use std::collections::{HashSet, VecDeque};

use sqlx::{ConnectOptions, Connection, PgConnection};

use super::copy::{range_data, send_copy};
use super::errors::{classify, describe_db_error, is_row_error, is_toast_unavailable};
use super::rounds::Rounds;
use super::savepoint::take_back;
use super::{CopyFirst, Outcome, Session, WriterConfig};
use crate::batch::{Batch, PlainCopy, TableWrite};
use crate::config::SessionRole;
use crate::dead_letter::{self, DeadLetter};
use crate::offsets::{self, TopicPartition};

/// What a committed batch wrote.
#[derive(Debug, Default)]
pub(super) struct Written {
    pub(super) dead_letters: usize,
    /// Rows per table, without the rows PostgreSQL refused and that became dead letters.
    pub(super) tables: Vec<(String, usize)>,
    /// Tables whose upserts went in by a plain COPY.
    pub(super) copied: Vec<String>,
    /// Per table, the merges beyond the first its repeated keys cost.
    pub(super) rounds: Vec<(String, u32)>,
    /// Per topic and table, the records not applied for being older than the stored row.
    pub(super) stale: Vec<(String, String, u64)>,
    /// Per table, the rows committed that kept columns Debezium sent as unavailable, and the
    /// ones that became `toast_unavailable` dead letters instead.
    pub(super) placeholders: Vec<(String, u64, u64)>,
    /// The record the batch was committed without.
    refused: Option<Refused>,
}

impl Written {
    /// Committed, or committed without a refused record.
    pub(super) fn take_outcome(&mut self) -> Outcome {
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

/// One batch, one transaction; returns what it wrote. A batch PostgreSQL refuses for a row of
/// a topic that stops on errors is searched for the first such row, then written again without
/// that record and its partition's later records: `batch.offsets` then end on the record.
pub(super) async fn write(
    session: &mut Option<Session>,
    config: &WriterConfig,
    batch: &mut Batch,
) -> Result<Written, Outcome> {
    let failed = match transact(session, config, batch).await {
        Err(outcome @ Outcome::Permanent(_)) => outcome,
        done => return done,
    };
    let Some(Session {
        conn,
        staged,
        first,
    }) = session.as_mut()
    else {
        return Err(failed);
    };
    if batch.writes.iter().all(|w| w.dead_letters.is_some()) {
        return Err(failed);
    }
    // The failed transaction took the staging tables it created with it.
    staged.clear();
    let refused = match find_refused(conn, staged, first, batch).await {
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
    first: &mut CopyFirst,
    batch: &Batch,
) -> Result<Option<Refused>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    // Checked as the batch itself is, or a child applied before its parent would be blamed.
    if defers_constraints(batch) {
        defer_constraints(&mut tx).await?;
    }
    // The rows need the batch's schema changes here too (rolled back with the search).
    for write in &batch.writes {
        crate::ddl::apply(&mut tx, &write.ddl).await?;
    }
    let mut dead = Vec::new();
    let mut found = None;
    for write in &batch.writes {
        let rounds = Rounds::of(&write.copies, &write.keys_at);
        found = apply_rows(&mut tx, write, &rounds, staged, first, &mut dead, true).await?;
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
            first: CopyFirst::default(),
        });
    }
    let Session {
        conn,
        staged,
        first,
    } = session.as_mut().expect("connected above");
    first.take_copied();
    let mut tx = conn.begin().await.map_err(classify)?;
    let deferred = defers_constraints(batch);
    if deferred {
        defer_constraints(&mut tx).await.map_err(classify)?;
    }
    apply_ddl(&mut tx, batch).await?;
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
    let mut rounds = Vec::new();
    let mut stale = Vec::new();
    let mut placeholders = Vec::new();
    for write in &batch.writes {
        let before = dead.len();
        let extra = apply_table(&mut tx, write, staged, first, &mut dead)
            .await
            .map_err(classify)?;
        if extra > 0 {
            rounds.push((write.table.clone(), extra));
        }
        let mut skipped = 0;
        if write.versioned {
            skipped = super::stale::take(&mut tx, write).await.map_err(classify)?;
            if skipped > 0 {
                stale.push((write.topic.to_string(), write.table.clone(), skipped));
            }
        }
        // A refused row became a dead letter instead of a row; a stale one is not applied.
        let applied = write.rows() - (dead.len() - before) - skipped as usize;
        tables.push((write.table.clone(), applied));
        if !write.placeholders.is_empty() {
            placeholders.push(placeholder_outcomes(write, &dead[before..]));
        }
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
    tx.commit().await.map_err(|e| match classify(e) {
        Outcome::Permanent(why) if deferred => Outcome::Permanent(format!(
            "a deferred constraint failed at COMMIT of a batch holding rows of several tables of one topic (routed by record), so no single record can be named and nothing of the batch is written: {why}; a row whose referenced row is never produced must be fixed at the source"
        )),
        other => other,
    })?;
    Ok(Written {
        dead_letters: dead.len(),
        tables,
        copied: first.take_copied(),
        rounds,
        stale,
        placeholders,
        refused: None,
    })
}

/// (table, rows committed keeping placeholder columns, `toast_unavailable` letters) of one
/// committed write: its placeholder rows, less those left out and those dead-lettered.
fn placeholder_outcomes(write: &TableWrite, letters: &[DeadLetter]) -> (String, u64, u64) {
    let lettered: HashSet<(i32, i64)> = letters
        .iter()
        .filter(|d| d.kind == dead_letter::ErrorKind::ToastUnavailable)
        .map(|d| (d.record.partition, d.record.offset))
        .collect();
    let kept = write
        .placeholders
        .iter()
        .filter_map(|&o| write.position_of(o))
        .filter(|&at| crate::batch::kept(at, write.left_out) && !lettered.contains(&at))
        .count();
    (write.table.clone(), kept as u64, lettered.len() as u64)
}

/// The batch's schema changes, first in its transaction. A concurrent writer's identical
/// change is retried (the pipeline describes the table again before re-reading the records).
async fn apply_ddl(conn: &mut PgConnection, batch: &Batch) -> Result<(), Outcome> {
    let mut ran = 0;
    for write in batch.writes.iter().filter(|w| !w.ddl.is_empty()) {
        ran += crate::ddl::apply(conn, &write.ddl).await.map_err(|e| {
            if crate::ddl::is_concurrent_change(&e) {
                Outcome::Transient(format!(
                    "another writer changed table {} at the same time: {}",
                    write.table,
                    describe_db_error(&e)
                ))
            } else {
                classify(e)
            }
        })?;
    }
    #[cfg(debug_assertions)]
    if ran > 0 {
        super::fault::pause_after_ddl().await;
    }
    #[cfg(not(debug_assertions))]
    let _ = ran; // only the debug builds' fault injection reads it
    Ok(())
}

/// Whether the batch holds rows of one topic for several tables (routing by record): they are
/// applied table by table, not in record order, so a row may reach its table before the row
/// it references reaches its own. Other batches keep their constraints as declared, so their
/// refused rows are still found one by one.
fn defers_constraints(batch: &Batch) -> bool {
    batch.writes.iter().enumerate().any(|(i, w)| {
        batch.writes[..i]
            .iter()
            .any(|o| o.topic == w.topic && o.table != w.table)
    })
}

/// `DEFERRABLE` constraints (foreign keys between routed tables) are checked at COMMIT, when
/// every table of the batch holds its rows; `NOT DEFERRABLE` ones stay checked per statement.
async fn defer_constraints(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SET CONSTRAINTS ALL DEFERRED")
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// Writes one table's rows. Where rejected rows become dead letters, the rows are applied
/// under a savepoint; a range PostgreSQL refuses for a row's data is split in halves until
/// each refused row stands alone and is dead-lettered, in record order, so the rest commits.
/// Returns the merges beyond the first that the write's repeated keys cost (its rounds).
pub async fn apply_table(
    conn: &mut PgConnection,
    write: &TableWrite,
    staged: &mut HashSet<String>,
    first: &mut CopyFirst,
    dead: &mut Vec<DeadLetter>,
) -> Result<u32, sqlx::Error> {
    let rounds = Rounds::of(&write.copies, &write.keys_at);
    // Only a search returns a refused row; otherwise it is an error.
    apply_rows(conn, write, &rounds, staged, first, dead, false).await?;
    Ok(rounds.extra_merges(write))
}

/// `apply_table`, and with `search` also for a topic that stops on errors: its first refused
/// row, once it stands alone, is returned (the caller rolls the transaction back).
async fn apply_rows(
    conn: &mut PgConnection,
    write: &TableWrite,
    rounds: &Rounds,
    staged: &mut HashSet<String>,
    first: &mut CopyFirst,
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
    // Before any row, and outside the savepoints a failed write is split by, so it runs once.
    for (statement, at) in &write.before {
        if crate::batch::kept(*at, write.left_out) {
            sqlx::query(statement).execute(&mut *conn).await?;
        }
    }
    let (lo, hi) = write.span();
    if write.dead_letters.is_none() && !search {
        return apply_range(conn, write, rounds, first, lo, hi)
            .await
            .map(|()| None);
    }
    let mut ranges = VecDeque::from([(lo, hi)]);
    while let Some((lo, hi)) = ranges.pop_front() {
        sqlx::query("SAVEPOINT kps_rows")
            .execute(&mut *conn)
            .await?;
        match apply_range(conn, write, rounds, first, lo, hi).await {
            Ok(()) => {
                sqlx::query("RELEASE SAVEPOINT kps_rows")
                    .execute(&mut *conn)
                    .await?;
            }
            Err(e) if is_row_error(&e) => {
                take_back(conn, "kps_rows").await?;
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
                        let toast = is_toast_unavailable(&e);
                        let mut letter = write.dead_letter(ordinals[0], message).ok_or(e)?;
                        if toast {
                            letter.kind = dead_letter::ErrorKind::ToastUnavailable;
                        }
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

/// Copies the rows whose ordinals fall in `lo..hi`, then runs the table's statements; or, for
/// upserts that may all be new keys, copies them straight into the table if it takes them. A
/// write whose keys repeat goes by its `Rounds`.
async fn apply_range(
    conn: &mut PgConnection,
    write: &TableWrite,
    rounds: &Rounds,
    first: &mut CopyFirst,
    lo: i64,
    hi: i64,
) -> Result<(), sqlx::Error> {
    // A plain COPY of rows whose keys repeat could only fail on them. Unique indexes besides
    // the key order the rows by more than their keys.
    if rounds.count() > 1 && write.unique.is_none() {
        return rounds.apply(conn, write, lo, hi).await;
    }
    // New keys in record order, each checked as it goes in: what one-by-one apply does.
    if let (Some(plain), [staged], 1) = (&write.plain, &write.copies[..], rounds.count()) {
        // A range with no rows has nothing to copy, and no try to count.
        if let Some(data) = range_data(write, staged, lo, hi, None) {
            if first.should_try(&write.table) {
                if copy_plainly(conn, write, plain, &data).await? {
                    first.copied(&write.table);
                    return Ok(());
                }
                first.refused(&write.table);
            }
        }
    }
    if let Some(order) = &write.unique {
        let distinct = rounds.count() == 1;
        let extra = super::unique_write::apply(conn, write, order, distinct, lo, hi).await?;
        rounds.note_planned(extra);
        return Ok(());
    }
    for staged in &write.copies {
        if let Some(data) = range_data(write, staged, lo, hi, None) {
            send_copy(conn, &staged.statement, data).await?;
        }
    }
    for statement in &write.statements {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}

/// The plain COPY of `copy_first` of the staged `data`, under a savepoint: `true` when the
/// table took every row, `false` when PostgreSQL refused the COPY (taken back; the merge comes
/// next). Only a lost connection is an error.
async fn copy_plainly(
    conn: &mut PgConnection,
    write: &TableWrite,
    plain: &PlainCopy,
    data: &[u8],
) -> Result<bool, sqlx::Error> {
    let Some(data) = crate::pgcopy::project(data, &plain.fields) else {
        return Ok(false);
    };
    sqlx::query("SAVEPOINT kps_plain")
        .execute(&mut *conn)
        .await?;
    match send_copy(conn, &plain.statement, data).await {
        Ok(()) => {
            sqlx::query("RELEASE SAVEPOINT kps_plain")
                .execute(&mut *conn)
                .await?;
            Ok(true)
        }
        Err(sqlx::Error::Database(e)) => {
            tracing::debug!(table = %write.table, error = %e, "upserts not all new keys: merging them");
            take_back(conn, "kps_plain").await?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::batch::StagedCopy;
    use crate::dead_letter::ErrorKind;
    use crate::offsets::OffsetAdvance;
    use crate::pgcopy::CopyBuffer;
    use crate::record::OwnedRecord;

    /// A table write of `topic` whose rows come from these records, one row each, in order.
    fn write_of(topic: &str, table: &str, positions: &[(i32, i64)]) -> TableWrite {
        let mut buffer = CopyBuffer::new();
        for (_, offset) in positions {
            let mark = buffer.begin_row(1);
            buffer.bytes(&offset.to_be_bytes());
            buffer.end_row(mark);
        }
        TableWrite {
            table: table.into(),
            topic: topic.into(),
            setup: None,
            before: Vec::new(),
            copies: vec![StagedCopy {
                statement: format!("COPY {table} (o) FROM STDIN (FORMAT binary)"),
                data: buffer.finish_rows(),
                ordinals: (0..positions.len() as i64).collect(),
                origins: Vec::new(),
                positions: positions.to_vec(),
            }],
            statements: Vec::new(),
            plain: None,
            dead_letters: None,
            left_out: None,
            ddl: Vec::new(),
            keys_at: Vec::new(),
            probe: None,
            versioned: false,
            unique: None,
            placeholders: Vec::new(),
        }
    }

    /// A dead letter of record `offset` of `topic/partition`.
    fn letter(topic: &str, partition: i32, offset: i64) -> DeadLetter {
        DeadLetter {
            topic: topic.into(),
            record: OwnedRecord {
                partition,
                offset,
                timestamp: None,
                key: None,
                value: None,
                headers: Vec::new(),
            },
            kind: ErrorKind::Mapping,
            message: "unmappable".into(),
            table: "public.t".into(),
            produce_to: None,
        }
    }

    /// An advance of `topic/partition` to `next`; epoch and expectation are the same for all.
    fn advance(topic: &str, partition: i32, next: i64) -> OffsetAdvance {
        OffsetAdvance {
            tp: TopicPartition::new(topic, partition),
            epoch: 4,
            expected: Some(5),
            next,
        }
    }

    /// The rows a write still commits, by their records' positions.
    fn kept(write: &TableWrite) -> Vec<(i32, i64)> {
        write
            .copies
            .iter()
            .flat_map(|c| {
                (0..c.positions.len())
                    .filter(|&i| c.keeps(i, write.left_out))
                    .map(|i| c.positions[i])
            })
            .collect()
    }

    /// Only a batch holding one topic's rows for several tables defers constraints: two topics
    /// with a table each, or one topic with one table, keep them as declared.
    #[test]
    fn constraints_are_deferred_only_for_one_topic_writing_several_tables() {
        let batch = |writes: Vec<TableWrite>| Batch {
            id: 1,
            offsets: Vec::new(),
            writes,
            dead_letters: Vec::new(),
            records: 0,
            opened_at: Instant::now(),
        };
        assert!(!defers_constraints(&batch(vec![write_of(
            "a",
            "public.a",
            &[(0, 1)]
        )])));
        assert!(!defers_constraints(&batch(vec![
            write_of("a", "public.a", &[(0, 1)]),
            write_of("b", "public.b", &[(0, 1)]),
        ])));
        assert!(defers_constraints(&batch(vec![
            write_of("b", "public.b", &[(0, 1)]),
            write_of("a", "public.orders", &[(0, 1)]),
            write_of("a", "public.products", &[(0, 2)]),
        ])));
    }

    /// Record 11 of `a/0` was refused: it and `a/0`'s later records leave every write of topic
    /// `a` (both its tables), `a/1` and topic `b` (whose partition 0 has the same number) keep
    /// all theirs, `a/0`'s advance ends on the refused record so a restart meets it again, and
    /// the counts follow.
    #[test]
    fn leave_out_drops_the_record_and_its_partitions_later_records_only() {
        let mut batch = Batch {
            id: 7,
            offsets: vec![
                advance("a", 0, 13),
                advance("a", 1, 22),
                advance("b", 0, 12),
            ],
            writes: vec![
                write_of(
                    "a",
                    "public.a",
                    &[(0, 10), (1, 20), (0, 11), (0, 12), (1, 21)],
                ),
                write_of("b", "public.b", &[(0, 10), (0, 11)]),
                write_of("a", "public.a_copy", &[(0, 12), (1, 21)]),
            ],
            dead_letters: vec![
                letter("a", 0, 9),
                letter("a", 0, 11),
                letter("a", 1, 12),
                letter("b", 0, 11),
            ],
            records: 13,
            opened_at: Instant::now(),
        };
        let refused = Refused {
            tp: TopicPartition::new("a", 0),
            offset: 11,
            reason: "violates check constraint".into(),
        };
        leave_out(&mut batch, &refused);

        assert_eq!(kept(&batch.writes[0]), [(0, 10), (1, 20), (1, 21)]);
        assert_eq!(batch.writes[0].rows(), 3);
        assert_eq!(batch.writes[0].left_out, Some((0, 11)));
        assert_eq!(kept(&batch.writes[1]), [(0, 10), (0, 11)], "another topic");
        assert_eq!(batch.writes[1].left_out, None);
        assert_eq!(kept(&batch.writes[2]), [(1, 21)]);
        // Three of topic a's rows were left out: they are not committed records either.
        assert_eq!(batch.records, 10);

        assert_eq!(
            batch.offsets,
            [
                advance("a", 0, 11),
                advance("a", 1, 22),
                advance("b", 0, 12)
            ],
            "only the refused partition's advance moves, to the refused record"
        );
        let letters: Vec<(&str, i32, i64)> = batch
            .dead_letters
            .iter()
            .map(|d| (&*d.topic, d.record.partition, d.record.offset))
            .collect();
        assert_eq!(letters, [("a", 0, 9), ("a", 1, 12), ("b", 0, 11)]);
    }

    /// The rows left out are left out of what COPY sends, not only of the counts.
    #[test]
    fn a_left_out_write_sends_only_the_rows_it_keeps() {
        let mut batch = Batch {
            id: 1,
            offsets: vec![advance("a", 0, 3)],
            writes: vec![write_of("a", "public.a", &[(0, 0), (0, 1), (0, 2)])],
            dead_letters: Vec::new(),
            records: 3,
            opened_at: Instant::now(),
        };
        let whole = batch.writes[0].copies[0].data.subset(0, 3);
        leave_out(
            &mut batch,
            &Refused {
                tp: TopicPartition::new(Arc::<str>::from("a"), 0),
                offset: 1,
                reason: "refused".into(),
            },
        );
        let write = &batch.writes[0];
        let copy = &write.copies[0];
        let sent = copy
            .data
            .subset_where(0, 3, |i| copy.keeps(i, write.left_out));
        assert_eq!(sent, copy.data.subset(0, 1));
        assert!(sent.len() < whole.len());
        assert_eq!((batch.records, batch.offsets[0].next), (1, 1));
    }
}
