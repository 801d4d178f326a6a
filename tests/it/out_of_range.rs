//! A stored position the partition no longer has (retention deleted the records, or the topic
//! was recreated) is never skipped silently: the sink stops and says how to continue, or, if
//! told to, moves to the earliest record and records that it did.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{client_config, produce_orders, producer, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Deletes the records of partition 0 before `before` (the low watermark moves there).
async fn delete_before(topic: &TestTopic, before: i64) {
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
