//! The column a schema field becomes when the sink creates or adds it: one table, per schema
//! language, of schema type (and logical type) → PostgreSQL type. README's "Created columns"
//! table is this file (Protobuf's and JSON Schema's in `protobuf` and `json_schema`); each choice is one the existing converters write losslessly.

use serde_json::Value;

use crate::schema::{ArrayOf, ColumnType};

mod json_schema;
mod protobuf;

pub(crate) use json_schema::json_schema_fields;
pub(crate) use protobuf::protobuf_fields;

/// A column the schema asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldColumn {
    pub(crate) name: String,
    pub(crate) ty: ColumnType,
    /// As the `CREATE`/`ALTER` statement spells it (`numeric(12,2)`, `text[]`).
    pub(crate) sql: String,
    /// The schema allows null (optional, or a union with null).
    pub(crate) optional: bool,
}

/// A type and its spelling; `numeric` with a precision is the only spelling with parameters.
type Created = (ColumnType, String);

/// A scalar type and its spelling.
fn scalar(ty: &'static ColumnType, sql: &str) -> Created {
    (*ty, sql.to_string())
}

/// `T[]` of a scalar, with the element OID the binary array format names; other element types
/// (records, maps, nested arrays) make the array `jsonb`, which keeps any shape.
fn array_of((ty, sql): Created) -> Created {
    let element: (&'static ColumnType, u32) = match ty {
        ColumnType::Text => (&ColumnType::Text, 25),
        ColumnType::Int2 => (&ColumnType::Int2, 21),
        ColumnType::Int4 => (&ColumnType::Int4, 23),
        ColumnType::Int8 => (&ColumnType::Int8, 20),
        ColumnType::Numeric => (&ColumnType::Numeric, 1700),
        ColumnType::Float4 => (&ColumnType::Float4, 700),
        ColumnType::Float8 => (&ColumnType::Float8, 701),
        ColumnType::Bool => (&ColumnType::Bool, 16),
        ColumnType::Timestamptz => (&ColumnType::Timestamptz, 1184),
        ColumnType::Timestamp => (&ColumnType::Timestamp, 1114),
        ColumnType::Date => (&ColumnType::Date, 1082),
        ColumnType::Uuid => (&ColumnType::Uuid, 2950),
        ColumnType::Bytea => (&ColumnType::Bytea, 17),
        _ => return jsonb(),
    };
    (
        ColumnType::Array(ArrayOf {
            element: element.0,
            element_oid: element.1,
        }),
        format!("{sql}[]"),
    )
}

/// Structures with no column type of their own keep their JSON.
fn jsonb() -> Created {
    scalar(&ColumnType::Jsonb, "jsonb")
}

/// Refused rather than guessed: the sink cannot write these column types yet, and a text
/// column would silently change what the field means to readers of the table.
fn unsupported(field: &str, what: &str) -> String {
    format!("field {field:?} is {what}, which the sink cannot create a column for; create the column yourself (a type the sink writes, e.g. text) and restart")
}

// ---- Kafka Connect (Connect JSON, Debezium JSON) ----------------------------------------

/// The columns of a Connect `struct` schema's fields, in order.
pub(crate) fn connect_fields(schema: &Value) -> Result<Vec<FieldColumn>, String> {
    if schema["type"] != "struct" {
        return Err(format!(
            "the value schema is {}, not a struct: there are no fields to make columns of",
            schema["type"]
        ));
    }
    let fields = schema["fields"]
        .as_array()
        .ok_or("the struct schema has no `fields` list")?;
    fields
        .iter()
        .map(|f| {
            let name = f["field"]
                .as_str()
                .ok_or("a struct field has no `field` name")?;
            let (ty, sql) = connect_type(name, f)?;
            Ok(FieldColumn {
                name: name.to_string(),
                ty,
                sql,
                optional: f["optional"].as_bool().unwrap_or(false),
            })
        })
        .collect()
}

