//! Stale records: with `version_from`, a record (upsert or delete) older than its key's stored
//! row, or than a record of its key before it in the batch, is not applied.
//!
//! Before a write's merge, such records are removed from the staging tables and their
//! ordinals noted in a session table, so the writer can count and log them. What is left of a
//! key is then in order of version as well as of record, so the merge's "last record wins"
//! is "newest version wins". Equal versions apply (a replayed record rewrites what it wrote; a
//! clock's equal milliseconds are two events). A row whose version is NULL (written before
//! the topic was versioned) is older than any record.

use crate::merge::{Merge, ORDINAL};
use crate::schema::quote_ident;

/// Session table of the ordinals of the current write's stale records; emptied by the writer
/// after each write, and at commit.
pub(crate) const TALLY: &str = "pg_temp.kps_stale";

/// Creates the tally table in a session; run with a versioned write's staging setup.
pub(crate) fn create_tally() -> String {
    format!(
        "CREATE TEMP TABLE IF NOT EXISTS {} ({} bigint) ON COMMIT DELETE ROWS",
        TALLY.trim_start_matches("pg_temp."),
        quote_ident(ORDINAL)
    )
}

/// Empties the tally, returning the ordinals of the write's stale records.
pub(crate) fn take_tally() -> String {
    format!("DELETE FROM {TALLY} RETURNING {}", quote_ident(ORDINAL))
}

impl Merge<'_> {
    /// The statements that take the write's stale records out of staging into the tally:
    /// deletes, then upserts (removing a stale record changes no other's staleness: it is
    /// older than a record before it, which stays).
    pub(crate) fn prune_stale(&self) -> Vec<String> {
        let Some(v) = self.version else {
            return Vec::new();
        };
        let mut staged = vec![self.upserts];
        if self.has_deletes {
            staged.insert(0, self.deletes);
        }
        staged
            .into_iter()
            .map(|table| {
                format!(
                    "WITH gone AS (DELETE FROM {table} a WHERE {older} RETURNING a.{ord}) \
                     INSERT INTO {TALLY} SELECT {ord} FROM gone",
                    older = self.older(v, "a"),
                    ord = quote_ident(ORDINAL),
                )
            })
            .collect()
    }

    /// SQL true where the staged record `alias` is older than its key's stored row, or than a
    /// record of its key earlier in the batch (upsert or delete).
    fn older(&self, v: u16, alias: &str) -> String {
        let col = self.name(v);
        let ord = quote_ident(ORDINAL);
        let mut tests = vec![format!(
            "EXISTS (SELECT 1 FROM {target} t WHERE {t_a} AND t.{col} > {alias}.{col})",
            target = self.table.qualified(),
            t_a = self.key_match("t", alias),
        )];
        let mut earlier = vec![self.upserts];
        if self.has_deletes {
            earlier.push(self.deletes);
        }
        for staged in earlier {
            tests.push(format!(
                "EXISTS (SELECT 1 FROM {staged} e WHERE {e_a} AND e.{ord} < {alias}.{ord} \
                 AND e.{col} > {alias}.{col})",
                e_a = self.key_match("e", alias),
            ));
        }
        tests.join(" OR ")
    }

    /// SQL true where `stored`'s row may take `incoming`'s: its version is not newer, or it
    /// has none.
    pub(crate) fn not_older(&self, v: u16, stored: &str, incoming: &str) -> String {
        let col = self.name(v);
        format!("({stored}.{col} IS NULL OR {stored}.{col} <= {incoming}.{col})")
    }
}
