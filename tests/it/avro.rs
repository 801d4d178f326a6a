//! Avro through the real Schema Registry (Apicurio, Confluent API) and the real broker: every
//! logical type, keys, schema evolution, Debezium's AvroConverter envelope, bad records, a
//! registry outage, and the crash test. Keys, evolution and the Debezium envelope are written
//! by confluent-kafka's AvroSerializer, which registers its schemas; the rest with apache-avro,
//! framed in the Confluent wire format by hand (corruptions, and bytes a test times itself).

use std::collections::BTreeMap;
use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::Schema;
use rand::Rng;
use serde_json::{json, Value as Json};
use sqlx::Executor;

use kafka_pg_sink::registry::SchemaKind;

use crate::helpers::confluent::{produce, produce_evolving, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::{
    framed, register, register_at, registry_url, AuthProxy, PrivateRegistry,
};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// The Avro schema of the `every` table's records: one field per logical type.
const EVERY_TYPE: &str = r#"{
  "type": "record", "name": "Every", "namespace": "kps.test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "small", "type": "int"},
    {"name": "flag", "type": "boolean"},
    {"name": "ratio", "type": "double"},
    {"name": "name", "type": "string"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4}},
    {"name": "fixed_price", "type": {"type": "fixed", "name": "F8", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 2}},
    {"name": "born", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "blob", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "nested", "type": {"type": "record", "name": "Nested", "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"]}]}},
    {"name": "maybe", "type": ["null", "string"], "default": null}
  ]
}"#;

const EVERY_TABLE: &str = "CREATE TABLE every (
    id bigint PRIMARY KEY, small int NOT NULL, flag boolean NOT NULL, ratio float8 NOT NULL,
    name text NOT NULL, price numeric(12,4) NOT NULL, fixed_price numeric(18,2) NOT NULL,
    born date NOT NULL, at_ms timestamptz NOT NULL, at_us timestamptz NOT NULL,
    local_us timestamp NOT NULL, uid uuid NOT NULL, blob bytea NOT NULL, kind kind_t NOT NULL,
    tags jsonb NOT NULL, attrs jsonb NOT NULL, nested jsonb NOT NULL, maybe text)";

