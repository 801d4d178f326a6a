//! Schema migrations for the sink's own tables, embedded in the binary.
//!
//! refinery has no sqlx driver, so migrations run on a short-lived tokio-postgres connection.
//! refinery takes no lock of its own: a session advisory lock makes concurrent `migrate` runs
//! (several sinks starting at once) apply each migration exactly once.

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;

refinery::embed_migrations!("migrations");

/// Arbitrary but fixed key of the advisory lock that serialises migrations.
const MIGRATION_LOCK_KEY: i64 = 0x6b70_735f_6d69_6772; // "kps_migr"

/// Applies every pending migration; returns the names of those applied by this call.
pub async fn apply(url: &SecretString) -> anyhow::Result<Vec<String>> {
    let (mut client, connection) =
        tokio_postgres::connect(url.expose_secret(), tokio_postgres::NoTls)
            .await
            .context("connecting to PostgreSQL to migrate")?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "migration connection ended with an error");
        }
    });
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .context("taking the migration lock")?;
    let report = migrations::runner()
        .set_grouped(true)
        .run_async(&mut client)
        .await
        .context("applying migrations");
    // Unlocking is implicit when the session ends; being explicit keeps pooled setups safe.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    drop(client);
    let _ = driver.await;
    Ok(report?
        .applied_migrations()
        .iter()
        .map(|m| m.to_string())
        .collect())
}

/// The newest migration version this binary knows.
pub fn latest_version() -> i32 {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| m.version())
        .max()
        .unwrap_or(0)
}

/// Fails with instructions when the database lacks this binary's migrations.
pub async fn ensure_applied(pool: &PgPool) -> anyhow::Result<()> {
    let applied: Option<i32> =
        match sqlx::query_scalar("SELECT max(version) FROM refinery_schema_history")
            .fetch_one(pool)
            .await
        {
            Ok(version) => version,
            // 42P01, undefined table: never migrated. Anything else is reported as it is.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
            Err(e) => anyhow::bail!("cannot read the sink's migration history: {e}"),
        };
    let latest = latest_version();
    match applied {
        Some(v) if v >= latest => Ok(()),
        Some(v) => anyhow::bail!(
            "the database is at migration {v} but this binary needs {latest}: run `kafka-pg-sink migrate`"
        ),
        None => anyhow::bail!(
            "the sink's tables are missing in this database: run `kafka-pg-sink migrate` first"
        ),
    }
}
