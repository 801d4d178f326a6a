//! Stale records are refused (`version_from`): a record older than its key's stored row is not
//! applied, so a replay after `offsets reset`, or a second source of the same table, never
//! moves a row backwards. Every column of every row is compared with a serial model: records
//! applied one by one in offset order, each only where its version is not older than the row
//! it meets.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, LogsOnPanic, Sink, SinkConfig};
use crate::helpers::*;

/// One row of `items (id, v, note, _version)` as text, the way `rows_as_text` reads it.
type Row = Vec<Option<String>>;

/// The columns every test compares.
const COLUMNS: [&str; 4] = ["id", "v", "note", "_version"];

/// `items`: `v` is the record's version field, `_version` the sink's column of it.
async fn items_table(db: &TestDb, name: &str) {
    db.pool
        .execute(
            format!(
                "CREATE TABLE {name} (id bigint PRIMARY KEY, v bigint NOT NULL, note text, \
                 _version bigint)"
            )
            .as_str(),
        )
        .await
        .unwrap();
}

/// A JSON upsert of key `id` at version `v`; `note: None` leaves the field out.
fn upsert(partition: i32, id: i64, v: i64, note: Option<&str>) -> RawRecord {
    let value = match note {
        Some(n) => format!(r#"{{"id":{id},"v":{v},"note":"{n}"}}"#),
        None => format!(r#"{{"id":{id},"v":{v}}}"#),
    };
    RawRecord {
        key: Some(id.to_string().into_bytes()),
        ..RawRecord::json(partition, &value)
    }
}

/// The serial model: per key, a record applies when the row has no version newer than its
/// own; a partial record leaves what it does not carry; a delete removes the row.
#[derive(Default)]
struct Model {
    rows: BTreeMap<i64, (i64, Option<String>)>,
    stale: u64,
}

impl Model {
    fn upsert(&mut self, id: i64, v: i64, note: Option<&str>) {
        match self.rows.get_mut(&id) {
            Some((stored, _)) if *stored > v => self.stale += 1,
            Some((stored, kept)) => {
                *stored = v;
                if let Some(n) = note {
                    *kept = Some(n.to_string());
                }
            }
            None => {
                self.rows.insert(id, (v, note.map(str::to_string)));
            }
        }
    }

    /// The table as `rows_as_text` reads it.
    fn table(&self) -> Vec<Row> {
        self.rows
            .iter()
            .map(|(id, (v, note))| {
                vec![
                    Some(id.to_string()),
                    Some(v.to_string()),
                    note.clone(),
                    Some(v.to_string()),
                ]
            })
            .collect()
    }
}

/// The sink's `kafka_pg_sink_stale_skipped_total` for a topic and table.
fn stale_metric(sink: &Sink, topic: &str, table: &str) -> f64 {
    metric(
        &parse_metrics(&get(&sink.http_address(), "/metrics").1),
        &format!("kafka_pg_sink_stale_skipped_total{{topic=\"{topic}\",table=\"public.{table}\"}}"),
    )
}

/// Waits for the stale count to reach `n` (committed offsets are visible before the sink
/// has counted the batch that stored them), then asserts it is exactly `n`.
async fn assert_stale(sink: &Sink, topic: &str, table: &str, n: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stale_metric(sink, topic, table) < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        stale_metric(sink, topic, table),
        n,
        "stale records of {table}"
    );
}

/// 1,200 versioned updates of 60 keys (some partial), then `offsets reset --to earliest` on
/// the running sink: the whole topic is read again, and the table, watched throughout the
/// replay, never leaves its final state; every replayed record but each key's last (equal
/// version: applied again, changing nothing) is counted stale, and logged at debug.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_after_offsets_reset_does_not_move_rows_backwards() {
    let db = TestDb::migrated().await;
    items_table(&db, "items").await;
    let topic = TestTopic::create(3).await;
    let mut model = Model::default();
    let mut records = Vec::new();
    for i in 0..1_200i64 {
        let id = i % 60;
        let note = format!("n{i}");
        let note = (i % 7 != 0).then_some(note.as_str());
        records.push(upsert((id % 3) as i32, id, i, note));
        model.upsert(id, i, note);
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.metadata = String::new();
    config.max_records = 250;
    config.topic_settings = "mode = \"upsert\"\nversion_from = \"/v\"".into();
    config
        .env
        .push(("RUST_LOG".into(), "info,kafka_pg_sink::writer=debug".into()));
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start(&config, "sink");
    let on_panic = LogsOnPanic(&sink);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let settled = db.rows_as_text("items", &COLUMNS).await;
    assert_eq!(settled, model.table(), "first pass");
    assert_eq!(stale_metric(&sink, &topic.name, "items"), 0.0);

    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        file.arg(),
        "--topic",
        &topic.name,
        "--to",
        "earliest",
    ])
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    // Watch the table while the topic is read again: any snapshot that differs is a row
    // moved backwards.
    let replayed = 1_200.0 - 60.0;
    let mut snapshots = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while stale_metric(&sink, &topic.name, "items") < replayed {
        assert!(
            std::time::Instant::now() < deadline,
            "the replay did not finish: {} stale",
            stale_metric(&sink, &topic.name, "items")
        );
        assert_eq!(
            db.rows_as_text("items", &COLUMNS).await,
            settled,
            "during the replay"
        );
        snapshots += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_eq!(db.rows_as_text("items", &COLUMNS).await, settled);
    assert_stale(&sink, &topic.name, "items", replayed).await;
    // Rows written: every record of the first pass, and each key's last record again.
    let written = metric(
        &parse_metrics(&get(&sink.http_address(), "/metrics").1),
        "kafka_pg_sink_rows_written_total{table=\"public.items\"}",
    );
    assert_eq!(
        written,
        1_200.0 + 60.0,
        "stale records are not rows written"
    );
    assert!(snapshots > 0);
    let logs = sink.logs();
    assert!(
        logs.contains("stale record not applied"),
        "each stale record is logged at debug: {}",
        sink.logs_tail(20)
    );
    drop(on_panic);
    assert!(sink.stop().success());
}

