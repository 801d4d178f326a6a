//! A stored position the partition no longer has (retention deleted the records, or the topic
//! was recreated) is never skipped silently: the sink stops and says how to continue, or, if
//! told to, moves to the earliest record and records that it did.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{client_config, produce_orders, producer, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Deletes the records of partition 0 before `before` (the low watermark moves there).
pub(crate) async fn delete_before(topic: &TestTopic, before: i64) {
    let admin: AdminClient<DefaultClientContext> = client_config().create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic.name, 0, Offset::Offset(before))
        .unwrap();
    admin
        .delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
}

async fn events(db: &TestDb) -> Vec<(String, Option<i64>, i64)> {
    sqlx::query_as("SELECT kind, from_offset, to_offset FROM kafka_offset_events ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn deleted_history_stops_the_sink_or_is_skipped_and_recorded_by_policy() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 100).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start(&config, "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());

    // While the sink is down, more records arrive and the oldest unread ones are deleted.
    produce_orders(&producer, &topic, 100, 200).await;
    delete_before(&topic, 150).await;

    let mut refused = Sink::start(&config, "fail policy");
    let status = refused
        .wait_timeout(Duration::from_secs(60))
        .expect("the default policy stops the sink");
    assert!(!status.success());
    let logs = refused.logs();
    assert!(
        logs.contains("resumes at offset 100, outside its range 150..200"),
        "{}",
        refused.logs_tail(10)
    );
    assert!(
        logs.contains("offsets reset") && logs.contains("--partition 0 --to-offset 150"),
        "{}",
        refused.logs_tail(10)
    );
    assert_eq!(
        db.count("orders").await,
        100,
        "nothing written past the gap"
    );
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(100))]
    );

    config.extra = String::new();
    let toml = config.toml().replace(
        "auto_offset_reset = \"earliest\"",
        "auto_offset_reset = \"earliest\"\noffset_out_of_range = \"earliest\"",
    );
    let file = ConfigFile::new(&toml);
    let path = file.path();
    let mut moved = Sink::start_file(path, "earliest policy");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_eq!(
        db.count("orders").await,
        150,
        "the 100 from before and the 50 that still exist"
    );
    assert_eq!(
        events(&db).await,
        vec![("out_of_range_reset".to_string(), Some(100), 150)]
    );

    // While running: the sink is stopped for a moment, records it has not read are deleted,
    // and on waking it finds its position gone; the policy moves it and records it again.
    moved.signal(Signal::SIGSTOP);
    // Let the fetch the sink left waiting at the broker (up to fetch.wait.max.ms) come back
    // empty, so the records below are not already on their way to it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    produce_orders(&producer, &topic, 200, 300).await;
    delete_before(&topic, 250).await;
    moved.signal(Signal::SIGCONT);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let by_id: HashMap<bool, i64> =
        sqlx::query_as("SELECT id >= 250, count(*) FROM orders WHERE id >= 200 GROUP BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(by_id.get(&true), Some(&50));
    assert_eq!(
        by_id.get(&false),
        None,
        "the deleted records cannot be read"
    );
    assert_eq!(
        events(&db).await.last(),
        Some(&("out_of_range_reset".to_string(), Some(200), 250))
    );
    assert!(moved.stop().success());
}

/// Stops `sink` (SIGSTOP), lets its waiting fetch come back empty, produces orders
/// `from..to`, deletes partition 0 before `before` and wakes the sink: its position is gone.
async fn lose_the_position_while_running(
    sink: &Sink,
    topic: &TestTopic,
    from: i64,
    to: i64,
    before: i64,
) {
    sink.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    produce_orders(&producer(), topic, from, to).await;
    delete_before(topic, before).await;
    sink.signal(Signal::SIGCONT);
}

/// A position lost while the sink runs: `latest` moves it to the high watermark (nothing of
/// what remains is written) and records it; `fail` stops the sink with the gap and the command
/// to move on, writing nothing past the gap.
#[tokio::test(flavor = "multi_thread")]
async fn a_position_lost_while_running_moves_to_latest_or_stops_the_sink_by_policy() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let latest = ConfigFile::new(&config.toml().replace(
        "auto_offset_reset = \"earliest\"",
        "auto_offset_reset = \"earliest\"\noffset_out_of_range = \"latest\"",
    ));
    let mut sink = Sink::start_file(latest.path(), "latest policy");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    lose_the_position_while_running(&sink, &topic, 100, 200, 150).await;
    wait_until(
        "the position to move to the high watermark",
        Duration::from_secs(60),
        || async { events(&db).await.len() == 1 },
    )
    .await;
    assert_eq!(
        events(&db).await,
        vec![("out_of_range_reset".to_string(), Some(100), 200)]
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    assert_eq!(copies, (0..100).map(|o| ((0, o), 1)).collect());
    assert!(sink.stop().success());

    let mut sink = Sink::start(&config, "fail policy");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(10));
    lose_the_position_while_running(&sink, &topic, 200, 300, 250).await;
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the default policy stops the sink");
    assert_eq!(status.code(), Some(1));
    let logs = sink.logs();
    assert!(
        logs.contains("resumes at offset 200, outside its range 250..300")
            && logs.contains("--partition 0 --to-offset 250"),
        "{}",
        sink.logs_tail(10)
    );
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(200))]
    );
    assert_eq!(
        db.count("orders").await,
        100,
        "nothing written past the gap"
    );
}

/// A topic deleted and created again while the sink is down starts over at offset 0: the
/// stored position is past its end, and the sink stops with the same message.
#[tokio::test(flavor = "multi_thread")]
async fn a_recreated_topic_stops_the_sink_with_its_range() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start(&config, "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());

    let admin: AdminClient<DefaultClientContext> = client_config().create().unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in admin.delete_topics(&[&topic.name], &options).await.unwrap() {
        r.unwrap();
    }
    // Deletion completes in the background; creating the name again fails until it has.
    let recreated = NewTopic::new(&topic.name, 1, TopicReplication::Fixed(1));
    wait_until(
        "the topic to be created again",
        Duration::from_secs(60),
        || async {
            let results = admin.create_topics([&recreated], &options).await.unwrap();
            results.into_iter().all(|r| r.is_ok())
        },
    )
    .await;
    produce_orders(&producer(), &topic, 100, 110).await;

    let mut sink = Sink::start(&config, "after the recreate");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the default policy stops the sink");
    assert_eq!(status.code(), Some(1));
    assert!(
        sink.logs()
            .contains("resumes at offset 100, outside its range 0..10"),
        "{}",
        sink.logs_tail(10)
    );
    assert_eq!(
        db.count("orders").await,
        100,
        "nothing written past the gap"
    );
}
