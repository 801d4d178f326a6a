//! Operating the sink: lag from SQL and from the CLI, positions mirrored to Kafka, offset
//! resets (also under a running sink), metrics, health and readiness.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, parse_metrics};
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
    let address = sink.http_address();
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
    // The gauges say the same: both ends of the lag, and the lag, summed over partitions.
    wait_until(
        "the lag gauges to show the 400 waiting records",
        Duration::from_secs(30),
        || async {
            let m = parse_metrics(&get(&address, "/metrics").1);
            let sum = |gauge: &str| {
                (0..2)
                    .map(|p| {
                        let series = format!(
                            "kafka_pg_sink_{gauge}{{topic=\"{}\",partition=\"{p}\"}}",
                            topic.name
                        );
                        m.get(&series).copied().unwrap_or(f64::NAN)
                    })
                    .sum::<f64>()
            };
            (sum("lag"), sum("high_watermark"), sum("next_offset")) == (400.0, 1_400.0, 1_000.0)
        },
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
    // The view keeps the last observation (high 1,400, not Kafka's 1,700 now) and ages it.
    let age = || async {
        sqlx::query_scalar::<_, f64>(
            "SELECT min(watermark_age_seconds) FROM kafka_lag WHERE consumer_group = $1",
        )
        .bind(&config.group)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let before = age().await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(sql_lag(&db, &config.group).await, (0, 1_400));
    let after = age().await;
    assert!(after >= before + 1.0, "{before} -> {after}");
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

/// A partition with no commit yet lags from its low watermark, not from offset 0: here the
/// records before 30 are deleted and the sink, held back by a lock, has committed nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_never_committed_lags_from_its_low_watermark() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    crate::out_of_range::delete_before(&topic, 30).await;
    let mut blocker = db.pool.begin().await.unwrap();
    blocker
        .execute("LOCK TABLE orders IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &FAST_WATERMARKS);
    type LagRow = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);
    let row = || async {
        sqlx::query_as::<_, LagRow>(
            "SELECT next_offset, low_watermark, high_watermark, lag FROM kafka_lag
              WHERE consumer_group = $1",
        )
        .bind(&config.group)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
    };
    wait_until(
        "kafka_lag to count from the low watermark",
        Duration::from_secs(30),
        || async { row().await == Some((None, Some(30), Some(100), Some(70))) },
    )
    .await;
    blocker.rollback().await.unwrap();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    assert_eq!(copies, (30..100).map(|o| ((0, o), 1)).collect());
    assert!(sink.stop().success());
}

/// PostgreSQL alone decides where a partition resumes. Without `mirror_commits` the group has
/// no committed offset in Kafka at all; with it, Kafka's commits are never read back: a
/// position moved back in PostgreSQL below the mirrored commit is where a restart reads from.
#[tokio::test(flavor = "multi_thread")]
async fn the_sink_commits_to_kafka_only_when_mirroring_and_never_resumes_from_kafka() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let query: BaseConsumer = client_config()
        .set("group.id", &config.group)
        .create()
        .unwrap();
    let committed = || {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic.name, 0);
        query
            .committed_offsets(tpl, Duration::from_secs(5))
            .unwrap()
            .elements()[0]
            .offset()
    };
    let mut sink = Sink::start(&config, "not mirroring");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert_eq!(
        committed(),
        Offset::Invalid,
        "nothing was committed to Kafka"
    );

    produce_orders(&producer, &topic, 100, 200).await;
    let mirroring = ["--set", "kafka.mirror_commits=true"];
    let mut sink = Sink::start_with(&config, "mirroring", &mirroring);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    wait_until(
        "the mirrored commit to reach the end",
        Duration::from_secs(30),
        || {
            let at_end = committed() == Offset::Offset(200);
            async move { at_end }
        },
    )
    .await;
    assert!(sink.stop().success());

    let file = ConfigFile::new(&config.toml());
    let out = reset_cli(&file, &topic.name, &["--to-offset", "150"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(committed(), Offset::Offset(200), "Kafka's commit is ahead");
    let mut sink = Sink::start_with(&config, "restarted", &mirroring);
    wait_until("the reread", Duration::from_secs(60), || async {
        db.count("orders").await == 250
    })
    .await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    for offset in 0..200 {
        let expected = if offset >= 150 { 2 } else { 1 };
        assert_eq!(copies.get(&(0, offset)), Some(&expected), "offset {offset}");
    }
    assert_eq!(copies.len(), 200);
    assert!(sink.stop().success());
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
    // Idle, it has no commit to be fenced at: it notices the reset within 5 s by itself.
    wait_until(
        "the idle sink to notice the reset",
        Duration::from_secs(8),
        || async { db.count("orders").await > 100 },
    )
    .await;
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
    assert_eq!(metrics["kafka_pg_sink_ready"], 1.0);
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
    let scraped = parse_metrics(&get(&address, "/metrics").1);
    assert_eq!(
        (
            scraped["kafka_pg_sink_ready"],
            scraped["kafka_pg_sink_assigned_partitions"]
        ),
        (0.0, 1.0),
        "an owner of partitions that cannot reach PostgreSQL says so in its metrics"
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

/// Runs `offsets reset` for `topic` with the given target arguments (and any global flags).
async fn reset_cli(
    config: &ConfigFile,
    topic: &str,
    args: &[&str],
) -> crate::helpers::sink::CliOutput {
    let mut all = vec![
        "offsets",
        "reset",
        "--config",
        config.arg(),
        "--topic",
        topic,
    ];
    all.extend_from_slice(args);
    run_cli(&all).await
}

/// A reset during a drain records the position it actually replaced: read under the row lock
/// in the statement that moves it, not before, while the sink kept committing.
#[tokio::test(flavor = "multi_thread")]
async fn a_reset_during_a_drain_records_the_position_it_replaced() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(1).await;
    const RECORDS: i64 = 30_000;
    produce_orders(&producer(), &topic, 0, RECORDS).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 50; // many small commits: the position moves all the time
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    let stored = || async {
        let stored = db.stored_offsets(&config.group, &topic.name).await;
        stored.first().and_then(|(_, next)| *next)
    };
    wait_until(
        "the drain to be under way",
        Duration::from_secs(60),
        || async { stored().await.is_some_and(|n| n >= 1_000) },
    )
    .await;
    for to in [100, 200, 300, 400, 500] {
        let out = reset_cli(&file, &topic.name, &["--to-offset", &to.to_string()]).await;
        assert!(out.status.success(), "{}", out.stderr);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    // Busy, the sink met the resets at its next commits: fenced there, counted as fenced.
    let m = parse_metrics(&get(&address, "/metrics").1);
    assert!(
        m["kafka_pg_sink_fenced_commits_total"] >= 1.0
            && m["kafka_pg_sink_batch_failures_total{reason=\"fenced\"}"] >= 1.0,
        "no commit was fenced by the resets: {m:?}"
    );
    assert!(sink.stop().success());

    // After each reset, no advance was made under the epoch it replaced (or an older one).
    let stale: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT r.seq, a.seq FROM offset_audit r JOIN offset_audit a
             ON a.seq > r.seq AND a.new_next IS DISTINCT FROM a.old_next
            AND a.new_epoch <= r.old_epoch
          WHERE r.owner LIKE 'reset:%'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        stale.is_empty(),
        "(reset, advance) under a replaced epoch: {stale:?}"
    );

    let events: Vec<(Option<i64>, i64)> = sqlx::query_as(
        "SELECT from_offset, to_offset FROM kafka_offset_events WHERE kind = 'manual_reset' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let replaced: Vec<(Option<i64>, i64)> = sqlx::query_as(
        "SELECT old_next, new_next FROM offset_audit WHERE owner LIKE 'reset:%' ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        events, replaced,
        "from_offset is the position each reset replaced"
    );
    assert_eq!(events.len(), 5);
    assert!(
        events.iter().all(|(from, _)| from.unwrap() < RECORDS),
        "every reset came during the drain: {events:?}"
    );
    // Each pass over the partition writes its records once: the first from 0, each reset's
    // from its target, each until the next reset replaced its position (the last to the end).
    let starts = std::iter::once(0).chain(events.iter().map(|(_, to)| *to));
    let ends = events
        .iter()
        .map(|(from, _)| from.unwrap())
        .chain(std::iter::once(RECORDS));
    let passes: Vec<(i64, i64)> = starts.zip(ends).collect();
    let copies = orders_as_produced(&db, "orders", 1).await;
    for offset in 0..RECORDS {
        let expected = passes
            .iter()
            .filter(|(s, e)| (*s..*e).contains(&offset))
            .count() as i64;
        assert_eq!(
            copies.get(&(0, offset)),
            Some(&expected),
            "offset {offset}: {passes:?}"
        );
    }
}

/// A reset while a sink is stopped (SIGSTOP) inside a transaction that holds one partition's
/// row, and a healthy sink claims the partitions meanwhile: the reset takes its rows in the
/// claims' order under its own application name, so the claim's fence ends only the stopped
/// sink, never the reset; the reset applies, and the healthy sink continues from it exactly
/// once.
#[tokio::test(flavor = "multi_thread")]
async fn a_reset_applies_past_a_sink_stopped_inside_a_transaction_while_another_claims() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 1_000).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1; // one transaction for both partitions
    let stopped = Sink::start_with(
        &config,
        "stopped",
        &["--set", "postgres.idle_in_transaction_timeout=600s"],
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;

    // Stop it inside a transaction on partition 1 only: it holds that row, not partition 0's.
    let odd: Vec<RawRecord> = (1_000..1_200)
        .filter(|id| id % 2 == 1)
        .map(|id| RawRecord::json(1, &order_json(id)))
        .collect();
    stop_inside_a_transaction(&db, &stopped, &topic, &odd).await;

    // The reset waits for the stopped sink's row (longer than the healthy sink's claim does),
    // holding partition 0's; the healthy sink joins and claims both meanwhile.
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();
    let name = topic.name.clone();
    let started = std::time::Instant::now();
    let reset = tokio::spawn(async move {
        run_cli(&[
            "offsets",
            "reset",
            "--config",
            &path,
            "--topic",
            &name,
            "--to-offset",
            "100",
            "--set",
            "postgres.lock_timeout=30s",
        ])
        .await
    });
    let mut healthy = Sink::start(&config, "healthy");
    let out = reset.await.unwrap();
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the reset waited {:?}",
        started.elapsed()
    );
    for p in 0..2 {
        let line = format!("{}/{p}: 500 -> 100", topic.name);
        assert!(out.stdout.contains(&line), "{}", out.stdout);
    }
    let events: Vec<(i32, Option<i64>, i64)> = sqlx::query_as(
        "SELECT partition, from_offset, to_offset FROM kafka_offset_events ORDER BY partition",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(events, vec![(0, Some(500), 100), (1, Some(500), 100)]);

    let even: Vec<RawRecord> = (1_000..1_200)
        .filter(|id| id % 2 == 0)
        .map(|id| RawRecord::json(0, &order_json(id)))
        .collect();
    produce_raw(&producer, &topic.name, &even).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let copies = orders_as_produced(&db, "orders", 2).await;
    for p in 0..2 {
        for offset in 0..600 {
            let expected = if (100..500).contains(&offset) { 2 } else { 1 };
            assert_eq!(copies.get(&(p, offset)), Some(&expected), "{p}@{offset}");
        }
    }
    assert_eq!(copies.len(), 1_200);
    assert!(healthy.stop().success());
    stopped.signal(Signal::SIGCONT);
}

/// Holds sink `sink`'s next transaction after its offset update (`records` produced meanwhile
/// make one), stops the sink there, and lets the transaction's statement finish: the sink's
/// session then sits idle in its transaction, holding the rows of the partitions written.
async fn stop_inside_a_transaction(
    db: &TestDb,
    sink: &Sink,
    topic: &TestTopic,
    records: &[RawRecord],
) {
    let mut blocker = db.pool.begin().await.unwrap();
    blocker
        .execute("LOCK TABLE orders IN EXCLUSIVE MODE")
        .await
        .unwrap();
    produce_raw(&producer(), &topic.name, records).await;
    wait_until(
        "the sink's transaction to wait",
        Duration::from_secs(30),
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name = 'kafka-pg-sink'
                    AND wait_event_type = 'Lock'",
            )
            .bind(&db.name)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            waiting == 1
        },
    )
    .await;
    sink.signal(Signal::SIGSTOP);
    blocker.rollback().await.unwrap();
}

