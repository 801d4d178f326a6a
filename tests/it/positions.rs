//! Positions reach the end: offsets that carry no record (transaction markers, aborted
//! records) are committed past, and a start at `latest` is pinned so a rewind cannot skip.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{client_config, order_json, produce_orders, producer, TestTopic};
use crate::helpers::orders::assert_orders_are;
use crate::helpers::services::services;
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Ids of aborted records start here, so one showing up in the table is plain to see.
const ABORTED: i64 = 1_000_000;

/// A real transactional producer (librdkafka's, with a `transactional.id`).
fn transactional_producer() -> FutureProducer {
    let producer: FutureProducer = client_config()
        .set(
            "transactional.id",
            format!("kps-test-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("transaction.timeout.ms", "60000")
        .create()
        .expect("transactional producer");
    // The first transactional producer on a fresh broker creates __transaction_state; the
    // coordinator may answer "not coordinator" for a few seconds.
    let mut attempt = 0;
    loop {
        match producer.init_transactions(Duration::from_secs(30)) {
            Ok(()) => break,
            Err(e) if attempt < 5 => {
                attempt += 1;
                eprintln!("init_transactions: {e}; retrying");
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(e) => panic!("init_transactions: {e}"),
        }
    }
    producer
}

/// One transaction of orders `ids` (order `id` to partition `id % partitions`), committed or
/// aborted. Flushed first either way, so aborted records really are in the log.
async fn transaction(producer: &FutureProducer, topic: &TestTopic, ids: &[i64], commit: bool) {
    producer.begin_transaction().expect("begin transaction");
    let mut pending = Vec::new();
    for &id in ids {
        let value = order_json(id);
        let key = id.to_string();
        let record = FutureRecord::to(&topic.name)
            .partition((id % topic.partitions as i64) as i32)
            .key(&key)
            .payload(&value);
        pending.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .expect("queue"),
        );
    }
    for delivery in pending {
        delivery.await.expect("delivery").expect("acknowledged");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    if commit {
        producer
            .commit_transaction(Duration::from_secs(30))
            .expect("commit transaction");
    } else {
        producer
            .abort_transaction(Duration::from_secs(30))
            .expect("abort transaction");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn positions_reach_the_end_of_topics_written_by_transactional_producers() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(3).await;
    let producer = tokio::task::spawn_blocking(transactional_producer)
        .await
        .unwrap();

    // Committed and aborted transactions interleaved, the topic ending in an abort; every
    // transaction leaves a marker on each partition it wrote to.
    let mut committed = Vec::new();
    let mut next_id = 0i64;
    let mut aborted_id = ABORTED;
    for t in 0..9 {
        if t % 3 == 2 {
            let ids: Vec<i64> = (aborted_id..aborted_id + 30).collect();
            aborted_id += 30;
            transaction(&producer, &topic, &ids, false).await;
        } else {
            let ids: Vec<i64> = (next_id..next_id + 60).collect();
            next_id += 60;
            transaction(&producer, &topic, &ids, true).await;
            committed.extend(ids);
        }
    }

    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(
        &config,
        "sink",
        &["--set", "kafka.watermark_interval=300ms"],
    );
    // The end offsets include the markers: only an advance past them reaches these.
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert_orders_are(&db, "orders", &committed).await;

    // While running: another committed transaction, then an aborted one on every partition.
    let ids: Vec<i64> = (next_id..next_id + 30).collect();
    transaction(&producer, &topic, &ids, true).await;
    committed.extend(ids);
    let ids: Vec<i64> = (aborted_id..aborted_id + 30).collect();
    transaction(&producer, &topic, &ids, false).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert_orders_are(&db, "orders", &committed).await;
    assert_offset_history_is_a_chain(&db).await;

    // No lag is left: kafka_lag sees the end offsets and nothing after the positions ...
    let end: i64 = topic.end_offsets().iter().map(|(_, o)| o).sum();
    wait_until(
        "kafka_lag to show no lag at the end offsets",
        Duration::from_secs(30),
        || async {
            let (lag, high): (i64, i64) = sqlx::query_as(
                "SELECT coalesce(sum(lag), -1)::int8, coalesce(sum(high_watermark), 0)::int8
                   FROM kafka_lag WHERE consumer_group = $1",
            )
            .bind(&config.group)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            (lag, high) == (0, end)
        },
    )
    .await;
    // ... and the CLI's alert stays quiet at --max-lag 0.
    let file = ConfigFile::new(&config.toml());
    let lag = run_cli(&["lag", "--config", file.arg(), "--max-lag", "0"]).await;
    assert!(
        lag.status.success(),
        "lag reports a stuck position:\n{}{}",
        lag.stdout,
        lag.stderr
    );
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}

/// A backlog written by a transactional producer is committed to its end, the last markers
/// included, without its last batch waiting `max_wait` (two minutes here): the sink seals it
/// when every partition reports the end of its log. A record that trickles in afterwards
/// waits in its open batch again, and every column arrives as produced.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_commits_to_its_end_without_waiting_max_wait() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let transactional = tokio::task::spawn_blocking(transactional_producer)
        .await
        .unwrap();
    // Not a multiple of the batch size: the last batch of each drain is partial.
    let mut committed: Vec<i64> = (0..1_050).collect();
    for ids in committed.chunks(350) {
        transaction(&transactional, &topic, ids, true).await;
    }
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 100;
    config.max_wait_ms = 120_000;
    let mut sink = Sink::start(&config, "sink");
    // The end offsets are past the markers; half of max_wait is ample for 1,050 records.
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_orders_are(&db, "orders", &committed).await;

    // Caught up: a lone record waits for its batch's clock, so SIGTERM finds it still open.
    produce_orders(&producer(), &topic, 1_050, 1_051).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(db.count("orders").await, 1_050, "committed before max_wait");
    sink.signal(nix::sys::signal::Signal::SIGTERM);
    let status = sink
        .wait_timeout(Duration::from_secs(30))
        .expect("SIGTERM stops the sink");
    assert!(status.success(), "{status:?}\n{}", sink.logs_tail(20));
    committed.push(1_050);
    assert_orders_are(&db, "orders", &committed).await;
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        topic.end_positions()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rewind_before_the_first_commit_under_latest_rereads_instead_of_skipping() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    // History before the sink starts: `latest` skips it.
    produce_orders(&producer(), &topic, 0, 100).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.reset = "latest";
    let mut sink = Sink::start(&config, "sink");
    wait_until(
        "the partition to be claimed",
        Duration::from_secs(60),
        || async {
            sink.logs().contains("assigned") && sink.logs().contains(&format!("{}/0", topic.name))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The first batch waits on a lock; its session is ended, so it fails before anything
    // was ever committed for the partition and the sink rewinds.
    let mut blocker = db.pool.begin().await.unwrap();
    blocker
        .execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    produce_orders(&producer(), &topic, 100, 150).await;
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&services().admin_url)
        .await
        .unwrap();
    wait_until(
        "the sink's first batch to wait on the lock",
        Duration::from_secs(30),
        || async {
            let ended: i64 = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name = 'kafka-pg-sink' AND wait_event_type = 'Lock'",
            )
            .bind(&db.name)
            .fetch_one(&admin)
            .await
            .unwrap();
            ended > 0
        },
    )
    .await;
    blocker.rollback().await.unwrap();

    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let expected: Vec<i64> = (100..150).collect();
    assert_orders_are(&db, "orders", &expected).await;
    assert!(
        sink.logs().contains("rewound to stored offsets"),
        "no rewind happened: the test proved nothing\n{}",
        sink.logs_tail(30)
    );
    assert!(sink.stop().success());
}

/// `latest` is pinned when the partition is claimed: the end offset then is stored as its
/// position and recorded as an `auto_offset_reset` event, so a sink killed before its first
/// commit restarts there and reads what arrived meanwhile, instead of skipping to a newer end.
#[tokio::test(flavor = "multi_thread")]
async fn latest_is_pinned_at_the_claim_so_a_kill_before_the_first_commit_skips_nothing() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.reset = "latest";
    let mut sink = Sink::start(&config, "first");
    wait_until("the pinned position", Duration::from_secs(60), || async {
        db.stored_offsets(&config.group, &topic.name).await == vec![(0, Some(100))]
    })
    .await;
    sink.kill9();
    assert_eq!(
        db.count("orders").await,
        0,
        "killed before the first commit"
    );
    let events: Vec<(String, Option<i64>, i64)> =
        sqlx::query_as("SELECT kind, from_offset, to_offset FROM kafka_offset_events ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(events, vec![("auto_offset_reset".to_string(), None, 100)]);

    produce_orders(&producer(), &topic, 100, 150).await;
    let mut sink = Sink::start(&config, "restarted");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let expected: Vec<i64> = (100..150).collect();
    assert_orders_are(&db, "orders", &expected).await;
    assert!(sink.stop().success());
}
