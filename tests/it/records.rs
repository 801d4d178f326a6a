//! What records do besides rows: Debezium truncates, soft deletes and `on_conflict = "ignore"`,
//! each against a model of the source applied record by record, every column compared.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// A record with a JSON key and value (or a tombstone) at a given Kafka timestamp.
fn record(partition: i32, key: Option<String>, value: Option<String>, ts: i64) -> RawRecord {
    RawRecord {
        partition,
        key: key.map(String::into_bytes),
        value: value.map(String::into_bytes),
        timestamp_ms: Some(ts),
        ..Default::default()
    }
}

/// A customer row: name and an optional score.
type Customer = (String, Option<i32>);

/// A Debezium change event for table `customers` (op, before, after), schemaless JSON.
fn change(op: &str, id: i32, before: Option<&Customer>, after: Option<&Customer>) -> String {
    let row = |r: Option<&Customer>| match r {
        Some((name, score)) => format!(
            r#"{{"id":{id},"name":"{name}","score":{}}}"#,
            score.map_or("null".to_string(), |s| s.to_string())
        ),
        None => "null".into(),
    };
    format!(
        r#"{{"before":{},"after":{},"source":{{"table":"customers"}},"op":"{op}","ts_ms":1700000000000}}"#,
        row(before),
        row(after)
    )
}

/// Debezium's truncate event: no key, no rows.
fn truncate_event() -> String {
    r#"{"before":null,"after":null,"source":{"table":"customers"},"op":"t","ts_ms":1700000000000}"#
        .into()
}

