//! Protobuf records (Confluent's wire format) into JSON text, so they map like JSON records.
//!
//! The registry hands out `.proto` source, not descriptors, so the schema is compiled at
//! run time (`crate::proto`: protox, which also supplies the `google/protobuf/*.proto` well-known types).
//! Each message a record names is compiled once more into a program (`program`) that reads
//! the wire format straight into JSON text (`decode`); prost-reflect's `DynamicMessage` and
//! its serializer are the reference that program was written to equal, and decode what it
//! leaves to them (merges, groups, extensions, deep nesting, every error, in their words).
//! The JSON is prost-reflect's proto3 JSON mapping with the options that make it follow
//! `transcode`'s conventions:
//! - field names as declared in the `.proto`, not lowerCamelCase: columns map by field name;
//! - `int64`, `uint64` and their kin as JSON numbers, not the mapping's strings: numeric
//!   columns take both, numbers are what every other format gives them, and the exact digits
//!   are written either way (the sink never reads them through a double);
//! - every field without presence (a proto3 scalar, enum, repeated or map field) is written,
//!   with its default when unset: proto3 cannot tell an unset scalar from its default, so
//!   `0`, `""` or `false` reaches the column rather than NULL or the column's default;
//! - a field with presence (proto3 `optional`, a `oneof` member, a message field, any proto2
//!   singular field) is left out when absent, so its column gets NULL or its default;
//! - bytes as base64, enums by value name (a number the schema does not name stays a number),
//!   `Timestamp` as RFC 3339 in UTC with its full precision, wrappers (`StringValue`, …) as
//!   their value, `Struct`/`Value`/`ListValue` as the JSON they hold, NaN and infinities as
//!   `"NaN"`, `"Infinity"`, `"-Infinity"`, map keys as strings; `Duration` and `FieldMask`
//!   keep the proto3 JSON strings (`"1.5s"`); an interval column reads a `Duration`'s.
//!
//! Fields the schema does not know (a newer writer's) are skipped. Imports other than the
//! well-known types (schema references) are not resolved: such a schema fails to compile.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor, SerializeOptions};

use super::transcode::Transcoder;
use crate::proto::{self, message_indexes, MAX_INDEXES};

mod decode;
#[cfg(test)]
mod differential;
mod program;
mod wire;
mod write;

use program::Program;

/// A `.proto` schema compiled for decoding its records.
pub(crate) struct ProtobufTranscoder {
    file: FileDescriptor,
    /// Message type per message-index path, resolved and compiled once: records of one schema
    /// nearly always name the same message, so the walk and the compiling are paid once.
    resolved: RwLock<HashMap<Box<[u32]>, Resolved>>,
    options: SerializeOptions,
}

/// A message type and its program.
#[derive(Clone)]
struct Resolved {
    desc: MessageDescriptor,
    program: Arc<Program>,
}

/// prost-reflect's JSON with `transcode`'s conventions (see the module's comment).
fn serialize_options() -> SerializeOptions {
    SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(false)
        .skip_default_fields(false)
}

impl ProtobufTranscoder {
    /// Compiles `.proto` text that imports only the well-known types; its errors say where in
    /// the text it is wrong.
    #[cfg(test)]
    pub(crate) fn new(proto_source: &str) -> Result<Self, String> {
        Self::with_file(proto::compile(proto_source)?)
    }

    /// Compiles a registered schema, in either form, with the schemas it references.
    pub(crate) fn registered(schema: &crate::registry::RegisteredSchema) -> Result<Self, String> {
        Self::with_file(proto::compile_registered(schema)?)
    }

    fn with_file(file: prost_reflect::FileDescriptor) -> Result<Self, String> {
        Ok(Self {
            file,
            resolved: RwLock::new(HashMap::new()),
            options: serialize_options(),
        })
    }

    /// The message type an index path names, from the cache or by walking the descriptors.
    /// For `check`: the fields of the first message (what index `[0]` selects), or of its
    /// `after` message for Debezium change events.
    pub(crate) fn row_fields(&self, debezium: bool) -> Result<Vec<String>, String> {
        let mut message = self.message(&[0])?.desc;
        if debezium {
            message = match message.get_field_by_name("after").map(|f| f.kind()) {
                Some(prost_reflect::Kind::Message(after)) => after,
                _ => {
                    return Err(format!(
                        "{} has no `after` message field",
                        message.full_name()
                    ))
                }
            };
        }
        Ok(message.fields().map(|f| f.name().to_string()).collect())
    }

