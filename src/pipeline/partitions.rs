//! Which partitions this consumer owns and where each stands: epochs, positions and status,
//! with every transition a plain function of its inputs. No I/O happens here, so each step of
//! the protocol (claim, take, seal, fail, rewind, reclaim, revoke) is unit-tested without a
//! broker or a database; the coordinator does the calls and feeds the answers in.

use foldhash::HashMap;

use rdkafka::Offset;

use crate::config::ResetPolicy;
use crate::offsets::{OffsetAdvance, StoredOffset, TopicPartition};

/// A partition by its route (the topic's index in the pipeline's routes) and number: cheaper
/// to hash per record than a topic name.
pub(crate) type Key = (usize, i32);

/// Where an owned partition stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Records are taken and batched.
    Active,
    /// A transaction failed: records are dropped until the stored offset is re-read and the
    /// consumer rewound to it.
    Rewinding,
    /// Another consumer claimed it (or its start is refused, or the sink is stopping at one of
    /// its records): nothing more is written for it.
    Fenced,
}

/// One owned partition.
#[derive(Debug, Clone)]
pub(crate) struct PartitionState {
    pub(crate) tp: TopicPartition,
    pub(crate) lane: usize,
    pub(crate) epoch: i64,
    pub(crate) status: Status,
    /// What the database will hold once every sealed batch commits: the `expected` value of
    /// the next batch's compare-and-set.
    pub(crate) sealed_next: Option<i64>,
    /// Last offset in the lane's open batch, if the partition has records (or a gap) there.
    pub(crate) open_last: Option<i64>,
    /// Whether the consumer's position now reflects this assignment (or rewind): librdkafka
    /// resets it when a fetch restarts, but an unassign is applied asynchronously, so until a
    /// record arrives or the position reads as unset once, it may still be the old one.
    pub(crate) position_trusted: bool,
    /// The consumer reported the end of the partition's log after its last record: nothing
    /// more is there to wait for.
    pub(crate) at_end: bool,
}

impl PartitionState {
    /// The next offset expected from Kafka; anything below it was already taken. Derived, so
    /// it cannot drift from the batch and the compare-and-set it is checked against.
    pub(crate) fn cursor(&self) -> Option<i64> {
        self.open_last.map(|last| last + 1).or(self.sealed_next)
    }
}

/// What to do with a record the consumer handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accept {
    /// Batch it in this lane.
    Take { lane: usize },
    /// Not owned here (a stale fetch after a revoke): counted, never written.
    NotOwned,
    /// Owned but rewinding or fenced: whoever owns it next reads it again.
    Stopped,
    /// Below the cursor: already in a batch (a fetch that overlapped a seek).
    AlreadyTaken { cursor: i64 },
}

/// Where a claimed partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    At(Offset),
    /// Never committed and `auto_offset_reset = "fail"`: the partition is held but fenced, and
    /// the sink stops.
    NoStoredOffset,
}

/// Where a partition starts: its stored offset, else what the reset policy says.
pub(crate) fn start_offset(stored: Option<i64>, reset: ResetPolicy) -> Option<Offset> {
    match (stored, reset) {
        (Some(offset), _) => Some(Offset::Offset(offset)),
        (None, ResetPolicy::Earliest) => Some(Offset::Beginning),
        (None, ResetPolicy::Latest) => Some(Offset::End),
        (None, ResetPolicy::Fail) => None,
    }
}

/// What re-reading a lane's stored positions after a failure means for each partition.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RewindPlan {
    /// Still ours: resume and seek here.
    pub(crate) seek: Vec<(TopicPartition, Offset)>,
    /// An operator reset the epoch this process held: claim it back (with that epoch).
    pub(crate) reclaim: Vec<(TopicPartition, i64)>,
    /// Another consumer owns it now (or its row is gone): nothing more is written for it.
    pub(crate) fenced: Vec<TopicPartition>,
    /// Ours, but with no stored offset under `auto_offset_reset = "fail"`.
    pub(crate) no_offset: Vec<TopicPartition>,
}

