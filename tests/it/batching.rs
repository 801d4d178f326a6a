//! Batches and their transactions: what closes a batch, how many a writer queues, what a
//! signal, a revoke, a timeout or a retryable error does to the batches that are open.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sqlx::{Connection, Executor, PgConnection};

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::kafka::{order_json, produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Records the sink has taken from Kafka into batches (not what librdkafka prefetched).
fn consumed(address: &str, topic: &str) -> f64 {
    let (_, body) = get(address, "/metrics");
    metric(
        &parse_metrics(&body),
        &format!("kafka_pg_sink_records_consumed_total{{topic=\"{topic}\"}}"),
    )
}

/// Every order `0..n` is a row exactly once, every column as produced.
async fn assert_orders_once(db: &TestDb, partitions: i64, n: i64) {
    let copies = orders_as_produced(db, "orders", partitions).await;
    let wrong: Vec<_> = copies.iter().filter(|(_, &c)| c != 1).collect();
    assert!(wrong.is_empty(), "(partition, offset) → copies: {wrong:?}");
    assert_eq!(copies.len() as i64, n, "rows");
}

/// Each row remembers the transaction that wrote it (the sink leaves the column to its
/// default, like `inserted_at`).
async fn note_transactions(db: &TestDb) {
    db.pool
        .execute("ALTER TABLE orders ADD COLUMN tx bigint NOT NULL DEFAULT txid_current()")
        .await
        .unwrap();
}

/// The ids each transaction wrote, in commit order of their first id.
async fn ids_by_transaction(db: &TestDb) -> Vec<Vec<i64>> {
    let rows: Vec<(i64, i64)> = sqlx::query_as("SELECT tx, id FROM orders ORDER BY tx, id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let mut by_tx: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (tx, id) in rows {
        by_tx.entry(tx).or_default().push(id);
    }
    by_tx.into_values().collect()
}

/// A session of the test that holds `orders` locked against writes until it is dropped or
/// rolled back: the sink's COPY waits, reads still work.
async fn lock_orders(db: &TestDb) -> PgConnection {
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    conn.execute("BEGIN; LOCK TABLE orders IN EXCLUSIVE MODE")
        .await
        .unwrap();
    conn
}

/// Waits until a sink session is blocked on a lock: its batch is stuck in the transaction.
async fn wait_for_a_blocked_writer(db: &TestDb) {
    wait_until(
        "a sink session to wait on the table lock",
        Duration::from_secs(60),
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name = 'kafka-pg-sink'
                    AND wait_event_type = 'Lock'",
            )
            .bind(&db.name)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            n > 0
        },
    )
    .await;
}

/// The writer blocked on a locked table holds one batch and queues at most `max_in_flight`
/// minus that one; then the consumer thread waits with one more sealed batch in hand. With
/// full batches (a long `max_wait`) of 100, `max_in_flight = 3` therefore stops the sink at
/// exactly 4 × 100 records taken, although 2,000 are waiting. (The metrics are published by
/// the waiting thread, so the count is read from the summary at exit: SIGTERM stops taking
/// records once the consumer thread runs again.)
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_queues_at_most_max_in_flight_batches_and_then_the_consumer_waits() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 10).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 100;
    config.max_wait_ms = 30_000;
    let args = [
        "--set",
        "batch.max_in_flight=3",
        "--set",
        "postgres.statement_timeout=300s",
    ];
    let mut sink = Sink::start_with(&config, "sink", &args);
    // The first ten wait out max_wait once; then the table is locked.
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let lock = lock_orders(&db).await;
    produce_orders(&producer, &topic, 10, 2_010).await;
    wait_for_a_blocked_writer(&db).await;
    // Ample time to take all 2,000 records, were nothing holding the consumer back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(db.count("orders").await, 10);
    sink.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(lock);
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("SIGTERM stops the sink");
    assert!(status.success(), "{status:?}\n{}", sink.logs_tail(20));
    let logs = sink.logs();
    let summary = logs
        .lines()
        .find(|l| l.contains(" summary"))
        .unwrap_or_else(|| panic!("no summary line\n{}", sink.logs_tail(20)));
    assert!(
        summary.contains("records_consumed=410 "),
        "10 + (max_in_flight + 1) × 100 records taken, no more: {summary}"
    );
    // What was taken is what was committed at the stop.
    assert_orders_once(&db, 1, 410).await;
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(410))]
    );

    let mut again = Sink::start(&config, "again");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_orders_once(&db, 1, 2_010).await;
    assert!(again.stop().success());
}

