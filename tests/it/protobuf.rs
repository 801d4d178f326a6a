//! Protobuf and JSON Schema through the real Schema Registry and the real broker, the records
//! written by confluent-kafka's ProtobufSerializer and JSONSerializer (which register their
//! schemas themselves, the Protobuf one as a base64 descriptor, and write the message-index
//! array that names the message): the schema imports the well-known types the way producers do
//! (`Timestamp`, wrappers).

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::confluent::{produce, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::TestTopic;
use crate::helpers::registry::registry_url;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const PROTO: &str = r#"syntax = "proto3";
package kps.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Other { int64 id = 1; string label = 2; }

message Order {
  int64 id = 1;
  int32 small = 2;
  uint64 big = 3;
  bool flag = 4;
  double ratio = 5;
  string name = 6;
  bytes blob = 7;
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  Status status = 8;
  google.protobuf.Timestamp at = 9;
  google.protobuf.StringValue note = 10;
  repeated string tags = 11;
  map<string, int64> attrs = 12;
  message Line { string sku = 1; int32 qty = 2; }
  Line line = 13;
  optional string maybe = 14;
}
"#;

/// Order `i` in protobuf's JSON mapping (what the producer builds its message from), and its
/// row as PostgreSQL prints it.
fn order(i: i64) -> (Value, Vec<Option<String>>) {
    let blob: Vec<u8> = (0..(i % 5) as u8).map(|b| b ^ 0x5a).collect();
    let status = ["NEW", "PAID", "SHIPPED"][(i % 3) as usize];
    let seconds = 1_700_000_000 + i * 61;
    let nanos = (i * 1_001_000 % 1_000_000_000) as u32;
    let at = chrono::DateTime::from_timestamp(seconds, nanos).unwrap();
    let mut m = json!({
        "id": i, "small": -i, "big": (u64::MAX - i as u64).to_string(), "flag": i % 2 == 1,
        "ratio": i as f64 / 4.0, "name": format!("o{i} \u{e9}"), "blob": base64_of(&blob),
        "status": status,
        "at": at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "tags": ["a", format!("t{i}")], "attrs": {"n": i},
        "line": {"sku": format!("s{i}"), "qty": i % 10},
    });
    if i % 3 != 0 {
        m["note"] = json!(format!("n{i}"));
    }
    if i % 4 == 1 {
        m["maybe"] = json!(format!("m{i}"));
    }
    let micros = seconds * 1_000_000 + (nanos / 1000) as i64;
    let at = {
        let t = chrono::DateTime::from_timestamp_micros(micros)
            .unwrap()
            .naive_utc();
        let mut s = t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
        s + "+00"
    };
    let row = vec![
        Some(i.to_string()),
        Some((-(i as i32)).to_string()),
        Some((u64::MAX - i as u64).to_string()),
        Some((i % 2 == 1).to_string()),
        Some((i as f64 / 4.0).to_string()),
        Some(format!("o{i} \u{e9}")),
        Some(format!(
            "\\x{}",
            blob.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )),
        Some(["NEW", "PAID", "SHIPPED"][(i % 3) as usize].to_string()),
        Some(at),
        (i % 3 != 0).then(|| format!("n{i}")),
        Some(format!(r#"["a", "t{i}"]"#)),
        Some(format!(r#"{{"n": {i}}}"#)),
        Some(format!(r#"{{"qty": {}, "sku": "s{i}"}}"#, i % 10)),
        (i % 4 == 1).then(|| format!("m{i}")),
    ];
    (m, row)
}

/// The schema of the orders: `Order` is the file's second message, so the serializer's
/// message-index array is `[1]`.
fn order_serde() -> Serde<'static> {
    Serde::Protobuf {
        files: &[("order.proto", PROTO)],
        file: "order.proto",
        message: "kps.test.Order",
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_records_land_with_every_field_kind() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, small int NOT NULL, big numeric NOT NULL,
             flag boolean NOT NULL, ratio float8 NOT NULL, name text NOT NULL, blob bytea NOT NULL,
             status text NOT NULL, at timestamptz NOT NULL, note text, tags jsonb NOT NULL,
             attrs jsonb NOT NULL, line jsonb NOT NULL, maybe text)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let mut expected = Vec::new();
    let mut records = Vec::new();
    for i in 0..200 {
        let (value, row) = order(i);
        expected.push(row);
        records.push(json!({"value": value, "partition": i % 2}));
    }
    produce(&topic.name, &order_serde(), None, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = "format = \"protobuf\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let columns = [
        "id", "small", "big", "flag", "ratio", "name", "blob", "status", "at", "note", "tags",
        "attrs", "line", "maybe",
    ];
    let rows = db.rows_as_text("orders", &columns).await;
    assert_eq!(rows, expected);
    assert!(sink.stop().success());
}

const JSON_SCHEMA: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Item","type":"object",
  "properties":{"id":{"type":"integer"},"name":{"type":"string"},"at":{"type":"string","format":"date-time"}},
  "required":["id"]}"#;

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_records_land_like_json() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE items (id bigint PRIMARY KEY, name text, at timestamptz)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let records: Vec<Value> = (0..100)
        .map(|i| {
            json!({"value": {"id": i, "name": format!("n{i}"),
                             "at": format!("2024-01-02T03:04:{:02}Z", i % 60)}})
        })
        .collect();
    produce(&topic.name, &Serde::Json(JSON_SCHEMA), None, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "format = \"json-schema\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i64, String, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT id, name, at FROM items ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 100);
    for (i, (id, name, at)) in rows.into_iter().enumerate() {
        assert_eq!((id, name.as_str()), (i as i64, format!("n{i}").as_str()));
        assert_eq!(
            at.to_rfc3339(),
            format!("2024-01-02T03:04:{:02}+00:00", i % 60)
        );
    }
    assert!(sink.stop().success());
}

const DEBEZIUM_PROTO: &str = r#"syntax = "proto3";
package dbserver1.inventory.products;

message Envelope {
  Value before = 1;
  Value after = 2;
  string op = 3;
  int64 ts_ms = 4;
}
message Value {
  int32 id = 1;
  string name = 2;
  optional int64 qty = 3;
}
message Key { int32 id = 1; }
"#;

/// Debezium change events written with a Protobuf converter (the envelope the first message,
/// the key the third, selected by the message index in each header), c/u/d and tombstones:
/// the table ends equal to the source state.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_change_events_in_protobuf_with_protobuf_keys_reproduce_the_source() {
    use std::collections::BTreeMap;
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE products (id int PRIMARY KEY, name text NOT NULL, qty bigint)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let row = |id: i32, version: i64| {
        let mut v = json!({"id": id, "name": format!("p{id}-v{version}")});
        if version % 2 == 0 {
            v["qty"] = json!((version * 1_000_000_007).to_string());
        }
        v
    };
    let mut state: BTreeMap<i32, (String, Option<i64>)> = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..600i64 {
        let id = (version * 37 % 50) as i32;
        let key = json!({"id": id});
        let mut envelope = json!({"ts_ms": (1_700_000_000_000 + version).to_string()});
        let op = if state.contains_key(&id) && version % 4 == 0 {
            envelope["before"] = row(id, version - 1);
            state.remove(&id);
            "d"
        } else {
            envelope["after"] = row(id, version);
            let op = if state.contains_key(&id) { "u" } else { "c" };
            state.insert(
                id,
                (
                    format!("p{id}-v{version}"),
                    (version % 2 == 0).then_some(version * 1_000_000_007),
                ),
            );
            op
        };
        envelope["op"] = json!(op);
        let partition = id % 2;
        records.push(json!({"key": key, "value": envelope, "partition": partition}));
        if op == "d" {
            records.push(json!({"key": key, "value": null, "partition": partition}));
        }
    }
    // The serializers write the envelope with index [0] (the single byte 0) and the key, the
    // file's third message, with [2].
    let files: &[(&str, &str)] = &[("d.proto", DEBEZIUM_PROTO)];
    let message = |name| Serde::Protobuf {
        files,
        file: "d.proto",
        message: name,
    };
    produce(
        &topic.name,
        &message("dbserver1.inventory.products.Envelope"),
        Some(&message("dbserver1.inventory.products.Key")),
        &records,
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 40;
    config.topic_settings =
        "format = \"debezium\"\nencoding = \"protobuf\"\nkey_format = \"protobuf\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let rows: Vec<(i32, String, Option<i64>)> =
        sqlx::query_as("SELECT id, name, qty FROM products ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<i32, (String, Option<i64>)> =
        rows.into_iter().map(|(id, n, q)| (id, (n, q))).collect();
    assert_eq!(actual, state);
    assert!(sink.stop().success());
}

/// Debezium change events written with a JSON Schema converter: the envelope as JSON after the
/// wire header; c/u/d end equal to the source state.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_change_events_in_json_schema_reproduce_the_source() {
    use std::collections::BTreeMap;
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE products (id int PRIMARY KEY, name text NOT NULL)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let schema = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Envelope","type":"object",
      "properties":{"before":{"oneOf":[{"type":"null"},{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}}}]},
                    "after":{"oneOf":[{"type":"null"},{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}}}]},
                    "op":{"type":"string"}}}"#;
    let mut state: BTreeMap<i32, String> = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..300i32 {
        let key = version * 7 % 40;
        let value = if state.contains_key(&key) && version % 3 == 0 {
            state.remove(&key);
            json!({"before": {"id": key, "name": "old"}, "after": null, "op": "d"})
        } else {
            let op = if state.contains_key(&key) { "u" } else { "c" };
            state.insert(key, format!("n{version}"));
            json!({"before": null, "after": {"id": key, "name": format!("n{version}")}, "op": op})
        };
        // The key is plain JSON, as the converter's key side may be.
        records.push(json!({"key": format!(r#"{{"id":{key}}}"#), "value": value}));
    }
    produce(
        &topic.name,
        &Serde::Json(schema),
        Some(&Serde::String),
        &records,
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.max_records = 30;
    config.topic_settings = "format = \"debezium\"\nencoding = \"json-schema\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM products ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows.into_iter().collect::<BTreeMap<_, _>>(), state);
    assert!(sink.stop().success());
}

const JSON_SCHEMA_KEY: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"ItemKey","type":"object",
  "properties":{"id":{"type":"integer"}},"required":["id"]}"#;

const JSON_SCHEMA_ITEM: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Item","type":"object",
  "properties":{"name":{"type":"string"},"qty":{"type":"integer"},"ratio":{"type":"number"},
    "flag":{"type":"boolean"},"at":{"type":"string","format":"date-time"},
    "tags":{"type":"array","items":{"type":"string"}},"note":{"type":["string","null"]}},
  "required":["qty"]}"#;

/// JSON Schema keys with upsert and tombstones: the key (its own subject and schema id, after
/// the wire header) gives the upsert key column, a tombstone deletes its row, and every column
/// ends as the last record per key wrote it.
#[tokio::test(flavor = "multi_thread")]
async fn json_schema_keys_upsert_and_delete() {
    use std::collections::BTreeMap;
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty bigint NOT NULL, \
             ratio double precision, flag boolean, at timestamptz, tags jsonb, note text)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    // Every column but the key as PostgreSQL prints it (`::text`, timestamps in UTC), by key.
    let mut expected: BTreeMap<i64, [Option<String>; 7]> = BTreeMap::new();
    let mut records = Vec::new();
    for i in 0..600i64 {
        let key = i * 37 % 90;
        let partition = (key % 2) as i32;
        if i % 7 == 3 {
            records.push(json!({"key": {"id": key}, "value": null, "partition": partition}));
            expected.remove(&key);
            continue;
        }
        let qty = i * 1_000_000_007;
        let ratio = i as f64 / 8.0;
        let second = i % 60;
        let note = (i % 3 == 0).then(|| format!("note \"{i}\""));
        let value = json!({"name": format!("n{i}"), "qty": qty, "ratio": ratio, "flag": i % 2 == 0,
            "at": format!("2024-05-06T07:08:{second:02}.123456Z"), "tags": ["a", format!("t{i}")],
            "note": note});
        expected.insert(
            key,
            [
                Some(format!("n{i}")),
                Some(qty.to_string()),
                Some(ratio.to_string()),
                Some((i % 2 == 0).to_string()),
                Some(format!("2024-05-06 07:08:{second:02}.123456+00")),
                Some(format!(r#"["a", "t{i}"]"#)),
                note,
            ],
        );
        records.push(json!({"key": {"id": key}, "value": value, "partition": partition}));
    }
    produce(
        &topic.name,
        &Serde::Json(JSON_SCHEMA_ITEM),
        Some(&Serde::Json(JSON_SCHEMA_KEY)),
        &records,
    )
    .await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.max_records = 41;
    config.topic_settings = "format = \"json-schema\"\nkey_format = \"json-schema\"\nmode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let actual: BTreeMap<i64, Vec<Option<String>>> = db
        .rows_as_text(
            "items",
            &["id", "name", "qty", "ratio", "flag", "at", "tags", "note"],
        )
        .await
        .into_iter()
        .map(|row| {
            let id = row[0].as_deref().and_then(|id| id.parse().ok()).unwrap();
            (id, row[1..].to_vec())
        })
        .collect();
    let expected: BTreeMap<i64, Vec<Option<String>>> = expected
        .into_iter()
        .map(|(id, row)| (id, row.to_vec()))
        .collect();
    assert!(
        !expected.is_empty() && expected.len() < 90,
        "{}",
        expected.len()
    );
    assert_eq!(actual, expected);
    assert!(sink.stop().success());
}
