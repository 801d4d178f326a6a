//! Avro into JSON text for the registry formats, by `transcode`'s conventions, so the JSON
//! mapping takes it unchanged. apache-avro parses and checks the writer schema; each payload
//! is then read by a program compiled from it (`program`, run by `decode`), straight into the
//! JSON text. apache-avro's own decoder, which builds a value tree per record, is what the
//! program is tested against (`differential`) and still reads the rare types whose encoding
//! is intricate (big-decimal, Debezium's `VariableScaleDecimal`).
//!
//! Kafka Connect and Debezium name their types with `connect.name` on the schema
//! (`{"type":"int","connect.name":"io.debezium.time.Date"}`), which apache-avro drops from
//! primitive schemas. So the schema JSON is also walked here, once, into a plan that says how
//! to write the value at each position.
//!
//! The forms written, exactly: timestamps `YYYY-MM-DDTHH:MM:SS.fffZ` with as many fraction
//! digits as the unit has (3, 6 or 9), local timestamps (and Debezium's `Timestamp`,
//! `MicroTimestamp`, `NanoTimestamp`, which carry no zone) the same without `Z`; years outside
//! 0000–9999 are signed (`+10000`, `-0001`), as chrono reads them. Dates `YYYY-MM-DD`; times of
//! day `HH:MM:SS.ffffff` (nine digits for nanosecond times), up to `24:00:00`; durations
//! `{"months":m,"days":d,"millis":n}`. A payload must be exactly one datum: one that ends
//! early, or has bytes after the datum, is an error (trailing bytes mean the schema id or the
//! framing is wrong, and guessing would write wrong rows).

use std::fmt::Write as _;
use std::io::{self, Read};

use apache_avro::schema::{ResolvedSchema, Schema};
use apache_avro::types::Value;
use base64::Engine as _;
use serde_json::Value as Json;

mod decode;
#[cfg(test)]
mod differential;
mod plan;
mod program;
mod write;

use plan::*;
use program::Step;
use write::*;

use super::transcode::Transcoder;
use super::MAX_JSON_DEPTH;

/// One Avro writer schema (a registry schema id), compiled for decoding records into JSON.
///
/// Recursive schemas (a record that holds itself) are refused: apache-avro decodes
/// recursively, so a payload could nest deep enough to overflow the stack, which aborts the
/// process. Kafka Connect cannot express them anyway.
pub(crate) struct AvroTranscoder {
    /// The writer schema with named references replaced by their definitions, so apache-avro
    /// needs no name table, which it would otherwise rebuild for every record.
    schema: Schema,
    /// How each position's value is written; `plan[PLAIN]` is "as the value says".
    plan: Vec<Node>,
    /// The plan node of the schema's top.
    #[cfg_attr(not(test), allow(dead_code))]
    root: usize,
    /// The schema and plan compiled for reading payloads directly (`decode`).
    steps: Vec<Step>,
    /// The step of the schema's top.
    top: usize,
}

/// The plan node for values written as their Avro type says, with no hint.
const PLAIN: usize = 0;

/// The largest string, bytes or array length apache-avro allocates for, instead of its 512 MiB
/// default: a few bytes of a bad payload could otherwise make it reserve gigabytes (an array
/// length is reserved before its items are read). Records are limited to
/// `max_record_bytes` (16 MiB by default) anyway.
const MAX_ALLOCATION_BYTES: usize = 16 << 20;

/// How many type nodes a schema may expand into once its named references are inlined.
const MAX_INLINED_TYPES: usize = 100_000;

/// A decimal's digits are computed by long division, so its length is bounded; as for
/// Connect's base64 decimals.
const MAX_DECIMAL_BYTES: usize = 128;

/// Digits a big-decimal may have: what `MAX_DECIMAL_BYTES` of unscaled integer can hold.
const MAX_DECIMAL_DIGITS: u64 = 310;

/// PostgreSQL's `numeric` takes scales from -1000 to 1000; a larger one (from a bad payload's
/// `VariableScaleDecimal`) would only write a long run of zeros.
const MAX_DECIMAL_SCALE: i64 = 1000;

/// How the value at one schema position is written, beyond what its Avro type says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// As the value's own type says.
    Plain,
    /// A record: its fields' JSON keys (quoted, with the colon) and plan nodes, in order.
    Record {
        keys: Vec<String>,
        fields: Vec<usize>,
    },
    /// Array items' plan node.
    Array(usize),
    /// Map values' plan node.
    Map(usize),
    /// Each union branch's plan node, by branch index.
    Union(Vec<usize>),
    /// A decimal of this scale. `bytes_too`: Connect's `Decimal`, which is a decimal even where
    /// the schema has no valid `logicalType` (apache-avro then decodes plain bytes).
    Decimal { scale: i64, bytes_too: bool },
    /// Debezium's `VariableScaleDecimal`: a record `{scale: int, value: bytes}`.
    VariableDecimal,
    /// An integer counting days since 1970-01-01 (Connect and Debezium `Date`).
    Days,
    /// An integer counting `unit`s since the epoch; `zone`: an instant (written with `Z`)
    /// rather than a wall-clock time.
    Epoch { unit: Unit, zone: bool },
    /// An integer counting `unit`s since midnight.
    TimeOfDay(Unit),
    /// An integer counting microseconds of a duration (Debezium's `MicroDuration`): written
    /// as an ISO 8601 duration, which says its unit.
    MicroDuration,
    /// A string holding JSON text (`io.debezium.data.Json`): written as that JSON.
    JsonText,
    /// A `fixed` of 16 bytes with `logicalType: uuid`, which apache-avro 0.21 would read as
    /// length-prefixed bytes.
    UuidFixed,
}

/// A fraction of a second that an integer time counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    /// How many make a second.
    fn per_second(self) -> i64 {
        match self {
            Unit::Millis => 1_000,
            Unit::Micros => 1_000_000,
            Unit::Nanos => 1_000_000_000,
        }
    }

    /// Fraction digits that keep every digit of the unit.
    fn digits(self) -> usize {
        match self {
            Unit::Millis => 3,
            Unit::Micros => 6,
            Unit::Nanos => 9,
        }
    }
}

