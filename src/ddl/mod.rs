//! Tables that follow their records' schemas (`auto_create`, `auto_evolve = "add_columns"`).
//!
//! PostgreSQL's DDL is transactional, so a schema change commits in the same transaction as
//! the batch that first carries it: a crash leaves no table without its rows and no column
//! without its batch. Here: the settings' limits, reading a record's schema (`record`), what the
//! schema asks of the table (`plan`), the per-topic state of changes not yet known committed
//! (`Evolver`), and running the statements in the writer (`apply`). The pipeline calls in before
//! a record is encoded (`pipeline/evolve.rs`); `check --plan` prints what would run.

mod apply;
mod plan;
mod record;
mod types;

use std::borrow::Cow;
use std::collections::HashSet;

pub(crate) use apply::{apply, is_concurrent_change};
pub use plan::Step;
pub(crate) use plan::{missing_table, Change, MISSING_OID};

use crate::config::{Encoding, KeyFrom, RecordFormat, TopicSettings, WriteMode};
use crate::registry::{RegisteredSchema, RegistryError};
use crate::schema::Table;

/// Why a topic's settings cannot use `auto_create`/`auto_evolve`, for the configuration check.
pub(crate) fn config_problem(topic: &TopicSettings) -> Option<String> {
    if !topic.auto_create && topic.auto_evolve.is_none() {
        return None;
    }
    let reads_schema = match topic.format {
        RecordFormat::ConnectJson | RecordFormat::Avro => true,
        RecordFormat::Debezium => matches!(topic.encoding, Encoding::Json | Encoding::Avro),
        _ => false,
    };
    if matches!(topic.format, RecordFormat::Json | RecordFormat::Raw) {
        return Some(format!(
            "auto_create and auto_evolve take the columns from the records' schema, and format = \"{}\" records carry none: create the table yourself (CREATE TABLE ...) and remove auto_create/auto_evolve, or use a format with a schema (connect-json, avro, debezium)",
            if topic.format == RecordFormat::Raw { "raw" } else { "json" }
        ));
    }
    if !reads_schema {
        return Some("auto_create and auto_evolve read Connect JSON, Avro and Debezium (JSON or Avro) schemas; for protobuf and json-schema topics create the table yourself".into());
    }
    if topic.auto_evolve.is_some() && !topic.map_by_name {
        return Some(
            "auto_evolve adds columns that take their field by name: it needs map_by_name = true"
                .into(),
        );
    }
    None
}

/// The settings a mapping of `table` is checked against: a table still to be created has no
/// columns, so nothing is checked against it (the mapping is rebuilt on the created table,
/// with the topic's own settings, before any record is encoded).
pub(crate) fn settings_for<'a>(
    settings: &'a TopicSettings,
    table: &Table,
) -> Cow<'a, TopicSettings> {
    if table.oid != MISSING_OID {
        return Cow::Borrowed(settings);
    }
    let mut stub = settings.clone();
    stub.mode = Some(WriteMode::Insert);
    stub.key.clear();
    stub.key_from = KeyFrom::Value;
    stub.columns.clear();
    stub.metadata = Default::default();
    stub.time_units.clear();
    stub.delete_on_tombstone = false;
    Cow::Owned(stub)
}

/// For `check --plan`: the change registered schemas (the value's and, for a record key, the
/// key's latest) would make to `table` now; an error is what would stop the sink.
pub(crate) fn plan_for_schemas(
    settings: &TopicSettings,
    table: &Table,
    value: &RegisteredSchema,
    key: Option<&RegisteredSchema>,
) -> Result<Option<Change>, String> {
    let mut shape = record::shape_of_schema(value, settings.format == RecordFormat::Debezium)?;
    shape.key = key.and_then(record::key_fields);
    plan::plan(settings, table, &shape)
}

/// Why a record's schema did not lead to a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckError {
    /// The record's own problem (no schema for a missing table, a bad schema): a dead letter
    /// or a stop, by `on_error`.
    Record(String),
    /// The table cannot take the schema without a person: the sink stops, saying what to run.
    Fatal(String),
    /// The registry did not answer: retried.
    Unavailable(String),
}

