//! `auto_create` and `auto_evolve = "add_columns"` against the real services: tables created
//! from Connect JSON and Avro schemas, a column added mid-stream, a field that cannot widen, a
//! format without a schema, and a kill between a schema change and its rows.

use std::time::Duration;

use kafka_pg_sink::registry::SchemaKind;
use serde_json::{json, Value};

use crate::helpers::confluent::{produce_evolving, Serde};
use crate::helpers::connect_json::{
    debezium_envelope, debezium_event, optional, serialize, struct_of, Described,
};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::{register, registry_url};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Connect schema v1 of the products, as the JsonConverter helper reads it
/// (`helpers::connect_json`); v2 adds an optional `email`.
fn connect_schema(v2: bool) -> Value {
    let mut fields = vec![
        ("id", json!("int64")),
        ("name", optional(json!("string"))),
        (
            "price",
            optional(json!({"logical": "Decimal", "scale": 2, "precision": 10})),
        ),
        ("day", optional(json!({"logical": "Date"}))),
        ("at", optional(json!({"logical": "Timestamp"}))),
        (
            "tags",
            optional(json!({"type": "array", "items": "string"})),
        ),
        ("flag", json!("boolean")),
    ];
    if v2 {
        fields.push(("email", optional(json!("string"))));
    }
    struct_of("product", &fields)
}

/// Product `id`'s values, with an `email` from v2 on.
fn connect_product(id: i64, v2: bool) -> Value {
    let cents = id * 100 + 7;
    let day = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
        + chrono::Days::new((19675 + id) as u64);
    let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123 + id * 1000).unwrap();
    let mut value = json!({
        "id": id,
        "name": (id % 10 != 0).then(|| format!("p{id}")),
        "price": format!("{}.{:02}", cents / 100, cents % 100),
        "day": day.format("%Y-%m-%d").to_string(),
        "at": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "tags": [format!("t{id}"), "x"],
        "flag": id % 3 == 0,
    });
    if v2 {
        value["email"] = json!(format!("e{id}@x"));
    }
    value
}

/// Products as Kafka's JsonConverter writes them (one JVM for the lot), each `(id, v2)` on
/// partition `id % 2`.
fn connect_records(products: impl Iterator<Item = (i64, bool)>) -> Vec<RawRecord> {
    let (ids, described): (Vec<i64>, Vec<Described>) = products
        .map(|(id, v2)| {
            (
                id,
                Described::new(connect_schema(v2), connect_product(id, v2)),
            )
        })
        .unzip();
    ids.into_iter()
        .zip(serialize(true, &described))
        .map(|(id, value)| RawRecord {
            partition: (id % 2) as i32,
            value,
            ..Default::default()
        })
        .collect()
}

/// The row product `id` must be, every column as PostgreSQL prints it (in UTC), with its
/// partition and offset on a topic of two partitions (`id % 2`, in id order).
fn expected_product(id: i64, v2: bool, offset: i64) -> Vec<Option<String>> {
    let cents = id * 100 + 7;
    let day = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
        + chrono::Days::new((19675 + id) as u64);
    let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123 + id * 1000).unwrap();
    vec![
        Some(id.to_string()),
        (id % 10 != 0).then(|| format!("p{id}")),
        Some(format!("{}.{:02}", cents / 100, cents % 100)),
        Some(day.format("%Y-%m-%d").to_string()),
        Some(at.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string()),
        Some(format!("{{t{id},x}}")),
        Some((id % 3 == 0).to_string()),
        v2.then(|| format!("e{id}@x")),
        Some((id % 2).to_string()),
        Some(offset.to_string()),
    ]
}

const PRODUCT_COLUMNS: &[&str] = &[
    "id",
    "name",
    "price",
    "day",
    "at",
    "tags",
    "flag",
    "email",
    "kafka_partition",
    "kafka_offset",
];

