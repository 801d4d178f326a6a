//! The JSON each field of a registered schema becomes (by `transcode`'s conventions), and
//! whether a column's converter can ever take it: for `check` to name a field whose type can
//! never go into its column, before a single record fails on it.
//!
//! Deliberately conservative: a field is reported only when no value of its schema type can
//! convert, judged by what the converters in `convert` accept. A string could hold a number,
//! `"true"` or base64, so a plain string fits every column; a date, a timestamp, a time of day
//! or a UUID written as a string has a form no number, boolean or base64 parser takes. A
//! JSON Schema is taken at its word: its records are not validated by the sink (the
//! producer's serializer does that), so `check` trusts what the schema declares.

mod protobuf;

use serde_json::Value;

use super::schema_fields::{avro_row, find_named, json_schema_row};
use crate::registry::{RegisteredSchema, SchemaKind};
use crate::schema::{Column, ColumnType};

/// The kinds of JSON a schema position can produce, as a set: strings are split by the forms
/// the transcoders give them, since those decide which converters take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shapes(u16);

impl Shapes {
    pub(crate) const NULL: Shapes = Shapes(1);
    pub(crate) const BOOL: Shapes = Shapes(1 << 1);
    pub(crate) const NUMBER: Shapes = Shapes(1 << 2);
    /// Any string: it may hold a number, a boolean, base64 or a time.
    pub(crate) const STRING: Shapes = Shapes(1 << 3);
    /// `YYYY-MM-DD`.
    pub(crate) const DATE: Shapes = Shapes(1 << 4);
    /// RFC 3339, with or without a zone.
    pub(crate) const TIMESTAMP: Shapes = Shapes(1 << 5);
    /// `HH:MM:SS.ffffff`.
    pub(crate) const TIME_OF_DAY: Shapes = Shapes(1 << 6);
    /// A hyphenated UUID.
    pub(crate) const UUID: Shapes = Shapes(1 << 7);
    pub(crate) const OBJECT: Shapes = Shapes(1 << 8);
    pub(crate) const ARRAY: Shapes = Shapes(1 << 9);
    /// `"NaN"`, `"Infinity"` or `"-Infinity"`: how floats write what JSON numbers cannot.
    pub(crate) const NON_FINITE: Shapes = Shapes(1 << 10);
    /// Whatever JSON: a position nothing can be said of.
    pub(crate) const ANY: Shapes = Shapes((1 << 11) - 1);
    const NONE: Shapes = Shapes(0);

    /// Either's shapes.
    pub(crate) const fn or(self, other: Shapes) -> Shapes {
        Shapes(self.0 | other.0)
    }

    fn and(self, other: Shapes) -> Shapes {
        Shapes(self.0 & other.0)
    }