/// One Connect schema's type: its logical name first, then its base type.
fn connect_type(field: &str, s: &Value) -> Result<Created, String> {
    let logical = s["name"].as_str().unwrap_or("");
    let decimal = decimal_parameters(&s["parameters"], None, None);
    if let Some(created) = connect_logical(field, logical, decimal) {
        return created;
    }
    Ok(match s["type"].as_str().unwrap_or("") {
        "int8" | "int16" => scalar(&ColumnType::Int2, "int2"),
        "int32" => scalar(&ColumnType::Int4, "int4"),
        "int64" => scalar(&ColumnType::Int8, "int8"),
        // JsonConverter's JSON names for Connect's FLOAT32 and FLOAT64 (its `asJsonSchema`):
        // the Java enum's names never appear in a record.
        "float" => scalar(&ColumnType::Float4, "float4"),
        "double" => scalar(&ColumnType::Float8, "float8"),
        "boolean" => scalar(&ColumnType::Bool, "bool"),
        "string" => scalar(&ColumnType::Text, "text"),
        "bytes" => scalar(&ColumnType::Bytea, "bytea"),
        "struct" | "map" => jsonb(),
        "array" => match s["items"]["type"].as_str() {
            Some("array" | "struct" | "map") | None => jsonb(),
            Some(_) => array_of(connect_type(field, &s["items"])?),
        },
        other => {
            return Err(format!(
                "field {field:?} has the unknown Connect type {other:?}"
            ))
        }
    })
}

/// A Connect decimal's precision and scale: Connect's `parameters` (strings; the Avro
/// converter's `connect.parameters`), else the Avro schema's own `precision`/`scale`. Both
/// known, `numeric(p,s)`; otherwise `None`, and the column is a plain `numeric`.
fn decimal_parameters(
    parameters: &Value,
    precision: Option<u64>,
    scale: Option<u64>,
) -> Option<(u16, u16)> {
    let read = |key: &str, fallback: Option<u64>| -> Option<u16> {
        match &parameters[key] {
            Value::String(s) => s.parse().ok(),
            Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            _ => fallback.and_then(|n| u16::try_from(n).ok()),
        }
    };
    Some((
        read("connect.decimal.precision", precision)?,
        read("scale", scale)?,
    ))
}

/// Kafka Connect's and Debezium's logical types, by name: Connect JSON names them in a
/// schema's `name`, the Avro converter in `connect.name` on the plain Avro type, and the
/// converters read them the same way in both (`mapping::avro::plan`, `convert`). `None`: not
/// a logical name this table knows, so the base type decides.
fn connect_logical(
    field: &str,
    name: &str,
    decimal: Option<(u16, u16)>,
) -> Option<Result<Created, String>> {
    Some(Ok(match name {
        "org.apache.kafka.connect.data.Decimal" => match decimal {
            Some((p, s)) => (ColumnType::Numeric, format!("numeric({p},{s})")),
            None => scalar(&ColumnType::Numeric, "numeric"),
        },
        "io.debezium.data.VariableScaleDecimal" => scalar(&ColumnType::Numeric, "numeric"),
        "org.apache.kafka.connect.data.Date" | "io.debezium.time.Date" => {
            scalar(&ColumnType::Date, "date")
        }
        // Connect's Timestamp is an instant (java.util.Date): timestamptz keeps it one.
        "org.apache.kafka.connect.data.Timestamp" | "io.debezium.time.ZonedTimestamp" => {
            scalar(&ColumnType::Timestamptz, "timestamptz")
        }
        // Debezium's are the source column's wall-clock value, without a zone.
        "io.debezium.time.Timestamp"
        | "io.debezium.time.MicroTimestamp"
        | "io.debezium.time.NanoTimestamp" => scalar(&ColumnType::Timestamp, "timestamp"),
        "io.debezium.data.Json" => jsonb(),
        "io.debezium.data.Uuid" => scalar(&ColumnType::Uuid, "uuid"),
        // Counts since midnight in the unit the name states, which the time converter reads.
        "org.apache.kafka.connect.data.Time"
        | "io.debezium.time.Time"
        | "io.debezium.time.MicroTime"
        | "io.debezium.time.NanoTime" => scalar(&ColumnType::Time, "time"),
        // Microseconds (`MicroDuration`) or an ISO 8601 string (`Interval`): both are lengths.
        "io.debezium.time.MicroDuration" | "io.debezium.time.Interval" => {
            scalar(&ColumnType::Interval, "interval")
        }
        // A time with an offset: no converter is proven on Debezium's spelling of it yet.
        "io.debezium.time.ZonedTime" => {
            return Some(Err(unsupported(field, "a time of day with a zone")))
        }
        _ => return None,
    }))
}

