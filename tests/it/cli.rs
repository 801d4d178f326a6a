//! `migrate` and `check` as an operator runs them.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{
    order_json, produce_orders, produce_raw, producer, RawRecord, TestTopic,
};
use crate::helpers::services::services;
use crate::helpers::sink::{run_cli, run_cli_env, ConfigFile, Sink, SinkConfig};
use crate::helpers::{orders_as_produced, wait_drained, wait_until};

#[tokio::test(flavor = "multi_thread")]
async fn migrate_twice_is_a_no_op_and_concurrent_runs_do_not_collide() {
    let db = TestDb::empty().await;
    // Four at once: the advisory lock must serialise them.
    let runs = futures_join(4, &db.url).await;
    for out in &runs {
        assert!(
            out.status.success(),
            "concurrent migrate failed: {}",
            out.stderr
        );
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM refinery_schema_history")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count() as i64;
    assert_eq!(applied, files, "each migration recorded exactly once");

    let again = run_cli(&["migrate", "--database-url", &db.url]).await;
    assert!(again.status.success(), "{}", again.stderr);
    assert!(
        again.stderr.contains("already up to date"),
        "second run should be a no-op: {}",
        again.stderr
    );
    let applied_after: i64 = sqlx::query_scalar("SELECT count(*) FROM refinery_schema_history")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied_after, applied);
    assert!(db.table_exists("kafka_offsets").await);
}

async fn futures_join(n: usize, url: &str) -> Vec<crate::helpers::sink::CliOutput> {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let url = url.to_string();
            tokio::spawn(async move { run_cli(&["migrate", "--database-url", &url]).await })
        })
        .collect();
    let mut outs = Vec::new();
    for h in handles {
        outs.push(h.await.unwrap());
    }
    outs
}

