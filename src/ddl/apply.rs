//! The writer's side: a batch's DDL runs first in its transaction, each statement only while
//! the catalog says it is still needed, so the rows, the offsets and the schema change commit
//! or roll back together.

use sqlx::PgConnection;

use super::plan::{Guard, Step};

/// Runs the steps still needed; returns how many ran.
pub(crate) async fn apply(conn: &mut PgConnection, steps: &[Step]) -> Result<usize, sqlx::Error> {
    let mut ran = 0;
    for step in steps {
        let needed: bool = match &step.guard {
            Guard::TableMissing { qualified } => {
                sqlx::query_scalar("SELECT to_regclass($1) IS NULL")
                    .bind(qualified)
                    .fetch_one(&mut *conn)
                    .await?
            }
            Guard::ColumnMissing { qualified, column } => {
                sqlx::query_scalar(
                    "SELECT NOT EXISTS (SELECT 1 FROM pg_attribute
                      WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)",
                )
                .bind(qualified)
                .bind(column)
                .fetch_one(&mut *conn)
                .await?
            }
        };
        if needed {
            sqlx::query(&step.statement)
                .persistent(false)
                .execute(&mut *conn)
                .await?;
            tracing::info!(statement = %step.statement, "schema change in this batch's transaction");
            ran += 1;
        }
    }
    Ok(ran)
}

/// Errors a concurrent writer's identical change causes (a duplicate table or type, a
/// duplicate column, a deadlock between two `ALTER`s): retried like any transient failure, and
/// the table is described again before the records are read again.
pub(crate) fn is_concurrent_change(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| matches!(&*c, "42P07" | "23505" | "42701" | "40P01" | "42710")),
        _ => false,
    }
}
