//! Which columns identify a row for upserts and deletes: they must be a unique index of the
//! table, since `ON CONFLICT` needs one.

use crate::config::TopicSettings;
use crate::schema::Table;

/// Resolves the upsert key: configured columns, else the primary key; it must match a unique
/// index so that `ON CONFLICT` can use it.
pub(super) fn upsert_key_names(
    topic: &TopicSettings,
    table: &Table,
) -> Result<Vec<String>, String> {
    let names: Vec<String> = if !topic.key.is_empty() {
        topic.key.clone()
    } else if !table.primary_key.is_empty() {
        table.primary_key.clone()
    } else {
        return Err("mode = \"upsert\" needs a key: the table has no primary key, so name the key columns with `key = [...]`".into());
    };
    for name in &names {
        if table.column(name).is_none() {
            return Err(format!(
                "upsert key column {name:?} is not a column of the table"
            ));
        }
    }
    let mut wanted = names.clone();
    wanted.sort();
    let indexed = table.unique_keys.iter().any(|cols| {
        let mut cols = cols.clone();
        cols.sort();
        cols == wanted
    });
    if !indexed {
        return Err(format!(
            "upsert key ({}) is not the primary key or a unique index of the table that is not deferrable; ON CONFLICT needs one",
            names.join(", ")
        ));
    }
    Ok(names)
}