#[tokio::test(flavor = "multi_thread")]
async fn check_reports_what_it_found_and_hides_the_password() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(3).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();
    let out = run_cli(&["check", "--config", &path]).await;
    assert!(
        out.status.success(),
        "check failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("3 partitions"), "{}", out.stdout);
    assert!(
        out.stdout.contains("kafka_offset") && out.stdout.contains("metadata offset"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("field \"amount\""), "{}", out.stdout);
    let password = url::Url::parse(&services().admin_url)
        .unwrap()
        .password()
        .map(str::to_string);
    if let Some(password) = password {
        assert!(
            !out.stdout.contains(&format!(":{password}@")),
            "password leaked: {}",
            out.stdout
        );
        assert!(
            !out.stderr.contains(&format!(":{password}@")),
            "password leaked: {}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn check_names_each_problem_in_a_bad_config() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;

    // A table that does not exist and a metadata column of the wrong type.
    let mut config = SinkConfig::new(&db.url, "no-such-topic-for-check", "missing_table");
    config.extra = String::new();
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("missing_table does not exist"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("no-such-topic-for-check"),
        "{}",
        out.stdout
    );

    let topic = TestTopic::create(1).await;
    let mut wrong_type = SinkConfig::new(&db.url, &topic.name, "orders");
    wrong_type.extra = String::new();
    let toml = wrong_type
        .toml()
        .replace("offset = \"kafka_offset\"", "offset = \"status\"");
    let out = run_cli(&["check", "--config", ConfigFile::new(&toml).arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("metadata.offset cannot go into column \"status\""),
        "{}",
        out.stdout
    );

    // A typo in a setting is named, not ignored.
    let toml = config.toml().replace("max_records", "max_recordz");
    let out = run_cli(&["check", "--config", ConfigFile::new(&toml).arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("max_recordz"), "{}", out.stderr);

    // An unmigrated database is reported with the command that fixes it.
    let bare = TestDb::empty().await;
    bare.create_orders_table("orders").await;
    let config = SinkConfig::new(&bare.url, &topic.name, "orders");
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("kafka-pg-sink migrate"),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn settings_are_overridden_by_environment_then_flags() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();

    let env = [("KAFKA_PG_SINK_KAFKA__GROUP_ID", "from-env")];
    let out = run_cli_env(&["check", "--config", &path], &env).await;
    assert!(out.stdout.contains("group \"from-env\""), "{}", out.stdout);
    let out = run_cli_env(
        &[
            "check",
            "--config",
            &path,
            "--set",
            "kafka.group_id=from-flag",
        ],
        &env,
    )
    .await;
    assert!(out.stdout.contains("group \"from-flag\""), "{}", out.stdout);
    let out = run_cli_env(
        &["check", "--config", &path, "--group-id", "from-group-flag"],
        &env,
    )
    .await;
    assert!(
        out.stdout.contains("group \"from-group-flag\""),
        "{}",
        out.stdout
    );

    // DATABASE_URL is honoured, and the prefixed variable beats it.
    let out = run_cli_env(
        &["check", "--config", &path],
        &[("DATABASE_URL", "postgres://nobody:wrong@127.0.0.1:1/none")],
    )
    .await;
    assert!(
        !out.status.success(),
        "DATABASE_URL should override the file"
    );
    assert!(
        out.stdout.contains("cannot connect to PostgreSQL") && !out.stdout.contains("wrong@"),
        "{}",
        out.stdout
    );
    let out = run_cli_env(
        &["check", "--config", &path],
        &[
            ("DATABASE_URL", "postgres://nobody:wrong@127.0.0.1:1/none"),
            ("KAFKA_PG_SINK_POSTGRES__URL", &db.url),
        ],
    )
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn check_validates_modes_formats_and_columns_against_the_table() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let run = |topic_settings: &str, metadata: &str| {
        let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
        config.topic_settings = topic_settings.into();
        config.metadata = metadata.into();
        // The file moves into the future, so it outlives the command.
        let file = ConfigFile::new(&config.toml());
        async move { run_cli(&["check", "--config", file.arg()]).await }
    };
    let default_metadata = "partition = \"kafka_partition\"\noffset = \"kafka_offset\"";

    // The orders table has no primary key: upsert needs a unique key.
    let out = run("mode = \"upsert\"", default_metadata).await;
    assert!(!out.status.success());
    assert!(out.stdout.contains("has no primary key"), "{}", out.stdout);

    let out = run("[topics.columns]\nnope = \"/x\"", default_metadata).await;
    assert!(
        out.stdout
            .contains("columns.nope: column \"nope\" is not in the table"),
        "{}",
        out.stdout
    );

    let out = run(
        "[topics.columns]\ncustomer = \"/a/b\"\nstatus = \"meta:bogus\"",
        default_metadata,
    )
    .await;
    assert!(
        out.stdout.contains("unknown metadata \"bogus\""),
        "{}",
        out.stdout
    );

    let out = run(
        "format = \"raw\"\nraw_column = \"amount\"",
        default_metadata,
    )
    .await;
    assert!(
        out.stdout
            .contains("raw_column \"amount\" must be json, jsonb, text or bytea"),
        "{}",
        out.stdout
    );

    let out = run("delete_on_tombstone = true", default_metadata).await;
    assert!(
        out.stderr
            .contains("delete_on_tombstone needs mode = \"upsert\""),
        "{}",
        out.stderr
    );

    // A good explicit mapping is printed with each column's source.
    let out = run(
        "[topics.columns]\ncustomer = \"/who/name\"\nstatus = { const = \"new\" }",
        default_metadata,
    )
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("value \"/who/name\"") && out.stdout.contains("constant \"new\""),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn check_prints_each_setting_as_it_is_written() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE products (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "products");
    config.protocol = "consumer";
    config.reset = "latest";
    config.metadata = String::new();
    config.topic_settings = "format = \"connect-json\"\nmode = \"upsert\"\nkey_from = \"key\"\n\
                             on_error = \"dead_letter\""
        .into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    for written in [
        "format connect-json",
        "mode upsert",
        "key_from key",
        "on_error dead_letter",
        "protocol consumer",
        "auto_offset_reset latest",
        "offset_out_of_range fail",
    ] {
        assert!(
            out.stdout.contains(written),
            "no {written:?} in\n{}",
            out.stdout
        );
    }
    for debug_spelling in ["connectjson", "DeadLetter", "Consumer", "Upsert"] {
        assert!(
            !out.stdout.contains(debug_spelling),
            "{debug_spelling:?} in\n{}",
            out.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn check_says_a_missing_topic_does_not_exist() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let missing = format!(
        "kps-missing-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let config = SinkConfig::new(&db.url, &missing, "orders");
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert!(!out.status.success());
    assert!(
        out.stdout
            .contains(&format!("topic {missing:?} does not exist")),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("RD_KAFKA_RESP_ERR"), "{}", out.stdout);
    assert!(!out.stdout.contains("Some("), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_reads_the_password_from_the_environment_like_run_and_check() {
    let db = TestDb::empty().await;
    let password = url::Url::parse(&db.url)
        .unwrap()
        .password()
        .expect("the test services' URL has a password")
        .to_string();
    let var = "KPS_TEST_MIGRATE_PGPASSWORD";
    let url = db
        .url
        .replacen(&format!(":{password}@"), &format!(":${{{var}}}@"), 1);
    assert!(url.contains(var), "{url}");
    // `migrate` needs nothing but the URL.
    let file = ConfigFile::new(&format!("[postgres]\nurl = \"{url}\"\n"));

    let unset = run_cli(&["migrate", "--config", file.arg()]).await;
    assert!(!unset.status.success());
    assert!(
        unset
            .stderr
            .contains(&format!("${{{var}}}, which is not set")),
        "{}",
        unset.stderr
    );
    assert!(
        !unset.stderr.contains(&format!(":{password}@")),
        "{}",
        unset.stderr
    );

    let set = run_cli_env(&["migrate", "--config", file.arg()], &[(var, &password)]).await;
    assert!(set.status.success(), "{}", set.stderr);
    assert!(
        !set.stderr.contains(&format!(":{password}@")),
        "{}",
        set.stderr
    );
    assert!(db.table_exists("kafka_offsets").await);
}

#[tokio::test(flavor = "multi_thread")]
async fn check_warns_about_integer_times_without_a_unit() {
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE stamps (id int, created_at timestamptz, day date, seen timestamptz)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let check = |topic_settings: &str| {
        let mut config = SinkConfig::new(&db.url, &topic.name, "stamps");
        config.metadata = "timestamp = \"seen\"".into();
        config.topic_settings = topic_settings.into();
        let file = ConfigFile::new(&config.toml());
        async move { run_cli(&["check", "--config", file.arg()]).await }
    };
    let out = check("").await;
    assert!(
        out.status.success(),
        "a warning is not a problem:\n{}",
        out.stdout
    );
    let warnings: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("warning:"))
        .collect();
    assert_eq!(warnings.len(), 2, "{}", out.stdout);
    assert!(
        warnings[0].contains("column created_at (timestamp with time zone)")
            && warnings[0].contains("epoch milliseconds")
            && warnings[0].contains("time_unit"),
        "{}",
        out.stdout
    );
    assert!(
        warnings[1].contains("column day (date)") && warnings[1].contains("10,000,000"),
        "{}",
        out.stdout
    );

    let out = check("format = \"connect-json\"").await;
    assert!(
        out.stdout
            .contains("reads an integer in a record without a schema"),
        "{}",
        out.stdout
    );

    let out = check("time_unit = \"us\"\n[topics.time_units]\nday = \"days\"").await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("warning:"), "{}", out.stdout);
    assert!(out.stdout.contains("integers in us"), "{}", out.stdout);
    assert!(out.stdout.contains("integers in days"), "{}", out.stdout);
}

/// README, Configuration: the file may come from `KAFKA_PG_SINK_CONFIG` instead of `--config`.
#[tokio::test(flavor = "multi_thread")]
async fn the_config_file_can_come_from_kafka_pg_sink_config() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let out = run_cli_env(&["check"], &[("KAFKA_PG_SINK_CONFIG", file.arg())]).await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!("group {:?}", config.group)),
        "{}",
        out.stdout
    );
}

/// README, Configuration: `KAFKA_BOOTSTRAP_SERVERS` overrides the file, the prefixed variable
/// overrides it, and `--bootstrap-servers` overrides both. Each losing layer names a port
/// nothing listens on, so `check` could not pass if it won.
#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_servers_come_from_the_file_then_the_environment_then_the_flag() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let real = services().kafka.clone();
    let dead = "127.0.0.1:1";
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(dead.into());
    let file = ConfigFile::new(&config.toml());
    let path = file.arg().to_string();
    let uses = |out: &crate::helpers::sink::CliOutput, servers: &str| {
        assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
        assert!(
            out.stdout.contains(&format!("kafka: {servers} (")),
            "{}",
            out.stdout
        );
    };

    let out = run_cli_env(
        &["check", "--config", &path],
        &[("KAFKA_BOOTSTRAP_SERVERS", &real)],
    )
    .await;
    uses(&out, &real);

    let out = run_cli_env(
        &["check", "--config", &path],
        &[
            ("KAFKA_BOOTSTRAP_SERVERS", dead),
            ("KAFKA_PG_SINK_KAFKA__BOOTSTRAP_SERVERS", &real),
        ],
    )
    .await;
    uses(&out, &real);

    let out = run_cli_env(
        &["check", "--config", &path, "--bootstrap-servers", &real],
        &[
            ("KAFKA_BOOTSTRAP_SERVERS", dead),
            ("KAFKA_PG_SINK_KAFKA__BOOTSTRAP_SERVERS", dead),
        ],
    )
    .await;
    uses(&out, &real);
}

/// README, `[postgres]`: `connect_timeout` bounds a connection attempt. The server here accepts
/// TCP connections and never answers, so only the timeout can end the attempt.
#[tokio::test(flavor = "multi_thread")]
async fn connect_timeout_bounds_an_attempt_to_a_server_that_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            // Keep every connection open and silent.
            held.push(stream);
        }
    });
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let file = ConfigFile::new(&config.toml());
    let silent = format!("postgres://nobody:secret@127.0.0.1:{port}/none");
    let started = std::time::Instant::now();
    let out = run_cli(&[
        "check",
        "--config",
        file.arg(),
        "--database-url",
        &silent,
        "--set",
        "postgres.connect_timeout=1s",
    ])
    .await;
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        took < std::time::Duration::from_secs(6),
        "check took {took:?} with a 1 s connect_timeout"
    );
    assert!(
        out.stdout.contains("cannot connect to PostgreSQL") && out.stdout.contains("timed out"),
        "{}",
        out.stdout
    );
}

