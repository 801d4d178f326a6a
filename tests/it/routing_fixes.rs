//! Routing by record, the review's findings: foreign keys between routed tables hold whatever
//! order a batch applies its tables in; a record's size is checked before its table is read
//! from it; a routed `table` template honours `{topic}`; a replayed letter whose table cannot
//! be loaded still fails alone.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Two parent/child pairs: the child of the first sorts (and so is applied) before its
/// parent, the parent of the second before its child, so one pair is applied in the wrong
/// order for inserts and the other for deletes.
const FK_TABLES: [(&str, &str); 4] = [
    (
        "inv_products",
        "id int PRIMARY KEY, sku text NOT NULL, kafka_offset bigint NOT NULL",
    ),
    (
        "inv_orders",
        "id int PRIMARY KEY, product_id int NOT NULL REFERENCES inv_products DEFERRABLE, \
         qty int NOT NULL, kafka_offset bigint NOT NULL",
    ),
    (
        "inv_a_warehouses",
        "id int PRIMARY KEY, name text NOT NULL, kafka_offset bigint NOT NULL",
    ),
    (
        "inv_b_stock",
        "id int PRIMARY KEY, warehouse_id int NOT NULL REFERENCES inv_a_warehouses DEFERRABLE, \
         qty int NOT NULL, kafka_offset bigint NOT NULL",
    ),
];

/// Columns of each `FK_TABLES` table as text, in order.
const FK_COLUMNS: [&str; 4] = [
    "id::text, sku, kafka_offset::text",
    "id::text, product_id::text, qty::text, kafka_offset::text",
    "id::text, name, kafka_offset::text",
    "id::text, warehouse_id::text, qty::text, kafka_offset::text",
];

/// A Debezium change of table `t` (index into `FK_TABLES`): `after` is `None` for a delete.
struct Change {
    t: usize,
    id: i64,
    /// The row's columns but the offset, as JSON members and as text.
    after: Option<(String, Vec<Option<String>>)>,
}

