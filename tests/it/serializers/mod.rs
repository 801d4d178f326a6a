//! The registry formats as confluent-kafka's own serializers write them (issue 25): records
//! holding every type each serializer can write, produced by the real AvroSerializer,
//! ProtobufSerializer and JSONSerializer (which register their schemas themselves), through the
//! sink into a table made by hand per README's type table and into one `auto_create` makes;
//! every column compared with PostgreSQL's own reading of the produced value. And `check` on
//! such topics.

mod avro;
mod check_units;
mod json_schema;
mod protobuf;

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::TestTopic;
use crate::helpers::registry::registry_url;
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::wait_drained;

/// One column of a fixture table.
pub struct Col {
    pub name: &'static str,
    /// Its type as README's table gives it (what `auto_create` must make too), with
    /// `NOT NULL` where the field cannot be absent.
    pub sql: &'static str,
    /// How PostgreSQL reads the produced value (`$1`, text) into the column's type; `None`
    /// is `$1::<sql type>`.
    pub read: Option<&'static str>,
}

impl Col {
    pub const fn new(name: &'static str, sql: &'static str) -> Self {
        Self {
            name,
            sql,
            read: None,
        }
    }

    pub const fn read(name: &'static str, sql: &'static str, read: &'static str) -> Self {
        Self {
            name,
            sql,
            read: Some(read),
        }
    }

    fn base_type(&self) -> &'static str {
        self.sql.trim_end_matches(" NOT NULL").trim()
    }
}

/// A `text[]`/`int8[]`/... read from the JSON array the producer wrote.
pub const fn array_read(name: &'static str, sql: &'static str) -> Col {
    Col::read(
        name,
        sql,
        "ARRAY(SELECT jsonb_array_elements_text($1::jsonb))",
    )
}

