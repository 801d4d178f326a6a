//! Upsert mode: the last record per key wins, within a batch and across batches, and a column
//! a record does not carry is left as it was.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
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

/// The fields a partial record carries besides `id` and `c`: a value, an explicit null, or
/// nothing.
#[derive(Clone, Copy)]
enum Field {
    Value,
    Null,
    Absent,
}

/// Runs of nine records share a column list (so one batch holds several partial records per
/// key), and the list changes between runs (so batches seal on it).
const SHAPES: [(Field, Field); 6] = [
    (Field::Value, Field::Value),
    (Field::Absent, Field::Absent),
    (Field::Value, Field::Absent),
    (Field::Absent, Field::Value),
    (Field::Null, Field::Absent),
    (Field::Value, Field::Null),
];

#[tokio::test(flavor = "multi_thread")]
async fn a_partial_upsert_leaves_the_columns_it_does_not_carry_alone() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE partial (id text PRIMARY KEY, a text, b text DEFAULT 'x', c int NOT NULL)")
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    let partition = |key: &str| (key.bytes().map(u32::from).sum::<u32>() % 3) as i32;
    let mut values: Vec<(String, String)> = vec![
        // The issue's own pair: the second record must not null `a`.
        ("1".into(), r#"{"id":"1","a":"A","b":"B","c":1}"#.into()),
        ("1".into(), r#"{"id":"1","c":2}"#.into()),
        // New keys from partial records: `a` is NULL, `b` its default unless set to null.
        ("2".into(), r#"{"id":"2","c":3}"#.into()),
        ("3".into(), r#"{"id":"3","b":null,"c":4}"#.into()),
    ];
    for i in 0..240 {
        let key = format!("k{}", i % 7);
        let (a, b) = SHAPES[(i / 9) % SHAPES.len()];
        let mut fields = vec![format!(r#""id":"{key}""#), format!(r#""c":{i}"#)];
        for (name, field) in [("a", a), ("b", b)] {
            match field {
                Field::Value => fields.push(format!(r#""{name}":"{name}{i}""#)),
                Field::Null => fields.push(format!(r#""{name}":null"#)),
                Field::Absent => {}
            }
        }
        values.push((key.clone(), format!("{{{}}}", fields.join(","))));
        if i == 100 {
            // `c` is NOT NULL without a default: PostgreSQL checks the proposed row before it
            // finds the existing one, so leaving it out cannot work even for a known key.
            values.push((key.clone(), format!(r#"{{"id":"{key}","a":"never"}}"#)));
        }
    }
    let records: Vec<RawRecord> = values
        .iter()
        .map(|(key, value)| RawRecord {
            key: Some(key.clone().into_bytes()),
            ..RawRecord::json(partition(key), value)
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "partial");
    config.max_records = 4;
    config.metadata = String::new();
    config.topic_settings = "mode = \"upsert\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    // Replay: a new row takes NULL for `a` and the default for `b` when they are absent; an
    // existing row keeps what a record does not carry.
    type Row = (Option<String>, Option<String>, i32);
    let mut expected: BTreeMap<String, Row> = BTreeMap::new();
    let mut rejected = Vec::new();
    for (key, value) in &values {
        let doc: serde_json::Map<String, serde_json::Value> = serde_json::from_str(value).unwrap();
        let Some(c) = doc.get("c").and_then(|c| c.as_i64()) else {
            rejected.push(key.clone());
            continue;
        };
        let text = |name: &str| doc.get(name).map(|v| v.as_str().map(str::to_string));
        let row = expected
            .entry(key.clone())
            .or_insert((None, Some("x".into()), 0));
        if let Some(a) = text("a") {
            row.0 = a;
        }
        if let Some(b) = text("b") {
            row.1 = b;
        }
        row.2 = c as i32;
    }
    assert_eq!(
        expected.get("1"),
        Some(&(Some("A".into()), Some("B".into()), 2))
    );
    assert_eq!(expected.get("2"), Some(&(None, Some("x".into()), 3)));
    assert_eq!(expected.get("3"), Some(&(None, None, 4)));
    let rows: Vec<(String, Option<String>, Option<String>, i32)> =
        sqlx::query_as("SELECT id, a, b, c FROM partial ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<String, Row> = rows
        .into_iter()
        .map(|(id, a, b, c)| (id, (a, b, c)))
        .collect();
    assert_eq!(actual, expected);

    let letters: Vec<(String, String)> =
        sqlx::query_as("SELECT error_kind, error_message FROM kafka_dead_letters")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(letters.len(), rejected.len(), "{letters:?}");
    for (kind, message) in &letters {
        assert_eq!(kind, "mapping", "{message}");
        assert!(
            message.contains("column c") && message.contains("NOT NULL"),
            "{message}"
        );
    }
    assert!(sink.stop().success());
}

/// A delete and then a partial record of the same key in one batch: the record makes a new
/// row, so the columns it does not carry take their defaults (NULL), never the deleted row's
/// values. Keys deleted for good, and deleted then written whole again, share the batches, and
/// a batch boundary falls between some deletes and their rewrites.
#[tokio::test(flavor = "multi_thread")]
async fn a_partial_record_after_a_delete_in_one_batch_does_not_revive_the_deleted_row() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE revived (id text PRIMARY KEY, a text, b text DEFAULT 'x', c int NOT NULL)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut records = Vec::new();
    let mut expected: BTreeMap<String, (Option<String>, Option<String>, i32)> = BTreeMap::new();
    let json = |key: &str, value: Option<String>| RawRecord {
        key: Some(key.as_bytes().to_vec()),
        value: value.map(String::into_bytes),
        ..Default::default()
    };
    for k in 0..60 {
        let key = format!("k{k}");
        records.push(json(
            &key,
            Some(format!(r#"{{"a":"A{k}","b":"B{k}","c":{k}}}"#)),
        ));
    }
    // The deletes and what follows them come after every key exists, and the partial records
    // run together, so a batch starts with a delete and holds the partial record after it.
    for k in (0..60).filter(|k| k % 3 != 1) {
        let key = format!("k{k}");
        records.push(json(&key, None));
        if k % 3 == 0 {
            // Deleted, then a partial record: a fresh row.
            records.push(json(&key, Some(format!(r#"{{"c":{}}}"#, k + 1000))));
            expected.insert(key, (None, Some("x".into()), k + 1000));
        }
        // k % 3 == 2: deleted for good.
    }
    for k in (0..60).filter(|k| k % 3 == 1) {
        // Deleted, then written whole again.
        let key = format!("k{k}");
        records.push(json(&key, None));
        records.push(json(
            &key,
            Some(format!(r#"{{"a":"a{k}","b":"b{k}","c":{k}}}"#)),
        ));
        expected.insert(key, (Some(format!("a{k}")), Some(format!("b{k}")), k));
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "revived");
    config.max_records = 50;
    config.metadata = String::new();
    config.topic_settings =
        "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(String, Option<String>, Option<String>, i32)> =
        sqlx::query_as("SELECT id, a, b, c FROM revived ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<String, (Option<String>, Option<String>, i32)> = rows
        .into_iter()
        .map(|(id, a, b, c)| (id, (a, b, c)))
        .collect();
    assert_eq!(actual, expected);
    assert!(sink.stop().success());
}

/// One field of a sparse record: a value, an explicit null, or left out.
fn sparse_field(roll: u64, value: String) -> Option<Option<String>> {
    match roll % 4 {
        0 | 1 => Some(Some(value)),
        2 => Some(None),
        _ => None,
    }
}

/// A record of `key` carrying each of `fields` (its JSON, and the text PostgreSQL gives back
/// for it) as `sparse_field` rolls, with `row` set to what replaying it leaves.
fn sparse_record(
    key: u64,
    partition: i32,
    columns: &[&str],
    fields: impl IntoIterator<Item = (String, String)>,
    next: &mut impl FnMut() -> u64,
    row: &mut [Option<String>],
) -> RawRecord {
    let mut json = vec![format!(r#""id":{key}"#)];
    for (c, (value, text)) in fields.into_iter().enumerate() {
        match sparse_field(next(), value) {
            Some(Some(value)) => {
                json.push(format!(r#""{}":{value}"#, columns[c]));
                row[c] = Some(text);
            }
            Some(None) => {
                json.push(format!(r#""{}":null"#, columns[c]));
                row[c] = None;
            }
            None => {}
        }
    }
    RawRecord {
        key: Some(key.to_string().into_bytes()),
        ..RawRecord::json(partition, &format!("{{{}}}", json.join(",")))
    }
}

/// What a row of `sparse` holds, as text (arrays and documents as PostgreSQL prints them
/// after the test's own normalisation).
type SparseRow = [Option<String>; 6];

/// Records that each carry a random subset of the columns (values, nulls, absences), with
/// deletes between them and many records per key in a batch: every column of every row is
/// what replaying the records in order gives — a record sets the columns it carries and no
/// other, a new row takes each column's default (an identity too) — and the batches are
/// not cut at each change of column list.
#[tokio::test(flavor = "multi_thread")]
async fn sparse_upserts_and_deletes_keep_exactly_what_each_record_carried() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE sparse (id int PRIMARY KEY, a text, b bigint DEFAULT 7, tags text[],
                                  doc jsonb, n numeric, c int DEFAULT 0,
                                  serial bigint GENERATED BY DEFAULT AS IDENTITY)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    const RECORDS: u64 = 3_000;
    const KEYS: u64 = 40;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let columns = ["a", "b", "tags", "doc", "n", "c"];
    let defaults: SparseRow = [None, Some("7".into()), None, None, None, Some("0".into())];
    let mut expected: BTreeMap<u64, SparseRow> = BTreeMap::new();
    let mut records = Vec::new();
    for i in 0..RECORDS {
        let key = next() % KEYS;
        let partition = (key % 3) as i32;
        if next() % 12 == 0 {
            expected.remove(&key);
            records.push(RawRecord {
                key: Some(key.to_string().into_bytes()),
                partition,
                ..Default::default()
            });
            continue;
        }
        // Each column's JSON and the text PostgreSQL gives back for it.
        let fields = [
            (format!(r#""a{i}\u0001""#), format!("a{i}\u{1}")),
            (
                format!("{}", i as i64 - 1_500),
                format!("{}", i as i64 - 1_500),
            ),
            (
                format!(r#"["t{i}", null, "x,y"]"#),
                format!(r#"{{t{i},NULL,"x,y"}}"#),
            ),
            (
                format!(r#"{{"i": {i}, "d": [1, {{}}]}}"#),
                format!(r#"{{"d": [1, {{}}], "i": {i}}}"#),
            ),
            (format!("{i}.50"), format!("{i}.50")),
            (format!("{}", i % 1000), format!("{}", i % 1000)),
        ];
        let row = expected.entry(key).or_insert_with(|| defaults.clone());
        records.push(sparse_record(
            key, partition, &columns, fields, &mut next, row,
        ));
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let (mut sink, address) = upsert_by_key_until_drained(&db, &topic, "sparse", 150).await;

    type Read = (
        i32,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i64>,
    );
    let rows: Vec<Read> = sqlx::query_as(
        "SELECT id, a, b::text, tags::text, doc::text, n::text, c::text, serial FROM sparse ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let serials: std::collections::BTreeSet<Option<i64>> = rows.iter().map(|r| r.7).collect();
    assert_eq!(
        serials.len(),
        rows.len(),
        "each new row takes its own identity"
    );
    assert!(!serials.contains(&None));
    let actual: BTreeMap<u64, SparseRow> = rows
        .into_iter()
        .map(|(id, a, b, tags, doc, n, c, _)| (id as u64, [a, b, tags, doc, n, c]))
        .collect();
    assert_eq!(actual.len(), expected.len());
    for (key, want) in &expected {
        assert_eq!(actual.get(key), Some(want), "key {key}");
    }
    let batches = metric(
        &parse_metrics(&get(&address, "/metrics").1),
        "kafka_pg_sink_batches_committed_total",
    );
    assert!(
        batches > 0.0 && batches * 40.0 < RECORDS as f64,
        "{RECORDS} records of every column list in batches of up to 150: {batches} transactions"
    );
    assert!(sink.stop().success());
}

/// What a row of `mixed` holds, as text: `a`, `b`, `label`, `tags`, `doc`.
type MixedRow = [Option<String>; 5];

/// Batches where most keys have one record and a few hot keys have many, with deletes among
/// both: a cold key's record updates its row, is superseded by a delete after it, or follows
/// a delete of its row (a fresh row with defaults, one of them an expression); hot keys are
/// folded. Every column of every row is what replaying the records in order gives, whichever
/// way its key's records were merged.
#[tokio::test(flavor = "multi_thread")]
async fn keys_seen_once_and_repeated_keys_in_one_batch_each_keep_what_their_records_carried() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE mixed (id int PRIMARY KEY, a text, b bigint DEFAULT 7,
                                 label text DEFAULT ('n-' || (6 * 7)::text), tags text[],
                                 doc jsonb)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    const RECORDS: u64 = 2_400;
    // Cold keys come back every COLD records, more than a batch holds: once per batch.
    const COLD: u64 = 600;
    const HOT: u64 = 8;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let columns = ["a", "b", "label", "tags", "doc"];
    let defaults: MixedRow = [None, Some("7".into()), Some("n-42".into()), None, None];
    let mut expected: BTreeMap<u64, MixedRow> = BTreeMap::new();
    let mut records = Vec::new();
    let delete = |key: u64| RawRecord {
        key: Some(key.to_string().into_bytes()),
        ..Default::default()
    };
    for i in 0..RECORDS {
        let hot = i % 4 == 0;
        let key = if hot { next() % HOT } else { 1_000 + i % COLD };
        // Deletes: of a hot key; of a cold key whose record comes 3 later (a fresh row in
        // the same batch); of one whose record came 3 before (superseded in its batch).
        let deleted = match (hot, i % 23) {
            (true, _) if next() % 8 == 0 => Some(key),
            (false, 5) => Some(1_000 + (i + 3) % COLD),
            (false, 11) => Some(1_000 + (i + COLD - 3) % COLD),
            _ => None,
        };
        if let Some(gone) = deleted {
            expected.remove(&gone);
            records.push(delete(gone));
            if hot {
                continue;
            }
        }
        let fields = [
            (format!(r#""a{i}""#), format!("a{i}")),
            (format!("{i}"), format!("{i}")),
            (format!(r#""l{i}""#), format!("l{i}")),
            (format!(r#"["t{i}", null]"#), format!("{{t{i},NULL}}")),
            (format!(r#"{{"i": {i}}}"#), format!(r#"{{"i": {i}}}"#)),
        ];
        let row = expected.entry(key).or_insert_with(|| defaults.clone());
        records.push(sparse_record(key, 0, &columns, fields, &mut next, row));
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let (mut sink, address) = upsert_by_key_until_drained(&db, &topic, "mixed", 500).await;

    type Read = (
        i32,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Read> = sqlx::query_as(
        "SELECT id, a, b::text, label, tags::text, doc::text FROM mixed ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let actual: BTreeMap<u64, MixedRow> = rows
        .into_iter()
        .map(|(id, a, b, label, tags, doc)| (id as u64, [a, b, label, tags, doc]))
        .collect();
    assert_eq!(actual.len(), expected.len());
    for (key, want) in &expected {
        assert_eq!(actual.get(key), Some(want), "key {key}");
    }
    let batches = metric(
        &parse_metrics(&get(&address, "/metrics").1),
        "kafka_pg_sink_batches_committed_total",
    );
    assert!(
        batches > 0.0 && batches * 100.0 < RECORDS as f64,
        "{RECORDS} records in batches of up to 500: {batches} transactions"
    );
    assert!(sink.stop().success());
}

/// Runs the sink on `topic` into `table` in upsert mode keyed by the record key (tombstones
/// delete, no metadata columns, batches of at most `max_records`) until it has drained the
/// topic; returns it still running, with its HTTP address for its metrics.
async fn upsert_by_key_until_drained(
    db: &TestDb,
    topic: &TestTopic,
    table: &str,
    max_records: usize,
) -> (Sink, String) {
    let mut config = SinkConfig::new(&db.url, &topic.name, table);
    config.max_records = max_records;
    config.metadata = String::new();
    config.topic_settings =
        "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true".into();
    let sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    wait_drained(db, &config.group, topic, Duration::from_secs(120)).await;
    (sink, address)
}

/// A row of `fresh` as text: `seq`, `note`, `amount`, `at`, `doc`.
type FreshRow = [Option<String>; 5];

/// Upserts of keys the table does not hold go in by a plain COPY of the columns they carried
/// (`note`, never carried at first, takes its default as the merge's insert gives it), and
/// the COPY never stands for a merge it would differ from: batches that update rows, add new
/// keys among them, or carry a new key twice are merged, the last record per key winning.
/// Every column of every row is what replaying the records in order gives.
#[tokio::test(flavor = "multi_thread")]
async fn new_keys_go_in_by_a_plain_copy_and_the_rest_by_the_merge() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE fresh (id bigint PRIMARY KEY, seq bigint NOT NULL, note text DEFAULT 'none',
                                 amount numeric(10,2), at timestamptz, doc jsonb)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let mut expected: BTreeMap<i64, FreshRow> = BTreeMap::new();
    let mut records = Vec::new();
    let mut add = |records: &mut Vec<RawRecord>, key: i64, seq: i64, note: bool| {
        let amount = format!("{}.{:02}", seq % 997, seq % 100);
        let at = format!("2026-12-02T10:{:02}:{:02}Z", seq % 60, key % 60);
        let mut value = format!(
            r#"{{"id":{key},"seq":{seq},"amount":"{amount}","at":"{at}","doc":{{"k":{key},"s":"\u00e9{seq}"}}"#
        );
        let row = expected
            .entry(key)
            .or_insert_with(|| [None, Some("none".into()), None, None, None]);
        if note {
            value.push_str(&format!(r#","note":"n{seq}""#));
            row[1] = Some(format!("n{seq}"));
        }
        value.push('}');
        row[0] = Some(seq.to_string());
        row[2] = Some(amount);
        row[3] = Some(format!("2026-12-02 10:{:02}:{:02}+00", seq % 60, key % 60));
        row[4] = Some(format!(r#"{{"k": {key}, "s": "é{seq}"}}"#));
        records.push(RawRecord::json((key % 2) as i32, &value));
    };
    // New keys only, none twice.
    for key in 0..2_000 {
        add(&mut records, key, key, false);
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "fresh");
    config.max_records = 400;
    config.metadata = String::new();
    config.topic_settings = "mode = \"upsert\"".into();
    let mut sink = Sink::start(&config, "sink");
    let address = sink.http_address();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let copied_series = "kafka_pg_sink_upserts_copied_total{table=\"public.fresh\"}";
    let counts = |address: &str| {
        let metrics = parse_metrics(&get(address, "/metrics").1);
        (
            metric(&metrics, copied_series),
            metric(&metrics, "kafka_pg_sink_batches_committed_total"),
        )
    };
    let (copied, batches) = counts(&address);
    assert!(
        batches >= 2.0,
        "2,000 records in several batches: {batches}"
    );
    assert_eq!(copied, batches, "every batch of new keys is copied");

    // Updates of every key, new keys among them, and new keys that come twice, then a run
    // of new keys again.
    records.clear();
    let mut seq = 10_000;
    for i in 0..3_000 {
        let key = match i % 3 {
            0 => i % 2_000,
            1 => 5_000 + i,
            _ => 5_000 + i - 1,
        };
        add(&mut records, key, seq, i % 5 != 0);
        seq += 1;
    }
    for key in 20_000..21_000 {
        add(&mut records, key, seq, true);
        seq += 1;
    }
    produce_raw(&producer(), &topic.name, &records).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let rows: Vec<(i64, Vec<Option<String>>)> = sqlx::query_as(
        "SELECT id, ARRAY[seq::text, note, amount::text, at::text, doc::text] FROM fresh ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let actual: BTreeMap<i64, FreshRow> = rows
        .into_iter()
        .map(|(id, row)| (id, row.try_into().expect("five columns")))
        .collect();
    assert_eq!(actual.len(), expected.len());
    for (key, want) in &expected {
        assert_eq!(actual.get(key), Some(want), "key {key}");
    }
    let (copied_after, batches_after) = counts(&address);
    assert!(
        copied_after - copied < batches_after - batches,
        "batches that update rows are merged: {copied_after} copied of {batches_after}"
    );
    assert!(sink.stop().success());
}

/// A batch of new keys with deletes among them is merged, never copied: a key deleted after
/// its record has no row, and one whose record follows its delete has the record's row.
#[tokio::test(flavor = "multi_thread")]
async fn new_keys_with_deletes_among_them_are_merged() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE churn (id int PRIMARY KEY, a text, b bigint DEFAULT 7)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut expected: BTreeMap<i32, (Option<String>, Option<i64>)> = BTreeMap::new();
    let mut records = Vec::new();
    let delete = |key: i32| RawRecord {
        key: Some(key.to_string().into_bytes()),
        ..Default::default()
    };
    for key in 0..1_500 {
        if key % 11 == 3 {
            records.push(delete(key));
        }
        records.push(RawRecord {
            key: Some(key.to_string().into_bytes()),
            ..RawRecord::json(0, &format!(r#"{{"id":{key},"a":"a{key}"}}"#))
        });
        expected.insert(key, (Some(format!("a{key}")), Some(7)));
        if key % 7 == 0 {
            records.push(delete(key));
            expected.remove(&key);
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let (mut sink, _) = upsert_by_key_until_drained(&db, &topic, "churn", 400).await;
    let rows: Vec<(i32, Option<String>, Option<i64>)> =
        sqlx::query_as("SELECT id, a, b FROM churn ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let actual: BTreeMap<i32, (Option<String>, Option<i64>)> =
        rows.into_iter().map(|(id, a, b)| (id, (a, b))).collect();
    assert_eq!(actual, expected);
    assert!(sink.stop().success());
}