/// Row `id` of table `t` at version `v`.
fn fk_row(t: usize, id: i64, v: i64) -> (String, Vec<Option<String>>) {
    let parent = id / 2;
    match t {
        0 | 2 => (
            format!(r#"{{"id":{id},"{}":"n{id} v{v}"}}"#, ["sku", "", "name"][t]),
            vec![Some(id.to_string()), Some(format!("n{id} v{v}"))],
        ),
        _ => (
            format!(
                r#"{{"id":{id},"{}":{parent},"qty":{v}}}"#,
                ["", "product_id", "", "warehouse_id"][t]
            ),
            vec![
                Some(id.to_string()),
                Some(parent.to_string()),
                Some(v.to_string()),
            ],
        ),
    }
}

/// The Debezium records of `changes` (a delete followed by its tombstone), appended to
/// `records`, each change's expected effect applied to `state` with its offset.
fn produce_changes(
    changes: &[Change],
    records: &mut Vec<RawRecord>,
    state: &mut [BTreeMap<i64, Vec<Option<String>>>],
) {
    for c in changes {
        let (table, _) = FK_TABLES[c.t];
        let before = state[c.t].contains_key(&c.id);
        let (op, after) = match (&c.after, before) {
            (None, _) => ("d", "null".to_string()),
            (Some((json, _)), false) => ("c", json.clone()),
            (Some((json, _)), true) => ("u", json.clone()),
        };
        let event = format!(
            r#"{{"before":null,"after":{after},"source":{{"connector":"postgresql","table":"{table}"}},"op":"{op}","ts_ms":1700000000000}}"#
        );
        let key = format!(r#"{{"id":{}}}"#, c.id).into_bytes();
        let offset = records.len() as i64;
        records.push(RawRecord {
            partition: 0,
            key: Some(key.clone()),
            value: Some(event.into_bytes()),
            ..Default::default()
        });
        match &c.after {
            Some((_, text)) => {
                let mut row = text.clone();
                row.push(Some(offset.to_string()));
                state[c.t].insert(c.id, row);
            }
            None => {
                state[c.t].remove(&c.id);
                records.push(RawRecord {
                    partition: 0,
                    key: Some(key),
                    ..Default::default()
                });
            }
        }
    }
}

/// Each table of `FK_TABLES`, whole, by id.
async fn fk_tables(db: &TestDb) -> Vec<Vec<Vec<Option<String>>>> {
    let mut out = Vec::new();
    for (t, (table, _)) in FK_TABLES.iter().enumerate() {
        let rows = sqlx::query_as::<_, (Vec<Option<String>>,)>(&format!(
            "SELECT ARRAY[{}]::text[] FROM {table} ORDER BY id",
            FK_COLUMNS[t]
        ))
        .fetch_all(&db.pool)
        .await
        .unwrap();
        out.push(rows.into_iter().map(|(r,)| r).collect());
    }
    out
}

async fn create_fk_tables(db: &TestDb) {
    for (table, columns) in FK_TABLES {
        db.pool
            .execute(format!("CREATE TABLE {table} ({columns})").as_str())
            .await
            .unwrap();
    }
}

/// The routed Debezium topic of the foreign-key tests, every batch the whole backlog.
fn fk_config(db: &TestDb, topic: &TestTopic) -> SinkConfig {
    let mut config = SinkConfig::new(&db.url, &topic.name, "{}");
    config.max_records = 5000;
    config.max_wait_ms = 2000;
    config.metadata = "offset = \"kafka_offset\"".into();
    config.topic_settings = "format = \"debezium\"\n\
         table_from = { field = \"/source/table\" }\n\
         tables = [\"inv_products\", \"inv_orders\", \"inv_a_warehouses\", \"inv_b_stock\"]\n\
         on_error = \"dead_letter\""
        .into();
    config
}

/// A routed Debezium topic with two parent/child pairs joined by DEFERRABLE foreign keys:
/// parents and children created in record order in one batch, then children deleted before
/// their parents (and survivors updated) in one batch. Whatever order the batch applies the
/// tables in, every row lands, every column (the offset column: the change that wrote it)
/// equals the source's state, nothing is dead-lettered and the sink keeps running.
#[tokio::test(flavor = "multi_thread")]
async fn parents_and_children_in_one_batch_hold_deferrable_foreign_keys_both_ways() {
    let db = TestDb::migrated().await;
    create_fk_tables(&db).await;
    let topic = TestTopic::create(1).await;
    let mut state = vec![BTreeMap::new(); 4];
    let mut records = Vec::new();
    let mut inserts = Vec::new();
    for parent in 0..15i64 {
        for (p, c) in [(0, 1), (2, 3)] {
            inserts.push(Change {
                t: p,
                id: parent,
                after: Some(fk_row(p, parent, 1)),
            });
            for child in [parent * 2, parent * 2 + 1] {
                inserts.push(Change {
                    t: c,
                    id: child,
                    after: Some(fk_row(c, child, 1)),
                });
            }
        }
    }
    produce_changes(&inserts, &mut records, &mut state);
    let first = records.len();
    let mut deletes = Vec::new();
    for parent in (0..15i64).filter(|p| p % 3 == 0) {
        for (p, c) in [(0, 1), (2, 3)] {
            for child in [parent * 2, parent * 2 + 1] {
                deletes.push(Change {
                    t: c,
                    id: child,
                    after: None,
                });
            }
            deletes.push(Change {
                t: p,
                id: parent,
                after: None,
            });
        }
    }
    for child in (0..30i64).filter(|c| (c / 2) % 3 == 1) {
        deletes.push(Change {
            t: 1,
            id: child,
            after: Some(fk_row(1, child, 2)),
        });
    }
    produce_changes(&deletes, &mut records, &mut state);

    let config = fk_config(&db, &topic);
    produce_raw(&producer(), &topic.name, &records[..first]).await;
    let mut sink = Sink::start(&config, "inserts");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(20));
    let after_inserts = fk_tables(&db).await;
    assert_eq!(after_inserts[1].len(), 30, "{}", sink.logs_tail(20));
    produce_raw(&producer(), &topic.name, &records[first..]).await;
    let mut sink = Sink::start(&config, "deletes");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;

    let want: Vec<Vec<Vec<Option<String>>>> = state
        .iter()
        .map(|rows| rows.values().cloned().collect())
        .collect();
    assert_eq!(fk_tables(&db).await, want, "{}", sink.logs_tail(20));
    assert_eq!(db.count("kafka_dead_letters").await, 0);
    assert!(sink.is_running(), "{}", sink.logs_tail(20));
    assert!(sink.stop().success());
}

/// A child whose parent is never produced fails the deferred check at COMMIT: no row can be
/// named, so the sink stops with a message saying so (under `dead_letter` too), writes
/// nothing of the batch, dead-letters nothing, and its position stays where it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_foreign_key_failing_at_commit_stops_the_sink_and_writes_nothing() {
    let db = TestDb::migrated().await;
    create_fk_tables(&db).await;
    let topic = TestTopic::create(1).await;
    let mut state = vec![BTreeMap::new(); 4];
    let mut records = Vec::new();
    let changes = [
        Change {
            t: 0,
            id: 1,
            after: Some(fk_row(0, 1, 1)),
        },
        Change {
            t: 1,
            id: 2,
            after: Some(fk_row(1, 2, 1)),
        },
        // Its product (4) does not exist.
        Change {
            t: 1,
            id: 8,
            after: Some(fk_row(1, 8, 1)),
        },
    ];
    produce_changes(&changes, &mut records, &mut state);
    produce_raw(&producer(), &topic.name, &records).await;
    let config = fk_config(&db, &topic);
    let mut sink = Sink::start(&config, "orphan");
    let status = sink.wait_timeout(Duration::from_secs(60));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "{}",
        sink.logs_tail(20)
    );
    let logs = sink.logs();
    assert!(
        logs.contains("deferred constraint failed at COMMIT") && logs.contains("inv_orders"),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(db.count("inv_products").await, 0);
    assert_eq!(db.count("inv_orders").await, 0);
    assert_eq!(db.count("kafka_dead_letters").await, 0);
    let stored = db.stored_offsets(&config.group, &topic.name).await;
    assert!(
        stored.iter().all(|(_, o)| o.unwrap_or(0) == 0),
        "{stored:?}"
    );
}