    fn without(self, other: Shapes) -> Shapes {
        Shapes(self.0 & !other.0)
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether a JSON number can come from this position: for a time column, an integer
    /// whose unit the schema does not state.
    pub(crate) fn may_be_number(self) -> bool {
        !self.and(Shapes::NUMBER).is_empty()
    }

    fn has_null(self) -> bool {
        !self.and(Shapes::NULL).is_empty()
    }
}

/// The non-null shapes a column type's converter takes (see `convert::encode`); `null` is the
/// column's constraint, not its converter's.
fn accepted(ty: ColumnType) -> Shapes {
    use ColumnType as T;
    match ty {
        T::Text | T::Json | T::Jsonb => Shapes::ANY,
        // Numeric strings are parsed as numbers; only floats take NaN and the infinities.
        T::Int2 | T::Int4 | T::Int8 | T::Numeric => Shapes::NUMBER.or(Shapes::STRING),
        T::Float4 | T::Float8 => Shapes::NUMBER.or(Shapes::STRING).or(Shapes::NON_FINITE),
        // `true`/`false`, or those words as strings.
        T::Bool => Shapes::BOOL.or(Shapes::STRING),
        // ISO-8601 strings (a date is midnight), or integers since the epoch.
        T::Timestamptz | T::Timestamp => Shapes::NUMBER
            .or(Shapes::STRING)
            .or(Shapes::DATE)
            .or(Shapes::TIMESTAMP),
        // Strictly `YYYY-MM-DD`: a timestamp would lose its time.
        T::Date => Shapes::NUMBER.or(Shapes::STRING).or(Shapes::DATE),
        T::Uuid => Shapes::STRING.or(Shapes::UUID),
        // Base64 strings only.
        T::Bytea => Shapes::STRING,
        // `HH:MM:SS` strings, or integers since midnight in a stated unit.
        T::Time | T::Timetz => Shapes::NUMBER.or(Shapes::STRING).or(Shapes::TIME_OF_DAY),
        // ISO 8601 strings, integers in a stated unit, Avro's `duration` object.
        T::Interval => Shapes::NUMBER.or(Shapes::STRING).or(Shapes::OBJECT),
        // Address strings only.
        T::Inet | T::Cidr | T::Macaddr | T::Macaddr8 => Shapes::STRING,
        // Only a JSON array; its elements are not held against the element type here.
        T::Array(_) => Shapes::ARRAY,
    }
}

/// One top-level field of a schema's row: its name, its type as the schema spells it (for
/// messages) and the JSON it becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldType {
    pub(crate) name: String,
    pub(crate) schema_type: String,
    pub(crate) shapes: Shapes,
}

/// What `check` finds when it holds a field's type against its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Some values of the type convert (or all do).
    Fits,
    /// No value of the type can be written to the column: every record fails.
    Never,
    /// The type allows null and the column is NOT NULL: records with null there fail.
    NullIntoNotNull,
}

/// Whether a field of these shapes can go into `col`.
pub(crate) fn fit(shapes: Shapes, col: &Column) -> Fit {
    let values = shapes.without(Shapes::NULL);
    if values.is_empty() {
        // Only ever null (or a type nothing could be said of, which is ANY, not empty).
        return if col.not_null && shapes.has_null() {
            Fit::Never
        } else {
            Fit::Fits
        };
    }
    if values.and(accepted(col.ty)).is_empty() {
        Fit::Never
    } else if shapes.has_null() && col.not_null {
        Fit::NullIntoNotNull
    } else {
        Fit::Fits
    }
}

/// The types of the row's top-level fields, in schema order. For Debezium change events
/// (`debezium`) the row is the `after` record's.
pub(crate) fn row_field_types(
    schema: &RegisteredSchema,
    debezium: bool,
) -> Result<Vec<FieldType>, String> {
    match schema.kind {
        SchemaKind::Avro => {
            let json: Value =
                serde_json::from_str(&schema.text).map_err(|e| format!("not JSON: {e}"))?;
            let record = avro_row(&json, debezium)?;
            Ok(record["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    let name = f["name"].as_str()?.to_string();
                    let ty = &f["type"];
                    Some(FieldType {
                        name,
                        schema_type: avro_spelling(ty),
                        shapes: avro_shapes(&json, ty, 0),
                    })
                })
                .collect())
        }
        SchemaKind::Json => {
            let json: Value =
                serde_json::from_str(&schema.text).map_err(|e| format!("not JSON: {e}"))?;
            let row = json_schema_row(&json, debezium);
            Ok(row["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, property)| FieldType {
                    name: name.clone(),
                    schema_type: json_schema_spelling(property),
                    shapes: json_schema_shapes(property, 0),
                })
                .collect())
        }
        SchemaKind::Protobuf => protobuf::row_field_types(schema, debezium),
    }
}

/// How deep unions and references are followed; a schema nesting deeper is said nothing of.
const MAX_DEPTH: usize = 32;