/// Two topics (two sources) write one table with interleaved versions of the same keys, read
/// concurrently by one sink: each row ends as its newest version, whichever topic it came
/// from and whenever that topic was read.
#[tokio::test(flavor = "multi_thread")]
async fn two_sources_merged_into_one_table_keep_each_keys_newest_version() {
    let db = TestDb::migrated().await;
    items_table(&db, "merged").await;
    let a = TestTopic::create(2).await;
    let b = TestTopic::create(2).await;
    let mut newest: BTreeMap<i64, (i64, String)> = BTreeMap::new();
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    for i in 0..800i64 {
        let id = i % 40;
        // Source b lags: its versions are older than a's for the same step, but b's later
        // steps overtake a's earlier ones.
        let (v, target, name) = if i % 2 == 0 {
            (i * 10, &mut from_a, "a")
        } else {
            (i * 10 - 15, &mut from_b, "b")
        };
        let note = format!("{name}{i}");
        target.push(upsert(((i / 2) % 2) as i32, id, v, Some(&note)));
        if newest.get(&id).is_none_or(|(nv, _)| *nv < v) {
            newest.insert(id, (v, note));
        }
    }
    // b is produced first and in reverse, so its rows reach the table in the worst order.
    from_b.reverse();
    produce_raw(&producer(), &b.name, &from_b).await;
    produce_raw(&producer(), &a.name, &from_a).await;
    let mut config = SinkConfig::new(&db.url, &a.name, "merged");
    config.metadata = String::new();
    config.max_records = 120;
    config.topic_settings = "mode = \"upsert\"\nversion_from = \"/v\"".into();
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"merged\"\nmode = \"upsert\"\nversion_from = \"/v\"\n",
        b.name
    );
    let mut sink = Sink::start(&config, "sink");
    let on_panic = LogsOnPanic(&sink);
    wait_drained(&db, &config.group, &a, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &b, Duration::from_secs(60)).await;
    let want: Vec<Row> = newest
        .iter()
        .map(|(id, (v, note))| {
            vec![
                Some(id.to_string()),
                Some(v.to_string()),
                Some(note.clone()),
                Some(v.to_string()),
            ]
        })
        .collect();
    assert_eq!(db.rows_as_text("merged", &COLUMNS).await, want);
    let skipped = stale_metric(&sink, &a.name, "merged") + stale_metric(&sink, &b.name, "merged");
    assert!(
        skipped > 0.0,
        "the reversed source's older records are counted"
    );
    drop(on_panic);
    assert!(sink.stop().success());
}

