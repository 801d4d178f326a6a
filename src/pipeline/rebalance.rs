//! Rebalances: partitions claimed in PostgreSQL when assigned, finished when revoked.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use rdkafka::Offset;

use super::lanes::backoff;
use super::partitions::Start;
use super::ports::{MoveKind, PartitionControl, Rebalance};
use super::{Event, Fatal, Pipeline, Route};
use crate::config::{ResetPolicy, TopicSettings};
use crate::mapping::TopicMapper;
use crate::offsets::TopicPartition;
use crate::record_routing::TablePicker;

impl Pipeline {
    /// Claims newly assigned partitions and returns where each must start. Blocks (retrying
    /// with backoff) while PostgreSQL is unreachable: a partition must not start anywhere but
    /// at its stored offset.
    pub fn on_assign(
        &mut self,
        ctl: &dyn PartitionControl,
        tps: &[TopicPartition],
        stop: &dyn Fn() -> bool,
    ) -> Vec<(TopicPartition, Offset)> {
        let mut routed = Vec::with_capacity(tps.len());
        let mut described = self.describe_ahead(tps);
        for tp in tps {
            match self.route_for(&tp.topic, &mut described) {
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
            .filter(|tp| self.table.owns(tp))
            .cloned()
            .collect();
        if !held.is_empty() {
            self.on_revoke(&held);
        }
        let Some(claims) = self.claim(&tps, stop) else {
            return Vec::new();
        };
        let mut starts = Vec::with_capacity(claims.len());
        for mut claim in claims {
            if claim.next_offset.is_none() && self.policy.reset == ResetPolicy::Latest {
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
            let Some(key) = self.key_of(&claim.tp) else {
                continue;
            };
            let lane = self.lanes.lane_of(key.0, key.1);
            tracing::debug!(tp = %claim.tp, epoch = claim.epoch, next_offset = ?claim.next_offset, "claimed");
            match self.table.claimed(key, lane, &claim, self.policy.reset) {
                Start::At(offset) => starts.push((claim.tp, offset)),
                Start::NoStoredOffset => {
                    self.set_fatal(Fatal::NoStoredOffset {
                        tp: claim.tp.clone(),
                    });
                    starts.push((claim.tp, Offset::End));
                }
            }
        }
        self.observer.observe(Event::Rebalanced {
            kind: Rebalance::Assign,
            owned: self.table.len(),
        });
        starts
    }

    /// The claim, retried with backoff while PostgreSQL cannot answer; `None` when the sink
    /// stops instead (shutdown, or the claim budget spent).
    fn claim(
        &mut self,
        tps: &[TopicPartition],
        stop: &dyn Fn() -> bool,
    ) -> Option<Vec<crate::offsets::StoredOffset>> {
        let mut attempt = 0;
        let started = Instant::now();
        loop {
            match self.positions.claim(tps) {
                Ok(claims) => return Some(claims),
                Err(e) => {
                    attempt += 1;
                    if stop() {
                        return None;
                    }
                    let delay = backoff(self.lanes.limits(), attempt);
                    if started.elapsed() + delay >= self.policy.claim_budget {
                        // Nothing is assigned: no partition starts anywhere but its stored offset.
                        self.set_fatal(Fatal::Other(format!(
                            "cannot claim the assigned partitions in PostgreSQL for {:?} (last error: {e}); stopping before max.poll.interval.ms drops this consumer from the group",
                            started.elapsed()
                        )));
                        return None;
                    }
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot claim assigned partitions in PostgreSQL; retrying");
                    std::thread::sleep(delay);
                }
            }
        }
    }

    /// The tables of the topics this assignment brings first (a pattern of many topics, a
    /// table each), described together (`Catalog::mappers`) rather than one after another
    /// as `route_for` meets them; by topic. Topics routed by record describe their listed
    /// tables in `route_for`.
    pub(super) fn describe_ahead(
        &self,
        tps: &[TopicPartition],
    ) -> HashMap<Arc<str>, Result<TopicMapper, String>> {
        let mut wanted: Vec<(TopicSettings, Arc<str>)> = Vec::new();
        let mut seen = HashSet::new();
        for tp in tps {
            if self.route_index.contains_key(&tp.topic) || !seen.insert(tp.topic.clone()) {
                continue;
            }
            let Some(settings) = self.router.settings_for(&tp.topic) else {
                continue;
            };
            if matches!(TablePicker::new(settings), Ok(None)) {
                wanted.push((settings.clone(), tp.topic.clone()));
            }
        }
        // One table is described where it is met, as before.
        if wanted.len() < 2 {
            return HashMap::new();
        }
        let described = self.catalog.mappers(&wanted);
        wanted
            .into_iter()
            .map(|(_, topic)| topic)
            .zip(described)
            .collect()
    }

    /// The route of `topic`, building it on first sight (a topic matched by a pattern):
    /// its table is described (or taken from `described`, see `describe_ahead`) and its
    /// mapping checked before any record is read.
    fn route_for(
        &mut self,
        topic: &Arc<str>,
        described: &mut HashMap<Arc<str>, Result<TopicMapper, String>>,
    ) -> Result<usize, Fatal> {
        if let Some(&i) = self.route_index.get(topic) {
            return Ok(i);
        }
        let settings = self
            .router
            .settings_for(topic)
            .ok_or_else(|| {
                Fatal::Other(format!(
                    "topic {topic} was assigned but matches no [[topics]] entry"
                ))
            })?
            .clone();
        let mut route =
            match TablePicker::new(&settings).map_err(Fatal::Other)? {
                None => {
                    let mapper: TopicMapper = described
                        .remove(topic)
                        .unwrap_or_else(|| self.catalog.mapper(&settings, topic))
                        .map_err(Fatal::Other)?;
                    tracing::info!(%topic, table = %mapper.table(), "new topic routed");
                    Route::one(topic.clone(), mapper)
                }
                Some(picker) => {
                    let mappers = picker
                    .listed()
                    .into_iter()
                    .map(|table| self.catalog.table_mapper(&settings, topic, table))
                    .collect::<Result<Vec<_>, _>>()
                    // As for a topic's own table at assignment (`mapper` above).
                    .map_err(|(super::ports::Undescribed::Unusable(why)
                    | super::ports::Undescribed::Unavailable(why))| {
                        Fatal::Other(why)
                    })?;
                    tracing::info!(%topic, table = %settings.table, "new topic routed by record");
                    Route::by_record(topic.clone(), &settings, picker, mappers)
                }
            };
        for target in &mut route.targets {
            target.slot = self.next_slot;
            self.next_slot += 1;
        }
        self.routes.push(route);
        self.route_index
            .insert(topic.clone(), self.routes.len() - 1);
        Ok(self.routes.len() - 1)
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
        let moved = self.positions.move_to(
            tp,
            epoch,
            None,
            high,
            MoveKind::PinnedLatest,
            "kafka.auto_offset_reset = latest: first position of a partition never committed",
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
    pub fn on_revoke(&mut self, tps: &[TopicPartition]) {
        let owned: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| self.table.owns(tp))
            .cloned()
            .collect();
        let lanes = self.table.lanes_of(&owned);
        for &lane in &lanes {
            self.seal_and_send(lane);
        }
        self.wait_until(|i| lanes.contains(&i));
        self.table.revoked(&owned);
        self.observer.observe(Event::Rebalanced {
            kind: Rebalance::Revoke,
            owned: self.table.len(),
        });
    }

    /// Every partition currently owned, for a full revoke.
    pub fn owned(&self) -> Vec<TopicPartition> {
        self.table.owned()
    }
}
