//! The Schema Registry client against the real registry (Apicurio's Confluent API): schemas of
//! every kind by id and by subject, the cache, failover, basic auth and bearer tokens (through
//! an authenticating proxy in front of the real registry), and a registry that stops or hangs.

use std::time::{Duration, Instant};

use kafka_pg_sink::config::{Overrides, RegistrySettings, Settings};
use kafka_pg_sink::registry::{RegistryClient, RegistryError, SchemaKind};

use crate::helpers::registry::{
    dev_ca, framed, register, register_at, registry_url, unique_subject, AuthProxy, ClientCert,
    PrivateRegistry, TlsProxy,
};

const AVRO: &str = r#"{"type":"record","name":"Order","namespace":"it.registry","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}"#;
const PROTO: &str = "syntax = \"proto3\";\npackage it.registry;\n\nmessage Order {\n  int64 id = 1;\n  string note = 2;\n}\n";
const JSON_SCHEMA: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}}}"#;

/// An Avro schema no other test registers, so its id is new to every client.
fn fresh_avro() -> String {
    let name = format!("R{}", uuid::Uuid::new_v4().simple());
    format!(r#"{{"type":"record","name":"{name}","fields":[{{"name":"id","type":"long"}}]}}"#)
}

fn client(urls: &[&str]) -> RegistryClient {
    RegistryClient::new(&RegistrySettings::with_urls(urls.iter().copied())).expect("client")
}

/// A URL where nothing listens.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/apis/ccompat/v7")
}

fn unavailable(err: RegistryError) -> String {
    match err {
        RegistryError::Unavailable(message) => message,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn schemas_of_every_kind_come_back_by_id_and_as_their_subjects_latest() {
    let registry = client(&[&registry_url()]);
    for (kind, text) in [
        (SchemaKind::Avro, AVRO),
        (SchemaKind::Protobuf, PROTO),
        (SchemaKind::Json, JSON_SCHEMA),
    ] {
        let subject = unique_subject("kinds");
        let id = register(&subject, kind, text).await;
        let schema = registry.schema_by_id(id).await.expect("by id");
        assert_eq!(
            (schema.kind, schema.text.as_str()),
            (kind, text),
            "{kind:?}"
        );
        let (latest_id, latest) = registry.latest(&subject).await.expect("latest");
        assert_eq!(latest_id, id);
        assert_eq!(*latest, *schema);
    }
    // A new version is what latest returns from then on.
    let subject = unique_subject("versions");
    let first = register(&subject, SchemaKind::Avro, AVRO).await;
    let second_text = AVRO.replace(
        r#"{"name":"id","type":"long"}"#,
        r#"{"name":"id","type":"long"},{"name":"extra","type":"int","default":0}"#,
    );
    let second = register(&subject, SchemaKind::Avro, &second_text).await;
    assert_ne!(first, second);
    let (id, schema) = registry.latest(&subject).await.unwrap();
    assert_eq!((id, schema.text.as_str()), (second, second_text.as_str()));
    // The wire header the decoders read: magic 0, then the id big-endian.
    assert_eq!(
        framed(0x0102_0304, b"xy"),
        [0, 1, 2, 3, 4, b'x', b'y'],
        "Confluent wire format"
    );
}

#[tokio::test]
async fn an_unknown_id_or_subject_is_not_found() {
    let registry = client(&[&registry_url()]);
    let err = registry.schema_by_id(2_000_000_000).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::NotFound(what) if what == "id 2000000000"),
        "{err:?}"
    );
    let subject = unique_subject("missing");
    let err = registry.latest(&subject).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::NotFound(what) if what.contains(&subject)),
        "{err:?}"
    );
    // Not found is final: asked once, not at every URL.
    assert_eq!(registry.requests(), 2);
}

