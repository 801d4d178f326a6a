//! Records that remove rows: deletes (tombstones, Debezium `d`), hard or soft, and Debezium
//! truncates.

use super::convert::{write_meta, Input};
use super::encode::Value;
use super::version::RecordVersion;
use super::{
    pointer, EncodeError, MapError, Marker, Meta, Rows, SoftDelete, Source, TableRows, TopicMapper,
};
use crate::config::TruncateMode;
use crate::record::{OwnedRecord, RecordView};

impl TopicMapper {
    /// A truncate empties the table before the batch's rows of it, so it must be the first of
    /// its table in the batch: one that meets rows asks for a fresh batch, and the rows before
    /// it commit first.
    pub(super) fn encode_truncate(
        &self,
        record: &RecordView<'_>,
        rows: &mut TableRows,
    ) -> Result<(), EncodeError> {
        match self.truncate {
            TruncateMode::Fail => Err(MapError::Unsupported(
                "Debezium op \"t\" (a truncate; the topic's truncate = \"fail\")".into(),
            )
            .into()),
            TruncateMode::Ignore => Ok(()),
            TruncateMode::Apply if rows.rows() > 0 => Err(EncodeError::NeedsFreshBatch),
            TruncateMode::Apply => {
                // A second truncate with no rows since changes nothing.
                rows.truncate
                    .get_or_insert((record.partition, record.offset));
                Ok(())
            }
        }
    }

    /// Deletes get their own COPY of key columns and ordinal, so the merge can tell whether a
    /// key's last record in the batch was a delete or an upsert.
    pub(super) fn encode_delete<'a>(
        &'a self,
        record: &RecordView<'a>,
        rows: &mut TableRows,
        value_of: impl Fn(usize) -> Result<Value<'a>, MapError>,
        key: Option<Input<'a>>,
        version: Option<(usize, RecordVersion)>,
    ) -> Result<(), EncodeError> {
        let Some(keys) = self.upsert_keys.clone().filter(|_| !self.ignore_conflicts) else {
            return Err(MapError::DeleteNeedsUpsert.into());
        };
        let mut values = Vec::with_capacity(keys.len());
        for &k in keys.iter() {
            let k = k as usize;
            let mut value = value_of(k)?;
            // A tombstone has no document: a key column read from the value is looked up in
            // the record key instead (Debezium keys carry the key columns by name).
            if let (Value::Absent, Source::Doc(path), Some(Input::Json(raw))) =
                (&value, &self.sources[k], key)
            {
                value = match pointer::descend(raw, path).map_err(|r| self.bad_value(k, r))? {
                    Some(v) if v.get() != "null" => Value::In(Input::Json(v), None),
                    _ => Value::Absent,
                };
            }
            if matches!(value, Value::Absent | Value::Null) {
                return Err(MapError::MissingKey {
                    column: self.table.columns[k].name.clone(),
                }
                .into());
            }
            values.push((k, value));
        }
        // The mark's value, checked before the row begins.
        if let Some(SoftDelete {
            column,
            marker: Marker::Time,
        }) = self.soft_delete
        {
            if record.timestamp.is_none() {
                let col = &self.table.columns[column as usize];
                return Err(MapError::BadValue {
                    column: col.name.clone(),
                    sql_type: col.sql_type.clone(),
                    origin: "the delete's Kafka timestamp (soft_delete_column)".into(),
                    reason: "the record has no timestamp".into(),
                }
                .into());
            }
        }
        // A delete is ordered like an upsert: it applies only where it is not older than the
        // stored row, so its version is staged with its key.
        let version: Option<(usize, Result<i64, Value<'a>>)> = match version {
            Some((column, RecordVersion::Mapped)) => {
                let value = value_of(column)?;
                self.check_version(RecordVersion::Mapped, &value)?;
                Some((column, Err(value)))
            }
            Some((column, RecordVersion::Number(n))) => Some((column, Ok(n))),
            None => None,
        };
        let ordinal = rows.next_ordinal;
        let keep = rows.keep_origins;
        let deletes = rows.deletes.get_or_insert_with(|| Rows::new(keys.to_vec()));
        let copy = &mut deletes.buffer;
        let soft = usize::from(self.soft_delete.is_some());
        let mark = copy.begin_row(values.len() + soft + usize::from(version.is_some()) + 1);
        for (k, value) in &values {
            if let Err(reason) = self.write_value(*k, value, record, copy) {
                copy.undo_row(mark);
                return Err(self.bad_value(*k, reason).into());
            }
        }
        if let Some(SoftDelete { column, marker }) = self.soft_delete {
            let col = &self.table.columns[column as usize];
            let written = match marker {
                Marker::Flag => {
                    copy.bytes(&[1]);
                    Ok(())
                }
                Marker::Time => write_meta(&Meta::Timestamp, col, record, copy),
            };
            if let Err(reason) = written {
                copy.undo_row(mark);
                return Err(MapError::BadValue {
                    column: col.name.clone(),
                    sql_type: col.sql_type.clone(),
                    origin: "the delete's Kafka timestamp (soft_delete_column)".into(),
                    reason,
                }
                .into());
            }
        }
        if let Some((column, v)) = &version {
            let written = match v {
                Ok(n) => {
                    copy.bytes(&n.to_be_bytes());
                    Ok(())
                }
                Err(value) => self.write_value(*column, value, record, copy),
            };
            if let Err(reason) = written {
                copy.undo_row(mark);
                return Err(self.bad_value(*column, reason).into());
            }
        }
        copy.bytes(&ordinal.to_be_bytes());
        copy.end_row(mark);
        deletes.note(
            ordinal,
            record,
            keep.then(|| OwnedRecord::from_view(record)),
        );
        rows.next_ordinal += 1;
        Ok(())
    }
}
