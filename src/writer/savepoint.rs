//! Savepoints a write takes back. `ROLLBACK TO` keeps the savepoint, and what runs after it
//! runs inside its subtransaction: a write that takes savepoints back again and again (a probe
//! per table, a plain COPY tried, a bisection) would nest each in the one before, and past 64
//! open subtransactions PostgreSQL's snapshots slow down for every session. So the savepoint
//! is released as soon as it has been rolled back to.

use sqlx::PgConnection;

/// Rolls back to savepoint `name` (one of the writer's constant names) and releases it.
pub(super) async fn take_back(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("ROLLBACK TO SAVEPOINT {name}"))
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("RELEASE SAVEPOINT {name}"))
        .execute(&mut *conn)
        .await
        .map(|_| ())
}