/// Each column's name, type and NOT NULL as the catalog has them, in table order.
async fn columns_of(db: &TestDb, table: &str) -> Vec<(String, String, bool)> {
    sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
          WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Whether the transaction that created the table (`column` None) or added `column` also wrote
/// rows, and for a column rows that carry it: DDL and its batch are one transaction.
async fn ddl_committed_with_rows(db: &TestDb, table: &str, column: Option<&str>) -> bool {
    let xmin: String = match column {
        None => sqlx::query_scalar("SELECT xmin::text FROM pg_class WHERE oid = to_regclass($1)")
            .bind(table)
            .fetch_one(&db.pool)
            .await
            .unwrap(),
        Some(c) => sqlx::query_scalar(
            "SELECT xmin::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2",
        )
        .bind(table)
        .bind(c)
        .fetch_one(&db.pool)
        .await
        .unwrap(),
    };
    let carried = match column {
        None => "true".to_string(),
        Some(c) => format!("\"{c}\" IS NOT NULL"),
    };
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{table}\" WHERE xmin::text = $1 AND {carried}"
    ))
    .bind(&xmin)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    n > 0
}

/// The products as Connect JSON: ids below `v2_from` in schema v1, the rest in v2.
fn connect_products(n: i64, v2_from: i64) -> Vec<RawRecord> {
    connect_records((0..n).map(|id| (id, id >= v2_from)))
}

/// A missing table is created from the first Connect record's schema, in that record's
/// batch; schema v2's new field adds a nullable column in the batch that first carries it.
#[tokio::test(flavor = "multi_thread")]
async fn connect_json_creates_the_table_and_adds_a_column_mid_stream() {
    let db = TestDb::migrated().await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_raw(&producer(), &topic.name, &connect_products(400, 200)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 50;
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());

    let s = |v: &str| v.to_string();
    assert_eq!(
        columns_of(&db, "products").await,
        vec![
            (s("id"), s("bigint"), true),
            (s("name"), s("text"), false),
            (s("price"), s("numeric(10,2)"), false),
            (s("day"), s("date"), false),
            (s("at"), s("timestamp with time zone"), false),
            (s("tags"), s("text[]"), false),
            (s("flag"), s("boolean"), true),
            (s("kafka_partition"), s("integer"), false),
            (s("kafka_offset"), s("bigint"), false),
            (s("email"), s("text"), false),
        ]
    );
    let expected: Vec<_> = (0..400)
        .map(|id| expected_product(id, id >= 200, id / 2))
        .collect();
    assert_eq!(db.rows_as_text("products", PRODUCT_COLUMNS).await, expected);
    assert!(ddl_committed_with_rows(&db, "products", None).await);
    assert!(ddl_committed_with_rows(&db, "products", Some("email")).await);
    assert_delivered_exactly_once(&db, "products", &config.group, &topic.name, 400).await;
}

const AVRO_KEY: &str = r#"{"type":"record","name":"Key","namespace":"kps.ddl","fields":[{"name":"id","type":"long"}]}"#;

/// Avro value schema v1 of the accounts; v2 adds an optional `email` (null by default).
fn avro_value_schema(v2: bool) -> String {
    format!(
        r#"{{"type":"record","name":"Account","namespace":"kps.ddl","fields":[
        {{"name":"id","type":"long"}},
        {{"name":"name","type":"string"}},
        {{"name":"amount","type":{{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}}}},
        {{"name":"at","type":{{"type":"long","logicalType":"timestamp-millis"}}}},
        {{"name":"status","type":{{"type":"enum","name":"Status","symbols":["NEW","PAID"]}}}}{}]}}"#,
        if v2 {
            r#",{"name":"email","type":["null","string"],"default":null}"#
        } else {
            ""
        }
    )
}

/// Account `id` in v1 or v2 (named `name` as given), as the serializer is given it.
fn avro_account(id: i64, name: &str, v2: bool) -> serde_json::Value {
    let cents = id * 100 + 5;
    let status = ["NEW", "PAID"][(id % 2) as usize];
    let mut value = serde_json::json!({
        "id": id, "name": name,
        "amount": {"$decimal": format!("{}.{:02}", cents / 100, cents % 100)},
        "at": 1_700_000_000_456 + id * 1000, "status": status,
    });
    if v2 {
        value["email"] = serde_json::json!(format!("e{id}"));
    }
    value
}

