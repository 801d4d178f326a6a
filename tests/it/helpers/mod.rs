//! Shared test machinery: real services, a database and topics per test, the real binary.

pub mod confluent;
pub mod connect_json;
pub mod db;
pub mod debezium;
pub mod fetch_floor;
pub mod http;
pub mod in_step;
pub mod kafka;
pub mod orders;
pub mod private;
pub mod proxy;
pub mod registry;
pub mod services;
pub mod sink;

use std::future::Future;
use std::time::{Duration, Instant};

use db::TestDb;
use kafka::TestTopic;
use sqlx::Executor;

/// Runs `cleanup` to completion on a runtime of its own: `Drop` may run inside or outside the
/// test's runtime, and blocking on that one from within it would panic.
pub fn run_detached<F>(cleanup: F)
where
    F: Future + Send + 'static,
{
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(cleanup);
        }
    })
    .join();
}

/// Standard base64, as JSON records carry bytes.
pub fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Polls `condition` until it holds; panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the stored offset of every partition equals the topic's end offset.
pub async fn wait_drained(db: &TestDb, group: &str, topic: &TestTopic, timeout: Duration) {
    let end = topic.end_positions();
    wait_until(
        "kafka_offsets to reach the end offsets",
        timeout,
        || async { db.stored_offsets(group, &topic.name).await == end },
    )
    .await;
}

/// Ends the sink's busy sessions in a test's database again and again, as a failover or an
/// administrator would. It is armed before the sink starts, because arming slows every write
/// of the table (`TestDb::slow_writes_to`): without that, a fast machine drains the backlog
/// between two looks and nothing is ended (CI once did, with 40,000 records).
pub struct SessionEnder<'a> {
    db: &'a TestDb,
    table: &'a str,
}

impl<'a> SessionEnder<'a> {
    /// Makes each statement that writes `table` take `slowdown` longer, so transactions stay
    /// open long enough to be ended.
    pub async fn arm(db: &'a TestDb, table: &'a str, slowdown: Duration) -> Self {
        db.slow_writes_to(table, slowdown).await;
        Self { db, table }
    }

    /// Every `pause`, for at most `rounds` rounds, until `enough` sessions were ended or the
    /// table holds `rows`. It starts only once the sink writes (ending its startup queries
    /// would stop it before it ran) and asserts that something was ended, or the test proved
    /// nothing.
    pub async fn end_busy(&self, rows: i64, rounds: usize, enough: i64, pause: Duration) -> i64 {
        let (db, table) = (self.db, self.table);
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&services::services().admin_url)
            .await
            .expect("admin connection");
        wait_until("the first rows", Duration::from_secs(60), || async {
            db.count(table).await > 0
        })
        .await;
        let mut ended = 0i64;
        for _ in 0..rounds {
            if ended >= enough || db.count(table).await >= rows {
                break;
            }
            let n: i64 = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name = 'kafka-pg-sink' AND state <> 'idle'",
            )
            .bind(&db.name)
            .fetch_one(&admin)
            .await
            .expect("end sessions");
            ended += n;
            tokio::time::sleep(pause).await;
        }
        assert!(
            ended > 0,
            "no transaction was interrupted: the test proved nothing"
        );
        ended
    }
}

