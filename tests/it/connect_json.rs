//! Connect JSON as Kafka's own JsonConverter writes it (`helpers::connect_json`): every type
//! the converter can write, Connect's and Debezium's logical types, through the sink into a
//! table it creates and into one made by hand as README's type table says, with and without
//! the schema; and the float and double fields `auto_create` / `auto_evolve` once refused.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::connect_json::{optional, serialize, serialize_with, struct_of, Described};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// One field of the fixture: its Connect schema, the column README's table says it becomes
/// (as `format_type` prints it), the three records' values as the helper reads them, and the
/// column's text in PostgreSQL for each (`None`: NULL).
struct Case {
    field: &'static str,
    schema: Value,
    column: &'static str,
    values: [Value; 3],
    expected: [Option<&'static str>; 3],
}

fn case(
    field: &'static str,
    schema: Value,
    column: &'static str,
    values: [Value; 3],
    expected: [Option<&'static str>; 3],
) -> Case {
    Case {
        field,
        schema,
        column,
        values,
        expected,
    }
}

/// Every Connect type and every logical type the sink documents, optional unless the
/// column is `NOT NULL` in the list below; the third record leaves each optional field null.
fn cases() -> Vec<Case> {
    let dbz = |name: &str| optional(json!({ "debezium": name }));
    vec![
        case(
            "id",
            json!("int64"),
            "bigint",
            [json!(1), json!(2), json!(3)],
            [Some("1"), Some("2"), Some("3")],
        ),
        case(
            "i8",
            optional(json!("int8")),
            "smallint",
            [json!(-128), json!(127), Value::Null],
            [Some("-128"), Some("127"), None],
        ),
        case(
            "i16",
            optional(json!("int16")),
            "smallint",
            [json!(-32768), json!(32767), Value::Null],
            [Some("-32768"), Some("32767"), None],
        ),
        case(
            "i32",
            json!("int32"),
            "integer",
            [json!(-2147483648i64), json!(2147483647), json!(0)],
            [Some("-2147483648"), Some("2147483647"), Some("0")],
        ),
        case(
            "i64",
            optional(json!("int64")),
            "bigint",
            [json!(i64::MIN), json!(i64::MAX), Value::Null],
            [
                Some("-9223372036854775808"),
                Some("9223372036854775807"),
                None,
            ],
        ),
        case(
            "f32",
            optional(json!("float32")),
            "real",
            [json!(1.5), json!("NaN"), Value::Null],
            [Some("1.5"), Some("NaN"), None],
        ),
        case(
            "f64",
            optional(json!("float64")),
            "double precision",
            [json!(std::f64::consts::PI), json!("-Infinity"), Value::Null],
            [Some("3.141592653589793"), Some("-Infinity"), None],
        ),
        case(
            "flag",
            json!("boolean"),
            "boolean",
            [json!(true), json!(false), json!(true)],
            [Some("true"), Some("false"), Some("true")],
        ),
        case(
            "s",
            json!("string"),
            "text",
            [json!("zoë \"✓\"\n"), json!(""), json!("x")],
            [Some("zoë \"✓\"\n"), Some(""), Some("x")],
        ),
        case(
            "b",
            optional(json!("bytes")),
            "bytea",
            [json!("AP8Q"), json!(""), Value::Null],
            [Some("\\x00ff10"), Some("\\x"), None],
        ),
        case(
            "ints",
            optional(json!({"type": "array", "items": "int32"})),
            "integer[]",
            [json!([1, -2, 3]), json!([]), Value::Null],
            [Some("{1,-2,3}"), Some("{}"), None],
        ),
        case(
            "words",
            optional(json!({"type": "array", "items": "string"})),
            "text[]",
            [json!(["a", "b"]), json!(["x y"]), Value::Null],
            [Some("{a,b}"), Some("{\"x y\"}"), None],
        ),
        case(
            "counts",
            optional(json!({"type": "map", "keys": "string", "values": "int64"})),
            "jsonb",
            [json!({"k": 1, "l": 2}), json!({}), Value::Null],
            [Some(r#"{"k": 1, "l": 2}"#), Some("{}"), None],
        ),
        case(
            "nested",
            optional(struct_of(
                "nested",
                &[("a", json!("int32")), ("b", optional(json!("string")))],
            )),
            "jsonb",
            [json!({"a": 1, "b": "x"}), json!({"a": 2}), Value::Null],
            [
                Some(r#"{"a": 1, "b": "x"}"#),
                Some(r#"{"a": 2, "b": null}"#),
                None,
            ],
        ),
        // The converter writes the schema's default for a field the struct leaves unset.
        case(
            "dflt",
            json!({"type": "string", "optional": true, "default": "dflt"}),
            "text",
            [json!("given"), Value::Null, Value::Null],
            [Some("given"), Some("dflt"), Some("dflt")],
        ),
        case(
            "price",
            optional(json!({"logical": "Decimal", "scale": 2, "precision": 10})),
            "numeric(10,2)",
            [json!("12.50"), json!("-0.01"), Value::Null],
            [Some("12.50"), Some("-0.01"), None],
        ),
        case(
            "day",
            optional(json!({"logical": "Date"})),
            "date",
            [json!("2026-01-10"), json!("1969-12-31"), Value::Null],
            [Some("2026-01-10"), Some("1969-12-31"), None],
        ),
        case(
            "tod",
            optional(json!({"logical": "Time"})),
            "time without time zone",
            [json!("12:34:56.789"), json!("00:00"), Value::Null],
            [Some("12:34:56.789"), Some("00:00:00"), None],
        ),
        case(
            "at",
            optional(json!({"logical": "Timestamp"})),
            "timestamp with time zone",
            [
                json!("2026-01-10T12:34:56.789Z"),
                json!("1969-12-31T23:59:59.999Z"),
                Value::Null,
            ],
            [
                Some("2026-01-10 12:34:56.789+00"),
                Some("1969-12-31 23:59:59.999+00"),
                None,
            ],
        ),
        case(
            "dbz_micro_ts",
            dbz("MicroTimestamp"),
            "timestamp without time zone",
            [
                json!("2026-01-10T12:34:56.123456"),
                json!("1969-12-31T23:59:59.999999"),
                Value::Null,
            ],
            [
                Some("2026-01-10 12:34:56.123456"),
                Some("1969-12-31 23:59:59.999999"),
                None,
            ],
        ),
        // PostgreSQL keeps microseconds: the nanoseconds are dropped toward the past.
        case(
            "dbz_nano_ts",
            dbz("NanoTimestamp"),
            "timestamp without time zone",
            [
                json!("2026-01-10T12:34:56.123456789"),
                json!("2000-01-01T00:00:00"),
                Value::Null,
            ],
            [
                Some("2026-01-10 12:34:56.123456"),
                Some("2000-01-01 00:00:00"),
                None,
            ],
        ),
        case(
            "dbz_ts",
            dbz("Timestamp"),
            "timestamp without time zone",
            [
                json!("2026-01-10T12:34:56.789"),
                json!("1970-01-01T00:00:00.001"),
                Value::Null,
            ],
            [
                Some("2026-01-10 12:34:56.789"),
                Some("1970-01-01 00:00:00.001"),
                None,
            ],
        ),
        case(
            "dbz_zoned",
            dbz("ZonedTimestamp"),
            "timestamp with time zone",
            [
                json!("2026-01-10T12:34:56.5+02:00"),
                json!("2026-06-01T00:00:00Z"),
                Value::Null,
            ],
            [
                Some("2026-01-10 10:34:56.5+00"),
                Some("2026-06-01 00:00:00+00"),
                None,
            ],
        ),
        case(
            "dbz_date",
            dbz("Date"),
            "date",
            [json!("2026-01-10"), json!("1900-01-01"), Value::Null],
            [Some("2026-01-10"), Some("1900-01-01"), None],
        ),
        case(
            "dbz_micro_time",
            dbz("MicroTime"),
            "time without time zone",
            [
                json!("12:34:56.123456"),
                json!("23:59:59.999999"),
                Value::Null,
            ],
            [Some("12:34:56.123456"), Some("23:59:59.999999"), None],
        ),
        case(
            "dbz_time",
            dbz("Time"),
            "time without time zone",
            [json!("12:34:56.789"), json!("00:00:00.001"), Value::Null],
            [Some("12:34:56.789"), Some("00:00:00.001"), None],
        ),
        case(
            "dbz_nano_time",
            dbz("NanoTime"),
            "time without time zone",
            [json!("12:34:56.123456789"), json!("01:00"), Value::Null],
            [Some("12:34:56.123456"), Some("01:00:00"), None],
        ),
        case(
            "dbz_duration",
            dbz("MicroDuration"),
            "interval",
            [json!(90_061_000_001i64), json!(-1_500_000), Value::Null],
            [Some("25:01:01.000001"), Some("-00:00:01.5"), None],
        ),
        case(
            "dbz_interval",
            dbz("Interval"),
            "interval",
            [
                json!("P1Y2M3DT4H5M6.78S"),
                json!("P0Y0M-1DT0H0M0S"),
                Value::Null,
            ],
            [
                Some("1 year 2 mons 3 days 04:05:06.78"),
                Some("-1 days"),
                None,
            ],
        ),
        case(
            "dbz_json",
            dbz("Json"),
            "jsonb",
            [
                json!(r#"{"tier":"gold","n":[1,2]}"#),
                json!(r#""just text""#),
                Value::Null,
            ],
            [
                Some(r#"{"n": [1, 2], "tier": "gold"}"#),
                Some(r#""just text""#),
                None,
            ],
        ),
        case(
            "dbz_uuid",
            dbz("Uuid"),
            "uuid",
            [
                json!("8f14e45f-ceea-467f-a0e6-0b1e2a3c4d5e"),
                json!("00000000-0000-0000-0000-000000000000"),
                Value::Null,
            ],
            [
                Some("8f14e45f-ceea-467f-a0e6-0b1e2a3c4d5e"),
                Some("00000000-0000-0000-0000-000000000000"),
                None,
            ],
        ),
        case(
            "dbz_decimal",
            dbz("VariableScaleDecimal"),
            "numeric",
            [json!("3.14159"), json!("-1000"), Value::Null],
            [Some("3.14159"), Some("-1000"), None],
        ),
        case(
            "dbz_bits",
            optional(json!({"debezium": "Bits", "length": 3})),
            "bytea",
            [json!("Bg=="), json!("AA=="), Value::Null],
            [Some("\\x06"), Some("\\x00"), None],
        ),
        case(
            "dbz_enum",
            optional(json!({"debezium": "Enum", "values": "red,green"})),
            "text",
            [json!("green"), json!("red"), Value::Null],
            [Some("green"), Some("red"), None],
        ),
    ]
}

/// The fixture's three records, as JsonConverter writes them.
fn fixture_records(
    cases: &[Case],
    schemas_enable: bool,
    decimal_format: Option<&str>,
) -> Vec<RawRecord> {
    let schema = struct_of(
        "kps.fixture.Value",
        &cases
            .iter()
            .map(|c| (c.field, c.schema.clone()))
            .collect::<Vec<_>>(),
    );
    let described: Vec<Described> = (0..3)
        .map(|r| {
            let value: serde_json::Map<String, Value> = cases
                .iter()
                .filter(|c| !c.values[r].is_null())
                .map(|c| (c.field.to_string(), c.values[r].clone()))
                .collect();
            Described::new(schema.clone(), Value::Object(value))
        })
        .collect();
    serialize_with(schemas_enable, decimal_format, &described)
        .into_iter()
        .map(|bytes| RawRecord {
            value: bytes,
            ..Default::default()
        })
        .collect()
}

/// Each column's name, type and NOT NULL, in table order.
async fn columns_of(db: &TestDb, table: &str) -> Vec<(String, String, bool)> {
    sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
          WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Drains `records` from a topic of its own into `table` with `topic_settings`, then stops.
async fn drain(db: &TestDb, table: &str, topic_settings: &str, records: &[RawRecord]) {
    let topic = TestTopic::create(1).await;
    produce_raw(&producer(), &topic.name, records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, table);
    config.metadata = String::new();
    config.topic_settings = topic_settings.into();
    let mut sink = Sink::start(&config, table);
    wait_drained(db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}

/// The fixture: every Connect type JsonConverter writes (every `Schema.Type`, optional and
/// required fields, a default, Connect's `Decimal`, `Date`, `Time`, `Timestamp`) and every
/// Debezium logical type the sink documents, built with Debezium's own builders, through
/// the sink three ways: into a table `auto_create` makes (whose column types must be README's),
/// into a table made by hand with those types with `decimal.format=NUMERIC`, and without the
/// schema (`schemas.enable=false`) where the units come from `time_units` and the JSON text
/// from `json_text`. Every column of every row must equal the produced value.
#[tokio::test(flavor = "multi_thread")]
async fn every_type_json_converter_writes_lands_as_produced() {
    let cases = cases();
    let db = TestDb::migrated().await;
    let names: Vec<&str> = cases.iter().map(|c| c.field).collect();
    let expected = |schemaless: bool| -> Vec<Vec<Option<String>>> {
        (0..3)
            .map(|r| {
                cases
                    .iter()
                    .map(|c| match (schemaless, c.field, r) {
                        // Without its schema a VariableScaleDecimal is the struct the
                        // converter writes: kept as JSON, since nothing says it is a number.
                        (true, "dbz_decimal", 0) => Some(r#"{"scale": 5, "value": "BMsv"}"#.into()),
                        (true, "dbz_decimal", 1) => Some(r#"{"scale": 0, "value": "/Bg="}"#.into()),
                        _ => c.expected[r].map(str::to_string),
                    })
                    .collect()
            })
            .collect()
    };

    // 1. auto_create from the converter's schema.
    let created = fixture_records(&cases, true, None);
    drain(
        &db,
        "created",
        "format = \"connect-json\"\nauto_create = true",
        &created,
    )
    .await;
    let required = ["id", "i32", "flag", "s"];
    assert_eq!(
        columns_of(&db, "created").await,
        cases
            .iter()
            .map(|c| (
                c.field.to_string(),
                c.column.to_string(),
                required.contains(&c.field)
            ))
            .collect::<Vec<_>>(),
        "auto_create must make README's column types"
    );
    assert_eq!(db.rows_as_text("created", &names).await, expected(false));

    // 2. A table made by hand with the same types; decimals as JSON numbers.
    let columns = |vsd: &str| {
        cases
            .iter()
            .map(|c| match c.field {
                "dbz_decimal" => format!("\"{}\" {vsd}", c.field),
                _ => format!("\"{}\" {}", c.field, c.column),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    db.pool
        .execute(&*format!("CREATE TABLE by_hand ({})", columns("numeric")))
        .await
        .unwrap();
    let numeric = fixture_records(&cases, true, Some("NUMERIC"));
    assert!(
        String::from_utf8_lossy(numeric[0].value.as_deref().unwrap()).contains("\"price\":12.50"),
        "decimal.format=NUMERIC writes a JSON number"
    );
    drain(&db, "by_hand", "format = \"connect-json\"", &numeric).await;
    assert_eq!(db.rows_as_text("by_hand", &names).await, expected(false));

    // 3. schemas.enable=false: the units and the JSON text are configured per column.
    db.pool
        .execute(&*format!("CREATE TABLE schemaless ({})", columns("jsonb")))
        .await
        .unwrap();
    let plain = fixture_records(&cases, false, Some("NUMERIC"));
    assert!(
        !String::from_utf8_lossy(plain[0].value.as_deref().unwrap()).contains("\"schema\""),
        "schemas.enable=false writes the payload alone"
    );
    drain(
        &db,
        "schemaless",
        r#"format = "connect-json"
json_text = ["dbz_json"]
[topics.time_units]
day = "days"
tod = "ms"
at = "ms"
dbz_micro_ts = "us"
dbz_nano_ts = "ns"
dbz_ts = "ms"
dbz_date = "days"
dbz_micro_time = "us"
dbz_time = "ms"
dbz_nano_time = "ns"
dbz_duration = "us""#,
        &plain,
    )
    .await;
    assert_eq!(db.rows_as_text("schemaless", &names).await, expected(true));
}

/// `floats` as read back: id, ratio, score, weight, partition, offset.
type FloatRow = (i64, f32, Option<f64>, Option<f64>, i32, i64);

/// Issue 25, defect 2: JsonConverter writes float32 and float64 as `"float"` and `"double"`;
/// `auto_create` must make `real` and `double precision` columns of them, and `auto_evolve`
/// must add a `double` field that arrives mid-stream.
#[tokio::test(flavor = "multi_thread")]
async fn float_and_double_fields_create_and_evolve_the_table() {
    let db = TestDb::migrated().await;
    let v1 = struct_of(
        "kps.floats.Value",
        &[
            ("id", json!("int64")),
            ("ratio", json!("float32")),
            ("score", optional(json!("float64"))),
        ],
    );
    let mut v2 = v1.clone();
    v2["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "weight", "schema": optional(json!("float64"))}));
    let produced: Vec<(i64, f32, Option<f64>, Option<f64>)> = (0..40)
        .map(|id| {
            let ratio = id as f32 / 8.0 - 2.0;
            let score = (id % 5 != 0).then_some(id as f64 * 1.1e10 + 0.5);
            let weight = (id >= 20).then_some(-(id as f64) / 3.0);
            (id, ratio, score, weight)
        })
        .collect();
    let described: Vec<Described> = produced
        .iter()
        .map(|&(id, ratio, score, weight)| match weight {
            None => Described::new(
                v1.clone(),
                json!({"id": id, "ratio": ratio, "score": score}),
            ),
            Some(w) => Described::new(
                v2.clone(),
                json!({"id": id, "ratio": ratio, "score": score, "weight": w}),
            ),
        })
        .collect();
    let records: Vec<RawRecord> = serialize(true, &described)
        .into_iter()
        .map(|value| RawRecord {
            value,
            ..Default::default()
        })
        .collect();
    assert!(
        String::from_utf8_lossy(records[0].value.as_deref().unwrap())
            .contains(r#"{"type":"double","optional":true,"field":"score"}"#),
        "the converter's own name for float64"
    );

    install_offset_audit(&db).await;
    let topic = TestTopic::create(1).await;
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "floats");
    config.max_records = 7;
    config.topic_settings =
        "format = \"connect-json\"\nauto_create = true\nauto_evolve = \"add_columns\"".into();
    let mut sink = Sink::start(&config, "floats");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));

    let s = |v: &str| v.to_string();
    assert_eq!(
        columns_of(&db, "floats").await,
        vec![
            (s("id"), s("bigint"), true),
            (s("ratio"), s("real"), true),
            (s("score"), s("double precision"), false),
            (s("kafka_partition"), s("integer"), false),
            (s("kafka_offset"), s("bigint"), false),
            (s("weight"), s("double precision"), false),
        ]
    );
    // Read back as the binary values themselves, so no printing can hide a difference.
    let rows: Vec<FloatRow> = sqlx::query_as(
        "SELECT id, ratio, score, weight, kafka_partition, kafka_offset FROM floats ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected: Vec<_> = produced
        .iter()
        .map(|&(id, ratio, score, weight)| (id, ratio, score, weight, 0, id))
        .collect();
    assert_eq!(rows, expected);
    assert_delivered_exactly_once(&db, "floats", &config.group, &topic.name, 40).await;
}

/// Without the helper a test fails, saying how to get it; it never skips.
#[test]
fn a_missing_json_converter_fails_saying_how_to_get_it() {
    use crate::helpers::connect_json::classpath;
    let how = "scripts/dev-services.sh build connect-json";
    let unset = classpath(None).unwrap_err();
    assert!(unset.contains(how), "{unset}");
    assert!(classpath(Some(String::new())).unwrap_err().contains(how));
    let empty = tempfile::tempdir().unwrap();
    let unbuilt = classpath(Some(format!("{}:/nowhere/*", empty.path().display()))).unwrap_err();
    assert!(
        unbuilt.contains("ConnectJson.class is missing") && unbuilt.contains(how),
        "{unbuilt}"
    );
    // The environment `scripts/dev-services.sh env` gives has it.
    let cp = std::env::var("KPS_CONNECT_JSON_CP").ok();
    assert!(
        classpath(cp).is_ok(),
        "the helper must be built for these tests"
    );
}