/// A missing table is created from the Avro value schema with the key schema's field as its
/// primary key; upserts by that key work, and v2's new field becomes a column while upserting.
#[tokio::test(flavor = "multi_thread")]
async fn avro_creates_the_table_with_the_key_as_primary_key_and_upserts() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    let record = |id: i64, value: serde_json::Value, schema: usize| {
        serde_json::json!({"key": {"id": id}, "value": value, "partition": id % 2,
                           "schema": schema})
    };
    // 100 accounts in v1, then the first 50 again, renamed, in v2, which the producer's
    // serializer registers as it first writes it.
    let mut records: Vec<serde_json::Value> = (0..100)
        .map(|id| record(id, avro_account(id, &format!("n{id}"), false), 0))
        .collect();
    records.extend((0..50).map(|id| record(id, avro_account(id, &format!("u{id}"), true), 1)));
    let (v1, v2) = (avro_value_schema(false), avro_value_schema(true));
    produce_evolving(
        &topic.name,
        &[Serde::Avro(&v1), Serde::Avro(&v2)],
        Some(&Serde::Avro(AVRO_KEY)),
        &records,
    )
    .await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "accounts");
    config.max_records = 20;
    config.topic_settings = "format = \"avro\"\nkey_format = \"avro\"\nmode = \"upsert\"\nkey_from = \"key\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());

    let pk: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
          WHERE i.indrelid = 'accounts'::regclass AND i.indisprimary",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(pk, ["id"]);
    let types: Vec<String> = columns_of(&db, "accounts")
        .await
        .into_iter()
        .map(|(n, t, nn)| format!("{n} {t}{}", if nn { " NOT NULL" } else { "" }))
        .collect();
    assert_eq!(
        types,
        [
            "id bigint NOT NULL",
            "name text NOT NULL",
            "amount numeric(12,2) NOT NULL",
            "at timestamp with time zone NOT NULL",
            "status text NOT NULL",
            "kafka_partition integer",
            "kafka_offset bigint",
            "email text",
        ]
    );
    let expected: Vec<Vec<Option<String>>> = (0..100i64)
        .map(|id| {
            let updated = id < 50;
            let cents = id * 100 + 5;
            let at =
                chrono::DateTime::from_timestamp_millis(1_700_000_000_456 + id * 1000).unwrap();
            vec![
                Some(id.to_string()),
                Some(if updated {
                    format!("u{id}")
                } else {
                    format!("n{id}")
                }),
                Some(format!("{}.{:02}", cents / 100, cents % 100)),
                Some(at.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string()),
                Some(["NEW", "PAID"][(id % 2) as usize].to_string()),
                Some((id % 2).to_string()),
                // Each partition: its 50 v1 records, then its 25 updates.
                Some(if updated { 50 + id / 2 } else { id / 2 }.to_string()),
                updated.then(|| format!("e{id}")),
            ]
        })
        .collect();
    assert_eq!(
        db.rows_as_text(
            "accounts",
            &[
                "id",
                "name",
                "amount",
                "at",
                "status",
                "kafka_partition",
                "kafka_offset",
                "email"
            ]
        )
        .await,
        expected
    );
}

/// A field whose type the existing column cannot hold stops the sink, naming the statement a
/// person would run; nothing is written and the column is left as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_field_the_column_cannot_hold_stops_the_sink_with_the_ddl() {
    let db = TestDb::migrated().await;
    sqlx::query("CREATE TABLE products (id int4 NOT NULL, name text, kafka_partition int, kafka_offset bigint)")
        .execute(&db.pool)
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let value = serialize(
        true,
        &[Described::new(
            struct_of(
                "products",
                &[("id", json!("int64")), ("name", optional(json!("string")))],
            ),
            json!({"id": 1, "name": "a"}),
        )],
    );
    let record = RawRecord {
        value: value[0].clone(),
        ..Default::default()
    };
    produce_raw(&producer(), &topic.name, &[record]).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.topic_settings = "format = \"connect-json\"\nauto_evolve = \"add_columns\"".into();
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the sink stops");
    assert!(!status.success());
    let logs = sink.logs();
    assert!(
        logs.contains(r#"ALTER TABLE \"public\".\"products\" ALTER COLUMN \"id\" TYPE int8 USING \"id\"::int8"#)
            || logs.contains(r#"ALTER TABLE "public"."products" ALTER COLUMN "id" TYPE int8 USING "id"::int8"#),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(db.count("products").await, 0);
    assert_eq!(columns_of(&db, "products").await[0].1, "integer");
}

/// Plain JSON has no schema to create a table from: the sink refuses at startup and says to
/// create the table.
#[tokio::test(flavor = "multi_thread")]
async fn plain_json_with_auto_create_is_refused_with_the_way_out() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "nowhere");
    config.topic_settings = "auto_create = true".into();
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(30))
        .expect("the sink stops at startup");
    assert!(!status.success());
    assert!(
        sink.logs().contains("create the table yourself"),
        "{}",
        sink.logs_tail(10)
    );
}

