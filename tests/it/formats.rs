//! Write modes and record formats end to end: upserts with tombstones, explicit mappings,
//! raw values, Kafka Connect JSON, Debezium change events and pattern subscriptions.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::connect_json::{
    debezium_envelope, debezium_event, optional, serialize, serialize_with, struct_of, Described,
};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Values as records on partition 0, in order.
fn as_values(values: Vec<Option<Vec<u8>>>) -> Vec<RawRecord> {
    values
        .into_iter()
        .map(|value| RawRecord {
            value,
            ..Default::default()
        })
        .collect()
}

fn keyed(partition: i32, key: &str, value: Option<String>) -> RawRecord {
    RawRecord {
        partition,
        key: Some(key.as_bytes().to_vec()),
        value: value.map(String::into_bytes),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_applies_updates_and_tombstones_in_order_per_key() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL, n int)")
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    // 3,000 records over 100 keys: writes, and every 7th a tombstone. Plain string keys.
    let mut records = Vec::new();
    let mut expected: BTreeMap<i64, (String, i32)> = BTreeMap::new();
    for i in 0..3_000i64 {
        let key = (i * 37) % 100;
        let partition = (key % 3) as i32;
        if i % 7 == 3 {
            records.push(keyed(partition, &key.to_string(), None));
            expected.remove(&key);
        } else {
            records.push(keyed(
                partition,
                &key.to_string(),
                Some(format!(r#"{{"v":"v{i}","n":{}}}"#, i % 1000)),
            ));
            expected.insert(key, (format!("v{i}"), (i % 1000) as i32));
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "kv");
    config.max_records = 150; // every batch repeats keys and mixes writes with deletes
    config.topic_settings =
        "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let rows: Vec<(i64, String, i32)> = sqlx::query_as("SELECT id, v, n FROM kv ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let actual: BTreeMap<i64, (String, i32)> =
        rows.into_iter().map(|(id, v, n)| (id, (v, n))).collect();
    assert_eq!(actual, expected);
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn explicit_mappings_reach_nested_fields_and_name_what_is_missing() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE shipments (
                order_id bigint NOT NULL, city text NOT NULL, first_sku text, source text NOT NULL,
                trace text, doc jsonb, received timestamptz NOT NULL DEFAULT now(), note text DEFAULT 'n/a')",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let good = |id: i64| {
        format!(
            r#"{{"order":{{"id":{id},"address":{{"city":"Lyon"}}}},"items":[{{"sku":"s{id}"}},{{"sku":"x"}}],"note":"ignored"}}"#
        )
    };
    let mut records: Vec<RawRecord> = (0..5)
        .map(|i| RawRecord {
            headers: vec![("trace".into(), Some(format!("t{i}").into_bytes()))],
            ..RawRecord::json(0, &good(i))
        })
        .collect();
    records.push(RawRecord::json(
        0,
        r#"{"order":{"id":99,"address":{}},"items":[]}"#,
    ));
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "shipments");
    config.metadata = String::new();
    config.topic_settings = r#"map_by_name = false
[topics.columns]
order_id = "/order/id"
city = "/order/address/city"
first_sku = "/items/0/sku"
source = { const = "kafka" }
trace = "meta:header:trace"
doc = "value:"
note = "default""#
        .into();
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the record without a city stops the sink");
    assert!(!status.success());
    let logs = sink.logs();
    assert!(
        logs.contains(&format!("{}/0@5", topic.name))
            && logs.contains("city")
            && logs.contains("/order/address/city"),
        "{}",
        sink.logs_tail(10)
    );
    /// order_id, city, first_sku, source, trace, doc, note
    type Shipment = (
        i64,
        String,
        Option<String>,
        String,
        Option<String>,
        serde_json::Value,
        String,
    );
    let rows: Vec<Shipment> = sqlx::query_as(
        "SELECT order_id, city, first_sku, source, trace, doc, note FROM shipments ORDER BY order_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 5, "the five good records, and only them");
    for (i, (id, city, sku, source, trace, doc, note)) in rows.into_iter().enumerate() {
        assert_eq!(
            (
                id,
                city.as_str(),
                sku.as_deref(),
                source.as_str(),
                note.as_str()
            ),
            (
                i as i64,
                "Lyon",
                Some(format!("s{i}").as_str()),
                "kafka",
                "n/a"
            )
        );
        assert_eq!(trace, Some(format!("t{i}")));
        assert_eq!(
            doc,
            serde_json::from_str::<serde_json::Value>(&good(i as i64)).unwrap()
        );
    }
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(5))]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_values_land_whole_with_their_metadata() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE events (body jsonb NOT NULL, k text, off bigint PRIMARY KEY)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let values = [r#"{"a":1}"#, "[1,2,3]", r#""just a string""#, "42"];
    let records: Vec<RawRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| RawRecord {
            key: Some(format!("k{i}").into_bytes()),
            ..RawRecord::json(0, v)
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "events");
    config.topic_settings = "format = \"raw\"\nraw_column = \"body\"".into();
    config.metadata = "key = \"k\"\noffset = \"off\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT body::text, k FROM events ORDER BY off")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expected: Vec<(String, String)> = ["{\"a\": 1}", "[1, 2, 3]", "\"just a string\"", "42"]
        .iter()
        .enumerate()
        .map(|(i, v)| (v.to_string(), format!("k{i}")))
        .collect();
    assert_eq!(rows, expected);
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_json_records_load_with_their_schema() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE products (id int PRIMARY KEY, name text, price numeric(10,2), day date, at timestamptz, blob bytea)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let schema = struct_of(
        "product",
        &[
            ("id", json!("int32")),
            ("name", optional(json!("string"))),
            ("price", optional(json!({"logical": "Decimal", "scale": 2}))),
            ("day", optional(json!({"logical": "Date"}))),
            ("at", optional(json!({"logical": "Timestamp"}))),
            ("blob", optional(json!("bytes"))),
        ],
    );
    let value = |id: i32, price: &str| {
        let product = json!({"id": id, "name": format!("p{id}"), "price": price,
            "day": "2023-11-14", "at": "2023-11-14T22:13:20.123Z", "blob": "AAEC"});
        Described::new(schema.clone(), product)
    };
    let records = as_values(serialize(true, &[value(1, "123.45"), value(2, "-0.05")]));
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.topic_settings = "format = \"connect-json\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i32, String, String, String, String, String)> = sqlx::query_as(
        "SELECT id, name, price::text, day::text, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), encode(blob, 'hex')
           FROM products ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                1,
                "p1".into(),
                "123.45".into(),
                "2023-11-14".into(),
                "2023-11-14 22:13:20.123".into(),
                "000102".into()
            ),
            (
                2,
                "p2".into(),
                "-0.05".into(),
                "2023-11-14".into(),
                "2023-11-14 22:13:20.123".into(),
                "000102".into()
            ),
        ]
    );
    assert!(sink.stop().success());
}

