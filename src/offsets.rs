//! The offset store: where each partition resumes, and who may advance it.
//!
//! Every row of `kafka_offsets` carries an owner epoch. Claiming a partition bumps it; a batch
//! commit advances the offset only if the epoch and the expected offset still match (a
//! compare-and-set), so a consumer that lost a partition can never move it again.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgConnection, PgPool, Row};

/// A topic and partition; the topic is shared so that cloning is cheap on the hot path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    /// Takes a `&str` from librdkafka or an `Arc` already shared, so callers on the hot path can
    /// avoid a copy.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// `topic/partition`, the form logs and error messages use.
impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// The same form, for `%tp` in tracing fields.
impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A stored position as read (or claimed) from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOffset {
    pub tp: TopicPartition,
    /// `None` until the first commit: the reset policy decides where reading starts.
    pub next_offset: Option<i64>,
    pub epoch: i64,
    /// Who claimed it last (`reset:…` after `kafka-pg-sink offsets reset`).
    pub owner_id: Option<String>,
    /// Set by an operator's reset to the epoch it replaced; cleared by the next claim. Only the
    /// owner under that epoch may claim the partition back.
    pub reset_from_epoch: Option<i64>,
}

/// The `owner_id` prefix of a position set by an operator, so a reader of `kafka_offsets` sees
/// who moved it.
pub const RESET_OWNER_PREFIX: &str = "reset:";

/// The application name of `offsets reset` sessions: not `APPLICATION_NAME`, so a sink's
/// fence (which ends sink sessions holding claimed rows) never ends a reset.
pub const RESET_APPLICATION_NAME: &str = "kafka-pg-sink offsets reset";

/// One partition's advance inside a batch transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAdvance {
    pub tp: TopicPartition,
    /// The epoch this consumer claimed the partition with.
    pub epoch: i64,
    /// What the row must hold now for the commit to be ours to make.
    pub expected: Option<i64>,
    /// Last offset in the batch + 1.
    pub next: i64,
}

/// Reads and claims positions on a shared pool (not the writers' connections).
pub struct OffsetStore {
    pool: PgPool,
    group: String,
    owner_id: String,
    lock_timeout: Duration,
}

/// Splits partitions into the parallel arrays that `UNNEST` takes, sorted so that concurrent
/// claimers lock rows in the same order and cannot deadlock.
fn unnest_args(tps: &[TopicPartition]) -> (Vec<String>, Vec<i32>) {
    let mut sorted: Vec<&TopicPartition> = tps.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .map(|tp| (tp.topic.to_string(), tp.partition))
        .unzip()
}

/// Insert-or-bump in one statement: a partition seen for the first time gets epoch 1, any other
/// a new epoch that fences whoever held it.
const CLAIM_SQL: &str = "
INSERT INTO kafka_offsets AS o (consumer_group, topic, partition, owner_epoch, owner_id, claimed_at)
SELECT $1, v.topic, v.partition, 1, $4, now()
  FROM UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
ON CONFLICT (consumer_group, topic, partition) DO UPDATE
   SET owner_epoch = o.owner_epoch + 1, owner_id = EXCLUDED.owner_id, claimed_at = now(),
       reset_from_epoch = NULL
RETURNING topic, partition, next_offset, owner_epoch, owner_id, reset_from_epoch";

/// Claims back partitions an operator reset, but only those whose reset replaced the epoch
/// this consumer holds: an older owner waking after the reset matches nothing. Rows are
/// locked in the claims' order.
const RECLAIM_SQL: &str = "
UPDATE kafka_offsets AS o
   SET owner_epoch = o.owner_epoch + 1, owner_id = $5, claimed_at = now(),
       reset_from_epoch = NULL
  FROM (SELECT k.topic, k.partition
          FROM kafka_offsets k
          JOIN UNNEST($2::text[], $3::int4[], $4::int8[]) AS v(topic, partition, epoch)
            ON k.topic = v.topic AND k.partition = v.partition AND k.reset_from_epoch = v.epoch
         WHERE k.consumer_group = $1
         ORDER BY k.topic, k.partition
           FOR UPDATE OF k) AS l
 WHERE o.consumer_group = $1 AND o.topic = l.topic AND o.partition = l.partition