/// Whether a session of the test's database is inside a transaction whose last statement
/// starts with `prefix` (the writer paused between a schema change and its rows).
async fn paused_after(db: &TestDb, prefix: &str) -> bool {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
            AND state = 'idle in transaction' AND query LIKE $1 || '%'",
    )
    .bind(prefix)
    .fetch_one(&db.pool)
    .await
    .unwrap()
        > 0
}

/// `kill -9` between a schema change and its rows, for a created table and for an added
/// column: after each kill neither the table (the column) nor any row of its batch is there;
/// after a restart the rows land exactly once, every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_the_schema_change_and_its_rows_leaves_neither() {
    let db = TestDb::migrated().await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_raw(&producer(), &topic.name, &connect_products(200, 1000)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 50;
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    let paused = {
        let mut c = config.clone();
        c.env
            .push(("KPS_FAULT_PAUSE_AFTER_DDL_MS".into(), "5000".into()));
        c
    };

    // 1. Killed inside the transaction that creates the table.
    let mut sink = Sink::start(&paused, "create");
    wait_until(
        "the CREATE TABLE to wait for its rows",
        Duration::from_secs(60),
        || paused_after(&db, "CREATE TABLE"),
    )
    .await;
    sink.kill9();
    wait_until(
        "the killed session to end",
        Duration::from_secs(30),
        || async { !paused_after(&db, "CREATE TABLE").await },
    )
    .await;
    assert!(
        !db.table_exists("products").await,
        "the table outlived its batch"
    );
    assert!(
        db.stored_offsets(&config.group, &topic.name)
            .await
            .iter()
            .all(|(_, o)| o.is_none()),
        "a position moved without its rows"
    );

    // 2. A restart creates it with its rows.
    let mut sink = Sink::start(&config, "created");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());
    assert!(ddl_committed_with_rows(&db, "products", None).await);

    // 3. Schema v2 arrives; killed inside the transaction that adds its column.
    let v2 = connect_records((200..300).map(|id| (id, true)));
    produce_raw(&producer(), &topic.name, &v2).await;
    let mut sink = Sink::start(&paused, "alter");
    wait_until(
        "the ALTER TABLE to wait for its rows",
        Duration::from_secs(60),
        || paused_after(&db, "ALTER TABLE"),
    )
    .await;
    sink.kill9();
    wait_until(
        "the killed session to end",
        Duration::from_secs(30),
        || async { !paused_after(&db, "ALTER TABLE").await },
    )
    .await;
    assert!(
        !columns_of(&db, "products")
            .await
            .iter()
            .any(|c| c.0 == "email"),
        "the column outlived its batch"
    );
    assert_eq!(
        db.count("products").await,
        200,
        "v2 rows landed without their column"
    );

    // 4. A restart adds it with its rows; everything exactly once, every column as produced.
    let mut sink = Sink::start(&config, "altered");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());
    assert!(ddl_committed_with_rows(&db, "products", Some("email")).await);
    let expected: Vec<_> = (0..300)
        .map(|id| expected_product(id, id >= 200, id / 2))
        .collect();
    assert_eq!(db.rows_as_text("products", PRODUCT_COLUMNS).await, expected);
    assert_delivered_exactly_once(&db, "products", &config.group, &topic.name, 300).await;
}

/// `check --plan` prints the DDL the registry's latest schema would cause now, and changes
/// nothing: the CREATE for a missing table, then (table made by hand, schema v2 registered) the
/// ADD COLUMN; for Connect JSON it says a record decides.
#[tokio::test(flavor = "multi_thread")]
async fn check_plan_prints_the_ddl_and_changes_nothing() {
    use crate::helpers::sink::{run_cli, ConfigFile};
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    let subject = format!("{}-value", topic.name);
    register(&subject, SchemaKind::Avro, &avro_value_schema(false)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "planned");
    config.topic_settings =
        "format = \"avro\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(r#"    CREATE TABLE IF NOT EXISTS "public"."planned" ("id" int8 NOT NULL, "name" text NOT NULL, "amount" numeric(12,2) NOT NULL, "at" timestamptz NOT NULL, "status" text NOT NULL, "kafka_partition" int4, "kafka_offset" int8);"#),
        "{}",
        out.stdout
    );
    assert!(
        !db.table_exists("planned").await,
        "check --plan created the table"
    );

    sqlx::query("CREATE TABLE planned (id bigint, name text, amount numeric(12,2), at timestamptz, status text, kafka_partition int, kafka_offset bigint)")
        .execute(&db.pool)
        .await
        .unwrap();
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(out.stdout.contains("no DDL"), "{}", out.stdout);
    register(&subject, SchemaKind::Avro, &avro_value_schema(true)).await;
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(
            r#"    ALTER TABLE "public"."planned" ADD COLUMN IF NOT EXISTS "email" text;"#
        ),
        "{}",
        out.stdout
    );
    assert!(!columns_of(&db, "planned")
        .await
        .iter()
        .any(|c| c.0 == "email"));

    config.topic_settings = "format = \"connect-json\"\nauto_create = true".into();
    config.extra = String::new();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(
        out.stdout.contains("the DDL is decided by a record"),
        "{}",
        out.stdout
    );
}

