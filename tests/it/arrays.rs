//! PostgreSQL array columns through the real broker and database: JSON arrays of every
//! element type with NULL elements, empty arrays and escaped Unicode text, in append and
//! upsert mode; nested arrays, scalars and bad elements as dead letters; Avro arrays and
//! Protobuf repeated fields through the real registry; and `check` listing the array columns
//! as writable.
//!
//! What landed is compared with what was produced by letting PostgreSQL itself read each
//! produced array (its own text input of every element, through `json_array_elements`): an
//! oracle that shares no code with the sink's binary encoder. A few rows are also compared
//! with literal text, so the oracle is seen to say what it should.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::confluent::{produce, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::registry_url;
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Every element type the sink writes as a scalar, as an array column; `moods` is an array
/// of an enum and `codes` of a domain, whose element OIDs are not their base types', and
/// `points` a domain over an array.
const TABLE: &str = "
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN code AS varchar(5) CHECK (VALUE <> '');
CREATE DOMAIN scores AS int2[] CHECK (cardinality(VALUE) <= 4);
CREATE TABLE lists (
    id bigint PRIMARY KEY,
    texts text[], ints int4[], smalls int2[], bigs int8[], nums numeric[], flags bool[],
    ids uuid[], ats timestamptz[], locals timestamp[], docs jsonb[], floats float8[],
    reals float4[], days date[], blobs bytea[], moods mood[], codes code[], points scores,
    kafka_partition int, kafka_offset bigint)";

/// (column, its type, how PostgreSQL reads one element `e` of the produced JSON array, as
/// `json`).
const ORACLE: &[(&str, &str, &str)] = &[
    ("texts", "text[]", "e #>> '{}'"),
    ("ints", "int4[]", "(e #>> '{}')::int4"),
    ("smalls", "int2[]", "(e #>> '{}')::int2"),
    ("bigs", "int8[]", "(e #>> '{}')::int8"),
    ("nums", "numeric[]", "(e #>> '{}')::numeric"),
    ("flags", "bool[]", "(e #>> '{}')::bool"),
    ("ids", "uuid[]", "(e #>> '{}')::uuid"),
    ("ats", "timestamptz[]", "(e #>> '{}')::timestamptz"),
    ("locals", "timestamp[]", "(e #>> '{}')::timestamp"),
    ("docs", "jsonb[]", "e::jsonb"),
    ("floats", "float8[]", "(e #>> '{}')::float8"),
    ("reals", "float4[]", "(e #>> '{}')::float4"),
    ("days", "date[]", "(e #>> '{}')::date"),
    ("blobs", "bytea[]", "decode(e #>> '{}', 'base64')"),
    ("moods", "mood[]", "(e #>> '{}')::mood"),
    ("codes", "code[]", "(e #>> '{}')::code"),
    ("points", "scores", "(e #>> '{}')::int2"),
];

