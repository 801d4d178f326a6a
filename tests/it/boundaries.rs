//! Every record is a row, a dead letter or a documented no-op wherever its batch ends. A record
//! PostgreSQL refuses when applied alone is refused (a dead letter, or a stop) even when a
//! later record of its key supersedes it in the same batch: each case runs once per batch
//! size, from one record a batch (the sink applying records one at a time, the model) to the
//! whole topic in one batch, and every run must end in the same table, the same dead letters
//! and the same position.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{LogsOnPanic, Sink, SinkConfig};
use crate::helpers::*;

/// Batch sizes each case runs with; 10,000 with a long `max_wait` is the whole topic at once.
const BATCH_SIZES: [usize; 5] = [1, 2, 3, 4, 10_000];

/// A table, how its topic is configured, and the records produced to it.
struct Case {
    /// The table (and its partitions), named `r`, with an `id` column.
    ddl: &'static str,
    /// Its columns, as compared.
    columns: &'static [&'static str],
    settings: &'static str,
    records: Vec<RawRecord>,
}

/// What a run left: every column of every row, the dead letters (offset and kind) and the
/// stored position.
#[derive(Debug, PartialEq)]
struct Outcome {
    rows: Vec<Vec<Option<String>>>,
    dead_letters: Vec<(i64, String)>,
    position: Vec<(i32, Option<i64>)>,
}

