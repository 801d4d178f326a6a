//! Security: identifiers from configuration are quoted, secrets never reach logs or output,
//! PostgreSQL over verified TLS, Kafka over SASL and SSL, and the documented minimal grants
//! are enough.

use std::time::Duration;

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, produce_raw, producer, RawRecord, TestTopic};
use crate::helpers::orders::assert_orders_are;
use crate::helpers::sink::{run_cli, run_cli_env, ConfigFile, Sink, SinkConfig};
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
    assert!(
        db.table_exists("sentinel").await,
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
            dev_env("KPS_KAFKA_SASL_BOOTSTRAP"),
            format!(
                "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"PLAIN\"\n\"sasl.username\" = \"{}\"\n\"sasl.password\" = \"${{KPS_TEST_SASL_PASSWORD}}\"",
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

    // check connects the same way: it passes over verified TLS and refuses the wrong CA.
    for (url, passes) in [(&good, true), (&bad, false)] {
        let file = ConfigFile::new(&SinkConfig::new(url, &topic.name, "orders").toml());
        let out = run_cli(&["check", "--config", file.arg()]).await;
        assert_eq!(
            out.status.success(),
            passes,
            "{}\n{}",
            out.stdout,
            out.stderr
        );
        if !passes {
            let all = format!("{}{}", out.stdout, out.stderr).to_lowercase();
            assert!(all.contains("certificate"), "{all}");
        }
    }

    // The system's roots are trusted too: without sslrootcert, verify-full passes once the CA
    // is among them (SSL_CERT_FILE names the system's bundle) and fails while it is not.
    let mut system = url::Url::parse(&db.url).unwrap();
    system.set_host(Some("localhost")).unwrap();
    system
        .query_pairs_mut()
        .append_pair("sslmode", "verify-full");
    let out = crate::helpers::sink::run_cli_env(
        &["migrate", "--database-url", system.as_str()],
        &[("SSL_CERT_FILE", &dev_env("KPS_TLS_CA"))],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    let out = run_cli(&["migrate", "--database-url", system.as_str()]).await;
    assert!(
        !out.status.success(),
        "the dev CA is not a system root here"
    );
    assert!(
        out.stderr.to_lowercase().contains("certificate"),
        "{}",
        out.stderr
    );

    // Sessions by encryption, for the sink's sessions in this database.
    let sessions = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
              WHERE a.datname = $1 AND a.application_name = 'kafka-pg-sink'",
        )
        .bind(&db.name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let config = SinkConfig::new(&good, &topic.name, "orders");
    let mut sink = Sink::start(&config, "tls");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let (encrypted, plain) = sessions().await;
    assert!(encrypted > 0, "no sink session to look at");
    assert_eq!(plain, 0, "every sink session is encrypted");
    assert_exactly_once(&db, "orders", 1_000).await;
    assert!(sink.stop().success());

    // No sslmode at all: `prefer`, the default, and this server offers TLS, so it is used.
    assert!(!db.url.contains("sslmode"), "{}", db.url);
    db.create_orders_table("orders_prefer").await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders_prefer");
    config.group = format!("{}-prefer", config.group);
    let mut sink = Sink::start(&config, "prefer");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let (encrypted, plain) = sessions().await;
    assert!(encrypted > 0, "no sink session to look at");
    assert_eq!(
        plain, 0,
        "sslmode prefer (the default) encrypts every session"
    );
    assert_exactly_once(&db, "orders_prefer", 1_000).await;
    assert!(sink.stop().success());
}

/// A broker whose certificate the configured CA did not sign is an authentication failure
/// like a wrong password: `/ready` says 503 with `kafka_error`, and after
/// `kafka.auth_failure_timeout` the sink exits 1 instead of retrying for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_broker_certificate_says_not_ready_then_exits_1() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(dev_env("KPS_KAFKA_SSL_BOOTSTRAP"));
    config.kafka_properties = "\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"/etc/ssl/certs/ssl-cert-snakeoil.pem\"".into();
    config.env = vec![(
        "KAFKA_PG_SINK_KAFKA__AUTH_FAILURE_TIMEOUT".into(),
        "10s".into(),
    )];
    let started = std::time::Instant::now();
    let mut sink = Sink::start(&config, "wrong CA");
    let address = sink.http_address();
    wait_until(
        "/ready to name the failing Kafka connection",
        Duration::from_secs(10),
        || async {
            let (status, body) = crate::helpers::http::get(&address, "/ready");
            status == 503
                && body.contains("kafka_error")
                && body.to_lowercase().contains("certificate")
        },
    )
    .await;
    let status = sink
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| {
            panic!(
                "run kept going with a rejected certificate\n{}",
                sink.logs_tail(30)
            )
        });
    assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "stopped before auth_failure_timeout"
    );
    assert!(
        sink.logs()
            .contains("authentication with the Kafka brokers has failed"),
        "{}",
        sink.logs_tail(30)
    );
}

