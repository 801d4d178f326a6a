//! The column types beyond the first set, through the real broker and database: `time`,
//! `timetz`, `interval`, `inet`, `cidr`, `macaddr`, `macaddr8`, `citext` (an extension type,
//! found by name), domains with NOT NULL and CHECK, bytea as hex where the column says so, and
//! arrays of the new types; from JSON, from Kafka Connect JSON with Debezium's time and
//! duration types, and from Avro and Protobuf through the real registry (written by
//! confluent-kafka's serializers).
//!
//! What landed is compared, column by column and as text, with PostgreSQL's own text input of
//! what was produced (`(value)::time`, `::interval`, …): an oracle that shares no code with
//! the sink's binary encoders. A few rows are compared with literal text as well, so the
//! oracle is seen to say what it should.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use crate::helpers::confluent::{produce, Serde};
use crate::helpers::connect_json::{optional, serialize, struct_of, Described};
use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::registry::registry_url;
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Every new type as a column, a NOT NULL domain and a CHECK domain over them, two bytea
/// columns (hex by configuration, base64 by default) and arrays of the new types.
const TABLE: &str = "
CREATE EXTENSION IF NOT EXISTS citext;
CREATE DOMAIN port AS int4 NOT NULL CHECK (VALUE BETWEEN 1 AND 65535);
CREATE DOMAIN short_span AS interval CHECK (VALUE < interval '1 day');
CREATE DOMAIN email AS citext CHECK (VALUE LIKE '%_@_%');
CREATE TABLE kinds (
    id bigint PRIMARY KEY,
    t time, tz timetz, iv interval, ip inet, net cidr, mac macaddr, mac8 macaddr8,
    name citext, email email, port port, span short_span, raw bytea, blob bytea,
    times time[], ips inet[], names citext[], ivs interval[], nets cidr[], macs macaddr[],
    kafka_partition int, kafka_offset bigint)";

/// The configuration the JSON test runs with: integers in `iv` count microseconds, `raw`
/// is hex.
const SETTINGS: &str = "on_error = \"dead_letter\"\n\
    time_units = { iv = \"us\" }\n\
    bytea_encoding = { raw = \"hex\" }";

