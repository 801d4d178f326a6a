//! Consumers joining and leaving mid-stream, under both group protocols.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 30_000;

/// Produces `0..RECORDS` in slices over about ten seconds.
fn produce_in_background(topic: &TestTopic) -> tokio::task::JoinHandle<()> {
    let topic = topic.handle();
    tokio::spawn(async move {
        let producer = producer();
        let step = RECORDS / 20;
        for slice in 0..20 {
            produce_orders(&producer, &topic, slice * step, (slice + 1) * step).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

async fn join_and_leave_mid_stream(protocol: &'static str) {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(8).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.protocol = protocol;
    config.max_records = 500;

    let producing = produce_in_background(&topic);
    let mut a = Sink::start(&config, "a");
    let mut b = Sink::start(&config, "b");
    wait_until("the first rows", Duration::from_secs(60), || async {
        db.count("orders").await > 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut c = Sink::start(&config, "c (joins)");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = b.stop();
    assert!(
        status.success(),
        "b (leaves): {status:?}\n{}",
        b.logs_tail(30)
    );
    producing.await.unwrap();

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    // The scenario really moved partitions: the joiner got some, the leaver gave its up.
    assert!(c.logs().contains("assigned"), "{}", c.logs_tail(30));
    assert!(b.logs().contains("revoked"), "{}", b.logs_tail(30));
    let claims: i64 =
        sqlx::query_scalar("SELECT count(*) FROM offset_audit WHERE new_epoch > old_epoch")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(claims > 0, "no partition changed owner during the test");
    assert!(a.stop().success());
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn join_and_leave_mid_stream_with_the_classic_protocol() {
    join_and_leave_mid_stream("classic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn join_and_leave_mid_stream_with_the_consumer_protocol() {
    join_and_leave_mid_stream("consumer").await;
}