RETURNING o.topic, o.partition, o.next_offset, o.owner_epoch, o.owner_id, o.reset_from_epoch";

/// Rows for partitions never claimed, so that the reset's single UPDATE takes every row.
/// Inside the reset's transaction: nobody sees them before they hold the reset position.
const RESET_ROWS_SQL: &str = "
INSERT INTO kafka_offsets (consumer_group, topic, partition)
SELECT $1, $2, p FROM UNNEST($3::int4[]) AS v(p)
ON CONFLICT (consumer_group, topic, partition) DO NOTHING";

/// An operator's reset in one statement: locks the rows in the claims' order, moves each
/// position and bumps its epoch (fencing the owner's next commit), notes the epoch it replaced
/// (a second reset keeps the first one's, see `reset_from_epoch`), records the move in
/// `kafka_offset_events`, and returns what was replaced, as read under the lock.
const RESET_SQL: &str = "
WITH moved AS (
    UPDATE kafka_offsets AS o
       SET next_offset = l.next, owner_epoch = o.owner_epoch + 1, owner_id = $5,
           claimed_at = now(), reset_from_epoch = coalesce(l.reset_from_epoch, l.owner_epoch)
      FROM (SELECT k.partition, k.next_offset, k.owner_epoch, k.owner_id, k.reset_from_epoch,
                   v.next
              FROM kafka_offsets k
              JOIN UNNEST($3::int4[], $4::int8[]) AS v(partition, next)
                ON k.partition = v.partition
             WHERE k.consumer_group = $1 AND k.topic = $2
             ORDER BY k.partition
               FOR UPDATE OF k) AS l
     WHERE o.consumer_group = $1 AND o.topic = $2 AND o.partition = l.partition
 RETURNING o.partition, l.next_offset AS from_offset, l.next AS to_offset,
           l.owner_epoch AS from_epoch, l.owner_id AS from_owner
), events AS (
    INSERT INTO kafka_offset_events
           (consumer_group, topic, partition, kind, from_offset, to_offset, detail)
    SELECT $1, $2, partition, 'manual_reset', from_offset, to_offset,
           $6 || ', replacing epoch ' || from_epoch || ' of ' || coalesce(from_owner, 'no owner')
      FROM moved
)
SELECT partition, from_offset, to_offset, from_epoch, from_owner FROM moved ORDER BY partition";

/// Reads without claiming: the epoch is left as it is, so a rewind keeps ownership.
const READ_SQL: &str = "
SELECT o.topic, o.partition, o.next_offset, o.owner_epoch, o.owner_id, o.reset_from_epoch
  FROM kafka_offsets o
  JOIN UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
    ON o.topic = v.topic AND o.partition = v.partition
 WHERE o.consumer_group = $1";

/// Ends the sessions of other sink processes that hold a row lock on partitions being claimed.
/// Such a holder lost the partitions (it was paused past its session timeout, or its network
/// broke) but its transaction is still open; waiting for the server's idle timeout would stall
/// the new owner, and a session stopped in the middle of COPY is not idle at all.
const FENCE_HOLDERS_SQL: &str = "
SELECT a.pid, pg_terminate_backend(a.pid)
  FROM kafka_offsets o
  JOIN UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
    ON o.topic = v.topic AND o.partition = v.partition
  JOIN pg_locks l
    ON l.locktype = 'transactionid' AND l.transactionid = o.xmax AND l.granted
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE o.consumer_group = $1
   AND a.application_name = $4
   AND a.pid <> pg_backend_pid()";

/// The fenced compare-and-set that opens every batch transaction.
const ADVANCE_SQL: &str = "
UPDATE kafka_offsets AS o
   SET next_offset = v.next, committed_at = now()
  FROM UNNEST($2::text[], $3::int4[], $4::int8[], $5::int8[], $6::int8[])
       AS v(topic, partition, epoch, expected, next)
 WHERE o.consumer_group = $1
   AND o.topic = v.topic AND o.partition = v.partition
   AND o.owner_epoch = v.epoch
   AND o.next_offset IS NOT DISTINCT FROM v.expected";

