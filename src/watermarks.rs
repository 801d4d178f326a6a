//! Watermarks of the assigned partitions: observed from librdkafka's statistics (no extra
//! requests to the brokers), stored in `kafka_watermarks` every few seconds so that the
//! `kafka_lag` view answers from SQL alone, and exported as lag gauges.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::statistics::Statistics;
use sqlx::PgPool;

use crate::health::Health;
use crate::meters;
use crate::shutdown::Shutdown;

/// (topic, partition) → (low, high), from the latest statistics.
#[derive(Default)]
pub struct Watermarks {
    latest: Mutex<HashMap<(String, i32), (i64, i64)>>,
}

impl Watermarks {
    /// Takes what librdkafka last reported: partitions it is fetching, and whether a broker is up.
    pub fn observe(&self, stats: &Statistics, health: &Health) {
        let mut map = HashMap::new();
        for (topic, t) in &stats.topics {
            for (&partition, p) in &t.partitions {
                // -1 is librdkafka's internal "unassigned" partition.
                if partition >= 0 && p.fetch_state == "active" && p.hi_offset >= 0 {
                    map.insert(
                        (topic.clone(), partition),
                        (p.lo_offset.max(0), p.hi_offset),
                    );
                }
            }
        }
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = map;
        let up = stats
            .brokers
            .values()
            .any(|b| b.nodeid >= 0 && b.state == "UP");
        health.set_kafka_up(up);
    }

    /// Copied out, so the lock the statistics callback also takes is not held across a query.
    fn snapshot(&self) -> Vec<(String, i32, i64, i64)> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|((t, p), (lo, hi))| (t.clone(), *p, *lo, *hi))
            .collect()
    }

    /// Stores the watermarks and refreshes the lag gauges every `interval`, until shutdown;
    /// join the handle so no write outlives the pool.
    pub fn spawn_recorder(
        self: &Arc<Self>,
        pool: PgPool,
        group: String,
        interval: Duration,
        shutdown: Shutdown,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            // A missing grant fails every interval: warn when failing starts, not each time.
            let mut failing = false;
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = shutdown.triggered() => break,
                }
                let rows = this.snapshot();
                if rows.is_empty() {
                    continue;
                }
                match record(&pool, &group, &rows).await {
                    Ok(()) if failing => {
                        failing = false;
                        tracing::info!("storing watermarks again");
                    }
                    Ok(()) => {}
                    Err(e) if failing => {
                        tracing::debug!(error = %e, "still cannot store watermarks")
                    }
                    Err(e) => {
                        failing = true;
                        tracing::warn!(error = %e, "cannot store watermarks: kafka_lag and the lag gauges go stale until this is fixed (see README, Minimal grants)");
                    }
                }
            }
        })
    }
}

/// A row of the `kafka_lag` view.
#[derive(sqlx::FromRow)]
struct LagRow {
    topic: String,
    partition: i32,
    next_offset: Option<i64>,
    high_watermark: Option<i64>,
    lag: Option<i64>,
}

/// One row per group and partition, overwritten: `kafka_lag` needs only the latest.
const UPSERT_SQL: &str = "
INSERT INTO kafka_watermarks AS w (consumer_group, topic, partition, low_watermark, high_watermark, observed_at)
SELECT $1, t, p, lo, hi, now() FROM UNNEST($2::text[], $3::int4[], $4::int8[], $5::int8[]) AS v(t, p, lo, hi)
ON CONFLICT (consumer_group, topic, partition) DO UPDATE
   SET low_watermark = EXCLUDED.low_watermark, high_watermark = EXCLUDED.high_watermark,
       observed_at = EXCLUDED.observed_at";

/// The gauges are read back from `kafka_lag`, so Prometheus and SQL report the same lag.
async fn record(
    pool: &PgPool,
    group: &str,
    rows: &[(String, i32, i64, i64)],
) -> Result<(), sqlx::Error> {
    sqlx::query(UPSERT_SQL)
        .bind(group)
        .bind(rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.1).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.2).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.3).collect::<Vec<_>>())
        .execute(pool)
        .await?;
    let lags: Vec<LagRow> = sqlx::query_as(
        "SELECT topic, partition, next_offset, high_watermark, lag FROM kafka_lag
          WHERE consumer_group = $1 AND (topic, partition) IN (SELECT * FROM UNNEST($2::text[], $3::int4[]))",
    )
    .bind(group)
    .bind(rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.1).collect::<Vec<_>>())
    .fetch_all(pool)
    .await?;
    for row in lags {
        let labels = [
            ("topic", row.topic),
            ("partition", row.partition.to_string()),
        ];
        if let Some(lag) = row.lag {
            metrics::gauge!(meters::LAG, &labels).set(lag as f64);
        }
        if let Some(high) = row.high_watermark {
            metrics::gauge!(meters::HIGH_WATERMARK, &labels).set(high as f64);
        }
        if let Some(next) = row.next_offset {
            metrics::gauge!(meters::NEXT_OFFSET, &labels).set(next as f64);
        }
    }
    Ok(())
}
