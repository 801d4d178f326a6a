//! Routing by record: a topic whose records each name their table (`table_from`), in a header
//! or a field of the value, so one topic can feed several tables (a multi-table CDC topic).
//!
//! The name a record gives goes through the topic's `table` template (`{}` is the name) and
//! must then be in the allow-list (`tables`) or match `table_pattern` **before** any catalog
//! lookup: a record can never make the sink describe, let alone create, a table nobody listed.
//! Everything here is pure; the pipeline keeps one mapping per table it met.

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::Context as _;

use regex::Regex;

use crate::config::table_from::{MAX_IDENTIFIER_BYTES, PLACEHOLDER};
use crate::config::{RecordFormat, Sanitize, TableFrom, TopicSettings};
use crate::dead_letter::ErrorKind;
use crate::mapping::pointer::{self, JsonRef};
use crate::mapping::{MapError, TopicMapper, MAX_JSON_DEPTH};
use crate::record::RecordView;
use crate::schema::Table;

/// The topic's name in a `table` template, as in an unrouted topic's (`routing::table_name`).
const TOPIC_PLACEHOLDER: &str = "{topic}";

/// Which tables a routed topic may write.
#[derive(Debug)]
enum Allowed {
    List(HashSet<String>),
    /// Anchored at both ends: a prefix match would let `orders_x; …` names through.
    Pattern(Regex),
}

/// How a routed topic's records pick their table.
#[derive(Debug)]
pub struct TablePicker {
    from: TableFrom,
    /// The field's pointer as configured, for messages.
    pointer: String,
    /// Its tokens, parsed once.
    tokens: Vec<String>,
    /// The topic's `max_record_bytes`: a larger record is `too_large` before its table is
    /// read from it, as it would be before it is decoded.
    max_record_bytes: u64,
    template: String,
    /// How `{topic}` in the template is written, as for a topic's own table.
    sanitize: Sanitize,
    allowed: Allowed,
    /// Connect JSON and Debezium: a value in the `{"schema", "payload"}` envelope is read from
    /// its payload, as the mapping reads it, so one pointer fits both converter settings.
    in_payload: bool,
    /// Debezium follows each delete with a tombstone, which names no table; the `d` before it
    /// already deleted the row, so it is taken as nothing rather than as an error.
    skip_tombstones: bool,
}

/// Why a record names no table it may write: a dead letter of `kind` (`routing`, or
/// `too_large`/`decode` for a record refused before any table is read from it), or a stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct RouteError {
    pub kind: ErrorKind,
    pub why: String,
}

impl RouteError {
    /// The record names no table it may write.
    fn routing(why: String) -> Self {
        Self {
            kind: ErrorKind::Routing,
            why,
        }
    }

    /// The record is refused as the mapping would refuse it, before its table is known.
    fn mapping(e: &MapError) -> Self {
        Self {
            kind: ErrorKind::of(e),
            why: e.to_string(),
        }
    }
}

/// What a record's routing comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Picked {
    /// The table, allowed, as it will be looked up.
    Table(String),
    /// A Debezium tombstone without a name: nothing to write, its offset still advances.
    Nothing,
}