/// The JSON an Avro type becomes, as `avro`'s writer writes it: logical types and Connect
/// names only where the underlying type is the one apache-avro decodes them from (elsewhere
/// they are ignored and the value is written plainly).
fn avro_shapes(root: &Value, ty: &Value, depth: usize) -> Shapes {
    if depth > MAX_DEPTH {
        return Shapes::ANY;
    }
    match ty {
        Value::String(name) => match name.as_str() {
            "null" => Shapes::NULL,
            "boolean" => Shapes::BOOL,
            "int" | "long" => Shapes::NUMBER,
            // NaN and the infinities are strings.
            "float" | "double" => Shapes::NUMBER.or(Shapes::NON_FINITE),
            "bytes" | "string" => Shapes::STRING,
            other => match find_named(root, other) {
                Some(named) => avro_shapes(root, named, depth + 1),
                _ => Shapes::ANY,
            },
        },
        Value::Array(branches) => branches
            .iter()
            .fold(Shapes::NONE, |s, b| s.or(avro_shapes(root, b, depth + 1))),
        Value::Object(o) => {
            let base = match o.get("type") {
                Some(Value::String(base)) => base.as_str(),
                Some(nested @ (Value::Object(_) | Value::Array(_))) => {
                    return avro_shapes(root, nested, depth + 1)
                }
                _ => return Shapes::ANY,
            };
            let connect = o.get("connect.name").and_then(Value::as_str).unwrap_or("");
            let logical = o.get("logicalType").and_then(Value::as_str).unwrap_or("");
            match (base, logical, connect) {
                (_, _, "io.debezium.data.Json") if base == "string" => Shapes::ANY,
                ("record" | "error", _, _)
                    if connect == "io.debezium.data.VariableScaleDecimal"
                        || o.get("name").is_some_and(|n| n == "VariableScaleDecimal") =>
                {
                    Shapes::NUMBER
                }
                ("record" | "error" | "map", _, _) => Shapes::OBJECT,
                ("array", _, _) => Shapes::ARRAY,
                ("enum", _, _) => Shapes::STRING,
                ("int", "date", _)
                | (
                    "int" | "long",
                    _,
                    "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date",
                ) => Shapes::DATE,
                ("int", "time-millis", _) | ("long", "time-micros", _) => Shapes::TIME_OF_DAY,
                (
                    "int" | "long",
                    _,
                    "io.debezium.time.Time"
                    | "io.debezium.time.MicroTime"
                    | "io.debezium.time.NanoTime"
                    | "org.apache.kafka.connect.data.Time",
                ) => Shapes::TIME_OF_DAY,
                (
                    "long",
                    "timestamp-millis"
                    | "timestamp-micros"
                    | "timestamp-nanos"
                    | "local-timestamp-millis"
                    | "local-timestamp-micros"
                    | "local-timestamp-nanos",
                    _,
                )
                | (
                    "int" | "long",
                    _,
                    "io.debezium.time.Timestamp"
                    | "io.debezium.time.MicroTimestamp"
                    | "io.debezium.time.NanoTimestamp"
                    | "org.apache.kafka.connect.data.Timestamp",
                ) => Shapes::TIMESTAMP,
                // Written as an ISO 8601 duration string.
                ("long", _, "io.debezium.time.MicroDuration") => Shapes::STRING,
                ("string", "uuid", _) => Shapes::UUID,
                // A decimal whose attributes apache-avro refuses is decoded as plain bytes.
                ("bytes" | "fixed", "decimal" | "big-decimal", _)
                | ("bytes" | "fixed", _, "org.apache.kafka.connect.data.Decimal") => {
                    Shapes::NUMBER.or(Shapes::STRING)
                }
                ("fixed", "duration", _) => Shapes::OBJECT.or(Shapes::STRING),
                ("fixed", _, _) => Shapes::STRING,
                (primitive, _, _) => avro_shapes(root, &Value::String(primitive.into()), depth + 1),
            }
        }
        _ => Shapes::ANY,
    }
}

