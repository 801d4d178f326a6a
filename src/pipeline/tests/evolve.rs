//! `auto_evolve` through the coordinator: a schema change seals every open batch of the old
//! shape, rides on the topic's batches until one commits, and a failed one makes the table be
//! described again before the records are mapped again.

use super::*;

const SETTINGS: &str = "format = \"connect-json\"\nauto_evolve = \"add_columns\"";

/// A Connect record of `t`'s columns, with a third field `extra` in schema v2.
fn connect(offset: i64, v2: bool) -> String {
    let (field, value) = if v2 {
        (
            r#",{"field":"extra","type":"string","optional":true}"#,
            format!(r#","extra":"x{offset}""#),
        )
    } else {
        ("", String::new())
    };
    format!(
        r#"{{"schema":{{"type":"struct","fields":[{{"field":"id","type":"int64"}},{{"field":"note","type":"string","optional":true}}{field}]}},"payload":{{"id":{offset},"note":"n{offset}"{value}}}}}"#
    )
}

/// Per queued batch (lane order): its id and how many DDL steps it carries.
fn queued_ddl(h: &Harness) -> Vec<(u64, usize)> {
    let w = h.writers.lock().unwrap();
    w.queued
        .iter()
        .flatten()
        .map(|b| (b.id, b.writes.iter().map(|w| w.ddl.len()).sum()))
        .collect()
}

/// Describes the table as the fake catalog has it, counting the calls.
struct Described(Arc<Mutex<u32>>);

impl Catalog for Described {
    fn mapper(&self, settings: &TopicSettings, _: &str) -> Result<TopicMapper, String> {
        *self.0.lock().unwrap() += 1;
        TopicMapper::new(settings, table()).map_err(|e| e.to_string())
    }
    fn table_mapper(
        &self,
        _: &TopicSettings,
        _: &str,
        _: &str,
    ) -> Result<TopicMapper, Undescribed> {
        unreachable!("the topic is not routed by record")
    }
}

/// Old-shape rows in any lane commit without the change; the change rides on the batches whose
/// rows need it until one commits.
#[test]
fn a_schema_change_seals_the_old_shape_and_rides_until_a_batch_commits() {
    let mut h = Harness::new(Setup {
        lanes: 2,
        max_records: 100,
        topic: SETTINGS,
        ..Setup::default()
    });
    h.assign(&[0, 1]);
    for p in 0..2 {
        for o in 0..2 {
            h.deliver_value(p, o, &connect(o, false));
        }
    }
    assert!(h.sent().is_empty(), "v1 fits the table: nothing sealed");
    h.deliver_value(0, 2, &connect(2, true));
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "both lanes' old-shape batches were sealed");
    assert_eq!(
        queued_ddl(&h).iter().map(|d| d.1).sum::<usize>(),
        0,
        "the old shape carries no DDL"
    );
    h.deliver_value(1, 2, &connect(2, false));
    h.deliver_value(0, 3, &connect(3, true));
    // Lane 0's new batch has a row with the field: it carries the ADD COLUMN. Lane 1's has
    // only an old-shape row: it names no new column and carries nothing.
    for lane in 0..2 {
        h.pipeline.seal_and_send(lane);
    }
    let ddl = queued_ddl(&h);
    assert_eq!(
        ddl.iter().map(|d| d.1).collect::<Vec<_>>(),
        vec![0, 1, 0, 0]
    );
    h.answer_all();
    h.deliver_value(0, 4, &connect(4, true));
    h.pipeline.seal_and_send(0);
    assert_eq!(
        queued_ddl(&h),
        vec![(5, 0)],
        "committed once: no batch carries it again"
    );
    h.answer_all();
    h.assert_written_once(0, 0..5);
    h.assert_written_once(1, 0..3);
}

/// A batch with a change that fails: the next record describes the table again first.
#[test]
fn a_failed_batch_with_a_schema_change_describes_the_table_again() {
    let mut h = Harness::new(Setup {
        max_records: 100,
        topic: SETTINGS,
        ..Setup::default()
    });
    let described = Arc::new(Mutex::new(0));
    h.pipeline.catalog = Box::new(Described(described.clone()));
    h.assign(&[0]);
    h.deliver_value(0, 0, &connect(0, true));
    assert_eq!(
        h.pipeline.routes[0].targets[0].mapper.table().columns.len(),
        3,
        "planned with the column"
    );
    h.script(&[Answer::Transient]);
    h.pipeline.seal_and_send(0);
    assert_eq!(queued_ddl(&h), vec![(1, 1)]);
    h.answer_all();
    assert_eq!(h.seeks(), vec![(tp(0), Offset::Beginning)]);
    assert_eq!(
        *described.lock().unwrap(),
        0,
        "described on the next record, not before"
    );
    h.deliver_value(0, 0, &connect(0, true));
    assert_eq!(
        *described.lock().unwrap(),
        1,
        "the rolled-back column is not believed"
    );
    h.pipeline.seal_and_send(0);
    assert_eq!(
        queued_ddl(&h),
        vec![(2, 1)],
        "planned again from the table as it is"
    );
    h.answer_all();
    h.assert_written_once(0, 0..1);
}