// ---- Avro --------------------------------------------------------------------------------

/// The columns of an Avro record's fields, in order; `root` resolves named types.
pub(crate) fn avro_fields(root: &Value, record: &Value) -> Result<Vec<FieldColumn>, String> {
    let fields = record["fields"]
        .as_array()
        .ok_or("the record schema has no `fields` list")?;
    fields
        .iter()
        .map(|f| {
            let name = f["name"].as_str().ok_or("a record field has no name")?;
            let (optional, ty) = avro_nullable(&f["type"]);
            let (ty, sql) = avro_type(root, name, ty, 0)?;
            Ok(FieldColumn {
                name: name.to_string(),
                ty,
                sql,
                optional,
            })
        })
        .collect()
}

/// `["null", T]` (either order) is an optional `T`; other unions are kept whole.
fn avro_nullable(ty: &Value) -> (bool, &Value) {
    match ty.as_array() {
        Some(branches) => {
            let others: Vec<&Value> = branches.iter().filter(|b| *b != "null").collect();
            let optional = others.len() < branches.len();
            match others.as_slice() {
                [one] => (optional, one),
                _ => (optional, ty),
            }
        }
        None => (ty == "null", ty),
    }
}

/// One Avro type: logical type first, then the type, resolving names (bounded depth, since
/// named types may refer to themselves).
fn avro_type(root: &Value, field: &str, ty: &Value, depth: usize) -> Result<Created, String> {
    if depth > 32 {
        return Ok(jsonb());
    }
    if ty.is_array() {
        // A union of several non-null types: its JSON may be any of them.
        return Ok(jsonb());
    }
    if let Some(name) = ty.as_str() {
        return Ok(match name {
            "boolean" => scalar(&ColumnType::Bool, "bool"),
            "int" => scalar(&ColumnType::Int4, "int4"),
            "long" => scalar(&ColumnType::Int8, "int8"),
            "float" => scalar(&ColumnType::Float4, "float4"),
            "double" => scalar(&ColumnType::Float8, "float8"),
            "string" => scalar(&ColumnType::Text, "text"),
            "bytes" => scalar(&ColumnType::Bytea, "bytea"),
            "null" => jsonb(),
            named => match find_named(root, named) {
                Some(def) => avro_type(root, field, def, depth + 1)?,
                None => return Err(format!("field {field:?} names the unknown type {named:?}")),
            },
        });
    }
    // Debezium's Avro converter keeps Connect's logical name in `connect.name`, which the
    // Avro transcoder reads before the Avro logical type (`mapping::avro::plan`); so here.
    let connect = match ty["connect.name"].as_str() {
        Some(name) => name,
        // The transcoder knows Debezium's decimal record by its full name too.
        None if ty["type"] == "record"
            && (ty["name"] == "io.debezium.data.VariableScaleDecimal"
                || (ty["name"] == "VariableScaleDecimal"
                    && ty["namespace"] == "io.debezium.data")) =>
        {
            "io.debezium.data.VariableScaleDecimal"
        }
        None => "",
    };
    let decimal = decimal_parameters(
        &ty["connect.parameters"],
        ty["precision"].as_u64(),
        ty["scale"].as_u64(),
    );
    if let Some(created) = connect_logical(field, connect, decimal) {
        return created;
    }
    let logical = ty["logicalType"].as_str().unwrap_or("");
    Ok(match (logical, ty["type"].as_str().unwrap_or("")) {
        ("decimal", "bytes" | "fixed") => match (ty["precision"].as_u64(), ty["scale"].as_u64()) {
            (Some(p), s) => (
                ColumnType::Numeric,
                format!("numeric({p},{})", s.unwrap_or(0)),
            ),
            (None, _) => scalar(&ColumnType::Numeric, "numeric"),
        },
        ("uuid", "string" | "fixed") => scalar(&ColumnType::Uuid, "uuid"),
        ("date", "int") => scalar(&ColumnType::Date, "date"),
        ("timestamp-millis" | "timestamp-micros" | "timestamp-nanos", "long") => {
            scalar(&ColumnType::Timestamptz, "timestamptz")
        }
        ("local-timestamp-millis" | "local-timestamp-micros" | "local-timestamp-nanos", "long") => {
            scalar(&ColumnType::Timestamp, "timestamp")
        }
        ("time-millis", "int") | ("time-micros", "long") => scalar(&ColumnType::Time, "time"),
        ("duration", "fixed") => scalar(&ColumnType::Interval, "interval"),
        ("time-millis" | "time-micros" | "duration", _) => {
            return Err(unsupported(
                field,
                "a time or duration on an unexpected base type",
            ))
        }
        (_, "record" | "map") => jsonb(),
        (_, "enum") => scalar(&ColumnType::Text, "text"),
        (_, "fixed") => scalar(&ColumnType::Bytea, "bytea"),
        (_, "array") => {
            // Null elements are fine in a PostgreSQL array.
            let (_, items) = avro_nullable(&ty["items"]);
            match avro_type(root, field, items, depth + 1)? {
                (ColumnType::Jsonb | ColumnType::Array(_), _) => jsonb(),
                element => array_of(element),
            }
        }
        // `{"type": "long"}` and the like: the primitive, its logical type unknown to us.
        (_, _) => avro_type(root, field, &ty["type"], depth + 1)?,
    })
}

