//! The writers as the consumer thread sees them: per lane, the batch being filled, how many
//! sealed batches are in flight, and when a failed lane may retry. Pure bookkeeping: the
//! coordinator sends through the `WriterPool` port and reports what came back.

use std::time::{Duration, Instant};

use rand::Rng;

use super::partitions::Key;
use crate::batch::OpenBatch;
use crate::config::BatchSettings;

/// One writer's side of the pipeline.
#[derive(Default)]
pub(crate) struct LaneState {
    pub(crate) open: OpenBatch,
    /// Partitions with records (or gaps) in `open`.
    pub(crate) members: Vec<Key>,
    pub(crate) in_flight: usize,
    /// A batch was sealed full and the lane has not been caught up since (`caught_up`): it is
    /// working through a backlog, and its batch need not wait `max_wait` once its partitions
    /// reach the end of their logs (`ends`).
    draining: bool,
    failures: u32,
    /// Set while the lane's partitions wait to be re-read and rewound.
    retry_at: Option<Instant>,
    /// The writer task died: nothing in flight will be answered, nothing more can be sent.
    gone: bool,
}

impl LaneState {
    /// Its writer died: nothing more is sent to it.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone
    }
}

/// How many times `max_records` records a batch of several tables may hold in all (while
/// none of its tables has `max_records` rows). A batch writes each of its tables with a COPY
/// of its own, whose round trips cost the same whatever its rows: a lane whose records spread
/// over many tables (a pattern of many topics, routing by record) would otherwise write them
/// in small COPYs, and the sink's CPU per record grew with the tables. Four times took 200
/// tables from 1.58× to 1.35× one table's CPU per record in the benchmark's `tables` scenario
/// (where `max_bytes`, 8 MiB, is about 40,000 of its records), and `max_bytes` still bounds
/// every batch.
pub(crate) const TABLE_SHARES: usize = 4;

/// Every lane, and the limits that decide when a batch is sealed.
pub(crate) struct Lanes {
    lanes: Vec<LaneState>,
    limits: BatchSettings,
}

