//! Issue 27, section 1: with `REPLICA IDENTITY DEFAULT`, PostgreSQL does not log an unchanged
//! TOASTed value, and Debezium sends its placeholder (`__debezium_unavailable_value`, its bytes
//! for bytea and non-text arrays) in its place. The copy must keep the stored value, against
//! the real connector.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::debezium::{wait_copy_equals_source, CdcOptions, CdcSource};
use crate::helpers::http::{get, metric, parse_metrics};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::wait_until;

/// Large values in every kind of column Debezium sends a placeholder for: text, jsonb (a
/// string under `io.debezium.data.Json`), bytea (base64), text[] (an array of the placeholder)
/// and int[] (the placeholder's bytes as numbers). `STORAGE EXTERNAL` keeps them out of line
/// uncompressed, so each one is TOASTed whatever its content.
const DOCS: &str = "CREATE TABLE docs (
    id int PRIMARY KEY,
    n int NOT NULL,
    body text NOT NULL,
    doc jsonb,
    blob bytea,
    tags text[],
    nums int[]
)";

const DOCS_COLUMNS: &[&str] = &["id", "n", "body", "doc", "blob", "tags", "nums"];

/// The source table with `rows` rows of about 20 KB per large column, `REPLICA IDENTITY
/// DEFAULT` (PostgreSQL's default, said out loud).
fn source_setup(rows: i32) -> String {
    format!(
        "{DOCS};
         ALTER TABLE docs REPLICA IDENTITY DEFAULT;
         ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL,
                          ALTER COLUMN doc SET STORAGE EXTERNAL,
                          ALTER COLUMN blob SET STORAGE EXTERNAL,
                          ALTER COLUMN tags SET STORAGE EXTERNAL,
                          ALTER COLUMN nums SET STORAGE EXTERNAL;
         INSERT INTO docs
         SELECT id, 0,
                (SELECT string_agg(md5(g::text || '-' || id), '') FROM generate_series(1, 625) g),
                jsonb_build_object('id', id, 'text',
                    (SELECT string_agg(md5(g::text || '+' || id), '') FROM generate_series(1, 625) g)),
                decode((SELECT string_agg(md5(g::text || '*' || id), '') FROM generate_series(1, 625) g), 'hex'),
                (SELECT array_agg(md5(g::text || '/' || id)) FROM generate_series(1, 600) g),
                (SELECT array_agg((g * 7919 + id) % 1000003) FROM generate_series(1, 5000) g)
           FROM generate_series(1, {rows}) id;"
    )
}

/// A sink applying the docs topic as README configures Debezium topics, dead-lettering.
/// A fresh database holding the copy's empty `docs` table.
async fn docs_copy() -> TestDb {
    let db = TestDb::migrated().await;
    db.pool
        .execute(DOCS)
        .await
        .expect("create the copy's table");
    db
}

fn sink_config(db: &TestDb, source: &CdcSource) -> SinkConfig {
    let mut config = SinkConfig::new(&db.url, &source.topic("docs"), "docs");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\non_error = \"dead_letter\"\n".into();
    config
}

/// The `u` events of `topic` whose `after` holds the placeholder in each large column, in
/// the form Debezium sends it there: proof that the test exercised every form.
fn assert_placeholders_sent(source: &CdcSource, at_least: usize) {
    const P: &str = "__debezium_unavailable_value";
    let bytes: Vec<serde_json::Value> = P.bytes().map(|b| b.into()).collect();
    let base64 = crate::helpers::base64_of(P.as_bytes());
    let updates: Vec<serde_json::Value> = source
        .values(&source.topic("docs"))
        .into_iter()
        .filter(|v| v["payload"]["op"] == "u")
        .map(|v| v["payload"]["after"].clone())
        .collect();
    let with_all = updates
        .iter()
        .filter(|a| {
            a["body"] == P
                && a["doc"] == P
                && a["blob"] == base64.as_str()
                && a["tags"] == serde_json::json!([P])
                && a["nums"] == serde_json::Value::Array(bytes.clone())
        })
        .count();
    assert!(
        with_all >= at_least,
        "only {with_all} of {} update events carry the placeholder in every large column",
        updates.len()
    );
}

/// The sink's counter of placeholders, by outcome.
fn placeholders(sink: &Sink, outcome: &str) -> f64 {
    let (_, body) = get(&sink.http_address(), "/metrics");
    metric(
        &parse_metrics(&body),
        &format!(
            "kafka_pg_sink_toast_placeholders_total{{outcome=\"{outcome}\",table=\"public.docs\"}}"
        ),
    )
}

