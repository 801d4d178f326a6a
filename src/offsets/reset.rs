//! The operator's reset (`kafka-pg-sink offsets reset`): positions moved and epochs bumped in
//! one statement, so a running sink's next commit is fenced; what it replaced, and why it may
//! give up.

use super::sql::{FENCE_HOLDERS_SQL, HOLDERS_SQL, LOCK_NOT_AVAILABLE, RESET_ROWS_SQL, RESET_SQL};
use super::{OffsetStore, APPLICATION_NAME, RESET_APPLICATION_NAME};

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

impl OffsetStore {
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
}