/// `n` Debezium events over 40 keys (creates, updates, deletes each followed by a tombstone)
/// with a truncate at each offset in `truncates` (counted in events), applied to `state` as
/// the source applied them; `ignored` is the state a sink that skips truncates reaches.
fn debezium_sequence(
    seed: u64,
    n: usize,
    truncates: &[usize],
    state: &mut BTreeMap<i32, Customer>,
    ignored: &mut BTreeMap<i32, Customer>,
) -> Vec<RawRecord> {
    let mut records = Vec::new();
    let mut x = seed;
    for i in 0..n {
        if truncates.contains(&i) {
            records.push(record(0, None, Some(truncate_event()), 0));
            state.clear();
            continue;
        }
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = ((x >> 33) % 40) as i32;
        let key = Some(format!(r#"{{"id":{id}}}"#));
        let new: Customer = (format!("c{i}"), (i % 3 != 0).then_some(i as i32));
        // A sink that ignores truncates sees every change against its own rows.
        let apply = |m: &mut BTreeMap<i32, Customer>, delete: bool| {
            if delete {
                m.remove(&id);
            } else {
                m.insert(id, new.clone());
            }
        };
        match (state.get(&id).cloned(), (x >> 20) % 5) {
            (Some(old), 0) => {
                records.push(record(
                    0,
                    key.clone(),
                    Some(change("d", id, Some(&old), None)),
                    0,
                ));
                records.push(record(0, key, None, 0));
                apply(state, true);
                apply(ignored, true);
            }
            (Some(old), _) => {
                records.push(record(
                    0,
                    key,
                    Some(change("u", id, Some(&old), Some(&new))),
                    0,
                ));
                apply(state, false);
                apply(ignored, false);
            }
            (None, _) => {
                records.push(record(0, key, Some(change("c", id, None, Some(&new))), 0));
                apply(state, false);
                apply(ignored, false);
            }
        }
    }
    records
}

/// Every column of `customers`-shaped `table`, by id.
async fn customers(db: &TestDb, table: &str) -> BTreeMap<i32, Customer> {
    let rows: Vec<(i32, String, Option<i32>)> =
        sqlx::query_as(&format!("SELECT id, name, score FROM {table} ORDER BY id"))
            .fetch_all(&db.pool)
            .await
            .unwrap();
    rows.into_iter().map(|(id, n, s)| (id, (n, s))).collect()
}

/// Truncates land in the middle of batches (everything is produced before the sink starts,
/// and a batch takes 1,000 records), with a `kill -9` while the first half is being written
/// and a second half after a restart: the table equals the source state, column for column.
/// A second sink with `truncate = "ignore"` reaches the state without truncates.
#[tokio::test(flavor = "multi_thread")]
async fn truncate_in_the_middle_of_a_debezium_sequence_equals_the_source_state() {
    let db = TestDb::migrated().await;
    for table in ["customers", "customers_kept"] {
        db.pool
            .execute(&*format!(
                "CREATE TABLE {table} (id int PRIMARY KEY, name text NOT NULL, score int)"
            ))
            .await
            .unwrap();
    }
    let topic = TestTopic::create(1).await;
    let (mut state, mut ignored) = (BTreeMap::new(), BTreeMap::new());
    let first = debezium_sequence(7, 1_500, &[400, 401, 1_100], &mut state, &mut ignored);
    produce_raw(&producer(), &topic.name, &first).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\ntruncate = \"apply\"".into();
    let mut sink = Sink::start(&config, "truncate-1");
    // Killed once the first rows are in, before the first half is through.
    wait_until("the first rows", Duration::from_secs(60), || async {
        db.stored_offsets(&config.group, &topic.name)
            .await
            .iter()
            .any(|(_, o)| o.is_some())
    })
    .await;
    sink.kill9();
    let mut sink = Sink::start(&config, "truncate-2");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_eq!(
        customers(&db, "customers").await,
        state,
        "after the first half"
    );
    sink.kill9();

    let second = debezium_sequence(11, 800, &[300, 770], &mut state, &mut ignored);
    produce_raw(&producer(), &topic.name, &second).await;
    let mut sink = Sink::start(&config, "truncate-3");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let rows = customers(&db, "customers").await;
    assert!(
        !rows.is_empty(),
        "the sequence ends with rows after its last truncate"
    );
    assert_eq!(rows, state);

    let mut kept = SinkConfig::new(&db.url, &topic.name, "customers_kept");
    kept.metadata = String::new();
    kept.topic_settings = "format = \"debezium\"\ntruncate = \"ignore\"".into();
    let mut sink = Sink::start(&kept, "truncate-ignored");
    wait_drained(&db, &kept.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert_ne!(ignored, state, "the truncates mattered");
    assert_eq!(customers(&db, "customers_kept").await, ignored);
}

/// An item row: name, quantity, and the mark (epoch milliseconds of the deleting record).
type Item = (String, Option<i32>, Option<i64>);

/// Soft deletes in upsert mode with tombstones, over two partitions and many small batches:
/// a delete marks the row with its record's Kafka timestamp and keeps every other column; a
/// later upsert revives it (the mark cleared), and one that leaves a column out keeps the
/// deleted row's value there; a second delete keeps the first mark; a delete of a key without
/// a row writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn soft_deletes_mark_rows_with_the_delete_timestamp_and_upserts_revive_them() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int, deleted_at timestamptz)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(2).await;
    let mut model: BTreeMap<i64, Item> = BTreeMap::new();
    let mut records = Vec::new();
    let base = 1_700_000_000_000i64;
    let mut x = 3u64;
    for i in 0..2_000i64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = ((x >> 33) % 60) as i64;
        let ts = base + i * 1_000;
        let key = Some(format!(r#"{{"id":{id}}}"#));
        let partition = (id % 2) as i32;
        if (x >> 20) % 3 == 0 {
            records.push(record(partition, key, None, ts));
            if let Some(row) = model.get_mut(&id) {
                row.2.get_or_insert(ts);
            }
        } else {
            // Every 7th record leaves qty out: a revived row keeps the deleted row's qty.
            let (value, qty) = if i % 7 == 0 {
                let kept = model.get(&id).and_then(|r| r.1);
                (format!(r#"{{"id":{id},"name":"n{i}"}}"#), kept)
            } else {
                let qty = (i % 4 != 0).then_some(i as i32);
                let text = qty.map_or("null".into(), |q| q.to_string());
                (format!(r#"{{"id":{id},"name":"n{i}","qty":{text}}}"#), qty)
            };
            records.push(record(partition, key, Some(value), ts));
            model.insert(id, (format!("n{i}"), qty, None));
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.metadata = String::new();
    config.max_records = 37;
    config.topic_settings = "mode = \"upsert\"\ndelete_on_tombstone = true\ndelete_mode = \"soft\"\nsoft_delete_column = \"deleted_at\"".into();
    let mut sink = Sink::start(&config, "soft");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());
    let rows: Vec<(i64, String, Option<i32>, Option<i64>)> = sqlx::query_as(
        "SELECT id, name, qty, (extract(epoch FROM deleted_at) * 1000)::bigint FROM items ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rows: BTreeMap<i64, Item> = rows
        .into_iter()
        .map(|(id, n, q, d)| (id, (n, q, d)))
        .collect();
    assert!(model.values().any(|r| r.2.is_some()) && model.values().any(|r| r.2.is_none()));
    assert_eq!(rows, model);
}

/// Soft deletes of Debezium events into a boolean column: `d` (and its tombstone) sets it,
/// a later create or update clears it, other columns stay as the delete found them.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_soft_deletes_set_a_boolean_and_keep_the_row() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, score int, __deleted boolean NOT NULL DEFAULT false)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let (mut state, mut ignored) = (BTreeMap::new(), BTreeMap::new());
    let records = debezium_sequence(5, 1_500, &[], &mut state, &mut ignored);
    // The soft model: a deleted row keeps the columns it had, marked.
    let mut model: BTreeMap<i32, (Customer, bool)> = BTreeMap::new();
    for r in &records {
        let Some(value) = &r.value else { continue };
        let event: serde_json::Value = serde_json::from_slice(value).unwrap();
        let row = |side: &str| {
            let v = &event[side];
            (
                v["id"].as_i64().unwrap() as i32,
                (
                    v["name"].as_str().unwrap().to_string(),
                    v["score"].as_i64().map(|s| s as i32),
                ),
            )
        };
        match event["op"].as_str().unwrap() {
            "d" => {
                let (id, _) = row("before");
                if let Some(entry) = model.get_mut(&id) {
                    entry.1 = true;
                }
            }
            _ => {
                let (id, c) = row("after");
                model.insert(id, (c, false));
            }
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.metadata = String::new();
    config.max_records = 50;
    config.topic_settings =
        "format = \"debezium\"\ndelete_mode = \"soft\"\nsoft_delete_column = \"__deleted\"".into();
    let mut sink = Sink::start(&config, "soft-debezium");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());
    let rows: Vec<(i32, String, Option<i32>, bool)> =
        sqlx::query_as("SELECT id, name, score, __deleted FROM customers ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let rows: BTreeMap<i32, (Customer, bool)> = rows
        .into_iter()
        .map(|(id, n, s, d)| (id, ((n, s), d)))
        .collect();
    assert!(model.values().any(|r| r.1) && model.values().any(|r| !r.1));
    assert_eq!(rows, model);
}

/// `on_conflict = "ignore"`: duplicates within a batch and across batches, and a row that
/// existed before: the existing row and the first record per key win, and a record that
/// leaves out a defaulted column gets its default.
#[tokio::test(flavor = "multi_thread")]
async fn on_conflict_ignore_keeps_the_existing_row_and_the_first_record_per_key() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE events (id bigint PRIMARY KEY, v text NOT NULL, n int DEFAULT 7)")
        .await
        .unwrap();
    db.pool
        .execute("INSERT INTO events VALUES (3, 'before', NULL), (11, 'before too', 1)")
        .await
        .unwrap();
    let mut model: BTreeMap<i64, (String, Option<i32>)> = BTreeMap::new();
    model.insert(3, ("before".into(), None));
    model.insert(11, ("before too".into(), Some(1)));
    let topic = TestTopic::create(2).await;
    let mut records = Vec::new();
    let mut x = 9u64;
    for i in 0..1_200i64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = ((x >> 33) % 300) as i64;
        let value = if i % 5 == 0 {
            format!(r#"{{"id":{id},"v":"r{i}"}}"#)
        } else {
            format!(r#"{{"id":{id},"v":"r{i}","n":{i}}}"#)
        };
        let n = if i % 5 == 0 { 7 } else { i as i32 };
        model.entry(id).or_insert((format!("r{i}"), Some(n)));
        records.push(record((id % 2) as i32, None, Some(value), 0));
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "events");
    config.metadata = String::new();
    config.max_records = 200;
    config.topic_settings = "on_conflict = \"ignore\"".into();
    let mut sink = Sink::start(&config, "ignore");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    assert!(sink.stop().success());
    let rows: Vec<(i64, String, Option<i32>)> =
        sqlx::query_as("SELECT id, v, n FROM events ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let rows: BTreeMap<i64, (String, Option<i32>)> =
        rows.into_iter().map(|(id, v, n)| (id, (v, n))).collect();
    assert_eq!(rows, model);
}

/// A truncate kept as a `decode` dead letter (the default `truncate = "fail"`) is never
/// replayed into the table, even once the topic says `apply`: it would delete the rows written
/// since. With `ignore` the replay takes it and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_truncate_dead_letter_is_never_replayed_into_the_table() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, score int)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let (mut state, mut ignored) = (BTreeMap::new(), BTreeMap::new());
    let records = debezium_sequence(13, 60, &[30], &mut state, &mut ignored);
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "truncate-letter");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert_eq!(customers(&db, "customers").await, ignored);
    let letters = || async {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT error_kind, error_message FROM kafka_dead_letters")
                .fetch_all(&db.pool)
                .await
                .unwrap();
        rows
    };
    assert_eq!(letters().await.len(), 1);

    config.topic_settings =
        "format = \"debezium\"\non_error = \"dead_letter\"\ntruncate = \"apply\"".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert!(
        out.stdout
            .contains("replayed 0 dead letter(s); 1 still fail"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let left = letters().await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, "decode");
    assert!(left[0].1.contains("never replayed"), "{left:?}");
    assert_eq!(
        customers(&db, "customers").await,
        ignored,
        "nothing truncated"
    );

    config.topic_settings =
        "format = \"debezium\"\non_error = \"dead_letter\"\ntruncate = \"ignore\"".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert!(
        out.status.success()
            && out
                .stdout
                .contains("replayed 1 dead letter(s); 0 still fail"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(letters().await.is_empty());
    assert_eq!(customers(&db, "customers").await, ignored);
}

/// A truncate PostgreSQL refuses (the table is referenced by a foreign key) stops the sink
/// with the error instead of retrying it forever; the rows before it are committed and the
/// position rests on the truncate.
#[tokio::test(flavor = "multi_thread")]
async fn a_truncate_postgresql_refuses_stops_the_sink_at_it() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, score int); CREATE TABLE orders (id int PRIMARY KEY, customer int REFERENCES customers)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let (mut state, mut ignored) = (BTreeMap::new(), BTreeMap::new());
    let records = debezium_sequence(17, 40, &[25], &mut state, &mut ignored);
    let at = records
        .iter()
        .position(|r| r.key.is_none())
        .expect("the truncate") as i64;
    // The source before its truncate.
    let (mut before, mut unused) = (BTreeMap::new(), BTreeMap::new());
    debezium_sequence(17, 25, &[], &mut before, &mut unused);
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\ntruncate = \"apply\"".into();
    let mut sink = Sink::start(&config, "truncate-refused");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "the refused truncate should stop the sink\n{}",
                sink.logs_tail(20)
            )
        });
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(20));
    assert!(sink.logs().contains("0A000"), "{}", sink.logs_tail(20));
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(at))]
    );
    assert_eq!(customers(&db, "customers").await, before);
}
