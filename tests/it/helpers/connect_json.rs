//! The bytes Kafka Connect's own JsonConverter writes (and Debezium's connectors, which build
//! their records with Debezium's schema builders and then use that converter), for tests that
//! prove the Connect JSON and Debezium JSON formats: a test describes its records (a schema
//! in Connect's Java type names, values in readable JSON) and gets back exactly what users'
//! topics hold. `scripts/serializers/connect/ConnectJson.java` documents the description; one
//! JVM serializes a whole batch, since a JVM takes seconds to start on two cores.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

const HOW_TO: &str = "KPS_CONNECT_JSON_CP is not set or the helper is not built: the Connect JSON tests run Kafka's real JsonConverter. Run `scripts/dev-services.sh build connect-json` (or `up`), then `eval \"$(scripts/dev-services.sh env)\"`";

/// One record to serialize: its Connect schema (`None`: a schemaless null, a tombstone) and
/// its value.
#[derive(Clone)]
pub struct Described {
    pub schema: Option<Value>,
    pub value: Value,
}

impl Described {
    pub fn new(schema: Value, value: Value) -> Self {
        Self {
            schema: Some(schema),
            value,
        }
    }
}

/// JsonConverter's bytes for each record, in order, with `schemas.enable` as given: `None`
/// where the converter writes no bytes (a null value), the Kafka tombstone.
pub fn serialize(schemas_enable: bool, records: &[Described]) -> Vec<Option<Vec<u8>>> {
    serialize_with(schemas_enable, None, records)
}

/// As `serialize`, with the converter's `decimal.format` (`BASE64` or `NUMERIC`).
pub fn serialize_with(
    schemas_enable: bool,
    decimal_format: Option<&str>,
    records: &[Described],
) -> Vec<Option<Vec<u8>>> {
    let classpath =
        classpath(std::env::var("KPS_CONNECT_JSON_CP").ok()).unwrap_or_else(|e| panic!("{e}"));
    let request = json!({
        "schemas_enable": schemas_enable,
        "decimal_format": decimal_format,
        "records": records.iter().map(|r| json!({"schema": r.schema, "value": r.value})).collect::<Vec<_>>(),
    });
    // C1 only and the serial collector: this JVM lives for a second or two.
    let mut child = Command::new("java")
        .args([
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            // Room for a whole request (40,000 records in the ddl kill test) as one tree.
            "-Xmx512m",
            "-cp",
            &classpath,
            "ConnectJson",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run java: {e}. {HOW_TO}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("write the request");
    let out = child.wait_with_output().expect("ConnectJson ran");
    assert!(
        out.status.success(),
        "ConnectJson failed ({}): {}\n(if scripts/serializers/connect/ changed since it was built, run `scripts/dev-services.sh build connect-json`)",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Option<Vec<u8>>> = String::from_utf8(out.stdout)
        .expect("hex lines")
        .lines()
        .map(|line| match line {
            "null" => None,
            hex => Some(
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                    .collect(),
            ),
        })
        .collect();
    assert_eq!(lines.len(), records.len(), "one line per record");
    lines
}

/// The helper's classpath from `KPS_CONNECT_JSON_CP`: set, and its first entry (the classes
/// directory) holding the compiled helper; else why not and how to get it, so a test fails
/// saying so instead of skipping.
pub fn classpath(var: Option<String>) -> Result<String, String> {
    let classpath = var
        .filter(|cp| !cp.is_empty())
        .ok_or_else(|| HOW_TO.to_string())?;
    let classes = classpath.split(':').next().unwrap_or_default();
    if !std::path::Path::new(classes)
        .join("ConnectJson.class")
        .exists()
    {
        return Err(format!("{classes}/ConnectJson.class is missing. {HOW_TO}"));
    }
    Ok(classpath)
}

/// A struct schema of `(field name, field schema)` pairs, as the helper reads it.
pub fn struct_of(name: &str, fields: &[(&str, Value)]) -> Value {
    json!({
        "type": "struct",
        "name": name,
        "fields": fields.iter().map(|(n, s)| json!({"name": n, "schema": s})).collect::<Vec<_>>(),
    })
}

/// `schema` with `"optional": true` (shorthand type names become objects).
pub fn optional(schema: Value) -> Value {
    let mut s = match schema {
        Value::String(t) => json!({ "type": t }),
        other => other,
    };
    s["optional"] = json!(true);
    s
}

/// A Debezium change-event schema built with `io.debezium.data.Envelope` around `row`, with a
/// small `source` struct holding the table's name (as the connectors' `source.table`).
pub fn debezium_envelope(name: &str, row: Value) -> Value {
    json!({"envelope": {
        "name": format!("{name}.Envelope"),
        "row": optional(row),
        "source": struct_of("io.debezium.connector.postgresql.Source", &[
            ("db", json!("string")), ("table", json!("string")),
        ]),
    }})
}

/// An event's value for `debezium_envelope`: `op` with its `before`/`after` rows.
pub fn debezium_event(op: &str, before: Value, after: Value) -> Value {
    json!({
        "op": op, "before": before, "after": after,
        "source": {"db": "inventory", "table": "t"}, "ts_ms": 1_767_225_600_000i64,
    })
}
