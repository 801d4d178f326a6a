//! `kill -9` at random moments while draining: no duplicate, no gap, ever.

use std::time::Duration;

use rand::Rng;

use crate::helpers::confluent::{produce, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::registry::registry_url;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 50_000;
const KILLS: usize = 10;

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    kill_9_at_random_moments("insert", Encoding::Json).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_in_upsert_mode_loses_nothing() {
    kill_9_at_random_moments("upsert", Encoding::Json).await;
}

/// The same orders in Avro through the real registry: the sink fetches the schema again after
/// every restart, and the crash guarantees hold as for JSON.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_in_avro_loses_and_duplicates_nothing() {
    kill_9_at_random_moments("insert", Encoding::Avro).await;
}

/// How the test's orders are written.
#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Json,
    Avro,
}

/// The orders' Avro schema: the same values `order_json` gives.
const ORDER_AVRO: &str = r#"{"type":"record","name":"Order","namespace":"kps.test","fields":[
  {"name":"id","type":"long"},{"name":"customer","type":"string"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
  {"name":"status","type":"string"},
  {"name":"created_at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"attrs","type":{"type":"record","name":"Attrs","fields":[{"name":"n","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}}]}}]}"#;

/// Orders `0..RECORDS` in Avro, order `id` to partition `id % partitions` (as `produce_orders`),
/// written by confluent-kafka's AvroSerializer.
async fn produce_avro_orders(topic: &TestTopic) {
    let records: Vec<serde_json::Value> = (0..RECORDS)
        .map(|id| {
            let cents = (id % 1000) * 100 + id % 100;
            let status = ["new", "paid", "shipped"][(id % 3) as usize];
            serde_json::json!({
                "key": id.to_string(),
                "partition": id % topic.partitions as i64,
                "value": {
                    "id": id, "customer": format!("c-{}", id % 97),
                    "amount": {"$decimal": format!("{}.{:02}", cents / 100, cents % 100)},
                    "status": status,
                    "created_at": 1_700_000_000_000 + id * 1000,
                    "attrs": {"n": id, "tags": ["a", "b"]},
                },
            })
        })
        .collect();
    produce(
        &topic.name,
        &Serde::Avro(ORDER_AVRO),
        Some(&Serde::String),
        &records,
    )
    .await;
}

async fn kill_9_at_random_moments(mode: &str, encoding: Encoding) {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    if mode == "upsert" {
        sqlx::query("ALTER TABLE orders ADD PRIMARY KEY (id)")
            .execute(&db.pool)
            .await
            .unwrap();
    }
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    match encoding {
        Encoding::Json => produce_orders(&producer(), &topic, 0, RECORDS).await,
        Encoding::Avro => produce_avro_orders(&topic).await,
    }

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    // Small batches: many transactions, so kills land before, inside and after commits.
    config.max_records = 300;
    config.max_wait_ms = 50;
    config.topic_settings = format!("mode = \"{mode}\"");
    if encoding == Encoding::Avro {
        config.topic_settings.push_str("\nformat = \"avro\"");
        config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    }
    let mut rng = rand::rng();
    let mut killed_mid_drain = 0;
    for round in 0..KILLS {
        let mut sink = Sink::start(&config, &format!("round-{round}"));
        let before = db.count("orders").await;
        // Kill at a random point of the drain: once a random number of new rows is in, plus a
        // random few milliseconds, so the kill can land anywhere in a transaction.
        let target = (before + rng.random_range(100..3_000)).min(RECORDS);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while db.count("orders").await < target {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no progress\n{}",
                sink.logs_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
        sink.kill9();
        let rows = db.count("orders").await;
        if rows < RECORDS {
            killed_mid_drain += 1;
        }
        // Whatever the moment, what is committed is consistent: rows and positions agree.
        assert_rows_match_offsets(&db, "orders", &config.group, &topic.name).await;
        let (dups, _) = db.duplicates_and_distinct("orders").await;
        assert!(dups.is_empty(), "round {round}: duplicates {dups:?}");
    }
    assert!(
        killed_mid_drain >= KILLS / 2,
        "only {killed_mid_drain} kills landed mid-drain: the test proved little"
    );

    let mut last = Sink::start(&config, "final");
    // The last kill may have come after the drain: the SIGTERM must not beat its handler.
    wait_assigned(&last).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(240)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    // Every column of every row is the order it names, whatever the encoding.
    let copies = orders_as_produced(&db, "orders", topic.partitions as i64).await;
    assert_eq!(copies.len() as i64, RECORDS);
    assert!(last.stop().success());
}