/// README, `[log]`: `RUST_LOG` filters the output; without it, `info` and up is shown.
#[tokio::test(flavor = "multi_thread")]
async fn rust_log_filters_what_is_logged() {
    let db = TestDb::empty().await;
    let out = run_cli_env(
        &["migrate", "--database-url", &db.url],
        &[("RUST_LOG", "warn")],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        !out.stderr.contains(" INFO ") && !out.stderr.contains("migrations applied"),
        "RUST_LOG=warn still shows INFO:\n{}",
        out.stderr
    );

    let out = run_cli(&["migrate", "--database-url", &db.url]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains(" INFO ") && out.stderr.contains("already up to date"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains(" DEBUG ") && !out.stderr.contains(" TRACE "),
        "the default is info:\n{}",
        out.stderr
    );

    let out = run_cli_env(
        &["migrate", "--database-url", &db.url],
        &[("RUST_LOG", "trace")],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains(" TRACE ") || out.stderr.contains(" DEBUG "),
        "RUST_LOG=trace shows nothing below INFO:\n{}",
        out.stderr
    );
}

/// README, Commands: `migrate` upgrades a database an older release migrated. Here the
/// database holds only V1 (the later migrations' objects dropped and their history removed),
/// with a stored position that must survive.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_upgrades_a_database_migrated_to_v1_only() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "DROP VIEW kafka_lag;
             DROP TABLE kafka_watermarks, kafka_dead_letters, kafka_offset_events;
             ALTER TABLE kafka_offsets DROP COLUMN reset_from_epoch;
             DELETE FROM refinery_schema_history WHERE version > 1;
             INSERT INTO kafka_offsets (consumer_group, topic, partition, next_offset, owner_epoch, owner_id)
                  VALUES ('old-group', 'old-topic', 3, 1234, 7, 'old-owner');",
        )
        .await
        .unwrap();

    let out = run_cli(&["migrate", "--database-url", &db.url]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("migrations applied"), "{}", out.stderr);
    let versions: Vec<i32> =
        sqlx::query_scalar("SELECT version FROM refinery_schema_history ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count() as i32;
    assert_eq!(versions, (1..=files).collect::<Vec<_>>());
    for object in [
        "kafka_lag",
        "kafka_watermarks",
        "kafka_dead_letters",
        "kafka_offset_events",
    ] {
        let found: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(object)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(found.as_deref(), Some(object));
    }
    let kept: (
        String,
        String,
        i32,
        Option<i64>,
        i64,
        Option<String>,
        Option<i64>,
    ) = sqlx::query_as(
        "SELECT consumer_group, topic, partition, next_offset, owner_epoch, owner_id,
                    reset_from_epoch FROM kafka_offsets",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        kept,
        (
            "old-group".into(),
            "old-topic".into(),
            3,
            Some(1234),
            7,
            Some("old-owner".into()),
            None
        )
    );
    // And the upgraded database is one `check` accepts.
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
}

