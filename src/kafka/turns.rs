//! Turn-taking between the partitions' own queues, so a backlog drains every partition together.
//!
//! librdkafka's shared consumer queue is one FIFO of per-partition chunks (up to
//! `max.partition.fetch.bytes` each): served in order, one partition's chunk is drained while
//! every other partition's lag stays frozen. With a queue per partition the poll loop takes a
//! bounded number of records from each in turn instead.

/// How many records (or errors) one partition hands over in its turn before the next one's.
/// Small against a fetched chunk (thousands of records), so partitions advance in step; large
/// enough that the cost of a turn (one empty poll at most) is nothing next to the records.
pub const RECORDS_PER_TURN: usize = 128;

/// What one take from a source gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Took {
    /// A record or an error was handed over.
    Item,
    /// Nothing is ready there: the next source's turn.
    Empty,
    /// The sink must stop taking anything (a fatal error): the round ends at once.
    Stop,
}

/// What one round over every source did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    /// Items handed over, over all sources.
    pub(crate) taken: usize,
    /// Some source used its whole turn and may hold more: the loop must not wait.
    pub(crate) more: bool,
    /// A take asked to stop.
    pub(crate) stopped: bool,
}

impl Round {
    /// Nothing was ready anywhere: the loop may wait for a wake-up.
    pub(crate) fn idle(&self) -> bool {
        self.taken == 0 && !self.more && !self.stopped
    }
}

/// The rotation: which source goes first next round, and how long a turn is.
#[derive(Debug)]
pub(crate) struct Turns {
    per_turn: usize,
    first: usize,
}

impl Turns {
    /// `per_turn` of at least one, or no source would ever be served.
    pub(crate) fn new(per_turn: usize) -> Self {
        Self {
            per_turn: per_turn.max(1),
            first: 0,
        }
    }

    /// Gives every source a turn of up to `per_turn` takes per unit of its weight (the
    /// partitions sharing it; at least one), each source's items in their order. The first
    /// source moves on by one each round, so none is always served first (a take can block on
    /// a full writer; the partition served before the block would gain).
    pub(crate) fn round<S>(
        &mut self,
        sources: &mut [S],
        weight: impl Fn(&S) -> usize,
        mut take: impl FnMut(&mut S) -> Took,
    ) -> Round {
        let mut round = Round::default();
        let n = sources.len();
        if n == 0 {
            return round;
        }
        let start = self.first % n;
        self.first = (start + 1) % n;
        for i in 0..n {
            let source = &mut sources[(start + i) % n];
            let turn = self.per_turn * weight(source).max(1);
            let mut taken = 0;
            while taken < turn {
                match take(source) {
                    Took::Item => taken += 1,
                    Took::Empty => break,
                    Took::Stop => {
                        round.taken += taken;
                        round.stopped = true;
                        return round;
                    }
                }
            }
            round.more |= taken == turn;
            round.taken += taken;
        }
        round
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A partition's queue: its offsets, in order.
    fn queues(lens: &[i64]) -> Vec<(usize, VecDeque<i64>)> {
        lens.iter()
            .enumerate()
            .map(|(p, &n)| (p, (0..n).collect()))
            .collect()
    }

    /// Runs rounds until every queue is empty; returns what was taken, in order.
    fn drain(turns: &mut Turns, qs: &mut [(usize, VecDeque<i64>)]) -> Vec<(usize, i64)> {
        let mut out = Vec::new();
        loop {
            let round = turns.round(
                qs,
                |_| 1,
                |(p, q)| match q.pop_front() {
                    Some(o) => {
                        out.push((*p, o));
                        Took::Item
                    }
                    None => Took::Empty,
                },
            );
            if round.idle() {
                return out;
            }
        }
    }

    #[test]
    fn every_partition_advances_by_at_most_a_turn_before_the_others_do() {
        let mut turns = Turns::new(3);
        let mut qs = queues(&[10, 10, 10, 10]);
        let out = drain(&mut turns, &mut qs);
        assert_eq!(out.len(), 40);
        // At every point of the drain, the partitions taken furthest and least far differ
        // by at most one turn.
        let mut progress = [0i64; 4];
        for (p, _) in &out {
            progress[*p] += 1;
            let (max, min) = (progress.iter().max(), progress.iter().min());
            assert!(
                max.zip(min).is_some_and(|(a, b)| a - b <= 3),
                "{progress:?}"
            );
        }
    }

    #[test]
    fn each_partitions_records_keep_their_order_and_none_is_lost_or_repeated() {
        let mut turns = Turns::new(4);
        let mut qs = queues(&[9, 0, 13, 1]);
        let out = drain(&mut turns, &mut qs);
        for (p, n) in [(0, 9), (1, 0), (2, 13), (3, 1)] {
            let got: Vec<i64> = out.iter().filter(|(q, _)| *q == p).map(|r| r.1).collect();
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "partition {p}");
        }
    }

    /// One take from a queue: its next item, or empty.
    fn pop(q: &mut VecDeque<i64>) -> Took {
        q.pop_front().map_or(Took::Empty, |_| Took::Item)
    }

    #[test]
    fn a_full_turn_says_there_may_be_more_and_an_empty_round_is_idle() {
        let mut turns = Turns::new(2);
        let mut qs = queues(&[2, 1]);
        let round = turns.round(&mut qs, |_| 1, |(_, q)| pop(q));
        assert_eq!(
            round,
            Round {
                taken: 3,
                more: true,
                stopped: false
            }
        );
        let round = turns.round(&mut qs, |_| 1, |(_, q)| pop(q));
        assert!(round.idle(), "{round:?}");
        assert!(Turns::new(5)
            .round(&mut Vec::<()>::new(), |_| 1, |_| Took::Item)
            .idle());
    }

    /// A queue three partitions share gets three partitions' turn: partitions advance alike
    /// whether alone in a queue or not.
    #[test]
    fn a_source_shared_by_partitions_gets_a_turn_per_partition() {
        let mut turns = Turns::new(2);
        let mut qs = queues(&[20, 20]);
        let mut taken = [0usize; 2];
        let round = turns.round(
            &mut qs,
            |(p, _)| if *p == 0 { 3 } else { 1 },
            |(p, q)| match q.pop_front() {
                Some(_) => {
                    taken[*p] += 1;
                    Took::Item
                }
                None => Took::Empty,
            },
        );
        assert_eq!(taken, [6, 2]);
        assert!(round.more);
    }

    #[test]
    fn the_first_partition_moves_on_each_round() {
        let mut turns = Turns::new(1);
        let mut qs = queues(&[5, 5, 5]);
        let mut firsts = Vec::new();
        for _ in 0..4 {
            let mut first = None;
            turns.round(
                &mut qs,
                |_| 1,
                |(p, q)| {
                    first.get_or_insert(*p);
                    q.pop_front().map_or(Took::Empty, |_| Took::Item)
                },
            );
            firsts.extend(first);
        }
        assert_eq!(firsts, vec![0, 1, 2, 0]);
    }

    #[test]
    fn a_stop_ends_the_round_at_once() {
        let mut turns = Turns::new(10);
        let mut qs = queues(&[5, 5]);
        let mut calls = 0;
        let round = turns.round(
            &mut qs,
            |_| 1,
            |(_, q)| {
                calls += 1;
                match q.pop_front() {
                    Some(2) => Took::Stop,
                    Some(_) => Took::Item,
                    None => Took::Empty,
                }
            },
        );
        assert_eq!(calls, 3, "no take after the stop");
        assert_eq!(
            round,
            Round {
                taken: 2,
                more: false,
                stopped: true
            }
        );
        assert!(!round.idle());
    }
}
