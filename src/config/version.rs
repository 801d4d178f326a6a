//! `version_from` as configured: where a topic's record versions come from, parsed and checked
//! against the rest of the topic's settings (the table is the mapping's to check).

use super::{RecordFormat, TopicSettings, WriteMode};

/// The column a versioned topic's rows keep their version in, unless `version_column` says.
pub(crate) const DEFAULT_VERSION_COLUMN: &str = "_version";

/// Where a record's version comes from, as `version_from` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionFrom {
    /// A JSON pointer into the whole value (a Debezium envelope's `/source/lsn`, `/ts_ms`).
    Field(String),
    /// The record's Kafka timestamp, in epoch milliseconds.
    Timestamp,
    /// The row's own value of the version column, as the topic maps it.
    Column,
}

impl VersionFrom {
    /// `"/pointer"`, `"meta:timestamp"` or `"column"`; anything else says what is accepted.
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        match spec {
            "meta:timestamp" => Ok(VersionFrom::Timestamp),
            "column" => Ok(VersionFrom::Column),
            p if p.starts_with('/') => Ok(VersionFrom::Field(p.to_string())),
            other => Err(format!(
                "version_from {other:?} is not a JSON pointer into the value (\"/source/lsn\"), \"meta:timestamp\" or \"column\""
            )),
        }
    }

    /// For messages: where the version was looked for.
    pub(crate) fn describe(&self) -> String {
        match self {
            VersionFrom::Field(p) => format!("the value's {p:?} (version_from)"),
            VersionFrom::Timestamp => "the record's Kafka timestamp (version_from)".into(),
            VersionFrom::Column => "the version column's value (version_from = \"column\")".into(),
        }
    }
}

/// What is wrong with a topic's `version_from` / `version_column`, if anything: the spec must
/// parse, the topic must upsert, and a Debezium event's version is a field of the event
/// itself (its `source` block, its `ts_*` times or its transaction), which deletes carry too.
pub(super) fn problem(topic: &TopicSettings, mode: WriteMode) -> Option<String> {
    let Some(spec) = &topic.version_from else {
        return topic
            .version_column
            .as_ref()
            .map(|_| "version_column needs version_from".to_string());
    };
    let from = match VersionFrom::parse(spec) {
        Ok(from) => from,
        Err(e) => return Some(e),
    };
    if mode != WriteMode::Upsert {
        return Some("version_from needs mode = \"upsert\" (or format = \"debezium\")".into());
    }
    if let (VersionFrom::Field(pointer), RecordFormat::Debezium) = (&from, topic.format) {
        let first = pointer.split('/').nth(1).unwrap_or("");
        if !matches!(
            first,
            "source" | "ts_ms" | "ts_us" | "ts_ns" | "transaction"
        ) {
            return Some(format!("version_from {spec:?} is not a field of a Debezium change event that every event (deletes too) carries: use \"/source/lsn\", \"/source/ts_ms\" or \"/ts_ms\""));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What users write, and what is refused with the accepted forms named.
    #[test]
    fn version_from_parses_pointers_the_timestamp_and_column() {
        assert_eq!(
            VersionFrom::parse("/source/lsn").unwrap(),
            VersionFrom::Field("/source/lsn".into())
        );
        assert_eq!(
            VersionFrom::parse("meta:timestamp").unwrap(),
            VersionFrom::Timestamp
        );
        assert_eq!(VersionFrom::parse("column").unwrap(), VersionFrom::Column);
        let e = VersionFrom::parse("source.lsn").unwrap_err();
        assert!(e.contains("JSON pointer"), "{e}");
    }
}
