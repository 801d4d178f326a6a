//! `check`'s time-unit warning (issue 25, defect 4): it is said only where an integer without
//! a stated unit can reach a time column. Avro's `date`, `timestamp-*` and
//! `local-timestamp-*`, and Debezium's `Date` and `MicroTimestamp` under `encoding = "avro"`,
//! state their unit (the schemas registered by confluent-kafka's AvroSerializer); a plain Avro
//! `long` and a schemaless JSON integer do not.

use serde_json::json;
use sqlx::Executor;

use super::registry_config;
use crate::helpers::confluent::{produce, Serde};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::TestTopic;
use crate::helpers::sink::{run_cli, ConfigFile, SinkConfig};

const LOGICAL: &str = r#"{"type": "record", "name": "Times", "namespace": "kps.units", "fields": [
  {"name": "id", "type": "long"},
  {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
  {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
  {"name": "born", "type": {"type": "int", "logicalType": "date"}},
  {"name": "bare", "type": "long"}
]}"#;

const DEBEZIUM: &str = r#"{"type": "record", "name": "Envelope", "namespace": "dbserver1.units.t", "fields": [
  {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "int"},
    {"name": "born", "type": ["null", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}], "default": null},
    {"name": "updated", "type": ["null", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}], "default": null}
  ], "connect.name": "dbserver1.units.t.Value"}], "default": null},
  {"name": "after", "type": ["null", "Value"], "default": null},
  {"name": "op", "type": "string"},
  {"name": "ts_ms", "type": ["null", "long"], "default": null}
], "connect.name": "dbserver1.units.t.Envelope"}"#;

/// `check`'s output on `config`, which must pass.
async fn check(config: &SinkConfig) -> String {
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(
        out.status.success(),
        "check passes: {}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// The time-unit warnings `check` printed, by column.
fn unit_warnings(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.contains("warning:") && l.contains("time_unit"))
        .collect()
}

/// Three topics, one `check` each: Avro logical times (one plain `long` among them), Debezium's
/// `Date` and `MicroTimestamp` in Avro, and schemaless JSON. On the code before issue 25 every
/// time column of the first two was warned about.
#[tokio::test(flavor = "multi_thread")]
async fn check_warns_about_time_units_only_where_a_bare_integer_can_reach_the_column() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE times (id int8 PRIMARY KEY, at_ms timestamptz, at_us timestamptz,
             local_us timestamp, born date, bare timestamptz);
             CREATE TABLE cdc (id int4 PRIMARY KEY, born date, updated timestamp);
             CREATE TABLE plain (id int8 PRIMARY KEY, at timestamptz)",
        )
        .await
        .unwrap();

    // Avro logical types: every unit stated but the plain `long`'s.
    let avro = TestTopic::create(1).await;
    let record = json!({"value": {"id": 1, "at_ms": 1_700_000_000_000i64,
        "at_us": 1_700_000_000_000_000i64, "local_us": 1_700_000_000_000_000i64,
        "born": 19_000, "bare": 1_700_000_000_000i64}});
    produce(&avro.name, &Serde::Avro(LOGICAL), None, &[record]).await;
    let out = check(&registry_config(&db, &avro, "times", "format = \"avro\"")).await;
    let warned = unit_warnings(&out);
    assert_eq!(warned.len(), 1, "one warning, for `bare`: {out}");
    assert!(warned[0].contains("column bare "), "{out}");

    // Debezium's Date and MicroTimestamp under encoding = "avro".
    let cdc = TestTopic::create(1).await;
    let event = json!({"value": {"before": null,
        "after": {"id": 1, "born": 19_000, "updated": 1_700_000_000_000_000i64},
        "op": "c", "ts_ms": 1_700_000_000_000i64}});
    produce(&cdc.name, &Serde::Avro(DEBEZIUM), None, &[event]).await;
    let config = registry_config(
        &db,
        &cdc,
        "cdc",
        "format = \"debezium\"\nencoding = \"avro\"\nkey = [\"id\"]",
    );
    let out = check(&config).await;
    assert!(
        unit_warnings(&out).is_empty(),
        "no time-unit warning: {out}"
    );

    // A schemaless JSON integer into a timestamp column is still warned about.
    let json_topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &json_topic.name, "plain");
    config.metadata = String::new();
    let out = check(&config).await;
    let warned = unit_warnings(&out);
    assert_eq!(warned.len(), 1, "{out}");
    assert!(warned[0].contains("column at "), "{out}");
}
