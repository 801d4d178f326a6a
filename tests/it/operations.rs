//! Operating the sink: lag from SQL and from the CLI, positions mirrored to Kafka, offset
//! resets (also under a running sink), metrics, health and readiness.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{
    client_config, order_json, produce_orders, produce_raw, producer, RawRecord, TestTopic,
};
use crate::helpers::private::Private;
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

const FAST_WATERMARKS: [&str; 2] = ["--set", "kafka.watermark_interval=300ms"];

async fn sql_lag(db: &TestDb, group: &str) -> (i64, i64) {
    sqlx::query_as("SELECT coalesce(sum(lag), 0)::int8, coalesce(sum(high_watermark), 0)::int8 FROM kafka_lag WHERE consumer_group = $1")
        .bind(group)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &FAST_WATERMARKS);
    produce_orders(&producer, &topic, 0, 1_000).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    wait_until(
        "kafka_lag to show the drained state",
        Duration::from_secs(30),
        || async { sql_lag(&db, &config.group).await == (0, 1_000) },
    )
    .await;

    // Hold the writers back with a lock: records arrive, are fetched, and wait.
    let mut blocker = db.pool.begin().await.unwrap();
    blocker
        .execute("LOCK TABLE orders IN EXCLUSIVE MODE")
        .await
        .unwrap();
    produce_orders(&producer, &topic, 1_000, 1_400).await;
    wait_until(
        "kafka_lag to show the 400 waiting records",
        Duration::from_secs(30),
        || async { sql_lag(&db, &config.group).await == (400, 1_400) },
    )
    .await;
    blocker.rollback().await.unwrap();
    wait_until(
        "kafka_lag back to zero",
        Duration::from_secs(30),
        || async { sql_lag(&db, &config.group).await == (0, 1_400) },
    )
    .await;
    let seconds: f64 = sqlx::query_scalar(
        "SELECT max(seconds_since_commit) FROM kafka_lag WHERE consumer_group = $1",
    )
    .bind(&config.group)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(seconds < 30.0, "{seconds}");
    assert!(sink.stop().success());

    // No sink running: the CLI asks Kafka itself.
    produce_orders(&producer, &topic, 1_400, 1_700).await;
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();
    let out = run_cli(&["lag", "--config", &path]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("total lag: 300"), "{}", out.stdout);
    let out = run_cli(&["lag", "--config", &path, "--format", "json"]).await;
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["total_lag"], 300);
    assert_eq!(report["partitions"].as_array().unwrap().len(), 2);
    let out = run_cli(&["lag", "--config", &path, "--max-lag", "299"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("exceeds --max-lag 299"),
        "{}",
        out.stderr
    );
    let out = run_cli(&["lag", "--config", &path, "--max-lag", "300"]).await;
    assert!(out.status.success());
    // The view still answers for partitions no sink owns, with the age of what it knows.
    let age: f64 = sqlx::query_scalar(
        "SELECT min(watermark_age_seconds) FROM kafka_lag WHERE consumer_group = $1",
    )
    .bind(&config.group)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(age >= 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn mirrored_positions_are_visible_to_a_plain_kafka_group_offset_query() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &["--set", "kafka.mirror_commits=true"]);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let query: BaseConsumer = client_config()
        .set("group.id", &config.group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&topic.name, 0);
    tpl.add_partition(&topic.name, 1);
    let expected: Vec<(i32, Offset)> = topic
        .end_offsets()
        .into_iter()
        .map(|(p, o)| (p, Offset::Offset(o)))
        .collect();
    wait_until(
        "the group's committed offsets to match",
        Duration::from_secs(30),
        || {
            let committed = query
                .committed_offsets(tpl.clone(), Duration::from_secs(5))
                .unwrap();
            let got: Vec<(i32, Offset)> = committed
                .elements()
                .iter()
                .map(|e| (e.partition(), e.offset()))
                .collect();
            let ok = got == expected;
            async move { ok }
        },
    )
    .await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn offsets_reset_to_every_target_and_under_a_running_sink() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let base = 1_700_000_000_000i64;
    let records: Vec<RawRecord> = (0..100)
        .map(|i| RawRecord {
            timestamp_ms: Some(base + i * 1_000),
            ..RawRecord::json(0, &order_json(i))
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();
    let mut sink = Sink::start(&config, "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());

    let stored = || async { db.stored_offsets(&config.group, &topic.name).await[0].1 };
    let reset = |args: &'static [&'static str]| {
        let mut all = vec![
            "offsets",
            "reset",
            "--config",
            path.as_str(),
            "--topic",
            topic.name.as_str(),
        ];
        all.extend_from_slice(args);
        let all: Vec<String> = all.into_iter().map(String::from).collect();
        async move { run_cli(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };
    let out = reset(&["--to", "earliest", "--dry-run"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("{}/0: 100 -> 0", topic.name))
            && out.stdout.contains("dry run"),
        "{}",
        out.stdout
    );
    assert_eq!(stored().await, Some(100), "a dry run changes nothing");

    for (args, expected) in [
        (&["--to-offset", "40"][..], 40),
        (&["--to-timestamp", "2023-11-14T22:14:20Z"][..], 60),
        (&["--to", "latest"][..], 100),
        (&["--to", "earliest"][..], 0),
        (&["--to-timestamp", "1700000030000"][..], 30),
    ] {
        let out = reset(args).await;
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        assert_eq!(stored().await, Some(expected), "{args:?}");
    }
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM kafka_offset_events WHERE kind = 'manual_reset'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(events, 5);
    let out = reset(&["--to-offset", "500"]).await;
    assert!(
        !out.status.success() && out.stderr.contains("outside"),
        "{}",
        out.stderr
    );
    let out = reset(&["--partition", "3", "--to", "earliest"]).await;
    assert!(
        !out.status.success() && out.stderr.contains("no partition 3"),
        "{}",
        out.stderr
    );
    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        &path,
        "--topic",
        "no-such-topic",
        "--to",
        "earliest",
    ])
    .await;
    assert!(
        !out.status.success() && out.stderr.contains("no-such-topic"),
        "{}",
        out.stderr
    );

    // Put it back at the end, run the sink, and reset under it: it is fenced, claims the
    // partition again and rereads from 50, each record once more and no more.
    reset(&["--to", "latest"]).await;
    let mut sink = Sink::start(&config, "second");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = reset(&["--to-offset", "50"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    wait_until("the reread", Duration::from_secs(60), || async {
        db.count("orders").await == 150
    })
    .await;
    produce_orders(&producer(), &topic, 100, 120).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies: HashMap<i64, i64> =
        sqlx::query_as("SELECT kafka_offset, count(*) FROM orders GROUP BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    for offset in 0..120 {
        let expected = if (50..100).contains(&offset) { 2 } else { 1 };
        assert_eq!(copies.get(&offset), Some(&expected), "offset {offset}");
    }
    assert!(
        sink.logs().contains("position reset by an operator"),
        "{}",
        sink.logs_tail(20)
    );
    assert!(sink.stop().success());
}

/// GET `path` from `address`; (status, body).
pub(crate) fn get(address: &str, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(format!("http://{address}{path}"))
        .call()
        .expect("HTTP request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// Prometheus text format: `name{labels} value` lines into a map.
pub(crate) fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_scraped_and_parsed_and_health_answers() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &FAST_WATERMARKS);
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let consumed = format!(
        "kafka_pg_sink_records_consumed_total{{topic=\"{}\"}}",
        topic.name
    );
    let lag = |p: i32| {
        format!(
            "kafka_pg_sink_lag{{topic=\"{}\",partition=\"{p}\"}}",
            topic.name
        )
    };
    let metrics = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = get(&address, "/metrics");
            assert_eq!(status, 200);
            let m = parse_metrics(&body);
            if m.get(&consumed) == Some(&1000.0)
                && m.contains_key(&lag(0))
                && m.contains_key(&lag(1))
            {
                break m;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "metrics never complete:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    assert_eq!(
        metrics["kafka_pg_sink_rows_written_total{table=\"public.orders\"}"],
        1000.0
    );
    assert!(metrics["kafka_pg_sink_batches_committed_total"] >= 1.0);
    assert!(metrics["kafka_pg_sink_transaction_seconds_count"] >= 1.0);
    assert_eq!(metrics[&lag(0)] + metrics[&lag(1)], 0.0);
    assert_eq!(metrics["kafka_pg_sink_assigned_partitions"], 2.0);
    assert!(metrics["kafka_pg_sink_rebalances_total{kind=\"assign\"}"] >= 1.0);
    let (status, body) = get(&address, "/health");
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, body) = get(&address, "/ready");
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["ready"], true);
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_flips_while_postgres_is_down() {
    let pg = tokio::task::spawn_blocking(|| Private::up("postgres"))
        .await
        .unwrap();
    let db = TestDb::migrated_on(&pg.admin_url()).await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &FAST_WATERMARKS);
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let ready = |address: String| async move {
        tokio::task::spawn_blocking(move || get(&address, "/ready"))
            .await
            .unwrap()
    };
    wait_until("ready", Duration::from_secs(30), || {
        let a = address.clone();
        async move { ready(a).await.0 == 200 }
    })
    .await;
    db.pool.close().await;
    let pg = tokio::task::spawn_blocking(move || {
        pg.stop("postgres");
        pg
    })
    .await
    .unwrap();
    let (status, body) = ready(address.clone()).await;
    assert_eq!(status, 503, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (body["ready"].as_bool(), body["database"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(get(&address, "/health").0, 200, "alive even when not ready");
    let pg = tokio::task::spawn_blocking(move || {
        pg.start("postgres");
        pg
    })
    .await
    .unwrap();
    wait_until("ready again", Duration::from_secs(60), || {
        let a = address.clone();
        async move { ready(a).await.0 == 200 }
    })
    .await;
    assert!(sink.stop().success());
    let db = TestDb::reconnect(db).await;
    drop(db);
    drop(pg);
}
