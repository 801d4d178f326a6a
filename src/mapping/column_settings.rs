//! Per-column settings of a topic held against its table once, at startup: the unit of a
//! time column's integers (`time_unit`, `time_units`), a bytea column's text encoding
//! (`bytea_encoding`) and the json columns whose strings hold JSON text (`json_text`). An
//! entry naming a column that is missing or of another type is refused here, so a typo never
//! silently does nothing.

use super::{Source, TopicMapper};
use crate::config::{ByteaEncoding, Encoding, RecordFormat, TimeUnit, TopicSettings};
use crate::schema::{ColumnType, Table};

/// A unit the configuration gives a time column's integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConfiguredUnit {
    /// From `[topics.time_units]`: said of this column, so a schema that disagrees is an error
    /// (one of the two is wrong, and either reading could be silently off by 1,000×).
    Column(TimeUnit),
    /// From the topic's `time_unit`: meant for records without a schema, so a schema that
    /// gives the field's unit wins.
    Topic(TimeUnit),
}

/// The column types an integer time can go into; an array's elements are read as a column
/// of their type would be, so arrays of these too.
pub(super) fn is_time(ty: ColumnType) -> bool {
    matches!(
        ty.scalar_part(),
        ColumnType::Timestamptz | ColumnType::Timestamp | ColumnType::Date
    )
}

/// Each column's configured time unit: its `time_units` entry, else the topic's `time_unit`
/// for timestamp columns. Entries must name time columns, and `days` only dates.
pub(super) fn time_units(
    topic: &TopicSettings,
    table: &Table,
) -> Result<Vec<Option<ConfiguredUnit>>, String> {
    let mut units: Vec<Option<ConfiguredUnit>> = table
        .columns
        .iter()
        .map(|c| {
            topic
                .time_unit
                .filter(|_| {
                    matches!(
                        c.ty.scalar_part(),
                        ColumnType::Timestamptz | ColumnType::Timestamp
                    )
                })
                .map(ConfiguredUnit::Topic)
        })
        .collect();
    for (name, &unit) in &topic.time_units {
        let (i, col) = table
            .column(name)
            .ok_or_else(|| format!("time_units.{name}: column {name:?} is not in the table"))?;
        let counted = matches!(
            col.ty.scalar_part(),
            ColumnType::Time | ColumnType::Timetz | ColumnType::Interval
        );
        if !is_time(col.ty) && !counted {
            return Err(format!(
                "time_units.{name}: column {name:?} is {}; a time unit applies to timestamp, timestamptz, date, time, timetz and interval columns",
                col.sql_type
            ));
        }
        if unit == TimeUnit::Days && col.ty.scalar_part() != ColumnType::Date {
            return Err(format!(
                "time_units.{name}: \"days\" fits date columns only; {name:?} is {}",
                col.sql_type
            ));
        }
        units[i] = Some(ConfiguredUnit::Column(unit));
    }
    Ok(units)
}

/// Which columns read hex: `bytea_encoding` entries must name bytea columns (or arrays of
/// bytea), so a misspelt or mistyped entry is refused at startup, not ignored.
pub(super) fn hex_columns(topic: &TopicSettings, table: &Table) -> Result<Vec<bool>, String> {
    let mut hex = vec![false; table.columns.len()];
    for (name, &encoding) in &topic.bytea_encoding {
        let (i, col) = table
            .column(name)
            .ok_or_else(|| format!("bytea_encoding.{name}: column {name:?} is not in the table"))?;
        if col.ty.scalar_part() != ColumnType::Bytea {
            return Err(format!(
                "bytea_encoding.{name}: column {name:?} is {}, not bytea",
                col.sql_type
            ));
        }
        hex[i] = encoding == ByteaEncoding::Hex;
    }
    Ok(hex)
}

/// Which columns read a string as the JSON text it holds (`json_text`): entries must name
/// json or jsonb columns, the only types where a string and the JSON inside it differ as
/// stored values; anywhere else the entry would do nothing, so it is refused at startup.
pub(super) fn json_text_columns(topic: &TopicSettings, table: &Table) -> Result<Vec<bool>, String> {
    let mut json_text = vec![false; table.columns.len()];
    for name in &topic.json_text {
        let (i, col) = table
            .column(name)
            .ok_or_else(|| format!("json_text: column {name:?} is not in the table"))?;
        if !matches!(col.ty, ColumnType::Json | ColumnType::Jsonb) {
            return Err(format!(
                "json_text: column {name:?} is {}; only json and jsonb columns read a string as JSON text",
                col.sql_type
            ));
        }
        json_text[i] = true;
    }
    Ok(json_text)
}

/// What `check` says of a column's settings.
impl TopicMapper {
    /// For `check`'s note: column `i` is json or jsonb, fed from the record's JSON without
    /// `json_text`, on a topic whose records may come without a schema; a string there is
    /// stored as a JSON string, which is wrong when it holds JSON text (Debezium's `Json`
    /// with `schemas.enable=false`) and nothing in the record can say so.
    pub(crate) fn may_store_json_text_as_string(&self, i: usize) -> bool {
        matches!(
            self.table.columns[i].ty,
            ColumnType::Json | ColumnType::Jsonb
        ) && !self.json_text[i]
            && matches!(self.sources[i], Source::Doc(_))
            // Registry formats arrive transcoded as `Json`: their encoding tells them apart.
            && self.value_encoding == Encoding::Json
            && matches!(
                self.format,
                RecordFormat::Json | RecordFormat::ConnectJson | RecordFormat::Debezium
            )
    }

    /// For `check`'s warning: column `i` is a time column fed from the record's JSON with no
    /// unit configured, so an integer there is read as epoch milliseconds (dates: days when
    /// small) unless a schema comes with it and says otherwise.
    pub(crate) fn guesses_time_unit(&self, i: usize) -> bool {
        is_time(self.table.columns[i].ty)
            && self.units[i].is_none()
            && matches!(
                self.sources[i],
                Source::Doc(_) | Source::Key(_) | Source::KeyAuto(_)
            )
    }
}
