//! confluent-kafka's ProtobufSerializer: it registers base64(FileDescriptorProto), and each
//! file the message imports (here a user's `kps/common/money.proto`) as a reference; the
//! well-known types it leaves out (`skip.known.types`). Every scalar, an enum, a nested
//! message, repeated, map, oneof, `optional`, `Timestamp`, `Duration`, every wrapper and the
//! imported message, with their extremes.

use serde_json::{json, Value};

use super::{array_read, assert_fixture_lands, fixture_sinks, Col, Fixture};
use crate::helpers::confluent::{produce, Serde};
use crate::helpers::sink::{run_cli, ConfigFile};

const MONEY: &str = r#"syntax = "proto3";
package kps.common;
message Money { string currency = 1; int64 units = 2; }
"#;

const EVERY: &str = r#"syntax = "proto3";
package kps.fixture;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "kps/common/money.proto";

message Every {
  int64 id = 1;
  double f_double = 2;
  float f_float = 3;
  int32 f_int32 = 4;
  int64 f_int64 = 5;
  uint32 f_uint32 = 6;
  uint64 f_uint64 = 7;
  sint32 f_sint32 = 8;
  sint64 f_sint64 = 9;
  fixed32 f_fixed32 = 10;
  fixed64 f_fixed64 = 11;
  sfixed32 f_sfixed32 = 12;
  sfixed64 f_sfixed64 = 13;
  bool f_bool = 14;
  string f_string = 15;
  bytes f_bytes = 16;
  enum Color { RED = 0; GREEN = 1; BLUE = 2; }
  Color f_enum = 17;
  message Inner { string a = 1; int32 b = 2; }
  Inner f_nested = 18;
  repeated int64 f_repeated = 19;
  repeated string f_strings = 20;
  map<string, int32> f_map = 21;
  oneof choice { string one_text = 22; int64 one_number = 23; }
  optional int32 f_optional = 24;
  google.protobuf.Timestamp f_timestamp = 25;
  google.protobuf.Duration f_duration = 26;
  google.protobuf.DoubleValue w_double = 27;
  google.protobuf.FloatValue w_float = 28;
  google.protobuf.Int64Value w_int64 = 29;
  google.protobuf.UInt64Value w_uint64 = 30;
  google.protobuf.Int32Value w_int32 = 31;
  google.protobuf.UInt32Value w_uint32 = 32;
  google.protobuf.BoolValue w_bool = 33;
  google.protobuf.StringValue w_string = 34;
  google.protobuf.BytesValue w_bytes = 35;
  kps.common.Money price = 36;
}
"#;

/// README's "The type each schema type creates", field by field.
const COLS: &[Col] = &[
    Col::new("id", "int8 NOT NULL"),
    Col::new("f_double", "float8 NOT NULL"),
    Col::new("f_float", "float4 NOT NULL"),
    Col::new("f_int32", "int4 NOT NULL"),
    Col::new("f_int64", "int8 NOT NULL"),
    Col::new("f_uint32", "int8 NOT NULL"),
    Col::new("f_uint64", "numeric(20,0) NOT NULL"),
    Col::new("f_sint32", "int4 NOT NULL"),
    Col::new("f_sint64", "int8 NOT NULL"),
    Col::new("f_fixed32", "int8 NOT NULL"),
    Col::new("f_fixed64", "numeric(20,0) NOT NULL"),
    Col::new("f_sfixed32", "int4 NOT NULL"),
    Col::new("f_sfixed64", "int8 NOT NULL"),
    Col::new("f_bool", "bool NOT NULL"),
    Col::new("f_string", "text NOT NULL"),
    Col::read("f_bytes", "bytea NOT NULL", "decode($1, 'base64')"),
    Col::new("f_enum", "text NOT NULL"),
    Col::new("f_nested", "jsonb"),
    array_read("f_repeated", "int8[] NOT NULL"),
    array_read("f_strings", "text[] NOT NULL"),
    Col::new("f_map", "jsonb NOT NULL"),
    Col::new("one_text", "text"),
    Col::new("one_number", "int8"),
    Col::new("f_optional", "int4"),
    Col::new("f_timestamp", "timestamptz"),
    Col::read(
        "f_duration",
        "interval",
        "make_interval(secs => rtrim($1, 's')::float8)",
    ),
    Col::new("w_double", "float8"),
    Col::new("w_float", "float4"),
    Col::new("w_int64", "int8"),
    Col::new("w_uint64", "numeric(20,0)"),
    Col::new("w_int32", "int4"),
    Col::new("w_uint32", "int8"),
    Col::new("w_bool", "bool"),
    Col::new("w_string", "text"),
    Col::read("w_bytes", "bytea", "decode($1, 'base64')"),
    Col::new("price", "jsonb"),
];