impl Lanes {
    pub(crate) fn new(count: usize, limits: BatchSettings) -> Self {
        Self {
            lanes: (0..count.max(1)).map(|_| LaneState::default()).collect(),
            limits,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.lanes.len()
    }

    pub(crate) fn limits(&self) -> &BatchSettings {
        &self.limits
    }

    /// Fixed per partition, so a partition's batches commit in order on one connection.
    pub(crate) fn lane_of(&self, route: usize, partition: i32) -> usize {
        (route.wrapping_mul(7919) + partition as usize) % self.lanes.len()
    }

    pub(crate) fn get(&self, lane: usize) -> &LaneState {
        &self.lanes[lane]
    }

    pub(crate) fn open_mut(&mut self, lane: usize) -> &mut OpenBatch {
        &mut self.lanes[lane].open
    }

    /// A partition's first record in the open batch (the record starts the batch's clock).
    pub(crate) fn join(&mut self, lane: usize, key: Key) {
        self.lanes[lane].members.push(key);
    }

    /// A partition joins the open batch with a gap alone: the gap starts the batch's clock
    /// too, so it commits within `max_wait`.
    pub(crate) fn join_gap(&mut self, lane: usize, key: Key, now: Instant) {
        let l = &mut self.lanes[lane];
        l.members.push(key);
        l.open.opened_at.get_or_insert(now);
    }

    /// A record was added; true when the batch reached a size limit and must be sealed: one
    /// of its tables has `max_records` rows, it holds `max_records` records per table (at
    /// most `TABLE_SHARES` tables' worth; one table's batch closes at `max_records` records as
    /// it always did), or its bytes reached `max_bytes`.
    pub(crate) fn added(&mut self, lane: usize, bytes: usize) -> bool {
        let l = &mut self.lanes[lane];
        l.open.record_added(bytes);
        let shares = l.open.tables().clamp(1, TABLE_SHARES);
        let full = l.open.records >= self.limits.max_records.saturating_mul(shares)
            || l.open.largest_table() >= self.limits.max_records
            || l.open.bytes as u64 >= self.limits.max_bytes.as_u64();
        l.draining |= full;
        full
    }

    /// Whether the lane is working through a backlog: a batch was sealed full and the lane
    /// has not been caught up since.
    pub(crate) fn is_draining(&self, lane: usize) -> bool {
        self.lanes[lane].draining
    }

    /// The backlog is done (its partitions reached their ends, or the consumer ran out of
    /// records to take) or records trickle in (a batch waited its `max_wait`): the lane's
    /// batches wait for their clock again.
    pub(crate) fn caught_up(&mut self, lane: usize) {
        self.lanes[lane].draining = false;
    }

    /// The members of a lane's open batch, taken for sealing; `None` when there is nothing to
    /// seal or nobody to send it to. A batch with members but no records still commits: it
    /// advances past offsets that hold no record.
    pub(crate) fn take_members(&mut self, lane: usize) -> Option<Vec<Key>> {
        let l = &mut self.lanes[lane];
        if l.members.is_empty() || l.gone {
            return None;
        }
        Some(std::mem::take(&mut l.members))
    }

    /// Whether another batch may be sent without exceeding `max_in_flight`.
    pub(crate) fn has_room(&self, lane: usize) -> bool {
        self.lanes[lane].in_flight < self.limits.max_in_flight
    }

    pub(crate) fn sent(&mut self, lane: usize) {
        self.lanes[lane].in_flight += 1;
    }

    /// A result arrived; false when the lane's writer is gone and it means nothing.
    pub(crate) fn answered(&mut self, lane: usize) -> bool {
        let l = &mut self.lanes[lane];
        if l.gone {
            return false;
        }
        l.in_flight = l.in_flight.saturating_sub(1);
        true
    }

    /// A commit ends a run of failures: the next one backs off from the minimum again.
    pub(crate) fn committed(&mut self, lane: usize) {
        self.lanes[lane].failures = 0;
    }

    /// A failure: the open batch is dropped and a rewind scheduled after a backoff. One that
    /// arrives while a rewind is already scheduled keeps that time.
    pub(crate) fn failed(&mut self, lane: usize, now: Instant) {
        let l = &mut self.lanes[lane];
        l.open.clear();
        l.members.clear();
        if l.retry_at.is_none() {
            l.failures += 1;
            l.retry_at = Some(now + backoff(&self.limits, l.failures));
        }
    }

    /// Rewinds at once: an operator's reset is not a failure to back off from.
    pub(crate) fn retry_now(&mut self, lane: usize, now: Instant) {
        self.lanes[lane].retry_at = Some(now);
    }

    /// A rewind step failed (the database or a seek): tried again after a longer backoff.
    pub(crate) fn retry_later(&mut self, lane: usize, now: Instant) -> Duration {
        let l = &mut self.lanes[lane];
        l.failures += 1;
        let delay = backoff(&self.limits, l.failures);
        l.retry_at = Some(now + delay);
        delay
    }

    /// The rewind is done.
    pub(crate) fn recovered(&mut self, lane: usize) {
        self.lanes[lane].retry_at = None;
    }

    /// Whether a failure came back and the lane waits to rewind: a batch sealed meanwhile
    /// chains onto the failure and must be dropped (the rewind re-reads it).
    pub(crate) fn is_rewinding(&self, lane: usize) -> bool {
        self.lanes[lane].retry_at.is_some()
    }

    /// Lanes whose rewind is due: their retry time has come and nothing is in flight.
    pub(crate) fn due_for_rewind(&self, now: Instant) -> Vec<usize> {
        (0..self.lanes.len())
            .filter(|&i| {
                let l = &self.lanes[i];
                l.in_flight == 0 && l.retry_at.is_some_and(|t| t <= now)
            })
            .collect()
    }

    /// Lanes whose open batch has waited `max_wait`, and when the next deadline (a batch or a
    /// rewind) falls.
    pub(crate) fn due(&self, now: Instant) -> (Vec<usize>, Option<Instant>) {
        let mut due = Vec::new();
        let mut next = None::<Instant>;
        let mut later = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for (i, l) in self.lanes.iter().enumerate() {
            if let Some(opened) = l.open.opened_at {
                let deadline = opened + self.limits.max_wait;
                if deadline <= now {
                    due.push(i);
                } else {
                    later(deadline);
                }
            }
            if let Some(retry) = l.retry_at {
                later(retry);
            }
        }
        (due, next)
    }

    /// Whether any selected lane still has batches in flight.
    pub(crate) fn busy(&self, selected: impl Fn(usize) -> bool) -> bool {
        (0..self.lanes.len()).any(|i| selected(i) && self.lanes[i].in_flight > 0)
    }

    /// The writer died: nothing it held will be answered; true the first time only.
    pub(crate) fn gone(&mut self, lane: usize) -> bool {
        let l = &mut self.lanes[lane];
        if l.gone {
            return false;
        }
        l.gone = true;
        l.in_flight = 0;
        l.open.clear();
        l.members.clear();
        true
    }
}

/// Capped exponential backoff with full jitter, so restarted sinks do not retry in lockstep.
pub(crate) fn backoff(limits: &BatchSettings, attempt: u32) -> Duration {
    let base = limits.retry_backoff_min.as_millis() as u64;
    let cap = limits.retry_backoff_max.as_millis() as u64;
    let exp = base
        .saturating_mul(1u64 << attempt.min(20))
        .min(cap)
        .max(base);
    Duration::from_millis(rand::rng().random_range(base..=exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BatchSettings {
        BatchSettings {
            max_records: 3,
            max_in_flight: 2,
            max_wait: Duration::from_millis(250),
            retry_backoff_min: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(30),
            ..BatchSettings::default()
        }
    }

    #[test]
    fn a_batch_is_full_at_max_records() {
        let mut lanes = Lanes::new(2, limits());
        let now = Instant::now();
        lanes.join_gap(0, (0, 0), now);
        assert!(!lanes.added(0, 10));
        assert!(!lanes.added(0, 10));
        assert!(lanes.added(0, 10));
        assert_eq!(lanes.take_members(0), Some(vec![(0, 0)]));
        assert_eq!(lanes.take_members(0), None, "nothing left to seal");
    }

    #[test]
    fn in_flight_is_bounded_and_answers_free_room() {
        let mut lanes = Lanes::new(1, limits());
        lanes.sent(0);
        assert!(lanes.has_room(0));
        lanes.sent(0);
        assert!(!lanes.has_room(0));
        assert!(lanes.busy(|_| true));
        assert!(lanes.answered(0));
        assert!(lanes.has_room(0));
    }

    #[test]
    fn due_batches_and_the_next_deadline() {
        let mut lanes = Lanes::new(2, limits());
        let t0 = Instant::now();
        lanes.join_gap(0, (0, 0), t0);
        lanes.join_gap(1, (0, 1), t0 + Duration::from_millis(100));
        let (due, next) = lanes.due(t0 + Duration::from_millis(300));
        assert_eq!(due, vec![0]);
        assert_eq!(next, Some(t0 + Duration::from_millis(350)));
        let (due, next) = lanes.due(t0);
        assert!(due.is_empty());
        assert_eq!(next, Some(t0 + Duration::from_millis(250)));
    }

    #[test]
    fn a_failure_backs_off_once_and_a_rewind_waits_for_in_flight_batches() {
        let mut lanes = Lanes::new(1, limits());
        let t0 = Instant::now();
        lanes.join_gap(0, (0, 0), t0);
        lanes.sent(0);
        lanes.failed(0, t0);
        assert!(lanes.is_rewinding(0));
        assert_eq!(lanes.take_members(0), None, "the open batch was dropped");
        let (_, first) = lanes.due(t0);
        // A second failure (a batch chained on the first) keeps the scheduled time.
        lanes.failed(0, t0 + Duration::from_secs(5));
        assert_eq!(lanes.due(t0).1, first);
        let late = t0 + Duration::from_secs(60);
        assert!(
            lanes.due_for_rewind(late).is_empty(),
            "a batch is in flight"
        );
        lanes.answered(0);
        assert_eq!(lanes.due_for_rewind(late), vec![0]);
        lanes.recovered(0);
        assert!(!lanes.is_rewinding(0));
        assert!(lanes.due_for_rewind(late).is_empty());
    }

    #[test]
    fn a_dead_writer_answers_nothing_and_takes_nothing() {
        let mut lanes = Lanes::new(1, limits());
        lanes.join_gap(0, (0, 0), Instant::now());
        lanes.sent(0);
        assert!(lanes.gone(0));
        assert!(!lanes.gone(0), "reported once");
        assert!(!lanes.answered(0));
        assert!(!lanes.busy(|_| true));
        lanes.join_gap(0, (0, 0), Instant::now());
        assert_eq!(lanes.take_members(0), None);
    }

    #[test]
    fn partitions_keep_their_lane() {
        let lanes = Lanes::new(3, limits());
        let first: Vec<usize> = (0..12).map(|p| lanes.lane_of(1, p)).collect();
        let again: Vec<usize> = (0..12).map(|p| lanes.lane_of(1, p)).collect();
        assert_eq!(first, again);
        assert!(first.iter().all(|&l| l < 3));
        assert_eq!(
            first
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            3,
            "partitions spread over every lane: {first:?}"
        );
    }

    /// README: "capped exponential backoff with jitter", between `retry_backoff_min` and
    /// `retry_backoff_max`.
    #[test]
    fn backoff_grows_from_the_minimum_to_the_cap_with_jitter() {
        let limits = limits();
        let min = limits.retry_backoff_min;
        let max = limits.retry_backoff_max;
        assert_eq!(
            backoff(&limits, 0),
            min,
            "the first retry waits the minimum"
        );
        for attempt in 0..64 {
            // Exponential: attempt n waits at most min·2ⁿ, and never more than the cap.
            let ceiling = min.saturating_mul(1u32 << attempt.min(20)).min(max);
            for _ in 0..200 {
                let d = backoff(&limits, attempt);
                assert!(d >= min && d <= ceiling, "attempt {attempt}: {d:?}");
            }
        }
        // Late attempts reach the cap's neighbourhood; jitter spreads them below it.
        let late: Vec<Duration> = (0..200).map(|_| backoff(&limits, 30)).collect();
        assert!(late.iter().any(|d| *d > max / 2), "{late:?}");
        assert!(late.iter().all(|d| *d <= max), "{late:?}");
        let distinct: std::collections::BTreeSet<_> = late.iter().collect();
        assert!(
            distinct.len() > 100,
            "jitter: {} distinct of 200",
            distinct.len()
        );
        // Growth: the mean wait rises attempt by attempt until the cap.
        let mean = |attempt| {
            (0..400)
                .map(|_| backoff(&limits, attempt).as_millis())
                .sum::<u128>()
                / 400
        };
        assert!(
            mean(1) < mean(4) && mean(4) < mean(8),
            "{} {} {}",
            mean(1),
            mean(4),
            mean(8)
        );
    }
}
