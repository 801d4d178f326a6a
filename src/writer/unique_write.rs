//! Applying a range of an upsert write whose table has unique indexes besides its key: the
//! rows are staged, what they set and what their keys hold in the table are read back (one
//! read per staging table, in PostgreSQL's own binary form of each value, so equal values are
//! equal bytes), `unique_rounds::plan` orders them, and the write goes in those rounds. The
//! common range (no two rows meet in an index) is one round: staged once, one merge, as
//! before, plus the read.

use foldhash::{HashMap, HashMapExt};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row as _, ValueRef as _};

use super::copy::{range_data, send_copy};
use super::unique_rounds::{plan, Change, Sets, Step, Stored};
use crate::batch::TableWrite;
use crate::unique_order::UniqueOrder;

/// Applies the rows of `write` in `lo..hi` in unique rounds; the merges beyond the first
/// they took. `distinct` says the write names each key once.
pub(super) async fn apply(
    conn: &mut PgConnection,
    write: &TableWrite,
    order: &UniqueOrder,
    distinct: bool,
    lo: i64,
    hi: i64,
) -> Result<u32, sqlx::Error> {
    for staged in &write.copies {
        if let Some(data) = range_data(write, staged, lo, hi, None) {
            send_copy(conn, &staged.statement, data).await?;
        }
    }
    // The common range: nothing could meet, so nothing needs ordering or reading.
    if let (true, Some(hazard)) = (distinct, &order.hazard) {
        let hazard: bool = sqlx::query_scalar(hazard).fetch_one(&mut *conn).await?;
        if !hazard {
            return run(conn, &write.statements).await.map(|()| 0);
        }
    }
    let mut steps: Vec<(i64, Step)> = Vec::new();
    let mut stored: HashMap<Vec<u8>, Vec<Stored>> = HashMap::new();
    for row in sqlx::query(&order.read_upserts)
        .fetch_all(&mut *conn)
        .await?
    {
        read_row(&row, order, true, &mut steps, &mut stored)?;
    }
    if let Some(read) = &order.read_deletes {
        for row in sqlx::query(read).fetch_all(&mut *conn).await? {
            read_row(&row, order, false, &mut steps, &mut stored)?;
        }
    }
    steps.sort_unstable_by_key(|(ordinal, _)| *ordinal);
    let (ordinals, steps): (Vec<i64>, Vec<Step>) = steps.into_iter().unzip();
    let rounds = plan(&steps, &stored, order.indexes.len(), order.soft_delete);
    let last = rounds.iter().copied().max().unwrap_or(1);
    if last <= 1 {
        return run(conn, &write.statements).await.map(|()| 0);
    }
    // Each round is staged on its own: the statements end by emptying the staging tables.
    if let Some(empty) = write.statements.last() {
        sqlx::query(empty).execute(&mut *conn).await?;
    }
    let round_of: HashMap<i64, u32> = ordinals.into_iter().zip(rounds).collect();
    for round in 1..=last {
        let mut copied = false;
        for staged in &write.copies {
            let in_round = |i: usize| {
                staged
                    .ordinals
                    .get(i)
                    .and_then(|o| round_of.get(o))
                    .is_some_and(|&r| r == round)
            };
            if let Some(data) = range_data(write, staged, lo, hi, Some(&in_round)) {
                send_copy(conn, &staged.statement, data).await?;
                copied = true;
            }
        }
        if copied {
            run(conn, &write.statements).await?;
        }
    }
    Ok(last - 1)
}

/// One row of a read: its step, and what its key holds in the table.
fn read_row(
    row: &PgRow,
    order: &UniqueOrder,
    upsert: bool,
    steps: &mut Vec<(i64, Step)>,
    stored: &mut HashMap<Vec<u8>, Vec<Stored>>,
) -> Result<(), sqlx::Error> {
    let columns = order.columns.len();
    let ordinal: i64 = row.try_get(0)?;
    let mut at = 1;
    let mask: Vec<u8> = if upsert {
        at += 1;
        row.try_get(1)?
    } else {
        Vec::new()
    };
    let mut key = Vec::new();
    for i in at..at + order.keys {
        push_field(&mut key, field(row, i)?.as_deref());
    }
    at += order.keys;
    let own: Vec<Option<Vec<u8>>> = if upsert {
        let own = (at..at + columns)
            .map(|i| field(row, i))
            .collect::<Result<_, _>>()?;
        at += columns;
        own
    } else {
        Vec::new()
    };
    let exists: bool = row.try_get(at)?;
    at += 1;
    if exists && !stored.contains_key(&key) {
        let held: Vec<Option<Vec<u8>>> = (at..at + columns)
            .map(|i| field(row, i))
            .collect::<Result<_, _>>()?;
        let values = order
            .indexes
            .iter()
            .map(|index| match index {
                None => Stored::Opaque,
                Some(places) => match value(places, &held) {
                    Some(v) => Stored::Value(v),
                    None => Stored::Null,
                },
            })
            .collect();
        stored.insert(key.clone(), values);
    }
    let change = if upsert {
        let carried = |c: u16| {
            mask.get(c as usize / 8)
                .is_some_and(|byte| byte & (1 << (c % 8)) != 0)
        };
        Change::Upsert(
            order
                .indexes
                .iter()
                .zip(&order.fresh)
                .map(|(index, &fresh)| {
                    let Some(places) = index else {
                        return Sets::Opaque;
                    };
                    let carried: Vec<bool> =
                        places.iter().map(|&p| carried(order.columns[p])).collect();
                    if carried.iter().all(|&c| !c) {
                        if fresh {
                            Sets::Fresh
                        } else {
                            Sets::Kept
                        }
                    } else if carried.iter().any(|&c| !c) {
                        // Part carried, part kept: the planner cannot tell the value.
                        Sets::Opaque
                    } else {
                        match value(places, &own) {
                            Some(v) => Sets::Value(v),
                            None => Sets::Null,
                        }
                    }
                })
                .collect(),
        )
    } else {
        Change::Delete
    };
    steps.push((ordinal, Step { key, change }));
    Ok(())
}

/// An index's value: its columns' bytes, each told apart by its length; `None` when one is
/// NULL (NULLs never collide).
fn value(places: &[usize], fields: &[Option<Vec<u8>>]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for &p in places {
        push_field(&mut out, Some(fields.get(p)?.as_deref()?));
    }
    Some(out)
}

/// Appends a field as COPY's binary form does: its length (-1 for NULL), then its bytes.
fn push_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        Some(bytes) => {
            out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        None => out.extend_from_slice(&(-1_i32).to_be_bytes()),
    }
}

/// Column `i` of `row` in its binary form; `None` for NULL.
fn field(row: &PgRow, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(None);
    }
    raw.as_bytes()
        .map(|b| Some(b.to_vec()))
        .map_err(|source| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source,
        })
}

/// Runs a write's statements (the merge, the deletes, emptying the staging tables).
async fn run(conn: &mut PgConnection, statements: &[String]) -> Result<(), sqlx::Error> {
    for statement in statements {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}
