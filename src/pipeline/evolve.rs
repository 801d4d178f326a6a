//! The pipeline's side of `auto_create`/`auto_evolve` (`crate::ddl`): before a record of such
//! a topic is encoded, its schema is held against the table; a change seals the open batches
//! (rows of the old shape commit without it), rebuilds the mapping on the table as it will be,
//! and rides on the topic's batches until one commits. A batch with a change that fails makes
//! the table be described again, so the mapping never believes in a column that rolled back.

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
    /// The route's evolver, made on first use from its settings (none for most topics).
    fn evolver(&mut self, route: usize) -> Option<&mut Evolver> {
        if self.evolvers.len() <= route {
            self.evolvers.resize_with(route + 1, || None);
        }
        if self.evolvers[route].is_none() {
            let made = self
                .router
                .settings_for(&self.routes[route].topic)
                .map(Evolver::for_settings);
            self.evolvers[route] = Some(made.flatten());
        }
        self.evolvers[route].as_mut().and_then(Option::as_mut)
    }

    /// Holds the record's schema against its table, changing the table (in the next batch)
    /// where the settings allow.
    pub(super) fn evolve(&mut self, lane: usize, route: usize, record: &RecordView<'_>) -> Evolved {
        let Some(evolver) = self.evolver(route) else {
            return Evolved::Go(0);
        };
        if evolver.needs_redescribe() {
            let settings = evolver.settings().clone();
            // Open batches keep the steps their rows need; then the catalog says what is.
            self.seal_all();
            let topic = self.routes[route].topic.clone();
            match self.catalog.mapper(&settings, &topic) {
                Ok(mapper) => self.routes[route].mapper = mapper,
                Err(e) => {
                    self.set_fatal(Fatal::Other(e));
                    return Evolved::Stop;
                }
            }
            if let Some(ev) = self.evolver(route) {
                ev.redescribed();
            }
            if !self.table.is_active((route, record.partition)) {
                return Evolved::Stop;
            }
        }
        let table = self.routes[route].mapper.table().clone();
        let schemas = &self.schemas;
        let Some(evolver) = self.evolvers[route].as_mut().and_then(Option::as_mut) else {
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
        self.routes[route].mapper = mapper;
        let need = self.evolver(route).map_or(0, |ev| ev.adopt(&change));
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

    /// A record of `route` is in `lane`'s open batch and needs the pending steps up to `need`.
    pub(super) fn note_ddl_need(&mut self, route: usize, lane: usize, need: u64) {
        if need > 0 {
            if let Some(Some(Some(ev))) = self.evolvers.get_mut(route) {
                ev.note_need(lane, need);
            }
        }
    }

    /// Gives each write of a batch sealed from `lane` the steps its rows still need.
    pub(super) fn attach_ddl(&mut self, lane: usize, batch: &mut Batch) {
        for write in &mut batch.writes {
            let Some(&route) = self.route_index.get(&write.topic) else {
                continue;
            };
            if let Some(Some(Some(ev))) = self.evolvers.get_mut(route) {
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