/// Ten rows with large text, jsonb, bytea, text[] and int[] values; then every row's `n`
/// updated twice (one transaction each), and one row's `body` changed too: the update events
/// carry the placeholder for each unchanged large column, and the copy equals the source in
/// every column (the large values kept, `n` and the changed body updated), with no dead
/// letter and the placeholders counted as kept. Then rows inserted and updated while the
/// sink is stopped, so both records of each are in one batch.
#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toasted_columns_keep_their_stored_values() {
    let source = CdcSource::start(&source_setup(10), &["docs"], CdcOptions::default()).await;
    let db = docs_copy().await;
    let config = sink_config(&db, &source);
    let mut sink = Sink::start(&config, "cdc-toast");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;

    source.execute("UPDATE docs SET n = n + 1").await;
    source.execute("UPDATE docs SET n = n + 10").await;
    source
        .execute("UPDATE docs SET n = n + 100, body = 'short now' WHERE id = 4")
        .await;
    source.sync().await;
    source.wait_for_records(&source.topic("docs"), 31).await;
    assert_placeholders_sent(&source, 20);

    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;
    assert_eq!(
        db.dead_letters_of(&source.topic("docs")).await,
        Vec::new(),
        "no dead letters"
    );
    let placeholder_cells: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM docs WHERE body LIKE '%unavailable%' OR doc::text LIKE '%unavailable%'
            OR position(convert_to('__debezium_unavailable_value', 'UTF8') IN blob) > 0
            OR tags::text LIKE '%unavailable%' OR nums::text LIKE '{95,95,100,%'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("look for placeholders");
    assert_eq!(placeholder_cells, 0, "a placeholder was written");
    // 21 records carried placeholders (row 4's last update still did, in its other columns).
    wait_until(
        "the kept placeholders counted",
        Duration::from_secs(10),
        || async { placeholders(&sink, "kept") == 21.0 },
    )
    .await;
    assert_eq!(placeholders(&sink, "dead_lettered"), 0.0);
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));

    // Rows created and then updated while the sink is stopped reach it in one batch: the
    // placeholder's row is the one the same batch creates (a key's records apply in order).
    source
        .execute(&format!(
            "{}; UPDATE docs SET n = n + 7 WHERE id > 10",
            source_setup(15)
                .split_once("INSERT INTO docs")
                .map(|(_, insert)| format!("INSERT INTO docs{insert}"))
                .expect("the insert")
                .trim_end_matches(';')
                .replace(
                    "FROM generate_series(1, 15) id",
                    "FROM generate_series(11, 15) id"
                )
        ))
        .await;
    source.sync().await;
    source.wait_for_records(&source.topic("docs"), 41).await;
    let fresh = source
        .values(&source.topic("docs"))
        .iter()
        .filter(|v| {
            v["payload"]["op"] == "u"
                && v["payload"]["after"]["id"].as_i64() > Some(10)
                && v["payload"]["after"]["body"] == "__debezium_unavailable_value"
        })
        .count();
    assert_eq!(fresh, 5, "the new rows' updates carry the placeholder");
    let mut sink = Sink::start(&config, "cdc-toast-again");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;
    assert_eq!(db.count("docs").await, 15);
    assert_eq!(db.dead_letters_of(&source.topic("docs")).await, Vec::new());
    wait_until(
        "the kept placeholders counted",
        Duration::from_secs(10),
        || async { placeholders(&sink, "kept") == 5.0 },
    )
    .await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}

