//! A batch's encoded rows for one table: COPY streams grouped by column list, each row's
//! ordinal, position and (where dead letters need it) record, and the keys to delete.

use std::fmt;
use std::sync::Arc;

use crate::pgcopy::CopyBuffer;
use crate::record::{OwnedRecord, RecordView};
use crate::schema::Table;

/// Rows with one column list, in one COPY stream.
pub struct Rows {
    pub columns: Vec<u16>,
    pub buffer: CopyBuffer,
    /// Each row's position among the batch's records for this table: the last per key wins,
    /// and a failed batch is split along them.
    pub ordinals: Vec<i64>,
    /// Each row's record, kept only where failed rows become dead letters.
    pub origins: Vec<OwnedRecord>,
    /// Each row's partition and offset, always kept: a refused row is named by them, and the
    /// rows after it in its partition are left out of the batch.
    pub positions: Vec<(i32, i64)>,
}

impl Rows {
    /// Created on first use, so a batch holds only the column lists (and deletes) it needs.
    pub(super) fn new(columns: Vec<u16>) -> Self {
        Self {
            columns,
            buffer: CopyBuffer::new(),
            ordinals: Vec::new(),
            origins: Vec::new(),
            positions: Vec::new(),
        }
    }

    /// Called only once a row is complete, so ordinals, positions and origins match the rows in
    /// the buffer one for one.
    pub(super) fn note(
        &mut self,
        ordinal: i64,
        record: &RecordView<'_>,
        origin: Option<OwnedRecord>,
    ) {
        self.ordinals.push(ordinal);
        self.positions.push((record.partition, record.offset));
        self.origins.extend(origin);
    }
}

/// Rows for one table, grouped by column list (a record that omits a defaulted column needs a
/// COPY without that column so that the default applies), and the keys to delete.
pub struct TableRows {
    pub table: Arc<Table>,
    pub shapes: Vec<Rows>,
    /// Upsert mode: key columns and ordinal of each delete.
    pub deletes: Option<Rows>,
    /// Upsert key column indices; `None` in insert mode.
    pub upsert_keys: Option<Arc<[u16]>>,
    /// Keep each row's record (for dead letters of rows PostgreSQL rejects).
    pub keep_origins: bool,
    /// The next record's position in the batch.
    pub(super) next_ordinal: i64,
    /// Reused column list, so encoding a record allocates none.
    pub(super) scratch: Vec<u16>,
}

/// A count, not the encoded bytes.
impl fmt::Debug for TableRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableRows({}, {} rows)", self.table, self.rows())
    }
}

impl TableRows {
    /// `keep_origins` copies every record; only topics that dead-letter rejected rows pay for it.
    pub fn new(table: Arc<Table>, upsert_keys: Option<Arc<[u16]>>, keep_origins: bool) -> Self {
        Self {
            table,
            shapes: Vec::new(),
            deletes: None,
            upsert_keys,
            keep_origins,
            next_ordinal: 0,
            scratch: Vec::new(),
        }
    }

    /// The rows with these columns; `None` when an upsert batch already holds another
    /// column list.
    pub(super) fn buffer_for(&mut self, columns: &[u16]) -> Option<&mut Rows> {
        let pos = match self.shapes.iter().position(|r| r.columns == columns) {
            Some(pos) => pos,
            None if self.upsert_keys.is_some() && !self.shapes.is_empty() => return None,
            None => {
                self.shapes.push(Rows::new(columns.to_vec()));
                self.shapes.len() - 1
            }
        };
        Some(&mut self.shapes[pos])
    }

    /// Rows written, deletes included.
    pub fn rows(&self) -> usize {
        self.shapes
            .iter()
            .chain(self.deletes.iter())
            .map(|r| r.buffer.rows())
            .sum()
    }

    /// Encoded size; lets tests show that a failed record leaves nothing behind.
    pub fn bytes(&self) -> usize {
        self.shapes
            .iter()
            .chain(self.deletes.iter())
            .map(|r| r.buffer.len())
            .sum()
    }
}
