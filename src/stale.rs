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
        // Staging is never analyzed, so the planner guesses its rows and prices a lookup of
        // the stored row for each at far more than it costs: enough to compile the statement
        // with JIT: a 5,000-row prune took 40 to 80 ms with it (20 to 40 ms compiling), 21 ms
        // without. For the rest of the batch's transaction only.
        let mut statements = vec!["SET LOCAL jit = off".to_string()];
        statements.extend(staged.into_iter().map(|table| self.prune(v, table)));
        statements
    }

    /// Takes the stale records of one staging table out: those older than their key's
    /// stored row, or than the newest record of their key earlier in the batch (upsert or
    /// delete). That newest earlier version is a running maximum per key in record order: one
    /// sort of the batch, where a lookup per record in staging (which has no index) would
    /// compare every pair.
    fn prune(&self, v: u16, table: &str) -> String {
        let col = self.name(v);
        let ord = quote_ident(ORDINAL);
        let keys = self.key_names().join(", ");
        let mut records = format!("SELECT {keys}, {ord}, {col} FROM {}", self.upserts);
        if self.has_deletes {
            records.push_str(&format!(
                " UNION ALL SELECT {keys}, {ord}, {col} FROM {}",
                self.deletes
            ));
        }
        format!(
            "WITH r AS (SELECT {ord}, max({col}) OVER (PARTITION BY {keys} ORDER BY {ord} \
             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM ({records}) x), \
             gone AS (DELETE FROM {table} a USING r WHERE a.{ord} = r.{ord} \
             AND (r.before > a.{col} OR EXISTS (SELECT 1 FROM {target} t \
             WHERE {t_a} AND t.{col} > a.{col})) RETURNING a.{ord}) \
             INSERT INTO {TALLY} SELECT {ord} FROM gone",
            target = self.table.qualified(),
            t_a = self.key_match("t", "a"),
        )
    }

    /// The staged upserts that are not stale, as a subquery: what the probe shows PostgreSQL
    /// (a stale record is never applied, so it is not checked either). For writes without
    /// deletes, so the newest earlier record is an upsert.
    pub(crate) fn fresh_upserts(&self, v: u16) -> String {
        let col = self.name(v);
        let ord = quote_ident(ORDINAL);
        format!(
            "(SELECT * FROM (SELECT *, max({col}) OVER (PARTITION BY {keys} ORDER BY {ord} \
             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS __kps_before FROM {ups}) w \
             WHERE (w.__kps_before IS NULL OR w.__kps_before <= w.{col}) \
             AND NOT EXISTS (SELECT 1 FROM {target} t WHERE {t_w} AND t.{col} > w.{col}))",
            keys = self.key_names().join(", "),
            ups = self.upserts,
            target = self.table.qualified(),
            t_w = self.key_match("t", "w"),
        )
    }

    /// SQL true where `stored`'s row may take `incoming`'s: its version is not newer, or it
    /// has none.
    pub(crate) fn not_older(&self, v: u16, stored: &str, incoming: &str) -> String {
        let col = self.name(v);
        format!("({stored}.{col} IS NULL OR {stored}.{col} <= {incoming}.{col})")
    }
}