#[tokio::test]
async fn an_id_is_fetched_once_and_then_served_from_the_cache() {
    let proxy = AuthProxy::open(&registry_url()).await;
    let registry = client(&[&proxy.url]);
    let id = register(&unique_subject("cache"), SchemaKind::Avro, &fresh_avro()).await;
    let first = registry.schema_by_id(id).await.unwrap();
    assert_eq!((registry.requests(), proxy.requests()), (1, 1));
    for _ in 0..100 {
        let again = registry.schema_by_id(id).await.unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "the cached schema itself"
        );
    }
    assert_eq!(
        (registry.requests(), proxy.requests()),
        (1, 1),
        "no request for a known id"
    );
    // Concurrent first askers of a new id share one request.
    let id = register(&unique_subject("cache"), SchemaKind::Avro, &fresh_avro()).await;
    let registry = std::sync::Arc::new(registry);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let registry = std::sync::Arc::clone(&registry);
            tokio::spawn(async move { registry.schema_by_id(id).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!((registry.requests(), proxy.requests()), (2, 2));
}

#[tokio::test]
async fn failover_skips_a_dead_url_and_stays_with_the_one_that_answered() {
    let proxy = AuthProxy::open(&registry_url()).await;
    let dead = dead_url();
    let registry = client(&[&dead, &proxy.url]);
    let a = register(&unique_subject("failover"), SchemaKind::Avro, &fresh_avro()).await;
    let b = register(&unique_subject("failover"), SchemaKind::Avro, &fresh_avro()).await;
    registry.schema_by_id(a).await.expect("from the second URL");
    assert_eq!((registry.requests(), proxy.requests()), (2, 1));
    registry.schema_by_id(b).await.expect("from the second URL");
    assert_eq!(
        (registry.requests(), proxy.requests()),
        (3, 2),
        "the next request starts where the last one was answered"
    );
    // With every URL dead the error names each, and says what happened.
    let registry = client(&[&dead, &dead_url()]);
    let message = unavailable(registry.schema_by_id(a).await.unwrap_err());
    assert!(
        message.contains(&format!("{dead} could not be reached")),
        "{message}"
    );
    assert_eq!(
        message.matches("could not be reached").count(),
        2,
        "{message}"
    );
}

/// Settings as an operator writes them, the password from the environment.
fn settings_with(registry_toml: &str) -> RegistrySettings {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        format!(
            "[kafka]\nbootstrap_servers = \"k:9092\"\n[postgres]\nurl = \"postgres://u@h/db\"\n\
             [[topics]]\nname = \"t\"\ntable = \"t\"\n[schema_registry]\n{registry_toml}\n"
        ),
    )
    .unwrap();
    let settings = Settings::load(Some(file.path()), &Overrides::default()).expect("settings");
    let registry = settings.schema_registry.clone().expect("[schema_registry]");
    for shown in [format!("{settings:?}"), registry.summary()] {
        assert!(!shown.contains("hunter2"), "a secret shows: {shown}");
    }
    registry
}

#[tokio::test]
async fn basic_auth_passes_with_the_right_credentials_only() {
    let proxy = AuthProxy::basic(&registry_url(), "sink", "reg-hunter2").await;
    let id = register(&unique_subject("basic"), SchemaKind::Avro, &fresh_avro()).await;
    std::env::set_var("KPS_IT_REGISTRY_PASSWORD", "reg-hunter2");
    std::env::set_var("KPS_IT_REGISTRY_WRONG", "wrong-hunter2");

    let right = settings_with(&format!(
        "url = \"{}\"\nusername = \"sink\"\npassword = \"${{KPS_IT_REGISTRY_PASSWORD}}\"",
        proxy.url
    ));
    let registry = RegistryClient::new(&right).unwrap();
    registry
        .schema_by_id(id)
        .await
        .expect("the right credentials");
    assert!(!format!("{registry:?}").contains("hunter2"));

    let wrong = settings_with(&format!(
        "url = \"{}\"\nusername = \"sink\"\npassword = \"${{KPS_IT_REGISTRY_WRONG}}\"",
        proxy.url
    ));
    let registry = RegistryClient::new(&wrong).unwrap();
    let err = registry.schema_by_id(id).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let message = unavailable(err);
    assert!(
        message.contains(&format!("{} refused the credentials (HTTP 401)", proxy.url)),
        "{message}"
    );

    let none = settings_with(&format!("url = \"{}\"", proxy.url));
    let message = unavailable(
        RegistryClient::new(&none)
            .unwrap()
            .schema_by_id(id)
            .await
            .unwrap_err(),
    );
    assert!(message.contains("none are configured"), "{message}");

    assert_eq!((proxy.requests(), proxy.forwarded()), (3, 1));
    let seen = proxy.authorizations();
    assert!(seen[0].as_deref().is_some_and(|h| h.starts_with("Basic ")));
    assert_eq!(seen[2], None, "no header without credentials");
}

