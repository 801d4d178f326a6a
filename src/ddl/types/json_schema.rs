//! JSON Schema properties → created columns. A JSON Schema record's payload is copied as it
//! is (`mapping::json_schema`), so a column takes the JSON a value of the declared type is;
//! the sink does not validate records, and a value of another type is a mapping error at its
//! record, never coerced.

use serde_json::Value;

use super::{array_of, jsonb, scalar, Created, FieldColumn};
use crate::schema::ColumnType;

/// How deep `$ref`s are followed before a position is taken as any JSON (they may cycle).
const MAX_REFS: usize = 32;

/// The columns of an object schema's `properties`, in the schema's order; a property is NOT
/// NULL when `required` lists it and its type does not allow null. `root` resolves local
/// `$ref`s (`#/definitions/…`, `#/$defs/…`).
pub(crate) fn json_schema_fields(root: &Value, object: &Value) -> Result<Vec<FieldColumn>, String> {
    let object = resolve(root, object, 0);
    let properties = object["properties"]
        .as_object()
        .ok_or("the JSON Schema has no `properties`: there are no fields to make columns of")?;
    let required: Vec<&str> = object["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    Ok(properties
        .iter()
        .map(|(name, schema)| {
            let (nullable, schema) = nullable(root, schema);
            let (ty, sql) = schema_type(root, schema, 0);
            FieldColumn {
                name: name.clone(),
                ty,
                sql,
                optional: nullable || !required.contains(&name.as_str()),
            }
        })
        .collect())
}

/// A local `$ref` followed to what it names (a JSON pointer into the root); anything else is
/// itself. A reference that names nothing (or another document) stays, and is any JSON.
fn resolve<'a>(root: &'a Value, schema: &'a Value, depth: usize) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) if depth < MAX_REFS => match root.pointer(pointer) {
            Some(target) => resolve(root, target, depth + 1),
            None => schema,
        },
        _ => schema,
    }
}

/// Whether the schema allows null, and the schema of its other values: `"type": ["null", X]`,
/// or `oneOf`/`anyOf` of `{"type": "null"}` and one other schema (as Confluent's converter
/// writes optional fields), is a nullable X.
fn nullable<'a>(root: &'a Value, schema: &'a Value) -> (bool, &'a Value) {
    let schema = resolve(root, schema, 0);
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema[key].as_array() {
            let is_null = |b: &Value| resolve(root, b, 0)["type"] == "null";
            let others: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
            if others.len() < branches.len() {
                if let [one] = others.as_slice() {
                    return (true, resolve(root, one, 0));
                }
                return (true, schema);
            }
        }
    }
    if let Some(types) = schema["type"].as_array() {
        return (types.iter().any(|t| t == "null"), schema);
    }
    (schema["type"] == "null", schema)
}

