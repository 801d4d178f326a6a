//! Dead letters end to end: written in their batch's transaction (a `kill -9` at any moment
//! leaves rows + letters = position), produced to the dead-letter topic at least once, every
//! error kind README names, and the `dead-letters list|replay` commands.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{
    client_config, order_json, produce_raw, producer, RawRecord, TestTopic,
};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// Records of the crash test, over `PARTITIONS` partitions.
const RECORDS: i64 = 20_000;
const PARTITIONS: i64 = 4;
const KILLS: usize = 6;

/// Every 20th record of the crash test is not JSON: 5 % dead letters.
fn is_bad(id: i64) -> bool {
    id % 20 == 7
}

/// Record `id` of the crash test: order `id` (or, when bad, a broken copy of it) at partition
/// `id % 4`, offset `id / 4`, with a key, a header and a timestamp of its own.
fn crash_record(id: i64) -> RawRecord {
    let value = if is_bad(id) {
        format!("{{\"id\":{id},\"customer\":")
    } else {
        order_json(id)
    };
    RawRecord {
        key: Some(format!("key-{id}").into_bytes()),
        headers: vec![(b"trace".to_vec(), Some(format!("t-{id}").into_bytes()))],
        timestamp_ms: Some(1_600_000_000_000 + id),
        ..RawRecord::json((id % PARTITIONS) as i32, &value)
    }
}