/// How many of a batch's partitions another claim (or an operator's reset) has taken: their
/// epoch is no longer the batch's. Run after a compare-and-set matched too few rows, to tell a
/// batch fenced by another owner from one queued behind a batch that failed.
const EPOCH_MOVED_SQL: &str = "
SELECT count(*)
  FROM kafka_offsets AS o
  JOIN UNNEST($2::text[], $3::int4[], $4::int8[]) AS v(topic, partition, epoch)
    ON o.topic = v.topic AND o.partition = v.partition
 WHERE o.consumer_group = $1 AND o.owner_epoch <> v.epoch";

/// SQLSTATE of `lock_timeout` expiring.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The application name every sink session uses; fencing only ever ends sessions with it.
pub const APPLICATION_NAME: &str = "kafka-pg-sink";

/// Sessions holding a lock on any of the partitions' rows, whatever their application: named
/// when a reset gives up waiting for them.
const HOLDERS_SQL: &str = "
SELECT DISTINCT a.pid, a.application_name
  FROM kafka_offsets o
  JOIN UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
    ON o.topic = v.topic AND o.partition = v.partition
  JOIN pg_locks l
    ON l.locktype = 'transactionid' AND l.transactionid = o.xmax AND l.granted
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE o.consumer_group = $1
   AND a.pid <> pg_backend_pid()";

/// How often a reset waits `lock_timeout` for its rows (ending stopped sinks' sessions in
/// between) before it gives up.
const RESET_ATTEMPTS: u32 = 3;

/// One partition's position as a reset found it under its lock, and where it put it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Replaced {
    pub partition: i32,
    /// `None` when the partition had no position yet.
    pub from_offset: Option<i64>,
    pub to_offset: i64,
    /// 0 for a partition nobody had claimed.
    pub from_epoch: i64,
    pub from_owner: Option<String>,
}

/// Why a reset was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("the partitions' rows in kafka_offsets stayed locked ({attempts} waits of lock_timeout, sinks' sessions holding them ended in between); still held by sessions {holders:?} (pid, application_name): end those, or try again")]
    Locked {
        attempts: u32,
        holders: Vec<(i32, String)>,
    },
    #[error("{0}")]
    Database(#[from] sqlx::Error),
}

