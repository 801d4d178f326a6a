//! Debezium's unavailable-value placeholder: what the PostgreSQL connector sends instead of a
//! TOASTed column the source did not log (an update that left it unchanged, under `REPLICA
//! IDENTITY DEFAULT`). It is not the column's value but "unchanged", so an upsert leaves the
//! stored value as it is, the way it leaves a column the record does not carry.
//!
//! The connector spells it by the column's Connect type, as its JsonConverter writes it (seen
//! from Debezium 3.6.1 on PostgreSQL 15): a string column (text, varchar, json and jsonb under
//! `io.debezium.data.Json`, ...) gets the placeholder itself; a bytes column (bytea) its UTF-8
//! bytes, base64 in JSON (hex under `binary.handling.mode=hex`); an array of strings an array
//! of the one placeholder; an array of anything else the placeholder's bytes as its elements.
//! Each column is matched against the forms its type can take only, so a text column holding
//! the base64 of the placeholder is a text like any other.

use base64::Engine as _;

use crate::schema::{ColumnType, Table};

use super::Source;

use crate::config::{RecordFormat, TopicSettings, DEFAULT_PLACEHOLDER};

/// Per column, the JSON texts that stand for "unavailable" there: compared with a value's raw
/// JSON, so the check costs a length comparison for nearly every value.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placeholders {
    forms: Vec<Vec<Box<str>>>,
}

impl Placeholders {
    /// A Debezium topic's upserts have placeholders (its configured one, else Debezium's
    /// default); nothing else does.
    pub(crate) fn for_topic(
        topic: &TopicSettings,
        table: &Table,
        sources: &[Source],
        upsert_keys: Option<&[u16]>,
        hex: &[bool],
    ) -> Option<Self> {
        let keys = upsert_keys?;
        (topic.format == RecordFormat::Debezium).then(|| {
            let placeholder = topic.unavailable_value_placeholder.as_deref();
            Self::new(
                placeholder.unwrap_or(DEFAULT_PLACEHOLDER),
                table,
                sources,
                keys,
                hex,
            )
        })
    }

