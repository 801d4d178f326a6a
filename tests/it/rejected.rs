//! Rows PostgreSQL refuses: counted as dead letters and never as rows written; and under
//! `on_error = "fail"` the sink stops at the refused record with everything before it (and
//! every other partition's rows) committed.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;
use crate::operations::{get, parse_metrics};

/// The table of these tests: the CHECK refuses a negative amount.
const ORDERS: &str = "CREATE TABLE orders (
    id bigint NOT NULL, customer text NOT NULL, amount numeric(12,2) NOT NULL CHECK (amount >= 0),
    kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)";

/// One row as these tests read it back: id, customer, amount, partition, offset.
type Row = (i64, String, String, i32, i64);

/// An order the CHECK accepts, or (with `refused`) one it refuses.
fn order(id: i64, refused: bool) -> String {
    let amount = if refused {
        format!("-{}.25", id % 50 + 1)
    } else {
        format!("{}.{:02}", id % 1000, id % 100)
    };
    format!(r#"{{"id":{id},"customer":"c-{id}","amount":"{amount}"}}"#)
}

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

/// The row order `id` becomes at `partition`/`offset`.
fn row(id: i64, partition: i32, offset: i64) -> Row {
    let amount = format!("{}.{:02}", id % 1000, id % 100);
    (id, format!("c-{id}"), amount, partition, offset)
}

/// The table as rows, ordered by partition and offset.
async fn table_rows(db: &TestDb) -> Vec<Row> {
    sqlx::query_as(
        "SELECT id, customer, amount::text, kafka_partition, kafka_offset FROM orders
          ORDER BY kafka_partition, kafka_offset",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The value of `field` on the sink's last log line with `message` (text log format, as
/// an operator reads it).
fn log_field(sink: &Sink, message: &str, field: &str) -> String {
    let logs = sink.logs();
    let line = logs
        .lines()
        .rfind(|l| l.contains(&format!(" {message} ")))
        .unwrap_or_else(|| panic!("no {message:?} line\n{}", sink.logs_tail(30)));
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .to_string()
}

/// 1,000 orders, 50 of them refused by the CHECK, plus 10 records that are not JSON, all
/// dead-lettered: only the 950 rows count as written, and the table holds exactly them.
#[tokio::test(flavor = "multi_thread")]
async fn dead_lettered_rows_are_not_counted_as_written() {
    let db = TestDb::migrated().await;
    db.pool.execute(ORDERS).await.unwrap();
    let topic = TestTopic::create(2).await;
    // (record, order id, what it must become)
    let mut produced: Vec<(RawRecord, i64, &str)> = Vec::new();
    for id in 0..1000i64 {
        let partition = (id % 2) as i32;
        let refused = id % 20 == 7;
        let kind = if refused { "rejected" } else { "row" };
        produced.push((RawRecord::json(partition, &order(id, refused)), id, kind));
        if id % 100 == 50 {
            produced.push((
                RawRecord::json(partition, "{\"id\": not json"),
                id,
                "decode",
            ));
        }
    }
    let records: Vec<RawRecord> = produced.iter().map(|(r, _, _)| r.clone()).collect();
    let offsets = offsets_of(&records);
    assert_eq!(records.len(), 1010);
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 100; // refused rows share batches with good ones
    config.topic_settings = "on_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let mut want_rows = Vec::new();
    let mut want_letters = Vec::new();
    for ((record, id, kind), offset) in produced.iter().zip(&offsets) {
        match *kind {
            "row" => want_rows.push(row(*id, record.partition, *offset)),
            kind => want_letters.push((record.partition, *offset, kind.to_string())),
        }
    }
    want_rows.sort_by_key(|r| (r.3, r.4));
    want_letters.sort();
    assert_eq!(want_rows.len(), 950);
    assert_eq!(table_rows(&db).await, want_rows, "exactly the good rows");
    let letters: Vec<(i32, i64, String)> = sqlx::query_as(
        "SELECT partition, \"offset\", error_kind FROM kafka_dead_letters ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(letters, want_letters);

    let rows_written = "kafka_pg_sink_rows_written_total{table=\"public.orders\"}";
    let consumed = format!(
        "kafka_pg_sink_records_consumed_total{{topic=\"{}\"}}",
        topic.name
    );
    let metrics = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = get(&address, "/metrics");
            assert_eq!(status, 200);
            let m = parse_metrics(&body);
            if m.get(&consumed) == Some(&1010.0) {
                break m;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "metrics never complete:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    assert_eq!(metrics[rows_written], 950.0, "rows written");
    assert_eq!(metrics["kafka_pg_sink_dead_letters_total"], 60.0);

    assert!(sink.stop().success());
    let summary = |field| log_field(&sink, "summary", field);
    assert_eq!(summary("rows_committed"), "950");
    assert_eq!(summary("dead_letters"), "60");
    assert_eq!(summary("records_committed"), "1010");
}
