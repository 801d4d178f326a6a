//! The real Debezium PostgreSQL connector as a test's source of change events.
//!
//! `scripts/dev-services.sh up` runs a second PostgreSQL cluster with `wal_level = logical`
//! (`KPS_CDC_DATABASE_URL`) and a Kafka Connect worker holding Debezium's PostgreSQL connector
//! (`KAFKA_CONNECT_URL`). A test makes a [`CdcSource`]: its own source database, its own
//! connector, replication slot, publication and topic prefix, so tests run in parallel; it
//! changes the source with SQL and lets the connector write the events the sink reads. Nothing
//! here imitates Debezium's bytes. Dropping the source deletes the connector, its slot (a slot
//! left behind holds WAL on the source cluster forever), its topics and its database.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Executor;

use super::kafka::client_config;

const HOW_TO: &str = "the Debezium tests need the CDC source cluster and the Kafka Connect worker \
with Debezium's PostgreSQL connector: run `scripts/dev-services.sh up` (or `up connect`) and \
`eval \"$(scripts/dev-services.sh env)\"`, which sets KAFKA_CONNECT_URL and KPS_CDC_DATABASE_URL";

/// The table whose rows tell a test the connector has streamed up to a point: an insert into it
/// reaches its topic only after the snapshot and every change committed before it.
const MARKER_TABLE: &str = "kps_cdc_marker";

/// The connector's converter for keys or values.
#[derive(Clone, Copy, Debug)]
pub enum Converter {
    /// Kafka's JsonConverter with `schemas.enable` (the envelope `{"schema", "payload"}`), what
    /// most Debezium users run.
    JsonWithSchema,
    /// Kafka's JsonConverter with `schemas.enable=false`: the bare payload.
    #[allow(dead_code)] // for the issue-27 tests of schemaless topics
    JsonWithoutSchema,
}

impl Converter {
    fn settings(self, prefix: &str) -> [(String, String); 2] {
        let schemas = matches!(self, Converter::JsonWithSchema);
        [
            (
                format!("{prefix}.converter"),
                "org.apache.kafka.connect.json.JsonConverter".into(),
            ),
            (
                format!("{prefix}.converter.schemas.enable"),
                schemas.to_string(),
            ),
        ]
    }
}

/// How the connector is configured; `Default` is what most users run.
#[derive(Clone, Debug)]
pub struct CdcOptions {
    pub key: Converter,
    pub value: Converter,
    /// `provide.transaction.metadata`: BEGIN/END events on `<prefix>.transaction` and a
    /// `transaction` block in every change event.
    pub transaction_metadata: bool,
    /// Further connector settings, e.g. `unavailable.value.placeholder` or an SMT; they win
    /// over the harness's own.
    pub extra: Vec<(String, String)>,
    /// Wait, before `start` returns, until the snapshot is done and streaming has begun (a
    /// marker row's event arrived). Off only for a test that routes every table's events into
    /// one topic of its own and waits itself.
    pub wait_streaming: bool,
}

impl Default for CdcOptions {
    fn default() -> Self {
        Self {
            key: Converter::JsonWithSchema,
            value: Converter::JsonWithSchema,
            transaction_metadata: false,
            extra: Vec::new(),
            wait_streaming: true,
        }
    }
}

/// The CDC cluster and the Connect worker, from the environment `dev-services.sh env` prints.
struct CdcServices {
    admin_url: String,
    connect_url: String,
    role: String,
    role_password: String,
}

fn cdc_services() -> CdcServices {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| panic!("{name} is not set: {HOW_TO}"))
    };
    CdcServices {
        admin_url: var("KPS_CDC_DATABASE_URL"),
        connect_url: var("KAFKA_CONNECT_URL"),
        role: var("KPS_CDC_ROLE"),
        role_password: var("KPS_CDC_ROLE_PASSWORD"),
    }
}