/// Record `i`: the message in protobuf's JSON mapping (what the producer builds its message
/// from) and each column's produced value as text, `None` where the field is absent. Record 0
/// holds every minimum (and proto3's unset defaults), record 1 every maximum, record 2 the
/// wrappers at their defaults, the rest ordinary values.
fn every(i: i64) -> (Value, Vec<Option<String>>) {
    let s = |v: &str| Some(v.to_string());
    match i {
        0 => (
            json!({"id": "0", "f_int32": -2147483648, "f_int64": "-9223372036854775808",
                   "f_sint32": -2147483648, "f_sint64": "-9223372036854775808",
                   "f_sfixed32": -2147483648, "f_sfixed64": "-9223372036854775808",
                   "f_double": "-Infinity", "f_float": "NaN",
                   "f_timestamp": "0001-01-01T00:00:00Z", "f_duration": "-315576000000s",
                   "w_double": "NaN", "w_float": "-Infinity", "w_int64": "-9223372036854775808",
                   "w_int32": -2147483648, "w_bool": false}),
            vec![
                s("0"),
                s("-Infinity"),
                s("NaN"),
                s("-2147483648"),
                s("-9223372036854775808"),
                s("0"),
                s("0"),
                s("-2147483648"),
                s("-9223372036854775808"),
                s("0"),
                s("0"),
                s("-2147483648"),
                s("-9223372036854775808"),
                s("false"),
                s(""),
                s(""),
                s("RED"),
                None,
                s("[]"),
                s("[]"),
                s("{}"),
                None,
                None,
                None,
                s("0001-01-01T00:00:00Z"),
                s("-315576000000s"),
                s("NaN"),
                s("-Infinity"),
                s("-9223372036854775808"),
                None,
                s("-2147483648"),
                None,
                s("false"),
                None,
                None,
                None,
            ],
        ),
        1 => (
            json!({"id": "1", "f_double": 1.7976931348623157e308, "f_float": 3.4028234663852886e38,
                   "f_int32": 2147483647, "f_int64": "9223372036854775807",
                   "f_uint32": 4294967295u32, "f_uint64": "18446744073709551615",
                   "f_sint32": 2147483647, "f_sint64": "9223372036854775807",
                   "f_fixed32": 4294967295u32, "f_fixed64": "18446744073709551615",
                   "f_sfixed32": 2147483647, "f_sfixed64": "9223372036854775807",
                   "f_bool": true, "f_string": "ünïcødé \u{1F600} \"quoted\" \\ back\nnew line",
                   "f_bytes": "AP8AAQ==", "f_enum": "BLUE",
                   "f_nested": {"a": "ä", "b": -1}, "f_repeated": ["-9223372036854775808", "0", "9223372036854775807"],
                   "f_strings": ["", "a,b", "{x}", "\"q\"", "ü"], "f_map": {"k": 2147483647, "": -1},
                   "one_text": "chosen", "f_optional": 0,
                   "f_timestamp": "9999-12-31T23:59:59.999999Z", "f_duration": "315576000000s",
                   "w_double": "Infinity", "w_float": 3.4028234663852886e38, "w_int64": "9223372036854775807",
                   "w_uint64": "18446744073709551615", "w_int32": 2147483647, "w_uint32": 4294967295u32,
                   "w_bool": true, "w_string": "ünïcødé", "w_bytes": "AP8=",
                   "price": {"currency": "EUR", "units": "9223372036854775807"}}),
            vec![
                s("1"),
                s("1.7976931348623157e308"),
                s("3.4028235e38"),
                s("2147483647"),
                s("9223372036854775807"),
                s("4294967295"),
                s("18446744073709551615"),
                s("2147483647"),
                s("9223372036854775807"),
                s("4294967295"),
                s("18446744073709551615"),
                s("2147483647"),
                s("9223372036854775807"),
                s("true"),
                s("ünïcødé \u{1F600} \"quoted\" \\ back\nnew line"),
                s("AP8AAQ=="),
                s("BLUE"),
                s(r#"{"a": "ä", "b": -1}"#),
                s(r#"["-9223372036854775808", "0", "9223372036854775807"]"#),
                s(r#"["", "a,b", "{x}", "\"q\"", "ü"]"#),
                s(r#"{"": -1, "k": 2147483647}"#),
                s("chosen"),
                None,
                s("0"),
                s("9999-12-31T23:59:59.999999Z"),
                s("315576000000s"),
                s("Infinity"),
                s("3.4028235e38"),
                s("9223372036854775807"),
                s("18446744073709551615"),
                s("2147483647"),
                s("4294967295"),
                s("true"),
                s("ünïcødé"),
                s("AP8="),
                s(r#"{"currency": "EUR", "units": 9223372036854775807}"#),
            ],
        ),
        2 => (
            json!({"id": "2", "f_nested": {}, "one_number": "0", "f_optional": -7,
                   "f_timestamp": "1970-01-01T00:00:00Z", "f_duration": "0s",
                   "w_double": 0.0, "w_float": 0.0, "w_int64": "0", "w_uint64": "0", "w_int32": 0,
                   "w_uint32": 0, "w_bool": false, "w_string": "", "w_bytes": "",
                   "price": {}}),
            vec![
                s("2"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("false"),
                s(""),
                s(""),
                s("RED"),
                s(r#"{"a": "", "b": 0}"#),
                s("[]"),
                s("[]"),
                s("{}"),
                None,
                s("0"),
                s("-7"),
                s("1970-01-01T00:00:00Z"),
                s("0s"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("0"),
                s("false"),
                s(""),
                s(""),
                s(r#"{"currency": "", "units": 0}"#),
            ],
        ),
        _ => {
            let ts = format!(
                "2024-02-29T12:{:02}:{:02}.{:06}Z",
                i % 60,
                (i * 7) % 60,
                i * 1001
            );
            let text = format!("row {i} ✓");
            let color = ["RED", "GREEN", "BLUE"][(i % 3) as usize];
            (
                json!({"id": i.to_string(), "f_double": i as f64 / 8.0, "f_float": 0.5 * i as f64,
                       "f_int32": -i, "f_int64": (i * 1_000_000_007).to_string(), "f_uint32": i,
                       "f_uint64": (u64::MAX - i as u64).to_string(), "f_sint32": i - 50,
                       "f_sint64": (-i * 3).to_string(), "f_fixed32": i * 2,
                       "f_fixed64": (i * 3).to_string(), "f_sfixed32": -i * 2,
                       "f_sfixed64": (i * 5).to_string(), "f_bool": i % 2 == 1, "f_string": text,
                       "f_bytes": crate::helpers::base64_of(&[i as u8, 0, 0xff]),
                       "f_enum": color,
                       "f_nested": {"a": format!("n{i}"), "b": i},
                       "f_repeated": [i.to_string(), (-i).to_string()], "f_strings": [format!("s{i}")],
                       "f_map": {format!("m{i}"): i}, "one_text": format!("t{i}"),
                       "f_timestamp": ts, "f_duration": format!("{}.5s", i),
                       "w_string": format!("w{i}"), "price": {"currency": "USD", "units": i.to_string()}}),
                vec![
                    Some(i.to_string()),
                    Some((i as f64 / 8.0).to_string()),
                    Some((0.5 * i as f64).to_string()),
                    Some((-i).to_string()),
                    Some((i * 1_000_000_007).to_string()),
                    Some(i.to_string()),
                    Some((u64::MAX - i as u64).to_string()),
                    Some((i - 50).to_string()),
                    Some((-i * 3).to_string()),
                    Some((i * 2).to_string()),
                    Some((i * 3).to_string()),
                    Some((-i * 2).to_string()),
                    Some((i * 5).to_string()),
                    Some((i % 2 == 1).to_string()),
                    Some(text),
                    Some(crate::helpers::base64_of(&[i as u8, 0, 0xff])),
                    s(color),
                    Some(format!(r#"{{"a": "n{i}", "b": {i}}}"#)),
                    Some(format!(r#"["{i}", "{}"]"#, -i)),
                    Some(format!(r#"["s{i}"]"#)),
                    Some(format!(r#"{{"m{i}": {i}}}"#)),
                    Some(format!("t{i}")),
                    None,
                    None,
                    Some(ts),
                    Some(format!("{i}.5s")),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    Some(format!("w{i}")),
                    None,
                    Some(format!(r#"{{"currency": "USD", "units": {i}}}"#)),
                ],
            )
        }
    }
}

/// confluent-kafka's ProtobufSerializer writes every type the README lists; the records land
/// in a hand-made table and an auto-created one with every column equal to what was produced,
/// and `check` passes on the topic. On the code before issue 25 every record was refused
/// ("the .proto schema does not compile: line 1, column 1 …") and `check` exited 1.
#[tokio::test(flavor = "multi_thread")]
async fn python_protobuf_serializer_records_land_with_every_type_and_check_passes() {
    let Fixture {
        db,
        topic,
        records,
        produced,
    } = Fixture::new(COLS, every).await;
    let value = Serde::Protobuf {
        files: &[("every.proto", EVERY), ("kps/common/money.proto", MONEY)],
        file: "every.proto",
        message: "kps.fixture.Every",
    };
    produce(&topic.name, &value, Some(&Serde::String), &records).await;

    let sinks = fixture_sinks(&db, &topic, "protobuf").await;
    // `--plan` compiles the same descriptor (and its reference) for the table it would create.
    let plan = ConfigFile::new(&sinks.1.toml());
    let out = run_cli(&["check", "--plan", "--config", plan.arg()]).await;
    assert!(
        out.status.success()
            && out.stdout.contains("CREATE TABLE")
            && out.stdout.contains("\"price\" jsonb"),
        "check --plan on the serializer's topic: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert_fixture_lands(&db, &topic, COLS, sinks, &produced).await;
}
