//! Versions: an optional per-topic ordering of a key's records, so that a record older than its
//! key's stored row (a replay after `offsets reset`, a second source of the same table) is not
//! applied. Each row stores its version in a column; the merge compares them (`crate::stale`).

use serde_json::value::RawValue;

use super::pointer::{self, JsonRef};
use super::{MapError, Source};
use crate::config::{RecordFormat, TopicSettings, WriteMode};
use crate::record::RecordView;
use crate::schema::{ColumnType, Table};

/// The column a versioned topic's rows keep their version in, unless `version_column` says.
pub(crate) const DEFAULT_COLUMN: &str = "_version";

/// Where a record's version comes from, as `version_from` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionFrom {
    /// A JSON pointer into the whole value (a Debezium envelope's `/source/lsn`, `/ts_ms`).
    Field(String, Vec<String>),
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
            p if p.starts_with('/') => Ok(VersionFrom::Field(p.to_string(), pointer::parse(p)?)),
            other => Err(format!(
                "version_from {other:?} is not a JSON pointer into the value (\"/source/lsn\"), \"meta:timestamp\" or \"column\""
            )),
        }
    }

    /// For messages: where the version was looked for.
    pub(crate) fn describe(&self) -> String {
        match self {
            VersionFrom::Field(p, _) => format!("the value's {p:?} (version_from)"),
            VersionFrom::Timestamp => "the record's Kafka timestamp (version_from)".into(),
            VersionFrom::Column => "the version column's value (version_from = \"column\")".into(),
        }
    }
}

/// A versioned topic: the column and where its values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) column: u16,
    pub(crate) from: VersionFrom,
}

/// The version of one record: a number the sink writes itself, or the column's mapped value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordVersion {
    Number(i64),
    Mapped,
}

/// The topic's versioning, checked against the table: `None` without `version_from`.
/// Versions the sink reads itself (a field, the timestamp) need a `bigint` column the topic
/// does not otherwise map; `"column"` needs a mapped column of an orderable type.
pub(super) fn resolve(
    topic: &TopicSettings,
    table: &Table,
    sources: &mut [Source],
    keys: &[String],
) -> Result<Option<Version>, String> {
    let Some(spec) = &topic.version_from else {
        return Ok(None);
    };
    let from = VersionFrom::parse(spec)?;
    if topic.write_mode() != WriteMode::Upsert {
        return Err("version_from needs mode = \"upsert\" (or format = \"debezium\")".into());
    }
    let name = topic.version_column.as_deref().unwrap_or(DEFAULT_COLUMN);
    let (i, col) = table.column(name).ok_or_else(|| {
        format!("version_column {name:?} is not a column of the table (create it, or set version_column)")
    })?;
    if keys.iter().any(|k| k == name) {
        return Err(format!(
            "version_column {name:?} is a key column; a key's rows are what versions order"
        ));
    }
    if topic.soft_delete_column.as_deref() == Some(name) {
        return Err(format!(
            "version_column {name:?} is also the soft_delete_column"
        ));
    }
    if from != VersionFrom::Timestamp
        && topic.format != RecordFormat::Debezium
        && topic.delete_on_tombstone
    {
        return Err(
            "a tombstone has no value to read its version from: with delete_on_tombstone use version_from = \"meta:timestamp\"".into(),
        );
    }
    match from {
        VersionFrom::Column => {
            use ColumnType::*;
            if !matches!(
                col.ty,
                Int2 | Int4 | Int8 | Numeric | Timestamp | Timestamptz | Date
            ) {
                return Err(format!(
                    "version_column {name:?} is {}; version_from = \"column\" needs an integer, numeric, date, timestamp or timestamptz column",
                    col.sql_type
                ));
            }
            if matches!(sources[i], Source::Default | Source::Const(_)) {
                return Err(format!(
                    "version_column {name:?} takes no value from the record, so cannot order its records"
                ));
            }
        }
        VersionFrom::Field(..) | VersionFrom::Timestamp => {
            if col.ty != ColumnType::Int8 {
                return Err(format!(
                    "version_column {name:?} is {}; versions read from {spec:?} need bigint",
                    col.sql_type
                ));
            }
            if topic.columns.contains_key(name) {
                return Err(format!(
                    "version_column {name:?} is written from version_from; it cannot also be mapped in columns"
                ));
            }
            // Written by the sink from the version, never from a value field of that name.
            sources[i] = Source::Default;
        }
    }
    Ok(Some(Version {
        column: i as u16,
        from,
    }))
}

