//! One COPY stream of a table write's staged rows: which rows it carries, and sending it.

use sqlx::PgConnection;

use crate::batch::{StagedCopy, TableWrite};

/// One COPY stream, ended cleanly on the server if sending fails.
pub(super) async fn send_copy(
    conn: &mut PgConnection,
    statement: &str,
    data: bytes::Bytes,
) -> Result<(), sqlx::Error> {
    let mut copy = conn.copy_in_raw(statement).await?;
    if let Err(e) = copy.send(data).await {
        let _ = copy.abort("send failed").await;
        return Err(e);
    }
    copy.finish().await.map(|_| ())
}

/// The staged rows in `lo..hi` that the write keeps (and `take` takes, when given), as one
/// COPY stream; `None` when there are none.
pub(super) fn range_data(
    write: &TableWrite,
    staged: &StagedCopy,
    lo: i64,
    hi: i64,
    take: Option<&dyn Fn(usize) -> bool>,
) -> Option<bytes::Bytes> {
    let from = staged.ordinals.partition_point(|&o| o < lo);
    let to = staged.ordinals.partition_point(|&o| o < hi);
    if from == to {
        return None;
    }
    if let (None, None) = (take, write.left_out) {
        return Some(staged.data.subset(from, to));
    }
    let keeps = |i: usize| take.is_none_or(|take| take(i)) && staged.keeps(i, write.left_out);
    (from..to)
        .any(keeps)
        .then(|| staged.data.subset_where(from, to, keeps))
}