    fn message(&self, path: &[u32]) -> Result<Resolved, String> {
        // A poisoned lock only means another thread panicked mid-insert of a complete value;
        // the map is still sound.
        if let Some(found) = self
            .resolved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
        {
            return Ok(found.clone());
        }
        let desc = self.resolve(path)?;
        let found = Resolved {
            program: Arc::new(program::compile(&desc)),
            desc,
        };
        self.resolved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.into(), found.clone());
        Ok(found)
    }

    /// Confluent's indexes: the first into the file's top-level messages, each next one into
    /// the previous message's nested messages, in declaration order (as the descriptor lists
    /// them, which counts the entry message protoc makes for each `map` field).
    fn resolve(&self, path: &[u32]) -> Result<MessageDescriptor, String> {
        proto::resolve(&self.file, path)
    }
}

impl Transcoder for ProtobufTranscoder {
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        self.read(payload, out, None)
    }

    /// The fields of the first message (index `[0]`), in field-number order as written.
    fn top_fields(&self) -> Option<Vec<String>> {
        let found = self.message(&[0]).ok()?;
        let program = &found.program;
        match program.messages.get(program.root)? {
            program::Message::Fields { .. } => {
                Some(found.desc.fields().map(|f| f.name().to_string()).collect())
            }
            _ => None,
        }
    }

    /// Spans only for records of the first message with every field written (an absent
    /// field has no value to point at) and read directly; otherwise none, and the mapping
    /// reads the object.
    fn to_json_fields(
        &self,
        payload: &[u8],
        out: &mut String,
        spans: &mut Vec<std::ops::Range<usize>>,
    ) -> Result<(), String> {
        self.read(payload, out, Some(spans))
    }
}

impl ProtobufTranscoder {
    /// Reads the payload into `out` directly, or by prost-reflect where the direct reader
    /// leaves it (and for every error, in prost-reflect's words); with `spans`, notes where
    /// each top-level field went when it can.
    fn read(
        &self,
        payload: &[u8],
        out: &mut String,
        mut spans: Option<&mut Vec<std::ops::Range<usize>>>,
    ) -> Result<(), String> {
        let mut indexes = [0u32; MAX_INDEXES];
        let (depth, body) = message_indexes(payload, &mut indexes)?;
        let found = self.message(&indexes[..depth])?;
        let (start, spans_from) = (out.len(), spans.as_ref().map_or(0, |s| s.len()));
        let program = &found.program;
        let mut occurrences = Vec::with_capacity(64);
        let read = match spans.as_deref_mut() {
            Some(spans) if indexes[..depth] == [0] => {
                program.run_top(body, &mut occurrences, out, spans)
            }
            _ => program.run(program.root, body, 0, &mut occurrences, out),
        };
        match read {
            Ok(()) => Ok(()),
            Err(_) => {
                out.truncate(start);
                if let Some(spans) = spans {
                    spans.truncate(spans_from);
                }
                self.fallback(&found.desc, body, out)
            }
        }
    }
}

/// The path of the first `DoubleValue`/`FloatValue` in `message` that holds NaN or an
/// infinity, if any (prost-reflect's decoding already bounds the depth).
fn non_finite_wrapper(message: &DynamicMessage) -> Option<String> {
    use prost_reflect::Value as V;
    fn in_value(value: &V, path: &str) -> Option<String> {
        match value {
            V::Message(m) => match prost_reflect::ReflectMessage::descriptor(m).full_name() {
                "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
                    let finite = match m.get_field_by_name("value").as_deref() {
                        Some(V::F64(f)) => f.is_finite(),
                        Some(V::F32(f)) => f.is_finite(),
                        _ => true,
                    };
                    (!finite).then(|| path.to_string())
                }
                _ => non_finite_wrapper(m).map(|inner| format!("{path}.{inner}")),
            },
            V::List(items) => items.iter().find_map(|v| in_value(v, path)),
            V::Map(entries) => entries.values().find_map(|v| in_value(v, path)),
            _ => None,
        }
    }
    message
        .fields()
        .find_map(|(field, value)| in_value(value, field.name()))
}

impl ProtobufTranscoder {
    /// A record the direct reader leaves to prost-reflect, which writes a `DoubleValue` or
    /// `FloatValue` holding NaN or an infinity as null: such a record is refused rather
    /// than landed with the value lost.
    fn fallback(
        &self,
        desc: &MessageDescriptor,
        body: &[u8],
        out: &mut String,
    ) -> Result<(), String> {
        if let Ok(message) = DynamicMessage::decode(desc.clone(), body) {
            if let Some(path) = non_finite_wrapper(&message) {
                return Err(format!(
                    "{path} wraps NaN or an infinity in a record only prost-reflect reads, which would write it as null"
                ));
            }
        }
        self.by_value(desc, body, out)
    }

