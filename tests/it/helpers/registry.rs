//! The real Schema Registry as tests use it: its URL, registering schemas (the registry assigns
//! the ids), the Confluent wire header, an authenticating proxy in front of it, and a private
//! registry of one test's own to stop, start and freeze.
//!
//! Apicurio's own authentication needs an OIDC server, so [`AuthProxy`] demands the
//! credentials instead: the client's auth is proved against the proxy while every schema still
//! comes from the real registry behind it.

use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kafka_pg_sink::registry::SchemaKind;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/dev-services.sh");

const HOW_TO: &str = "this test needs a real Schema Registry: SCHEMA_REGISTRY_URL is not set. Either
  - run `scripts/dev-services.sh up` (or `up registry`) and `eval \"$(scripts/dev-services.sh env)\"` (no Docker needed: Java 17 and Maven), or
  - set SCHEMA_REGISTRY_URL to the Confluent API root of your own registry (for Apicurio …/apis/ccompat/v7), or
  - start a Docker engine, and testcontainers will run Apicurio Registry 2.4.2";

/// The shared registry's API root: `SCHEMA_REGISTRY_URL`, or one testcontainers started where
/// a Docker engine answers.
pub fn registry_url() -> String {
    super::services::registry()
        .map(str::to_string)
        .unwrap_or_else(|| panic!("{HOW_TO}"))
}

