//! The sink never hangs and never miscounts: a dead writer, a database that does not answer
//! the claim, a Kafka password that is wrong, and failures counted by what they are.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::orders::assert_orders_are;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_that_panics_stops_the_sink_with_exit_1_and_a_restart_completes() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 6_000).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 100;
    // Debug builds only: writer 0 panics before its fourth batch.
    config.env = vec![("KPS_FAULT_WRITER_PANIC".into(), "0:3".into())];
    let mut sink = Sink::start(&config, "panicking");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "the sink hung after its writer died\n{}",
                sink.logs_tail(30)
            )
        });
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    assert!(
        sink.logs().contains("writer 0 stopped unexpectedly"),
        "{}",
        sink.logs_tail(30)
    );

    config.env.clear();
    let mut sink = Sink::start(&config, "restarted");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 6_000).await;
    assert_orders_are(&db, "orders", &(0..6_000).collect::<Vec<_>>()).await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_the_database_never_answers_stops_the_sink_within_the_poll_interval() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;

    // Another application holds kafka_offsets exclusively: the claim and the query that would
    // fence a lock holder both wait, and only timeouts end the wait.
    let mut blocker = db.pool.begin().await.unwrap();
    blocker
        .execute("LOCK TABLE kafka_offsets IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    // The claim may be retried for half of max.poll.interval.ms (20 s), no longer.
    config.kafka_properties = "\"max.poll.interval.ms\" = \"40000\"".into();
    config.env = vec![(
        "KAFKA_PG_SINK_POSTGRES__STATEMENT_TIMEOUT".into(),
        "2s".into(),
    )];
    let started = std::time::Instant::now();
    let mut sink = Sink::start(&config, "blocked");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "the rebalance callback kept retrying the claim\n{}",
                sink.logs_tail(30)
            )
        });
    let elapsed = started.elapsed();
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    // It kept retrying (no give-up at the first failure) and stopped before the group's
    // max.poll.interval.ms of 40 s would have dropped it.
    assert!(
        elapsed >= Duration::from_secs(15) && elapsed < Duration::from_secs(40),
        "exited after {elapsed:?}\n{}",
        sink.logs_tail(30)
    );
    assert!(
        sink.logs()
            .contains("cannot claim assigned partitions in PostgreSQL; retrying"),
        "{}",
        sink.logs_tail(30)
    );
    assert!(
        sink.logs()
            .contains("cannot claim the assigned partitions in PostgreSQL"),
        "{}",
        sink.logs_tail(30)
    );
    blocker.rollback().await.unwrap();
    assert_eq!(db.count("orders").await, 0);

    config.env.clear();
    let mut sink = Sink::start(&config, "unblocked");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_orders_are(&db, "orders", &(0..1_000).collect::<Vec<_>>()).await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn batches_queued_behind_a_failure_are_not_counted_as_fenced() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let ender = SessionEnder::arm(&db, "orders", Duration::from_millis(20)).await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 30_000).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 100;
    config.writers = 1;
    let mut sink = Sink::start(&config, "sink");
    // Sessions ended mid-drain: the batch in the transaction fails, and the one queued behind
    // it expects a position that never came to be. No other consumer exists, so nothing is
    // fenced.
    ender
        .end_busy(30_000, 100, 5, Duration::from_millis(100))
        .await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 30_000).await;

    let (status, body) = get(&sink.http_address(), "/metrics");
    assert_eq!(status, 200);
    let metrics = parse_metrics(&body);
    let failures = |reason: &str| {
        metric(
            &metrics,
            &format!("kafka_pg_sink_batch_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(
        failures("transient") >= 1.0,
        "no transaction failed: the test proved nothing\n{body}"
    );
    assert!(
        failures("stale") >= 1.0,
        "no batch was queued behind a failure: the test proved nothing\n{body}"
    );
    assert_eq!(
        metric(&metrics, "kafka_pg_sink_fenced_commits_total"),
        0.0,
        "retries were counted as fenced commits\n{body}"
    );
    assert_eq!(failures("fenced"), 0.0, "{body}");
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn run_with_a_wrong_kafka_password_says_not_ready_then_exits_1() {
    let sasl = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: this test needs the SASL listener of scripts/dev-services.sh (eval \"$(scripts/dev-services.sh env)\")")
        })
    };
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(sasl("KPS_KAFKA_SASL_BOOTSTRAP"));
    config.kafka_properties = format!(
        "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{}\"\n\"sasl.password\" = \"${{KPS_TEST_SASL_PASSWORD}}\"",
        sasl("KPS_KAFKA_SASL_USER")
    );
    config.env = vec![
        (
            "KPS_TEST_SASL_PASSWORD".into(),
            "not-the-password-41".into(),
        ),
        (
            "KAFKA_PG_SINK_KAFKA__AUTH_FAILURE_TIMEOUT".into(),
            "10s".into(),
        ),
    ];
    let mut sink = Sink::start(&config, "wrong-password");
    let address = sink.http_address();
    wait_until(
        "/ready to name the authentication failure",
        Duration::from_secs(10),
        || async {
            let (status, body) = get(&address, "/ready");
            status == 503 && body.contains("kafka_error") && body.contains("uthentication")
        },
    )
    .await;
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "run kept going with a wrong password\n{}",
                sink.logs_tail(30)
            )
        });
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    let logs = sink.logs();
    assert!(
        logs.contains("authentication with the Kafka brokers has failed"),
        "{}",
        sink.logs_tail(30)
    );
    assert!(
        !logs.contains("not-the-password-41"),
        "the password was logged"
    );
}