    /// The record as prost-reflect decodes it into a `DynamicMessage` and serializes it: the
    /// reference the direct reader was written to equal, and where it falls back.
    fn by_value(
        &self,
        desc: &MessageDescriptor,
        body: &[u8],
        out: &mut String,
    ) -> Result<(), String> {
        let message = DynamicMessage::decode(desc.clone(), body).map_err(|e| {
            format!(
                "the payload is not a valid {} message: {e}",
                desc.full_name()
            )
        })?;
        let mut json = Vec::new();
        message
            .serialize_with_options(&mut serde_json::Serializer::new(&mut json), &self.options)
            .map_err(|e| format!("{} cannot be written as JSON: {e}", desc.full_name()))?;
        // serde_json writes UTF-8 only; checked all the same (only the new text), never a
        // panic, and `out` is untouched by a failed record.
        let json = String::from_utf8(json).map_err(|e| {
            format!(
                "the JSON written for {} is not UTF-8: {e}",
                desc.full_name()
            )
        })?;
        out.push_str(&json);
        Ok(())
    }

    /// `to_json` by prost-reflect alone, for the tests.
    #[cfg(test)]
    fn to_json_by_value(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        let mut indexes = [0u32; MAX_INDEXES];
        let (depth, body) = message_indexes(payload, &mut indexes)?;
        let found = self.message(&indexes[..depth])?;
        self.by_value(&found.desc, body, out)
    }

    /// The direct reader alone, without falling back, for the tests.
    #[cfg(test)]
    fn to_json_direct(&self, payload: &[u8], out: &mut String) -> Result<(), decode::Failure> {
        let mut indexes = [0u32; MAX_INDEXES];
        let (depth, body) =
            message_indexes(payload, &mut indexes).map_err(|_| decode::Failure::Bad("index"))?;
        let found = self
            .message(&indexes[..depth])
            .map_err(|_| decode::Failure::Bad("index"))?;
        let program = &found.program;
        program.run(program.root, body, 0, &mut Vec::new(), out)
    }
}

#[cfg(test)]
mod tests {
    use prost_reflect::prost::Message as _;
    use prost_reflect::{MapKey, Value};
    use rand::{Rng as _, SeedableRng as _};

    use super::*;

    /// Every scalar type, an enum, nested and repeated messages, maps, a oneof, an `optional`
    /// field and the well-known types; a second top-level message for index `[1]`.
    pub(super) const SHOP: &str = r#"
syntax = "proto3";
package shop;

import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  message Line {
    string sku = 1;
    uint32 qty = 2;
  }
  enum Status {
    STATUS_UNKNOWN = 0;
    PAID = 1;
    SHIPPED = 2;
  }
  double f_double = 1;
  float f_float = 2;
  int32 f_int32 = 3;
  int64 f_int64 = 4;
  uint32 f_uint32 = 5;
  uint64 f_uint64 = 6;
  sint32 f_sint32 = 7;
  sint64 f_sint64 = 8;
  fixed32 f_fixed32 = 9;
  fixed64 f_fixed64 = 10;
  sfixed32 f_sfixed32 = 11;
  sfixed64 f_sfixed64 = 12;
  bool f_bool = 13;
  string f_string = 14;
  bytes f_bytes = 15;
  Status status = 16;
  Line first_line = 17;
  repeated Line lines = 18;
  repeated int64 counts = 19;
  map<string, int64> totals = 20;
  oneof payment {
    string card = 21;
    int64 voucher = 22;
  }
  optional string note = 23;
  google.protobuf.Timestamp placed_at = 24;
  google.protobuf.StringValue coupon = 25;
  google.protobuf.Int64Value points = 26;
  google.protobuf.Struct extra = 27;
  map<int32, string> labels = 28;
}

message Refund {
  string order_id = 1;
  int64 amount = 2;
}
"#;

    /// What SHOP leaves out: every wrapper and well-known type, maps of messages and of other
    /// key kinds, repeated enums and timestamps, a oneof holding a message, an enum alias, a
    /// recursive message, large field numbers.
    pub(super) const EXTRA: &str = r#"
syntax = "proto3";
package extra;