impl Version {
    /// The record's version, or why it has none. `value` is the value as JSON (registry
    /// formats transcoded); `None` is a tombstone, which only `meta:timestamp` can version.
    /// A field must be a JSON integer: a string, a fraction or null is refused, never coerced.
    pub(crate) fn of(
        &self,
        record: &RecordView<'_>,
        value: Option<&[u8]>,
        in_payload: bool,
    ) -> Result<RecordVersion, MapError> {
        let missing = |reason: String| MapError::BadVersion {
            origin: self.from.describe(),
            reason,
        };
        match &self.from {
            VersionFrom::Column => Ok(RecordVersion::Mapped),
            VersionFrom::Timestamp => record
                .timestamp
                .map(RecordVersion::Number)
                .ok_or_else(|| missing("the record has no timestamp".into())),
            VersionFrom::Field(_, path) => {
                let value = value.ok_or_else(|| missing("the record has no value".into()))?;
                let text = std::str::from_utf8(value)
                    .map_err(|e| missing(format!("the value is not UTF-8: {e}")))?;
                let raw: &RawValue = serde_json::from_str(text)
                    .map_err(|e| missing(format!("the value is not JSON: {e}")))?;
                let mut doc = JsonRef::of(raw);
                // Connect's `{"schema", "payload"}` wrapping: the pointer is into the payload,
                // as columns' pointers are, so one pointer fits both converter settings.
                if in_payload && doc.get().starts_with('{') {
                    if let Some(payload) = pointer::field(doc, "payload").map_err(missing)? {
                        if payload.get().starts_with('{') {
                            doc = payload;
                        }
                    }
                }
                let found = pointer::descend(doc, path).map_err(missing)?;
                match found.map(JsonRef::get) {
                    None => Err(missing("the value has no such field".into())),
                    Some("null") => Err(missing("it is null".into())),
                    Some(text) => text.parse::<i64>().map(RecordVersion::Number).map_err(|_| {
                        missing(format!("{text} is not an integer (a 64-bit whole number)"))
                    }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What users write, and what is refused with the accepted forms named.
    #[test]
    fn version_from_parses_pointers_the_timestamp_and_column() {
        assert_eq!(
            VersionFrom::parse("/source/lsn").unwrap(),
            VersionFrom::Field("/source/lsn".into(), vec!["source".into(), "lsn".into()])
        );
        assert_eq!(
            VersionFrom::parse("meta:timestamp").unwrap(),
            VersionFrom::Timestamp
        );
        assert_eq!(VersionFrom::parse("column").unwrap(), VersionFrom::Column);
        let e = VersionFrom::parse("source.lsn").unwrap_err();
        assert!(e.contains("JSON pointer"), "{e}");
    }

    fn view(value: &[u8]) -> RecordView<'_> {
        RecordView {
            topic: "t",
            partition: 0,
            offset: 0,
            timestamp: Some(7),
            key: None,
            value: Some(value),
            headers: &[],
        }
    }

    /// Integers are read; a missing field, null, a string holding digits and a fraction are
    /// errors that say so, never coerced.
    #[test]
    fn a_field_version_must_be_an_integer() {
        let v = Version {
            column: 0,
            from: VersionFrom::parse("/source/lsn").unwrap(),
        };
        let of = |json: &str| v.of(&view(json.as_bytes()), Some(json.as_bytes()), true);
        assert_eq!(
            of(r#"{"source":{"lsn":123}}"#).unwrap(),
            RecordVersion::Number(123)
        );
        assert_eq!(
            of(r#"{"schema":{},"payload":{"source":{"lsn":9}}}"#).unwrap(),
            RecordVersion::Number(9)
        );
        for (bad, says) in [
            (r#"{"source":{}}"#, "no such field"),
            (r#"{"source":{"lsn":null}}"#, "null"),
            (r#"{"source":{"lsn":"12"}}"#, "not an integer"),
            (r#"{"source":{"lsn":1.5}}"#, "not an integer"),
        ] {
            let e = of(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("/source/lsn"), "{bad}: {e}");
        }
    }
}
