//! What a record's schema asks of its table: the `CREATE TABLE` of a missing table, the
//! `ADD COLUMN`s of new fields, or a stop when a field cannot be stored in its column. Pure: the
//! statements run in the writer (`apply`), inside the batch's transaction.

use std::sync::atomic::{AtomicU32, Ordering};

use super::types::FieldColumn;
use crate::config::table_from::MAX_IDENTIFIER_BYTES;
use crate::config::{KeyFrom, RecordFormat, TopicSettings, WriteMode};
use crate::schema::{quote_ident, Column, ColumnType, Table};

/// The OID of a table the catalog does not have (PostgreSQL's `InvalidOid`, never a real one).
pub(crate) const MISSING_OID: u32 = 0;

/// A table the sink planned (created or changed) has no catalog OID yet, or the OID of an
/// older shape; its upsert staging tables are named by OID, so each planned shape gets its own
/// from the top of the range, counting down (far from the OIDs PostgreSQL hands out).
static NEXT_PLANNED_OID: AtomicU32 = AtomicU32::new(u32::MAX);

/// The next planned table's OID (see `NEXT_PLANNED_OID`).
fn planned_oid() -> u32 {
    NEXT_PLANNED_OID.fetch_sub(1, Ordering::Relaxed)
}

/// One DDL statement and the catalog question that says whether it is still needed: another
/// writer (a lane, a replica) may have committed it meanwhile, and `ALTER TABLE` takes an
/// exclusive lock even when `IF NOT EXISTS` makes it a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub(crate) statement: String,
    pub(crate) guard: Guard,
}

/// When a step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Guard {
    /// The table (quoted, qualified) does not exist.
    TableMissing { qualified: String },
    /// The table has no column of this name.
    ColumnMissing { qualified: String, column: String },
}

impl Step {
    /// The statement, for `check --plan` and logs.
    pub fn statement(&self) -> &str {
        &self.statement
    }

    /// Whether a row with these fields needs this step: every row needs its table; a row
    /// needs a column only if it has the field.
    pub(crate) fn needed_by(&self, fields: &[String]) -> bool {
        match &self.guard {
            Guard::TableMissing { .. } => true,
            Guard::ColumnMissing { column, .. } => fields.contains(column),
        }
    }
}

/// What a record's schema needs, as the plan's input: the row's fields and, where the key has
/// a record schema, the key's.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shape {
    pub(crate) value: Vec<FieldColumn>,
    pub(crate) key: Option<Vec<FieldColumn>>,
}

/// The statements and the table as it will be once they commit.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) steps: Vec<Step>,
    pub(crate) table: Table,
}

/// A table described as missing, for a topic whose table `auto_create` will make.
pub(crate) fn missing_table(settings: &TopicSettings, name: &str) -> Table {
    Table {
        oid: MISSING_OID,
        schema: settings.schema.clone(),
        name: name.to_string(),
        columns: Vec::new(),
        skipped: Vec::new(),
        rules: crate::schema::RowRules::default(),
        primary_key: Vec::new(),
        unique_keys: Vec::new(),
    }
}

/// The change `shape` needs of `table` (`None`: it fits); an error says why the sink must stop.
pub(crate) fn plan(
    settings: &TopicSettings,
    table: &Table,
    shape: &Shape,
) -> Result<Option<Change>, String> {
    if table.oid == MISSING_OID {
        return create(settings, table, shape).map(Some);
    }
    if settings.auto_evolve.is_none() {
        return Ok(None);
    }
    add_columns(settings, table, shape)
}

/// The metadata columns and their types: what each metadata value is written as without loss
/// (a key is any bytes; headers are JSON).
fn metadata_columns(settings: &TopicSettings) -> Vec<(String, ColumnType, &'static str)> {
    let m = &settings.metadata;
    [
        (&m.topic, ColumnType::Text, "text"),
        (&m.partition, ColumnType::Int4, "int4"),
        (&m.offset, ColumnType::Int8, "int8"),
        (&m.timestamp, ColumnType::Timestamptz, "timestamptz"),
        (&m.key, ColumnType::Bytea, "bytea"),
        (&m.headers, ColumnType::Jsonb, "jsonb"),
    ]
    .into_iter()
    .filter_map(|(name, ty, sql)| name.clone().map(|n| (n, ty, sql)))
    .collect()
}

