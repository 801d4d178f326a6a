//! Rounds: the rows of one staged write, split so that no key has two rows in one round.
//!
//! A write's merge folds each key's rows into one (the last upsert wins, a delete removes what
//! came before). That reaches the state applying the records one at a time would, but only
//! when every record would have been taken: a superseded record PostgreSQL would refuse on its
//! own (a `CHECK`, a partition bound, `NOT NULL`, a trigger) was never shown to it, and so was
//! neither a dead letter nor a stop, just gone. A write whose keys repeat is therefore applied
//! in rounds, round `r` holding each key's `r`-th record in record order: each round is one
//! merge in which every key has one row, so every record is applied as it would be alone, in
//! its key's order. A write whose keys are all distinct (most) is one round, as before.
//!
//! Rounds cost a merge each, and a key updated a thousand times in a batch is a thousand
//! merges. Where the table refuses a row for its own values only (`schema::RowRules`) and the
//! records carried the same columns, a probe stands for them (`Merge::probe`): the repeated
//! keys' records are offered as the rows they propose alone, under a savepoint taken back,
//! and the one merge follows.
//!
//! Keys are compared by a hash of their encoded bytes: equal bytes are equal values. Two values
//! PostgreSQL holds equal but encodes apart (`numeric` `1.0` and `1.00`) fall in one round and
//! are folded there, as every key was before rounds.

use std::hash::BuildHasher as _;

use foldhash::{HashMap, HashMapExt};
use sqlx::PgConnection;

use super::copy::{range_data, send_copy};
use super::savepoint::take_back;
use crate::batch::{StagedCopy, TableWrite};

