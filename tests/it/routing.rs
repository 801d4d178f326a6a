//! Routing by record: one topic feeding several tables, each record naming its table in a
//! header or (Debezium's `source.table`) a field, through the template and an allow-list or
//! pattern. Every column of every table is compared with what was produced, exactly once across
//! a `kill -9` in the middle; records naming a table outside the list are `routing` dead
//! letters at their offsets and the rest land.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::connect_json::{optional, serialize, struct_of, Described};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Offsets the broker gives `records` produced after `before` (per partition) already were.
fn offsets_of(records: &[RawRecord], next: &mut BTreeMap<i32, i64>) -> Vec<i64> {
    records
        .iter()
        .map(|r| {
            let offset = next.entry(r.partition).or_insert(0);
            *offset += 1;
            *offset - 1
        })
        .collect()
}

/// Dead letters as (partition, offset, kind, target table), ordered.
async fn letters(db: &TestDb) -> Vec<(i32, i64, String, String)> {
    sqlx::query_as(
        "SELECT partition, \"offset\", error_kind, target_table FROM kafka_dead_letters ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Rows of every routed table, whole, as text, by (kafka partition, kafka offset).
async fn all_rows(
    db: &TestDb,
    tables: &[(&str, &str)],
) -> BTreeMap<String, Vec<Vec<Option<String>>>> {
    let mut out = BTreeMap::new();
    for (table, columns) in tables {
        let rows = sqlx::query_as::<_, (Vec<Option<String>>,)>(&format!(
            "SELECT ARRAY[{columns}]::text[] FROM {table} ORDER BY kafka_partition, kafka_offset"
        ))
        .fetch_all(&db.pool)
        .await
        .unwrap();
        out.insert(table.to_string(), rows.into_iter().map(|(r,)| r).collect());
    }
    out
}

/// What a record of the header test is: its table's row, or the dead letter it must become.
enum Fate {
    Row(&'static str, Vec<Option<String>>),
    /// A dead letter; `true` for the ones naming `d`, which a fix can replay.
    Letter(bool),
}

/// Record `i` of the header test: mostly one of three tables by `table` header, each with its
/// own columns; some name a table outside the list (`d`), carry no header, a non-UTF-8 one or
/// one holding NUL.
fn header_record(i: i64) -> (RawRecord, Fate) {
    // Tables interleave within every partition, so batches hold rows of all three.
    let partition = (i % 3) as i32;
    let (header, value, fate): (Option<&[u8]>, String, Fate) = match (i / 2) % 3 {
        _ if i % 97 == 11 => (Some(b"d"), format!(r#"{{"id":{i}}}"#), Fate::Letter(true)),
        _ if i % 131 == 7 => (None, format!(r#"{{"id":{i}}}"#), Fate::Letter(false)),
        _ if i % 173 == 5 => (
            Some(b"a\xff"),
            format!(r#"{{"id":{i}}}"#),
            Fate::Letter(false),
        ),
        _ if i % 199 == 3 => (
            Some(b"a\0"),
            format!(r#"{{"id":{i}}}"#),
            Fate::Letter(false),
        ),
        0 => (
            Some(b"a"),
            format!(r#"{{"id":{i},"name":"name {i} ✓"}}"#),
            Fate::Row(
                "route_a",
                vec![Some(i.to_string()), Some(format!("name {i} ✓"))],
            ),
        ),
        1 => (
            Some(b"b"),
            format!(r#"{{"id":{i},"amount":"{}.{:02}"}}"#, i % 1000, i % 100),
            Fate::Row(
                "route_b",
                vec![
                    Some(i.to_string()),
                    Some(format!("{}.{:02}", i % 1000, i % 100)),
                ],
            ),
        ),
        _ => (
            Some(b"c"),
            format!(r#"{{"id":{i},"tags":["t{i}"],"flag":{}}}"#, i % 2 == 0),
            Fate::Row(
                "route_c",
                vec![
                    Some(i.to_string()),
                    Some(format!(r#"["t{i}"]"#)),
                    Some((i % 2 == 0).to_string()),
                ],
            ),
        ),
    };
    let mut headers = vec![(b"trace".to_vec(), Some(format!("t-{i}").into_bytes()))];
    if let Some(h) = header {
        headers.push((b"table".to_vec(), Some(h.to_vec())));
    }
    (
        RawRecord {
            headers,
            ..RawRecord::json(partition, &value)
        },
        fate,
    )
}

/// One topic, three tables by header, 3,000 records in two halves with a `kill -9` between
/// them: each table holds exactly its records' rows, every column as produced, each record
/// once; the records naming no listed table are `routing` dead letters at their offsets;
/// the stored positions are the end offsets.
#[tokio::test(flavor = "multi_thread")]
async fn routing_to_three_tables_by_header_from_one_topic_exactly_once() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE route_a (id bigint NOT NULL, name text NOT NULL,
                                   kafka_partition int NOT NULL, kafka_offset bigint NOT NULL);
             CREATE TABLE route_b (id bigint NOT NULL, amount numeric(10,2) NOT NULL,
                                   kafka_partition int NOT NULL, kafka_offset bigint NOT NULL);
             CREATE TABLE route_c (id bigint NOT NULL, tags jsonb, flag bool,
                                   kafka_partition int NOT NULL, kafka_offset bigint NOT NULL);
             CREATE TABLE route_d (id bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    let (records, fates): (Vec<RawRecord>, Vec<Fate>) = (0..3000).map(header_record).unzip();
    let mut next = BTreeMap::new();
    let offsets = offsets_of(&records, &mut next);

    let mut config = SinkConfig::new(&db.url, &topic.name, "route_{}");
    config.max_records = 37;
    config.topic_settings = "table_from = { header = \"table\" }\n\
         tables = [\"route_a\", \"route_b\", \"route_c\"]\n\
         on_error = \"dead_letter\""
        .into();
    produce_raw(&producer(), &topic.name, &records[..1500]).await;
    let mut sink = Sink::start(&config, "sink");
    wait_until("some rows", Duration::from_secs(60), || async {
        db.count("route_a").await + db.count("route_b").await > 100
    })
    .await;
    sink.kill9();
    produce_raw(&producer(), &topic.name, &records[1500..]).await;
    let mut sink = Sink::start(&config, "sink-again");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let mut want: BTreeMap<String, Vec<Vec<Option<String>>>> = BTreeMap::new();
    let mut want_letters = Vec::new();
    let mut fixable_letters = Vec::new();
    let mut by_position: Vec<_> = records.iter().zip(&offsets).zip(&fates).collect();
    by_position.sort_by_key(|((r, o), _)| (r.partition, **o));
    for ((record, offset), fate) in by_position {
        match fate {
            Fate::Row(table, columns) => {
                let mut row = columns.clone();
                row.push(Some(record.partition.to_string()));
                row.push(Some(offset.to_string()));
                want.entry(table.to_string()).or_default().push(row);
            }
            Fate::Letter(fixable) => {
                want_letters.push((
                    record.partition,
                    *offset,
                    "routing".to_string(),
                    "public.route_{}".to_string(),
                ));
                if *fixable {
                    fixable_letters.push((record.partition, *offset));
                }
            }
        }
    }
    let got = all_rows(
        &db,
        &[
            (
                "route_a",
                "id::text, name, kafka_partition::text, kafka_offset::text",
            ),
            (
                "route_b",
                "id::text, amount::text, kafka_partition::text, kafka_offset::text",
            ),
            (
                "route_c",
                "id::text, tags::text, flag::text, kafka_partition::text, kafka_offset::text",
            ),
        ],
    )
    .await;
    for table in ["route_a", "route_b", "route_c"] {
        assert!(want[table].len() > 900, "{table}: {}", want[table].len());
        assert_eq!(
            got[table], want[table],
            "{table}: every row once, as produced"
        );
    }
    assert_eq!(
        db.count("route_d").await,
        0,
        "a table outside the list is never written"
    );
    assert!(want_letters.len() > 50);
    assert_eq!(letters(&db).await, want_letters);
    let messages: Vec<(String,)> =
        sqlx::query_as("SELECT DISTINCT error_message FROM kafka_dead_letters ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let messages: Vec<String> = messages.into_iter().map(|(m,)| m).collect();
    for says in [
        "\"route_d\", which is not in tables",
        "no header \"table\"",
        "not UTF-8",
        "NUL",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(says)),
            "no message says {says:?}: {messages:?}"
        );
    }
    assert!(sink.stop().success());

    // The fix: `route_d` joins the list; a replay routes each letter again, so exactly those
    // naming `d` land in it and the others stay `routing` letters.
    db.pool
        .execute(
            "CREATE TABLE route_d2 (id bigint NOT NULL, kafka_partition int NOT NULL,
                                    kafka_offset bigint NOT NULL);
             DROP TABLE route_d; ALTER TABLE route_d2 RENAME TO route_d",
        )
        .await
        .unwrap();
    config.topic_settings = config
        .topic_settings
        .replace("\"route_c\"]", "\"route_c\", \"route_d\"]");
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    let moved: Vec<(i32, i64)> =
        sqlx::query_as("SELECT kafka_partition, kafka_offset FROM route_d ORDER BY 1, 2")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(moved, fixable_letters);
    let left: Vec<(i32, i64, String, String)> = want_letters
        .into_iter()
        .filter(|(p, o, _, _)| !fixable_letters.contains(&(*p, *o)))
        .collect();
    assert_eq!(letters(&db).await, left);

    // `check` describes every listed table's mapping.
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("routed by record: header \"table\""),
        "{}",
        out.stdout
    );
    for table in ["route_a", "route_b", "route_c", "route_d"] {
        assert!(
            out.stdout.contains(&format!("table public.{table}:")),
            "{}",
            out.stdout
        );
    }
}

/// The source tables of the Debezium test: name, key column, the other columns.
const CDC_TABLES: [(&str, &str); 3] = [
    (
        "inv_customers",
        "id int PRIMARY KEY, name text NOT NULL, kafka_offset bigint",
    ),
    (
        "inv_products",
        "id int PRIMARY KEY, sku text NOT NULL, price numeric(10,2), kafka_offset bigint",
    ),
    (
        "inv_orders",
        "id int PRIMARY KEY, customer int NOT NULL, qty int NOT NULL, kafka_offset bigint",
    ),
];

/// Row `id` of source table `t` at version `v`, as Debezium's JSON `after`, and as text.
fn cdc_row(t: usize, id: i64, v: i64) -> (String, Vec<Option<String>>) {
    match t {
        0 => (
            format!(r#"{{"id":{id},"name":"cust {id} v{v}"}}"#),
            vec![Some(id.to_string()), Some(format!("cust {id} v{v}"))],
        ),
        1 => {
            let price = (v % 3 != 0).then(|| format!("{}.{:02}", id + v, v % 100));
            (
                format!(
                    r#"{{"id":{id},"sku":"sku-{id}","price":{}}}"#,
                    price
                        .as_ref()
                        .map_or("null".to_string(), |p| format!("\"{p}\""))
                ),
                vec![Some(id.to_string()), Some(format!("sku-{id}")), price],
            )
        }
        _ => (
            format!(r#"{{"id":{id},"customer":{},"qty":{v}}}"#, id % 7),
            vec![
                Some(id.to_string()),
                Some((id % 7).to_string()),
                Some(v.to_string()),
            ],
        ),
    }
}

/// The Connect schema of source table `t`'s rows (`cdc_row`), as Debezium declares them.
fn cdc_schema(t: usize) -> Value {
    let (name, fields) = match t {
        0 => (
            "customers",
            vec![("id", json!("int32")), ("name", json!("string"))],
        ),
        1 => (
            "products",
            vec![
                ("id", json!("int32")),
                ("sku", json!("string")),
                // decimal.handling.mode=string
                ("price", optional(json!("string"))),
            ],
        ),
        _ => (
            "orders",
            vec![
                ("id", json!("int32")),
                ("customer", json!("int32")),
                ("qty", json!("int32")),
            ],
        ),
    };
    let row = struct_of(&format!("inv.public.{name}.Value"), &fields);
    json!({"envelope": {
        "name": format!("inv.public.{name}.Envelope"),
        "row": optional(row),
        "source": struct_of("io.debezium.connector.postgresql.Source", &[
            ("connector", json!("string")), ("db", json!("string")),
            ("schema", json!("string")), ("table", json!("string")),
        ]),
    }})
}

/// A change event of source table `t`, described for the JsonConverter helper.
fn cdc_event(t: usize, event: Value) -> Described {
    Described::new(cdc_schema(t), event)
}

/// The record key of row `id`, as Debezium's key struct.
fn cdc_key(id: i64) -> Described {
    Described::new(
        struct_of("inv.Key", &[("id", json!("int32"))]),
        json!({ "id": id }),
    )
}

/// Fills in the values and keys of the CDC records as Kafka's JsonConverter writes them (one
/// JVM per `schemas.enable` setting); each tombstone takes the key of the delete before it.
fn write_cdc_events(
    records: &mut [RawRecord],
    written: &[(usize, bool, Described, Described)],
    tombstones: &[usize],
) {
    for with_schema in [true, false] {
        let chosen: Vec<_> = written.iter().filter(|w| w.1 == with_schema).collect();
        let described: Vec<Described> = chosen
            .iter()
            .flat_map(|(_, _, value, key)| [value.clone(), key.clone()])
            .collect();
        let bytes = serialize(with_schema, &described);
        for (w, pair) in chosen.iter().zip(bytes.chunks(2)) {
            records[w.0].value = pair[0].clone();
            records[w.0].key = pair[1].clone();
        }
    }
    for &i in tombstones {
        records[i].key = records[i - 1].key.clone();
    }
}

/// A multi-table Debezium topic (`source.table`, a pattern of allowed tables): creates,
/// updates and deletes (each followed by its tombstone) of three tables, written by Kafka's
/// JsonConverter, every 4th with its schema (built with Debezium's `Envelope`), in two halves
/// with a `kill -9` between them: every table equals its source table's state, every column
/// (the offset column: the change that wrote the row); events of a table the pattern does not
/// allow (`inv_secrets`, `inv_customers_old`) are `routing` dead letters and nothing else is.
#[tokio::test(flavor = "multi_thread")]
async fn a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once() {
    let db = TestDb::migrated().await;
    for (table, columns) in CDC_TABLES {
        db.pool
            .execute(format!("CREATE TABLE {table} ({columns})").as_str())
            .await
            .unwrap();
    }
    db.pool
        .execute("CREATE TABLE inv_secrets (id int PRIMARY KEY, kafka_offset bigint)")
        .await
        .unwrap();
    let topic = TestTopic::create(3).await;
    // The source: per table, id → (version, row as text, offset of the change that wrote it).
    let mut source: Vec<BTreeMap<i64, Vec<Option<String>>>> = vec![BTreeMap::new(); 3];
    let mut version = 0i64;
    let mut records = Vec::new();
    // (record index, what it must be: Some(table) for rows, None for a dead letter)
    let mut events = Vec::new();
    // (record index, with its schema, value, key), and the tombstones (each after its delete).
    let mut written = Vec::new();
    let mut tombstones = Vec::new();
    for step in 0..2400i64 {
        let t = (step % 3) as usize;
        let id = (step * 7 + step / 3) % 40;
        let partition = ((t as i64 * 40 + id) % 3) as i32;
        let (table, allowed) = match step % 101 {
            17 => ("inv_secrets", false),
            59 => ("inv_customers_old", false),
            _ => (CDC_TABLES[t].0, true),
        };
        version += 1;
        let exists = source[t].contains_key(&id);
        let op = match (exists, step % 5) {
            (false, _) => "c",
            (true, 0) => "d",
            (true, _) => "u",
        };
        let (after, text) = cdc_row(t, id, version);
        let before = if exists {
            cdc_row(t, id, version - 1).0
        } else {
            "null".into()
        };
        let (before, after) = match op {
            "d" => (before, "null".to_string()),
            "c" => ("null".to_string(), after),
            _ => (before, after),
        };
        let row = |text: &str| serde_json::from_str::<Value>(text).expect("a row");
        let event = json!({
            "op": op, "before": row(&before), "after": row(&after), "ts_ms": 1_700_000_000_000i64,
            "source": {"connector": "postgresql", "db": "inv", "schema": "public", "table": table},
        });
        records.push(RawRecord {
            partition,
            ..Default::default()
        });
        // Written below by JsonConverter: every 4th with its schema, the rest without.
        written.push((
            records.len() - 1,
            step % 4 == 0,
            cdc_event(t, event),
            cdc_key(id),
        ));
        events.push((records.len() - 1, allowed.then_some((t, id, op, text))));
        if op == "d" {
            // Its tombstone: the same key, no value.
            records.push(RawRecord {
                partition,
                ..Default::default()
            });
            tombstones.push(records.len() - 1);
        }
        if allowed {
            match op {
                "d" => {
                    source[t].remove(&id);
                }
                _ => {
                    source[t].insert(id, Vec::new());
                }
            }
        }
    }
    write_cdc_events(&mut records, &written, &tombstones);
    let mut next = BTreeMap::new();
    let offsets = offsets_of(&records, &mut next);
    // The expected state, with each row's offset column from the change that wrote it.
    let mut state: Vec<BTreeMap<i64, Vec<Option<String>>>> = vec![BTreeMap::new(); 3];
    let mut want_letters = Vec::new();
    for (index, fate) in &events {
        let record = &records[*index];
        match fate {
            Some((t, id, "d", _)) => {
                state[*t].remove(id);
            }
            Some((t, id, _, text)) => {
                let mut row = text.clone();
                row.push(Some(offsets[*index].to_string()));
                state[*t].insert(*id, row);
            }
            None => want_letters.push((
                record.partition,
                offsets[*index],
                "routing".to_string(),
                "public.{}".to_string(),
            )),
        }
    }
    want_letters.sort();

    let mut config = SinkConfig::new(&db.url, &topic.name, "{}");
    config.max_records = 40;
    config.metadata = "offset = \"kafka_offset\"".into();
    config.topic_settings = "format = \"debezium\"\n\
         table_from = { field = \"/source/table\" }\n\
         table_pattern = \"inv_(customers|products|orders)\"\n\
         on_error = \"dead_letter\""
        .into();
    let half = records.len() / 2;
    produce_raw(&producer(), &topic.name, &records[..half]).await;
    let mut sink = Sink::start(&config, "sink");
    wait_until("some rows", Duration::from_secs(60), || async {
        db.count("inv_orders").await > 10
    })
    .await;
    sink.kill9();
    produce_raw(&producer(), &topic.name, &records[half..]).await;
    let mut sink = Sink::start(&config, "sink-again");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let columns = [
        "id::text, name, kafka_offset::text",
        "id::text, sku, price::text, kafka_offset::text",
        "id::text, customer::text, qty::text, kafka_offset::text",
    ];
    for (t, (table, _)) in CDC_TABLES.iter().enumerate() {
        let rows = sqlx::query_as::<_, (Vec<Option<String>>,)>(&format!(
            "SELECT ARRAY[{}]::text[] FROM {table} ORDER BY id",
            columns[t]
        ))
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let rows: Vec<Vec<Option<String>>> = rows.into_iter().map(|(r,)| r).collect();
        let want: Vec<Vec<Option<String>>> = state[t].values().cloned().collect();
        assert!(want.len() > 10, "{table}: {}", want.len());
        assert_eq!(rows, want, "{table} equals its source table");
    }
    assert_eq!(db.count("inv_secrets").await, 0);
    assert!(want_letters.len() >= 40);
    assert_eq!(letters(&db).await, want_letters);
    assert!(sink.stop().success());
}

/// Under `on_error = "fail"`: a listed table that does not exist stops the sink at startup
/// naming it; a table the pattern allows but that does not exist stops it *at* the record
/// naming it, which is read again once the table is created; a name the pattern does not match
/// whole stops it at that record. Every stop leaves the position on the record, with the rows
/// before it committed.
#[tokio::test(flavor = "multi_thread")]
async fn under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE route_a (id bigint NOT NULL, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "route_{}");
    config.topic_settings =
        "table_from = { header = \"table\" }\ntables = [\"route_a\", \"route_nope\"]".into();
    let mut sink = Sink::start(&config, "listed");
    let status = sink.wait_timeout(Duration::from_secs(60)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(sink.logs().contains("route_nope"), "{}", sink.logs_tail(20));

    config.topic_settings =
        "table_from = { header = \"table\" }\ntable_pattern = \"route_[a-z]\"".into();
    let first = [
        RawRecord::routed("a", 0),
        RawRecord::routed("a", 1),
        RawRecord::routed("b", 2),
        RawRecord::routed("a", 3),
    ];
    produce_raw(&producer(), &topic.name, &first).await;
    let mut sink = Sink::start(&config, "missing");
    let status = sink.wait_timeout(Duration::from_secs(60)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(sink.logs().contains("route_b"), "{}", sink.logs_tail(20));
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(2))]
    );
    assert_eq!(db.count("route_a").await, 2);

    db.pool
        .execute(
            "CREATE TABLE route_b (id bigint NOT NULL, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let mut sink = Sink::start(&config, "created");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    produce_raw(
        &producer(),
        &topic.name,
        &[RawRecord::routed("zz", 4), RawRecord::routed("a", 5)],
    )
    .await;
    let status = sink.wait_timeout(Duration::from_secs(60)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(
        sink.logs().contains("which is not in table_pattern"),
        "{}",
        sink.logs_tail(20)
    );
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(4))]
    );
    let rows = |table: &'static str| {
        let db = &db;
        async move {
            sqlx::query_as::<_, (i64, i64)>(&format!(
                "SELECT id, kafka_offset FROM {table} ORDER BY kafka_offset"
            ))
            .fetch_all(&db.pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(rows("route_a").await, vec![(0, 0), (1, 1), (3, 3)]);
    assert_eq!(rows("route_b").await, vec![(2, 2)]);
}