/// A message read back from a topic: partition, key, value, headers.
type Read = (
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

/// Every message of `topic` up to its current end offsets.
fn read_topic(topic: &TestTopic) -> Vec<Read> {
    let end = topic.end_offsets();
    let consumer: BaseConsumer = client_config()
        .set("group.id", format!("read-{}", topic.name))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (p, _) in &end {
        tpl.add_partition_offset(&topic.name, *p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let total: i64 = end.iter().map(|(_, o)| o).sum();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while (out.len() as i64) < total {
        assert!(
            std::time::Instant::now() < deadline,
            "read {} of {total} messages of {}",
            out.len(),
            topic.name
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            // Not rdkafka's `Headers::iter`, which panics on a name that is not UTF-8.
            let headers = m
                .headers()
                .map(|h| {
                    kafka_pg_sink::headers::read(h)
                        .unwrap()
                        .into_iter()
                        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                m.partition(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                headers,
            ));
        }
    }
    out
}

/// At rest after any interruption, per partition: the rows plus the dead letters are exactly
/// the stored position (every offset below it is one or the other), and nothing lies past it.
async fn assert_rows_and_letters_match_offsets(db: &TestDb, group: &str, topic: &str) {
    type Partition = (i32, i64, Option<i64>, i64, Option<i64>, Option<i64>);
    let partitions: Vec<Partition> = sqlx::query_as(
        "SELECT o.partition, coalesce(r.n, 0), r.last, coalesce(d.n, 0), d.last, o.next_offset
           FROM kafka_offsets o
           LEFT JOIN (SELECT kafka_partition AS partition, count(*) AS n, max(kafka_offset) AS last
                        FROM orders GROUP BY 1) r USING (partition)
           LEFT JOIN (SELECT partition, count(*) AS n, max(\"offset\") AS last
                        FROM kafka_dead_letters WHERE topic = $2 GROUP BY 1) d USING (partition)
          WHERE o.consumer_group = $1 AND o.topic = $2 ORDER BY 1",
    )
    .bind(group)
    .bind(topic)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (partition, rows, last_row, letters, last_letter, next) in partitions {
        let next = next.unwrap_or(0);
        assert_eq!(
            rows + letters,
            next,
            "partition {partition}: {rows} rows + {letters} dead letters, position {next}"
        );
        for last in [last_row, last_letter].into_iter().flatten() {
            assert!(
                last < next,
                "partition {partition}: offset {last} past {next}"
            );
        }
    }
    let (dups, _) = db.duplicates_and_distinct("orders").await;
    assert!(dups.is_empty(), "duplicated rows: {dups:?}");
}

/// `kill -9` at random moments while a topic with 5 % invalid records drains with
/// `on_error = "dead_letter"` and a dead-letter topic: after every kill, rows and dead letters
/// together are exactly each partition's position; at the end every offset is its row (with
/// all its values) or its dead letter, once, each letter is the record (key, value, headers,
/// timestamp) with its table, and the topic got every letter at least once, with its reason.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_commit_with_their_batch_through_kill_9() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(PARTITIONS as i32).await;
    let dlq = TestTopic::create(1).await;
    let records: Vec<RawRecord> = (0..RECORDS).map(crash_record).collect();
    produce_raw(&producer(), &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 300; // many transactions, each with a few dead letters
    config.max_wait_ms = 50;
    config.topic_settings = format!(
        "on_error = \"dead_letter\"\ndead_letter_topic = \"{}\"",
        dlq.name
    );
    let progress = || async {
        let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        db.count("orders").await + letters
    };
    let mut rng = rand::rng();
    let mut killed_mid_drain = 0;
    for round in 0..KILLS {
        let mut sink = Sink::start(&config, &format!("round-{round}"));
        let target = (progress().await + rng.random_range(300..3_000)).min(RECORDS);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while progress().await < target {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no progress\n{}",
                sink.logs_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
        sink.kill9();
        if progress().await < RECORDS {
            killed_mid_drain += 1;
        }
        assert_rows_and_letters_match_offsets(&db, &config.group, &topic.name).await;
    }
    assert!(
        killed_mid_drain >= KILLS / 2,
        "only {killed_mid_drain} kills landed mid-drain: the test proved little"
    );

    let mut last = Sink::start(&config, "final");
    // The last kill may have come after the drain: the SIGTERM must not beat its handler.
    wait_assigned(&last).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(240)).await;
    assert!(last.stop().success());
    assert_rows_and_letters_match_offsets(&db, &config.group, &topic.name).await;
    assert_offset_history_is_a_chain(&db).await;

    // Every good record is its row, once, with every value; the bad ones are not rows.
    let copies = orders_as_produced(&db, "orders", PARTITIONS).await;
    let good: BTreeMap<(i32, i64), i64> = (0..RECORDS)
        .filter(|&id| !is_bad(id))
        .map(|id| (((id % PARTITIONS) as i32, id / PARTITIONS), 1))
        .collect();
    assert!(copies == good, "rows differ from the good records");

    // Every bad record is its dead letter: the record whole, its kind and its table.
    type Letter = (
        i32,
        i64,
        Option<i64>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        serde_json::Value,
        String,
        Option<String>,
    );
    let letters: Vec<Letter> = sqlx::query_as(
        "SELECT partition, \"offset\", (extract(epoch FROM record_timestamp) * 1000)::int8,
                key, value, headers, error_kind, target_table
           FROM kafka_dead_letters WHERE topic = $1 ORDER BY 1, 2",
    )
    .bind(&topic.name)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut expected: Vec<Letter> = (0..RECORDS)
        .filter(|&id| is_bad(id))
        .map(|id| {
            let r = &records[id as usize];
            (
                r.partition,
                id / PARTITIONS,
                r.timestamp_ms,
                r.key.clone(),
                r.value.clone(),
                serde_json::json!([{"name": "trace", "value": format!("t-{id}")}]),
                "decode".to_string(),
                Some("public.orders".to_string()),
            )
        })
        .collect();
    expected.sort_by_key(|l| (l.0, l.1));
    assert_eq!(letters.len(), expected.len());
    for (got, want) in letters.iter().zip(&expected) {
        assert_eq!(got, want);
    }

    // The topic got each letter at least once (a kill between producing and committing
    // produces it again): the record's key, value and headers, then the sink's five.
    let messages: BTreeMap<(i64, i64), String> = sqlx::query_as::<_, (i32, i64, String)>(
        "SELECT partition, \"offset\", error_message FROM kafka_dead_letters WHERE topic = $1",
    )
    .bind(&topic.name)
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(p, o, m)| ((p as i64, o), m))
    .collect();
    let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for (_, key, value, headers) in read_topic(&dlq) {
        let header = |name: &str| -> String {
            let (_, v) = headers
                .iter()
                .find(|(k, _)| k == name.as_bytes())
                .unwrap_or_else(|| panic!("no {name} header: {headers:?}"));
            String::from_utf8(v.clone().expect("a value")).unwrap()
        };
        let partition: i64 = header("kps.source.partition").parse().unwrap();
        let offset: i64 = header("kps.source.offset").parse().unwrap();
        let id = offset * PARTITIONS + partition;
        let record = &records[id as usize];
        assert!(
            is_bad(id),
            "offset {partition}/{offset} is not a bad record"
        );
        assert_eq!(key, record.key, "{id}");
        assert_eq!(value, record.value, "{id}");
        let mut want = record.headers.clone();
        for (name, v) in [
            ("kps.error.kind", "decode".to_string()),
            ("kps.error.message", messages[&(partition, offset)].clone()),
            ("kps.source.topic", topic.name.clone()),
            ("kps.source.partition", partition.to_string()),
            ("kps.source.offset", offset.to_string()),
        ] {
            want.push((name.as_bytes().to_vec(), Some(v.into_bytes())));
        }
        assert_eq!(headers, want, "{id}");
        *seen.entry((partition, offset)).or_default() += 1;
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        messages.keys().collect::<Vec<_>>(),
        "every dead letter reached the topic"
    );
}

/// The kinds README's table names that the bad-input corpus does not reach: a number out of
/// its column's range and a bad UUID (`mapping`), a foreign key and a NOT NULL constraint
/// (`rejected`, here NOT NULL through a trigger, which PostgreSQL checks after the mapping),
/// and Debezium operations the sink does not apply (`decode`); the good records beside them
/// are rows.
#[tokio::test(flavor = "multi_thread")]
async fn every_error_kind_reaches_its_dead_letter() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE parent (id bigint PRIMARY KEY);
             INSERT INTO parent VALUES (1);
             CREATE TABLE kinds (
                 id bigint PRIMARY KEY, n bigint, u uuid, ref bigint REFERENCES parent (id),
                 who text NOT NULL, kafka_partition int NOT NULL, kafka_offset bigint NOT NULL);
             CREATE FUNCTION blank_nobody() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 NEW.who := NULLIF(NEW.who, 'nobody');
                 RETURN NEW;
             END $$;
             CREATE TRIGGER blank_nobody BEFORE INSERT ON kinds
                 FOR EACH ROW EXECUTE FUNCTION blank_nobody();
             CREATE TABLE dbz (id int PRIMARY KEY, name text NOT NULL);",
        )
        .await
        .unwrap();
    let uuid = "0b5a3c2e-9f1d-4c7a-8e2b-1f0a9d8c7b6a";
    let good = |id: i64| format!(r#"{{"id":{id},"n":{id},"u":"{uuid}","ref":1,"who":"w{id}"}}"#);
    // (a bad value of good(id)'s fields, its kind, what its message must say)
    let bad: [(&str, &str, &str); 4] = [
        (r#""n":1e30"#, "mapping", "column n (bigint)"),
        (r#""u":"x""#, "mapping", "column u (uuid)"),
        (r#""ref":2"#, "rejected", "SQLSTATE 23503"),
        (r#""who":"nobody""#, "rejected", "SQLSTATE 23502"),
    ];
    let topic = TestTopic::create(1).await;
    let mut records = Vec::new();
    let mut expected_letters = Vec::new();
    for (i, (field, kind, says)) in bad.iter().enumerate() {
        let id = 2 * i as i64;
        records.push(RawRecord::json(0, &good(id)));
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&good(id + 1)).unwrap();
        let patch: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&format!("{{{field}}}")).unwrap();
        doc.extend(patch);
        let value = serde_json::Value::Object(doc).to_string();
        expected_letters.push((topic.name.clone(), records.len() as i64, *kind, *says));
        records.push(RawRecord::json(0, &value));
    }
    records.push(RawRecord::json(0, &good(8)));
    produce_raw(&producer(), &topic.name, &records).await;

    let changes = TestTopic::create(1).await;
    let event = |op: &str, after: &str| format!(r#"{{"op":"{op}","before":null,"after":{after}}}"#);
    let events = [
        event("c", r#"{"id":1,"name":"a"}"#),
        event("t", "null"),
        event("c", r#"{"id":2,"name":"b"}"#),
        event("m", "null"),
    ];
    let events: Vec<RawRecord> = events.iter().map(|e| RawRecord::json(0, e)).collect();
    produce_raw(&producer(), &changes.name, &events).await;
    for offset in [1, 3] {
        expected_letters.push((changes.name.clone(), offset, "decode", "Debezium op"));
    }
    expected_letters.sort();

    let mut config = SinkConfig::new(&db.url, &topic.name, "kinds");
    config.topic_settings = "on_error = \"dead_letter\"".into();
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"dbz\"\nformat = \"debezium\"\non_error = \"dead_letter\"\n",
        changes.name
    );
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &changes, Duration::from_secs(60)).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(20));

    let letters: Vec<(String, i64, String, String)> = sqlx::query_as(
        "SELECT topic, \"offset\", error_kind, error_message FROM kafka_dead_letters ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(letters.len(), expected_letters.len(), "{letters:#?}");
    for ((topic, offset, kind, message), want) in letters.iter().zip(&expected_letters) {
        assert_eq!(
            (topic, *offset, kind.as_str()),
            (&want.0, want.1, want.2),
            "{message}"
        );
        assert!(message.contains(want.3), "{topic}@{offset}: {message}");
    }
    type Row = (i64, i64, String, i64, String, i32, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, n, u::text, ref, who, kafka_partition, kafka_offset FROM kinds ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let want: Vec<Row> = (0..5)
        .map(|i| {
            (
                2 * i,
                2 * i,
                uuid.to_string(),
                1,
                format!("w{}", 2 * i),
                0,
                2 * i,
            )
        })
        .collect();
    assert_eq!(rows, want);
    let applied: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM dbz ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied, vec![(1, "a".into()), (2, "b".into())]);
}

/// The stored dead letters (id, topic, offset, kind, message, failed_at) and the table's rows,
/// to compare before and after a command.
async fn letters_and_rows(
    db: &TestDb,
) -> (
    Vec<(i64, String, i64, String, String, String)>,
    Vec<(i64, String)>,
) {
    let letters = sqlx::query_as(
        "SELECT id, topic, \"offset\", error_kind, error_message, failed_at::text
           FROM kafka_dead_letters ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rows = sqlx::query_as("SELECT id, amount::text FROM orders ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    (letters, rows)
}

/// `dead-letters list` with `--topic` and `--json`, and `replay` with `--dry-run` (changes
/// nothing), `--id` (only that one) and without (exit 1 while some still fail, each keeping
/// its kind and the new reason).
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_and_replayed_as_selected() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric NOT NULL CHECK (amount >= 0),
                note varchar(5), kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)",
        )
        .await
        .unwrap();
    let a = TestTopic::create(1).await;
    let b = TestTopic::create(1).await;
    let a_records = [
        r#"{"id":0,"amount":1}"#,
        r#"{"id":100,"amount":-1}"#,
        r#"{"id":101,"amount":1,"note":"too long"}"#,
        "not json",
        r#"{"id":4,"amount":1}"#,
    ];
    let b_records = [r#"{"id":200,"amount":-2}"#, r#"{"id":5,"amount":1}"#];
    let raw = |values: &[&str]| -> Vec<RawRecord> {
        values.iter().map(|v| RawRecord::json(0, v)).collect()
    };
    produce_raw(&producer(), &a.name, &raw(&a_records)).await;
    produce_raw(&producer(), &b.name, &raw(&b_records)).await;
    let mut config = SinkConfig::new(&db.url, &a.name, "orders");
    config.topic_settings = "on_error = \"dead_letter\"".into();
    config.extra = format!(
        "[[topics]]\nname = \"{}\"\ntable = \"orders\"\non_error = \"dead_letter\"\n[topics.metadata]\npartition = \"kafka_partition\"\noffset = \"kafka_offset\"\n",
        b.name
    );
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &a, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &b, Duration::from_secs(60)).await;
    assert!(sink.stop().success());
    let file = ConfigFile::new(&config.toml());

    // --topic: only that topic's letters.
    let out = run_cli(&[
        "dead-letters",
        "list",
        "--config",
        file.arg(),
        "--topic",
        &b.name,
    ])
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("1 dead letter(s)"), "{}", out.stdout);
    assert!(
        out.stdout.contains(&b.name) && !out.stdout.contains(&a.name),
        "{}",
        out.stdout
    );

    // --json: one object per letter.
    let out = run_cli(&["dead-letters", "list", "--config", file.arg(), "--json"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let listed: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let mut got: Vec<(String, i64, i64, String)> = listed
        .iter()
        .map(|l| {
            (
                l["topic"].as_str().unwrap().to_string(),
                l["partition"].as_i64().unwrap(),
                l["offset"].as_i64().unwrap(),
                l["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let mut want = vec![
        (a.name.clone(), 0, 1, "rejected".to_string()),
        (a.name.clone(), 0, 2, "rejected".to_string()),
        (a.name.clone(), 0, 3, "decode".to_string()),
        (b.name.clone(), 0, 0, "rejected".to_string()),
    ];
    want.sort();
    assert_eq!(got, want);
    let id_of = |topic: &str, offset: i64| -> i64 {
        listed
            .iter()
            .find(|l| l["topic"] == topic && l["offset"] == offset)
            .and_then(|l| l["id"].as_i64())
            .unwrap()
    };

    // Fixed for the CHECK only: A@1 and B@0 now succeed, A@2 (too long) and A@3 still fail.
    db.pool
        .execute("ALTER TABLE orders DROP CONSTRAINT orders_amount_check")
        .await
        .unwrap();
    let before = letters_and_rows(&db).await;
    let out = run_cli(&[
        "dead-letters",
        "replay",
        "--config",
        file.arg(),
        "--dry-run",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("dry run: 2 would be written, 2 still fail; nothing changed"),
        "{}",
        out.stdout
    );
    assert_eq!(
        letters_and_rows(&db).await,
        before,
        "a dry run changed something"
    );

    // --id: only B@0.
    let b_id = id_of(&b.name, 0).to_string();
    let out = run_cli(&[
        "dead-letters",
        "replay",
        "--config",
        file.arg(),
        "--id",
        &b_id,
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("replayed 1 dead letter(s); 0 still fail"),
        "{}",
        out.stdout
    );
    let (letters, rows) = letters_and_rows(&db).await;
    assert_eq!(
        rows,
        vec![
            (0, "1".into()),
            (4, "1".into()),
            (5, "1".into()),
            (200, "-2".into())
        ]
    );
    assert_eq!(
        letters,
        before
            .0
            .iter()
            .filter(|l| l.1 == a.name)
            .cloned()
            .collect::<Vec<_>>()
    );

    // All: A@1 lands; the two that still fail stay, with their kind and the new reason.
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("replayed 1 dead letter(s); 2 still fail"),
        "{}",
        out.stdout
    );
    let (letters, rows) = letters_and_rows(&db).await;
    assert_eq!(
        rows,
        vec![
            (0, "1".into()),
            (4, "1".into()),
            (5, "1".into()),
            (100, "-1".into()),
            (200, "-2".into())
        ]
    );
    assert_eq!(letters.len(), 2, "{letters:#?}");
    for (offset, kind) in [(2, "rejected"), (3, "decode")] {
        let (id, _, _, stored_kind, message, failed_at) = letters
            .iter()
            .find(|l| l.2 == offset)
            .unwrap_or_else(|| panic!("A@{offset} left: {letters:#?}"))
            .clone();
        let old = before.0.iter().find(|l| l.0 == id).unwrap();
        assert_eq!(stored_kind, kind, "A@{offset}: {message}");
        assert!(
            failed_at > old.5,
            "A@{offset}: failed_at {} -> {failed_at}",
            old.5
        );
        let printed = format!(
            "dead letter {id} ({}/0@{offset}) still fails: {message}",
            a.name
        );
        assert!(
            out.stdout.contains(&printed),
            "no {printed:?} in\n{}",
            out.stdout
        );
    }
}

/// README's warning about replaying into an upsert table: the replayed record is applied as
/// if it were new, so it overwrites a row a later record for its key has written since.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_in_upsert_mode_overwrites_a_newer_row_for_its_key() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric NOT NULL CHECK (amount >= 0))",
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.topic_settings = "mode = \"upsert\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    let mut sink = Sink::start(&config, "sink");
    // Two batches: the refused record first, then a newer one for the same key.
    for value in [r#"{"id":1,"amount":-1}"#, r#"{"id":1,"amount":7}"#] {
        produce_raw(&producer(), &topic.name, &[RawRecord::json(0, value)]).await;
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    }
    assert!(sink.stop().success());
    let row = || async {
        sqlx::query_scalar::<_, String>("SELECT amount::text FROM orders WHERE id = 1")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(row().await, "7");

    db.pool
        .execute("ALTER TABLE orders DROP CONSTRAINT orders_amount_check")
        .await
        .unwrap();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&[
        "dead-letters",
        "replay",
        "--config",
        file.arg(),
        "--dry-run",
    ])
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("writes the old record over any newer row"),
        "the dry run warns: {}",
        out.stderr
    );
    assert_eq!(row().await, "7", "a dry run changed the row");
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        row().await,
        "-1",
        "the replayed old record overwrote the newer row"
    );
}
