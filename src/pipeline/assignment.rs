//! Rebalances: partitions claimed in PostgreSQL when assigned, finished when revoked.

use rdkafka::Offset;

use super::{backoff, start_offset, Fatal, PartitionControl, PartitionState, Pipeline, Status};
use crate::config::ResetPolicy;
use crate::offsets::TopicPartition;

impl Pipeline {
    /// Claims newly assigned partitions and returns where each must start. Blocks (retrying
    /// with backoff) while PostgreSQL is unreachable: a partition must not start anywhere but
    /// at its stored offset.
    pub fn assign(
        &mut self,
        ctl: &dyn PartitionControl,
        tps: &[TopicPartition],
        stop: &dyn Fn() -> bool,
    ) -> Vec<(TopicPartition, Offset)> {
        let mut routed = Vec::with_capacity(tps.len());
        for tp in tps {
            match self.route_for(&tp.topic) {
                Ok(_) => routed.push(tp.clone()),
                // Unroutable partitions are not started; the sink stops with the reason.
                Err(fatal) => self.set_fatal(fatal),
            }
        }
        let tps = routed;
        if tps.is_empty() {
            return Vec::new();
        }
        // An eager protocol may hand back a partition this consumer still holds: finish it first.
        let held: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| self.state(tp).is_some())
            .cloned()
            .collect();
        if !held.is_empty() {
            self.revoke(&held);
        }
        let mut attempt = 0;
        let started = std::time::Instant::now();
        let claims = loop {
            match self.db("claiming partitions", self.store.claim(&tps)) {
                Ok(claims) => break claims,
                Err(e) => {
                    attempt += 1;
                    if stop() {
                        return Vec::new();
                    }
                    let delay = backoff(&self.limits, attempt);
                    if started.elapsed() + delay >= self.claim_budget {
                        // Nothing is assigned: no partition starts anywhere but its stored offset.
                        self.set_fatal(Fatal::Other(format!(
                            "cannot claim the assigned partitions in PostgreSQL for {:?} (last error: {e}); stopping before max.poll.interval.ms drops this consumer from the group",
                            started.elapsed()
                        )));
                        return Vec::new();
                    }
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot claim assigned partitions in PostgreSQL; retrying");
                    std::thread::sleep(delay);
                }
            }
        };
        let mut starts = Vec::with_capacity(claims.len());
        for mut claim in claims {
            if claim.next_offset.is_none() && self.reset == ResetPolicy::Latest {
                claim.next_offset = self.resolve_latest(ctl, &claim.tp, claim.epoch);
            }
            // A stored position outside the partition's range would make librdkafka jump.
            if let Some(stored) = claim.next_offset {
                match self.check_range(ctl, &claim.tp, claim.epoch, stored) {
                    Ok(next) => claim.next_offset = Some(next),
                    Err(fatal) => {
                        self.set_fatal(fatal);
                        continue;
                    }
                }
            }
            let route = self.route_index[&claim.tp.topic];
            let lane = self.lane_of(route, claim.tp.partition);
            let (status, offset) = match start_offset(claim.next_offset, self.reset) {
                Some(offset) => (Status::Active, offset),
                None => {
                    self.set_fatal(Fatal::NoStoredOffset {
                        tp: claim.tp.clone(),
                    });
                    (Status::Fenced, Offset::End)
                }
            };
            tracing::debug!(tp = %claim.tp, epoch = claim.epoch, next_offset = ?claim.next_offset, "claimed");
            self.partitions.insert(
                (route, claim.tp.partition),
                PartitionState {
                    tp: claim.tp.clone(),
                    lane,
                    epoch: claim.epoch,
                    status,
                    sealed_next: claim.next_offset,
                    open_last: None,
                    position_trusted: false,
                },
            );
            starts.push((claim.tp, offset));
        }
        self.health.set_assigned(self.partitions.len());
        self.stats.rebalance("assign", self.partitions.len());
        starts
    }

    /// `latest` for a partition never committed, pinned to a concrete offset and stored under
    /// the new epoch: a rewind before the first commit (or a restart) must return to where
    /// reading began, not to a newer end that would skip what was fetched but not written.
    /// `None` (start at the end, unpinned) only when the broker or the database cannot answer.
    fn resolve_latest(
        &mut self,
        ctl: &dyn PartitionControl,
        tp: &TopicPartition,
        epoch: i64,
    ) -> Option<i64> {
        let high = match ctl.watermarks(tp) {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::warn!(%tp, error = %e, "cannot read the end offset to pin kafka.auto_offset_reset = \"latest\"; starting at the end unpinned");
                return None;
            }
        };
        let moved = self.db(
            "pinning a start offset",
            self.store.move_offset(
                tp,
                epoch,
                None,
                high,
                "auto_offset_reset",
                "kafka.auto_offset_reset = latest: first position of a partition never committed",
            ),
        );
        match moved {
            Ok(true) => {
                tracing::info!(%tp, next_offset = high, "no stored offset: starting at the end, pinned");
                Some(high)
            }
            Ok(false) => None,
            Err(e) => {
                tracing::warn!(%tp, error = %e, "cannot store the pinned start offset; starting at the end unpinned");
                None
            }
        }
    }

    /// Gives partitions up: what is buffered for them is committed (or fails) before this
    /// returns, and nothing is written for them afterwards.
    pub fn revoke(&mut self, tps: &[TopicPartition]) {
        let keys: Vec<(usize, i32)> = tps
            .iter()
            .filter_map(|tp| self.key_of(tp))
            .filter(|k| self.partitions.contains_key(k))
            .collect();
        let mut lanes: Vec<usize> = keys.iter().map(|k| self.partitions[k].lane).collect();
        lanes.sort_unstable();
        lanes.dedup();
        for &lane in &lanes {
            self.seal_and_send(lane);
        }
        self.wait_until(|i| lanes.contains(&i));
        for key in &keys {
            self.partitions.remove(key);
        }
        self.health.set_assigned(self.partitions.len());
        self.stats.rebalance("revoke", self.partitions.len());
    }

    /// Every partition currently owned, for a full revoke.
    pub fn owned(&self) -> Vec<TopicPartition> {
        self.partitions.values().map(|p| p.tp.clone()).collect()
    }
}
