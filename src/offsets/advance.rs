//! The writer's side of the fence: the compare-and-set that opens every batch transaction, and
//! telling a fenced batch from a stale one when it matched too few partitions.

use sqlx::PgConnection;

use super::sql::{ADVANCE_SQL, EPOCH_MOVED_SQL};
use super::{OffsetAdvance, Refusal};

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