/// Two replicas in one group start together on a missing table: each may create it and add
/// the column in its own transactions; the loser of a race retries, and every record lands
/// exactly once with every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_creating_and_evolving_one_table_lose_nothing() {
    let db = TestDb::migrated().await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_raw(&producer(), &topic.name, &connect_products(400, 200)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 20;
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    let mut a = Sink::start(&config, "a");
    let mut b = Sink::start(&config, "b");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(a.stop().success(), "{}", a.logs_tail(20));
    assert!(b.stop().success(), "{}", b.logs_tail(20));
    let expected: Vec<_> = (0..400)
        .map(|id| expected_product(id, id >= 200, id / 2))
        .collect();
    assert_eq!(db.rows_as_text("products", PRODUCT_COLUMNS).await, expected);
    assert_delivered_exactly_once(&db, "products", &config.group, &topic.name, 400).await;
}

/// A change: (op, before, after), rows as `(id, name)`.
type Change<'a> = (&'a str, Option<(i32, &'a str)>, Option<(i32, &'a str)>);

/// Debezium change events for `customers` as the connector writes them with JsonConverter
/// (`schemas.enable=true`): `(op, before, after)` rows of `(id, name)`, keyed by id.
fn debezium_events(events: &[Change]) -> Vec<RawRecord> {
    let schema = debezium_envelope(
        "dbserver1.inventory.customers",
        struct_of(
            "dbserver1.inventory.customers.Value",
            &[
                ("id", json!("int32")),
                ("name", json!("string")),
                ("since", optional(json!({"debezium": "Date"}))),
            ],
        ),
    );
    let key_schema = struct_of(
        "dbserver1.inventory.customers.Key",
        &[("id", json!("int32"))],
    );
    let row = |r: Option<(i32, &str)>| match r {
        Some((id, name)) => json!({"id": id, "name": name, "since": "2023-11-14"}),
        None => Value::Null,
    };
    // Values and keys in one JVM: each event's value, then its key.
    let described: Vec<Described> = events
        .iter()
        .flat_map(|&(op, before, after)| {
            let id = after.or(before).map(|(id, _)| id).unwrap();
            [
                Described::new(schema.clone(), debezium_event(op, row(before), row(after))),
                Described::new(key_schema.clone(), json!({ "id": id })),
            ]
        })
        .collect();
    let bytes = serialize(true, &described);
    events
        .iter()
        .zip(bytes.chunks(2))
        .map(|(&(_, before, after), pair)| RawRecord {
            partition: after.or(before).map(|(id, _)| id).unwrap() % 2,
            value: pair[0].clone(),
            key: pair[1].clone(),
            ..Default::default()
        })
        .collect()
}

/// Debezium's `after` schema creates the table, with `key` as its primary key; the changes
/// (snapshot, create, update, delete) then leave the source's state.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_after_schema_creates_the_table_and_changes_apply() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    let records = debezium_events(&[
        ("r", None, Some((4, "snap"))),
        ("c", None, Some((1, "ann"))),
        ("c", None, Some((2, "bob"))),
        ("u", Some((2, "bob")), Some((2, "bobby"))),
        ("d", Some((1, "ann")), None),
        ("c", None, Some((3, "cy"))),
    ]);
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.topic_settings = "format = \"debezium\"\nkey = [\"id\"]\nauto_create = true".into();
    config.metadata = String::new();
    config.max_records = 2;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let s = |v: &str| v.to_string();
    assert_eq!(
        columns_of(&db, "customers").await,
        vec![
            (s("id"), s("integer"), true),
            (s("name"), s("text"), true),
            (s("since"), s("date"), false),
        ]
    );
    assert_eq!(
        db.rows_as_text("customers", &["id", "name", "since"]).await,
        vec![
            vec![Some(s("2")), Some(s("bobby")), Some(s("2023-11-14"))],
            vec![Some(s("3")), Some(s("cy")), Some(s("2023-11-14"))],
            vec![Some(s("4")), Some(s("snap")), Some(s("2023-11-14"))],
        ]
    );
}

