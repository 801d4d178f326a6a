//! End to end: every record becomes exactly one row with the right values, across restarts.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{order_json, produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_records_become_exactly_ten_thousand_rows_with_their_values() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(4).await;
    produce_orders(&producer(), &topic, 0, 10_000).await;

    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_exactly_once(&db, "orders", 10_000).await;
    assert_rows_match_offsets(&db, "orders", &config.group, &topic.name).await;

    // Each row holds exactly what its record said.
    /// id, customer, amount, status, created_at (ms), attrs, partition, offset
    type OrderRow = (
        i64,
        String,
        String,
        Option<String>,
        i64,
        serde_json::Value,
        i32,
        i64,
    );
    let rows: Vec<OrderRow> = sqlx::query_as(
        "SELECT id, customer, amount::text, status, (extract(epoch FROM created_at) * 1000)::int8,
                attrs, kafka_partition, kafka_offset FROM orders ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (id, customer, amount, status, created_ms, attrs, partition, _offset) in rows {
        let expected: serde_json::Value = serde_json::from_str(&order_json(id)).unwrap();
        assert_eq!(customer, expected["customer"].as_str().unwrap(), "id {id}");
        assert_eq!(amount, expected["amount"].as_str().unwrap(), "id {id}");
        assert_eq!(status.as_deref(), expected["status"].as_str(), "id {id}");
        assert_eq!(created_ms, 1_700_000_000_000 + id * 1000, "id {id}");
        assert_eq!(attrs, expected["attrs"], "id {id}");
        assert_eq!(partition as i64, id % 4, "id {id}");
    }
    // Offsets within each partition are the record offsets 0..n, each once.
    let gaps: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT kafka_partition, max(kafka_offset) + 1 - count(DISTINCT kafka_offset) AS gap
           FROM orders GROUP BY 1) g WHERE gap <> 0",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(gaps, 0);

    let status = sink.stop();
    assert!(
        status.success(),
        "SIGTERM must exit 0, got {status:?}\n{}",
        sink.logs_tail(30)
    );
    assert!(
        sink.logs().contains("left the consumer group"),
        "{}",
        sink.logs_tail(30)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_part_way_and_a_restart_leave_no_duplicate_and_no_gap() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 20_000).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 200;
    let mut sink = Sink::start(&config, "first");
    wait_until(
        "a part of the backlog",
        Duration::from_secs(120),
        || async { db.count("orders").await >= 2_000 },
    )
    .await;
    // Ctrl-C, as an operator at a terminal would.
    sink.signal(nix::sys::signal::Signal::SIGINT);
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("SIGINT stops the sink");
    assert!(status.success(), "{status:?}\n{}", sink.logs_tail(30));
    let at_stop = db.count("orders").await;
    assert!(
        at_stop < 20_000,
        "the stop should land part way, but all {at_stop} rows were written"
    );
    // At rest the rows and the stored positions agree exactly.
    assert_rows_match_offsets(&db, "orders", &config.group, &topic.name).await;

    produce_orders(&producer, &topic, 20_000, 25_000).await;
    let mut again = Sink::start(&config, "second");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 25_000).await;
    assert!(again.stop().success());
}