/// Within one batch, a key's records arrive out of version order (3, 1, 2; a full record, an
/// older partial one, a newer partial one): the row is what applying them one by one, each
/// against the row as the ones before it left it, gives — not the last record's.
#[tokio::test(flavor = "multi_thread")]
async fn records_out_of_version_order_within_a_batch_apply_as_one_by_one() {
    let db = TestDb::migrated().await;
    items_table(&db, "reordered").await;
    let topic = TestTopic::create(1).await;
    let mut model = Model::default();
    let mut records = Vec::new();
    let mut push = |id: i64, v: i64, note: Option<&str>| {
        records.push(upsert(0, id, v, note));
        model.upsert(id, v, note);
    };
    for id in 0..30 {
        let base = id * 100;
        push(id, base + 3, Some("three"));
        push(id, base + 1, Some("one"));
        push(id, base + 2, Some("two"));
        // A partial record older than the row: nothing of it applies.
        push(id, base + 2, None);
        // A newer partial record: its version applies, the note stays.
        push(id, base + 5, None);
        // An older full record after it: refused.
        push(id, base + 4, Some("four"));
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "reordered");
    config.metadata = String::new();
    // One batch for all 180 records.
    config.max_records = 1_000;
    config.max_wait_ms = 2_000;
    config.topic_settings = "mode = \"upsert\"\nversion_from = \"/v\"".into();
    let mut sink = Sink::start(&config, "sink");
    let on_panic = LogsOnPanic(&sink);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert_eq!(db.rows_as_text("reordered", &COLUMNS).await, model.table());
    assert!(model
        .table()
        .iter()
        .all(|r| r[2].as_deref() == Some("three")));
    assert_stale(&sink, &topic.name, "reordered", model.stale as f64).await;
    drop(on_panic);
    assert!(sink.stop().success());
}

