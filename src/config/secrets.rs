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

/// The characters a substituted value keeps as they are in a URL component: RFC 3986's
/// unreserved ones. Everything else is percent-encoded, which is valid in user-info, a path
/// segment and a query value alike, so one set serves them all.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `${NAME}` expansion for a URL: a value that lands in the user-info (`user:${PW}@host`) or
/// as a query value (`?password=${PW}`) is percent-encoded, because secret stores hand out
/// passwords holding `@`, `/`, `:`, `#`, `?` and `%`, and such a password written as it is
/// would end the user-info early, so the host and the log line would hold a piece of it. A
/// variable elsewhere (the whole URL, the host, the path) is put in as it is: it is a URL or a
/// piece of one already.
pub(super) fn expand_env_in_url(template: &str) -> Result<String, String> {
    let Some(scheme_end) = template.find("://") else {
        return expand_env(template);
    };
    let authority_start = scheme_end + 3;
    // The template's own delimiters: placeholders are `${…}` and hold none of them.
    let authority_end = template[authority_start..]
        .find(['/', '?', '#'])
        .map_or(template.len(), |i| authority_start + i);
    let userinfo_end = template[authority_start..authority_end]
        .rfind('@')
        .map(|i| authority_start + i);
    let query_start = template[authority_start..]
        .find('?')
        .map(|i| authority_start + i);
    let mut out = String::with_capacity(template.len());
    let mut at = 0;
    while let Some(found) = template[at..].find("${") {
        let start = at + found;
        let Some(len) = template[start + 2..].find('}') else {
            break;
        };
        let name = &template[start + 2..start + 2 + len];
        let value = std::env::var(name).map_err(|_| name.to_string())?;
        out.push_str(&template[at..start]);
        let in_userinfo = userinfo_end.is_some_and(|end| start >= authority_start && start < end);
        let query_value =
            query_start.is_some_and(|q| start > q && template[..start].ends_with('='));
        if in_userinfo || query_value {
            out.extend(percent_encoding::utf8_percent_encode(&value, COMPONENT));
        } else {
            out.push_str(&value);
        }
        at = start + 3 + len;
    }
    out.push_str(&template[at..]);
    Ok(out)
}