/// With a backlog and a long `max_wait`, every batch closes at exactly `max_records`.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_closes_at_max_records() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    note_transactions(&db).await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    // One writer: both partitions share its batches.
    config.writers = 1;
    config.max_records = 100;
    config.max_wait_ms = 60_000;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(50)).await;
    let sizes: Vec<usize> = ids_by_transaction(&db).await.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![100; 10], "rows per transaction");
    assert_orders_once(&db, 2, 1_000).await;
    assert!(sink.stop().success());
}

/// A batch closes with the record that brings its payload (key and value bytes) to
/// `max_bytes`: no batch is larger than that by more than its last record, and every batch
/// but the last (closed at the end of the partition) reaches it.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_closes_at_max_bytes() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    note_transactions(&db).await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 100_000;
    config.max_wait_ms = 5_000;
    let mut sink = Sink::start_with(&config, "sink", &["--set", "batch.max_bytes=4KiB"]);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let size = |id: i64| (order_json(id).len() + id.to_string().len()) as u64;
    let batches = ids_by_transaction(&db).await;
    assert!(batches.len() > 30, "{} transactions", batches.len());
    let mut short = 0;
    for ids in &batches {
        let bytes: u64 = ids.iter().map(|&id| size(id)).sum();
        let last = *ids.iter().max().unwrap();
        assert!(
            bytes - size(last) < 4096,
            "a batch of {bytes} bytes went on past 4 KiB: {ids:?}"
        );
        if bytes < 4096 {
            short += 1;
        }
    }
    assert!(short <= 1, "{short} batches closed before 4 KiB");
    assert_orders_once(&db, 1, 1_000).await;
    assert!(sink.stop().success());
}

/// A lone record waits `max_wait` in its open batch, and not much longer.
#[tokio::test(flavor = "multi_thread")]
async fn a_lone_record_waits_max_wait_before_its_batch_commits() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_wait_ms = 3_000;
    let mut sink = Sink::start(&config, "sink");
    // The first record shows the sink is assigned and fetching.
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    produce_orders(&producer, &topic, 1, 2).await;
    let produced = Instant::now();
    while db.count("orders").await < 2 {
        assert!(
            produced.elapsed() < Duration::from_secs(15),
            "the record was not written in 15 s\n{}",
            sink.logs_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = produced.elapsed();
    // The consumer may take the record a little before the producer hears the ack.
    assert!(
        waited >= Duration::from_millis(2_500),
        "committed after {waited:?}, before max_wait"
    );
    assert!(
        waited <= Duration::from_secs(10),
        "committed after {waited:?}"
    );
    assert_orders_once(&db, 1, 2).await;
    assert!(sink.stop().success());
}

/// SIGTERM commits the open batch (records taken, `max_wait` far away), leaves the group and
/// exits 0: rows and positions are there.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_commits_the_open_batch_and_exits_0() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_wait_ms = 300_000;
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    produce_orders(&producer(), &topic, 0, 50).await;
    wait_until(
        "the sink to take 50 records",
        Duration::from_secs(60),
        || async { consumed(&address, &topic.name) == 50.0 },
    )
    .await;
    assert_eq!(
        db.count("orders").await,
        0,
        "the batch should still be open"
    );
    sink.signal(Signal::SIGTERM);
    let status = sink
        .wait_timeout(Duration::from_secs(30))
        .expect("SIGTERM stops the sink");
    assert!(status.success(), "{status:?}\n{}", sink.logs_tail(30));
    assert_orders_once(&db, 2, 50).await;
    let end = topic.end_positions();
    assert_eq!(db.stored_offsets(&config.group, &topic.name).await, end);
    assert!(
        sink.logs().contains("left the consumer group"),
        "{}",
        sink.logs_tail(30)
    );
}