/// A placeholder for a row the copy does not have (here deleted from the copy by hand, as a
/// copy started from a later position would lack it): there is no stored value to keep, so
/// the record is a `toast_unavailable` dead letter at its offset and nothing of it is
/// written; the other rows' updates apply and keep their values. `dead-letters replay` keeps
/// the letter while the row is missing and applies it, keeping the values, once it is back.
#[tokio::test(flavor = "multi_thread")]
async fn a_placeholder_for_a_missing_row_is_a_toast_unavailable_dead_letter() {
    let source = CdcSource::start(&source_setup(4), &["docs"], CdcOptions::default()).await;
    let db = docs_copy().await;
    let config = sink_config(&db, &source);
    let mut sink = Sink::start(&config, "cdc-toast-missing");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;
    db.pool
        .execute("DELETE FROM docs WHERE id = 3")
        .await
        .expect("lose a row of the copy");

    source.execute("UPDATE docs SET n = n + 1").await;
    source.sync().await;
    source.wait_for_records(&source.topic("docs"), 8).await;
    assert_placeholders_sent(&source, 4);
    // The update of row 3 is the topic's record 4 + (3 - 1): the snapshot's 4, then by id.
    let offset_of_3 = source
        .values(&source.topic("docs"))
        .iter()
        .position(|v| v["payload"]["op"] == "u" && v["payload"]["after"]["id"] == 3)
        .expect("row 3's update") as i64;

    let topic = source.topic("docs");
    wait_until("the dead letter", Duration::from_secs(60), || async {
        !db.dead_letters_of(&topic).await.is_empty()
    })
    .await;
    let letters = db.dead_letters_of(&topic).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0].0, letters[0].1.as_str()),
        (offset_of_3, "toast_unavailable"),
        "{letters:?}"
    );
    assert!(
        letters[0].2.contains("body") && letters[0].2.contains("no row"),
        "the message names the columns and the missing row: {}",
        letters[0].2
    );
    // Every other row is the source's; row 3 stays missing (never the placeholder).
    let mut want = source.rows_as_text("docs", DOCS_COLUMNS).await;
    want.retain(|row| row[0].as_deref() != Some("3"));
    wait_until(
        "the other rows updated",
        Duration::from_secs(60),
        || async { db.rows_as_text("docs", DOCS_COLUMNS).await == want },
    )
    .await;
    assert_eq!(placeholders(&sink, "dead_lettered"), 1.0);
    assert_eq!(placeholders(&sink, "kept"), 3.0);
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));

    // A replay while the row is still missing keeps the letter, of the same kind; once the
    // row is back (as it was before the update) the replay applies the update to it, and
    // the copy is the source.
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    let letters = db.dead_letters_of(&topic).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].1, "toast_unavailable", "{letters:?}");
    let row_3_before: Vec<Option<String>> = source
        .rows_as_text("docs", DOCS_COLUMNS)
        .await
        .into_iter()
        .find(|row| row[0].as_deref() == Some("3"))
        .expect("row 3 on the source");
    sqlx::query(
        "INSERT INTO docs SELECT $1::int, $2::int - 1, $3, $4::jsonb, $5::bytea, $6::text[], $7::int[]",
    )
    .bind(&row_3_before[0])
    .bind(&row_3_before[1])
    .bind(&row_3_before[2])
    .bind(&row_3_before[3])
    .bind(&row_3_before[4])
    .bind(&row_3_before[5])
    .bind(&row_3_before[6])
    .execute(&db.pool)
    .await
    .expect("put row 3 back as it was before the update");
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(db.dead_letters_of(&topic).await, Vec::new());
    assert_eq!(
        db.rows_as_text("docs", DOCS_COLUMNS).await,
        source.rows_as_text("docs", DOCS_COLUMNS).await
    );
}

/// A connector configured with another `unavailable.value.placeholder` and the topic's
/// `unavailable_value_placeholder` set to it: its placeholder keeps the stored values just the
/// same (the events carry it in the text column, not Debezium's default).
#[tokio::test(flavor = "multi_thread")]
async fn a_configured_placeholder_keeps_the_stored_values_too() {
    const MINE: &str = "~kps-unchanged~";
    let options = CdcOptions {
        extra: vec![("unavailable.value.placeholder".into(), MINE.into())],
        ..CdcOptions::default()
    };
    let source = CdcSource::start(&source_setup(3), &["docs"], options).await;
    let db = docs_copy().await;
    let mut config = sink_config(&db, &source);
    config.topic_settings += &format!("unavailable_value_placeholder = \"{MINE}\"\n");
    let mut sink = Sink::start(&config, "cdc-toast-configured");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;

    source.execute("UPDATE docs SET n = n + 5").await;
    source.sync().await;
    source.wait_for_records(&source.topic("docs"), 6).await;
    let sent = source
        .values(&source.topic("docs"))
        .iter()
        .filter(|v| v["payload"]["op"] == "u" && v["payload"]["after"]["body"] == MINE)
        .count();
    assert_eq!(sent, 3, "the updates carry the configured placeholder");

    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;
    assert_eq!(db.dead_letters_of(&source.topic("docs")).await, Vec::new());
    wait_until(
        "the kept placeholders counted",
        Duration::from_secs(10),
        || async { placeholders(&sink, "kept") == 3.0 },
    )
    .await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}

