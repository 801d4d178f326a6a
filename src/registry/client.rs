//! The HTTP client of the Confluent registry API: schemas by id (cached forever), the latest
//! schema of a subject, failover across URLs, and credentials that never leave the headers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::ACCEPT;
use secrecy::{ExposeSecret, SecretString};

use super::answer::{self, Answer, Fetched};
use super::cache::SchemaCache;
use super::{tls, Import, Reference, RegisteredSchema, RegistryError};
use crate::config::{ConfigError, RegistrySettings};

/// The most schemas one schema may pull in through its references, transitively: a bound on
/// what a reference cycle (or a runaway registry) could make the client fetch.
const MAX_IMPORTS: usize = 256;

/// What the registry API answers in (Confluent's media type first, plain JSON as fallback).
const MEDIA_TYPES: &str = "application/vnd.schemaregistry.v1+json, application/json";

/// How the sink proves who it is to the registry.
enum Auth {
    None,
    Basic(String, SecretString),
    Bearer(SecretString),
}

/// A registry client; share it (`Arc`) so every task uses the one cache.
pub struct RegistryClient {
    http: reqwest::Client,
    /// API roots, in the configured order.
    urls: Vec<url::Url>,
    /// Where the next request starts: the URL that answered last, so a dead first URL costs
    /// one failed attempt, not one per request.
    preferred: AtomicUsize,
    auth: Auth,
    timeout: Duration,
    cache: SchemaCache,
    requests: AtomicU64,
}

impl std::fmt::Debug for RegistryClient {
    /// URLs and the kind of credentials; never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::None => "none",
            Auth::Basic(..) => "basic",
            Auth::Bearer(_) => "bearer",
        };
        f.debug_struct("RegistryClient")
            .field(
                "urls",
                &self.urls.iter().map(|u| u.as_str()).collect::<Vec<_>>(),
            )
            .field("auth", &auth)
            .field("timeout", &self.timeout)
            .field("cached", &self.cache.len())
            .field("requests", &self.requests())
            .finish()
    }
}