import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message All {
  enum Mood {
    option allow_alias = true;
    MOOD_UNSET = 0;
    HAPPY = 1;
    GLAD = 1;
    SAD = -3;
  }
  message Leaf {
    string name = 1;
    repeated sint32 marks = 2;
    Leaf next = 3;
  }
  repeated Mood moods = 1;
  repeated google.protobuf.Timestamp times = 2;
  map<string, Leaf> leaves = 3;
  map<bool, Mood> by_flag = 4;
  map<uint64, bytes> blobs = 5;
  map<sint32, double> weights = 6;
  map<fixed64, google.protobuf.Timestamp> stamps = 7;
  oneof choice {
    Leaf leaf = 8;
    float ratio = 9;
    google.protobuf.Empty nothing = 10;
  }
  google.protobuf.DoubleValue w_double = 11;
  google.protobuf.FloatValue w_float = 12;
  google.protobuf.UInt64Value w_uint64 = 13;
  google.protobuf.Int32Value w_int32 = 14;
  google.protobuf.UInt32Value w_uint32 = 15;
  google.protobuf.BoolValue w_bool = 16;
  google.protobuf.BytesValue w_bytes = 17;
  google.protobuf.Duration took = 18;
  google.protobuf.FieldMask mask = 19;
  google.protobuf.Value any_value = 20;
  google.protobuf.ListValue list = 21;
  google.protobuf.Any packed_any = 22;
  repeated fixed32 fixeds = 23;
  repeated double doubles = 24;
  repeated bool flags = 25;
  repeated string names = 26;
  Mood mood = 27;
  optional sint64 maybe = 28;
  Leaf leaf_field = 1000;
  uint32 far = 536870911;
  google.protobuf.NullValue nothing_at_all = 29;
}
"#;

    /// proto2: presence on every singular field, a custom default, an enum without 0, repeated
    /// fields unpacked (the proto2 default) and packed, a recursive message.
    pub(super) const PROTO2: &str = r#"
syntax = "proto2";
package old;

