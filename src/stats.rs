//! Counters for the progress line (and, later, metrics), updated without locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::shutdown::Shutdown;

/// What the sink has done since it started.
#[derive(Default, Debug)]
pub struct Stats {
    pub records_consumed: AtomicU64,
    pub rows_committed: AtomicU64,
    pub records_committed: AtomicU64,
    pub batches_committed: AtomicU64,
    pub batches_failed: AtomicU64,
    pub fenced: AtomicU64,
    pub rebalances: AtomicU64,
    /// Sum and maximum of transaction times since the last progress line, in microseconds.
    pub commit_micros_sum: AtomicU64,
    pub commit_micros_max: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records one committed batch.
    pub fn committed(&self, records: usize, rows: usize, transaction: Duration) {
        Self::add(&self.records_committed, records as u64);
        Self::add(&self.rows_committed, rows as u64);
        Self::add(&self.batches_committed, 1);
        let micros = transaction.as_micros() as u64;
        Self::add(&self.commit_micros_sum, micros);
        self.commit_micros_max.fetch_max(micros, Ordering::Relaxed);
    }

    /// Logs a line every `interval` with rates since the previous line, until shutdown.
    pub fn spawn_progress_log(self: &Arc<Self>, interval: Duration, shutdown: Shutdown) {
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
        });
    }
}