/// Without `key`, Debezium's key schema (the source table's primary key, which JsonConverter
/// writes with every key) makes the created table's primary key, under `key_from = "value"`
/// (the default) and `key_from = "key"` alike; `check` says so before any record, and refuses
/// a plain JSON upsert topic that no record could give a key.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_key_schema_makes_the_primary_key_without_key() {
    use crate::helpers::sink::{run_cli, ConfigFile};
    let db = TestDb::migrated().await;
    let changes: &[Change] = &[
        ("r", None, Some((4, "snap"))),
        ("c", None, Some((1, "ann"))),
        ("c", None, Some((2, "bob"))),
        ("u", Some((2, "bob")), Some((2, "bobby"))),
        ("d", Some((1, "ann")), None),
        ("c", None, Some((3, "cy"))),
    ];
    for (table, key_from) in [("by_value", ""), ("by_key", "key_from = \"key\"\n")] {
        let topic = TestTopic::create(2).await;
        produce_raw(&producer(), &topic.name, &debezium_events(changes)).await;
        let mut config = SinkConfig::new(&db.url, &topic.name, table);
        config.topic_settings = format!("format = \"debezium\"\n{key_from}auto_create = true");
        config.metadata = String::new();
        config.max_records = 2;
        let file = ConfigFile::new(&config.toml());
        let out = run_cli(&["check", "--config", file.arg()]).await;
        assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
        assert!(
            out.stdout.contains("its primary key: the fields of the"),
            "{}",
            out.stdout
        );
        let mut sink = Sink::start(&config, "sink");
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        assert!(sink.stop().success(), "{}", sink.logs_tail(20));
        let pk: Vec<String> = sqlx::query_scalar(
            "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a
                ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
              WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
        )
        .bind(table)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(pk, vec!["id".to_string()], "{table}");
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            db.rows_as_text(table, &["id", "name", "since"]).await,
            vec![
                vec![s("2"), s("bobby"), s("2023-11-14")],
                vec![s("3"), s("cy"), s("2023-11-14")],
                vec![s("4"), s("snap"), s("2023-11-14")],
            ],
            "{table}"
        );
    }
    // Connect JSON in upsert mode under `key_from = "value"` has no key to take: check
    // refuses it, naming the fix, where `run` would stop at the first record.
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "no_key");
    config.topic_settings =
        "format = \"connect-json\"\nmode = \"upsert\"\nauto_create = true".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(
        format!("{}{}", out.stdout, out.stderr)
            .contains("needs the primary key: name its columns with key = [...]"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// A row PostgreSQL refuses in the batch that creates the table: the batch commits without it
/// (the table with the rows before it) and the sink stops at that record, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_row_in_the_creating_batch_stops_at_that_record() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    // numeric(10,2) holds at most 99,999,999.99: 10^12 cents is refused by PostgreSQL.
    // The converter writes what the schema's precision does not allow: it checks no precision.
    let mut huge = connect_product(1, false);
    huge["price"] = json!("10000000000.00");
    let records: Vec<RawRecord> = serialize(
        true,
        &[
            Described::new(connect_schema(false), connect_product(0, false)),
            Described::new(connect_schema(false), huge),
            Described::new(connect_schema(false), connect_product(2, false)),
        ],
    )
    .into_iter()
    .map(|value| RawRecord {
        value,
        ..Default::default()
    })
    .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.topic_settings = "format = \"connect-json\"\nauto_create = true".into();
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the sink stops at the refused record");
    assert!(!status.success());
    assert!(
        sink.logs().contains("numeric field overflow"),
        "{}",
        sink.logs_tail(20)
    );
    let mut expected = expected_product(0, false, 0);
    expected.remove(7); // no email column: schema v1 only
    let columns: Vec<&str> = PRODUCT_COLUMNS
        .iter()
        .copied()
        .filter(|c| *c != "email")
        .collect();
    assert_eq!(db.rows_as_text("products", &columns).await, vec![expected]);
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(1))],
        "the position rests on the refused record"
    );
}