/// (column, its type, how PostgreSQL reads the produced JSON value `v` of it).
const ORACLE: &[(&str, &str, &str)] = &[
    ("t", "time", "(v #>> '{}')::time"),
    ("tz", "timetz", "(v #>> '{}')::timetz"),
    (
        "iv",
        "interval",
        "CASE json_typeof(v) WHEN 'number' THEN (v #>> '{}')::bigint * interval '1 microsecond'
                              ELSE (v #>> '{}')::interval END",
    ),
    ("ip", "inet", "(v #>> '{}')::inet"),
    ("net", "cidr", "(v #>> '{}')::cidr"),
    ("mac", "macaddr", "(v #>> '{}')::macaddr"),
    ("mac8", "macaddr8", "(v #>> '{}')::macaddr8"),
    ("name", "citext", "(v #>> '{}')::citext"),
    ("email", "email", "(v #>> '{}')::email"),
    ("port", "port", "(v #>> '{}')::port"),
    ("span", "short_span", "(v #>> '{}')::short_span"),
    (
        "raw",
        "bytea",
        "decode(regexp_replace(v #>> '{}', '^\\\\x', ''), 'hex')",
    ),
    ("blob", "bytea", "decode(v #>> '{}', 'base64')"),
    ("times", "time[]", "ARRAY_OF(time)"),
    ("ips", "inet[]", "ARRAY_OF(inet)"),
    ("names", "citext[]", "ARRAY_OF(citext)"),
    ("ivs", "interval[]", "ARRAY_OF(interval)"),
    ("nets", "cidr[]", "ARRAY_OF(cidr)"),
    ("macs", "macaddr[]", "ARRAY_OF(macaddr)"),
];

/// Record `i`, every column in one of the spellings the README accepts.
fn record(i: i64) -> Value {
    let u = i as usize;
    let zones = ["+02:00", "-05", "+0530", "Z", "", "-11:45", "+14:00"];
    let clock = format!(
        "{:02}:{:02}:{:02}.{:06}",
        i % 24,
        i * 7 % 60,
        i * 13 % 60,
        i * 12_345 % 1_000_000
    );
    let t = match i % 10 {
        0 => "24:00:00".to_string(),
        1 => format!("{:02}:{:02}", i % 24, i % 60),
        _ => clock.clone(),
    };
    let iv = match i % 6 {
        0 => json!(format!(
            "P{}Y{}M{}DT{}H{}M{}.{:03}S",
            i % 3,
            i % 12,
            i % 31,
            i % 24,
            i % 60,
            i % 60,
            i
        )),
        1 => json!(i * 1_000_003 - 50_000_000), // microseconds, negative for small i
        2 => json!(format!("P{}W", i % 5)),
        3 => json!("P0Y0M-1DT0H0M-0.5S"),
        4 => json!(format!("PT{}.5H", i % 7)),
        _ => json!(format!("P{}DT{}M", i, i)),
    };
    let ip = match i % 4 {
        0 => format!("10.{}.{}.{}", i % 256, (i * 3) % 256, (i * 7) % 256),
        1 => format!("192.168.{}.{}/24", i % 256, i % 200),
        2 => format!("2001:db8::{:x}", i * 977 % 65_536),
        _ => format!("::ffff:10.0.0.{}/120", i % 256),
    };
    let net = match i % 3 {
        0 => format!("10.{}.0.0/16", i % 256),
        1 => format!("2001:db8:{:x}::/48", i),
        _ => format!("172.16.{}.{}", i % 256, i % 100),
    };
    let b = [0x08, 0x00, 0x2b, (i % 256) as u8, 0x02, (i * 5 % 256) as u8];
    let pairs: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    let mac = match i % 4 {
        0 => pairs.join(":"),
        1 => pairs.join("-").to_uppercase(),
        2 => format!(
            "{}{}.{}{}.{}{}",
            pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5]
        ),
        _ => pairs.concat(),
    };
    let mac8 = match i % 2 {
        0 => pairs.join(":"), // EUI-48, widened with ff:fe
        _ => format!("{}:0a:0b", pairs.join(":")),
    };
    let raw_bytes = [0xde, 0xad, (i % 256) as u8, 0x00];
    let raw_hex: String = raw_bytes.iter().map(|x| format!("{x:02x}")).collect();
    let mut doc = json!({
        "id": i,
        "t": t,
        "tz": format!("{clock}{}", zones[u % zones.len()]),
        "iv": iv,
        "ip": ip,
        "net": net,
        "mac": mac,
        "mac8": mac8,
        "name": format!("Ann {i} ÉÈ"),
        "email": format!("Ann.{i}@Example.org"),
        "port": 1 + (i * 523) % 65_535,
        "span": format!("PT{}H{}M", i % 24, i % 60),
        "raw": if i % 2 == 0 { format!("\\x{raw_hex}") } else { raw_hex.to_uppercase() },
        "blob": base64_of(&raw_bytes),
        "times": [clock, null, "23:59:59.5"],
        "ips": [format!("1.2.3.{}", i % 256), "::1/64"],
        "names": ["a", format!("B{i}")],
        "ivs": if i % 5 == 0 { json!([]) } else { json!(["P1D", null, "PT0.5S"]) },
        "nets": ["10.0.0.0/8", "::/0"],
        "macs": ["08:00:2b:01:02:03"],
    });
    match i % 9 {
        // Absent and null columns are NULL.
        1 => {
            doc.as_object_mut().unwrap().remove("ip");
        }
        2 => doc["tz"] = Value::Null,
        _ => {}
    }
    doc
}

/// Records that can never be written, each with the column at fault, the dead letter's kind
/// and what its message must say: malformed or out-of-range values the sink refuses
/// (`mapping`), and values a domain's CHECK refuses (`rejected`, found by PostgreSQL).
fn bad_records() -> Vec<(Value, &'static str, &'static str, &'static str)> {
    let with = |id: i64, column: &str, value: Value| {
        let mut doc = record(id);
        doc["id"] = json!(id);
        doc[column] = value;
        doc
    };
    vec![
        (
            with(9001, "t", json!("25:00:00")),
            "t",
            "mapping",
            "hours 25 is out of range",
        ),
        (with(9002, "t", json!(5)), "t", "mapping", "without a unit"),
        (
            with(9003, "tz", json!("10:00:00+16:00")),
            "tz",
            "mapping",
            "beyond ±15:59:59",
        ),
        (
            with(9004, "iv", json!("P1X")),
            "iv",
            "mapping",
            "unknown or out-of-order unit",
        ),
        (
            with(9005, "iv", json!("P1.5Y")),
            "iv",
            "mapping",
            "no exact length",
        ),
        (
            with(9006, "ip", json!("1.2.3.256")),
            "ip",
            "mapping",
            "is not a valid inet",
        ),
        (
            with(9007, "net", json!("192.168.1.5/24")),
            "net",
            "mapping",
            "bits set to the right of its /24 mask",
        ),
        (
            with(9008, "mac", json!("08:00:2b:01:02")),
            "mac",
            "mapping",
            "is not a macaddr",
        ),
        (
            with(9009, "raw", json!("xyz")),
            "raw",
            "mapping",
            "is not hex",
        ),
        (
            with(9010, "ips", json!(["1.2.3.4", "nope"])),
            "ips",
            "mapping",
            "element 2:",
        ),
        (with(9011, "port", Value::Null), "port", "mapping", "port"),
        (
            with(9012, "port", json!(70000)),
            "port",
            "rejected",
            "port_check",
        ),
        (
            with(9014, "email", json!("nobody")),
            "email",
            "rejected",
            "email_check",
        ),
        (
            with(9013, "span", json!("P2D")),
            "span",
            "rejected",
            "short_span_check",
        ),
    ]
}

