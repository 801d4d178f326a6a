//! What the sink did: counters for the progress and summary lines, and the same events as
//! Prometheus metrics (names in `meters`). Every event is recorded here and nowhere else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::meters;
use crate::shutdown::Shutdown;

/// Why a batch transaction did not commit: the `reason` label of the failure counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Connection, server or timeout trouble; the outcome is re-read.
    Transient,
    /// Another owner's epoch refused the advance: the only failure `fenced_commits_total` counts.
    Fenced,
    /// Queued behind a failed batch, so its expected position never came to be.
    Stale,
    /// PostgreSQL refused the data.
    Rejected,
}

impl Failure {
    /// The metric label, as README's metrics table names it.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Transient => "transient",
            Failure::Fenced => "fenced",
            Failure::Stale => "stale",
            Failure::Rejected => "rejected",
        }
    }
}

/// What the sink has done since it started.
#[derive(Default, Debug)]
pub struct Stats {
    pub records_consumed: AtomicU64,
    pub rows_committed: AtomicU64,
    pub records_committed: AtomicU64,
    pub batches_committed: AtomicU64,
    pub batches_failed: AtomicU64,
    pub fenced: AtomicU64,
    pub dead_letters: AtomicU64,
    pub rebalances: AtomicU64,
    /// Sum and maximum of transaction times since the last progress line, in microseconds.
    pub commit_micros_sum: AtomicU64,
    pub commit_micros_max: AtomicU64,
    /// Transaction times (BEGIN to COMMIT) and record waits (first buffered to COMMIT), in
    /// microseconds, for the summary at exit. Updated once per batch, so a mutex is cheap.
    latencies: Mutex<Option<Latencies>>,
}

/// Histograms behind the summary line.
#[derive(Debug)]
struct Latencies {
    transaction: hdrhistogram::Histogram<u64>,
    batch_age: hdrhistogram::Histogram<u64>,
}

impl Stats {
    /// Relaxed: the counters are tallies for log lines and tests, and order nothing.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A snapshot; a counter may move on meanwhile, which a progress line tolerates.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records one committed batch: its rows per table and its dead letters.
    pub fn committed_batch(&self, r: &crate::writer::WriteResult) {
        self.committed(r.records, r.rows, r.transaction_time, r.batch_age);
        Self::add(&self.dead_letters, r.dead_letters as u64);
        metrics::counter!(meters::BATCHES_COMMITTED).increment(1);
        metrics::histogram!(meters::TRANSACTION_SECONDS).record(r.transaction_time.as_secs_f64());
        metrics::histogram!(meters::RECORD_WAIT_SECONDS).record(r.batch_age.as_secs_f64());
        metrics::counter!(meters::DEAD_LETTERS).increment(r.dead_letters as u64);
        for (table, n) in &r.tables {
            metrics::counter!(meters::ROWS_WRITTEN, "table" => table.clone()).increment(*n as u64);
        }
        for table in &r.copied {
            metrics::counter!(meters::UPSERTS_COPIED, "table" => table.clone()).increment(1);
        }
        for (table, kept, lettered) in &r.placeholders {
            for (outcome, n) in [("kept", kept), ("dead_lettered", lettered)] {
                metrics::counter!(meters::TOAST_PLACEHOLDERS, "outcome" => outcome, "table" => table.clone())
                    .increment(*n);
            }
        }
        for (table, extra) in &r.rounds {
            metrics::counter!(meters::UPSERT_ROUNDS, "table" => table.clone())
                .increment(u64::from(*extra));
        }
    }

    /// A batch that failed and will be rewound and retried.
    pub fn failed_batch(&self, reason: Failure) {
        Self::add(&self.batches_failed, 1);
        metrics::counter!(meters::BATCH_FAILURES, "reason" => reason.label()).increment(1);
        if reason == Failure::Fenced {
            Self::add(&self.fenced, 1);
            metrics::counter!(meters::FENCED).increment(1);
        }
    }

    /// An assignment or a revocation.
    pub fn rebalance(&self, kind: &'static str, assigned_now: usize) {
        Self::add(&self.rebalances, 1);
        metrics::counter!(meters::REBALANCES, "kind" => kind).increment(1);
        metrics::gauge!(meters::ASSIGNED).set(assigned_now as f64);
    }

    /// Partitions assigned now.
    pub fn assigned(partitions: usize) {
        metrics::gauge!(meters::ASSIGNED).set(partitions as f64);
    }

    /// Records consumed so far from `topic` (the total, not an increment).
    pub fn consumed_from(topic: &str, total: u64) {
        metrics::counter!(meters::RECORDS_CONSUMED, "topic" => topic.to_string()).absolute(total);
    }