/// A reset waits at most `postgres.lock_timeout` for a partition's row: a sink stopped inside
/// a transaction holding it is ended (the reset fences it anyway) and the reset applies; a
/// session that is not a sink's is never ended, and the reset gives up, exits 1 and names it.
/// The stopped sink, woken, owned the partition at the reset: it claims it back and continues
/// from the reset position.
#[tokio::test(flavor = "multi_thread")]
async fn a_reset_ends_a_stopped_sink_holding_its_row_and_gives_up_on_other_holders() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start_with(
        &config,
        "sink",
        &["--set", "postgres.idle_in_transaction_timeout=600s"],
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let stored = || async { db.stored_offsets(&config.group, &topic.name).await[0].1 };
    let quick = ["--to-offset", "10", "--set", "postgres.lock_timeout=300ms"];

    let mut holder = db.pool.begin().await.unwrap();
    holder
        .execute("SET LOCAL application_name = 'an operator''s psql'")
        .await
        .unwrap();
    holder
        .execute("SELECT * FROM kafka_offsets FOR UPDATE")
        .await
        .unwrap();
    let out = reset_cli(&file, &topic.name, &quick).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains("reset not applied")
            && out.stderr.contains("3 waits")
            && out.stderr.contains("an operator's psql"),
        "{}",
        out.stderr
    );
    holder.rollback().await.unwrap();
    assert_eq!(stored().await, Some(100));

    let more: Vec<RawRecord> = (100..110)
        .map(|id| RawRecord::json(0, &order_json(id)))
        .collect();
    stop_inside_a_transaction(&db, &sink, &topic, &more).await;
    // The reset names the position it replaced: 100 while the stopped sink's transaction holds
    // the row. (CI once saw 110: that batch had committed before the stop took hold; the
    // reset must then name 110, and everything below still holds.)
    let before = stored().await;
    let out = reset_cli(&file, &topic.name, &quick).await;
    assert!(out.status.success(), "{}", out.stderr);
    let replaced = if before == Some(110) { 110 } else { 100 };
    assert!(
        out.stdout
            .contains(&format!("{}/0: {replaced} -> 10", topic.name)),
        "{}",
        out.stdout
    );
    let sessions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'kafka-pg-sink' AND state = 'idle in transaction'",
    )
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(sessions, 0, "the stopped sink's transaction was ended");

    sink.signal(Signal::SIGCONT);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    for offset in 0..110 {
        // Read again from 10: up to the position the reset replaced, which a batch that
        // committed before the stop took hold moved to 110.
        let expected = if (10..replaced).contains(&offset) {
            2
        } else {
            1
        };
        assert_eq!(copies.get(&(0, offset)), Some(&expected), "offset {offset}");
    }
    assert!(sink.logs().contains("position reset by an operator"));
    assert!(sink.stop().success());
}

