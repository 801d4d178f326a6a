//! Every record is a row, a dead letter or a documented no-op wherever its batch ends. A record
//! PostgreSQL refuses when applied alone is refused (a dead letter, or a stop) even when a
//! later record of its key supersedes it in the same batch: each case runs once per batch
//! size, from one record a batch (the sink applying records one at a time, the model) to the
//! whole topic in one batch, and every run must end in the same table, the same dead letters
//! and the same position.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
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
/// "fail"` (`stops`) the sink must stop, else drain the topic. Also returns, for a drained
/// topic, the merges its repeated keys cost (`kafka_pg_sink_upsert_rounds_total`).
async fn run(case: &Case, topic: &TestTopic, max_records: usize, stops: bool) -> (Outcome, f64) {
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
    let mut rounds = 0.0;
    if stops {
        let status = sink
            .wait_timeout(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("the sink should stop\n{}", sink.logs_tail(30)));
        assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    } else {
        let _logs = LogsOnPanic(&sink);
        wait_drained(&db, &config.group, topic, Duration::from_secs(60)).await;
        // The position commits before the sink reads the writer's result and counts it:
        // wait for the count of committed batches to hold still.
        let address = sink.http_address();
        let scrape = || parse_metrics(&get(&address, "/metrics").1);
        let committed = |m: &std::collections::HashMap<String, f64>| {
            metric(m, "kafka_pg_sink_batches_committed_total")
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut metrics = scrape();
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = scrape();
            let still = committed(&now) == committed(&metrics) && committed(&now) > 0.0;
            metrics = now;
            if still || std::time::Instant::now() > deadline {
                break;
            }
        }
        rounds = metric(
            &metrics,
            "kafka_pg_sink_upsert_rounds_total{table=\"public.r\"}",
        );
    }
    sink.stop();
    let outcome = Outcome {
        rows: db.rows_as_text("r", case.columns).await,
        dead_letters: db
            .dead_letters_of(&topic.name)
            .await
            .into_iter()
            .map(|(offset, kind, _)| (offset, kind))
            .collect(),
        position: db.stored_offsets(&config.group, &topic.name).await,
    };
    (outcome, rounds)
}

/// Runs `case` at every batch size: each run must equal the one-record-a-batch run and `want`.
/// Returns the merges the whole topic in one batch cost beyond the first.
async fn same_wherever_batches_end(case: Case, want: Outcome, stops: bool) -> f64 {
    let topic = TestTopic::create(1).await;
    produce_raw(&producer(), &topic.name, &case.records).await;
    let mut rounds = 0.0;
    for max_records in BATCH_SIZES {
        let got;
        (got, rounds) = run(&case, &topic, max_records, stops).await;
        assert_eq!(got, want, "batches of {max_records} records");
    }
    rounds
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
    let rounds = same_wherever_batches_end(case, want, false).await;
    assert_eq!(
        rounds, 0.0,
        "a partitioned table with a CHECK, records carrying every column: the probe, no rounds"
    );
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
    let rounds = same_wherever_batches_end(case, want, false).await;
    assert_eq!(rounds, 0.0, "the probe, no rounds");
}

