//! Prometheus metrics: their names, in one place, and the recorder that `/metrics` renders.

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

// Names are an interface: dashboards and alerts use them (README's metric table).

/// Records taken from Kafka, by topic: the input side of throughput.
pub const RECORDS_CONSUMED: &str = "kafka_pg_sink_records_consumed_total";
/// Rows committed, by table: the output side; deletes count too.
pub const ROWS_WRITTEN: &str = "kafka_pg_sink_rows_written_total";
/// Batch transactions committed; with the failures, the commit success rate.
pub const BATCHES_COMMITTED: &str = "kafka_pg_sink_batches_committed_total";
/// Upsert writes of a table that went in by a plain COPY (every key new) instead of the
/// merge, by table: flat on a stream of updates, one per batch on a stream of new keys.
pub const UPSERTS_COPIED: &str = "kafka_pg_sink_upserts_copied_total";
/// Merges beyond the first that committed batches' repeated keys cost, by table.
pub const UPSERT_ROUNDS: &str = "kafka_pg_sink_upsert_rounds_total";
/// Failed transactions by reason: `transient` and `fenced` heal; `rejected` needs a person.
pub const BATCH_FAILURES: &str = "kafka_pg_sink_batch_failures_total";
/// Commits the offset fence refused: another owner, or a position moved by `offsets reset`.
pub const FENCED: &str = "kafka_pg_sink_fenced_commits_total";
/// Records kept in `kafka_dead_letters`; any increase means data to look at.
pub const DEAD_LETTERS: &str = "kafka_pg_sink_dead_letters_total";
/// Debezium's unavailable-value placeholders (unchanged TOASTed columns), by table and outcome:
/// rows that kept the stored values, and rows that had none to keep (dead letters).
pub const TOAST_PLACEHOLDERS: &str = "kafka_pg_sink_toast_placeholders_total";
/// Assignments and revocations handled; a steady rate points at an unstable group.
pub const REBALANCES: &str = "kafka_pg_sink_rebalances_total";
/// BEGIN to COMMIT: what PostgreSQL costs per batch.
pub const TRANSACTION_SECONDS: &str = "kafka_pg_sink_transaction_seconds";
/// A batch's first record buffered to COMMIT: the latency a record sees.
pub const RECORD_WAIT_SECONDS: &str = "kafka_pg_sink_record_wait_seconds";
/// Records after the stored position; Kafka's own lag tools cannot see PostgreSQL's positions.
pub const LAG: &str = "kafka_pg_sink_lag";
/// One end of `LAG`, so a stalled sink is told from a quiet topic.
pub const HIGH_WATERMARK: &str = "kafka_pg_sink_high_watermark";
/// The other end of `LAG`: the stored position.
pub const NEXT_OFFSET: &str = "kafka_pg_sink_next_offset";
/// HTTP requests to the schema registry; flat while records flow, as schemas are cached by id.
pub const SCHEMA_REGISTRY_REQUESTS: &str = "kafka_pg_sink_schema_registry_requests_total";
/// Partitions this process owns; `/ready` also wants at least one.
pub const ASSIGNED: &str = "kafka_pg_sink_assigned_partitions";
/// 1 when `/ready` would answer 200 at this scrape, else 0: an owner of partitions that cannot
/// reach PostgreSQL or Kafka shows here and nowhere else.
pub const READY: &str = "kafka_pg_sink_ready";

/// Installs the global recorder. Gauges of partitions not observed for `idle` disappear, so a
/// revoked partition's lag does not linger.
pub fn install(idle: Duration) -> anyhow::Result<PrometheusHandle> {
    let buckets = [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .idle_timeout(MetricKindMask::GAUGE, Some(idle))
        .install_recorder()?;
    describe();
    // Counters exist from the start, so the first failure shows in a rate too.
    for reason in ["transient", "fenced", "rejected"] {
        metrics::counter!(BATCH_FAILURES, "reason" => reason).absolute(0);
    }
    for kind in ["assign", "revoke"] {
        metrics::counter!(REBALANCES, "kind" => kind).absolute(0);
    }
    metrics::counter!(FENCED).absolute(0);
    metrics::counter!(DEAD_LETTERS).absolute(0);
    metrics::counter!(BATCHES_COMMITTED).absolute(0);
    Ok(handle)
}

/// HELP text, so `/metrics` explains itself without the README.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(RECORDS_CONSUMED, "Records taken from Kafka, by topic");
    describe_counter!(
        ROWS_WRITTEN,
        "Rows committed (inserted, upserted or deleted), by table"
    );
    describe_counter!(BATCHES_COMMITTED, "Batch transactions committed");
    describe_counter!(
        UPSERTS_COPIED,
        "Upsert writes of a table made by a plain COPY because every key was new, by table"
    );
    describe_counter!(
        UPSERT_ROUNDS,
        "Merges beyond the first that batches naming a key more than once cost, by table (a table whose rules the probe cannot stand for)"
    );
    describe_counter!(
        BATCH_FAILURES,
        "Batch transactions that failed and were retried after a rewind, by reason"
    );
    describe_counter!(
        FENCED,
        "Batch commits refused because another owner's epoch holds a partition (retries are not counted)"
    );
    describe_counter!(DEAD_LETTERS, "Records written to kafka_dead_letters");
    describe_counter!(
        TOAST_PLACEHOLDERS,
        "Debezium records with unavailable (unchanged TOASTed) columns: kept stored values, or dead-lettered for want of a row"
    );
    describe_counter!(REBALANCES, "Partition assignments and revocations handled");
    describe_histogram!(
        TRANSACTION_SECONDS,
        Unit::Seconds,
        "BEGIN to COMMIT of a batch"
    );
    describe_histogram!(
        RECORD_WAIT_SECONDS,
        Unit::Seconds,
        "A batch's first record buffered to COMMIT"
    );
    describe_gauge!(
        LAG,
        "Records in Kafka after the stored position, by partition"
    );
    describe_gauge!(
        HIGH_WATERMARK,
        "The partition's high watermark, as last observed"
    );
    describe_gauge!(NEXT_OFFSET, "The stored next offset");
    describe_gauge!(ASSIGNED, "Partitions assigned to this sink");
    describe_gauge!(
        READY,
        "1 when /ready would answer 200 (partitions assigned, PostgreSQL and Kafka reachable), else 0"
    );
}