    /// Counters and latency histograms of the progress and summary lines.
    fn committed(&self, records: usize, rows: usize, transaction: Duration, batch_age: Duration) {
        if let Ok(mut guard) = self.latencies.lock() {
            let l = guard.get_or_insert_with(|| Latencies {
                // 1 µs to 1 h at 3 significant digits; larger values saturate.
                transaction: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .expect("valid bounds"),
                batch_age: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .expect("valid bounds"),
            });
            l.transaction
                .saturating_record(transaction.as_micros() as u64);
            l.batch_age.saturating_record(batch_age.as_micros() as u64);
        }
        Self::add(&self.records_committed, records as u64);
        Self::add(&self.rows_committed, rows as u64);
        Self::add(&self.batches_committed, 1);
        let micros = transaction.as_micros() as u64;
        Self::add(&self.commit_micros_sum, micros);
        self.commit_micros_max.fetch_max(micros, Ordering::Relaxed);
    }

    /// Logs totals and latency percentiles once, at exit (the benchmark reads this line).
    pub fn log_summary(&self) {
        let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let guard = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        let (p50, p99, max, age_p50, age_p99) = match guard.as_ref() {
            Some(l) => (
                ms(&l.transaction, 0.5),
                ms(&l.transaction, 0.99),
                l.transaction.max() as f64 / 1000.0,
                ms(&l.batch_age, 0.5),
                ms(&l.batch_age, 0.99),
            ),
            None => (0.0, 0.0, 0.0, 0.0, 0.0),
        };
        tracing::info!(
            records_consumed = Self::get(&self.records_consumed),
            records_committed = Self::get(&self.records_committed),
            rows_committed = Self::get(&self.rows_committed),
            batches_committed = Self::get(&self.batches_committed),
            batches_failed = Self::get(&self.batches_failed),
            fenced = Self::get(&self.fenced),
            dead_letters = Self::get(&self.dead_letters),
            commit_p50_ms = p50,
            commit_p99_ms = p99,
            commit_max_ms = max,
            batch_age_p50_ms = age_p50,
            batch_age_p99_ms = age_p99,
            "summary"
        );
    }

    /// Logs a line every `interval` with rates since the previous line, until shutdown; join
    /// the handle so no progress line follows the summary.
    pub fn spawn_progress_log(
        self: &Arc<Self>,
        interval: Duration,
        shutdown: Shutdown,
    ) -> tokio::task::JoinHandle<()> {
        let stats = self.clone();
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64, 0u64, 0u64);
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = shutdown.triggered() => break,
                }
                let now = Instant::now();
                let consumed = Self::get(&stats.records_consumed);
                let rows = Self::get(&stats.rows_committed);
                let batches = Self::get(&stats.batches_committed);
                let secs = now.duration_since(last.0).as_secs_f64().max(1e-3);
                let batch_count = batches - last.3;
                let sum = stats.commit_micros_sum.swap(0, Ordering::Relaxed);
                let max = stats.commit_micros_max.swap(0, Ordering::Relaxed);
                tracing::info!(
                    records_per_sec = ((consumed - last.1) as f64 / secs).round(),
                    rows_per_sec = ((rows - last.2) as f64 / secs).round(),
                    rows_committed = rows,
                    batches = batch_count,
                    avg_commit_ms = if batch_count > 0 {
                        sum as f64 / batch_count as f64 / 1000.0
                    } else {
                        0.0
                    },
                    max_commit_ms = max as f64 / 1000.0,
                    "progress"
                );
                last = (now, consumed, rows, batches);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Stats {
        /// p50 and p99 of transaction times in milliseconds, if any batch committed.
        pub fn commit_percentiles(&self) -> Option<(f64, f64)> {
            let guard = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().map(|l| {
                (
                    l.transaction.value_at_quantile(0.5) as f64 / 1000.0,
                    l.transaction.value_at_quantile(0.99) as f64 / 1000.0,
                )
            })
        }
    }

    #[test]
    fn percentiles_reflect_what_was_recorded() {
        let stats = Stats::default();
        for ms in 1..=100u64 {
            stats.committed(
                10,
                10,
                Duration::from_millis(ms),
                Duration::from_millis(ms * 2),
            );
        }
        let (p50, p99) = stats.commit_percentiles().unwrap();
        assert!((49.0..=51.0).contains(&p50), "{p50}");
        assert!((98.0..=100.5).contains(&p99), "{p99}");
        assert_eq!(Stats::get(&stats.rows_committed), 1000);
    }
}
