//! The writer's side of stale records (`crate::stale`): after a versioned write, the ordinals
//! its merge left out are read from the session's tally, logged by record and counted.

use sqlx::PgConnection;

use crate::batch::TableWrite;

/// Empties the tally and returns how many of `write`'s records were stale, logging each at
/// debug by its position. Read inside the batch's transaction: parts of the write a savepoint
/// took back took their tally rows with them, so only what commits is counted.
pub(super) async fn take(conn: &mut PgConnection, write: &TableWrite) -> Result<u64, sqlx::Error> {
    let ordinals: Vec<i64> = sqlx::query_scalar(&crate::stale::take_tally())
        .fetch_all(&mut *conn)
        .await?;
    for &ordinal in &ordinals {
        if let Some((partition, offset)) = write.position_of(ordinal) {
            tracing::debug!(topic = %write.topic, partition, offset, table = %write.table,
                "stale record not applied: older than its key's stored row (version_from)");
        }
    }
    Ok(ordinals.len() as u64)
}