impl RegistryClient {
    /// A client for `settings`. Fails on what no retry fixes: an unreadable CA or client
    /// certificate, a URL that does not parse.
    pub fn new(settings: &RegistrySettings) -> Result<Self, ConfigError> {
        let urls = settings
            .urls
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                url::Url::parse(raw)
                    .ok()
                    .filter(|u| !u.cannot_be_a_base())
                    .ok_or_else(|| {
                        ConfigError::Invalid(format!(
                            "schema_registry.url #{} is not a base URL",
                            i + 1
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if urls.is_empty() {
            return Err(ConfigError::Invalid("schema_registry.url is empty".into()));
        }
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls::client_config(settings)?)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .user_agent(concat!("kafka-pg-sink/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Invalid(format!("schema_registry: HTTP client: {e}")))?;
        let auth = match (
            &settings.username,
            &settings.password,
            &settings.bearer_token,
        ) {
            (Some(user), Some(password), _) => Auth::Basic(user.clone(), password.clone()),
            (_, _, Some(token)) => Auth::Bearer(token.clone()),
            _ => Auth::None,
        };
        Ok(Self {
            http,
            urls,
            preferred: AtomicUsize::new(0),
            auth,
            timeout: settings.timeout,
            cache: SchemaCache::default(),
            requests: AtomicU64::new(0),
        })
    }

    /// The schema a record's header names. Ids are immutable, so each is fetched once; the
    /// registry is asked again only for an id it has not answered yet.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        self.cache
            .get_or_fetch(id, || async move {
                let id_text = id.to_string();
                let (_, schema, references) = self
                    .get(&format!("id {id}"), &["schemas", "ids", &id_text])
                    .await?;
                self.with_imports(schema, references).await
            })
            .await
    }

    /// The newest schema of `subject` and its id, for `check`. Never cached (a subject gains
    /// versions), but the schema joins the id cache. What the registry answers now is
    /// returned; should it differ from what the cache holds for that id, the registry broke
    /// the rule that ids never change (storage lost, ids handed out anew), and that is said.
    pub async fn latest(
        &self,
        subject: &str,
    ) -> Result<(u32, Arc<RegisteredSchema>), RegistryError> {
        let what = format!("subject {subject:?}");
        let (id, schema, references) = self
            .get(&what, &["subjects", subject, "versions", "latest"])
            .await?;
        let schema = self.with_imports(schema, references).await?;
        let id = id.ok_or_else(|| {
            RegistryError::Unavailable(format!(
                "the registry's answer for {what} carries no schema id"
            ))
        })?;
        let schema = Arc::new(schema);
        let fresh = RegisteredSchema::clone(&schema);
        let held = self.cache.get_or_fetch(id, || async { Ok(fresh) }).await?;
        if held != schema {
            tracing::warn!(
                "the schema registry now names another schema with id {id} than it did: ids \
                 must never change (was its storage lost?); records already read keep the old one"
            );
        }
        Ok((id, schema))
    }

    /// `schema` with the schemas its `references` name, and theirs in turn, each fetched by
    /// subject and version once per name (the first one met wins, as in an import path). A
    /// reference the registry does not have makes the schema unusable: `NotFound`.
    async fn with_imports(
        &self,
        mut schema: RegisteredSchema,
        references: Vec<Reference>,
    ) -> Result<RegisteredSchema, RegistryError> {
        let mut pending = std::collections::VecDeque::from(references);
        while let Some(reference) = pending.pop_front() {
            if schema.imports.iter().any(|i| i.name == reference.name) {
                continue;
            }
            if schema.imports.len() == MAX_IMPORTS {
                return Err(RegistryError::NotFound(format!(
                    "a schema whose references name more than {MAX_IMPORTS} schemas"
                )));
            }
            let version = reference.version.to_string();
            let what = format!(
                "reference {:?} (subject {:?} version {version})",
                reference.name, reference.subject
            );
            let (_, imported, more) = self
                .get(
                    &what,
                    &["subjects", &reference.subject, "versions", &version],
                )
                .await?;
            schema.imports.push(Import {
                name: reference.name,
                text: imported.text,
            });
            pending.extend(more);
        }
        Ok(schema)
    }

    /// HTTP requests sent so far, every URL tried counted: what "no request per record" is
    /// measured by.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// GETs `path` under each URL in turn, from the preferred one, until one answers with the
    /// schema or with "not found". `what` names the thing asked for, in errors.
    async fn get(&self, what: &str, path: &[&str]) -> Result<Fetched, RegistryError> {
        let start = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..self.urls.len() {
            let at = (start + i) % self.urls.len();
            let base = &self.urls[at];
            let mut url = base.clone();
            if let Ok(mut segments) = url.path_segments_mut() {
                segments.pop_if_empty().extend(path);
            }
            match self.send(url).await {
                Answer::Found(found) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(found);
                }
                Answer::NotFound => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Err(RegistryError::NotFound(what.to_string()));
                }
                Answer::Failed(why) => {
                    tracing::warn!(registry = %base, "schema registry request for {what} failed: {why}");
                    failures.push(format!("{base} {why}"));
                }
            }
        }
        Err(RegistryError::Unavailable(failures.join("; ")))
    }

    /// One request to one URL, read into an [`Answer`]. Errors are described from their
    /// causes, never with the request (whose headers hold the credentials).
    async fn send(&self, url: url::Url) -> Answer<Fetched> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::meters::SCHEMA_REGISTRY_REQUESTS).increment(1);
        let request = self.http.get(url).header(ACCEPT, MEDIA_TYPES);
        let request = match &self.auth {
            Auth::None => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password.expose_secret())),
            Auth::Bearer(token) => request.bearer_auth(token.expose_secret()),
        };
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Answer::Failed(self.describe(e)),
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(body) => answer::read(status, &body, !matches!(self.auth, Auth::None)),
            Err(e) => Answer::Failed(self.describe(e)),
        }
    }

    /// A transport failure in words: timeout, unreachable, or the chain of causes.
    fn describe(&self, e: reqwest::Error) -> String {
        if e.is_timeout() {
            return format!(
                "did not answer within {}",
                humantime_serde::re::humantime::format_duration(self.timeout)
            );
        }
        let e = e.without_url();
        let mut causes = Vec::new();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !causes.contains(&text) {
                causes.push(text);
            }
            source = cause.source();
        }
        if e.is_connect() {
            // The innermost cause says it best (refused, no such host, an untrusted certificate).
            let root = causes.pop().unwrap_or_else(|| e.to_string());
            format!("could not be reached: {root}")
        } else if causes.is_empty() {
            format!("request failed: {e}")
        } else {
            format!("request failed: {}", causes.join(": "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on: bound, then released.
    fn dead_url() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}/apis/ccompat/v7")
    }

    #[tokio::test]
    async fn every_dead_url_is_named_in_the_error_and_nothing_is_cached() {
        let (a, b) = (dead_url(), dead_url());
        let client = RegistryClient::new(&RegistrySettings::with_urls([&a, &b])).unwrap();
        let err = client.schema_by_id(1).await.unwrap_err();
        let RegistryError::Unavailable(message) = &err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains(&format!("{a} could not be reached")),
            "{message}"
        );
        assert!(
            message.contains(&format!("{b} could not be reached")),
            "{message}"
        );
        assert_eq!(client.requests(), 2);
        client.schema_by_id(1).await.unwrap_err();
        assert_eq!(client.requests(), 4, "a failure is asked again");
    }

    /// Every attempt shows in the Prometheus counter, as in `requests()`.
    #[test]
    fn requests_are_counted_for_prometheus() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let client = RegistryClient::new(&RegistrySettings::with_urls([dead_url()])).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                client.schema_by_id(1).await.unwrap_err();
                client.latest("s").await.unwrap_err();
            })
        });
        let line = format!("{} 2", crate::meters::SCHEMA_REGISTRY_REQUESTS);
        assert!(
            handle.render().lines().any(|l| l == line),
            "{}",
            handle.render()
        );
    }

    #[tokio::test]
    async fn a_registry_that_never_answers_fails_within_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        // Accept and hold connections without ever answering.
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let mut settings = RegistrySettings::with_urls([url]);
        settings.timeout = Duration::from_millis(300);
        let client = RegistryClient::new(&settings).unwrap();
        let started = std::time::Instant::now();
        let err = client.latest("orders-value").await.unwrap_err().to_string();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(err.contains("did not answer within 300ms"), "{err}");
        hold.abort();
    }

    #[test]
    fn debug_shows_no_credential() {
        let mut settings = RegistrySettings::with_urls(["http://r/apis/ccompat/v7"]);
        settings.username = Some("sink".into());
        settings.password = Some("reg-hunter2".to_string().into());
        let client = RegistryClient::new(&settings).unwrap();
        let shown = format!("{client:?}");
        assert!(
            shown.contains("basic") && !shown.contains("reg-hunter2"),
            "{shown}"
        );
        settings.username = None;
        settings.password = None;
        settings.bearer_token = Some("tok-hunter2".to_string().into());
        let shown = format!("{:?}", RegistryClient::new(&settings).unwrap());
        assert!(
            shown.contains("bearer") && !shown.contains("tok-hunter2"),
            "{shown}"
        );
    }
}