/// Record `i`: each column an array of a length and with NULLs where `i` puts them, or
/// (for some `i`) absent, null or empty.
fn record(i: i64) -> Value {
    let n = (i % 5) as usize; // lengths 0..=4
    let pick = |k: usize| (i as usize + k) % 4 != 3; // every fourth element NULL
    let list = |f: &dyn Fn(usize) -> Value| -> Value {
        Value::Array(
            (0..n)
                .map(|k| if pick(k) { f(k) } else { Value::Null })
                .collect(),
        )
    };
    let mut doc = json!({
        "id": i,
        "texts": list(&|k| json!(format!("t{i}.{k} \"quoted\" \\ back, {{brace}} é✓ 😀 {}", "\n\t"))),
        "ints": list(&|k| json!(i32::MAX - (i as i32) * 7 - k as i32)),
        "smalls": list(&|k| if k == 1 { json!(format!("{}", -(i as i16))) } else { json!(i as i16 * 3) }),
        "bigs": list(&|k| json!(i64::MIN + i * 1_000 + k as i64)),
        "nums": list(&|k| json!(format!("{}{i}.{k}0", "9".repeat(k * 9)))),
        "flags": list(&|k| json!((i as usize + k) % 2 == 0)),
        "ids": list(&|k| json!(format!("{:08x}-0000-4000-8000-{:012x}", i, k))),
        "ats": list(&|k| json!(format!("2024-0{}-1{}T0{}:30:00.{:06}+02:00", k + 1, k, k, i))),
        "locals": list(&|k| json!(format!("1999-12-3{} 23:59:5{}", k % 2, k))),
        "docs": list(&|k| json!({"k": k, "s": format!("é{i}"), "n": [1, null]})),
        "floats": list(&|k| json!(1.5e300 / (i as f64 + 1.0) - k as f64)),
        "reals": list(&|k| json!(0.1 + k as f64)),
        "days": list(&|k| json!(format!("20{:02}-02-2{}", i % 100, k))),
        "blobs": list(&|k| json!(base64_of(&[k as u8, 0xff, 0, (i % 256) as u8]))),
        "moods": list(&|k| json!(["sad", "ok", "happy"][k % 3])),
        "codes": list(&|k| json!(format!("c{}", (i * 10 + k as i64) % 1000))),
        "points": list(&|k| json!(k as i64 - i)),
    });
    match i % 7 {
        // Absent and null columns are NULL; an empty list is an empty array, not NULL.
        1 => {
            doc.as_object_mut().unwrap().remove("texts");
        }
        2 => doc["ints"] = Value::Null,
        _ => {}
    }
    doc
}

/// Records whose arrays can never be written, each with the column at fault and the dead
/// letter's kind: a nested (two-dimensional) array, a scalar where a list belongs,
/// PostgreSQL's text form as a string, and elements their element type refuses (`mapping`,
/// found by the sink); an element too long for `varchar(5)` and an array the domain's CHECK
/// refuses (`rejected`, found by PostgreSQL).
fn bad_records() -> Vec<(Value, &'static str, &'static str)> {
    vec![
        (
            json!({"id": 9001, "ints": [[1, 2], [3, 4]]}),
            "ints",
            "mapping",
        ),
        (
            json!({"id": 9002, "texts": ["a", ["b"]]}),
            "texts",
            "mapping",
        ),
        (json!({"id": 9003, "ints": 5}), "ints", "mapping"),
        (json!({"id": 9004, "bigs": "{1,2}"}), "bigs", "mapping"),
        (json!({"id": 9005, "ids": ["not-a-uuid"]}), "ids", "mapping"),
        (
            json!({"id": 9006, "smalls": [1, 40000]}),
            "smalls",
            "mapping",
        ),
        (
            json!({"id": 9007, "flags": [true, "yes"]}),
            "flags",
            "mapping",
        ),
        (
            json!({"id": 9008, "texts": ["nul \u{0} inside"]}),
            "texts",
            "mapping",
        ),
        (json!({"id": 9009, "blobs": ["***"]}), "blobs", "mapping"),
        (
            json!({"id": 9010, "codes": ["c1", "toolong"]}),
            "codes",
            "rejected",
        ),
        (
            json!({"id": 9011, "points": [1, 2, 3, 4, 5]}),
            "points",
            "rejected",
        ),
    ]
}