/// A record on partition 0 keyed by `key` (JSON), with `value` or a tombstone.
fn keyed(key: &str, value: Option<&str>) -> RawRecord {
    RawRecord {
        key: Some(key.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// Runs `case` with batches of `max_records` into a database of its own; under `on_error =
/// "fail"` (`stops`) the sink must stop, else drain the topic.
async fn run(case: &Case, topic: &TestTopic, max_records: usize, stops: bool) -> Outcome {
    let db = TestDb::migrated().await;
    db.pool.execute(case.ddl).await.unwrap();
    let mut config = SinkConfig::new(&db.url, &topic.name, "r");
    config.writers = 1;
    config.max_records = max_records;
    // The whole topic in one batch when the size allows it.
    config.max_wait_ms = if max_records > case.records.len() {
        3_000
    } else {
        100
    };
    config.metadata = String::new();
    config.topic_settings = case.settings.into();
    let mut sink = Sink::start(&config, &format!("batches of {max_records}"));
    if stops {
        let status = sink
            .wait_timeout(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("the sink should stop\n{}", sink.logs_tail(30)));
        assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    } else {
        let _logs = LogsOnPanic(&sink);
        wait_drained(&db, &config.group, topic, Duration::from_secs(60)).await;
    }
    sink.stop();
    Outcome {
        rows: db.rows_as_text("r", case.columns).await,
        dead_letters: db
            .dead_letters_of(&topic.name)
            .await
            .into_iter()
            .map(|(offset, kind, _)| (offset, kind))
            .collect(),
        position: db.stored_offsets(&config.group, &topic.name).await,
    }
}

/// Runs `case` at every batch size: each run must equal the one-record-a-batch run and `want`.
async fn same_wherever_batches_end(case: Case, want: Outcome, stops: bool) {
    let topic = TestTopic::create(1).await;
    produce_raw(&producer(), &topic.name, &case.records).await;
    for max_records in BATCH_SIZES {
        let got = run(&case, &topic, max_records, stops).await;
        assert_eq!(got, want, "batches of {max_records} records");
    }
}

fn rejected(offsets: &[i64]) -> Vec<(i64, String)> {
    offsets
        .iter()
        .map(|&o| (o, "rejected".to_string()))
        .collect()
}

fn row(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some(v.to_string())).collect()
}

/// Upserts and hard deletes into a table partitioned by time, with a CHECK: a record with no
/// partition, or one the CHECK refuses, is a dead letter even when a tombstone or a later
/// upsert of its key follows it in the batch; the tombstone of a key that never got a row
/// deletes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_upsert_superseded_in_its_batch_is_still_a_dead_letter() {
    let jan = |id: i64| format!(r#"{{"id":{id},"at":"2026-01-10T00:00:00Z"}}"#);
    let may = |id: i64| format!(r#"{{"id":{id},"at":"2026-05-01T00:00:00Z"}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8, at timestamptz, v text CHECK (v <> 'bad'),
                  PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
              CREATE TABLE r_jan PARTITION OF r FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')",
        columns: &["id", "at", "v"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\non_error = \"dead_letter\"",
        records: vec![
            keyed(&jan(1), Some(r#"{"v":"fits"}"#)),
            keyed(&may(2), Some(r#"{"v":"no partition"}"#)), // 1: refused
            keyed(&may(2), None),                             // 2: deletes nothing
            keyed(&jan(3), Some(r#"{"v":"bad"}"#)),           // 3: refused
            keyed(&jan(3), Some(r#"{"v":"good"}"#)),
            keyed(&jan(1), Some(r#"{"v":"bad"}"#)), // 5: refused
            keyed(&jan(1), Some(r#"{"v":"again"}"#)),
            keyed(&jan(4), Some(r#"{"v":"x"}"#)),
            keyed(&jan(4), None),
            keyed(&jan(4), Some(r#"{"v":"bad"}"#)), // 9: refused
            keyed(&jan(5), Some(r#"{"v":"y"}"#)),
        ],
    };
    let at = "2026-01-10 00:00:00+00";
    let want = Outcome {
        rows: vec![
            row(&["1", at, "again"]),
            row(&["3", at, "good"]),
            row(&["5", at, "y"]),
        ],
        dead_letters: rejected(&[1, 3, 5, 9]),
        position: vec![(0, Some(11))],
    };
    same_wherever_batches_end(case, want, false).await;
}

/// Under `on_error = "fail"` the refused record stops the sink there, with the records before
/// it written, even when the next record, a tombstone, would delete its row.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_upsert_superseded_in_its_batch_still_stops_the_sink() {
    let key = |id: i64| format!(r#"{{"id":{id}}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, v text CHECK (v <> 'bad'))",
        columns: &["id", "v"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true",
        records: vec![
            keyed(&key(1), Some(r#"{"v":"a"}"#)),
            keyed(&key(2), Some(r#"{"v":"b"}"#)),
            keyed(&key(1), Some(r#"{"v":"bad"}"#)), // 2: refused, the sink stops here
            keyed(&key(1), None),
            keyed(&key(3), Some(r#"{"v":"c"}"#)),
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "a"]), row(&["2", "b"])],
        dead_letters: Vec::new(),
        position: vec![(0, Some(2))],
    };
    same_wherever_batches_end(case, want, true).await;
}

/// Soft deletes: a refused upsert before a soft delete of its key is a dead letter, and the
/// delete marks the row the records before it left (or nothing, when there is none).
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_upsert_before_a_soft_delete_is_still_a_dead_letter() {
    let key = |id: i64| format!(r#"{{"id":{id}}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, v text CHECK (v <> 'bad'), deleted boolean)",
        columns: &["id", "v", "deleted"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\ndelete_mode = \"soft\"\nsoft_delete_column = \"deleted\"\non_error = \"dead_letter\"",
        records: vec![
            keyed(&key(1), Some(r#"{"v":"a"}"#)),
            keyed(&key(1), Some(r#"{"v":"bad"}"#)), // 1: refused
            keyed(&key(1), None),                   // marks row 1
            keyed(&key(2), Some(r#"{"v":"bad"}"#)), // 3: refused
            keyed(&key(2), None),                   // no row to mark
            keyed(&key(2), Some(r#"{"v":"b"}"#)),
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "a", "true"]), row(&["2", "b", "false"])],
        dead_letters: rejected(&[1, 3]),
        position: vec![(0, Some(6))],
    };
    same_wherever_batches_end(case, want, false).await;
}

/// Insert mode with `on_conflict = "ignore"`: a record whose key has a row is ignored, but
/// PostgreSQL checks it first, so one the CHECK refuses is a dead letter, as it is alone.
#[tokio::test(flavor = "multi_thread")]
async fn an_ignored_insert_the_check_refuses_is_still_a_dead_letter() {
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, v text CHECK (v <> 'bad'))",
        columns: &["id", "v"],
        settings: "on_conflict = \"ignore\"\non_error = \"dead_letter\"",
        records: vec![
            RawRecord::json(0, r#"{"id":1,"v":"a"}"#),
            RawRecord::json(0, r#"{"id":1,"v":"bad"}"#), // 1: refused
            RawRecord::json(0, r#"{"id":2,"v":"bad"}"#), // 2: refused
            RawRecord::json(0, r#"{"id":2,"v":"b"}"#),
            RawRecord::json(0, r#"{"id":1,"v":"c"}"#), // ignored: key 1 has a row
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "a"]), row(&["2", "b"])],
        dead_letters: rejected(&[1, 2]),
        position: vec![(0, Some(5))],
    };
    same_wherever_batches_end(case, want, false).await;
}