/// One topic's schema changes: which record schemas the table already fits, and the changes
/// planned but not yet known committed, which every batch of the topic carries until one of
/// them commits.
#[derive(Debug)]
pub(crate) struct Evolver {
    settings: TopicSettings,
    /// Schema identities the current table fits (a Connect schema's hash, registry ids).
    fits: HashSet<u64>,
    /// The identity whose change was last planned, fitted once it is adopted.
    planned: Option<u64>,
    pending: Vec<(u64, Step)>,
    next_seq: u64,
    /// Batches that carried steps, with the last step's sequence number.
    carried: Vec<(u64, u64)>,
    /// A batch with steps failed: the table must be described again.
    redescribe: bool,
}

impl Evolver {
    /// `None` for topics that use neither setting: they keep today's path untouched.
    pub(crate) fn for_settings(settings: &TopicSettings) -> Option<Self> {
        (settings.auto_create || settings.auto_evolve.is_some()).then(|| Self {
            settings: settings.clone(),
            fits: HashSet::new(),
            planned: None,
            pending: Vec::new(),
            next_seq: 0,
            carried: Vec::new(),
            redescribe: false,
        })
    }

    pub(crate) fn settings(&self) -> &TopicSettings {
        &self.settings
    }

    /// What the record's schema needs of `table`: `None` when it fits (or the record brings no
    /// schema to a table that exists: today's rules apply).
    pub(crate) fn check(
        &mut self,
        table: &Table,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        fetch: &mut dyn FnMut(u32) -> Result<RegisteredSchema, RegistryError>,
    ) -> Result<Option<Change>, CheckError> {
        let missing = table.oid == MISSING_OID;
        let Some(found) = record::identify(&self.settings, value, key) else {
            return if missing {
                Err(CheckError::Record(format!(
                    "table {table} does not exist and this record has no schema to create it from (auto_create needs one); create the table yourself"
                )))
            } else {
                Ok(None)
            };
        };
        if self.fits.contains(&found.identity) {
            return Ok(None);
        }
        let shape = record::shape(&self.settings, &found, fetch)?;
        match plan::plan(&self.settings, table, &shape).map_err(CheckError::Fatal)? {
            None => {
                self.fits.insert(found.identity);
                Ok(None)
            }
            Some(change) => {
                self.planned = Some(found.identity);
                Ok(Some(change))
            }
        }
    }

    /// The change is the topic's now: its steps ride on every batch until one commits, and the
    /// schemas fitted before are checked again against the new table.
    pub(crate) fn adopt(&mut self, change: &Change) {
        for step in &change.steps {
            self.next_seq += 1;
            self.pending.push((self.next_seq, step.clone()));
        }
        self.fits.clear();
        self.fits.extend(self.planned.take());
    }

    /// The steps batch `batch` must run before its rows; noted, so its outcome settles them.
    pub(crate) fn steps_for(&mut self, batch: u64) -> Vec<Step> {
        let Some(&(last, _)) = self.pending.last() else {
            return Vec::new();
        };
        self.carried.push((batch, last));
        self.pending.iter().map(|(_, s)| s.clone()).collect()
    }

    /// A batch's outcome: committed, its steps are done; failed, nothing of them stayed and the
    /// table is described again before more records are mapped.
    pub(crate) fn answered(&mut self, batch: u64, committed: bool) {
        let Some(i) = self.carried.iter().position(|&(b, _)| b == batch) else {
            return;
        };
        let (_, last) = self.carried.remove(i);
        if committed {
            self.pending.retain(|&(seq, _)| seq > last);
        } else {
            self.redescribe = true;
        }
    }

    /// Whether the table must be described again (a batch with steps failed).
    pub(crate) fn needs_redescribe(&self) -> bool {
        self.redescribe
    }

    /// The table was described again: what was planned is forgotten, and each schema is held
    /// against the table as it is. (Sealed batches keep their own copies of their steps.)
    pub(crate) fn redescribed(&mut self) {
        self.redescribe = false;
        self.pending.clear();
        self.fits.clear();
        self.planned = None;
    }
}

#[cfg(test)]
mod tests;
