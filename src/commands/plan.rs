//! `kafka-pg-sink check --plan`: the DDL `auto_create`/`auto_evolve` would run now, from the
//! registry's latest schemas (a `.proto`'s first message, as index `[0]` names it), changing
//! nothing. Connect JSON carries its schema in each record,
//! so for it the plan waits for a record, and says so.

use std::fmt::Write as _;

use crate::config::{Encoding, RecordFormat, Settings, SubjectPart, TopicSettings};
use crate::mapping::TopicMapper;
use crate::registry::{RegisteredSchema, RegistryClient};

/// Appends the topic's plan to `out`; what would stop the sink goes to `problems`.
pub(super) async fn print(
    settings: &Settings,
    topic: &TopicSettings,
    name: &str,
    mapper: &TopicMapper,
    registry: Option<&RegistryClient>,
    out: &mut String,
    problems: &mut Vec<String>,
) {
    if !topic.auto_create && topic.auto_evolve.is_none() {
        let _ = writeln!(
            out,
            "  plan: auto_create and auto_evolve are off: the sink changes no table"
        );
        return;
    }
    let registry_format = match topic.format {
        RecordFormat::Debezium => topic.encoding.uses_registry(),
        format => format.registry_encoding().is_some(),
    };
    if !registry_format {
        let _ = writeln!(out, "  plan: Connect JSON records carry their own schema, so the DDL is decided by a record: none can be planned before one arrives");
        return;
    }
    let (Some(registry), Some(strategy)) = (
        registry,
        settings
            .schema_registry
            .as_ref()
            .map(|r| r.subject_strategy),
    ) else {
        return;
    };
    let latest = |part: SubjectPart| {
        let subject = strategy.subject(name, part, topic.record_name.as_deref());
        async move {
            let subject = subject?;
            registry
                .latest(&subject)
                .await
                .ok()
                .map(|(id, s)| (id, subject, s))
        }
    };
    let Some((id, subject, value)) = latest(SubjectPart::Value).await else {
        problems.push(format!(
            "topic {name:?}: no latest value schema to plan auto_create/auto_evolve from"
        ));
        return;
    };
    let key: Option<std::sync::Arc<RegisteredSchema>> = match topic.key_format {
        Encoding::Json => None,
        _ => latest(SubjectPart::Key).await.map(|(_, _, s)| s),
    };
    match crate::ddl::plan_for_schemas(topic, mapper.table(), &value, key.as_deref()) {
        Ok(None) => {
            let _ = writeln!(
                out,
                "  plan: the table fits schema {id} ({subject:?}): no DDL"
            );
        }
        Ok(Some(change)) => {
            let _ = writeln!(
                out,
                "  plan for schema {id} ({subject:?}), run in the first batch that carries it:"
            );
            for step in &change.steps {
                let _ = writeln!(out, "    {};", step.statement());
            }
        }
        Err(e) => problems.push(format!("topic {name:?}: schema {id} ({subject:?}): {e}")),
    }
}
