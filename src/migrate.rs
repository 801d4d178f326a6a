//! Schema migrations for the sink's own tables, embedded in the binary.
//!
//! refinery drives them through a small driver over a sqlx connection, so migrations use the
//! same URL, TLS settings and error messages as everything else. refinery takes no lock of
//! its own: a session advisory lock makes concurrent `migrate` runs (several sinks starting
//! at once) apply each migration exactly once.

use anyhow::Context;
use async_trait::async_trait;
use refinery_core::traits::r#async::{AsyncQuery, AsyncTransaction};
use refinery_core::{AsyncMigrate, Migration};
use secrecy::{ExposeSecret, SecretString};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool, Row};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

refinery::embed_migrations!("migrations");

/// Arbitrary but fixed key of the advisory lock that serialises migrations.
const MIGRATION_LOCK_KEY: i64 = 0x6b70_735f_6d69_6772; // "kps_migr"

/// refinery's async driver interface over a sqlx connection.
struct SqlxDriver(PgConnection);

#[async_trait]
impl AsyncTransaction for SqlxDriver {
    type Error = sqlx::Error;

    /// Runs the statements (a migration may hold several) in one transaction.
    async fn execute<'a, T: Iterator<Item = &'a str> + Send>(
        &mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        let mut tx = self.0.begin().await?;
        let mut count = 0;
        for query in queries {
            // No arguments: the simple protocol, which runs several statements.
            (&mut *tx).execute(query).await?;
            count += 1;
        }
        tx.commit().await?;
        Ok(count)
    }
}

#[async_trait]
impl AsyncQuery<Vec<Migration>> for SqlxDriver {
    /// refinery keeps `applied_on` and `checksum` as text in its history table; parsed back here.
    async fn query(&mut self, query: &str) -> Result<Vec<Migration>, Self::Error> {
        let rows = (&mut self.0).fetch_all(query).await?;
        rows.iter()
            .map(|row| {
                let version: i32 = row.try_get(0)?;
                let applied_on: String = row.try_get(2)?;
                let applied_on =
                    OffsetDateTime::parse(&applied_on, &Rfc3339).map_err(|e| decode_error(2, e))?;
                let checksum: u64 = row
                    .try_get::<String, _>(3)?
                    .parse()
                    .map_err(|e| decode_error(3, e))?;
                Ok(Migration::applied(
                    version,
                    row.try_get(1)?,
                    applied_on,
                    checksum,
                ))
            })
            .collect()
    }
}

impl AsyncMigrate for SqlxDriver {}

/// A history row refinery cannot read fails like any sqlx decode error, naming the column.
fn decode_error(index: usize, e: impl std::error::Error + Send + Sync + 'static) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: index.to_string(),
        source: Box::new(e),
    }
}

/// Applies every pending migration; returns the names of those applied by this call.
pub async fn apply(url: &SecretString) -> anyhow::Result<Vec<String>> {
    let options = crate::config::PostgresSettings::with_url(url.clone())
        .connect_options(crate::config::SessionRole::Migrate)
        .context("postgres.url")?;
    let conn = options.connect().await.map_err(|e| {
        anyhow::anyhow!(
            "connecting to PostgreSQL to migrate ({}): {e}",
            crate::config::redact_url(url.expose_secret())
        )
    })?;
    let mut driver = SqlxDriver(conn);
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut driver.0)
        .await
        .context("taking the migration lock")?;
    let report = migrations::runner()
        .set_grouped(true)
        .run_async(&mut driver)
        .await
        .context("applying migrations");
    // Unlocking is implicit when the session ends; being explicit is cheap.
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut driver.0)
        .await;
    let _ = driver.0.close().await;
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
        Some(v) => anyhow::bail!("the database is at migration {v} but this binary needs {latest}: run `kafka-pg-sink migrate`"),
        None => anyhow::bail!("the sink's tables are missing in this database: run `kafka-pg-sink migrate` first"),
    }
}