/// README, Configuration: `examples/orders.toml` works with `examples/orders.sql`. Only what
/// names this machine's services, and the topic and group (unique per test), are replaced;
/// every other line is the example's own.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_config_migrates_checks_and_drains_into_the_example_table() {
    let db = TestDb::empty().await;
    let sql = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/orders.sql"))
        .unwrap();
    db.pool.execute(sql.as_str()).await.unwrap();
    let topic = TestTopic::create(2).await;
    let group = format!("g-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut toml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/orders.toml"))
            .unwrap();
    for (line, replacement) in [
        (
            "bootstrap_servers = \"127.0.0.1:9092\"".to_string(),
            format!("bootstrap_servers = \"{}\"", services().kafka),
        ),
        (
            "group_id = \"orders-sink\"".into(),
            format!("group_id = \"{group}\""),
        ),
        (
            "url = \"postgres://postgres:postgres@127.0.0.1:5432/postgres\"".into(),
            format!("url = \"{}\"", db.url),
        ),
        (
            "name = \"orders\"".into(),
            format!("name = \"{}\"", topic.name),
        ),
        // Other sinks may run on this machine.
        (
            "listen = \"127.0.0.1:9464\"".into(),
            "listen = \"127.0.0.1:0\"".into(),
        ),
    ] {
        assert_eq!(toml.matches(&line).count(), 1, "{line} in the example");
        toml = toml.replace(&line, &replacement);
    }
    let file = ConfigFile::new(&toml);

    let out = run_cli(&["migrate", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("warning:"), "{}", out.stdout);

    let mut sink = Sink::start_file(file.path(), "example");
    let timestamp = |id: i64| 1_650_000_000_000 + id * 7;
    let records: Vec<RawRecord> = (0..100)
        .map(|id| RawRecord {
            key: Some(id.to_string().into_bytes()),
            timestamp_ms: Some(timestamp(id)),
            ..RawRecord::json((id % 2) as i32, &order_json(id))
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    wait_drained(&db, &group, &topic, Duration::from_secs(60)).await;
    assert_eq!(sink.stop().code(), Some(0), "{}", sink.logs_tail(20));

    type Row = (
        String,
        String,
        String,
        String,
        Option<String>,
        i64,
        serde_json::Value,
        i32,
        i64,
        i64,
        bool,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, customer, amount::text, currency, status,
                (extract(epoch FROM created_at) * 1000)::int8, attrs, kafka_partition,
                kafka_offset, (extract(epoch FROM kafka_timestamp) * 1000)::int8,
                inserted_at IS NOT NULL
           FROM orders ORDER BY id::int",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 100);
    for (id, row) in (0i64..).zip(rows) {
        let order: serde_json::Value = serde_json::from_str(&order_json(id)).unwrap();
        let expected: Row = (
            id.to_string(),
            order["customer"].as_str().unwrap().into(),
            order["amount"].as_str().unwrap().into(),
            "EUR".into(),
            order["status"].as_str().map(String::from),
            1_700_000_000_000 + id * 1000,
            order["attrs"].clone(),
            (id % 2) as i32,
            id / 2,
            timestamp(id),
            true,
        );
        assert_eq!(row, expected, "order {id}");
    }
}

/// README, `[log]`: `--log-format json` makes every line one JSON object, a configuration
/// error included; the progress line carries records/s, rows/s, rows committed and commit
/// latency.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_and_carry_the_progress_line() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(
        &config,
        "json",
        &["--log-format", "json", "--set", "log.progress_interval=1s"],
    );
    produce_orders(&producer(), &topic, 0, 300).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let progress = |logs: &str| -> Vec<serde_json::Value> {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == "progress")
            .collect()
    };
    wait_until(
        "a progress line counting the 300 rows",
        Duration::from_secs(10),
        || {
            let logs = sink.logs();
            async move { progress(&logs).iter().any(|p| p["rows_committed"] == 300) }
        },
    )
    .await;
    assert_eq!(sink.stop().code(), Some(0), "{}", sink.logs_tail(20));
    let copies = orders_as_produced(&db, "orders", 2).await;
    assert_eq!(copies.len(), 300);
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");

    let logs = sink.logs();
    assert_every_line_is_a_json_object(&logs);
    let lines = progress(&logs);
    for line in &lines {
        for field in [
            "records_per_sec",
            "rows_per_sec",
            "rows_committed",
            "avg_commit_ms",
            "max_commit_ms",
        ] {
            assert!(line[field].is_number(), "{field} in {line}");
        }
    }
    // The drain may straddle two lines, so each field is looked for on its own.
    for field in ["records_per_sec", "rows_per_sec", "max_commit_ms"] {
        assert!(
            lines.iter().any(|l| l[field].as_f64() > Some(0.0)),
            "no progress line saw the drain in {field}: {lines:?}"
        );
    }

    // A configuration error is logged in the format asked for, too.
    let bad = config.toml().replace("max_records", "max_recordz");
    let out = run_cli(&[
        "check",
        "--config",
        ConfigFile::new(&bad).arg(),
        "--log-format",
        "json",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("max_recordz"), "{}", out.stderr);
    assert_every_line_is_a_json_object(&out.stderr);
}

/// Every non-empty line parses as a JSON object: no text line mixed in.
fn assert_every_line_is_a_json_object(logs: &str) {
    let mut lines = 0;
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(
            matches!(parsed, Ok(serde_json::Value::Object(_))),
            "not a JSON object: {line}"
        );
        lines += 1;
    }
    assert!(lines > 0, "no log lines at all");
}