    /// The forms for each column of `table` that a record's value can fill (key columns and
    /// columns fed by metadata or constants never carry the placeholder; PostgreSQL logs the
    /// replica identity in full). `hex`: the bytea columns whose strings are hex.
    pub(crate) fn new(
        placeholder: &str,
        table: &Table,
        sources: &[Source],
        keys: &[u16],
        hex: &[bool],
    ) -> Self {
        let json = |s: &str| serde_json::Value::from(s).to_string();
        let string = json(placeholder);
        let base64 = json(&base64::engine::general_purpose::STANDARD.encode(placeholder));
        let hex_text = json(
            &placeholder
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        );
        let bytes = format!(
            "[{}]",
            placeholder
                .bytes()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let forms = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, col)| {
                if keys.contains(&(i as u16)) || !matches!(sources[i], Source::Doc(_)) {
                    return Vec::new();
                }
                let forms: Vec<String> = match col.ty {
                    ColumnType::Bytea if hex[i] => vec![hex_text.clone()],
                    ColumnType::Bytea => vec![base64.clone()],
                    // Which of the two an array gets depends on its elements' Connect type,
                    // which the column type does not always tell (a `numeric[]` may come as
                    // strings or numbers): both are unmistakable.
                    ColumnType::Array(_) => vec![format!("[{string}]"), bytes.clone()],
                    _ => vec![string.clone()],
                };
                forms.into_iter().map(String::into_boxed_str).collect()
            })
            .collect();
        Self { forms }
    }

    /// Whether `raw`, the JSON text of column `i`'s value, is the placeholder.
    pub(crate) fn is_placeholder(&self, i: usize, raw: &str) -> bool {
        self.forms
            .get(i)
            .is_some_and(|forms| forms.iter().any(|f| f.len() == raw.len() && **f == *raw))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use crate::mapping::test_support::{col, table, topic};
    use crate::mapping::{EncodeError, TableRows, TopicMapper};
    use crate::record::RecordView;
    use crate::schema::{ArrayOf, ColumnType};

    const P: &str = "__debezium_unavailable_value";

    /// `(id int8 pk, n int4 not null, body text not null, doc jsonb, blob bytea, hexed bytea,
    /// tags text[], nums int4[])`.
    fn mapper(extra: &str) -> TopicMapper {
        let array = |element: &'static ColumnType, element_oid| {
            ColumnType::Array(ArrayOf {
                element,
                element_oid,
            })
        };
        TopicMapper::new(
            &topic(&format!(
                "format = \"debezium\"\n{extra}\n[bytea_encoding]\nhexed = \"hex\""
            )),
            table(
                vec![
                    col("id", ColumnType::Int8, true, false),
                    col("n", ColumnType::Int4, true, false),
                    col("body", ColumnType::Text, true, false),
                    col("doc", ColumnType::Jsonb, false, false),
                    col("blob", ColumnType::Bytea, false, false),
                    col("hexed", ColumnType::Bytea, false, false),
                    col("tags", array(&ColumnType::Text, 25), false, false),
                    col("nums", array(&ColumnType::Int4, 23), false, false),
                ],
                &["id"],
            ),
        )
        .unwrap()
    }

    fn encode(m: &TopicMapper, after: &str) -> Result<TableRows, EncodeError> {
        let value = format!(r#"{{"op":"u","before":null,"after":{after}}}"#);
        let record = RecordView {
            topic: "topic",
            partition: 0,
            offset: 7,
            timestamp: Some(1),
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        };
        let mut rows = m.new_rows();
        m.encode(&record, &mut rows).map(|()| rows)
    }

    /// Each column type's form, as Debezium 3.6.1 sends it, is "unavailable": carried by no
    /// row (so the merge keeps the stored value), noted for the merge's check, the mask
    /// longer by the unavailable bits; a NOT NULL column may be unavailable.
    #[test]
    fn each_columns_form_of_the_placeholder_keeps_the_stored_value() {
        let m = mapper("");
        let base64 = base64::engine::general_purpose::STANDARD.encode(P);
        let hex: String = P.bytes().map(|b| format!("{b:02x}")).collect();
        let bytes: Vec<String> = P.bytes().map(|b| b.to_string()).collect();
        let after = format!(
            r#"{{"id":1,"n":2,"body":"{P}","doc":"{P}","blob":"{base64}","hexed":"{hex}","tags":["{P}"],"nums":[{}]}}"#,
            bytes.join(",")
        );
        let rows = encode(&m, &after).unwrap();
        assert_eq!(rows.presence.uniform(), Some(&[0, 1][..]));
        assert_eq!(rows.placeholders.ordinals, [0]);
        assert_eq!(rows.placeholders.columns, [2, 3, 4, 5, 6, 7]);
    }

    /// The placeholder's other forms are values where the column's type cannot take that
    /// form (a text holding the base64 of it is a text), a key is never one, and a placeholder
    /// set on the topic replaces Debezium's default.
    #[test]
    fn only_the_columns_own_form_and_the_configured_placeholder_count() {
        let m = mapper("");
        let base64 = base64::engine::general_purpose::STANDARD.encode(P);
        let rows = encode(
            &m,
            &format!(r#"{{"id":1,"n":2,"body":"{base64}","doc":"\"x\""}}"#),
        )
        .unwrap();
        assert!(rows.placeholders.is_empty());
        assert_eq!(rows.presence.uniform(), Some(&[0, 1, 2, 3][..]));

        let m = mapper("unavailable_value_placeholder = \"~gone~\"");
        let rows = encode(&m, &format!(r#"{{"id":1,"n":2,"body":"{P}"}}"#)).unwrap();
        assert!(rows.placeholders.is_empty(), "the default no longer counts");
        let rows = encode(&m, r#"{"id":1,"n":2,"body":"~gone~","tags":["~gone~"]}"#).unwrap();
        assert_eq!(rows.placeholders.columns, [2, 6]);
    }
}
