//! Target tables as PostgreSQL describes them, read once at startup.
//!
//! The row mapping and the COPY statements are derived from this description, so a column the
//! sink cannot encode is reported before the first record is read.

use std::fmt;

use sqlx::PgPool;

/// The column types the sink encodes in binary COPY format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Text,
    Int2,
    Int4,
    Int8,
    Numeric,
    Float4,
    Float8,
    Bool,
    Timestamptz,
    Timestamp,
    Date,
    Uuid,
    Json,
    Jsonb,
    Bytea,
    /// `time` without time zone: microseconds since midnight.
    Time,
    /// `timetz`: microseconds since midnight and the zone's offset.
    Timetz,
    /// `interval`: microseconds, days and months, kept apart as PostgreSQL keeps them.
    Interval,
    Inet,
    /// `cidr`: a network, which PostgreSQL refuses with bits set right of its mask.
    Cidr,
    Macaddr,
    Macaddr8,
    /// A one-dimensional array of one of the types above.
    Array(ArrayOf),
}

/// What an array column holds. Each element is written as a column of `element` would be;
/// the binary array format also names the element type, and PostgreSQL refuses an array
/// whose element OID is not exactly the column's (a domain or an enum, not its base), so
/// that OID travels along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayOf {
    /// A scalar: `describe` takes it from `scalar` only, and an element type that is an
    /// array is refused when a value is written.
    pub element: &'static ColumnType,
    /// The element type as the column declares it (`pg_type.typelem`).
    pub element_oid: u32,
}

impl ColumnType {
    /// Maps a base type OID (after resolving domains) to a supported scalar type. A
    /// `'static` reference, so an array's element type can point at it and stay `Copy`.
    fn scalar(oid: u32) -> Option<&'static Self> {
        Some(match oid {
            25 | 1043 | 1042 | 19 => &ColumnType::Text, // text, varchar, bpchar, name
            21 => &ColumnType::Int2,
            23 => &ColumnType::Int4,
            20 => &ColumnType::Int8,
            1700 => &ColumnType::Numeric,
            700 => &ColumnType::Float4,
            701 => &ColumnType::Float8,
            16 => &ColumnType::Bool,
            1184 => &ColumnType::Timestamptz,
            1114 => &ColumnType::Timestamp,
            1082 => &ColumnType::Date,
            2950 => &ColumnType::Uuid,
            114 => &ColumnType::Json,
            3802 => &ColumnType::Jsonb,
            17 => &ColumnType::Bytea,
            1083 => &ColumnType::Time,
            1266 => &ColumnType::Timetz,
            1186 => &ColumnType::Interval,
            869 => &ColumnType::Inet,
            650 => &ColumnType::Cidr,
            829 => &ColumnType::Macaddr,
            774 => &ColumnType::Macaddr8,
            _ => return None,
        })
    }

    /// A column's type from what `COLUMNS_SQL` found: `element_oid` is non-zero for arrays,
    /// whose elements must then be of a supported scalar type (`element_base`).
    fn from_oids(base_oid: u32, element_oid: u32, element_base: u32) -> Option<Self> {
        if element_oid == 0 {
            return Self::scalar(base_oid).copied();
        }
        Some(ColumnType::Array(ArrayOf {
            element: Self::scalar(element_base)?,
            element_oid,
        }))
    }

    /// The type each value is converted to: an array's element type, else the type itself.
    pub(crate) fn scalar_part(self) -> ColumnType {
        match self {
            ColumnType::Array(of) => *of.element,
            other => other,
        }
    }
}

/// One column of a target table.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    /// As PostgreSQL prints it (`numeric(12,2)`), for messages.
    pub sql_type: String,
    pub not_null: bool,
    /// A column with a default may be left out of a row; the default then applies.
    pub has_default: bool,
    /// The default as SQL (PostgreSQL's own rendering of it, from the catalog), for merges
    /// that insert rows whose records left the column out; `None` where NULL applies.
    pub default_sql: Option<String>,
}

