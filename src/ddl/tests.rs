//! The evolver's bookkeeping: a batch carries the steps its rows need until one such batch
//! commits; a failed one makes the table be described again.

use super::*;

fn evolver(extra: &str) -> Evolver {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(&format!(
        "name = \"t\"\ntable = \"t\"\nformat = \"connect-json\"\n{extra}"
    )))
    .extract()
    .unwrap();
    Evolver::for_settings(&settings).unwrap()
}

/// A Connect record with fields `id` and, in v2, `email`.
fn record(v2: bool) -> Vec<u8> {
    let email = if v2 {
        r#",{"field":"email","type":"string","optional":true}"#
    } else {
        ""
    };
    format!(r#"{{"schema":{{"type":"struct","fields":[{{"field":"id","type":"int64"}}{email}]}},"payload":{{"id":1}}}}"#).into_bytes()
}

fn no_registry(_: u32) -> Result<RegisteredSchema, RegistryError> {
    Err(RegistryError::Unavailable("none".into()))
}

fn check(ev: &mut Evolver, table: &Table, value: &[u8]) -> Checked {
    ev.check(table, Some(value), None, &mut no_registry)
        .unwrap()
}

fn change(checked: Checked) -> Change {
    match checked {
        Checked::Change(c) => c,
        Checked::Fits(_) => panic!("expected a change"),
    }
}

/// A missing table is planned once; every batch whose rows need it carries it until one
/// commits, and the same schema then fits needing nothing.
#[test]
fn steps_ride_on_batches_until_one_commits() {
    let mut ev = evolver("auto_create = true");
    let s = ev.settings().clone();
    let planned = change(check(&mut ev, &missing_table(&s, "t"), &record(false)));
    let need = ev.adopt(&planned);
    ev.note_need(0, need);
    ev.note_need(1, need);
    assert_eq!(ev.steps_for(0, 1).len(), 1);
    assert_eq!(ev.steps_for(1, 2).len(), 1);
    assert!(
        ev.steps_for(0, 3).is_empty(),
        "no row of the next batch noted a need yet"
    );
    ev.answered(2, true);
    assert!(matches!(
        check(&mut ev, &planned.table, &record(false)),
        Checked::Fits(0)
    ));
    // Batch 1 failing after 2 committed still asks for the table to be described again.
    ev.answered(1, false);
    assert!(ev.needs_redescribe());
    ev.redescribed();
    assert!(!ev.needs_redescribe());
}

/// An added column is needed only by rows that have its field: a batch of old-shape rows
/// carries nothing, so the column never commits without a row that carries it.
#[test]
fn only_rows_with_the_new_field_need_its_column() {
    let mut ev = evolver("auto_evolve = \"add_columns\"");
    let s = ev.settings().clone();
    let table = Table {
        oid: 9,
        columns: vec![crate::schema::Column {
            name: "id".into(),
            ty: crate::schema::ColumnType::Int8,
            sql_type: "bigint".into(),
            not_null: true,
            has_default: false,
            default_sql: None,
        }],
        ..missing_table(&s, "t")
    };
    let planned = change(check(&mut ev, &table, &record(true)));
    assert!(
        planned.table.columns[1].has_default,
        "left out of old-shape rows"
    );
    assert!(ev.adopt(&planned) > 0);
    assert!(matches!(
        check(&mut ev, &planned.table, &record(false)),
        Checked::Fits(0)
    ));
    assert!(matches!(check(&mut ev, &planned.table, &record(true)), Checked::Fits(n) if n > 0));
}

/// In upsert mode a row stages into a copy of the table's columns, so every row mapped after
/// a change needs it, with the field or without.
#[test]
fn in_upsert_mode_every_row_after_the_change_needs_it() {
    let mut ev = evolver("auto_evolve = \"add_columns\"\nmode = \"upsert\"");
    let s = ev.settings().clone();
    let table = Table {
        oid: 9,
        columns: vec![crate::schema::Column {
            name: "id".into(),
            ty: crate::schema::ColumnType::Int8,
            sql_type: "bigint".into(),
            not_null: true,
            has_default: false,
            default_sql: None,
        }],
        primary_key: vec!["id".into()],
        unique_keys: vec![vec!["id".into()]],
        ..missing_table(&s, "t")
    };
    let planned = change(check(&mut ev, &table, &record(true)));
    ev.adopt(&planned);
    assert!(matches!(check(&mut ev, &planned.table, &record(false)), Checked::Fits(n) if n > 0));
}

/// A failed batch with steps: the table is described again, and the schema is checked anew.
#[test]
fn a_failed_batch_forgets_the_plan() {
    let mut ev = evolver("auto_create = true");
    let table = missing_table(&ev.settings().clone(), "t");
    let planned = change(check(&mut ev, &table, &record(false)));
    let need = ev.adopt(&planned);
    ev.note_need(0, need);
    assert_eq!(ev.steps_for(0, 7).len(), 1);
    ev.answered(7, false);
    assert!(ev.needs_redescribe());
    ev.redescribed();
    ev.note_need(0, need);
    assert!(
        ev.steps_for(0, 8).is_empty(),
        "nothing pending after the new description"
    );
    assert!(
        matches!(check(&mut ev, &table, &record(false)), Checked::Change(_)),
        "described as still missing: planned again"
    );
}

/// Without a schema a missing table cannot be created: the record is refused, saying so.
#[test]
fn schemaless_record_for_a_missing_table_is_refused() {
    let mut ev = evolver("auto_create = true");
    let table = missing_table(&ev.settings().clone(), "t");
    let err = ev
        .check(&table, Some(br#"{"id":1}"#), None, &mut no_registry)
        .unwrap_err();
    assert!(
        matches!(&err, CheckError::Record(m) if m.contains("create the table")),
        "{err:?}"
    );
}

/// Debezium's Avro envelope: the columns are the `after` record's, found through a union with
/// null and a named reference to the `before` record's type.
#[test]
fn a_debezium_avro_envelope_gives_the_after_records_columns() {
    let envelope = RegisteredSchema {
        kind: crate::registry::SchemaKind::Avro,
        text: r#"{"type":"record","name":"Envelope","namespace":"db.public.t","fields":[
            {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
                {"name":"id","type":"int"},{"name":"name","type":["null","string"]}]}]},
            {"name":"after","type":["null","Value"]},
            {"name":"op","type":"string"}]}"#
            .into(),
        imports: Vec::new(),
    };
    let shape = record::shape_of_schema(&envelope, record::FIRST_MESSAGE, true).unwrap();
    let cols: Vec<(&str, &str, bool)> = shape
        .value
        .iter()
        .map(|f| (f.name.as_str(), f.sql.as_str(), f.optional))
        .collect();
    assert_eq!(cols, [("id", "int4", false), ("name", "text", true)]);
}

