//! The end of a backlog: a lane working through one need not hold its last batch for
//! `max_wait`, since nothing more is there to fill it.
//!
//! librdkafka reports a partition's end (`enable.partition.eof`) after its last record, but
//! only once a fetch finds nothing new, which may be up to `fetch.wait.max.ms` after that
//! record arrived. So a lane that sealed a full batch and then had nothing open when the
//! consumer ran out of records is caught up (a burst is over): a record after that trickles
//! in, and its batch waits for its clock even when an end is reported while it is open.

use std::time::Instant;

use super::{PartitionControl, Pipeline};
use crate::offsets::TopicPartition;

impl Pipeline {
    /// The consumer reached the end of `tp`'s log (its partition queue said so, after the
    /// partition's last record). Offsets past the last record (a transaction's marker) join
    /// the open batch at once rather than at the next gap check. And when the lane is draining
    /// a backlog and every partition of the lane is now at its end, the batch is sealed
    /// without waiting `max_wait`: the wait would only delay the backlog's last commit.
    pub fn on_end_of_partition(
        &mut self,
        ctl: &dyn PartitionControl,
        tp: &TopicPartition,
        now: Instant,
    ) {
        let Some(key) = self.key_of(tp) else { return };
        let Some(lane) = self.table.get(key).map(|p| p.lane) else {
            return;
        };
        let position = ctl.positions(std::slice::from_ref(tp)).pop().flatten();
        self.join_gaps(&[(key, position)], now);
        self.table.reached_end(key);
        if self.lanes.is_draining(lane) && self.table.lane_at_end(lane) {
            tracing::trace!(
                lane,
                "a backlog's last batch: sealed at the end of its partitions"
            );
            self.lanes.caught_up(lane);
            self.seal_and_send(lane);
        }
    }

    /// The consumer found nothing to take anywhere and is about to wait. A lane with nothing
    /// open is caught up: what comes next is not the rest of its backlog. A lane with records
    /// open keeps draining, since its partitions' ends may still be on their way.
    pub fn on_idle(&mut self) {
        for lane in 0..self.lanes.count() {
            if self.lanes.get(lane).open.records == 0 {
                self.lanes.caught_up(lane);
            }
        }
    }
}
