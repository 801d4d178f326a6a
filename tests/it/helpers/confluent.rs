//! confluent-kafka's own serializers as tests drive them: the bytes that prove a registry
//! format (Avro, Protobuf, JSON Schema) are written by the serializer users' producers run,
//! which also registers the schemas in the real registry (auto.register.schemas, subject
//! `<topic>-value` / `<topic>-key`). One Python process per call:
//! scripts/serializers/confluent_produce.py, in the venv scripts/serializers.sh installs.

use serde_json::{json, Value};

use super::registry::registry_url;
use super::services::services;

const PROGRAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/serializers/confluent_produce.py"
);

const HOW_TO: &str =
    "this test produces with confluent-kafka's Python serializers, which are not installed. Run
  - `scripts/serializers.sh` (or `scripts/dev-services.sh up`, which runs it; PyPI only), then
  - `eval \"$(scripts/dev-services.sh env)\"`, which sets KPS_SERIALIZERS_PYTHON";

/// How one side of the record (value or key) is serialized.
pub enum Serde<'a> {
    /// `AvroSerializer` with this Avro schema.
    Avro(&'a str),
    /// `JSONSerializer` with this JSON Schema.
    Json(&'a str),
    /// `ProtobufSerializer` with message `message` of `file`, compiled from `files` (name,
    /// `.proto` text) by protoc at run time, as a producer's generated class would be.
    Protobuf {
        files: &'a [(&'a str, &'a str)],
        file: &'a str,
        message: &'a str,
    },
    /// `StringSerializer`: a plain UTF-8 key.
    String,
}

impl Serde<'_> {
    fn describe(&self) -> Value {
        match self {
            Serde::Avro(schema) => json!({"format": "avro", "schema": schema}),
            Serde::Json(schema) => json!({"format": "json", "schema": schema}),
            Serde::Protobuf {
                files,
                file,
                message,
            } => json!({
                "format": "protobuf",
                "files": files.iter().map(|(n, t)| (n.to_string(), json!(t))).collect::<serde_json::Map<_, _>>(),
                "file": file,
                "message": message,
            }),
            Serde::String => json!({"format": "string"}),
        }
    }
}

/// The interpreter of the serializers' venv; panics saying how to get it when it is missing.
fn python() -> String {
    let python = std::env::var("KPS_SERIALIZERS_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            let home = std::env::var("HOME").unwrap_or_default();
            format!("{home}/.cache/kafka-pg-sink/serializers/venv/bin/python")
        });
    assert!(
        std::path::Path::new(&python).is_file(),
        "{python} does not exist: {HOW_TO}"
    );
    python
}

/// Produces `records` (each `{"value": V, "key": K, "partition": P}`, key and partition
/// optional, a null value a tombstone; see the program's doc for V's tagged forms) to `topic`
/// through the real serializers and the shared broker and registry, in order. Returns each
/// record's (partition, offset).
pub async fn produce(
    topic: &str,
    value: &Serde<'_>,
    key: Option<&Serde<'_>>,
    records: &[Value],
) -> Vec<(i32, i64)> {
    produce_evolving(topic, std::slice::from_ref(value), key, records).await
}

/// As [`produce`], for a producer whose value schema evolves: each record's `"schema"` (0 when
/// absent) picks its serializer from `values`, as a new producer version would.
pub async fn produce_evolving(
    topic: &str,
    values: &[Serde<'_>],
    key: Option<&Serde<'_>>,
    records: &[Value],
) -> Vec<(i32, i64)> {
    let spec = json!({
        "bootstrap": services().kafka,
        "registry": registry_url(),
        "topic": topic,
        "values": values.iter().map(Serde::describe).collect::<Vec<_>>(),
        "key": key.map(Serde::describe),
        "records": records,
    });
    let mut child = tokio::process::Command::new(python())
        .arg(PROGRAM)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the serializers' python: {e}: {HOW_TO}"));
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(spec.to_string().as_bytes())
            .await
            .expect("write the description");
    }
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        child.wait_with_output(),
    )
    .await
    .expect("confluent_produce.py finished within 3 minutes")
    .expect("confluent_produce.py ran");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "confluent_produce.py failed ({}):\n{stderr}",
        out.status
    );
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("confluent_produce.py printed no JSON ({e}):\n{stderr}"));
    answer["delivered"]
        .as_array()
        .expect("delivered")
        .iter()
        .map(|d| (d[0].as_i64().unwrap() as i32, d[1].as_i64().unwrap()))
        .collect()
}