/// A subject no other test uses: the shared registry keeps everything until it stops.
pub fn unique_subject(topic_like: &str) -> String {
    format!(
        "{topic_like}-{}-value",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// An HTTP client for plain-HTTP registries. Not `reqwest::Client::new()`: the sink's reqwest
/// has no built-in crypto provider (it uses ring, as sqlx does), and `new()` would panic.
fn http() -> reqwest::Client {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("an HTTP client")
}

/// Registers `text` under `subject` in the shared registry; the id it assigned.
pub async fn register(subject: &str, kind: SchemaKind, text: &str) -> u32 {
    register_at(&registry_url(), subject, kind, text).await
}

/// Registers `text` under `subject` at the registry whose API root is `base`. A 5xx is tried
/// again a few times: Apicurio's in-memory store answers 500 when registrations race on a
/// fresh registry ("Concurrent update in table SEQUENCES"), and registering is the test's
/// setup, not what it proves.
pub async fn register_at(base: &str, subject: &str, kind: SchemaKind, text: &str) -> u32 {
    for _ in 0..5 {
        match try_register(base, subject, kind, text).await {
            Ok(id) => return id,
            Err(busy) => {
                eprintln!("register {subject}: {busy}; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
    }
    try_register(base, subject, kind, text)
        .await
        .unwrap_or_else(|e| panic!("register {subject}: {e}"))
}

/// One registration; `Err` only for a 5xx answer (anything else wrong panics at once).
async fn try_register(
    base: &str,
    subject: &str,
    kind: SchemaKind,
    text: &str,
) -> Result<u32, String> {
    let mut body = serde_json::json!({ "schema": text });
    match kind {
        SchemaKind::Avro => {}
        SchemaKind::Protobuf => body["schemaType"] = "PROTOBUF".into(),
        SchemaKind::Json => body["schemaType"] = "JSON".into(),
    }
    let mut url = url::Url::parse(base).expect("registry URL");
    url.path_segments_mut()
        .expect("a base URL")
        .pop_if_empty()
        .extend(["subjects", subject, "versions"]);
    let response = http()
        .post(url)
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("register {subject} at {base}: {e}"));
    let status = response.status();
    let answer: serde_json::Value = response.json().await.expect("a JSON answer");
    if status.is_server_error() {
        return Err(format!("{status} {answer}"));
    }
    assert!(status.is_success(), "register {subject}: {status} {answer}");
    Ok(answer["id"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .unwrap_or_else(|| panic!("register {subject}: no id in {answer}")))
}

/// A payload in the Confluent wire format: magic byte 0, the schema id big-endian, the payload.
pub fn framed(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What [`AuthProxy`] lets through.
#[derive(Clone)]
enum Demand {
    Nothing,
    /// The exact `Authorization` header value.
    Header(String),
}

/// What the proxy's handler shares with the test.
struct ProxyState {
    upstream: url::Url,
    demand: Demand,
    http: reqwest::Client,
    requests: AtomicUsize,
    forwarded: AtomicUsize,
    authorizations: Mutex<Vec<Option<String>>>,
}

/// An HTTP proxy in front of a real registry that answers 401 unless the request carries the
/// credentials it demands, and counts what it sees. It stops with the test's runtime.
pub struct AuthProxy {
    /// The registry's API root through the proxy (same path as upstream's).
    pub url: String,
    state: Arc<ProxyState>,
}

impl AuthProxy {
    /// Lets everything through; for counting requests.
    pub async fn open(upstream: &str) -> Self {
        Self::start(upstream, Demand::Nothing).await
    }

    /// Demands basic auth as `user` with `password`.
    pub async fn basic(upstream: &str, user: &str, password: &str) -> Self {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Self::start(upstream, Demand::Header(format!("Basic {token}"))).await
    }

    /// Demands `Authorization: Bearer <token>`.
    pub async fn bearer(upstream: &str, token: &str) -> Self {
        Self::start(upstream, Demand::Header(format!("Bearer {token}"))).await
    }

    async fn start(upstream: &str, demand: Demand) -> Self {
        let upstream = url::Url::parse(upstream).expect("registry URL");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let url = format!(
            "http://{}{}",
            listener.local_addr().unwrap(),
            upstream.path()
        );
        let state = Arc::new(ProxyState {
            upstream,
            demand,
            http: http(),
            requests: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            authorizations: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(relay)
            .with_state(Arc::clone(&state));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, state }
    }

    /// Requests that reached the proxy, refused ones included.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests passed on to the registry.
    pub fn forwarded(&self) -> usize {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of every request, in order (`None` where absent).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.state.authorizations.lock().unwrap().clone()
    }
}

/// The proxy's one handler: check, then pass the request on unchanged.
async fn relay(
    State(state): State<Arc<ProxyState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    state
        .authorizations
        .lock()
        .unwrap()
        .push(authorization.clone());
    if let Demand::Header(want) = &state.demand {
        if authorization.as_deref() != Some(want.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic realm=\"registry\"")],
                r#"{"error_code":401,"message":"Unauthorized"}"#,
            )
                .into_response();
        }
    }
    state.forwarded.fetch_add(1, Ordering::SeqCst);
    let mut target = state.upstream.clone();
    target.set_path(uri.path());
    target.set_query(uri.query());
    let mut request = state.http.request(method, target).body(body);
    for name in ["accept", "content-type"] {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(answer) => {
            let status = answer.status();
            let content_type = answer.headers().get("content-type").cloned();
            let body = answer.bytes().await.unwrap_or_default();
            let mut response = (status, body).into_response();
            if let Some(content_type) = content_type {
                response.headers_mut().insert("content-type", content_type);
            }
            response
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// A registry of one test's own (a named instance of `scripts/dev-services.sh` on a free
/// port), to stop, start and freeze without disturbing the tests that share the default one.
/// Its storage is in memory: a stop forgets every schema. Blocking: call it from
/// `spawn_blocking` in async tests. Destroyed when dropped.
pub struct PrivateRegistry {
    name: String,
    port: u16,
}

impl PrivateRegistry {
    /// Starts a new instance; returns once it answers (about 5–8 s). The free port is only
    /// free when it is picked: during the JVM's start another test's connection may take it
    /// as its own ephemeral port, so a start refused for a port in use is tried again on
    /// another (CI saw it once).
    pub fn start() -> Self {
        let mut last = String::new();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let registry = Self {
                name: format!("r{}", &uuid::Uuid::new_v4().simple().to_string()[..10]),
                port,
            };
            match registry.try_run(&["start", "registry"]) {
                Ok(_) => return registry,
                Err(e) if e.contains("seems to be in use") => last = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{last}")
    }

    /// Its API root.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/apis/ccompat/v7", self.port)
    }

    /// Stops it: connections are refused from then on.
    pub fn stop(&self) {
        self.run(&["stop", "registry"]);
    }

    /// Starts it again on the same port, empty.
    pub fn start_again(&self) {
        self.run(&["start", "registry"]);
    }

    /// Freezes the process (SIGSTOP): it accepts connections but never answers, as a hung
    /// registry does; its schemas stay.
    pub fn freeze(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a frozen registry run on (SIGCONT).
    pub fn thaw(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("registry instance {} is not running", self.name));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal");
    }

    /// The JVM's pid, as `status` reports it; `None` when stopped.
    fn pid(&self) -> Option<i32> {
        self.run(&["status"])
            .lines()
            .find_map(|l| l.strip_prefix("registry: running (pid "))
            .and_then(|rest| rest.split([',', ')']).next())
            .and_then(|pid| pid.parse().ok())
    }

    /// Runs the script on this instance; its stdout.
    fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs the script on this instance: its stdout, or why it failed with its stderr.
    fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(SCRIPT)
            .args(args)
            .env("KPS_INSTANCE", &self.name)
            .env("KPS_REGISTRY_PORT", self.port.to_string())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {SCRIPT}: {e}"));
        if !out.status.success() {
            return Err(format!(
                "scripts/dev-services.sh {args:?} failed for instance {} (it needs Java 17 and Maven):\n{}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for PrivateRegistry {
    fn drop(&mut self) {
        // A frozen JVM must run again to stop on SIGTERM.
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
        let _ = std::panic::catch_unwind(|| self.run(&["destroy"]));
    }
}

/// The CA of `scripts/dev-services.sh` (`KPS_TLS_CA`), which signed its server certificate.
pub fn dev_ca() -> std::path::PathBuf {
    std::env::var_os("KPS_TLS_CA")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            panic!("KPS_TLS_CA is not set: this test needs the TLS files of scripts/dev-services.sh (eval \"$(scripts/dev-services.sh env)\")")
        })
        .into()
}

/// HTTPS in front of a real registry, with the dev services' server certificate (for
/// localhost and 127.0.0.1, signed by [`dev_ca`]): proves the client's TLS settings while the
/// schemas still come from the registry. One thread per connection; it lives as long as the
/// test binary.
pub struct TlsProxy {
    /// The registry's API root over HTTPS.
    pub url: String,
    /// Connections whose TLS handshake failed (a client that does not trust the server, or
    /// has no certificate the server requires).
    refused: Arc<AtomicUsize>,
}

impl TlsProxy {
    /// Any client that trusts the server may connect.
    pub fn start(upstream: &str) -> Self {
        Self::serve(upstream, None)
    }

    /// Mutual TLS: only a client presenting a certificate signed by the CA in `client_ca` (a
    /// PEM file) completes the handshake.
    pub fn requiring_client_cert(upstream: &str, client_ca: &std::path::Path) -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(client_ca).expect("client CA file") {
            roots.add(cert.expect("client CA")).expect("client CA");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("client verifier");
        Self::serve(upstream, Some(verifier))
    }

    /// How many connections failed their TLS handshake so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    fn serve(
        upstream: &str,
        client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let ca = dev_ca();
        let dir = ca.parent().expect("the TLS dir");
        let chain = CertificateDer::pem_file_iter(dir.join("server.crt"))
            .expect("server.crt")
            .collect::<Result<Vec<_>, _>>()
            .expect("server.crt");
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
        let builder = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
        let builder = match client_verifier {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(chain, key)
            .expect("server certificate");
        let config = Arc::new(config);
        let upstream = url::Url::parse(upstream).expect("registry URL");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!(
            "https://{}{}",
            listener.local_addr().unwrap(),
            upstream.path()
        );
        let refused = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&refused);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, upstream) = (Arc::clone(&config), upstream.clone());
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    if serve_tls(config, stream, &upstream).is_err() {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        Self { url, refused }
    }
}

/// A CA and a client certificate it signed (`CN=kafka-pg-sink test client`, for client
/// authentication), made with `openssl` (which `scripts/dev-services.sh` installs) in a
/// directory that lives as long as the returned guard.
pub struct ClientCert {
    pub dir: tempfile::TempDir,
}

impl ClientCert {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("client.ext"),
            "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = clientAuth\n",
        )
        .unwrap();
        let steps: [&[&str]; 3] = [
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=kafka-pg-sink test client CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "client.key",
                "-out",
                "client.csr",
                "-subj",
                "/CN=kafka-pg-sink test client",
            ],
            &[
                "x509",
                "-req",
                "-in",
                "client.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "2",
                "-days",
                "2",
                "-extfile",
                "client.ext",
                "-out",
                "client.crt",
            ],
        ];
        for args in steps {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl (scripts/dev-services.sh installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Self { dir }
    }

    /// The CA that signed the client certificate, for the server to trust.
    pub fn ca(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.crt")
    }

    pub fn cert(&self) -> std::path::PathBuf {
        self.dir.path().join("client.crt")
    }

    pub fn key(&self) -> std::path::PathBuf {
        self.dir.path().join("client.key")
    }
}

/// One HTTPS request: read its head, GET the same path from upstream, answer, close. A failed
/// handshake (a client that does not trust the certificate, or lacks a required one of its
/// own) ends the connection and is the error.
fn serve_tls(
    config: Arc<rustls::ServerConfig>,
    stream: std::net::TcpStream,
    upstream: &url::Url,
) -> Result<(), ()> {
    use std::io::{Read, Write};
    let connection = rustls::ServerConnection::new(config).map_err(|_| ())?;
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(()),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let Some(path) = head.split(' ').nth(1) else {
        return Ok(());
    };
    let mut target = upstream.clone();
    target.set_path("");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let (status, body) = match agent
        .get(format!("{}{}", target.as_str().trim_end_matches('/'), path))
        .call()
    {
        Ok(mut answer) => (
            answer.status().as_u16(),
            answer.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(e) => (502, e.to_string()),
    };
    let _ = write!(
        tls,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.conn.send_close_notify();
    let _ = tls.flush();
    Ok(())
}
