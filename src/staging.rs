//! The session-local staging tables an upsert write copies its rows into before the merge.

use crate::merge::{MASK, ORDINAL};
use crate::schema::{quote_ident, Table};

/// Session-local staging tables of one target table.
pub(crate) struct Staging {
    pub(crate) upserts: String,
    pub(crate) deletes: String,
}

impl Staging {
    /// Named by the table's oid and its shape: short and unique whatever the schema and table
    /// names, shared by every topic that writes the table, and new when the table's columns
    /// change (`auto_evolve`), since a session's staging keeps the columns it was made with.
    /// Soft deletes, which stage their mark too, and versioned deletes, which stage their
    /// version, have their own delete staging.
    pub(crate) fn of(table: &Table, soft: bool, versioned: bool) -> Self {
        use std::hash::{Hash as _, Hasher as _};
        // SipHash with fixed keys: the same shape gets the same name for the process's life.
        let mut h = std::hash::DefaultHasher::new();
        for c in &table.columns {
            (&c.name, &c.sql_type).hash(&mut h);
        }
        let shape = h.finish() as u32;
        let name = |kind: &str| {
            format!(
                "pg_temp.{}",
                quote_ident(&format!("kps_{kind}_{}_{shape:08x}", table.oid))
            )
        };
        Self {
            upserts: name("stage"),
            deletes: name(match (soft, versioned) {
                (false, false) => "delete",
                (true, false) => "softdel",
                (false, true) => "vdelete",
                (true, true) => "vsoftdel",
            }),
        }
    }

    /// No constraints or defaults in staging: columns a record does not carry are simply not
    /// merged.
    pub(crate) fn create(&self, table: &Table, delete_names: &[String]) -> Vec<String> {
        let ord = quote_ident(ORDINAL);
        vec![
            format!(
                "CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS SELECT * FROM {} WITH NO DATA",
                self.upserts.trim_start_matches("pg_temp."),
                table.qualified()
            ),
            format!(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {ord} bigint, ADD COLUMN IF NOT EXISTS {} bytea",
                self.upserts,
                quote_ident(MASK)
            ),
            format!(
                "CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS SELECT {} FROM {} WITH NO DATA",
                self.deletes.trim_start_matches("pg_temp."),
                delete_names.join(", "),
                table.qualified()
            ),
            format!("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {ord} bigint", self.deletes),
        ]
    }
}
