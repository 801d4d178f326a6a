//! Rows PostgreSQL refuses: counted as dead letters and never as rows written; and under
//! `on_error = "fail"` the sink stops at the refused record with everything before it (and
//! every other partition's rows) committed.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, parse_metrics};
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

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

/// Waits for a sink that must stop on its own; its exit status.
fn wait_stopped(sink: &mut Sink) -> std::process::ExitStatus {
    sink.wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the sink should stop\n{}", sink.logs_tail(30)))
}

/// The ERROR line that names `record`, or a panic showing the log.
fn error_naming(sink: &Sink, record: &str) -> String {
    let logs = sink.logs();
    logs.lines()
        .find(|l| l.contains("ERROR") && l.contains(record))
        .unwrap_or_else(|| panic!("no ERROR line naming {record}\n{}", sink.logs_tail(30)))
        .to_string()
}

/// Orders 0..999 over two partitions (order `id` to partition `id % 2`), one writer and one
/// batch for them all; the CHECK refuses order 600, partition 0's offset 300. The sink stops
/// there: partition 0 rests on the refused record with everything before it written,
/// partition 1 is written in full, and a restart stops at the same record again.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_row_stops_the_sink_at_that_record() {
    let db = TestDb::migrated().await;
    db.pool.execute(ORDERS).await.unwrap();
    let topic = TestTopic::create(2).await;
    let records: Vec<RawRecord> = (0..1000i64)
        .map(|id| RawRecord::json((id % 2) as i32, &order(id, id == 600)))
        .collect();
    let offsets = offsets_of(&records);
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 3_000; // one batch holds both partitions around the refused record
    let mut sink = Sink::start(&config, "sink");
    let status = wait_stopped(&mut sink);
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    let record = format!("{}/0@300", topic.name);
    let line = error_naming(&sink, &record);
    assert!(line.contains("orders_amount_check"), "{line}");
    assert!(line.contains("SQLSTATE 23514"), "{line}");
    // The 200 records after it on partition 0 were neither written nor counted.
    assert_eq!(log_field(&sink, "summary", "rows_committed"), "800");
    assert_eq!(log_field(&sink, "summary", "records_committed"), "800");

    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(300)), (1, Some(500))],
        "partition 0 rests on the refused record; partition 1 is done"
    );
    let mut want: Vec<Row> = (0..1000i64)
        .zip(&offsets)
        .filter(|&(id, &offset)| id % 2 == 1 || offset < 300)
        .map(|(id, &offset)| row(id, (id % 2) as i32, offset))
        .collect();
    want.sort_by_key(|r| (r.3, r.4));
    assert_eq!(table_rows(&db).await, want);

    // Nothing skipped the record: a restart meets it again and changes nothing.
    let mut again = Sink::start(&config, "again");
    let status = wait_stopped(&mut again);
    assert_eq!(status.code(), Some(1), "{}", again.logs_tail(30));
    error_naming(&again, &record);
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(300)), (1, Some(500))]
    );
    assert_eq!(table_rows(&db).await, want);
}

