//! The statements that apply a batch's staged upserts and deletes to their table.
//!
//! Staged rows have every column, their record's ordinal in the batch and a presence mask of
//! the columns the record carried. Per key, the last record wins; a record that left a column
//! out neither sets nor clears it, even when another record of the batch carried it.
//!
//! Two variants: soft deletes mark rows instead of deleting them, and insert mode with
//! `on_conflict = "ignore"` inserts the first record per key where the key has no row.

use crate::mapping::{Presence, SoftDelete};
use crate::schema::{quote_ident, ColumnType, Table};

/// The ordinal column of staging tables: a record's position in its batch.
pub(crate) const ORDINAL: &str = "__kps_ord";

/// The presence mask column of upsert staging: bit `i` set when the record carried column `i`.
pub(crate) const MASK: &str = "__kps_mask";

/// The SQLSTATE (class 22, a row's data) of a staged row whose placeholder has no stored value
/// to keep (`Merge::toast_check`); the writer makes it a `toast_unavailable` dead letter.
pub(crate) const TOAST_UNAVAILABLE: &str = "22K01";

/// One table's upsert merge, as its parts need it.
pub(crate) struct Merge<'a> {
    pub(crate) table: &'a Table,
    /// Key column indices.
    pub(crate) keys: &'a [u16],
    /// Staging tables of upserts and deletes.
    pub(crate) upserts: &'a str,
    pub(crate) deletes: &'a str,
    /// Which columns the staged rows carried.
    pub(crate) presence: &'a Presence,
    /// Whether deletes were staged.
    pub(crate) has_deletes: bool,
    /// Deletes mark this column instead of removing rows.
    pub(crate) soft_delete: Option<SoftDelete>,
    /// Insert mode, `on_conflict = "ignore"`: the first row per key, and only new keys.
    pub(crate) first_wins: bool,
}

