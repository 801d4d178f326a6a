//! A topic as the pipeline keeps it: the table (or, routed by record, the tables) its records
//! go to, each with its mapping and its slot in a batch.

use foldhash::{HashMap, HashMapExt as _};
use std::sync::Arc;

use crate::config::{OnError, TopicSettings};
use crate::mapping::TopicMapper;
use crate::record::RecordView;
use crate::record_routing::{Picked, RouteError, TablePicker};

use super::ports::{Catalog, Undescribed};

/// One table a topic writes.
pub struct Target {
    pub mapper: TopicMapper,
    /// Its rows' entry in an open batch: unique across every route's targets, so rows of one
    /// topic to several tables stay apart in the batch yet commit in its one transaction.
    pub(crate) slot: usize,
}

/// Routing by record (`table_from`): how records pick their table, and the tables met so far.
pub struct ByRecord {
    picker: TablePicker,
    /// To describe each new table with.
    settings: TopicSettings,
    /// Table name → index into the route's targets; each table is described once.
    named: HashMap<String, usize>,
}

/// A topic and the mapping of its records onto its table or tables.
pub struct Route {
    pub topic: Arc<str>,
    /// Its one table; routed by record, every table its records named so far.
    pub(crate) targets: Vec<Target>,
    pub(crate) by_record: Option<Box<ByRecord>>,
    on_error: OnError,
    dead_letter_topic: Option<Arc<str>>,
    /// `schema.table` as configured, for dead letters that have no table yet.
    label: String,
    /// Records taken, for the metric.
    pub consumed: u64,
}

/// What a record's table comes to.
pub(crate) enum Chosen {
    /// Index into the route's targets.
    Target(usize),
    /// Nothing to write (a Debezium tombstone that names no table).
    Nothing,
    /// The record's fault: a dead letter or a stop, by `on_error`.
    Refused(RouteError),
    /// The table it names (allowed) cannot be used: the sink stops at the record.
    Unusable(String),
    /// PostgreSQL did not answer while describing the table it names: read it again later.
    Unavailable(String),
}

impl Route {
    /// A topic with one table (slot set by the pipeline).
    pub fn one(topic: Arc<str>, mapper: TopicMapper) -> Self {
        Self {
            on_error: mapper.on_error(),
            dead_letter_topic: mapper.dead_letter_topic().cloned(),
            label: mapper.table().to_string(),
            topic,
            targets: vec![Target { mapper, slot: 0 }],
            by_record: None,
            consumed: 0,
        }
    }

    /// A topic whose records name their tables, with the `mappers` of the tables it lists
    /// (described at startup, so a listed table that is missing stops the sink there).
    pub fn by_record(
        topic: Arc<str>,
        settings: &TopicSettings,
        picker: TablePicker,
        mappers: Vec<TopicMapper>,
    ) -> Self {
        let named = mappers
            .iter()
            .enumerate()
            .map(|(i, m)| (m.table().name.clone(), i))
            .collect::<Vec<_>>();
        let mut index = HashMap::new();
        index.extend(named);
        Self {
            on_error: settings.on_error,
            dead_letter_topic: settings.dead_letter_topic.as_deref().map(Arc::from),
            label: format!("{}.{}", settings.schema, settings.table),
            topic,
            targets: mappers
                .into_iter()
                .map(|mapper| Target { mapper, slot: 0 })
                .collect(),
            by_record: Some(Box::new(ByRecord {
                picker,
                settings: settings.clone(),
                named: index,
            })),
            consumed: 0,
        }
    }

    /// Routed topics always collect headers: a table first met mid-batch may map them, and
    /// its mapping does not exist yet when the record's headers are read.
    pub(crate) fn needs_headers(&self) -> bool {
        self.by_record.is_some()
            || self.on_error == OnError::DeadLetter
            || self.targets.iter().any(|t| t.mapper.needs_headers())
    }

    pub(crate) fn on_error(&self) -> OnError {
        self.on_error
    }

    pub(crate) fn dead_letter_topic(&self) -> Option<&Arc<str>> {
        self.dead_letter_topic.as_ref()
    }

    /// The table a dead letter names: its target's, else the configured template.
    pub(crate) fn table_label(&self, target: Option<usize>) -> String {
        match target {
            Some(t) => self.targets[t].mapper.table().to_string(),
            None => self.label.clone(),
        }
    }