#[tokio::test]
async fn a_bearer_token_is_sent_and_a_wrong_one_refused() {
    let proxy = AuthProxy::bearer(&registry_url(), "tok-hunter2").await;
    let id = register(&unique_subject("bearer"), SchemaKind::Avro, &fresh_avro()).await;
    let registry = RegistryClient::new(&settings_with(&format!(
        "url = \"{}\"\nbearer_token = \"tok-hunter2\"",
        proxy.url
    )))
    .unwrap();
    registry.schema_by_id(id).await.expect("the right token");
    assert_eq!(
        proxy.authorizations(),
        [Some("Bearer tok-hunter2".to_string())]
    );
    let registry = RegistryClient::new(&settings_with(&format!(
        "url = \"{}\"\nbearer_token = \"other-hunter2\"",
        proxy.url
    )))
    .unwrap();
    let err = registry.schema_by_id(id).await.unwrap_err();
    assert!(!format!("{err} {err:?} {registry:?}").contains("hunter2"));
    assert!(unavailable(err).contains("refused the credentials"));
}

/// A registry that stops is refused at once, one that hangs fails within the timeout; both
/// are `Unavailable` (retried, never a dead letter), cached ids are still served, and the
/// client recovers as soon as the registry answers again.
#[tokio::test]
async fn a_stopped_or_hung_registry_is_unavailable_within_the_timeout() {
    let private = tokio::task::spawn_blocking(PrivateRegistry::start)
        .await
        .unwrap();
    let url = private.url();
    let mut settings = RegistrySettings::with_urls([url.clone()]);
    settings.timeout = Duration::from_secs(2);
    let registry = RegistryClient::new(&settings).unwrap();
    let cached = register_at(&url, "stop-value", SchemaKind::Avro, AVRO).await;
    registry.schema_by_id(cached).await.unwrap();

    // Hung: the JVM frozen, connections accepted, nothing answered.
    let private = tokio::task::spawn_blocking(move || {
        private.freeze();
        private
    })
    .await
    .unwrap();
    let started = Instant::now();
    let message = unavailable(registry.schema_by_id(cached + 1).await.unwrap_err());
    let took = started.elapsed();
    assert!(
        message.contains(&format!("{url} did not answer within 2s")),
        "{message}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );
    registry
        .schema_by_id(cached)
        .await
        .expect("a cached id needs no registry");
    let private = tokio::task::spawn_blocking(move || {
        private.thaw();
        private
    })
    .await
    .unwrap();
    let second = register_at(&url, "stop2-value", SchemaKind::Json, JSON_SCHEMA).await;
    registry
        .schema_by_id(second)
        .await
        .expect("answers again once thawed");

    // Stopped: refused at once.
    let private = tokio::task::spawn_blocking(move || {
        private.stop();
        private
    })
    .await
    .unwrap();
    let started = Instant::now();
    let message = unavailable(registry.latest("stop-value").await.unwrap_err());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        message.contains(&format!("{url} could not be reached")),
        "{message}"
    );
    registry.schema_by_id(cached).await.expect("still cached");

    // Started again it is empty (in-memory storage); what is registered anew is served.
    let _private = tokio::task::spawn_blocking(move || {
        private.start_again();
        private
    })
    .await
    .unwrap();
    let id = register_at(&url, "again-value", SchemaKind::Protobuf, PROTO).await;
    let (latest, schema) = registry.latest("again-value").await.expect("back");
    assert_eq!((latest, schema.kind), (id, SchemaKind::Protobuf));
}

