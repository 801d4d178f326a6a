//! What the writer needs to order an upsert write by the table's unique indexes besides its
//! key (`writer::unique_rounds`): which indexes those are, whether the sink can compare their
//! values, and the reads of the staged rows and of what their keys hold in the table.

use crate::merge::{MASK, ORDINAL};
use crate::schema::{quote_ident, ColumnType, Table};

/// An upsert write's unique indexes besides its key, and how to read them.
pub struct UniqueOrder {
    /// Per index: its columns' places in `columns`, or `None` where its values cannot be
    /// compared as bytes. An index the catalog could not list (`RowRules::opaque_unique`) is
    /// one more `None`.
    pub indexes: Vec<Option<Vec<usize>>>,
    /// Per index: whether every column's default draws from a sequence (serial, identity),
    /// so a record that leaves them out and inserts takes a value no other row holds.
    pub fresh: Vec<bool>,
    /// The comparable indexes' columns (table positions), each once.
    pub columns: Vec<u16>,
    /// The staged upserts: ordinal, mask, key columns, `columns`, whether the key has a row,
    /// and the row's `columns`.
    pub read_upserts: String,
    /// The staged deletes: ordinal, key columns, whether the key has a row, its `columns`.
    pub read_deletes: Option<String>,
    /// Whether any staged upsert could meet another row in an index: one takes a value a
    /// different key holds in the table now, or leaves out a column of an index whose default
    /// is not a sequence. `None` where an index is opaque. Where it says no and the keys are
    /// distinct, one merge in any order is one-by-one apply, and nothing more is read.
    pub hazard: Option<String>,
    /// How many key columns the reads return.
    pub keys: usize,
    pub soft_delete: bool,
}

impl UniqueOrder {
    /// The order of an upsert write to `table` on `keys`; `None` where the table has no
    /// unique index besides the key (most tables: their writes go as before).
    pub fn of(
        table: &Table,
        keys: &[u16],
        upserts: &str,
        deletes: Option<&str>,
        soft_delete: bool,
    ) -> Option<Self> {
        // Upsert keys are never empty; without one there is nothing to order by.
        let first_key = *keys.first()?;
        let position = |name: &String| table.column(name).map(|(i, _)| i as u16);
        let mut key_set: Vec<u16> = keys.to_vec();
        key_set.sort_unstable();
        let mut columns: Vec<u16> = Vec::new();
        let mut indexes: Vec<Option<Vec<usize>>> = Vec::new();
        let mut fresh: Vec<bool> = Vec::new();
        for names in &table.unique_keys {
            let Some(mut cols) = names.iter().map(position).collect::<Option<Vec<u16>>>() else {
                // A column the sink never writes (generated): its values are not staged.
                indexes.push(None);
                fresh.push(false);
                continue;
            };
            let mut sorted = cols.clone();
            sorted.sort_unstable();
            if sorted == key_set {
                continue;
            }
            fresh.push(cols.iter().all(|&c| {
                table.columns[c as usize]
                    .default_sql
                    .as_deref()
                    .is_some_and(|d| d.starts_with("nextval("))
            }));
            if !cols
                .iter()
                .all(|&c| bytes_are_equality(&table.columns[c as usize]))
            {
                indexes.push(None);
                continue;
            }
            let places = cols
                .drain(..)
                .map(|c| match columns.iter().position(|&x| x == c) {
                    Some(p) => p,
                    None => {
                        columns.push(c);
                        columns.len() - 1
                    }
                })
                .collect();
            indexes.push(Some(places));
        }
        if table.rules.opaque_unique {
            indexes.push(None);
            fresh.push(false);
        }
        if indexes.is_empty() {
            return None;
        }
        let name = |c: u16| quote_ident(&table.columns[c as usize].name);
        let of = |alias: &str, cols: &[u16]| -> Vec<String> {
            cols.iter()
                .map(|&c| format!("{alias}.{}", name(c)))
                .collect()
        };
        let key_match = keys
            .iter()
            .map(|&k| format!("t.{0} = s.{0}", name(k)))
            .collect::<Vec<_>>()
            .join(" AND ");
        let ord = quote_ident(ORDINAL);
        // An upsert's row comes with its mask and its own values; a delete's with its key.
        let read = |from: &str, upsert: bool| {
            let mut fields = vec![format!("s.{ord}")];
            if upsert {
                fields.push(format!("s.{}", quote_ident(MASK)));
            }
            fields.extend(of("s", keys));
            if upsert {
                fields.extend(of("s", &columns));
            }
            // The join matched (`t.k = s.k` holds only for a key that is not NULL).
            fields.push(format!("t.{} IS NOT NULL", name(first_key)));
            fields.extend(of("t", &columns));
            format!(
                "SELECT {} FROM {from} s LEFT JOIN {} t ON {key_match}",
                fields.join(", "),
                table.qualified()
            )
        };
        let hazard = indexes.iter().all(Option::is_some).then(|| {
            let keys_of = |alias: &str| format!("ROW({})", of(alias, keys).join(", "));
            let mut checks: Vec<String> = indexes
                .iter()
                .flatten()
                .map(|places| {
                    let on = places
                        .iter()
                        .map(|&p| format!("t.{0} = s.{0}", name(columns[p])))
                        .collect::<Vec<_>>()
                        .join(" AND ");
                    format!(
                        "EXISTS (SELECT 1 FROM {upserts} s JOIN {} t ON {on} WHERE {} IS DISTINCT FROM {})",
                        table.qualified(),
                        keys_of("t"),
                        keys_of("s")
                    )
                })
                .collect();
            let mask = quote_ident(MASK);
            let left_out: Vec<String> = indexes
                .iter()
                .zip(&fresh)
                .filter(|(_, &fresh)| !fresh)
                .flat_map(|(index, _)| index.iter().flatten())
                .map(|&p| format!("get_bit(s.{mask}, {}) = 0", columns[p]))
                .collect();
            if !left_out.is_empty() {
                checks.push(format!(
                    "EXISTS (SELECT 1 FROM {upserts} s WHERE {})",
                    left_out.join(" OR ")
                ));
            }
            format!("SELECT {}", checks.join(" OR "))
        });
        let read_upserts = read(upserts, true);
        let read_deletes = deletes.map(|d| read(d, false));
        Some(Self {
            indexes,
            fresh,
            columns,
            read_upserts,
            read_deletes,
            hazard,
            keys: keys.len(),
            soft_delete,
        })
    }
}