/// Each staged row's round, from 1; a write of one round keeps no numbers.
#[derive(Debug, Clone, Default)]
pub(super) struct Rounds {
    /// Per copy, per row; empty when there is one round.
    per_copy: Vec<Vec<u32>>,
    count: u32,
    /// The ordinals of the rows whose key has more than one, in order.
    repeated: Vec<i64>,
    /// Where the table orders its rows by unique indexes besides the key
    /// (`unique_write`): the merges beyond the first its planned rounds cost.
    planned: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Rounds {
    /// One round: the rows' keys are distinct, or the write has no keys (insert mode).
    pub(super) fn one() -> Self {
        Self {
            per_copy: Vec::new(),
            count: 1,
            repeated: Vec::new(),
            planned: Default::default(),
        }
    }

    /// The rounds of `copies`, whose rows name their key by the fields at `key_fields[i]` of
    /// copy `i` (in the same key order in every copy). A copy without key positions, which
    /// only a bug upstream could make, leaves the write in one round, as before rounds.
    pub(super) fn of(copies: &[StagedCopy], key_fields: &[Option<Vec<usize>>]) -> Self {
        let mut rows: Vec<(i64, usize, usize)> = Vec::new();
        for (c, copy) in copies.iter().enumerate() {
            if key_fields.get(c).is_none_or(Option::is_none) {
                return Self::one();
            }
            rows.extend(copy.ordinals.iter().enumerate().map(|(r, &o)| (o, c, r)));
        }
        rows.sort_unstable_by_key(|&(ordinal, _, _)| ordinal);
        // Keys by a 64-bit hash of their bytes: a collision (about one in 10^11 for a batch of
        // 10,000 keys) only gives a key a round it did not need.
        let hashing = foldhash::fast::FixedState::default();
        let mut seen: HashMap<u64, u32> = HashMap::with_capacity(rows.len());
        let mut per_copy: Vec<Vec<u32>> =
            copies.iter().map(|c| vec![1; c.ordinals.len()]).collect();
        let mut count = 1;
        let mut key = Vec::new();
        let mut hashed = Vec::with_capacity(rows.len());
        for (ordinal, c, r) in rows {
            key.clear();
            let Some(fields) = &key_fields[c] else {
                return Self::one();
            };
            if copies[c].data.fields_of(r, fields, &mut key).is_none() {
                return Self::one();
            }
            let hash = hashing.hash_one(key.as_slice());
            hashed.push((ordinal, hash));
            let n = seen.entry(hash).or_insert(0);
            *n += 1;
            let round = *n;
            per_copy[c][r] = round;
            count = count.max(round);
        }
        if count == 1 {
            return Self::one();
        }
        let repeated = hashed
            .into_iter()
            .filter(|(_, hash)| seen.get(hash).is_some_and(|&n| n > 1))
            .map(|(ordinal, _)| ordinal)
            .collect();
        Self {
            per_copy,
            count,
            repeated,
            planned: Default::default(),
        }
    }

    /// The ordinals in `lo..hi` of the rows whose key has more than one row in the write.
    fn repeated(&self, lo: i64, hi: i64) -> Vec<i64> {
        let from = self.repeated.partition_point(|&o| o < lo);
        let to = self.repeated.partition_point(|&o| o < hi);
        self.repeated[from..to].to_vec()
    }

    /// Applies the rows of `write` in `lo..hi`, whose keys repeat: by the probe and one merge
    /// where the write has one, else a COPY and a merge per round (the statements end by
    /// emptying the staging tables, so each round merges only its own rows).
    pub(super) async fn apply(
        &self,
        conn: &mut PgConnection,
        write: &TableWrite,
        lo: i64,
        hi: i64,
    ) -> Result<(), sqlx::Error> {
        let Some(probe) = &write.probe else {
            for round in 1..=self.count {
                let mut copied = false;
                for (c, staged) in write.copies.iter().enumerate() {
                    let in_round = |i: usize| self.of_row(c, i) == round;
                    if let Some(data) = range_data(write, staged, lo, hi, Some(&in_round)) {
                        send_copy(conn, &staged.statement, data).await?;
                        copied = true;
                    }
                }
                if copied {
                    run(conn, &write.statements).await?;
                }
            }
            return Ok(());
        };
        for staged in &write.copies {
            if let Some(data) = range_data(write, staged, lo, hi, None) {
                send_copy(conn, &staged.statement, data).await?;
            }
        }
        // Taken back whether it passes or not: the merge writes the rows.
        sqlx::query("SAVEPOINT kps_probe")
            .execute(&mut *conn)
            .await?;
        sqlx::query(probe)
            .bind(self.repeated(lo, hi))
            .execute(&mut *conn)
            .await?;
        take_back(conn, "kps_probe").await?;
        run(conn, &write.statements).await
    }

    /// The merges beyond the first `write` takes: none where its probe stands for the rounds;
    /// those its unique rounds took where it has them.
    pub(super) fn extra_merges(&self, write: &TableWrite) -> u32 {
        if write.unique.is_some() {
            return self.planned.load(std::sync::atomic::Ordering::Relaxed);
        }
        match write.probe {
            Some(_) => 0,
            None => self.count - 1,
        }
    }

    /// Adds the merges beyond the first that a range's unique rounds took.
    pub(super) fn note_planned(&self, extra: u32) {
        self.planned
            .fetch_add(extra, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many rounds the write takes.
    pub(super) fn count(&self) -> u32 {
        self.count
    }

    /// The round of row `row` of copy `copy`.
    fn of_row(&self, copy: usize, row: usize) -> u32 {
        self.per_copy
            .get(copy)
            .and_then(|rounds| rounds.get(row))
            .copied()
            .unwrap_or(1)
    }
}

/// Runs a write's statements (the merge, the deletes, emptying the staging tables).
async fn run(conn: &mut PgConnection, statements: &[String]) -> Result<(), sqlx::Error> {
    for statement in statements {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgcopy::CopyBuffer;

    /// A copy of rows `(key, value)` with the given ordinals.
    fn copy(rows: &[(&str, &str)], ordinals: &[i64]) -> StagedCopy {
        let mut buffer = CopyBuffer::new();
        for (key, value) in rows {
            let mark = buffer.begin_row(2);
            buffer.bytes(key.as_bytes());
            buffer.bytes(value.as_bytes());
            buffer.end_row(mark);
        }
        StagedCopy {
            statement: String::new(),
            data: buffer.finish_rows(),
            ordinals: ordinals.to_vec(),
            origins: Vec::new(),
            positions: ordinals.iter().map(|&o| (0, o)).collect(),
        }
    }

    /// Each key's rows take rounds 1, 2, … in ordinal order, across copies (upserts and
    /// deletes), and keys that never repeat stay in round 1.
    #[test]
    fn a_keys_nth_record_is_in_round_n_across_copies() {
        let upserts = copy(
            &[("a", "1"), ("b", "1"), ("a", "2"), ("c", "x")],
            &[0, 1, 3, 5],
        );
        // Deletes stage the key alone: field 0 here too.
        let deletes = copy(&[("a", ""), ("b", "")], &[2, 4]);
        let rounds = Rounds::of(&[upserts, deletes], &[Some(vec![0]), Some(vec![0])]);
        assert_eq!(rounds.count(), 3);
        let upsert_rounds: Vec<u32> = (0..4).map(|r| rounds.of_row(0, r)).collect();
        assert_eq!(upsert_rounds, [1, 1, 3, 1]);
        assert_eq!((rounds.of_row(1, 0), rounds.of_row(1, 1)), (2, 2));
        // Keys a and b repeat, c does not.
        assert_eq!(rounds.repeated(0, 6), [0, 1, 2, 3, 4]);
        assert_eq!(rounds.repeated(2, 4), [2, 3]);
    }

    /// Distinct keys are one round and keep no numbers; a key is all its fields, each told
    /// apart by its length, so `("ab", "c")` is not `("a", "bc")`.
    #[test]
    fn distinct_keys_are_one_round() {
        let rows = copy(&[("ab", "c"), ("a", "bc"), ("b", "c")], &[0, 1, 2]);
        let rounds = Rounds::of(&[rows], &[Some(vec![0, 1])]);
        assert_eq!(rounds.count(), 1);
        assert!(rounds.per_copy.is_empty());
        let same = copy(&[("k", "v"), ("k", "w")], &[0, 1]);
        assert_eq!(Rounds::of(&[same], &[Some(vec![0])]).count(), 2);
        let by_both = copy(&[("k", "v"), ("k", "w")], &[0, 1]);
        assert_eq!(Rounds::of(&[by_both], &[Some(vec![0, 1])]).count(), 1);
    }

    /// A copy without key positions cannot be split: one round, as before rounds existed.
    #[test]
    fn unknown_key_positions_leave_one_round() {
        let rows = copy(&[("k", "v"), ("k", "w")], &[0, 1]);
        assert_eq!(Rounds::of(&[rows], &[None]).count(), 1);
    }
}