/// A Protobuf record's message is the one its index array names, not always the first: two
/// records of one schema id and different messages are two schemas, each its own columns.
#[test]
fn a_protobuf_record_creates_the_columns_of_the_message_it_names() {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(
        "name = \"t\"\ntable = \"t\"\nformat = \"protobuf\"\nauto_create = true",
    ))
    .extract()
    .unwrap();
    let mut ev = Evolver::for_settings(&settings).unwrap();
    let mut fetch = |id: u32| {
        assert_eq!(id, 7);
        Ok(RegisteredSchema {
            kind: crate::registry::SchemaKind::Protobuf,
            text: "syntax = \"proto3\"; message A { int64 a = 1; } message B { string b = 1; optional int32 c = 2; }".into(),
            imports: Vec::new(),
        })
    };
    let table = missing_table(&settings, "t");
    // Schema id 7, then the index array [1] (zigzag: count 1, index 1), then the message.
    let second = [0, 0, 0, 0, 7, 2, 2, 0x0a, 0x01, b'x'];
    let planned = match ev.check(&table, Some(&second), None, &mut fetch).unwrap() {
        Checked::Change(c) => c,
        Checked::Fits(_) => panic!("expected a change"),
    };
    assert_eq!(
        planned.steps[0].statement,
        r#"CREATE TABLE IF NOT EXISTS "public"."t" ("b" text NOT NULL, "c" int4)"#
    );
    // The first message (a count of 0) is another schema: checked, not taken as fitting.
    let first = [0, 0, 0, 0, 7, 0, 0x08, 0x01];
    match ev.check(&table, Some(&first), None, &mut fetch).unwrap() {
        Checked::Change(c) => assert_eq!(
            c.steps[0].statement,
            r#"CREATE TABLE IF NOT EXISTS "public"."t" ("a" int8 NOT NULL)"#
        ),
        Checked::Fits(_) => panic!("the first message's schema is not the second's"),
    }
}