/// README, Metrics: `http.enabled = false` serves nothing, while records still drain; the
/// same address is served when the endpoint is on.
#[tokio::test(flavor = "multi_thread")]
async fn http_enabled_false_serves_nothing() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("http.listen=127.0.0.1:{port}");
    let address = format!("127.0.0.1:{port}");

    let mut off = Sink::start_with(
        &config,
        "no-http",
        &["--set", "http.enabled=false", "--set", &listen],
    );
    produce_orders(&producer(), &topic, 0, 100).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(
        std::net::TcpStream::connect(&address).is_err(),
        "something answers on {address} with http.enabled = false"
    );
    assert_eq!(off.stop().code(), Some(0), "{}", off.logs_tail(20));
    assert!(!off.logs().contains("serving /metrics"), "{}", off.logs());

    let mut on = Sink::start_with(&config, "http", &["--set", &listen]);
    assert_eq!(on.http_address(), address);
    assert!(std::net::TcpStream::connect(&address).is_ok());
    assert_eq!(on.stop().code(), Some(0), "{}", on.logs_tail(20));
}

/// README, Security: `check` lists `kafka.properties`, showing every value whose name looks
/// like a secret as `***`. `some.token` is no librdkafka property, so the client is refused
/// (exit 1), but only after the listing.
#[tokio::test(flavor = "multi_thread")]
async fn check_hides_every_secret_looking_property() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let secrets = [
        "ssl.key.password",
        "sasl.oauthbearer.client.secret",
        "some.token",
        "sasl.jaas.config",
        "ssl.keystore.private",
        "ssl.key.pem",
    ];
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka_properties = secrets
        .iter()
        .enumerate()
        .map(|(i, k)| format!("\"{k}\" = \"hidden-{i}\""))
        .chain(["\"client.rack\" = \"rack-visible\"".to_string()])
        .collect::<Vec<_>>()
        .join("\n");
    let out = run_cli(&["check", "--config", ConfigFile::new(&config.toml()).arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    for key in secrets {
        assert!(
            out.stdout.contains(&format!("kafka property {key} = ***")),
            "{key}:\n{}",
            out.stdout
        );
    }
    assert!(
        out.stdout
            .contains("kafka property client.rack = rack-visible"),
        "{}",
        out.stdout
    );
    for i in 0..secrets.len() {
        let value = format!("hidden-{i}");
        assert!(
            !out.stdout.contains(&value) && !out.stderr.contains(&value),
            "{value} printed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
    }
}

/// `check` on an Avro topic fetches the subject's latest schema from the real registry and
/// holds it against the table: a required column the schema cannot fill is a problem (exit
/// 1), a field no column takes is listed; a matching table passes.
#[tokio::test(flavor = "multi_thread")]
async fn check_holds_a_registry_schema_against_the_table() {
    use crate::helpers::registry::{register, registry_url};
    use kafka_pg_sink::registry::SchemaKind;
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE items (id bigint PRIMARY KEY, name text, extra int NOT NULL)")
        .await
        .unwrap();
    db.pool
        .execute("CREATE TABLE items_ok (id bigint PRIMARY KEY, name text)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let schema = r#"{"type":"record","name":"Item","namespace":"kps.test","fields":[
      {"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"qty","type":"int"}]}"#;
    let id = register(&format!("{}-value", topic.name), SchemaKind::Avro, schema).await;
    let registry = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "format = \"avro\"".into();
    config.metadata = String::new();
    config.extra = registry.clone();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!(
            "column extra is required, but schema {id} (\"{}-value\") has no field \"extra\"",
            topic.name
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("field \"qty\": no column takes it (ignored)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("id {id} (Avro)")),
        "{}",
        out.stdout
    );

    config.table = "items_ok".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);

    // No schema under the subject: said, exit 1.
    let other = TestTopic::create(1).await;
    let mut missing = SinkConfig::new(&db.url, &other.name, "items_ok");
    missing.topic_settings = "format = \"avro\"".into();
    missing.metadata = String::new();
    missing.extra = registry;
    let file = ConfigFile::new(&missing.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success());
    assert!(
        out.stdout
            .contains("the registry has no schema under subject"),
        "{}",
        out.stdout
    );
}

/// `check` holds each registry field's type against its column: a field whose type never
/// converts into the column (an Avro `boolean` into `integer`, a `timestamp-millis` into
/// `date`, a JSON Schema `boolean` into `uuid`) is a problem naming topic, field, schema type,
/// column and column type (exit 1); a union with null into a NOT NULL column only a warning;
/// fields that may convert (a `string` into `integer`) pass.
#[tokio::test(flavor = "multi_thread")]
async fn check_holds_each_registry_field_type_against_its_column() {
    use crate::helpers::registry::{register, registry_url};
    use kafka_pg_sink::registry::SchemaKind;
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            "CREATE TABLE typed (id bigint PRIMARY KEY, flag integer, at date, \
             maybe text NOT NULL, digits integer)",
        )
        .await
        .unwrap();
    db.pool
        .execute("CREATE TABLE typed_ok (id bigint PRIMARY KEY, flag boolean, at timestamptz, maybe text, digits integer)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let schema = r#"{"type":"record","name":"Typed","namespace":"kps.test","fields":[
      {"name":"id","type":"long"},{"name":"flag","type":"boolean"},
      {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
      {"name":"maybe","type":["null","string"],"default":null},
      {"name":"digits","type":"string"}]}"#;
    let subject = format!("{}-value", topic.name);
    let id = register(&subject, SchemaKind::Avro, schema).await;
    let registry = format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url());
    let mut config = SinkConfig::new(&db.url, &topic.name, "typed");
    config.topic_settings = "format = \"avro\"".into();
    config.metadata = String::new();
    config.extra = registry.clone();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    let t = &topic.name;
    for line in [
        format!("topic {t:?}: field \"flag\" of schema {id} ({subject:?}) is boolean, which never converts into column flag (integer)"),
        format!("topic {t:?}: field \"at\" of schema {id} ({subject:?}) is long (timestamp-millis), which never converts into column at (date)"),
        "warning: field \"maybe\" is [null, string], which may be null, but column maybe (text) is NOT NULL: such records fail".to_string(),
    ] {
        assert!(out.stdout.contains(&line), "{line}\n{}", out.stdout);
    }
    assert_eq!(
        out.stdout.matches("never converts").count(),
        2,
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("\"digits\" of schema"),
        "{}",
        out.stdout
    );

    // The same fields into columns they can go into: no problem.
    config.table = "typed_ok".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("never converts"), "{}", out.stdout);

    // JSON Schema values are held against the table the same way.
    let other = TestTopic::create(1).await;
    db.pool
        .execute("CREATE TABLE typed_js (id bigint PRIMARY KEY, flag uuid)")
        .await
        .unwrap();
    let js =
        r#"{"type":"object","properties":{"id":{"type":"integer"},"flag":{"type":"boolean"}}}"#;
    let js_subject = format!("{}-value", other.name);
    let js_id = register(&js_subject, SchemaKind::Json, js).await;
    let mut config = SinkConfig::new(&db.url, &other.name, "typed_js");
    config.topic_settings = "format = \"json-schema\"".into();
    config.metadata = String::new();
    config.extra = registry;
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    let line = format!(
        "topic {:?}: field \"flag\" of schema {js_id} ({js_subject:?}) is boolean, which never converts into column flag (uuid)",
        other.name
    );
    assert!(out.stdout.contains(&line), "{line}\n{}", out.stdout);
}
