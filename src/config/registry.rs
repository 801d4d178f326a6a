//! `[schema_registry]`: where the Confluent-compatible Schema Registry is, how to prove who the
//! sink is to it, and how a topic's subject is named. Credentials are secrets: `Debug` and
//! [`RegistrySettings::summary`] hide them, and errors never quote them.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::secrets::expand_env;
use super::{spelled, ConfigError};

/// The registry the binary formats read their schemas from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySettings {
    /// Base URLs of the registry's API (for Apicurio, `…/apis/ccompat/v7`), tried in order for
    /// failover starting from the last that answered. `url` in the file: one string or a list.
    #[serde(rename = "url", deserialize_with = "one_or_many")]
    pub urls: Vec<String>,
    /// Basic auth, with `password`; `${NAME}` is read from the environment.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<SecretString>,
    /// Sent as `Authorization: Bearer …`; instead of basic auth, not with it.
    #[serde(default)]
    pub bearer_token: Option<SecretString>,
    /// PEM CA certificates to trust instead of the system's roots (a private registry's CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) and its key, for a registry that wants mutual TLS.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// Bound on one request to one URL, connecting included: a hung registry fails the request
    /// (and it is retried) instead of stalling the sink.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How a topic's subject is named, for `check` to find its latest schema.
    #[serde(default)]
    pub subject_strategy: SubjectStrategy,
}

/// Confluent's subject name strategies (`TopicNameStrategy` and the two record-name ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectStrategy {
    /// `<topic>-value` / `<topic>-key`: what Confluent's serializers do unless told otherwise.
    #[default]
    TopicName,
    /// The record's full name: one subject for a record type across topics.
    RecordName,
    /// `<topic>-<record full name>`: several record types in one topic.
    TopicRecordName,
}

/// Which half of a Kafka record a subject describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectPart {
    Key,
    Value,
}

impl SubjectStrategy {
    /// The subject of `topic`'s key or value schema. The record-name strategies need the
    /// record's full name (e.g. `com.acme.Order`); without one there is no subject to ask for.
    pub fn subject(self, topic: &str, part: SubjectPart, record: Option<&str>) -> Option<String> {
        let part = match part {
            SubjectPart::Key => "key",
            SubjectPart::Value => "value",
        };
        match (self, record) {
            (SubjectStrategy::TopicName, _) => Some(format!("{topic}-{part}")),
            (SubjectStrategy::RecordName, Some(record)) => Some(record.to_string()),
            (SubjectStrategy::TopicRecordName, Some(record)) => Some(format!("{topic}-{record}")),
            (_, None) => None,
        }
    }
}

