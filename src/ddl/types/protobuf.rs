//! Protobuf fields → created columns, by what `mapping::protobuf`'s transcoder writes for each
//! (its module comment lists the conventions): every column takes every value the transcoder
//! can produce for its field, exactly (but for the nanoseconds of a `Timestamp` or `Duration`,
//! which PostgreSQL's microseconds drop toward the past).

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use super::{array_of, jsonb, scalar, Created, FieldColumn};
use crate::schema::ColumnType;

/// The columns of a message's fields, in declaration order. A field without presence (a proto3
/// scalar, enum, repeated or map field) is always written, with its default when unset, so its
/// column may be NOT NULL; a field with presence (proto3 `optional`, a `oneof` member, a
/// message, any proto2 singular field) is left out when absent, so its column is nullable.
pub(crate) fn protobuf_fields(message: &MessageDescriptor) -> Vec<FieldColumn> {
    message
        .fields()
        .map(|f| {
            let (ty, sql) = field_type(&f);
            FieldColumn {
                name: f.name().to_string(),
                ty,
                sql,
                optional: f.supports_presence() || is_null_value(&f.kind()),
            }
        })
        .collect()
}

/// A field's column: maps are JSON objects; a repeated scalar is its array, a repeated message
/// (well-known or not) JSON, since its elements are objects or strings of several forms.
fn field_type(field: &FieldDescriptor) -> Created {
    if field.is_map() {
        return jsonb();
    }
    let kind = field.kind();
    if field.is_list() {
        return match kind {
            Kind::Message(_) => jsonb(),
            Kind::Enum(ref e) if e.full_name() == "google.protobuf.NullValue" => jsonb(),
            _ => array_of(kind_type(&kind)),
        };
    }
    kind_type(&kind)
}

/// `google.protobuf.NullValue`: written as JSON `null`, so its column must allow it.
fn is_null_value(kind: &Kind) -> bool {
    matches!(kind, Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue")
}

/// One value's column. Unsigned 32-bit values pass `int4`'s range, so `int8`; unsigned 64-bit
/// ones pass `int8`'s, so `numeric(20,0)` (every `u64` has at most 20 digits). Floats keep
/// their width (the transcoder writes NaN and the infinities as the strings float columns
/// take). An enum is its value's name (a number the schema does not name stays a number, which
/// text keeps too).
fn kind_type(kind: &Kind) -> Created {
    match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => scalar(&ColumnType::Int4, "int4"),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => scalar(&ColumnType::Int8, "int8"),
        Kind::Uint32 | Kind::Fixed32 => scalar(&ColumnType::Int8, "int8"),
        Kind::Uint64 | Kind::Fixed64 => unsigned_64(),
        Kind::Float => scalar(&ColumnType::Float4, "float4"),
        Kind::Double => scalar(&ColumnType::Float8, "float8"),
        Kind::Bool => scalar(&ColumnType::Bool, "bool"),
        Kind::String => scalar(&ColumnType::Text, "text"),
        // Base64, which a bytea column decodes (its default `bytea_encoding`).
        Kind::Bytes => scalar(&ColumnType::Bytea, "bytea"),
        Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue" => jsonb(),
        Kind::Enum(_) => scalar(&ColumnType::Text, "text"),
        Kind::Message(m) => well_known(m.full_name()),
    }
}

/// `numeric(20,0)`: every `uint64`.
fn unsigned_64() -> Created {
    (ColumnType::Numeric, "numeric(20,0)".to_string())
}