/// Under the default `on_error = "fail"`, a placeholder for a row the copy lacks stops the
/// sink at that record, saying why; nothing of it is written and the position rests on it.
#[tokio::test(flavor = "multi_thread")]
async fn under_fail_a_placeholder_for_a_missing_row_stops_the_sink_at_it() {
    let source = CdcSource::start(&source_setup(2), &["docs"], CdcOptions::default()).await;
    let db = docs_copy().await;
    let mut config = sink_config(&db, &source);
    config.topic_settings = "format = \"debezium\"\n".into();
    let mut sink = Sink::start(&config, "cdc-toast-fail");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;
    db.pool
        .execute("DELETE FROM docs WHERE id = 2")
        .await
        .expect("lose a row of the copy");
    let lost = source.rows_as_text("docs", DOCS_COLUMNS).await;

    source
        .execute("UPDATE docs SET n = n + 1 WHERE id = 2")
        .await;
    source.sync().await;
    source.wait_for_records(&source.topic("docs"), 3).await;
    assert_placeholders_sent(&source, 1);
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "the placeholder without a row should stop the sink\n{}",
                sink.logs_tail(20)
            )
        });
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(20));
    let logs = sink.logs();
    assert!(
        logs.contains("unavailable-value placeholder") && logs.contains("no row for the key"),
        "{}",
        sink.logs_tail(20)
    );
    // The update of row 2 is record 2 (after the snapshot's two): the position rests on it.
    assert_eq!(
        db.stored_offsets(&config.group, &source.topic("docs"))
            .await,
        vec![(0, Some(2))]
    );
    assert_eq!(
        db.rows_as_text("docs", DOCS_COLUMNS).await,
        vec![lost[0].clone()],
        "row 1 as the source has it, row 2 still missing"
    );
    assert_eq!(db.dead_letters_of(&source.topic("docs")).await, Vec::new());
}

/// A primary-key change of a row whose large columns it leaves unchanged: Debezium sends a
/// `d` of the old key and a `c` of the new one, and under `REPLICA IDENTITY DEFAULT` that `c`
/// holds the placeholder (the values are nowhere in the stream), so it is a
/// `toast_unavailable` dead letter and the copy lacks the row; under `REPLICA IDENTITY FULL`
/// the `c` carries the values and the copy follows the source.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_change_needs_replica_identity_full_to_carry_unchanged_toasted_values() {
    let source = CdcSource::start(&source_setup(2), &["docs"], CdcOptions::default()).await;
    let db = docs_copy().await;
    let config = sink_config(&db, &source);
    let mut sink = Sink::start(&config, "cdc-toast-key-change");
    wait_copy_equals_source(&source, &db, "docs", DOCS_COLUMNS, &sink).await;

    source.execute("UPDATE docs SET id = 11 WHERE id = 1").await;
    source
        .execute("ALTER TABLE docs REPLICA IDENTITY FULL")
        .await;
    source.execute("UPDATE docs SET id = 12 WHERE id = 2").await;
    source.sync().await;
    // Snapshot 2, then d + tombstone + c for each key change.
    source.wait_for_records(&source.topic("docs"), 8).await;
    let values = source.values(&source.topic("docs"));
    let created = |id: i64| {
        let at = values
            .iter()
            .position(|v| v["payload"]["op"] == "c" && v["payload"]["after"]["id"] == id)
            .unwrap_or_else(|| panic!("the c of key {id}"));
        (at as i64, values[at]["payload"]["after"]["body"].clone())
    };
    let (offset_11, body_11) = created(11);
    assert_eq!(
        body_11, "__debezium_unavailable_value",
        "DEFAULT: the placeholder"
    );
    let (_, body_12) = created(12);
    assert_ne!(body_12, "__debezium_unavailable_value", "FULL: the value");

    let topic = source.topic("docs");
    let mut want = source.rows_as_text("docs", DOCS_COLUMNS).await;
    want.retain(|row| row[0].as_deref() != Some("11"));
    wait_until(
        "row 12 and no row 1 or 2",
        Duration::from_secs(60),
        || async { db.rows_as_text("docs", DOCS_COLUMNS).await == want },
    )
    .await;
    let letters = db.dead_letters_of(&topic).await;
    assert_eq!(
        letters
            .iter()
            .map(|(o, k, _)| (*o, k.as_str()))
            .collect::<Vec<_>>(),
        [(offset_11, "toast_unavailable")],
        "{letters:?}"
    );
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}
