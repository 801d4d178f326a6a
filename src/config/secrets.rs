//! Values that must not leak, and how settings are shown: `${NAME}` expansion (secrets stay out of
//! the file), URL and property redaction, and a setting spelled the way configuration writes it.

use serde::Serialize;

/// Replaces `${NAME}` with the environment variable NAME, so secrets can stay out of the file.
/// Returns the name of the first variable that is not set.
pub(super) fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        out.push_str(&std::env::var(name).map_err(|_| name.to_string())?);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Returns `url` with any password replaced, for logs and `check` output.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            // A password can also hide in the query string (`?password=`).
            let pairs: Vec<(String, String)> = parsed
                .query_pairs()
                .map(|(k, v)| {
                    let v = if is_secret_key(&k) {
                        "***".into()
                    } else {
                        v.into_owned()
                    };
                    (k.into_owned(), v)
                })
                .collect();
            if !pairs.is_empty() {
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        Err(_) => "<unparseable url>".into(),
    }
}

/// A setting's value spelled as the configuration writes it (`connect-json`, `dead_letter`),
/// so output can be copied back into a file; `Debug` names are Rust's, not the user's.
pub(crate) fn spelled<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => format!("<{e}>"),
    }
}

/// Whether a configuration key names a secret (password, key, token) whose value must be hidden.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "sasl.jaas.config",
        "ssl.key.pem",
        "private",
    ]
    .iter()
    .any(|s| key.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_can_come_from_the_environment() {
        std::env::set_var("KPS_TEST_SECRET", "s3cret");
        assert_eq!(expand_env("a-${KPS_TEST_SECRET}-b").unwrap(), "a-s3cret-b");
        assert_eq!(
            expand_env("${KPS_TEST_UNSET_VAR}"),
            Err("KPS_TEST_UNSET_VAR".into())
        );
        assert_eq!(
            expand_env("no vars, ${ unterminated").unwrap(),
            "no vars, ${ unterminated"
        );
    }

    /// A password in the user-info part or in the query string is hidden; the rest of the URL
    /// stays readable, and a URL that cannot be parsed is never echoed back.
    #[test]
    fn redact_url_hides_passwords_only() {
        assert_eq!(
            redact_url("postgres://u:hunter2@h:5432/db?sslmode=require"),
            "postgres://u:***@h:5432/db?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://u@h/db?password=hunter2&application_name=x"),
            "postgres://u@h/db?password=***&application_name=x"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact_url("not a url hunter2"), "<unparseable url>");
    }

    /// Output names a setting's value as the file spells it, not as Rust's `Debug` does.
    #[test]
    fn spelled_uses_the_configuration_spelling() {
        use crate::config::{OnError, RecordFormat};
        assert_eq!(spelled(&RecordFormat::ConnectJson), "connect-json");
        assert_eq!(spelled(&OnError::DeadLetter), "dead_letter");
        assert_eq!(spelled(&5u32), "5");
    }
}
