//! confluent-kafka's AvroSerializer (fastavro underneath): every Avro type and logical type it
//! writes, with their extremes, through the sink into README's columns.

use serde_json::{json, Value};

use super::{array_read, assert_fixture_lands, fixture_sinks, Col, Fixture};
use crate::helpers::base64_of;
use crate::helpers::confluent::{produce, Serde};

const EVERY: &str = r#"{
  "type": "record", "name": "Every", "namespace": "kps.fixture",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "f_null", "type": "null"},
    {"name": "f_boolean", "type": "boolean"},
    {"name": "f_int", "type": "int"},
    {"name": "f_long", "type": "long"},
    {"name": "f_float", "type": "float"},
    {"name": "f_double", "type": "double"},
    {"name": "f_bytes", "type": "bytes"},
    {"name": "f_string", "type": "string"},
    {"name": "f_record", "type": {"type": "record", "name": "Inner", "fields": [
      {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"]}]}},
    {"name": "f_enum", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
    {"name": "f_array", "type": {"type": "array", "items": "long"}},
    {"name": "f_map", "type": {"type": "map", "values": "long"}},
    {"name": "f_optional", "type": ["null", "string"], "default": null},
    {"name": "f_union", "type": ["string", "long"]},
    {"name": "f_fixed", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "f_dec_bytes", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
    {"name": "f_dec_fixed", "type": {"type": "fixed", "name": "Sixteen", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 2}},
    {"name": "f_uuid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "f_date", "type": {"type": "int", "logicalType": "date"}},
    {"name": "f_time_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "f_time_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "f_ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "f_ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "f_local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "f_local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "f_ts_ns", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
    {"name": "f_local_ns", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
    {"name": "f_duration", "type": {"type": "fixed", "name": "Twelve", "size": 12, "logicalType": "duration"}}
  ]
}"#;

/// README's "The type each schema type creates", field by field; times read from the integers
/// the serializer wrote (whole seconds and the rest apart: PostgreSQL multiplies an interval
/// by a float8, which would round a big count of milliseconds).
const COLS: &[Col] = &[
    Col::new("id", "int8 NOT NULL"),
    Col::new("f_null", "jsonb"),
    Col::new("f_boolean", "bool NOT NULL"),
    Col::new("f_int", "int4 NOT NULL"),
    Col::new("f_long", "int8 NOT NULL"),
    Col::new("f_float", "float4 NOT NULL"),
    Col::new("f_double", "float8 NOT NULL"),
    Col::read("f_bytes", "bytea NOT NULL", "decode($1, 'base64')"),
    Col::new("f_string", "text NOT NULL"),
    Col::new("f_record", "jsonb NOT NULL"),
    Col::new("f_enum", "text NOT NULL"),
    array_read("f_array", "int8[] NOT NULL"),
    Col::new("f_map", "jsonb NOT NULL"),
    Col::new("f_optional", "text"),
    Col::new("f_union", "jsonb NOT NULL"),
    Col::read("f_fixed", "bytea NOT NULL", "decode($1, 'base64')"),
    Col::new("f_dec_bytes", "numeric(20,4) NOT NULL"),
    Col::new("f_dec_fixed", "numeric(38,2) NOT NULL"),
    Col::new("f_uuid", "uuid NOT NULL"),
    Col::read("f_date", "date NOT NULL", "'epoch'::date + $1::int4"),
    Col::read(
        "f_time_ms",
        "time NOT NULL",
        "'allballs'::time + $1::int8 / 1000 * interval '1 second' + $1::int8 % 1000 * interval '1 millisecond'",
    ),
    Col::read(
        "f_time_us",
        "time NOT NULL",
        "'allballs'::time + $1::int8 / 1000000 * interval '1 second' + $1::int8 % 1000000 * interval '1 microsecond'",
    ),
    Col::read(
        "f_ts_ms",
        "timestamptz NOT NULL",
        "'epoch'::timestamptz + $1::int8 / 1000 * interval '1 second' + $1::int8 % 1000 * interval '1 millisecond'",
    ),
    Col::read(
        "f_ts_us",
        "timestamptz NOT NULL",
        "'epoch'::timestamptz + $1::int8 / 1000000 * interval '1 second' + $1::int8 % 1000000 * interval '1 microsecond'",
    ),
    Col::read(
        "f_local_ms",
        "timestamp NOT NULL",
        "'epoch'::timestamp + $1::int8 / 1000 * interval '1 second' + $1::int8 % 1000 * interval '1 millisecond'",
    ),
    Col::read(
        "f_local_us",
        "timestamp NOT NULL",
        "'epoch'::timestamp + $1::int8 / 1000000 * interval '1 second' + $1::int8 % 1000000 * interval '1 microsecond'",
    ),
    Col::read("f_ts_ns", "timestamptz NOT NULL", NANOS_TZ),
    Col::read("f_local_ns", "timestamp NOT NULL", NANOS),
    Col::read(
        "f_duration",
        "interval NOT NULL",
        "make_interval(months => split_part($1, ',', 1)::int, days => split_part($1, ',', 2)::int) \
         + split_part($1, ',', 3)::int8 * interval '1 millisecond'",
    ),
];

/// Epoch nanoseconds as PostgreSQL's microseconds, finer digits dropped toward the past (as
/// README says the sink does).
const NANOS_TZ: &str = "'epoch'::timestamptz + $1::int8 / 1000000000 * interval '1 second' \
     + floor(($1::int8 % 1000000000)::numeric / 1000)::int8 * interval '1 microsecond'";
const NANOS: &str = "'epoch'::timestamp + $1::int8 / 1000000000 * interval '1 second' \
     + floor(($1::int8 % 1000000000)::numeric / 1000)::int8 * interval '1 microsecond'";

/// Avro's `duration`: months, days and milliseconds, each a little-endian u32.
fn duration(months: u32, days: u32, millis: u32) -> (Value, String) {
    let bytes = [months, days, millis]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<_>>();
    (
        json!({"$bytes": base64_of(&bytes)}),
        format!("{months},{days},{millis}"),
    )
}

/// Record `i` as the serializer is given it (tagged where JSON has no such value) and each
/// column's produced value as text. Record 0 holds every minimum, record 1 every maximum.
fn every(i: i64) -> (Value, Vec<Option<String>>) {
    let s = |v: &str| Some(v.to_string());
    // 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999, PostgreSQL's reach within Avro's.
    const MIN_MS: i64 = -62_135_596_800_000;
    const MAX_MS: i64 = 253_402_300_799_999;
    match i {
        0 => {
            let (dur, dur_text) = duration(0, 0, 0);
            (
                json!({"id": 0, "f_null": null, "f_boolean": false, "f_int": i32::MIN,
                       "f_long": i64::MIN, "f_float": {"$float": "NaN"},
                       "f_double": {"$float": "-inf"}, "f_bytes": {"$bytes": ""},
                       "f_string": "", "f_record": {"x": i32::MIN, "y": null}, "f_enum": "RED",
                       "f_array": [], "f_map": {}, "f_optional": null, "f_union": "",
                       "f_fixed": {"$bytes": base64_of(&[0, 0, 0, 0])},
                       "f_dec_bytes": {"$decimal": "-9999999999999999.9999"},
                       "f_dec_fixed": {"$decimal": "-999999999999999999999999999999999999.99"},
                       "f_uuid": "00000000-0000-0000-0000-000000000000",
                       "f_date": -719_162, "f_time_ms": 0, "f_time_us": 0,
                       "f_ts_ms": MIN_MS, "f_ts_us": MIN_MS * 1000,
                       "f_local_ms": MIN_MS, "f_local_us": MIN_MS * 1000,
                       "f_ts_ns": i64::MIN, "f_local_ns": i64::MIN, "f_duration": dur}),
                vec![
                    s("0"),
                    None,
                    s("false"),
                    Some(i32::MIN.to_string()),
                    Some(i64::MIN.to_string()),
                    s("NaN"),
                    s("-Infinity"),
                    s(""),
                    s(""),
                    Some(format!(r#"{{"x": {}, "y": null}}"#, i32::MIN)),
                    s("RED"),
                    s("[]"),
                    s("{}"),
                    None,
                    s(r#""""#),
                    s("AAAAAA=="),
                    s("-9999999999999999.9999"),
                    s("-999999999999999999999999999999999999.99"),
                    s("00000000-0000-0000-0000-000000000000"),
                    s("-719162"),
                    s("0"),
                    s("0"),
                    Some(MIN_MS.to_string()),
                    Some((MIN_MS * 1000).to_string()),
                    Some(MIN_MS.to_string()),
                    Some((MIN_MS * 1000).to_string()),
                    Some(i64::MIN.to_string()),
                    Some(i64::MIN.to_string()),
                    Some(dur_text),
                ],
            )
        }
        1 => {
            let (dur, dur_text) = duration(120_000, 3_650_000, u32::MAX);
            let text = "ünïcødé 😀 \"q\" \\ \n\t end";
            (
                json!({"id": 1, "f_null": null, "f_boolean": true, "f_int": i32::MAX,
                       "f_long": i64::MAX, "f_float": {"$float": "inf"},
                       "f_double": 1.7976931348623157e308,
                       "f_bytes": {"$bytes": base64_of(&[0, 0xff, 0, 1])}, "f_string": text,
                       "f_record": {"x": i32::MAX, "y": "ü"}, "f_enum": "BLUE",
                       "f_array": [i64::MIN, 0, i64::MAX], "f_map": {"": -1, "k": i64::MAX},
                       "f_optional": text, "f_union": i64::MAX,
                       "f_fixed": {"$bytes": base64_of(&[0xff, 0, 0xff, 0])},
                       "f_dec_bytes": {"$decimal": "9999999999999999.9999"},
                       "f_dec_fixed": {"$decimal": "999999999999999999999999999999999999.99"},
                       "f_uuid": "ffffffff-ffff-ffff-ffff-ffffffffffff",
                       "f_date": 2_932_896, "f_time_ms": 86_399_999, "f_time_us": 86_399_999_999i64,
                       "f_ts_ms": MAX_MS, "f_ts_us": MAX_MS * 1000 + 999,
                       "f_local_ms": MAX_MS, "f_local_us": MAX_MS * 1000 + 999,
                       "f_ts_ns": i64::MAX, "f_local_ns": i64::MAX, "f_duration": dur}),
                vec![
                    s("1"),
                    None,
                    s("true"),
                    Some(i32::MAX.to_string()),
                    Some(i64::MAX.to_string()),
                    s("Infinity"),
                    s("1.7976931348623157e308"),
                    s("AP8AAQ=="),
                    s(text),
                    Some(format!(r#"{{"x": {}, "y": "ü"}}"#, i32::MAX)),
                    s("BLUE"),
                    Some(format!("[{}, 0, {}]", i64::MIN, i64::MAX)),
                    Some(format!(r#"{{"": -1, "k": {}}}"#, i64::MAX)),
                    s(text),
                    Some(i64::MAX.to_string()),
                    s("/wD/AA=="),
                    s("9999999999999999.9999"),
                    s("999999999999999999999999999999999999.99"),
                    s("ffffffff-ffff-ffff-ffff-ffffffffffff"),
                    s("2932896"),
                    s("86399999"),
                    s("86399999999"),
                    Some(MAX_MS.to_string()),
                    Some((MAX_MS * 1000 + 999).to_string()),
                    Some(MAX_MS.to_string()),
                    Some((MAX_MS * 1000 + 999).to_string()),
                    Some(i64::MAX.to_string()),
                    Some(i64::MAX.to_string()),
                    Some(dur_text),
                ],
            )
        }
        _ => {
            let (dur, dur_text) = duration(i as u32, 2 * i as u32, 1500 * i as u32);
            let ms = 1_709_208_000_000 + i * 61_001;
            let us = ms * 1000 + i;
            let ns = us * 1000 + i * 7; // nanoseconds the column cannot hold
            let uuid = format!("{:08x}-0000-4000-8000-{:012x}", i, i * 7);
            (
                json!({"id": i, "f_null": null, "f_boolean": i % 2 == 0, "f_int": -i,
                       "f_long": i * 1_000_000_007, "f_float": i as f64 * 0.25,
                       "f_double": i as f64 / 3.0,
                       "f_bytes": {"$bytes": base64_of(&[i as u8, 0])}, "f_string": format!("row {i}"),
                       "f_record": {"x": i, "y": format!("y{i}")}, "f_enum": "GREEN",
                       "f_array": [i, -i], "f_map": {format!("m{i}"): i},
                       "f_optional": if i % 2 == 0 { json!(null) } else { json!(format!("o{i}")) },
                       "f_union": if i % 2 == 0 { json!(format!("u{i}")) } else { json!(i) },
                       "f_fixed": {"$bytes": base64_of(&[i as u8; 4])},
                       "f_dec_bytes": {"$decimal": format!("{i}.0{i:03}")},
                       "f_dec_fixed": {"$decimal": format!("-{i}.{:02}", i % 100)},
                       "f_uuid": uuid, "f_date": 19_000 + i, "f_time_ms": i * 3_600_001,
                       "f_time_us": i * 3_600_000_001, "f_ts_ms": ms, "f_ts_us": us,
                       "f_local_ms": ms, "f_local_us": us, "f_ts_ns": ns, "f_local_ns": -ns,
                       "f_duration": dur}),
                vec![
                    Some(i.to_string()),
                    None,
                    Some((i % 2 == 0).to_string()),
                    Some((-i).to_string()),
                    Some((i * 1_000_000_007).to_string()),
                    Some((i as f64 * 0.25).to_string()),
                    Some((i as f64 / 3.0).to_string()),
                    Some(base64_of(&[i as u8, 0])),
                    Some(format!("row {i}")),
                    Some(format!(r#"{{"x": {i}, "y": "y{i}"}}"#)),
                    s("GREEN"),
                    Some(format!("[{i}, {}]", -i)),
                    Some(format!(r#"{{"m{i}": {i}}}"#)),
                    (i % 2 == 1).then(|| format!("o{i}")),
                    Some(if i % 2 == 0 {
                        format!(r#""u{i}""#)
                    } else {
                        i.to_string()
                    }),
                    Some(base64_of(&[i as u8; 4])),
                    Some(format!("{i}.0{i:03}")),
                    Some(format!("-{i}.{:02}", i % 100)),
                    Some(uuid),
                    Some((19_000 + i).to_string()),
                    Some((i * 3_600_001).to_string()),
                    Some((i * 3_600_000_001).to_string()),
                    Some(ms.to_string()),
                    Some(us.to_string()),
                    Some(ms.to_string()),
                    Some(us.to_string()),
                    Some(ns.to_string()),
                    Some((-ns).to_string()),
                    Some(dur_text),
                ],
            )
        }
    }
}

/// confluent-kafka's AvroSerializer writes every Avro type and logical type; the records land
/// in a hand-made table and an auto-created one with every column equal to what was produced,
/// and `check` passes.
#[tokio::test(flavor = "multi_thread")]
async fn python_avro_serializer_records_land_with_every_type_and_logical_type() {
    let Fixture {
        db,
        topic,
        records,
        produced,
    } = Fixture::new(COLS, every).await;
    produce(
        &topic.name,
        &Serde::Avro(EVERY),
        Some(&Serde::String),
        &records,
    )
    .await;

    let sinks = fixture_sinks(&db, &topic, "avro").await;
    assert_fixture_lands(&db, &topic, COLS, sinks, &produced).await;
}
