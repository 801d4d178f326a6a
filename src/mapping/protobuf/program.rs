//! The program: a message descriptor (and every message it reaches) compiled once into what
//! `decode` needs per field — its JSON key already quoted with the colon, how its bytes are
//! read, whether it repeats, whether it has presence, its oneof, the JSON of its default. A
//! record then costs no `DynamicMessage`: prost-reflect's decoder allocates per field and its
//! serializer writes through serde, which made Protobuf slower than the JSON it stands for.
//!
//! Each message writes exactly what prost-reflect's serializer writes with
//! `ProtobufTranscoder`'s options; the differential tests hold the two against each other.
//! What would be intricate to read the same way (extensions, groups, the well-known types
//! other than `Timestamp` and the wrappers) is marked for prost-reflect.

use std::collections::HashMap;

use prost_reflect::{Kind, MessageDescriptor, Value};

use super::write::{write_float, write_str};

/// How one scalar value is read from the wire and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
    /// An enum: index into `Program::enums`.
    Enum(usize),
    /// A message: index into `Program::messages`.
    Message(usize),
}

impl Scalar {
    /// The wire type a single value of this kind comes with.
    pub(super) fn wire_type(self) -> u8 {
        match self {
            Scalar::Double | Scalar::Fixed64 | Scalar::Sfixed64 => 1,
            Scalar::Float | Scalar::Fixed32 | Scalar::Sfixed32 => 5,
            Scalar::String | Scalar::Bytes | Scalar::Message(_) => 2,
            _ => 0,
        }
    }

    /// Whether a repeated field of this kind may come packed (one length-delimited run).
    pub(super) fn packable(self) -> bool {
        self.wire_type() != 2
    }
}

/// Whether a field holds one value, a list or a map.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Shape {
    Single,
    List,
    /// The entry's key and value kinds, and the JSON of the value's default (written when an
    /// entry has no value; a message value's default is its empty message).
    Map {
        key: Scalar,
        value: Scalar,
        value_default: String,
    },
}

/// One field of a message, as `decode` reads and writes it.
#[derive(Debug, Clone)]
pub(super) struct Field {
    pub(super) number: u32,
    /// The proto field name as a JSON string, with the colon.
    pub(super) key: String,
    pub(super) kind: Scalar,
    pub(super) shape: Shape,
    /// Left out when absent (proto3 `optional`, oneof members, messages, proto2 singulars).
    pub(super) presence: bool,
    /// The (real or synthetic) oneof it belongs to: index into the message's oneofs.
    pub(super) oneof: Option<usize>,
    /// The JSON written for it when absent and without presence.
    pub(super) default: String,
}

/// What a message is, for `decode`.
#[derive(Debug, Clone)]
pub(super) enum Message {
    /// Fields in the order prost-reflect's serializer writes them (field number order).
    Fields {
        fields: Vec<Field>,
        /// Field index per field number below `by_small.len()`, `u32::MAX` for none.
        by_small: Vec<u32>,
        /// Field index per larger field number.
        by_large: HashMap<u32, u32>,
    },
    /// `google.protobuf.Timestamp`: RFC 3339 with every digit.
    Timestamp,
    /// A wrapper (`StringValue`, …): field 1's value, written as serde writes the raw value.
    Wrapper(Scalar),
    /// Decoded and written by prost-reflect (a well-known type without its own reader): its
    /// bytes alone are a valid message of it, so just that sub-slice goes through it.
    ByValue(MessageDescriptor),
    /// The whole record goes through prost-reflect (extensions, groups).
    Fallback,
}

/// Every message a root message reaches, compiled.
#[derive(Debug)]
pub(super) struct Program {
    pub(super) messages: Vec<Message>,
    /// Per enum: (number, the name as a JSON string) sorted by number; `None` for
    /// `google.protobuf.NullValue`, which is always `null`.
    pub(super) enums: Vec<Option<Vec<(i32, String)>>>,
    pub(super) root: usize,
}

