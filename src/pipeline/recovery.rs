//! Recovery: after a failed transaction nothing buffered counts; the stored offsets are read
//! again and the consumer rewound to them. Also the positions that fall out of a partition's
//! range, and positions an operator moved.

use std::collections::HashMap;
use std::time::Instant;

use super::{backoff, start_offset, Fatal, PartitionControl, Pipeline, SeekFailure, Status};
use crate::config::ResetPolicy;
use crate::offsets::{StoredOffset, TopicPartition};

impl Pipeline {
    /// After a failure nothing buffered or in flight for the lane counts: drop the open batch,
    /// stop taking its partitions' records and schedule the re-read and rewind. A failure that
    /// arrives while a rewind is already scheduled adds the partitions that became active since.
    pub(super) fn begin_rewind(&mut self, lane_idx: usize) {
        let lane = &mut self.lanes[lane_idx];
        lane.open.clear();
        lane.members.clear();
        if lane.retry_at.is_none() {
            lane.failures += 1;
            lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
        }
        let mut paused = 0;
        for p in self.partitions.values_mut().filter(|p| p.lane == lane_idx) {
            p.open_last = None;
            if p.status == Status::Active {
                p.status = Status::Rewinding;
                self.to_pause.push(p.tp.clone());
                paused += 1;
            }
        }
        tracing::info!(lane = lane_idx, partitions = paused, "rewind scheduled");
    }

    /// Compares the owned partitions' epochs with the database: a partition an operator reset
    /// is rewound (and claimed again) even if no record arrives for it.
    pub(super) fn check_epochs(&mut self) {
        let owned: Vec<TopicPartition> = self
            .partitions
            .values()
            .filter(|p| p.status == Status::Active)
            .map(|p| p.tp.clone())
            .collect();
        if owned.is_empty() {
            return;
        }
        let Ok(stored) = self.db("reading positions", self.store.read(&owned)) else {
            return; // The database is away; the writers will notice.
        };
        let mut lanes = Vec::new();
        for s in &stored {
            // Only a reset of the epoch this process holds is its to follow; any other moved
            // epoch means another consumer took the partition, and the next commit is fenced.
            if let Some(p) = self
                .state(&s.tp)
                .filter(|p| s.reset_from_epoch == Some(p.epoch))
            {
                lanes.push(p.lane);
            }
        }
        lanes.sort_unstable();
        lanes.dedup();
        for lane in lanes {
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            self.begin_rewind(lane);
            // Recover at once rather than after a backoff: nothing failed.
            self.lanes[lane].retry_at = Some(Instant::now());
        }
    }

    /// Pauses partitions that stopped taking records, so they stop fetching what will be
    /// dropped anyway.
    pub(super) fn apply_pauses(&mut self, ctl: &dyn PartitionControl) {
        if self.to_pause.is_empty() {
            return;
        }
        // Only partitions still owned and still not taking records: a pause outlives a
        // revoke in librdkafka and would silently stall the partition if it came back.
        let tps: Vec<TopicPartition> = std::mem::take(&mut self.to_pause)
            .into_iter()
            .filter(|tp| self.state(tp).is_some_and(|p| p.status != Status::Active))
            .collect();
        ctl.pause(&tps);
    }

    /// Re-reads stored offsets for lanes whose retry time has come and rewinds the consumer.
    pub(super) fn recover_due(&mut self, ctl: &dyn PartitionControl, now: Instant) {
        for lane_idx in 0..self.lanes.len() {
            let lane = &self.lanes[lane_idx];
            if lane.in_flight > 0 || lane.retry_at.is_none_or(|t| t > now) {
                continue;
            }
            self.recover(lane_idx, ctl);
        }
    }