/// Record `i` of `EVERY_TYPE` as the serializer is given it (decimals and bytes tagged), and
/// the row PostgreSQL must then hold, as text.
fn every_record(i: i64) -> (Json, Vec<Option<String>>) {
    let sign = if i % 2 == 0 { 1 } else { -1 };
    let price = sign * (i as i128 * 10_007 + 1); // scale 4
    let fixed = sign * (i as i128 * 1_000_000_007); // scale 2
    let born = 19_000 + i as i32 - 40_000 * (i % 3 == 0) as i32; // before 1970 too
    let at_ms = 1_700_000_000_123 + i * 1_001;
    let at_us = 1_700_000_000_123_456 + i * 1_000_003;
    let local_us = -86_400_000_000 + i * 3_600_000_001;
    let uid = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_0000_0000_0000_0000 + i as u128);
    let blob: Vec<u8> = (0..(i % 7) as u8)
        .map(|b| b.wrapping_mul(37) ^ 0xa5)
        .collect();
    let kind = ["A", "B", "C"][(i % 3) as usize];
    let name = format!("n{i} \u{e9}\"quote\"\\");
    let maybe = (i % 4 != 0).then(|| format!("m{i}"));
    let decimal = |v: i128, scale: u32| {
        let neg = v < 0;
        let digits = format!("{:0>width$}", v.unsigned_abs(), width = scale as usize + 1);
        let (int, frac) = digits.split_at(digits.len() - scale as usize);
        format!("{}{int}.{frac}", if neg { "-" } else { "" })
    };
    let value = json!({
        "id": i, "small": -(i as i32) * 3, "flag": i % 2 == 0, "ratio": i as f64 / 8.0,
        "name": name, "price": {"$decimal": decimal(price, 4)},
        "fixed_price": {"$decimal": decimal(fixed, 2)}, "born": born, "at_ms": at_ms,
        "at_us": at_us, "local_us": local_us, "uid": uid.to_string(),
        "blob": {"$bytes": crate::helpers::base64_of(&blob)}, "kind": kind,
        "tags": ["a", format!("t{i}")], "attrs": {"n": i}, "nested": {"x": i, "y": null},
        "maybe": maybe,
    });
    let date =
        chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(born as i64);
    let ts = |micros: i64| pg_time(micros, true);
    let local = pg_time(local_us, false);
    let expected = vec![
        Some(i.to_string()),
        Some((-(i as i32) * 3).to_string()),
        Some((i % 2 == 0).to_string()),
        Some((i as f64 / 8.0).to_string()),
        Some(name),
        Some(decimal(price, 4)),
        Some(decimal(fixed, 2)),
        Some(date.format("%Y-%m-%d").to_string()),
        Some(ts(at_ms * 1000)),
        Some(ts(at_us)),
        Some(local),
        Some(uid.to_string()),
        Some(format!("\\x{}", hex(&blob))),
        Some(kind.into()),
        Some(format!(r#"["a", "t{i}"]"#)),
        Some(format!(r#"{{"n": {i}}}"#)),
        Some(format!(r#"{{"x": {i}, "y": null}}"#)),
        maybe,
    ];
    (value, expected)
}

/// A timestamp as PostgreSQL prints it: microseconds without trailing zeros, `+00` in UTC.
fn pg_time(micros: i64, zoned: bool) -> String {
    let t = chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .naive_utc();
    let mut text = t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    while text.ends_with('0') {
        text.pop();
    }
    if text.ends_with('.') {
        text.pop();
    }
    if zoned {
        text.push_str("+00");
    }
    text
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const EVERY_COLUMNS: &[&str] = &[
    "id",
    "small",
    "flag",
    "ratio",
    "name",
    "price",
    "fixed_price",
    "born",
    "at_ms",
    "at_us",
    "local_us",
    "uid",
    "blob",
    "kind",
    "tags",
    "attrs",
    "nested",
    "maybe",
];

fn avro(schema: &Schema, value: Value) -> Vec<u8> {
    apache_avro::to_avro_datum(schema, value).expect("the value fits its schema")
}

fn registry_section(url: &str) -> String {
    format!("\n[schema_registry]\nurl = \"{url}\"\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_records_with_every_logical_type_land_exactly() {
    let db = TestDb::migrated().await;
    // An Avro enum lands in a PostgreSQL enum (by its symbol) as well as in text.
    db.pool
        .execute("CREATE TYPE kind_t AS ENUM ('A', 'B', 'C')")
        .await
        .unwrap();
    db.pool.execute(EVERY_TABLE).await.unwrap();
    let topic = TestTopic::create(3).await;
    let mut expected = Vec::new();
    let mut records = Vec::new();
    for i in 0..300 {
        let (value, row) = every_record(i);
        expected.push(row);
        records.push(json!({"key": i.to_string(), "value": value, "partition": i % 3}));
    }
    produce(
        &topic.name,
        &Serde::Avro(EVERY_TYPE),
        Some(&Serde::String),
        &records,
    )
    .await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "every");
    config.topic_settings = "format = \"avro\"".into();
    config.metadata = String::new();
    config.extra = registry_section(&registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_eq!(db.rows_as_text("every", EVERY_COLUMNS).await, expected);
    assert!(sink.stop().success());
    let logs = sink.logs();
    assert!(!logs.contains("dead-lettered"), "{}", sink.logs_tail(20));
}

const KEY_SCHEMA: &str = r#"{"type":"record","name":"Key","namespace":"kps.test","fields":[{"name":"id","type":"long"}]}"#;
const V1: &str = r#"{"type":"record","name":"Item","namespace":"kps.test","fields":[
  {"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"qty","type":"int"}]}"#;
/// Adds `note`; widens `qty` to long.
const V2: &str = r#"{"type":"record","name":"Item","namespace":"kps.test","fields":[
  {"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"qty","type":"long"},
  {"name":"note","type":["null","string"],"default":null}]}"#;
/// Removes `name`.
const V3: &str = r#"{"type":"record","name":"Item","namespace":"kps.test","fields":[
  {"name":"id","type":"long"},{"name":"qty","type":"long"},
  {"name":"note","type":["null","string"],"default":null}]}"#;

/// Item `i` in schema V1 (`name` = `n<i>`, `qty` = `i`), framed with the schema's id.
fn item_v1(schema: &Schema, id: u32, i: i64) -> Vec<u8> {
    let value = Value::Record(vec![
        ("id".into(), Value::Long(i)),
        ("name".into(), Value::String(format!("n{i}"))),
        ("qty".into(), Value::Int(i as i32)),
    ]);
    framed(id, &avro(schema, value))
}

/// Item `i` in schema V2, without a note.
fn item_v2(schema: &Schema, id: u32, i: i64) -> Vec<u8> {
    let value = Value::Record(vec![
        ("id".into(), Value::Long(i)),
        ("name".into(), Value::String(format!("n{i}"))),
        ("qty".into(), Value::Long(i)),
        ("note".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    framed(id, &avro(schema, value))
}

/// Avro keys with upsert and tombstones, and the value schema evolving mid-stream (a field
/// added, a field removed, a type widened): each new id is just another decoder, fields are
/// matched by name, and a field a record lacks leaves its column alone.
#[tokio::test(flavor = "multi_thread")]
async fn avro_keys_upsert_and_delete_while_the_schema_evolves() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty bigint NOT NULL, note text)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let mut expected: BTreeMap<i64, (Option<String>, i64, Option<String>)> = BTreeMap::new();
    let mut records = Vec::new();
    let mut rng = rand::rng();
    for i in 0..2_000i64 {
        let key = rng.random_range(0..150i64);
        let partition = (key % 2) as i32;
        let version = (i * 3 / 2_000) as usize; // v1, then v2, then v3 in order
        if i % 11 == 5 {
            records.push(json!({"key": {"id": key}, "value": null, "partition": partition}));
            expected.remove(&key);
            continue;
        }
        let qty = i * 1_000_000_007 % 9_000_000_000;
        let note = (i % 3 == 0).then(|| format!("note {i}"));
        let value = match version {
            0 => json!({"id": key, "name": format!("v1-{i}"), "qty": qty % 1_000_000}),
            1 => json!({"id": key, "name": format!("v2-{i}"), "qty": qty, "note": note}),
            _ => json!({"id": key, "qty": qty, "note": note}),
        };
        let previous = expected.get(&key).cloned();
        let row = match version {
            0 => (
                Some(format!("v1-{i}")),
                qty % 1_000_000,
                previous.and_then(|p| p.2),
            ),
            1 => (Some(format!("v2-{i}")), qty, note),
            // No name in v3: the column keeps what it had (NULL for a new row).
            _ => (previous.and_then(|p| p.0), qty, note),
        };
        expected.insert(key, row);
        records.push(
            json!({"key": {"id": key}, "value": value, "partition": partition,
                            "schema": version}),
        );
    }
    // The producer's serializer registers each version as it first writes it.
    produce_evolving(
        &topic.name,
        &[Serde::Avro(V1), Serde::Avro(V2), Serde::Avro(V3)],
        Some(&Serde::Avro(KEY_SCHEMA)),
        &records,
    )
    .await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.max_records = 97;
    config.topic_settings = "format = \"avro\"\nkey_format = \"avro\"\nmode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true".into();
    config.metadata = String::new();
    config.extra = registry_section(&registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let rows: Vec<(i64, Option<String>, i64, Option<String>)> =
        sqlx::query_as("SELECT id, name, qty, note FROM items ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<i64, (Option<String>, i64, Option<String>)> = rows
        .into_iter()
        .map(|(id, name, qty, note)| (id, (name, qty, note)))
        .collect();
    assert_eq!(actual, expected);
    assert!(sink.stop().success());
}

/// The value schema Debezium's AvroConverter writes for a table `(id int, name varchar,
/// price numeric(10,2), born date, updated timestamp(6), doc json, uid uuid)`: logical types
/// where Connect has them, `connect.name` hints for Debezium's own.
fn debezium_schema(value_name: &str) -> String {
    let row = format!(
        r#"{{"type":"record","name":"{value_name}","fields":[
      {{"name":"id","type":"int"}},
      {{"name":"name","type":["null","string"],"default":null}},
      {{"name":"price","type":["null",{{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{{"scale":"2","connect.decimal.precision":"10"}},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}],"default":null}},
      {{"name":"born","type":["null",{{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}}],"default":null}},
      {{"name":"updated","type":["null",{{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}}],"default":null}},
      {{"name":"doc","type":["null",{{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}}],"default":null}},
      {{"name":"uid","type":["null",{{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}}],"default":null}}
    ],"connect.name":"dbserver1.inventory.products.{value_name}"}}"#
    );
    format!(
        r#"{{"type":"record","name":"Envelope","namespace":"dbserver1.inventory.products","fields":[
      {{"name":"before","type":["null",{row}],"default":null}},
      {{"name":"after","type":["null","{value_name}"],"default":null}},
      {{"name":"source","type":{{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
        {{"name":"version","type":"string"}},{{"name":"connector","type":"string"}},{{"name":"ts_ms","type":"long"}},{{"name":"table","type":"string"}}]}}}},
      {{"name":"op","type":"string"}},
      {{"name":"ts_ms","type":["null","long"],"default":null}}
    ],"connect.name":"dbserver1.inventory.products.Envelope"}}"#
    )
}

/// A product row as Debezium's Avro value carries it (the values the serializer is given, the
/// decimal tagged), and the same row as PostgreSQL prints it.
fn product(id: i32, version: i64) -> (Json, Vec<Option<String>>) {
    let cents = id as i128 * 1_234 + version as i128;
    let born = 10_000 + id;
    let updated = 1_700_000_000_000_000 + version * 1_000_001;
    let doc = format!(r#"{{"v": {version}, "tags": ["x"]}}"#);
    let uid = uuid::Uuid::from_u128(id as u128 * 7 + 1);
    let price = format!("{}.{:02}", cents / 100, cents % 100);
    let value = json!({"id": id, "name": format!("p{id}-v{version}"),
        "price": {"$decimal": price}, "born": born, "updated": updated, "doc": doc,
        "uid": uid.to_string()});
    let date =
        chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(born as i64);
    let row = vec![
        Some(id.to_string()),
        Some(format!("p{id}-v{version}")),
        Some(price),
        Some(date.format("%Y-%m-%d").to_string()),
        Some(pg_time(updated, false)),
        Some(doc),
        Some(uid.to_string()),
    ];
    (value, row)
}

/// Debezium with the AvroConverter: c/r/u/d events and tombstones, keys in Avro, end equal to
/// the source table's state, every column exact.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_change_events_in_avro_reproduce_the_source_table() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE products (id int PRIMARY KEY, name text, price numeric(10,2), born date, updated timestamp, doc jsonb, uid uuid)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let value_text = debezium_schema("Value");
    let key_text = r#"{"type":"record","name":"Key","namespace":"dbserver1.inventory.products","fields":[{"name":"id","type":"int"}],"connect.name":"dbserver1.inventory.products.Key"}"#;
    let source = json!({"version": "2.7.0.Final", "connector": "postgresql",
        "ts_ms": 1_700_000_000_000i64, "table": "products"});
    let mut state: BTreeMap<i32, Vec<Option<String>>> = BTreeMap::new();
    let mut before: BTreeMap<i32, Json> = BTreeMap::new();
    let mut records = Vec::new();
    let mut rng = rand::rng();
    for version in 0..1_500i64 {
        let id = rng.random_range(0..80);
        let key = json!({"id": id});
        let partition = id % 2;
        let (op, before_v, after_v) = if state.contains_key(&id) && version % 5 == 0 {
            let b = before.remove(&id).unwrap();
            state.remove(&id);
            ("d", b, Json::Null)
        } else {
            let (row, expected) = product(id, version);
            let op = match (state.contains_key(&id), version < 100) {
                (false, true) => "r",
                (false, false) => "c",
                (true, _) => "u",
            };
            let b = before.insert(id, row.clone()).unwrap_or(Json::Null);
            state.insert(id, expected);
            (op, b, row)
        };
        let envelope = json!({"before": before_v, "after": after_v, "source": source,
            "op": op, "ts_ms": 1_700_000_000_000 + version});
        records.push(json!({"key": key, "value": envelope, "partition": partition}));
        if op == "d" {
            // Debezium follows every delete with a tombstone.
            records.push(json!({"key": key, "value": null, "partition": partition}));
        }
    }
    produce(
        &topic.name,
        &Serde::Avro(&value_text),
        Some(&Serde::Avro(key_text)),
        &records,
    )
    .await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 64;
    config.topic_settings =
        "format = \"debezium\"\nencoding = \"avro\"\nkey_format = \"avro\"".into();
    config.metadata = String::new();
    config.extra = registry_section(&registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let columns = ["id", "name", "price", "born", "updated", "doc", "uid"];
    let expected: Vec<Vec<Option<String>>> = state.into_values().collect();
    assert_eq!(db.rows_as_text("products", &columns).await, expected);
    assert!(sink.stop().success());
}

/// An id the registry does not have is a `schema` dead letter; a payload the schema cannot
/// read, or bytes without the wire header, a `decode` one; the good records around them land.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_schema_ids_and_corrupt_payloads_become_dead_letters() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty bigint NOT NULL, note text)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let id = register(&format!("{}-value", topic.name), SchemaKind::Avro, V1).await;
    let schema = Schema::parse_str(V1).unwrap();
    let mut values = Vec::new();
    for i in 0..40i64 {
        values.push(match i {
            7 => framed(999_999, &[2, 0]),                   // no such id
            13 => framed(id, &[0xff, 0xff, 0xff]),           // truncated varints
            21 => br#"{"id": 21, "name": "json"}"#.to_vec(), // no header
            _ => item_v1(&schema, id, i),
        });
    }
    let records: Vec<RawRecord> = values
        .into_iter()
        .map(|v| RawRecord {
            value: Some(v),
            ..Default::default()
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "format = \"avro\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = registry_section(&registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let letters: Vec<(i64, String, String)> = sqlx::query_as(
        r#"SELECT "offset", error_kind, error_message FROM kafka_dead_letters ORDER BY "offset""#,
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let kinds: Vec<(i64, &str)> = letters.iter().map(|(o, k, _)| (*o, k.as_str())).collect();
    assert_eq!(
        kinds,
        vec![(7, "schema"), (13, "decode"), (21, "decode")],
        "{letters:?}"
    );
    assert!(letters[0].2.contains("999999"), "{}", letters[0].2);
    assert_eq!(db.count("items").await, 37);
    // V1 has no `note`: in insert mode the column takes its default (NULL).
    let notes: i64 = sqlx::query_scalar("SELECT count(*) FROM items WHERE note IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(notes, 0);
    assert!(sink.stop().success());
}

/// The registry hung mid-stream (its process stopped with SIGSTOP: connections accepted, never
/// answered) while records with a schema id new to the sink arrive: the sink waits and
/// retries, and once the registry runs again (SIGCONT) it continues: no dead letter, no loss.
/// Basic auth goes through a proxy in front of that registry, which forwards only requests with
/// the configured credentials (Apicurio's own basic auth needs an OIDC server); the password,
/// given as `${NAME}`, never reaches the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_outage_delays_records_and_loses_none_with_basic_auth() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty bigint NOT NULL, note text)",
        )
        .await
        .unwrap();
    let registry = tokio::task::spawn_blocking(PrivateRegistry::start)
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let subject = format!("{}-value", topic.name);
    let v1 = register_at(&registry.url(), &subject, SchemaKind::Avro, V1).await;
    let v2 = register_at(&registry.url(), &subject, SchemaKind::Avro, V2).await;
    let s1 = Schema::parse_str(V1).unwrap();
    let s2 = Schema::parse_str(V2).unwrap();
    let proxy = AuthProxy::basic(&registry.url(), "sink-user", "s3cret-registry-pw").await;
    let record = |i: i64, v2_record: bool| RawRecord {
        partition: (i % 2) as i32,
        value: Some(if v2_record {
            item_v2(&s2, v2, i)
        } else {
            item_v1(&s1, v1, i)
        }),
        ..Default::default()
    };
    let first: Vec<RawRecord> = (0..500).map(|i| record(i, false)).collect();
    produce_raw(&producer(), &topic.name, &first).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "format = \"avro\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = format!(
        "\n[schema_registry]\nurl = \"{}\"\nusername = \"sink-user\"\npassword = \"${{KPS_TEST_REGISTRY_PW}}\"\ntimeout = \"2s\"\n",
        proxy.url
    );
    config.env = vec![("KPS_TEST_REGISTRY_PW".into(), "s3cret-registry-pw".into())];
    let mut sink = Sink::start(&config, "sink");
    wait_until("the first 500 rows", Duration::from_secs(60), || async {
        db.count("items").await == 500
    })
    .await;
    tokio::task::block_in_place(|| registry.freeze());
    let second: Vec<RawRecord> = (500..1_000).map(|i| record(i, true)).collect();
    produce_raw(&producer(), &topic.name, &second).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        db.count("items").await,
        500,
        "nothing of schema 2 without its schema"
    );
    tokio::task::block_in_place(|| registry.thaw());
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert_exactly_once(&db, "items", 1_000).await;
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(letters, 0, "an outage is never the records' fault");
    assert!(
        proxy.forwarded() >= 2,
        "both schemas fetched through the proxy"
    );
    let expected = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "sink-user:s3cret-registry-pw"
        )
    );
    assert!(
        proxy
            .authorizations()
            .iter()
            .all(|a| a.as_deref() == Some(expected.as_str())),
        "every request carried the credentials"
    );
    assert!(sink.stop().success());
    let logs = sink.logs();
    assert!(
        !logs.contains("s3cret-registry-pw"),
        "the password leaked into the log"
    );
    assert!(
        logs.contains("cannot fetch the record's schema"),
        "{}",
        sink.logs_tail(30)
    );
}