/// A delete (a tombstone under `delete_on_tombstone`, versioned by its Kafka timestamp) older
/// than the row is ignored; a newer one applies. A hard delete keeps no version: an upsert
/// older than the delete that comes after it finds no row and creates one (the documented
/// limit). A soft delete keeps the row and its version, so the same late upsert is refused.
#[tokio::test(flavor = "multi_thread")]
async fn stale_deletes_are_ignored_and_only_a_soft_delete_remembers_its_version() {
    let db = TestDb::migrated().await;
    for (table, gone) in [("hard", ""), ("soft", ", gone boolean")] {
        db.pool
            .execute(
                format!(
                    "CREATE TABLE {table} (id bigint PRIMARY KEY, note text, _version bigint{gone})"
                )
                .as_str(),
            )
            .await
            .unwrap();
    }
    let at = |id: i64, ts: i64, note: Option<&str>| RawRecord {
        key: Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
        value: note.map(|n| format!(r#"{{"id":{id},"note":"{n}"}}"#).into_bytes()),
        timestamp_ms: Some(ts),
        ..Default::default()
    };
    // (key, Kafka timestamp, note; None is a tombstone), in offset order, in two rounds of
    // producing so that some cases meet in one batch and some across batches.
    let first = [
        (1, 1_000, Some("alive")),
        (2, 1_000, Some("doomed")),
        (3, 1_000, Some("kept")),
    ];
    let second = [
        // Older than the row: ignored.
        (1, 500, None),
        // Newer: applies.
        (2, 2_000, None),
        // Older than that delete: after a hard delete there is nothing to compare with.
        (2, 1_500, Some("late")),
        // Within one batch: an upsert, an older delete (ignored), a newer one (applies).
        (4, 3_000, Some("four")),
        (4, 2_500, None),
        (4, 3_500, None),
        // Two events in one millisecond: both apply, in offset order.
        (5, 4_000, Some("first")),
        (5, 4_000, Some("second")),
    ];
    let mut sinks = Vec::new();
    for (table, extra) in [
        ("hard", ""),
        (
            "soft",
            "delete_mode = \"soft\"\nsoft_delete_column = \"gone\"\n",
        ),
    ] {
        let topic = TestTopic::create(1).await;
        let records: Vec<RawRecord> = first.iter().map(|&(id, ts, n)| at(id, ts, n)).collect();
        produce_raw(&producer(), &topic.name, &records).await;
        let mut config = SinkConfig::new(&db.url, &topic.name, table);
        config.metadata = String::new();
        config.max_records = 1_000;
        config.max_wait_ms = 1_000;
        config.topic_settings = format!(
            "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\n\
             version_from = \"meta:timestamp\"\n{extra}"
        );
        let sink = Sink::start(&config, table);
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        let records: Vec<RawRecord> = second.iter().map(|&(id, ts, n)| at(id, ts, n)).collect();
        produce_raw(&producer(), &topic.name, &records).await;
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        sinks.push((sink, topic));
    }
    let text = |v: &[Option<&str>]| -> Row { v.iter().map(|s| s.map(str::to_string)).collect() };
    assert_eq!(
        db.rows_as_text("hard", &["id", "note", "_version"]).await,
        vec![
            text(&[Some("1"), Some("alive"), Some("1000")]),
            // The limit: the hard delete at 2000 left no row, so the upsert at 1500 made one.
            text(&[Some("2"), Some("late"), Some("1500")]),
            text(&[Some("3"), Some("kept"), Some("1000")]),
            text(&[Some("5"), Some("second"), Some("4000")]),
        ]
    );
    assert_eq!(
        db.rows_as_text("soft", &["id", "note", "_version", "gone"])
            .await,
        vec![
            text(&[Some("1"), Some("alive"), Some("1000"), Some("false")]),
            // The soft-deleted row keeps the delete's version: the upsert at 1500 is refused.
            text(&[Some("2"), Some("doomed"), Some("2000"), Some("true")]),
            text(&[Some("3"), Some("kept"), Some("1000"), Some("false")]),
            text(&[Some("4"), Some("four"), Some("3500"), Some("true")]),
            text(&[Some("5"), Some("second"), Some("4000"), Some("false")]),
        ]
    );
    assert_stale(&sinks[0].0, &sinks[0].1.name, "hard", 2.0).await;
    assert_stale(&sinks[1].0, &sinks[1].1.name, "soft", 3.0).await;
    for (mut sink, _) in sinks {
        assert!(sink.stop().success());
    }
}

/// A version that is missing, null, a string of digits or a fraction is a `mapping` dead
/// letter naming `version_from`, never coerced or applied unconditionally; the good records
/// around it are written.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_without_a_usable_version_is_a_dead_letter() {
    let db = TestDb::migrated().await;
    items_table(&db, "checked").await;
    let topic = TestTopic::create(1).await;
    let bad = [
        r#"{"id":2,"v":1,"note":"no version"}"#,
        r#"{"id":3,"v":1,"note":"null","meta":{"rev":null}}"#,
        r#"{"id":4,"v":1,"note":"string","meta":{"rev":"12"}}"#,
        r#"{"id":5,"v":1,"note":"fraction","meta":{"rev":1.5}}"#,
    ];
    let mut records = vec![RawRecord::json(
        0,
        r#"{"id":1,"v":1,"note":"good","meta":{"rev":7}}"#,
    )];
    records.extend(bad.iter().map(|v| RawRecord::json(0, v)));
    records.push(RawRecord::json(
        0,
        r#"{"id":6,"v":1,"note":"good","meta":{"rev":8}}"#,
    ));
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "checked");
    config.metadata = String::new();
    config.topic_settings =
        "mode = \"upsert\"\nversion_from = \"/meta/rev\"\non_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    let on_panic = LogsOnPanic(&sink);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let text = |v: [&str; 4]| -> Row { v.iter().map(|s| Some(s.to_string())).collect() };
    assert_eq!(
        db.rows_as_text("checked", &COLUMNS).await,
        vec![text(["1", "1", "good", "7"]), text(["6", "1", "good", "8"])]
    );
    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(letters.len(), 4, "{letters:?}");
    for ((_, kind, message), says) in
        letters
            .iter()
            .zip(["no such field", "null", "not an integer", "not an integer"])
    {
        assert_eq!(kind, "mapping");
        assert!(
            message.contains("/meta/rev") && message.contains(says),
            "{message}"
        );
    }
    drop(on_panic);
    assert!(sink.stop().success());
}

