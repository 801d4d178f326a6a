//! What `/metrics` and `/ready` report, checked against what really happened: transactions
//! counted in the database, rows applied, rebalances, and gauges of partitions that moved.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::kafka::{produce_orders, produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::orders::assert_orders_are;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const FAST_WATERMARKS: [&str; 2] = ["--set", "kafka.watermark_interval=300ms"];

/// The sink's metrics now.
fn scrape(address: &str) -> HashMap<String, f64> {
    let (status, body) = get(address, "/metrics");
    assert_eq!(status, 200, "{body}");
    parse_metrics(&body)
}

/// Records the transaction id of every change that advances a position: each committed batch
/// transaction advances at least one, and nothing else does (claims only bump the epoch).
async fn record_advancing_transactions(db: &TestDb) {
    db.pool
        .execute(
            "CREATE TABLE commit_txids (txid bigint NOT NULL);
             CREATE FUNCTION record_commit_txid() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO commit_txids VALUES (txid_current());
                 RETURN NEW;
             END $$;
             CREATE TRIGGER commit_txid AFTER UPDATE ON kafka_offsets FOR EACH ROW
                 WHEN (OLD.next_offset IS DISTINCT FROM NEW.next_offset)
                 EXECUTE FUNCTION record_commit_txid();",
        )
        .await
        .expect("install the transaction audit");
}

async fn committed_transactions(db: &TestDb) -> f64 {
    let n: i64 = sqlx::query_scalar("SELECT count(DISTINCT txid) FROM commit_txids")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    n as f64
}

/// (count, sum) of a histogram.
fn histogram(m: &HashMap<String, f64>, name: &str) -> (f64, f64) {
    (
        metric(m, &format!("{name}_count")),
        metric(m, &format!("{name}_sum")),
    )
}

/// `batches_committed_total` is the number of batch transactions that committed (counted by a
/// trigger in PostgreSQL), and both latency histograms observe each of them once:
/// `transaction_seconds` from BEGIN to COMMIT, `record_wait_seconds` from the batch's first
/// record to COMMIT, which for a lone record includes the whole `batch.max_wait`.
#[tokio::test(flavor = "multi_thread")]
async fn batches_committed_and_the_latency_histograms_count_each_committed_transaction() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    record_advancing_transactions(&db).await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 100;
    config.max_wait_ms = 2_000;
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();

    // A burst: batches close at max_records, several transactions.
    produce_orders(&producer, &topic, 0, 1_000).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    wait_until(
        "batches_committed_total to equal the committed transactions",
        Duration::from_secs(10),
        || async {
            metric(&scrape(&address), "kafka_pg_sink_batches_committed_total")
                == committed_transactions(&db).await
        },
    )
    .await;
    let burst = scrape(&address);
    let batches = metric(&burst, "kafka_pg_sink_batches_committed_total");
    assert!(
        batches >= 10.0,
        "1,000 records in batches of 100: {batches}"
    );
    let (tx_count, tx_sum) = histogram(&burst, "kafka_pg_sink_transaction_seconds");
    let (wait_count, wait_sum) = histogram(&burst, "kafka_pg_sink_record_wait_seconds");
    assert_eq!((tx_count, wait_count), (batches, batches));
    assert!(tx_sum > 0.0 && wait_sum >= tx_sum, "{tx_sum} {wait_sum}");

    // A trickle: each lone record waits out max_wait (2 s) in its own batch.
    const LONE: i64 = 4;
    for id in 1_000..1_000 + LONE {
        produce_orders(&producer, &topic, id, id + 1).await;
        wait_until("the lone record's row", Duration::from_secs(30), || async {
            db.count("orders").await == id + 1
        })
        .await;
    }
    wait_until(
        "batches_committed_total to count the trickle",
        Duration::from_secs(10),
        || async {
            metric(&scrape(&address), "kafka_pg_sink_batches_committed_total")
                == committed_transactions(&db).await
        },
    )
    .await;
    let end = scrape(&address);
    let batches_end = metric(&end, "kafka_pg_sink_batches_committed_total");
    assert_eq!(
        batches_end - batches,
        LONE as f64,
        "one transaction per record"
    );
    let (tx_count_end, tx_sum_end) = histogram(&end, "kafka_pg_sink_transaction_seconds");
    let (wait_count_end, wait_sum_end) = histogram(&end, "kafka_pg_sink_record_wait_seconds");
    assert_eq!((tx_count_end, wait_count_end), (batches_end, batches_end));
    let waited = (wait_sum_end - wait_sum) / LONE as f64;
    let transacted = (tx_sum_end - tx_sum) / LONE as f64;
    assert!(
        waited >= 2.0,
        "a lone record waits max_wait before COMMIT: {waited} s"
    );
    assert!(
        transacted > 0.0 && transacted < waited - 1.0,
        "BEGIN to COMMIT leaves out the wait: {transacted} s against {waited} s"
    );
    let ids: Vec<i64> = (0..1_000 + LONE).collect();
    assert_orders_are(&db, "orders", &ids).await;
    assert!(sink.stop().success());
}