/// The primary key of a created table: `key`, else the record key's fields (`key_from =
/// "key"`) or the topic/partition/offset columns (`key_from = "offset"`). Insert mode has none.
fn primary_key(settings: &TopicSettings, shape: &Shape) -> Result<Vec<String>, String> {
    if settings.write_mode() != WriteMode::Upsert {
        return Ok(Vec::new());
    }
    if !settings.key.is_empty() {
        return Ok(settings.key.clone());
    }
    match settings.key_from {
        KeyFrom::Key => match &shape.key {
            Some(fields) if !fields.is_empty() => Ok(fields.iter().map(|f| f.name.clone()).collect()),
            _ => Err("auto_create needs the primary key: the record key has no record schema to take it from, so name its columns with key = [...]".into()),
        },
        KeyFrom::Offset => {
            let m = &settings.metadata;
            [&m.topic, &m.partition, &m.offset]
                .into_iter()
                .map(|c| c.clone().ok_or_else(|| "auto_create with key_from = \"offset\" needs metadata.topic, .partition and .offset".to_string()))
                .collect()
        }
        // Debezium's key is the source table's primary key, and its fields are columns of
        // `after` too: the same columns make the copy's primary key.
        KeyFrom::Value if settings.format == RecordFormat::Debezium => match &shape.key {
            // A key of other columns than the row's (the connector's `message.key.columns`)
            // names no column the value can fill.
            Some(fields) if !fields.is_empty() => fields
                .iter()
                .map(|f| match shape.value.iter().any(|v| v.name == f.name) {
                    true => Ok(f.name.clone()),
                    false => Err(format!("auto_create in upsert mode: the Debezium key's field {:?} is not a column of the change event's `after`, so name the primary key's columns with key = [...]", f.name)),
                })
                .collect(),
            _ => Err("auto_create in upsert mode needs the primary key: the Debezium record's key carries no struct schema to take it from (a key converter without schemas?), so name its columns with key = [...]".into()),
        },
        KeyFrom::Value => Err("auto_create in upsert mode needs the primary key: name its columns with key = [...]".into()),
    }
}

/// Where a created table's primary key will come from, as `check` can tell before any record
/// (`None` in insert mode); an error where no record could give one, which `run` would only
/// meet at the first record.
pub(crate) fn key_source(settings: &TopicSettings) -> Result<Option<&'static str>, String> {
    if settings.write_mode() != WriteMode::Upsert {
        return Ok(None);
    }
    if !settings.key.is_empty() {
        return Ok(Some("the columns of `key`"));
    }
    match settings.key_from {
        KeyFrom::Key => Ok(Some("the fields of the record key's schema (a key without one is refused)")),
        KeyFrom::Offset => Ok(Some("the topic, partition and offset columns")),
        KeyFrom::Value if settings.format == RecordFormat::Debezium => Ok(Some(
            "the fields of the Debezium key's struct schema, the source table's primary key (a key without one is refused)",
        )),
        KeyFrom::Value => Err("auto_create in upsert mode needs the primary key: name its columns with key = [...]".into()),
    }
}

