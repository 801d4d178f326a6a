//! Mapping without a database: tables are described by hand.

use bytes::BytesMut;
use figment::providers::{Format, Toml};
use figment::Figment;

use super::test_support::{col, first_row, table, topic};
use super::*;
use crate::headers::Header;
use crate::pgcopy::encode_numeric;
use crate::record::RecordView;
use crate::schema::ColumnType;

fn mapper(columns: Vec<Column>, extra: &str) -> TopicMapper {
    TopicMapper::new(&topic(extra), table(columns, &[])).unwrap()
}

fn record(value: &str) -> RecordView<'_> {
    RecordView {
        topic: "topic",
        partition: 3,
        offset: 42,
        timestamp: Some(1_700_000_000_000),
        key: Some(b"k1"),
        value: Some(value.as_bytes()),
        headers: &[],
    }
}

fn encode(m: &TopicMapper, value: &str) -> Result<TableRows, MapError> {
    let mut rows = m.new_rows();
    match m.encode(&record(value), &mut rows) {
        Ok(()) => Ok(rows),
        Err(EncodeError::Invalid(e)) => Err(e),
        Err(EncodeError::NeedsFreshBatch) => panic!("a fresh batch never changes shape"),
        Err(EncodeError::NeedSchema(id)) => panic!("JSON records need no schema ({id})"),
    }
}

/// The fields of the first row in `rows`; `None` for NULL.
fn fields(rows: &TableRows) -> Vec<Option<Vec<u8>>> {
    first_row(rows.shapes[0].buffer.as_bytes())
}

