//! Row mapping against real tables: every supported type, metadata columns, several topics,
//! and a record that cannot be mapped.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
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

#[tokio::test(flavor = "multi_thread")]
async fn generated_and_identity_columns_are_left_to_postgres() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE gen (
                i4 int NOT NULL,
                g int GENERATED ALWAYS AS (i4 * 2) STORED,
                idc int GENERATED ALWAYS AS IDENTITY,
                kafka_partition int NOT NULL,
                kafka_offset bigint NOT NULL
            )",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Fields named like the generated columns: with map_by_name they would be written if the
    // sink did not leave those columns out (and PostgreSQL would refuse the COPY).
    let records: Vec<RawRecord> = (0..5)
        .map(|n| RawRecord::json(0, &format!(r#"{{"i4":{n},"g":999,"idc":999}}"#)))
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let config = SinkConfig::new(&db.url, &topic.name, "gen");
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let rows: Vec<(i64, i32, i32, i32)> =
        sqlx::query_as("SELECT kafka_offset, i4, g, idc FROM gen ORDER BY kafka_offset")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    // One transaction in offset order: the identity counts 1, 2, 3, … along the offsets.
    let expected: Vec<(i64, i32, i32, i32)> = (0..5).map(|n| (n as i64, n, n * 2, n + 1)).collect();
    assert_eq!(rows, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn text_columns_take_the_json_text_of_non_strings_and_char_pads() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE texts (
                t text, v varchar(20), c char(5),
                kafka_partition int NOT NULL, kafka_offset bigint NOT NULL
            )",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let values = [
        r#"{"t":12.50,"v":true,"c":"ab"}"#,
        r#"{"t":{"a":[1, "x"]},"v":[1,2],"c":7}"#,
        r#"{"t":-1e3,"v":false,"c":null}"#,
    ];
    let records: Vec<RawRecord> = values.iter().map(|v| RawRecord::json(0, v)).collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let config = SinkConfig::new(&db.url, &topic.name, "texts");
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    type Row = (i64, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT kafka_offset, t, v, c::text || '|' FROM texts ORDER BY kafka_offset",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        rows,
        vec![
            // char(n) pads (bpchar's text cast drops the padding; `||` keeps what was stored).
            (0, s("12.50"), s("true"), s("ab|")),
            (1, s(r#"{"a":[1, "x"]}"#), s("[1,2]"), s("7|")),
            (2, s("-1e3"), s("false"), None),
        ]
    );
    let padded: i32 =
        sqlx::query_scalar("SELECT octet_length(c) FROM texts WHERE kafka_offset = 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(padded, 5, "char(5) holds the value padded to 5");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_column_type_the_sink_cannot_write_stops_it_at_startup_naming_the_column() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE shapes (id bigint, spot point,
                kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    produce_raw(
        &producer(),
        &topic.name,
        &[RawRecord::json(0, r#"{"id":1,"spot":"(1,2)"}"#)],
    )
    .await;
    let config = SinkConfig::new(&db.url, &topic.name, "shapes");
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the sink should refuse the table\n{}", sink.logs_tail(20)));
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(20));
    let logs = sink.logs();
    assert!(
        logs.contains("column spot of public.shapes has type point"),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(db.count("shapes").await, 0);
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![],
        "nothing was claimed or committed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_whose_table_does_not_exist_stops_the_sink_and_no_table_is_created() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 3).await;
    let config = SinkConfig::new(&db.url, &topic.name, "missing_table");
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the sink should stop\n{}", sink.logs_tail(20)));
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(20));
    assert!(
        sink.logs()
            .contains("table public.missing_table does not exist"),
        "{}",
        sink.logs_tail(20)
    );
    let created: Option<String> = sqlx::query_scalar("SELECT to_regclass('missing_table')::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(created, None, "tables are never created implicitly");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schema_setting_writes_into_a_table_outside_public() {
    let db = TestDb::migrated().await;
    // The same name in public: a sink that ignored `schema` would write here.
    db.create_orders_table("orders").await;
    db.pool
        .execute("CREATE SCHEMA app; CREATE TABLE app.orders (LIKE public.orders INCLUDING ALL)")
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = "schema = \"app\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert_eq!(db.count("orders").await, 0, "public.orders stays empty");
    // Put app.orders where the column-by-column check reads.
    db.pool
        .execute("DROP TABLE public.orders; ALTER TABLE app.orders SET SCHEMA public")
        .await
        .unwrap();
    let copies = orders_as_produced(&db, "orders", 2).await;
    assert_eq!(copies.len(), 100);
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_by_a_unique_index_that_is_not_the_primary_key() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id serial PRIMARY KEY, code text UNIQUE NOT NULL, v int NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Five codes, each written four times; the last record per code must win.
    let records: Vec<RawRecord> = (0..20)
        .map(|n| RawRecord::json(0, &format!(r#"{{"code":"c{}","v":{n}}}"#, n % 5)))
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "mode = \"upsert\"\nkey = [\"code\"]".into();
    config.metadata = String::new();
    config.max_records = 7;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let rows: Vec<(String, i32)> = sqlx::query_as("SELECT code, v FROM items ORDER BY code")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let expected: Vec<(String, i32)> = (0..5).map(|c| (format!("c{c}"), 15 + c)).collect();
    assert_eq!(rows, expected);
}

/// A deferrable key cannot arbitrate `ON CONFLICT`, and a COPY would not be checked against
/// it row by row: `check` refuses it as an upsert key and names why; the same table with the
/// key not deferrable passes; startup refuses it too.
#[tokio::test(flavor = "multi_thread")]
async fn a_deferrable_key_is_refused_as_an_upsert_key() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE later (id bigint PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v int);
             CREATE TABLE now (id bigint PRIMARY KEY, v int)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    for (table, refused) in [("later", true), ("now", false)] {
        let mut config = SinkConfig::new(&db.url, &topic.name, table);
        config.topic_settings = "mode = \"upsert\"".into();
        config.metadata = String::new();
        let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
        let said = format!("{}\n{}", out.stdout, out.stderr);
        assert_eq!(out.status.success(), !refused, "{table}: {said}");
        assert_eq!(
            said.contains(
                "is not the primary key or a unique index of the table that is not deferrable"
            ),
            refused,
            "{table}: {said}"
        );
    }
    // Startup refuses it the same way: the sink exits naming it, before taking any record.
    let mut config = SinkConfig::new(&db.url, &topic.name, "later");
    config.topic_settings = "mode = \"upsert\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    let status = sink.wait_timeout(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| !s.success()),
        "{status:?}: {}",
        sink.logs_tail(20)
    );
    assert!(
        sink.logs().contains(
            "is not the primary key or a unique index of the table that is not deferrable"
        ),
        "{}",
        sink.logs_tail(20)
    );
}

/// A domain over an enum, a domain over a domain (NOT NULL on the inner one) and an array of
/// a domain over an enum are written as their base types, with the array's element type
/// named exactly; a label the enum lacks is PostgreSQL's to refuse, as a `rejected` letter,
/// and a null for the inner domain's NOT NULL a `mapping` one.
#[tokio::test(flavor = "multi_thread")]
async fn domains_over_enums_and_other_domains_are_written_as_their_base() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TYPE mood AS ENUM ('happy', 'sad');
             CREATE DOMAIN mood_d AS mood;
             CREATE DOMAIN word AS text NOT NULL CHECK (VALUE <> '');
             CREATE DOMAIN short_word AS word CHECK (length(VALUE) < 8);
             CREATE TABLE nested (id int, m mood_d, w short_word, ms mood_d[])",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let values = [
        r#"{"id":1,"m":"happy","w":"hi","ms":["sad",null,"happy"]}"#,
        r#"{"id":2,"m":"glad","w":"hi","ms":[]}"#,
        r#"{"id":3,"m":"sad","w":null,"ms":null}"#,
        r#"{"id":4,"m":null,"w":"a longer word","ms":null}"#,
        r#"{"id":5,"m":"sad","w":"yo","ms":["sad"]}"#,
    ];
    let records: Vec<RawRecord> = values.iter().map(|v| RawRecord::json(0, v)).collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "nested");
    config.metadata = String::new();
    config.topic_settings = "on_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    type Row = (i32, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Row> =
        sqlx::query_as("SELECT id, m::text, w::text, ms::text FROM nested ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                1,
                Some("happy".into()),
                Some("hi".into()),
                Some("{sad,NULL,happy}".into())
            ),
            (
                5,
                Some("sad".into()),
                Some("yo".into()),
                Some("{sad}".into())
            ),
        ]
    );
    let letters: Vec<(i64, String)> =
        sqlx::query_as("SELECT \"offset\", error_kind FROM kafka_dead_letters ORDER BY \"offset\"")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        letters,
        vec![
            (1, "rejected".into()),
            (2, "mapping".into()),
            (3, "rejected".into())
        ]
    );
    assert!(sink.stop().success());
}