/// A target table and its writable columns, in table order.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table's OID: a stable, identifier-safe name for per-table session objects.
    pub oid: u32,
    pub schema: String,
    pub name: String,
    pub columns: Vec<Column>,
    /// Columns the sink never writes (generated, identity ALWAYS), by name, for `check`.
    pub skipped: Vec<String>,
    /// The primary key's columns, in key order; empty without one.
    pub primary_key: Vec<String>,
    /// Column sets of every plain unique index that is not deferrable (the primary key
    /// included): what `ON CONFLICT (…)` can name, and what a COPY is checked against row by
    /// row.
    pub unique_keys: Vec<Vec<String>>,
    /// What besides a row's own values PostgreSQL checks it against.
    pub rules: RowRules,
}

/// What can make PostgreSQL refuse a row beyond the row's own column values (`NOT NULL`,
/// domains, the partition it falls in). An upsert batch that names a key several times folds
/// them, and must still show PostgreSQL every superseded record: with none of these, a probe
/// of the superseded records' own rows is what applying each alone would check; with any, they
/// are applied one round per record (`writer::rounds`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowRules {
    /// `CHECK` constraints of the table or its partitions: one may relate a column a partial
    /// record carries to one the update keeps as stored.
    pub checks: bool,
    /// Triggers, foreign keys, exclusion constraints, more than one unique index, row-level
    /// security or rules, on the table or its partitions: what they refuse depends on other
    /// rows, or on the row an upsert updates.
    pub beyond_the_row: bool,
    /// A unique index whose entries the sink cannot compute from a row's values (a predicate,
    /// an expression, `NULLS NOT DISTINCT`): the writer orders every row that may touch it
    /// (`writer::unique_rounds`).
    pub opaque_unique: bool,
}

impl Table {
    /// `"schema"."table"`, quoted for SQL.
    pub fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }

    /// Exact, case-sensitive: configuration names columns as PostgreSQL stores them. The
    /// index comes along because rows and sources are kept by position.
    pub fn column(&self, name: &str) -> Option<(usize, &Column)> {
        self.columns
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == name)
    }
}