impl TablePicker {
    /// The picker of a topic with `table_from`; `None` without. The settings were validated
    /// (`validate`), so this only compiles the pattern.
    pub fn new(settings: &TopicSettings) -> Result<Option<Self>, String> {
        let Some(from) = settings.table_from.clone() else {
            return Ok(None);
        };
        crate::config::table_from::validate(settings)?;
        let allowed = match &settings.table_pattern {
            Some(p) => Allowed::Pattern(
                Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| format!("topic {}: table_pattern {p:?}: {e}", settings.label()))?,
            ),
            None => Allowed::List(settings.tables.iter().cloned().collect()),
        };
        let pointer = match &from {
            TableFrom::Field(p) => p.clone(),
            TableFrom::Header(_) => String::new(),
        };
        let tokens = pointer::parse(&pointer)
            .map_err(|e| format!("topic {}: table_from.field: {e}", settings.label()))?;
        Ok(Some(Self {
            from,
            pointer,
            tokens,
            max_record_bytes: settings.max_record_bytes.as_u64(),
            template: settings.table.clone(),
            sanitize: settings.sanitize,
            allowed,
            in_payload: matches!(
                settings.format,
                RecordFormat::Debezium | RecordFormat::ConnectJson
            ),
            skip_tombstones: settings.format == RecordFormat::Debezium,
        }))
    }

    /// Whether headers must be collected for the records.
    pub fn needs_headers(&self) -> bool {
        matches!(self.from, TableFrom::Header(_))
    }

    /// For `check`: where records name their table and which tables they may name.
    pub fn describe(&self) -> String {
        let from = match &self.from {
            TableFrom::Header(h) => format!("header {h:?}"),
            TableFrom::Field(p) => format!("field {p:?}"),
        };
        match &self.allowed {
            Allowed::List(_) => format!(
                "{from} through {:?}, one of tables [{}]",
                self.template,
                self.listed().join(", ")
            ),
            Allowed::Pattern(re) => format!(
                "{from} through {:?}, matching {:?} (each described when a record first names it)",
                self.template,
                re.as_str()
            ),
        }
    }

    /// The tables named in the allow-list (empty with a pattern), for startup and `check`.
    pub fn listed(&self) -> Vec<&str> {
        match &self.allowed {
            Allowed::List(names) => {
                let mut v: Vec<&str> = names.iter().map(String::as_str).collect();
                v.sort_unstable();
                v
            }
            Allowed::Pattern(_) => Vec::new(),
        }
    }

    /// The table `record` names, checked against the allow-list; an error (a `routing` dead
    /// letter) when it names none, an unusable one, or one outside the list.
    pub fn pick(&self, record: &RecordView<'_>) -> Result<Picked, RouteError> {
        let err = |why: String| Err(RouteError::routing(why));
        let bytes = record.value.map_or(0, <[u8]>::len) + record.key.map_or(0, <[u8]>::len);
        if bytes as u64 > self.max_record_bytes {
            return Err(RouteError::mapping(&MapError::TooLarge {
                bytes,
                limit: self.max_record_bytes,
            }));
        }
        let name = match &self.from {
            TableFrom::Header(header) => {
                match record
                    .headers
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == header.as_bytes())
                {
                    Some((_, Some(value))) => match std::str::from_utf8(value) {
                        Ok(s) => s.to_string(),
                        Err(_) => return err(format!("header {header:?} is not UTF-8")),
                    },
                    Some((_, None)) => return err(format!("header {header:?} is null")),
                    None if record.value.is_none() && self.skip_tombstones => {
                        return Ok(Picked::Nothing)
                    }
                    None => return err(format!("the record has no header {header:?}")),
                }
            }
            TableFrom::Field(_) => match record.value {
                None if self.skip_tombstones => return Ok(Picked::Nothing),
                None => {
                    return err("the record has no value (a tombstone) to name its table".into())
                }
                Some(value) => self.field(value)?,
            },
        };
        if name.is_empty() {
            return err("the record names an empty table".into());
        }
        if name.contains('\0') {
            return err(format!(
                "the table name the record gives holds NUL: {:?}",
                crate::pgtext::escape_nul(&name)
            ));
        }
        // `{topic}` first: the name the record gives is arbitrary text and may hold it.
        let table = match self.template.contains(TOPIC_PLACEHOLDER) {
            true => self
                .template
                .replace(
                    TOPIC_PLACEHOLDER,
                    &crate::routing::sanitize(record.topic, self.sanitize),
                )
                .replace(PLACEHOLDER, &name),
            false => self.template.replace(PLACEHOLDER, &name),
        };
        if table.len() > MAX_IDENTIFIER_BYTES {
            return err(format!(
                "table {table:?} is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES} bytes"
            ));
        }
        let allowed = match &self.allowed {
            Allowed::List(names) => names.contains(&table),
            Allowed::Pattern(re) => re.is_match(&table),
        };
        if !allowed {
            let list = match &self.allowed {
                Allowed::List(_) => format!("tables = [{}]", self.listed().join(", ")),
                Allowed::Pattern(re) => format!("table_pattern {:?}", re.as_str()),
            };
            return err(format!(
                "the record names table {table:?}, which is not in {list}"
            ));
        }
        Ok(Picked::Table(table))
    }

    /// The string at the field's pointer in the value (as produced: JSON), read over the
    /// borrowed text: no tree of the value is built, only the objects on the way are scanned.
    fn field(&self, value: &[u8]) -> Result<String, RouteError> {
        let err = |why: String| Err(RouteError::routing(why));
        // Refused as the mapping refuses it, before anything deeper is parsed.
        if crate::mapping::nests_deeper_than(value, MAX_JSON_DEPTH) {
            return Err(RouteError::mapping(&MapError::TooDeep(MAX_JSON_DEPTH)));
        }
        let doc = match std::str::from_utf8(value)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                serde_json::from_str::<&serde_json::value::RawValue>(text)
                    .map_err(|e| e.to_string())
            }) {
            Ok(raw) => JsonRef::of(raw),
            Err(e) => return err(format!("the value is not JSON, so names no table: {e}")),
        };
        let doc = match self.in_payload && doc.get().starts_with('{') {
            true => match pointer::field(doc, "payload") {
                Ok(Some(payload)) => payload,
                Ok(None) => doc,
                Err(e) => return err(format!("the value is not JSON, so names no table: {e}")),
            },
            false => doc,
        };
        let found = match pointer::descend(doc, &self.tokens) {
            Ok(found) => found,
            Err(e) => return err(format!("the value is not JSON, so names no table: {e}")),
        };
        let text = found.map_or("null", JsonRef::get);
        match text.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(text)
                .or_else(|e| err(format!("{:?} is not a string: {e}", self.pointer))),
            Some(b'n') => err(format!(
                "the value has no {:?} to name its table",
                self.pointer
            )),
            first => err(format!(
                "{:?} is {}, not a table name",
                self.pointer,
                match first {
                    Some(b't' | b'f') => "a boolean",
                    Some(b'[') => "an array",
                    Some(b'{') => "an object",
                    _ => "a number",
                }
            )),
        }
    }
}

