//! Security: identifiers from configuration are quoted, secrets never reach logs or output,
//! PostgreSQL over verified TLS, Kafka over SASL and SSL, and the documented minimal grants
//! are enough.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

/// The value of an environment variable that `scripts/dev-services.sh env` provides.
fn dev_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: this test needs the TLS and SASL listeners of scripts/dev-services.sh (eval \"$(scripts/dev-services.sh env)\")")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_identifiers_are_quoted_never_executed() {
    let db = TestDb::migrated().await;
    db.pool
        .execute(
            r#"CREATE TABLE sentinel (x int);
               CREATE TABLE "order""s; DROP TABLE sentinel; --" (
                   "id" bigint PRIMARY KEY, "we""ird" text, "sp ace" text, "ünï" text, "select" int)"#,
        )
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let records: Vec<RawRecord> = (0..50)
        .map(|i| {
            RawRecord::json(
                0,
                &format!(
                    r#"{{"id":{},"we\"ird":"q{i}","sp ace":"s","ünï":"u","select":{i}}}"#,
                    i % 20
                ),
            )
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    for mode in ["insert", "upsert"] {
        db.pool
            .execute(r#"TRUNCATE "order""s; DROP TABLE sentinel; --""#)
            .await
            .unwrap();
        let mut config = SinkConfig::new(&db.url, &topic.name, "unused");
        config.group = format!("{}-{mode}", config.group);
        config.metadata = String::new();
        let toml = config.toml().replace(
            "table = \"unused\"",
            &format!("table = 'order\"s; DROP TABLE sentinel; --'\nmode = \"{mode}\"\non_error = \"dead_letter\""),
        );
        let file = ConfigFile::new(&toml);
        let path = file.path();
        let mut sink = Sink::start_file(path, mode);
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        assert!(sink.stop().success());
        let (rows, selects): (i64, i64) = sqlx::query_as(
            r#"SELECT count(*), sum("select") FROM "order""s; DROP TABLE sentinel; --""#,
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if mode == "insert" {
            // Ids repeat: 20 rows land, the 30 duplicates are rejected into dead letters.
            assert_eq!(rows, 20);
        } else {
            // The last record per id wins: i in 30..50.
            assert_eq!((rows, selects), (20, (30..50).sum()));
        }
    }
    let sentinel: Option<String> = sqlx::query_scalar("SELECT to_regclass('sentinel')::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        sentinel.as_deref(),
        Some("sentinel"),
        "a name was executed as SQL"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_appear_in_logs_errors_or_check_output() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;

    // A wrong database password: the error says what failed, never the password.
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_password(Some("s3cr3t-db-pass")).unwrap();
    let config = SinkConfig::new(url.as_str(), &topic.name, "orders");
    let mut sink = Sink::start(&config, "wrong password");
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .expect("a wrong password stops the sink");
    assert!(!status.success());
    let logs = sink.logs();
    assert!(
        logs.contains("password authentication failed") || logs.contains("cannot connect"),
        "{logs}"
    );
    assert!(!logs.contains("s3cr3t-db-pass"), "{logs}");

    // A wrong SASL password, given through the environment: check fails on authentication
    // and shows the property as ***.
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(dev_env("KPS_KAFKA_SASL_BOOTSTRAP"));
    config.kafka_properties = format!(
        "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{}\"\n\"sasl.password\" = \"${{KPS_TEST_SASL_PASSWORD}}\"",
        dev_env("KPS_KAFKA_SASL_USER")
    );
    let file = ConfigFile::new(&config.toml());
    let path = file.path();
    let out = crate::helpers::sink::run_cli_env(
        &["check", "--config", path.to_str().unwrap()],
        &[("KPS_TEST_SASL_PASSWORD", "s3cr3t-kafka-pass")],
    )
    .await;
    assert!(!out.status.success());
    let all = format!("{}\n{}", out.stdout, out.stderr);
    assert!(all.contains("sasl.password = ***"), "{all}");
    assert!(
        all.to_lowercase().contains("authenticat"),
        "the failure names authentication: {all}"
    );
    assert!(!all.contains("s3cr3t-kafka-pass"), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_over_sasl_scram_and_over_ssl_delivers_exactly_once() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 2_000).await;
    let listeners = [
        (
            dev_env("KPS_KAFKA_SASL_BOOTSTRAP"),
            format!(
                "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{}\"\n\"sasl.password\" = \"${{KPS_TEST_SASL_PASSWORD}}\"",
                dev_env("KPS_KAFKA_SASL_USER")
            ),
        ),
        (
            dev_env("KPS_KAFKA_SSL_BOOTSTRAP"),
            format!("\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{}\"", dev_env("KPS_TLS_CA")),
        ),
    ];
    for (i, (bootstrap, properties)) in listeners.into_iter().enumerate() {
        db.pool.execute("TRUNCATE orders").await.unwrap();
        let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
        config.group = format!("{}-{i}", config.group);
        config.kafka = Some(bootstrap);
        config.kafka_properties = properties;
        config.env = vec![(
            "KPS_TEST_SASL_PASSWORD".into(),
            dev_env("KPS_KAFKA_SASL_PASSWORD"),
        )];
        let mut sink = Sink::start(&config, &format!("listener {i}"));
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        assert_exactly_once(&db, "orders", 2_000).await;
        assert!(sink.stop().success());
        assert!(!sink.logs().contains(&dev_env("KPS_KAFKA_SASL_PASSWORD")));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_over_verified_tls() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    produce_orders(&producer(), &topic, 0, 1_000).await;
    let with_ca = |ca: &str| {
        let mut url = url::Url::parse(&db.url).unwrap();
        url.set_host(Some("localhost")).unwrap();
        url.query_pairs_mut()
            .append_pair("sslmode", "verify-full")
            .append_pair("sslrootcert", ca);
        url.to_string()
    };
    let good = with_ca(&dev_env("KPS_TLS_CA"));

    // migrate and check over TLS; a CA that did not sign the server's certificate is refused.
    let out = run_cli(&["migrate", "--database-url", &good]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let bad = with_ca("/etc/ssl/certs/ssl-cert-snakeoil.pem");
    let out = run_cli(&["migrate", "--database-url", &bad]).await;
    assert!(!out.status.success());
    assert!(
        out.stderr.to_lowercase().contains("certificate"),
        "{}",
        out.stderr
    );

    let config = SinkConfig::new(&good, &topic.name, "orders");
    let mut sink = Sink::start(&config, "tls");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let plain: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.datname = $1 AND a.application_name = 'kafka-pg-sink' AND NOT s.ssl",
    )
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(plain, 0, "every sink session is encrypted");
    assert_exactly_once(&db, "orders", 1_000).await;
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documented_minimal_grants_are_enough() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    db.pool
        .execute("CREATE TABLE latest (id bigint PRIMARY KEY, v text)")
        .await
        .unwrap();
    let role = format!("kps_sink_{}", &db.name[9..]);
    // The grants README.md lists, nothing more.
    db.pool
        .execute(
            format!(
                r#"CREATE ROLE {role} LOGIN PASSWORD 'sink-pass';
                   GRANT CONNECT, TEMPORARY ON DATABASE "{db}" TO {role};
                   GRANT USAGE ON SCHEMA public TO {role};
                   GRANT SELECT ON refinery_schema_history TO {role};
                   GRANT SELECT, INSERT, UPDATE ON kafka_offsets TO {role};
                   GRANT SELECT, INSERT, UPDATE, DELETE ON kafka_dead_letters TO {role};
                   GRANT INSERT ON kafka_offset_events TO {role};
                   GRANT USAGE ON SEQUENCE kafka_dead_letters_id_seq, kafka_offset_events_id_seq TO {role};
                   GRANT SELECT, INSERT ON orders TO {role};
                   GRANT SELECT, INSERT, UPDATE, DELETE ON latest TO {role};"#,
                db = db.name
            )
            .as_str(),
        )
        .await
        .unwrap();
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(Some("sink-pass")).unwrap();

    let orders = TestTopic::create(2).await;
    produce_orders(&producer(), &orders, 0, 1_000).await;
    let latest = TestTopic::create(1).await;
    let mut records: Vec<RawRecord> = (0..100)
        .map(|i| RawRecord::json(0, &format!(r#"{{"id":{},"v":"v{i}"}}"#, i % 10)))
        .collect();
    records.push(RawRecord::json(0, "not json"));
    produce_raw(&producer(), &latest.name, &records).await;

    let mut config = SinkConfig::new(url.as_str(), &orders.name, "orders");
    config.extra = format!("[[topics]]\nname = \"{}\"\ntable = \"latest\"\nmode = \"upsert\"\non_error = \"dead_letter\"\n", latest.name);
    let mut sink = Sink::start(&config, "least privilege");
    wait_drained(&db, &config.group, &orders, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &latest, Duration::from_secs(60)).await;
    assert_exactly_once(&db, "orders", 1_000).await;
    let latest_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM latest")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(latest_rows, 10);
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(letters, 1);
    assert!(sink.stop().success());
    // Roles outlive databases: remove this one.
    db.pool
        .execute(format!("DROP OWNED BY {role}; DROP ROLE {role}").as_str())
        .await
        .unwrap();
}