/// (op, before, after) with rows as (id, name)
type Change = (
    &'static str,
    Option<(i32, &'static str)>,
    Option<(i32, &'static str)>,
);

/// Debezium change events for table `customers` as the connector writes them with
/// JsonConverter: (key, value) of each, with the schema envelope (`schemas.enable=true`) when
/// `with_schema` says so for its index, else without.
fn debezium(events: &[Change], with_schema: impl Fn(usize) -> bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let schema = debezium_envelope(
        "dbserver1.inventory.customers",
        struct_of(
            "dbserver1.inventory.customers.Value",
            &[
                ("id", json!("int32")),
                ("name", json!("string")),
                ("since", json!({"debezium": "Date"})),
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
    let described: Vec<Described> = events
        .iter()
        .flat_map(|&(op, before, after)| {
            let id = after.or(before).map(|(id, _)| id).unwrap();
            [
                Described::new(key_schema.clone(), json!({ "id": id })),
                Described::new(schema.clone(), debezium_event(op, row(before), row(after))),
            ]
        })
        .collect();
    // One JVM per converter setting, then each event takes its own.
    let enabled = serialize(true, &described);
    let disabled = serialize(false, &described);
    (0..events.len())
        .map(|i| {
            let bytes = if with_schema(i) { &enabled } else { &disabled };
            (
                bytes[2 * i].clone().expect("a key"),
                bytes[2 * i + 1].clone().expect("a value"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn debezium_changes_replicate_the_source_state() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, since date)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let events: Vec<Change> = vec![
        ("r", None, Some((4, "snap"))),
        ("c", None, Some((1, "ann"))),
        ("c", None, Some((2, "bob"))),
        ("c", None, Some((3, "cy"))),
        ("u", Some((2, "bob")), Some((2, "bobby"))),
        ("d", Some((1, "ann")), None),
        ("u", Some((3, "cy")), Some((3, "cyril"))),
        ("c", None, Some((1, "ann again"))),
        ("d", Some((4, "snap")), None),
    ];
    let mut records = Vec::new();
    let written = debezium(&events, |i| i % 2 == 0);
    for ((op, before, after), (key, value)) in events.iter().zip(written) {
        let id = after.or(*before).unwrap().0;
        records.push(RawRecord {
            partition: id % 2,
            key: Some(key.clone()),
            value: Some(value),
            ..Default::default()
        });
        if *op == "d" {
            // Debezium follows a delete with a tombstone for log compaction.
            records.push(RawRecord {
                partition: id % 2,
                key: Some(key),
                ..Default::default()
            });
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.topic_settings = "format = \"debezium\"".into();
    config.metadata = String::new();
    config.max_records = 3;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i32, String, String)> =
        sqlx::query_as("SELECT id, name, since::text FROM customers ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, "ann again".into(), "2023-11-14".into()),
            (2, "bobby".into(), "2023-11-14".into()),
            (3, "cyril".into(), "2023-11-14".into()),
        ]
    );
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pattern_subscription_picks_up_a_topic_created_while_running() {
    let db = TestDb::migrated().await;
    let prefix = format!("pat-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let first = TestTopic::create_named(&format!("{prefix}-first"), 2).await;
    let table_of = |t: &TestTopic| format!("in_{}", t.name.replace('-', "_"));
    db.create_orders_table(&table_of(&first)).await;
    crate::helpers::kafka::produce_orders(&producer(), &first, 0, 500).await;

    let mut config = SinkConfig::new(&db.url, "unused", "unused");
    let toml = config.toml().replace(
        "name = \"unused\"\ntable = \"unused\"",
        &format!("pattern = \"{prefix}-.*\"\ntable = \"in_{{topic}}\""),
    );
    config.extra = String::new();
    let file = ConfigFile::new(&toml);
    let path = file.path();
    let mut sink = Sink::start_file(path, "sink");
    wait_drained(&db, &config.group, &first, Duration::from_secs(60)).await;
    assert_exactly_once(&db, &table_of(&first), 500).await;

    // A topic that did not exist when the sink started.
    let second = TestTopic::create_named(&format!("{prefix}-second"), 3).await;
    db.create_orders_table(&table_of(&second)).await;
    crate::helpers::kafka::produce_orders(&producer(), &second, 0, 700).await;
    wait_drained(&db, &config.group, &second, Duration::from_secs(90)).await;
    assert_exactly_once(&db, &table_of(&second), 700).await;
    assert!(
        sink.logs().contains("new topic routed"),
        "{}",
        sink.logs_tail(20)
    );
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn key_from_offset_makes_every_record_its_own_row() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    db.pool
        .execute("ALTER TABLE orders ADD PRIMARY KEY (kafka_partition, kafka_offset)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    crate::helpers::kafka::produce_orders(&producer(), &topic, 0, 1_000).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings =
        "mode = \"upsert\"\nkey_from = \"offset\"\nkey = [\"kafka_partition\", \"kafka_offset\"]"
            .into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_exactly_once(&db, "orders", 1_000).await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_decimals_load_from_base64_and_from_json_numbers() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE prices (id int PRIMARY KEY, price numeric(10,2), exact numeric)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let schema = struct_of(
        "prices",
        &[
            ("id", json!("int32")),
            ("price", optional(json!({"logical": "Decimal", "scale": 2}))),
            ("exact", optional(json!({"logical": "Decimal", "scale": 2}))),
        ],
    );
    let value = |id: i32, price: &str, exact: &str| {
        Described::new(
            schema.clone(),
            json!({"id": id, "price": price, "exact": exact}),
        )
    };
    // Base64 (decimal.format=BASE64, the default) and JSON numbers (NUMERIC), as the
    // converter writes them.
    let base64 = serialize_with(
        true,
        None,
        &[
            value(1, "123.45", "-0.05"),
            value(3, "-0.01", "12345678901234567.89"),
        ],
    );
    let numeric = serialize_with(
        true,
        Some("NUMERIC"),
        &[
            value(2, "123.45", "-0.05"),
            value(4, "-0.01", "12345678901234567.89"),
        ],
    );
    let numeric_text = String::from_utf8(numeric[0].clone().unwrap()).unwrap();
    assert!(numeric_text.contains(r#""price":123.45"#), "{numeric_text}");
    // What no converter writes (a number with more decimals than the scale, an exponent) is
    // read as any number: the column's own scale applies. Written into the converter's own
    // envelope.
    let hand = |id: i32, price: &str, exact: &str| {
        numeric_text
            .replace(r#""id":2"#, &format!(r#""id":{id}"#))
            .replace(r#""price":123.45"#, &format!(r#""price":{price}"#))
            .replace(r#""exact":-0.05"#, &format!(r#""exact":{exact}"#))
    };
    let mut records = as_values(vec![
        base64[0].clone(),
        numeric[0].clone(),
        base64[1].clone(),
        numeric[1].clone(),
    ]);
    records.push(RawRecord::json(0, &hand(5, "0.005", "1.5")));
    records.push(RawRecord::json(0, &hand(6, "0", "1e3")));
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "prices");
    config.topic_settings = "format = \"connect-json\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i32, String, String)> =
        sqlx::query_as("SELECT id, price::text, exact::text FROM prices ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expected: Vec<(i32, String, String)> = [
        (1, "123.45", "-0.05"),
        (2, "123.45", "-0.05"),
        (3, "-0.01", "12345678901234567.89"),
        (4, "-0.01", "12345678901234567.89"),
        (5, "0.01", "1.5"),
        (6, "0.00", "1000"),
    ]
    .iter()
    .map(|(id, p, e)| (*id, p.to_string(), e.to_string()))
    .collect();
    assert_eq!(rows, expected);
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn schemaless_debezium_microseconds_land_exactly_with_their_time_unit() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE visits (id int PRIMARY KEY, created_at timestamptz, local_at timestamp,
                                  day date, legacy_ms timestamptz)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Debezium with schemas.enable=false: MicroTimestamp as bare microseconds, Date as days.
    let row = |created: &str, local: &str, legacy: Value| {
        debezium_envelope(
            "dbserver1.public.visits",
            struct_of(
                "dbserver1.public.visits.Value",
                &[
                    ("id", json!("int32")),
                    ("created_at", optional(json!({ "debezium": created }))),
                    ("local_at", optional(json!({ "debezium": local }))),
                    ("day", optional(json!({"debezium": "Date"}))),
                    ("legacy_ms", legacy),
                ],
            ),
        )
    };
    let schemaless = row(
        "MicroTimestamp",
        "MicroTimestamp",
        optional(json!({"debezium": "Timestamp"})),
    );
    let event = |id: i32, created: i64, local: i64, day: i64, legacy: i64| json!({"id": id, "created_at": created, "local_at": local, "day": day, "legacy_ms": legacy});
    let create = |schema: &Value, after: Value| {
        Described::new(schema.clone(), debezium_event("c", Value::Null, after))
    };
    let mut records = as_values(serialize(
        false,
        &[
            create(
                &schemaless,
                event(
                    1,
                    1_700_000_000_123_456,
                    1_700_000_000_654_321,
                    19_675,
                    1_700_000_000_123,
                ),
            ),
            // Before 1970, with sub-second parts.
            create(&schemaless, event(2, -1, -1_500, -1, -1)),
            create(&schemaless, event(3, 0, 86_400_000_001, 0, 0)),
        ],
    ));
    // The same stream with its schema: a schema's unit wins over the topic's time_unit (and
    // a field without one, legacy_ms, takes its time_units entry).
    let with_schema = row("Timestamp", "NanoTimestamp", optional(json!("int64")));
    records.extend(as_values(serialize(
        true,
        &[create(
            &with_schema,
            event(4, 1_700_000_000_123, 1_700_000_000_123_456_789, 19_675, 1),
        )],
    )));
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "visits");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\ntime_unit = \"us\"\n\
                             [topics.time_units]\nday = \"days\"\nlegacy_ms = \"ms\""
        .into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i32, String, String, String, String)> = sqlx::query_as(
        "SELECT id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
                to_char(local_at, 'YYYY-MM-DD HH24:MI:SS.US'), day::text,
                to_char(legacy_ms AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
           FROM visits ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected: Vec<(i32, String, String, String, String)> = [
        (
            1,
            "2023-11-14 22:13:20.123456",
            "2023-11-14 22:13:20.654321",
            "2023-11-14",
            "2023-11-14 22:13:20.123000",
        ),
        (
            2,
            "1969-12-31 23:59:59.999999",
            "1969-12-31 23:59:59.998500",
            "1969-12-31",
            "1969-12-31 23:59:59.999000",
        ),
        (
            3,
            "1970-01-01 00:00:00.000000",
            "1970-01-02 00:00:00.000001",
            "1970-01-01",
            "1970-01-01 00:00:00.000000",
        ),
        (
            4,
            "2023-11-14 22:13:20.123000",
            "2023-11-14 22:13:20.123456",
            "2023-11-14",
            "1970-01-01 00:00:00.001000",
        ),
    ]
    .iter()
    .map(|(id, c, l, d, m)| {
        (
            *id,
            c.to_string(),
            l.to_string(),
            d.to_string(),
            m.to_string(),
        )
    })
    .collect();
    assert_eq!(rows, expected);
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn debezium_truncates_and_messages_stop_the_sink_or_become_decode_dead_letters() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, since date)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let written = debezium(
        &[("c", None, Some((1, "ann"))), ("c", None, Some((2, "bob")))],
        |i| i == 1,
    );
    let key = written[0].0.clone();
    // The truncate as the connector writes it without the schema (Envelope.truncate); the
    // message event as Debezium's logical-decoding messages look, which debezium-core does
    // not build.
    let source = struct_of(
        "source",
        &[("db", json!("string")), ("table", json!("string"))],
    );
    let truncate = serialize(
        false,
        &[Described::new(
            json!({"envelope": {"name": "dbserver1.inventory.customers.Envelope",
                "row": optional(struct_of("row", &[("id", json!("int32"))])), "source": source}}),
            json!({"op": "t", "source": {"db": "inventory", "table": "customers"}, "ts_ms": 1_700_000_000_000i64}),
        )],
    )[0]
    .clone()
    .expect("a truncate event");
    let message = br#"{"op":"m","ts_ms":1700000000000,"message":{"prefix":"p","content":"eA=="}}"#;
    let record = |value: &[u8]| RawRecord {
        key: Some(key.clone()),
        value: Some(value.to_vec()),
        ..Default::default()
    };
    let records = vec![
        record(&written[0].1),
        record(&truncate),
        record(message),
        record(&written[1].1),
    ];
    produce_raw(&producer(), &topic.name, &records).await;

    // on_error = "fail": the truncate stops the sink at its offset; nothing after it is written.
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.topic_settings = "format = \"debezium\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "fail");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the truncate should stop the sink\n{}", sink.logs_tail(20)));
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(20));
    assert!(
        sink.logs().contains(&format!("{}/0@1", topic.name)),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(1))],
        "the position rests on the truncate"
    );
    let rows: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM customers ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, vec![(1, "ann".to_string())]);

    // on_error = "dead_letter": both become `decode` dead letters and the sink goes on.
    config.group = format!("{}-dl", config.group);
    config.topic_settings = "format = \"debezium\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "dead-letter");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let letters: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(
        "SELECT \"offset\", error_kind, value FROM kafka_dead_letters WHERE consumer_group = $1 ORDER BY 1",
    )
    .bind(&config.group)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        letters,
        vec![
            (1, "decode".to_string(), truncate.clone()),
            (2, "decode".to_string(), message.to_vec()),
        ]
    );
    let rows: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM customers ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, vec![(1, "ann".to_string()), (2, "bob".to_string())]);
}