/// The mapping of a routed topic's records onto `table`, one its records named (and the
/// picker allowed), in the topic's schema. Not `TopicMapper::load`: that resolves the topic's
/// own table name, which a routed topic does not have.
pub async fn load_mapper(
    pool: &sqlx::PgPool,
    settings: &TopicSettings,
    topic: &str,
    table: &str,
) -> anyhow::Result<TopicMapper> {
    let described = crate::schema::describe(pool, &settings.schema, table)
        .await
        .with_context(|| format!("topic {topic:?}, table {table:?} named by its records"))?;
    let settings = for_table(settings, &described);
    Ok(TopicMapper::new(&settings, Arc::new(described))?)
}

/// The topic's settings as they apply to one of its tables: per-column entries (`columns`,
/// `time_units`, `bytea_encoding`, `json_text`) for columns the table does not have are left out, since
/// routed tables differ in columns; `unclaimed_column_settings` refuses an entry that fits no
/// listed table, so a misspelt one is not lost.
fn for_table(settings: &TopicSettings, table: &Table) -> TopicSettings {
    let mut settings = settings.clone();
    let has = |name: &String| table.column(name).is_some();
    settings.columns.retain(|name, _| has(name));
    settings.time_units.retain(|name, _| has(name));
    settings.bytea_encoding.retain(|name, _| has(name));
    settings.json_text.retain(|name| has(name));
    settings
}

/// A per-column entry naming a column none of the listed tables has: refused at startup like
/// an entry naming no column of an unrouted topic's table. (With `table_pattern` the tables
/// are not known yet: an entry applies to those that have its column.)
pub fn unclaimed_column_settings(
    settings: &TopicSettings,
    tables: &[&Table],
) -> Result<(), String> {
    let named = settings
        .columns
        .keys()
        .map(|n| ("columns", n))
        .chain(settings.time_units.keys().map(|n| ("time_units", n)))
        .chain(
            settings
                .bytea_encoding
                .keys()
                .map(|n| ("bytea_encoding", n)),
        )
        .chain(settings.json_text.iter().map(|n| ("json_text", n)));
    for (setting, name) in named {
        if !tables.iter().any(|t| t.column(name).is_some()) {
            return Err(format!(
                "topic {}: {setting}.{name}: column {name:?} is in none of the tables records may name",
                settings.label()
            ));
        }
    }
    Ok(())
}