    /// A partition turns active only once resumed and seeked to its stored offset; whatever
    /// fails stays paused and is retried after a backoff.
    fn recover(&mut self, lane_idx: usize, ctl: &dyn PartitionControl) {
        let rewinding: Vec<TopicPartition> = self
            .partitions
            .values()
            .filter(|p| p.lane == lane_idx && p.status == Status::Rewinding)
            .map(|p| p.tp.clone())
            .collect();
        if rewinding.is_empty() {
            self.lanes[lane_idx].retry_at = None;
            return;
        }
        let stored = match self.db("reading positions", self.store.read(&rewinding)) {
            Ok(stored) => stored,
            Err(e) => {
                let lane = &mut self.lanes[lane_idx];
                lane.failures += 1;
                let delay = backoff(&self.limits, lane.failures);
                lane.retry_at = Some(Instant::now() + delay);
                tracing::warn!(lane = lane_idx, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot read stored offsets; will retry");
                return;
            }
        };
        let stored: HashMap<TopicPartition, StoredOffset> =
            stored.into_iter().map(|s| (s.tp.clone(), s)).collect();
        let mut targets = Vec::new();
        let mut fenced = Vec::new();
        let mut reclaim = Vec::new();
        let reset = self.reset;
        for tp in &rewinding {
            let p = self.state_mut(tp).expect("rewinding partitions are owned");
            match stored.get(tp) {
                Some(s) if s.epoch == p.epoch => {
                    p.sealed_next = s.next_offset;
                    match start_offset(s.next_offset, reset) {
                        Some(offset) => targets.push((tp.clone(), offset)),
                        None => {
                            p.status = Status::Fenced;
                            let tp = tp.clone();
                            self.set_fatal(Fatal::NoStoredOffset { tp });
                        }
                    }
                }
                // An operator reset the epoch this process held: it may claim it back. A
                // zombie whose partition another consumer held at the reset may not.
                Some(s) if s.reset_from_epoch == Some(p.epoch) => {
                    reclaim.push((tp.clone(), p.epoch))
                }
                _ => {
                    // Claimed by another consumer (or the row was removed): not ours anymore.
                    p.status = Status::Fenced;
                    fenced.push(tp.clone());
                }
            }
        }
        // An operator moved these positions (`offsets reset`): take them back and continue
        // from where the operator put them.
        if !reclaim.is_empty() {
            match self.db("claiming reset partitions", self.store.reclaim(&reclaim)) {
                Ok(claims) => {
                    // Claimed by another consumer between the read and the reclaim.
                    for (tp, _) in &reclaim {
                        if !claims.iter().any(|c| &c.tp == tp) {
                            if let Some(p) = self.state_mut(tp) {
                                p.status = Status::Fenced;
                            }
                            fenced.push(tp.clone());
                        }
                    }
                    for claim in claims {
                        let Some(p) = self.state_mut(&claim.tp) else {
                            continue;
                        };
                        p.epoch = claim.epoch;
                        p.sealed_next = claim.next_offset;
                        tracing::warn!(tp = %claim.tp, next_offset = ?claim.next_offset, "position reset by an operator: continuing from there");
                        if let Some(offset) = start_offset(claim.next_offset, self.reset) {
                            targets.push((claim.tp, offset));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim partitions reset by an operator; will retry");
                    let lane = &mut self.lanes[lane_idx];
                    lane.failures += 1;
                    lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
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
            if let Some(p) = self.state_mut(tp) {
                p.status = Status::Active;
                p.position_trusted = false;
            }
        }
        let lane = &mut self.lanes[lane_idx];
        if failed.is_empty() {
            lane.retry_at = None;
            tracing::info!(
                lane = lane_idx,
                partitions = targets.len(),
                "rewound to stored offsets"
            );
        } else {
            let failed_tps: Vec<TopicPartition> = failed.into_iter().map(|(tp, _)| tp).collect();
            ctl.pause(&failed_tps);
            lane.failures += 1;
            lane.retry_at = Some(Instant::now() + backoff(&self.limits, lane.failures));
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
        if (low..=high).contains(&stored) {
            return Ok(stored);
        }
        let why = if stored < low {
            "the records before the low watermark were deleted (retention or delete-records)"
        } else {
            "the partition has fewer records than the stored position (the topic was recreated?)"
        };
        let to = match self.out_of_range {
            ResetPolicy::Fail => {
                return Err(Fatal::OutOfRange {
                    tp: tp.clone(),
                    group: self.store.group().to_string(),
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
        match self.db(
            "moving an out-of-range position",
            self.store
                .move_offset(tp, epoch, Some(stored), to, "out_of_range_reset", &detail),
        ) {
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
        let out_of_range = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        );
        if !out_of_range {
            tracing::warn!(error = %error, "consumer error");
            return;
        }
        tracing::warn!(error = %error, "a partition's position fell out of its range; checking the owned partitions");
        let active: Vec<(usize, i32)> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.status == Status::Active)
            .map(|(k, _)| *k)
            .collect();
        for key in active {
            let Some(p) = self.partitions.get(&key) else {
                continue;
            };
            let (tp, epoch, cursor, lane) = (p.tp.clone(), p.epoch, p.cursor(), p.lane);
            let Some(position) = cursor else { continue };
            let Ok((low, high)) = ctl.watermarks(&tp) else {
                continue;
            };
            if (low..=high).contains(&position) {
                continue;
            }
            // Finish what is in flight for the lane, so the stored offset is the position.
            self.seal_and_send(lane);
            self.wait_until(|i| i == lane);
            let stored = self
                .partitions
                .get(&key)
                .and_then(|p| p.sealed_next)
                .unwrap_or(position);
            match self.check_range(ctl, &tp, epoch, stored) {
                Ok(_) => self.begin_rewind(lane),
                Err(fatal) => self.set_fatal(fatal),
            }
        }
    }
}
