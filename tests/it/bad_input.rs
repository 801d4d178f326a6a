//! Bad records mixed into good ones: every offset ends up either as a row or as a dead letter,
//! exactly once; and dead letters can be replayed after a fix.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{
    client_config, order_json, produce_raw, producer, RawRecord, TestTopic,
};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// A good order with id `id`.
fn good(id: i64) -> String {
    format!(
        r#"{{"id":{id},"customer":"c{id}","amount":"{}.50","note":"ok","unknown_field":[1,2,3]}}"#,
        id % 100
    )
}

/// The corpus: (record, the error kind it must produce, or None for a good record).
fn corpus() -> Vec<(RawRecord, Option<&'static str>)> {
    let deep = format!(
        "{{\"id\":900,\"customer\":\"x\",\"amount\":1,\"deep\":{}1{}}}",
        "[".repeat(300),
        "]".repeat(300)
    );
    let bad: Vec<(RawRecord, &str)> = vec![
        (RawRecord::json(0, r#"{"id":901,"customer":"#), "decode"),
        (
            RawRecord::json(0, r#"{"id":"nine","customer":"x","amount":1}"#),
            "mapping",
        ),
        (
            RawRecord::json(0, r#"{"id":902,"customer":"x","amount":1e20}"#),
            "rejected",
        ),
        (
            RawRecord::json(0, r#"{"id":903,"customer":"a\u0000b","amount":1}"#),
            "mapping",
        ),
        (
            RawRecord::json(
                0,
                &format!(
                    r#"{{"id":904,"customer":"{}","amount":1}}"#,
                    "x".repeat(100_000)
                ),
            ),
            "too_large",
        ),
        (
            RawRecord {
                partition: 0,
                ..Default::default()
            },
            "decode",
        ),
        (
            RawRecord {
                key: Some(vec![0xff, 0xfe]),
                ..RawRecord::json(0, r#"{"id":905,"customer":"x","amount":1}"#)
            },
            "mapping",
        ),
        (RawRecord::json(0, &good(3)), "rejected"), // a duplicate of good order 3
        (
            RawRecord::json(0, r#"{"id":906,"customer":"x","amount":-5}"#),
            "rejected",
        ),
        (
            RawRecord::json(
                0,
                r#"{"id":907,"customer":"x","amount":1,"note":"far too long for twenty"}"#,
            ),
            "rejected",
        ),
        (RawRecord::json(0, &deep), "decode"),
        (RawRecord::json(0, r#"{"id":908,"amount":1}"#), "mapping"),
        (RawRecord::json(0, "[]"), "decode"),
    ];
    let mut out = Vec::new();
    let mut next_good = 0;
    for (record, kind) in bad {
        for _ in 0..7 {
            out.push((
                RawRecord {
                    key: Some(format!("k{next_good}").into_bytes()),
                    ..RawRecord::json(0, &good(next_good))
                },
                None,
            ));
            next_good += 1;
        }
        out.push((record, Some(kind)));
    }
    for _ in 0..7 {
        out.push((RawRecord::json(0, &good(next_good)), None));
        next_good += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn every_offset_becomes_a_row_or_a_dead_letter_exactly_once() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (
                id bigint PRIMARY KEY, customer text NOT NULL,
                amount numeric(12,2) NOT NULL CHECK (amount >= 0), note varchar(20),
                k text, kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let dlq_topic = TestTopic::create(1).await;
    let corpus = corpus();
    let records: Vec<RawRecord> = corpus.iter().map(|(r, _)| r.clone()).collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 40; // the bad records share batches with good ones
    config.topic_settings = format!(
        "on_error = \"dead_letter\"\ndead_letter_topic = \"{}\"\nmax_record_bytes = \"64KiB\"",
        dlq_topic.name
    );
    config.metadata =
        "partition = \"kafka_partition\"\noffset = \"kafka_offset\"\nkey = \"k\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;

    let rows: Vec<i64> = sqlx::query_scalar("SELECT kafka_offset FROM orders ORDER BY 1")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let letters: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT \"offset\", error_kind, error_message FROM kafka_dead_letters WHERE topic = $1 ORDER BY 1",
    )
    .bind(&topic.name)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut seen: BTreeMap<i64, &str> = BTreeMap::new();
    for o in &rows {
        assert!(seen.insert(*o, "row").is_none(), "offset {o} written twice");
    }
    for (o, kind, _) in &letters {
        assert!(
            seen.insert(*o, kind).is_none(),
            "offset {o} is both a row and a dead letter, or dead-lettered twice"
        );
    }
    assert_eq!(seen.len(), corpus.len(), "every offset accounted for");
    for (offset, (_, expected)) in corpus.iter().enumerate() {
        let got = seen[&(offset as i64)];
        assert_eq!(
            got,
            expected.unwrap_or("row"),
            "offset {offset}: {letters:?}"
        );
    }
    // Each dead letter says what went wrong, in words an operator can act on.
    let message = |kind: &str| {
        letters
            .iter()
            .find(|(_, k, _)| k == kind)
            .map(|(_, _, m)| m.clone())
            .unwrap()
    };
    assert!(message("rejected").contains("SQLSTATE"), "{letters:?}");
    assert!(
        message("too_large").contains("max_record_bytes"),
        "{letters:?}"
    );

    // The dead-letter topic got one copy of each, with the reason in its headers.
    let consumer: BaseConsumer = client_config()
        .set("group.id", "dlq-check")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&dlq_topic.name]).unwrap();
    let mut produced = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while produced.len() < letters.len() && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            let headers = m.headers().unwrap();
            let offset = headers
                .iter()
                .find(|h| h.key == "kps.source.offset")
                .and_then(|h| h.value)
                .unwrap();
            produced.push(String::from_utf8_lossy(offset).parse::<i64>().unwrap());
        }
    }
    produced.sort();
    assert_eq!(
        produced,
        letters.iter().map(|(o, _, _)| *o).collect::<Vec<_>>()
    );
    assert!(sink.stop().success());

    // Fix the table, replay: the rejected-by-constraint records now land and leave the table.
    db.pool
        .execute(
            "ALTER TABLE orders DROP CONSTRAINT orders_amount_check, ALTER COLUMN note TYPE text",
        )
        .await
        .unwrap();
    let file = ConfigFile::new(&config.toml());
    let path = file.path();
    let out = run_cli(&["dead-letters", "list", "--config", path.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("{} dead letter(s)", letters.len())),
        "{}",
        out.stdout
    );
    let out = run_cli(&["dead-letters", "replay", "--config", path.to_str().unwrap()]).await;
    assert!(
        !out.status.success(),
        "the records that still fail are reported: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("replayed 2 dead letter(s)"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let replayed: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM orders WHERE id IN (906, 907) ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(replayed, vec![906, 907]);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left as usize, letters.len() - 2);
}

/// An operator moving the position back (`offsets reset`) makes the sink read a dead-lettered
/// record again: it must be recorded once more in place, not trip the table's uniqueness and
/// stop the sink.
#[tokio::test(flavor = "multi_thread")]
async fn a_reread_after_a_reset_dead_letters_again_in_place() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let mut records: Vec<RawRecord> = (0..10)
        .map(|i| RawRecord::json(0, &order_json(i)))
        .collect();
    records.push(RawRecord::json(0, "not json"));
    records.extend((10..20).map(|i| RawRecord::json(0, &order_json(i))));
    produce_raw(&producer(), &topic.name, &records).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = "on_error = \"dead_letter\"".into();
    let file = ConfigFile::new(&config.toml());
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let letter = || async {
        sqlx::query_as::<_, (i64, i64, chrono::DateTime<chrono::Utc>)>(
            "SELECT count(*), min(\"offset\"), max(failed_at) FROM kafka_dead_letters",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let (count, offset, first_failed_at) = letter().await;
    assert_eq!((count, offset), (1, 10));

    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        file.arg(),
        "--topic",
        &topic.name,
        "--to",
        "earliest",
    ])
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    wait_until("the reread", Duration::from_secs(60), || async {
        db.count("orders").await == 40
    })
    .await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(20));
    let (count, offset, failed_at) = letter().await;
    assert_eq!((count, offset), (1, 10), "one dead letter per offset");
    assert!(
        failed_at > first_failed_at,
        "the reread is recorded: {first_failed_at} -> {failed_at}"
    );
    assert!(sink.stop().success());
}

/// A value holding NUL whose error message quotes it (`"1\u0000"` into an integer column, a
/// UUID with a NUL…): PostgreSQL text cannot store NUL, so a message carrying one raw would
/// make the dead-letter INSERT, and with it the whole batch, fail. Each must become a dead
/// letter with a readable message, next to the good records of the same batch.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_whose_error_quotes_a_nul_commit_with_the_good_rows_of_their_batch() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE typed (
                id bigint PRIMARY KEY, i4 integer, f8 double precision, n numeric, u uuid,
                ts timestamptz, d date, b boolean, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let uuid = "0b5a3c2e-9f1d-4c7a-8e2b-1f0a9d8c7b6a";
    let good = |id: i64| {
        format!(
            r#"{{"id":{id},"i4":{id},"f8":{id}.5,"n":"{id}.25","u":"{uuid}","ts":"2024-01-02T03:04:05Z","d":"2024-01-02","b":true}}"#
        )
    };
    // (column, a JSON value holding NUL that the column refuses)
    let bad = [
        ("id", r#""7\u0000""#),
        ("i4", r#""1\u0000""#),
        ("f8", r#""1.5\u0000""#),
        ("n", r#""1\u0000""#),
        ("u", r#""0b5a3c2e-9f1d-4c7a-8e2b-1f0a9d8c7b6\u0000""#),
        ("ts", r#""2024-01-02\u0000""#),
        ("d", r#""2024-01-02\u0000""#),
        ("b", r#""true\u0000""#),
    ];
    let mut records = Vec::new();
    let mut expected_rows = Vec::new();
    let mut expected_letters = Vec::new();
    for (i, (column, value)) in bad.iter().enumerate() {
        let id = i as i64;
        expected_rows.push((id, records.len() as i64));
        records.push(RawRecord::json(0, &good(id)));
        let doc: serde_json::Value = serde_json::from_str(&good(100 + id)).unwrap();
        let mut doc = doc.as_object().unwrap().clone();
        doc.insert(column.to_string(), serde_json::from_str(value).unwrap());
        expected_letters.push((records.len() as i64, *column));
        records.push(RawRecord::json(
            0,
            &serde_json::Value::Object(doc).to_string(),
        ));
    }
    expected_rows.push((99, records.len() as i64));
    records.push(RawRecord::json(0, &good(99)));
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "typed");
    config.topic_settings = "on_error = \"dead_letter\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(20));

    // Every good record is its row, with each of its values.
    let rows: Vec<Vec<Option<String>>> = sqlx::query_scalar(
        "SELECT ARRAY[id::text, i4::text, f8::text, n::text, u::text,
                      extract(epoch FROM ts)::int8::text, d::text, b::text,
                      kafka_partition::text, kafka_offset::text]
           FROM typed ORDER BY kafka_offset",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected: Vec<Vec<Option<String>>> = expected_rows
        .iter()
        .map(|(id, offset)| {
            [
                id.to_string(),
                id.to_string(),
                format!("{id}.5"),
                format!("{id}.25"),
                uuid.to_string(),
                "1704164645".to_string(),
                "2024-01-02".to_string(),
                "true".to_string(),
                "0".to_string(),
                offset.to_string(),
            ]
            .into_iter()
            .map(Some)
            .collect()
        })
        .collect();
    assert_eq!(rows, expected);

    // Every bad one is a dead letter whose message names the column and shows the NUL.
    let letters: Vec<(i64, String, String, Vec<u8>)> = sqlx::query_as(
        "SELECT \"offset\", error_kind, error_message, value FROM kafka_dead_letters ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(letters.len(), expected_letters.len(), "{letters:?}");
    for ((offset, kind, message, value), (expected_offset, column)) in
        letters.iter().zip(&expected_letters)
    {
        assert_eq!(offset, expected_offset, "{letters:?}");
        assert_eq!(kind, "mapping", "{message}");
        assert!(
            message.contains(&format!("column {column} "))
                && (message.contains("\\u0000") || message.contains("\\0")),
            "offset {offset}: {message}"
        );
        assert_eq!(value, &records[*offset as usize].value.clone().unwrap());
    }
    let i4 = &letters[1].2;
    assert!(i4.ends_with("expected an integer, got 1\\u0000"), "{i4}");
    assert!(sink.stop().success());
}

/// The headers of record `i`: a 4-byte big-endian integer (UTF-8, but NUL bytes), a repeated
/// name, a null value, a value that is not UTF-8, and names that rdkafka's own API cuts (NUL)
/// or panics on (not UTF-8), in this order.
fn awkward_headers(i: i64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    vec![
        (b"bin".to_vec(), Some(vec![0, 0, 0, i as u8])),
        (b"dup".to_vec(), Some(format!("first-{i}").into_bytes())),
        (b"none".to_vec(), None),
        (b"dup".to_vec(), Some(b"second".to_vec())),
        (b"latin1".to_vec(), Some(vec![0xe9, 0x74, 0xe9])),
        (b"x\0y".to_vec(), Some(b"a NUL in the name".to_vec())),
        (vec![0xff, b'n', 0xfe], None),
    ]
}

/// Reads the documented JSON shape of a `headers` column or dead letter: a list of
/// `{"name" | "name_base64", "value" | "value_base64"}`, in record order.
fn headers_from_json(json: &serde_json::Value) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    use base64::Engine as _;
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 is a string"))
            .expect("valid base64")
    };
    json.as_array()
        .unwrap_or_else(|| panic!("headers are a JSON array: {json}"))
        .iter()
        .map(|h| {
            let name = match (h.get("name"), h.get("name_base64")) {
                (Some(n), None) => n.as_str().expect("a name is text").as_bytes().to_vec(),
                (None, Some(n)) => b64(n),
                _ => panic!("a header has one name: {h}"),
            };
            let value = match (h.get("value"), h.get("value_base64")) {
                (Some(serde_json::Value::Null), None) => None,
                (Some(v), None) => Some(v.as_str().expect("a value is text").as_bytes().to_vec()),
                (None, Some(v)) => Some(b64(v)),
                _ => panic!("a header has one value: {h}"),
            };
            (name, value)
        })
        .collect()
}

/// A dead letter is the record it came from, whole: key, value and every header byte for
/// byte (binary values, repeated names, null values, order), in `kafka_dead_letters` and on
/// the dead-letter topic, even when no column maps headers; and a replay gives the mapping the
/// same headers back.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_keeps_every_header_of_its_record_byte_for_byte() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY,
                amount numeric NOT NULL CHECK (amount >= 0),
                kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let dlq_topic = TestTopic::create(1).await;
    // Every third record fails mapping (no amount), every third PostgreSQL rejects (CHECK).
    let records: Vec<RawRecord> = (0..12)
        .map(|i| {
            let value = match i % 3 {
                0 => format!(r#"{{"id":{i},"amount":{i}}}"#),
                1 => format!(r#"{{"id":{i}}}"#),
                _ => format!(r#"{{"id":{i},"amount":-1}}"#),
            };
            RawRecord {
                key: Some(vec![0xfe, 0, i as u8]),
                headers: awkward_headers(i),
                ..RawRecord::json(0, &value)
            }
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = format!(
        "on_error = \"dead_letter\"\ndead_letter_topic = \"{}\"",
        dlq_topic.name
    );
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success());

    let rows: Vec<(i64, String, i32, i64)> = sqlx::query_as(
        "SELECT id, amount::text, kafka_partition, kafka_offset FROM orders ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected: Vec<(i64, String, i32, i64)> = (0..12)
        .filter(|i| i % 3 == 0)
        .map(|i| (i, i.to_string(), 0, i))
        .collect();
    assert_eq!(rows, expected);

    type Letter = (
        i64,
        String,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        serde_json::Value,
    );
    let letters: Vec<Letter> = sqlx::query_as(
        "SELECT \"offset\", error_kind, key, value, headers FROM kafka_dead_letters ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let offsets: Vec<i64> = letters.iter().map(|l| l.0).collect();
    let bad: Vec<i64> = (0..12).filter(|i| i % 3 != 0).collect();
    assert_eq!(offsets, bad);
    for (offset, kind, key, value, headers) in &letters {
        let record = &records[*offset as usize];
        let expected_kind = if offset % 3 == 1 {
            "mapping"
        } else {
            "rejected"
        };
        assert_eq!(kind, expected_kind, "offset {offset}");
        assert_eq!(key, &record.key, "offset {offset}");
        assert_eq!(value, &record.value, "offset {offset}");
        assert_eq!(
            headers_from_json(headers),
            record.headers.clone(),
            "offset {offset}: {headers}"
        );
    }

    // The topic's copy: the record's own headers first, in order, then the sink's.
    let consumer: BaseConsumer = client_config()
        .set("group.id", format!("dlq-check-{}", dlq_topic.name))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&dlq_topic.name]).unwrap();
    let mut produced = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while produced.len() < bad.len() && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            // Not rdkafka's `Headers::iter`, which panics on a name that is not UTF-8.
            let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = m
                .headers()
                .map(|h| {
                    kafka_pg_sink::headers::read(h)
                        .unwrap()
                        .into_iter()
                        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            let source = headers
                .iter()
                .find(|(k, _)| k == b"kps.source.offset")
                .and_then(|(_, v)| v.clone())
                .expect("kps.source.offset");
            let offset: i64 = String::from_utf8(source).unwrap().parse().unwrap();
            produced.insert(
                offset,
                (
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    headers,
                ),
            );
        }
    }
    assert_eq!(produced.keys().copied().collect::<Vec<_>>(), bad);
    for (offset, (key, value, headers)) in &produced {
        let record = &records[*offset as usize];
        assert_eq!(key, &record.key, "offset {offset}");
        assert_eq!(value, &record.value, "offset {offset}");
        let own = &record.headers;
        assert_eq!(
            &headers[..own.len().min(headers.len())],
            &own[..],
            "offset {offset}"
        );
        let names: Vec<&[u8]> = headers[own.len()..].iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(
            names,
            [
                &b"kps.error.kind"[..],
                b"kps.error.message",
                b"kps.source.topic",
                b"kps.source.partition",
                b"kps.source.offset"
            ],
            "offset {offset}"
        );
    }

    // Fixed table, headers now mapped: the replay writes the headers the records carried.
    db.pool
        .execute(
            "ALTER TABLE orders DROP CONSTRAINT orders_amount_check,
                 ALTER COLUMN amount SET DEFAULT 0,
                 ADD COLUMN h jsonb, ADD COLUMN hb bytea, ADD COLUMN ht text",
        )
        .await
        .unwrap();
    let mut replay = config.clone();
    replay.metadata = format!("{}\nheaders = \"h\"", replay.metadata);
    replay.extra = "[topics.columns]\nhb = \"meta:header:bin\"\nht = \"meta:header:dup\"".into();
    let file = ConfigFile::new(&replay.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    type Replayed = (i64, String, i64, serde_json::Value, Vec<u8>, String);
    let replayed: Vec<Replayed> = sqlx::query_as(
        "SELECT id, amount::text, kafka_offset, h, hb, ht FROM orders WHERE id % 3 <> 0 ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(replayed.len(), bad.len());
    for (id, amount, offset, h, hb, ht) in replayed {
        let expected_amount = if id % 3 == 1 { "0" } else { "-1" };
        assert_eq!((amount.as_str(), offset), (expected_amount, id));
        assert_eq!(headers_from_json(&h), awkward_headers(id), "{h}");
        assert_eq!(hb, vec![0, 0, 0, id as u8]);
        assert_eq!(ht, "second", "the last header of a repeated name");
    }
}

/// Header names are bytes: one that is not UTF-8 (on which rdkafka's own API panics) or that
/// holds NUL (which it cuts) is stored as sent, never cut, merged with another name or turned
/// into a stop; a value holding NUL is kept like any binary value.
#[tokio::test(flavor = "multi_thread")]
async fn header_names_that_are_not_utf8_or_hold_nul_are_stored_as_sent() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE hdr (n int, h jsonb, hn bytea, hx text, ht text,
                kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let headers = |i: i64| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        vec![
            (b"x\0y".to_vec(), None),
            (b"x".to_vec(), Some(b"plain x".to_vec())),
            (vec![0xff, b'n', 0xfe], Some(vec![0, 0, 0, i as u8])),
            (vec![0xff, b'n', 0xfe], None),
            (b"x\0y".to_vec(), Some(format!("nul-{i}").into_bytes())),
            (b"t".to_vec(), Some(format!("text-{i}").into_bytes())),
        ]
    };
    let records: Vec<RawRecord> = (0..6)
        .map(|i| RawRecord {
            headers: headers(i),
            ..RawRecord::json(0, &format!(r#"{{"n":{i}}}"#))
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "hdr");
    config.metadata = format!("{}\nheaders = \"h\"", config.metadata);
    config.extra = "[topics.columns]\nhn = \"meta:header:x\\u0000y\"\nhx = \"meta:header:x\"\nht = \"meta:header:t\"".into();
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(20));

    type Row = (i32, serde_json::Value, Vec<u8>, String, String, i32, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT n, h, hn, hx, ht, kafka_partition, kafka_offset FROM hdr ORDER BY kafka_offset",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), records.len());
    for (i, (n, h, hn, hx, ht, partition, offset)) in rows.into_iter().enumerate() {
        let i = i as i64;
        assert_eq!((n, partition, offset), (i as i32, 0, i));
        assert_eq!(headers_from_json(&h), headers(i), "{h}");
        assert_eq!(hn, format!("nul-{i}").into_bytes());
        assert_eq!(hx, "plain x");
        assert_eq!(ht, format!("text-{i}"));
    }
    let found: Vec<i32> =
        sqlx::query_scalar(r#"SELECT n FROM hdr WHERE h @> '[{"name": "t", "value": "text-3"}]'"#)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(found, vec![3]);
}