/// One test's source database captured by its own connector.
pub struct CdcSource {
    /// The database's, the connector's, the slot's, the publication's and the topic prefix's
    /// name.
    pub name: String,
    /// A pool on the source database as the connector's role, which owns it: the test's SQL.
    pub pool: PgPool,
    admin_url: String,
    connect_url: String,
    markers: std::sync::atomic::AtomicI64,
    /// One client for the topics' end offsets, which the waits poll.
    watermarks: BaseConsumer,
}

impl CdcSource {
    /// Creates the source database, runs `setup_sql` in it as the connector's role, registers
    /// a connector capturing `tables` (and the harness's marker table) with `pgoutput` and a
    /// publication of those tables, and waits until its snapshot is done and it streams.
    pub async fn start(setup_sql: &str, tables: &[&str], options: CdcOptions) -> Self {
        let services = cdc_services();
        let name = format!(
            "kps_cdc_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&services.admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to KPS_CDC_DATABASE_URL: {e}\n{HOW_TO}"));
        admin
            .execute(format!("CREATE DATABASE \"{name}\" OWNER \"{}\"", services.role).as_str())
            .await
            .expect("create the source database");
        admin.close().await;
        let mut url = url::Url::parse(&services.admin_url).expect("KPS_CDC_DATABASE_URL is a URL");
        url.set_path(&name);
        let (host, port) = (
            url.host_str().expect("a host").to_string(),
            url.port().unwrap_or(5432),
        );
        url.set_username(&services.role).expect("a user name");
        url.set_password(Some(&services.role_password))
            .expect("a password");
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(url.as_str())
            .await
            .expect("connect to the source database as the connector's role");
        pool.execute(
            format!("CREATE TABLE {MARKER_TABLE} (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())")
                .as_str(),
        )
        .await
        .expect("create the marker table");
        pool.execute(setup_sql)
            .await
            .unwrap_or_else(|e| panic!("the source's setup SQL failed: {e}"));
        let source = Self {
            name: name.clone(),
            pool,
            admin_url: services.admin_url.clone(),
            connect_url: services.connect_url.clone(),
            markers: std::sync::atomic::AtomicI64::new(0),
            watermarks: client_config().create().expect("consumer"),
        };

        let include = tables
            .iter()
            .chain(std::iter::once(&MARKER_TABLE))
            .map(|t| format!("public.{t}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut config: Vec<(String, String)> = vec![
            (
                "connector.class".into(),
                "io.debezium.connector.postgresql.PostgresConnector".into(),
            ),
            ("tasks.max".into(), "1".into()),
            ("database.hostname".into(), host),
            ("database.port".into(), port.to_string()),
            ("database.user".into(), services.role.clone()),
            ("database.password".into(), services.role_password.clone()),
            ("database.dbname".into(), name.clone()),
            ("topic.prefix".into(), name.clone()),
            ("plugin.name".into(), "pgoutput".into()),
            ("slot.name".into(), name.clone()),
            ("publication.name".into(), name.clone()),
            ("publication.autocreate.mode".into(), "filtered".into()),
            ("table.include.list".into(), include),
            (
                "provide.transaction.metadata".into(),
                options.transaction_metadata.to_string(),
            ),
            // Topics are made by the worker as the connector first writes to them.
            (
                "topic.creation.default.replication.factor".into(),
                "1".into(),
            ),
            ("topic.creation.default.partitions".into(), "1".into()),
            // A test's events reach Kafka without the default 500 ms pause between polls.
            ("poll.interval.ms".into(), "50".into()),
        ];
        config.extend(options.key.settings("key"));
        config.extend(options.value.settings("value"));
        for (k, v) in options.extra {
            config.retain(|(key, _)| *key != k);
            config.push((k, v));
        }
        let body = serde_json::json!({
            "name": name,
            "config": config
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect::<serde_json::Map<_, _>>(),
        });
        let (status, text) = http(
            "POST",
            &format!("{}/connectors", source.connect_url),
            Some(&body.to_string()),
        );
        assert!(
            status == 201,
            "Kafka Connect refused the connector ({status}): {text}"
        );
        source.wait_running().await;
        if options.wait_streaming {
            source.sync().await;
        }
        source
    }