/// Returns `url` with any password replaced, for logs and `check` output.
///
/// Nothing is parsed: a password holding `@`, `/`, `:`, `#`, `?` or `&`, written into the URL
/// as it is, would make a URL parser take a piece of it for the host, the path or another
/// query pair, and print that piece. Instead two spans are hidden, each as wide as any reading
/// of the URL could make the secret: from the user-info's first `:` to the authority's
/// **last** `@`, and from a secret query key's `=` (`?password=`) to the end. Hiding too much
/// is the safe way to be wrong.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "<unparseable url>".into();
    };
    let rest = scheme_end + 3;
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    if let Some(at) = url[rest..].rfind('@').map(|i| rest + i) {
        if let Some(colon) = url[rest..at].find(':').map(|i| rest + i) {
            hidden.push((colon + 1, at));
        }
    }
    for (i, c) in url.char_indices().skip_while(|&(i, _)| i < rest) {
        if c != '?' && c != '&' {
            continue;
        }
        let key_start = i + 1;
        let Some(eq) = url[key_start..].find('=').map(|j| key_start + j) else {
            continue;
        };
        let key = &url[key_start..eq];
        if !key.contains(['&', '?']) && is_secret_key(key) {
            hidden.push((eq + 1, url.len()));
            break;
        }
    }
    hidden.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut shown_to = 0;
    for (start, end) in hidden {
        if end <= shown_to {
            continue;
        }
        let start = start.max(shown_to);
        out.push_str(&url[shown_to..start]);
        out.push_str("***");
        shown_to = end;
    }
    out.push_str(&url[shown_to..]);
    out
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
            "postgres://u@h/db?password=***"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact_url("not a url hunter2"), "<unparseable url>");
    }

    /// A password holding each of URL's reserved characters and `%`, in the user-info or in
    /// the query, written as it is or percent-encoded: no piece of it is ever printed,
    /// however a URL parser would split the string.
    #[test]
    fn no_piece_of_any_password_is_ever_printed() {
        let mut passwords: Vec<String> = ":/?#[]@!$&'()*+,;=% \"\\"
            .chars()
            .map(|c| format!("Zq{c}Xv{c}Wk"))
            .collect();
        passwords.push("p@ss/w:rd%20#?x".into());
        passwords.push("a&token=b@h/db".into());
        for password in &passwords {
            let encoded: String =
                percent_encoding::utf8_percent_encode(password, COMPONENT).to_string();
            for written in [password.as_str(), encoded.as_str()] {
                for url in [
                    format!("postgres://sink:{written}@127.0.0.1:5432/db?sslmode=require"),
                    format!("postgres://sink:{written}@h/db"),
                    format!("postgres://h:5432/db?password={written}"),
                    format!("postgres://h/db?sslmode=require&password={written}&x=1"),
                ] {
                    let shown = redact_url(&url);
                    for piece in ["Zq", "Xv", "Wk", "p@", "w:rd", "rd%20", "token=b"] {
                        assert!(
                            !shown.contains(piece),
                            "{url:?} shows {piece:?} as {shown:?}"
                        );
                    }
                }
            }
        }
        assert_eq!(
            redact_url("postgres://sink:p@ss/w:rd%20#?x@127.0.0.1:5432/db"),
            "postgres://sink:***@127.0.0.1:5432/db"
        );
    }

    /// A variable in the user-info or a query value is percent-encoded, so the URL parses to
    /// the password as it is; one that is the whole URL, the host or the path goes in as it is.
    #[test]
    fn a_substituted_password_is_encoded_into_the_url() {
        std::env::set_var("KPS_TEST_URL_RESERVED", "p@ss/w:rd%20#?x");
        std::env::set_var("KPS_TEST_URL_WHOLE", "postgres://u:a%40b@h:5/db");
        std::env::set_var("KPS_TEST_URL_HOST", "db.example");
        let url = expand_env_in_url(
            "postgres://sink:${KPS_TEST_URL_RESERVED}@${KPS_TEST_URL_HOST}:5432/db?sslmode=require",
        )
        .unwrap();
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(parsed.host_str(), Some("db.example"));
        assert_eq!(parsed.port(), Some(5432));
        assert_eq!(parsed.path(), "/db");
        let password = percent_encoding::percent_decode_str(parsed.password().unwrap());
        assert_eq!(password.decode_utf8().unwrap(), "p@ss/w:rd%20#?x");
        let user_too =
            expand_env_in_url("postgres://${KPS_TEST_URL_RESERVED}:${KPS_TEST_URL_RESERVED}@h/db")
                .unwrap();
        let parsed = url::Url::parse(&user_too).unwrap();
        assert_eq!(parsed.host_str(), Some("h"));
        let query =
            expand_env_in_url("postgres://h/db?password=${KPS_TEST_URL_RESERVED}&a=1").unwrap();
        let pairs: Vec<_> = url::Url::parse(&query)
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
        assert_eq!(
            pairs,
            [
                ("password".to_string(), "p@ss/w:rd%20#?x".to_string()),
                ("a".to_string(), "1".to_string())
            ]
        );
        assert_eq!(
            expand_env_in_url("${KPS_TEST_URL_WHOLE}").unwrap(),
            "postgres://u:a%40b@h:5/db"
        );
        assert_eq!(
            expand_env_in_url("postgres://u@h/${KPS_TEST_URL_HOST}").unwrap(),
            "postgres://u@h/db.example"
        );
        assert_eq!(
            expand_env_in_url("postgres://u:${KPS_TEST_URL_UNSET}@h/db"),
            Err("KPS_TEST_URL_UNSET".into())
        );
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