/// `dead-letters replay` with a letter whose table (now allowed) cannot be loaded, between
/// letters whose table now exists: that letter alone still fails, with the reason, and keeps
/// its place; the others are written, every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn replay_marks_a_letter_whose_table_cannot_be_loaded_and_writes_the_others() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE route_a (id bigint NOT NULL, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "route_{}");
    config.topic_settings = "table_from = { header = \"table\" }\n\
         tables = [\"route_a\"]\n\
         on_error = \"dead_letter\""
        .into();
    let records = [
        RawRecord::routed("a", 0),
        RawRecord::routed("b", 1),
        RawRecord::routed("c", 2),
        RawRecord::routed("b", 3),
        RawRecord::routed("a", 4),
    ];
    produce_raw(&producer(), &topic.name, &records).await;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    assert_eq!(db.count("kafka_dead_letters").await, 3);

    // `route_b` is created, `route_c` is allowed but never created.
    db.pool
        .execute(
            "CREATE TABLE route_b (id bigint NOT NULL, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    // Listed tables are described at startup, so the missing one is allowed by a pattern.
    config.topic_settings = "table_from = { header = \"table\" }\n\
         table_pattern = \"route_[abc]\"\n\
         on_error = \"dead_letter\""
        .into();
    let file = crate::helpers::sink::ConfigFile::new(&config.toml());
    let out =
        crate::helpers::sink::run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("still fails") && out.stdout.contains("route_c"),
        "{}",
        out.stdout
    );
    let rows = |table: &'static str| {
        let db = &db;
        async move {
            sqlx::query_as::<_, (i64, i32, i64)>(&format!(
                "SELECT id, kafka_partition, kafka_offset FROM {table} ORDER BY kafka_offset"
            ))
            .fetch_all(&db.pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(rows("route_a").await, vec![(0, 0, 0), (4, 0, 4)]);
    assert_eq!(rows("route_b").await, vec![(1, 0, 1), (3, 0, 3)]);
    let left: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT \"offset\", error_kind, error_message FROM kafka_dead_letters ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!((left[0].0, left[0].1.as_str()), (2, "routing"));
    assert!(
        left[0].2.contains("cannot be used") && left[0].2.contains("route_c"),
        "{left:?}"
    );
}

/// Per-column settings of a routed topic apply to the tables that have the column: a
/// `bytea_encoding`, `time_units` and `columns` entry each for a column only one routed table
/// has, and every column of both tables lands as produced; an entry naming a column no listed
/// table has is a problem for `check` and stops the sink at startup, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn per_column_settings_apply_to_the_routed_tables_that_have_the_column() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE route_a (id bigint NOT NULL, digest bytea, at timestamptz, doc jsonb,
                                   kafka_partition int, kafka_offset bigint);
             CREATE TABLE route_b (id bigint NOT NULL, note text,
                                   kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "route_{}");
    let settings = "table_from = { header = \"table\" }\n\
         tables = [\"route_a\", \"route_b\"]\n\
         bytea_encoding = { digest = \"hex\" }\n\
         time_units = { at = \"s\" }\n\
         json_text = [\"doc\"]\n\
         columns = { note = \"/n\" }\n";
    config.topic_settings = format!("{settings}on_error = \"dead_letter\"");
    let record = |table: &str, value: String| RawRecord {
        headers: vec![(b"table".to_vec(), Some(table.as_bytes().to_vec()))],
        ..RawRecord::json(0, &value)
    };
    let records = [
        record(
            "a",
            r#"{"id":0,"digest":"deadbeef","at":1700000000,"doc":"{\"k\":1}"}"#.into(),
        ),
        record("b", r#"{"id":1,"n":"note one"}"#.into()),
        record(
            "a",
            r#"{"id":2,"digest":"\\x00ff","at":0,"doc":"[]"}"#.into(),
        ),
        record("b", r#"{"id":3,"n":"note ✓"}"#.into()),
    ];
    produce_raw(&producer(), &topic.name, &records).await;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(20));
    let a = db
        .rows_as_text("route_a", &["id", "digest", "at", "doc", "kafka_offset"])
        .await;
    let text = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(
        a,
        vec![
            text(&[
                "0",
                "\\xdeadbeef",
                "2023-11-14 22:13:20+00",
                r#"{"k": 1}"#,
                "0"
            ]),
            text(&["2", "\\x00ff", "1970-01-01 00:00:00+00", "[]", "2"]),
        ]
    );
    let b = db
        .rows_as_text("route_b", &["id", "note", "kafka_offset"])
        .await;
    assert_eq!(
        b,
        vec![text(&["1", "note one", "1"]), text(&["3", "note ✓", "3"])]
    );
    assert_eq!(db.count("kafka_dead_letters").await, 0);

    config.topic_settings = format!("{settings}bytea_encoding = {{ digset = \"hex\" }}\n")
        .replace("bytea_encoding = { digest = \"hex\" }\n", "");
    let file = crate::helpers::sink::ConfigFile::new(&config.toml());
    let out = crate::helpers::sink::run_cli(&["check", "--config", file.arg()]).await;
    assert_ne!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("bytea_encoding.digset"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let mut sink = Sink::start(&config, "misspelt");
    let status = sink.wait_timeout(Duration::from_secs(60)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(
        sink.logs().contains("bytea_encoding.digset")
            && sink.logs().contains("in none of the tables"),
        "{}",
        sink.logs_tail(20)
    );
}

/// Routed by field, a record larger than `max_record_bytes` is a `too_large` letter (even one
/// that is not JSON) and one nested too deep a `decode` letter, as they would be unrouted, not
/// `routing` letters; the
/// records around them land, every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn a_routed_record_too_large_or_too_deep_keeps_its_kind() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE inv_items (id int PRIMARY KEY, name text, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "{}");
    config.metadata = "offset = \"kafka_offset\"".into();
    config.topic_settings = "format = \"debezium\"\n\
         max_record_bytes = 1024\n\
         table_from = { field = \"/source/table\" }\n\
         tables = [\"inv_items\"]\n\
         on_error = \"dead_letter\""
        .into();
    let event = |id: i64, name: &str, extra: &str| {
        RawRecord {
        partition: 0,
        key: Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
        value: Some(
            format!(
                r#"{{"before":null,"after":{{"id":{id},"name":"{name}"}},"source":{{"table":"inv_items"}},"op":"c"{extra}}}"#
            )
            .into_bytes(),
        ),
        ..Default::default()
    }
    };
    // Deeper than serde_json parses a tree (128), and a large value that is not even JSON: a
    // picker that parsed the value first made both `routing` letters.
    let deep = format!(r#","x":{}{}"#, "[".repeat(200), "]".repeat(200));
    let mut large = event(2, "two", "");
    large.value = Some(format!("{{not json {}", "x".repeat(2000)).into_bytes());
    let records = [
        event(1, "one", ""),
        large,
        event(3, "three", &deep),
        event(4, "four", ""),
    ];
    produce_raw(&producer(), &topic.name, &records).await;
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(20));
    let rows = db
        .rows_as_text("inv_items", &["id", "name", "kafka_offset"])
        .await;
    let text = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(
        rows,
        vec![text(&["1", "one", "0"]), text(&["4", "four", "3"])]
    );
    let letters: Vec<(i64, String)> =
        sqlx::query_as("SELECT \"offset\", error_kind FROM kafka_dead_letters ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        letters,
        vec![(1, "too_large".to_string()), (2, "decode".to_string())]
    );
}