/// Rows (id, column, landed, expected) where what landed differs from PostgreSQL's own
/// reading of what was produced, both as text (session time zone UTC, as the sink assumes
/// for a time with no offset); empty when every column of every row is right.
async fn differences(db: &TestDb) -> Vec<(i64, String, Option<String>, Option<String>)> {
    let mut conn = db.pool.acquire().await.unwrap();
    conn.execute("SET TIME ZONE 'UTC'").await.unwrap();
    let mut found = Vec::new();
    for (column, ty, read) in ORACLE {
        let read = match read.strip_prefix("ARRAY_OF(") {
            Some(element) => format!(
                "ARRAY(SELECT CASE WHEN json_typeof(e) = 'null' THEN NULL
                                   ELSE (e #>> '{{}}')::{} END
                         FROM json_array_elements(v) WITH ORDINALITY AS a(e, ord) ORDER BY ord)",
                element.trim_end_matches(')')
            ),
            None => read.to_string(),
        };
        let sql = format!(
            "SELECT p.id, l.{column}::text, x.expected::text
               FROM produced p
               JOIN kinds l ON l.id = p.id
               CROSS JOIN LATERAL (SELECT p.doc -> '{column}' AS v) j
               CROSS JOIN LATERAL (SELECT CASE WHEN j.v IS NULL OR json_typeof(j.v) = 'null'
                                               THEN NULL ELSE (SELECT {read} FROM (SELECT j.v AS v) s) END::{ty}
                                          AS expected) x
              WHERE l.{column}::text IS DISTINCT FROM x.expected::text"
        );
        let rows: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(&sql)
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("oracle for {column}: {e}"));
        found.extend(
            rows.into_iter()
                .map(|(id, got, want)| (id, column.to_string(), got, want)),
        );
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters(
) {
    let db = TestDb::migrated().await;
    db.pool.execute(TABLE).await.unwrap();
    let topic = TestTopic::create(2).await;

    // Good records with a bad one after every fifth on partition 0, so that offsets say which
    // is which; partition 1 gets good records only.
    let bad = bad_records();
    let mut good = Vec::new();
    let mut records = Vec::new();
    let mut bad_at = BTreeMap::new();
    let mut offset = 0i64;
    for i in 0..150 {
        let doc = record(i);
        let partition = (i % 2) as i32;
        records.push(RawRecord::json(partition, &doc.to_string()));
        good.push(doc);
        if partition == 0 {
            offset += 1;
            let n = (i / 10) as usize;
            if i % 10 == 0 && n < bad.len() {
                records.push(RawRecord::json(0, &bad[n].0.to_string()));
                bad_at.insert(offset, n);
                offset += 1;
            }
        }
    }
    // The last bad ones after the loop, so every one is produced.
    for (n, (doc, ..)) in bad.iter().enumerate().skip(bad_at.len()) {
        records.push(RawRecord::json(0, &doc.to_string()));
        bad_at.insert(offset, n);
        offset += 1;
    }
    produce_raw(&producer(), &topic.name, &records).await;
    db.keep_produced(&good).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "kinds");
    config.max_records = 25; // bad records share batches with good ones
    config.topic_settings = SETTINGS.into();

    // `check` lists every new column as writable, with its unit or encoding.
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    for (column, sql_type) in [
        ("t", "time without time zone"),
        ("tz", "time with time zone"),
        ("iv", "interval"),
        ("ip", "inet"),
        ("net", "cidr"),
        ("mac", "macaddr"),
        ("mac8", "macaddr8"),
        ("name", "citext"),
        ("email", "email"),
        ("port", "port"),
        ("span", "short_span"),
        ("raw", "bytea"),
        ("times", "time without time zone[]"),
        ("names", "citext[]"),
        ("ivs", "interval[]"),
    ] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{column} ")))
            .unwrap_or_else(|| panic!("no line for {column}:\n{}", out.stdout));
        assert!(line.contains(sql_type) && line.contains("<-"), "{line}");
        if column == "raw" {
            assert!(line.contains("hex"), "{line}");
        }
        if column == "iv" {
            assert!(line.contains("integers in"), "{line}");
        }
    }

    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));

    // Every good record exactly once, every column as PostgreSQL reads what was produced.
    assert_exactly_once(&db, "kinds", good.len() as i64).await;
    assert_eq!(differences(&db).await, vec![]);

    // The oracle says what it should: literal text for a few rows.
    let rows = db
        .rows_as_text(
            "kinds",
            &[
                "id", "t", "tz", "iv", "ip", "net", "mac", "mac8", "raw", "ivs",
            ],
        )
        .await;
    let row = |id: usize| rows[id].clone();
    let text = |s: &str| Some(s.to_string());
    assert_eq!(
        row(0)[1..9],
        [
            text("24:00:00"),
            text("00:00:00+02"),
            text("00:00:00"),
            text("10.0.0.0/32"), // text(inet) always shows the prefix
            text("10.0.0.0/16"),
            text("08:00:2b:00:02:00"),
            text("08:00:2b:ff:fe:00:02:00"),
            text("\\xdead0000"),
        ]
    );
    assert_eq!(row(0)[9], text("{}"), "an empty array, not NULL");
    assert_eq!(row(1)[4], None, "an absent column is NULL");
    assert_eq!(row(2)[2], None, "a null column is NULL");
    assert_eq!(
        row(1)[3],
        text("-00:00:48.999997"),
        "microseconds, time_units us"
    );
    assert_eq!(
        row(3)[3],
        text("-1 days -00:00:00.5"),
        "Debezium's signed components"
    );
    assert_eq!(row(4)[3], text("04:30:00"), "PT4.5H");
    assert_eq!(row(5)[3], text("5 days 00:05:00"));
    assert_eq!(row(6)[3], text("6 mons 6 days 06:06:06.006"));
    assert_eq!(row(8)[3], text("21 days"), "P3W");
    assert_eq!(
        row(9)[2],
        text("09:03:57.111105+05:30"),
        "offset east of UTC"
    );
    assert_eq!(row(3)[2], text("03:21:39.037035+00"), "Z");
    assert_eq!(row(5)[2], text("05:35:05.061725-11:45"), "west of UTC");
    assert_eq!(row(3)[4], text("::ffff:10.0.0.3/120"));
    assert_eq!(row(1)[5], text("2001:db8:1::/48"));
    assert_eq!(row(1)[7], text("08:00:2b:01:02:05:0a:0b"));
    assert_eq!(row(1)[8], text("\\xdead0100"), "bare upper-case hex");
    assert_eq!(row(1)[9], text("{\"1 day\",NULL,00:00:00.5}"));

    // citext compares without case, as the extension's type (not text) does.
    let (matches,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM kinds WHERE name = 'aNN 7 ÉÈ' AND 'b7' = ANY(names) AND email = 'ann.7@example.ORG'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(matches, 1);

    // Each bad record is a dead letter of its kind, at its offset, saying what was wrong.
    let letters = db.dead_letters_of(&topic.name).await;
    assert_eq!(
        letters.iter().map(|l| l.0).collect::<Vec<_>>(),
        bad_at.keys().copied().collect::<Vec<_>>(),
        "{letters:?}"
    );
    for (offset, kind, message) in &letters {
        let (_, column, expected_kind, says) = bad[bad_at[offset]];
        assert_eq!(kind, expected_kind, "offset {offset}: {message}");
        assert!(message.contains(says), "offset {offset}: {message}");
        if kind == "mapping" {
            assert!(message.contains(column), "offset {offset}: {message}");
        } else {
            assert!(message.contains("SQLSTATE"), "offset {offset}: {message}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_json_debezium_durations_and_times_land_in_interval_and_time_columns() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE spans (id int PRIMARY KEY, d interval, s interval, t time, tm time,
                                 tn timetz)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // As Kafka's JsonConverter writes them, with Debezium's own schema builders.
    let schema = struct_of(
        "span",
        &[
            ("id", json!("int32")),
            ("d", optional(json!({"debezium": "MicroDuration"}))),
            ("s", optional(json!({"debezium": "Interval"}))),
            ("t", optional(json!({"debezium": "MicroTime"}))),
            ("tm", optional(json!({"logical": "Time"}))),
            ("tn", optional(json!({"debezium": "NanoTime"}))),
        ],
    );
    let value = |id: i32, d: i64, s: &str, t: i64, tm: &str, tn: i64| {
        Described::new(
            schema.clone(),
            json!({"id": id, "d": d, "s": s, "t": t, "tm": tm, "tn": tn}),
        )
    };
    let records: Vec<RawRecord> = serialize(
        true,
        &[
            value(
                1,
                93_784_500_000,
                "P1Y2M3DT4H5M6.78S",
                45_296_789_012,
                "12:34:56.789",
                1_999,
            ),
            value(
                2,
                -1_500_000,
                "P0Y0M-1DT0H0M0S",
                86_400_000_000,
                "00:00",
                86_399_999_999_999,
            ),
        ],
    )
    .into_iter()
    .map(|value| RawRecord {
        value,
        ..Default::default()
    })
    .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "spans");
    config.topic_settings = "format = \"connect-json\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    let rows = db
        .rows_as_text("spans", &["id", "d", "s", "t", "tm", "tn"])
        .await;
    let text = |s: &str| Some(s.to_string());
    assert_eq!(
        rows,
        vec![
            vec![
                text("1"),
                text("26:03:04.5"),
                text("1 year 2 mons 3 days 04:05:06.78"),
                text("12:34:56.789012"),
                text("12:34:56.789"),
                text("00:00:00.000001+00"),
            ],
            vec![
                text("2"),
                text("-00:00:01.5"),
                text("-1 days"),
                text("24:00:00"),
                text("00:00:00"),
                text("23:59:59.999999+00"),
            ],
        ]
    );
}

/// Avro with Debezium's `MicroDuration` and `Interval`, Avro's own `time-micros`,
/// `time-millis` and `duration`, and Debezium's `MicroTime`.
const AVRO_SCHEMA: &str = r#"{
  "type": "record", "name": "Spans", "namespace": "kps.test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "d", "type": ["null", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroDuration"}], "default": null},
    {"name": "s", "type": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.Interval"}},
    {"name": "a", "type": {"type": "fixed", "name": "dur", "size": 12, "logicalType": "duration"}},
    {"name": "t", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "mt", "type": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTime"}},
    {"name": "ip", "type": "string"}
  ]
}"#;

