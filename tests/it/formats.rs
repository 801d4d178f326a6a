//! Write modes and record formats end to end: upserts with tombstones, explicit mappings,
//! raw values, Kafka Connect JSON, Debezium change events and pattern subscriptions.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

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
    let schema = r#"{"type":"struct","name":"product","optional":false,"fields":[
        {"field":"id","type":"int32","optional":false},
        {"field":"name","type":"string","optional":true},
        {"field":"price","type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"}},
        {"field":"day","type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1},
        {"field":"at","type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1},
        {"field":"blob","type":"bytes","optional":true}]}"#;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let value = |id: i32, price: i64| {
        format!(
            r#"{{"schema":{schema},"payload":{{"id":{id},"name":"p{id}","price":"{}","day":19675,"at":1700000000123,"blob":"{}"}}}}"#,
            b64(&price.to_be_bytes()[6..]),
            b64(&[0, 1, 2])
        )
    };
    let records = vec![
        RawRecord::json(0, &value(1, 12345)),
        RawRecord::json(0, &value(2, -5)),
    ];
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

/// A Debezium change event for table `customers`, with or without the schema envelope.
fn debezium(
    op: &str,
    before: Option<(i32, &str)>,
    after: Option<(i32, &str)>,
    with_schema: bool,
) -> (String, String) {
    let row = |r: Option<(i32, &str)>| match r {
        Some((id, name)) => format!(r#"{{"id":{id},"name":"{name}","since":19675}}"#),
        None => "null".into(),
    };
    let id = after.or(before).map(|(id, _)| id).unwrap();
    let payload = format!(
        r#"{{"before":{},"after":{},"source":{{"connector":"postgresql","table":"customers"}},"op":"{op}","ts_ms":1700000000000}}"#,
        row(before),
        row(after)
    );
    let row_schema = r#"{"type":"struct","optional":true,"fields":[{"field":"id","type":"int32"},{"field":"name","type":"string"},{"field":"since","type":"int32","name":"io.debezium.time.Date"}]}"#;
    if with_schema {
        let schema = format!(
            r#"{{"type":"struct","fields":[{},{},{{"field":"op","type":"string"}}]}}"#,
            row_schema.replacen(
                "{\"type\":\"struct\"",
                "{\"field\":\"before\",\"type\":\"struct\"",
                1
            ),
            row_schema.replacen(
                "{\"type\":\"struct\"",
                "{\"field\":\"after\",\"type\":\"struct\"",
                1
            )
        );
        (
            format!(
                r#"{{"schema":{{"type":"struct","fields":[{{"field":"id","type":"int32"}}]}},"payload":{{"id":{id}}}}}"#
            ),
            format!(r#"{{"schema":{schema},"payload":{payload}}}"#),
        )
    } else {
        (format!(r#"{{"id":{id}}}"#), payload)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn debezium_changes_replicate_the_source_state() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, since date)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    /// (op, before, after) with rows as (id, name)
    type Change = (
        &'static str,
        Option<(i32, &'static str)>,
        Option<(i32, &'static str)>,
    );
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
    for (i, (op, before, after)) in events.iter().enumerate() {
        let (key, value) = debezium(op, *before, *after, i % 2 == 0);
        let id = after.or(*before).unwrap().0;
        records.push(RawRecord {
            partition: id % 2,
            key: Some(key.clone().into_bytes()),
            value: Some(value.into_bytes()),
            ..Default::default()
        });
        if *op == "d" {
            // Debezium follows a delete with a tombstone for log compaction.
            records.push(RawRecord {
                partition: id % 2,
                key: Some(key.into_bytes()),
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
    let decimal = |field: &str| {
        format!(
            r#"{{"field":"{field}","type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{{"scale":"2"}}}}"#
        )
    };
    let schema = format!(
        r#"{{"type":"struct","optional":false,"fields":[{{"field":"id","type":"int32"}},{},{}]}}"#,
        decimal("price"),
        decimal("exact")
    );
    let b64 = |unscaled: i64| {
        let bytes = unscaled.to_be_bytes();
        // The shortest two's-complement form, as Connect writes it.
        let skip = (0..7)
            .take_while(|&i| {
                (bytes[i] == 0 && bytes[i + 1] & 0x80 == 0)
                    || (bytes[i] == 0xff && bytes[i + 1] & 0x80 != 0)
            })
            .count();
        format!(
            "\"{}\"",
            base64::engine::general_purpose::STANDARD.encode(&bytes[skip..])
        )
    };
    // (id, price, exact) as the payload writes them: base64 (decimal.format=BASE64, the
    // default) or JSON numbers (decimal.format=NUMERIC).
    let payloads = [
        (1, b64(12345), b64(-5)),
        (2, "123.45".to_string(), "-0.05".to_string()),
        (3, b64(-1), b64(1_234_567_890_123_456_789)),
        (4, "-0.01".to_string(), "12345678901234567.89".to_string()),
        // A number is taken as written: the column's own scale applies, as to any number.
        (5, "0.005".to_string(), "1.5".to_string()),
        (6, "0".to_string(), "1e3".to_string()),
    ];
    let records: Vec<RawRecord> = payloads
        .iter()
        .map(|(id, price, exact)| {
            RawRecord::json(
                0,
                &format!(
                    r#"{{"schema":{schema},"payload":{{"id":{id},"price":{price},"exact":{exact}}}}}"#
                ),
            )
        })
        .collect();
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
    let event = |id: i32, created: i64, local: i64, day: i64, legacy: i64| {
        format!(
            r#"{{"before":null,"after":{{"id":{id},"created_at":{created},"local_at":{local},"day":{day},"legacy_ms":{legacy}}},"op":"c","source":{{}}}}"#
        )
    };
    let schema_field = |field: &str, name: &str| {
        format!(r#"{{"field":"{field}","type":"int64","optional":true,"name":"{name}"}}"#)
    };
    // The same stream with its schema: a schema's unit wins over the topic's time_unit.
    let with_schema = format!(
        r#"{{"schema":{{"type":"struct","fields":[{{"field":"after","type":"struct","optional":true,"fields":[{{"field":"id","type":"int32"}},{},{}]}}]}},"payload":{}}}"#,
        schema_field("created_at", "io.debezium.time.Timestamp"),
        schema_field("local_at", "io.debezium.time.NanoTimestamp"),
        event(4, 1_700_000_000_123, 1_700_000_000_123_456_789, 19_675, 1)
    );
    let records = vec![
        RawRecord::json(
            0,
            &event(
                1,
                1_700_000_000_123_456,
                1_700_000_000_654_321,
                19_675,
                1_700_000_000_123,
            ),
        ),
        // Before 1970, with sub-second parts.
        RawRecord::json(0, &event(2, -1, -1_500, -1, -1)),
        RawRecord::json(0, &event(3, 0, 86_400_000_001, 0, 0)),
        RawRecord::json(0, &with_schema),
    ];
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
    let (key, create) = debezium("c", None, Some((1, "ann")), false);
    let (_, later) = debezium("c", None, Some((2, "bob")), true);
    let truncate = r#"{"before":null,"after":null,"source":{"table":"customers"},"op":"t","ts_ms":1700000000000}"#;
    let message = r#"{"op":"m","ts_ms":1700000000000,"message":{"prefix":"p","content":"eA=="}}"#;
    let records = vec![
        keyed(0, &key, Some(create)),
        keyed(0, &key, Some(truncate.into())),
        keyed(0, &key, Some(message.into())),
        keyed(0, &key, Some(later)),
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
            (1, "decode".to_string(), truncate.as_bytes().to_vec()),
            (2, "decode".to_string(), message.as_bytes().to_vec()),
        ]
    );
    let rows: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM customers ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, vec![(1, "ann".to_string()), (2, "bob".to_string())]);
}