/// After any kill: a table exists only with rows, the column only with a row that carries it,
/// rows and positions in step, no duplicate.
async fn assert_consistent_after_kill(db: &TestDb, group: &str, topic: &str, round: usize) {
    if !db.table_exists("products").await {
        assert!(
            db.stored_offsets(group, topic)
                .await
                .iter()
                .all(|(_, o)| o.is_none()),
            "round {round}: positions moved without the table"
        );
        return;
    }
    assert!(
        db.count("products").await > 0,
        "round {round}: a table without rows"
    );
    if columns_of(db, "products")
        .await
        .iter()
        .any(|c| c.0 == "email")
    {
        let carried: i64 =
            sqlx::query_scalar("SELECT count(*) FROM products WHERE email IS NOT NULL")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(
            carried > 0,
            "round {round}: the column without a row that carries it"
        );
    }
    assert_rows_match_offsets(db, "products", group, topic).await;
    let (dups, _) = db.duplicates_and_distinct("products").await;
    assert!(dups.is_empty(), "round {round}: duplicates {dups:?}");
}

/// `kill -9` at random moments while a table is created and then gains a column: whatever the
/// moment, nothing of a schema change outlives its batch, and in the end every record is
/// there exactly once with every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_around_schema_changes_loses_nothing() {
    use rand::Rng as _;
    const N: i64 = 40_000;
    let db = TestDb::migrated().await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_raw(&producer(), &topic.name, &connect_products(N, N / 2)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 200;
    config.max_wait_ms = 50;
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    let mut rng = rand::rng();
    // Where the kills after the first land, in rising order: two before the column is added,
    // three around it, two after. Each is at least a little past where the round begins and
    // short of the end, so that every sink is killed while it writes: targets drawn at random
    // let a round begin past its target and kill a sink before it was even assigned (in CI, a
    // first round that ran far left too few kills mid-drain).
    let mut planned: Vec<i64> = Vec::new();
    for (range, kills) in [
        (500..N / 2 - 2000, 2),
        (N / 2 - 2000..N / 2 + 2000, 3),
        (N / 2 + 2000..N - 4000, 2),
    ] {
        planned.extend((0..kills).map(|_| rng.random_range(range.clone())));
    }
    planned.sort_unstable();
    let mut mid_drain = 0;
    // Rows so far; none while the table is still missing.
    let rows = || async {
        if db.table_exists("products").await {
            db.count("products").await
        } else {
            0
        }
    };
    for round in 0..8 {
        let before = rows().await;
        let mut sink = Sink::start(&config, &format!("round-{round}"));
        if round == 0 {
            // Around the first batch, which creates the table: it follows the assignment.
            wait_assigned(&sink).await;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
        } else {
            let target = planned[round - 1]
                .max(before + rng.random_range(200..1500))
                .min(N - 3000);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while rows().await < target && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
        }
        sink.kill9();
        assert_consistent_after_kill(&db, &config.group, &topic.name, round).await;
        // Mid-drain: this round's sink was writing (it committed, or it was the first, which
        // may die before its first commit) and records were left.
        let after = rows().await;
        if after < N && (round == 0 || after > before) {
            mid_drain += 1;
        }
    }
    assert!(
        mid_drain >= 6,
        "only {mid_drain} of 8 kills landed while the sink was writing: the test proved little"
    );
    let mut last = Sink::start(&config, "final");
    // The last kill may have come after the drain: the SIGTERM must not beat its handler.
    wait_assigned(&last).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert!(last.stop().success());
    let expected: Vec<_> = (0..N)
        .map(|id| expected_product(id, id >= N / 2, id / 2))
        .collect();
    assert_eq!(db.rows_as_text("products", PRODUCT_COLUMNS).await, expected);
    assert_delivered_exactly_once(&db, "products", &config.group, &topic.name, N).await;
}