/// Whether two values of `column` are equal in a unique index exactly when their binary forms
/// are: not for numeric (`1.0`, `1.00`), floats (`-0`, `0`), JSON, intervals, networks,
/// arrays, or citext (which compares ignoring case and is read as text).
fn bytes_are_equality(column: &crate::schema::Column) -> bool {
    use ColumnType::*;
    match column.ty {
        Text => !column.sql_type.contains("citext"),
        Int2 | Int4 | Int8 | Bool | Timestamptz | Timestamp | Date | Uuid | Bytea | Time
        | Macaddr | Macaddr8 => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Column, RowRules};

    /// `id` (serial, the key), `email` text, `code` citext, `amount` numeric, `seq` serial,
    /// with the unique indexes given.
    fn table(unique: &[&[&str]], rules: RowRules) -> Table {
        let column = |name: &str, ty, sql_type: &str, default: Option<&str>| Column {
            name: name.into(),
            ty,
            sql_type: sql_type.into(),
            not_null: false,
            has_default: default.is_some(),
            default_sql: default.map(Into::into),
        };
        let serial = Some("nextval('t_seq'::regclass)");
        Table {
            oid: 1,
            schema: "public".into(),
            name: "t".into(),
            columns: vec![
                column("id", ColumnType::Int8, "bigint", serial),
                column("email", ColumnType::Text, "text", None),
                column("code", ColumnType::Text, "citext", None),
                column("amount", ColumnType::Numeric, "numeric", None),
                column("seq", ColumnType::Int8, "bigint", serial),
            ],
            skipped: vec![],
            primary_key: vec!["id".into()],
            unique_keys: unique
                .iter()
                .map(|cols| cols.iter().map(|c| c.to_string()).collect())
                .collect(),
            rules,
        }
    }

    fn of(table: &Table, keys: &[u16]) -> Option<UniqueOrder> {
        UniqueOrder::of(table, keys, "ups", Some("del"), false)
    }

    /// The key's own index orders nothing: a table with no other is written as before.
    #[test]
    fn a_table_whose_only_unique_index_is_the_key_has_no_order() {
        assert!(of(&table(&[&["id"]], RowRules::default()), &[0]).is_none());
    }

    /// Indexes whose values compare as bytes are read by their columns; numeric and citext
    /// ones (equal values, different bytes) and those the catalog could not list are opaque;
    /// a serial index is fresh. Upserting by `email`, the primary key is an index too.
    #[test]
    fn indexes_are_read_compared_or_opaque() {
        let rules = RowRules {
            opaque_unique: true,
            ..RowRules::default()
        };
        let unique: &[&[&str]] = &[&["id"], &["email", "seq"], &["code"], &["amount"]];
        let order = of(&table(unique, rules), &[0]).expect("an order");
        assert_eq!(order.indexes, [Some(vec![0, 1]), None, None, None]);
        assert_eq!(order.columns, [1, 4]);
        assert_eq!(order.fresh, [false, false, false, false]);
        assert_eq!(
            order.read_upserts,
            r#"SELECT s."__kps_ord", s."__kps_mask", s."id", s."email", s."seq", t."id" IS NOT NULL, t."email", t."seq" FROM ups s LEFT JOIN "public"."t" t ON t."id" = s."id""#
        );
        assert_eq!(
            order.read_deletes.as_deref(),
            Some(
                r#"SELECT s."__kps_ord", s."id", t."id" IS NOT NULL, t."email", t."seq" FROM del s LEFT JOIN "public"."t" t ON t."id" = s."id""#
            )
        );
        assert_eq!(order.hazard, None, "an opaque index: always read");
        let plain = of(
            &table(&[&["id"], &["email", "seq"]], RowRules::default()),
            &[0],
        );
        assert_eq!(
            plain.expect("an order").hazard.as_deref(),
            Some(
                r#"SELECT EXISTS (SELECT 1 FROM ups s JOIN "public"."t" t ON t."email" = s."email" AND t."seq" = s."seq" WHERE ROW(t."id") IS DISTINCT FROM ROW(s."id")) OR EXISTS (SELECT 1 FROM ups s WHERE get_bit(s."__kps_mask", 1) = 0 OR get_bit(s."__kps_mask", 4) = 0)"#
            )
        );
        let by_email = of(&table(unique, RowRules::default()), &[1]).expect("an order");
        assert_eq!(by_email.indexes[0], Some(vec![0]), "the primary key");
        assert!(by_email.fresh[0], "a serial key");
    }
}
