//! Recovery: after a failed transaction nothing buffered counts; the stored offsets are read
//! again and the consumer rewound to them. Also the positions that fall out of a partition's
//! range, and positions an operator moved. The decisions are `PartitionTable`'s; this file
//! makes the calls they need, in order.

use std::time::Instant;

use super::ports::{MoveKind, PartitionControl, SeekFailure};
use super::{Fatal, Pipeline};
use crate::config::ResetPolicy;
use crate::offsets::TopicPartition;

/// Why a stored position lies outside `low..=high`, or `None` when it is inside.
pub(crate) fn out_of_range(stored: i64, low: i64, high: i64) -> Option<&'static str> {
    if (low..=high).contains(&stored) {
        None
    } else if stored < low {
        Some("the records before the low watermark were deleted (retention or delete-records)")
    } else {
        Some("the partition has fewer records than the stored position (the topic was recreated?)")
    }
}

impl Pipeline {
    /// After a failure nothing buffered or in flight for the lane counts: drop the open batch,
    /// stop taking its partitions' records and schedule the re-read and rewind. A failure that
    /// arrives while a rewind is already scheduled adds the partitions that became active since.
    pub(super) fn begin_rewind(&mut self, lane: usize) {
        self.lanes.failed(lane, Instant::now());
        let pause = self.table.failed(lane);
        tracing::info!(lane, partitions = pause.len(), "rewind scheduled");
        self.to_pause.extend(pause);
    }

    /// Compares the owned partitions' epochs with the database: a partition an operator reset
    /// is rewound (and claimed again) even if no record arrives for it.
    pub(super) fn check_epochs(&mut self) {
        let owned: Vec<TopicPartition> =
            self.table.active().into_iter().map(|(_, tp)| tp).collect();
        if owned.is_empty() {
            return;
        }
        let Ok(stored) = self.positions.read(&owned) else {
            return; // The database is away; the writers will notice.
        };
        for lane in self.table.reset_lanes(&stored) {
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            self.begin_rewind(lane);
            // Recover at once rather than after a backoff: nothing failed.
            self.lanes.retry_now(lane, Instant::now());
        }
    }

    /// Re-reads stored offsets for lanes whose retry time has come and rewinds the consumer.
    pub(super) fn recover_due(&mut self, ctl: &dyn PartitionControl, now: Instant) {
        for lane in self.lanes.due_for_rewind(now) {
            self.recover(lane, ctl);
        }
    }