/// HTTPS with the registry's CA in `ca_file`; without it the system's roots refuse the
/// certificate, and the error says the registry could not be reached, not "not found".
#[tokio::test]
async fn https_trusts_the_ca_file_and_only_it() {
    let proxy = TlsProxy::start(&registry_url());
    let id = register(&unique_subject("tls"), SchemaKind::Json, JSON_SCHEMA).await;
    let mut settings = RegistrySettings::with_urls([proxy.url.clone()]);
    let message = unavailable(
        RegistryClient::new(&settings)
            .unwrap()
            .schema_by_id(id)
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains(&format!("{} could not be reached", proxy.url))
            && message.contains("certificate"),
        "{message}"
    );
    settings.ca_file = Some(dev_ca());
    let registry = RegistryClient::new(&settings).unwrap();
    let schema = registry.schema_by_id(id).await.expect("over HTTPS");
    assert_eq!(
        (schema.kind, schema.text.as_str()),
        (SchemaKind::Json, JSON_SCHEMA)
    );
}

/// Mutual TLS: a registry that requires a client certificate serves the sink configured with
/// `client_cert_file` and `client_key_file`. Without them every handshake is refused: the sink
/// writes no row and no dead letter (a registry it cannot reach is never the records' fault)
/// and its log says the schema could not be fetched, from where, and why (the server's
/// `CertificateRequired` alert).
#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_reads_records_with_the_client_certificate_and_none_without() {
    use sqlx::Executor;

    use crate::helpers::db::TestDb;
    use crate::helpers::kafka::{produce_raw, producer, RawRecord, TestTopic};
    use crate::helpers::sink::{Sink, SinkConfig};
    use crate::helpers::{wait_drained, wait_until};

    let client = tokio::task::spawn_blocking(ClientCert::generate)
        .await
        .unwrap();
    let proxy = TlsProxy::requiring_client_cert(&registry_url(), &client.ca());
    let db = TestDb::migrated().await;
    db.pool
        .execute("CREATE TABLE items (id bigint PRIMARY KEY, note text)")
        .await
        .unwrap();
    let topic = TestTopic::create(1).await;
    let id = register(
        &format!("{}-value", topic.name),
        SchemaKind::Json,
        JSON_SCHEMA,
    )
    .await;
    let records: Vec<RawRecord> = (0..50)
        .map(|i| RawRecord {
            value: Some(framed(
                id,
                format!(r#"{{"id":{i},"note":"n{i}"}}"#).as_bytes(),
            )),
            ..Default::default()
        })
        .collect();
    produce_raw(&producer(), &topic.name, &records).await;
    let registry = |client_cert: &str| {
        format!(
            "\n[schema_registry]\nurl = \"{}\"\nca_file = \"{}\"\ntimeout = \"2s\"\n{client_cert}",
            proxy.url,
            dev_ca().display()
        )
    };
    let mut config = SinkConfig::new(&db.url, &topic.name, "items");
    config.topic_settings = "format = \"json-schema\"\non_error = \"dead_letter\"".into();
    config.metadata = String::new();
    config.extra = registry("");
    let mut sink = Sink::start(&config, "sink-without-cert");
    wait_until("a refused handshake", Duration::from_secs(60), || async {
        proxy.refused() > 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(db.count("items").await, 0, "no schema, no rows");
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM kafka_dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        letters, 0,
        "an unreachable registry is never the records' fault"
    );
    assert!(sink.stop().success());
    let logs = sink.logs();
    assert!(
        logs.contains("cannot fetch the record's schema")
            && logs.contains(&proxy.url)
            && logs.contains("CertificateRequired"),
        "{}",
        sink.logs_tail(30)
    );

    config.extra = registry(&format!(
        "client_cert_file = \"{}\"\nclient_key_file = \"{}\"\n",
        client.cert().display(),
        client.key().display()
    ));
    let refused = proxy.refused();
    let mut sink = Sink::start(&config, "sink-with-cert");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, note FROM items ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        rows,
        (0..50).map(|i| (i, format!("n{i}"))).collect::<Vec<_>>()
    );
    assert_eq!(proxy.refused(), refused, "the certificate was accepted");
    assert!(sink.stop().success());
}
