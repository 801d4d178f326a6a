//! Declaratively partitioned tables (by range and by list) in a schema other than `public`,
//! under names that need quotes, in insert and in upsert mode: every row lands in the partition
//! PostgreSQL routes it to, exactly once, with every column as produced; a row no partition
//! takes (SQLSTATE 23514) is a `rejected` dead letter while the rest of its batch commits.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// The offset the broker gives each record: offsets count up per partition in the order
/// produced (an idempotent producer keeps that order).
fn offsets_of(records: &[RawRecord]) -> Vec<i64> {
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    records
        .iter()
        .map(|r| {
            let offset = next.entry(r.partition).or_insert(0);
            *offset += 1;
            *offset - 1
        })
        .collect()
}

/// Dead letters as (partition, offset, kind), ordered.
async fn letters(db: &TestDb) -> Vec<(i32, i64, String)> {
    sqlx::query_as("SELECT partition, \"offset\", error_kind FROM kafka_dead_letters ORDER BY 1, 2")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// (id, day, amount, note, partition of the table it is in, kafka partition, kafka offset)
type RangeRow = (i64, String, String, Option<String>, String, i32, i64);

/// Insert mode into a table partitioned by range of a date, in schema `Sales Ops`: each row is
/// in its month's partition with every column as produced; the records dated outside every
/// partition are `rejected` dead letters at their offsets, and only they.
#[tokio::test(flavor = "multi_thread")]
async fn a_range_partitioned_table_in_another_schema_takes_inserts_and_dead_letters_what_fits_no_partition(
) {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            r#"CREATE SCHEMA "Sales Ops";
               CREATE TABLE "Sales Ops"."Orders 2026" (
                   id bigint NOT NULL, day date NOT NULL, amount numeric(12,2) NOT NULL,
                   note text, kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)
                 PARTITION BY RANGE (day);
               CREATE TABLE "Sales Ops"."Orders 2026 Jan" PARTITION OF "Sales Ops"."Orders 2026"
                 FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
               CREATE TABLE "Sales Ops"."Orders 2026 Feb" PARTITION OF "Sales Ops"."Orders 2026"
                 FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
               CREATE TABLE "Sales Ops"."Orders 2026 Mar" PARTITION OF "Sales Ops"."Orders 2026"
                 FOR VALUES FROM ('2026-03-01') TO ('2026-04-01');"#,
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let start = chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    let mut records = Vec::new();
    // (id, day, fits a partition)
    let mut meta = Vec::new();
    for id in 0..600i64 {
        let fits = id % 40 != 13;
        let day = if fits {
            start + chrono::Days::new((id % 90) as u64)
        } else {
            chrono::NaiveDate::from_ymd_opt(2027, 5, 1).unwrap()
        };
        let note = if id % 7 == 0 {
            "null".to_string()
        } else {
            format!("\"n-{id}\"")
        };
        let value = format!(
            r#"{{"id":{id},"day":"{day}","amount":"{}.{:02}","note":{note}}}"#,
            id % 1000,
            id % 100
        );
        records.push(RawRecord::json((id % 2) as i32, &value));
        meta.push((id, day, fits));
    }
    let offsets = offsets_of(&records);
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "Orders 2026");
    config.max_records = 100; // refused rows share batches with good ones
    config.topic_settings = "schema = \"Sales Ops\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let mut want_rows = Vec::new();
    let mut want_letters = Vec::new();
    for ((record, (id, day, fits)), offset) in records.iter().zip(&meta).zip(&offsets) {
        if *fits {
            let month =
                ["Jan", "Feb", "Mar"][(day.format("%m").to_string().parse::<usize>().unwrap()) - 1];
            want_rows.push((
                *id,
                day.to_string(),
                format!("{}.{:02}", id % 1000, id % 100),
                (id % 7 != 0).then(|| format!("n-{id}")),
                format!("\"Sales Ops\".\"Orders 2026 {month}\""),
                record.partition,
                *offset,
            ));
        } else {
            want_letters.push((record.partition, *offset, "rejected".to_string()));
        }
    }
    assert_eq!(want_letters.len(), 15);
    let rows: Vec<RangeRow> = sqlx::query_as(
        r#"SELECT id, day::text, amount::text, note, tableoid::regclass::text, kafka_partition,
                  kafka_offset FROM "Sales Ops"."Orders 2026" ORDER BY id"#,
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, want_rows, "every row once, in its month, as produced");
    assert_eq!(letters(&db).await, want_letters);
    let reasons: Vec<(String, String)> =
        sqlx::query_as("SELECT DISTINCT error_message, target_table FROM kafka_dead_letters")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].0.contains("23514"), "{reasons:?}");
    assert!(reasons[0].0.contains("no partition"), "{reasons:?}");
    assert_eq!(reasons[0].1, "Sales Ops.Orders 2026");
    assert!(sink.stop().success());
}