/// A gap to commit: the partition's position moved past offsets that carry no record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    pub(crate) key: Key,
    pub(crate) lane: usize,
    /// The partition had nothing in the lane's open batch: it joins it.
    pub(crate) joins: bool,
}

/// Every partition this consumer owns, by key and by name.
#[derive(Debug, Default)]
pub(crate) struct PartitionTable {
    parts: HashMap<Key, PartitionState>,
    keys: HashMap<TopicPartition, Key>,
}

impl PartitionTable {
    /// Owned partitions, for the gauges and `/ready`.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    /// The state of a partition owned here.
    pub(crate) fn get(&self, key: Key) -> Option<&PartitionState> {
        self.parts.get(&key)
    }

    /// The state of a partition owned here, by name.
    pub(crate) fn by_tp(&self, tp: &TopicPartition) -> Option<&PartitionState> {
        self.keys.get(tp).and_then(|k| self.parts.get(k))
    }

    fn by_tp_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionState> {
        let key = self.keys.get(tp)?;
        self.parts.get_mut(key)
    }

    /// Whether the consumer holds `tp` now (an eager assign may hand it back while held).
    pub(crate) fn owns(&self, tp: &TopicPartition) -> bool {
        self.keys.contains_key(tp)
    }

    /// Every owned partition, for a full revoke.
    pub(crate) fn owned(&self) -> Vec<TopicPartition> {
        self.parts.values().map(|p| p.tp.clone()).collect()
    }

    /// Active partitions with their keys, for checks that look at every one.
    pub(crate) fn active(&self) -> Vec<(Key, TopicPartition)> {
        self.parts
            .iter()
            .filter(|(_, p)| p.status == Status::Active)
            .map(|(k, p)| (*k, p.tp.clone()))
            .collect()
    }

    /// A claim answered: the partition is ours under `claim.epoch` and starts at its stored
    /// offset, or where the reset policy says when it has none.
    pub(crate) fn claimed(
        &mut self,
        key: Key,
        lane: usize,
        claim: &StoredOffset,
        reset: ResetPolicy,
    ) -> Start {
        let (status, start) = match start_offset(claim.next_offset, reset) {
            Some(offset) => (Status::Active, Start::At(offset)),
            None => (Status::Fenced, Start::NoStoredOffset),
        };
        self.keys.insert(claim.tp.clone(), key);
        self.parts.insert(
            key,
            PartitionState {
                tp: claim.tp.clone(),
                lane,
                epoch: claim.epoch,
                status,
                sealed_next: claim.next_offset,
                open_last: None,
                position_trusted: false,
                at_end: false,
            },
        );
        start
    }

    /// Whether a record at `offset` is to be batched, and where.
    pub(crate) fn accept(&self, key: Key, offset: i64) -> Accept {
        let Some(p) = self.parts.get(&key) else {
            return Accept::NotOwned;
        };
        if p.status != Status::Active {
            return Accept::Stopped;
        }
        match p.cursor() {
            Some(cursor) if offset < cursor => Accept::AlreadyTaken { cursor },
            _ => Accept::Take { lane: p.lane },
        }
    }

    /// A record (or a gap ending at `last`) entered the lane's open batch; true when the
    /// partition was not in that batch yet and must become one of its members.
    pub(crate) fn took(&mut self, key: Key, last: i64) -> bool {
        let Some(p) = self.parts.get_mut(&key) else {
            return false;
        };
        p.position_trusted = true;
        p.at_end = false;
        p.open_last.replace(last).is_none()
    }

    /// The consumer reached the end of the partition's log: until its next record, the
    /// partition has nothing more for its lane's open batch.
    pub(crate) fn reached_end(&mut self, key: Key) {
        if let Some(p) = self.parts.get_mut(&key) {
            p.at_end = true;
        }
    }

    /// Whether every partition of the lane that takes records is at the end of its log: the
    /// lane's open batch can then only grow by records yet to be produced.
    pub(crate) fn lane_at_end(&self, lane: usize) -> bool {
        self.parts
            .values()
            .filter(|p| p.lane == lane && p.status == Status::Active)
            .all(|p| p.at_end)
    }