/// The `GRANT` statements of README's "Minimal grants", for `role` on database `db`: read from
/// README itself, so the documentation and this test cannot drift apart.
fn readme_grants(db: &str, role: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = &readme[readme
        .find("**Minimal grants**")
        .expect("a Minimal grants section")..];
    let start = section.find("```sql").expect("a sql block") + "```sql".len();
    let block = &section[start..start + section[start..].find("```").expect("its end")];
    let grants: Vec<String> = block
        .lines()
        .map(|l| l.split("--").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            assert!(l.starts_with("GRANT ") && l.ends_with(" TO sink;"), "{l}");
            l.replace(" TO sink;", &format!(" TO {role};"))
                .replace("ON DATABASE app ", &format!("ON DATABASE \"{db}\" "))
        })
        .collect();
    assert!(grants.len() >= 9, "{grants:?}");
    grants.join("\n")
}

/// A role with exactly README's grants on `db` (whose tables `orders` and `customers` must
/// exist), and the database URL that logs in as it. Drop it with `drop_role`.
async fn minimal_role(db: &TestDb) -> (String, url::Url) {
    let role = format!("kps_sink_{}", &db.name[9..]);
    db.pool
        .execute(
            format!(
                "CREATE ROLE {role} LOGIN PASSWORD 'sink-pass';\n{}",
                readme_grants(&db.name, &role)
            )
            .as_str(),
        )
        .await
        .unwrap();
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(Some("sink-pass")).unwrap();
    (role, url)
}

/// Roles outlive databases: removes one `minimal_role` made.
async fn drop_role(db: &TestDb, role: &str) {
    db.pool
        .execute(format!("DROP OWNED BY {role}; DROP ROLE {role}").as_str())
        .await
        .unwrap();
}