impl AvroTranscoder {
    /// Compiles the writer schema as the registry returns it. An invalid schema is an error
    /// that says why.
    pub(crate) fn new(schema_json: &str) -> Result<Self, String> {
        let json: Json = serde_json::from_str(schema_json)
            .map_err(|e| format!("the Avro schema is not JSON: {e}"))?;
        let parsed = Schema::parse(&json).map_err(|e| format!("invalid Avro schema: {e}"))?;
        let mut planner = Planner {
            nodes: vec![Node::Plain],
            names: Default::default(),
        };
        let root = planner.compile(&json, "");
        let names =
            ResolvedSchema::try_from(&parsed).map_err(|e| format!("invalid Avro schema: {e}"))?;
        let fixed = largest_fixed(&json);
        if fixed > MAX_ALLOCATION_BYTES as u64 {
            return Err(format!(
                "the Avro schema declares a fixed of {fixed} bytes (at most {MAX_ALLOCATION_BYTES})"
            ));
        }
        let mut budget = MAX_INLINED_TYPES;
        let schema = inline_refs(
            &parsed,
            names.get_names(),
            &None,
            &mut Vec::new(),
            &mut budget,
            0,
        )?;
        // Process-wide and set once; this module is apache-avro's only user.
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES);
        let (steps, top) = program::compile(&schema, &planner.nodes, root)?;
        Ok(Self {
            schema,
            plan: planner.nodes,
            root,
            steps,
            top,
        })
    }

    /// Writes `value` as plan node `node` says. `depth` counts the arrays, maps and records
    /// around it, bounded as the JSON mapping bounds nesting.
    fn write(
        &self,
        value: &Value,
        node: usize,
        depth: usize,
        out: &mut String,
    ) -> Result<(), String> {
        let node = self.plan.get(node).unwrap_or(&Node::Plain);
        let nested = || {
            if depth >= MAX_JSON_DEPTH {
                Err(format!(
                    "the value nests deeper than {MAX_JSON_DEPTH} levels"
                ))
            } else {
                Ok(depth + 1)
            }
        };
        match value {
            Value::Null => out.push_str("null"),
            Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => decode::write_number(i64::from(*n), program::number_of(node), out)?,
            Value::Long(n) => decode::write_number(*n, program::number_of(node), out)?,
            Value::Float(f) => write_float(*f, f64::from(*f), out),
            Value::Double(f) => write_float(*f, *f, out),
            Value::Bytes(b) | Value::Fixed(_, b) => match node {
                Node::Decimal {
                    scale,
                    bytes_too: true,
                } => write_decimal(b, *scale, out)?,
                _ => {
                    out.push('"');
                    base64::engine::general_purpose::STANDARD.encode_string(b, out);
                    out.push('"');
                }
            },
            Value::String(s) => match node {
                Node::JsonText => write_json_string(s, depth, out)?,
                _ => write_str(s, out),
            },
            Value::Enum(_, symbol) => write_str(symbol, out),
            Value::Union(branch, inner) => {
                let next = match node {
                    Node::Union(branches) => branches.get(*branch as usize).copied(),
                    _ => None,
                };
                self.write(inner, next.unwrap_or(PLAIN), depth, out)?;
            }
            Value::Array(items) => {
                let depth = nested()?;
                let item = match node {
                    Node::Array(item) => *item,
                    _ => PLAIN,
                };
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.write(v, item, depth, out)?;
                }
                out.push(']');
            }
            Value::Map(entries) => {
                let depth = nested()?;
                let each = match node {
                    Node::Map(each) => *each,
                    _ => PLAIN,
                };
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(k, out);
                    out.push(':');
                    self.write(v, each, depth, out)?;
                }
                out.push('}');
            }
            Value::Record(fields) => {
                if *node == Node::VariableDecimal {
                    return write_variable_decimal(fields, out);
                }
                let depth = nested()?;
                let (keys, plans) = match node {
                    Node::Record {
                        keys,
                        fields: plans,
                    } if keys.len() == fields.len() => (Some(keys), Some(plans)),
                    _ => (None, None),
                };
                out.push('{');
                for (i, (name, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    match keys {
                        Some(keys) => out.push_str(&keys[i]),
                        None => {
                            write_str(name, out);
                            out.push(':');
                        }
                    }
                    let plan = plans.map_or(PLAIN, |p| p[i]);
                    self.write(v, plan, depth, out)?;
                }
                out.push('}');
            }
            Value::Date(days) => write_date(i64::from(*days), out)?,
            Value::Decimal(d) => {
                let scale = match node {
                    Node::Decimal { scale, .. } => *scale,
                    _ => 0,
                };
                let bytes = Vec::<u8>::try_from(d).map_err(|e| format!("bad decimal: {e}"))?;
                write_decimal(&bytes, scale, out)?;
            }
            Value::BigDecimal(d) => {
                // The scale comes from the payload: bounded as every decimal's is, before the
                // plain form pads it with zeros.
                let scale = d.fractional_digit_count();
                if scale.unsigned_abs() > MAX_DECIMAL_SCALE.unsigned_abs()
                    || d.digits() > MAX_DECIMAL_DIGITS
                {
                    return Err(format!(
                        "big-decimal with {} digits and scale {scale} is out of range",
                        d.digits()
                    ));
                }
                out.push_str(&d.to_plain_string());
            }
            Value::TimeMillis(t) => write_time_of_day(i64::from(*t), Unit::Millis, out)?,
            Value::TimeMicros(t) => write_time_of_day(*t, Unit::Micros, out)?,
            Value::TimestampMillis(t) => write_timestamp(*t, Unit::Millis, true, out)?,
            Value::TimestampMicros(t) => write_timestamp(*t, Unit::Micros, true, out)?,
            Value::TimestampNanos(t) => write_timestamp(*t, Unit::Nanos, true, out)?,
            Value::LocalTimestampMillis(t) => write_timestamp(*t, Unit::Millis, false, out)?,
            Value::LocalTimestampMicros(t) => write_timestamp(*t, Unit::Micros, false, out)?,
            Value::LocalTimestampNanos(t) => write_timestamp(*t, Unit::Nanos, false, out)?,
            Value::Duration(d) => {
                nested()?;
                let _ = write!(
                    out,
                    r#"{{"months":{},"days":{},"millis":{}}}"#,
                    u32::from(d.months()),
                    u32::from(d.days()),
                    u32::from(d.millis())
                );
            }
            Value::Uuid(u) => {
                let _ = write!(out, "\"{}\"", u.hyphenated());
            }
        }
        Ok(())
    }
}

impl Transcoder for AvroTranscoder {
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        self.read(payload, out, None)
    }

    fn top_fields(&self) -> Option<Vec<String>> {
        match &self.schema {
            Schema::Record(record) if matches!(self.steps.get(self.top), Some(Step::Record(_))) => {
                Some(record.fields.iter().map(|f| f.name.clone()).collect())
            }
            _ => None,
        }
    }

    fn to_json_fields(
        &self,
        payload: &[u8],
        out: &mut String,
        spans: &mut Vec<std::ops::Range<usize>>,
    ) -> Result<(), String> {
        self.read(payload, out, Some(spans))
    }

    /// `run` counts the arrays, maps and records around each value.
    fn bounds_nesting(&self) -> bool {
        true
    }
}

/// The payload as apache-avro reads it, noting whether it asked for more than there was.
struct Payload<'a> {
    rest: &'a [u8],
    ran_out: bool,
}