/// `CREATE TABLE` of the fixture's columns, `id` the primary key.
pub fn create_table(table: &str, cols: &[Col]) -> String {
    let body = cols
        .iter()
        .map(|c| {
            if c.name == "id" {
                format!("{} {} PRIMARY KEY", c.name, c.base_type())
            } else {
                format!("{} {}", c.name, c.sql)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("CREATE TABLE {table} ({body})")
}

/// Each produced row (one text per column, `None` for absent) as PostgreSQL prints the value
/// read into the column's type, in UTC: what the table must hold.
pub async fn expected_rows(
    db: &TestDb,
    cols: &[Col],
    produced: &[Vec<Option<String>>],
) -> Vec<Vec<Option<String>>> {
    let mut conn = db.pool.acquire().await.expect("a connection");
    conn.execute("SET TIME ZONE 'UTC'").await.expect("UTC");
    let mut rows = Vec::new();
    for row in produced {
        assert_eq!(row.len(), cols.len(), "one value per column");
        let mut out = Vec::new();
        for (col, value) in cols.iter().zip(row) {
            let Some(value) = value else {
                out.push(None);
                continue;
            };
            let read = col
                .read
                .map(|r| format!("({r})::{}", col.base_type()))
                .unwrap_or_else(|| format!("$1::{}", col.base_type()));
            let text: Option<String> = sqlx::query_scalar(&format!("SELECT ({read})::text"))
                .bind(value)
                .fetch_one(&mut *conn)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL reads {value:?} as {}: {e}", col.sql));
            out.push(text);
        }
        rows.push(out);
    }
    rows
}

/// Each column's type (`format_type`) and whether it is NOT NULL, in column order.
pub async fn catalog(db: &TestDb, table: &str) -> Vec<(String, String, bool)> {
    sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .expect("read the catalog")
}

/// A sink config for a registry topic, without metadata columns.
pub fn registry_config(db: &TestDb, topic: &TestTopic, table: &str, settings: &str) -> SinkConfig {
    let mut config = SinkConfig::new(&db.url, &topic.name, table);
    config.topic_settings = settings.into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    config
}

/// Runs a sink on `config` until its group has consumed the whole topic, then stops it,
/// which must succeed.
pub async fn drain(db: &TestDb, config: &SinkConfig, topic: &TestTopic) {
    let mut sink = Sink::start(config, &config.table);
    wait_drained(db, &config.group, topic, Duration::from_secs(120)).await;
    assert!(
        sink.stop().success(),
        "the sink on {} stopped cleanly",
        config.table
    );
}

/// What a fixture produces: 12 records from `every` (value and the row each must become),
/// keyed by their number, a database holding the hand-made table `hand` of `cols`, and a topic.
pub struct Fixture {
    pub db: TestDb,
    pub topic: TestTopic,
    /// `{"key", "value"}` per record, as `confluent::produce` takes them.
    pub records: Vec<Value>,
    /// Per record, the text of each column's value.
    pub produced: Vec<Vec<Option<String>>>,
}

impl Fixture {
    pub async fn new(cols: &[Col], every: fn(i64) -> (Value, Vec<Option<String>>)) -> Self {
        let db = TestDb::migrated().await;
        db.pool
            .execute(create_table("hand", cols).as_str())
            .await
            .unwrap();
        let topic = TestTopic::create(1).await;
        let (records, produced) = (0..12)
            .map(|i| {
                let (value, row) = every(i);
                (json!({"key": i.to_string(), "value": value}), row)
            })
            .unzip();
        Self {
            db,
            topic,
            records,
            produced,
        }
    }
}

/// The fixture's two sinks for `format`: one into the hand-made table `hand`, one into `auto`,
/// which `auto_create` makes; `check` must pass on the first.
pub async fn fixture_sinks(
    db: &TestDb,
    topic: &TestTopic,
    format: &str,
) -> (SinkConfig, SinkConfig) {
    let settings = format!("format = \"{format}\"");
    let hand = registry_config(db, topic, "hand", &settings);
    let auto = registry_config(
        db,
        topic,
        "auto",
        &format!("{settings}\nauto_create = true"),
    );
    let check = ConfigFile::new(&hand.toml());
    let out = run_cli(&["check", "--config", check.arg()]).await;
    assert!(
        out.status.success() && !out.stdout.contains("PROBLEMS"),
        "check on the serializer's topic: {}\n{}",
        out.stdout,
        out.stderr
    );
    (hand, auto)
}

/// Drains both fixture sinks; then every column of both tables equals what was `produced`,
/// and no record became a dead letter.
pub async fn assert_fixture_lands(
    db: &TestDb,
    topic: &TestTopic,
    cols: &[Col],
    (hand, auto): (SinkConfig, SinkConfig),
    produced: &[Vec<Option<String>>],
) {
    tokio::join!(drain(db, &hand, topic), drain(db, &auto, topic));
    let expected = expected_rows(db, cols, produced).await;
    assert_both_tables(db, cols, "hand", "auto", &expected).await;
    assert!(
        db.dead_letters_of(&topic.name).await.is_empty(),
        "no dead letters"
    );
}

/// The fixture's rows in both tables, `hand` (made from README's type table) and `auto` (made
/// by `auto_create`), each equal to `expected`; the auto table's columns of README's types.
pub async fn assert_both_tables(
    db: &TestDb,
    cols: &[Col],
    hand: &str,
    auto: &str,
    expected: &[Vec<Option<String>>],
) {
    let names: Vec<&str> = cols.iter().map(|c| c.name).collect();
    for table in [hand, auto] {
        let rows = db.rows_as_text(table, &names).await;
        assert_eq!(rows.len(), expected.len(), "{table}: one row per record");
        for (i, (row, want)) in rows.iter().zip(expected).enumerate() {
            for ((name, got), want) in names.iter().zip(row).zip(want) {
                assert_eq!(got, want, "{table}, record {i}, column {name}");
            }
        }
    }
    let made = catalog(db, auto).await;
    let declared = catalog(db, hand).await;
    assert_eq!(
        made.iter().map(|(n, t, _)| (n, t)).collect::<Vec<_>>(),
        declared.iter().map(|(n, t, _)| (n, t)).collect::<Vec<_>>(),
        "auto_create made README's column types"
    );
    for ((name, _, not_null), col) in made.iter().zip(cols) {
        if name != "id" {
            assert_eq!(
                *not_null,
                col.sql.ends_with("NOT NULL"),
                "auto_create's NOT NULL on {name}"
            );
        }
    }
}
