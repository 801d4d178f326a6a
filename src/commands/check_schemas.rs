//! `check`'s look at a registry topic's schemas: found, compilable, and field by field held
//! against the table the topic writes.

use std::fmt::Write as _;

use crate::config::{spelled, Settings, SubjectPart, TopicSettings};
use crate::mapping::{FieldType, Fit, TopicMapper};
use crate::registry::{RegisteredSchema, RegistryClient, RegistryError};

/// A registry topic's latest key and value schemas: found under the topic's subjects, of the
/// kind the topic reads, compilable, and (for the value) held against the table: a required
/// column the schema cannot fill is a problem, a column it leaves empty a warning, a field no
/// column takes a note (such fields are ignored, as for JSON). Returns the value schema's
/// field types, when it was found and compiled, for what else `check` judges by them.
pub(super) async fn check_schemas(
    settings: &Settings,
    topic: &TopicSettings,
    name: &str,
    mapper: &mut TopicMapper,
    registry: &RegistryClient,
    out: &mut String,
    problems: &mut Vec<String>,
) -> Option<Vec<FieldType>> {
    let strategy = settings
        .schema_registry
        .as_ref()
        .map(|r| r.subject_strategy)?;
    let mut value_types = None;
    let (value_kind, key_kind) = mapper.registry_kinds();
    for (part, kind) in [
        (SubjectPart::Value, value_kind),
        (SubjectPart::Key, key_kind),
    ] {
        if kind.is_none() {
            continue;
        }
        let Some(subject) = strategy.subject(name, part, topic.record_name.as_deref()) else {
            problems.push(format!(
                "topic {name:?}: subject_strategy = \"{}\" names subjects by record; set record_name in the topic so check can find its schema",
                spelled(&strategy)
            ));
            continue;
        };
        let (id, schema) = match registry.latest(&subject).await {
            Ok(found) => found,
            Err(RegistryError::NotFound(_)) => {
                problems.push(format!(
                    "topic {name:?}: the registry has no schema under subject {subject:?}"
                ));
                continue;
            }
            Err(e) => {
                problems.push(format!("topic {name:?}: {e}"));
                continue;
            }
        };
        let _ = writeln!(out, "  schema {subject:?}: id {id} ({:?})", schema.kind);
        if let Err(e) = mapper.learn(id, &schema) {
            problems.push(format!("topic {name:?}, subject {subject:?}: {e}"));
            continue;
        }
        if part == SubjectPart::Key {
            continue;
        }
        let fields = match mapper.schema_fields(&schema) {
            Ok(fields) => fields,
            Err(e) => {
                problems.push(format!("topic {name:?}, subject {subject:?}: {e}"));
                continue;
            }
        };
        let columns = mapper.columns_by_field();
        for (col, field) in &columns {
            if fields.iter().any(|f| f == field) {
                continue;
            }
            if col.not_null && !col.has_default {
                problems.push(format!(
                    "topic {name:?}: column {} is required, but schema {id} ({subject:?}) has no field {field:?}",
                    col.name
                ));
            } else {
                let _ = writeln!(
                    out,
                    "  warning: column {} gets {}: schema {id} has no field {field:?}",
                    col.name,
                    if col.has_default {
                        "its default"
                    } else {
                        "NULL"
                    }
                );
            }
        }
        for field in &fields {
            if !columns.iter().any(|(_, f)| f == field) {
                let _ = writeln!(out, "  field {field:?}: no column takes it (ignored)");
            }
        }
        value_types = check_field_types(name, id, &subject, &schema, mapper, out, problems);
    }
    value_types
}

/// Each field's schema type against the column taking it: a type no value of which converts
/// into the column is a problem (every record would fail there); one that allows null into a
/// NOT NULL column a warning (only its null records fail). Returns the field types.
fn check_field_types(
    name: &str,
    id: u32,
    subject: &str,
    schema: &RegisteredSchema,
    mapper: &TopicMapper,
    out: &mut String,
    problems: &mut Vec<String>,
) -> Option<Vec<FieldType>> {
    // The schema compiled and its fields were listed, so an error here was reported already.
    let types = mapper.schema_field_types(schema).ok()?;
    for (col, field) in mapper.columns_by_whole_field() {
        let Some(ty) = types.iter().find(|t| t.name == field) else {
            continue;
        };
        match TopicMapper::field_fit(ty, col) {
            Fit::Fits => {}
            Fit::Never => problems.push(format!(
                "topic {name:?}: field {field:?} of schema {id} ({subject:?}) is {}, which never converts into column {} ({})",
                ty.schema_type, col.name, col.sql_type
            )),
            Fit::NullIntoNotNull => {
                let _ = writeln!(
                    out,
                    "  warning: field {field:?} is {}, which may be null, but column {} ({}) is NOT NULL: such records fail",
                    ty.schema_type, col.name, col.sql_type
                );
            }
        }
    }
    Some(types)
}
