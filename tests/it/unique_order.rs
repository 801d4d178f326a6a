//! A batch ends in the state applying its records one at a time would reach (issue 27,
//! section 3), on `person (id PRIMARY KEY, email UNIQUE, n)`: email swaps, key changes (a
//! delete of the old key and a create of the new one) and deletes followed by a re-insert of
//! the same email, all in one batch; and a record that is refused one at a time is still
//! refused, alone.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::debezium::{wait_copy_equals_source, CdcOptions, CdcSource};
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};

/// The table of these tests, on the source and in the copy.
const PERSON: &str = "CREATE TABLE person (id int PRIMARY KEY, email text NOT NULL UNIQUE, n int)";

/// A person: email and n.
type Person = (String, Option<i32>);

/// The source's table as a model: id to person.
type People = BTreeMap<i32, Person>;

/// A Debezium change event of `person` (op, before, after), schemaless JSON as the
/// JsonConverter writes it without schemas.
fn change(op: &str, id: i32, before: Option<&Person>, after: Option<&Person>) -> String {
    let row = |r: Option<&Person>| match r {
        Some((email, n)) => format!(
            r#"{{"id":{id},"email":"{email}","n":{}}}"#,
            n.map_or("null".to_string(), |n| n.to_string())
        ),
        None => "null".into(),
    };
    format!(
        r#"{{"before":{},"after":{},"source":{{"table":"person"}},"op":"{op}","ts_ms":1700000000000}}"#,
        row(before),
        row(after)
    )
}

/// The Debezium events of a source whose changes are applied to `people`, one at a time, and
/// the SQL that makes them on a real source (each change its own transaction).
#[derive(Default)]
struct Source {
    people: People,
    records: Vec<RawRecord>,
    sql: String,
}

impl Source {
    fn event(&mut self, id: i32, value: Option<String>) {
        self.records.push(RawRecord {
            partition: 0,
            key: Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
            value: value.map(String::into_bytes),
            ..Default::default()
        });
    }

    /// A snapshot read, or an insert.
    fn insert(&mut self, op: &str, id: i32, email: &str, n: i32) {
        let row = (email.to_string(), Some(n));
        self.event(id, Some(change(op, id, None, Some(&row))));
        self.people.insert(id, row);
    }

    fn update(&mut self, id: i32, email: &str) {
        self.sql.push_str(&format!(
            "BEGIN; UPDATE person SET email = '{email}', n = n + 1 WHERE id = {id}; COMMIT;\n"
        ));
        let old = self.people[&id].clone();
        let new = (email.to_string(), old.1.map(|n| n + 1));
        self.event(id, Some(change("u", id, Some(&old), Some(&new))));
        self.people.insert(id, new);
    }

    /// A delete and its tombstone.
    fn delete(&mut self, id: i32) {
        let old = self.people.remove(&id).expect("a row to delete");
        self.event(id, Some(change("d", id, Some(&old), None)));
        self.event(id, None);
    }

    /// What Debezium emits for `UPDATE person SET id = to WHERE id = from`: a delete of the old
    /// key (and its tombstone), then a create of the new one.
    fn change_key(&mut self, from: i32, to: i32) {
        self.sql.push_str(&format!(
            "BEGIN; UPDATE person SET id = {to} WHERE id = {from}; COMMIT;\n"
        ));
        let (email, n) = self.people[&from].clone();
        self.delete(from);
        self.insert("c", to, &email, n.unwrap_or(0));
    }
}

/// The issue's scenario: 100 people read by a snapshot, then 50 email swaps (a -> temp,
/// b -> a's old, a -> b's old), 30 key changes (`id + 10000`) and 20 deletes each followed by
/// an insert of a new id with the deleted email, interleaved as separate transactions.
fn scenario() -> Source {
    let mut s = Source::default();
    for id in 1..=100 {
        s.insert("r", id, &format!("p{id}@example.com"), id);
    }
    for i in 0..50 {
        let (a, b) = (2 * i + 1, 2 * i + 2);
        let (ea, eb) = (s.people[&a].0.clone(), s.people[&b].0.clone());
        s.update(a, &format!("temp{a}@example.com"));
        s.update(b, &ea);
        s.update(a, &eb);
        // Each pair is swapped once: then `a` changes its key, `b` is deleted and its email
        // inserted again under a new id.
        if i < 30 {
            s.change_key(a, a + 10_000);
        }
        if i < 20 {
            let id = b;
            let email = s.people[&id].0.clone();
            s.sql.push_str(&format!(
                "BEGIN; DELETE FROM person WHERE id = {id}; COMMIT;
                 BEGIN; INSERT INTO person VALUES ({}, '{email}', 7); COMMIT;\n",
                id + 20_000
            ));
            s.delete(id);
            s.insert("c", id + 20_000, &email, 7);
        }
    }
    s
}

/// Every column of the copy, by id.
async fn people(db: &TestDb) -> People {
    let rows: Vec<(i32, String, Option<i32>)> =
        sqlx::query_as("SELECT id, email, n FROM person ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    rows.into_iter().map(|(id, e, n)| (id, (e, n))).collect()
}

/// Waits until the copy is `want` (or the sink stopped), then asserts it.
async fn wait_people(db: &TestDb, sink: &mut Sink, want: &People) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline && sink.is_running() {
        if people(db).await == *want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        people(db).await,
        *want,
        "the copy is not the source; sink log:\n{}",
        sink.logs_tail(30)
    );
}

