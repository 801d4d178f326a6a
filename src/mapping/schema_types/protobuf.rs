//! The JSON each field of a registered `.proto` message becomes, as `protobuf`'s
//! transcoder writes it, for `schema_types` to hold against the columns.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use super::{FieldType, Shapes};

/// The types of the first message's fields (the `after` message's for Debezium), in
/// declaration order.
pub(super) fn row_field_types(
    schema: &crate::registry::RegisteredSchema,
    debezium: bool,
) -> Result<Vec<FieldType>, String> {
    let mut message = first_message(schema)?;
    if debezium {
        message = match message.get_field_by_name("after").map(|f| f.kind()) {
            Some(Kind::Message(after)) => after,
            _ => {
                return Err(format!(
                    "{} has no `after` message field",
                    message.full_name()
                ))
            }
        };
    }
    Ok(message
        .fields()
        .map(|f| FieldType {
            name: f.name().to_string(),
            schema_type: protobuf_spelling(&f),
            shapes: protobuf_shapes(&f),
        })
        .collect())
}

/// The JSON a Protobuf field becomes, as `protobuf`'s options write it. Fields with presence
/// are left out when absent, never written as null, so no field is null but a
/// `google.protobuf.Value`'s.
fn protobuf_shapes(field: &FieldDescriptor) -> Shapes {
    if field.is_map() {
        return Shapes::OBJECT;
    }
    if field.is_list() {
        return Shapes::ARRAY;
    }
    kind_shapes(&field.kind())
}

/// The JSON one value of a Protobuf kind becomes.
fn kind_shapes(kind: &Kind) -> Shapes {
    match kind {
        Kind::Double | Kind::Float => Shapes::NUMBER.or(Shapes::NON_FINITE),
        Kind::Int32
        | Kind::Int64
        | Kind::Uint32
        | Kind::Uint64
        | Kind::Sint32
        | Kind::Sint64
        | Kind::Fixed32
        | Kind::Fixed64
        | Kind::Sfixed32
        | Kind::Sfixed64 => Shapes::NUMBER,
        Kind::Bool => Shapes::BOOL,
        Kind::String | Kind::Bytes => Shapes::STRING,
        // By value name; a number the schema does not name stays a number.
        Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue" => Shapes::ANY,
        Kind::Enum(_) => Shapes::STRING.or(Shapes::NUMBER),
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Timestamp" => Shapes::TIMESTAMP,
            "google.protobuf.Duration" | "google.protobuf.FieldMask" => Shapes::STRING,
            "google.protobuf.Value" => Shapes::ANY,
            "google.protobuf.ListValue" => Shapes::ARRAY,
            "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
                Shapes::NUMBER.or(Shapes::NON_FINITE)
            }
            "google.protobuf.Int32Value"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.UInt64Value" => Shapes::NUMBER,
            "google.protobuf.BoolValue" => Shapes::BOOL,
            "google.protobuf.StringValue" | "google.protobuf.BytesValue" => Shapes::STRING,
            _ => Shapes::OBJECT,
        },
    }
}

/// A Protobuf field's type as the `.proto` spells it: `bool`, `repeated string`,
/// `map<string, int64>`, `shop.Item`.
fn protobuf_spelling(field: &FieldDescriptor) -> String {
    let kind = |k: Kind| match k {
        Kind::Message(m) => m.full_name().to_string(),
        Kind::Enum(e) => e.full_name().to_string(),
        scalar => format!("{scalar:?}").to_lowercase(),
    };
    match field.kind() {
        Kind::Message(entry) if field.is_map() => format!(
            "map<{}, {}>",
            kind(entry.map_entry_key_field().kind()),
            kind(entry.map_entry_value_field().kind())
        ),
        k if field.is_list() => format!("repeated {}", kind(k)),
        k => kind(k),
    }
}

/// The first message of a registered `.proto` (what message index `[0]` selects), compiled by
/// the same code the transcoder and `ddl` use; `check` has already compiled it there, so an
/// error here is only repeated.
fn first_message(schema: &crate::registry::RegisteredSchema) -> Result<MessageDescriptor, String> {
    crate::proto::resolve(&crate::proto::compile_registered(schema)?, &[0])
}
