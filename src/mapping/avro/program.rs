//! The program: a writer schema (references inlined) and its plan compiled into one list of
//! steps that say, for each schema position, how its bytes are read and how the value is
//! written as JSON. `decode` runs it straight over the payload, so a record costs no value
//! tree: apache-avro's decoder builds one per record (a `String` per field name, a `Vec` per
//! record), which made Avro slower than the JSON it stands for.
//!
//! Each step writes exactly what `AvroTranscoder::write` writes for the value apache-avro
//! decodes at that position; the tests hold the two against each other. The rare types whose
//! reading is intricate (big-decimal, Debezium's `VariableScaleDecimal`) stay with
//! apache-avro: their step decodes that one value with it.

use apache_avro::schema::{DecimalSchema, RecordSchema, Schema};

use super::write::write_str;
use super::{Node, Unit, PLAIN};

/// How one schema position is read and written; positions refer to others by index.
#[derive(Debug, Clone)]
pub(super) enum Step {
    /// Nothing to read; `null`.
    Null,
    /// One byte, 0 or 1.
    Boolean,
    /// An `int`: zig-zag varint that must fit 32 bits.
    Int(Number),
    /// A `long`: zig-zag varint of up to ten bytes.
    Long(Number),
    /// Four bytes, little-endian.
    Float,
    /// Eight bytes, little-endian.
    Double,
    /// Length-prefixed bytes.
    Bytes(Blob),
    /// Exactly this many bytes.
    Fixed(usize, Blob),
    String(Text),
    /// A `fixed` of 16 bytes with `logicalType: uuid`: the raw UUID.
    UuidFixed,
    /// A `fixed` of 12 bytes with `logicalType: duration`: months, days, millis.
    Duration,
    /// The symbols, each already a JSON string.
    Enum(Vec<String>),
    /// Blocks of items of this step, up to an empty block.
    Array(usize),
    /// Blocks of string keys and values of this step.
    Map(usize),
    /// A branch index, then that branch's step.
    Union(Vec<usize>),
    /// Each field's JSON key (quoted, with the colon) and step.
    Record(Vec<(String, usize)>),
    /// Decoded by apache-avro with this schema, then written as plan node `node` says.
    ByValue(Box<Schema>, usize),
}

/// What an integer stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Number {
    Plain,
    /// Days since 1970-01-01.
    Days,
    /// Units since midnight.
    TimeOfDay(Unit),
    /// Microseconds of a duration.
    MicroDuration,
    /// Units since the epoch; `zone`: an instant.
    Epoch {
        unit: Unit,
        zone: bool,
    },
}

/// What bytes stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blob {
    /// Written as base64.
    Base64,
    /// A two's-complement unscaled integer of this scale.
    Decimal(i64),
}

/// What a string stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Text {
    Plain,
    /// JSON text, written as that JSON once checked.
    Json,
    /// `logicalType: uuid` on a string: as apache-avro reads it, 16 bytes are a raw UUID,
    /// anything else its text.
    Uuid,
}

/// Compiles `schema` (already inlined) with its plan; returns the steps and the root's index.
pub(super) fn compile(
    schema: &Schema,
    plan: &[Node],
    root: usize,
) -> Result<(Vec<Step>, usize), String> {
    let mut steps = Vec::new();
    let top = Compiler {
        plan,
        steps: &mut steps,
    }
    .compile(schema, root)?;
    Ok((steps, top))
}

/// Appends steps as it walks the schema and the plan together.
struct Compiler<'a> {
    plan: &'a [Node],
    steps: &'a mut Vec<Step>,
}