/// The column of a schema position's values (null aside).
fn schema_type(root: &Value, schema: &Value, depth: usize) -> Created {
    if depth > MAX_REFS {
        return jsonb();
    }
    // Confluent's JSON Schema converter states the Connect type it wrote.
    match schema["connect.type"].as_str() {
        Some("int8" | "int16") => return scalar(&ColumnType::Int2, "int2"),
        Some("int32") => return scalar(&ColumnType::Int4, "int4"),
        Some("int64") => return scalar(&ColumnType::Int8, "int8"),
        Some("float32") => return scalar(&ColumnType::Float4, "float4"),
        Some("float64") => return scalar(&ColumnType::Float8, "float8"),
        // Base64 text, as a bytea column reads it by default.
        Some("bytes") => return scalar(&ColumnType::Bytea, "bytea"),
        _ => {}
    }
    let ty = match &schema["type"] {
        Value::String(t) => t.as_str(),
        // `["null", X]`: X, the null is the column's nullability.
        Value::Array(types) => {
            match types.iter().filter(|t| *t != "null").collect::<Vec<_>>()[..] {
                [Value::String(t)] => t.as_str(),
                _ => return jsonb(),
            }
        }
        _ => return jsonb(),
    };
    match ty {
        "integer" => scalar(&ColumnType::Int8, "int8"),
        // Exact: a JSON number keeps every digit it is written with in `numeric`, where a
        // double would round past 15–17 significant digits.
        "number" => scalar(&ColumnType::Numeric, "numeric"),
        "boolean" => scalar(&ColumnType::Bool, "bool"),
        "string" => match schema["format"].as_str() {
            Some("date-time") => scalar(&ColumnType::Timestamptz, "timestamptz"),
            Some("date") => scalar(&ColumnType::Date, "date"),
            // RFC 3339's `full-time` carries an offset, which only timetz keeps.
            Some("time") => scalar(&ColumnType::Timetz, "timetz"),
            Some("uuid") => scalar(&ColumnType::Uuid, "uuid"),
            _ => scalar(&ColumnType::Text, "text"),
        },
        "array" => {
            let (_, items) = nullable(root, &schema["items"]);
            if !items.is_object() || items["type"].is_null() && items["connect.type"].is_null() {
                return jsonb();
            }
            match schema_type(root, items, depth + 1) {
                (ColumnType::Jsonb | ColumnType::Array(_), _) => jsonb(),
                element => array_of(element),
            }
        }
        _ => jsonb(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(text: &str) -> Vec<(String, String, bool)> {
        let root: Value = serde_json::from_str(text).unwrap();
        json_schema_fields(&root, &root)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.sql, c.optional))
            .collect()
    }

    /// Every row of README's JSON Schema column: types, formats, Connect hints, arrays,
    /// unions with null, `$ref`s, and `required`.
    #[test]
    fn json_schema_types_become_the_documented_columns() {
        let got = columns(
            r##"{"type":"object","required":["a","b","c","d","e","f","g","h","i","j","k","n","u"],
            "properties":{
              "a":{"type":"integer"},"b":{"type":"number"},"c":{"type":"boolean"},"d":{"type":"string"},
              "e":{"type":"string","format":"date-time"},"f":{"type":"string","format":"date"},
              "g":{"type":"string","format":"time"},"h":{"type":"string","format":"uuid"},
              "i":{"type":"integer","connect.type":"int32"},"j":{"type":"integer","connect.type":"int16"},
              "k":{"type":"number","connect.type":"float32"},"l":{"type":"number","connect.type":"float64"},
              "m":{"type":"string","connect.type":"bytes"},"n":{"type":"object","properties":{}},
              "o":{"type":"array","items":{"type":"integer"}},"p":{"type":"array","items":{"type":"object"}},
              "q":{"type":"array"},"r":{"oneOf":[{"type":"null"},{"type":"string","format":"date"}]},
              "s":{"type":["null","integer"]},"t":{"oneOf":[{"type":"string"},{"type":"integer"}]},
              "u":{"anyOf":[{"type":"integer"},{"type":"null"}]},"v":{"$ref":"#/definitions/When"},
              "w":{"$ref":"#/$defs/Tags"},"x":{"type":["string","integer"]},"y":{},
              "z":{"type":"array","items":{"type":"array","items":{"type":"integer"}}}},
            "definitions":{"When":{"type":"string","format":"date-time"}},
            "$defs":{"Tags":{"type":"array","items":{"type":"string"}}}}"##,
        );
        let sql: Vec<(&str, &str, bool)> = got
            .iter()
            .map(|(n, s, o)| (n.as_str(), s.as_str(), *o))
            .collect();
        assert_eq!(
            sql,
            [
                ("a", "int8", false),
                ("b", "numeric", false),
                ("c", "bool", false),
                ("d", "text", false),
                ("e", "timestamptz", false),
                ("f", "date", false),
                ("g", "timetz", false),
                ("h", "uuid", false),
                ("i", "int4", false),
                ("j", "int2", false),
                ("k", "float4", false),
                ("l", "float8", true),
                ("m", "bytea", true),
                ("n", "jsonb", false),
                ("o", "int8[]", true),
                ("p", "jsonb", true),
                ("q", "jsonb", true),
                ("r", "date", true),
                ("s", "int8", true),
                ("t", "jsonb", true),
                ("u", "int8", true),
                ("v", "timestamptz", true),
                ("w", "text[]", true),
                ("x", "jsonb", true),
                ("y", "jsonb", true),
                ("z", "jsonb", true),
            ]
        );
    }

    /// A schema whose root is a `$ref` (as generated from a class) is the object it names; one
    /// without properties has nothing to make columns of.
    #[test]
    fn a_root_ref_is_followed_and_no_properties_is_refused() {
        let got = columns(
            r##"{"$ref":"#/definitions/Row","definitions":{"Row":{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}}}"##,
        );
        assert_eq!(got, [("id".to_string(), "int8".to_string(), false)]);
        let root: Value = serde_json::from_str(r#"{"type":"string"}"#).unwrap();
        assert!(json_schema_fields(&root, &root)
            .unwrap_err()
            .contains("properties"));
    }
}