impl Read for Payload<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rest.is_empty() && !buf.is_empty() {
            self.ran_out = true;
            return Ok(0);
        }
        self.rest.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::{Days, Decimal, Duration, Millis, Months};

    use super::differential::checked_json;
    use uuid::Uuid;

    use super::*;

    /// Encodes `value` with apache-avro's writer and transcodes it with a fresh transcoder.
    fn transcode(schema: &str, value: Value) -> Result<String, String> {
        let t = AvroTranscoder::new(schema).expect("a valid schema");
        let payload = apache_avro::to_avro_datum(&Schema::parse_str(schema).unwrap(), value)
            .expect("the value fits the schema");
        checked_json(&t, &payload)
    }

    fn record(fields: Vec<(&str, Value)>) -> Value {
        Value::Record(fields.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    fn some(branch: u32, v: Value) -> Value {
        Value::Union(branch, Box::new(v))
    }

    fn decimal(bytes: &[u8]) -> Value {
        Value::Decimal(Decimal::from(bytes))
    }

    /// 123456789012345678901234567890123456789012, wider than i128, and its negation.
    const HUGE: [u8; 18] = [
        1, 106, 206, 144, 173, 255, 85, 235, 52, 35, 121, 149, 86, 232, 144, 160, 58, 20,
    ];
    const MINUS_HUGE: [u8; 18] = [
        254, 149, 49, 111, 82, 0, 170, 20, 203, 220, 134, 106, 169, 23, 111, 95, 197, 236,
    ];

    pub(super) const EVERY_TYPE: &str = r#"{"type":"record","name":"Every","namespace":"t","fields":[
        {"name":"n","type":"null"},
        {"name":"b","type":"boolean"},
        {"name":"i","type":"int"},
        {"name":"l","type":"long"},
        {"name":"f","type":"float"},
        {"name":"d","type":{"type":"array","items":"double"}},
        {"name":"s","type":"string"},
        {"name":"by","type":"bytes"},
        {"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
        {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
        {"name":"decs","type":{"type":"array","items":
            {"type":"bytes","logicalType":"decimal","precision":60,"scale":3}}},
        {"name":"decf","type":{"type":"fixed","name":"D16","size":16,"logicalType":"decimal","precision":38,"scale":4}},
        {"name":"dec0","type":{"type":"bytes","logicalType":"decimal","precision":5}},
        {"name":"big","type":{"type":"bytes","logicalType":"big-decimal"}},
        {"name":"u","type":{"type":"string","logicalType":"uuid"}},
        {"name":"date","type":{"type":"array","items":{"type":"int","logicalType":"date"}}},
        {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
        {"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
        {"name":"ts_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"ts_us","type":{"type":"long","logicalType":"timestamp-micros"}},
        {"name":"ts_ns","type":{"type":"long","logicalType":"timestamp-nanos"}},
        {"name":"before","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"lts_ms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
        {"name":"lts_us","type":{"type":"long","logicalType":"local-timestamp-micros"}},
        {"name":"lts_ns","type":{"type":"long","logicalType":"local-timestamp-nanos"}},
        {"name":"dur","type":{"type":"fixed","name":"Twelve","size":12,"logicalType":"duration"}},
        {"name":"opt","type":{"type":"array","items":["null","string"]}},
        {"name":"inner","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}},
        {"name":"inners","type":{"type":"map","values":"Inner"}},
        {"name":"again","type":["null","t.Inner"]}
    ]}"#;

    #[test]
    fn every_avro_type_and_logical_type_follows_the_conventions() {
        let value = record(vec![
            ("n", Value::Null),
            ("b", Value::Boolean(true)),
            ("i", Value::Int(-7)),
            ("l", Value::Long(i64::MAX)),
            ("f", Value::Float(0.1)),
            (
                "d",
                Value::Array(vec![
                    Value::Double(1.5),
                    Value::Double(2.0),
                    Value::Double(-0.25),
                    Value::Double(1e300),
                    Value::Double(5e-324),
                    Value::Double(f64::NAN),
                    Value::Double(f64::INFINITY),
                    Value::Double(f64::NEG_INFINITY),
                ]),
            ),
            ("s", Value::String("a\"b\\c\n\u{1}é😀".into())),
            ("by", Value::Bytes(vec![0, 1, 2, 255])),
            ("fx", Value::Fixed(4, vec![0xde, 0xad, 0xbe, 0xef])),
            ("e", Value::Enum(1, "GREEN".into())),
            (
                "decs",
                Value::Array(vec![
                    decimal(&[0x30, 0x39]),
                    decimal(&[0xcf, 0xc7]),
                    decimal(&[0x00]),
                    decimal(&[0x05]),
                    decimal(&[0xff]),
                    decimal(&HUGE),
                    decimal(&MINUS_HUGE),
                    decimal(&i128::MIN.to_be_bytes()),
                ]),
            ),
            ("decf", decimal(&[0xff; 16])),
            ("dec0", decimal(&[0x00, 0x80])),
            (
                "big",
                Value::BigDecimal("-12345678901234567890.000123".parse().unwrap()),
            ),
            (
                "u",
                Value::Uuid(Uuid::parse_str("6F1D2C3B-0A9E-4D8C-B7A6-5E4F3D2C1B0A").unwrap()),
            ),
            (
                "date",
                Value::Array(vec![
                    Value::Date(19000),
                    Value::Date(-1),
                    Value::Date(2_932_897),
                    Value::Date(-719_529),
                ]),
            ),
            ("tm", Value::TimeMillis(45_296_789)),
            ("tu", Value::TimeMicros(45_296_789_012)),
            ("ts_ms", Value::TimestampMillis(1_700_000_000_123)),
            ("ts_us", Value::TimestampMicros(1_700_000_000_123_456)),
            ("ts_ns", Value::TimestampNanos(1_700_000_000_123_456_789)),
            ("before", Value::TimestampMillis(-1)),
            ("lts_ms", Value::LocalTimestampMillis(0)),
            ("lts_us", Value::LocalTimestampMicros(1_700_000_000_000_001)),
            ("lts_ns", Value::LocalTimestampNanos(-1)),
            (
                "dur",
                Value::Duration(Duration::new(
                    Months::new(14),
                    Days::new(3),
                    Millis::new(4_000_000_000),
                )),
            ),
            (
                "opt",
                Value::Array(vec![
                    some(0, Value::Null),
                    some(1, Value::String("x".into())),
                ]),
            ),
            ("inner", record(vec![("x", Value::Int(1))])),
            (
                "inners",
                Value::Map([("k".to_string(), record(vec![("x", Value::Int(2))]))].into()),
            ),
            ("again", some(1, record(vec![("x", Value::Int(3))]))),
        ]);
        let expected = concat!(
            r#"{"n":null,"b":true,"i":-7,"l":9223372036854775807,"f":0.1,"#,
            r#""d":[1.5,2,-0.25,1e300,5e-324,"NaN","Infinity","-Infinity"],"#,
            r#""s":"a\"b\\c\n\u0001é😀","by":"AAEC/w==","fx":"3q2+7w==","e":"GREEN","#,
            r#""decs":[12.345,-12.345,0.000,0.005,-0.001,"#,
            r#"123456789012345678901234567890123456789.012,"#,
            r#"-123456789012345678901234567890123456789.012,"#,
            r#"-170141183460469231731687303715884105.728],"#,
            r#""decf":-0.0001,"dec0":128,"big":-12345678901234567890.000123,"#,
            r#""u":"6f1d2c3b-0a9e-4d8c-b7a6-5e4f3d2c1b0a","#,
            r#""date":["2022-01-08","1969-12-31","+10000-01-01","-0001-12-31"],"#,
            r#""tm":"12:34:56.789000","tu":"12:34:56.789012","#,
            r#""ts_ms":"2023-11-14T22:13:20.123Z","ts_us":"2023-11-14T22:13:20.123456Z","#,
            r#""ts_ns":"2023-11-14T22:13:20.123456789Z","before":"1969-12-31T23:59:59.999Z","#,
            r#""lts_ms":"1970-01-01T00:00:00.000","lts_us":"2023-11-14T22:13:20.000001","#,
            r#""lts_ns":"1969-12-31T23:59:59.999999999","#,
            r#""dur":{"months":14,"days":3,"millis":4000000000},"#,
            r#""opt":[null,"x"],"inner":{"x":1},"inners":{"k":{"x":2}},"again":{"x":3}}"#,
        );
        let json = transcode(EVERY_TYPE, value).unwrap();
        assert_eq!(json, expected);
        serde_json::from_str::<serde::de::IgnoredAny>(&json).expect("valid JSON");
    }

    #[test]
    fn maps_hold_every_entry() {
        let schema = r#"{"type":"map","values":"long"}"#;
        let entries = (0..5).map(|i| (format!("k{i}"), Value::Long(i))).collect();
        let json = transcode(schema, Value::Map(entries)).unwrap();
        let parsed: std::collections::BTreeMap<String, i64> = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, (0..5).map(|i| (format!("k{i}"), i)).collect());
    }

    #[test]
    fn recursive_schemas_are_refused_and_references_resolve_in_their_namespace() {
        let list = r#"{"type":"record","name":"Node","namespace":"a.b","fields":[
            {"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}"#;
        let err = AvroTranscoder::new(list).err().unwrap();
        assert!(err.contains("recursive (a.b.Node holds itself)"), "{err}");
        // The same short name in two namespaces: each reference finds its own.
        let two = r#"{"type":"record","name":"Top","namespace":"x","fields":[
            {"name":"a","type":{"type":"record","name":"T","fields":[
                {"name":"d","type":{"type":"int","connect.name":"io.debezium.time.Date"}}]}},
            {"name":"b","type":{"type":"record","name":"T","namespace":"y","fields":[
                {"name":"d","type":"int"}]}},
            {"name":"c","type":"T"},
            {"name":"e","type":"y.T"}]}"#;
        let t = |d| record(vec![("d", Value::Int(d))]);
        let value = record(vec![("a", t(1)), ("b", t(2)), ("c", t(3)), ("e", t(4))]);
        assert_eq!(
            transcode(two, value).unwrap(),
            r#"{"a":{"d":"1970-01-02"},"b":{"d":2},"c":{"d":"1970-01-04"},"e":{"d":4}}"#
        );
    }

    #[test]
    fn debezium_micro_durations_become_iso_8601_seconds() {
        let schema = r#"{"type":"record","name":"R","fields":[
            {"name":"d","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroDuration"}},
            {"name":"maybe","type":["null",{"type":"long","connect.name":"io.debezium.time.MicroDuration"}],"default":null}]}"#;
        let value = |d: i64, maybe: Value| record(vec![("d", Value::Long(d)), ("maybe", maybe)]);
        assert_eq!(
            transcode(
                schema,
                value(93_784_500_000, some(1, Value::Long(-1_500_000)))
            )
            .unwrap(),
            r#"{"d":"PT93784.500000S","maybe":"PT-1.500000S"}"#
        );
        assert_eq!(
            transcode(schema, value(i64::MIN, some(0, Value::Null))).unwrap(),
            r#"{"d":"PT-9223372036854.775808S","maybe":null}"#
        );
    }

    /// A Debezium PostgreSQL connector's value schema as its AvroConverter registers it.
    pub(super) const DEBEZIUM: &str = r#"{"type":"record","name":"Envelope","namespace":"pg.public.orders","fields":[
        {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
            {"name":"id","type":"long"},
            {"name":"day","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null},
            {"name":"cdate","type":["null",{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}],"default":null},
            {"name":"at_ms","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}},
            {"name":"at_us","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}},
            {"name":"at_ns","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTimestamp"}},
            {"name":"cts","type":{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}},
            {"name":"zoned","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},
            {"name":"t_ms","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Time"}},
            {"name":"t_us","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}},
            {"name":"t_ns","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTime"}},
            {"name":"ctime","type":{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Time","logicalType":"time-millis"}},
            {"name":"price","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
            {"name":"plain_dec","type":{"type":"bytes","connect.version":1,"connect.parameters":{"scale":"3"},"connect.name":"org.apache.kafka.connect.data.Decimal"}},
            {"name":"amount","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null},
            {"name":"amount2","type":["null","io.debezium.data.VariableScaleDecimal"],"default":null},
            {"name":"doc","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}],"default":null},
            {"name":"uid","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}],"default":null}
          ],"connect.name":"pg.public.orders.Value"}],"default":null},
        {"name":"after","type":["null","Value"],"default":null},
        {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
            {"name":"version","type":"string"},
            {"name":"connector","type":"string"},
            {"name":"name","type":"string"},
            {"name":"ts_ms","type":"long"},
            {"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false,incremental"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},
            {"name":"db","type":"string"},
            {"name":"schema","type":"string"},
            {"name":"table","type":"string"},
            {"name":"txId","type":["null","long"],"default":null},
            {"name":"lsn","type":["null","long"],"default":null}
          ],"connect.name":"io.debezium.connector.postgresql.Source"}},
        {"name":"op","type":"string"},
        {"name":"ts_ms","type":["null","long"],"default":null},
        {"name":"transaction","type":["null",{"type":"record","name":"block","namespace":"event","fields":[
            {"name":"id","type":"string"},{"name":"total_order","type":"long"},{"name":"data_collection_order","type":"long"}
          ],"connect.version":1,"connect.name":"event.block"}],"default":null}
      ],"connect.version":1,"connect.name":"pg.public.orders.Envelope"}"#;

    /// A row of the Debezium table above, `id` and one shift of every value.
    fn debezium_row(id: i64) -> Value {
        let vsd = |scale: i32, bytes: &[u8]| {
            record(vec![
                ("scale", Value::Int(scale)),
                ("value", Value::Bytes(bytes.to_vec())),
            ])
        };
        record(vec![
            ("id", Value::Long(id)),
            ("day", some(1, Value::Int(19000))),
            ("cdate", some(1, Value::Date(-1))),
            ("at_ms", Value::Long(1_700_000_000_123)),
            ("at_us", Value::Long(1_700_000_000_123_456)),
            ("at_ns", Value::Long(1_700_000_000_123_456_789)),
            ("cts", Value::TimestampMillis(86_400_000)),
            (
                "zoned",
                some(1, Value::String("2024-01-01T10:00:00+02:00".into())),
            ),
            ("t_ms", Value::Int(45_296_789)),
            ("t_us", Value::Long(86_400_000_000)),
            ("t_ns", Value::Long(1)),
            ("ctime", Value::TimeMillis(0)),
            ("price", some(1, decimal(&[0x30, 0x39]))),
            ("plain_dec", Value::Bytes(vec![0xff, 0x85])),
            ("amount", some(1, vsd(4, &[0x30, 0x39]))),
            ("amount2", some(1, vsd(-2, &[0x05]))),
            ("doc", some(1, Value::String(r#" {"a": [1, "x"]} "#.into()))),
            (
                "uid",
                some(
                    1,
                    Value::String("0e7a9b3c-1d2e-4f50-8a6b-7c8d9e0f1a2b".into()),
                ),
            ),
        ])
    }

    const DEBEZIUM_ROW_JSON: &str = concat!(
        r#"{"id":ID,"day":"2022-01-08","cdate":"1969-12-31","#,
        r#""at_ms":"2023-11-14T22:13:20.123","at_us":"2023-11-14T22:13:20.123456","#,
        r#""at_ns":"2023-11-14T22:13:20.123456789","cts":"1970-01-02T00:00:00.000Z","#,
        r#""zoned":"2024-01-01T10:00:00+02:00","t_ms":"12:34:56.789000","#,
        r#""t_us":"24:00:00.000000","t_ns":"00:00:00.000000001","ctime":"00:00:00.000000","#,
        r#""price":123.45,"plain_dec":-0.123,"amount":1.2345,"amount2":500,"#,
        // The JSON text as it was, without the whitespace around it.
        r#""doc":{"a": [1, "x"]},"uid":"0e7a9b3c-1d2e-4f50-8a6b-7c8d9e0f1a2b"}"#,
    );

    /// A Debezium event: `op` with `before` and `after` as given.
    fn debezium_event(op: &str, before: Option<Value>, after: Option<Value>) -> Value {
        let side = |v: Option<Value>| match v {
            Some(v) => some(1, v),
            None => some(0, Value::Null),
        };
        let source = record(vec![
            ("version", Value::String("2.7.0.Final".into())),
            ("connector", Value::String("postgresql".into())),
            ("name", Value::String("pg".into())),
            ("ts_ms", Value::Long(1_700_000_000_000)),
            ("snapshot", some(0, Value::String("false".into()))),
            ("db", Value::String("shop".into())),
            ("schema", Value::String("public".into())),
            ("table", Value::String("orders".into())),
            ("txId", some(1, Value::Long(771))),
            ("lsn", some(0, Value::Null)),
        ]);
        record(vec![
            ("before", side(before)),
            ("after", side(after)),
            ("source", source),
            ("op", Value::String(op.into())),
            ("ts_ms", some(1, Value::Long(1_700_000_000_001))),
            ("transaction", some(0, Value::Null)),
        ])
    }

    fn row_json(id: i64) -> String {
        DEBEZIUM_ROW_JSON.replace("ID", &id.to_string())
    }

    const SOURCE_JSON: &str = concat!(
        r#""source":{"version":"2.7.0.Final","connector":"postgresql","name":"pg","#,
        r#""ts_ms":1700000000000,"snapshot":"false","db":"shop","schema":"public","#,
        r#""table":"orders","txId":771,"lsn":null}"#,
    );

    #[test]
    fn debezium_envelopes_transcode_whole_with_their_connect_types() {
        let create = transcode(DEBEZIUM, debezium_event("c", None, Some(debezium_row(1))));
        assert_eq!(
            create.unwrap(),
            format!(
                r#"{{"before":null,"after":{},{SOURCE_JSON},"op":"c","ts_ms":1700000000001,"transaction":null}}"#,
                row_json(1)
            )
        );
        let update = transcode(
            DEBEZIUM,
            debezium_event("u", Some(debezium_row(1)), Some(debezium_row(2))),
        );
        assert_eq!(
            update.unwrap(),
            format!(
                r#"{{"before":{},"after":{},{SOURCE_JSON},"op":"u","ts_ms":1700000000001,"transaction":null}}"#,
                row_json(1),
                row_json(2)
            )
        );
        let delete = transcode(DEBEZIUM, debezium_event("d", Some(debezium_row(2)), None));
        assert_eq!(
            delete.unwrap(),
            format!(
                r#"{{"before":{},"after":null,{SOURCE_JSON},"op":"d","ts_ms":1700000000001,"transaction":null}}"#,
                row_json(2)
            )
        );
    }

    #[test]
    fn a_json_string_that_is_not_json_is_an_error() {
        let mut row = debezium_row(1);
        if let Value::Record(fields) = &mut row {
            fields[16].1 = some(1, Value::String("{not json".into()));
        }
        let err = transcode(DEBEZIUM, debezium_event("c", None, Some(row))).unwrap_err();
        assert!(err.contains("io.debezium.data.Json"), "{err}");
    }

    #[test]
    fn truncated_and_overlong_payloads_are_errors() {
        let schema = r#"{"type":"record","name":"R","fields":[
            {"name":"a","type":"long"},{"name":"s","type":"string"},
            {"name":"o","type":["null","boolean"]},{"name":"b","type":"boolean"}]}"#;
        let t = AvroTranscoder::new(schema).unwrap();
        let value = record(vec![
            ("a", Value::Long(300)),
            ("s", Value::String("hello".into())),
            ("o", some(1, Value::Boolean(true))),
            ("b", Value::Boolean(false)),
        ]);
        let payload =
            apache_avro::to_avro_datum(&Schema::parse_str(schema).unwrap(), value).unwrap();
        let mut out = String::new();
        t.to_json(&payload, &mut out).unwrap();
        assert_eq!(out, r#"{"a":300,"s":"hello","o":true,"b":false}"#);
        // Every strict prefix fails, including those apache-avro alone would read as nulls.
        for end in 0..payload.len() {
            let mut out = String::from("kept");
            let err = t.to_json(&payload[..end], &mut out).unwrap_err();
            assert!(err.contains("ends early"), "{end}: {err}");
            assert_eq!(out, "kept", "nothing is appended on an error");
        }
        let mut longer = payload.clone();
        longer.push(0);
        let err = t.to_json(&longer, &mut String::new()).unwrap_err();
        assert!(err.contains("1 bytes follow the Avro datum"), "{err}");
        // A bad union branch or enum index, and a bad boolean, say what apache-avro found.
        let err = t
            .to_json(&[0x02, 0x00, 0x08, 0x00], &mut String::new())
            .unwrap_err();
        assert!(err.contains("not Avro of its schema"), "{err}");
    }

    #[test]
    fn invalid_schemas_are_clear_errors() {
        let err = AvroTranscoder::new("{not json").err().unwrap();
        assert!(err.starts_with("the Avro schema is not JSON"), "{err}");
        for bad in [
            r#"{"type":"record","name":"R"}"#,
            r#"{"type":"nosuchtype"}"#,
            r#"["int","int"]"#,
            r#"{"type":"record","name":"R","fields":[{"name":"x","type":"Undefined"}]}"#,
            r#"{"type":"enum","name":"E","symbols":["A","A"]}"#,
        ] {
            let err = AvroTranscoder::new(bad).err().unwrap();
            assert!(err.starts_with("invalid Avro schema: "), "{bad}: {err}");
        }
    }

    #[test]
    fn values_outside_their_range_are_errors() {
        let time = r#"{"type":"long","logicalType":"time-micros"}"#;
        let err = transcode(time, Value::TimeMicros(86_400_000_001)).unwrap_err();
        assert!(err.contains("not between 00:00 and 24:00"), "{err}");
        let ts = r#"{"type":"long","logicalType":"timestamp-micros"}"#;
        let err = transcode(ts, Value::TimestampMicros(i64::MAX)).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        let date = r#"{"type":"int","logicalType":"date"}"#;
        assert!(transcode(date, Value::Date(i32::MAX)).is_err());
        let vsd = r#"{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data",
            "fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}]}"#;
        let huge_scale = record(vec![
            ("scale", Value::Int(i32::MAX)),
            ("value", Value::Bytes(vec![1])),
        ]);
        let err = transcode(vsd, huge_scale).unwrap_err();
        assert!(err.contains("scale"), "{err}");
        let long = r#"{"type":"bytes","connect.name":"org.apache.kafka.connect.data.Decimal"}"#;
        let err = transcode(long, Value::Bytes(vec![1; 129])).unwrap_err();
        assert!(err.contains("too long"), "{err}");
    }

    /// A schema of `depth` records, each an optional field of the one around it.
    fn nested_schema(depth: usize) -> String {
        let mut schema = r#"{"type":"record","name":"N0","fields":[]}"#.to_string();
        for i in 1..depth {
            schema = format!(
                r#"{{"type":"record","name":"N{i}","fields":[{{"name":"n","type":["null",{schema}]}}]}}"#
            );
        }
        schema
    }

    /// The value of `nested_schema(depth)` with every level present.
    fn nested_value(depth: usize) -> Value {
        let mut v = record(vec![]);
        for _ in 1..depth {
            v = record(vec![("n", some(1, v))]);
        }
        v
    }

    #[test]
    fn nesting_is_bounded_like_json_nesting() {
        // A schema's own nesting is bounded by serde_json's limit on the schema text.
        let json = transcode(&nested_schema(20), nested_value(20)).unwrap();
        assert!(json.ends_with(&"}".repeat(20)), "{json}");
        let err = AvroTranscoder::new(&nested_schema(40)).err().unwrap();
        assert!(err.contains("recursion limit"), "{err}");
        // What is written is bounded as the mapping bounds JSON.
        let t = AvroTranscoder::new(r#"{"type":"array","items":"int"}"#).unwrap();
        let mut out = String::new();
        let deep = nested_value(MAX_JSON_DEPTH);
        assert!(t.write(&deep, PLAIN, 0, &mut out).is_ok());
        let err = t
            .write(&record(vec![("n", deep)]), PLAIN, 0, &mut out)
            .unwrap_err();
        assert!(err.contains("nests deeper than 64"), "{err}");
    }

    #[test]
    fn json_text_inside_avro_counts_toward_the_nesting_bound() {
        let schema = r#"{"type":"record","name":"R","fields":[{"name":"j","type":
            {"type":"string","connect.name":"io.debezium.data.Json"}}]}"#;
        let json = |depth: usize| {
            record(vec![(
                "j",
                Value::String(format!("{}{}", "[".repeat(depth), "]".repeat(depth))),
            )])
        };
        // The record is one level; its JSON text may add the rest.
        let shallow = transcode(schema, json(MAX_JSON_DEPTH - 1)).unwrap();
        assert!(shallow.starts_with(r#"{"j":[[["#), "{shallow}");
        let err = transcode(schema, json(MAX_JSON_DEPTH)).unwrap_err();
        assert!(err.contains("nests deeper than 64"), "{err}");
    }

    #[test]
    fn random_payloads_never_panic() {
        let transcoders: Vec<AvroTranscoder> = [EVERY_TYPE, DEBEZIUM]
            .iter()
            .map(|s| AvroTranscoder::new(s).unwrap())
            .collect();
        // A fixed xorshift, so a failure can be replayed.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 200) as usize;
            let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            for t in &transcoders {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if let Ok(out) = checked_json(t, &payload) {
                        serde_json::from_str::<serde::de::IgnoredAny>(&out)
                            .expect("what is written is JSON");
                    }
                }));
                assert!(result.is_ok(), "panicked on {payload:?}");
            }
        }
    }

    /// Mapping without a database: a table described by hand, as `mapping/tests.rs` does.
    mod through_the_mapping {
        use bytes::BytesMut;
        use chrono::{NaiveDate, NaiveDateTime};
        use postgres_types::{ToSql, Type};

        use super::*;
        use crate::mapping::test_support::{first_row, nullable, table, topic};
        use crate::mapping::{EncodeError, TableRows, TopicMapper};
        use crate::pgcopy::encode_numeric;
        use crate::record::RecordView;
        use crate::schema::ColumnType;

        fn mapper(
            columns: &[(&str, ColumnType)],
            primary_key: &[&str],
            extra: &str,
        ) -> TopicMapper {
            TopicMapper::new(&topic(extra), table(nullable(columns), primary_key)).unwrap()
        }

        /// Maps one record whose value is `json`, into `rows`.
        fn encode(m: &TopicMapper, json: &str, rows: &mut TableRows) {
            let record = RecordView {
                topic: "topic",
                partition: 0,
                offset: 1,
                timestamp: None,
                key: None,
                value: Some(json.as_bytes()),
                headers: &[],
            };
            match m.encode(&record, rows) {
                Ok(()) => {}
                Err(EncodeError::Invalid(e)) => panic!("{e} in {json}"),
                Err(EncodeError::NeedsFreshBatch) => panic!("a fresh batch never changes shape"),
                Err(EncodeError::NeedSchema(id)) => panic!("JSON text needs no schema ({id})"),
            }
        }

        fn sql<T: ToSql>(v: T, ty: &Type) -> Option<Vec<u8>> {
            let mut out = BytesMut::new();
            v.to_sql(ty, &mut out).unwrap();
            Some(out.to_vec())
        }

        fn numeric(text: &str) -> Option<Vec<u8>> {
            let mut out = BytesMut::new();
            encode_numeric(text, &mut out).unwrap();
            Some(out.to_vec())
        }

        fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, micro: u32) -> NaiveDateTime {
            NaiveDate::from_ymd_opt(y, mo, d)
                .unwrap()
                .and_hms_micro_opt(h, mi, s, micro)
                .unwrap()
        }

        const ROW_SCHEMA: &str = r#"{"type":"record","name":"Row","fields":[
            {"name":"t","type":"string"},
            {"name":"t2","type":{"type":"long","logicalType":"time-micros"}},
            {"name":"i2","type":"int"},
            {"name":"i4","type":"int"},
            {"name":"i8","type":"long"},
            {"name":"i8dec","type":{"type":"bytes","logicalType":"decimal","precision":10}},
            {"name":"num","type":{"type":"bytes","logicalType":"decimal","precision":50,"scale":2}},
            {"name":"num2","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data",
                "fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],
                "connect.name":"io.debezium.data.VariableScaleDecimal"}},
            {"name":"f4","type":"float"},
            {"name":"f8","type":"double"},
            {"name":"f8nan","type":"double"},
            {"name":"bo","type":"boolean"},
            {"name":"tz","type":{"type":"long","logicalType":"timestamp-nanos"}},
            {"name":"tzfar","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"tzold","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"ts","type":{"type":"long","logicalType":"local-timestamp-micros"}},
            {"name":"ts2","type":{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}},
            {"name":"dt","type":{"type":"int","logicalType":"date"}},
            {"name":"dt2","type":["null",{"type":"int","connect.name":"io.debezium.time.Date"}]},
            {"name":"dtfar","type":{"type":"int","logicalType":"date"}},
            {"name":"u","type":{"type":"string","logicalType":"uuid"}},
            {"name":"js","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}},
            {"name":"jb","type":{"type":"string","connect.name":"io.debezium.data.Json"}},
            {"name":"dur","type":{"type":"fixed","name":"D","size":12,"logicalType":"duration"}},
            {"name":"by","type":"bytes"},
            {"name":"nothing","type":["null","long"]}
        ]}"#;

        #[test]
        fn transcoded_values_fit_every_column_type() {
            use ColumnType::*;
            let columns = [
                ("t", Text),
                ("t2", Text),
                ("i2", Int2),
                ("i4", Int4),
                ("i8", Int8),
                ("i8dec", Int8),
                ("num", Numeric),
                ("num2", Numeric),
                ("f4", Float4),
                ("f8", Float8),
                ("f8nan", Float8),
                ("bo", Bool),
                ("tz", Timestamptz),
                ("tzfar", Timestamptz),
                ("tzold", Timestamptz),
                ("ts", Timestamp),
                ("ts2", Timestamp),
                ("dt", Date),
                ("dt2", Date),
                ("dtfar", Date),
                ("u", Uuid),
                ("js", Json),
                ("jb", Jsonb),
                ("dur", Jsonb),
                ("by", Bytea),
                ("nothing", Int8),
            ];
            let far = at(10000, 1, 1, 0, 0, 0, 1).and_utc();
            let old = at(-1, 12, 31, 23, 59, 59, 999_000).and_utc();
            let value = record(vec![
                ("t", Value::String("h\u{e9}llo \"q\"".into())),
                ("t2", Value::TimeMicros(45_296_789_012)),
                ("i2", Value::Int(-5)),
                ("i4", Value::Int(i32::MIN)),
                ("i8", Value::Long(i64::MAX)),
                ("i8dec", decimal(&[0x2a])),
                ("num", decimal(&MINUS_HUGE)),
                (
                    "num2",
                    record(vec![
                        ("scale", Value::Int(4)),
                        ("value", Value::Bytes(vec![0x30, 0x39])),
                    ]),
                ),
                ("f4", Value::Float(0.1)),
                ("f8", Value::Double(-2.5e-300)),
                ("f8nan", Value::Double(f64::NAN)),
                ("bo", Value::Boolean(true)),
                ("tz", Value::TimestampNanos(1_700_000_000_123_456_789)),
                ("tzfar", Value::TimestampMicros(far.timestamp_micros())),
                ("tzold", Value::TimestampMillis(old.timestamp_millis())),
                ("ts", Value::LocalTimestampMicros(-1)),
                ("ts2", Value::Long(1_700_000_000_000_001)),
                ("dt", Value::Date(19000)),
                ("dt2", some(1, Value::Int(-1))),
                ("dtfar", Value::Date(2_932_897)),
                (
                    "u",
                    Value::Uuid(
                        uuid::Uuid::parse_str("0e7a9b3c-1d2e-4f50-8a6b-7c8d9e0f1a2b").unwrap(),
                    ),
                ),
                ("js", record(vec![("x", Value::Int(1))])),
                ("jb", Value::String(r#"{"a":[1,2]}"#.into())),
                (
                    "dur",
                    Value::Duration(Duration::new(Months::new(1), Days::new(2), Millis::new(3))),
                ),
                ("by", Value::Bytes(vec![0, 1, 254, 255])),
                ("nothing", some(0, Value::Null)),
            ]);
            let json = transcode(ROW_SCHEMA, value.clone()).unwrap();
            let m = mapper(&columns, &[], "");
            let mut rows = m.new_rows();
            encode(&m, &json, &mut rows);
            let jsonb = |text: &str| Some([&[1u8][..], text.as_bytes()].concat());
            let expected = vec![
                Some("h\u{e9}llo \"q\"".as_bytes().to_vec()),
                Some(b"12:34:56.789012".to_vec()),
                sql(-5i16, &Type::INT2),
                sql(i32::MIN, &Type::INT4),
                sql(i64::MAX, &Type::INT8),
                sql(42i64, &Type::INT8),
                numeric("-1234567890123456789012345678901234567890.12"),
                numeric("1.2345"),
                sql(0.1f32, &Type::FLOAT4),
                sql(-2.5e-300f64, &Type::FLOAT8),
                sql(f64::NAN, &Type::FLOAT8),
                sql(true, &Type::BOOL),
                // PostgreSQL keeps microseconds.
                sql(
                    at(2023, 11, 14, 22, 13, 20, 123_456).and_utc(),
                    &Type::TIMESTAMPTZ,
                ),
                sql(far, &Type::TIMESTAMPTZ),
                sql(old, &Type::TIMESTAMPTZ),
                sql(at(1969, 12, 31, 23, 59, 59, 999_999), &Type::TIMESTAMP),
                sql(at(2023, 11, 14, 22, 13, 20, 1), &Type::TIMESTAMP),
                sql(NaiveDate::from_ymd_opt(2022, 1, 8).unwrap(), &Type::DATE),
                sql(NaiveDate::from_ymd_opt(1969, 12, 31).unwrap(), &Type::DATE),
                sql(NaiveDate::from_ymd_opt(10000, 1, 1).unwrap(), &Type::DATE),
                Some(
                    uuid::Uuid::parse_str("0e7a9b3c-1d2e-4f50-8a6b-7c8d9e0f1a2b")
                        .unwrap()
                        .as_bytes()
                        .to_vec(),
                ),
                Some(br#"{"x":1}"#.to_vec()),
                jsonb(r#"{"a":[1,2]}"#),
                jsonb(r#"{"months":1,"days":2,"millis":3}"#),
                Some(vec![0, 1, 254, 255]),
                None,
            ];
            let got = first_row(rows.shapes[0].buffer.as_bytes());
            assert_eq!(got.len(), expected.len());
            for ((name, _), (got, want)) in columns.iter().zip(got.iter().zip(&expected)) {
                assert_eq!(got, want, "column {name}");
            }

            // Read as Avro, the fields go to their columns without the JSON being scanned
            // (`to_json_fields`), and the row is the same, byte for byte; so are columns
            // that point into a field, and a column whose field the schema lacks.
            let pointer_columns = r#"columns = { nested = "/js/x", absent = "/nope" }"#;
            let mut with = columns.to_vec();
            with.extend([("nested", Int4), ("absent", Int4)]);
            let from_json = mapper(&with, &[], pointer_columns);
            let mut from_avro =
                mapper(&with, &[], &format!("format = \"avro\"\n{pointer_columns}"));
            let schema = crate::registry::RegisteredSchema::new(
                crate::registry::SchemaKind::Avro,
                ROW_SCHEMA,
            );
            from_avro.learn(7, &schema).unwrap();
            let payload =
                apache_avro::to_avro_datum(&Schema::parse_str(ROW_SCHEMA).unwrap(), value).unwrap();
            let framed = [&[0u8, 0, 0, 0, 7][..], &payload].concat();
            let (mut a, mut b) = (from_json.new_rows(), from_avro.new_rows());
            encode(&from_json, &json, &mut a);
            let record = RecordView {
                topic: "topic",
                partition: 0,
                offset: 1,
                timestamp: None,
                key: None,
                value: Some(&framed),
                headers: &[],
            };
            from_avro.encode(&record, &mut b).unwrap();
            let (a, b) = (
                first_row(a.shapes[0].buffer.as_bytes()),
                first_row(b.shapes[0].buffer.as_bytes()),
            );
            assert_eq!(a.len(), with.len());
            assert_eq!(a, b);
            assert_eq!(a[with.len() - 2], sql(1i32, &Type::INT4));
            assert_eq!(a[with.len() - 1], None);
        }

        #[test]
        fn debezium_avro_events_write_and_delete_rows() {
            use ColumnType::*;
            let m = mapper(
                &[
                    ("id", Int8),
                    ("day", Date),
                    ("at_us", Timestamp),
                    ("price", Numeric),
                    ("amount", Numeric),
                    ("doc", Jsonb),
                    ("t_ms", Text),
                ],
                &["id"],
                "format = \"debezium\"",
            );
            let mut rows = m.new_rows();
            for event in [
                debezium_event("c", None, Some(debezium_row(1))),
                debezium_event("u", Some(debezium_row(1)), Some(debezium_row(2))),
                debezium_event("d", Some(debezium_row(3)), None),
            ] {
                encode(&m, &transcode(DEBEZIUM, event).unwrap(), &mut rows);
            }
            assert_eq!(rows.shapes.len(), 1);
            assert_eq!(rows.shapes[0].buffer.rows(), 2);
            assert_eq!(rows.deletes.as_ref().map(|d| d.buffer.rows()), Some(1));
            // Upsert rows end with their ordinal, which is not a column.
            assert_eq!(
                first_row(rows.shapes[0].buffer.as_bytes())[..7],
                [
                    sql(1i64, &Type::INT8),
                    sql(NaiveDate::from_ymd_opt(2022, 1, 8).unwrap(), &Type::DATE),
                    sql(at(2023, 11, 14, 22, 13, 20, 123_456), &Type::TIMESTAMP),
                    numeric("123.45"),
                    numeric("1.2345"),
                    Some([&[1u8][..], br#"{"a": [1, "x"]}"#].concat()),
                    Some(b"12:34:56.789000".to_vec()),
                ]
            );
            let deletes = rows.deletes.as_ref().unwrap().buffer.as_bytes();
            assert_eq!(first_row(deletes)[0], sql(3i64, &Type::INT8));
        }
    }
}

/// Schemas and payloads built to break the transcoder: each is an error, never a panic, an
/// abort or an unbounded allocation.
#[cfg(test)]
mod hostile {
    use super::*;

    /// Avro's zigzag varint of `n`.
    fn long(n: i64) -> Vec<u8> {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let byte = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn transcode(schema: &str, payload: &[u8]) -> Result<String, String> {
        let t = AvroTranscoder::new(schema)?;
        let mut out = String::new();
        t.to_json(payload, &mut out).map(|()| out)
    }

    #[test]
    fn a_big_decimal_scale_from_the_payload_is_bounded() {
        let schema = r#"{"type":"bytes","logicalType":"big-decimal"}"#;
        for scale in [i64::MAX, i64::MIN, 1_001, -1_001] {
            let mut inner = vec![2, 5]; // one byte of unscaled integer: 5
            inner.extend(long(scale));
            let mut payload = long(inner.len() as i64);
            payload.extend(inner);
            let err = transcode(schema, &payload).unwrap_err();
            assert!(err.contains("out of range"), "{scale}: {err}");
        }
        let mut inner = vec![2, 5];
        inner.extend(long(2));
        let mut payload = long(inner.len() as i64);
        payload.extend(inner);
        assert_eq!(transcode(schema, &payload).unwrap(), "0.05");
    }

    #[test]
    fn a_connect_decimal_scale_from_the_schema_is_bounded() {
        let schema = r#"{"type":"bytes","connect.name":"org.apache.kafka.connect.data.Decimal",
                         "connect.parameters":{"scale":"-9223372036854775808"}}"#;
        let err = transcode(schema, &[2, 5]).unwrap_err();
        assert!(err.contains("out of range"), "{err}");
    }

    #[test]
    fn a_huge_fixed_is_refused_before_any_record() {
        let schema = r#"{"type":"record","name":"R","fields":[
            {"name":"f","type":{"type":"fixed","name":"F","size":1000000000000}}]}"#;
        let err = AvroTranscoder::new(schema).err().expect("refused");
        assert!(err.contains("fixed of 1000000000000 bytes"), "{err}");
    }

    #[test]
    fn a_schema_that_expands_exponentially_is_refused() {
        // T0 holds two T1, T1 two T2, …: 2^40 copies once references are inlined.
        let mut types = vec![
            r#"{"type":"record","name":"T40","fields":[{"name":"x","type":"int"}]}"#.to_string(),
        ];
        for i in (0..40).rev() {
            types.push(format!(
                r#"{{"type":"record","name":"T{i}","fields":[{{"name":"a","type":"T{n}"}},{{"name":"b","type":"T{n}"}}]}}"#,
                n = i + 1
            ));
        }
        // Named types are defined where first used: nest each definition in the next record.
        let mut schema = types[0].clone();
        for (k, t) in types.iter().enumerate().skip(1) {
            let i = 40 - k;
            schema = t.replacen(
                &format!(r#""type":"T{}""#, i + 1),
                &format!(r#""type":{schema}"#),
                1,
            );
        }
        let err = AvroTranscoder::new(&schema).err().expect("refused");
        assert!(err.contains("too many nested types"), "{err}");
    }
}