impl Field {
    /// The field's index for a field number.
    pub(super) fn lookup(by_small: &[u32], by_large: &HashMap<u32, u32>, number: u32) -> u32 {
        match by_small.get(number as usize) {
            Some(&i) => i,
            None => by_large.get(&number).copied().unwrap_or(u32::MAX),
        }
    }
}

/// Field numbers below this are looked up in a table.
const SMALL_NUMBERS: u32 = 64;

/// Compiles `root` and every message its fields reach (recursive types once each).
pub(super) fn compile(root: &MessageDescriptor) -> Program {
    let mut compiler = Compiler {
        messages: Vec::new(),
        enums: Vec::new(),
        message_index: HashMap::new(),
        enum_index: HashMap::new(),
    };
    let root = compiler.message(root);
    Program {
        messages: compiler.messages,
        enums: compiler.enums,
        root,
    }
}

/// Appends messages and enums as it walks the descriptors.
struct Compiler {
    messages: Vec<Message>,
    enums: Vec<Option<Vec<(i32, String)>>>,
    message_index: HashMap<String, usize>,
    enum_index: HashMap<String, usize>,
}

impl Compiler {
    fn message(&mut self, desc: &MessageDescriptor) -> usize {
        if let Some(&i) = self.message_index.get(desc.full_name()) {
            return i;
        }
        let at = self.messages.len();
        // Reserved first, so a recursive field finds it.
        self.messages.push(Message::Fallback);
        self.message_index.insert(desc.full_name().to_string(), at);
        let compiled = self.message_body(desc);
        self.messages[at] = compiled;
        at
    }

    fn message_body(&mut self, desc: &MessageDescriptor) -> Message {
        let wrapper = |s| Message::Wrapper(s);
        match desc.full_name() {
            "google.protobuf.Timestamp" => return Message::Timestamp,
            "google.protobuf.DoubleValue" => return wrapper(Scalar::Double),
            "google.protobuf.FloatValue" => return wrapper(Scalar::Float),
            "google.protobuf.Int64Value" => return wrapper(Scalar::Int64),
            "google.protobuf.UInt64Value" => return wrapper(Scalar::Uint64),
            "google.protobuf.Int32Value" => return wrapper(Scalar::Int32),
            "google.protobuf.UInt32Value" => return wrapper(Scalar::Uint32),
            "google.protobuf.BoolValue" => return wrapper(Scalar::Bool),
            "google.protobuf.StringValue" => return wrapper(Scalar::String),
            "google.protobuf.BytesValue" => return wrapper(Scalar::Bytes),
            name if name.starts_with("google.protobuf.") && is_well_known(name) => {
                return Message::ByValue(desc.clone())
            }
            _ => {}
        }
        if desc.extensions().len() > 0 || desc.fields().any(|f| f.is_group()) {
            return Message::Fallback;
        }
        let oneofs: Vec<String> = desc.oneofs().map(|o| o.full_name().to_string()).collect();
        let mut fields = Vec::with_capacity(desc.fields().len());
        for f in desc.fields() {
            let mut key = String::new();
            write_str(f.name(), &mut key);
            key.push(':');
            let shape = if f.is_map() {
                let Kind::Message(entry) = f.kind() else {
                    return Message::Fallback;
                };
                let (k, v) = (entry.map_entry_key_field(), entry.map_entry_value_field());
                let value = self.scalar(&v.kind());
                Shape::Map {
                    key: self.scalar(&k.kind()),
                    value,
                    value_default: self.default_text(value, &v.default_value()),
                }
            } else if f.is_list() {
                Shape::List
            } else {
                Shape::Single
            };
            let kind = self.scalar(&f.kind());
            let default = match shape {
                Shape::List => "[]".to_string(),
                Shape::Map { .. } => "{}".to_string(),
                Shape::Single => self.default_text(kind, &f.default_value()),
            };
            let oneof = f
                .containing_oneof()
                .and_then(|o| oneofs.iter().position(|n| n == o.full_name()));
            fields.push(Field {
                number: f.number(),
                key,
                kind,
                shape,
                presence: f.supports_presence(),
                oneof,
                default,
            });
        }
        let small = fields
            .iter()
            .map(|f| f.number + 1)
            .filter(|&n| n <= SMALL_NUMBERS)
            .max()
            .unwrap_or(0);
        let mut by_small = vec![u32::MAX; small as usize];
        let mut by_large = HashMap::new();
        for (i, f) in fields.iter().enumerate() {
            match by_small.get_mut(f.number as usize) {
                Some(slot) => *slot = i as u32,
                None => {
                    by_large.insert(f.number, i as u32);
                }
            }
        }
        Message::Fields {
            fields,
            by_small,
            by_large,
        }
    }

