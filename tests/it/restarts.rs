//! The services restart under the sink: PostgreSQL, then the Kafka broker, each stopped and
//! started again during a load. Each test has its own instance of the service it restarts,
//! so the other tests never notice.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, producer_on, TestTopic};
use crate::helpers::private::Private;
use crate::helpers::sink::{LogsOnPanic, Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 40_000;

#[tokio::test(flavor = "multi_thread")]
async fn postgres_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing() {
    let pg = tokio::task::spawn_blocking(|| Private::up("postgres"))
        .await
        .unwrap();
    let db = TestDb::migrated_on(&pg.admin_url()).await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    produce_orders(&producer(), &topic, 0, RECORDS).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 300;
    let mut sink = Sink::start(&config, "sink");
    wait_until("the first rows", Duration::from_secs(60), || async {
        db.count("orders").await > 2_000
    })
    .await;

    let pg = tokio::task::spawn_blocking(move || {
        pg.stop("postgres");
        std::thread::sleep(Duration::from_secs(3));
        pg.start("postgres");
        pg
    })
    .await
    .unwrap();
    db.pool.close().await;
    let db = TestDb::reconnect(db).await;

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    let logs = sink.logs();
    assert!(
        logs.contains("rewound to stored offsets"),
        "the outage was noticed and recovered from:\n{}",
        sink.logs_tail(30)
    );
    assert!(sink.stop().success());
    drop(db);
    drop(pg);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kafka_broker_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing() {
    let kafka = tokio::task::spawn_blocking(|| Private::up("kafka"))
        .await
        .unwrap();
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create_on(
        &kafka.bootstrap(),
        &format!("t-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        4,
    )
    .await;
    let producer = producer_on(&kafka.bootstrap());
    produce_orders(&producer, &topic, 0, RECORDS / 2).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(kafka.bootstrap());
    config.max_records = 300;
    let mut sink = Sink::start(&config, "sink");
    wait_until("the first rows", Duration::from_secs(60), || async {
        db.count("orders").await > 2_000
    })
    .await;

    let kafka = tokio::task::spawn_blocking(move || {
        kafka.stop("kafka");
        std::thread::sleep(Duration::from_secs(3));
        kafka.start("kafka");
        kafka
    })
    .await
    .unwrap();
    // More records after the restart; the sink must pick up without anyone touching it.
    produce_orders(&producer, &topic, RECORDS / 2, RECORDS).await;

    {
        let _logs = LogsOnPanic(&sink);
        wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    }
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    assert!(
        sink.is_running(),
        "the sink stays up through the broker's restart"
    );
    assert!(sink.stop().success());
    drop(topic);
    drop(kafka);
}
