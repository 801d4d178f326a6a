//! Issue 25, defect 5: Debezium's `io.debezium.data.Json` is a string holding JSON text. With
//! the schema (`schemas.enable=true`) the sink knows; without it, `json_text` says so per
//! column. Change events built with Debezium's own `Envelope` and schema builders and written by
//! Kafka's JsonConverter (`helpers::connect_json`), both ways, must give the same jsonb values.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::connect_json::{
    debezium_envelope, debezium_event, optional, serialize, struct_of, Described,
};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// The customers' change events: creates, an update, a delete, and one whose `profile` is
/// not JSON text (offset 3).
fn events() -> Vec<Described> {
    let row = struct_of(
        "dbserver1.inventory.customers.Value",
        &[
            ("id", json!("int32")),
            ("name", optional(json!("string"))),
            ("profile", optional(json!({"debezium": "Json"}))),
            ("settings", optional(json!({"debezium": "Json"}))),
        ],
    );
    let schema = debezium_envelope("dbserver1.inventory.customers", row);
    let customer = |id: i32, name: &str, profile: Value, settings: Value| json!({"id": id, "name": name, "profile": profile, "settings": settings});
    let gold = customer(
        1,
        "ann",
        json!(r#"{"tier": "gold", "tags": ["a", "b"]}"#),
        json!(r#"{"x":1,  "y":[true,null]}"#),
    );
    let silver = customer(2, "bob", json!(r#"{"tier":"silver"}"#), Value::Null);
    [
        debezium_event("r", Value::Null, gold.clone()),
        debezium_event("c", Value::Null, silver.clone()),
        debezium_event(
            "u",
            gold,
            customer(
                1,
                "ann",
                json!(r#"{"tier":"platinum","since":2019}"#),
                json!("[]"),
            ),
        ),
        debezium_event(
            "c",
            Value::Null,
            customer(3, "cy", json!("{\"tier\": "), Value::Null),
        ),
        debezium_event(
            "c",
            Value::Null,
            customer(4, "dee", json!("[1, \"two\"]"), json!("\"s\"")),
        ),
        debezium_event("d", silver, Value::Null),
    ]
    .into_iter()
    .map(|event| Described::new(schema.clone(), event))
    .collect()
}

const TABLE: &str = "(id int4 PRIMARY KEY, name text, profile jsonb, settings json)";

/// Drains the events, as JsonConverter writes them with `schemas_enable`, into `table`.
async fn drain(db: &TestDb, table: &str, schemas_enable: bool, topic_settings: &str) {
    db.pool
        .execute(&*format!("CREATE TABLE {table} {TABLE}"))
        .await
        .unwrap();
    let records: Vec<RawRecord> = serialize(schemas_enable, &events())
        .into_iter()
        .map(|value| RawRecord {
            value,
            ..Default::default()
        })
        .collect();
    let sample = String::from_utf8_lossy(records[0].value.as_deref().unwrap()).into_owned();
    assert_eq!(
        sample.contains("\"io.debezium.data.Json\""),
        schemas_enable,
        "{sample}"
    );
    let topic = TestTopic::create(1).await;
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, table);
    config.metadata = String::new();
    config.topic_settings =
        format!("format = \"debezium\"\non_error = \"dead_letter\"\n{topic_settings}");
    let mut sink = Sink::start(&config, table);
    wait_drained(db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!((letters[0].0, letters[0].1.as_str()), (3, "mapping"));
    assert!(
        letters[0].2.contains("profile") && letters[0].2.contains("not JSON"),
        "{}",
        letters[0].2
    );
}

/// The source state: every column as PostgreSQL prints it; jsonb normalises, json keeps the
/// text as sent.
fn expected() -> Vec<Vec<Option<String>>> {
    let row = |cells: [Option<&str>; 5]| cells.iter().map(|c| c.map(str::to_string)).collect();
    vec![
        row([
            Some("1"),
            Some("ann"),
            Some(r#"{"tier": "platinum", "since": 2019}"#),
            Some("[]"),
            Some("platinum"),
        ]),
        row([
            Some("4"),
            Some("dee"),
            Some(r#"[1, "two"]"#),
            Some(r#""s""#),
            None,
        ]),
    ]
}

/// Without a schema, `json_text` columns hold the JSON inside Debezium's strings (a `jsonb`
/// whose `profile->>'tier'` is the tier, a `json` its text as sent), text that is not JSON is
/// a `mapping` dead letter at its offset; with the schema and without the setting the same
/// events give the same values.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_json_strings_land_as_json_with_or_without_the_schema() {
    let db = TestDb::migrated().await;
    let columns = ["id", "name", "profile", "settings", "profile->>'tier'"];
    drain(
        &db,
        "schemaless",
        false,
        "json_text = [\"profile\", \"settings\"]",
    )
    .await;
    assert_eq!(db.rows_as_text("schemaless", &columns).await, expected());
    drain(&db, "with_schema", true, "").await;
    assert_eq!(db.rows_as_text("with_schema", &columns).await, expected());
    // The jsonb values are equal as values too, not only as printed.
    let differ: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM schemaless s FULL JOIN with_schema w USING (id)
          WHERE s.profile IS DISTINCT FROM w.profile OR s.settings::text IS DISTINCT FROM w.settings::text",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(differ, 0);
}

/// `check` names `json_text` for each json and jsonb column of a schemaless-capable topic that
/// lacks it, shows the setting where it is given, and refuses it on a column of another type.
#[tokio::test(flavor = "multi_thread")]
async fn check_names_json_text_for_json_columns_and_refuses_it_elsewhere() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(&*format!("CREATE TABLE customers {TABLE}"))
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let check = |topic_settings: &str| {
        let mut config = SinkConfig::new(&db.url, &topic.name, "customers");
        config.metadata = String::new();
        config.topic_settings = format!("format = \"debezium\"\n{topic_settings}");
        let file = ConfigFile::new(&config.toml());
        async move { run_cli(&["check", "--config", file.arg()]).await }
    };
    let out = check("").await;
    assert!(
        out.status.success(),
        "a note is not a problem:\n{}",
        out.stdout
    );
    let notes: Vec<&str> = out.stdout.lines().filter(|l| l.contains("note:")).collect();
    assert_eq!(notes.len(), 2, "{}", out.stdout);
    assert!(
        notes[0].contains("column profile (jsonb)")
            && notes[0].contains("without a schema")
            && notes[0].contains(r#"json_text = ["profile"]"#),
        "{}",
        out.stdout
    );
    assert!(
        notes[1].contains("column settings (json)")
            && notes[1].contains(r#"json_text = ["settings"]"#),
        "{}",
        out.stdout
    );

    let out = check("json_text = [\"profile\", \"settings\"]").await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("note:"), "{}", out.stdout);
    assert_eq!(
        out.stdout.matches("strings are JSON text").count(),
        2,
        "{}",
        out.stdout
    );

    let out = check("json_text = [\"name\"]").await;
    assert!(!out.status.success(), "{}", out.stdout);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("json_text: column \"name\" is text; only json and jsonb columns"),
        "{said}"
    );
}