/// Shared by `claim` and `read`, whose statements return the same columns.
fn rows_to_offsets(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<StoredOffset>, sqlx::Error> {
    rows.into_iter()
        .map(|row| {
            Ok(StoredOffset {
                tp: TopicPartition::new(row.try_get::<String, _>(0)?, row.try_get(1)?),
                next_offset: row.try_get(2)?,
                epoch: row.try_get(3)?,
                owner_id: row.try_get(4)?,
                reset_from_epoch: row.try_get(5)?,
            })
        })
        .collect()
}

impl OffsetStore {
    /// `owner_id` names this process in `kafka_offsets`, so an operator can see who holds what.
    pub fn new(pool: PgPool, group: String, owner_id: String, lock_timeout: Duration) -> Self {
        Self {
            pool,
            group,
            owner_id,
            lock_timeout,
        }
    }

    /// For messages that tell the operator which rows to fix (`consumer_group = …`).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// A transaction whose row locks wait at most `lock_timeout`, as every claim's must: a
    /// stopped previous owner holding the rows is then fenced instead of waited for.
    async fn begin_bounded(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "SET LOCAL lock_timeout = {}",
            self.lock_timeout.as_millis().max(1)
        ))
        .execute(&mut *tx)
        .await?;
        Ok(tx)
    }

    /// Takes ownership of partitions: bumps their epochs and returns where each resumes.
    /// A zombie holding a lock on one of the rows is fenced (its session ended) and the claim
    /// retried, so assignment never waits on a stopped process.
    pub async fn claim(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, sqlx::Error> {
        if tps.is_empty() {
            return Ok(Vec::new());
        }
        let (topics, partitions) = unnest_args(tps);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.begin_bounded().await?;
            let result = sqlx::query(CLAIM_SQL)
                .bind(&self.group)
                .bind(&topics)
                .bind(&partitions)
                .bind(&self.owner_id)
                .fetch_all(&mut *tx)
                .await;
            match result {
                Ok(rows) => {
                    tx.commit().await?;
                    return rows_to_offsets(rows);
                }
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) && attempt < 10 =>
                {
                    drop(tx);
                    let fenced: Vec<(i32, bool)> = sqlx::query_as(FENCE_HOLDERS_SQL)
                        .bind(&self.group)
                        .bind(&topics)
                        .bind(&partitions)
                        .bind(APPLICATION_NAME)
                        .fetch_all(&self.pool)
                        .await?;
                    tracing::warn!(
                        sessions = ?fenced.iter().map(|(pid, _)| pid).collect::<Vec<_>>(),
                        "a previous owner still holds locks on claimed partitions: ended its sessions"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Claims back partitions an operator reset from the epochs this consumer holds (each
    /// given with its epoch); returns those claimed. A partition missing from the answer
    /// was not ours when it was reset, or was claimed by another consumer since: fenced.
    pub async fn reclaim(
        &self,
        owned: &[(TopicPartition, i64)],
    ) -> Result<Vec<StoredOffset>, sqlx::Error> {
        let mut tx = self.begin_bounded().await?;
        let rows = sqlx::query(RECLAIM_SQL)
            .bind(&self.group)
            .bind(owned.iter().map(|(tp, _)| &*tp.topic).collect::<Vec<_>>())
            .bind(owned.iter().map(|(tp, _)| tp.partition).collect::<Vec<_>>())
            .bind(owned.iter().map(|(_, epoch)| *epoch).collect::<Vec<_>>())
            .bind(&self.owner_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows_to_offsets(rows)
    }

    /// Moves `(partition, to)` of `topic` as an operator's reset, owner `self.owner_id` and
    /// `detail` for `kafka_offset_events`; see `RESET_SQL`. The session names itself
    /// `RESET_APPLICATION_NAME` and waits at most `lock_timeout` for the rows: then it ends
    /// the sink sessions holding them, as a claim does (a sink stopped inside a transaction;
    /// the reset fences it anyway) and tries again, a few times, before giving up.
    pub async fn reset(
        &self,
        topic: &str,
        moves: &[(i32, i64)],
        detail: &str,
    ) -> Result<Vec<Replaced>, ResetError> {
        let mut sorted = moves.to_vec();
        sorted.sort();
        let (partitions, targets): (Vec<i32>, Vec<i64>) = sorted.into_iter().unzip();
        let topics = vec![topic.to_string(); partitions.len()];
        for attempt in 1..=RESET_ATTEMPTS {
            let mut tx = self.pool.begin().await?;
            sqlx::query(&format!(
                "SET LOCAL application_name = '{RESET_APPLICATION_NAME}'"
            ))
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!(
                "SET LOCAL lock_timeout = {}",
                self.lock_timeout.as_millis().max(1)
            ))
            .execute(&mut *tx)
            .await?;
            let result = async {
                sqlx::query(RESET_ROWS_SQL)
                    .bind(&self.group)
                    .bind(topic)
                    .bind(&partitions)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query_as::<_, Replaced>(RESET_SQL)
                    .bind(&self.group)
                    .bind(topic)
                    .bind(&partitions)
                    .bind(&targets)
                    .bind(&self.owner_id)
                    .bind(detail)
                    .fetch_all(&mut *tx)
                    .await
            }
            .await;
            match result {
                Ok(replaced) if replaced.len() == partitions.len() => {
                    tx.commit().await?;
                    return Ok(replaced);
                }
                Ok(replaced) => {
                    return Err(ResetError::Database(sqlx::Error::Protocol(format!(
                        "the reset found {} of {} partition rows",
                        replaced.len(),
                        partitions.len()
                    ))))
                }
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
                {
                    tx.rollback().await?;
                    if attempt == RESET_ATTEMPTS {
                        break;
                    }
                    let fenced: Vec<(i32, bool)> = sqlx::query_as(FENCE_HOLDERS_SQL)
                        .bind(&self.group)
                        .bind(&topics)
                        .bind(&partitions)
                        .bind(APPLICATION_NAME)
                        .fetch_all(&self.pool)
                        .await?;
                    if !fenced.is_empty() {
                        tracing::warn!(
                            sessions = ?fenced.iter().map(|(pid, _)| pid).collect::<Vec<_>>(),
                            "sink sessions held the partitions' rows inside a transaction: ended them"
                        );
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        let holders = sqlx::query_as(HOLDERS_SQL)
            .bind(&self.group)
            .bind(&topics)
            .bind(&partitions)
            .fetch_all(&self.pool)
            .await?;
        Err(ResetError::Locked {
            attempts: RESET_ATTEMPTS,
            holders,
        })
    }

    /// Reads the stored positions and epochs, e.g. to rewind after a failed transaction.
    pub async fn read(&self, tps: &[TopicPartition]) -> Result<Vec<StoredOffset>, sqlx::Error> {
        let (topics, partitions) = unnest_args(tps);
        let rows = sqlx::query(READ_SQL)
            .bind(&self.group)
            .bind(&topics)
            .bind(&partitions)
            .fetch_all(&self.pool)
            .await?;
        rows_to_offsets(rows)
    }
}

impl OffsetStore {
    /// Moves a partition this consumer owns (epoch) to `to` and records why, in one
    /// transaction. False if the epoch moved on (another owner) and nothing changed.
    pub async fn move_offset(
        &self,
        tp: &TopicPartition,
        epoch: i64,
        from: Option<i64>,
        to: i64,
        kind: &str,
        detail: &str,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query(
            "UPDATE kafka_offsets SET next_offset = $5, committed_at = now()
              WHERE consumer_group = $1 AND topic = $2 AND partition = $3 AND owner_epoch = $4",
        )
        .bind(&self.group)
        .bind(&*tp.topic)
        .bind(tp.partition)
        .bind(epoch)
        .bind(to)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !moved {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO kafka_offset_events (consumer_group, topic, partition, kind, from_offset, to_offset, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&self.group)
        .bind(&*tp.topic)
        .bind(tp.partition)
        .bind(kind)
        .bind(from)
        .bind(to)
        .bind(detail)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// Why a compare-and-set matched fewer partitions than its batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Another consumer (or an operator's reset) holds a newer epoch: the partition is lost.
    Fenced,
    /// The epochs are ours but a stored position is not what the batch expected: it was queued
    /// behind a batch that failed and never committed. A retry, not a fence.
    Stale,
}

/// Tells a fence from a stale expectation, in the writer's open transaction.
pub async fn refusal(
    conn: &mut PgConnection,
    group: &str,
    advances: &[OffsetAdvance],
) -> Result<Refusal, sqlx::Error> {
    let topics: Vec<&str> = advances.iter().map(|a| &*a.tp.topic).collect();
    let partitions: Vec<i32> = advances.iter().map(|a| a.tp.partition).collect();
    let epochs: Vec<i64> = advances.iter().map(|a| a.epoch).collect();
    let moved: i64 = sqlx::query_scalar(EPOCH_MOVED_SQL)
        .bind(group)
        .bind(&topics)
        .bind(&partitions)
        .bind(&epochs)
        .fetch_one(conn)
        .await?;
    Ok(if moved > 0 {
        Refusal::Fenced
    } else {
        Refusal::Stale
    })
}

/// Runs the fenced compare-and-set inside a writer's open transaction and returns how many
/// partitions it advanced; anything short of all of them means the batch is not ours to commit.
pub async fn advance(
    conn: &mut PgConnection,
    group: &str,
    advances: &[OffsetAdvance],
) -> Result<u64, sqlx::Error> {
    let mut sorted: Vec<&OffsetAdvance> = advances.iter().collect();
    sorted.sort_by(|a, b| a.tp.cmp(&b.tp));
    let topics: Vec<&str> = sorted.iter().map(|a| &*a.tp.topic).collect();
    let partitions: Vec<i32> = sorted.iter().map(|a| a.tp.partition).collect();
    let epochs: Vec<i64> = sorted.iter().map(|a| a.epoch).collect();
    let expected: Vec<Option<i64>> = sorted.iter().map(|a| a.expected).collect();
    let next: Vec<i64> = sorted.iter().map(|a| a.next).collect();
    let result = sqlx::query(ADVANCE_SQL)
        .bind(group)
        .bind(&topics)
        .bind(&partitions)
        .bind(&epochs)
        .bind(&expected)
        .bind(&next)
        .execute(conn)
        .await?;
    Ok(result.rows_affected())
}
