//! Batches: records encoded for COPY, accumulated per writer until a limit closes them.
//!
//! A sealed batch is everything one transaction needs: the fenced offset advances and the rows,
//! already in the bytes COPY reads.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::mapping::TableRows;
use crate::offsets::OffsetAdvance;
use crate::schema::{quote_ident, Table};

/// One COPY statement and its data.
pub struct CopyChunk {
    pub statement: String,
    pub data: Bytes,
    pub rows: usize,
}

/// What one transaction writes; built by the consumer thread, consumed by a writer.
pub struct Batch {
    pub id: u64,
    pub lane: usize,
    pub offsets: Vec<OffsetAdvance>,
    pub copies: Vec<CopyChunk>,
    /// Records consumed (each is a row today; later some may be offset-only).
    pub records: usize,
    pub rows: usize,
    pub bytes: usize,
    pub opened_at: Instant,
}

impl Batch {
    /// Where the batch starts and ends in each partition, for log lines.
    pub fn describe(&self) -> String {
        self.offsets
            .iter()
            .map(|a| match a.expected {
                Some(from) => format!("{}@{}..{}", a.tp, from, a.next),
                None => format!("{}@..{}", a.tp, a.next),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The batch a writer lane is filling.
#[derive(Default)]
pub struct OpenBatch {
    /// Indexed by table number; created on a table's first record.
    tables: Vec<Option<TableRows>>,
    pub records: usize,
    pub bytes: usize,
    pub opened_at: Option<Instant>,
}

impl OpenBatch {
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The rows for `table_idx`, created on first use.
    pub fn table_rows(&mut self, table_idx: usize, table: &Arc<Table>) -> &mut TableRows {
        if self.tables.len() <= table_idx {
            self.tables.resize_with(table_idx + 1, || None);
        }
        self.tables[table_idx].get_or_insert_with(|| TableRows::new(table.clone()))
    }

    /// Counts a record that has been encoded into this batch.
    pub fn record_added(&mut self, payload_bytes: usize) {
        self.records += 1;
        self.bytes += payload_bytes;
        self.opened_at.get_or_insert_with(Instant::now);
    }

    /// Drops everything (after a failure nothing buffered counts).
    pub fn clear(&mut self) {
        *self = OpenBatch::default();
    }

    /// Turns the open batch into a sealed one and starts over.
    pub fn seal(&mut self, id: u64, lane: usize, offsets: Vec<OffsetAdvance>) -> Batch {
        let open = std::mem::take(self);
        let mut copies = Vec::new();
        let mut rows = 0;
        for table_rows in open.tables.into_iter().flatten() {
            for (columns, buffer) in table_rows.shapes {
                if buffer.is_empty() {
                    continue;
                }
                let names: Vec<String> = columns
                    .iter()
                    .map(|&i| quote_ident(&table_rows.table.columns[i as usize].name))
                    .collect();
                let statement = format!(
                    "COPY {} ({}) FROM STDIN (FORMAT binary)",
                    table_rows.table.qualified(),
                    names.join(", ")
                );
                rows += buffer.rows();
                copies.push(CopyChunk {
                    statement,
                    rows: buffer.rows(),
                    data: buffer.finish(),
                });
            }
        }
        Batch {
            id,
            lane,
            offsets,
            copies,
            records: open.records,
            rows,
            bytes: open.bytes,
            opened_at: open.opened_at.unwrap_or_else(Instant::now),
        }
    }
}
