//! The offset store on the shared pool: claims (fencing a stopped owner's sessions), claims
//! back after an operator's reset, reads, and the consumer's own recorded moves.

use std::time::Duration;

use sqlx::{PgPool, Row};

use super::sql::{
    unnest_args, CLAIM_SQL, FENCE_HOLDERS_SQL, LOCK_NOT_AVAILABLE, READ_SQL, RECLAIM_SQL,
};
use super::{Owner, StoredOffset, TopicPartition, APPLICATION_NAME};

/// Reads and claims positions on a shared pool (not the writers' connections).
pub struct OffsetStore {
    pub(super) pool: PgPool,
    pub(super) group: String,
    pub(super) owner_id: String,
    pub(super) lock_timeout: Duration,
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
    /// `owner` is written to `owner_id` with every claim, so an operator can see who holds
    /// what; typed, so a sink and an operator's reset are spelled in one place.
    pub fn new(pool: PgPool, group: String, owner: &Owner, lock_timeout: Duration) -> Self {
        Self {
            pool,
            group,
            owner_id: owner.to_string(),
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
