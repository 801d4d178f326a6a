//! A fresh, uniquely named database per test, migrated with the real binary.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

use super::services::services;
use super::sink::run_cli;

/// One test's database; dropped at the end unless the test failed (kept for a post-mortem).
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    /// The server's administrative URL, to drop the database afterwards.
    admin_url: String,
}

impl TestDb {
    /// Creates an empty database (no migrations).
    pub async fn empty() -> Self {
        Self::empty_on(&services().admin_url).await
    }

    /// An empty database on another server (a test's private PostgreSQL).
    pub async fn empty_on(admin_url: &str) -> Self {
        let name = format!(
            "kps_test_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to DATABASE_URL: {e}"));
        admin
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .expect("create test database");
        admin.close().await;
        let mut url = url::Url::parse(admin_url).expect("DATABASE_URL is a URL");
        url.set_path(&name);
        let url = url.to_string();
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect to test database");
        Self {
            name,
            url,
            pool,
            admin_url: admin_url.to_string(),
        }
    }

    /// A database with the sink's migrations applied by `kafka-pg-sink migrate`.
    pub async fn migrated() -> Self {
        Self::migrated_on(&services().admin_url).await
    }

    /// The same database with a fresh pool (after its server restarted).
    pub async fn reconnect(mut db: TestDb) -> TestDb {
        db.pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&db.url)
            .await
            .expect("reconnect to test database");
        db
    }

    /// A migrated database on another server.
    pub async fn migrated_on(admin_url: &str) -> Self {
        let db = Self::empty_on(admin_url).await;
        let out = run_cli(&["migrate", "--database-url", &db.url]).await;
        assert!(out.status.success(), "migrate failed: {}", out.stderr);
        db
    }

    /// Creates the table the exactly-once tests write to. It has no unique key on purpose:
    /// a duplicated record shows up as a duplicated row instead of a constraint error.
    pub async fn create_orders_table(&self, name: &str) {
        self.pool
            .execute(
                format!(
                    "CREATE TABLE \"{name}\" (
                        id bigint NOT NULL,
                        customer text NOT NULL,
                        amount numeric(12,2) NOT NULL,
                        status text,
                        created_at timestamptz NOT NULL,
                        attrs jsonb,
                        kafka_partition int NOT NULL,
                        kafka_offset bigint NOT NULL,
                        inserted_at timestamptz NOT NULL DEFAULT now()
                    )"
                )
                .as_str(),
            )
            .await
            .expect("create orders table");
    }

    /// Makes every statement that writes `table` take at least `pause` longer, by a statement
    /// trigger: what `SessionEnder::arm` needs for transactions to stay open to be ended.
    pub async fn slow_writes_to(&self, table: &str, pause: Duration) {
        self.pool
            .execute(
                format!(
                    "CREATE FUNCTION slow_write() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
                     CREATE TRIGGER slow_write AFTER INSERT OR UPDATE ON \"{table}\"
                         FOR EACH STATEMENT EXECUTE FUNCTION slow_write();",
                    seconds = pause.as_secs_f64()
                )
                .as_str(),
            )
            .await
            .expect("slow writes");
    }

    /// Every column as PostgreSQL prints it (`column::text`), timestamps in UTC, rows in the
    /// order of the table's `id`: for comparing whole rows with what was produced.
    pub async fn rows_as_text(&self, table: &str, columns: &[&str]) -> Vec<Vec<Option<String>>> {
        rows_as_text(&self.pool, table, columns).await
    }

    /// Whether `table` exists (a kill may come before the batch that creates it commits; a
    /// command that must not create one may have).
    pub async fn table_exists(&self, table: &str) -> bool {
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(table)
            .fetch_one(&self.pool)
            .await
            .expect("look the table up")
    }

    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
            .fetch_one(&self.pool)
            .await
            .expect("count rows")
    }

    /// Stored next offsets for a group and topic, by partition.
    pub async fn stored_offsets(&self, group: &str, topic: &str) -> Vec<(i32, Option<i64>)> {
        sqlx::query_as(
            "SELECT partition, next_offset FROM kafka_offsets
              WHERE consumer_group = $1 AND topic = $2 ORDER BY partition",
        )
        .bind(group)
        .bind(topic)
        .fetch_all(&self.pool)
        .await
        .expect("read kafka_offsets")
    }

    /// Ids that appear more than once, and how many distinct ids there are.
    pub async fn duplicates_and_distinct(&self, table: &str) -> (Vec<(i64, i64)>, i64) {
        let dups: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "SELECT id, count(*) FROM \"{table}\" GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT 20"
        ))
        .fetch_all(&self.pool)
        .await
        .expect("duplicates");
        let distinct: i64 =
            sqlx::query_scalar(&format!("SELECT count(DISTINCT id) FROM \"{table}\""))
                .fetch_one(&self.pool)
                .await
                .expect("distinct");
        (dups, distinct)
    }

    /// Keeps JSON documents as produced, keyed by their `id`, in a `produced` table (`json`,
    /// not `jsonb`, so numbers and strings keep their text): the oracle that tests read back
    /// with PostgreSQL's own conversions.
    pub async fn keep_produced(&self, docs: &[serde_json::Value]) {
        self.pool
            .execute("CREATE TABLE produced (id bigint PRIMARY KEY, doc json NOT NULL)")
            .await
            .expect("create produced");
        for doc in docs {
            sqlx::query("INSERT INTO produced VALUES ($1, $2::json)")
                .bind(
                    doc["id"]
                        .as_i64()
                        .expect("a produced document has an integer id"),
                )
                .bind(doc.to_string())
                .execute(&self.pool)
                .await
                .expect("keep a produced document");
        }
    }

    /// Dead letters of `topic`: (offset, kind, message), in offset order.
    pub async fn dead_letters_of(&self, topic: &str) -> Vec<(i64, String, String)> {
        sqlx::query_as(
            "SELECT \"offset\", error_kind, error_message FROM kafka_dead_letters
              WHERE topic = $1 ORDER BY 1",
        )
        .bind(topic)
        .fetch_all(&self.pool)
        .await
        .expect("read kafka_dead_letters")
    }

    /// The first few ids in `0..n` that have no row.
    pub async fn missing_ids(&self, table: &str, n: i64) -> Vec<i64> {
        sqlx::query_scalar(&format!(
            "SELECT g FROM generate_series(0, $1 - 1) g
              WHERE NOT EXISTS (SELECT 1 FROM \"{table}\" o WHERE o.id = g) ORDER BY g LIMIT 20"
        ))
        .bind(n)
        .fetch_all(&self.pool)
        .await
        .expect("missing ids")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping database {} for inspection", self.name);
            return;
        }
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        super::run_detached(async move {
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .connect(&admin_url)
                .await
                .ok()?;
            admin
                .execute(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str())
                .await
                .ok()
        });
    }
}

/// `TestDb::rows_as_text` for any pool (a CDC source's too, so source and copy read alike).
pub async fn rows_as_text(
    pool: &sqlx::PgPool,
    table: &str,
    columns: &[&str],
) -> Vec<Vec<Option<String>>> {
    use sqlx::{Executor, Row};
    let list = columns
        .iter()
        .map(|c| format!("{c}::text"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut conn = pool.acquire().await.expect("a connection");
    conn.execute("SET TIME ZONE 'UTC'")
        .await
        .expect("set time zone");
    let rows = sqlx::query(&format!("SELECT {list} FROM {table} ORDER BY {table}.id"))
        .fetch_all(&mut *conn)
        .await
        .expect("read rows");
    rows.iter()
        .map(|r| {
            (0..columns.len())
                .map(|i| r.get::<Option<String>, _>(i))
                .collect()
        })
        .collect()
}