/// Under the grants, every path that needs one: insert; upsert with a delete; dead letters
/// inserted, met again after an `offsets reset` run by the sink's role (UPDATE, and INSERT on
/// `kafka_offset_events`) and replayed (SELECT, DELETE); and lag from SQL.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_minimal_grants_are_enough() {
    let db = TestDb::migrated().await;
    // The tables README's grants name: orders (insert mode) and customers (upsert mode).
    db.create_orders_table("orders").await;
    db.pool
        .execute("CREATE TABLE customers (id bigint PRIMARY KEY, v text CHECK (v <> 'bad'))")
        .await
        .unwrap();
    let (role, url) = minimal_role(&db).await;

    let orders = TestTopic::create(2).await;
    produce_orders(&producer(), &orders, 0, 1_000).await;
    let customers = TestTopic::create(1).await;
    let customer = |id: i64, value: Option<String>| RawRecord {
        key: Some(id.to_string().into_bytes()),
        value: value.map(String::into_bytes),
        ..Default::default()
    };
    let mut records: Vec<RawRecord> = (0..100)
        .map(|i| customer(i % 10, Some(format!(r#"{{"id":{},"v":"v{i}"}}"#, i % 10))))
        .collect();
    records.push(customer(77, Some("not json".into()))); // a decode dead letter
    records.push(customer(50, Some(r#"{"id":50,"v":"bad"}"#.into()))); // refused by the CHECK
    records.push(customer(3, None)); // a tombstone: DELETE
    produce_raw(&producer(), &customers.name, &records).await;

    let mut config = SinkConfig::new(url.as_str(), &orders.name, "orders");
    config.extra = format!("[[topics]]\nname = \"{}\"\ntable = \"customers\"\nmode = \"upsert\"\nkey_from = \"key\"\ndelete_on_tombstone = true\non_error = \"dead_letter\"\n", customers.name);
    let file = ConfigFile::new(&config.toml());
    let fast_watermarks = ["--set", "kafka.watermark_interval=300ms"];
    let mut sink = Sink::start_with(&config, "least privilege", &fast_watermarks);
    wait_drained(&db, &config.group, &orders, Duration::from_secs(60)).await;
    wait_drained(&db, &config.group, &customers, Duration::from_secs(60)).await;
    assert_exactly_once(&db, "orders", 1_000).await;
    let customer_rows = || async {
        sqlx::query_as::<_, (i64, String)>("SELECT id, v FROM customers ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    let expected: Vec<(i64, String)> = (0..10)
        .filter(|&id| id != 3)
        .map(|id| (id, format!("v{}", 90 + id)))
        .collect();
    assert_eq!(customer_rows().await, expected, "the last record per id");
    let letters = || async {
        sqlx::query_as::<_, (i64, String, chrono::DateTime<chrono::Utc>)>(
            "SELECT \"offset\", error_kind, failed_at FROM kafka_dead_letters ORDER BY 1",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let first = letters().await;
    let kinds: Vec<(i64, &str)> = first.iter().map(|(o, k, _)| (*o, k.as_str())).collect();
    assert_eq!(kinds, vec![(100, "decode"), (101, "rejected")]);

    // The sink's role moves the position back; the running sink rereads and meets both dead
    // letters again, refreshing them in place.
    let out = run_cli(&[
        "offsets",
        "reset",
        "--config",
        file.arg(),
        "--topic",
        &customers.name,
        "--to",
        "earliest",
    ])
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    wait_until(
        "both dead letters met again",
        Duration::from_secs(60),
        || async {
            let now = letters().await;
            now.len() == 2 && now.iter().zip(&first).all(|(n, f)| n.2 > f.2)
        },
    )
    .await;
    wait_drained(&db, &config.group, &customers, Duration::from_secs(60)).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(20));
    assert_eq!(customer_rows().await, expected);
    let resets: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM kafka_offset_events WHERE topic = $1 AND kind = 'manual_reset'",
    )
    .bind(&customers.name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(resets, 1);

    // Lag from SQL works under these grants too: watermarks stored, kafka_lag readable by the
    // sink's own role, and the lag gauges it reads from there exported.
    let as_sink = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url.as_str())
        .await
        .unwrap();
    let lag = || async {
        sqlx::query_as::<_, (String, i32, Option<i64>, Option<i64>)>(
            "SELECT topic, partition, high_watermark, lag FROM kafka_lag
              WHERE consumer_group = $1 ORDER BY topic, partition",
        )
        .bind(&config.group)
        .fetch_all(&as_sink)
        .await
        .unwrap()
    };
    let mut expected_lag = vec![
        (orders.name.clone(), 0, Some(500), Some(0)),
        (orders.name.clone(), 1, Some(500), Some(0)),
        (customers.name.clone(), 0, Some(103), Some(0)),
    ];
    expected_lag.sort();
    wait_until(
        "kafka_watermarks to be stored",
        Duration::from_secs(30),
        || async { lag().await == expected_lag },
    )
    .await;
    let gauge = format!(
        "kafka_pg_sink_lag{{topic=\"{}\",partition=\"0\"}} 0",
        customers.name
    );
    let address = sink.http_address();
    // The gauges are refreshed every watermark_interval, after kafka_lag already agrees.
    wait_until("the lag gauge", Duration::from_secs(10), || async {
        ureq::get(format!("http://{address}/metrics"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
            .contains(&gauge)
    })
    .await;
    assert!(sink.stop().success());

    // A replay by the sink's role: the fixed record becomes its row and leaves the table.
    db.pool
        .execute("ALTER TABLE customers DROP CONSTRAINT customers_v_check")
        .await
        .unwrap();
    let out = run_cli(&["dead-letters", "replay", "--config", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("replayed 1 dead letter(s); 1 still fail"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let mut with_replayed = expected.clone();
    with_replayed.push((50, "bad".into()));
    assert_eq!(customer_rows().await, with_replayed);
    let left: Vec<(i64, String)> = letters()
        .await
        .into_iter()
        .map(|(o, k, _)| (o, k))
        .collect();
    assert_eq!(left, vec![(100, "decode".to_string())]);

    // Without the grant the sink still runs, and says once, at WARN, that lag is not stored.
    db.pool
        .execute(format!("REVOKE ALL ON kafka_watermarks FROM {role}").as_str())
        .await
        .unwrap();
    let mut sink = Sink::start_with(&config, "no watermarks", &fast_watermarks);
    let warnings = |logs: &str| -> Vec<String> {
        logs.lines()
            .filter(|l| l.contains(" WARN ") && l.contains("watermarks"))
            .map(str::to_string)
            .collect()
    };
    wait_until("the warning", Duration::from_secs(60), || async {
        !warnings(&sink.logs()).is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sink.is_running(), "{}", sink.logs_tail(20));
    let (_, metrics) = crate::helpers::http::get(&sink.http_address(), "/metrics");
    assert!(
        !metrics.contains("kafka_pg_sink_lag{"),
        "lag gauges without stored watermarks:\n{metrics}"
    );
    assert!(sink.stop().success());
    let warnings = warnings(&sink.logs());
    assert!(
        warnings.len() == 1 && warnings[0].contains("permission denied"),
        "one warning, not one per interval: {warnings:#?}"
    );

    as_sink.close().await;
    drop_role(&db, &role).await;
}

/// With `on_error = "dead_letter"`, an error no row explains is not a dead letter: a
/// permission taken away from the sink's role, or its table dropped, stops the sink with exit
/// 1 naming the error, with no dead letter and the position where it was.
#[tokio::test(flavor = "multi_thread")]
async fn errors_no_row_explains_stop_the_sink_instead_of_dead_lettering() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    db.pool
        .execute("CREATE TABLE customers (id bigint PRIMARY KEY, v text)")
        .await
        .unwrap();
    let (role, url) = minimal_role(&db).await;
    // (what changes under the running sink, what the ERROR says, what undoes the change)
    let cases = [
        (
            format!("REVOKE INSERT ON orders FROM {role}"),
            "permission denied",
            format!("GRANT INSERT ON orders TO {role}"),
        ),
        (
            "DROP TABLE orders".to_string(),
            "does not exist",
            String::new(),
        ),
    ];
    for (i, (change, says, undo)) in cases.iter().enumerate() {
        let topic = TestTopic::create(1).await;
        produce_orders(&producer(), &topic, 0, 100).await;
        let mut config = SinkConfig::new(url.as_str(), &topic.name, "orders");
        config.group = format!("{}-{i}", config.group);
        config.topic_settings = "on_error = \"dead_letter\"".into();
        let mut sink = Sink::start(&config, &format!("case {i}"));
        wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
        db.pool.execute(change.as_str()).await.unwrap();
        produce_orders(&producer(), &topic, 100, 200).await;
        let status = sink
            .wait_timeout(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("case {i}: the sink kept running\n{}", sink.logs_tail(30)));
        assert_eq!(status.code(), Some(1), "{}", sink.logs_tail(30));
        let logs = sink.logs();
        assert!(
            logs.lines()
                .any(|l| l.contains("ERROR") && l.contains(says)),
            "case {i}: no ERROR saying {says:?}\n{}",
            sink.logs_tail(30)
        );
        let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(
            letters, 0,
            "case {i}: an error no row explains was dead-lettered"
        );
        assert_eq!(
            db.stored_offsets(&config.group, &topic.name).await,
            vec![(0, Some(100))],
            "case {i}: the position moved"
        );
        if !undo.is_empty() {
            db.pool.execute(undo.as_str()).await.unwrap();
        }
    }
    drop_role(&db, &role).await;
}

/// GSSAPI (Kerberos) is not built into the sink's librdkafka: `check` says so instead of
/// trying to connect.
#[tokio::test(flavor = "multi_thread")]
async fn gssapi_is_not_built_in() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(dev_env("KPS_KAFKA_SASL_BOOTSTRAP"));
    config.kafka_properties =
        "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"GSSAPI\"".into();
    let file = ConfigFile::new(&config.toml());
    let out = run_cli(&["check", "--config", file.arg()]).await;
    assert!(!out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let all = format!("{}\n{}", out.stdout, out.stderr);
    assert!(
        all.contains("No provider for SASL mechanism GSSAPI"),
        "{all}"
    );
}

/// A password from a secret store holds any character: `${NAME}` puts it into the URL's
/// user-info encoded, so `migrate`, `check` and `run` all log in with it, and none of them
/// prints a piece of it (the old behaviour: `failed to lookup address information`, and a log
/// line holding everything after the password's first `@`).
#[tokio::test(flavor = "multi_thread")]
async fn a_password_with_every_reserved_character_logs_in_through_a_variable() {
    let db = TestDb::empty().await;
    db.create_orders_table("orders").await;
    let role = format!("kps_reserved_{}", &db.name[9..]);
    // Every reserved character of RFC 3986, `%` with hex digits after it, a space, quotes.
    let password = "Qz:/?#[]@!$&'()*+,;=%20 \"x\\Wv@p@ss/w:rd%20#?x";
    db.pool
        .execute(
            format!(
                "CREATE ROLE {role} LOGIN PASSWORD '{}';
                 ALTER DATABASE \"{}\" OWNER TO {role};
                 ALTER TABLE orders OWNER TO {role};",
                password.replace('\'', "''"),
                db.name
            )
            .as_str(),
        )
        .await
        .unwrap();
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(None).unwrap();
    let var = "KPS_TEST_RESERVED_PGPASSWORD";
    let template =
        url.as_str()
            .replacen(&format!("//{role}@"), &format!("//{role}:${{{var}}}@"), 1);
    assert!(template.contains(var), "{template}");
    let env = [(var, password)];
    // Pieces of the password a broken split would print: each side of each reserved run.
    let pieces = ["Qz", "Wv", "p@ss", "w:rd", "%20#", "#?x", "ss/w"];
    let leaks = |text: &str| -> Vec<&str> {
        pieces
            .iter()
            .copied()
            .filter(|piece| text.contains(piece))
            .collect()
    };

    let file = ConfigFile::new(&format!("[postgres]\nurl = \"{template}\"\n"));
    let out = run_cli_env(&["migrate", "--config", file.arg()], &env).await;
    assert!(out.status.success(), "migrate: {}", out.stderr);
    let shown = format!("{}\n{}", out.stdout, out.stderr);
    assert!(leaks(&shown).is_empty(), "{shown}");
    assert!(db.table_exists("kafka_offsets").await);

    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 500).await;
    let mut config = SinkConfig::new(&template, &topic.name, "orders");
    config.env = vec![(var.to_string(), password.to_string())];
    let file = ConfigFile::new(&config.toml());
    let out = run_cli_env(&["check", "--config", file.arg()], &env).await;
    assert!(
        out.status.success(),
        "check: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains(&format!("//{role}:***@")),
        "check names the URL with its password hidden: {}",
        out.stdout
    );
    let shown = format!("{}\n{}", out.stdout, out.stderr);
    assert!(leaks(&shown).is_empty(), "{shown}");

    let mut sink = Sink::start(&config, "reserved password");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    sink.stop();
    assert_orders_are(&db, "orders", &(0..500).collect::<Vec<_>>()).await;
    let logs = sink.logs();
    assert!(
        leaks(&logs).is_empty(),
        "the log holds a piece of the password:\n{logs}"
    );

    // A wrong password fails to log in, and the error shows none of it either.
    let out = run_cli_env(&["migrate", "--config", file.arg()], &[(var, "Qz@Wv/x")]).await;
    assert!(!out.status.success());
    assert!(
        !out.stderr.contains("Qz") && !out.stderr.contains("Wv"),
        "{}",
        out.stderr
    );
    db.pool
        .execute(format!("REASSIGN OWNED BY {role} TO CURRENT_USER; DROP ROLE {role}").as_str())
        .await
        .unwrap();
}
