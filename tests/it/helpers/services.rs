//! Where the real Kafka broker and PostgreSQL server come from.
//!
//! `KAFKA_BOOTSTRAP_SERVERS` and `DATABASE_URL` win (CI and `scripts/dev-services.sh`); where
//! they are unset and a Docker engine answers, testcontainers starts both; otherwise the test
//! fails and says how to get them. Nothing is ever skipped silently.

use std::sync::OnceLock;

/// Addresses of the services every integration test uses.
pub struct Services {
    pub kafka: String,
    /// A URL with rights to create databases; each test makes its own.
    pub admin_url: String,
    /// Keeps containers alive for the whole test run when testcontainers started them.
    #[allow(dead_code)]
    containers: Option<Box<dyn std::any::Any + Send + Sync>>,
}

const HOW_TO: &str = "integration tests need a real Kafka broker and PostgreSQL server. Either
  - run `scripts/dev-services.sh up` and `eval \"$(scripts/dev-services.sh env)\"` (no Docker needed: Java 17, Maven and PostgreSQL), or
  - set KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL to your own, or
  - start a Docker engine, and testcontainers will run both";

/// The services, resolved once per test binary.
pub fn services() -> &'static Services {
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(|| {
        let kafka = std::env::var("KAFKA_BOOTSTRAP_SERVERS")
            .ok()
            .filter(|s| !s.is_empty());
        let db = std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty());
        match (kafka, db) {
            (Some(kafka), Some(admin_url)) => Services {
                kafka,
                admin_url,
                containers: None,
            },
            (kafka, db) if docker_reachable() => start_containers(kafka, db),
            _ => panic!("{HOW_TO}"),
        }
    })
}

pub(crate) fn docker_reachable() -> bool {
    if std::env::var_os("DOCKER_HOST").is_some() {
        return true;
    }
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_ok()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Starts whatever the environment did not provide, with testcontainers.
fn start_containers(kafka: Option<String>, db: Option<String>) -> Services {
    use testcontainers_modules::kafka::apache;
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::testcontainers::runners::SyncRunner;
    use testcontainers_modules::testcontainers::ImageExt;

    let mut keep: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
    let kafka = kafka.unwrap_or_else(|| {
        let node = apache::Kafka::default()
            .start()
            .unwrap_or_else(|e| panic!("testcontainers could not start Kafka: {e}\n{HOW_TO}"));
        let port = node
            .get_host_port_ipv4(apache::KAFKA_PORT)
            .expect("Kafka port");
        keep.push(Box::new(node));
        format!("127.0.0.1:{port}")
    });
    let admin_url = db.unwrap_or_else(|| {
        let node = Postgres::default()
            .with_tag("17-alpine")
            .start()
            .unwrap_or_else(|e| panic!("testcontainers could not start PostgreSQL: {e}\n{HOW_TO}"));
        let port = node.get_host_port_ipv4(5432).expect("PostgreSQL port");
        keep.push(Box::new(node));
        format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres")
    });
    Services {
        kafka,
        admin_url,
        containers: Some(Box::new(keep)),
    }
}

/// The Schema Registry's API root for tests that need one: `SCHEMA_REGISTRY_URL`, else (where
/// a Docker engine answers) Apicurio Registry 2.4.2 in memory started by testcontainers, the
/// same release `scripts/dev-services.sh` assembles; else `None` (the caller says how to get
/// one).
pub fn registry() -> Option<&'static str> {
    /// The URL, and the container that serves it when testcontainers started one.
    type Found = Option<(String, Option<Box<dyn std::any::Any + Send + Sync>>)>;
    static REGISTRY: OnceLock<Found> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            if let Some(url) = std::env::var("SCHEMA_REGISTRY_URL")
                .ok()
                .filter(|s| !s.is_empty())
            {
                return Some((url, None));
            }
            if !docker_reachable() {
                return None;
            }
            use testcontainers_modules::testcontainers::core::{IntoContainerPort, WaitFor};
            use testcontainers_modules::testcontainers::runners::SyncRunner;
            use testcontainers_modules::testcontainers::GenericImage;
            let node = GenericImage::new("apicurio/apicurio-registry-mem", "2.4.2.Final")
                .with_exposed_port(8080.tcp())
                .with_wait_for(WaitFor::message_on_stdout("Installed features"))
                .start()
                .unwrap_or_else(|e| panic!("testcontainers could not start the registry: {e}"));
            let port = node.get_host_port_ipv4(8080).expect("registry port");
            let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
            Some((
                url,
                Some(Box::new(node) as Box<dyn std::any::Any + Send + Sync>),
            ))
        })
        .as_ref()
        .map(|(url, _)| url.as_str())
}
