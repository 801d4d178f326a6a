//! Change data capture with the real Debezium PostgreSQL connector (issue 27): a source
//! database changed with SQL, the connector's events in Kafka, the sink's copy compared with
//! the source column by column.

use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::debezium::{wait_copy_equals_source, CdcOptions, CdcSource};
use crate::helpers::sink::{Sink, SinkConfig};

/// A table of many types, the same on the source and in the copy.
const ITEMS: &str = "CREATE TABLE items (
    id int PRIMARY KEY,
    name text NOT NULL,
    qty bigint,
    price numeric(12,2),
    ratio double precision,
    active boolean,
    born date,
    seen timestamp,
    at timestamptz,
    doc jsonb,
    blob bytea,
    tags text[],
    uid uuid
)";

const ITEMS_COLUMNS: &[&str] = &[
    "id", "name", "qty", "price", "ratio", "active", "born", "seen", "at", "doc", "blob", "tags",
    "uid",
];

/// The harness's smoke test: a snapshot of three rows, then inserts, updates (one setting
/// NULLs) and deletes streamed by the real connector (JsonConverter with schemas), applied by
/// the sink as README configures Debezium topics (upsert by the primary key): after each
/// phase the copy equals the source in every column.
#[tokio::test(flavor = "multi_thread")]
async fn the_real_connector_snapshots_and_streams_into_the_sink() {
    let setup = format!(
        "{ITEMS};
         INSERT INTO items VALUES
           (1, 'ann', 10, 12.50, 0.25, true, '2020-02-29', '2026-12-01 10:00:00.123456',
            '2026-12-01 10:00:00.5+02', '{{\"tier\": \"gold\", \"n\": [1, 2]}}', '\\xdeadbeef',
            ARRAY['a', 'b c'], 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
           (2, 'bob', NULL, -0.01, -1e300, false, '1970-01-01', '1999-12-31 23:59:59',
            '2000-01-01 00:00:00Z', '[]', '', '{{}}', NULL),
           (3, 'cy', 9007199254740993, 9999999999.99, 3.5, NULL, NULL, NULL, NULL, NULL, NULL,
            NULL, NULL);"
    );
    let source = CdcSource::start(&setup, &["items"], CdcOptions::default()).await;
    source.wait_for_records(&source.topic("items"), 3).await;
    let db = TestDb::migrated().await;
    db.pool
        .execute(ITEMS)
        .await
        .expect("create the copy's table");
    let mut config = SinkConfig::new(&db.url, &source.topic("items"), "items");
    config.metadata = String::new();
    config.topic_settings = "format = \"debezium\"\n".into();
    let mut sink = Sink::start(&config, "cdc-smoke");

    wait_copy_equals_source(&source, &db, "items", ITEMS_COLUMNS, &sink).await;
    assert_eq!(db.count("items").await, 3, "the snapshot's rows");

    source
        .execute(
            "INSERT INTO items VALUES
               (4, 'dee', 4, 4.40, 4.0, true, '2024-04-04', '2024-04-04 04:04:04',
                '2024-04-04 04:04:04+04', '{\"k\": null}', '\\x00ff', ARRAY[NULL, 'x'],
                '00000000-0000-0000-0000-000000000004'),
               (5, 'eve', 5, 5.00, 5.5, false, NULL, NULL, NULL, '\"s\"', NULL, NULL, NULL);
             UPDATE items SET name = 'ann2', qty = qty + 1, price = 13.75, doc = '{\"tier\": \"platinum\"}',
                              tags = ARRAY['z'], at = '2026-12-02 00:00:00Z' WHERE id = 1;
             UPDATE items SET qty = NULL, price = NULL, ratio = NULL, active = NULL, born = NULL,
                              seen = NULL, at = NULL, doc = NULL, blob = NULL, tags = NULL
                        WHERE id = 2;
             DELETE FROM items WHERE id = 3;
             UPDATE items SET name = 'dee2' WHERE id = 4;
             DELETE FROM items WHERE id = 5;",
        )
        .await;
    source.sync().await;
    wait_copy_equals_source(&source, &db, "items", ITEMS_COLUMNS, &sink).await;
    assert_eq!(
        db.count("items").await,
        3,
        "rows 3 and 5 deleted, 4 inserted"
    );
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
}