/// Asserts that the benchmark's `benches/throughput/{bench}` includes the shared test helper
/// `tests/it/helpers/{helper}` and calls it as `call`: where README says a benchmark readout is
/// computed by code a test checks, this fails if the benchmark stops using that code.
pub fn assert_bench_uses(bench: &str, helper: &str, call: &str) {
    let path = format!("{}/benches/throughput/{bench}", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(&path).expect("the benchmark's source");
    let include = format!(r#"#[path = "../../tests/it/helpers/{helper}"]"#);
    assert!(
        source.contains(&include),
        "{path} no longer includes {helper}"
    );
    assert!(source.contains(call), "{path} no longer calls {call}");
}

/// Waits until `sink` has been assigned partitions: a SIGTERM before then lands before its
/// handler is installed.
pub async fn wait_assigned(sink: &sink::Sink) {
    wait_until(
        "the sink to be assigned",
        Duration::from_secs(60),
        || async { sink.logs().contains("assigned") },
    )
    .await;
}

/// Every id in `0..n` exactly once: no duplicate, no gap.
pub async fn assert_exactly_once(db: &TestDb, table: &str, n: i64) {
    let (dups, distinct) = db.duplicates_and_distinct(table).await;
    assert!(dups.is_empty(), "duplicated ids (id, copies): {dups:?}");
    let missing = db.missing_ids(table, n).await;
    assert!(missing.is_empty(), "missing ids: {missing:?}");
    assert_eq!(distinct, n, "distinct ids");
    assert_eq!(db.count(table).await, n, "rows");
}

/// At rest, each partition's row count equals its stored next offset (offsets start at 0 and
/// a non-transactional producer leaves no gaps): rows and position moved together.
pub async fn assert_rows_match_offsets(db: &TestDb, table: &str, group: &str, topic: &str) {
    let mismatched: Vec<(i32, i64, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT o.partition, COALESCE(r.n, 0), o.next_offset
           FROM kafka_offsets o
           LEFT JOIN (SELECT kafka_partition, count(*) AS n FROM \"{table}\" GROUP BY 1) r
                  ON r.kafka_partition = o.partition
          WHERE o.consumer_group = $1 AND o.topic = $2
            AND COALESCE(r.n, 0) <> COALESCE(o.next_offset, 0)"
    ))
    .bind(group)
    .bind(topic)
    .fetch_all(&db.pool)
    .await
    .expect("compare rows with offsets");
    assert!(
        mismatched.is_empty(),
        "(partition, rows, next_offset) out of step: {mismatched:?}"
    );
}

/// The whole exactly-once verdict after a drain: every id once, rows and positions in step,
/// and the position history a chain (needs `install_offset_audit`).
pub async fn assert_delivered_exactly_once(
    db: &TestDb,
    table: &str,
    group: &str,
    topic: &str,
    n: i64,
) {
    assert_exactly_once(db, table, n).await;
    assert_rows_match_offsets(db, table, group, topic).await;
    assert_offset_history_is_a_chain(db).await;
}

/// Records every change to `kafka_offsets`, so a test can check the history, not only the end.
pub async fn install_offset_audit(db: &TestDb) {
    db.pool
        .execute(
            "CREATE TABLE offset_audit (
                 seq bigserial PRIMARY KEY, topic text, partition int,
                 old_next bigint, new_next bigint, old_epoch bigint, new_epoch bigint, owner text);
             CREATE FUNCTION audit_offsets() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO offset_audit (topic, partition, old_next, new_next, old_epoch, new_epoch, owner)
                 VALUES (NEW.topic, NEW.partition, OLD.next_offset, NEW.next_offset,
                         OLD.owner_epoch, NEW.owner_epoch, NEW.owner_id);
                 RETURN NEW;
             END $$;
             CREATE TRIGGER audit AFTER UPDATE ON kafka_offsets
                 FOR EACH ROW EXECUTE FUNCTION audit_offsets();",
        )
        .await
        .expect("install offset audit");
}

/// Checks the committed history: every advance continues exactly where the previous one
/// ended, and only the partition's current owner epoch ever advanced it.
pub async fn assert_offset_history_is_a_chain(db: &TestDb) {
    /// (topic, partition, old_next, new_next, old_epoch, new_epoch)
    type Change = (String, i32, Option<i64>, Option<i64>, i64, i64);
    let rows: Vec<Change> = sqlx::query_as(
        "SELECT topic, partition, old_next, new_next, old_epoch, new_epoch FROM offset_audit ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .expect("read audit");
    let mut last: std::collections::HashMap<(String, i32), (Option<i64>, i64)> = Default::default();
    let mut advances = 0;
    for (topic, partition, old_next, new_next, old_epoch, new_epoch) in rows {
        let key = (topic, partition);
        if let Some(&(next, epoch)) = last.get(&key) {
            assert_eq!(
                old_next, next,
                "{key:?}: a change started from {old_next:?}, not from {next:?}"
            );
            assert_eq!(old_epoch, epoch, "{key:?}: epoch history broken");
        }
        if new_next != old_next {
            advances += 1;
            assert_eq!(
                old_epoch, new_epoch,
                "{key:?}: an advance also changed the epoch"
            );
            assert!(
                new_next > old_next,
                "{key:?}: offset went from {old_next:?} back to {new_next:?}"
            );
        } else {
            assert_eq!(
                new_epoch,
                old_epoch + 1,
                "{key:?}: a claim must bump the epoch by one"
            );
        }
        last.insert(key, (new_next, new_epoch));
    }
    assert!(advances > 0, "the audit saw no commits at all");
}

/// Checks every column of every row of an orders table against the order it names
/// (`kafka::order_json(id)`, produced over `partitions` partitions in id order, so order `id`
/// is at partition `id % partitions`, offset `id / partitions`). Returns how many copies each
/// (partition, offset) has, for the caller's expectations.
pub async fn orders_as_produced(
    db: &TestDb,
    table: &str,
    partitions: i64,
) -> std::collections::BTreeMap<(i32, i64), i64> {
    type Row = (i64, String, String, Option<String>, i64, String, i32, i64);
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT id, customer, amount::text, status, (extract(epoch FROM created_at) * 1000)::int8,
                attrs::text, kafka_partition, kafka_offset FROM \"{table}\""
    ))
    .fetch_all(&db.pool)
    .await
    .expect("read orders");
    let mut copies = std::collections::BTreeMap::new();
    for row in rows {
        let id = row.0;
        let expected: Row = (
            id,
            format!("c-{}", id % 97),
            format!("{}.{:02}", id % 1000, id % 100),
            Some(["new", "paid", "shipped"][(id % 3) as usize].to_string()),
            1_700_000_000_000 + id * 1000,
            format!(r#"{{"n": {id}, "tags": ["a", "b"]}}"#),
            (id % partitions) as i32,
            id / partitions,
        );
        assert_eq!(row, expected, "a row differs from the order it names");
        *copies.entry((row.6, row.7)).or_insert(0) += 1;
    }
    copies
}