    /// The topic of one captured table.
    pub fn topic(&self, table: &str) -> String {
        format!("{}.public.{table}", self.name)
    }

    /// Waits until the connector and its task are RUNNING; a FAILED one panics with its trace.
    pub async fn wait_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, text) = http(
                "GET",
                &format!("{}/connectors/{}/status", self.connect_url, self.name),
                None,
            );
            if status == 200 {
                let v: serde_json::Value = serde_json::from_str(&text).expect("status JSON");
                assert!(
                    !text.contains("\"FAILED\""),
                    "the connector failed: {}",
                    v["tasks"][0]["trace"].as_str().unwrap_or(&text)
                );
                let task = v["tasks"][0]["state"].as_str();
                if v["connector"]["state"] == "RUNNING" && task == Some("RUNNING") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the connector is not RUNNING after 60 s: {status} {text}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Inserts a marker row and waits for its event: then the snapshot is done and every
    /// change committed before this call has been captured (the WAL orders them before the
    /// marker; their own topics may still be a moment behind).
    pub async fn sync(&self) {
        let id = self
            .markers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        sqlx::query(&format!("INSERT INTO {MARKER_TABLE} (id) VALUES ($1)"))
            .bind(id)
            .execute(&self.pool)
            .await
            .expect("insert a marker row");
        let topic = self.topic(MARKER_TABLE);
        let started = Instant::now();
        loop {
            if self.end_offset(&topic) >= id {
                return;
            }
            self.assert_not_failed();
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "the connector did not capture marker {id} within 90 s (topic {topic})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `topic` holds at least `n` records.
    pub async fn wait_for_records(&self, topic: &str, n: i64) {
        let started = Instant::now();
        while self.end_offset(topic) < n {
            self.assert_not_failed();
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "{topic} holds {} records, not {n}, after 90 s",
                self.end_offset(topic)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every record value of `topic` (partition 0, from the start to the end offset now), as
    /// JSON, tombstones as `Null`: what the connector really wrote, for a test to check that
    /// the case it exercises happened.
    pub fn values(&self, topic: &str) -> Vec<serde_json::Value> {
        use rdkafka::{Message, Offset, TopicPartitionList};
        let end = self.end_offset(topic);
        let consumer: BaseConsumer = client_config()
            .set("group.id", format!("{}-reader", self.name))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .expect("partition");
        consumer.assign(&tpl).expect("assign");
        let mut out = Vec::new();
        let started = Instant::now();
        while (out.len() as i64) < end {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "read {} of {end} records of {topic}",
                out.len()
            );
            if let Some(message) = consumer.poll(Duration::from_millis(500)) {
                let message = message.expect("a record");
                out.push(match message.payload() {
                    Some(bytes) => {
                        serde_json::from_slice(bytes).expect("JSON written by JsonConverter")
                    }
                    None => serde_json::Value::Null,
                });
            }
        }
        out
    }

    /// The end offset of partition 0 of `topic` (the connector's topics have one partition),
    /// 0 while it does not exist.
    fn end_offset(&self, topic: &str) -> i64 {
        self.watermarks
            .fetch_watermarks(topic, 0, Duration::from_secs(5))
            .map_or(0, |(_, high)| high)
    }

    fn assert_not_failed(&self) {
        let (_, text) = http(
            "GET",
            &format!("{}/connectors/{}/status", self.connect_url, self.name),
            None,
        );
        assert!(!text.contains("\"FAILED\""), "the connector failed: {text}");
    }

    /// Runs SQL on the source as the connector's role (the owner of the database).
    pub async fn execute(&self, sql: &str) {
        self.pool
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("source SQL failed: {e}\n{sql}"));
    }

    /// Every column as PostgreSQL prints it (`column::text`), timestamps in UTC, in the order
    /// of `id`: the same form as `TestDb::rows_as_text`, to compare the copy with the source.
    pub async fn rows_as_text(&self, table: &str, columns: &[&str]) -> Vec<Vec<Option<String>>> {
        super::db::rows_as_text(&self.pool, table, columns).await
    }
}

/// Waits until the copy equals the source in every column of every row, then asserts it (so a
/// timeout shows both).
pub async fn wait_copy_equals_source(
    source: &CdcSource,
    db: &super::db::TestDb,
    table: &str,
    columns: &[&str],
    sink: &super::sink::Sink,
) {
    let want = source.rows_as_text(table, columns).await;
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if db.rows_as_text(table, columns).await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if result.is_err() {
        assert_eq!(
            db.rows_as_text(table, columns).await,
            want,
            "the copy of {table} is not the source after 60 s; sink log:\n{}",
            sink.logs_tail(30)
        );
    }
}

/// One request to the Connect REST API: (status, body). Connection errors panic with how to
/// start the worker.
fn http(method: &str, url: &str, body: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let result = match (method, body) {
        ("POST", Some(body)) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body),
        ("DELETE", _) => agent.delete(url).call(),
        _ => agent.get(url).call(),
    };
    let mut response =
        result.unwrap_or_else(|e| panic!("Kafka Connect at {url} does not answer: {e}\n{HOW_TO}"));
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

impl Drop for CdcSource {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        let connect_url = self.connect_url.clone();
        let keep_database = std::thread::panicking();
        super::run_detached(async move {
            // The connector first, so nothing holds the slot or writes the topics any more.
            let _ = std::panic::catch_unwind(|| {
                http("DELETE", &format!("{connect_url}/connectors/{name}"), None)
            });
            if let Ok(admin) = PgPoolOptions::new()
                .max_connections(1)
                .connect(&admin_url)
                .await
            {
                drop_slot(&admin, &name).await;
                if keep_database {
                    eprintln!(
                        "keeping source database {name} for inspection (its slot is dropped)"
                    );
                } else {
                    let _ = admin
                        .execute(
                            format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str(),
                        )
                        .await;
                }
            }
            delete_topics_with_prefix(&format!("{name}.")).await;
        });
    }
}

/// Drops the slot once the stopped connector's walsender has let go of it (ending that
/// session after 10 s), so the source cluster keeps no WAL for a test that is over.
async fn drop_slot(admin: &PgPool, slot: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let active: Option<(bool, Option<i32>)> = sqlx::query_as(
            "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(slot)
        .fetch_optional(admin)
        .await
        .ok()
        .flatten();
        match active {
            None => return,
            Some((false, _)) => {
                if sqlx::query("SELECT pg_drop_replication_slot($1)")
                    .bind(slot)
                    .execute(admin)
                    .await
                    .is_ok()
                {
                    return;
                }
            }
            Some((true, Some(pid))) if Instant::now() + Duration::from_secs(10) > deadline => {
                let _ = sqlx::query("SELECT pg_terminate_backend($1)")
                    .bind(pid)
                    .execute(admin)
                    .await;
            }
            Some(_) => {}
        }
        if Instant::now() > deadline {
            eprintln!("replication slot {slot} could not be dropped: drop it by hand");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the topics the connector made (its prefix is unique to the test).
async fn delete_topics_with_prefix(prefix: &str) {
    let Ok(consumer) = client_config().create::<BaseConsumer>() else {
        return;
    };
    let Ok(metadata) = consumer.fetch_metadata(None, Duration::from_secs(10)) else {
        return;
    };
    let names: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| n.starts_with(prefix))
        .collect();
    if names.is_empty() {
        return;
    }
    let Ok(admin) = client_config().create::<AdminClient<DefaultClientContext>>() else {
        return;
    };
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let _ = admin.delete_topics(&refs, &AdminOptions::new()).await;
}
