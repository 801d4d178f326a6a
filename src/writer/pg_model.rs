//! An in-memory model of how PostgreSQL applies a write's planned rounds, and of applying the
//! same records one at a time, for the property test of `unique_rounds::plan`.
//!
//! The table is `(k PRIMARY KEY, email UNIQUE NULLS DISTINCT, n)`, `email` and `n` defaulting
//! to NULL. What the model takes from PostgreSQL, and nothing more:
//! - A round is the writer's statements over that round's staged rows: first the `DELETE …
//!   USING` of its deletes (hard deletes), then the merge of its upserts, then (soft deletes)
//!   the `UPDATE` that marks its deleted keys that have a row.
//! - The merge (`INSERT … ON CONFLICT (k) DO UPDATE`, or the update-then-insert of the
//!   column-by-column merge) visits its rows in an order of its own: the model takes any
//!   order it is given (`order`). A row updates the key's row in the columns its record
//!   carried, or inserts one with the defaults for the others.
//! - A non-deferrable unique index is checked row by row, at the moment each row is inserted
//!   or updated, against the rows as they are then (not at the end of the statement); NULLs
//!   never collide. An index entry that does not change is not checked again.
//! - The same key twice in one merge is an error (`ON CONFLICT DO UPDATE command cannot
//!   affect row a second time`).
//! - A statement that fails leaves nothing: the writer's savepoint takes the whole range
//!   back, which the model does by keeping the state it started from.
//!
//! From the writer (`unique_write`): a range whose keys are distinct and whose upserts take
//! no value a different key holds (and leave no index column out) is one merge, unplanned;
//! others are planned. And from `transaction::apply_rows`: a range that fails is split in two halves
//! by ordinal, applied in order, down to one record, which is then refused (a dead letter, or
//! under `fail` the record the partition stops at); each range is planned afresh from the
//! table as it is then (the writer reads the stored values per range).

use std::collections::BTreeMap;

use foldhash::HashMap;

use super::unique_rounds::{plan, Change, Sets, Step, Stored};

/// One row of the model table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) email: Option<u8>,
    pub(crate) n: Option<u8>,
    /// Soft deletes mark the row instead of removing it.
    pub(crate) deleted: bool,
}

/// The model table: key to row.
pub(crate) type Table = BTreeMap<u8, Row>;

/// A record: an upsert carrying some columns (`None`: left out; `Some(None)`: NULL), or a
/// delete. A key change is a delete of the old key and an upsert of the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Upsert {
        key: u8,
        email: Option<Option<u8>>,
        n: Option<Option<u8>>,
    },
    Delete {
        key: u8,
    },
}

impl Record {
    fn key(&self) -> u8 {
        match self {
            Record::Upsert { key, .. } | Record::Delete { key } => *key,
        }
    }
}

/// How the model runs: soft deletes, and an index the planner cannot compare (as an
/// expression index is to the writer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode {
    pub(crate) soft_delete: bool,
    pub(crate) opaque: bool,
}

/// `record` applied to `table` alone; `Err` where PostgreSQL refuses it (the email is held by
/// another key).
fn apply_one(table: &mut Table, record: &Record, soft: bool) -> Result<(), ()> {
    match record {
        Record::Delete { key } if soft => {
            if let Some(row) = table.get_mut(key) {
                row.deleted = true;
            }
        }
        Record::Delete { key } => {
            table.remove(key);
        }
        Record::Upsert { key, email, n } => {
            let old = table.get(key).cloned();
            let mut row = old.clone().unwrap_or(Row {
                email: None,
                n: None,
                deleted: false,
            });
            if let Some(email) = email {
                row.email = *email;
            }
            if let Some(n) = n {
                row.n = *n;
            }
            let changed = old.as_ref().map(|o| o.email) != Some(row.email);
            if let (true, Some(e)) = (changed, row.email) {
                if table.iter().any(|(k, r)| k != key && r.email == Some(e)) {
                    return Err(());
                }
            }
            table.insert(*key, row);
        }
    }
    Ok(())
}

/// The records applied one at a time in order, each refused one skipped: the table, and the
/// indexes of the refused records.
pub(crate) fn serial(mut table: Table, records: &[Record], mode: Mode) -> (Table, Vec<usize>) {
    let mut refused = Vec::new();
    for (i, record) in records.iter().enumerate() {
        if apply_one(&mut table, record, mode.soft_delete).is_err() {
            refused.push(i);
        }
    }
    (table, refused)
}