    /// The sink stops at a record of this partition: nothing after it may be written.
    pub(crate) fn stop(&mut self, key: Key) {
        if let Some(p) = self.parts.get_mut(&key) {
            p.status = Status::Fenced;
        }
    }

    /// Whether the partition still takes records (sealing may have started a rewind).
    pub(crate) fn is_active(&self, key: Key) -> bool {
        self.parts
            .get(&key)
            .is_some_and(|p| p.status == Status::Active)
    }

    /// A lane's open batch is sealed: each member's range becomes an advance from what the
    /// previous batch leaves behind, and the next batch expects where this one ends.
    pub(crate) fn seal(&mut self, members: &[Key]) -> Vec<OffsetAdvance> {
        let mut advances = Vec::with_capacity(members.len());
        for key in members {
            let Some(p) = self.parts.get_mut(key) else {
                continue;
            };
            let Some(last) = p.open_last.take() else {
                continue;
            };
            advances.push(OffsetAdvance {
                tp: p.tp.clone(),
                epoch: p.epoch,
                expected: p.sealed_next,
                next: last + 1,
            });
            p.sealed_next = Some(last + 1);
        }
        advances
    }

    /// A lane's transaction failed (or must be redone): nothing open counts, its active
    /// partitions stop taking records until rewound. Returns those to pause.
    pub(crate) fn failed(&mut self, lane: usize) -> Vec<TopicPartition> {
        let mut pause = Vec::new();
        for p in self.parts.values_mut().filter(|p| p.lane == lane) {
            p.open_last = None;
            if p.status == Status::Active {
                p.status = Status::Rewinding;
                pause.push(p.tp.clone());
            }
        }
        pause
    }

    /// A lane's writer died: none of its partitions is written again by this process.
    pub(crate) fn writer_gone(&mut self, lane: usize) {
        for p in self.parts.values_mut().filter(|p| p.lane == lane) {
            p.status = Status::Fenced;
            p.open_last = None;
        }
    }

    /// PostgreSQL refused the row of `tp`@`offset`: the committed rest of its batch leaves the
    /// partition's position on that record, and the partition takes nothing more.
    pub(crate) fn rejected_at(&mut self, tp: &TopicPartition, offset: i64) {
        if let Some(p) = self.by_tp_mut(tp) {
            p.sealed_next = Some(offset);
            p.status = Status::Fenced;
        }
    }

    /// The lane's partitions waiting to be rewound.
    pub(crate) fn rewinding(&self, lane: usize) -> Vec<TopicPartition> {
        self.parts
            .values()
            .filter(|p| p.lane == lane && p.status == Status::Rewinding)
            .map(|p| p.tp.clone())
            .collect()
    }

    /// Compares the stored positions of rewinding partitions with what this process holds.
    /// Only the epoch it claimed is its own; a reset of exactly that epoch may be claimed back,
    /// and anything else means another consumer took the partition.
    pub(crate) fn rewind_plan(
        &mut self,
        rewinding: &[TopicPartition],
        stored: &[StoredOffset],
        reset: ResetPolicy,
    ) -> RewindPlan {
        let mut plan = RewindPlan::default();
        for tp in rewinding {
            let Some(p) = self.by_tp_mut(tp) else {
                continue;
            };
            match stored.iter().find(|s| &s.tp == tp) {
                Some(s) if s.epoch == p.epoch => {
                    p.sealed_next = s.next_offset;
                    match start_offset(s.next_offset, reset) {
                        Some(offset) => plan.seek.push((tp.clone(), offset)),
                        None => {
                            p.status = Status::Fenced;
                            plan.no_offset.push(tp.clone());
                        }
                    }
                }
                Some(s) if s.reset_from_epoch == Some(p.epoch) => {
                    plan.reclaim.push((tp.clone(), p.epoch))
                }
                _ => {
                    p.status = Status::Fenced;
                    plan.fenced.push(tp.clone());
                }
            }
        }
        plan
    }

