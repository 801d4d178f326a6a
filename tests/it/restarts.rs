//! The services restart under the sink: PostgreSQL, then the Kafka broker, each stopped and
//! started again during a load. Each test has its own instance of the service it restarts,
//! so the other tests never notice.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, producer_on, TestTopic};
use crate::helpers::orders::assert_orders_are;
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

/// README, "Replicas and partitions": a process killed with `kill -9` and started again under
/// the same `group_instance_id` commits again within seconds, because the group hands it the
/// dead process's partitions at once instead of after the session timeout (45 s here, the
/// default, which a restart without the id waits out); so does a clean stop and a new process
/// under the same id, as a rollout replaces a pod. The id comes from the environment, as the
/// Helm chart gives it.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_under_the_same_group_instance_id_commits_again_within_5_s() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 2_000).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.session_timeout_ms = 45_000;
    config.env.push((
        "KAFKA_PG_SINK_KAFKA__GROUP_INSTANCE_ID".into(),
        "sink-0".into(),
    ));
    let mut first = Sink::start(&config, "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(
        first
            .logs()
            .contains("group_protocol auto: static membership is classic's"),
        "{}",
        first.logs_tail(20)
    );
    first.kill9();

    produce_orders(&producer, &topic, 2_000, 4_000).await;
    let restarted = std::time::Instant::now();
    let second = Sink::start(&config, "second");
    let _logs = LogsOnPanic(&second);
    wait_until(
        "the restarted process's first commit",
        Duration::from_secs(5),
        || async { db.count("orders").await > 2_000 },
    )
    .await;
    eprintln!("first commit {:?} after the restart", restarted.elapsed());
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    drop(_logs);

    // A rollout's replacement: a clean stop (which, for a static member, leaves the
    // partitions with the group) and a new process under the same id.
    let mut second = second;
    assert!(second.stop().success());
    produce_orders(&producer, &topic, 4_000, 6_000).await;
    let replaced = std::time::Instant::now();
    let third = Sink::start(&config, "third");
    let _logs = LogsOnPanic(&third);
    wait_until(
        "the replacement's first commit",
        Duration::from_secs(5),
        || async { db.count("orders").await > 4_000 },
    )
    .await;
    eprintln!(
        "first commit {:?} after the replacement",
        replaced.elapsed()
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 6_000).await;
    assert_orders_are(&db, "orders", &(0..6_000).collect::<Vec<_>>()).await;
}

/// README, "Restarts": a static member sends the group no goodbye when it stops cleanly, so a
/// process under another id gets its partitions only when the stopped one's
/// `session_timeout` (6 s here) ends, where a dynamic member's clean stop hands them over at
/// once; nothing is lost or written twice meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_static_member_stopped_cleanly_holds_its_partitions_until_its_session_times_out() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 1_000).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.session_timeout_ms = 6_000;
    let with_id = |id: &str| {
        let mut c = config.clone();
        c.env
            .push(("KAFKA_PG_SINK_KAFKA__GROUP_INSTANCE_ID".into(), id.into()));
        c
    };
    let mut first = Sink::start(&with_id("sink-a"), "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(first.stop().success(), "{}", first.logs_tail(20));
    assert!(
        first.logs().contains("static member: the group keeps"),
        "{}",
        first.logs_tail(20)
    );

    produce_orders(&producer, &topic, 1_000, 2_000).await;
    let stopped = std::time::Instant::now();
    let second = Sink::start(&with_id("sink-b"), "second");
    let _logs = LogsOnPanic(&second);
    wait_until(
        "the other process's first commit",
        Duration::from_secs(60),
        || async { db.count("orders").await > 1_000 },
    )
    .await;
    let waited = stopped.elapsed();
    assert!(
        waited >= Duration::from_secs(3),
        "the partitions moved after {waited:?}: the stopped static member left the group"
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 2_000).await;
    assert_orders_are(&db, "orders", &(0..2_000).collect::<Vec<_>>()).await;
}