/// A trigger is a rule beyond the row's own columns: this one refuses only updates, so whether
/// a record is refused depends on whether its key has a row, and a batch whose keys repeat is
/// applied in rounds, one record per key each. The update it refuses is a dead letter though
/// its key's next record supersedes it; the same value inserted is taken, and deleted after.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_a_trigger_refuses_is_a_dead_letter_though_superseded() {
    let key = |id: i64| format!(r#"{{"id":{id}}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, v text, n int8);
              CREATE FUNCTION r_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.v = 'bad' THEN RAISE EXCEPTION 'refused: %', NEW.v USING ERRCODE = '23514'; END IF;
                  RETURN NEW;
                END $$;
              CREATE TRIGGER r_refuse BEFORE UPDATE ON r FOR EACH ROW EXECUTE FUNCTION r_refuse()",
        columns: &["id", "v", "n"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\non_error = \"dead_letter\"",
        records: vec![
            keyed(&key(1), Some(r#"{"v":"a","n":1}"#)),
            keyed(&key(1), Some(r#"{"v":"bad","n":2}"#)), // 1: an update the trigger refuses
            keyed(&key(1), Some(r#"{"v":"b","n":3}"#)),
            keyed(&key(2), Some(r#"{"v":"bad","n":4}"#)), // an insert: taken
            keyed(&key(2), None),                         // and deleted
            keyed(&key(3), Some(r#"{"v":"c","n":6}"#)),
            keyed(&key(3), None),
            keyed(&key(3), Some(r#"{"v":"d","n":8}"#)),
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "b", "3"]), row(&["3", "d", "8"])],
        dead_letters: rejected(&[1]),
        position: vec![(0, Some(8))],
    };
    let rounds = same_wherever_batches_end(case, want, false).await;
    // Keys 1 and 3 have three records each in the one batch: two merges beyond the first
    // (fewer if the first fetch brought only part of the topic).
    assert!(
        rounds > 0.0 && rounds <= 2.0,
        "a trigger: the batch goes in rounds ({rounds})"
    );
}

/// Records that all carry the same columns but not every column, under a CHECK relating a
/// carried column to one they leave as stored: whether a record is refused depends on the row
/// it updates, so the batch goes in rounds rather than probing the records' own rows.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_refused_against_a_column_it_leaves_is_a_dead_letter_though_superseded() {
    let key = |id: i64| format!(r#"{{"id":{id}}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, lo int8, hi int8, CHECK (lo <= hi));
              INSERT INTO r VALUES (1, 1, 5), (2, 1, 10)",
        columns: &["id", "lo", "hi"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\non_error = \"dead_letter\"",
        records: vec![
            keyed(&key(1), Some(r#"{"lo":9}"#)), // 0: 9 > 5, refused against the stored hi
            keyed(&key(1), Some(r#"{"lo":2}"#)),
            keyed(&key(2), Some(r#"{"lo":7}"#)),
            keyed(&key(2), Some(r#"{"lo":11}"#)), // 3: refused
            keyed(&key(2), Some(r#"{"lo":8}"#)),
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "2", "5"]), row(&["2", "8", "10"])],
        dead_letters: rejected(&[0, 3]),
        position: vec![(0, Some(5))],
    };
    let rounds = same_wherever_batches_end(case, want, false).await;
    assert!(
        rounds > 0.0 && rounds <= 2.0,
        "a CHECK over a column the records leave: rounds ({rounds})"
    );
}

/// Partial records (each carries some of the columns) under a CHECK that relates two columns:
/// whether a record is refused depends on the stored row it updates, so the batch goes in
/// rounds, and a record refused against the row the records before it left is a dead letter.
#[tokio::test(flavor = "multi_thread")]
async fn a_partial_record_refused_against_its_stored_row_is_a_dead_letter_though_superseded() {
    let key = |id: i64| format!(r#"{{"id":{id}}}"#);
    let case = Case {
        ddl: "CREATE TABLE r (id int8 PRIMARY KEY, lo int8, hi int8, CHECK (lo <= hi))",
        columns: &["id", "lo", "hi"],
        settings: "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\non_error = \"dead_letter\"",
        records: vec![
            keyed(&key(1), Some(r#"{"lo":1,"hi":5}"#)),
            keyed(&key(1), Some(r#"{"lo":9}"#)), // 1: 9 > 5, refused against the stored row
            keyed(&key(1), Some(r#"{"hi":20}"#)),
            keyed(&key(1), Some(r#"{"lo":15}"#)), // fits under the new hi
            keyed(&key(2), Some(r#"{"lo":3,"hi":4}"#)),
            keyed(&key(2), Some(r#"{"hi":1}"#)), // 5: refused
            keyed(&key(2), None),
        ],
    };
    let want = Outcome {
        rows: vec![row(&["1", "15", "20"])],
        dead_letters: rejected(&[1, 5]),
        position: vec![(0, Some(7))],
    };
    same_wherever_batches_end(case, want, false).await;
}

/// What decides between the probe and rounds is read from the catalog, over the table and its
/// partitions: a plain table with a primary key and NOT NULL columns has no rules beyond the
/// row; each of the others has the one it names.
#[tokio::test(flavor = "multi_thread")]
async fn row_rules_are_read_from_the_table_and_its_partitions() {
    use kafka_pg_sink::schema::{describe, RowRules};
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE plain (id int8 PRIMARY KEY, v text NOT NULL);
             CREATE TABLE checked (id int8 PRIMARY KEY, v text CHECK (v <> ''));
             CREATE TABLE second_key (id int8 PRIMARY KEY, email text UNIQUE);
             CREATE TABLE partial_key (id int8 PRIMARY KEY, email text);
             CREATE UNIQUE INDEX ON partial_key (email) WHERE email IS NOT NULL;
             CREATE TABLE lowered_key (id int8 PRIMARY KEY, email text);
             CREATE UNIQUE INDEX ON lowered_key (lower(email));
             CREATE TABLE child (id int8 PRIMARY KEY, parent int8 REFERENCES plain (id));
             CREATE TABLE secured (id int8 PRIMARY KEY);
             ALTER TABLE secured ENABLE ROW LEVEL SECURITY;
             CREATE TABLE parted (id int8, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
             CREATE TABLE parted_a PARTITION OF parted FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
             CREATE TABLE parted_trigger (id int8, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
             CREATE TABLE parted_trigger_a PARTITION OF parted_trigger
               FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
             CREATE FUNCTION nothing() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER on_a_partition BEFORE UPDATE ON parted_trigger_a
               FOR EACH ROW EXECUTE FUNCTION nothing();
             CREATE TABLE parted_check (id int8, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
             CREATE TABLE parted_check_a PARTITION OF parted_check (CHECK (id > 0))
               FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');",
        )
        .await
        .unwrap();
    let rules = |checks, beyond_the_row| RowRules {
        checks,
        beyond_the_row,
        opaque_unique: false,
    };
    // A unique index the writer cannot compute from a row's values.
    let opaque = RowRules {
        opaque_unique: true,
        ..rules(false, true)
    };
    for (table, want) in [
        ("plain", rules(false, false)),
        ("checked", rules(true, false)),
        ("second_key", rules(false, true)),
        ("partial_key", opaque),
        ("lowered_key", opaque),
        ("child", rules(false, true)),
        ("secured", rules(false, true)),
        ("parted", rules(false, false)),
        ("parted_trigger", rules(false, true)),
        ("parted_check", rules(true, false)),
    ] {
        let described = describe(&db.pool, "public", table).await.unwrap();
        assert_eq!(described.rules, want, "{table}");
    }
}
