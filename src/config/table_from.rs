//! Routing by record's settings: where a record names its table (`table_from`), and the
//! checks that keep a routed topic to the tables it lists. The routing itself is
//! `record_routing`.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{RecordFormat, TopicSettings};

/// PostgreSQL truncates longer identifiers; a longer name could silently mean another table.
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 63;

/// The placeholder of the `table` template that the record's name replaces.
pub(crate) const PLACEHOLDER: &str = "{}";

/// Where a record names its table (`table_from`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum TableFrom {
    /// The last header of this name, as UTF-8 text.
    Header(String),
    /// A JSON pointer into the value as produced (Debezium: `/source/table`).
    Field(String),
}

/// The configuration checks of routing by record (`config::validate` calls this).
pub(crate) fn validate(t: &TopicSettings) -> Result<(), String> {
    let label = t.label();
    let Some(from) = &t.table_from else {
        if !t.tables.is_empty() || t.table_pattern.is_some() {
            return Err(format!(
                "topic {label}: tables and table_pattern apply with table_from"
            ));
        }
        return Ok(());
    };
    if !t.table.contains(PLACEHOLDER) {
        return Err(format!("topic {label}: with table_from, table is a template where {PLACEHOLDER} is the name the record gives (table = \"{PLACEHOLDER}\" takes it as it is)"));
    }
    match (t.tables.is_empty(), &t.table_pattern) {
        (true, None) => return Err(format!("topic {label}: table_from needs the tables records may name: tables = [...] or table_pattern")),
        (false, Some(_)) => return Err(format!("topic {label}: give tables or table_pattern, not both")),
        _ => {}
    }
    for name in &t.tables {
        if name.is_empty() || name.len() > MAX_IDENTIFIER_BYTES || name.contains('\0') {
            return Err(format!("topic {label}: tables entry {name:?} is not a table name PostgreSQL keeps as it is (1 to {MAX_IDENTIFIER_BYTES} bytes, no NUL)"));
        }
    }
    if let Some(p) = &t.table_pattern {
        Regex::new(p).map_err(|e| format!("topic {label}: table_pattern {p:?}: {e}"))?;
    }
    match from {
        TableFrom::Header(h) if h.is_empty() => {
            return Err(format!("topic {label}: table_from.header is empty"))
        }
        TableFrom::Field(p) => {
            if !p.starts_with('/') {
                return Err(format!(
                    "topic {label}: table_from.field {p:?} is a JSON pointer and starts with '/'"
                ));
            }
            let json = t.format.registry_encoding().is_none()
                && t.format != RecordFormat::Raw
                && !t.encoding.uses_registry();
            if !json {
                return Err(format!("topic {label}: table_from.field reads JSON values; records in a registry format or raw name their table with table_from.header"));
            }
        }
        TableFrom::Header(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::{Format, Toml};

    fn settings(toml: &str) -> TopicSettings {
        figment::Figment::from(Toml::string(toml))
            .extract::<TopicSettings>()
            .unwrap()
    }

    /// Every way a routing configuration can be wrong is refused with the topic's name.
    #[test]
    fn bad_routing_settings_are_refused() {
        for (toml, says) in [
            (
                r#"table = "t"
                table_from = { header = "h" }
                tables = ["t"]"#,
                "template",
            ),
            (
                r#"table = "{}"
                table_from = { header = "h" }"#,
                "tables = [...]",
            ),
            (
                r#"table = "{}"
                table_from = { header = "h" }
                tables = ["a"]
                table_pattern = "a""#,
                "not both",
            ),
            (
                r#"table = "{}"
                tables = ["a"]"#,
                "apply with table_from",
            ),
            (
                r#"table = "{}"
                table_from = { field = "source" }
                tables = ["a"]"#,
                "starts with '/'",
            ),
            (
                r#"table = "{}"
                format = "avro"
                table_from = { field = "/t" }
                tables = ["a"]"#,
                "table_from.header",
            ),
            (
                r#"table = "{}"
                format = "raw"
                raw_column = "doc"
                table_from = { field = "/t" }
                tables = ["a"]"#,
                "table_from.header",
            ),
            (
                r#"table = "{}"
                table_from = { header = "h" }
                tables = ["a_name_longer_than_sixty_three_bytes_is_cut_by_postgresql_so_refused"]"#,
                "1 to 63 bytes",
            ),
            (
                r#"table = "{}"
                table_from = { header = "h" }
                table_pattern = "(""#,
                "table_pattern",
            ),
        ] {
            let e = validate(&settings(&format!("name = \"t\"\n{toml}"))).unwrap_err();
            assert!(e.contains("topic t") && e.contains(says), "{toml}: {e}");
        }
    }
}
