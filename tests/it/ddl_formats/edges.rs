//! The extremes of each type a created column must take as the transcoder writes them: the
//! integer limits, NaN and the infinities, empty bytes, enum numbers the schema does not name,
//! the first and last `Timestamp`, negative and nanosecond `Duration`s, recursive messages,
//! and JSON Schema's nulls inside arrays and times without offsets. A record the created column
//! refuses would be a dead letter here, so the test asserts there are none and reads every
//! column back.

use std::time::Duration;

use kafka_pg_sink::registry::SchemaKind;

use serde_json::json;

use super::column_types;
use crate::helpers::confluent::{produce, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::{framed, register, registry_url};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const EDGE_PROTO: &str = r#"syntax = "proto3";
package kps.edge;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/empty.proto";

message Edge {
  int64 id = 1;
  int64 i64 = 2;
  int32 i32 = 3;
  uint64 u64 = 4;
  float f = 5;
  double d = 6;
  bytes b = 7;
  enum E { ZERO = 0; ONE = 1; }
  E e = 8;
  google.protobuf.Timestamp at = 9;
  google.protobuf.Duration took = 10;
  repeated double ds = 11;
  repeated float fs = 12;
  repeated bytes bs = 13;
  repeated uint64 us = 14;
  repeated E es = 15;
  google.protobuf.FieldMask mask = 16;
  google.protobuf.Empty empty = 17;
  map<int32, string> by_n = 18;
  message Node { Node next = 1; int32 v = 2; }
  Node node = 19;
  oneof pick { string s = 20; int64 n = 21; }
}
"#;

const EDGE_COLUMNS: &[&str] = &[
    "id", "i64", "i32", "u64", "f", "d", "b", "e", "at", "took", "ds", "fs", "bs", "us", "es",
    "mask", "empty", "by_n", "node", "s", "n",
];

/// Protobuf's extremes into the columns created for them: every record lands (no dead
/// letter) and every column reads back as produced.
#[tokio::test(flavor = "multi_thread")]
async fn protobuf_extremes_land_in_the_created_columns() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    // Protobuf's JSON mapping, which the serializer's message is built from: NaN and the
    // infinities as strings, enum numbers the schema does not name as numbers.
    let values = [
        json!({
            "id": 0, "i64": i64::MIN.to_string(), "i32": i32::MIN,
            "u64": u64::MAX.to_string(), "f": "NaN", "d": "NaN", "e": 7,
            // The first Timestamp there is.
            "at": "0001-01-01T00:00:00Z", "took": "-1.5s",
            "ds": ["NaN", "Infinity", "-Infinity", 1e308],
            "fs": ["Infinity", "-Infinity", f32::MAX as f64, 1e-45],
            "bs": ["", "AP8="], "us": [u64::MAX.to_string(), "0"], "es": [1, 9],
            "mask": "a.b,c", "empty": {}, "by_n": {"-1": "x"},
            "node": {"v": 1, "next": {"v": 2, "next": {"v": 3}}}, "s": "picked",
        }),
        json!({
            "id": 1, "i64": i64::MAX.to_string(), "i32": i32::MAX, "f": "Infinity",
            "d": "-Infinity", "b": "+/8=", "e": "ONE",
            // The last Timestamp there is: nanoseconds are dropped toward the past, as for
            // every timestamp.
            "at": "9999-12-31T23:59:59.999999999Z",
            // A Go `time.Duration` or Java `Duration` measured in nanoseconds.
            "took": "1.000000001s", "n": "-5",
        }),
        json!({
            "id": 2, "f": "-Infinity", "d": "Infinity", "at": "1970-01-01T00:00:00.000000001Z",
            "took": "-0.000001999s",
        }),
    ];
    let records: Vec<serde_json::Value> = values.iter().map(|v| json!({"value": v})).collect();
    let edge = Serde::Protobuf {
        files: &[("edge.proto", EDGE_PROTO)],
        file: "edge.proto",
        message: "kps.edge.Edge",
    };
    produce(&topic.name, &edge, None, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "edges");
    config.metadata = String::new();
    config.topic_settings =
        "format = \"protobuf\"\nauto_create = true\non_error = \"dead_letter\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs());

    assert_eq!(db.dead_letters_of(&topic.name).await, []);
    assert_eq!(
        column_types(&db, "edges").await,
        [
            "id bigint NOT NULL",
            "i64 bigint NOT NULL",
            "i32 integer NOT NULL",
            "u64 numeric(20,0) NOT NULL",
            "f real NOT NULL",
            "d double precision NOT NULL",
            "b bytea NOT NULL",
            "e text NOT NULL",
            "at timestamp with time zone",
            "took interval",
            "ds double precision[] NOT NULL",
            "fs real[] NOT NULL",
            "bs bytea[] NOT NULL",
            "us numeric(20,0)[] NOT NULL",
            "es text[] NOT NULL",
            "mask text",
            "empty jsonb",
            "by_n jsonb NOT NULL",
            "node jsonb",
            "s text",
            "n bigint",
        ]
    );
    let s = |t: &str| Some(t.to_string());
    assert_eq!(
        db.rows_as_text("edges", EDGE_COLUMNS).await,
        [
            vec![
                s("0"),
                s("-9223372036854775808"),
                s("-2147483648"),
                s("18446744073709551615"),
                s("NaN"),
                s("NaN"),
                s("\\x"),
                s("7"),
                s("0001-01-01 00:00:00+00"),
                s("-00:00:01.5"),
                s("{NaN,Infinity,-Infinity,1e+308}"),
                s("{Infinity,-Infinity,3.4028235e+38,1e-45}"),
                s(r#"{"\\x","\\x00ff"}"#),
                s("{18446744073709551615,0}"),
                s("{ONE,9}"),
                s("a.b,c"),
                s("{}"),
                s(r#"{"-1": "x"}"#),
                s(r#"{"v": 1, "next": {"v": 2, "next": {"v": 3}}}"#),
                s("picked"),
                None,
            ],
            vec![
                s("1"),
                s("9223372036854775807"),
                s("2147483647"),
                s("0"),
                s("Infinity"),
                s("-Infinity"),
                s("\\xfbff"),
                s("ONE"),
                s("9999-12-31 23:59:59.999999+00"),
                s("00:00:01"),
                s("{}"),
                s("{}"),
                s("{}"),
                s("{}"),
                s("{}"),
                None,
                None,
                s("{}"),
                None,
                None,
                s("-5"),
            ],
            vec![
                s("2"),
                s("0"),
                s("0"),
                s("0"),
                s("-Infinity"),
                s("Infinity"),
                s("\\x"),
                s("ZERO"),
                s("1970-01-01 00:00:00+00"),
                s("-00:00:00.000002"),
                s("{}"),
                s("{}"),
                s("{}"),
                s("{}"),
                s("{}"),
                None,
                None,
                s("{}"),
                None,
                None,
                None,
            ],
        ]
    );
}

/// A property name PostgreSQL would cut at 63 bytes (to `…_ke`).
const LONG_NAME: &str = "a_property_name_longer_than_the_sixty_three_bytes_postgresql_keeps_x";

/// JSON Schema extremes: the int8 limits, numbers past a double's digits and range, times with
/// and without offsets, arrays with null elements, a nullable array, names that need quoting,
/// and `$ref` cycles (which must not hang the sink).
const EDGE_SCHEMA: &str = r##"{"type":"object","required":["id","big","num","at","clock","nums"],
  "properties":{
    "id":{"type":"integer"},
    "big":{"type":"integer"},
    "num":{"type":"number"},
    "at":{"type":"string","format":"date-time"},
    "clock":{"type":"string","format":"time"},
    "nums":{"type":"array","items":{"type":["null","integer"]}},
    "days":{"type":["null","array"],"items":{"$ref":"#/definitions/Day"}},
    "Mixed Case":{"type":"string"},
    "quo\"te":{"type":"boolean"},
    "tree":{"$ref":"#/definitions/Tree"},
    "loop":{"$ref":"#/definitions/A"}
  },
  "definitions":{
    "Day":{"type":"string","format":"date"},
    "Tree":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/Tree"}}}},
    "A":{"$ref":"#/definitions/B"},"B":{"$ref":"#/definitions/A"}
  }}"##;

/// Every record lands as produced, in the columns the schema created; an `integer` past
/// int8's range, or written with a fraction, is the one value a created column cannot hold: a
/// `mapping` dead letter at its offset, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn json_schema_extremes_land_in_the_created_columns() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    let id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Json,
        EDGE_SCHEMA,
    )
    .await;
    let values = [
        r#"{"id":0,"big":-9223372036854775808,"num":123456789012345678901234567890.000000000000000000001,"at":"2024-01-02T03:04:05.123456+05:30","clock":"10:11:12-03:00","nums":[1,null,3],"days":["2024-02-29",null],"Mixed Case":"M","quo\"te":true,"tree":{"kids":[{"kids":[]}]},"loop":[1,{"a":null}]}"#,
        // No offsets: UTC, as for every timestamp and time of day.
        r#"{"id":1,"big":9223372036854775807,"num":-1.5e-300,"at":"2024-01-02T03:04:05","clock":"10:11:12","nums":[],"days":null}"#,
        r#"{"id":2,"big":9223372036854775808,"num":1,"at":"2024-01-02T03:04:05Z","clock":"10:11:12Z","nums":[]}"#,
        r#"{"id":3,"big":0,"num":1e400,"at":"0001-01-01T00:00:00Z","clock":"23:59:59.999999Z","nums":[null]}"#,
        r#"{"id":4,"big":1.0,"num":1,"at":"2024-01-02T03:04:05Z","clock":"10:11:12Z","nums":[]}"#,
    ];
    let records: Vec<RawRecord> = values
        .iter()
        .map(|v| RawRecord {
            value: Some(framed(id, v.as_bytes())),
            ..Default::default()
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "jedges");
    config.metadata = String::new();
    config.topic_settings =
        "format = \"json-schema\"\nauto_create = true\non_error = \"dead_letter\"".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs());

    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(
        letters
            .iter()
            .map(|l| (l.0, l.1.as_str()))
            .collect::<Vec<_>>(),
        [(2, "mapping"), (4, "mapping")],
        "{letters:?}"
    );
    assert!(
        letters[0].2.contains("got 9223372036854775808") && letters[1].2.contains("got 1.0"),
        "{letters:?}"
    );
    assert_eq!(
        column_types(&db, "jedges").await,
        [
            "Mixed Case text",
            "at timestamp with time zone NOT NULL",
            "big bigint NOT NULL",
            "clock time with time zone NOT NULL",
            "days date[]",
            "id bigint NOT NULL",
            "loop jsonb",
            "num numeric NOT NULL",
            "nums bigint[] NOT NULL",
            "quo\"te boolean",
            "tree jsonb",
        ]
    );
    let s = |t: &str| Some(t.to_string());
    let cols = [
        "id",
        "big",
        "num",
        "at",
        "clock",
        "nums",
        "days",
        "\"Mixed Case\"",
        "\"quo\"\"te\"",
        "tree",
        "loop",
    ];
    assert_eq!(
        db.rows_as_text("jedges", &cols).await,
        [
            vec![
                s("0"),
                s("-9223372036854775808"),
                s("123456789012345678901234567890.000000000000000000001"),
                s("2024-01-01 21:34:05.123456+00"),
                s("10:11:12-03"),
                s("{1,NULL,3}"),
                s("{2024-02-29,NULL}"),
                s("M"),
                s("true"),
                s(r#"{"kids": [{"kids": []}]}"#),
                s(r#"[1, {"a": null}]"#),
            ],
            vec![
                s("1"),
                s("9223372036854775807"),
                Some(format!("-0.{}15", "0".repeat(299))),
                s("2024-01-02 03:04:05+00"),
                s("10:11:12+00"),
                s("{}"),
                None,
                None,
                None,
                None,
                None,
            ],
            vec![
                s("3"),
                s("0"),
                Some(format!("1{}", "0".repeat(400))),
                s("0001-01-01 00:00:00+00"),
                s("23:59:59.999999+00"),
                s("{NULL}"),
                None,
                None,
                None,
                None,
                None,
            ],
        ]
    );
}

/// A property name longer than PostgreSQL's 63 bytes is refused before any table is made,
/// naming the field and the name PostgreSQL would cut it to: created under the cut name, the
/// column is found under no field's name once the table is described again (after a restart),
/// and the field's values would be silently lost there.
#[tokio::test(flavor = "multi_thread")]
async fn a_property_name_postgresql_would_cut_stops_before_creating_the_table() {
    let db = TestDb::migrated().await;
    let topic = TestTopic::create(1).await;
    let schema = format!(
        r#"{{"type":"object","properties":{{"id":{{"type":"integer"}},"{LONG_NAME}":{{"type":"string"}}}}}}"#
    );
    let id = register(&format!("{}-value", topic.name), SchemaKind::Json, &schema).await;
    let value = format!(r#"{{"id":1,"{LONG_NAME}":"kept"}}"#);
    let record = RawRecord {
        value: Some(framed(id, value.as_bytes())),
        ..Default::default()
    };
    produce_raw(&producer(), &topic.name, &[record]).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "longnames");
    config.metadata = String::new();
    config.topic_settings = "format = \"json-schema\"\nauto_create = true".into();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("the sink stops");
    assert!(!status.success());
    let logs = sink.logs();
    assert!(
        logs.contains(&format!("{LONG_NAME}\" is 68 bytes long"))
            && logs.contains("a_property_name_longer_than_the_sixty_three_bytes_postgresql_ke"),
        "{logs}"
    );
    assert!(!db.table_exists("longnames").await, "a table was created");
}