/// Rows (id, column) where what landed differs from PostgreSQL's own reading of what was
/// produced, with both sides as text; empty when every column of every row is right.
async fn differences(
    db: &TestDb,
    table: &str,
) -> Vec<(i64, String, Option<String>, Option<String>)> {
    let mut conn = db.pool.acquire().await.unwrap();
    conn.execute("SET TIME ZONE 'UTC'").await.unwrap();
    let mut found = Vec::new();
    for (column, ty, read) in ORACLE {
        let sql = format!(
            "SELECT p.id, l.{column}::text, expected::text
               FROM produced p
               JOIN {table} l ON l.id = p.id
               CROSS JOIN LATERAL (SELECT CASE
                   WHEN json_typeof(p.doc -> '{column}') IS NULL
                     OR json_typeof(p.doc -> '{column}') = 'null' THEN NULL
                   ELSE COALESCE((SELECT array_agg(CASE WHEN json_typeof(e) = 'null' THEN NULL
                                                        ELSE {read} END ORDER BY ord)
                                    FROM json_array_elements(p.doc -> '{column}')
                                         WITH ORDINALITY AS a(e, ord)),
                                 '{{}}') END::{ty} AS expected) x
              WHERE l.{column} IS DISTINCT FROM x.expected
                 OR l.{column}::text IS DISTINCT FROM x.expected::text"
        );
        let rows: Vec<(i64, Option<String>, Option<String>)> =
            sqlx::query_as(&sql).fetch_all(&mut *conn).await.unwrap();
        found.extend(
            rows.into_iter()
                .map(|(id, got, want)| (id, column.to_string(), got, want)),
        );
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters() {
    let db = TestDb::migrated().await;
    db.pool.execute(TABLE).await.unwrap();
    let topic = TestTopic::create(2).await;

    // Good records with a bad one after every tenth, all on partition 0 so that offsets say
    // which is which; partition 1 gets good records only.
    let bad = bad_records();
    let mut good = Vec::new();
    let mut records = Vec::new();
    let mut bad_at = BTreeMap::new();
    let mut offset = 0i64;
    for i in 0..140 {
        let doc = record(i);
        let partition = (i % 2) as i32;
        records.push(RawRecord::json(partition, &doc.to_string()));
        good.push(doc);
        if partition == 0 {
            offset += 1;
            if i % 10 == 0 && (i / 10) < bad.len() as i64 {
                let (doc, column, kind) = &bad[(i / 10) as usize];
                records.push(RawRecord::json(0, &doc.to_string()));
                bad_at.insert(offset, (*column, *kind));
                offset += 1;
            }
        }
    }
    assert_eq!(bad_at.len(), bad.len());
    produce_raw(&producer(), &topic.name, &records).await;
    db.keep_produced(&good).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "lists");
    config.max_records = 25; // bad records share batches with good ones
    config.topic_settings = "on_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));

    // Every good record exactly once, every column as PostgreSQL reads what was produced.
    assert_exactly_once(&db, "lists", good.len() as i64).await;
    assert_eq!(differences(&db, "lists").await, vec![]);

    // The oracle says what it should: literal text for a few rows.
    let rows = db
        .rows_as_text(
            "lists",
            &[
                "id", "texts", "ints", "bigs", "flags", "nums", "moods", "docs",
            ],
        )
        .await;
    let row = |id: usize| rows[id].clone();
    assert_eq!(row(0)[1].as_deref(), Some("{}"), "an empty array, not NULL");
    assert_eq!(row(0)[2].as_deref(), Some("{}"));
    assert_eq!(row(1)[1], None, "an absent column is NULL");
    assert_eq!(row(2)[2], None, "a null column is NULL");
    // Record 3 has three elements, the first NULL ((3 + 0) % 4 == 3).
    assert_eq!(
        row(3)[3].as_deref(),
        Some("{NULL,-9223372036854772807,-9223372036854772806}")
    );
    // Record 4 has four, the last NULL; record 9 four, the third NULL.
    assert_eq!(row(4)[4].as_deref(), Some("{t,f,t,NULL}"));
    assert_eq!(row(9)[4].as_deref(), Some("{f,t,NULL,t}"));
    assert_eq!(row(9)[6].as_deref(), Some("{sad,ok,NULL,sad}"));
    assert_eq!(
        row(4)[5].as_deref(),
        Some("{4.00,9999999994.10,9999999999999999994.20,NULL}"),
        "numeric digits and scale exactly as sent"
    );
    // Quotes, backslashes, braces, commas, a newline and a tab, and characters beyond the BMP.
    let text = |k: usize| format!("\"t4.{k} \\\"quoted\\\" \\\\ back, {{brace}} é✓ 😀 \n\t\"");
    assert_eq!(
        row(4)[1],
        Some(format!("{{{},{},{},NULL}}", text(0), text(1), text(2)))
    );
    let doc = |k: usize| format!(r#""{{\"k\": {k}, \"n\": [1, null], \"s\": \"é4\"}}""#);
    assert_eq!(
        row(4)[7],
        Some(format!("{{{},{},{},NULL}}", doc(0), doc(1), doc(2)))
    );

    // Each bad record is a dead letter of its kind naming its column (the sink's) or the
    // SQLSTATE (PostgreSQL's), and what was wrong.
    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(
        letters.iter().map(|l| l.0).collect::<Vec<_>>(),
        bad_at.keys().copied().collect::<Vec<_>>(),
        "{letters:?}"
    );
    for (offset, kind, message) in &letters {
        let (column, expected) = bad_at[offset];
        assert_eq!(kind, expected, "{message}");
        if kind == "mapping" {
            assert!(
                message.contains(&format!("column {column} (")),
                "offset {offset}: {message}"
            );
        } else {
            assert!(message.contains("SQLSTATE"), "offset {offset}: {message}");
        }
    }
    // Each dead letter's error, in offset order, names what was wrong with it.
    let expected = [
        "element 1 is an array: multi-dimensional arrays are not supported",
        "element 2 is an array",
        "expected a JSON array, got 5",
        r#"expected a JSON array, got "{1,2}""#,
        "element 1: \"not-a-uuid\" is not a UUID",
        "element 2: 40000 is out of range for smallint",
        "element 2: expected true or false",
        "element 1: text cannot contain the NUL",
        "element 1: not valid base64",
        "character varying(5)",
        "scores_check",
    ];
    for (n, want) in expected.iter().enumerate() {
        let message = &letters[n].2;
        assert!(message.contains(want), "letter {n}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn array_columns_upsert_with_the_last_record_per_key_winning() {
    let db = TestDb::migrated().await;
    db.pool.execute(TABLE).await.unwrap();
    let topic = TestTopic::create(1).await;
    // Each of 30 keys written three times, the versions spread over batches; the last wins.
    let mut last = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..3i64 {
        for key in 0..30i64 {
            let mut doc = record(key * 3 + version);
            doc["id"] = json!(key);
            // An absent column is left alone by an upsert (that is tested elsewhere); here every
            // version carries every column, null included.
            if doc.get("texts").is_none() {
                doc["texts"] = Value::Null;
            }
            records.push(RawRecord::json(0, &doc.to_string()));
            last.insert(key, doc);
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let docs: Vec<Value> = last.into_values().collect();
    db.keep_produced(&docs).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "lists");
    config.max_records = 40;
    config.topic_settings = "mode = \"upsert\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    assert_eq!(db.count("lists").await, 30);
    assert_eq!(differences(&db, "lists").await, vec![]);
}

/// An Avro record with arrays: of strings, longs, nullable strings, decimals, timestamps and
/// UUIDs, and an empty one.
const AVRO_SCHEMA: &str = r#"{
  "type": "record", "name": "Lists", "namespace": "kps.test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "texts", "type": {"type": "array", "items": "string"}},
    {"name": "bigs", "type": {"type": "array", "items": "long"}},
    {"name": "maybe", "type": {"type": "array", "items": ["null", "string"]}},
    {"name": "nums", "type": {"type": "array", "items": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}}},
    {"name": "ats", "type": {"type": "array", "items": {"type": "long", "logicalType": "timestamp-micros"}}},
    {"name": "ids", "type": {"type": "array", "items": {"type": "string", "logicalType": "uuid"}}},
    {"name": "flags", "type": {"type": "array", "items": "boolean"}}
  ]
}"#;

#[tokio::test(flavor = "multi_thread")]
async fn avro_arrays_land_in_array_columns() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE alists (id bigint PRIMARY KEY, texts text[], bigs int8[], maybe text[],
                nums numeric(12,2)[], ats timestamptz[], ids uuid[], flags bool[])",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let value = json!({"value": {
        "id": 1, "texts": ["a", "b c", "é\"\\", ""], "bigs": [i64::MAX, -1],
        "maybe": ["x", null], "nums": [{"$decimal": "123.45"}, {"$decimal": "-0.05"}],
        "ats": [1_700_000_000_123_456i64], "ids": ["67e55044-10b1-426f-9247-bb680e5fe0c8"],
        "flags": [],
    }});
    produce(&topic.name, &Serde::Avro(AVRO_SCHEMA), None, &[value]).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "alists");
    config.topic_settings = "format = \"avro\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    assert_eq!(db.dead_letters_of(&topic.name).await, vec![]);
    let rows = db
        .rows_as_text(
            "alists",
            &[
                "id", "texts", "bigs", "maybe", "nums", "ats", "ids", "flags",
            ],
        )
        .await;
    let text = |s: &str| Some(s.to_string());
    assert_eq!(
        rows,
        vec![vec![
            text("1"),
            text(r#"{a,"b c","é\"\\",""}"#),
            text("{9223372036854775807,-1}"),
            text("{x,NULL}"),
            text("{123.45,-0.05}"),
            text(r#"{"2023-11-14 22:13:20.123456+00"}"#),
            text("{67e55044-10b1-426f-9247-bb680e5fe0c8}"),
            text("{}"),
        ]]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn check_lists_array_columns_as_writable() {
    let db = TestDb::migrated().await;
    db.pool.execute(TABLE).await.unwrap();
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "lists");
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    for (column, sql_type) in [
        ("texts", "text[]"),
        ("ints", "integer[]"),
        ("nums", "numeric[]"),
        ("ats", "timestamp with time zone[]"),
        ("docs", "jsonb[]"),
        ("moods", "mood[]"),
        ("codes", "code[]"),
    ] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{column} ")))
            .unwrap_or_else(|| panic!("no line for {column}:\n{}", out.stdout));
        assert!(line.contains(sql_type) && line.contains("<-"), "{line}");
    }
}

/// Repeated Protobuf fields of several kinds, for the second end-to-end path.
const PROTO: &str = r#"syntax = "proto3";
package kps.arrays;
import "google/protobuf/timestamp.proto";

message Lists {
  int64 id = 1;
  repeated string texts = 2;
  repeated int64 bigs = 3;
  repeated bool flags = 4;
  repeated double floats = 5;
  repeated bytes blobs = 6;
  repeated google.protobuf.Timestamp ats = 7;
  enum Mood { sad = 0; ok = 1; happy = 2; }
  repeated Mood moods = 8;
  repeated int32 empty = 9;
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_repeated_fields_land_in_array_columns() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE TABLE plists (id bigint PRIMARY KEY, texts text[], bigs int8[], flags bool[],
                floats float8[], blobs bytea[], ats timestamptz[], moods mood[], empty int4[])",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Protobuf's JSON mapping, which the serializer's message is built from.
    let value = json!({"value": {
        "id": 7, "texts": ["a b", "é\"{}"], "bigs": [i64::MIN.to_string(), "0"],
        "flags": [true, false], "floats": [0.25, -1e300], "blobs": ["/wA="],
        "ats": ["2023-11-14T22:13:20.123456Z"], "moods": ["happy", "sad"],
    }});
    let lists = Serde::Protobuf {
        files: &[("lists.proto", PROTO)],
        file: "lists.proto",
        message: "kps.arrays.Lists",
    };
    produce(&topic.name, &lists, None, &[value]).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "plists");
    config.topic_settings = "format = \"protobuf\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    assert_eq!(db.dead_letters_of(&topic.name).await, vec![]);
    let columns = [
        "id", "texts", "bigs", "flags", "floats", "blobs", "ats", "moods", "empty",
    ];
    let text = |s: &str| Some(s.to_string());
    assert_eq!(
        db.rows_as_text("plists", &columns).await,
        vec![vec![
            text("7"),
            text(r#"{"a b","é\"{}"}"#),
            text("{-9223372036854775808,0}"),
            text("{t,f}"),
            text("{0.25,-1e+300}"),
            text(r#"{"\\xff00"}"#),
            text(r#"{"2023-11-14 22:13:20.123456+00"}"#),
            text("{happy,sad}"),
            text("{}"),
        ]]
    );
}
