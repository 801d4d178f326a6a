//! Many tables at the cost of one: a pattern of many topics, a table each. Every table holds
//! exactly its topic's records, every column as produced, each once across a `kill -9`; a
//! writer's batches, whose records spread over many tables, fill per table (up to
//! `max_records` rows of each and four times `max_records` records in all) and still commit
//! with their offsets in one transaction.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

const TOPICS: usize = 24;
const PER_TOPIC: i64 = 400;
const MAX_RECORDS: i64 = 50;

/// Rows per transaction over every table (`tx` is each row's `txid_current()`), and the most
/// rows one table took in one transaction.
async fn transactions(db: &TestDb, tables: &[String]) -> (BTreeMap<i64, i64>, i64) {
    let union: Vec<String> = tables
        .iter()
        .map(|t| format!("SELECT tx, '{t}' AS t FROM \"{t}\""))
        .collect();
    let rows: Vec<(i64, String, i64)> = sqlx::query_as(&format!(
        "SELECT tx, t, count(*) FROM ({}) r GROUP BY tx, t",
        union.join(" UNION ALL ")
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut per_tx = BTreeMap::new();
    let mut most_of_one = 0;
    for (tx, _, n) in rows {
        *per_tx.entry(tx).or_insert(0) += n;
        most_of_one = most_of_one.max(n);
    }
    (per_tx, most_of_one)
}

/// 24 topics of one pattern, one partition and a table each, 400 records per topic, drained
/// with `max_records = 50` and a `kill -9` in the middle: each table holds its topic's orders
/// once, every column as produced, its rows in step with its topic's stored position; a
/// transaction held more than `max_records` records (batches spread over many tables fill per
/// table) but never more than four times that, nor more than `max_records` rows of one table.
#[tokio::test(flavor = "multi_thread")]
async fn a_pattern_of_many_topics_writes_each_table_once_in_batches_filled_per_table() {
    let db = TestDb::migrated().await;
    let prefix = format!("many-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut topics = Vec::new();
    let mut tables = Vec::new();
    for i in 0..TOPICS {
        let topic = TestTopic::create_named(&format!("{prefix}-{i:02}"), 1).await;
        // `{topic}` as the sink writes it (snake_case).
        let table = format!("in_{}", topic.name.replace('-', "_"));
        db.create_orders_table(&table).await;
        db.pool
            .execute(
                format!(
                    "ALTER TABLE \"{table}\" ADD COLUMN tx bigint NOT NULL DEFAULT txid_current()"
                )
                .as_str(),
            )
            .await
            .unwrap();
        produce_orders(&producer(), &topic, 0, PER_TOPIC).await;
        topics.push(topic);
        tables.push(table);
    }

    let mut config = SinkConfig::new(&db.url, "unused", "unused");
    config.max_records = MAX_RECORDS as usize;
    let toml = config.toml().replace(
        "name = \"unused\"\ntable = \"unused\"",
        &format!("pattern = \"{prefix}-.*\"\ntable = \"in_{{topic}}\""),
    );
    let file = ConfigFile::new(&toml);
    let mut sink = Sink::start_file(file.path(), "first");
    let total = TOPICS as i64 * PER_TOPIC;
    wait_until("a third of the rows", Duration::from_secs(60), || async {
        let mut rows = 0;
        for t in &tables {
            rows += db.count(t).await;
        }
        rows >= total / 3
    })
    .await;
    sink.kill9();

    let mut sink = Sink::start_file(file.path(), "second");
    for topic in &topics {
        wait_drained(&db, &config.group, topic, Duration::from_secs(90)).await;
    }
    for (topic, table) in topics.iter().zip(&tables) {
        let copies = orders_as_produced(&db, table, 1).await;
        let wrong: Vec<_> = copies.iter().filter(|(_, &c)| c != 1).collect();
        assert!(
            wrong.is_empty(),
            "{table}: (partition, offset) → copies: {wrong:?}"
        );
        assert_eq!(copies.len() as i64, PER_TOPIC, "{table}: rows");
        assert_rows_match_offsets(&db, table, &config.group, &topic.name).await;
    }
    let routed = sink.logs().matches("new topic routed").count();
    assert_eq!(routed, TOPICS, "{}", sink.logs_tail(20));
    assert!(sink.stop().success());

    let (per_tx, most_of_one) = transactions(&db, &tables).await;
    let largest = per_tx.values().copied().max().unwrap_or(0);
    assert!(
        largest > MAX_RECORDS,
        "a batch over many tables fills per table: the largest transaction had {largest} rows ({} transactions)",
        per_tx.len()
    );
    assert!(
        largest <= 4 * MAX_RECORDS,
        "at most four times max_records records: {largest}"
    );
    assert!(
        most_of_one <= MAX_RECORDS,
        "at most max_records rows of one table per batch: {most_of_one}"
    );
}
