//! A rolling update onto the `auto` default. Kafka cannot upgrade a classic group whose
//! members' assignor keeps user data (librdkafka's cooperative-sticky does) while members
//! remain: a `consumer` member joining it gets nothing, and a rollout that waits for it to
//! be ready stalls. So `auto` joins a running classic group as classic, and a group that
//! starts empty (or already runs KIP-848) gets `consumer`. Nothing may be lost or doubled.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 30_000;

/// Waits until `sink` owns partitions.
async fn owns_partitions(sink: &Sink) {
    wait_until(
        &format!("{} to own partitions", sink.name),
        Duration::from_secs(60),
        || async { sink.logs().contains("assigned partitions=[\"") },
    )
    .await;
}

/// Two classic processes replaced one by one by `auto` ones while records arrive: the new
/// ones join the running classic group as classic and get partitions. Then the group is
/// stopped and started again: `auto` picks `consumer`, for a second process too (the group
/// now runs KIP-848). Every record lands once with every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_update_from_classic_to_auto_keeps_the_group_classic_and_loses_nothing() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(8).await;
    let mut classic = SinkConfig::new(&db.url, &topic.name, "orders");
    classic.protocol = "classic";
    classic.max_records = 500;
    let mut auto = classic.clone();
    auto.protocol = "auto";

    let handle = topic.handle();
    let producing = tokio::spawn(async move {
        let producer = producer();
        let step = RECORDS / 20;
        for slice in 0..20 {
            produce_orders(&producer, &handle, slice * step, (slice + 1) * step).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let mut old_a = Sink::start(&classic, "old a (classic)");
    let mut old_b = Sink::start(&classic, "old b (classic)");
    owns_partitions(&old_a).await;
    let mut new_a = Sink::start(&auto, "new a (auto)");
    owns_partitions(&new_a).await;
    assert!(old_a.stop().success(), "{}", old_a.logs_tail(30));
    let mut new_b = Sink::start(&auto, "new b (auto)");
    owns_partitions(&new_b).await;
    assert!(old_b.stop().success(), "{}", old_b.logs_tail(30));
    producing.await.unwrap();
    wait_drained(&db, &classic.group, &topic, Duration::from_secs(180)).await;
    for sink in [&new_a, &new_b] {
        assert!(
            sink.logs()
                .contains("the group runs the classic protocol; joining it as it is"),
            "{}",
            sink.logs_tail(30)
        );
    }
    assert!(new_a.stop().success(), "{}", new_a.logs_tail(30));
    assert!(new_b.stop().success(), "{}", new_b.logs_tail(30));

    // Stopped and started again: an empty group, so `consumer`; the second process finds
    // a KIP-848 group with a member and stays on it.
    let mut fresh_a = Sink::start(&auto, "fresh a (auto)");
    owns_partitions(&fresh_a).await;
    let mut fresh_b = Sink::start(&auto, "fresh b (auto)");
    owns_partitions(&fresh_b).await;
    produce_orders(&producer(), &topic, RECORDS, RECORDS + 4_000).await;
    wait_drained(&db, &classic.group, &topic, Duration::from_secs(120)).await;
    for sink in [&fresh_a, &fresh_b] {
        assert!(
            sink.logs()
                .contains("the brokers offer the KIP-848 consumer protocol protocol=Consumer"),
            "{}",
            sink.logs_tail(30)
        );
    }
    let copies = orders_as_produced(&db, "orders", 8).await;
    assert_eq!(
        copies.len() as i64,
        RECORDS + 4_000,
        "distinct (partition, offset)"
    );
    assert_delivered_exactly_once(&db, "orders", &classic.group, &topic.name, RECORDS + 4_000)
        .await;
    assert!(fresh_a.stop().success(), "{}", fresh_a.logs_tail(30));
    assert!(fresh_b.stop().success(), "{}", fresh_b.logs_tail(30));
}