/// An Avro type in a few words: `boolean`, `long (timestamp-millis)`, `record Item`,
/// `["null", "boolean"]`.
fn avro_spelling(ty: &Value) -> String {
    match ty {
        Value::String(name) => name.clone(),
        Value::Array(branches) => format!(
            "[{}]",
            branches
                .iter()
                .map(avro_spelling)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(o) => {
            let base = match o.get("type") {
                Some(Value::String(base)) => base.clone(),
                Some(nested) => return avro_spelling(nested),
                None => return "?".into(),
            };
            let detail = o
                .get("logicalType")
                .or_else(|| o.get("connect.name"))
                .and_then(Value::as_str);
            match (o.get("name").and_then(Value::as_str), detail) {
                (Some(name), _) => format!("{base} {name}"),
                (None, Some(detail)) => format!("{base} ({detail})"),
                (None, None) => base,
            }
        }
        other => other.to_string(),
    }
}

/// The JSON a JSON Schema allows, from its `type` (a name or a list), `enum`, `const`,
/// `oneOf` and `anyOf`; anything else (`$ref`, `allOf`, no type) allows any JSON.
fn json_schema_shapes(schema: &Value, depth: usize) -> Shapes {
    if depth > MAX_DEPTH {
        return Shapes::ANY;
    }
    let named = |t: &Value| match t.as_str() {
        Some("null") => Shapes::NULL,
        Some("boolean") => Shapes::BOOL,
        Some("integer" | "number") => Shapes::NUMBER,
        Some("string") => Shapes::STRING,
        Some("object") => Shapes::OBJECT,
        Some("array") => Shapes::ARRAY,
        _ => Shapes::ANY,
    };
    if schema.get("$ref").is_some() || schema.get("allOf").is_some() {
        return Shapes::ANY;
    }
    if let Some(t) = schema.get("type") {
        return match t {
            Value::Array(types) if !types.is_empty() => {
                types.iter().fold(Shapes::NONE, |s, t| s.or(named(t)))
            }
            _ => named(t),
        };
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        if !values.is_empty() {
            return values
                .iter()
                .fold(Shapes::NONE, |s, v| s.or(value_shape(v)));
        }
    }
    if let Some(value) = schema.get("const") {
        return value_shape(value);
    }
    for combinator in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = schema.get(combinator) {
            if !branches.is_empty() {
                return branches
                    .iter()
                    .fold(Shapes::NONE, |s, b| s.or(json_schema_shapes(b, depth + 1)));
            }
        }
    }
    Shapes::ANY
}

/// The shape of one JSON value (of an `enum` or `const`).
fn value_shape(v: &Value) -> Shapes {
    match v {
        Value::Null => Shapes::NULL,
        Value::Bool(_) => Shapes::BOOL,
        Value::Number(_) => Shapes::NUMBER,
        Value::String(_) => Shapes::STRING,
        Value::Object(_) => Shapes::OBJECT,
        Value::Array(_) => Shapes::ARRAY,
    }
}