/// Two upsert topics into two tables share one writer and one batch; the CHECK of topic A's
/// table refuses A's record at offset 50. B's rows of that batch commit in full, A's up to
/// the refused record, each table equal to a replay of what committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_row_leaves_another_topic_of_the_batch_written() {
    let db = TestDb::migrated().await;
    for table in ["orders_a", "orders_b"] {
        db.pool
            .execute(
                format!(
                    "CREATE TABLE {table} (
                        id bigint PRIMARY KEY, customer text NOT NULL,
                        amount numeric(12,2) NOT NULL CHECK (amount >= 0),
                        kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)"
                )
                .as_str(),
            )
            .await
            .unwrap();
    }
    // Which transaction moved each position, to know both topics shared the batch.
    db.pool
        .execute(
            "CREATE TABLE offset_moves (topic text, next bigint, tx bigint DEFAULT txid_current());
             CREATE FUNCTION note_move() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO offset_moves (topic, next) VALUES (NEW.topic, NEW.next_offset);
                 RETURN NEW;
             END $$;
             CREATE TRIGGER note_move AFTER UPDATE ON kafka_offsets FOR EACH ROW
                 WHEN (NEW.next_offset IS DISTINCT FROM OLD.next_offset) EXECUTE FUNCTION note_move();",
        )
        .await
        .unwrap();
    let a = TestTopic::create(1).await;
    let b = TestTopic::create(1).await;
    // Record i of a topic is order i under key i % 30 (the batch repeats keys); the refused
    // one has a key of its own, so no later record supersedes it in the merge.
    let record = |i: i64, refused: bool| {
        let key = if refused { 1000 } else { i % 30 };
        let value = order(i, refused).replacen(&format!("\"id\":{i}"), &format!("\"id\":{key}"), 1);
        RawRecord::json(0, &value)
    };
    let producer = producer();
    let a_records: Vec<RawRecord> = (0..100).map(|i| record(i, i == 50)).collect();
    let b_records: Vec<RawRecord> = (0..100).map(|i| record(i, false)).collect();
    produce_raw(&producer, &a.name, &a_records).await;
    produce_raw(&producer, &b.name, &b_records).await;

    let mut config = SinkConfig::new(&db.url, &a.name, "orders_a");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 3_000; // both topics are fetched before the one batch closes
    config.topic_settings = "mode = \"upsert\"".into();
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"orders_b\"\nmode = \"upsert\"\n[topics.metadata]\npartition = \"kafka_partition\"\noffset = \"kafka_offset\"\n",
        b.name
    );
    let mut sink = Sink::start(&config, "sink");
    let status = wait_stopped(&mut sink);
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    let line = error_naming(&sink, &format!("{}/0@50", a.name));
    assert!(line.contains("orders_a_amount_check"), "{line}");
    let transactions: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT topic, next, tx FROM offset_moves ORDER BY topic")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        transactions.len() == 2 && transactions[0].2 == transactions[1].2,
        "one transaction moved both topics: {transactions:?}"
    );

    assert_eq!(
        db.stored_offsets(&config.group, &a.name).await,
        vec![(0, Some(50))]
    );
    assert_eq!(
        db.stored_offsets(&config.group, &b.name).await,
        vec![(0, Some(100))]
    );
    // A replay of the records that committed: the last one per key wins.
    let replay = |n: i64| {
        let mut last: BTreeMap<i64, Row> = BTreeMap::new();
        for i in 0..n {
            let (_, customer, amount, partition, offset) = row(i, 0, i);
            last.insert(i % 30, (i % 30, customer, amount, partition, offset));
        }
        last.into_values().collect::<Vec<Row>>()
    };
    let table = |name: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, Row>(&format!(
                "SELECT id, customer, amount::text, kafka_partition, kafka_offset FROM {name} ORDER BY id"
            ))
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(table("orders_a").await, replay(50));
    assert_eq!(table("orders_b").await, replay(100));
}

/// Two refused records in one batch, one per partition: with the first left out the batch
/// still fails, so nothing of it commits, and the sink stops naming the first.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_refused_row_in_the_batch_commits_nothing() {
    let db = TestDb::migrated().await;
    db.pool.execute(ORDERS).await.unwrap();
    let topic = TestTopic::create(2).await;
    // Order 600 is partition 0's offset 300, order 201 partition 1's offset 100.
    let records: Vec<RawRecord> = (0..1000i64)
        .map(|id| RawRecord::json((id % 2) as i32, &order(id, id == 600 || id == 201)))
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 3_000;
    let mut sink = Sink::start(&config, "sink");
    let status = wait_stopped(&mut sink);
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    let logs = sink.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("still failed"))
        .unwrap_or_else(|| panic!("no ERROR line\n{}", sink.logs_tail(30)));
    assert!(
        line.contains(&format!("record {}/0@300 was refused", topic.name))
            || line.contains(&format!("record {}/1@100 was refused", topic.name)),
        "{line}"
    );
    // Which comes first depends on how the partitions' records interleave in the batch; the
    // reason for the batch still failing is the other one, in PostgreSQL's detail.
    let other = if line.contains("/0@300 was refused") {
        "Failing row contains (201,"
    } else {
        "Failing row contains (600,"
    };
    assert!(line.contains(other), "{line}");
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, None), (1, None)],
        "nothing of the batch committed"
    );
    assert_eq!(db.count("orders").await, 0);
}

