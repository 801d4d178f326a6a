//! Upsert mode: the last record per key wins, within a batch and across batches, and a column
//! a record does not carry is left as it was.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 6_000;
const KEYS: i64 = 500;

/// Record `i`: key `i % KEYS`, in the key's partition; every 50th omits `note`.
fn record(i: i64, partitions: i32) -> RawRecord {
    let key = i % KEYS;
    let value = if i % 50 == 0 {
        format!(r#"{{"id":{key},"seq":{i}}}"#)
    } else {
        format!(r#"{{"id":{key},"seq":{i},"note":"n{i}"}}"#)
    };
    RawRecord {
        key: Some(key.to_string().into_bytes()),
        ..RawRecord::json((key % partitions as i64) as i32, &value)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_keeps_the_last_record_per_key_and_leaves_absent_columns_alone() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE latest (id bigint PRIMARY KEY, seq bigint NOT NULL, note text DEFAULT 'none',
                                  kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(4).await;
    let records: Vec<RawRecord> = (0..RECORDS).map(|i| record(i, topic.partitions)).collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "latest");
    config.max_records = 700; // several batches, each with repeated keys
    config.topic_settings = "mode = \"upsert\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    // What the table must hold: replay the records in order, per key.
    let mut expected: BTreeMap<i64, (i64, String)> = BTreeMap::new();
    for i in 0..RECORDS {
        let key = i % KEYS;
        let note = if i % 50 == 0 {
            expected
                .get(&key)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| "none".into())
        } else {
            format!("n{i}")
        };
        expected.insert(key, (i, note));
    }
    let rows: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT id, seq, note FROM latest ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<i64, (i64, String)> = rows
        .into_iter()
        .map(|(id, seq, note)| (id, (seq, note)))
        .collect();
    assert_eq!(actual.len(), KEYS as usize);
    for (key, want) in &expected {
        assert_eq!(actual.get(key), Some(want), "key {key}");
    }
    assert!(sink.stop().success());
}