/// A JSON Schema property's type as written: `"boolean"`, `["string","null"]`, or `oneOf`.
fn json_schema_spelling(schema: &Value) -> String {
    if let Some(t) = schema.get("type") {
        return match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    ["$ref", "allOf", "enum", "const", "oneOf", "anyOf"]
        .into_iter()
        .find(|k| schema.get(k).is_some())
        .unwrap_or("any")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(ty: ColumnType, not_null: bool) -> Column {
        Column {
            name: "c".into(),
            ty,
            sql_type: format!("{ty:?}").to_lowercase(),
            not_null,
            has_default: false,
            default_sql: None,
        }
    }

    fn types(kind: SchemaKind, text: &str, debezium: bool) -> Vec<FieldType> {
        row_field_types(&RegisteredSchema::new(kind, text), debezium).unwrap()
    }

    /// Each field's fit into a column of `ty`, by field name.
    fn fits(fields: &[FieldType], ty: ColumnType, not_null: bool) -> Vec<(String, Fit)> {
        fields
            .iter()
            .map(|f| (f.name.clone(), fit(f.shapes, &column(ty, not_null))))
            .collect()
    }

    fn never(fields: &[FieldType], ty: ColumnType) -> Vec<String> {
        fits(fields, ty, false)
            .into_iter()
            .filter(|(_, fit)| *fit == Fit::Never)
            .map(|(name, _)| name)
            .collect()
    }

    const AVRO: &str = r#"{"type":"record","name":"R","namespace":"t","fields":[
      {"name":"flag","type":"boolean"},
      {"name":"n","type":"long"},
      {"name":"x","type":"double"},
      {"name":"s","type":"string"},
      {"name":"b","type":"bytes"},
      {"name":"day","type":{"type":"int","logicalType":"date"}},
      {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
      {"name":"tod","type":{"type":"int","logicalType":"time-millis"}},
      {"name":"id","type":{"type":"string","logicalType":"uuid"}},
      {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
      {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED"]}},
      {"name":"again","type":["null","Color"]},
      {"name":"tags","type":{"type":"array","items":"string"}},
      {"name":"attrs","type":{"type":"map","values":"long"}},
      {"name":"inner","type":{"type":"record","name":"In","fields":[{"name":"a","type":"int"}]}},
      {"name":"maybe","type":["null","boolean"]},
      {"name":"wrong_logical","type":{"type":"string","logicalType":"date"}},
      {"name":"cdate","type":{"type":"int","connect.name":"io.debezium.time.Date"}},
      {"name":"doc","type":{"type":"string","connect.name":"io.debezium.data.Json"}},
      {"name":"vsd","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data",
        "fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}]}}
    ]}"#;

    #[test]
    fn array_columns_take_only_fields_that_become_json_arrays() {
        let f = types(SchemaKind::Avro, AVRO, false);
        let ints = ColumnType::Array(crate::schema::ArrayOf {
            element: &ColumnType::Int8,
            element_oid: 20,
        });
        // A string is never split or parsed into an array; only an Avro array (and a
        // Debezium Json string, which may hold anything) can fill one.
        let fitting: Vec<String> = f
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| !never(&f, ints).contains(n))
            .collect();
        assert_eq!(fitting, ["tags", "doc"]);
    }

    #[test]
    fn times_of_day_intervals_and_addresses_take_only_what_can_convert() {
        let f = types(SchemaKind::Avro, AVRO, false);
        // A time column takes times of day, strings and integers (with a unit), never a date,
        // a timestamp, a UUID, a boolean or a structure.
        let time = [
            "flag", "day", "at", "id", "tags", "attrs", "inner", "maybe", "cdate",
        ];
        assert_eq!(never(&f, ColumnType::Time), time);
        assert_eq!(never(&f, ColumnType::Timetz), time);
        // An interval also takes an object (Avro's duration), never a time of day.
        assert_eq!(
            never(&f, ColumnType::Interval),
            ["flag", "day", "at", "tod", "id", "tags", "maybe", "cdate"]
        );
        // Addresses are strings only.
        let address = [
            "flag", "n", "x", "day", "at", "tod", "id", "tags", "attrs", "inner", "maybe", "cdate",
            "vsd",
        ];
        for ty in [
            ColumnType::Inet,
            ColumnType::Cidr,
            ColumnType::Macaddr,
            ColumnType::Macaddr8,
        ] {
            assert_eq!(never(&f, ty), address, "{ty:?}");
        }
        // Debezium's MicroDuration is written as an ISO 8601 string.
        let d = types(
            SchemaKind::Avro,
            r#"{"type":"record","name":"D","fields":[
              {"name":"d","type":{"type":"long","connect.name":"io.debezium.time.MicroDuration"}}]}"#,
            false,
        );
        assert_eq!(d[0].shapes, Shapes::STRING);
        assert!(never(&d, ColumnType::Interval).is_empty());
    }

    #[test]
    fn avro_types_that_never_convert_are_told_from_those_that_may() {
        let f = types(SchemaKind::Avro, AVRO, false);
        // Numbers take numbers and strings (a string may hold digits); never a boolean, a
        // time's or a UUID's string, an array or an object.
        assert_eq!(
            never(&f, ColumnType::Int8),
            ["flag", "day", "at", "tod", "id", "tags", "attrs", "inner", "maybe", "cdate"]
        );
        assert_eq!(
            never(&f, ColumnType::Bool),
            ["n", "x", "day", "at", "tod", "id", "tags", "attrs", "inner", "cdate", "vsd"]
        );
        // A date is midnight; a time of day is no timestamp.
        assert_eq!(
            never(&f, ColumnType::Timestamptz),
            ["flag", "tod", "id", "tags", "attrs", "inner", "maybe"]
        );
        // A date column takes dates strictly: a timestamp would lose its time.
        assert!(never(&f, ColumnType::Date).contains(&"at".to_string()));
        assert!(!never(&f, ColumnType::Date).contains(&"day".to_string()));
        assert_eq!(
            never(&f, ColumnType::Uuid),
            [
                "flag", "n", "x", "day", "at", "tod", "tags", "attrs", "inner", "maybe", "cdate",
                "vsd"
            ]
        );
        // Bytea takes base64 strings only.
        assert!(never(&f, ColumnType::Bytea).contains(&"n".to_string()));
        assert!(!never(&f, ColumnType::Bytea).contains(&"s".to_string()));
        assert!(!never(&f, ColumnType::Bytea).contains(&"color".to_string()));
        for open in [ColumnType::Text, ColumnType::Jsonb, ColumnType::Json] {
            assert!(never(&f, open).is_empty(), "{open:?}");
        }
    }

    #[test]
    fn a_union_with_null_into_a_not_null_column_is_a_warning_only() {
        let f = types(SchemaKind::Avro, AVRO, false);
        let fit_of = |name: &str, ty, not_null| {
            let field = f.iter().find(|f| f.name == name).unwrap();
            fit(field.shapes, &column(ty, not_null))
        };
        assert_eq!(
            fit_of("maybe", ColumnType::Bool, true),
            Fit::NullIntoNotNull
        );
        assert_eq!(fit_of("maybe", ColumnType::Bool, false), Fit::Fits);
        assert_eq!(fit_of("flag", ColumnType::Bool, true), Fit::Fits);
        // Null or a boolean into an integer: the boolean never fits, which is the error.
        assert_eq!(fit_of("maybe", ColumnType::Int4, true), Fit::Never);
        // A field that is only ever null cannot fill a NOT NULL column.
        assert_eq!(
            fit(Shapes::NULL, &column(ColumnType::Int4, true)),
            Fit::Never
        );
        assert_eq!(
            fit(Shapes::NULL, &column(ColumnType::Int4, false)),
            Fit::Fits
        );
    }

    #[test]
    fn avro_types_are_spelled_as_the_schema_has_them() {
        let f = types(SchemaKind::Avro, AVRO, false);
        let spelled = |name: &str| {
            f.iter()
                .find(|f| f.name == name)
                .map(|f| f.schema_type.clone())
                .unwrap()
        };
        assert_eq!(spelled("flag"), "boolean");
        assert_eq!(spelled("at"), "long (timestamp-micros)");
        assert_eq!(spelled("color"), "enum Color");
        assert_eq!(spelled("maybe"), "[null, boolean]");
        // A logical type on the wrong base is ignored by apache-avro, so it is a plain string.
        let wrong = f.iter().find(|f| f.name == "wrong_logical").unwrap();
        assert_eq!(wrong.shapes, Shapes::STRING);
    }

    #[test]
    fn debezium_after_records_are_typed_with_their_named_references() {
        let envelope = r#"{"type":"record","name":"Envelope","namespace":"db.t","fields":[
          {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
            {"name":"id","type":"int"},{"name":"ok","type":"boolean"}]}]},
          {"name":"after","type":["null","Value"]},{"name":"op","type":"string"}]}"#;
        let f = types(SchemaKind::Avro, envelope, true);
        assert_eq!(never(&f, ColumnType::Uuid), ["id", "ok"]);
        assert_eq!(never(&f, ColumnType::Bool), ["id"]);
    }

    #[test]
    fn json_schema_types_never_converting_are_found() {
        let js = r##"{"type":"object","properties":{
          "flag":{"type":"boolean"},"n":{"type":"integer"},"s":{"type":"string"},
          "maybe":{"type":["boolean","null"]},"either":{"oneOf":[{"type":"null"},{"type":"integer"}]},
          "kind":{"enum":["a","b"]},"anything":{},"ref":{"$ref":"#/definitions/x"},
          "list":{"type":"array"},"obj":{"type":"object"}}}"##;
        let f = types(SchemaKind::Json, js, false);
        let mut n = never(&f, ColumnType::Int4);
        n.sort();
        assert_eq!(n, ["flag", "list", "maybe", "obj"]);
        let mut b = never(&f, ColumnType::Bool);
        b.sort();
        assert_eq!(b, ["either", "list", "n", "obj"]);
        let spelled = |name: &str| {
            f.iter()
                .find(|f| f.name == name)
                .map(|f| f.schema_type.clone())
                .unwrap()
        };
        assert_eq!(spelled("maybe"), r#"["boolean","null"]"#);
        assert_eq!(spelled("either"), "oneOf");
        let debezium = r#"{"type":"object","properties":{"after":{"oneOf":[{"type":"null"},
          {"type":"object","properties":{"id":{"type":"integer"},"ok":{"type":"boolean"}}}]}}}"#;
        let f = types(SchemaKind::Json, debezium, true);
        assert_eq!(never(&f, ColumnType::Bool), ["id"]);
    }

    #[test]
    fn protobuf_types_never_converting_are_found() {
        let proto = r#"syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Row {
  bool flag = 1;
  int64 n = 2;
  double x = 3;
  string s = 4;
  bytes b = 5;
  Color color = 6;
  repeated string tags = 7;
  map<string, int64> attrs = 8;
  google.protobuf.Timestamp at = 9;
  google.protobuf.BoolValue wrapped = 10;
  Inner inner = 11;
}
message Inner { int32 a = 1; }
enum Color { RED = 0; }
message Env { Row before = 1; Row after = 2; }
"#;
        let f = types(SchemaKind::Protobuf, proto, false);
        assert_eq!(
            never(&f, ColumnType::Int8),
            ["flag", "tags", "attrs", "at", "wrapped", "inner"]
        );
        // An enum may be a number the schema does not name, so an integer column may take it;
        // and its name could be `true`.
        assert_eq!(
            never(&f, ColumnType::Bool),
            ["n", "x", "tags", "attrs", "at", "inner"]
        );
        assert_eq!(
            never(&f, ColumnType::Date),
            ["flag", "tags", "attrs", "at", "wrapped", "inner"]
        );
        let spelled: Vec<_> = f.iter().map(|f| f.schema_type.as_str()).collect();
        assert_eq!(
            spelled,
            [
                "bool",
                "int64",
                "double",
                "string",
                "bytes",
                "Color",
                "repeated string",
                "map<string, int64>",
                "google.protobuf.Timestamp",
                "google.protobuf.BoolValue",
                "Inner"
            ]
        );
        // Proto fields are never null: no warning for NOT NULL columns.
        assert!(fits(&f, ColumnType::Text, true)
            .iter()
            .all(|(_, fit)| *fit == Fit::Fits));
    }
}