/// `CREATE TABLE` from the schema: the value's fields (a key field the value lacks first), the
/// metadata columns, and the primary key. Required fields are NOT NULL, as the schema says.
fn create(settings: &TopicSettings, table: &Table, shape: &Shape) -> Result<Change, String> {
    let pk = primary_key(settings, shape)?;
    let mut columns: Vec<(String, ColumnType, String, bool)> = Vec::new();
    let from_key = settings.key_from == KeyFrom::Key;
    for name in &pk {
        let key_field = shape
            .key
            .iter()
            .flatten()
            .find(|f| from_key && &f.name == name);
        if let Some(f) = key_field {
            columns.push((f.name.clone(), f.ty, f.sql.clone(), true));
        }
    }
    for f in &shape.value {
        if columns.iter().any(|c| c.0 == f.name) {
            continue;
        }
        let not_null = !f.optional || pk.contains(&f.name);
        columns.push((f.name.clone(), f.ty, f.sql.clone(), not_null));
    }
    for (name, ty, sql) in metadata_columns(settings) {
        if columns.iter().any(|c| c.0 == name) {
            return Err(format!(
                "metadata column {name:?} is also a field of the record's schema"
            ));
        }
        columns.push((name.clone(), ty, sql.to_string(), pk.contains(&name)));
    }
    // The version a versioned topic's rows keep: the sink's own column, nullable like a
    // metadata column. (`version_from = "column"` orders by a field the schema has.)
    if let Some(spec) = settings.version_from.as_deref().filter(|s| *s != "column") {
        let name = settings
            .version_column
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_VERSION_COLUMN.to_string());
        if columns.iter().any(|c| c.0 == name) {
            return Err(format!(
                "version_column {name:?} (for version_from = {spec:?}) is also a field of the record's schema or a metadata column; name another with version_column"
            ));
        }
        columns.push((name, ColumnType::Int8, "int8".into(), false));
    }
    if columns.is_empty() {
        return Err("the record's schema has no fields to create columns from".into());
    }
    if let Some(problem) = columns.iter().find_map(|c| name_problem(&c.0)) {
        return Err(problem);
    }
    for name in &pk {
        if !columns.iter().any(|c| &c.0 == name) {
            return Err(format!(
                "primary key column {name:?} is not a field of the record's schema (nor of its key's)"
            ));
        }
    }
    let qualified = table.qualified();
    let mut defs: Vec<String> = columns
        .iter()
        .map(|(name, _, sql, not_null)| {
            format!(
                "{} {sql}{}",
                quote_ident(name),
                if *not_null { " NOT NULL" } else { "" }
            )
        })
        .collect();
    if !pk.is_empty() {
        defs.push(format!(
            "PRIMARY KEY ({})",
            pk.iter()
                .map(|k| quote_ident(k))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let statement = format!(
        "CREATE TABLE IF NOT EXISTS {qualified} ({})",
        defs.join(", ")
    );
    let planned = Table {
        oid: planned_oid(),
        schema: table.schema.clone(),
        name: table.name.clone(),
        columns: columns
            .into_iter()
            .map(|(name, ty, sql_type, not_null)| Column {
                name,
                ty,
                sql_type,
                not_null,
                has_default: false,
                default_sql: None,
            })
            .collect(),
        skipped: Vec::new(),
        rules: crate::schema::RowRules::default(),
        unique_keys: if pk.is_empty() {
            Vec::new()
        } else {
            vec![pk.clone()]
        },
        primary_key: pk,
    };
    Ok(Change {
        steps: vec![Step {
            statement,
            guard: Guard::TableMissing { qualified },
        }],
        table: planned,
    })
}

/// A nullable column per field the table lacks (rows before it have NULL); a field whose
/// column cannot hold it stops the sink with the statement that would widen the column, which
/// the sink never runs itself: it rewrites the table under an exclusive lock.
fn add_columns(
    settings: &TopicSettings,
    table: &Table,
    shape: &Shape,
) -> Result<Option<Change>, String> {
    let qualified = table.qualified();
    // Fields read by an explicit column source are that column's, not columns of their own.
    let read_by_pointer = |field: &str| {
        settings.columns.values().any(|spec| match spec {
            crate::config::ColumnSpec::Source(s) => s
                .strip_prefix('/')
                .and_then(|p| p.split('/').next())
                .is_some_and(|first| first.replace("~1", "/").replace("~0", "~") == field),
            crate::config::ColumnSpec::Const { .. } => false,
        })
    };
    let mut steps = Vec::new();
    let mut columns = table.columns.clone();
    for f in &shape.value {
        match table.column(&f.name) {
            Some((_, col)) => {
                if settings.columns.contains_key(&f.name) || covers(col, f) {
                    continue;
                }
                return Err(format!(
                    "field {:?} is {} in the record's schema, which column {:?} ({}) of {table} cannot hold without loss; the sink never changes a column's type (that rewrites the table under an exclusive lock). To widen it, run: ALTER TABLE {qualified} ALTER COLUMN {} TYPE {} USING {}::{}",
                    f.name,
                    f.sql,
                    col.name,
                    col.sql_type,
                    quote_ident(&col.name),
                    f.sql,
                    quote_ident(&col.name),
                    f.sql,
                ));
            }
            None if read_by_pointer(&f.name) || table.skipped.contains(&f.name) => {}
            None => {
                if let Some(problem) = name_problem(&f.name) {
                    return Err(problem);
                }
                steps.push(Step {
                    statement: format!(
                        "ALTER TABLE {qualified} ADD COLUMN IF NOT EXISTS {} {}",
                        quote_ident(&f.name),
                        f.sql
                    ),
                    guard: Guard::ColumnMissing {
                        qualified: qualified.clone(),
                        column: f.name.clone(),
                    },
                });
                // Left out of a row it is NULL, as a default would be: rows without the
                // field then name no new column, and their batch needs no change.
                columns.push(Column {
                    name: f.name.clone(),
                    ty: f.ty,
                    sql_type: f.sql.clone(),
                    not_null: false,
                    has_default: true,
                    default_sql: None,
                });
            }
        }
    }
    if steps.is_empty() {
        return Ok(None);
    }
    Ok(Some(Change {
        steps,
        table: Table {
            oid: planned_oid(),
            columns,
            ..table.clone()
        },
    }))
}

/// Why a field cannot be a column of its own name: PostgreSQL cuts an identifier past 63
/// bytes (the column would then be found under no field's name once the table is described
/// again, and the field's values silently lost), and refuses an empty one or a NUL.
fn name_problem(name: &str) -> Option<String> {
    let way_out = "create the column yourself under a name PostgreSQL keeps and read the field into it with [topics.columns] (a JSON pointer, \"/field\")";
    if name.is_empty() || name.contains('\0') {
        return Some(format!(
            "field {name:?} cannot be a column name (PostgreSQL refuses an empty name or a NUL): {way_out}"
        ));
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        let mut cut = MAX_IDENTIFIER_BYTES;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        return Some(format!(
            "field {name:?} is {} bytes long, and PostgreSQL cuts column names at {MAX_IDENTIFIER_BYTES} bytes (to {:?}), so the column would not keep the field's name: {way_out}",
            name.len(),
            &name[..cut]
        ));
    }
    None
}

/// Whether every value of the field's type is stored in the column as it is: the same type,
/// a wider one, or text/JSON (which keep any value's text).
fn covers(col: &Column, field: &FieldColumn) -> bool {
    covers_type(col.ty, field.ty) && covers_numeric(&col.sql_type, field.ty, &field.sql)
}

/// The type part of `covers`: a lossless widening lattice, and text/JSON for anything.
fn covers_type(col: ColumnType, field: ColumnType) -> bool {
    use ColumnType as T;
    if col == field {
        return true;
    }
    match (col, field) {
        (T::Text | T::Json | T::Jsonb, _) => true,
        (T::Int4, T::Int2) | (T::Int8, T::Int2 | T::Int4) => true,
        (T::Numeric, T::Int2 | T::Int4 | T::Int8) => true,
        (T::Float4, T::Int2) | (T::Float8, T::Int2 | T::Int4 | T::Float4) => true,
        (T::Timestamptz | T::Timestamp, T::Date) => true,
        // A time of day is written to timetz at UTC, as the time converter does.
        (T::Timetz, T::Time) => true,
        (T::Array(a), T::Array(b)) => covers_type(*a.element, *b.element),
        _ => false,
    }
}

/// A `numeric(p,s)` column against the field: PostgreSQL rounds to the column's scale without
/// a word, so a field with more decimals (or more integer digits) does not fit. An integer
/// field has its type's digits and no decimals; an unconstrained numeric field (JSON Schema's
/// `number`, `VariableScaleDecimal`) any scale, so it fits only an unconstrained column.
fn covers_numeric(col: &str, field_ty: ColumnType, field: &str) -> bool {
    let parse = |s: &str| -> Option<(u32, u32)> {
        let inner = s.strip_prefix("numeric(")?.strip_suffix(')')?;
        let (p, sc) = inner.split_once(',')?;
        Some((p.trim().parse().ok()?, sc.trim().parse().ok()?))
    };
    let Some((p, s)) = parse(col) else {
        return true;
    };
    let (fp, fs) = match (parse(field), field_ty) {
        (Some(bounds), _) => bounds,
        (None, ColumnType::Int2) => (5, 0),
        (None, ColumnType::Int4) => (10, 0),
        (None, ColumnType::Int8) => (19, 0),
        (None, ColumnType::Numeric) => return false,
        (None, _) => return true,
    };
    fs <= s && fp.saturating_sub(fs) <= p.saturating_sub(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(extra: &str) -> TopicSettings {
        use figment::providers::{Format as _, Toml};
        figment::Figment::from(Toml::string(&format!(
            "name = \"t\"\ntable = \"t\"\n{extra}"
        )))
        .extract()
        .unwrap()
    }

    fn field(name: &str, ty: ColumnType, sql: &str, optional: bool) -> FieldColumn {
        FieldColumn {
            name: name.into(),
            ty,
            sql: sql.into(),
            optional,
        }
    }

    fn orders_shape() -> Shape {
        Shape {
            value: vec![
                field("id", ColumnType::Int8, "int8", false),
                field("note", ColumnType::Text, "text", true),
            ],
            key: None,
        }
    }

    /// Identifiers are quoted, required fields NOT NULL, the key is the primary key.
    #[test]
    fn a_missing_table_is_created_with_its_key() {
        let s = settings("mode = \"upsert\"\nkey = [\"id\"]\nauto_create = true\n[metadata]\noffset = \"kafka offset\"");
        let change = plan(&s, &missing_table(&s, "Or\"ders"), &orders_shape())
            .unwrap()
            .unwrap();
        assert_eq!(
            change.steps[0].statement,
            r#"CREATE TABLE IF NOT EXISTS "public"."Or""ders" ("id" int8 NOT NULL, "note" text, "kafka offset" int8, PRIMARY KEY ("id"))"#
        );
        assert_eq!(change.table.primary_key, ["id"]);
        assert_eq!(change.table.unique_keys, [vec!["id".to_string()]]);
        assert_ne!(change.table.oid, MISSING_OID);
    }

    /// A versioned topic's created table has its version column, bigint and nullable, under
    /// the default name or `version_column`; one that collides with a field is refused.
    #[test]
    fn a_versioned_topic_creates_its_version_column() {
        let s = settings("mode = \"upsert\"\nkey = [\"id\"]\nauto_create = true\nversion_from = \"meta:timestamp\"");
        let change = plan(&s, &missing_table(&s, "orders"), &orders_shape())
            .unwrap()
            .unwrap();
        assert_eq!(
            change.steps[0].statement,
            r#"CREATE TABLE IF NOT EXISTS "public"."orders" ("id" int8 NOT NULL, "note" text, "_version" int8, PRIMARY KEY ("id"))"#
        );
        let s = settings("mode = \"upsert\"\nkey = [\"id\"]\nauto_create = true\nversion_from = \"/v\"\nversion_column = \"note\"");
        let e = plan(&s, &missing_table(&s, "orders"), &orders_shape()).unwrap_err();
        assert!(e.contains("version_column \"note\""), "{e}");
    }

    /// A field name PostgreSQL would cut (past 63 bytes), an empty one or one with a NUL is
    /// refused, saying what PostgreSQL would make of it; 63 bytes are taken. Both when creating
    /// the table and when adding a column.
    #[test]
    fn a_field_name_postgresql_would_cut_or_refuse_is_refused() {
        let s = settings("auto_create = true\nauto_evolve = \"add_columns\"");
        let shape = |name: &str| Shape {
            value: vec![field(name, ColumnType::Text, "text", true)],
            key: None,
        };
        let long = format!("{}é", "x".repeat(62));
        let err = plan(&s, &missing_table(&s, "t"), &shape(&long)).unwrap_err();
        assert!(
            err.contains("64 bytes long") && err.contains(&format!("(to \"{}\")", "x".repeat(62))),
            "{err}"
        );
        let table = existing(&[("id", ColumnType::Int8, "int8")]);
        let err = plan(&s, &table, &shape(&long)).unwrap_err();
        assert!(err.contains("64 bytes long"), "{err}");
        for bad in ["", "a\0b"] {
            let err = plan(&s, &missing_table(&s, "t"), &shape(bad)).unwrap_err();
            assert!(err.contains("cannot be a column name"), "{err}");
        }
        assert!(plan(&s, &missing_table(&s, "t"), &shape(&"x".repeat(63))).is_ok());
        assert!(plan(&s, &table, &shape(&"x".repeat(63))).unwrap().is_some());
    }

    /// Upsert without a key to make the primary key of is refused, naming the setting.
    #[test]
    fn upsert_without_a_key_is_refused() {
        let s = settings("mode = \"upsert\"\nauto_create = true");
        let err = plan(&s, &missing_table(&s, "t"), &orders_shape()).unwrap_err();
        assert!(err.contains("key = [...]"), "{err}");
    }

    /// A Debezium topic in upsert mode without `key` takes the created table's primary key
    /// from the key's struct schema (the source table's), and without one says so; `check`'s
    /// `key_source` says the same before any record, and refuses what no record could fix.
    #[test]
    fn a_debezium_key_schema_gives_the_primary_key_and_check_says_where_it_comes_from() {
        let s = settings("format = \"debezium\"\nauto_create = true");
        let mut shape = orders_shape();
        assert!(plan(&s, &missing_table(&s, "t"), &shape)
            .unwrap_err()
            .contains("carries no struct schema"));
        shape.key = Some(vec![field("id", ColumnType::Int8, "int8", false)]);
        let change = plan(&s, &missing_table(&s, "t"), &shape).unwrap().unwrap();
        assert_eq!(
            change.table.primary_key,
            vec!["id".to_string()],
            "{change:?}"
        );
        assert!(
            format!("{:?}", change.steps).contains("PRIMARY KEY (\\\"id\\\")"),
            "{:?}",
            change.steps
        );
        assert!(key_source(&s).unwrap().unwrap().contains("Debezium key"));
        // A key field the row lacks names no column the value can fill.
        let mut foreign = shape.clone();
        foreign.key = Some(vec![field("tenant", ColumnType::Text, "text", false)]);
        assert!(plan(&s, &missing_table(&s, "t"), &foreign)
            .unwrap_err()
            .contains("\"tenant\" is not a column"));
        // The same shape without Debezium has no key to take.
        let plain = settings("mode = \"upsert\"\nauto_create = true");
        assert!(plan(&plain, &missing_table(&plain, "t"), &shape).is_err());
        assert!(key_source(&plain).unwrap_err().contains("key = [...]"));
        assert!(key_source(&settings("mode = \"upsert\"\nkey_from = \"key\"")).is_ok());
        assert_eq!(key_source(&settings("")).unwrap(), None);
    }

    fn existing(columns: &[(&str, ColumnType, &str)]) -> Table {
        Table {
            oid: 42,
            columns: columns
                .iter()
                .map(|(n, ty, sql)| Column {
                    name: n.to_string(),
                    ty: *ty,
                    sql_type: sql.to_string(),
                    not_null: false,
                    has_default: false,
                    default_sql: None,
                })
                .collect(),
            ..missing_table(&settings(""), "t")
        }
    }

    /// A new field is a nullable column; without auto_evolve nothing changes.
    #[test]
    fn a_new_field_adds_a_nullable_column_only_with_auto_evolve() {
        let table = existing(&[("id", ColumnType::Int8, "bigint")]);
        assert!(plan(&settings(""), &table, &orders_shape())
            .unwrap()
            .is_none());
        let s = settings("auto_evolve = \"add_columns\"");
        let change = plan(&s, &table, &orders_shape()).unwrap().unwrap();
        assert_eq!(
            change.steps[0].statement,
            r#"ALTER TABLE "public"."t" ADD COLUMN IF NOT EXISTS "note" text"#
        );
        assert!(!change.table.columns[1].not_null);
        assert_ne!(change.table.oid, 42, "a new shape stages in its own tables");
    }

    /// A wider field stops with the statement a person would run; a narrower one fits.
    #[test]
    fn a_field_wider_than_its_column_stops_with_the_ddl() {
        let s = settings("auto_evolve = \"add_columns\"");
        let table = existing(&[
            ("id", ColumnType::Int4, "integer"),
            ("note", ColumnType::Text, "text"),
        ]);
        let err = plan(&s, &table, &orders_shape()).unwrap_err();
        assert!(
            err.contains(
                r#"ALTER TABLE "public"."t" ALTER COLUMN "id" TYPE int8 USING "id"::int8"#
            ),
            "{err}"
        );
        let wide = existing(&[
            ("id", ColumnType::Numeric, "numeric"),
            ("note", ColumnType::Jsonb, "jsonb"),
        ]);
        assert!(plan(&s, &wide, &orders_shape()).unwrap().is_none());
        assert!(!covers_numeric(
            "numeric(12,2)",
            ColumnType::Numeric,
            "numeric(12,3)"
        ));
        assert!(covers_numeric(
            "numeric(12,2)",
            ColumnType::Numeric,
            "numeric(10,2)"
        ));
    }

    /// A `numeric(p,s)` column PostgreSQL rounds into without a word: an unconstrained numeric
    /// field (JSON Schema's `number`, Debezium's `VariableScaleDecimal`) has any scale, so it
    /// does not fit; an integer field fits only with room for all its digits.
    #[test]
    fn an_unconstrained_number_or_a_long_integer_does_not_fit_a_numeric_with_a_scale() {
        let s = settings("auto_evolve = \"add_columns\"");
        let shape = |ty: ColumnType, sql: &str| Shape {
            value: vec![field("n", ty, sql, true)],
            key: None,
        };
        let column = |sql: &str| existing(&[("n", ColumnType::Numeric, sql)]);
        let err = plan(
            &s,
            &column("numeric(10,2)"),
            &shape(ColumnType::Numeric, "numeric"),
        )
        .unwrap_err();
        assert!(err.contains(r#"TYPE numeric USING "n"::numeric"#), "{err}");
        assert!(plan(
            &s,
            &column("numeric(18,0)"),
            &shape(ColumnType::Int8, "int8")
        )
        .is_err());
        assert!(plan(
            &s,
            &column("numeric(20,2)"),
            &shape(ColumnType::Int8, "int8")
        )
        .is_err());
        assert!(plan(
            &s,
            &column("numeric(6,2)"),
            &shape(ColumnType::Int4, "int4")
        )
        .is_err());
        for (col, ty, sql) in [
            ("numeric", ColumnType::Numeric, "numeric"),
            ("numeric(19,0)", ColumnType::Int8, "int8"),
            ("numeric(21,2)", ColumnType::Int8, "int8"),
            ("numeric(10,0)", ColumnType::Int4, "int4"),
            ("numeric(5,0)", ColumnType::Int2, "int2"),
            ("numeric(20,0)", ColumnType::Numeric, "numeric(20,0)"),
        ] {
            let planned = plan(&s, &column(col), &shape(ty, sql));
            assert!(matches!(planned, Ok(None)), "{sql} into {col}");
        }
    }

    /// A time of day fits a timetz column (written at UTC); a zoned time does not fit a plain
    /// time column, and a time is no interval.
    #[test]
    fn a_time_of_day_fits_an_existing_timetz_column() {
        assert!(covers_type(ColumnType::Timetz, ColumnType::Time));
        assert!(covers_type(ColumnType::Time, ColumnType::Time));
        assert!(!covers_type(ColumnType::Time, ColumnType::Timetz));
        assert!(!covers_type(ColumnType::Interval, ColumnType::Time));
        assert!(covers_type(ColumnType::Text, ColumnType::Interval));
    }
}