impl Compiler<'_> {
    /// Adds a step; its index is how others refer to it.
    fn push(&mut self, step: Step) -> usize {
        self.steps.push(step);
        self.steps.len() - 1
    }

    /// The step for `schema` at plan node `node`, mirroring `AvroTranscoder::write`.
    fn compile(&mut self, schema: &Schema, node: usize) -> Result<usize, String> {
        let hint = self.plan.get(node).unwrap_or(&Node::Plain);
        let number = number_of(hint);
        let blob = match hint {
            Node::Decimal {
                scale,
                bytes_too: true,
            } => Blob::Decimal(*scale),
            _ => Blob::Base64,
        };
        let step = match schema {
            Schema::Null => Step::Null,
            Schema::Boolean => Step::Boolean,
            Schema::Int => Step::Int(number),
            Schema::Long => Step::Long(number),
            Schema::Float => Step::Float,
            Schema::Double => Step::Double,
            Schema::Bytes => Step::Bytes(blob),
            Schema::Fixed(fixed) => Step::Fixed(fixed.size, blob),
            Schema::String => Step::String(if *hint == Node::JsonText {
                Text::Json
            } else {
                Text::Plain
            }),
            Schema::Uuid if *hint == Node::UuidFixed => Step::UuidFixed,
            Schema::Uuid => Step::String(Text::Uuid),
            Schema::Enum(e) => Step::Enum(
                e.symbols
                    .iter()
                    .map(|s| {
                        let mut quoted = String::new();
                        write_str(s, &mut quoted);
                        quoted
                    })
                    .collect(),
            ),
            Schema::Array(array) => {
                let item = match hint {
                    Node::Array(item) => *item,
                    _ => PLAIN,
                };
                Step::Array(self.compile(&array.items, item)?)
            }
            Schema::Map(map) => {
                let each = match hint {
                    Node::Map(each) => *each,
                    _ => PLAIN,
                };
                Step::Map(self.compile(&map.types, each)?)
            }
            Schema::Union(union) => {
                let plans = match hint {
                    Node::Union(branches) => branches.as_slice(),
                    _ => &[],
                };
                let mut branches = Vec::with_capacity(union.variants().len());
                for (i, branch) in union.variants().iter().enumerate() {
                    branches.push(self.compile(branch, plans.get(i).copied().unwrap_or(PLAIN))?);
                }
                Step::Union(branches)
            }
            Schema::Record(_) if *hint == Node::VariableDecimal => {
                Step::ByValue(Box::new(schema.clone()), node)
            }
            Schema::Record(record) => Step::Record(self.record(record, hint)?),
            Schema::Decimal(DecimalSchema { inner, .. }) => {
                let scale = match hint {
                    Node::Decimal { scale, .. } => *scale,
                    _ => 0,
                };
                match inner.as_ref() {
                    Schema::Fixed(fixed) => Step::Fixed(fixed.size, Blob::Decimal(scale)),
                    _ => Step::Bytes(Blob::Decimal(scale)),
                }
            }
            Schema::BigDecimal => Step::ByValue(Box::new(schema.clone()), node),
            Schema::Date => Step::Int(Number::Days),
            Schema::TimeMillis => Step::Int(Number::TimeOfDay(Unit::Millis)),
            Schema::TimeMicros => Step::Long(Number::TimeOfDay(Unit::Micros)),
            Schema::TimestampMillis => Step::Long(epoch(Unit::Millis, true)),
            Schema::TimestampMicros => Step::Long(epoch(Unit::Micros, true)),
            Schema::TimestampNanos => Step::Long(epoch(Unit::Nanos, true)),
            Schema::LocalTimestampMillis => Step::Long(epoch(Unit::Millis, false)),
            Schema::LocalTimestampMicros => Step::Long(epoch(Unit::Micros, false)),
            Schema::LocalTimestampNanos => Step::Long(epoch(Unit::Nanos, false)),
            Schema::Duration => Step::Duration,
            Schema::Ref { name } => {
                return Err(format!(
                    "invalid Avro schema: {} is not defined",
                    name.fullname(None)
                ))
            }
        };
        Ok(self.push(step))
    }

    /// A record's fields: keys from the plan where it matches the schema, else the schema's
    /// field names.
    fn record(
        &mut self,
        record: &RecordSchema,
        hint: &Node,
    ) -> Result<Vec<(String, usize)>, String> {
        let planned = match hint {
            Node::Record { keys, fields } if keys.len() == record.fields.len() => {
                Some((keys, fields))
            }
            _ => None,
        };
        let mut fields = Vec::with_capacity(record.fields.len());
        for (i, field) in record.fields.iter().enumerate() {
            let (key, node) = match planned {
                Some((keys, nodes)) => (keys[i].clone(), nodes[i]),
                None => {
                    let mut key = String::new();
                    write_str(&field.name, &mut key);
                    key.push(':');
                    (key, PLAIN)
                }
            };
            fields.push((key, self.compile(&field.schema, node)?));
        }
        Ok(fields)
    }
}

/// What an integer at a position with this plan node stands for: one answer for the steps
/// and for `AvroTranscoder::write`.
pub(super) fn number_of(hint: &Node) -> Number {
    match hint {
        Node::Days => Number::Days,
        Node::TimeOfDay(unit) => Number::TimeOfDay(*unit),
        Node::MicroDuration => Number::MicroDuration,
        Node::Epoch { unit, zone } => Number::Epoch {
            unit: *unit,
            zone: *zone,
        },
        _ => Number::Plain,
    }
}

/// A timestamp's number.
fn epoch(unit: Unit, zone: bool) -> Number {
    Number::Epoch { unit, zone }
}
