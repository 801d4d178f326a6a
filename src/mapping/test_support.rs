//! Mapping without a database, for the mapping's own tests and the transcoders': a table
//! described by hand, a topic's settings as a user writes them, and a row read back from its
//! COPY bytes. One copy, so the transcoders' tests prove their JSON against the same mapping.

use std::sync::Arc;

use figment::providers::{Format, Toml};
use figment::Figment;

use crate::config::TopicSettings;
use crate::schema::{Column, ColumnType, Table};

/// A column as `describe` would report it.
pub(crate) fn col(name: &str, ty: ColumnType, not_null: bool, has_default: bool) -> Column {
    Column {
        name: name.into(),
        ty,
        sql_type: format!("{ty:?}").to_lowercase(),
        not_null,
        has_default,
        default_sql: has_default.then(|| "'default'".into()),
    }
}

/// Nullable columns without defaults, by name and type.
pub(crate) fn nullable(columns: &[(&str, ColumnType)]) -> Vec<Column> {
    columns
        .iter()
        .map(|&(name, ty)| col(name, ty, false, false))
        .collect()
}

/// `public.t` with these columns; the primary key (if any) is its one unique key.
pub(crate) fn table(columns: Vec<Column>, primary_key: &[&str]) -> Arc<Table> {
    let pk: Vec<String> = primary_key.iter().map(|s| s.to_string()).collect();
    Arc::new(Table {
        oid: 1,
        schema: "public".into(),
        name: "t".into(),
        columns,
        skipped: vec![],
        rules: crate::schema::RowRules::default(),
        unique_keys: if pk.is_empty() {
            vec![]
        } else {
            vec![pk.clone()]
        },
        primary_key: pk,
    })
}

/// Topic `topic` into table `t`, with `extra` TOML lines, as a user would write them.
pub(crate) fn topic(extra: &str) -> TopicSettings {
    Figment::from(Toml::string(&format!(
        "name = \"topic\"\ntable = \"t\"\n{extra}"
    )))
    .extract()
    .unwrap()
}

/// The fields of the first row of a binary COPY stream; `None` for NULL.
pub(crate) fn first_row(bytes: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut at = 19; // the COPY header
    let n = i16::from_be_bytes([bytes[at], bytes[at + 1]]) as usize;
    at += 2;
    let mut out = Vec::new();
    for _ in 0..n {
        let len = i32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        at += 4;
        if len < 0 {
            out.push(None);
        } else {
            out.push(Some(bytes[at..at + len as usize].to_vec()));
            at += len as usize;
        }
    }
    out
}