/// Whether `load_mapper` failed because PostgreSQL did not answer (the connection, the pool,
/// the server shutting down or short of resources) rather than because of the table: the
/// former is retried, the latter stops the sink at the record.
pub fn is_unavailable(e: &anyhow::Error) -> bool {
    let db = match e.downcast_ref::<crate::schema::SchemaError>() {
        Some(crate::schema::SchemaError::Db(db)) => db,
        Some(_) => return false,
        None => match e.downcast_ref::<sqlx::Error>() {
            Some(db) => db,
            None => return false,
        },
    };
    match db {
        // Connection exceptions, resources, operator intervention, system errors: the server
        // or the link, never the table.
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| ["08", "53", "57", "58"].iter().any(|k| c.starts_with(k))),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// For `check`: the mapping of each table a routed topic lists, labelled `schema.table`.
pub async fn load_listed(
    pool: &sqlx::PgPool,
    settings: &TopicSettings,
    topic: &str,
    picker: &TablePicker,
) -> Vec<(Option<String>, anyhow::Result<TopicMapper>)> {
    let mut loaded = Vec::new();
    for table in picker.listed() {
        let m = load_mapper(pool, settings, topic, table).await;
        loaded.push((Some(format!("{}.{table}", settings.schema)), m));
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::{Format, Toml};

    fn settings(toml: &str) -> TopicSettings {
        figment::Figment::from(Toml::string(toml))
            .extract::<TopicSettings>()
            .unwrap()
    }

    fn view<'a>(
        value: Option<&'a [u8]>,
        headers: &'a [crate::headers::Header<'a>],
    ) -> RecordView<'a> {
        RecordView {
            topic: "t",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: None,
            value,
            headers,
        }
    }

    fn routing(e: Result<Picked, RouteError>) -> String {
        match e {
            Err(RouteError {
                kind: ErrorKind::Routing,
                why,
            }) => why,
            other => panic!("expected a routing error, got {other:?}"),
        }
    }

    /// A header names the table through the template; names outside the list, and values
    /// that are not UTF-8, hold NUL, are null, missing or too long, are routing errors.
    #[test]
    fn a_header_names_a_listed_table_and_anything_else_is_refused() {
        let p = TablePicker::new(&settings(
            r#"name = "t"
               table = "cdc_{}"
               table_from = { header = "table" }
               tables = ["cdc_a", "cdc_b"]"#,
        ))
        .unwrap()
        .unwrap();
        assert!(p.needs_headers());
        let h: &[crate::headers::Header] = &[(b"table", Some(b"x")), (b"table", Some(b"b"))];
        assert_eq!(
            p.pick(&view(Some(b"{}"), h)),
            Ok(Picked::Table("cdc_b".into())),
            "the last header of the name wins"
        );
        let outside = routing(p.pick(&view(Some(b"{}"), &[(b"table", Some(b"c"))])));
        assert!(
            outside.contains("\"cdc_c\"") && outside.contains("cdc_a, cdc_b"),
            "{outside}"
        );
        assert!(
            routing(p.pick(&view(Some(b"{}"), &[(b"table", Some(b"\xff"))]))).contains("not UTF-8")
        );
        assert!(routing(p.pick(&view(Some(b"{}"), &[(b"table", Some(b"a\0"))]))).contains("NUL"));
        assert!(routing(p.pick(&view(Some(b"{}"), &[(b"table", None)]))).contains("null"));
        assert!(routing(p.pick(&view(Some(b"{}"), &[(b"table", Some(b""))]))).contains("empty"));
        assert!(routing(p.pick(&view(Some(b"{}"), &[]))).contains("no header"));
        assert!(routing(p.pick(&view(None, &[]))).contains("no header"));
        let long = "a".repeat(70);
        assert!(
            routing(p.pick(&view(Some(b"{}"), &[(b"table", Some(long.as_bytes()))])))
                .contains("63 bytes")
        );
    }

    /// A field (Debezium's `/source/table`) names the table; a pattern is matched whole; a
    /// Debezium tombstone names nothing and is taken as nothing; a value that is not JSON or
    /// lacks the field, or holds a non-string, is a routing error.
    #[test]
    fn a_field_names_a_table_matching_the_whole_pattern() {
        let p = TablePicker::new(&settings(
            r#"name = "t"
               table = "{}"
               format = "debezium"
               table_from = { field = "/source/table" }
               table_pattern = "inv_[a-z]+""#,
        ))
        .unwrap()
        .unwrap();
        assert!(!p.needs_headers());
        let ev = br#"{"op":"c","after":{},"source":{"table":"inv_items"}}"#;
        assert_eq!(
            p.pick(&view(Some(ev), &[])),
            Ok(Picked::Table("inv_items".into()))
        );
        let prefixed = br#"{"source":{"table":"inv_items2"}}"#;
        assert!(routing(p.pick(&view(Some(prefixed), &[]))).contains("table_pattern"));
        let wrapped = br#"{"schema":null,"payload":{"op":"c","source":{"table":"inv_orders"}}}"#;
        assert_eq!(
            p.pick(&view(Some(wrapped), &[])),
            Ok(Picked::Table("inv_orders".into())),
            "a Connect envelope is read from its payload"
        );
        assert_eq!(p.pick(&view(None, &[])), Ok(Picked::Nothing));
        assert!(routing(p.pick(&view(Some(b"{oops"), &[]))).contains("not JSON"));
        assert!(routing(p.pick(&view(Some(b"{\"source\":{}}"), &[]))).contains("/source/table"));
        assert!(
            routing(p.pick(&view(Some(br#"{"source":{"table":7}}"#), &[]))).contains("a number")
        );
    }

    /// The size is checked before the table is read: a record over `max_record_bytes` is
    /// `too_large` (routed by header or by field), one nested deeper than the mapping takes is
    /// `decode`, not `routing`; the field is read from the borrowed text, escapes and all.
    #[test]
    fn a_record_too_large_or_too_deep_is_refused_as_the_mapping_would() {
        let p = TablePicker::new(&settings(
            r#"name = "t"
               table = "{}"
               format = "debezium"
               max_record_bytes = 200
               table_from = { field = "/source/table" }
               tables = ["inv_items"]"#,
        ))
        .unwrap()
        .unwrap();
        let escaped = br#"{"op":"c","source":{"db":[1,{"x":"}"}],"table":"inv_\u0069tems"}}"#;
        assert_eq!(
            p.pick(&view(Some(escaped), &[])),
            Ok(Picked::Table("inv_items".into()))
        );
        let big = format!(
            r#"{{"source":{{"table":"inv_items"}},"pad":"{}"}}"#,
            "x".repeat(300)
        );
        let e = p.pick(&view(Some(big.as_bytes()), &[])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
        assert!(e.why.contains("max_record_bytes (200)"), "{e}");
        let deep = format!(
            r#"{{"source":{{"table":"inv_items"}},"x":{}{}}}"#,
            "[".repeat(70),
            "]".repeat(70)
        );
        let e = p.pick(&view(Some(deep.as_bytes()), &[])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Decode, "{e}");
        assert!(e.why.contains("64"), "{e}");

        let by_header = TablePicker::new(&settings(
            r#"name = "t"
               table = "{}"
               max_record_bytes = 200
               table_from = { header = "table" }
               tables = ["inv_items"]"#,
        ))
        .unwrap()
        .unwrap();
        let e = by_header
            .pick(&view(Some(big.as_bytes()), &[(b"table", Some(b"nope"))]))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    }

    /// PostgreSQL not answering (the pool, the connection) is told from a table that cannot be
    /// used, through the context `load_mapper` adds.
    #[test]
    fn an_unanswered_describe_is_told_from_a_missing_table() {
        let wrapped = |e: crate::schema::SchemaError| {
            Err::<(), _>(e)
                .context("topic \"t\", table \"x\" named by its records")
                .unwrap_err()
        };
        assert!(is_unavailable(&wrapped(crate::schema::SchemaError::Db(
            sqlx::Error::PoolTimedOut
        ))));
        assert!(is_unavailable(&wrapped(crate::schema::SchemaError::Db(
            sqlx::Error::Io(std::io::Error::other("connection reset"))
        ))));
        assert!(!is_unavailable(&wrapped(
            crate::schema::SchemaError::Missing {
                schema: "public".into(),
                table: "x".into(),
            }
        )));
        assert!(!is_unavailable(&anyhow::anyhow!(
            "a mapping that does not fit"
        )));
    }

    /// `{topic}` in a routed template is the record's topic, sanitised as configured, as in
    /// an unrouted topic's table; a name holding `{topic}` is not expanded.
    #[test]
    fn a_routed_template_replaces_topic_with_the_sanitised_topic() {
        let p = |sanitize: &str, allowed: &str| {
            TablePicker::new(&settings(&format!(
                r#"name = "t"
                   table = "{{topic}}_{{}}"
                   sanitize = "{sanitize}"
                   table_from = {{ header = "table" }}
                   tables = [{allowed}]"#
            )))
            .unwrap()
            .unwrap()
        };
        let record = |topic: &'static str| RecordView {
            topic,
            ..view(Some(b"{}"), &[])
        };
        let snake = p("snake", r#""shop_eu_orders""#);
        let h: &[crate::headers::Header] = &[(b"table", Some(b"orders"))];
        assert_eq!(
            snake.pick(&RecordView {
                headers: h,
                ..record("Shop.EU")
            }),
            Ok(Picked::Table("shop_eu_orders".into()))
        );
        let none = p("none", r#""Shop.EU_orders""#);
        assert_eq!(
            none.pick(&RecordView {
                headers: h,
                ..record("Shop.EU")
            }),
            Ok(Picked::Table("Shop.EU_orders".into()))
        );
        let braces: &[crate::headers::Header] = &[(b"table", Some(b"{topic}"))];
        let e = routing(snake.pick(&RecordView {
            headers: braces,
            ..record("Shop.EU")
        }));
        assert!(e.contains("\"shop_eu_{topic}\""), "{e}");
    }
}
