//! Soft deletes: a delete marks its key's row in a configured column instead of removing it,
//! and an upsert of the key clears the mark again.
//!
//! The mark is a boolean (`true`) or a time: the delete record's Kafka timestamp, which is the
//! same on every replay of the record, unlike the time the sink happens to apply it.

use serde_json::value::RawValue;

use super::Source;
use crate::config::{DeleteMode, TopicSettings, WriteMode};
use crate::schema::{ColumnType, Table};

/// The column a delete marks, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SoftDelete {
    pub(crate) column: u16,
    pub(crate) marker: Marker,
}

/// What a mark is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// A boolean column: `true` when deleted, `false` when alive.
    Flag,
    /// A timestamp or timestamptz column: the delete's Kafka timestamp, NULL when alive.
    Time,
}

impl SoftDelete {
    /// The value every upserted row carries in the column: it revives a marked row.
    fn alive(self) -> Source {
        let text = match self.marker {
            Marker::Flag => "false",
            Marker::Time => "null",
        };
        Source::Const(RawValue::from_string(text.into()).expect("a JSON literal"))
    }

    /// SQL true where the row `alias` is not marked yet: a row already marked keeps its first
    /// mark (a Debezium delete and its tombstone are one deletion).
    pub(crate) fn unmarked(self, alias: &str, column: &str) -> String {
        match self.marker {
            Marker::Flag => format!("{alias}.{column} IS NOT TRUE"),
            Marker::Time => format!("{alias}.{column} IS NULL"),
        }
    }
}

/// The topic's soft delete, checked against the table; the marker column's source becomes the
/// value that says "alive", so that an upsert revives the row.
pub(super) fn resolve(
    topic: &TopicSettings,
    table: &Table,
    sources: &mut [Source],
) -> Result<Option<SoftDelete>, String> {
    let (DeleteMode::Soft, Some(name)) = (topic.delete_mode, &topic.soft_delete_column) else {
        return Ok(None);
    };
    if topic.write_mode() != WriteMode::Upsert {
        return Err("delete_mode = \"soft\" needs mode = \"upsert\"".into());
    }
    let (i, col) = table
        .column(name)
        .ok_or_else(|| format!("soft_delete_column {name:?} is not a column of the table"))?;
    let marker = match col.ty {
        ColumnType::Bool => Marker::Flag,
        ColumnType::Timestamp | ColumnType::Timestamptz if col.not_null => {
            return Err(format!(
                "soft_delete_column {name:?} is NOT NULL, but a live row's mark is NULL"
            ))
        }
        ColumnType::Timestamp | ColumnType::Timestamptz => Marker::Time,
        _ => {
            return Err(format!(
                "soft_delete_column {name:?} is {}; it must be boolean, timestamp or timestamptz",
                col.sql_type
            ))
        }
    };
    if topic.columns.contains_key(name) || metadata_names(topic).any(|m| m == name) {
        return Err(format!(
            "soft_delete_column {name:?} is set by deletes and upserts; it cannot also be mapped"
        ));
    }
    let soft = SoftDelete {
        column: i as u16,
        marker,
    };
    sources[i] = soft.alive();
    Ok(Some(soft))
}

/// The columns `metadata` maps.
fn metadata_names(topic: &TopicSettings) -> impl Iterator<Item = &str> {
    let m = &topic.metadata;
    [
        &m.topic,
        &m.partition,
        &m.offset,
        &m.timestamp,
        &m.key,
        &m.headers,
    ]
    .into_iter()
    .filter_map(|c| c.as_deref())
}