/// Upsert mode into a table partitioned by list of a region, whose primary key (region, id)
/// includes the partition key, in schema `Sales Ops`: the table equals a replay of the records
/// per key, each row in its region's partition; records of a region no partition lists are
/// `rejected` dead letters and the rows beside them commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_list_partitioned_table_takes_upserts_and_dead_letters_a_region_no_partition_lists() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            r#"CREATE SCHEMA "Sales Ops";
               CREATE TABLE "Sales Ops"."Latest By-Region" (
                   region text NOT NULL, id bigint NOT NULL, seq bigint NOT NULL,
                   note text DEFAULT 'none', PRIMARY KEY (region, id))
                 PARTITION BY LIST (region);
               CREATE TABLE "Sales Ops".latest_americas PARTITION OF "Sales Ops"."Latest By-Region"
                 FOR VALUES IN ('us', 'br');
               CREATE TABLE "Sales Ops".latest_europe PARTITION OF "Sales Ops"."Latest By-Region"
                 FOR VALUES IN ('eu');
               CREATE TABLE "Sales Ops"."Latest Asia" PARTITION OF "Sales Ops"."Latest By-Region"
                 FOR VALUES IN ('apac');"#,
        )
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    let regions = ["us", "br", "eu", "apac"];
    let mut records = Vec::new();
    let mut expected: BTreeMap<(String, i64), (i64, String)> = BTreeMap::new();
    let mut want_letters = Vec::new();
    let mut produced = Vec::new();
    for i in 0..3000i64 {
        let id = i % 150;
        let (region, fits) = if i % 97 == 5 {
            ("mars", false)
        } else {
            (regions[(id % 4) as usize], true)
        };
        // Every 11th record omits `note`: the row keeps its note (or takes the default).
        let value = if i % 11 == 0 {
            format!(r#"{{"region":"{region}","id":{id},"seq":{i}}}"#)
        } else {
            format!(r#"{{"region":"{region}","id":{id},"seq":{i},"note":"n{i}"}}"#)
        };
        let partition = (id % 3) as i32;
        records.push(RawRecord {
            key: Some(format!("{region}/{id}").into_bytes()),
            ..RawRecord::json(partition, &value)
        });
        produced.push((region, id, i, fits));
    }
    let offsets = offsets_of(&records);
    for ((region, id, i, fits), (record, offset)) in
        produced.iter().zip(records.iter().zip(&offsets))
    {
        if !fits {
            want_letters.push((record.partition, *offset, "rejected".to_string()));
            continue;
        }
        let key = (region.to_string(), *id);
        let note = if i % 11 == 0 {
            expected
                .get(&key)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| "none".into())
        } else {
            format!("n{i}")
        };
        expected.insert(key, (*i, note));
    }
    want_letters.sort();
    assert!(want_letters.len() >= 30);
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "Latest By-Region");
    config.max_records = 400; // several batches, each with repeated keys and refused rows
    config.metadata = String::new();
    config.topic_settings =
        "schema = \"Sales Ops\"\nmode = \"upsert\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let rows: Vec<(String, i64, i64, String, String)> = sqlx::query_as(
        r#"SELECT region, id, seq, note, tableoid::regclass::text
             FROM "Sales Ops"."Latest By-Region" ORDER BY region, id"#,
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let partition_of = |region: &str| match region {
        "us" | "br" => "\"Sales Ops\".latest_americas",
        "eu" => "\"Sales Ops\".latest_europe",
        _ => "\"Sales Ops\".\"Latest Asia\"",
    };
    let want: Vec<(String, i64, i64, String, String)> = expected
        .iter()
        .map(|((region, id), (seq, note))| {
            (
                region.clone(),
                *id,
                *seq,
                note.clone(),
                partition_of(region).to_string(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 150);
    assert_eq!(rows, want, "the table is a replay of the records, per key");
    assert_eq!(letters(&db).await, want_letters);
    assert!(sink.stop().success());
}
