//! Versions: an optional per-topic ordering of a key's records, so that a record older than its
//! key's stored row (a replay after `offsets reset`, a second source of the same table) is not
//! applied. Each row stores its version in a column; the merge compares them (`stale.rs`).

use serde_json::value::RawValue;

use super::encode::Value;
use super::pointer::{self, JsonRef};
use super::{MapError, Source, TopicMapper};
use crate::config::{RecordFormat, TopicSettings, VersionFrom, WriteMode, DEFAULT_VERSION_COLUMN};
use crate::record::RecordView;
use crate::schema::{ColumnType, Table};

/// A versioned topic: the column and where its values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) column: u16,
    pub(crate) from: VersionFrom,
    /// `Field`'s pointer, parsed.
    path: Vec<String>,
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
    let name = topic
        .version_column
        .as_deref()
        .unwrap_or(DEFAULT_VERSION_COLUMN);
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
    let path = match &from {
        VersionFrom::Field(p) => pointer::parse(p)?,
        _ => Vec::new(),
    };
    Ok(Some(Version {
        column: i as u16,
        from,
        path,
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
    ) -> Result<RecordVersion, String> {
        match &self.from {
            VersionFrom::Column => Ok(RecordVersion::Mapped),
            VersionFrom::Timestamp => record
                .timestamp
                .map(RecordVersion::Number)
                .ok_or_else(|| "the record has no timestamp".to_string()),
            VersionFrom::Field(_) => {
                let value = value.ok_or_else(|| "the record has no value".to_string())?;
                let text = std::str::from_utf8(value)
                    .map_err(|e| format!("the value is not UTF-8: {e}"))?;
                let raw: &RawValue = serde_json::from_str(text)
                    .map_err(|e| format!("the value is not JSON: {e}"))?;
                let mut doc = JsonRef::of(raw);
                // Connect's `{"schema", "payload"}` wrapping: the pointer is into the payload,
                // as columns' pointers are, so one pointer fits both converter settings.
                if in_payload && doc.get().starts_with('{') {
                    if let Some(payload) = pointer::field(doc, "payload")? {
                        if payload.get().starts_with('{') {
                            doc = payload;
                        }
                    }
                }
                let found = pointer::descend(doc, &self.path)?;
                match found.map(JsonRef::get) {
                    None => Err("the value has no such field".into()),
                    Some("null") => Err("it is null".into()),
                    Some(text) => text
                        .parse::<i64>()
                        .map(RecordVersion::Number)
                        .map_err(|_| format!("{text} is not an integer (a 64-bit whole number)")),
                }
            }
        }
    }
}

impl TopicMapper {
    /// The record's version, as `encode` needs it: `Some(None)` for an unversioned topic,
    /// `None` for a tombstone taken without writing. A tombstone carries no value to read a
    /// version from; Debezium's follows the delete event of its key, which carried the delete
    /// and its version, so it is kept for compaction only and a replayed one must not remove a
    /// row a newer event wrote. (Elsewhere such versions are refused at startup.)
    pub(super) fn version_of(
        &self,
        record: &RecordView<'_>,
        value: Option<&[u8]>,
    ) -> Result<Option<Option<(usize, RecordVersion)>>, MapError> {
        let Some(v) = &self.version else {
            return Ok(Some(None));
        };
        if record.value.is_none() && v.from != VersionFrom::Timestamp {
            return Ok(None);
        }
        let in_payload = matches!(
            self.format,
            RecordFormat::ConnectJson | RecordFormat::Debezium
        );
        Ok(Some(Some((
            v.column as usize,
            v.of(record, value, in_payload)
                .map_err(|reason| self.bad_version(v, reason))?,
        ))))
    }

    /// A version read from the row (`version_from = "column"`) must be there: a record
    /// without it, or with null, cannot be ordered against the stored row and is an error,
    /// not applied unconditionally.
    pub(super) fn check_version(
        &self,
        number: RecordVersion,
        value: &Value<'_>,
    ) -> Result<(), MapError> {
        let (Some(v), RecordVersion::Mapped, Value::Absent | Value::Null) =
            (&self.version, number, value)
        else {
            return Ok(());
        };
        let reason = match value {
            Value::Null => "it is null",
            _ => "the record does not carry it",
        };
        Err(self.bad_version(v, reason.into()))
    }

    /// A record whose version cannot be had: a `mapping` error naming the version column and
    /// where the version was looked for.
    fn bad_version(&self, v: &Version, reason: String) -> MapError {
        let col = &self.table.columns[v.column as usize];
        MapError::BadValue {
            column: col.name.clone(),
            sql_type: col.sql_type.clone(),
            origin: v.from.describe(),
            reason,
        }
    }

    /// For `check`: where column `i` takes the topic's version from, if it is the version
    /// column, and whether that replaces the column's own source (a pointer, the timestamp)
    /// or is the source itself (`"column"`).
    pub(crate) fn version_of_column(&self, i: usize) -> Option<(String, bool)> {
        let v = self.version.as_ref().filter(|v| v.column as usize == i)?;
        Some((v.from.describe(), v.from != VersionFrom::Column))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            path: vec!["source".into(), "lsn".into()],
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
            let e = of(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