/// README, "Lag from the command line" and "Moving positions safely": with no sink running,
/// `lag` prints one line per partition with totals per topic and overall, and `offsets show`
/// prints each stored position (all topics, or the one `--topic` names).
#[tokio::test(flavor = "multi_thread")]
async fn lag_and_offsets_show_print_every_partition_with_totals_per_topic() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    db.create_orders_table("orders_b").await;
    let a = TestTopic::create(2).await;
    let b = TestTopic::create(3).await;
    let producer = producer();
    let mut config = SinkConfig::new(&db.url, &a.name, "orders");
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"orders_b\"\n[topics.metadata]\npartition = \"kafka_partition\"\noffset = \"kafka_offset\"\n",
        b.name
    );
    let mut sink = Sink::start(&config, "sink");
    produce_orders(&producer, &a, 0, 100).await;
    produce_orders(&producer, &b, 0, 90).await;
    wait_drained(&db, &config.group, &a, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &b, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    // Behind by 15 per partition of `a` and 20 per partition of `b`.
    produce_orders(&producer, &a, 100, 130).await;
    produce_orders(&producer, &b, 90, 150).await;
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();

    let out = run_cli(&["lag", "--config", &path]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    // topic, partition, next offset, low, high, lag
    let mut lines: Vec<(String, i32, i64, i64, i64, i64)> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 || (f[0] != a.name && f[0] != b.name) {
                return None;
            }
            Some((
                f[0].to_string(),
                f[1].parse().ok()?,
                f[2].parse().ok()?,
                f[3].parse().ok()?,
                f[4].parse().ok()?,
                f[5].parse().ok()?,
            ))
        })
        .collect();
    lines.sort();
    let mut expected: Vec<(String, i32, i64, i64, i64, i64)> = (0..2)
        .map(|p| (a.name.clone(), p, 50, 0, 65, 15))
        .chain((0..3).map(|p| (b.name.clone(), p, 30, 0, 50, 20)))
        .collect();
    expected.sort();
    assert_eq!(lines, expected, "{}", out.stdout);
    for total in [
        format!("total {}: 30", a.name),
        format!("total {}: 60", b.name),
        "total lag: 90".to_string(),
    ] {
        assert_eq!(
            out.stdout.lines().filter(|l| *l == total).count(),
            1,
            "{total:?} in\n{}",
            out.stdout
        );
    }

    /// topic, partition, next offset, epoch, owner
    type Position = (String, i32, Option<i64>, i64, Option<String>);
    let stored: Vec<Position> = sqlx::query_as(
        "SELECT topic, partition, next_offset, owner_epoch, owner_id FROM kafka_offsets
          WHERE consumer_group = $1 ORDER BY topic, partition",
    )
    .bind(&config.group)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(stored.len(), 5);
    let shown = |stdout: &str| -> Vec<Position> {
        stdout
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 5 || (f[0] != a.name && f[0] != b.name) {
                    return None;
                }
                let owner = *f.last()?;
                Some((
                    f[0].to_string(),
                    f[1].parse().ok()?,
                    f[2].parse().ok(),
                    f[3].parse().ok()?,
                    (owner != "-").then(|| owner.to_string()),
                ))
            })
            .collect()
    };
    let out = run_cli(&["offsets", "show", "--config", &path]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("consumer group {:?}", config.group)),
        "{}",
        out.stdout
    );
    let mut all = shown(&out.stdout);
    all.sort();
    assert_eq!(all, stored, "{}", out.stdout);
    assert!(
        stored
            .iter()
            .all(|s| s.2 == Some(if s.0 == a.name { 50 } else { 30 }) && s.3 >= 1 && s.4.is_some()),
        "{stored:?}"
    );
    let out = run_cli(&["offsets", "show", "--config", &path, "--topic", &b.name]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let only_b: Vec<_> = stored.iter().filter(|s| s.0 == b.name).cloned().collect();
    assert_eq!(shown(&out.stdout), only_b, "{}", out.stdout);
}
