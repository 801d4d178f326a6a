//! `kill -9` at random moments while draining: no duplicate, no gap, ever.

use std::time::Duration;

use rand::Rng;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 50_000;
const KILLS: usize = 10;

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    kill_9_at_random_moments("insert").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_in_upsert_mode_loses_nothing() {
    kill_9_at_random_moments("upsert").await;
}

async fn kill_9_at_random_moments(mode: &str) {
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
    produce_orders(&producer(), &topic, 0, RECORDS).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    // Small batches: many transactions, so kills land before, inside and after commits.
    config.max_records = 300;
    config.max_wait_ms = 50;
    config.topic_settings = format!("mode = \"{mode}\"");
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
    assert!(last.stop().success());
}
