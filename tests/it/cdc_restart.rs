//! A Debezium copy, made by the real connector, from a configuration that names no key: the
//! sink creates the table with the source's primary key (from the key's struct schema), and a
//! process killed with `kill -9` and started again under its `group_instance_id` commits again
//! within seconds, leaving the copy equal to the source (issue 27, section 4).

use std::time::{Duration, Instant};

use crate::helpers::db::TestDb;
use crate::helpers::debezium::{wait_copy_equals_source, CdcOptions, CdcSource};
use crate::helpers::sink::{run_cli, ConfigFile, LogsOnPanic, Sink, SinkConfig};
use crate::helpers::*;

const PERSON: &str = "CREATE TABLE person (id int PRIMARY KEY, email text NOT NULL, n int)";
const COLUMNS: &[&str] = &["id", "email", "n"];

/// `check` says where the missing table's key comes from, the created table's primary key is
/// the source's, and after a `kill -9` in the middle of the changes the process started again
/// under the same id commits within 5 s (the session timeout is 45 s), the copy ending equal
/// to the source in every column.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_without_key_is_created_by_the_source_key_and_back_within_5_s_of_a_kill_9() {
    let setup = format!(
        "{PERSON}; INSERT INTO person SELECT i, 'p' || i || '@example.com', i FROM generate_series(1, 200) i;"
    );
    let source = CdcSource::start(&setup, &["person"], CdcOptions::default()).await;
    let db = TestDb::migrated().await;
    let mut config = SinkConfig::new(&db.url, &source.topic("person"), "person");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\nauto_create = true\n".into();
    config.session_timeout_ms = 45_000;
    config.env.push((
        "KAFKA_PG_SINK_KAFKA__GROUP_INSTANCE_ID".into(),
        "cdc-0".into(),
    ));

    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("its primary key: the fields of the Debezium key's struct schema"),
        "{}",
        out.stdout
    );

    let mut first = Sink::start(&config, "first");
    wait_until("the created table", Duration::from_secs(60), || async {
        db.table_exists("person").await
    })
    .await;
    wait_copy_equals_source(&source, &db, "person", COLUMNS, &first).await;
    let pk: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a
            ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
          WHERE i.indrelid = to_regclass('person') AND i.indisprimary",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(pk, vec!["id".to_string()]);

    source
        .execute(
            "UPDATE person SET n = n + 1000 WHERE id % 3 = 0; DELETE FROM person WHERE id % 7 = 0;",
        )
        .await;
    first.kill9();
    source
        .execute(
            "INSERT INTO person SELECT i, 'q' || i || '@example.com', -i FROM generate_series(201, 260) i;
             UPDATE person SET email = 'x' || email WHERE id % 5 = 0;",
        )
        .await;
    source.sync().await;

    let restarted = Instant::now();
    let since: String = sqlx::query_scalar("SELECT now()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let second = Sink::start(&config, "second");
    let _logs = LogsOnPanic(&second);
    wait_until(
        "the restarted process's first commit",
        Duration::from_secs(5),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM kafka_offsets WHERE consumer_group = $1 AND committed_at > $2::timestamptz",
            )
            .bind(&config.group)
            .bind(&since)
            .fetch_one(&db.pool)
            .await
            .unwrap()
                > 0
        },
    )
    .await;
    eprintln!("first commit {:?} after the restart", restarted.elapsed());
    wait_copy_equals_source(&source, &db, "person", COLUMNS, &second).await;
}