    /// A partition turns active only once resumed and seeked to its stored offset; whatever
    /// fails stays paused and is retried after a backoff.
    fn recover(&mut self, lane: usize, ctl: &dyn PartitionControl) {
        let rewinding = self.table.rewinding(lane);
        if rewinding.is_empty() {
            self.lanes.recovered(lane);
            return;
        }
        let stored = match self.positions.read(&rewinding) {
            Ok(stored) => stored,
            Err(e) => {
                let delay = self.lanes.retry_later(lane, Instant::now());
                tracing::warn!(lane, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot read stored offsets; will retry");
                return;
            }
        };
        let reset = self.policy.reset;
        let plan = self.table.rewind_plan(&rewinding, &stored, reset);
        for tp in plan.no_offset {
            self.set_fatal(Fatal::NoStoredOffset { tp });
        }
        let mut targets = plan.seek;
        let mut fenced = plan.fenced;
        // An operator moved these positions (`offsets reset`): take them back and continue
        // from where the operator put them.
        if !plan.reclaim.is_empty() {
            match self.positions.reclaim(&plan.reclaim) {
                Ok(claims) => {
                    for claim in &claims {
                        tracing::warn!(tp = %claim.tp, next_offset = ?claim.next_offset, "position reset by an operator: continuing from there");
                    }
                    let (seek, lost) = self.table.reclaimed(&plan.reclaim, &claims, reset);
                    targets.extend(seek);
                    fenced.extend(lost);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim partitions reset by an operator; will retry");
                    self.lanes.retry_later(lane, Instant::now());
                    return;
                }
            }
        }
        if !fenced.is_empty() {
            tracing::warn!(partitions = ?fenced, "fenced: another consumer owns these partitions now; writing nothing more for them");
        }
        let tps: Vec<TopicPartition> = targets.iter().map(|(tp, _)| tp.clone()).collect();
        // Resume first: resuming restarts fetching after the last delivered record, and the
        // seek that follows moves it to the stored offset (older fetches are discarded).
        ctl.resume(&tps);
        let mut failed = ctl.seek(&targets);
        for (tp, offset) in &targets {
            if let Some((_, why)) = failed.iter().find(|(f, _)| f == tp) {
                if matches!(why, SeekFailure::FetcherStopped(_)) {
                    match ctl.restart_at(tp, *offset) {
                        Ok(()) => {
                            tracing::info!(%tp, "fetcher restarted at the stored offset");
                            failed.retain(|(f, _)| f != tp);
                        }
                        Err(e) => {
                            tracing::warn!(%tp, error = %e, "restarting the fetcher failed; will retry");
                            continue;
                        }
                    }
                } else {
                    tracing::warn!(%tp, error = %why, "seek failed; will retry");
                    continue;
                }
            }
            self.table.resumed(tp);
        }
        if failed.is_empty() {
            self.lanes.recovered(lane);
            tracing::info!(
                lane,
                partitions = targets.len(),
                "rewound to stored offsets"
            );
        } else {
            let failed: Vec<TopicPartition> = failed.into_iter().map(|(tp, _)| tp).collect();
            ctl.pause(&failed);
            self.lanes.retry_later(lane, Instant::now());
        }
    }

    /// Compares a stored position with the partition's range and applies
    /// `offset_out_of_range`; returns where the partition resumes.
    pub(super) fn check_range(
        &mut self,
        ctl: &dyn PartitionControl,
        tp: &TopicPartition,
        epoch: i64,
        stored: i64,
    ) -> Result<i64, Fatal> {
        let (low, high) = match ctl.watermarks(tp) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(%tp, error = %e, "cannot read the partition's watermarks; not checking its range");
                return Ok(stored);
            }
        };
        let Some(why) = out_of_range(stored, low, high) else {
            return Ok(stored);
        };
        let to = match self.policy.out_of_range {
            ResetPolicy::Fail => {
                return Err(Fatal::OutOfRange {
                    tp: tp.clone(),
                    group: self.positions.group().to_string(),
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    stored,
                    low,
                    high,
                    why,
                })
            }
            ResetPolicy::Earliest => low,
            ResetPolicy::Latest => high,
        };
        let detail = format!("stored {stored} outside {low}..{high}: {why}");
        match self
            .positions
            .move_to(tp, epoch, Some(stored), to, MoveKind::OutOfRange, &detail)
        {
            Ok(true) => {
                tracing::error!(%tp, from = stored, to, low, high, why, "offset out of range: moved by kafka.offset_out_of_range; recorded in kafka_offset_events");
                Ok(to)
            }
            Ok(false) => Err(Fatal::Other(format!(
                "{tp}: fenced while resetting its out-of-range offset"
            ))),
            Err(e) => Err(Fatal::Other(format!(
                "{tp}: cannot record the out-of-range reset: {e}"
            ))),
        }
    }

    /// A consumer error. An offset out of range while running (retention overtook the sink)
    /// is found by checking every owned partition against its watermarks.
    pub fn on_consumer_error(
        &mut self,
        ctl: &dyn PartitionControl,
        error: &rdkafka::error::KafkaError,
    ) {
        use rdkafka::types::RDKafkaErrorCode;
        let out_of_range_error = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        );
        if !out_of_range_error {
            tracing::warn!(error = %error, "consumer error");
            return;
        }
        tracing::warn!(error = %error, "a partition's position fell out of its range; checking the owned partitions");
        for (key, tp) in self.table.active() {
            let Some(p) = self.table.get(key) else {
                continue;
            };
            let (epoch, lane) = (p.epoch, p.lane);
            let Some(position) = p.cursor() else { continue };
            let Ok((low, high)) = ctl.watermarks(&tp) else {
                continue;
            };
            if out_of_range(position, low, high).is_none() {
                continue;
            }
            // Finish what is in flight for the lane, so the stored offset is the position.
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            let stored = self
                .table
                .get(key)
                .and_then(|p| p.sealed_next)
                .unwrap_or(position);
            match self.check_range(ctl, &tp, epoch, stored) {
                Ok(_) => self.begin_rewind(lane),
                Err(fatal) => self.set_fatal(fatal),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::out_of_range;

    #[test]
    fn a_position_is_in_range_from_the_low_to_the_high_watermark() {
        assert_eq!(out_of_range(10, 10, 20), None);
        assert_eq!(
            out_of_range(20, 10, 20),
            None,
            "at the end: nothing new yet"
        );
        assert!(out_of_range(9, 10, 20).is_some_and(|why| why.contains("deleted")));
        assert!(out_of_range(21, 10, 20).is_some_and(|why| why.contains("fewer records")));
    }
}
