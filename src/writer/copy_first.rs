//! Upserts of new keys by a plain COPY into the table.
//!
//! An upsert batch whose records all carried the same columns, and whose keys are distinct and
//! not yet in the table, ends exactly as an insert of those columns would. COPY straight into
//! the table writes each row once; staging and merging writes it twice and probes the key for
//! every row, about twice the cost. So such a batch first tries the COPY under a savepoint: the
//! key's unique index (never deferrable, or `ON CONFLICT` could not use it either) refuses a
//! key that has a row or comes twice, the savepoint takes the COPY back, and the batch is
//! merged as it always was. Whatever PostgreSQL refuses is refused again by the merge, which
//! reports it as before.
//!
//! A refused COPY costs the rows it wrote before the conflict, so a table whose COPY was
//! refused waits before the next try, twice as long after each refusal (up to
//! [`LONGEST_WAIT`] batches): a stream of updates pays one refused COPY in 64 batches, and a
//! stream of new keys is copied every time.

use std::collections::HashMap;

/// The most batches a table's upserts go straight to the merge between two tries.
pub(crate) const LONGEST_WAIT: u32 = 64;

/// Per table, how long its upserts skip the plain COPY.
#[derive(Debug, Default)]
pub(crate) struct CopyFirst {
    tables: HashMap<String, Wait>,
    /// Tables copied since the last `take_copied`, once each: what a transaction's metrics say.
    copied: Vec<String>,
}

/// A table whose COPY was refused lately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    /// Batches still to merge without trying.
    left: u32,
    /// The wait after the next refusal is twice this.
    length: u32,
}

impl CopyFirst {
    /// Whether this batch of `table` tries the plain COPY; a batch that does not counts down
    /// the table's wait.
    pub(crate) fn should_try(&mut self, table: &str) -> bool {
        match self.tables.get_mut(table) {
            Some(wait) if wait.left > 0 => {
                wait.left -= 1;
                false
            }
            _ => true,
        }
    }

    /// The COPY went through: the next wait is half as long, and none once it reaches zero.
    pub(crate) fn copied(&mut self, table: &str) {
        if !self.copied.iter().any(|t| t == table) {
            self.copied.push(table.to_string());
        }
        if let Some(wait) = self.tables.get_mut(table) {
            wait.length /= 2;
            if wait.length == 0 {
                self.tables.remove(table);
            }
        }
    }

    /// The tables copied since the last call (a transaction begins by emptying it).
    pub(crate) fn take_copied(&mut self) -> Vec<String> {
        std::mem::take(&mut self.copied)
    }

    /// The COPY was refused: the table waits twice as long as last time.
    pub(crate) fn refused(&mut self, table: &str) {
        let length = self
            .tables
            .get(table)
            .map_or(1, |w| (w.length * 2).clamp(1, LONGEST_WAIT));
        self.tables.insert(
            table.to_string(),
            Wait {
                left: length,
                length,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of `n` batches try, each try answered by `refuse`.
    fn tries(first: &mut CopyFirst, n: usize, refuse: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut tried = Vec::new();
        for i in 0..n {
            if first.should_try("t") {
                tried.push(i);
                if refuse(i) {
                    first.refused("t");
                } else {
                    first.copied("t");
                }
            }
        }
        tried
    }

    #[test]
    fn new_keys_are_copied_every_batch() {
        let mut first = CopyFirst::default();
        assert_eq!(tries(&mut first, 5, |_| false), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn refusals_double_the_wait_up_to_the_longest() {
        let mut first = CopyFirst::default();
        // Tries at 0, then after waits of 1, 2, 4, 8, 16, 32, 64, 64 batches.
        assert_eq!(
            tries(&mut first, 400, |_| true),
            [0, 2, 5, 10, 19, 36, 69, 134, 199, 264, 329, 394]
        );
        let tried = tries(&mut CopyFirst::default(), 10_000, |_| true);
        assert!(
            tried.len() <= 10_000 / LONGEST_WAIT as usize + 8,
            "{}",
            tried.len()
        );
    }

    #[test]
    fn copies_shorten_the_wait_again() {
        let mut first = CopyFirst::default();
        // Refused at 0, 2 and 5: the wait is 4. Copied at 10 (the next wait is 2, so 4 after
        // the refusal at 11), then copied at 16, 17 and 18, which ends the wait.
        let tried = tries(&mut first, 20, |i| i < 8 || i == 11);
        assert_eq!(tried, [0, 2, 5, 10, 11, 16, 17, 18, 19]);
        assert!(first.tables.is_empty());
    }

    #[test]
    fn copied_tables_are_taken_once_each() {
        let mut first = CopyFirst::default();
        first.copied("a");
        first.copied("b");
        first.copied("a");
        assert_eq!(first.take_copied(), ["a", "b"]);
        assert!(first.take_copied().is_empty());
    }

    #[test]
    fn tables_wait_on_their_own() {
        let mut first = CopyFirst::default();
        first.refused("a");
        assert!(!first.should_try("a"));
        assert!(first.should_try("b"));
        assert!(first.should_try("a"));
    }
}
