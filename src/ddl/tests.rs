//! The evolver's bookkeeping: steps ride on batches until one commits; a failed one makes the
//! table be described again.

use super::*;

fn evolver() -> Evolver {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(
        "name = \"t\"\ntable = \"t\"\nformat = \"connect-json\"\nauto_create = true",
    ))
    .extract()
    .unwrap();
    Evolver::for_settings(&settings).unwrap()
}

const RECORD: &[u8] =
    br#"{"schema":{"type":"struct","fields":[{"field":"id","type":"int64"}]},"payload":{"id":1}}"#;

fn no_registry(_: u32) -> Result<RegisteredSchema, RegistryError> {
    Err(RegistryError::Unavailable("none".into()))
}

/// A missing table is planned once; the change rides on every batch until one commits, and the
/// same schema then fits.
#[test]
fn steps_ride_on_batches_until_one_commits() {
    let mut ev = evolver();
    let table = missing_table("public", "t");
    let change = ev
        .check(&table, Some(RECORD), None, &mut no_registry)
        .unwrap()
        .expect("a missing table is created");
    ev.adopt(&change);
    assert_eq!(ev.steps_for(1).len(), 1);
    assert_eq!(ev.steps_for(2).len(), 1);
    ev.answered(2, true);
    assert!(
        ev.steps_for(3).is_empty(),
        "committed: no batch carries it again"
    );
    assert!(ev
        .check(&change.table, Some(RECORD), None, &mut no_registry)
        .unwrap()
        .is_none());
    // Batch 1 failing after 2 committed still asks for the table to be described again.
    ev.answered(1, false);
    assert!(ev.needs_redescribe());
    ev.redescribed();
    assert!(!ev.needs_redescribe());
}

/// A failed batch with steps: the table is described again, and the schema is checked anew.
#[test]
fn a_failed_batch_forgets_the_plan() {
    let mut ev = evolver();
    let table = missing_table("public", "t");
    let change = ev
        .check(&table, Some(RECORD), None, &mut no_registry)
        .unwrap()
        .unwrap();
    ev.adopt(&change);
    ev.steps_for(7);
    ev.answered(7, false);
    assert!(ev.needs_redescribe());
    ev.redescribed();
    assert!(ev.steps_for(8).is_empty());
    assert!(
        ev.check(&table, Some(RECORD), None, &mut no_registry)
            .unwrap()
            .is_some(),
        "described as still missing: planned again"
    );
}

/// Without a schema a missing table cannot be created: the record is refused, saying so.
#[test]
fn schemaless_record_for_a_missing_table_is_refused() {
    let mut ev = evolver();
    let err = ev
        .check(
            &missing_table("public", "t"),
            Some(br#"{"id":1}"#),
            None,
            &mut no_registry,
        )
        .unwrap_err();
    assert!(
        matches!(&err, CheckError::Record(m) if m.contains("create the table")),
        "{err:?}"
    );
}