#[tokio::test(flavor = "multi_thread")]
async fn avro_durations_and_times_of_day_land_in_interval_and_time_columns() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE aspans (id bigint PRIMARY KEY, d interval, s interval, a interval,
                                  t time, tm timetz, mt time, ip inet)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Avro's duration: months, days and milliseconds, each a little-endian u32.
    let duration: Vec<u8> = [14u32, 3, 1_500]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let duration = crate::helpers::base64_of(&duration);
    let row = |n: i64, d: Option<i64>, s: &str, t: i64, tm: i32, mt: i64| {
        json!({"value": {"id": n, "d": d, "s": s, "a": {"$bytes": duration},
            "t": t, "tm": tm, "mt": mt, "ip": format!("10.0.0.{n}/8")}})
    };
    let records = [
        row(
            1,
            Some(93_784_500_000),
            "P1Y2M3DT4H5M6.78S",
            45_296_789_012,
            45_296_789,
            1,
        ),
        row(
            2,
            Some(-1_500_000),
            "P0Y0M-1DT0H0M0S",
            86_400_000_000,
            0,
            86_399_999_999,
        ),
        row(3, None, "PT0S", 0, 1, 0),
    ];
    produce(&topic.name, &Serde::Avro(AVRO_SCHEMA), None, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "aspans");
    config.topic_settings = "format = \"avro\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    assert_eq!(db.dead_letters_of(&topic.name).await, vec![]);
    let rows = db
        .rows_as_text("aspans", &["id", "d", "s", "a", "t", "tm", "mt", "ip"])
        .await;
    let text = |s: &str| Some(s.to_string());
    let avro_duration = text("1 year 2 mons 3 days 00:00:01.5");
    assert_eq!(
        rows,
        vec![
            vec![
                text("1"),
                text("26:03:04.5"),
                text("1 year 2 mons 3 days 04:05:06.78"),
                avro_duration.clone(),
                text("12:34:56.789012"),
                text("12:34:56.789+00"),
                text("00:00:00.000001"),
                text("10.0.0.1/8"),
            ],
            vec![
                text("2"),
                text("-00:00:01.5"),
                text("-1 days"),
                avro_duration.clone(),
                text("24:00:00"),
                text("00:00:00+00"),
                text("23:59:59.999999"),
                text("10.0.0.2/8"),
            ],
            vec![
                text("3"),
                None,
                text("00:00:00"),
                avro_duration,
                text("00:00:00"),
                text("00:00:00.001+00"),
                text("00:00:00"),
                text("10.0.0.3/8"),
            ],
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_new_types_upsert_through_the_staging_table_with_the_last_record_per_key_winning() {
    let db = TestDb::migrated().await;
    db.pool.execute(TABLE).await.unwrap();
    let topic = TestTopic::create(1).await;
    // Each of 30 keys written three times, the versions spread over batches; the last wins.
    let mut last = BTreeMap::new();
    let mut records = Vec::new();
    for version in 0..3i64 {
        for key in 0..30i64 {
            let mut doc = record(key * 3 + version);
            doc["id"] = json!(key);
            // Every version carries every column (null included): an absent column is left
            // alone by an upsert, which is tested elsewhere.
            for column in ["ip", "tz"] {
                if doc.get(column).is_none() {
                    doc[column] = Value::Null;
                }
            }
            records.push(RawRecord::json(0, &doc.to_string()));
            last.insert(key, doc);
        }
    }
    produce_raw(&producer(), &topic.name, &records).await;
    let docs: Vec<Value> = last.into_values().collect();
    db.keep_produced(&docs).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "kinds");
    config.max_records = 40;
    config.topic_settings = format!("mode = \"upsert\"\n{SETTINGS}");
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    assert_eq!(db.count("kinds").await, 30);
    assert_eq!(db.dead_letters_of(&topic.name).await, vec![]);
    assert_eq!(differences(&db).await, vec![]);
}

/// A Protobuf message with a well-known `Duration` and strings for the address and time
/// columns.
const PROTO: &str = r#"syntax = "proto3";
package kps.types;
import "google/protobuf/duration.proto";

message Span {
  int64 id = 1;
  google.protobuf.Duration took = 2;
  string at = 3;
  string ip = 4;
  repeated google.protobuf.Duration laps = 5;
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_durations_land_in_interval_columns() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE pspans (id bigint PRIMARY KEY, took interval, at time, ip inet,
                                  laps interval[])",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    // Durations in protobuf's JSON mapping, which the serializer's message is built from.
    let message = |n: i64, took: &str, laps: &[&str]| {
        json!({"value": {"id": n, "took": took, "at": format!("0{n}:30:00"),
            "ip": format!("fe80::{n}/64"), "laps": laps}})
    };
    let records = [
        message(1, "93784.5s", &["1s", "0.25s"]),
        message(2, "-1.5s", &[]),
        // Nanoseconds that are not whole microseconds (a Go or Java duration): dropped toward
        // the past, as for timestamps (-1 ns is -1 µs), not a dead letter.
        message(3, "0.000000001s", &["-0.000000001s", "1.999999999s"]),
    ];
    let span = Serde::Protobuf {
        files: &[("span.proto", PROTO)],
        file: "span.proto",
        message: "kps.types.Span",
    };
    produce(&topic.name, &span, None, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "pspans");
    config.topic_settings = "format = \"protobuf\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
    let text = |s: &str| Some(s.to_string());
    assert_eq!(
        db.rows_as_text("pspans", &["id", "took", "at", "ip", "laps"])
            .await,
        vec![
            vec![
                text("1"),
                text("26:03:04.5"),
                text("01:30:00"),
                text("fe80::1/64"),
                text("{00:00:01,00:00:00.25}"),
            ],
            vec![
                text("2"),
                text("-00:00:01.5"),
                text("02:30:00"),
                text("fe80::2/64"),
                text("{}"),
            ],
            vec![
                text("3"),
                text("00:00:00"),
                text("03:30:00"),
                text("fe80::3/64"),
                text("{-00:00:00.000001,00:00:01.999999}"),
            ],
        ]
    );
    assert_eq!(db.dead_letters_of(&topic.name).await, []);
}