/// `check` holds `version_from` against the table: a missing version column, one of a type
/// a version cannot be, a Debezium field no event carries, and tombstones a value field cannot
/// version are named before anything runs.
#[tokio::test(flavor = "multi_thread")]
async fn check_names_a_version_column_that_cannot_hold_versions() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE plain (id bigint PRIMARY KEY, v bigint, label text)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    for (settings, says) in [
        (
            "mode = \"upsert\"\nversion_from = \"/v\"",
            "version_column \"_version\" is not a column of the table",
        ),
        (
            "mode = \"upsert\"\nversion_from = \"/v\"\nversion_column = \"label\"",
            "need bigint",
        ),
        (
            "mode = \"upsert\"\nversion_from = \"column\"\nversion_column = \"label\"",
            "needs an integer, numeric, date, timestamp or timestamptz column",
        ),
        (
            "format = \"debezium\"\nversion_from = \"/after/v\"",
            "not a field of a Debezium change event",
        ),
        (
            "mode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\nversion_from = \"/v\"\nversion_column = \"v\"",
            "a tombstone has no value to read its version from",
        ),
    ] {
        let mut config = SinkConfig::new(&db.url, &topic.name, "plain");
        config.metadata = String::new();
        config.topic_settings = settings.into();
        let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
        assert!(!out.status.success(), "{settings}: {}", out.stdout);
        assert!(
            out.stderr.contains(says) || out.stdout.contains(says),
            "{settings}: {}\n{}",
            out.stdout,
            out.stderr
        );
    }
    // And the version column of the right type passes.
    let mut config = SinkConfig::new(&db.url, &topic.name, "plain");
    config.metadata = String::new();
    config.topic_settings =
        "mode = \"upsert\"\nversion_from = \"column\"\nversion_column = \"v\"".into();
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("the version (version_from)"),
        "check says which column is the version: {}",
        out.stdout
    );
    // A pointer's column is written from the record's version, and check says so.
    db.pool
        .execute("ALTER TABLE plain ADD COLUMN _version bigint")
        .await
        .unwrap();
    config.topic_settings = "mode = \"upsert\"\nversion_from = \"/meta/rev\"".into();
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("the value's \"/meta/rev\" (version_from)"),
        "{}",
        out.stdout
    );
}