/// Unquoted, for people; SQL uses `qualified`.
impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// Quotes an identifier from configuration: names are never spliced into SQL unquoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Why a table cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("table {schema}.{table} does not exist (or the sink's role cannot see it)")]
    Missing { schema: String, table: String },
    #[error("column {column} of {table} has type {sql_type}, which the sink cannot write; supported: text/varchar/enum, int2/4/8, numeric, float4/8, bool, timestamptz, timestamp, date, time, timetz, interval, uuid, json, jsonb, bytea, inet, cidr, macaddr, macaddr8, citext, domains over these, and one-dimensional arrays of these")]
    Unsupported {
        table: String,
        column: String,
        sql_type: String,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What the mapping must know per column: the base type, for an array its element type (as
/// declared, and its base), NOT NULL (a domain's too), whether a default applies (identity BY
/// DEFAULT counts) and whether the column may be written at all.
const COLUMNS_SQL: &str = "
SELECT a.attname::text,
       -- Domains are written as their base type (through domains over domains); enum values
       -- travel as their label text, and so does citext, whose binary form is text's
       -- (`citextsend`). citext is an extension type: its OID differs between databases, so
       -- it is recognised by its name and its send function, in whatever schema the extension
       -- was created.
       CASE WHEN b.typtype = 'e' OR (b.typname = 'citext' AND bs.proname = 'citextsend') THEN 25
            ELSE b.oid::int8 END AS base_oid,
       -- An array (or a domain over one) is the array type of its element: `typarray` tells
       -- true arrays from fixed-length types with a `typelem` (point, name) and from
       -- int2vector/oidvector. 0 when the column is no array.
       COALESCE(e.oid, 0)::int8 AS element_oid,
       CASE WHEN eb.typtype = 'e' OR (eb.typname = 'citext' AND ebs.proname = 'citextsend') THEN 25
            ELSE COALESCE(eb.oid, 0)::oid::int8 END AS element_base,
       format_type(a.atttypid, a.atttypmod) AS sql_type,
       a.attnotnull OR tb.not_null AS not_null,
       a.atthasdef OR a.attidentity = 'd' AS has_default,
       a.attidentity = 'a' OR a.attgenerated <> '' AS never_written,
       -- An identity column has no pg_attrdef row: its default is its sequence's next value.
       CASE WHEN a.attidentity = 'd'
            THEN format('nextval(%L::regclass)', pg_get_serial_sequence(a.attrelid::regclass::text, a.attname))
            ELSE pg_get_expr(d.adbin, d.adrelid) END AS default_sql
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  -- The type under every domain, and whether any domain on the way is NOT NULL.
  CROSS JOIN LATERAL (
    WITH RECURSIVE chain(oid, under, not_null) AS (
      SELECT t.oid, t.typbasetype, t.typnotnull FROM pg_type t WHERE t.oid = a.atttypid
      UNION ALL
      SELECT t.oid, t.typbasetype, t.typnotnull FROM chain c JOIN pg_type t ON t.oid = c.under
    )
    SELECT max(oid) FILTER (WHERE under = 0) AS base, bool_or(not_null) AS not_null FROM chain
  ) tb
  JOIN pg_type b ON b.oid = tb.base
  LEFT JOIN pg_proc bs ON bs.oid = b.typsend
  LEFT JOIN pg_type e ON e.oid = b.typelem AND e.typarray = b.oid
  -- An element may be a domain too (over an enum, over another domain).
  LEFT JOIN LATERAL (
    WITH RECURSIVE chain(oid, under) AS (
      SELECT t.oid, t.typbasetype FROM pg_type t WHERE t.oid = e.oid
      UNION ALL
      SELECT t.oid, t.typbasetype FROM chain c JOIN pg_type t ON t.oid = c.under
    )
    SELECT max(oid) FILTER (WHERE under = 0) AS base FROM chain
  ) ebase ON true
  LEFT JOIN pg_type eb ON eb.oid = ebase.base
  LEFT JOIN pg_proc ebs ON ebs.oid = eb.typsend
 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum";

/// Unique indexes without predicates or expressions, each as whether it is the primary key,
/// whether it is checked row by row (not deferrable), and its column names in order.
const UNIQUE_KEYS_SQL: &str = "
SELECT i.indisprimary, i.indimmediate, array_agg(a.attname::text ORDER BY k.ord)
  FROM pg_index i
  CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
 GROUP BY i.indexrelid, i.indisprimary, i.indimmediate
 ORDER BY i.indisprimary DESC, i.indexrelid";

/// The table's `RowRules`, over the table and every partition of it (`pg_partition_tree` is
/// empty for a table that is not partitioned).
const ROW_RULES_SQL: &str = "
WITH tree AS (SELECT $1::oid AS relid UNION SELECT relid::oid FROM pg_partition_tree($1))
SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid IN (SELECT relid FROM tree) AND contype = 'c'),
       EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid IN (SELECT relid FROM tree) AND NOT tgisinternal)
       OR EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid IN (SELECT relid FROM tree) AND contype IN ('f', 'x'))
       OR EXISTS (SELECT 1 FROM pg_class
                   WHERE oid IN (SELECT relid FROM tree) AND (relrowsecurity OR relhasrules))
       OR (SELECT count(DISTINCT i.indexrelid) FROM pg_index i
            WHERE i.indrelid = $1 AND i.indisunique) > 1
       OR EXISTS (SELECT 1 FROM pg_index i
                   WHERE i.indrelid IN (SELECT relid FROM tree) AND i.indrelid <> $1
                     AND i.indisunique
                     AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)),
       -- `indnullsnotdistinct` is read through jsonb: the column exists from PostgreSQL 15 on.
       EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indrelid = $1 AND i.indisunique AND NOT i.indisprimary
                  AND (i.indpred IS NOT NULL OR i.indexprs IS NOT NULL
                       OR coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::bool, false)))";