/// A message field: the well-known types the transcoder writes as a scalar become that
/// scalar's column (a wrapper is its value; RFC 3339 in UTC for `Timestamp`; proto3 JSON
/// seconds, `"1.5s"`, for `Duration`, which the interval converter reads); `FieldMask` is its
/// comma-separated paths; `Struct`, `Value`, `ListValue` and every other message are JSON.
fn well_known(name: &str) -> Created {
    match name {
        "google.protobuf.Timestamp" => scalar(&ColumnType::Timestamptz, "timestamptz"),
        "google.protobuf.Duration" => scalar(&ColumnType::Interval, "interval"),
        "google.protobuf.FieldMask" => scalar(&ColumnType::Text, "text"),
        "google.protobuf.DoubleValue" => scalar(&ColumnType::Float8, "float8"),
        "google.protobuf.FloatValue" => scalar(&ColumnType::Float4, "float4"),
        "google.protobuf.Int64Value" => scalar(&ColumnType::Int8, "int8"),
        "google.protobuf.UInt64Value" => unsigned_64(),
        "google.protobuf.Int32Value" => scalar(&ColumnType::Int4, "int4"),
        "google.protobuf.UInt32Value" => scalar(&ColumnType::Int8, "int8"),
        "google.protobuf.BoolValue" => scalar(&ColumnType::Bool, "bool"),
        "google.protobuf.StringValue" => scalar(&ColumnType::Text, "text"),
        "google.protobuf.BytesValue" => scalar(&ColumnType::Bytea, "bytea"),
        _ => jsonb(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{compile, record_message};

    fn columns(source: &str, indexes: &[u8]) -> Vec<(String, String, bool)> {
        let file = compile(source).unwrap();
        protobuf_fields(&record_message(&file, indexes).unwrap())
            .into_iter()
            .map(|c| (c.name, c.sql, c.optional))
            .collect()
    }

    /// Every row of README's Protobuf column: scalars, enums, well-known types, wrappers,
    /// maps, repeated scalars and messages, with presence deciding NOT NULL.
    #[test]
    fn protobuf_types_become_the_documented_columns() {
        let got = columns(
            r#"syntax = "proto3";
            import "google/protobuf/timestamp.proto";
            import "google/protobuf/duration.proto";
            import "google/protobuf/wrappers.proto";
            import "google/protobuf/struct.proto";
            import "google/protobuf/field_mask.proto";
            message First { int32 x = 1; }
            message All {
              int32 a = 1; sint32 b = 2; sfixed32 c = 3; int64 d = 4; sint64 e = 5; sfixed64 f = 6;
              uint32 g = 7; fixed32 h = 8; uint64 i = 9; fixed64 j = 10; float k = 11; double l = 12;
              bool m = 13; string n = 14; bytes o = 15;
              enum E { Z = 0; Y = 1; } E p = 16;
              google.protobuf.Timestamp q = 17; google.protobuf.Duration r = 18;
              google.protobuf.Int64Value s = 19; google.protobuf.StringValue t = 20;
              google.protobuf.UInt64Value u = 21; google.protobuf.UInt32Value v = 22;
              google.protobuf.DoubleValue w = 23; google.protobuf.FloatValue x = 24;
              google.protobuf.Int32Value y = 25; google.protobuf.BoolValue z = 26;
              google.protobuf.BytesValue aa = 27;
              google.protobuf.Struct ab = 28; google.protobuf.Value ac = 29; google.protobuf.ListValue ad = 30;
              message Inner { string s = 1; } Inner ae = 31;
              map<string, int64> af = 32;
              repeated int64 ag = 33; repeated string ah = 34; repeated E ai = 35;
              repeated Inner aj = 36; repeated google.protobuf.Timestamp ak = 37;
              optional int64 al = 38;
              oneof choice { string am = 39; int32 an = 40; }
              repeated uint64 ao = 41; repeated bytes ap = 42; repeated double aq = 43;
              google.protobuf.FieldMask ar = 44;
            }"#,
            // The index array [1] (zigzag varints: count 1, index 1): the second message.
            &[2, 2],
        );
        let sql: Vec<(&str, bool)> = got.iter().map(|(_, s, o)| (s.as_str(), *o)).collect();
        assert_eq!(
            sql,
            [
                ("int4", false),
                ("int4", false),
                ("int4", false),
                ("int8", false),
                ("int8", false),
                ("int8", false),
                ("int8", false),
                ("int8", false),
                ("numeric(20,0)", false),
                ("numeric(20,0)", false),
                ("float4", false),
                ("float8", false),
                ("bool", false),
                ("text", false),
                ("bytea", false),
                ("text", false),
                ("timestamptz", true),
                ("interval", true),
                ("int8", true),
                ("text", true),
                ("numeric(20,0)", true),
                ("int8", true),
                ("float8", true),
                ("float4", true),
                ("int4", true),
                ("bool", true),
                ("bytea", true),
                ("jsonb", true),
                ("jsonb", true),
                ("jsonb", true),
                ("jsonb", true),
                ("jsonb", false),
                ("int8[]", false),
                ("text[]", false),
                ("text[]", false),
                ("jsonb", false),
                ("jsonb", false),
                ("int8", true),
                ("text", true),
                ("int4", true),
                ("numeric(20,0)[]", false),
                ("bytea[]", false),
                ("float8[]", false),
                ("text", true),
            ]
        );
        assert_eq!(got[0].0, "a");
        assert_eq!(got.last().unwrap().0, "ar");
    }

    /// proto2: every singular field has presence, so every column is nullable; repeated ones
    /// are always written.
    #[test]
    fn proto2_singular_fields_are_nullable() {
        let got = columns(
            "syntax = \"proto2\"; message M { required int64 id = 1; optional string s = 2; repeated int32 r = 3; }",
            &[0],
        );
        assert_eq!(
            got,
            [
                ("id".to_string(), "int8".to_string(), true),
                ("s".to_string(), "text".to_string(), true),
                ("r".to_string(), "int4[]".to_string(), false),
            ]
        );
    }
}