message Row {
  enum Kind { FIRST = 5; SECOND = 6; }
  optional int32 a = 1 [default = 7];
  required string b = 2;
  optional Kind kind = 3;
  repeated int64 c = 4;
  repeated int32 packed_c = 5 [packed = true];
  optional Row child = 6;
  map<string, Kind> kinds = 7;
}
"#;

    fn shop() -> ProtobufTranscoder {
        ProtobufTranscoder::new(SHOP).unwrap()
    }

    fn message(t: &ProtobufTranscoder, name: &str) -> DynamicMessage {
        let desc = t.file.parent_pool().get_message_by_name(name).unwrap();
        DynamicMessage::new(desc)
    }

    /// A well-known type's value as the dynamic message a field holds.
    fn wkt<T: prost_reflect::ReflectMessage>(value: &T) -> Value {
        Value::Message(value.transcode_to_dynamic())
    }

    fn zigzag(n: i32, out: &mut Vec<u8>) {
        let mut v = ((n << 1) ^ (n >> 31)) as u32;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// What Confluent's serializer writes after the schema id: the message-index array (`[0]`
    /// as the single byte 0), then the message.
    fn payload(indexes: &[i32], m: &DynamicMessage) -> Vec<u8> {
        let mut out = Vec::new();
        if indexes == [0] {
            out.push(0);
        } else {
            zigzag(indexes.len() as i32, &mut out);
            for &i in indexes {
                zigzag(i, &mut out);
            }
        }
        m.encode(&mut out).unwrap();
        out
    }

    fn json(t: &ProtobufTranscoder, payload: &[u8]) -> Result<String, String> {
        let mut out = String::new();
        t.to_json(payload, &mut out).map(|()| out)
    }

    fn line(t: &ProtobufTranscoder, sku: &str, qty: u32) -> Value {
        let mut m = message(t, "shop.Order.Line");
        m.set_field_by_name("sku", Value::String(sku.into()));
        m.set_field_by_name("qty", Value::U32(qty));
        Value::Message(m)
    }

    /// An order with every field set, single-entry maps so the text is deterministic.
    fn full_order(t: &ProtobufTranscoder) -> DynamicMessage {
        let mut m = message(t, "shop.Order");
        let mut set = |name: &str, v: Value| m.set_field_by_name(name, v);
        set("f_double", Value::F64(1.5));
        set("f_float", Value::F32(0.25));
        set("f_int32", Value::I32(-7));
        // Past a double's exact integers: the digits must survive.
        set("f_int64", Value::I64(-9_007_199_254_740_993));
        set("f_uint32", Value::U32(u32::MAX));
        set("f_uint64", Value::U64(u64::MAX));
        set("f_sint32", Value::I32(-3));
        set("f_sint64", Value::I64(i64::MIN));
        set("f_fixed32", Value::U32(7));
        set("f_fixed64", Value::U64(8));
        set("f_sfixed32", Value::I32(-9));
        set("f_sfixed64", Value::I64(-10));
        set("f_bool", Value::Bool(true));
        set("f_string", Value::String("h\u{e9}llo \"q\"".into()));
        set("f_bytes", Value::Bytes(vec![0, 1, 2, 255].into()));
        set("status", Value::EnumNumber(2));
        set("first_line", line(t, "A-1", 2));
        set("lines", Value::List(vec![line(t, "B", 1), line(t, "", 0)]));
        set("counts", Value::List(vec![Value::I64(1), Value::I64(-2)]));
        set(
            "totals",
            Value::Map([(MapKey::String("eur".into()), Value::I64(1250))].into()),
        );
        set("card", Value::String("4111".into()));
        set("note", Value::String("leave at the door".into()));
        set(
            "placed_at",
            wkt(&prost_reflect::prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_456_789,
            }),
        );
        set("coupon", wkt(&"SAVE10".to_string()));
        set("points", wkt(&42i64));
        let extra: prost_reflect::prost_types::Struct = {
            use prost_reflect::prost_types::{value::Kind, ListValue, Struct, Value as V};
            let v = |kind| V { kind: Some(kind) };
            Struct {
                fields: [
                    (
                        "a".to_string(),
                        v(Kind::ListValue(ListValue {
                            values: vec![
                                v(Kind::NumberValue(1.0)),
                                v(Kind::StringValue("x".into())),
                                v(Kind::NullValue(0)),
                            ],
                        })),
                    ),
                    (
                        "b".to_string(),
                        v(Kind::StructValue(Struct {
                            fields: [("c".to_string(), v(Kind::BoolValue(true)))].into(),
                        })),
                    ),
                ]
                .into(),
            }
        };
        set("extra", wkt(&extra));
        set(
            "labels",
            Value::Map([(MapKey::I32(3), Value::String("three".into()))].into()),
        );
        m
    }

    const FULL_ORDER: &str = concat!(
        r#"{"f_double":1.5,"f_float":0.25,"f_int32":-7,"f_int64":-9007199254740993,"#,
        r#""f_uint32":4294967295,"f_uint64":18446744073709551615,"f_sint32":-3,"#,
        r#""f_sint64":-9223372036854775808,"f_fixed32":7,"f_fixed64":8,"f_sfixed32":-9,"#,
        r#""f_sfixed64":-10,"f_bool":true,"f_string":"héllo \"q\"","f_bytes":"AAEC/w==","#,
        r#""status":"SHIPPED","first_line":{"sku":"A-1","qty":2},"#,
        r#""lines":[{"sku":"B","qty":1},{"sku":"","qty":0}],"counts":[1,-2],"#,
        r#""totals":{"eur":1250},"card":"4111","note":"leave at the door","#,
        r#""placed_at":"2023-11-14T22:13:20.123456789Z","coupon":"SAVE10","points":42,"#,
        r#""extra":{"a":[1.0,"x",null],"b":{"c":true}},"labels":{"3":"three"}}"#,
    );

    #[test]
    fn every_field_kind_follows_the_transcode_conventions() {
        let t = shop();
        let mut out = String::from("[");
        t.to_json(&payload(&[0], &full_order(&t)), &mut out)
            .unwrap();
        assert_eq!(out, format!("[{FULL_ORDER}"), "appended to what `out` held");
        // The long form of [0] names the same message.
        let mut long = vec![2, 0]; // count 1, index 0
        full_order(&t).encode(&mut long).unwrap();
        assert_eq!(json(&t, &long).unwrap(), FULL_ORDER);
    }

    #[test]
    fn unset_fields_write_their_defaults_but_absent_optional_ones_are_left_out() {
        let t = shop();
        let empty = json(&t, &payload(&[0], &message(&t, "shop.Order"))).unwrap();
        assert_eq!(
            empty,
            concat!(
                r#"{"f_double":0.0,"f_float":0.0,"f_int32":0,"f_int64":0,"f_uint32":0,"#,
                r#""f_uint64":0,"f_sint32":0,"f_sint64":0,"f_fixed32":0,"f_fixed64":0,"#,
                r#""f_sfixed32":0,"f_sfixed64":0,"f_bool":false,"f_string":"","f_bytes":"","#,
                r#""status":"STATUS_UNKNOWN","lines":[],"counts":[],"totals":{},"labels":{}}"#,
            ),
            "no first_line, oneof member, note, placed_at, coupon, points or extra"
        );
        // Presence tells a set default from an absent field: those are written.
        let mut m = message(&t, "shop.Order");
        m.set_field_by_name("voucher", Value::I64(0));
        m.set_field_by_name("note", Value::String(String::new()));
        m.set_field_by_name("coupon", wkt(&String::new()));
        m.set_field_by_name("first_line", line(&t, "", 0));
        let text = json(&t, &payload(&[0], &m)).unwrap();
        for written in [
            r#""first_line":{"sku":"","qty":0}"#,
            r#""voucher":0"#,
            r#""note":"""#,
            r#""coupon":"""#,
        ] {
            assert!(text.contains(written), "{written} in {text}");
        }
        assert!(!text.contains("card"), "{text}");
    }

    #[test]
    fn floats_that_json_cannot_hold_and_unnamed_enums_and_large_maps() {
        let t = shop();
        let mut m = message(&t, "shop.Order");
        m.set_field_by_name("f_double", Value::F64(f64::NEG_INFINITY));
        m.set_field_by_name("f_float", Value::F32(f32::NAN));
        m.set_field_by_name("status", Value::EnumNumber(7)); // a newer writer's value
        m.set_field_by_name(
            "totals",
            Value::Map(
                (0..20)
                    .map(|i| (MapKey::String(format!("k{i}")), Value::I64(i)))
                    .collect(),
            ),
        );
        let text = json(&t, &payload(&[0], &m)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["f_double"], "-Infinity");
        assert_eq!(v["f_float"], "NaN");
        assert_eq!(v["status"].to_string(), "7");
        let totals = v["totals"].as_object().unwrap();
        assert_eq!(totals.len(), 20);
        assert_eq!(totals["k19"].to_string(), "19");
    }

    #[test]
    fn the_index_array_selects_top_level_and_nested_messages() {
        let t = shop();
        let mut refund = message(&t, "shop.Refund");
        refund.set_field_by_name("order_id", Value::String("o-1".into()));
        refund.set_field_by_name("amount", Value::I64(-5));
        assert_eq!(
            json(&t, &payload(&[1], &refund)).unwrap(),
            r#"{"order_id":"o-1","amount":-5}"#
        );
        let Value::Message(l) = line(&t, "A-1", 2) else {
            unreachable!()
        };
        assert_eq!(
            json(&t, &payload(&[0, 0], &l)).unwrap(),
            r#"{"sku":"A-1","qty":2}"#
        );
        // Nested messages count as the descriptor lists them, map entries included (protoc
        // declares one per map field, where the field is).
        assert_eq!(
            t.resolve(&[0, 1]).unwrap().full_name(),
            "shop.Order.TotalsEntry"
        );
        assert_eq!(
            t.resolve(&[0, 2]).unwrap().full_name(),
            "shop.Order.LabelsEntry"
        );
        // Each path is resolved once, then read from the cache.
        let cached: Vec<Vec<u32>> = {
            let map = t.resolved.read().unwrap();
            let mut keys: Vec<Vec<u32>> = map.keys().map(|k| k.to_vec()).collect();
            keys.sort();
            keys
        };
        assert_eq!(cached, vec![vec![0, 0], vec![1]]);
        json(&t, &payload(&[1], &refund)).unwrap();
        assert_eq!(t.resolved.read().unwrap().len(), 2);
    }

    #[test]
    fn bad_index_arrays_are_named() {
        let t = shop();
        let body = full_order(&t).encode_to_vec();
        let with = |prefix: &[u8]| {
            let mut p = prefix.to_vec();
            p.extend_from_slice(&body);
            json(&t, &p).unwrap_err()
        };
        assert_eq!(
            json(&t, b"").unwrap_err(),
            "the payload ends inside the message-index array (its count)"
        );
        assert_eq!(
            json(&t, &[0x04, 0x04]).unwrap_err(),
            "the payload ends inside the message-index array (its index)",
            "a count of 2 with one index"
        );
        assert_eq!(
            with(&[0x04, 0x00]),
            "the message-index array has a negative index (-5)",
            "the message's first byte (0x09) read as the missing index"
        );
        assert_eq!(
            with(&[0x02, 0x04]),
            "message index [2] names no message: the schema has 2 top-level messages"
        );
        assert_eq!(
            with(&[0x04, 0x00, 0x12]),
            "message index [0, 9] names no message: shop.Order has 3 nested messages"
        );
        assert_eq!(
            with(&[0x01]),
            "the message-index array has a negative count (-1)"
        );
        assert_eq!(
            with(&[0x02, 0x03]),
            "the message-index array has a negative index (-2)"
        );
        assert_eq!(
            with(&[0x42]),
            "the message-index array claims 33 entries; more than 32 levels of nested messages are not taken"
        );
        assert_eq!(
            with(&[0xff, 0xff, 0xff, 0xff, 0x7f]),
            "the message-index array's count is not a 32-bit varint"
        );
        assert_eq!(
            json(&t, &[0x80, 0x80]).unwrap_err(),
            "the payload ends inside the message-index array (its count)"
        );
    }

    #[test]
    fn truncated_or_mangled_messages_are_errors() {
        let t = shop();
        let whole = payload(&[0], &full_order(&t));
        let cut = json(&t, &whole[..whole.len() - 3]).unwrap_err();
        assert!(
            cut.starts_with("the payload is not a valid shop.Order message: "),
            "{cut}"
        );
        // A field of the wrong wire type.
        let err = json(&t, &[0, 0x0d, 1, 2, 3]).unwrap_err();
        assert!(
            err.starts_with("the payload is not a valid shop.Order message"),
            "{err}"
        );
        // A timestamp outside 0001..9999 cannot be RFC 3339: named, and `out` left as it was.
        let mut m = message(&t, "shop.Order");
        m.set_field_by_name(
            "placed_at",
            wkt(&prost_reflect::prost_types::Timestamp {
                seconds: i64::MAX / 2,
                nanos: 0,
            }),
        );
        let mut out = String::from("kept");
        let err = t.to_json(&payload(&[0], &m), &mut out).unwrap_err();
        assert!(
            err.starts_with("shop.Order cannot be written as JSON"),
            "{err}"
        );
        assert_eq!(out, "kept");
    }

    #[test]
    fn bad_proto_text_is_an_error_that_says_where() {
        let err = |src: &str| ProtobufTranscoder::new(src).err().unwrap();
        assert_eq!(
            err("syntax = \"proto3\";\nmessage A {\n  int32 x = 1\n}\n"),
            "the .proto schema does not compile: line 4, column 1: expected ';' or '[', but found '}'"
        );
        assert_eq!(
            err("syntax = \"proto3\";\nimport \"other.proto\";\nmessage A { int32 x = 1; }"),
            "the .proto schema does not compile: line 2, column 1: import 'other.proto' not found"
        );
        assert_eq!(
            err("syntax = \"proto3\";\nmessage A { Missing x = 1; }"),
            "the .proto schema does not compile: line 2, column 13: name 'Missing' is not defined"
        );
        assert_eq!(
            err("syntax = \"proto3\";\nenum E { E0 = 0; }\n"),
            "the .proto schema declares no message"
        );
        assert!(err("").contains("declares no message"));
        assert!(err("{\"type\": \"record\"}").starts_with("the .proto schema does not compile"));
        // proto2 compiles too; its fields all have presence, so absent ones are left out.
        let t = ProtobufTranscoder::new(
            "syntax = \"proto2\";\nmessage A { optional int32 x = 1 [default = 5]; required string y = 2; }",
        )
        .unwrap();
        assert_eq!(json(&t, &[0, 0x12, 1, b'z']).unwrap(), r#"{"y":"z"}"#);
    }

    #[test]
    fn a_payload_nested_past_the_decoder_limit_is_an_error_not_a_stack_overflow() {
        let t = ProtobufTranscoder::new("syntax = \"proto3\";\nmessage Node { Node child = 1; }")
            .unwrap();
        // Field 1, length-delimited, 1,000 deep (prost's limit is 100), built from the inside
        // out so each length is known.
        let mut body: Vec<u8> = Vec::new();
        for _ in 0..1_000 {
            let mut outer = vec![0x0a];
            let mut len = body.len();
            while len >= 0x80 {
                outer.push((len as u8) | 0x80);
                len >>= 7;
            }
            outer.push(len as u8);
            outer.extend_from_slice(&body);
            body = outer;
        }
        body.insert(0, 0);
        let err = json(&t, &body).unwrap_err();
        assert!(err.contains("recursion limit"), "{err}");
        // Within the limit it decodes, and the JSON nests as deep.
        let shallow = json(&t, &[0, 0x0a, 0x02, 0x0a, 0x00]).unwrap();
        assert_eq!(shallow, r#"{"child":{"child":{}}}"#);
    }

    #[test]
    fn random_and_mangled_payloads_never_panic() {
        let t = shop();
        let valid = payload(&[0], &full_order(&t));
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut outcomes = [0usize; 2];
        for round in 0..20_000 {
            let bytes: Vec<u8> = if round % 2 == 0 {
                let len = rng.random_range(0..64);
                (0..len).map(|_| rng.random()).collect()
            } else {
                let mut b = valid.clone();
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..b.len());
                    b[at] = rng.random();
                }
                b.truncate(rng.random_range(0..=b.len()));
                b
            };
            let result = std::panic::catch_unwind(|| json(&t, &bytes));
            match result {
                Ok(Ok(text)) => {
                    serde_json::from_str::<serde::de::IgnoredAny>(&text)
                        .unwrap_or_else(|e| panic!("{bytes:?} gave invalid JSON {text}: {e}"));
                    outcomes[0] += 1;
                }
                Ok(Err(_)) => outcomes[1] += 1,
                Err(_) => panic!("panicked on {bytes:?}"),
            }
        }
        assert!(outcomes[0] > 100 && outcomes[1] > 100, "{outcomes:?}");
    }

    #[test]
    fn random_proto_text_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for _ in 0..2_000 {
            let mut src = SHOP.as_bytes().to_vec();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..src.len());
                src[at] = rng.random_range(0x20..0x7f);
            }
            src.truncate(rng.random_range(0..=src.len()));
            let src = String::from_utf8(src).unwrap();
            let built = std::panic::catch_unwind(|| ProtobufTranscoder::new(&src).map(|_| ()));
            assert!(built.is_ok(), "panicked on {src}");
        }
    }

    #[test]
    fn the_transcoded_json_maps_through_the_real_converters() {
        use crate::mapping::test_support::{first_row, nullable, table, topic};
        use crate::schema::ColumnType as T;
        let t = shop();
        let mut text = String::new();
        t.to_json(&payload(&[0], &full_order(&t)), &mut text)
            .unwrap();

        let columns = [
            ("f_int64", T::Int8),
            ("f_uint64", T::Numeric),
            ("f_sint32", T::Int4),
            ("f_double", T::Float8),
            ("f_float", T::Float4),
            ("f_bool", T::Bool),
            ("f_string", T::Text),
            ("f_bytes", T::Bytea),
            ("status", T::Text),
            ("placed_at", T::Timestamptz),
            ("coupon", T::Text),
            ("points", T::Int8),
            ("first_line", T::Jsonb),
            ("counts", T::Json),
            ("voucher", T::Int8),
        ];
        let mapper =
            crate::mapping::TopicMapper::new(&topic(""), table(nullable(&columns), &[])).unwrap();
        let record = crate::record::RecordView {
            topic: "orders",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: None,
            value: Some(text.as_bytes()),
            headers: &[],
        };
        let mut rows = mapper.new_rows();
        mapper.encode(&record, &mut rows).unwrap();

        let numeric = |digits: &str| {
            let mut out = bytes::BytesMut::new();
            crate::pgcopy::encode_numeric(digits, &mut out).unwrap();
            out.to_vec()
        };
        // 2023-11-14T22:13:20.123456789Z in PostgreSQL's microseconds from 2000, floored.
        let placed_at = 1_700_000_000_123_456i64 - 946_684_800_000_000;
        let jsonb = |text: &str| [&[1u8][..], text.as_bytes()].concat();
        assert_eq!(
            first_row(rows.shapes[0].buffer.as_bytes()),
            vec![
                Some((-9_007_199_254_740_993i64).to_be_bytes().to_vec()),
                Some(numeric("18446744073709551615")),
                Some((-3i32).to_be_bytes().to_vec()),
                Some(1.5f64.to_be_bytes().to_vec()),
                Some(0.25f32.to_be_bytes().to_vec()),
                Some(vec![1]),
                Some("h\u{e9}llo \"q\"".as_bytes().to_vec()),
                Some(vec![0, 1, 2, 255]),
                Some(b"SHIPPED".to_vec()),
                Some(placed_at.to_be_bytes().to_vec()),
                Some(b"SAVE10".to_vec()),
                Some(42i64.to_be_bytes().to_vec()),
                Some(jsonb(r#"{"sku":"A-1","qty":2}"#)),
                Some(b"[1,-2]".to_vec()),
                None, // the oneof's other member: absent, so NULL
            ]
        );
    }

    /// A `DoubleValue`/`FloatValue` holding NaN or an infinity is written as proto3's JSON writes
    /// the wrapped value ("NaN"), as confluent-kafka's serializer sends it, not as prost-reflect's
    /// null (which landed NULL). A record only prost-reflect reads is refused instead.
    #[test]
    fn a_wrapped_nan_or_infinity_keeps_its_value_or_the_record_is_refused() {
        let t = ProtobufTranscoder::new(EXTRA).unwrap();
        // w_double (11) = DoubleValue { value: NaN }, w_float (12) = FloatValue { value: -inf }.
        let double = [0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f];
        let float = [0x0d, 0, 0, 0x80, 0xff];
        let wrappers = [
            &[11 << 3 | 2, double.len() as u8][..],
            &double,
            &[12 << 3 | 2, float.len() as u8],
            &float,
        ]
        .concat();
        let payload = [&[0u8][..], &wrappers].concat();
        let mut out = String::new();
        t.to_json(&payload, &mut out).unwrap();
        assert!(out.contains(r#""w_double":"NaN""#), "{out}");
        assert!(out.contains(r#""w_float":"-Infinity""#), "{out}");
        // A message field twice is merged by prost-reflect only: the record falls back.
        let leaf = |bytes: &[u8]| [&[0x42, bytes.len() as u8][..], bytes].concat();
        let twice = [leaf(&[0x0a, 1, b'a']), leaf(&[0x12, 1, 2])].concat();
        let payload = [&[0u8][..], &twice, &wrappers].concat();
        let err = t.to_json(&payload, &mut String::new()).unwrap_err();
        assert!(err.contains("w_double wraps NaN"), "{err}");
    }
}