/// Two refused records on one partition (offsets 100 and 300) in one batch: the search finds
/// the first in record order, so the sink stops at offset 100, naming it, with everything
/// before it and the other partition committed; the later refused record is never reached.
#[tokio::test(flavor = "multi_thread")]
async fn two_refused_rows_on_one_partition_stop_the_sink_at_the_first() {
    let db = TestDb::migrated().await;
    db.pool.execute(ORDERS).await.unwrap();
    let topic = TestTopic::create(2).await;
    // Orders 200 and 600 are partition 0's offsets 100 and 300.
    let records: Vec<RawRecord> = (0..1000i64)
        .map(|id| RawRecord::json((id % 2) as i32, &order(id, id == 200 || id == 600)))
        .collect();
    let offsets = offsets_of(&records);
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 3_000; // one batch holds both refused records
    let mut sink = Sink::start(&config, "sink");
    let status = wait_stopped(&mut sink);
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    let line = error_naming(&sink, &format!("{}/0@100", topic.name));
    assert!(line.contains("orders_amount_check"), "{line}");
    let logs = sink.logs();
    assert!(
        !logs.contains(&format!("{}/0@300", topic.name)),
        "the later refused record was named\n{}",
        sink.logs_tail(30)
    );
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(100)), (1, Some(500))],
        "partition 0 rests on the first refused record; partition 1 is done"
    );
    let mut want: Vec<Row> = (0..1000i64)
        .zip(&offsets)
        .filter(|&(id, &offset)| id % 2 == 1 || offset < 100)
        .map(|(id, &offset)| row(id, (id % 2) as i32, offset))
        .collect();
    want.sort_by_key(|r| (r.3, r.4));
    assert_eq!(table_rows(&db).await, want);
}

/// The reason an operator reads for a refused row carries what PostgreSQL says about it: a
/// unique violation names its table, its constraint and, in the detail, the key; a NOT NULL
/// violation (here a trigger blanks the column) names the column; both give the SQLSTATE.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_row_is_named_with_its_column_constraint_and_detail() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (
                id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,
                kafka_partition int NOT NULL, kafka_offset bigint NOT NULL);
             CREATE FUNCTION blank_nobody() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 NEW.customer := NULLIF(NEW.customer, 'nobody');
                 RETURN NEW;
             END $$;
             CREATE TRIGGER blank_nobody BEFORE INSERT ON orders
                 FOR EACH ROW EXECUTE FUNCTION blank_nobody();",
        )
        .await
        .unwrap();
    // (the record at offset 5, what the ERROR line must contain)
    let cases: [(String, &[&str]); 2] = [
        (
            order(3, false),
            &[
                "duplicate key value violates unique constraint",
                "SQLSTATE 23505",
                "table public.orders",
                "constraint orders_pkey",
                "Key (id)=(3) already exists.",
            ],
        ),
        (
            r#"{"id":5,"customer":"nobody","amount":"1.00"}"#.to_string(),
            &[
                "violates not-null constraint",
                "SQLSTATE 23502",
                "table public.orders",
                "column customer",
            ],
        ),
    ];
    for (i, (refused, expected)) in cases.iter().enumerate() {
        db.pool.execute("TRUNCATE orders").await.unwrap();
        let topic = TestTopic::create(1).await;
        let mut records: Vec<RawRecord> = (0..5)
            .map(|id| RawRecord::json(0, &order(id, false)))
            .collect();
        records.push(RawRecord::json(0, refused));
        records.extend((6..10).map(|id| RawRecord::json(0, &order(id, false))));
        produce_raw(&producer(), &topic.name, &records).await;
        let config = SinkConfig::new(&db.url, &topic.name, "orders");
        let mut sink = Sink::start(&config, &format!("case {i}"));
        let status = wait_stopped(&mut sink);
        assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
        let line = error_naming(&sink, &format!("{}/0@5", topic.name));
        for part in *expected {
            assert!(line.contains(part), "case {i}: no {part:?} in {line}");
        }
        assert_eq!(
            db.stored_offsets(&config.group, &topic.name).await,
            vec![(0, Some(5))],
            "case {i}: the position rests on the refused record"
        );
    }
}
