//! Which table a topic's records go to: exact names first, then patterns in the order they
//! are configured. Patterns also pick up topics created while the sink runs.

use foldhash::{HashMap, HashMapExt as _};

use regex::Regex;

use crate::config::{Sanitize, TopicSettings};

/// PostgreSQL truncates longer identifiers; the sink looks tables up by the name it would use.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// Topic names and patterns to settings.
pub struct Router {
    settings: Vec<TopicSettings>,
    named: HashMap<String, usize>,
    patterns: Vec<(Regex, usize)>,
}

impl Router {
    /// Compiles every pattern up front, so a bad one fails at startup, not at the first new topic.
    pub fn new(topics: &[TopicSettings]) -> Result<Self, regex::Error> {
        let mut named = HashMap::new();
        let mut patterns = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            if let Some(name) = &t.name {
                named.insert(name.clone(), i);
            }
            if let Some(pattern) = &t.pattern {
                patterns.push((Regex::new(&anchored(pattern))?, i));
            }
        }
        Ok(Self {
            settings: topics.to_vec(),
            named,
            patterns,
        })
    }

    /// What to subscribe to: names as they are, patterns as librdkafka regexes (`^…`).
    pub fn subscription(&self) -> Vec<String> {
        self.settings
            .iter()
            .map(|t| match (&t.name, &t.pattern) {
                (Some(name), _) => name.clone(),
                (None, Some(pattern)) => anchored(pattern),
                (None, None) => unreachable!("validated: a name or a pattern"),
            })
            .collect()
    }

    /// The settings that apply to `topic`, if any.
    pub fn settings_for(&self, topic: &str) -> Option<&TopicSettings> {
        if let Some(&i) = self.named.get(topic) {
            return Some(&self.settings[i]);
        }
        self.patterns
            .iter()
            .find(|(re, _)| re.is_match(topic))
            .map(|(_, i)| &self.settings[*i])
    }
}

/// librdkafka treats a subscription starting with `^` as a regex; the router matches the
/// same anchored pattern so both agree on which topics count.
fn anchored(pattern: &str) -> String {
    if pattern.starts_with('^') {
        pattern.to_string()
    } else {
        format!("^{pattern}")
    }
}

/// The table for `topic` under `settings`: `{topic}` replaced by the sanitised name.
pub fn table_name(settings: &TopicSettings, topic: &str) -> String {
    let name = settings
        .table
        .replace("{topic}", &sanitize(topic, settings.sanitize));
    truncate(name)
}

/// `snake` gives the usual table name (`Orders.v1-eu` → `orders_v1_eu`), one that hand-written
/// SQL can use unquoted.
pub(crate) fn sanitize(topic: &str, how: Sanitize) -> String {
    match how {
        Sanitize::None => topic.to_string(),
        Sanitize::Snake => topic
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect(),
    }
}

/// Cut as PostgreSQL cuts identifiers, on a character boundary, so the lookup finds the table
/// its `CREATE TABLE` made.
fn truncate(mut name: String) -> String {
    if name.len() > MAX_IDENTIFIER_BYTES {
        let mut end = MAX_IDENTIFIER_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::{Format, Toml};

    fn topics(toml: &str) -> Vec<TopicSettings> {
        #[derive(serde::Deserialize)]
        struct T {
            topics: Vec<TopicSettings>,
        }
        figment::Figment::from(Toml::string(toml))
            .extract::<T>()
            .unwrap()
            .topics
    }

    #[test]
    fn names_win_over_patterns_and_templates_sanitise() {
        let router = Router::new(&topics(
            r#"
            [[topics]]
            pattern = "shop\\..*"
            table = "raw_{topic}"
            [[topics]]
            name = "shop.orders"
            table = "orders"
            [[topics]]
            pattern = "^Audit-.*"
            table = "{topic}"
            sanitize = "none"
            "#,
        ))
        .unwrap();
        assert_eq!(
            router.subscription(),
            vec!["^shop\\..*", "shop.orders", "^Audit-.*"]
        );
        let orders = router.settings_for("shop.orders").unwrap();
        assert_eq!(table_name(orders, "shop.orders"), "orders");
        let other = router.settings_for("shop.Refunds-EU").unwrap();
        assert_eq!(table_name(other, "shop.Refunds-EU"), "raw_shop_refunds_eu");
        let audit = router.settings_for("Audit-Log").unwrap();
        assert_eq!(table_name(audit, "Audit-Log"), "Audit-Log");
        assert!(
            router.settings_for("xshop.orders").is_none(),
            "patterns are anchored"
        );
        assert_eq!(table_name(other, &"x".repeat(100)).len(), 63);
    }
}