    /// The answer to a reclaim: each partition claimed back takes the new epoch and the
    /// operator's position; one another consumer claimed meanwhile is fenced. Returns the seek
    /// targets and the fenced partitions.
    pub(crate) fn reclaimed(
        &mut self,
        asked: &[(TopicPartition, i64)],
        claims: &[StoredOffset],
        reset: ResetPolicy,
    ) -> (Vec<(TopicPartition, Offset)>, Vec<TopicPartition>) {
        let mut seek = Vec::new();
        let mut fenced = Vec::new();
        for (tp, _) in asked {
            let Some(p) = self.by_tp_mut(tp) else {
                continue;
            };
            match claims.iter().find(|c| &c.tp == tp) {
                Some(claim) => {
                    p.epoch = claim.epoch;
                    p.sealed_next = claim.next_offset;
                    // Without a start it stays rewinding and is retried; today's reset always
                    // stores a position, so this is a guard, not a path.
                    if let Some(offset) = start_offset(claim.next_offset, reset) {
                        seek.push((tp.clone(), offset));
                    }
                }
                None => {
                    p.status = Status::Fenced;
                    fenced.push(tp.clone());
                }
            }
        }
        (seek, fenced)
    }

    /// The consumer was moved to the stored offset: the partition takes records again, and
    /// its position means something only once a record arrives or it reads unset.
    pub(crate) fn resumed(&mut self, tp: &TopicPartition) {
        if let Some(p) = self.by_tp_mut(tp) {
            p.status = Status::Active;
            p.position_trusted = false;
        }
    }