/// A named type's definition anywhere in the schema, by full or short name.
pub(super) fn find_named<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Object(map) => {
            if matches!(
                map.get("type").and_then(Value::as_str),
                Some("record" | "enum" | "fixed")
            ) {
                let own = map.get("name").and_then(Value::as_str).unwrap_or("");
                let full = match map.get("namespace").and_then(Value::as_str) {
                    Some(ns) if !own.contains('.') => format!("{ns}.{own}"),
                    _ => own.to_string(),
                };
                let short = own.rsplit('.').next().unwrap_or(own);
                if full == name || own == name || short == name {
                    return Some(v);
                }
            }
            map.values().find_map(|child| find_named(child, name))
        }
        Value::Array(items) => items.iter().find_map(|child| find_named(child, name)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(json: &str) -> Vec<(String, String, bool)> {
        connect_fields(&serde_json::from_str(json).unwrap())
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.sql, c.optional))
            .collect()
    }

    /// Every Connect type and logical type the README's table lists becomes the type it says.
    #[test]
    fn connect_types_become_the_documented_columns() {
        let got = connect(
            r#"{"type":"struct","fields":[
            {"field":"a","type":"int8"},{"field":"b","type":"int16"},{"field":"c","type":"int32"},
            {"field":"d","type":"int64","optional":true},{"field":"e","type":"float"},
            {"field":"f","type":"double"},{"field":"g","type":"boolean"},{"field":"h","type":"string"},
            {"field":"i","type":"bytes"},{"field":"j","type":"struct","fields":[]},
            {"field":"k","type":"map","keys":{"type":"string"},"values":{"type":"int32"}},
            {"field":"l","type":"array","items":{"type":"string"}},
            {"field":"m","type":"array","items":{"type":"struct","fields":[]}},
            {"field":"n","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"12"}},
            {"field":"o","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
            {"field":"p","type":"int32","name":"org.apache.kafka.connect.data.Date"},
            {"field":"q","type":"int64","name":"org.apache.kafka.connect.data.Timestamp"},
            {"field":"r","type":"int64","name":"io.debezium.time.MicroTimestamp"},
            {"field":"s","type":"string","name":"io.debezium.time.ZonedTimestamp"},
            {"field":"t","type":"string","name":"io.debezium.data.Json"},
            {"field":"u","type":"string","name":"io.debezium.data.Uuid"},
            {"field":"v","type":"struct","name":"io.debezium.data.VariableScaleDecimal","fields":[]}]}"#,
        );
        let sql: Vec<&str> = got.iter().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(
            sql,
            [
                "int2",
                "int2",
                "int4",
                "int8",
                "float4",
                "float8",
                "bool",
                "text",
                "bytea",
                "jsonb",
                "jsonb",
                "text[]",
                "jsonb",
                "numeric(12,2)",
                "numeric",
                "date",
                "timestamptz",
                "timestamp",
                "timestamptz",
                "jsonb",
                "uuid",
                "numeric"
            ]
        );
        assert!(got[3].2 && !got[2].2, "optional follows the schema");
    }

    /// Times of day become `time` and durations `interval`, in both schema languages, as the
    /// time and interval converters read them; a zoned time is refused with the field's name,
    /// never guessed.
    #[test]
    fn times_of_day_and_durations_become_time_and_interval() {
        let got = connect(
            r#"{"type":"struct","fields":[
            {"field":"a","type":"int32","name":"org.apache.kafka.connect.data.Time"},
            {"field":"b","type":"int32","name":"io.debezium.time.Time"},
            {"field":"c","type":"int64","name":"io.debezium.time.MicroTime"},
            {"field":"d","type":"int64","name":"io.debezium.time.NanoTime"},
            {"field":"e","type":"int64","name":"io.debezium.time.MicroDuration"},
            {"field":"f","type":"string","name":"io.debezium.time.Interval"}]}"#,
        );
        let sql: Vec<&str> = got.iter().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(
            sql,
            ["time", "time", "time", "time", "interval", "interval"]
        );

        let root: Value = serde_json::from_str(
            r#"{"type":"record","name":"R","fields":[
            {"name":"a","type":{"type":"int","logicalType":"time-millis"}},
            {"name":"b","type":["null",{"type":"long","logicalType":"time-micros"}]},
            {"name":"c","type":{"type":"fixed","name":"D","size":12,"logicalType":"duration"}},
            {"name":"d","type":{"type":"long","connect.name":"io.debezium.time.MicroDuration"}},
            {"name":"e","type":{"type":"string","connect.name":"io.debezium.time.Interval"}},
            {"name":"f","type":{"type":"long","connect.name":"io.debezium.time.MicroTime"}}]}"#,
        )
        .unwrap();
        let got = avro_fields(&root, &root).unwrap();
        let sql: Vec<&str> = got.iter().map(|c| c.sql.as_str()).collect();
        assert_eq!(
            sql,
            ["time", "time", "interval", "interval", "interval", "time"]
        );
        assert!(got[1].optional && !got[0].optional);
        assert_eq!(got[0].ty, ColumnType::Time);
        assert_eq!(got[2].ty, ColumnType::Interval);

        let zoned = r#"{"type":"struct","fields":[{"field":"at","type":"string","name":"io.debezium.time.ZonedTime"}]}"#;
        let err = connect_fields(&serde_json::from_str(zoned).unwrap()).unwrap_err();
        assert!(
            err.contains("\"at\"") && err.contains("time of day with a zone"),
            "{err}"
        );
    }

    /// Debezium's Avro converter names Connect's logical types in `connect.name`: each becomes
    /// the column its Connect spelling does (one table for both), with a decimal's precision
    /// from `connect.parameters`; a zoned time is refused there too.
    #[test]
    fn debezium_avro_connect_names_become_the_connect_columns() {
        let root: Value = serde_json::from_str(
            r#"{"type":"record","name":"Value","namespace":"pg.public.t","fields":[
            {"name":"a","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}},
            {"name":"b","type":{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}},
            {"name":"c","type":{"type":"long","connect.name":"io.debezium.time.NanoTimestamp"}},
            {"name":"d","type":["null",{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}]},
            {"name":"e","type":{"type":"int","connect.name":"io.debezium.time.Date"}},
            {"name":"f","type":{"type":"int","connect.name":"io.debezium.time.Time"}},
            {"name":"g","type":{"type":"long","connect.name":"io.debezium.time.MicroTime"}},
            {"name":"h","type":{"type":"long","connect.name":"io.debezium.time.NanoTime"}},
            {"name":"i","type":{"type":"string","connect.name":"io.debezium.data.Json"}},
            {"name":"j","type":{"type":"string","connect.name":"io.debezium.data.Uuid"}},
            {"name":"k","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.name":"io.debezium.data.VariableScaleDecimal"}},
            {"name":"l","type":["null","io.debezium.data.VariableScaleDecimal"]},
            {"name":"m","type":{"type":"bytes","connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal"}},
            {"name":"n","type":{"type":"bytes","connect.parameters":{"scale":"3"},"connect.name":"org.apache.kafka.connect.data.Decimal"}},
            {"name":"o","type":{"type":"bytes","scale":2,"precision":9,"logicalType":"decimal","connect.parameters":{"scale":"2","connect.decimal.precision":"9"},"connect.name":"org.apache.kafka.connect.data.Decimal"}},
            {"name":"p","type":{"type":"int","connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}},
            {"name":"q","type":{"type":"long","connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}}]}"#,
        )
        .unwrap();
        let got = avro_fields(&root, &root).unwrap();
        let sql: Vec<&str> = got.iter().map(|c| c.sql.as_str()).collect();
        assert_eq!(
            sql,
            [
                "timestamp",
                "timestamp",
                "timestamp",
                "timestamptz",
                "date",
                "time",
                "time",
                "time",
                "jsonb",
                "uuid",
                "numeric",
                "numeric",
                "numeric(10,2)",
                "numeric",
                "numeric(9,2)",
                "date",
                "timestamptz"
            ]
        );
        assert!(got[3].optional && got[11].optional && !got[1].optional);
        assert_eq!(got[1].ty, ColumnType::Timestamp);
        let zoned: Value = serde_json::from_str(
            r#"{"type":"record","name":"R","fields":[{"name":"at","type":{"type":"string","connect.name":"io.debezium.time.ZonedTime"}}]}"#,
        )
        .unwrap();
        let err = avro_fields(&zoned, &zoned).unwrap_err();
        assert!(
            err.contains("\"at\"") && err.contains("time of day with a zone"),
            "{err}"
        );
    }

    /// Avro primitives, logical types, unions with null, named types and arrays.
    #[test]
    fn avro_types_become_the_documented_columns() {
        let root: Value = serde_json::from_str(
            r#"{"type":"record","name":"R","namespace":"n","fields":[
            {"name":"a","type":"boolean"},{"name":"b","type":"int"},{"name":"c","type":["null","long"]},
            {"name":"d","type":"float"},{"name":"e","type":"double"},{"name":"f","type":"string"},
            {"name":"g","type":"bytes"},
            {"name":"h","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
            {"name":"i","type":{"type":"string","logicalType":"uuid"}},
            {"name":"j","type":{"type":"int","logicalType":"date"}},
            {"name":"k","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"l","type":{"type":"long","logicalType":"local-timestamp-micros"}},
            {"name":"m","type":{"type":"enum","name":"E","symbols":["X"]}},
            {"name":"n","type":"E"},
            {"name":"o","type":{"type":"array","items":"long"}},
            {"name":"p","type":{"type":"record","name":"Inner","fields":[]}},
            {"name":"q","type":{"type":"map","values":"long"}},
            {"name":"r","type":["string","long"]},
            {"name":"s","type":{"type":"fixed","name":"F","size":4}}]}"#,
        )
        .unwrap();
        let got = avro_fields(&root, &root).unwrap();
        let sql: Vec<&str> = got.iter().map(|c| c.sql.as_str()).collect();
        assert_eq!(
            sql,
            [
                "bool",
                "int4",
                "int8",
                "float4",
                "float8",
                "text",
                "bytea",
                "numeric(12,2)",
                "uuid",
                "date",
                "timestamptz",
                "timestamp",
                "text",
                "text",
                "int8[]",
                "jsonb",
                "jsonb",
                "jsonb",
                "bytea"
            ]
        );
        assert!(got[2].optional && !got[1].optional);
    }
}
