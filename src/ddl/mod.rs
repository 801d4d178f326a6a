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
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) use apply::{apply, is_concurrent_change};
pub use plan::Step;
pub(crate) use plan::{key_source, missing_table, Change, MISSING_OID};

use crate::config::{KeyFrom, RecordFormat, TopicSettings, WriteMode};
use crate::registry::{RegisteredSchema, RegistryError};
use crate::schema::{SchemaError, Table};

/// The topic's table from the catalog; a missing one, with `auto_create`, as a table still to
/// be created (from the first record's schema, in that record's batch).
pub(crate) async fn describe(
    pool: &sqlx::PgPool,
    settings: &TopicSettings,
    name: &str,
) -> Result<Table, SchemaError> {
    match crate::schema::describe(pool, &settings.schema, name).await {
        Err(SchemaError::Missing { .. }) if settings.auto_create => {
            Ok(missing_table(settings, name))
        }
        described => described,
    }
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
    stub.bytea_encoding.clear();
    stub.json_text.clear();
    stub.delete_on_tombstone = false;
    Cow::Owned(stub)
}

/// For `check --plan`: the change registered schemas (the value's and, for a record key, the
/// key's latest; a Protobuf schema's first message) would make to `table` now; an error is
/// what would stop the sink.
pub(crate) fn plan_for_schemas(
    settings: &TopicSettings,
    table: &Table,
    value: &RegisteredSchema,
    key: Option<&RegisteredSchema>,
) -> Result<Option<Change>, String> {
    let debezium = settings.format == RecordFormat::Debezium;
    let mut shape = record::shape_of_schema(value, record::FIRST_MESSAGE, debezium)?;
    shape.key = key.and_then(|k| record::key_fields(k, record::FIRST_MESSAGE));
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

/// What a record's schema asks.
#[derive(Debug)]
pub(crate) enum Checked {
    /// The table fits; the row needs the pending steps up to this one (0: none).
    Fits(u64),
    /// The table must change first.
    Change(Change),
}

/// One topic's schema changes: which record schemas the table already fits, and the changes
/// planned but not yet known committed. A batch carries the changes its rows need (a row needs
/// the table, and the new columns whose fields it has) until a batch with them commits.
#[derive(Debug)]
pub(crate) struct Evolver {
    settings: TopicSettings,
    /// Schema identities the current table fits (a Connect schema's hash, registry ids), with
    /// the fields their rows have.
    fits: HashMap<u64, Arc<[String]>>,
    /// The identity whose change was last planned, fitted once it is adopted.
    planned: Option<(u64, Arc<[String]>)>,
    pending: Vec<(u64, Step)>,
    next_seq: u64,
    /// Per lane: the last pending step the open batch's rows need (0: none).
    needs: Vec<u64>,
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
            fits: HashMap::new(),
            planned: None,
            pending: Vec::new(),
            next_seq: 0,
            needs: Vec::new(),
            carried: Vec::new(),
            redescribe: false,
        })
    }

    /// The topic's settings, to rebuild its mapping after a change or a new description.
    pub(crate) fn settings(&self) -> &TopicSettings {
        &self.settings
    }

    /// The last pending step a row with `fields` needs (`None` fields: unknown, so all). In
    /// upsert mode every row needs them all: its batch's staging table is made from the table
    /// as its transaction sees it, and must have the new columns.
    fn need_of(&self, fields: Option<&[String]>) -> u64 {
        let fields = fields.filter(|_| self.settings.write_mode() != WriteMode::Upsert);
        self.pending
            .iter()
            .rev()
            .find(|(_, step)| fields.is_none_or(|f| step.needed_by(f)))
            .map_or(0, |(seq, _)| *seq)
    }

    /// What the record's schema needs of `table`: a change to plan, or that it fits, with the
    /// pending steps its row needs (`note_need` once it is in a batch).
    pub(crate) fn check(
        &mut self,
        table: &Table,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        fetch: &mut dyn FnMut(u32) -> Result<RegisteredSchema, RegistryError>,
    ) -> Result<Checked, CheckError> {
        let missing = table.oid == MISSING_OID;
        let Some(found) = record::identify(&self.settings, value, key) else {
            return if missing {
                Err(CheckError::Record(format!(
                    "table {table} does not exist and this record has no schema to create it from (auto_create needs one); create the table yourself"
                )))
            } else {
                Ok(Checked::Fits(self.need_of(None)))
            };
        };
        if let Some(fields) = self.fits.get(&found.identity) {
            return Ok(Checked::Fits(self.need_of(Some(fields))));
        }
        let shape = record::shape(&self.settings, &found, fetch)?;
        let fields: Arc<[String]> = shape.value.iter().map(|f| f.name.clone()).collect();
        match plan::plan(&self.settings, table, &shape).map_err(CheckError::Fatal)? {
            None => {
                let need = self.need_of(Some(&fields));
                self.fits.insert(found.identity, fields);
                Ok(Checked::Fits(need))
            }
            Some(change) => {
                self.planned = Some((found.identity, fields));
                Ok(Checked::Change(change))
            }
        }
    }

    /// The change is the topic's now: its steps are pending until a batch with them commits,
    /// and the schemas fitted before are checked again against the new table. Returns what the
    /// record that planned it needs.
    pub(crate) fn adopt(&mut self, change: &Change) -> u64 {
        for step in &change.steps {
            self.next_seq += 1;
            self.pending.push((self.next_seq, step.clone()));
        }
        self.fits.clear();
        let Some((identity, fields)) = self.planned.take() else {
            return self.need_of(None);
        };
        let need = self.need_of(Some(&fields));
        self.fits.insert(identity, fields);
        need
    }

    /// A record is in lane `lane`'s open batch and needs the pending steps up to `need`.
    pub(crate) fn note_need(&mut self, lane: usize, need: u64) {
        if need == 0 {
            return;
        }
        if self.needs.len() <= lane {
            self.needs.resize(lane + 1, 0);
        }
        self.needs[lane] = self.needs[lane].max(need);
    }

    /// The steps batch `batch`, sealed from lane `lane`, must run before its rows; noted, so
    /// its outcome settles them.
    pub(crate) fn steps_for(&mut self, lane: usize, batch: u64) -> Vec<Step> {
        let need = self.needs.get_mut(lane).map_or(0, std::mem::take);
        let steps: Vec<Step> = self
            .pending
            .iter()
            .filter(|(seq, _)| *seq <= need)
            .map(|(_, s)| s.clone())
            .collect();
        if !steps.is_empty() {
            self.carried.push((batch, need));
        }
        steps
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
        self.needs.clear();
        self.fits.clear();
        self.planned = None;
    }
}

#[cfg(test)]
mod tests;