/// A second signal does not wait for a batch stuck in its transaction: exit 130 at once. The
/// interrupted batch counts as unwritten and is read again by the next start.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_exits_130_at_once() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 10).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(
        &config,
        "sink",
        &["--set", "postgres.statement_timeout=300s"],
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let lock = lock_orders(&db).await;
    produce_orders(&producer, &topic, 10, 100).await;
    wait_for_a_blocked_writer(&db).await;
    sink.signal(Signal::SIGTERM);
    // The first signal waits for the blocked batch (for as long as statement_timeout).
    assert!(
        sink.wait_timeout(Duration::from_secs(2)).is_none(),
        "the first signal should wait for the batch in flight\n{}",
        sink.logs_tail(20)
    );
    sink.signal(Signal::SIGTERM);
    let status = sink
        .wait_timeout(Duration::from_secs(3))
        .expect("a second signal exits at once");
    assert_eq!(status.code(), Some(130), "{}", sink.logs_tail(20));

    drop(lock);
    let mut again = Sink::start(&config, "again");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_orders_once(&db, 2, 100).await;
    assert!(again.stop().success());
}

/// `statement_timeout` bounds a batch's statements: a COPY stuck behind a lock is cancelled,
/// the batch counts as failed and is rewound, and once the lock is gone every record is
/// written once.
#[tokio::test(flavor = "multi_thread")]
async fn statement_timeout_fails_a_stuck_batch_which_is_rewound_and_retried() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 10).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(&config, "sink", &["--set", "postgres.statement_timeout=1s"]);
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let lock = lock_orders(&db).await;
    produce_orders(&producer, &topic, 10, 200).await;
    wait_until(
        "a batch to time out and be rewound",
        Duration::from_secs(60),
        || async {
            let logs = sink.logs();
            logs.lines().any(|l| {
                l.contains("WARN")
                    && l.contains("batch transaction failed")
                    && l.contains("statement timeout")
            }) && logs.contains("rewound to stored offsets")
        },
    )
    .await;
    let (_, body) = get(&address, "/metrics");
    assert!(
        metric(
            &parse_metrics(&body),
            "kafka_pg_sink_batch_failures_total{reason=\"transient\"}"
        ) >= 1.0,
        "{body}"
    );
    assert_eq!(db.count("orders").await, 10);

    drop(lock);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_orders_once(&db, 2, 200).await;
    assert!(sink.stop().success());
}

/// A serialization failure (40001) and a deadlock (40P01), raised by a trigger for the first
/// six COPYs, fail their batches, which are rewound and retried until every record is written
/// once.
#[tokio::test(flavor = "multi_thread")]
async fn serialization_failures_and_deadlocks_are_retried_to_exactly_once() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    // A sequence, because its values survive the rollback of the transaction that failed.
    db.pool
        .execute(
            "CREATE SEQUENCE faults;
             CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE n bigint := nextval('faults');
             BEGIN
                 IF n <= 3 THEN
                     RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = '40001';
                 ELSIF n <= 6 THEN
                     RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01';
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER inject_fault BEFORE INSERT ON orders
                 FOR EACH STATEMENT EXECUTE FUNCTION inject_fault();",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 500).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 50;
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let calls: i64 = sqlx::query_scalar("SELECT last_value FROM faults")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(calls > 6, "only {calls} COPYs: not every fault was raised");
    let logs = sink.logs();
    for cause in ["injected serialization failure", "injected deadlock"] {
        assert!(
            logs.lines().any(|l| l.contains("WARN")
                && l.contains("batch transaction failed")
                && l.contains(cause)),
            "no WARN for {cause}\n{}",
            sink.logs_tail(30)
        );
    }
    assert!(logs.contains("rewound to stored offsets"));
    let (_, body) = get(&address, "/metrics");
    assert!(
        metric(
            &parse_metrics(&body),
            "kafka_pg_sink_batch_failures_total{reason=\"transient\"}"
        ) >= 6.0,
        "{body}"
    );
    assert_orders_once(&db, 2, 500).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 500).await;
    assert!(sink.stop().success());
}

/// Owners of the group's partitions, as stored.
async fn owners(db: &TestDb, group: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT DISTINCT owner_id FROM kafka_offsets WHERE consumer_group = $1 ORDER BY 1",
    )
    .bind(group)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// While A's writer fails and retries, A keeps polling, so a second consumer joining the