#[test]
fn fields_map_by_name_and_unknown_fields_are_ignored() {
    let m = mapper(
        vec![
            col("id", ColumnType::Int8, true, false),
            col("name", ColumnType::Text, false, false),
        ],
        "",
    );
    let rows = encode(&m, r#"{"name":"a\"b","id":7,"extra":{"x":[1,2]}}"#).unwrap();
    assert_eq!(rows.rows(), 1);
    assert_eq!(rows.shapes[0].columns, vec![0, 1]);
    assert_eq!(
        fields(&rows),
        vec![Some(7i64.to_be_bytes().to_vec()), Some(b"a\"b".to_vec())]
    );
}

#[test]
fn missing_defaulted_columns_are_left_out_of_the_row() {
    let m = mapper(
        vec![
            col("id", ColumnType::Int8, true, false),
            col("created", ColumnType::Timestamptz, true, true),
        ],
        "",
    );
    let mut rows = encode(&m, r#"{"id":1}"#).unwrap();
    m.encode(
        &record(r#"{"id":2,"created":"2024-01-01T00:00:00Z"}"#),
        &mut rows,
    )
    .unwrap();
    let shapes: Vec<_> = rows
        .shapes
        .iter()
        .map(|r| (r.columns.clone(), r.buffer.rows()))
        .collect();
    assert_eq!(shapes, vec![(vec![0], 1), (vec![0, 1], 1)]);
}

#[test]
fn errors_name_the_column_and_the_problem() {
    let m = mapper(
        vec![
            col("id", ColumnType::Int4, true, false),
            col("note", ColumnType::Text, false, false),
        ],
        "",
    );
    let missing = encode(&m, r#"{"note":"x"}"#).unwrap_err();
    assert!(
        matches!(&missing, MapError::MissingField { column, .. } if column == "id"),
        "{missing}"
    );
    assert!(missing.to_string().contains("field \"id\""), "{missing}");
    assert!(matches!(
        encode(&m, r#"{"id":null}"#),
        Err(MapError::NullForNotNull { .. })
    ));
    let too_big = encode(&m, r#"{"id":3000000000}"#).unwrap_err().to_string();
    assert!(too_big.contains("out of range"), "{too_big}");
    assert!(matches!(
        encode(&m, r#"[1]"#),
        Err(MapError::NotAnObject(_))
    ));
    assert!(matches!(
        encode(&m, r#"{"id":1"#),
        Err(MapError::NotAnObject(_))
    ));
    let nul = encode(&m, r#"{"id":1,"note":"a\u0000b"}"#)
        .unwrap_err()
        .to_string();
    assert!(nul.contains("NUL"), "{nul}");
}

#[test]
fn a_failed_record_leaves_the_batch_untouched() {
    let m = mapper(vec![col("id", ColumnType::Int2, true, false)], "");
    let mut rows = encode(&m, r#"{"id":1}"#).unwrap();
    let before = rows.bytes();
    assert!(m.encode(&record(r#"{"id":99999}"#), &mut rows).is_err());
    assert_eq!((rows.rows(), rows.bytes()), (1, before));
}

#[test]
fn metadata_columns_must_fit_their_type() {
    let err = TopicMapper::new(
        &topic("[metadata]\noffset = \"off\""),
        table(vec![col("off", ColumnType::Text, true, false)], &[]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("metadata.offset cannot go into column \"off\""),
        "{err}"
    );
}

#[test]
fn a_tombstone_is_an_error_not_a_silent_drop() {
    let m = mapper(vec![col("id", ColumnType::Int8, true, false)], "");
    let mut rows = m.new_rows();
    let mut r = record("");
    r.value = None;
    assert_eq!(
        m.encode(&r, &mut rows),
        Err(EncodeError::Invalid(MapError::Tombstone))
    );
}

#[test]
fn explicit_columns_take_pointers_keys_metadata_constants_and_defaults() {
    let m = mapper(
        vec![
            col("id", ColumnType::Int8, true, false),
            col("city", ColumnType::Text, true, false),
            col("first_tag", ColumnType::Text, false, false),
            col("k", ColumnType::Text, false, false),
            col("src", ColumnType::Text, true, false),
            col("trace", ColumnType::Text, false, false),
            col("skipped", ColumnType::Text, false, false),
        ],
        r#"[columns]
           id = "/order/id"
           city = "value:/order/address/city"
           first_tag = "/tags/0"
           k = "key"
           src = { const = "kafka" }
           trace = "meta:header:trace-id"
           skipped = "default""#,
    );
    let headers = [(&b"trace-id"[..], Some(&b"abc"[..]))];
    let mut r = record(r#"{"order":{"id":5,"address":{"city":"Lyon"}},"tags":["x","y"]}"#);
    r.headers = &headers;
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(rows.shapes[0].columns, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(
        fields(&rows),
        vec![
            Some(5i64.to_be_bytes().to_vec()),
            Some(b"Lyon".to_vec()),
            Some(b"x".to_vec()),
            Some(b"k1".to_vec()),
            Some(b"kafka".to_vec()),
            Some(b"abc".to_vec()),
        ]
    );
    let err = encode(&m, r#"{"order":{"id":5}}"#).unwrap_err().to_string();
    assert!(
        err.contains("city") && err.contains("/order/address/city"),
        "{err}"
    );
}

#[test]
fn a_not_null_column_nothing_maps_to_is_refused_at_startup() {
    let err = TopicMapper::new(
        &topic("map_by_name = false\n[columns]\nid = \"/id\""),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("name", ColumnType::Text, true, false),
            ],
            &[],
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("\"name\" is NOT NULL without a default"),
        "{err}"
    );
}

#[test]
fn deep_nesting_is_refused_but_brackets_in_strings_do_not_count() {
    let m = mapper(vec![col("j", ColumnType::Jsonb, false, false)], "");
    let deep = format!("{{\"j\":{}1{}}}", "[".repeat(70), "]".repeat(70));
    assert_eq!(
        encode(&m, &deep).unwrap_err(),
        MapError::TooDeep(MAX_JSON_DEPTH)
    );
    let shallow = format!("{{\"j\":\"{}\\\"{}\"}}", "[".repeat(200), "{".repeat(200));
    assert!(encode(&m, &shallow).is_ok());
}

#[test]
fn raw_values_go_whole_into_one_column() {
    let m = mapper(
        vec![
            col("body", ColumnType::Jsonb, true, false),
            col("off", ColumnType::Int8, true, false),
        ],
        "format = \"raw\"\nraw_column = \"body\"\n[metadata]\noffset = \"off\"",
    );
    let rows = encode(&m, r#"{"any": ["thing"]}"#).unwrap();
    let mut jsonb = vec![1u8];
    jsonb.extend_from_slice(br#"{"any": ["thing"]}"#);
    assert_eq!(
        fields(&rows),
        vec![Some(jsonb), Some(42i64.to_be_bytes().to_vec())]
    );
    assert!(encode(&m, "not json")
        .unwrap_err()
        .to_string()
        .contains("not JSON"));
}

fn upsert_mapper(extra: &str) -> TopicMapper {
    TopicMapper::new(
        &topic(&format!("mode = \"upsert\"\n{extra}")),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("v", ColumnType::Text, false, false),
            ],
            &["id"],
        ),
    )
    .unwrap()
}

#[test]
fn tombstones_delete_by_the_record_key_when_asked() {
    let m = upsert_mapper("delete_on_tombstone = true\nkey_from = \"key\"");
    let mut rows = m.new_rows();
    let mut r = record("");
    r.value = None;
    r.key = Some(b"17");
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(rows.deletes.as_ref().map(|d| d.buffer.rows()), Some(1));
    // A JSON object key works too, by field name.
    r.key = Some(br#"{"id": 18}"#);
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(rows.rows(), 2);
    // No key at all: the delete cannot be aimed, so it is an error.
    r.key = None;
    assert!(matches!(
        m.encode(&r, &mut rows),
        Err(EncodeError::Invalid(MapError::MissingKey { .. }))
    ));
}

#[test]
fn key_from_key_reads_plain_and_object_keys() {
    let m = upsert_mapper("key_from = \"key\"");
    let mut r = record(r#"{"v":"x"}"#);
    r.key = Some(b"123");
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    let f = fields(&rows);
    assert_eq!(f[0], Some(123i64.to_be_bytes().to_vec()));
    // An object key gives its fields by name; the value's own `id` is not consulted.
    let mut r = record(r#"{"id":1,"v":"y"}"#);
    r.key = Some(br#"{"id": 124}"#);
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(
        fields(&rows)[..2],
        [Some(124i64.to_be_bytes().to_vec()), Some(b"y".to_vec())]
    );
    // A plain string key (not JSON) goes whole into a single text key column.
    let m = TopicMapper::new(
        &topic("mode = \"upsert\"\nkey_from = \"key\""),
        table(
            vec![
                col("code", ColumnType::Text, true, false),
                col("v", ColumnType::Text, false, false),
            ],
            &["code"],
        ),
    )
    .unwrap();
    let mut r = record(r#"{"code":"ignored","v":"z"}"#);
    r.key = Some(b"o-1");
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(
        fields(&rows)[..2],
        [Some(b"o-1".to_vec()), Some(b"z".to_vec())]
    );
}

#[test]
fn upsert_records_without_their_key_are_errors() {
    let m = upsert_mapper("");
    // The key column is NOT NULL (a primary key), so the missing field is named as such.
    assert!(
        matches!(encode(&m, r#"{"v":"x"}"#), Err(MapError::MissingField { column, .. }) if column == "id")
    );
    assert!(matches!(
        encode(&m, r#"{"id":null,"v":"x"}"#),
        Err(MapError::NullForNotNull { .. })
    ));
}

#[test]
fn upsert_keys_must_be_backed_by_a_unique_index() {
    let err = TopicMapper::new(
        &topic("mode = \"upsert\"\nkey = [\"v\"]"),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("v", ColumnType::Text, false, false),
            ],
            &["id"],
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("not the primary key or a unique index"),
        "{err}"
    );
}

#[test]
fn debezium_deletes_use_before_or_the_key() {
    let m = TopicMapper::new(
        &topic("format = \"debezium\""),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("v", ColumnType::Text, false, false),
            ],
            &["id"],
        ),
    )
    .unwrap();
    let mut rows = m.new_rows();
    m.encode(
        &record(r#"{"op":"c","after":{"id":1,"v":"a"},"before":null}"#),
        &mut rows,
    )
    .unwrap();
    m.encode(
        &record(r#"{"op":"d","before":{"id":1,"v":"a"},"after":null}"#),
        &mut rows,
    )
    .unwrap();
    let mut tombstone = record("");
    tombstone.value = None;
    tombstone.key = Some(br#"{"id":1}"#);
    m.encode(&tombstone, &mut rows).unwrap();
    assert_eq!(rows.shapes[0].buffer.rows(), 1);
    assert_eq!(rows.deletes.as_ref().map(|d| d.buffer.rows()), Some(2));
}

/// A Connect record whose schema is the last one seen is read by position: its payload is
/// validated as the row is read, and one that is not a single JSON value (more fields after
/// it, a second payload) gives the row a full read gives, never a row from the wrong bytes.
#[test]
fn a_known_connect_schema_followed_by_more_than_the_payload_is_read_in_full() {
    let m = mapper(
        vec![
            col("day", ColumnType::Date, true, false),
            col("n", ColumnType::Int8, true, false),
        ],
        "format = \"connect-json\"",
    );
    let schema = r#"{"type":"struct","fields":[{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},{"field":"n","type":"int64"}]}"#;
    let row = |v: &str| encode(&m, v).map(|rows| fields(&rows));
    let day = |d: i32| Some((d - 10957).to_be_bytes().to_vec());
    let n = |n: i64| Some(n.to_be_bytes().to_vec());
    for (value, want) in [
        // The first, read in full; the schema is known from then on.
        (
            format!(r#"{{"schema":{schema},"payload":{{"day":19675,"n":1}}}}"#),
            vec![day(19675), n(1)],
        ),
        (
            format!(r#"{{"schema":{schema},"payload":{{"day":19676,"n":2}}}}"#),
            vec![day(19676), n(2)],
        ),
        (
            format!(r#"{{"schema":{schema},"payload":{{"day":19677,"n":3}},"x":{{"n":9}}}}"#),
            vec![day(19677), n(3)],
        ),
        (
            format!(
                r#"{{"schema":{schema},"payload":{{"day":1,"n":4}},"payload":{{"day":19678,"n":5}}}}"#
            ),
            vec![day(19678), n(5)],
        ),
        // After those, the known path still answers.
        (
            format!(r#"{{"schema":{schema},"payload":{{"day":19679,"n":6}}}}"#),
            vec![day(19679), n(6)],
        ),
    ] {
        assert_eq!(row(&value).unwrap(), want, "{value}");
    }
    for broken in [
        format!(r#"{{"schema":{schema},"payload":{{"day":19675,"n":}}}}"#),
        format!(r#"{{"schema":{schema},"payload":{{"day":19675,"n":1}},"x":}}"#),
        format!(r#"{{"schema":{schema},"payload":{{"day":19675,"n":1}}}}}}"#),
    ] {
        assert!(
            matches!(row(&broken), Err(MapError::NotAnObject(_))),
            "{broken}"
        );
    }
}

#[test]
fn connect_decimals_and_dates_use_the_schema() {
    let m = TopicMapper::new(
        &topic("format = \"connect-json\""),
        table(
            vec![
                col("price", ColumnType::Numeric, true, false),
                col("day", ColumnType::Date, true, false),
            ],
            &[],
        ),
    )
    .unwrap();
    let v = r#"{"schema":{"type":"struct","fields":[
        {"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
        {"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"}]},
        "payload":{"price":"MDk=","day":19675}}"#;
    let rows = encode(&m, v).unwrap();
    let f = fields(&rows);
    let mut numeric = BytesMut::new();
    encode_numeric("123.45", &mut numeric).unwrap();
    assert_eq!(f[0].as_deref(), Some(&numeric[..]));
    // 2023-11-14 is 8718 days after 2000-01-01.
    assert_eq!(f[1], Some(8718i32.to_be_bytes().to_vec()));
}

proptest::proptest! {
    /// Whatever bytes arrive, mapping returns a row or an error; it never panics and never
    /// leaves half a row behind.
    #[test]
    fn arbitrary_values_never_panic(value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        for extra in ["", "format = \"connect-json\"", "format = \"debezium\"\nmode = \"upsert\""] {
            let columns = vec![
                col("id", ColumnType::Int8, true, false),
                col("n", ColumnType::Numeric, false, false),
                col("t", ColumnType::Timestamptz, false, false),
                col("j", ColumnType::Jsonb, false, false),
            ];
            let m = TopicMapper::new(&topic(extra), table(columns, &["id"])).unwrap();
            let mut rows = m.new_rows();
            let mut r = record("");
            r.value = Some(&value);
            let before = rows.bytes();
            if m.encode(&r, &mut rows).is_err() {
                proptest::prop_assert_eq!(rows.bytes(), before);
            }
        }
    }

    /// Counting openers only settles values that cannot nest deeper than the limit: on any
    /// text of brackets, quotes and escapes (openers inside strings too) the answer is the
    /// exact walk's.
    #[test]
    fn the_depth_prefilter_answers_as_the_exact_walk(
        text in "[{}\\[\\]\"\\\\a]{0,60}",
        limit in 0usize..10,
    ) {
        proptest::prop_assert_eq!(
            depth::nests_deeper_than(text.as_bytes(), limit),
            depth::nests_deeper_than_exactly(text.as_bytes(), limit)
        );
    }

    /// Whatever follows a known Connect schema, a mapper that has seen it (and takes the
    /// payload by position) gives the row, or an error, that a mapper reading the record in
    /// full gives.
    #[test]
    fn a_known_connect_envelope_maps_as_a_full_read_does(
        payload in "(\\{\"n\":-?[0-9]{1,3}(,\"d\":[0-9]{1,5})?\\}|null|\\[\\]|\\{\"n\":|\\{\\}|7)",
        tail in "(|,\"x\":1|,\"payload\":\\{\"n\":7\\}|\\}|,| |,\"x\":)",
    ) {
        let schema = r#"{"type":"struct","fields":[{"field":"n","type":"int64"},{"field":"d","type":"int32","name":"org.apache.kafka.connect.data.Date"}]}"#;
        let new_mapper = || {
            mapper(
                vec![
                    col("n", ColumnType::Int8, false, false),
                    col("d", ColumnType::Date, false, false),
                ],
                "format = \"connect-json\"",
            )
        };
        let warm = new_mapper();
        let first = format!(r#"{{"schema":{schema},"payload":{{"n":1,"d":2}}}}"#);
        encode(&warm, &first).unwrap();
        let value = format!(r#"{{"schema":{schema},"payload":{payload}{tail}}}"#);
        let known = encode(&warm, &value).map(|rows| fields(&rows));
        let in_full = encode(&new_mapper(), &value).map(|rows| fields(&rows));
        match (known, in_full) {
            (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a, b, "{}", value),
            (a, b) => proptest::prop_assert_eq!(a.is_ok(), b.is_ok(), "{}", value),
        }
    }

    /// The same for Debezium events, whose known payload is validated by reading its `op`,
    /// `before` and `after`: writes, deletes, truncates and broken events alike.
    #[test]
    fn a_known_debezium_envelope_maps_as_a_full_read_does(
        op in "(c|u|d|r|t|x)",
        before in "(null|\\{\"id\":[0-9]{1,3}\\}|\\{\"id\":)",
        after in "(null|\\{\"id\":[0-9]{1,3},\"n\":-?[0-9]{1,4}\\}|\\{\\})",
        tail in "(|,\"source\":\\{\"x\":\"y\"\\}|,\"source\":\\{\"x\":\\}|\\},\"x\":1|\\},\"payload\":\\{\"op\":\"d\",\"before\":\\{\"id\":9\\}|\\}\\})",
    ) {
        let schema = r#"{"type":"struct","fields":[{"field":"after","type":"struct","fields":[{"field":"id","type":"int64"},{"field":"n","type":"int64"}]}]}"#;
        let new_mapper = || {
            TopicMapper::new(
                &topic("format = \"debezium\"\nmode = \"upsert\"\ntruncate = \"apply\""),
                table(
                    vec![
                        col("id", ColumnType::Int8, true, false),
                        col("n", ColumnType::Int8, false, false),
                    ],
                    &["id"],
                ),
            )
            .unwrap()
        };
        // Every buffer the rows filled, deletes and truncate included.
        let all = |rows: TableRows| {
            let mut bytes: Vec<Vec<u8>> =
                rows.shapes.iter().map(|s| s.buffer.as_bytes().to_vec()).collect();
            bytes.extend(rows.deletes.iter().map(|d| d.buffer.as_bytes().to_vec()));
            (bytes, rows.truncate)
        };
        let warm = new_mapper();
        let first = format!(r#"{{"schema":{schema},"payload":{{"op":"c","after":{{"id":1,"n":2}}}}}}"#);
        encode(&warm, &first).unwrap();
        // A tail closing the payload early leaves the rest of the event to the tail.
        let open = if tail.starts_with('}') { "" } else { "}" };
        let value = format!(
            r#"{{"schema":{schema},"payload":{{"op":"{op}","before":{before},"after":{after}{tail}{open}}}"#
        );
        let known = encode(&warm, &value).map(all);
        let in_full = encode(&new_mapper(), &value).map(all);
        match (known, in_full) {
            (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a, b, "{}", value),
            (a, b) => proptest::prop_assert_eq!(a.is_ok(), b.is_ok(), "{}", value),
        }
    }

    #[test]
    fn arbitrary_json_objects_never_panic(
        fields in proptest::collection::vec(("[a-e]{1,2}", "(null|true|-?[0-9]{1,25}(\\.[0-9]{1,5})?|\"[^\"\\\\]{0,10}\"|\\[\\]|\\{\\})"), 0..6)
    ) {
        let m = mapper(
            vec![
                col("a", ColumnType::Int2, false, false),
                col("b", ColumnType::Numeric, false, false),
                col("c", ColumnType::Date, false, true),
                col("d", ColumnType::Bool, false, false),
                col("e", ColumnType::Uuid, false, false),
            ],
            "",
        );
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        let value = format!("{{{}}}", body.join(","));
        let mut rows = m.new_rows();
        let _ = m.encode(&record(&value), &mut rows);
    }
}

#[test]
fn upsert_leaves_absent_columns_out_in_every_format() {
    let columns = || {
        vec![
            col("id", ColumnType::Int8, true, false),
            col("a", ColumnType::Text, false, false),
            col("b", ColumnType::Text, false, true),
        ]
    };
    let connect = r#"{"schema":{"type":"struct","fields":[{"field":"id","type":"int64"}]},"payload":{"id":1}}"#;
    for (extra, value) in [
        ("mode = \"upsert\"", r#"{"id":1}"#),
        ("mode = \"upsert\"\nformat = \"connect-json\"", connect),
        (
            "format = \"debezium\"",
            r#"{"op":"u","before":null,"after":{"id":1}}"#,
        ),
    ] {
        let m = TopicMapper::new(&topic(extra), table(columns(), &["id"])).unwrap();
        let rows = encode(&m, value).unwrap();
        // Upsert rows have every column; the mask says which the record carried.
        assert_eq!(rows.shapes[0].columns, vec![0, 1, 2], "{extra}");
        assert_eq!(rows.presence.uniform(), Some(&[0][..]), "{extra}");
    }
    // An explicit null is a value: it is written.
    let m = TopicMapper::new(&topic("mode = \"upsert\""), table(columns(), &["id"])).unwrap();
    assert_eq!(
        encode(&m, r#"{"id":1,"a":null}"#)
            .unwrap()
            .presence
            .uniform(),
        Some(&[0, 1][..])
    );
    // Insert has no row to keep: a nullable column without a default is written as NULL.
    let m = mapper(columns(), "");
    assert_eq!(
        encode(&m, r#"{"id":1}"#).unwrap().shapes[0].columns,
        vec![0, 1]
    );
}

/// Microseconds since 2000-01-01, as a timestamptz field is encoded.
fn pg_micros(unix_micros: i64) -> Option<Vec<u8>> {
    Some((unix_micros - 946_684_800_000_000).to_be_bytes().to_vec())
}

#[test]
fn time_units_apply_per_topic_and_per_column() {
    let columns = || {
        vec![
            col("t", ColumnType::Timestamptz, false, false),
            col("ts", ColumnType::Timestamp, false, false),
            col("d", ColumnType::Date, false, false),
            col("ms", ColumnType::Timestamptz, false, false),
        ]
    };
    let m = mapper(
        columns(),
        "time_unit = \"us\"\n[time_units]\nms = \"ms\"\nd = \"days\"",
    );
    let rows = encode(
        &m,
        r#"{"t":1700000000123456,"ts":-1,"d":-1,"ms":1700000000123}"#,
    )
    .unwrap();
    assert_eq!(
        fields(&rows),
        vec![
            pg_micros(1_700_000_000_123_456),
            pg_micros(-1),
            Some((-10_958i32).to_be_bytes().to_vec()), // 1969-12-31
            pg_micros(1_700_000_000_123_000),
        ]
    );
    // The topic's unit is for timestamps; a date keeps its own rule unless it has a unit.
    let m = mapper(columns(), "time_unit = \"s\"");
    let rows = encode(&m, r#"{"t":1,"d":19675}"#).unwrap();
    let f = fields(&rows);
    assert_eq!(
        (f[0].clone(), f[2].clone()),
        (pg_micros(1_000_000), Some(8718i32.to_be_bytes().to_vec()))
    );
    assert_eq!(m.time_unit(0), Some(TimeUnit::S));
    assert_eq!(m.time_unit(2), None);
    assert!(!m.guesses_time_unit(0) && m.guesses_time_unit(2));
}

#[test]
fn time_units_apply_to_each_element_of_an_array_of_times() {
    use crate::schema::ArrayOf;
    let array = |element: &'static ColumnType, element_oid| {
        ColumnType::Array(ArrayOf {
            element,
            element_oid,
        })
    };
    let columns = vec![
        col("ts", array(&ColumnType::Timestamptz, 1184), false, false),
        col("ds", array(&ColumnType::Date, 1082), false, false),
        col("plain", array(&ColumnType::Timestamp, 1114), false, false),
    ];
    let m = mapper(
        columns.clone(),
        "time_unit = \"us\"\n[time_units]\nds = \"days\"",
    );
    let rows = encode(
        &m,
        r#"{"ts":[1700000000123456,null],"ds":[-1],"plain":[-1]}"#,
    )
    .unwrap();
    let f = fields(&rows);
    // Header (ndim 1, has NULL, OID, length, lower bound), then the elements.
    let mut ts = [1i32, 1, 1184, 2, 1].map(i32::to_be_bytes).concat();
    ts.extend(8i32.to_be_bytes());
    ts.extend(pg_micros(1_700_000_000_123_456).unwrap());
    ts.extend((-1i32).to_be_bytes());
    assert_eq!(f[0], Some(ts));
    let mut ds = [1i32, 0, 1082, 1, 1].map(i32::to_be_bytes).concat();
    ds.extend(4i32.to_be_bytes());
    ds.extend((-10_958i32).to_be_bytes()); // 1969-12-31
    assert_eq!(f[1], Some(ds));
    let mut plain = [1i32, 0, 1114, 1, 1].map(i32::to_be_bytes).concat();
    plain.extend(8i32.to_be_bytes());
    plain.extend(pg_micros(-1).unwrap());
    assert_eq!(f[2], Some(plain), "the topic's unit, microseconds");
    assert_eq!(m.time_unit(1), Some(TimeUnit::Days));
    // Without a unit, `check` warns about arrays of times as about times.
    let m = mapper(columns, "");
    assert!(m.guesses_time_unit(0) && m.guesses_time_unit(1));
    let err = TopicMapper::new(
        &topic("[time_units]\nts = \"days\""),
        table(
            vec![col(
                "ts",
                array(&ColumnType::Timestamptz, 1184),
                false,
                false,
            )],
            &[],
        ),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("\"days\" fits date columns only"), "{err}");
}

#[test]
fn a_schema_unit_beats_the_topic_unit_but_must_agree_with_a_column_unit() {
    let columns = || {
        vec![
            col("t", ColumnType::Timestamptz, false, false),
            col("u", ColumnType::Timestamptz, false, false),
        ]
    };
    let value = r#"{"schema":{"type":"struct","fields":[
        {"field":"t","type":"int64","name":"org.apache.kafka.connect.data.Timestamp"},
        {"field":"u","type":"int64","name":"io.debezium.time.MicroTimestamp"}]},
        "payload":{"t":1700000000123,"u":1700000000123456}}"#;
    let m = mapper(columns(), "format = \"connect-json\"\ntime_unit = \"ns\"");
    assert_eq!(
        fields(&encode(&m, value).unwrap()),
        vec![
            pg_micros(1_700_000_000_123_000),
            pg_micros(1_700_000_000_123_456)
        ]
    );
    // Without a schema the topic's unit applies.
    let rows = encode(&m, r#"{"t":1700000000123456789}"#).unwrap();
    assert_eq!(fields(&rows)[0], pg_micros(1_700_000_000_123_456));

    let agrees = mapper(
        columns(),
        "format = \"connect-json\"\n[time_units]\nt = \"ms\"\nu = \"us\"",
    );
    assert!(encode(&agrees, value).is_ok());
    let disagrees = mapper(
        columns(),
        "format = \"connect-json\"\n[time_units]\nt = \"us\"",
    );
    let err = encode(&disagrees, value).unwrap_err();
    assert!(
        matches!(&err, MapError::BadValue { column, reason, .. } if column == "t"
            && reason.contains("schema gives epoch milliseconds but time_units says epoch microseconds")),
        "{err}"
    );
}

#[test]
fn time_units_must_name_time_columns_and_fit_them() {
    let columns = || {
        vec![
            col("t", ColumnType::Timestamptz, false, false),
            col("d", ColumnType::Date, false, false),
            col("n", ColumnType::Int8, false, false),
        ]
    };
    let refused = |extra: &str| {
        TopicMapper::new(&topic(extra), table(columns(), &[]))
            .unwrap_err()
            .to_string()
    };
    let err = refused("[time_units]\nnope = \"us\"");
    assert!(
        err.contains("time_units.nope: column \"nope\" is not in the table"),
        "{err}"
    );
    let err = refused("[time_units]\nn = \"us\"");
    assert!(err.contains("time_units.n: column \"n\" is int8"), "{err}");
    let err = refused("[time_units]\nt = \"days\"");
    assert!(err.contains("\"days\" fits date columns only"), "{err}");
    assert!(TopicMapper::new(&topic("[time_units]\nd = \"days\""), table(columns(), &[])).is_ok());
    let unknown: Result<TopicSettings, _> = Figment::from(Toml::string(
        "name = \"topic\"\ntable = \"t\"\ntime_unit = \"minutes\"",
    ))
    .extract();
    let err = unknown.unwrap_err().to_string();
    assert!(err.contains("minutes") && err.contains("us"), "{err}");
    let typo: Result<TopicSettings, _> = Figment::from(Toml::string(
        "name = \"topic\"\ntable = \"t\"\ntime_units_typo = {}",
    ))
    .extract();
    assert!(typo.unwrap_err().to_string().contains("time_units_typo"));
}

#[test]
fn only_time_columns_fed_from_the_record_without_a_unit_are_guesses() {
    let m = mapper(
        vec![
            col("t", ColumnType::Timestamptz, false, false),
            col("stated", ColumnType::Timestamp, false, false),
            col("m", ColumnType::Timestamptz, false, false),
            col("n", ColumnType::Int8, false, false),
        ],
        "[time_units]\nstated = \"us\"\n[metadata]\ntimestamp = \"m\"",
    );
    let guesses: Vec<bool> = (0..4).map(|i| m.guesses_time_unit(i)).collect();
    assert_eq!(guesses, vec![true, false, false, false]);
}

#[test]
fn header_columns_store_what_was_sent_and_text_refuses_what_it_cannot_hold() {
    let m = mapper(
        vec![
            col("h", ColumnType::Jsonb, false, false),
            col("ht", ColumnType::Text, false, false),
            col("hb", ColumnType::Bytea, false, false),
        ],
        r#"[columns]
           ht = "meta:header:t"
           hb = "meta:header:b"
           [metadata]
           headers = "h""#,
    );
    let encode_with = |headers: &[Header<'_>]| {
        let mut r = record("{}");
        r.headers = headers;
        let mut rows = m.new_rows();
        m.encode(&r, &mut rows).map(|()| fields(&rows))
    };
    let int = [0, 0, 0, 0x2a];
    let headers = [
        (&b"t"[..], Some(&b"first"[..])),
        (b"b", Some(&int[..])),
        (b"x\0y", None),
        (&[0xff][..], Some(&[0xe9][..])),
        (b"t", Some(b"last")),
    ];
    let mut h = vec![1u8]; // jsonb's version byte
    h.extend_from_slice(
        serde_json::json!([
            {"name": "t", "value": "first"},
            {"name": "b", "value_base64": "AAAAKg=="},
            {"name_base64": "eAB5", "value": null},
            {"name_base64": "/w==", "value_base64": "6Q=="},
            {"name": "t", "value": "last"},
        ])
        .to_string()
        .as_bytes(),
    );
    assert_eq!(
        encode_with(&headers).unwrap(),
        vec![Some(h), Some(b"last".to_vec()), Some(int.to_vec())]
    );
    // No headers at all: an empty list, and NULL for each header column.
    let mut empty = vec![1u8];
    empty.extend_from_slice(b"[]");
    assert_eq!(encode_with(&[]).unwrap(), vec![Some(empty), None, None]);
    // A null value: NULL, not an empty value.
    let null = encode_with(&[(b"t", None), (b"b", Some(b""))]).unwrap();
    assert_eq!(&null[1..], [None, Some(Vec::new())]);

    for (value, why) in [(&int[..], "holds NUL"), (&[0xe9][..], "not UTF-8")] {
        let err = encode_with(&[(b"t", Some(value))]).unwrap_err();
        let EncodeError::Invalid(e) = err else {
            panic!("{err:?}")
        };
        let e = e.to_string();
        assert!(e.contains("column ht") && e.contains(why), "{e}");
    }
}

/// jsonb's binary form: the version byte, then the text.
fn jsonb(text: &str) -> Option<Vec<u8>> {
    let mut out = vec![1u8];
    out.extend_from_slice(text.as_bytes());
    Some(out)
}

#[test]
fn key_pointers_read_fields_of_the_record_key() {
    let m = mapper(
        vec![
            col("id", ColumnType::Int8, true, false),
            col("region", ColumnType::Text, false, false),
        ],
        "[columns]\nid = \"key:/id\"\nregion = \"key:/where/0\"",
    );
    let mut r = record(r#"{"id":1}"#);
    r.key = Some(br#"{"id":9,"where":["eu"]}"#);
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(
        fields(&rows),
        vec![Some(9i64.to_be_bytes().to_vec()), Some(b"eu".to_vec())]
    );
    // A key without the field: the NOT NULL column is an error naming it and the pointer.
    r.key = Some(br#"{"other":9}"#);
    let err = m.encode(&r, &mut m.new_rows()).unwrap_err();
    let EncodeError::Invalid(e) = err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(&e, MapError::MissingField { column, .. } if column == "id"),
        "{e}"
    );
    assert!(e.to_string().contains("/id"), "{e}");
}

#[test]
fn meta_sources_fill_columns_like_the_metadata_settings() {
    let m = mapper(
        vec![
            col("t", ColumnType::Text, false, false),
            col("p", ColumnType::Int4, false, false),
            col("o", ColumnType::Int8, false, false),
            col("ts", ColumnType::Timestamptz, false, false),
            col("k", ColumnType::Text, false, false),
            col("h", ColumnType::Jsonb, false, false),
        ],
        r#"map_by_name = false
           [columns]
           t = "meta:topic"
           p = "meta:partition"
           o = "meta:offset"
           ts = "meta:timestamp"
           k = "meta:key"
           h = "meta:headers""#,
    );
    let headers = [(&b"a"[..], Some(&b"x"[..]))];
    let mut r = record("{}");
    r.headers = &headers;
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert_eq!(
        fields(&rows),
        vec![
            Some(b"topic".to_vec()),
            Some(3i32.to_be_bytes().to_vec()),
            Some(42i64.to_be_bytes().to_vec()),
            pg_micros(1_700_000_000_000_000),
            Some(b"k1".to_vec()),
            jsonb(r#"[{"name":"a","value":"x"}]"#),
        ]
    );
}

#[test]
fn constants_are_any_toml_value_and_tables_and_arrays_become_json() {
    let m = mapper(
        vec![
            col("n", ColumnType::Int8, true, false),
            col("doc", ColumnType::Jsonb, true, false),
            col("list", ColumnType::Json, true, false),
            col("flag", ColumnType::Bool, true, false),
            col("region", ColumnType::Text, true, false),
            col("ratio", ColumnType::Float8, true, false),
            col("day", ColumnType::Date, true, false),
            col("when", ColumnType::Jsonb, true, false),
        ],
        r#"map_by_name = false
           [columns]
           ratio = { const = 1.5 }
           day = { const = 2024-01-31 }
           when = { const = { at = 1979-05-27T07:32:00Z } }
           n = { const = 5 }
           doc = { const = { a = [1] } }
           list = { const = [1, "two"] }
           flag = { const = true }
           region = { const = "eu" }"#,
    );
    let rows = encode(&m, "{}").unwrap();
    let f = fields(&rows);
    assert_eq!(f[0], Some(5i64.to_be_bytes().to_vec()));
    assert_eq!(f[1], jsonb(r#"{"a":[1]}"#));
    assert_eq!(f[2], Some(br#"[1,"two"]"#.to_vec()));
    assert_eq!(f[3], Some(vec![1]));
    assert_eq!(f[4], Some(b"eu".to_vec()));
    assert_eq!(f[5], Some(1.5f64.to_be_bytes().to_vec()));
    // A TOML date; 2024-01-31 is 8796 days after 2000-01-01.
    assert_eq!(f[6], Some(8796i32.to_be_bytes().to_vec()));
    // Inside a table too: the date's text, never the TOML parser's private wrapper.
    assert_eq!(f[7], jsonb(r#"{"at":"1979-05-27T07:32:00Z"}"#));
}

/// A Debezium mapper over `(id int8 primary key, v text)`.
fn debezium_mapper() -> TopicMapper {
    TopicMapper::new(
        &topic("format = \"debezium\""),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("v", ColumnType::Text, false, false),
            ],
            &["id"],
        ),
    )
    .unwrap()
}

#[test]
fn a_debezium_delete_without_before_deletes_by_the_record_key() {
    let m = debezium_mapper();
    let mut r = record(r#"{"op":"d","before":null,"after":null}"#);
    r.key = Some(br#"{"id":1}"#);
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    assert!(rows.shapes.iter().all(|s| s.buffer.rows() == 0));
    let deletes = rows.deletes.as_ref().expect("a delete");
    assert_eq!(deletes.buffer.rows(), 1);
    // The delete's key field is the key's id: 1 as int8.
    let bytes = deletes.buffer.as_bytes();
    let one = 1i64.to_be_bytes();
    assert!(bytes.windows(8).any(|w| w == one), "{bytes:?}");
    // Without a key either, the delete cannot be aimed: an error, not a skip.
    r.key = None;
    assert!(m.encode(&r, &mut m.new_rows()).is_err());
}

#[test]
fn debezium_truncates_and_messages_are_decode_errors_not_skips() {
    let m = debezium_mapper();
    for op in ["t", "m"] {
        let value = format!(r#"{{"op":"{op}","before":null,"after":null}}"#);
        let mut rows = m.new_rows();
        let err = m.encode(&record(&value), &mut rows).unwrap_err();
        let EncodeError::Invalid(e) = err else {
            panic!("{err:?}")
        };
        assert!(matches!(e, MapError::Unsupported(_)), "{op}: {e}");
        assert_eq!(
            crate::dead_letter::ErrorKind::of(&e),
            crate::dead_letter::ErrorKind::Decode
        );
        assert_eq!(rows.rows(), 0, "{op}");
    }
}

#[test]
fn debezium_variable_scale_decimals_and_json_strings_follow_their_schema() {
    let m = TopicMapper::new(
        &topic("format = \"debezium\""),
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("amount", ColumnType::Numeric, false, false),
                col("doc", ColumnType::Jsonb, false, false),
            ],
            &["id"],
        ),
    )
    .unwrap();
    let v = r#"{"schema":{"type":"struct","fields":[
        {"field":"after","type":"struct","fields":[
          {"field":"id","type":"int64"},
          {"field":"amount","type":"struct","name":"io.debezium.data.VariableScaleDecimal"},
          {"field":"doc","type":"string","name":"io.debezium.data.Json"}]}]},
        "payload":{"op":"c","before":null,
          "after":{"id":1,"amount":{"scale":3,"value":"AeJA"},"doc":"{\"a\": [1]}"}}}"#;
    let rows = encode(&m, v).unwrap();
    let f = fields(&rows);
    // 0x01e240 = 123456, scale 3.
    let mut numeric = BytesMut::new();
    encode_numeric("123.456", &mut numeric).unwrap();
    assert_eq!(f[1].as_deref(), Some(&numeric[..]));
    // The JSON inside the string, not the string itself.
    assert_eq!(f[2], jsonb(r#"{"a": [1]}"#));
    // Without the hint the same string would be a JSON string; with it, text that is not JSON
    // is refused.
    let bad = v.replace(r#""{\"a\": [1]}""#, r#""not json""#);
    let err = encode(&m, &bad).unwrap_err().to_string();
    assert!(
        err.contains("column doc") && err.contains("not JSON"),
        "{err}"
    );
}

#[test]
fn nesting_of_64_levels_is_accepted_and_65_refused() {
    let m = mapper(vec![col("j", ColumnType::Jsonb, false, false)], "");
    // The value object is the first level.
    let nested = |levels: usize| {
        let arrays = levels - 1;
        format!("{{\"j\":{}1{}}}", "[".repeat(arrays), "]".repeat(arrays))
    };
    assert!(encode(&m, &nested(64)).is_ok());
    assert_eq!(
        encode(&m, &nested(65)).unwrap_err(),
        MapError::TooDeep(MAX_JSON_DEPTH)
    );
    // Refused before it is parsed: malformed JSON that deep is too deep, not invalid.
    let malformed = format!("{{\"j\":{}x", "[".repeat(64));
    let err = encode(&m, &malformed).unwrap_err();
    assert_eq!(err, MapError::TooDeep(MAX_JSON_DEPTH));
    assert_eq!(
        crate::dead_letter::ErrorKind::of(&err),
        crate::dead_letter::ErrorKind::Decode
    );
}

#[test]
fn raw_text_must_be_utf8_and_raw_bytea_takes_any_bytes() {
    let raw = |ty: ColumnType| {
        mapper(
            vec![col("body", ty, true, false)],
            "format = \"raw\"\nraw_column = \"body\"",
        )
    };
    let encode_bytes = |m: &TopicMapper, value: &[u8]| {
        let mut r = record("");
        r.value = Some(value);
        let mut rows = m.new_rows();
        m.encode(&r, &mut rows).map(|()| fields(&rows))
    };
    let any = [0xff, 0x00, b'{'];
    assert_eq!(
        encode_bytes(&raw(ColumnType::Bytea), &any),
        Ok(vec![Some(any.to_vec())])
    );
    let text = raw(ColumnType::Text);
    assert_eq!(
        encode_bytes(&text, "ünïcode, not JSON".as_bytes()),
        Ok(vec![Some("ünïcode, not JSON".as_bytes().to_vec())])
    );
    let err = encode_bytes(&text, &[0xff, b'a']).unwrap_err();
    let EncodeError::Invalid(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        crate::dead_letter::ErrorKind::of(&e),
        crate::dead_letter::ErrorKind::Mapping,
        "{e}"
    );
    assert!(e.to_string().contains("UTF-8"), "{e}");
    // json (like jsonb) must be valid JSON.
    let err = encode_bytes(&raw(ColumnType::Json), b"{not json").unwrap_err();
    assert!(format!("{err:?}").contains("not JSON"), "{err:?}");
}

#[test]
fn max_record_bytes_counts_key_and_value_and_refuses_before_decoding() {
    assert_eq!(topic("").max_record_bytes.as_u64(), 16 * 1024 * 1024);
    let m = mapper(
        vec![col("v", ColumnType::Text, false, false)],
        "max_record_bytes = 100",
    );
    let value = format!(r#"{{"v":"{}"}}"#, "x".repeat(50));
    let mut r = record(&value);
    let key = [b'k'; 60];
    r.key = Some(&key);
    let too_large = |r: &RecordView<'_>| {
        matches!(
            m.encode(r, &mut m.new_rows()),
            Err(EncodeError::Invalid(MapError::TooLarge { limit: 100, .. }))
        )
    };
    // 57 + 60 bytes: neither alone is over the limit, together they are.
    assert!(too_large(&r));
    r.key = Some(b"k");
    assert!(m.encode(&r, &mut m.new_rows()).is_ok());
    // Not JSON and too deep, but too large first: it is never decoded.
    let junk = format!("{}not json", "[".repeat(120));
    assert!(too_large(&record(&junk)));
}

#[test]
fn metadata_columns_take_every_documented_type() {
    let m = mapper(
        vec![
            col("kb", ColumnType::Bytea, false, false),
            col("kj", ColumnType::Json, false, false),
            col("kjb", ColumnType::Jsonb, false, false),
            col("pn", ColumnType::Numeric, false, false),
            col("p2", ColumnType::Int2, false, false),
            col("p8", ColumnType::Int8, false, false),
            col("on", ColumnType::Numeric, false, false),
            col("tb", ColumnType::Int8, false, false),
            col("tt", ColumnType::Timestamp, false, false),
            col("hb", ColumnType::Bytea, false, false),
            col("hj", ColumnType::Json, false, false),
        ],
        r#"map_by_name = false
           [columns]
           kb = "meta:key"
           kj = "meta:key"
           kjb = "meta:key"
           pn = "meta:partition"
           p2 = "meta:partition"
           p8 = "meta:partition"
           on = "meta:offset"
           tb = "meta:timestamp"
           tt = "meta:timestamp"
           hb = "meta:header:bin"
           hj = "meta:headers""#,
    );
    let headers = [(&b"bin"[..], Some(&[0xff, 0x00][..]))];
    let mut r = record("{}");
    r.key = Some(br#"{"id": 7}"#);
    r.headers = &headers;
    let mut rows = m.new_rows();
    m.encode(&r, &mut rows).unwrap();
    let numeric = |text: &str| {
        let mut out = BytesMut::new();
        encode_numeric(text, &mut out).unwrap();
        Some(out.to_vec())
    };
    assert_eq!(
        fields(&rows),
        vec![
            Some(br#"{"id": 7}"#.to_vec()),
            Some(br#"{"id": 7}"#.to_vec()),
            jsonb(r#"{"id": 7}"#),
            numeric("3"),
            Some(3i16.to_be_bytes().to_vec()),
            Some(3i64.to_be_bytes().to_vec()),
            numeric("42"),
            Some(1_700_000_000_000i64.to_be_bytes().to_vec()),
            pg_micros(1_700_000_000_000_000),
            Some(vec![0xff, 0x00]),
            Some(br#"[{"name":"bin","value_base64":"/wA="}]"#.to_vec()),
        ]
    );
    // A key that is not JSON cannot go into a json column; bytea takes any key.
    r.key = Some(b"plain");
    let err = m.encode(&r, &mut m.new_rows()).unwrap_err();
    assert!(format!("{err:?}").contains("not JSON"), "{err:?}");
}

#[test]
fn bytea_encoding_names_bytea_columns_and_time_units_take_times_of_day_and_intervals() {
    let columns = || {
        vec![
            col("b", ColumnType::Bytea, false, false),
            col("n", ColumnType::Int8, false, false),
            col("t", ColumnType::Time, false, false),
            col("i", ColumnType::Interval, false, false),
        ]
    };
    let mapper = |extra: &str| TopicMapper::new(&topic(extra), table(columns(), &[]));
    let hex = mapper("[bytea_encoding]\nb = \"hex\"").unwrap();
    assert!(hex.reads_hex(0) && !hex.reads_hex(1));
    assert!(!mapper("[bytea_encoding]\nb = \"base64\"")
        .unwrap()
        .reads_hex(0));
    let err = mapper("[bytea_encoding]\nn = \"hex\"")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bytea_encoding.n: column \"n\" is int8, not bytea"),
        "{err}"
    );
    let err = mapper("[bytea_encoding]\nnope = \"hex\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not in the table"), "{err}");
    // An unknown encoding is refused when the settings are read.
    let parsed: Result<TopicSettings, _> = Figment::from(Toml::string(
        "name = \"topic\"\ntable = \"t\"\nbytea_encoding = { b = \"base32\" }",
    ))
    .extract();
    assert!(parsed.is_err());

    let units = mapper("[time_units]\nt = \"ms\"\ni = \"us\"").unwrap();
    assert_eq!(units.time_unit(2), Some(TimeUnit::Ms));
    assert_eq!(units.time_unit(3), Some(TimeUnit::Us));
    let err = mapper("[time_units]\ni = \"days\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"days\" fits date columns only"), "{err}");
    // The topic's unit is for timestamps without a schema: a time of day or an interval
    // gets none from it, so its integers need their own.
    let topic_unit = mapper("time_unit = \"us\"").unwrap();
    assert_eq!(
        (topic_unit.time_unit(2), topic_unit.time_unit(3)),
        (None, None)
    );
}

/// `truncate = "ignore"` takes a `t` and writes nothing; `apply` marks a fresh batch's rows to
/// be emptied first, and one meeting rows of its table asks for a fresh batch, leaving the
/// rows as they were.
#[test]
fn truncates_are_ignored_or_come_first_in_their_batch() {
    let tbl = table(
        vec![
            col("id", ColumnType::Int8, true, false),
            col("v", ColumnType::Text, false, false),
        ],
        &["id"],
    );
    let t = r#"{"op":"t","before":null,"after":null}"#;
    let ignoring = TopicMapper::new(
        &topic("format = \"debezium\"\ntruncate = \"ignore\""),
        tbl.clone(),
    )
    .unwrap();
    let mut rows = ignoring.new_rows();
    ignoring.encode(&record(t), &mut rows).unwrap();
    assert_eq!((rows.rows(), rows.truncate), (0, None));

    let applying =
        TopicMapper::new(&topic("format = \"debezium\"\ntruncate = \"apply\""), tbl).unwrap();
    let mut rows = applying.new_rows();
    applying.encode(&record(t), &mut rows).unwrap();
    assert_eq!(rows.truncate, Some((3, 42)));
    let create = r#"{"op":"c","before":null,"after":{"id":1,"v":"a"}}"#;
    applying.encode(&record(create), &mut rows).unwrap();
    assert_eq!(rows.rows(), 1, "rows after the truncate join its batch");
    let bytes = rows.bytes();
    assert_eq!(
        applying.encode(&record(t), &mut rows),
        Err(EncodeError::NeedsFreshBatch)
    );
    assert_eq!((rows.rows(), rows.bytes()), (1, bytes));
}

/// What a soft delete column may be, and what deletes and upserts write into it: a delete
/// stages its key and mark (true, or the record's timestamp), an upsert carries the value
/// that revives a row (false, or NULL) whatever the record says.
#[test]
fn soft_delete_columns_are_checked_and_set_by_deletes_and_upserts() {
    let columns = |mark: Column| {
        table(
            vec![
                col("id", ColumnType::Int8, true, false),
                col("v", ColumnType::Text, false, false),
                mark,
            ],
            &["id"],
        )
    };
    let soft = |column: &str| {
        format!("mode = \"upsert\"\ndelete_on_tombstone = true\ndelete_mode = \"soft\"\nsoft_delete_column = \"{column}\"")
    };
    for (mark, settings, expected) in [
        (
            col("gone", ColumnType::Text, false, false),
            soft("gone"),
            "must be boolean, timestamp or timestamptz",
        ),
        (
            col("gone", ColumnType::Timestamptz, true, false),
            soft("gone"),
            "is NOT NULL",
        ),
        (
            col("gone", ColumnType::Bool, false, false),
            soft("nope"),
            "is not a column",
        ),
        (
            col("gone", ColumnType::Bool, false, false),
            soft("id"),
            "must be boolean",
        ),
        (
            col("gone", ColumnType::Bool, false, false),
            format!("{}\n[columns]\ngone = \"/g\"", soft("gone")),
            "cannot also be mapped",
        ),
    ] {
        let err = TopicMapper::new(&topic(&settings), columns(mark)).unwrap_err();
        assert!(err.reason.contains(expected), "{}: {err}", expected);
    }

    let m = TopicMapper::new(
        &topic(&soft("gone")),
        columns(col("gone", ColumnType::Timestamptz, false, false)),
    )
    .unwrap();
    let mut rows = m.new_rows();
    m.encode(
        &record(r#"{"id":1,"v":"a","gone":"2020-01-01T00:00:00Z"}"#),
        &mut rows,
    )
    .unwrap();
    let row = fields(&rows);
    assert_eq!(
        row[2], None,
        "an upsert clears the mark whatever the record says"
    );
    let mut tombstone = record("");
    tombstone.value = None;
    tombstone.key = Some(br#"{"id":1}"#);
    m.encode(&tombstone, &mut rows).unwrap();
    let deletes = rows.deletes.as_ref().unwrap();
    let staged = first_row(deletes.buffer.as_bytes());
    // 2023-11-14T22:13:20Z in microseconds since 2000-01-01.
    let micros = (1_700_000_000_000i64 - 946_684_800_000) * 1_000;
    assert_eq!(staged[1], Some(micros.to_be_bytes().to_vec()));
    tombstone.timestamp = None;
    let err = m.encode(&tombstone, &mut rows).unwrap_err();
    assert!(format!("{err:?}").contains("no timestamp"), "{err:?}");

    let m = TopicMapper::new(
        &topic(&soft("gone")),
        columns(col("gone", ColumnType::Bool, true, true)),
    )
    .unwrap();
    let mut rows = m.new_rows();
    m.encode(&record(r#"{"id":1,"v":"a"}"#), &mut rows).unwrap();
    assert_eq!(fields(&rows)[2], Some(vec![0]));
    let mut tombstone = record("");
    tombstone.value = None;
    tombstone.key = Some(br#"{"id":1}"#);
    m.encode(&tombstone, &mut rows).unwrap();
    let staged = first_row(rows.deletes.as_ref().unwrap().buffer.as_bytes());
    assert_eq!(staged[1], Some(vec![1]));
}

/// `on_conflict = "ignore"` needs a key with a unique index, stages rows by key, and takes
/// no deletes.
#[test]
fn on_conflict_ignore_needs_a_unique_key_and_stages_by_it() {
    let columns = vec![
        col("id", ColumnType::Int8, true, false),
        col("v", ColumnType::Text, false, false),
    ];
    let err = TopicMapper::new(
        &topic("on_conflict = \"ignore\""),
        table(columns.clone(), &[]),
    )
    .unwrap_err();
    assert!(err.reason.contains("on_conflict = \"ignore\""), "{err}");
    let m = TopicMapper::new(&topic("on_conflict = \"ignore\""), table(columns, &["id"])).unwrap();
    assert_eq!(m.key_columns(), ["id"]);
    let rows = encode(&m, r#"{"id":1}"#).unwrap();
    assert!(rows.first_wins && rows.upsert_keys.is_some());
    let mut tombstone = record("");
    tombstone.value = None;
    let mut rows = m.new_rows();
    assert_eq!(
        m.encode(&tombstone, &mut rows),
        Err(EncodeError::Invalid(MapError::Tombstone))
    );
}

/// `json_text` makes a json column read a string as the JSON text it holds, exactly as a
/// schema's `io.debezium.data.Json` does: both give the same jsonb value.
#[test]
fn json_text_columns_read_strings_as_the_json_they_hold() {
    let columns = || {
        vec![
            col("id", ColumnType::Int8, true, false),
            col("profile", ColumnType::Jsonb, false, false),
            col("raw", ColumnType::Json, false, false),
        ]
    };
    let m = TopicMapper::new(
        &topic("format = \"debezium\"\njson_text = [\"profile\", \"raw\"]"),
        table(columns(), &["id"]),
    )
    .unwrap();
    let schemaless = r#"{"before":null,"op":"c",
        "after":{"id":1,"profile":"{\"tier\": \"gold\"}","raw":"[1, 2]"}}"#;
    let f = fields(&encode(&m, schemaless).unwrap());
    assert_eq!(f[1], jsonb(r#"{"tier": "gold"}"#));
    assert_eq!(f[2], Some(b"[1, 2]".to_vec()));
    // With the schema's hint and without the setting: the same value.
    let hinted =
        TopicMapper::new(&topic("format = \"debezium\""), table(columns(), &["id"])).unwrap();
    let with_schema = r#"{"schema":{"type":"struct","fields":[
        {"field":"after","type":"struct","fields":[
          {"field":"id","type":"int64"},
          {"field":"profile","type":"string","name":"io.debezium.data.Json"}]}]},
        "payload":{"op":"c","before":null,"after":{"id":1,"profile":"{\"tier\": \"gold\"}"}}}"#;
    assert_eq!(fields(&encode(&hinted, with_schema).unwrap())[1], f[1]);
    // Without either, the string stays a JSON string (what the setting is for).
    assert_eq!(
        fields(&encode(&hinted, schemaless).unwrap())[1],
        jsonb(r#""{\"tier\": \"gold\"}""#)
    );
    // Text that is not JSON, and a value that is not a string, are the record's error.
    for (bad, why) in [
        (r#""{tier""#, "not JSON"),
        (r#"{"tier":1}"#, "a string holding JSON"),
    ] {
        let v = schemaless.replace(r#""{\"tier\": \"gold\"}""#, bad);
        let err = encode(&m, &v).unwrap_err();
        assert!(
            matches!(&err, MapError::BadValue { column, reason, .. } if column == "profile" && reason.contains(why)),
            "{bad}: {err}"
        );
        assert_eq!(
            crate::dead_letter::ErrorKind::of(&err),
            crate::dead_letter::ErrorKind::Mapping
        );
    }
    // A null stays NULL.
    let null = schemaless.replace(r#""{\"tier\": \"gold\"}""#, "null");
    assert_eq!(fields(&encode(&m, &null).unwrap())[1], None);
}

/// `json_text` entries must name json or jsonb columns of the table: anywhere else the
/// setting would do nothing, so it is refused at startup rather than ignored.
#[test]
fn json_text_must_name_json_or_jsonb_columns() {
    let columns = || {
        vec![
            col("doc", ColumnType::Jsonb, false, false),
            col("j", ColumnType::Json, false, false),
            col("note", ColumnType::Text, false, false),
            col("n", ColumnType::Int8, false, false),
        ]
    };
    let refused = |extra: &str| {
        TopicMapper::new(&topic(extra), table(columns(), &[]))
            .unwrap_err()
            .to_string()
    };
    let err = refused("json_text = [\"nope\"]");
    assert!(
        err.contains("json_text: column \"nope\" is not in the table"),
        "{err}"
    );
    let err = refused("json_text = [\"note\"]");
    assert!(
        err.contains("json_text: column \"note\" is text; only json and jsonb columns"),
        "{err}"
    );
    let err = refused("json_text = [\"doc\", \"n\"]");
    assert!(err.contains("column \"n\" is int8"), "{err}");
    let ok = TopicMapper::new(
        &topic("json_text = [\"doc\", \"j\"]"),
        table(columns(), &[]),
    )
    .unwrap();
    assert!(ok.reads_json_text(0) && ok.reads_json_text(1) && !ok.reads_json_text(2));
    let typo: Result<TopicSettings, _> = Figment::from(Toml::string(
        "name = \"topic\"\ntable = \"t\"\njson_text = \"doc\"",
    ))
    .extract();
    assert!(typo.is_err(), "a single name is not a list");
}

/// `check` names `json_text` for json columns of topics whose records may come without a
/// schema, and only there: a registry format's schema says what its strings are.
#[test]
fn check_mentions_json_text_where_a_string_may_hold_json_text() {
    let columns = || {
        vec![
            col("id", ColumnType::Int8, true, false),
            col("doc", ColumnType::Jsonb, false, false),
            col("note", ColumnType::Text, false, false),
        ]
    };
    let noted = |extra: &str| {
        let m = TopicMapper::new(&topic(extra), table(columns(), &["id"])).unwrap();
        (0..3)
            .filter(|&i| m.may_store_json_text_as_string(i))
            .collect::<Vec<_>>()
    };
    assert_eq!(noted(""), [1]);
    assert_eq!(noted("format = \"connect-json\""), [1]);
    assert_eq!(noted("format = \"debezium\""), [1]);
    assert_eq!(
        noted("format = \"debezium\"\njson_text = [\"doc\"]"),
        Vec::<usize>::new()
    );
    assert_eq!(noted("format = \"avro\""), Vec::<usize>::new());
    assert_eq!(
        noted("format = \"debezium\"\nencoding = \"avro\""),
        Vec::<usize>::new()
    );
}
