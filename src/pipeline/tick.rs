//! Between records: what the poll loop does each time round, whether or not a record came.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::partitions::Key;
use super::{Event, PartitionControl, Pipeline, EPOCH_CHECK_INTERVAL, GAP_CHECK_INTERVAL};
use crate::offsets::TopicPartition;

impl Pipeline {
    /// What the poll loop does between records: results that arrived, pending pauses,
    /// mirrored commits, metrics, the check for operators' resets, gaps without records,
    /// rewinds whose time has come, and batches whose time has come. Returns when the next
    /// batch or rewind is due.
    pub fn on_tick(&mut self, ctl: &dyn PartitionControl, now: Instant) -> Option<Instant> {
        self.on_results();
        self.apply_pauses(ctl);
        self.mirror(ctl);
        if now.duration_since(self.last_publish) >= Duration::from_secs(1) {
            self.last_publish = now;
            self.report_consumed();
            let topics: Vec<(Arc<str>, u64)> = self
                .routes
                .iter()
                .map(|r| (r.topic.clone(), r.consumed))
                .collect();
            self.observer.observe(Event::Progress {
                topics: &topics,
                owned: self.table.len(),
            });
        }
        if now.duration_since(self.last_epoch_check) >= EPOCH_CHECK_INTERVAL {
            self.last_epoch_check = now;
            self.check_epochs();
        }
        if now.duration_since(self.last_gap_check) >= GAP_CHECK_INTERVAL {
            self.last_gap_check = now;
            self.advance_past_gaps(ctl, now);
        }
        self.recover_due(ctl, now);
        self.flush_due(now)
    }

    /// Moves positions past offsets that carry no deliverable record: the commit or abort
    /// marker that ends every transaction, aborted records, compaction gaps. The consumer's
    /// position is past them, but no record reaches `on_record`, so without this the stored
    /// position would stop short of the end for good. The gap joins the lane's open batch like a
    /// record would (extending the partition's range there, or as a member without rows), so it
    /// commits under the same fence, in order, and at most once per batch.
    ///
    /// Only called between records, never while one is being added: a record the consumer
    /// handed over has always been taken into the open batch by then, so everything below the
    /// position is either in a batch or was never deliverable.
    pub(super) fn advance_past_gaps(&mut self, ctl: &dyn PartitionControl, now: Instant) {
        let active = self.table.active();
        if active.is_empty() {
            return;
        }
        let tps: Vec<TopicPartition> = active.iter().map(|(_, tp)| tp.clone()).collect();
        let positions: Vec<(Key, Option<i64>)> = active
            .iter()
            .map(|(key, _)| *key)
            .zip(ctl.positions(&tps))
            .collect();
        self.join_gaps(&positions, now);
    }

    /// Extends each partition's open range up to its consumer position where the position is
    /// past offsets no record reached (`PartitionTable::past_gaps`); a partition with nothing
    /// open joins its lane's batch, which starts that batch's clock.
    pub(super) fn join_gaps(&mut self, positions: &[(Key, Option<i64>)], now: Instant) {
        for gap in self.table.past_gaps(positions) {
            tracing::trace!(?gap, "advancing past offsets without records");
            if gap.joins {
                self.lanes.join_gap(gap.lane, gap.key, now);
            }
        }
    }

    /// Commits the positions PostgreSQL has committed to the Kafka group as well, for Kafka's
    /// own lag tools; only for partitions still owned, so a revoked one is never touched.
    pub(super) fn mirror(&mut self, ctl: &dyn PartitionControl) {
        if self.to_mirror.is_empty() {
            return;
        }
        let mut latest: HashMap<TopicPartition, i64> = HashMap::new();
        for (tp, next) in self.to_mirror.drain(..) {
            let e = latest.entry(tp).or_insert(next);
            *e = (*e).max(next);
        }
        let owned = self.table.mirrorable(latest.into_iter().collect());
        ctl.commit_to_kafka(&owned);
    }

    /// Pauses partitions that stopped taking records, so they stop fetching what will be
    /// dropped anyway.
    pub(super) fn apply_pauses(&mut self, ctl: &dyn PartitionControl) {
        if self.to_pause.is_empty() {
            return;
        }
        let tps = self.table.still_stopped(std::mem::take(&mut self.to_pause));
        ctl.pause(&tps);
    }
}