impl Merge<'_> {
    /// The delete (first: a record after a delete starts a fresh row) and the merge.
    pub(crate) fn statements(&self) -> Vec<String> {
        let mut statements = Vec::new();
        if self.first_wins {
            if !self.presence.is_empty() {
                statements.push(self.insert_first());
            }
            return statements;
        }
        if self.has_deletes && self.soft_delete.is_none() {
            // A partial record after the delete must not inherit the deleted row's other
            // columns, so the row cannot merely be updated.
            statements.push(format!(
                "DELETE FROM {target} t USING (SELECT DISTINCT {keys} FROM {del}) d WHERE {t_d}",
                target = self.table.qualified(),
                keys = self.key_names().join(", "),
                del = self.deletes,
                t_d = self.key_match("t", "d"),
            ));
        }
        match self.presence.uniform() {
            Some(columns) => statements.push(self.uniform(columns)),
            None if !self.presence.is_empty() => statements.push(self.column_by_column()),
            // Only deletes were staged.
            None => {}
        }
        if let (true, Some(soft)) = (self.has_deletes, self.soft_delete) {
            statements.push(self.mark(soft));
        }
        statements
    }

    /// The statement that shows PostgreSQL the records of a batch's repeated keys (their
    /// ordinals bound as `$1`) each as the row it proposes alone, so a record a later one of
    /// its key supersedes is still refused where it would be alone: `INSERT … ON CONFLICT DO
    /// NOTHING` checks a proposed row's `NOT NULL`, `CHECK`s and partition before it looks for
    /// the conflict, and inserts nothing the merge would not (it is taken back either way). It
    /// stands for applying them one by one only where the table's rules look at the row alone
    /// (`RowRules`) and every record carried the same columns (all of them, where the table
    /// has `CHECK`s, which may relate a carried column to a stored one); `None` elsewhere,
    /// and such a batch goes in rounds.
    pub(crate) fn probe(&self) -> Option<String> {
        let rules = self.table.rules;
        if self.soft_delete.is_some() || rules.beyond_the_row {
            return None;
        }
        let columns = self.presence.uniform()?;
        if columns.is_empty() || (rules.checks && columns.len() != self.table.columns.len()) {
            return None;
        }
        let names: Vec<String> = columns.iter().map(|&c| self.name(c)).collect();
        Some(format!(
            "INSERT INTO {target} ({cols}) SELECT {cols} FROM {ups} WHERE {ord} = ANY($1) \
             ON CONFLICT ({keys}) DO NOTHING",
            target = self.table.qualified(),
            cols = names.join(", "),
            ups = self.upserts,
            ord = quote_ident(ORDINAL),
            keys = self.key_names().join(", "),
        ))
    }

    /// Soft deletes, after the merge: a row stays as it is, upserts included, and a key whose
    /// last records are deletes is marked by the first of them (the one that deleted it) —
    /// unless it is marked already, or has no row (a delete of nothing changes nothing).
    fn mark(&self, soft: SoftDelete) -> String {
        let keys = self.key_names().join(", ");
        let column = self.name(soft.column);
        let ord = quote_ident(ORDINAL);
        format!(
            "UPDATE {target} t SET {column} = d.{column} FROM \
             (SELECT DISTINCT ON ({keys}) {keys}, {column} FROM {del} x \
             WHERE NOT EXISTS (SELECT 1 FROM {ups} u WHERE {u_x} AND u.{ord} > x.{ord}) \
             ORDER BY {keys}, {ord}) d WHERE {t_d} AND {unmarked}",
            target = self.table.qualified(),
            del = self.deletes,
            ups = self.upserts,
            u_x = self.key_match("u", "x"),
            t_d = self.key_match("t", "d"),
            unmarked = soft.unmarked("t", &column),
        )
    }

    /// `on_conflict = "ignore"`: the first row per key is inserted, with its columns'
    /// defaults where it carried none, and a key that has a row keeps it.
    fn insert_first(&self) -> String {
        let uniform = self.presence.uniform();
        let columns: Vec<u16> = match uniform {
            Some(columns) => columns.to_vec(),
            None => (0..self.table.columns.len() as u16)
                .filter(|&c| self.keys.contains(&c) || self.presence.carried_by_any(c))
                .collect(),
        };
        let mask = quote_ident(MASK);
        let values: Vec<String> = columns
            .iter()
            .map(|&c| {
                let name = self.name(c);
                match (&self.table.columns[c as usize].default_sql, uniform) {
                    (Some(default), None) if !self.keys.contains(&c) => format!(
                        "CASE WHEN get_bit(s.{mask}, {c}) = 1 THEN s.{name} ELSE ({default}) END"
                    ),
                    _ => format!("s.{name}"),
                }
            })
            .collect();
        let keys = self.key_names().join(", ");
        format!(
            "INSERT INTO {target} ({cols}) SELECT {values} FROM \
             (SELECT DISTINCT ON ({keys}) * FROM {ups} ORDER BY {keys}, {ord}) s \
             ON CONFLICT ({keys}) DO NOTHING",
            target = self.table.qualified(),
            cols = columns
                .iter()
                .map(|&c| self.name(c))
                .collect::<Vec<_>>()
                .join(", "),
            values = values.join(", "),
            ups = self.upserts,
            ord = quote_ident(ORDINAL),
        )
    }

    /// Every row carried `columns`: the last row per key is inserted or updates those
    /// columns, which is one `INSERT … ON CONFLICT`.
    fn uniform(&self, columns: &[u16]) -> String {
        let names: Vec<String> = columns.iter().map(|&c| self.name(c)).collect();
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !self.keys.contains(c))
            .map(|&c| format!("{0} = EXCLUDED.{0}", self.name(c)))
            .collect();
        let action = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let keys = self.key_names().join(", ");
        format!(
            "INSERT INTO {target} ({cols}) SELECT {cols} FROM \
             (SELECT DISTINCT ON ({keys}) * FROM {ups} ORDER BY {keys}, {ord} DESC) s{superseded} \
             ON CONFLICT ({keys}) {action}",
            target = self.table.qualified(),
            cols = names.join(", "),
            ups = self.upserts,
            ord = quote_ident(ORDINAL),
            superseded = self.superseded("s"),
        )
    }

    /// Rows carried different columns: per key and column, the value of the last row that
    /// carried the column. Existing rows are updated in those columns only; new keys are
    /// inserted with the column's default where no row carried it — one statement, so the
    /// update's keys are known to the insert.
    ///
    /// Most keys have one row in a batch, and such a row needs no fold: its mask says which
    /// of its columns to set. Only keys with several rows are folded (per column, an
    /// aggregate over the rows that carried it), so a batch of distinct keys costs a count
    /// per key instead of a sorted aggregate per key and column. The count's `GROUP BY` also
    /// keeps the planner's estimate of the merged rows small, so the update probes the key's
    /// index row by row (as `ON CONFLICT` does) instead of scanning the whole table.
    fn column_by_column(&self) -> String {
        let ord = quote_ident(ORDINAL);
        let mask = quote_ident(MASK);
        let key_names = self.key_names();
        let values: Vec<u16> = (0..self.table.columns.len() as u16)
            .filter(|c| !self.keys.contains(c) && self.presence.carried_by_any(*c))
            .collect();
        let u_keys: Vec<String> = key_names.iter().map(|k| format!("u.{k}")).collect();
        // A key seen once: its row as it is, with a flag per column from its mask.
        let mut single = u_keys.clone();
        // A key seen more than once: per column, the last of its rows that carried it.
        let mut folded = u_keys.clone();
        for &c in &values {
            let carried = format!("get_bit(u.{mask}, {c}) = 1");
            single.push(format!("{carried} AS p{c}"));
            single.push(format!("u.{} AS v{c}", self.name(c)));
            folded.push(format!("bool_or({carried}) AS p{c}"));
            // An array column's values cannot be gathered into an array of arrays of
            // different lengths: its rows are gathered whole, as the staging row type.
            folded.push(
                if matches!(self.table.columns[c as usize].ty, ColumnType::Array(_)) {
                    format!(
                        "((array_agg(u ORDER BY u.{ord} DESC) FILTER (WHERE {carried}))[1]).{} AS v{c}",
                        self.name(c)
                    )
                } else {
                    format!(
                        "(array_agg(u.{} ORDER BY u.{ord} DESC) FILTER (WHERE {carried}))[1] AS v{c}",
                        self.name(c)
                    )
                },
            );
        }
        let sets: Vec<String> = values
            .iter()
            .map(|&c| {
                format!(
                    "{0} = CASE WHEN f.p{c} THEN f.v{c} ELSE t.{0} END",
                    self.name(c)
                )
            })
            .collect();
        let mut inserted = key_names.clone();
        inserted.extend(values.iter().map(|&c| self.name(c)));
        let mut inserts = key_names
            .iter()
            .map(|k| format!("f.{k}"))
            .collect::<Vec<_>>();
        inserts.extend(values.iter().map(|&c| {
            match &self.table.columns[c as usize].default_sql {
                // The default is PostgreSQL's own rendering of the column's default.
                Some(default) => format!("CASE WHEN f.p{c} THEN f.v{c} ELSE ({default}) END"),
                None => format!("f.v{c}"),
            }
        }));
        let update = if sets.is_empty() {
            // Key-only rows: nothing to update, but the keys that exist must not be inserted.
            format!(
                "SELECT {t_keys} FROM {target} t JOIN s f ON {t_f}",
                t_keys = key_names
                    .iter()
                    .map(|k| format!("t.{k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                target = self.table.qualified(),
                t_f = self.key_match("t", "f"),
            )
        } else {
            format!(
                "UPDATE {target} t SET {sets} FROM s f WHERE {t_f} RETURNING {t_keys}",
                target = self.table.qualified(),
                sets = sets.join(", "),
                t_f = self.key_match("t", "f"),
                t_keys = key_names
                    .iter()
                    .map(|k| format!("t.{k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        };
        let kept = self.not_superseded("u");
        // `__kps_o`, the last ordinal of a key's rows, names its row when it has only one:
        // ordinals are unique in a staging table (it is emptied after each write). The
        // prefix keeps the count's columns apart from key columns.
        format!(
            "WITH g AS (SELECT {u_keys}, count(*) AS __kps_n, max(u.{ord}) AS __kps_o FROM {ups} u{where_kept} \
             GROUP BY {u_keys}), \
             r AS (SELECT {folded} FROM {ups} u JOIN g ON {g_u} WHERE g.__kps_n > 1{and_kept} \
             GROUP BY {u_keys}), \
             s AS (SELECT {single} FROM {ups} u JOIN g ON g.__kps_o = u.{ord} WHERE g.__kps_n = 1 \
             UNION ALL SELECT * FROM r), \
             updated AS ({update}) \
             INSERT INTO {target} ({inserted}) SELECT {inserts} FROM s f \
             WHERE NOT EXISTS (SELECT 1 FROM updated WHERE {updated_f})",
            u_keys = u_keys.join(", "),
            ups = self.upserts,
            where_kept = kept.as_ref().map_or(String::new(), |k| format!(" WHERE {k}")),
            and_kept = kept.as_ref().map_or(String::new(), |k| format!(" AND {k}")),
            folded = folded.join(", "),
            g_u = self.key_match("g", "u"),
            single = single.join(", "),
            target = self.table.qualified(),
            inserted = inserted.join(", "),
            inserts = inserts.join(", "),
            updated_f = self.key_match("updated", "f"),
        )
    }

    /// A staged row followed by a delete of its key in the same batch is not merged.
    /// (A soft delete supersedes nothing: the row and its columns stay.)
    fn superseded(&self, alias: &str) -> String {
        self.not_superseded(alias)
            .map_or(String::new(), |kept| format!(" WHERE {kept}"))
    }

    /// The condition that keeps `alias`'s rows no delete supersedes, if any can.
    fn not_superseded(&self, alias: &str) -> Option<String> {
        if !self.has_deletes || self.soft_delete.is_some() {
            return None;
        }
        Some(format!(
            "NOT EXISTS (SELECT 1 FROM {del} d WHERE {a_d} AND d.{ord} > {alias}.{ord})",
            del = self.deletes,
            a_d = self.key_match(alias, "d"),
            ord = quote_ident(ORDINAL),
        ))
    }

    /// Debezium's unavailable-value placeholder keeps a stored value, so a staged row that held
    /// it (its mask longer than the presence bits, the unavailable columns' bits after them)
    /// needs a row of its key in the table. Run before the merge, in a round where each key
    /// has one row (`Placeholded` rows take no probe), so "no row" means no row when the
    /// record applies: such a row stops the statement with [`TOAST_UNAVAILABLE`], a row error
    /// the writer searches out and dead-letters (or stops at) like any refused row, naming
    /// the columns. `columns`: the ones any row held it in.
    pub(crate) fn toast_check(&self, columns: &[u16]) -> String {
        let mask = quote_ident(MASK);
        let presence_bits = self.table.columns.len().div_ceil(8) * 8;
        let names: Vec<String> = columns
            .iter()
            .map(|&c| {
                let literal = self.table.columns[c as usize].name.replace('\'', "''");
                format!(
                    "CASE WHEN get_bit(u.{mask}, {}) = 1 THEN '{literal}' END",
                    presence_bits + c as usize
                )
            })
            .collect();
        format!(
            "DO $kps_toast$ DECLARE held text; BEGIN \
             SELECT concat_ws(', ', {names}) INTO held FROM {ups} u \
             WHERE length(u.{mask}) > {bytes} \
             AND NOT EXISTS (SELECT 1 FROM {target} t WHERE {t_u}) LIMIT 1; \
             IF FOUND THEN RAISE EXCEPTION USING ERRCODE = '{code}', MESSAGE = \
             'Debezium''s unavailable-value placeholder (an unchanged TOASTed value) in ' || held || \
             ', but the table has no row for the key: there is no stored value to keep'; \
             END IF; END $kps_toast$",
            names = names.join(", "),
            ups = self.upserts,
            bytes = presence_bits / 8,
            target = self.table.qualified(),
            t_u = self.key_match("t", "u"),
            code = TOAST_UNAVAILABLE,
        )
    }

    /// The staged rows that held the placeholder, applied as updates of their (checked)
    /// stored rows and then taken out of staging: as inserts they would propose a row without
    /// the unavailable columns, which PostgreSQL refuses for a `NOT NULL` one before it looks
    /// for the conflict. Each sets the columns it carried and keeps the others. One row per
    /// key in a round, so each stored row is updated by at most one.
    pub(crate) fn toast_updates(&self) -> [String; 2] {
        let mask = quote_ident(MASK);
        let bytes = self.table.columns.len().div_ceil(8);
        let sets: Vec<String> = (0..self.table.columns.len() as u16)
            .filter(|c| !self.keys.contains(c))
            .map(|c| {
                format!(
                    "{0} = CASE WHEN get_bit(u.{mask}, {c}) = 1 THEN u.{0} ELSE t.{0} END",
                    self.name(c)
                )
            })
            .collect();
        let placeholded = format!("length(u.{mask}) > {bytes}");
        let update = if sets.is_empty() {
            // Only key columns: nothing to update.
            "SELECT 1".to_string()
        } else {
            format!(
                "UPDATE {target} t SET {sets} FROM {ups} u WHERE {placeholded} AND {t_u}",
                target = self.table.qualified(),
                sets = sets.join(", "),
                ups = self.upserts,
                t_u = self.key_match("t", "u"),
            )
        };
        [
            update,
            format!("DELETE FROM {} u WHERE {placeholded}", self.upserts),
        ]
    }

    fn key_names(&self) -> Vec<String> {
        self.keys.iter().map(|&k| self.name(k)).collect()
    }

    fn name(&self, c: u16) -> String {
        quote_ident(&self.table.columns[c as usize].name)
    }

    fn key_match(&self, a: &str, b: &str) -> String {
        self.key_names()
            .iter()
            .map(|k| format!("{a}.{k} = {b}.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}