/// The real Debezium connector, versioned by `/source/lsn`: rows updated many times (twice in
/// one transaction too), deleted, re-inserted, then the sink's offsets reset to the start of
/// the topic while it runs. Throughout the replay every row the source has keeps the source's
/// values (a replayed event is older than the row, and refused); a key the source deleted
/// comes back from its old events until its delete is replayed (the hard-delete limit), and at
/// the end the copy equals the source in every column.
#[tokio::test(flavor = "multi_thread")]
async fn the_real_connector_replayed_from_the_start_leaves_the_copy_equal_to_the_source() {
    use crate::helpers::debezium::{CdcOptions, CdcSource};
    let table = "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text)";
    let setup = format!(
        "{table}; INSERT INTO accounts SELECT g, g * 100, 'opened ' || g FROM generate_series(1, 40) g;"
    );
    let source = CdcSource::start(&setup, &["accounts"], CdcOptions::default()).await;
    let topic = source.topic("accounts");
    let db = TestDb::migrated().await;
    db.pool
        .execute(format!("{table}; ALTER TABLE accounts ADD COLUMN _version bigint").as_str())
        .await
        .unwrap();
    let mut config = SinkConfig::new(&db.url, &topic, "accounts");
    config.metadata = String::new();
    config.max_records = 50;
    config.topic_settings = "format = \"debezium\"\nversion_from = \"/source/lsn\"".into();
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start(&config, "cdc-stale");
    let on_panic = LogsOnPanic(&sink);

    for round in 1..=5 {
        source
            .execute(&format!(
                "UPDATE accounts SET balance = balance + {round}, note = 'round {round}' WHERE id % 2 = 0;
                 UPDATE accounts SET balance = balance - 1 WHERE id % 3 = 0;"
            ))
            .await;
        source
            .execute(&format!(
                "BEGIN; UPDATE accounts SET note = 'twice a {round}' WHERE id = {round};
                 UPDATE accounts SET note = 'twice b {round}', balance = 0 WHERE id = {round}; COMMIT;"
            ))
            .await;
    }
    source
        .execute(
            "DELETE FROM accounts WHERE id IN (7, 11, 13);
             DELETE FROM accounts WHERE id = 20;
             INSERT INTO accounts VALUES (20, 2020, 'reborn');
             UPDATE accounts SET note = 'after rebirth' WHERE id = 20;",
        )
        .await;
    source.sync().await;
    let columns = ["id", "balance", "note", "_version IS NOT NULL"];
    let source_columns = ["id", "balance", "note", "true"];
    let want = source.rows_as_text("accounts", &source_columns).await;
    assert_eq!(want.len(), 37);
    let settled = tokio::time::timeout(Duration::from_secs(60), async {
        while db.rows_as_text("accounts", &columns).await != want {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "the copy never equalled the source");
    let end = kafka_end(&topic);
    wait_until("the first pass stored", Duration::from_secs(60), || async {
        db.stored_offsets(&config.group, &topic).await == vec![(0, Some(end))]
    })
    .await;

    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        file.arg(),
        "--topic",
        &topic,
        "--to",
        "earliest",
    ])
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    let live: Vec<Option<String>> = want.iter().map(|r| r[0].clone()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut snapshots = 0;
    loop {
        let stored = db.stored_offsets(&config.group, &topic).await;
        let now = db.rows_as_text("accounts", &columns).await;
        // Rows the source has never move: each replayed event of theirs is older.
        let kept: Vec<_> = now
            .iter()
            .filter(|r| live.contains(&r[0]))
            .cloned()
            .collect();
        assert_eq!(kept, want, "a row moved backwards during the replay");
        snapshots += 1;
        if stored == vec![(0, Some(end))] && stale_metric(&sink, &topic, "accounts") > 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replay did not finish: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(db.rows_as_text("accounts", &columns).await, want);
    assert!(snapshots > 1);
    drop(on_panic);
    assert!(sink.stop().success());
}

/// The end offset of partition 0 of `topic` (the connector's topics have one).
fn kafka_end(topic: &str) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = crate::helpers::kafka::client_config()
        .create()
        .expect("consumer");
    consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks")
        .1
}

/// `dead-letters replay` of a versioned topic: the letter (refused by a `CHECK` at Kafka time
/// 1000) is replayed after a newer record of its key (2000) wrote the row, once the check is
/// dropped; it is older than the row and not applied, and leaves `kafka_dead_letters`.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_replay_of_a_versioned_topic_does_not_move_a_row_backwards() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric NOT NULL CHECK (amount >= 0), \
             _version bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = "mode = \"upsert\"\non_error = \"dead_letter\"\n\
                             version_from = \"meta:timestamp\""
        .into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    for (value, ts) in [
        (r#"{"id":1,"amount":-1}"#, 1_000),
        (r#"{"id":1,"amount":7}"#, 2_000),
    ] {
        let record = RawRecord {
            timestamp_ms: Some(ts),
            ..RawRecord::json(0, value)
        };
        produce_raw(&producer(), &topic.name, &[record]).await;
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    }
    assert!(sink.stop().success());
    let row = || async {
        db.rows_as_text("orders", &["id", "amount", "_version"])
            .await
    };
    let newer = vec![vec![
        Some("1".to_string()),
        Some("7".to_string()),
        Some("2000".to_string()),
    ]];
    assert_eq!(row().await, newer);
    assert_eq!(db.dead_letters_of(&topic.name).await.len(), 1);
    db.pool
        .execute("ALTER TABLE orders DROP CONSTRAINT orders_amount_check")
        .await
        .unwrap();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        row().await,
        newer,
        "the replayed older record is not applied"
    );
    assert!(db.dead_letters_of(&topic.name).await.is_empty());
}

/// `version_from = "column"`: the row's own `updated_at` (timestamptz) orders its records, in
/// one batch and across batches; a record without it, or with null, is a `mapping` dead letter.
#[tokio::test(flavor = "multi_thread")]
async fn a_column_of_the_row_orders_its_records() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE profiles (id bigint PRIMARY KEY, name text, updated_at timestamptz)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let at = |id: i64, name: &str, day: Option<&str>| {
        let when = day.map_or(String::new(), |d| format!(r#","updated_at":"{d}""#));
        RawRecord::json(0, &format!(r#"{{"id":{id},"name":"{name}"{when}}}"#))
    };
    let first = [
        at(1, "c", Some("2024-01-03T00:00:00Z")),
        at(1, "a", Some("2024-01-01T00:00:00Z")),
        at(1, "b", Some("2024-01-02T00:00:00Z")),
        at(2, "x", Some("2024-01-02T00:00:00Z")),
        at(3, "no time", None),
        RawRecord::json(0, r#"{"id":4,"name":"null time","updated_at":null}"#),
    ];
    produce_raw(&producer(), &topic.name, &first).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "profiles");
    config.metadata = String::new();
    config.max_records = 1_000;
    config.max_wait_ms = 1_000;
    config.topic_settings = "mode = \"upsert\"\nversion_from = \"column\"\n\
                             version_column = \"updated_at\"\non_error = \"dead_letter\""
        .into();
    let mut sink = Sink::start(&config, "sink");
    let on_panic = LogsOnPanic(&sink);
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let second = [
        at(1, "d", Some("2024-01-04T00:00:00Z")),
        at(2, "older", Some("2024-01-01T00:00:00Z")),
    ];
    produce_raw(&producer(), &topic.name, &second).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let text = |v: [&str; 3]| -> Row { v.iter().map(|s| Some(s.to_string())).collect() };
    assert_eq!(
        db.rows_as_text("profiles", &["id", "name", "updated_at"])
            .await,
        vec![
            text(["1", "d", "2024-01-04 00:00:00+00"]),
            text(["2", "x", "2024-01-02 00:00:00+00"]),
        ]
    );
    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(
        letters
            .iter()
            .map(|(offset, kind, m)| (*offset, kind.as_str(), m.contains("updated_at")))
            .collect::<Vec<_>>(),
        [(4, "mapping", true), (5, "mapping", true)],
        "{letters:?}"
    );
    assert_stale(&sink, &topic.name, "profiles", 3.0).await;
    drop(on_panic);
    assert!(sink.stop().success());
}

/// TOAST placeholders and versions together, with the real connector: rows with a large
/// `body` (TOASTed, `REPLICA IDENTITY DEFAULT`) updated in `n` only, so each update carries
/// Debezium's placeholder for `body`; then the topic replayed from the start. A replayed
/// update is older than the row, so its placeholder's update is not applied either: no row's
/// `n` moves back during the replay, and `body` keeps the source's value throughout.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_update_with_a_toast_placeholder_is_stale_too() {
    use crate::helpers::debezium::{CdcOptions, CdcSource};
    let table = "CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, body text NOT NULL)";
    let setup = format!(
        "{table};
         ALTER TABLE docs REPLICA IDENTITY DEFAULT;
         ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
         INSERT INTO docs SELECT id, 0,
             (SELECT string_agg(md5(g::text || '-' || id), '') FROM generate_series(1, 625) g)
           FROM generate_series(1, 20) id;"
    );
    let source = CdcSource::start(&setup, &["docs"], CdcOptions::default()).await;
    let topic = source.topic("docs");
    let db = TestDb::migrated().await;
    db.pool
        .execute(format!("{table}; ALTER TABLE docs ADD COLUMN _version bigint").as_str())
        .await
        .unwrap();
    let mut config = SinkConfig::new(&db.url, &topic, "docs");
    config.metadata = String::new();
    config.max_records = 30;
    config.topic_settings = "format = \"debezium\"\nversion_from = \"/source/lsn\"".into();
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start(&config, "cdc-toast-stale");
    let on_panic = LogsOnPanic(&sink);
    for _ in 0..4 {
        source.execute("UPDATE docs SET n = n + 1").await;
    }
    source.sync().await;
    let columns = ["id", "n", "md5(body)"];
    let want = source.rows_as_text("docs", &columns).await;
    assert!(want.iter().all(|r| r[1].as_deref() == Some("4")));
    let settled = tokio::time::timeout(Duration::from_secs(60), async {
        while db.rows_as_text("docs", &columns).await != want {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "the copy never equalled the source");
    let end = kafka_end(&topic);
    wait_until("the first pass stored", Duration::from_secs(60), || async {
        db.stored_offsets(&config.group, &topic).await == vec![(0, Some(end))]
    })
    .await;

    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        file.arg(),
        "--topic",
        &topic,
        "--to",
        "earliest",
    ])
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let stored = db.stored_offsets(&config.group, &topic).await;
        assert_eq!(
            db.rows_as_text("docs", &columns).await,
            want,
            "a row moved backwards during the replay"
        );
        // 20 snapshot records and 60 of the 80 updates are older than their rows.
        if stored == vec![(0, Some(end))] && stale_metric(&sink, &topic, "docs") >= 80.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replay did not finish: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_stale(&sink, &topic, "docs", 80.0).await;
    drop(on_panic);
    assert!(sink.stop().success());
}