/// A sink of `topic` into `person`, one writer, every record in one batch.
fn config(db: &TestDb, topic: &str, on_error: &str) -> SinkConfig {
    let mut config = SinkConfig::new(&db.url, topic, "person");
    config.metadata = String::new();
    config.topic_settings = format!("format = \"debezium\"\non_error = \"{on_error}\"\n");
    config.writers = 1;
    config.max_records = 10_000;
    config.max_wait_ms = 3_000;
    config
}

/// The issue's 50 swaps, 30 key changes and 20 delete + re-inserts, produced before the sink
/// starts so one batch (of 10,000 records at most, 3 s) holds them all with the snapshot:
/// under the default `on_error = "fail"` the sink does not stop, and the copy equals the
/// source in every column (on main: `duplicate key value violates unique constraint
/// "person_email_key"`, nothing written, the same batch again after a restart).
#[tokio::test(flavor = "multi_thread")]
async fn swaps_key_changes_and_reinserts_in_one_batch_equal_one_by_one_apply() {
    let db = TestDb::migrated().await;
    db.pool.execute(PERSON).await.unwrap();
    let topic = TestTopic::create(1).await;
    let source = scenario();
    produce_raw(&producer(), &topic.name, &source.records).await;

    let config = config(&db, &topic.name, "fail");
    let mut sink = Sink::start(&config, "unique-order");
    wait_people(&db, &mut sink, &source.people).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(30));
    assert_eq!(
        db.stored_offsets(&config.group, &topic.name).await,
        vec![(0, Some(source.records.len() as i64))]
    );
    // The 400 records went in a few rounds (each pair's snapshot, swap steps, key change or
    // re-insert and tombstone), not one record per round.
    let address = sink.http_address();
    let series = "kafka_pg_sink_upsert_rounds_total{table=\"public.person\"}";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut rounds = 0.0;
    while rounds == 0.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rounds = metric(&parse_metrics(&get(&address, "/metrics").1), series);
    }
    assert!(
        (2.0..=10.0).contains(&rounds),
        "{rounds} merges beyond the first"
    );
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}

/// The scenario with one record that is refused one at a time (person 99 takes the email
/// person 100 keeps): under `dead_letter` it is the one dead letter, the rest is applied as
/// one at a time; under `fail` the sink stops at it, naming the record and the index, with
/// everything before it written.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_refused_one_at_a_time_is_refused_alone() {
    let mut source = scenario();
    let before = source.people.clone();
    let at = source.records.len() as i64;
    let taken = source.people[&100].0.clone();
    // Applied one at a time this is refused, so the source never changes.
    let old = source.people[&99].clone();
    let refused = (taken, old.1);
    source.event(99, Some(change("u", 99, Some(&old), Some(&refused))));
    source.people = before;
    // After it: person 100 lets go of its email and person 98 takes it, which is valid.
    let freed = source.people[&100].0.clone();
    source.update(100, "free@example.com");
    source.update(98, &freed);

    for on_error in ["dead_letter", "fail"] {
        let db = TestDb::migrated().await;
        db.pool.execute(PERSON).await.unwrap();
        let topic = TestTopic::create(1).await;
        produce_raw(&producer(), &topic.name, &source.records).await;
        let config = config(&db, &topic.name, on_error);
        let mut sink = Sink::start(&config, on_error);
        if on_error == "dead_letter" {
            wait_people(&db, &mut sink, &source.people).await;
            let letters: Vec<(i32, i64, String)> = sqlx::query_as(
                "SELECT partition, \"offset\", error_kind FROM kafka_dead_letters ORDER BY 1, 2",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            assert_eq!(letters, [(0, at, "rejected".to_string())]);
            assert!(sink.stop().success(), "{}", sink.logs_tail(30));
        } else {
            let status = sink
                .wait_timeout(Duration::from_secs(60))
                .unwrap_or_else(|| panic!("the sink should stop\n{}", sink.logs_tail(30)));
            assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
            let record = format!("{}/0@{at}", topic.name);
            let logs = sink.logs();
            let line = logs
                .lines()
                .find(|l| l.contains("ERROR") && l.contains(&record))
                .unwrap_or_else(|| panic!("no ERROR naming {record}\n{}", sink.logs_tail(30)));
            assert!(line.contains("person_email_key"), "{line}");
            // Everything before the refused record, as one at a time.
            assert_eq!(people(&db).await, scenario().people);
            assert_eq!(
                db.stored_offsets(&config.group, &topic.name).await,
                vec![(0, Some(at))]
            );
        }
    }
}

/// The same scenario made by the real Debezium PostgreSQL connector on a source `person`:
/// each swap, key change (`UPDATE … SET id = id + 10000`) and delete + re-insert its own
/// transaction, all streamed before the sink starts so one batch holds them; the copy equals
/// the source in every column.
#[tokio::test(flavor = "multi_thread")]
async fn the_real_connectors_swaps_key_changes_and_reinserts_equal_the_source() {
    let setup = format!(
        "{PERSON};
         INSERT INTO person SELECT i, 'p' || i || '@example.com', i FROM generate_series(1, 100) i;"
    );
    let source = CdcSource::start(&setup, &["person"], CdcOptions::default()).await;
    let model = scenario();
    source.execute(&model.sql).await;
    source.sync().await;

    let db = TestDb::migrated().await;
    db.pool.execute(PERSON).await.unwrap();
    let topic = source.topic("person");
    let config = config(&db, &topic, "fail");
    let mut sink = Sink::start(&config, "cdc-unique-order");
    wait_copy_equals_source(&source, &db, "person", &["id", "email", "n"], &sink).await;
    assert_eq!(people(&db).await, model.people, "the source is the model");
    assert!(sink.is_running(), "{}", sink.logs_tail(30));
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}