/// Ten seconds: several round trips to a slow registry, and still short next to a rebalance.
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `url = "…"` or `url = ["…", "…"]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    /// The two spellings the file allows.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(url) => vec![url],
        OneOrMany::Many(urls) => urls,
    })
}

impl RegistrySettings {
    /// Only URLs, everything else at its default: for tests and tools.
    pub fn with_urls<I: IntoIterator<Item = S>, S: Into<String>>(urls: I) -> Self {
        Self {
            urls: urls.into_iter().map(Into::into).collect(),
            username: None,
            password: None,
            bearer_token: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            timeout: default_timeout(),
            subject_strategy: SubjectStrategy::default(),
        }
    }

    /// Reads `${NAME}` in the URLs and credentials from the environment, then checks what the
    /// types cannot. Errors name the setting and the variable, never a value.
    pub(super) fn resolve(&mut self) -> Result<(), ConfigError> {
        let unset = |key: &str, var: String| {
            ConfigError::Invalid(format!(
                "schema_registry.{key} refers to ${{{var}}}, which is not set"
            ))
        };
        for url in &mut self.urls {
            *url = expand_env(url).map_err(|var| unset("url", var))?;
        }
        if let Some(username) = &mut self.username {
            *username = expand_env(username).map_err(|var| unset("username", var))?;
        }
        for (key, secret) in [
            ("password", &mut self.password),
            ("bearer_token", &mut self.bearer_token),
        ] {
            if let Some(value) = secret {
                *value = expand_env(value.expose_secret())
                    .map_err(|var| unset(key, var))?
                    .into();
            }
        }
        self.validate()
    }

    /// Checks across the fields.
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(format!("schema_registry.{m}")));
        if self.urls.is_empty() {
            return invalid("url is empty: name the registry's API root".into());
        }
        for (i, raw) in self.urls.iter().enumerate() {
            let url = match url::Url::parse(raw) {
                Ok(url) => url,
                // The parser's message, not the value: a URL may hold a password.
                Err(e) => return invalid(format!("url #{} is not a valid URL: {e}", i + 1)),
            };
            if !matches!(url.scheme(), "http" | "https") {
                return invalid(format!(
                    "url #{} must be http:// or https://, not {}://",
                    i + 1,
                    url.scheme()
                ));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return invalid(format!(
                    "url #{} carries credentials: give them as username and password",
                    i + 1
                ));
            }
        }
        match (&self.username, &self.password) {
            (Some(_), None) | (None, Some(_)) => {
                return invalid("username and password go together (basic auth)".into())
            }
            (Some(_), Some(_)) if self.bearer_token.is_some() => {
                return invalid("bearer_token and username/password exclude each other".into())
            }
            _ => {}
        }
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return invalid("client_cert_file and client_key_file go together".into());
        }
        if self.timeout.is_zero() {
            return invalid("timeout must be positive".into());
        }
        Ok(())
    }

    /// One line for `check` and the startup log: where, how authenticated, never a secret.
    pub fn summary(&self) -> String {
        let auth = match (&self.username, &self.bearer_token) {
            (Some(user), _) => format!("basic auth as {user} (password ***)"),
            (None, Some(_)) => "bearer token ***".to_string(),
            (None, None) => "no credentials".to_string(),
        };
        let mut tls = Vec::new();
        if let Some(ca) = &self.ca_file {
            tls.push(format!("CA {}", ca.display()));
        }
        if let Some(cert) = &self.client_cert_file {
            tls.push(format!("client certificate {}", cert.display()));
        }
        let tls = if tls.is_empty() {
            String::new()
        } else {
            format!(", {}", tls.join(", "))
        };
        format!(
            "{}; {auth}{tls}; timeout {}; subject_strategy {}",
            self.urls.join(", "),
            humantime_serde::re::humantime::format_duration(self.timeout),
            spelled(&self.subject_strategy)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{write, MINIMAL};
    use crate::config::{Overrides, Settings};

    fn load(extra: &str) -> Result<Settings, ConfigError> {
        let file = write(&format!("{MINIMAL}\n[schema_registry]\n{extra}\n"));
        Settings::load(Some(file.path()), &Overrides::default())
    }

    #[test]
    fn defaults_and_a_single_url() {
        let s = load(r#"url = "http://r:8081""#).unwrap();
        let r = s.schema_registry.unwrap();
        assert_eq!(r.urls, ["http://r:8081"]);
        assert_eq!(r.timeout, Duration::from_secs(10));
        assert_eq!(r.subject_strategy, SubjectStrategy::TopicName);
        assert!(r.username.is_none() && r.bearer_token.is_none() && r.ca_file.is_none());
        let file = write(MINIMAL);
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        assert!(s.schema_registry.is_none(), "no registry unless configured");
    }

    #[test]
    fn every_setting_reads_as_documented() {
        std::env::set_var("KPS_TEST_REGISTRY_PASSWORD", "reg-hunter2");
        let s = load(
            r#"url = ["http://a:8081", "https://b:8081/apis/ccompat/v7"]
               username = "sink"
               password = "${KPS_TEST_REGISTRY_PASSWORD}"
               ca_file = "/etc/ca.pem"
               client_cert_file = "/etc/c.pem"
               client_key_file = "/etc/k.pem"
               timeout = "2s 500ms"
               subject_strategy = "topic_record_name""#,
        )
        .unwrap();
        let r = s.schema_registry.unwrap();
        assert_eq!(r.urls, ["http://a:8081", "https://b:8081/apis/ccompat/v7"]);
        assert_eq!(r.username.as_deref(), Some("sink"));
        assert_eq!(r.password.unwrap().expose_secret(), "reg-hunter2");
        assert_eq!(r.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(r.client_key_file, Some(PathBuf::from("/etc/k.pem")));
        assert_eq!(r.timeout, Duration::from_millis(2500));
        assert_eq!(r.subject_strategy, SubjectStrategy::TopicRecordName);
    }

    #[test]
    fn subjects_follow_the_strategy() {
        use SubjectPart::{Key, Value};
        let s = SubjectStrategy::TopicName;
        assert_eq!(s.subject("orders", Value, None).unwrap(), "orders-value");
        assert_eq!(s.subject("orders", Key, Some("x.Y")).unwrap(), "orders-key");
        let s = SubjectStrategy::RecordName;
        assert_eq!(
            s.subject("orders", Value, Some("a.Order")).unwrap(),
            "a.Order"
        );
        assert_eq!(s.subject("orders", Value, None), None);
        let s = SubjectStrategy::TopicRecordName;
        assert_eq!(
            s.subject("orders", Key, Some("a.Key")).unwrap(),
            "orders-a.Key"
        );
        assert_eq!(s.subject("orders", Key, None), None);
    }

    #[test]
    fn inconsistent_settings_are_named() {
        for (extra, says) in [
            ("url = []", "url is empty"),
            (r#"url = "not a url""#, "url #1 is not a valid URL"),
            (r#"url = ["http://a", "ftp://b"]"#, "url #2 must be http"),
            (r#"url = "http://u:p@a""#, "carries credentials"),
            (
                "url = \"http://a\"\nusername = \"u\"",
                "username and password go together",
            ),
            (
                "url = \"http://a\"\nusername = \"u\"\npassword = \"p\"\nbearer_token = \"t\"",
                "exclude each other",
            ),
            (
                "url = \"http://a\"\nclient_cert_file = \"/c\"",
                "client_cert_file and client_key_file go together",
            ),
            (
                "url = \"http://a\"\ntimeout = \"0s\"",
                "timeout must be positive",
            ),
            (
                "url = \"http://a\"\nsubject_strategy = \"topic\"",
                "topic_name",
            ),
            (
                "url = \"http://a\"\nbearer_token = \"${KPS_TEST_UNSET_TOKEN}\"",
                "schema_registry.bearer_token refers to ${KPS_TEST_UNSET_TOKEN}, which is not set",
            ),
        ] {
            let err = load(extra).unwrap_err().to_string();
            assert!(err.contains(says), "{extra}: {err}");
        }
    }

    /// The password, the token and a credential-bearing URL never reach `Debug`, the summary
    /// or an error.
    #[test]
    fn secrets_never_show() {
        let s = load(
            "url = \"http://a\"\nusername = \"sink\"\npassword = \"reg-hunter2\"\ntimeout = \"3s\"",
        )
        .unwrap();
        let r = s.schema_registry.as_ref().unwrap();
        for shown in [format!("{s:?}"), format!("{r:?}"), r.summary()] {
            assert!(!shown.contains("reg-hunter2"), "{shown}");
        }
        assert_eq!(
            r.summary(),
            "http://a; basic auth as sink (password ***); timeout 3s; subject_strategy topic_name"
        );
        let s = load("url = \"http://a\"\nbearer_token = \"tok-hunter2\"").unwrap();
        let r = s.schema_registry.as_ref().unwrap();
        assert!(!format!("{s:?}").contains("tok-hunter2"));
        assert!(r.summary().contains("bearer token ***"), "{}", r.summary());
        let err = load(r#"url = "http://u:url-hunter2@a""#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("url-hunter2"), "{err}");
        let err = load(r#"url = "http//u:url-hunter2@a""#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("url-hunter2"), "{err}");
    }
}