/// group gets partitions within seconds (a member that stopped polling would hold the
/// rebalance for `max.poll.interval.ms`, 300 s).
#[tokio::test(flavor = "multi_thread")]
async fn rebalances_are_served_while_a_writer_retries() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    db.pool
        .execute(
            "CREATE TABLE failing (on_now bool NOT NULL);
             INSERT INTO failing VALUES (false);
             CREATE FUNCTION fail_while_asked() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF (SELECT on_now FROM failing) THEN
                     RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = '40001';
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER fail_while_asked BEFORE INSERT ON orders
                 FOR EACH STATEMENT EXECUTE FUNCTION fail_while_asked();",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(4).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 100).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut a = Sink::start(&config, "a");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    db.pool
        .execute("UPDATE failing SET on_now = true")
        .await
        .unwrap();
    produce_orders(&producer, &topic, 100, 200).await;
    wait_until("A to fail and retry", Duration::from_secs(60), || async {
        a.logs().matches("batch transaction failed").count() >= 2
    })
    .await;

    let mut b = Sink::start(&config, "b");
    let b_tag = format!("/{}/", b.pid());
    let joined = Instant::now();
    wait_until(
        "B to be given partitions",
        Duration::from_secs(45),
        || async {
            let owners = owners(&db, &config.group).await;
            owners.len() == 2 && owners.iter().any(|o| o.contains(&b_tag))
        },
    )
    .await;
    let a_failures = a.logs().matches("batch transaction failed").count();
    assert!(
        a_failures >= 3,
        "A should have been retrying all along ({a_failures} failures)"
    );
    eprintln!(
        "B was given partitions {:?} after it started",
        joined.elapsed()
    );

    db.pool
        .execute("UPDATE failing SET on_now = false")
        .await
        .unwrap();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert_orders_once(&db, 4, 200).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 200).await;
    assert!(b.stop().success());
    assert!(a.stop().success());
}

/// On revoke, the open batch of a revoked partition commits under the old owner's epoch
/// before the new owner claims it: the new owner's claim starts from that advance.
#[tokio::test(flavor = "multi_thread")]
async fn revoke_commits_the_open_batch_under_the_old_owners_epoch() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 300_000;
    let mut a = Sink::start(&config, "a");
    let a_tag = format!("/{}/", a.pid());
    let address = a.http_address();
    wait_until(
        "A to claim both partitions",
        Duration::from_secs(60),
        || async { db.stored_offsets(&config.group, &topic.name).await.len() == 2 },
    )
    .await;
    produce_orders(&producer(), &topic, 0, 100).await;
    wait_until("A to take 100 records", Duration::from_secs(60), || async {
        consumed(&address, &topic.name) == 100.0
    })
    .await;
    assert_eq!(
        db.count("orders").await,
        0,
        "the batch should still be open"
    );

    let mut b = Sink::start(&config, "b");
    let b_tag = format!("/{}/", b.pid());
    wait_until(
        "B to claim a partition",
        Duration::from_secs(60),
        || async {
            owners(&db, &config.group)
                .await
                .iter()
                .any(|o| o.contains(&b_tag))
        },
    )
    .await;
    /// seq, partition, old_next, new_next, old_epoch, new_epoch, owner
    type Change = (i64, i32, Option<i64>, Option<i64>, i64, i64, String);
    let history: Vec<Change> = sqlx::query_as(
        "SELECT seq, partition, old_next, new_next, old_epoch, new_epoch, owner
           FROM offset_audit ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let b_claims: Vec<&Change> = history
        .iter()
        .filter(|c| c.6.contains(&b_tag) && c.5 == c.4 + 1)
        .collect();
    assert!(!b_claims.is_empty(), "{history:?}");
    for claim in b_claims {
        let partition = claim.1;
        // The revoked partition's 50 records were committed by A, under A's epoch, just
        // before B's claim, and B starts from there.
        let before: Vec<&Change> = history
            .iter()
            .filter(|c| c.1 == partition && c.0 < claim.0)
            .collect();
        let last = before.last().expect("A's history of the partition");
        assert!(
            last.6.contains(&a_tag) && last.2.is_none() && last.3 == Some(50),
            "partition {partition}: the change before B's claim is {last:?}, not A's commit of its open batch\n{history:?}"
        );
        assert_eq!(last.4, last.5, "an advance under A's epoch");
        assert_eq!(last.5, claim.4, "B's claim replaced A's epoch");
        assert_eq!(claim.2, Some(50), "B's claim starts where A's commit ended");
        let rows: i64 =
            sqlx::query_scalar("SELECT count(*) FROM orders WHERE kafka_partition = $1")
                .bind(partition)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(rows, 50, "partition {partition}");
    }
    assert!(b.stop().success());
    assert!(a.stop().success());
    assert_orders_once(&db, 2, 100).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 100).await;
}
