//! `auto_create` and `auto_evolve = "add_columns"` for Protobuf and JSON Schema topics against
//! the real services: a table created from the registered schema with every type the README's
//! table lists (each column read back and compared with what was produced), the key schema's
//! fields as the primary key in upsert mode, schema v2's new field adding a nullable column
//! mid-stream, and `check --plan` printing the DDL without creating anything; and Debezium's
//! Avro logical types (named in `connect.name`) creating their Connect columns.

use std::time::Duration;

use base64::Engine as _;
use kafka_pg_sink::registry::SchemaKind;

use crate::helpers::confluent::{produce, produce_evolving, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::{framed, register, registry_url};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

mod edges;

/// Each column's name, type and NOT NULL as the catalog has them, in table order.
async fn column_types(db: &TestDb, table: &str) -> Vec<String> {
    let rows: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
          WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(n, t, nn)| format!("{n} {t}{}", if nn { " NOT NULL" } else { "" }))
        .collect()
}

/// The table's primary key columns.
async fn primary_key(db: &TestDb, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
          WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The key message first, so the values (the second message, index `[1]`) prove the record's
/// message is read, not the first one's.
fn account_proto(v2: bool) -> String {
    format!(
        r#"syntax = "proto3";
package kps.ddl;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";

message Key {{ int64 id = 1; }}

message Account {{
  int64 id = 1;
  int32 small = 2;
  sint32 s32 = 3;
  sfixed64 sf64 = 4;
  uint32 u32 = 5;
  uint64 u64 = 6;
  fixed64 f64 = 7;
  float ratio = 8;
  double score = 9;
  bool flag = 10;
  string name = 11;
  bytes blob = 12;
  enum Status {{ NEW = 0; PAID = 1; }}
  Status status = 13;
  google.protobuf.Timestamp at = 14;
  google.protobuf.Duration took = 15;
  google.protobuf.Int64Value maybe_n = 16;
  google.protobuf.StringValue note = 17;
  google.protobuf.Value extra = 18;
  message Line {{ string sku = 1; int32 qty = 2; }}
  Line line = 19;
  map<string, int64> attrs = 20;
  repeated int64 nums = 21;
  repeated string tags = 22;
  repeated Line lines = 23;
  optional string nick = 24;
  {}
}}
"#,
        if v2 {
            "optional string email = 25;"
        } else {
            ""
        }
    )
}

/// Account `i` (renamed in v2, with an email) in protobuf's JSON mapping, which the
/// serializer's message is built from, and its row as PostgreSQL prints it.
fn account(i: i64, v2: bool) -> (serde_json::Value, Vec<Option<String>>) {
    let name = if v2 { format!("u{i}") } else { format!("n{i}") };
    let blob = vec![i as u8, 0xff];
    let status = ["NEW", "PAID"][(i % 2) as usize];
    let at = chrono::DateTime::from_timestamp(1_700_000_000 + i, i as u32 * 1000).unwrap();
    let mut m = serde_json::json!({
        "id": i, "small": -i, "s32": i * 1000 - 7, "sf64": (-i * 1_000_000_007).to_string(),
        "u32": u32::MAX - i as u32, "u64": (u64::MAX - i as u64).to_string(),
        "f64": (i * 3).to_string(), "ratio": i as f64 / 4.0, "score": i as f64 / 8.0,
        "flag": i % 2 == 1, "name": name, "blob": base64::engine::general_purpose::STANDARD.encode(&blob),
        "status": status,
        "at": at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "took": format!("{i}.5s"), "extra": format!("v{i}"),
        "line": {"sku": format!("s{i}"), "qty": i}, "attrs": {"n": i},
        "nums": [i, -i], "tags": ["a", format!("t{i}")], "lines": [{"sku": "x", "qty": 1}],
    });
    if i % 3 != 0 {
        m["maybe_n"] = serde_json::json!((i * 10).to_string());
    }
    if i % 2 == 0 {
        m["note"] = serde_json::json!(format!("note {i}"));
    }
    if i % 4 == 1 {
        m["nick"] = serde_json::json!(format!("k{i}"));
    }
    if v2 {
        m["email"] = serde_json::json!(format!("e{i}@x"));
    }
    let at = chrono::DateTime::from_timestamp(1_700_000_000 + i, i as u32 * 1000).unwrap();
    // PostgreSQL prints the fraction without trailing zeros.
    let at = at.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    let at = format!("{}+00", at.trim_end_matches('0').trim_end_matches('.'));
    let row = vec![
        Some(i.to_string()),
        Some((-i).to_string()),
        Some((i * 1000 - 7).to_string()),
        Some((-i * 1_000_000_007).to_string()),
        Some((u32::MAX - i as u32).to_string()),
        Some((u64::MAX - i as u64).to_string()),
        Some((i * 3).to_string()),
        Some((i as f32 / 4.0).to_string()),
        Some((i as f64 / 8.0).to_string()),
        Some((i % 2 == 1).to_string()),
        Some(name),
        Some(format!("\\x{:02x}ff", i)),
        Some(["NEW", "PAID"][(i % 2) as usize].to_string()),
        Some(at),
        Some(format!("00:00:{i:02}.5")),
        (i % 3 != 0).then(|| (i * 10).to_string()),
        (i % 2 == 0).then(|| format!("note {i}")),
        Some(format!("\"v{i}\"")),
        Some(format!(r#"{{"qty": {i}, "sku": "s{i}"}}"#)),
        Some(format!(r#"{{"n": {i}}}"#)),
        Some(format!("{{{i},{}}}", -i)),
        Some(format!("{{a,t{i}}}")),
        Some(r#"[{"qty": 1, "sku": "x"}]"#.to_string()),
        (i % 4 == 1).then(|| format!("k{i}")),
        v2.then(|| format!("e{i}@x")),
    ];
    (m, row)
}

const ACCOUNT_COLUMNS: &[&str] = &[
    "id", "small", "s32", "sf64", "u32", "u64", "f64", "ratio", "score", "flag", "name", "blob",
    "status", "at", "took", "maybe_n", "note", "extra", "line", "attrs", "nums", "tags", "lines",
    "nick", "email",
];

/// A missing table is created from the Protobuf value schema (the record's own message, every
/// field kind), with the key message's field as primary key; upserts by it, and v2's new field
/// becomes a nullable column mid-stream: rows not updated since have NULL there.
#[tokio::test(flavor = "multi_thread")]
async fn protobuf_creates_every_column_type_with_the_key_as_primary_key_and_evolves() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    let mut expected: Vec<Vec<Option<String>>> = Vec::new();
    let mut records = Vec::new();
    for i in 0..30 {
        let (value, row) = account(i, false);
        records.push(serde_json::json!({"key": {"id": i}, "value": value, "partition": i % 2}));
        expected.push(row);
    }
    for i in 0..15 {
        let (value, row) = account(i, true);
        records.push(
            serde_json::json!({"key": {"id": i}, "value": value, "partition": i % 2,
                                        "schema": 1}),
        );
        expected[i as usize] = row;
    }
    // The values are the file's second message (index [1]), the keys its first ([0]); v2
    // is registered when the producer first writes it.
    let (v1, v2) = (account_proto(false), account_proto(true));
    let (v1_files, v2_files) = (
        [("account.proto", v1.as_str())],
        [("account.proto", v2.as_str())],
    );
    let account = |files, message| Serde::Protobuf {
        files,
        file: "account.proto",
        message,
    };
    produce_evolving(
        &topic.name,
        &[
            account(&v1_files, "kps.ddl.Account"),
            account(&v2_files, "kps.ddl.Account"),
        ],
        Some(&account(&v1_files, "kps.ddl.Key")),
        &records,
    )
    .await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "accounts");
    config.max_records = 10;
    config.metadata = String::new();
    config.topic_settings = "format = \"protobuf\"\nkey_format = \"protobuf\"\nmode = \"upsert\"\nkey_from = \"key\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs());

    assert_eq!(primary_key(&db, "accounts").await, ["id"]);
    assert_eq!(
        column_types(&db, "accounts").await,
        [
            "id bigint NOT NULL",
            "small integer NOT NULL",
            "s32 integer NOT NULL",
            "sf64 bigint NOT NULL",
            "u32 bigint NOT NULL",
            "u64 numeric(20,0) NOT NULL",
            "f64 numeric(20,0) NOT NULL",
            "ratio real NOT NULL",
            "score double precision NOT NULL",
            "flag boolean NOT NULL",
            "name text NOT NULL",
            "blob bytea NOT NULL",
            "status text NOT NULL",
            "at timestamp with time zone",
            "took interval",
            "maybe_n bigint",
            "note text",
            "extra jsonb",
            "line jsonb",
            "attrs jsonb NOT NULL",
            "nums bigint[] NOT NULL",
            "tags text[] NOT NULL",
            "lines jsonb NOT NULL",
            "nick text",
            "email text",
        ]
    );
    assert_eq!(db.rows_as_text("accounts", ACCOUNT_COLUMNS).await, expected);
}

/// JSON Schema v1 of the items (v2 adds an optional `email`); the key schema's `id` is the
/// primary key. Properties become columns in name order.
fn item_schema(v2: bool) -> String {
    format!(
        r##"{{"$schema":"http://json-schema.org/draft-07/schema#","title":"Item","type":"object",
  "properties":{{
    "id":{{"type":"integer"}},
    "small":{{"type":"integer","connect.type":"int16"}},
    "mid":{{"type":"integer","connect.type":"int32"}},
    "price":{{"type":"number"}},
    "ratio":{{"type":"number","connect.type":"float32"}},
    "score":{{"type":"number","connect.type":"float64"}},
    "flag":{{"type":"boolean"}},
    "name":{{"type":"string"}},
    "at":{{"type":"string","format":"date-time"}},
    "day":{{"type":"string","format":"date"}},
    "clock":{{"type":"string","format":"time"}},
    "uid":{{"type":"string","format":"uuid"}},
    "blob":{{"type":"string","connect.type":"bytes"}},
    "meta":{{"type":"object"}},
    "nums":{{"type":"array","items":{{"type":"integer"}}}},
    "lines":{{"type":"array","items":{{"type":"object"}}}},
    "maybe":{{"oneOf":[{{"type":"null"}},{{"type":"string"}}]}},
    "either":{{"type":["null","integer"]}},
    "mixed":{{"oneOf":[{{"type":"string"}},{{"type":"integer"}}]}},
    "due":{{"$ref":"#/definitions/Due"}}{}
  }},
  "required":["id","small","mid","price","ratio","score","flag","name","at","day","clock","uid","blob","meta","nums","lines","due"],
  "definitions":{{"Due":{{"type":"string","format":"date"}}}}}}"##,
        if v2 {
            r#","email":{"oneOf":[{"type":"null"},{"type":"string"}]}"#
        } else {
            ""
        }
    )
}

/// Item `i` as JSON (renamed in v2, with an email) and its row as PostgreSQL prints it.
fn item(i: i64, v2: bool) -> (String, Vec<Option<String>>) {
    let name = if v2 { format!("u{i}") } else { format!("n{i}") };
    let blob = base64::engine::general_purpose::STANDARD.encode([i as u8, 0xfe]);
    let maybe = if i % 4 == 0 {
        format!("\"m{i}\"")
    } else {
        "null".into()
    };
    let either = if i % 2 == 0 {
        (i * 7).to_string()
    } else {
        "null".into()
    };
    let mixed = if i % 2 == 0 {
        format!("\"s{i}\"")
    } else {
        i.to_string()
    };
    let email = if v2 {
        format!(r#","email":"e{i}@x""#)
    } else {
        String::new()
    };
    let json = format!(
        r#"{{"id":{i},"small":{},"mid":{},"price":{i}.000000000000000001,"ratio":{},"score":{},"flag":{},"name":"{name}","at":"2024-01-02T03:04:{i:02}.123456Z","day":"2024-02-{:02}","clock":"10:11:{i:02}+02:00","uid":"00000000-0000-0000-0000-{i:012}","blob":"{blob}","meta":{{"a":{i}}},"nums":[{i},{}],"lines":[{{"k":{i}}}],"maybe":{maybe},"either":{either},"mixed":{mixed},"due":"2023-12-{:02}"{email}}}"#,
        -i,
        i * 100_000,
        i as f32 / 4.0,
        i as f64 / 8.0,
        i % 3 == 0,
        i % 28 + 1,
        i + 1,
        i % 28 + 1,
    );
    let row = vec![
        Some(i.to_string()),
        Some(format!("2024-01-02 03:04:{i:02}.123456+00")),
        Some(format!("\\x{:02x}fe", i)),
        Some(format!("10:11:{i:02}+02")),
        Some(format!("2024-02-{:02}", i % 28 + 1)),
        Some(format!("2023-12-{:02}", i % 28 + 1)),
        (i % 2 == 0).then(|| (i * 7).to_string()),
        Some((i % 3 == 0).to_string()),
        Some(format!(r#"[{{"k": {i}}}]"#)),
        (i % 4 == 0).then(|| format!("m{i}")),
        Some(format!(r#"{{"a": {i}}}"#)),
        Some((i * 100_000).to_string()),
        Some(if i % 2 == 0 {
            format!("\"s{i}\"")
        } else {
            i.to_string()
        }),
        Some(name),
        Some(format!("{{{i},{}}}", i + 1)),
        Some(format!("{i}.000000000000000001")),
        Some((i as f32 / 4.0).to_string()),
        Some((i as f64 / 8.0).to_string()),
        Some((-i).to_string()),
        Some(format!("00000000-0000-0000-0000-{i:012}")),
        v2.then(|| format!("e{i}@x")),
    ];
    (json, row)
}

const ITEM_COLUMNS: &[&str] = &[
    "id", "at", "blob", "clock", "day", "due", "either", "flag", "lines", "maybe", "meta", "mid",
    "mixed", "name", "nums", "price", "ratio", "score", "small", "uid", "email",
];

const ITEM_KEY: &str =
    r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#;

/// A missing table is created from the JSON Schema (every type, format, Connect hint, union
/// with null and `$ref`), the key schema's `id` its primary key; upserts by it, and v2's new
/// property becomes a nullable column mid-stream.
#[tokio::test(flavor = "multi_thread")]
async fn json_schema_creates_every_column_type_with_the_key_as_primary_key_and_evolves() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    let key_id = register(&format!("{}-key", topic.name), SchemaKind::Json, ITEM_KEY).await;
    let subject = format!("{}-value", topic.name);
    let v1_id = register(&subject, SchemaKind::Json, &item_schema(false)).await;
    let v2_id = register(&subject, SchemaKind::Json, &item_schema(true)).await;
    let record = |i: i64, json: String, id: u32| RawRecord {
        partition: (i % 2) as i32,
        key: Some(framed(key_id, format!(r#"{{"id":{i}}}"#).as_bytes())),
        value: Some(framed(id, json.as_bytes())),
        ..Default::default()
    };
    let mut expected = Vec::new();
    let mut records = Vec::new();
    for i in 0..30 {
        let (json, row) = item(i, false);
        records.push(record(i, json, v1_id));
        expected.push(row);
    }
    for i in 0..15 {
        let (json, row) = item(i, true);
        records.push(record(i, json, v2_id));
        expected[i as usize] = row;
    }
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.max_records = 10;
    config.metadata = String::new();
    config.topic_settings = "format = \"json-schema\"\nkey_format = \"json-schema\"\nmode = \"upsert\"\nkey_from = \"key\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs());

    assert_eq!(primary_key(&db, "items").await, ["id"]);
    assert_eq!(
        column_types(&db, "items").await,
        [
            "id bigint NOT NULL",
            "at timestamp with time zone NOT NULL",
            "blob bytea NOT NULL",
            "clock time with time zone NOT NULL",
            "day date NOT NULL",
            "due date NOT NULL",
            "either bigint",
            "flag boolean NOT NULL",
            "lines jsonb NOT NULL",
            "maybe text",
            "meta jsonb NOT NULL",
            "mid integer NOT NULL",
            "mixed jsonb",
            "name text NOT NULL",
            "nums bigint[] NOT NULL",
            "price numeric NOT NULL",
            "ratio real NOT NULL",
            "score double precision NOT NULL",
            "small smallint NOT NULL",
            "uid uuid NOT NULL",
            "email text",
        ]
    );
    assert_eq!(db.rows_as_text("items", ITEM_COLUMNS).await, expected);
}

/// `check --plan` prints the `CREATE TABLE` a Protobuf topic's latest schema (its first
/// message, with the key message's field as primary key) and a JSON Schema topic's would run,
/// then the `ALTER TABLE` of v2's field, and creates or changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn check_plan_prints_the_ddl_of_protobuf_and_json_schema_topics() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    let proto = "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\"; message Row { int64 id = 1; string name = 2; google.protobuf.Timestamp at = 3; repeated int32 n = 4; }";
    register(
        &format!("{}-key", topic.name),
        SchemaKind::Protobuf,
        "syntax = \"proto3\"; message K { int64 id = 1; }",
    )
    .await;
    register(
        &format!("{}-value", topic.name),
        SchemaKind::Protobuf,
        proto,
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "planned");
    config.metadata = String::new();
    config.topic_settings = "format = \"protobuf\"\nkey_format = \"protobuf\"\nmode = \"upsert\"\nkey_from = \"key\"\nauto_create = true".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(r#"    CREATE TABLE IF NOT EXISTS "public"."planned" ("id" int8 NOT NULL, "name" text NOT NULL, "at" timestamptz, "n" int4[] NOT NULL, PRIMARY KEY ("id"));"#),
        "{}",
        out.stdout
    );

    let js = TestTopic::create(1).await;
    let subject = format!("{}-value", js.name);
    register(&subject, SchemaKind::Json, &item_schema(false)).await;
    let mut config = SinkConfig::new(&db.url, &js.name, "planned_items");
    config.metadata = String::new();
    config.topic_settings =
        "format = \"json-schema\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(r#"    CREATE TABLE IF NOT EXISTS "public"."planned_items" ("at" timestamptz NOT NULL, "blob" bytea NOT NULL, "clock" timetz NOT NULL, "day" date NOT NULL, "due" date NOT NULL, "either" int8, "flag" bool NOT NULL, "id" int8 NOT NULL, "lines" jsonb NOT NULL, "maybe" text, "meta" jsonb NOT NULL, "mid" int4 NOT NULL, "mixed" jsonb, "name" text NOT NULL, "nums" int8[] NOT NULL, "price" numeric NOT NULL, "ratio" float4 NOT NULL, "score" float8 NOT NULL, "small" int2 NOT NULL, "uid" uuid NOT NULL);"#),
        "{}",
        out.stdout
    );
    sqlx::query("CREATE TABLE planned_items (id bigint, name text)")
        .execute(&db.pool)
        .await
        .unwrap();
    register(&subject, SchemaKind::Json, &item_schema(true)).await;
    let out = run_cli(&["check", "--plan", "--config", file.arg()]).await;
    assert!(
        out.stdout.contains(
            r#"    ALTER TABLE "public"."planned_items" ADD COLUMN IF NOT EXISTS "email" text;"#
        ),
        "{}",
        out.stdout
    );
    let made: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT to_regclass('planned')::text UNION ALL SELECT attname::text FROM pg_attribute WHERE attrelid = 'planned_items'::regclass AND attname = 'email'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(made, [None], "check --plan created a table or a column");
}

/// A Debezium change-event schema as the AvroConverter writes it: each logical type named in
/// `connect.name` on a plain Avro type.
const DEBEZIUM_AVRO: &str = r#"{"type":"record","name":"Envelope","namespace":"pg.public.t","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"id","type":"int"},
    {"name":"ts","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}},
    {"name":"mts","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}},
    {"name":"nts","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTimestamp"}},
    {"name":"zts","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},
    {"name":"d","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}},
    {"name":"t","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Time"}},
    {"name":"mt","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}},
    {"name":"nt","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTime"}},
    {"name":"js","type":{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}},
    {"name":"u","type":{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}},
    {"name":"vsd","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}},
    {"name":"dec","type":{"type":"bytes","connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal"}}
  ],"connect.name":"pg.public.t.Value"}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}],"connect.name":"pg.public.t.Envelope"}"#;

/// A time of day or timestamp fraction as PostgreSQL prints it: trailing zeros dropped.
fn trimmed(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Debezium's Avro `after` schema creates the table with each Connect logical type's column
/// (not the plain Avro type's `int8`/`int4`/`text`), and every value lands as produced.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_avro_logical_types_create_their_columns() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(2).await;
    let mut records = Vec::new();
    let mut expected = Vec::new();
    let midnight = chrono::NaiveTime::from_hms_opt(0, 0, 0).unwrap();
    for i in 0..20i64 {
        let ms = 1_700_000_000_123 + i;
        let us = 1_700_000_000_123_456 + i;
        let ns = 1_700_000_000_123_456_000 + i * 1000;
        // Connect's decimals are big-endian two's-complement bytes, as the converter writes.
        let bytes = |v: i32| crate::helpers::base64_of(&v.to_be_bytes());
        let after = serde_json::json!({
            "id": i, "ts": ms, "mts": us, "nts": ns,
            "zts": format!("2024-01-02T03:04:{i:02}.5+02:00"), "d": 19675 + i,
            "t": 3_600_000 + i * 1000, "mt": 3_600_000_000 + i, "nt": 7_200_000_000_000 + i * 1000,
            "js": format!(r#"{{"a":{i}}}"#), "u": format!("00000000-0000-0000-0000-{i:012}"),
            "vsd": {"scale": 3, "value": {"$bytes": bytes((i * 1000 + 7) as i32)}},
            "dec": {"$bytes": bytes((i * 100 + 5) as i32)},
        });
        let envelope = serde_json::json!({"before": null, "after": after, "op": "c", "ts_ms": ms});
        records.push(
            serde_json::json!({"key": format!(r#"{{"id":{i}}}"#), "value": envelope,
                                        "partition": i % 2}),
        );
        let stamp = |t: chrono::DateTime<chrono::Utc>| {
            trimmed(t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        };
        let clock = |us: i64| {
            trimmed(
                (midnight + chrono::Duration::microseconds(us))
                    .format("%H:%M:%S%.6f")
                    .to_string(),
            )
        };
        expected.push(vec![
            Some(i.to_string()),
            Some(stamp(chrono::DateTime::from_timestamp_millis(ms).unwrap())),
            Some(stamp(chrono::DateTime::from_timestamp_micros(us).unwrap())),
            Some(stamp(
                chrono::DateTime::from_timestamp_micros(ns / 1000).unwrap(),
            )),
            Some(format!("2024-01-02 01:04:{i:02}.5+00")),
            Some(
                (chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()
                    + chrono::Days::new((19675 + i) as u64))
                .to_string(),
            ),
            Some(clock((3_600_000 + i * 1000) * 1000)),
            Some(clock(3_600_000_000 + i)),
            Some(clock(7_200_000_000 + i)),
            Some(format!(r#"{{"a": {i}}}"#)),
            Some(format!("00000000-0000-0000-0000-{i:012}")),
            Some(format!("{i}.007")),
            Some(format!("{i}.05")),
        ]);
    }
    produce(
        &topic.name,
        &Serde::Avro(DEBEZIUM_AVRO),
        Some(&Serde::String),
        &records,
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "changes");
    config.topic_settings =
        "format = \"debezium\"\nencoding = \"avro\"\nkey = [\"id\"]\nauto_create = true".into();
    config.metadata = String::new();
    config.max_records = 7;
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success(), "{}", sink.logs());
    assert_eq!(
        column_types(&db, "changes").await,
        [
            "id integer NOT NULL",
            "ts timestamp without time zone NOT NULL",
            "mts timestamp without time zone NOT NULL",
            "nts timestamp without time zone NOT NULL",
            "zts timestamp with time zone",
            "d date NOT NULL",
            "t time without time zone NOT NULL",
            "mt time without time zone NOT NULL",
            "nt time without time zone NOT NULL",
            "js jsonb NOT NULL",
            "u uuid NOT NULL",
            "vsd numeric NOT NULL",
            "dec numeric(10,2) NOT NULL",
        ]
    );
    let columns = [
        "id", "ts", "mts", "nts", "zts", "d", "t", "mt", "nt", "js", "u", "vsd", "dec",
    ];
    assert_eq!(db.rows_as_text("changes", &columns).await, expected);
}
