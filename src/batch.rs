//! Batches: records encoded for COPY, accumulated per writer until a limit closes them.
//!
//! A sealed batch is everything one transaction needs: the fenced offset advances and the rows,
//! already in the bytes COPY reads.

use std::time::Instant;

use bytes::Bytes;

use crate::mapping::{TableRows, TopicMapper};
use crate::offsets::OffsetAdvance;
use crate::schema::{quote_ident, Table};

/// The ordinal column of staging tables: a record's position in its batch.
const ORDINAL: &str = "__kps_ord";

/// One COPY statement and its data, and for upserts the statement that merges the staged rows.
pub struct CopyChunk {
    pub statement: String,
    pub data: Bytes,
    pub rows: usize,
    pub merge: Option<Merge>,
}

/// Upsert: rows are copied into a session-local staging table, then merged in one statement
/// that keeps the last record per key.
pub struct Merge {
    /// Name of the staging table; a writer creates it once per connection.
    pub staging: String,
    /// Creates the staging table (run once per connection).
    pub create: [String; 2],
    pub statement: String,
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
    pub fn table_rows(&mut self, table_idx: usize, mapper: &TopicMapper) -> &mut TableRows {
        if self.tables.len() <= table_idx {
            self.tables.resize_with(table_idx + 1, || None);
        }
        self.tables[table_idx].get_or_insert_with(|| mapper.new_rows())
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
            let table = &table_rows.table;
            for (columns, buffer) in table_rows.shapes {
                if buffer.is_empty() {
                    continue;
                }
                let names: Vec<String> = columns
                    .iter()
                    .map(|&i| quote_ident(&table.columns[i as usize].name))
                    .collect();
                let (statement, merge) = match &table_rows.upsert_keys {
                    None => (copy_statement(&table.qualified(), &names), None),
                    Some(keys) => {
                        let merge = merge_plan(table, &columns, keys);
                        let mut staged = names.clone();
                        staged.push(quote_ident(ORDINAL));
                        (copy_statement(&merge.staging, &staged), Some(merge))
                    }
                };
                rows += buffer.rows();
                copies.push(CopyChunk {
                    statement,
                    rows: buffer.rows(),
                    data: buffer.finish(),
                    merge,
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

fn copy_statement(target: &str, columns: &[String]) -> String {
    format!(
        "COPY {target} ({}) FROM STDIN (FORMAT binary)",
        columns.join(", ")
    )
}

/// The staging table and the merge for an upsert of `columns` keyed by `keys`.
fn merge_plan(table: &Table, columns: &[u16], keys: &[u16]) -> Merge {
    let staging = format!(
        "pg_temp.{}",
        quote_ident(&format!("kps_stage_{}", table.oid))
    );
    let name = |i: &u16| quote_ident(&table.columns[*i as usize].name);
    let cols: Vec<String> = columns.iter().map(name).collect();
    let key_cols: Vec<String> = keys.iter().map(name).collect();
    let updates: Vec<String> = columns
        .iter()
        .filter(|c| !keys.contains(c))
        .map(|c| format!("{0} = EXCLUDED.{0}", name(c)))
        .collect();
    let action = if updates.is_empty() {
        "DO NOTHING".to_string()
    } else {
        format!("DO UPDATE SET {}", updates.join(", "))
    };
    let statement = format!(
        "INSERT INTO {target} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {staging} \
         ORDER BY {keys}, {ord} DESC ON CONFLICT ({keys}) {action}",
        target = table.qualified(),
        cols = cols.join(", "),
        keys = key_cols.join(", "),
        ord = quote_ident(ORDINAL),
    );
    // No constraints or defaults in staging: absent columns are simply not merged.
    let create = [
        format!(
            "CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS SELECT * FROM {target} WITH NO DATA",
            name = quote_ident(&format!("kps_stage_{}", table.oid)),
            target = table.qualified(),
        ),
        format!("ALTER TABLE {staging} ADD COLUMN IF NOT EXISTS {} bigint", quote_ident(ORDINAL)),
    ];
    Merge {
        staging,
        create,
        statement,
    }
}