    /// The target `record` goes to: the one table, or the table it names, described on first
    /// sight (through `catalog`, with `next_slot` for its batch entry) only once the picker
    /// allowed it.
    pub(crate) fn choose(
        &mut self,
        record: &RecordView<'_>,
        catalog: &dyn Catalog,
        next_slot: &mut usize,
    ) -> Chosen {
        let Some(by) = &mut self.by_record else {
            return Chosen::Target(0);
        };
        let table = match by.picker.pick(record) {
            Ok(Picked::Table(t)) => t,
            Ok(Picked::Nothing) => return Chosen::Nothing,
            Err(e) => return Chosen::Refused(e),
        };
        if let Some(&t) = by.named.get(&table) {
            return Chosen::Target(t);
        }
        let mapper = match catalog.table_mapper(&by.settings, &self.topic, &table) {
            Ok(m) => m,
            Err(Undescribed::Unusable(why)) => return Chosen::Unusable(why),
            Err(Undescribed::Unavailable(why)) => return Chosen::Unavailable(why),
        };
        tracing::info!(topic = %self.topic, table = %mapper.table(), "a record named a new table");
        self.targets.push(Target {
            mapper,
            slot: *next_slot,
        });
        *next_slot += 1;
        by.named.insert(table, self.targets.len() - 1);
        Chosen::Target(self.targets.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::schema::{Column, ColumnType, Table};

    fn table(name: &str) -> Arc<Table> {
        Arc::new(Table {
            oid: 1,
            schema: "public".into(),
            name: name.into(),
            columns: vec![Column {
                name: "id".into(),
                ty: ColumnType::Int8,
                sql_type: "bigint".into(),
                not_null: true,
                has_default: false,
                default_sql: None,
            }],
            skipped: vec![],
            rules: crate::schema::RowRules::default(),
            primary_key: vec![],
            unique_keys: vec![],
        })
    }

    /// Describes any table, counting how often it is asked.
    struct Counting(AtomicUsize);

    impl Catalog for Counting {
        fn mapper(&self, _: &TopicSettings, _: &str) -> Result<TopicMapper, String> {
            unreachable!("a routed topic has no table of its own")
        }
        fn table_mapper(
            &self,
            settings: &TopicSettings,
            _: &str,
            name: &str,
        ) -> Result<TopicMapper, Undescribed> {
            self.0.fetch_add(1, Ordering::Relaxed);
            TopicMapper::new(settings, table(name))
                .map_err(|e| Undescribed::Unusable(e.to_string()))
        }
    }

    fn record<'a>(headers: &'a [crate::headers::Header<'a>]) -> RecordView<'a> {
        RecordView {
            topic: "t",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: None,
            value: Some(b"{\"id\":1}"),
            headers,
        }
    }

    fn settings(allowed: &str) -> TopicSettings {
        use figment::providers::{Format, Toml};
        figment::Figment::from(Toml::string(&format!(
            "name = \"t\"\ntable = \"x_{{}}\"\ntable_from = {{ header = \"table\" }}\n{allowed}"
        )))
        .extract()
        .unwrap()
    }

    /// Listed tables are described at startup and found by name without the catalog; a table
    /// a pattern allows is described once, on first sight, with a fresh slot; a name outside
    /// the allow-list never reaches the catalog.
    #[test]
    fn each_table_is_described_once_and_only_when_allowed() {
        let listed = settings("tables = [\"x_a\", \"x_b\"]");
        let picker = TablePicker::new(&listed).unwrap().unwrap();
        let mappers = picker
            .listed()
            .iter()
            .map(|t| TopicMapper::new(&listed, table(t)).unwrap())
            .collect();
        let mut route = Route::by_record("t".into(), &listed, picker, mappers);
        let catalog = Counting(AtomicUsize::new(0));
        let mut next_slot = 2;
        let chosen = |route: &mut Route, name: &[u8], next: &mut usize| match route.choose(
            &record(&[(b"table", Some(name))]),
            &catalog,
            next,
        ) {
            Chosen::Target(t) => Ok(route.targets[t].mapper.table().name.clone()),
            Chosen::Refused(e) => Err(e.why),
            Chosen::Nothing | Chosen::Unusable(_) | Chosen::Unavailable(_) => Err("other".into()),
        };
        assert_eq!(chosen(&mut route, b"b", &mut next_slot), Ok("x_b".into()));
        assert_eq!(chosen(&mut route, b"a", &mut next_slot), Ok("x_a".into()));
        assert!(chosen(&mut route, b"c", &mut next_slot).is_err());
        assert_eq!(
            catalog.0.load(Ordering::Relaxed),
            0,
            "listed tables need no lookup"
        );

        let patterned = settings("table_pattern = \"x_[a-z]\"");
        let picker = TablePicker::new(&patterned).unwrap().unwrap();
        let mut route = Route::by_record("t".into(), &patterned, picker, Vec::new());
        assert_eq!(chosen(&mut route, b"q", &mut next_slot), Ok("x_q".into()));
        assert_eq!(chosen(&mut route, b"q", &mut next_slot), Ok("x_q".into()));
        assert_eq!(chosen(&mut route, b"r", &mut next_slot), Ok("x_r".into()));
        assert!(chosen(&mut route, b"qq", &mut next_slot).is_err());
        assert_eq!(
            catalog.0.load(Ordering::Relaxed),
            2,
            "each allowed table described once"
        );
        let slots: Vec<usize> = route.targets.iter().map(|t| t.slot).collect();
        assert_eq!(slots, vec![2, 3]);
        assert_eq!(next_slot, 4);
    }
}