/// Reads a table's columns; names are bound as values, never spliced.
pub async fn describe(pool: &PgPool, schema: &str, table: &str) -> Result<Table, SchemaError> {
    let oid: Option<i64> = sqlx::query_scalar(
        "SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
    )
    .bind(schema)
    .bind(table)
    .fetch_optional(pool)
    .await?;
    let oid = oid.ok_or_else(|| SchemaError::Missing {
        schema: schema.into(),
        table: table.into(),
    })?;
    type Row = (
        String,
        i64,
        i64,
        i64,
        String,
        bool,
        bool,
        bool,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(COLUMNS_SQL)
        .bind(sqlx::postgres::types::Oid(oid as u32))
        .fetch_all(pool)
        .await?;
    let mut columns = Vec::new();
    let mut skipped = Vec::new();
    for (
        name,
        base_oid,
        element_oid,
        element_base,
        sql_type,
        not_null,
        has_default,
        never_written,
        default_sql,
    ) in rows
    {
        if never_written {
            skipped.push(name);
            continue;
        }
        let ty = ColumnType::from_oids(base_oid as u32, element_oid as u32, element_base as u32)
            .ok_or_else(|| SchemaError::Unsupported {
                table: format!("{schema}.{table}"),
                column: name.clone(),
                sql_type: sql_type.clone(),
            })?;
        columns.push(Column {
            name,
            ty,
            sql_type,
            not_null,
            has_default,
            default_sql,
        });
    }
    let keys: Vec<(bool, bool, Vec<String>)> = sqlx::query_as(UNIQUE_KEYS_SQL)
        .bind(sqlx::postgres::types::Oid(oid as u32))
        .fetch_all(pool)
        .await?;
    let primary_key = keys
        .iter()
        .find(|(primary, _, _)| *primary)
        .map(|(_, _, cols)| cols.clone())
        .unwrap_or_default();
    let (checks, beyond_the_row, opaque_unique): (bool, bool, bool) = sqlx::query_as(ROW_RULES_SQL)
        .bind(sqlx::postgres::types::Oid(oid as u32))
        .fetch_one(pool)
        .await?;
    Ok(Table {
        oid: oid as u32,
        schema: schema.into(),
        name: table.into(),
        columns,
        skipped,
        primary_key,
        // A deferrable constraint cannot arbitrate `ON CONFLICT`.
        unique_keys: keys
            .into_iter()
            .filter(|(_, immediate, _)| *immediate)
            .map(|(_, _, cols)| cols)
            .collect(),
        rules: RowRules {
            checks,
            beyond_the_row,
            opaque_unique,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_described_by_their_declared_element_and_its_base_type() {
        assert_eq!(ColumnType::from_oids(23, 0, 0), Some(ColumnType::Int4));
        assert_eq!(ColumnType::from_oids(600, 0, 0), None, "point");
        // int4[]; an array of an enum (element OID its own, base text); of an unsupported type.
        assert_eq!(
            ColumnType::from_oids(1007, 23, 23),
            Some(ColumnType::Array(ArrayOf {
                element: &ColumnType::Int4,
                element_oid: 23
            }))
        );
        let of_enum = ColumnType::from_oids(16_390, 16_391, 25).unwrap();
        assert_eq!(of_enum.scalar_part(), ColumnType::Text);
        assert!(matches!(of_enum, ColumnType::Array(a) if a.element_oid == 16_391));
        assert_eq!(ColumnType::from_oids(1017, 600, 600), None, "point[]");
        // The types with fixed OIDs beyond the first set; citext arrives as text (25) from
        // the catalog query, which recognises it by name.
        for (oid, ty) in [
            (1083, ColumnType::Time),
            (1266, ColumnType::Timetz),
            (1186, ColumnType::Interval),
            (869, ColumnType::Inet),
            (650, ColumnType::Cidr),
            (829, ColumnType::Macaddr),
            (774, ColumnType::Macaddr8),
        ] {
            assert_eq!(ColumnType::from_oids(oid, 0, 0), Some(ty));
        }
        let intervals = ColumnType::from_oids(1187, 1186, 1186).unwrap();
        assert_eq!(intervals.scalar_part(), ColumnType::Interval);
    }

    #[test]
    fn identifiers_are_quoted_and_escaped() {
        assert_eq!(quote_ident("orders"), "\"orders\"");
        assert_eq!(
            quote_ident("a\"; DROP TABLE x; --"),
            "\"a\"\"; DROP TABLE x; --\""
        );
    }
}
