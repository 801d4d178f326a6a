//! Avro into JSON text for the registry formats: apache-avro decodes the binary datum against
//! the writer schema, and the value is written as JSON by `transcode`'s conventions, so the
//! JSON mapping takes it unchanged.
//!
//! Kafka Connect and Debezium name their types with `connect.name` on the schema
//! (`{"type":"int","connect.name":"io.debezium.time.Date"}`), which apache-avro drops from
//! primitive schemas. So the schema JSON is also walked here, once, into a plan that says how
//! to write the value at each position; decoding itself is apache-avro's.
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

use apache_avro::schema::{Name, Namespace, NamesRef, ResolvedSchema, Schema, UnionSchema};
use apache_avro::types::Value;
use base64::Engine as _;
use chrono::{DateTime, Datelike, NaiveDate, Timelike};
use serde_json::Value as Json;

use super::transcode::Transcoder;
use super::MAX_JSON_DEPTH;

/// One Avro writer schema (a registry schema id), compiled for decoding records into JSON.
#[allow(dead_code)] // wired into encode with the registry formats
pub(crate) struct AvroTranscoder {
    /// The writer schema, with named references replaced by their definitions unless the
    /// schema is recursive: then apache-avro needs no name table, which it would otherwise
    /// rebuild for every record.
    schema: Schema,
    /// `schema` still holds references (it is recursive), so decoding must resolve names.
    has_refs: bool,
    /// How each position's value is written; `plan[PLAIN]` is "as the value says".
    plan: Vec<Node>,
    /// The plan node of the schema's top.
    root: usize,
}

/// The plan node for values written as their Avro type says, with no hint.
const PLAIN: usize = 0;

/// The largest string, bytes or array length apache-avro allocates for, instead of its 512 MiB
/// default: a few bytes of a bad payload could otherwise make it reserve gigabytes (an array
/// length is reserved before its items are read). Records are limited to
/// `max_record_bytes` (16 MiB by default) anyway.
const MAX_ALLOCATION_BYTES: usize = 16 << 20;

/// A decimal's digits are computed by long division, so its length is bounded; as for
/// Connect's base64 decimals.
const MAX_DECIMAL_BYTES: usize = 128;

/// PostgreSQL's `numeric` takes scales from -1000 to 1000; a larger one (from a bad payload's
/// `VariableScaleDecimal`) would only write a long run of zeros.
const MAX_DECIMAL_SCALE: i64 = 1000;

