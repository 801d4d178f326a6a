//! The fields a registered schema gives a record's row, for `check` to hold against the
//! table: which columns the schema can fill, and which fields no column takes.

use serde_json::Value;

use super::protobuf::ProtobufTranscoder;
use crate::registry::{RegisteredSchema, SchemaKind};

/// The row's top-level field names, in schema order. For Debezium change events (`debezium`)
/// the row is the `after` record's.
pub(crate) fn row_fields(schema: &RegisteredSchema, debezium: bool) -> Result<Vec<String>, String> {
    match schema.kind {
        SchemaKind::Avro => {
            let json: Value =
                serde_json::from_str(&schema.text).map_err(|e| format!("not JSON: {e}"))?;
            Ok(names(&avro_row(&json, debezium)?["fields"], "name"))
        }
        SchemaKind::Json => {
            let json: Value =
                serde_json::from_str(&schema.text).map_err(|e| format!("not JSON: {e}"))?;
            Ok(json_schema_row(&json, debezium)["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default())
        }
        SchemaKind::Protobuf => ProtobufTranscoder::registered(schema)?.row_fields(debezium),
    }
}

/// The Avro record a row is: the schema itself, or its `after` record for Debezium. Shared with
/// `schema_types`, so names and types are read from the same record.
pub(super) fn avro_row(json: &Value, debezium: bool) -> Result<&Value, String> {
    let mut record = json;
    if debezium {
        let after =
            record_field(record, "after").ok_or("the change event schema has no `after` field")?;
        record = resolve_record(json, &after["type"])
            .ok_or("`after` is not a record (or a union of null and a record)")?;
    }
    if record["type"] != "record" {
        return Err("the schema is not a record".into());
    }
    Ok(record)
}

/// The JSON Schema object a row is: the schema itself, or its `after` property (the branch
/// with properties, when `after` is a union with null) for Debezium.
pub(super) fn json_schema_row(json: &Value, debezium: bool) -> &Value {
    let mut object = json;
    if debezium {
        object = &json["properties"]["after"];
        if let Some(branch) = ["oneOf", "anyOf"]
            .iter()
            .filter_map(|k| object[k].as_array())
            .flatten()
            .find(|b| b["properties"].is_object())
        {
            object = branch;
        }
    }
    object
}

/// A record's field of this name.
fn record_field<'a>(record: &'a Value, name: &str) -> Option<&'a Value> {
    record["fields"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)
}

/// The record a field's type is: inline, a union with null, or a named type defined elsewhere
/// in the schema (Debezium names `before`'s record and refers to it from `after`).
fn resolve_record<'a>(root: &'a Value, ty: &'a Value) -> Option<&'a Value> {
    match ty {
        Value::Object(o) if o.get("type").is_some_and(|t| t == "record") => Some(ty),
        Value::Array(branches) => branches.iter().find_map(|b| resolve_record(root, b)),
        Value::String(name) => find_named(root, name).filter(|r| r["type"] == "record"),
        _ => None,
    }
}

/// The named type (record, enum or fixed) called `name` (full or short) anywhere under `v`.
/// Avro names are unique across kinds, so a match is the type the name refers to.
pub(super) fn find_named<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Object(o) => {
            if o.get("type")
                .is_some_and(|t| ["record", "error", "enum", "fixed"].iter().any(|k| t == k))
            {
                let short = o.get("name").and_then(Value::as_str).unwrap_or_default();
                let full = match o.get("namespace").and_then(Value::as_str) {
                    Some(ns) => format!("{ns}.{short}"),
                    None => short.to_string(),
                };
                let wanted_short = name.rsplit('.').next().unwrap_or(name);
                if full == name || short == name || (short == wanted_short && !name.contains('.')) {
                    return Some(v);
                }
            }
            o.values().find_map(|c| find_named(c, name))
        }
        Value::Array(a) => a.iter().find_map(|c| find_named(c, name)),
        _ => None,
    }
}

/// The `key` of every object in an array.
fn names(fields: &Value, key: &str) -> Vec<String> {
    fields
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f[key].as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(kind: SchemaKind, text: &str) -> RegisteredSchema {
        RegisteredSchema {
            kind,
            text: text.into(),
            imports: Vec::new(),
        }
    }

    #[test]
    fn avro_rows_and_debezium_after_records_list_their_fields() {
        let plain = schema(
            SchemaKind::Avro,
            r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"n","type":"string"}]}"#,
        );
        assert_eq!(row_fields(&plain, false).unwrap(), ["id", "n"]);
        let envelope = schema(
            SchemaKind::Avro,
            r#"{"type":"record","name":"Envelope","namespace":"db.t","fields":[
              {"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"id","type":"int"},{"name":"x","type":"string"}]}]},
              {"name":"after","type":["null","Value"]},{"name":"op","type":"string"}]}"#,
        );
        assert_eq!(row_fields(&envelope, true).unwrap(), ["id", "x"]);
        assert!(row_fields(&plain, true).unwrap_err().contains("after"));
    }

    #[test]
    fn json_schemas_and_protobuf_messages_list_their_fields() {
        let js = schema(
            SchemaKind::Json,
            r#"{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}}}"#,
        );
        let mut fields = row_fields(&js, false).unwrap();
        fields.sort();
        assert_eq!(fields, ["id", "name"]);
        let proto = schema(
            SchemaKind::Protobuf,
            "syntax = \"proto3\"; message Row { int64 id = 1; string name = 2; } message Env { Row before = 1; Row after = 2; string op = 3; }",
        );
        assert_eq!(row_fields(&proto, false).unwrap(), ["id", "name"]);
    }
}