/// The steps the writer gives the planner for `records`, and the stored values it reads.
fn planner_input(
    table: &Table,
    records: &[Record],
    mode: Mode,
) -> (Vec<Step>, HashMap<Vec<u8>, Vec<Stored>>) {
    let steps = records
        .iter()
        .map(|r| Step {
            key: vec![r.key()],
            change: match r {
                Record::Delete { .. } => Change::Delete,
                Record::Upsert { email, .. } => Change::Upsert(vec![match email {
                    _ if mode.opaque => Sets::Opaque,
                    None => Sets::Kept,
                    Some(None) => Sets::Null,
                    Some(Some(e)) => Sets::Value(vec![*e]),
                }]),
            },
        })
        .collect();
    let stored = table
        .iter()
        .map(|(k, row)| {
            let value = match row.email {
                _ if mode.opaque => Stored::Opaque,
                None => Stored::Null,
                Some(e) => Stored::Value(vec![e]),
            };
            (vec![*k], vec![value])
        })
        .collect();
    (steps, stored)
}

/// One range planned and applied as PostgreSQL would, the merge visiting its rows in the
/// order `order` gives them (a sort key per key); `Err` when a statement fails.
fn apply_planned(table: &Table, records: &[Record], mode: Mode, order: u64) -> Result<Table, ()> {
    let (steps, stored) = planner_input(table, records, mode);
    let rounds = if quick(table, records, mode) {
        vec![1; records.len()]
    } else {
        plan(&steps, &stored, 1, mode.soft_delete)
    };
    let mut table = table.clone();
    let last = rounds.iter().copied().max().unwrap_or(0);
    for round in 1..=last {
        let in_round: Vec<&Record> = records
            .iter()
            .zip(&rounds)
            .filter(|(_, &r)| r == round)
            .map(|(rec, _)| rec)
            .collect();
        let mut keys: Vec<u8> = in_round.iter().map(|r| r.key()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(());
        }
        let deletes = in_round
            .iter()
            .filter(|r| matches!(r, Record::Delete { .. }));
        if !mode.soft_delete {
            for d in deletes.clone() {
                apply_one(&mut table, d, false)?;
            }
        }
        let mut upserts: Vec<&&Record> = in_round
            .iter()
            .filter(|r| matches!(r, Record::Upsert { .. }))
            .collect();
        upserts.sort_by_key(|r| order_of(order, r.key()));
        for u in upserts {
            apply_one(&mut table, u, mode.soft_delete)?;
        }
        if mode.soft_delete {
            for d in deletes {
                apply_one(&mut table, d, true)?;
            }
        }
    }
    Ok(table)
}

/// The writer's check before it reads (`UniqueOrder::hazard`): keys distinct, no index
/// opaque, no upsert leaving the email out, none taking an email a different key holds now.
/// Then the range is one merge without planning.
fn quick(table: &Table, records: &[Record], mode: Mode) -> bool {
    let mut keys: Vec<u8> = records.iter().map(Record::key).collect();
    keys.sort_unstable();
    let distinct = keys.windows(2).all(|w| w[0] != w[1]);
    let hazard = records.iter().any(|r| match r {
        Record::Upsert { email: None, .. } => true,
        Record::Upsert {
            key,
            email: Some(Some(e)),
            ..
        } => table
            .iter()
            .any(|(k, row)| k != key && row.email == Some(*e)),
        _ => false,
    });
    distinct && !mode.opaque && !hazard
}

/// A key's place in a merge's own order.
fn order_of(order: u64, key: u8) -> u64 {
    (u64::from(key) + 1).wrapping_mul(order | 1).rotate_left(17) ^ order
}

/// The writer over a whole write: one planned range, split in halves where it fails, down to
/// single records that are refused. The table, the refused records' indexes, and whether the
/// first (whole) range went in without a split.
pub(crate) fn writer(
    mut table: Table,
    records: &[Record],
    mode: Mode,
    order: u64,
) -> (Table, Vec<usize>, bool) {
    let mut refused = Vec::new();
    let mut ranges = std::collections::VecDeque::from([(0, records.len())]);
    let mut whole = true;
    while let Some((lo, hi)) = ranges.pop_front() {
        if lo == hi {
            continue;
        }
        match apply_planned(&table, &records[lo..hi], mode, order) {
            Ok(t) => table = t,
            Err(()) => {
                whole = false;
                if hi - lo == 1 {
                    refused.push(lo);
                } else {
                    let mid = lo + (hi - lo) / 2;
                    ranges.push_front((mid, hi));
                    ranges.push_front((lo, mid));
                }
            }
        }
    }
    (table, refused, whole)
}