/// `auto_create` without `auto_evolve`: the table is made from the first schema, and a later
/// schema's new field is ignored as a record's unknown field always was.
#[tokio::test(flavor = "multi_thread")]
async fn without_auto_evolve_a_new_field_is_ignored() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    produce_raw(&producer(), &topic.name, &connect_products(100, 50)).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.topic_settings = "format = \"connect-json\"\nauto_create = true".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert!(!columns_of(&db, "products")
        .await
        .iter()
        .any(|c| c.0 == "email"));
    let columns: Vec<&str> = PRODUCT_COLUMNS
        .iter()
        .copied()
        .filter(|c| *c != "email")
        .collect();
    let expected: Vec<_> = (0..100)
        .map(|id| {
            let mut row = expected_product(id, false, id / 2);
            row.remove(7);
            row
        })
        .collect();
    assert_eq!(db.rows_as_text("products", &columns).await, expected);
}

/// Connect times of day and durations create `time` and `interval` columns (schema v2's
/// `NanoTime` adds one mid-stream), and every value lands as PostgreSQL reads it.
#[tokio::test(flavor = "multi_thread")]
async fn times_and_durations_create_time_and_interval_columns() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    // As Kafka's JsonConverter writes them, with Debezium's own schema builders.
    let schema = |v2: bool| {
        let mut fields = vec![
            ("id", json!("int32")),
            ("d", optional(json!({"debezium": "MicroDuration"}))),
            ("s", optional(json!({"debezium": "Interval"}))),
            ("t", optional(json!({"debezium": "MicroTime"}))),
            ("tm", optional(json!({"logical": "Time"}))),
        ];
        if v2 {
            fields.push(("tn", optional(json!({"debezium": "NanoTime"}))));
        }
        struct_of("span", &fields)
    };
    let records: Vec<RawRecord> = serialize(
        true,
        &[
            Described::new(
                schema(false),
                json!({"id": 1, "d": 93_784_500_000i64, "s": "P1Y2M3DT4H5M6.78S",
                    "t": 45_296_789_012i64, "tm": "12:34:56.789"}),
            ),
            Described::new(
                schema(true),
                json!({"id": 2, "d": -1_500_000, "s": "P0Y0M-1DT0H0M0S",
                    "t": 86_400_000_000i64, "tm": "00:00", "tn": 86_399_999_999_000i64}),
            ),
        ],
    )
    .into_iter()
    .map(|value| RawRecord {
        value,
        ..Default::default()
    })
    .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "spans");
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    let s = |v: &str| v.to_string();
    assert_eq!(
        columns_of(&db, "spans").await,
        vec![
            (s("id"), s("integer"), true),
            (s("d"), s("interval"), false),
            (s("s"), s("interval"), false),
            (s("t"), s("time without time zone"), false),
            (s("tm"), s("time without time zone"), false),
            (s("tn"), s("time without time zone"), false),
        ]
    );
    let text = |v: &str| Some(v.to_string());
    assert_eq!(
        db.rows_as_text("spans", &["id", "d", "s", "t", "tm", "tn"])
            .await,
        vec![
            vec![
                text("1"),
                text("26:03:04.5"),
                text("1 year 2 mons 3 days 04:05:06.78"),
                text("12:34:56.789012"),
                text("12:34:56.789"),
                None,
            ],
            vec![
                text("2"),
                text("-00:00:01.5"),
                text("-1 days"),
                text("24:00:00"),
                text("00:00:00"),
                text("23:59:59.999999"),
            ],
        ]
    );
    assert!(ddl_committed_with_rows(&db, "spans", Some("tn")).await);
}

/// `auto_create` on a topic routed by record is refused at startup, saying why: a name a record
/// gives never makes the sink create a table.
#[tokio::test(flavor = "multi_thread")]
async fn table_from_with_auto_create_is_refused_at_startup() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    produce_raw(
        &producer(),
        &topic.name,
        &[RawRecord {
            headers: vec![(b"table".to_vec(), Some(b"routed_a".to_vec()))],
            value: serialize(
                true,
                &[Described::new(
                    struct_of("routed", &[("id", json!("int32"))]),
                    json!({"id": 1}),
                )],
            )[0]
            .clone(),
            ..Default::default()
        }],
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "{}");
    config.topic_settings = "format = \"connect-json\"\ntable_from = { header = \"table\" }\ntables = [\"routed_a\"]\nauto_create = true".into();
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(30))
        .expect("the sink stops at startup");
    assert!(!status.success());
    let logs = sink.logs();
    assert!(
        logs.contains("table_from") && logs.contains("create them yourself"),
        "{}",
        sink.logs_tail(10)
    );
    assert!(
        !db.table_exists("routed_a").await,
        "no table is created for a routed name"
    );
}