/// `rows_written_total` counts each record applied as a row: in upsert mode every upserted and
/// every deleted record, also when a later record for the same key in the batch supersedes it
/// or a tombstone finds no row; a refused or unmappable record, a dead letter, is not counted.
#[tokio::test(flavor = "multi_thread")]
async fn rows_written_counts_every_upserted_and_deleted_record() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL CHECK (v <> 'refused'))")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let keyed = |key: i64, value: Option<String>| RawRecord {
        partition: 0,
        key: Some(key.to_string().into_bytes()),
        value: value.map(String::into_bytes),
        ..Default::default()
    };
    let mut records = Vec::new();
    let mut expected: BTreeMap<i64, String> = BTreeMap::new();
    let mut applied = 0;
    for i in 0..600i64 {
        let key = (i * 7) % 40;
        if i % 5 == 4 {
            records.push(keyed(key, None));
            expected.remove(&key);
            applied += 1;
        } else if i % 50 == 17 {
            // Refused by the CHECK: a dead letter, not a row written.
            records.push(keyed(key, Some(r#"{"v":"refused"}"#.into())));
        } else if i % 50 == 33 {
            records.push(keyed(key, Some("not json".into())));
        } else {
            records.push(keyed(key, Some(format!(r#"{{"v":"v{i}"}}"#))));
            expected.insert(key, format!("v{i}"));
            applied += 1;
        }
        if i % 60 == 0 {
            // A tombstone for a key that never had a row.
            records.push(keyed(1_000 + i, None));
            applied += 1;
        }
    }
    let dead = 24;
    assert_eq!(records.len() - applied, dead);
    // Produced before the sink starts, so every batch holds repeated keys.
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "kv");
    config.max_records = 200;
    config.topic_settings = "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, v FROM kv ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows.into_iter().collect::<BTreeMap<_, _>>(), expected);
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(letters, dead as i64);
    // The metrics follow the commits: the last batch's are counted once its result is read.
    wait_until(
        "the metrics to count the drain",
        Duration::from_secs(10),
        || async {
            let m = scrape(&address);
            metric(&m, "kafka_pg_sink_dead_letters_total") == dead as f64
                && metric(&m, "kafka_pg_sink_rows_written_total{table=\"public.kv\"}")
                    >= applied as f64
        },
    )
    .await;
    let m = scrape(&address);
    assert_eq!(
        metric(&m, "kafka_pg_sink_rows_written_total{table=\"public.kv\"}"),
        applied as f64,
        "one row per upserted or deleted record ({} rows remain in the table)",
        expected.len()
    );
    assert!(sink.stop().success());
}

/// The partitions a sink's per-partition gauges name, for each of the three gauges.
fn gauge_partitions(m: &HashMap<String, f64>, topic: &str) -> [BTreeSet<i32>; 3] {
    ["lag", "high_watermark", "next_offset"].map(|gauge| {
        let prefix = format!("kafka_pg_sink_{gauge}{{topic=\"{topic}\",partition=\"");
        m.keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('"').next()?.parse().ok())
            .collect()
    })
}

/// A partition taken away by a rebalance is counted as a revoke, and its lag, high watermark
/// and next offset gauges leave the old owner's `/metrics` (three watermark intervals after it
/// was last seen), so only its new owner reports it.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoke_is_counted_and_the_revoked_partitions_gauges_disappear() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(4).await;
    produce_orders(&producer(), &topic, 0, 400).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut a = Sink::start_with(&config, "a", &FAST_WATERMARKS);
    let a_address = a.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let all: BTreeSet<i32> = (0..4).collect();
    wait_until(
        "a's gauges for all four partitions",
        Duration::from_secs(30),
        || async {
            gauge_partitions(&scrape(&a_address), &topic.name) == [0, 1, 2].map(|_| all.clone())
        },
    )
    .await;
    assert_eq!(
        metric(
            &scrape(&a_address),
            "kafka_pg_sink_rebalances_total{kind=\"revoke\"}"
        ),
        0.0
    );

    let mut b = Sink::start_with(&config, "b", &FAST_WATERMARKS);
    let b_address = b.http_address();
    wait_until(
        "b to take partitions from a",
        Duration::from_secs(60),
        || async {
            let (ma, mb) = (scrape(&a_address), scrape(&b_address));
            let (na, nb) = (
                metric(&ma, "kafka_pg_sink_assigned_partitions"),
                metric(&mb, "kafka_pg_sink_assigned_partitions"),
            );
            na > 0.0 && nb > 0.0 && na + nb == 4.0
        },
    )
    .await;
    assert!(
        metric(
            &scrape(&a_address),
            "kafka_pg_sink_rebalances_total{kind=\"revoke\"}"
        ) >= 1.0
    );
    // 3 × 300 ms after the revoke, each partition's gauges are on exactly one sink: a's for
    // the revoked ones are gone, not left at their last value.
    wait_until(
        "each partition's gauges on its owner only",
        Duration::from_secs(10),
        || async {
            let (ma, mb) = (scrape(&a_address), scrape(&b_address));
            let (ga, gb) = (
                gauge_partitions(&ma, &topic.name),
                gauge_partitions(&mb, &topic.name),
            );
            let owned = metric(&ma, "kafka_pg_sink_assigned_partitions") as usize;
            (0..3).all(|g| {
                ga[g].len() == owned
                    && ga[g].is_disjoint(&gb[g])
                    && ga[g].union(&gb[g]).copied().collect::<BTreeSet<_>>() == all
            })
        },
    )
    .await;
    assert!(b.stop().success());
    assert!(a.stop().success());
}

/// `/ready` answers 503 for a member of the group that has no partition although PostgreSQL
/// and Kafka answer, and for a sink that reaches no broker, and says which in its body.
#[tokio::test(flavor = "multi_thread")]
async fn ready_is_503_without_an_assigned_partition_and_without_a_broker() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 10).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let a = Sink::start(&config, "a");
    let b = Sink::start(&config, "b");
    let addresses = [a.http_address(), b.http_address()];
    let ready = |address: &str| {
        let (status, body) = get(address, "/ready");
        (
            status,
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        )
    };
    // One partition, two members: one owns it, the other idles with Kafka up.
    wait_until(
        "one member ready and the other idle with Kafka up",
        Duration::from_secs(60),
        || {
            let states = addresses.clone().map(|a| ready(&a));
            let ok = states.iter().filter(|(s, _)| *s == 200).count() == 1
                && states
                    .iter()
                    .any(|(_, body)| body["assigned_partitions"] == 0 && body["kafka"] == true);
            async move { ok }
        },
    )
    .await;
    let (status, body) = addresses
        .iter()
        .map(|a| ready(a))
        .find(|(_, body)| body["assigned_partitions"] == 0)
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        (&body["ready"], &body["database"], &body["kafka"]),
        (&false.into(), &true.into(), &true.into()),
        "{body}"
    );

    let mut lonely = config.clone();
    lonely.kafka = Some("127.0.0.1:1".into());
    let c = Sink::start(&lonely, "no broker");
    let address = c.http_address();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, body) = ready(&address);
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        (&body["ready"], &body["database"], &body["kafka"]),
        (&false.into(), &true.into(), &false.into()),
        "{body}"
    );
    drop((a, b, c));
}