    fn scalar(&mut self, kind: &Kind) -> Scalar {
        match kind {
            Kind::Double => Scalar::Double,
            Kind::Float => Scalar::Float,
            Kind::Int32 => Scalar::Int32,
            Kind::Int64 => Scalar::Int64,
            Kind::Uint32 => Scalar::Uint32,
            Kind::Uint64 => Scalar::Uint64,
            Kind::Sint32 => Scalar::Sint32,
            Kind::Sint64 => Scalar::Sint64,
            Kind::Fixed32 => Scalar::Fixed32,
            Kind::Fixed64 => Scalar::Fixed64,
            Kind::Sfixed32 => Scalar::Sfixed32,
            Kind::Sfixed64 => Scalar::Sfixed64,
            Kind::Bool => Scalar::Bool,
            Kind::String => Scalar::String,
            Kind::Bytes => Scalar::Bytes,
            Kind::Message(m) => Scalar::Message(self.message(m)),
            Kind::Enum(e) => {
                if let Some(&i) = self.enum_index.get(e.full_name()) {
                    return Scalar::Enum(i);
                }
                let names = (e.full_name() != "google.protobuf.NullValue").then(|| {
                    let mut numbers: Vec<i32> = e.values().map(|v| v.number()).collect();
                    numbers.sort_unstable();
                    numbers.dedup();
                    // The name prost-reflect's serializer picks for a number (aliases share one).
                    numbers
                        .into_iter()
                        .filter_map(|n| {
                            e.get_value(n).map(|v| {
                                let mut quoted = String::new();
                                write_str(v.name(), &mut quoted);
                                (n, quoted)
                            })
                        })
                        .collect()
                });
                self.enums.push(names);
                self.enum_index
                    .insert(e.full_name().to_string(), self.enums.len() - 1);
                Scalar::Enum(self.enums.len() - 1)
            }
        }
    }

    /// The JSON of a default value; empty for a message (run over no bytes instead).
    fn default_text(&self, kind: Scalar, value: &Value) -> String {
        let mut out = String::new();
        match value {
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::I32(n) => out.push_str(itoa::Buffer::new().format(*n)),
            Value::I64(n) => out.push_str(itoa::Buffer::new().format(*n)),
            Value::U32(n) => out.push_str(itoa::Buffer::new().format(*n)),
            Value::U64(n) => out.push_str(itoa::Buffer::new().format(*n)),
            Value::F32(f) => write_float(f64::from(*f), Some(*f), &mut out),
            Value::F64(f) => write_float(*f, None, &mut out),
            Value::String(s) => write_str(s, &mut out),
            Value::Bytes(b) => {
                use base64::Engine as _;
                out.push('"');
                base64::engine::general_purpose::STANDARD.encode_string(b, &mut out);
                out.push('"');
            }
            Value::EnumNumber(n) => match kind {
                Scalar::Enum(e) => match &self.enums[e] {
                    None => out.push_str("null"),
                    Some(names) => match names.binary_search_by_key(n, |(k, _)| *k) {
                        Ok(i) => out.push_str(&names[i].1),
                        Err(_) => out.push_str(itoa::Buffer::new().format(*n)),
                    },
                },
                _ => out.push_str(itoa::Buffer::new().format(*n)),
            },
            Value::Message(_) | Value::List(_) | Value::Map(_) => {}
        }
        out
    }
}

/// The well-known types prost-reflect writes in their own JSON form.
fn is_well_known(name: &str) -> bool {
    matches!(
        name,
        "google.protobuf.Any"
            | "google.protobuf.Duration"
            | "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.FieldMask"
            | "google.protobuf.Empty"
    )
}
