//! Protobuf and JSON Schema through the real Schema Registry and the real broker: records
//! encoded with prost-reflect from the registered `.proto` (message indexes in the header,
//! as Confluent's serializer writes them), and JSON with a registered JSON Schema.
//! The schema imports the well-known types the way producers do (`Timestamp`, wrappers).

use std::time::Duration;

use prost_reflect::prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value};
use sqlx::Executor;

use kafka_pg_sink::registry::SchemaKind;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::{framed, register, registry_url};
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

/// Compiles the schema the way the sink will get it from the registry.
fn pool() -> DescriptorPool {
    crate::helpers::registry::compile_proto("order.proto", PROTO)
}

/// Order `i` as a message, and its row as PostgreSQL prints it.
fn order(pool: &DescriptorPool, i: i64) -> (Vec<u8>, Vec<Option<String>>) {
    let desc = pool.get_message_by_name("kps.test.Order").unwrap();
    let mut m = DynamicMessage::new(desc.clone());
    let blob: Vec<u8> = (0..(i % 5) as u8).map(|b| b ^ 0x5a).collect();
    m.set_field_by_name("id", Value::I64(i));
    m.set_field_by_name("small", Value::I32(-(i as i32)));
    m.set_field_by_name("big", Value::U64(u64::MAX - i as u64));
    m.set_field_by_name("flag", Value::Bool(i % 2 == 1));
    m.set_field_by_name("ratio", Value::F64(i as f64 / 4.0));
    m.set_field_by_name("name", Value::String(format!("o{i} \u{e9}")));
    m.set_field_by_name("blob", Value::Bytes(blob.clone().into()));
    m.set_field_by_name("status", Value::EnumNumber((i % 3) as i32));
    let seconds = 1_700_000_000 + i * 61;
    let nanos = (i * 1_001_000 % 1_000_000_000) as i32;
    let ts_desc = pool
        .get_message_by_name("google.protobuf.Timestamp")
        .unwrap();
    let mut ts = DynamicMessage::new(ts_desc);
    ts.set_field_by_name("seconds", Value::I64(seconds));
    ts.set_field_by_name("nanos", Value::I32(nanos));
    m.set_field_by_name("at", Value::Message(ts));
    if i % 3 != 0 {
        let sv = pool
            .get_message_by_name("google.protobuf.StringValue")
            .unwrap();
        let mut note = DynamicMessage::new(sv);
        note.set_field_by_name("value", Value::String(format!("n{i}")));
        m.set_field_by_name("note", Value::Message(note));
    }
    m.set_field_by_name(
        "tags",
        Value::List(vec![
            Value::String("a".into()),
            Value::String(format!("t{i}")),
        ]),
    );
    m.set_field_by_name(
        "attrs",
        Value::Map(
            [(MapKey::String("n".into()), Value::I64(i))]
                .into_iter()
                .collect(),
        ),
    );
    let line_desc = pool.get_message_by_name("kps.test.Order.Line").unwrap();
    let mut line = DynamicMessage::new(line_desc);
    line.set_field_by_name("sku", Value::String(format!("s{i}")));
    line.set_field_by_name("qty", Value::I32(i as i32 % 10));
    m.set_field_by_name("line", Value::Message(line));
    if i % 4 == 1 {
        m.set_field_by_name("maybe", Value::String(format!("m{i}")));
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
    // Confluent's framing after the schema id: the message-index array, [1] for the second
    // top-level message (zigzag varints: count 1, index 1).
    let mut payload = vec![2, 2];
    payload.extend(m.encode_to_vec());
    (payload, row)
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
    let id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Protobuf,
        PROTO,
    )
    .await;
    let pool = pool();
    let mut expected = Vec::new();
    let mut records = Vec::new();
    for i in 0..200 {
        let (payload, row) = order(&pool, i);
        expected.push(row);
        records.push(RawRecord {
            partition: (i % 2) as i32,
            value: Some(framed(id, &payload)),
            ..Default::default()
        });
    }
    produce_raw(&producer(), &topic.name, &records).await;

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
    let id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Json,
        JSON_SCHEMA,
    )
    .await;
    let records: Vec<RawRecord> = (0..100)
        .map(|i| RawRecord {
            value: Some(framed(
                id,
                format!(
                    r#"{{"id":{i},"name":"n{i}","at":"2024-01-02T03:04:{:02}Z"}}"#,
                    i % 60
                )
                .as_bytes(),
            )),
            ..Default::default()
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
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
    let value_id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Protobuf,
        DEBEZIUM_PROTO,
    )
    .await;
    let key_id = register(
        &format!("{}-key", topic.name),
        SchemaKind::Protobuf,
        DEBEZIUM_PROTO,
    )
    .await;
    let pool = crate::helpers::registry::compile_proto("d.proto", DEBEZIUM_PROTO);
    let message = |name: &str| {
        DynamicMessage::new(
            pool.get_message_by_name(&format!("dbserver1.inventory.products.{name}"))
                .unwrap(),
        )
    };
    let row = |id: i32, version: i64| {
        let mut v = message("Value");
        v.set_field_by_name("id", Value::I32(id));
        v.set_field_by_name("name", Value::String(format!("p{id}-v{version}")));
        if version % 2 == 0 {
            v.set_field_by_name("qty", Value::I64(version * 1_000_000_007));
        }
        v
    };
    let mut state: BTreeMap<i32, (String, Option<i64>)> = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..600i64 {
        let id = (version * 37 % 50) as i32;
        let mut key = message("Key");
        key.set_field_by_name("id", Value::I32(id));
        // Index [2]: the third message, `Key`.
        let mut key_bytes = vec![2, 4];
        key_bytes.extend(key.encode_to_vec());
        let mut envelope = message("Envelope");
        let op = if state.contains_key(&id) && version % 4 == 0 {
            envelope.set_field_by_name("before", Value::Message(row(id, version - 1)));
            state.remove(&id);
            "d"
        } else {
            let r = row(id, version);
            envelope.set_field_by_name("after", Value::Message(r));
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
        envelope.set_field_by_name("op", Value::String(op.into()));
        envelope.set_field_by_name("ts_ms", Value::I64(1_700_000_000_000 + version));
        // Index [0] as the single byte 0, as Confluent's serializer writes it.
        let mut value = vec![0];
        value.extend(envelope.encode_to_vec());
        let partition = id % 2;
        records.push(RawRecord {
            partition,
            key: Some(framed(key_id, &key_bytes)),
            value: Some(framed(value_id, &value)),
            ..Default::default()
        });
        if op == "d" {
            records.push(RawRecord {
                partition,
                key: Some(framed(key_id, &key_bytes)),
                value: None,
                ..Default::default()
            });
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
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
    let id = register(&format!("{}-value", topic.name), SchemaKind::Json, schema).await;
    let mut state: BTreeMap<i32, String> = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..300i32 {
        let key = version * 7 % 40;
        let value = if state.contains_key(&key) && version % 3 == 0 {
            state.remove(&key);
            format!(r#"{{"before":{{"id":{key},"name":"old"}},"after":null,"op":"d"}}"#)
        } else {
            let op = if state.contains_key(&key) { "u" } else { "c" };
            state.insert(key, format!("n{version}"));
            format!(r#"{{"before":null,"after":{{"id":{key},"name":"n{version}"}},"op":"{op}"}}"#)
        };
        records.push(RawRecord {
            key: Some(format!(r#"{{"id":{key}}}"#).into_bytes()),
            value: Some(framed(id, value.as_bytes())),
            ..Default::default()
        });
    }
    produce_raw(&producer(), &topic.name, &records).await;
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
    let key_id = register(
        &format!("{}-key", topic.name),
        SchemaKind::Json,
        JSON_SCHEMA_KEY,
    )
    .await;
    let value_id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Json,
        JSON_SCHEMA_ITEM,
    )
    .await;
    assert_ne!(key_id, value_id);
    // Every column but the key as PostgreSQL prints it (`::text`, timestamps in UTC), by key.
    let mut expected: BTreeMap<i64, [Option<String>; 7]> = BTreeMap::new();
    let mut records = Vec::new();
    for i in 0..600i64 {
        let key = i * 37 % 90;
        let partition = (key % 2) as i32;
        let key_bytes = framed(key_id, format!(r#"{{"id":{key}}}"#).as_bytes());
        if i % 7 == 3 {
            records.push(RawRecord {
                partition,
                key: Some(key_bytes),
                value: None,
                ..Default::default()
            });
            expected.remove(&key);
            continue;
        }
        let qty = i * 1_000_000_007;
        let ratio = i as f64 / 8.0;
        let second = i % 60;
        let note = (i % 3 == 0).then(|| format!("note \"{i}\""));
        let value = format!(
            r#"{{"name":"n{i}","qty":{qty},"ratio":{ratio},"flag":{},"at":"2024-05-06T07:08:{second:02}.123456Z","tags":["a","t{i}"],"note":{}}}"#,
            i % 2 == 0,
            note.as_deref()
                .map_or("null".to_string(), |n| serde_json::to_string(n).unwrap()),
        );
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
        records.push(RawRecord {
            partition,
            key: Some(key_bytes),
            value: Some(framed(value_id, value.as_bytes())),
            ..Default::default()
        });
    }
    produce_raw(&producer(), &topic.name, &records).await;
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
