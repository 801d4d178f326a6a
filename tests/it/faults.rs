//! Failed transactions: whatever a failure interrupts, nothing is lost or written twice.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::proxy::CommitCutter;
use crate::helpers::services::services;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 40_000;

#[tokio::test(flavor = "multi_thread")]
async fn writer_sessions_killed_mid_transaction_roll_back_and_rewind() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(4).await;
    produce_orders(&producer(), &topic, 0, RECORDS).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 250;
    let mut sink = Sink::start(&config, "sink");

    // A second session ends the sink's sessions in this database over and over, as a
    // failover or an administrator would: transactions die before, during and after COPY.
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&services().admin_url)
        .await
        .unwrap();
    // Sessions are ended only once the sink writes: ending its startup queries would stop it
    // before it ever ran, which is not what this test is about.
    wait_until("the first rows", Duration::from_secs(60), || async {
        db.count("orders").await > 0
    })
    .await;
    let mut killed = 0i64;
    for _ in 0..20 {
        if db.count("orders").await >= RECORDS {
            break;
        }
        let n: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE datname = $1 AND application_name = 'kafka-pg-sink' AND state <> 'idle'",
        )
        .bind(&db.name)
        .fetch_one(&admin)
        .await
        .unwrap();
        killed += n;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(
        killed > 0,
        "no transaction was interrupted: the test proved nothing"
    );

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    let logs = sink.logs();
    assert!(
        logs.contains("rewound to stored offsets"),
        "{}",
        sink.logs_tail(40)
    );
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_whose_answer_is_lost_is_resolved_by_rereading_not_by_guessing() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 20_000).await;

    // The sink reaches PostgreSQL through a proxy that loses the answer to every 7th COMMIT.
    let mut url = url::Url::parse(&db.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let cutter = CommitCutter::start(upstream, 7).await;
    url.set_port(Some(cutter.port)).unwrap();
    // The proxy reads the protocol, so no TLS on this path.
    url.query_pairs_mut().append_pair("sslmode", "disable");
    let mut config = SinkConfig::new(url.as_str(), &topic.name, "orders");
    config.max_records = 400;
    let mut sink = Sink::start(&config, "sink");

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert!(
        cutter.cuts() >= 3,
        "only {} of {} commits lost their answer",
        cutter.cuts(),
        cutter.commits()
    );
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 20_000).await;
    assert!(sink.stop().success());
}