    /// Partitions given up: nothing is written for them afterwards.
    pub(crate) fn revoked(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(key) = self.keys.remove(tp) {
                self.parts.remove(&key);
            }
        }
    }

    /// The lanes of the partitions named, each once, in order.
    pub(crate) fn lanes_of(&self, tps: &[TopicPartition]) -> Vec<usize> {
        let mut lanes: Vec<usize> = tps
            .iter()
            .filter_map(|tp| self.by_tp(tp).map(|p| p.lane))
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        lanes
    }

    /// The lanes with a partition whose held epoch an operator reset (`offsets reset`): they
    /// follow the reset. A moved epoch that is not a reset of ours is another consumer's claim,
    /// which fences the next commit instead.
    pub(crate) fn reset_lanes(&self, stored: &[StoredOffset]) -> Vec<usize> {
        let mut lanes: Vec<usize> = stored
            .iter()
            .filter_map(|s| {
                self.by_tp(&s.tp)
                    .filter(|p| p.status == Status::Active && s.reset_from_epoch == Some(p.epoch))
                    .map(|p| p.lane)
            })
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        lanes
    }

    /// Of the partitions to pause, those still owned and still not taking records: a pause
    /// outlives a revoke in librdkafka and would silently stall the partition if it came back.
    pub(crate) fn still_stopped(&self, tps: Vec<TopicPartition>) -> Vec<TopicPartition> {
        tps.into_iter()
            .filter(|tp| self.by_tp(tp).is_some_and(|p| p.status != Status::Active))
            .collect()
    }

    /// Of committed positions, those of partitions still owned and not fenced: a revoked one
    /// must never be committed to the Kafka group by this process.
    pub(crate) fn mirrorable(
        &self,
        positions: Vec<(TopicPartition, i64)>,
    ) -> Vec<(TopicPartition, i64)> {
        positions
            .into_iter()
            .filter(|(tp, _)| self.by_tp(tp).is_some_and(|p| p.status != Status::Fenced))
            .collect()
    }

    /// Compares consumer positions with the cursors of the partitions asked about (as
    /// returned by `active`) and extends each one's open range up to its position when the
    /// consumer is past offsets that no record reached the pipeline for (transaction markers,
    /// aborted records, compaction gaps).
    ///
    /// A partition whose position is not yet trusted is skipped; one whose position reads
    /// unset becomes trusted (librdkafka has applied the new fetch start). Without a cursor
    /// (never committed, nothing taken), everything below the position was undeliverable.
    pub(crate) fn past_gaps(&mut self, positions: &[(Key, Option<i64>)]) -> Vec<Gap> {
        let mut gaps = Vec::new();
        for &(key, position) in positions {
            let Some(p) = self.parts.get_mut(&key) else {
                continue;
            };
            if p.status != Status::Active {
                continue;
            }
            let Some(position) = position else {
                p.position_trusted = true;
                continue;
            };
            if !p.position_trusted || p.cursor().is_some_and(|c| position <= c) {
                continue;
            }
            let joins = p.open_last.replace(position - 1).is_none();
            gaps.push(Gap {
                key,
                lane: p.lane,
                joins,
            });
        }
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn stored(p: i32, next: Option<i64>, epoch: i64) -> StoredOffset {
        StoredOffset {
            tp: tp(p),
            next_offset: next,
            epoch,
            owner_id: None,
            reset_from_epoch: None,
        }
    }

    /// Two partitions on lane 0, claimed at 10 (epoch 3) and never committed (epoch 1).
    fn table() -> PartitionTable {
        let mut t = PartitionTable::default();
        assert_eq!(
            t.claimed((0, 0), 0, &stored(0, Some(10), 3), ResetPolicy::Earliest),
            Start::At(Offset::Offset(10))
        );
        assert_eq!(
            t.claimed((0, 1), 0, &stored(1, None, 1), ResetPolicy::Earliest),
            Start::At(Offset::Beginning)
        );
        t
    }

    #[test]
    fn a_claim_starts_at_the_stored_offset_or_the_reset_policy() {
        let mut t = table();
        assert_eq!(
            t.claimed((0, 2), 1, &stored(2, None, 1), ResetPolicy::Latest),
            Start::At(Offset::End)
        );
        assert_eq!(
            t.claimed((0, 3), 1, &stored(3, None, 1), ResetPolicy::Fail),
            Start::NoStoredOffset
        );
        // Held but fenced: nothing of it is taken.
        assert_eq!(t.accept((0, 3), 0), Accept::Stopped);
        assert_eq!(t.len(), 4);
        assert_eq!(t.by_tp(&tp(0)).map(|p| p.epoch), Some(3));
    }

    #[test]
    fn records_below_the_cursor_are_skipped_and_others_taken_in_their_lane() {
        let mut t = table();
        assert_eq!(t.accept((0, 0), 9), Accept::AlreadyTaken { cursor: 10 });
        assert_eq!(t.accept((0, 0), 10), Accept::Take { lane: 0 });
        assert!(t.took((0, 0), 10), "first record joins the batch");
        assert!(!t.took((0, 0), 11), "the second is in it already");
        assert_eq!(t.accept((0, 0), 11), Accept::AlreadyTaken { cursor: 12 });
        assert_eq!(t.accept((5, 0), 0), Accept::NotOwned);
        // Never committed: anything is new.
        assert_eq!(t.accept((0, 1), 0), Accept::Take { lane: 0 });
    }

    #[test]
    fn sealing_chains_each_batch_onto_the_previous_ones_end() {
        let mut t = table();
        t.took((0, 0), 10);
        t.took((0, 0), 14);
        t.took((0, 1), 0);
        let first = t.seal(&[(0, 0), (0, 1)]);
        assert_eq!(
            first,
            vec![
                OffsetAdvance {
                    tp: tp(0),
                    epoch: 3,
                    expected: Some(10),
                    next: 15
                },
                OffsetAdvance {
                    tp: tp(1),
                    epoch: 1,
                    expected: None,
                    next: 1
                },
            ]
        );
        t.took((0, 0), 15);
        let second = t.seal(&[(0, 0)]);
        assert_eq!(second[0].expected, Some(15));
        assert_eq!(second[0].next, 16);
        // A member without records in the batch (already sealed) adds nothing.
        assert!(t.seal(&[(0, 0)]).is_empty());
    }

    #[test]
    fn a_failure_stops_the_lanes_partitions_and_drops_what_was_open() {
        let mut t = table();
        t.claimed((0, 7), 1, &stored(7, Some(0), 1), ResetPolicy::Earliest);
        t.took((0, 0), 12);
        let mut pause = t.failed(0);
        pause.sort_by_key(|tp| tp.partition);
        assert_eq!(pause, vec![tp(0), tp(1)]);
        assert_eq!(t.accept((0, 0), 12), Accept::Stopped);
        assert_eq!(t.get((0, 0)).and_then(|p| p.open_last), None);
        // Another lane is untouched.
        assert_eq!(t.accept((0, 7), 0), Accept::Take { lane: 1 });
        // A second failure while rewinding pauses nothing new.
        assert!(t.failed(0).is_empty());
    }

    #[test]
    fn a_rewind_seeks_what_is_still_ours_and_fences_what_another_consumer_took() {
        let mut t = table();
        t.took((0, 0), 20);
        t.seal(&[(0, 0)]);
        t.failed(0);
        let rewinding = {
            let mut r = t.rewinding(0);
            r.sort_by_key(|tp| tp.partition);
            r
        };
        assert_eq!(rewinding, vec![tp(0), tp(1)]);
        // Partition 0 committed up to 15 only (the batch to 21 failed); partition 1 was taken
        // by another consumer (epoch 2).
        let plan = t.rewind_plan(
            &rewinding,
            &[stored(0, Some(15), 3), stored(1, Some(4), 2)],
            ResetPolicy::Earliest,
        );
        assert_eq!(plan.seek, vec![(tp(0), Offset::Offset(15))]);
        assert_eq!(plan.fenced, vec![tp(1)]);
        assert!(plan.reclaim.is_empty() && plan.no_offset.is_empty());
        assert_eq!(t.get((0, 0)).and_then(|p| p.sealed_next), Some(15));
        assert_eq!(t.accept((0, 1), 100), Accept::Stopped);
        t.resumed(&tp(0));
        assert_eq!(t.accept((0, 0), 15), Accept::Take { lane: 0 });
        assert!(!t.get((0, 0)).is_some_and(|p| p.position_trusted));
    }

    #[test]
    fn a_vanished_row_fences_and_a_missing_offset_under_fail_stops() {
        let mut t = table();
        t.failed(0);
        let plan = t.rewind_plan(&[tp(0), tp(1)], &[stored(1, None, 1)], ResetPolicy::Fail);
        assert_eq!(plan.fenced, vec![tp(0)]);
        assert_eq!(plan.no_offset, vec![tp(1)]);
        assert!(plan.seek.is_empty());
    }

    /// The race the trust issue fixed: after an operator's reset of epoch 3, the owner under 3
    /// reclaims, but a zombie that held epoch 2 (taken over before the reset) is fenced.
    #[test]
    fn only_the_owner_at_the_reset_may_claim_it_back() {
        let mut owner = table();
        owner.failed(0);
        let reset = StoredOffset {
            reset_from_epoch: Some(3),
            ..stored(0, Some(5), 4)
        };
        let plan = owner.rewind_plan(
            &[tp(0)],
            std::slice::from_ref(&reset),
            ResetPolicy::Earliest,
        );
        assert_eq!(plan.reclaim, vec![(tp(0), 3)]);
        assert!(plan.fenced.is_empty());
        let (seek, fenced) = owner.reclaimed(
            &plan.reclaim,
            &[stored(0, Some(5), 5)],
            ResetPolicy::Earliest,
        );
        assert_eq!(seek, vec![(tp(0), Offset::Offset(5))]);
        assert!(fenced.is_empty());
        assert_eq!(owner.by_tp(&tp(0)).map(|p| p.epoch), Some(5));

        let mut zombie = PartitionTable::default();
        zombie.claimed((0, 0), 0, &stored(0, Some(10), 2), ResetPolicy::Earliest);
        zombie.failed(0);
        let plan = zombie.rewind_plan(&[tp(0)], &[reset], ResetPolicy::Earliest);
        assert!(plan.reclaim.is_empty());
        assert_eq!(plan.fenced, vec![tp(0)]);
    }

    #[test]
    fn a_reclaim_lost_to_another_consumer_fences() {
        let mut t = table();
        t.failed(0);
        let (seek, fenced) = t.reclaimed(&[(tp(0), 3)], &[], ResetPolicy::Earliest);
        assert!(seek.is_empty());
        assert_eq!(fenced, vec![tp(0)]);
        assert_eq!(t.accept((0, 0), 10), Accept::Stopped);
    }

    #[test]
    fn only_a_reset_of_the_held_epoch_is_followed() {
        let t = table();
        let ours = StoredOffset {
            reset_from_epoch: Some(3),
            ..stored(0, Some(0), 4)
        };
        let theirs = StoredOffset {
            reset_from_epoch: Some(7),
            ..stored(1, Some(0), 8)
        };
        assert_eq!(t.reset_lanes(&[ours, theirs.clone()]), vec![0]);
        assert!(t.reset_lanes(&[theirs]).is_empty());
    }

    #[test]
    fn a_refused_record_leaves_its_partition_resting_on_it() {
        let mut t = table();
        t.rejected_at(&tp(0), 12);
        let p = t.by_tp(&tp(0)).unwrap();
        assert_eq!((p.sealed_next, p.status), (Some(12), Status::Fenced));
    }

    #[test]
    fn a_dead_writer_fences_its_lane() {
        let mut t = table();
        t.took((0, 0), 10);
        t.writer_gone(0);
        assert_eq!(t.accept((0, 0), 11), Accept::Stopped);
        assert!(t.active().is_empty());
    }

    #[test]
    fn revoked_partitions_are_forgotten_and_never_mirrored() {
        let mut t = table();
        assert_eq!(t.lanes_of(&[tp(0), tp(1), tp(9)]), vec![0]);
        t.revoked(&[tp(0)]);
        assert!(!t.owns(&tp(0)));
        assert_eq!(t.accept((0, 0), 10), Accept::NotOwned);
        assert_eq!(
            t.mirrorable(vec![(tp(0), 11), (tp(1), 3)]),
            vec![(tp(1), 3)]
        );
        t.stop((0, 1));
        assert!(t.mirrorable(vec![(tp(1), 3)]).is_empty(), "fenced");
        assert_eq!(t.still_stopped(vec![tp(0), tp(1)]), vec![tp(1)]);
    }

    /// Transaction markers: the consumer's position moves past offsets no record reached.
    #[test]
    fn gaps_extend_the_open_range_only_once_the_position_is_trusted() {
        let mut t = table();
        // Untrusted after the claim: a position left over from the previous assignment.
        assert!(t.past_gaps(&[((0, 0), Some(50))]).is_empty());
        // Unset once: from now on the position is this assignment's.
        assert!(t.past_gaps(&[((0, 0), None)]).is_empty());
        assert!(
            t.past_gaps(&[((0, 0), Some(10))]).is_empty(),
            "at the cursor"
        );
        assert_eq!(
            t.past_gaps(&[((0, 0), Some(12))]),
            vec![Gap {
                key: (0, 0),
                lane: 0,
                joins: true
            }]
        );
        assert_eq!(t.get((0, 0)).and_then(|p| p.open_last), Some(11));
        // A record then a marker: the open range grows, the partition is a member already.
        t.took((0, 0), 12);
        assert_eq!(
            t.past_gaps(&[((0, 0), Some(14))]),
            vec![Gap {
                key: (0, 0),
                lane: 0,
                joins: false
            }]
        );
        let advance = t.seal(&[(0, 0)]);
        assert_eq!((advance[0].expected, advance[0].next), (Some(10), 14));
        // Never committed: a position past the start is a gap from NULL.
        t.took((0, 1), 0);
        t.seal(&[(0, 1)]);
        let mut fresh = PartitionTable::default();
        fresh.claimed((0, 4), 0, &stored(4, None, 1), ResetPolicy::Earliest);
        fresh.past_gaps(&[((0, 4), None)]);
        assert_eq!(fresh.past_gaps(&[((0, 4), Some(2))]).len(), 1);
        assert_eq!(fresh.seal(&[(0, 4)])[0].expected, None);
    }

    #[test]
    fn a_record_makes_the_position_trusted() {
        let mut t = table();
        t.took((0, 0), 10);
        t.seal(&[(0, 0)]);
        assert_eq!(t.past_gaps(&[((0, 0), Some(13))]).len(), 1);
    }
}
