//! A batch's encoded rows for one table: COPY streams grouped by column list, each row's
//! ordinal, position and (where dead letters need it) record, and the keys to delete.

use std::fmt;
use std::sync::Arc;

use crate::pgcopy::CopyBuffer;
use crate::record::{OwnedRecord, RecordView};
use crate::schema::Table;

use super::SoftDelete;

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
    /// Upsert mode: which columns the rows carried, so the merge updates only those.
    pub presence: Presence,
    /// Keep each row's record (for dead letters of rows PostgreSQL rejects).
    pub keep_origins: bool,
    /// The position of a truncate that empties the table before these rows (it is always
    /// the first of its table in a batch).
    pub truncate: Option<(i32, i64)>,
    /// Deletes mark this column instead of removing rows.
    pub(crate) soft_delete: Option<SoftDelete>,
    /// Rows that kept columns Debezium sent as unavailable (TOASTed and unchanged).
    pub placeholders: Placeholded,
    /// Insert mode with `on_conflict = "ignore"`: the first row per key is inserted unless
    /// the key has a row, and nothing is updated.
    pub first_wins: bool,
    /// The next record's position in the batch.
    pub(super) next_ordinal: i64,
    /// Reused column list, so encoding a record allocates none.
    pub(super) scratch: Vec<u16>,
    /// Reused presence mask, likewise.
    pub(super) mask_scratch: Vec<u8>,
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
            presence: Presence::default(),
            keep_origins,
            truncate: None,
            soft_delete: None,
            placeholders: Placeholded::default(),
            first_wins: false,
            next_ordinal: 0,
            scratch: Vec::new(),
            mask_scratch: Vec::new(),
        }
    }

    /// The rows with these columns. Upsert rows all have every column (with a presence mask),
    /// so an upsert batch has one shape whatever its records carry.
    pub(super) fn buffer_for(&mut self, columns: &[u16]) -> &mut Rows {
        let pos = match self.shapes.iter().position(|r| r.columns == columns) {
            Some(pos) => pos,
            None => {
                self.shapes.push(Rows::new(columns.to_vec()));
                self.shapes.len() - 1
            }
        };
        &mut self.shapes[pos]
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

/// The upsert rows that held Debezium's unavailable-value placeholder: they keep the stored
/// value of those columns, which needs a stored row (the merge checks it first), and they are
/// counted when they commit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placeholded {
    /// Their ordinals, in order.
    pub ordinals: Vec<i64>,
    /// The columns any of them held it in, in column order.
    pub columns: Vec<u16>,
}

impl Placeholded {
    /// Called once per such row, after it is written.
    pub(super) fn note(&mut self, ordinal: i64, columns: &[u16]) {
        self.ordinals.push(ordinal);
        for &c in columns {
            if let Err(at) = self.columns.binary_search(&c) {
                self.columns.insert(at, c);
            }
        }
    }

    /// Whether no row held the placeholder.
    pub fn is_empty(&self) -> bool {
        self.ordinals.is_empty()
    }
}

/// The column lists an upsert batch's rows carried. Each row has every column and a mask of
/// the ones its record carried (absent ones are written NULL but are not the record's NULL);
/// while every row carried the same list, the merge is the plain one over that list, and only
/// a batch whose rows differ pays for merging column by column.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Presence {
    /// The first row's columns.
    first: Option<Vec<u16>>,
    /// Once rows differ: per column, whether any row carried it.
    any: Option<Vec<bool>>,
}

impl Presence {
    /// Called once per upsert row, after it is written.
    pub(super) fn note(&mut self, carried: &[u16]) {
        let Some(first) = &self.first else {
            self.first = Some(carried.to_vec());
            return;
        };
        let any = match &mut self.any {
            Some(any) => any,
            None if first == carried => return,
            None => {
                let mut any = Vec::new();
                mark(&mut any, first);
                self.any.insert(any)
            }
        };
        mark(any, carried);
    }

    /// The columns every row carried, or `None` when rows differ (or there are none).
    pub fn uniform(&self) -> Option<&[u16]> {
        match (&self.first, &self.any) {
            (Some(first), None) => Some(first),
            _ => None,
        }
    }

    /// Whether no upsert row was noted.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Whether any row carried column `i`.
    pub fn carried_by_any(&self, i: u16) -> bool {
        match (&self.first, &self.any) {
            (_, Some(any)) => any.get(i as usize).copied().unwrap_or(false),
            (Some(first), None) => first.contains(&i),
            (None, None) => false,
        }
    }
}

/// Sets the flags of `columns` in `any`, growing it as needed.
fn mark(any: &mut Vec<bool>, columns: &[u16]) {
    for &c in columns {
        let c = c as usize;
        if any.len() <= c {
            any.resize(c + 1, false);
        }
        any[c] = true;
    }
}

/// The presence mask of a row: bit `i` (PostgreSQL's `get_bit(mask, i)`, which counts bits
/// from the low end of each byte) set when column `i` was carried.
pub(super) fn presence_mask(carried: &[u16], columns: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(columns.div_ceil(8), 0);
    for &c in carried {
        out[c as usize / 8] |= 1 << (c % 8);
    }
}
