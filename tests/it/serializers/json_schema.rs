//! confluent-kafka's JSONSerializer (it validates each record against the schema with
//! jsonschema, then writes the JSON): every JSON Schema type and format README's table lists,
//! Connect's `connect.type`s among them, with their extremes.

use serde_json::{json, Value};

use super::{array_read, assert_fixture_lands, fixture_sinks, Col, Fixture};
use crate::helpers::base64_of;
use crate::helpers::confluent::{produce, Serde};

const EVERY: &str = r#"{
  "$schema": "http://json-schema.org/draft-07/schema#", "title": "Every", "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "f_integer": {"type": "integer"},
    "f_number": {"type": "number"},
    "f_boolean": {"type": "boolean"},
    "f_string": {"type": "string"},
    "f_date": {"type": "string", "format": "date"},
    "f_datetime": {"type": "string", "format": "date-time"},
    "f_time": {"type": "string", "format": "time"},
    "f_uuid": {"type": "string", "format": "uuid"},
    "f_object": {"type": "object"},
    "f_integers": {"type": "array", "items": {"type": "integer"}},
    "f_strings": {"type": "array", "items": {"type": "string"}},
    "f_nullable": {"type": ["null", "string"]},
    "f_int16": {"type": "integer", "connect.type": "int16"},
    "f_int32": {"type": "integer", "connect.type": "int32"},
    "f_float32": {"type": "number", "connect.type": "float32"},
    "f_float64": {"type": "number", "connect.type": "float64"},
    "f_bytes": {"type": "string", "connect.type": "bytes"}
  },
  "required": ["id", "f_integer", "f_number", "f_boolean", "f_string", "f_date", "f_datetime",
               "f_time", "f_uuid", "f_object", "f_integers", "f_strings", "f_int16", "f_int32",
               "f_float32", "f_float64", "f_bytes"]
}"#;

/// README's "The type each schema type creates", property by property (columns come in
/// property-name order when `auto_create` makes them).
const COLS: &[Col] = &[
    Col::new("f_boolean", "bool NOT NULL"),
    Col::read("f_bytes", "bytea NOT NULL", "decode($1, 'base64')"),
    Col::new("f_date", "date NOT NULL"),
    Col::new("f_datetime", "timestamptz NOT NULL"),
    Col::new("f_float32", "float4 NOT NULL"),
    Col::new("f_float64", "float8 NOT NULL"),
    Col::new("f_int16", "int2 NOT NULL"),
    Col::new("f_int32", "int4 NOT NULL"),
    Col::new("f_integer", "int8 NOT NULL"),
    array_read("f_integers", "int8[] NOT NULL"),
    Col::new("f_nullable", "text"),
    Col::new("f_number", "numeric NOT NULL"),
    Col::new("f_object", "jsonb NOT NULL"),
    Col::new("f_string", "text NOT NULL"),
    array_read("f_strings", "text[] NOT NULL"),
    Col::new("f_time", "timetz NOT NULL"),
    Col::new("f_uuid", "uuid NOT NULL"),
    Col::new("id", "int8 NOT NULL"),
];

/// Record `i` (its properties in `COLS`' order) and each column's produced value as text.
fn every(i: i64) -> (Value, Vec<Option<String>>) {
    let text = "ünïcødé 😀 \"q\" \\ \n end";
    let values: Vec<Value> = match i {
        0 => vec![
            json!(false),
            json!(""),
            json!("0001-01-01"),
            json!("0001-01-01T00:00:00Z"),
            json!(-3.4028234663852886e38),
            json!(-1.7976931348623157e308),
            json!(i16::MIN),
            json!(i32::MIN),
            json!(i64::MIN),
            json!([]),
            json!(null),
            json!(-0.000001),
            json!({}),
            json!(""),
            json!([]),
            json!("00:00:00Z"),
            json!("00000000-0000-0000-0000-000000000000"),
            json!(0),
        ],
        1 => vec![
            json!(true),
            json!(base64_of(&[0, 0xff, 0, 1])),
            json!("9999-12-31"),
            json!("9999-12-31T23:59:59.999999Z"),
            json!(3.4028234663852886e38),
            json!(1.7976931348623157e308),
            json!(i16::MAX),
            json!(i32::MAX),
            json!(i64::MAX),
            json!([i64::MIN, 0, i64::MAX]),
            json!(text),
            json!(123456789012345.6),
            json!({"nested": {"a": [1, "two", null]}, "ü": text}),
            json!(text),
            json!(["", "a,b", "{x}", "\"q\"", "ü", "NULL"]),
            json!("23:59:59.999999+14:00"),
            json!("ffffffff-ffff-ffff-ffff-ffffffffffff"),
            json!(1),
        ],
        _ => vec![
            json!(i % 2 == 0),
            json!(base64_of(&[i as u8])),
            json!(format!("2024-02-{:02}", i + 1)),
            json!(format!("2024-02-29T12:{:02}:00.{:06}+01:00", i, i * 3)),
            json!(i as f64 * 0.5),
            json!(i as f64 / 3.0),
            json!(-i),
            json!(i * 1000),
            json!(i * 1_000_000_007),
            json!([i, -i]),
            json!(format!("n{i}")),
            json!(i as f64 + 0.25),
            json!({"i": i}),
            json!(format!("row {i}")),
            json!([format!("s{i}")]),
            json!(format!("12:{:02}:00-05:30", i)),
            json!(format!("{:08x}-0000-4000-8000-{:012x}", i, i)),
            json!(i),
        ],
    };
    let mut record = serde_json::Map::new();
    let mut produced = Vec::new();
    for (col, value) in COLS.iter().zip(values) {
        produced.push(match &value {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        });
        record.insert(col.name.to_string(), value);
    }
    (Value::Object(record), produced)
}

/// confluent-kafka's JSONSerializer writes every JSON Schema type and format README lists;
/// the records land in a hand-made table and an auto-created one with every column equal to
/// what was produced, and `check` passes.
#[tokio::test(flavor = "multi_thread")]
async fn python_json_schema_serializer_records_land_with_every_type_and_format() {
    let Fixture {
        db,
        topic,
        records,
        produced,
    } = Fixture::new(COLS, every).await;
    produce(
        &topic.name,
        &Serde::Json(EVERY),
        Some(&Serde::String),
        &records,
    )
    .await;

    let sinks = fixture_sinks(&db, &topic, "json-schema").await;
    assert_fixture_lands(&db, &topic, COLS, sinks, &produced).await;
}
