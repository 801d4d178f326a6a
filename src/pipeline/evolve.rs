//! The pipeline's side of `auto_create`/`auto_evolve` (`crate::ddl`): before a record of such
//! a topic is encoded, its schema is held against the table; a change seals the open batches
//! (rows of the old shape commit without it), rebuilds the mapping on the table as it will be,
//! and rides on the topic's batches until one commits. A batch with a change that fails makes
//! the table be described again, so the mapping never believes in a column that rolled back.
//!
//! The state is per table (a route's target, known by its batch slot), and a batch's writes find
//! theirs by topic and table. Only a topic's own table evolves: configuration refuses
//! `auto_create`/`auto_evolve` with `table_from`, since a name a record gives is never DDL.

use super::{Fatal, Pipeline};
use crate::batch::Batch;
use crate::ddl::{CheckError, Checked, Evolver};
use crate::mapping::{MapError, TopicMapper};
use crate::offsets::TopicPartition;
use crate::record::RecordView;

/// What the record may do next.
pub(super) enum Evolved {
    /// Encode it; its row needs the topic's pending schema changes up to this one (0: none).
    Go(u64),
    /// It cannot be mapped: a dead letter or a stop, by `on_error`.
    Invalid(MapError),
    /// Not now: the sink stops, or the lane rewinds and reads it again.
    Stop,
}

impl Pipeline {
    /// The evolver of the route's `target` table, made on first use from the topic's settings
    /// (none for most topics, and none for a table a record named).
    fn evolver(&mut self, route: usize, target: usize) -> Option<&mut Evolver> {
        let slot = self.routes[route].targets[target].slot;
        if self.evolvers.len() <= slot {
            self.evolvers.resize_with(slot + 1, || None);
        }
        if self.evolvers[slot].is_none() {
            let made = match self.routes[route].by_record {
                Some(_) => None,
                None => self
                    .router
                    .settings_for(&self.routes[route].topic)
                    .and_then(Evolver::for_settings),
            };
            self.evolvers[slot] = Some(made);
        }
        self.evolvers[slot].as_mut().and_then(Option::as_mut)
    }

    /// Holds the record's schema against its table, changing the table (in the next batch)
    /// where the settings allow.
    pub(super) fn evolve(
        &mut self,
        lane: usize,
        route: usize,
        target: usize,
        record: &RecordView<'_>,
    ) -> Evolved {
        let Some(evolver) = self.evolver(route, target) else {
            return Evolved::Go(0);
        };
        if evolver.needs_redescribe() {
            let settings = evolver.settings().clone();
            // Open batches keep the steps their rows need; then the catalog says what is.
            self.seal_all();
            let topic = self.routes[route].topic.clone();
            match self.catalog.mapper(&settings, &topic) {
                Ok(mapper) => self.routes[route].targets[target].mapper = mapper,
                Err(e) => {
                    self.set_fatal(Fatal::Other(e));
                    return Evolved::Stop;
                }
            }
            if let Some(ev) = self.evolver(route, target) {
                ev.redescribed();
            }
            if !self.table.is_active((route, record.partition)) {
                return Evolved::Stop;
            }
        }
        let table = self.routes[route].targets[target].mapper.table().clone();
        let slot = self.routes[route].targets[target].slot;
        let schemas = &self.schemas;
        let Some(Some(Some(evolver))) = self.evolvers.get_mut(slot) else {
            return Evolved::Go(0);
        };
        let checked = evolver.check(&table, record.value, record.key, &mut |id| {
            schemas.fetch(id).map(|s| (*s).clone())
        });
        let settings = evolver.settings().clone();
        let change = match checked {
            Ok(Checked::Fits(_)) if table.oid == crate::ddl::MISSING_OID => {
                return Evolved::Invalid(MapError::Schema(format!(
                    "table {table} does not exist and this record gives no schema to create it from; create the table yourself"
                )))
            }
            Ok(Checked::Fits(need)) => return Evolved::Go(need),
            Ok(Checked::Change(change)) => change,
            Err(CheckError::Record(why)) => return Evolved::Invalid(MapError::Schema(why)),
            Err(CheckError::Fatal(why)) => {
                let tp = TopicPartition::new(self.routes[route].topic.clone(), record.partition);
                self.table.stop((route, record.partition));
                self.set_fatal(Fatal::Mapping {
                    tp,
                    offset: record.offset,
                    reason: why,
                });
                return Evolved::Stop;
            }
            Err(CheckError::Unavailable(why)) => {
                tracing::warn!(topic = record.topic, partition = record.partition, offset = record.offset, error = %why, "cannot fetch the record's schema; retrying after a backoff");
                self.unreported -= 1;
                self.routes[route].consumed -= 1;
                self.begin_rewind(lane);
                return Evolved::Stop;
            }
        };
        let mapper = match TopicMapper::new(&settings, std::sync::Arc::new(change.table.clone())) {
            Ok(m) => m,
            Err(e) => {
                self.set_fatal(Fatal::Other(format!(
                    "the table the record's schema asks for does not fit the topic's settings: {e}"
                )));
                return Evolved::Stop;
            }
        };
        for step in &change.steps {
            tracing::info!(
                topic = record.topic,
                partition = record.partition,
                offset = record.offset,
                statement = step.statement(),
                "schema change planned for the next batch"
            );
        }
        // Rows of the old shape, in any lane, commit without the change.
        self.seal_all();
        self.routes[route].targets[target].mapper = mapper;
        let need = self
            .evolver(route, target)
            .map_or(0, |ev| ev.adopt(&change));
        if self.table.is_active((route, record.partition)) {
            Evolved::Go(need)
        } else {
            Evolved::Stop
        }
    }

    /// Seals every lane's open batch.
    fn seal_all(&mut self) {
        for lane in 0..self.lanes.count() {
            self.seal_and_send(lane);
        }
    }

    /// The evolver already made for the route's `target` table, if any.
    fn evolver_at(&mut self, route: usize, target: usize) -> Option<&mut Evolver> {
        let slot = self.routes[route].targets[target].slot;
        self.evolvers.get_mut(slot)?.as_mut()?.as_mut()
    }

    /// A record for the route's `target` table is in `lane`'s open batch and needs the pending
    /// steps up to `need`.
    pub(super) fn note_ddl_need(&mut self, route: usize, target: usize, lane: usize, need: u64) {
        if need > 0 {
            if let Some(ev) = self.evolver_at(route, target) {
                ev.note_need(lane, need);
            }
        }
    }

    /// Gives each write of a batch sealed from `lane` the steps its rows still need: the
    /// write's table (by topic, then by name among the topic's tables) finds its evolver.
    pub(super) fn attach_ddl(&mut self, lane: usize, batch: &mut Batch) {
        for write in &mut batch.writes {
            let Some(&route) = self.route_index.get(&write.topic) else {
                continue;
            };
            let Some(target) = self.routes[route]
                .targets
                .iter()
                .position(|t| t.mapper.table().to_string() == write.table)
            else {
                continue;
            };
            if let Some(ev) = self.evolver_at(route, target) {
                write.ddl = ev.steps_for(lane, batch.id);
            }
        }
    }

    /// A batch's outcome settles the steps it carried.
    pub(super) fn ddl_answered(&mut self, batch: u64, committed: bool) {
        for ev in self.evolvers.iter_mut().flatten().flatten() {
            ev.answered(batch, committed);
        }
    }
}