/// A registry record whose schema is of another kind than the topic reads is the record's
/// error, not columns read from the wrong language.
#[test]
fn a_schema_of_another_kind_is_the_records_error() {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(
        "name = \"t\"\ntable = \"t\"\nformat = \"json-schema\"\nauto_create = true",
    ))
    .extract()
    .unwrap();
    let mut ev = Evolver::for_settings(&settings).unwrap();
    let mut fetch = |_: u32| {
        Ok(RegisteredSchema {
            kind: crate::registry::SchemaKind::Avro,
            text: r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#.into(),
            imports: Vec::new(),
        })
    };
    let err = ev
        .check(
            &missing_table(&settings, "t"),
            Some(b"\0\0\0\0\x03{\"id\":1}"),
            None,
            &mut fetch,
        )
        .unwrap_err();
    assert!(
        matches!(&err, CheckError::Record(m) if m.contains("Avro")),
        "{err:?}"
    );
}

/// A registry record whose schema cannot give columns, whatever is wrong with it (a corrupt
/// or truncated message-index array, one naming no message, a `.proto` that does not compile,
/// a JSON Schema that is no object or whose root `$ref`s cycle), is that record's error (a
/// dead letter or a stop, by `on_error`), never a panic or a hang.
#[test]
fn a_registry_record_whose_schema_gives_no_columns_is_the_records_error() {
    use figment::providers::{Format as _, Toml};
    let table_for = |format: &str| {
        let settings: TopicSettings = figment::Figment::from(Toml::string(&format!(
            "name = \"t\"\ntable = \"t\"\nformat = \"{format}\"\nauto_create = true"
        )))
        .extract()
        .unwrap();
        let table = missing_table(&settings, "t");
        (Evolver::for_settings(&settings).unwrap(), table)
    };
    let schema = |kind, text: &str| {
        let text = text.to_string();
        move |_: u32| {
            Ok(RegisteredSchema {
                kind,
                text: text.clone(),
                imports: Vec::new(),
            })
        }
    };
    let proto = "syntax = \"proto3\"; message A { int64 a = 1; }";
    let cases: [(&[u8], &str); 8] = [
        // Index [5]: the schema has one message.
        (&[0, 0, 0, 0, 7, 2, 10, 0x08, 1], "names no message"),
        // Index [0, 1]: A has no nested messages.
        (&[0, 0, 0, 0, 7, 4, 0, 2, 0x08, 1], "names no message"),
        // A varint cut off, a negative count, a negative index, 40 entries, nothing at all.
        (&[0, 0, 0, 0, 7, 0x80], "no schema"),
        (&[0, 0, 0, 0, 7, 1, 0x08, 1], "no schema"),
        (&[0, 0, 0, 0, 7, 2, 1, 0x08, 1], "no schema"),
        (&[0, 0, 0, 0, 7, 80, 0, 0], "no schema"),
        (&[0, 0, 0, 0, 7], "no schema"),
        (
            &[0, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f],
            "no schema",
        ),
    ];
    for (value, why) in cases {
        let (mut ev, table) = table_for("protobuf");
        let err = ev
            .check(
                &table,
                Some(value),
                None,
                &mut schema(crate::registry::SchemaKind::Protobuf, proto),
            )
            .unwrap_err();
        assert!(
            matches!(&err, CheckError::Record(m) if m.contains(why)),
            "{value:?}: {err:?}"
        );
    }
    let (mut ev, table) = table_for("protobuf");
    let err = ev
        .check(
            &table,
            Some(&[0, 0, 0, 0, 7, 0, 0x08, 1]),
            None,
            &mut schema(
                crate::registry::SchemaKind::Protobuf,
                "syntax = \"proto3\"; message A { int64 a = 1 }",
            ),
        )
        .unwrap_err();
    assert!(
        matches!(&err, CheckError::Record(m) if m.contains("does not compile")),
        "{err:?}"
    );
    for (text, why) in [
        ("not json", "not JSON"),
        (r#"{"type":"string"}"#, "properties"),
        (r#"{"properties":[1]}"#, "properties"),
        (
            r##"{"$ref":"#/definitions/A","definitions":{"A":{"$ref":"#/definitions/B"},"B":{"$ref":"#/definitions/A"}}}"##,
            "properties",
        ),
        (r##"{"$ref":"#"}"##, "properties"),
    ] {
        let (mut ev, table) = table_for("json-schema");
        let err = ev
            .check(
                &table,
                Some(b"\0\0\0\0\x07{}"),
                None,
                &mut schema(crate::registry::SchemaKind::Json, text),
            )
            .unwrap_err();
        assert!(
            matches!(&err, CheckError::Record(m) if m.contains(why)),
            "{text}: {err:?}"
        );
    }
}

/// A registry record's schema is fetched and compiled once per schema id and message: more
/// records of it fit without the registry, whatever their payload; another message of the same
/// id, or another key schema, is another schema.
#[test]
fn a_protobuf_schema_is_read_once_per_id_and_message() {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(
        "name = \"t\"\ntable = \"t\"\nformat = \"protobuf\"\nkey_format = \"protobuf\"\nauto_evolve = \"add_columns\"",
    ))
    .extract()
    .unwrap();
    let mut ev = Evolver::for_settings(&settings).unwrap();
    let mut fetched = Vec::new();
    let mut fetch = |id: u32| {
        fetched.push(id);
        Ok(RegisteredSchema {
            kind: crate::registry::SchemaKind::Protobuf,
            text: "syntax = \"proto3\"; message A { int64 a = 1; } message B { int64 a = 1; }"
                .into(),
            imports: Vec::new(),
        })
    };
    let mut table = missing_table(&settings, "t");
    table.oid = 42;
    table.columns = vec![crate::schema::Column {
        name: "a".into(),
        ty: crate::schema::ColumnType::Int8,
        sql_type: "bigint".into(),
        not_null: false,
        has_default: false,
        default_sql: None,
    }];
    let records: [(&[u8], Option<&[u8]>); 6] = [
        (&[0, 0, 0, 0, 7, 0, 0x08, 1], None),
        (&[0, 0, 0, 0, 7, 0, 0x08, 2], None),
        (&[0, 0, 0, 0, 7, 0], None),
        (&[0, 0, 0, 0, 7, 2, 2, 0x08, 1], None),
        (
            &[0, 0, 0, 0, 7, 0, 0x08, 1],
            Some(&[0, 0, 0, 0, 9, 0, 0x08, 1]),
        ),
        (
            &[0, 0, 0, 0, 7, 0, 0x08, 3],
            Some(&[0, 0, 0, 0, 9, 0, 0x08, 5]),
        ),
    ];
    for (value, key) in records {
        let checked = ev.check(&table, Some(value), key, &mut fetch).unwrap();
        assert!(matches!(checked, Checked::Fits(0)), "{value:?}");
    }
    // Value 7 [0], value 7 [1], then value 7 [0] with key 9 [0] (both fetched).
    assert_eq!(fetched, [7, 7, 7, 9]);
}

/// A table still to be created has no columns to check per-column settings against: each of
/// them (`time_units`, `bytea_encoding`, `json_text`) waits for the created table, whose
/// mapping is built with the topic's own settings. `bytea_encoding` was checked against the
/// missing table, so `auto_create` with it was refused at startup.
#[test]
fn per_column_settings_wait_for_the_created_table() {
    use figment::providers::{Format as _, Toml};
    let settings: TopicSettings = figment::Figment::from(Toml::string(
        "name = \"t\"\ntable = \"t\"\nformat = \"connect-json\"\nauto_create = true\n\
         json_text = [\"doc\"]\n[time_units]\nat = \"us\"\n[bytea_encoding]\nb = \"hex\"\n",
    ))
    .extract()
    .unwrap();
    let table = missing_table(&settings, "t");
    let checked = settings_for(&settings, &table);
    if let Err(e) = crate::mapping::TopicMapper::new(&checked, std::sync::Arc::new(table)) {
        panic!("a missing table refused the topic's settings: {e}");
    }
}