/// How the value at one schema position is written, beyond what its Avro type says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// As the value's own type says.
    Plain,
    /// A record: its fields' JSON keys (quoted, with the colon) and plan nodes, in order.
    Record { keys: Vec<String>, fields: Vec<usize> },
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
    /// A string holding JSON text (`io.debezium.data.Json`): written as that JSON.
    JsonText,
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
    #[allow(dead_code)] // wired into encode with the registry formats
    pub(crate) fn new(schema_json: &str) -> Result<Self, String> {
        let json: Json = serde_json::from_str(schema_json)
            .map_err(|e| format!("the Avro schema is not JSON: {e}"))?;
        let parsed = Schema::parse(&json).map_err(|e| format!("invalid Avro schema: {e}"))?;
        let mut planner = Planner {
            nodes: vec![Node::Plain],
            names: Default::default(),
        };
        let root = planner.compile(&json, "");
        let inlined = ResolvedSchema::try_from(&parsed)
            .ok()
            .and_then(|r| inline_refs(&parsed, r.get_names(), &None, &mut Vec::new()));
        // Process-wide and set once; this module is apache-avro's only user.
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES);
        let (schema, has_refs) = match inlined {
            Some(schema) => (schema, false),
            None => (parsed, true),
        };
        Ok(Self {
            schema,
            has_refs,
            plan: planner.nodes,
            root,
        })
    }

    /// Writes `value` as plan node `node` says. `depth` counts the arrays, maps and records
    /// around it, bounded as the JSON mapping bounds nesting.
    fn write(&self, value: &Value, node: usize, depth: usize, out: &mut String) -> Result<(), String> {
        let node = self.plan.get(node).unwrap_or(&Node::Plain);
        let nested = || {
            if depth >= MAX_JSON_DEPTH {
                Err(format!("the value nests deeper than {MAX_JSON_DEPTH} levels"))
            } else {
                Ok(depth + 1)
            }
        };
        match value {
            Value::Null => out.push_str("null"),
            Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => match node {
                Node::Days => write_date(i64::from(*n), out)?,
                Node::TimeOfDay(unit) => write_time_of_day(i64::from(*n), *unit, out)?,
                Node::Epoch { unit, zone } => write_timestamp(i64::from(*n), *unit, *zone, out)?,
                _ => push_display(out, n),
            },
            Value::Long(n) => match node {
                Node::Days => write_date(*n, out)?,
                Node::TimeOfDay(unit) => write_time_of_day(*n, *unit, out)?,
                Node::Epoch { unit, zone } => write_timestamp(*n, *unit, *zone, out)?,
                _ => push_display(out, n),
            },
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
                Node::JsonText => {
                    serde_json::from_str::<serde::de::IgnoredAny>(s)
                        .map_err(|e| format!("an io.debezium.data.Json string is not JSON: {e}"))?;
                    out.push_str(s);
                }
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
                    Node::Record { keys, fields: plans } if keys.len() == fields.len() => {
                        (Some(keys), Some(plans))
                    }
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
            Value::BigDecimal(d) => out.push_str(&d.to_plain_string()),
            Value::TimeMillis(t) => write_time_of_day(i64::from(*t), Unit::Millis, out)?,
            Value::TimeMicros(t) => write_time_of_day(*t, Unit::Micros, out)?,
            Value::TimestampMillis(t) => write_timestamp(*t, Unit::Millis, true, out)?,
            Value::TimestampMicros(t) => write_timestamp(*t, Unit::Micros, true, out)?,
            Value::TimestampNanos(t) => write_timestamp(*t, Unit::Nanos, true, out)?,
            Value::LocalTimestampMillis(t) => write_timestamp(*t, Unit::Millis, false, out)?,
            Value::LocalTimestampMicros(t) => write_timestamp(*t, Unit::Micros, false, out)?,
            Value::LocalTimestampNanos(t) => write_timestamp(*t, Unit::Nanos, false, out)?,
            Value::Duration(d) => {
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
        let mut reader = Payload {
            rest: payload,
            ran_out: false,
        };
        let decoded = if self.has_refs {
            apache_avro::from_avro_datum(&self.schema, &mut reader, None)
        } else {
            apache_avro::from_avro_datum_schemata(&self.schema, Vec::new(), &mut reader, None)
        };
        // apache-avro reads a missing boolean, string or union branch at the end of the input
        // as null, so running out is noticed here, not from its result.
        if reader.ran_out {
            return Err(format!(
                "the Avro payload ends early ({} bytes): it is truncated or not of this schema",
                payload.len()
            ));
        }
        let value = decoded.map_err(|e| format!("the payload is not Avro of its schema: {e}"))?;
        if !reader.rest.is_empty() {
            return Err(format!(
                "{} bytes follow the Avro datum: the payload is not of this schema",
                reader.rest.len()
            ));
        }
        let start = out.len();
        self.write(&value, self.root, 0, out)
            .inspect_err(|_| out.truncate(start))
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

/// Builds the plan from the schema JSON, resolving named types as Avro does.
struct Planner {
    nodes: Vec<Node>,
    /// Full name of each named type → its plan node.
    names: std::collections::HashMap<String, usize>,
}

impl Planner {
    fn push(&mut self, node: Node) -> usize {
        if node == Node::Plain {
            return PLAIN;
        }
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The plan node of schema `s` in namespace `ns`. apache-avro has already checked the
    /// schema, so whatever is not understood here is simply written plainly.
    fn compile(&mut self, s: &Json, ns: &str) -> usize {
        match s {
            Json::String(name) => self.named(name, ns),
            Json::Array(branches) => {
                let branches = branches.iter().map(|b| self.compile(b, ns)).collect();
                self.push(Node::Union(branches))
            }
            Json::Object(o) => match o.get("type") {
                Some(Json::String(ty)) => self.compile_object(ty, o, ns),
                Some(nested @ (Json::Object(_) | Json::Array(_))) => self.compile(nested, ns),
                _ => PLAIN,
            },
            _ => PLAIN,
        }
    }

    /// A reference to a named type (or a primitive type's name).
    fn named(&self, name: &str, ns: &str) -> usize {
        if name.contains('.') || ns.is_empty() {
            return self.names.get(name).copied().unwrap_or(PLAIN);
        }
        self.names
            .get(&format!("{ns}.{name}"))
            .or_else(|| self.names.get(name))
            .copied()
            .unwrap_or(PLAIN)
    }

    fn compile_object(&mut self, ty: &str, o: &serde_json::Map<String, Json>, ns: &str) -> usize {
        let connect = o.get("connect.name").and_then(Json::as_str).unwrap_or("");
        let logical = o.get("logicalType").and_then(Json::as_str).unwrap_or("");
        match ty {
            "record" | "error" | "enum" | "fixed" => {
                let (full, inner_ns) = full_name(o, ns);
                // Registered before the fields, so a recursive reference finds it.
                self.nodes.push(Node::Plain);
                let id = self.nodes.len() - 1;
                self.names.insert(full.clone(), id);
                self.nodes[id] = match ty {
                    "fixed" if connect == "org.apache.kafka.connect.data.Decimal" => {
                        Node::Decimal {
                            scale: connect_scale(o),
                            bytes_too: true,
                        }
                    }
                    "fixed" if logical == "decimal" => Node::Decimal {
                        scale: int_attribute(o.get("scale")).unwrap_or(0),
                        bytes_too: false,
                    },
                    "record" | "error" => {
                        let mut keys = Vec::new();
                        let mut fields = Vec::new();
                        for f in o.get("fields").and_then(Json::as_array).into_iter().flatten() {
                            let name = f.get("name").and_then(Json::as_str).unwrap_or_default();
                            let mut key = String::new();
                            write_str(name, &mut key);
                            key.push(':');
                            keys.push(key);
                            fields.push(f.get("type").map_or(PLAIN, |t| self.compile(t, &inner_ns)));
                        }
                        if connect == "io.debezium.data.VariableScaleDecimal"
                            || full == "io.debezium.data.VariableScaleDecimal"
                        {
                            Node::VariableDecimal
                        } else {
                            Node::Record { keys, fields }
                        }
                    }
                    _ => Node::Plain,
                };
                id
            }
            "array" => {
                let items = o.get("items").map_or(PLAIN, |s| self.compile(s, ns));
                self.push(Node::Array(items))
            }
            "map" => {
                let values = o.get("values").map_or(PLAIN, |s| self.compile(s, ns));
                self.push(Node::Map(values))
            }
            "null" | "boolean" | "int" | "long" | "float" | "double" | "bytes" | "string" => {
                self.push(primitive(connect, logical, o))
            }
            name => self.named(name, ns),
        }
    }
}

/// A primitive type's node, from its Connect name (or, for decimals, its logical type).
fn primitive(connect: &str, logical: &str, o: &serde_json::Map<String, Json>) -> Node {
    match connect {
        "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => Node::Days,
        // Debezium's timestamps are wall-clock times of a column without a zone; Connect's
        // is a java.util.Date, an instant.
        "io.debezium.time.Timestamp" => Node::Epoch {
            unit: Unit::Millis,
            zone: false,
        },
        "io.debezium.time.MicroTimestamp" => Node::Epoch {
            unit: Unit::Micros,
            zone: false,
        },
        "io.debezium.time.NanoTimestamp" => Node::Epoch {
            unit: Unit::Nanos,
            zone: false,
        },
        "org.apache.kafka.connect.data.Timestamp" => Node::Epoch {
            unit: Unit::Millis,
            zone: true,
        },
        "io.debezium.time.Time" | "org.apache.kafka.connect.data.Time" => {
            Node::TimeOfDay(Unit::Millis)
        }
        "io.debezium.time.MicroTime" => Node::TimeOfDay(Unit::Micros),
        "io.debezium.time.NanoTime" => Node::TimeOfDay(Unit::Nanos),
        "io.debezium.data.Json" => Node::JsonText,
        "org.apache.kafka.connect.data.Decimal" => Node::Decimal {
            scale: connect_scale(o),
            bytes_too: true,
        },
        _ if logical == "decimal" => Node::Decimal {
            scale: int_attribute(o.get("scale")).unwrap_or(0),
            bytes_too: false,
        },
        _ => Node::Plain,
    }
}

/// Connect's decimal scale: `connect.parameters.scale` (a string), else Avro's `scale`.
fn connect_scale(o: &serde_json::Map<String, Json>) -> i64 {
    int_attribute(o.get("connect.parameters").and_then(|p| p.get("scale")))
        .or_else(|| int_attribute(o.get("scale")))
        .unwrap_or(0)
}

/// An integer attribute written as a number or as a string of one.
fn int_attribute(v: Option<&Json>) -> Option<i64> {
    match v? {
        Json::Number(n) => n.as_i64(),
        Json::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A named type's full name and the namespace its fields resolve names in.
fn full_name(o: &serde_json::Map<String, Json>, ns: &str) -> (String, String) {
    let name = o.get("name").and_then(Json::as_str).unwrap_or_default();
    if let Some((space, _)) = name.rsplit_once('.') {
        return (name.to_string(), space.to_string());
    }
    let space = o.get("namespace").and_then(Json::as_str).unwrap_or(ns);
    if space.is_empty() {
        (name.to_string(), String::new())
    } else {
        (format!("{space}.{name}"), space.to_string())
    }
}

/// `schema` with every named reference replaced by a copy of its definition, resolved in the
/// enclosing namespace as apache-avro's decoder does; `None` if a type refers to itself (or
/// a name does not resolve), which copies cannot express.
fn inline_refs(
    schema: &Schema,
    names: &NamesRef<'_>,
    ns: &Namespace,
    open: &mut Vec<Name>,
) -> Option<Schema> {
    Some(match schema {
        Schema::Ref { name } => {
            let full = name.fully_qualified_name(ns);
            if open.contains(&full) {
                return None;
            }
            let definition = names.get(&full)?;
            inline_refs(definition, names, &full.namespace, open)?
        }
        Schema::Record(record) => {
            let full = record.name.fully_qualified_name(ns);
            open.push(full.clone());
            let mut copy = record.clone();
            for field in &mut copy.fields {
                field.schema = inline_refs(&field.schema, names, &full.namespace, open)?;
            }
            open.pop();
            Schema::Record(copy)
        }
        Schema::Array(array) => {
            let mut copy = array.clone();
            copy.items = Box::new(inline_refs(&array.items, names, ns, open)?);
            Schema::Array(copy)
        }
        Schema::Map(map) => {
            let mut copy = map.clone();
            copy.types = Box::new(inline_refs(&map.types, names, ns, open)?);
            Schema::Map(copy)
        }
        Schema::Union(union) => {
            let branches = union
                .variants()
                .iter()
                .map(|b| inline_refs(b, names, ns, open))
                .collect::<Option<Vec<_>>>()?;
            Schema::Union(UnionSchema::new(branches).ok()?)
        }
        other => other.clone(),
    })
}

/// Writes `value` with `Display` (infallible into a `String`).
fn push_display(out: &mut String, value: impl std::fmt::Display) {
    let _ = write!(out, "{value}");
}

/// A JSON string, escaped by serde_json straight into `out`.
fn write_str(s: &str, out: &mut String) {
    /// serde_json writes an escaped string in pieces that split it only at ASCII characters
    /// it escapes, so every piece is UTF-8.
    struct Text<'a>(&'a mut String);
    impl io::Write for Text<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let piece = std::str::from_utf8(buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.0.push_str(piece);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    // Writing a `str` into a `String` cannot fail.
    let _ = serde_json::to_writer(Text(out), s);
}

/// A float as the shortest text that reads back to it; whole numbers without a fraction, so
/// they also fit integer columns; NaN and the infinities as the strings the converters take.
fn write_float<F: std::fmt::Display + std::fmt::Debug>(f: F, wide: f64, out: &mut String) {
    if wide.is_nan() {
        out.push_str("\"NaN\"");
    } else if wide.is_infinite() {
        out.push_str(if wide > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else if wide.fract() == 0.0 && wide.abs() < 1e15 {
        let _ = write!(out, "{f}");
    } else {
        // Debug switches to an exponent for very large and small values (JSON allows it);
        // Display would spell out hundreds of digits.
        let _ = write!(out, "{f:?}");
    }
}

/// A big-endian two's-complement unscaled integer with `scale`, as an exact JSON number.
fn write_decimal(bytes: &[u8], scale: i64, out: &mut String) -> Result<(), String> {
    if bytes.len() > MAX_DECIMAL_BYTES {
        return Err(format!(
            "a decimal of {} bytes is too long (at most {MAX_DECIMAL_BYTES})",
            bytes.len()
        ));
    }
    if scale.abs() > MAX_DECIMAL_SCALE {
        return Err(format!(
            "decimal scale {scale} is out of range (-{MAX_DECIMAL_SCALE} to {MAX_DECIMAL_SCALE})"
        ));
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let digits = if bytes.len() <= 16 {
        let fill = if negative { 0xff } else { 0 };
        let mut wide = [fill; 16];
        wide[16 - bytes.len()..].copy_from_slice(bytes);
        i128::from_be_bytes(wide).unsigned_abs().to_string()
    } else {
        long_division_digits(bytes, negative)
    };
    if negative {
        out.push('-');
    }
    if scale <= 0 {
        out.push_str(&digits);
        if digits != "0" {
            out.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        return Ok(());
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', scale - digits.len()));
        out.push_str(&digits);
    } else {
        let point = digits.len() - scale;
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    }
    Ok(())
}

/// The decimal digits of the magnitude of a two's-complement integer wider than `i128`.
fn long_division_digits(bytes: &[u8], negative: bool) -> String {
    let mut magnitude: Vec<u8> = if negative {
        bytes.iter().map(|b| !b).collect()
    } else {
        bytes.to_vec()
    };
    if negative {
        for b in magnitude.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in magnitude.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    if digits.is_empty() {
        digits.push('0');
    }
    digits.iter().rev().collect()
}

/// Debezium's `{scale, value}` record as an exact number.
fn write_variable_decimal(fields: &[(String, Value)], out: &mut String) -> Result<(), String> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| match v {
                Value::Union(_, inner) => inner.as_ref(),
                v => v,
            })
    };
    let scale = match field("scale") {
        Some(Value::Int(s)) => i64::from(*s),
        _ => return Err("a VariableScaleDecimal without an int scale".into()),
    };
    match field("value") {
        Some(Value::Bytes(b)) => write_decimal(b, scale, out),
        _ => Err("a VariableScaleDecimal without a bytes value".into()),
    }
}

/// `"YYYY-MM-DD"` of `days` since 1970-01-01.
fn write_date(days: i64, out: &mut String) -> Result<(), String> {
    let date = i32::try_from(days)
        .ok()
        .and_then(|d| d.checked_add(719_163))
        .and_then(NaiveDate::from_num_days_from_ce_opt)
        .ok_or_else(|| format!("date {days} (days since 1970) is out of range"))?;
    out.push('"');
    write_ymd(date, out);
    out.push('"');
    Ok(())
}

/// `YYYY-MM-DD`, with a sign for years outside 0000–9999 (as chrono writes and reads `%Y`).
fn write_ymd(date: NaiveDate, out: &mut String) {
    let year = date.year();
    let _ = if (0..=9999).contains(&year) {
        write!(out, "{year:04}-{:02}-{:02}", date.month(), date.day())
    } else {
        write!(out, "{year:+05}-{:02}-{:02}", date.month(), date.day())
    };
}

/// `n` `unit`s since the epoch as a quoted ISO timestamp with every digit of the unit;
/// `zone` adds `Z`.
fn write_timestamp(n: i64, unit: Unit, zone: bool, out: &mut String) -> Result<(), String> {
    let per = unit.per_second();
    let t = DateTime::from_timestamp(n.div_euclid(per), 0)
        .ok_or_else(|| format!("timestamp {n} is out of range"))?
        .naive_utc();
    out.push('"');
    write_ymd(t.date(), out);
    let _ = write!(
        out,
        "T{:02}:{:02}:{:02}.{:0width$}",
        t.hour(),
        t.minute(),
        t.second(),
        n.rem_euclid(per),
        width = unit.digits()
    );
    out.push_str(if zone { "Z\"" } else { "\"" });
    Ok(())
}

/// `n` `unit`s since midnight as a quoted `HH:MM:SS.ffffff` (nine digits for nanoseconds).
fn write_time_of_day(n: i64, unit: Unit, out: &mut String) -> Result<(), String> {
    let per = unit.per_second();
    if !(0..=86_400 * per).contains(&n) {
        return Err(format!("time of day {n} is not between 00:00 and 24:00"));
    }
    let (seconds, fraction) = (n / per, n % per);
    let (width, fraction) = match unit {
        Unit::Nanos => (9, fraction),
        Unit::Micros => (6, fraction),
        Unit::Millis => (6, fraction * 1000),
    };
    let _ = write!(
        out,
        "\"{:02}:{:02}:{:02}.{fraction:0width$}\"",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    Ok(())
}
