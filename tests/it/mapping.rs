//! Row mapping against real tables: every supported type, metadata columns, several topics,
//! and a record that cannot be mapped.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

const TYPED_TABLE: &str = "
    CREATE TYPE mood AS ENUM ('happy', 'sad');
    CREATE TABLE typed (
        t text, v varchar(10), e mood, s2 smallint, i4 integer, i8 bigint,
        n numeric, n2 numeric(10,3), f4 real, f8 double precision, b boolean,
        tstz timestamptz, ts timestamp, d date, u uuid, j json, jb jsonb, by bytea,
        m_topic text, m_partition int, m_offset bigint, m_ts timestamptz, m_key text, m_headers jsonb,
        defaulted text NOT NULL DEFAULT 'dflt',
        nullable text
    )";

#[tokio::test(flavor = "multi_thread")]
async fn every_supported_type_and_metadata_column_round_trips() {
    let db = TestDb::migrated().await;
    db.pool.execute(TYPED_TABLE).await.unwrap();
    let topic = TestTopic::create(1).await;
    let first = r#"{"t":"h\u00e9llo \"quoted\"\n","v":"short","e":"happy","s2":-32768,"i4":2147483647,
        "i8":"9007199254740993","n":"-12345678901234567890.000000000000000001","n2":1.5,"f4":1.25,
        "f8":-2.5e-3,"b":true,"tstz":"2024-02-29T12:34:56.789+02:00","ts":"2024-02-29T12:34:56",
        "d":"2024-02-29","u":"0b5a3c2e-9f1d-4c7a-8e2b-1f0a9d8c7b6a","j":{"a":[1,2,{"b":null}]},
        "jb":{"z":1,"a":"x"},"by":"AAEC/w==","nullable":null,"unknown":[1]}"#;
    let second = r#"{"i4":"42","n":1e3,"n2":"-0.0005","f4":"NaN","b":false,"tstz":1709210096789,
        "ts":1709210096000,"d":1709210096000,"defaulted":"given","nullable":"x"}"#;
    let records = vec![
        RawRecord {
            key: Some(b"key-1".to_vec()),
            headers: vec![("h1".into(), Some(b"v1".to_vec())), ("empty".into(), None)],
            timestamp_ms: Some(1_700_000_000_123),
            ..RawRecord::json(0, first)
        },
        RawRecord::json(0, second),
    ];
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "typed");
    config.extra = String::new();
    let toml = config.toml().replace(
        "partition = \"kafka_partition\"\noffset = \"kafka_offset\"",
        "topic = \"m_topic\"\npartition = \"m_partition\"\noffset = \"m_offset\"\ntimestamp = \"m_ts\"\nkey = \"m_key\"\nheaders = \"m_headers\"",
    );
    let file = ConfigFile::new(&toml);
    let path = file.path();
    let mut sink = SinkProcess::new(path.to_str().unwrap());
    wait_until("two rows", Duration::from_secs(60), || async {
        db.count("typed").await == 2
    })
    .await;
    sink.stop();

    let row: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT unnest(ARRAY[t, v, e::text, s2::text, i4::text, i8::text, n::text, n2::text, f4::text, f8::text,
                b::text, (extract(epoch FROM tstz) * 1000)::int8::text, ts::text, d::text, u::text, j::text,
                jb::text, encode(by, 'hex'), m_topic, m_partition::text, m_offset::text,
                (extract(epoch FROM m_ts) * 1000)::int8::text, m_key, m_headers::text, defaulted, nullable])
           FROM typed WHERE m_offset = 0",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected = [
        Some("héllo \"quoted\"\n"),
        Some("short"),
        Some("happy"),
        Some("-32768"),
        Some("2147483647"),
        Some("9007199254740993"),
        Some("-12345678901234567890.000000000000000001"),
        Some("1.500"),
        Some("1.25"),
        Some("-0.0025"),
        Some("true"),
        Some("1709202896789"),
        Some("2024-02-29 12:34:56"),
        Some("2024-02-29"),
        Some("0b5a3c2e-9f1d-4c7a-8e2b-1f0a9d8c7b6a"),
        Some(r#"{"a":[1,2,{"b":null}]}"#),
        Some(r#"{"a": "x", "z": 1}"#),
        Some("000102ff"),
        Some(topic.name.as_str()),
        Some("0"),
        Some("0"),
        Some("1700000000123"),
        Some("key-1"),
        Some(r#"[{"name": "h1", "value": "v1"}, {"name": "empty", "value": null}]"#),
        Some("dflt"),
        None,
    ];
    let expected: Vec<Option<String>> = expected.iter().map(|v| v.map(str::to_string)).collect();
    assert_eq!(row, expected);

    let second_row: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT unnest(ARRAY[i4::text, n::text, n2::text, f4::text, b::text,
                to_char(tstz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), ts::text, d::text,
                defaulted, nullable, m_key]) FROM typed WHERE m_offset = 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected_second = [
        Some("42"),
        Some("1000"),
        Some("-0.001"), // numeric(10,3) rounds half away from zero, as PostgreSQL does
        Some("NaN"),
        Some("false"),
        Some("2024-02-29 12:34:56.789"),
        Some("2024-02-29 12:34:56"),
        Some("2024-02-29"),
        Some("given"),
        Some("x"),
        None,
    ];
    let expected_second: Vec<Option<String>> = expected_second
        .iter()
        .map(|v| v.map(str::to_string))
        .collect();
    assert_eq!(second_row, expected_second);
}

/// A sink process started from a ready-made config file.
struct SinkProcess(std::process::Child);

impl SinkProcess {
    fn new(config: &str) -> Self {
        let child = std::process::Command::new(crate::helpers::sink::BIN)
            .args(["run", "--config", config])
            .env_remove("DATABASE_URL")
            .env_remove("KAFKA_BOOTSTRAP_SERVERS")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

impl Drop for SinkProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_that_cannot_be_mapped_stops_the_sink_at_that_record() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    // Partition 0: ten good orders, one with an amount that is not a number, ten more.
    produce_orders(&producer, &topic, 0, 20).await; // ids 0..20 alternate partitions 0 and 1
    let bad = r#"{"id":999,"customer":"c","amount":"twelve","created_at":1700000000000}"#;
    produce_raw(&producer, &topic.name, &[RawRecord::json(0, bad)]).await;
    produce_orders(&producer, &topic, 20, 40).await;

    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &["--log-format", "json"]);
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "the sink should stop on the bad record\n{}",
                sink.logs_tail(20)
            )
        });
    assert!(!status.success(), "a mapping failure must exit non-zero");

    // The log says which record and why, as JSON lines.
    let logs = sink.logs();
    let error = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["level"] == "ERROR")
        .unwrap_or_else(|| panic!("no JSON error line in:\n{logs}"));
    let message = error.to_string();
    assert!(
        message.contains(&format!("{}/0@10", topic.name)),
        "{message}"
    );
    assert!(message.contains("amount"), "{message}");

    // Everything before the bad record is written; the position rests on it.
    let stored = db.stored_offsets(&config.group, &topic.name).await;
    assert_eq!(
        stored[0],
        (0, Some(10)),
        "partition 0 resumes at the bad record"
    );
    let rows_p0: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE kafka_partition = 0")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows_p0, 10);
    assert_rows_match_offsets(&db, "orders", &config.group, &topic.name).await;

    // A restart meets the same record again: nothing skipped it.
    let mut again = Sink::start(&config, "again");
    let status = again
        .wait_timeout(Duration::from_secs(60))
        .expect("stops again");
    assert!(!status.success());
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await[0],
        (0, Some(10))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn several_topics_each_go_to_their_own_table() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders_a").await;
    db.create_orders_table("orders_b").await;
    let a = TestTopic::create(3).await;
    let b = TestTopic::create(2).await;
    let producer = producer();
    produce_orders(&producer, &a, 0, 3_000).await;
    produce_orders(&producer, &b, 0, 2_000).await;

    let mut config = SinkConfig::new(&db.url, &a.name, "orders_a");
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"orders_b\"\n[topics.metadata]\npartition = \"kafka_partition\"\noffset = \"kafka_offset\"\n",
        b.name
    );
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &a, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &b, Duration::from_secs(60)).await;
    assert_exactly_once(&db, "orders_a", 3_000).await;
    assert_exactly_once(&db, "orders_b", 2_000).await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn reset_policies_decide_where_a_partition_without_an_offset_starts() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 100).await;

    // fail: refuses to guess.
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.reset = "fail";
    let mut sink = Sink::start(&config, "fail");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("a fail policy stops the sink");
    assert!(!status.success());
    assert!(
        sink.logs().contains("no stored offset"),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(db.count("orders").await, 0);

    // latest: only what arrives after the assignment.
    config.reset = "latest";
    config.group = format!("{}-latest", config.group);
    let mut sink = Sink::start(&config, "latest");
    // `latest` is pinned to the end offset when the partition is claimed.
    wait_until("the assignment", Duration::from_secs(60), || async {
        sink.logs().contains("starting at the end, pinned")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    produce_orders(&producer, &topic, 100, 150).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let (min, max, n): (i64, i64, i64) =
        sqlx::query_as("SELECT min(id), max(id), count(*) FROM orders")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((min, max, n), (100, 149, 50));
    assert!(sink.stop().success());
}
