//! Writer results: every outcome lands here, so in-flight counts, stats and rewinds change
//! only on the consumer thread.

use std::time::Instant;

use super::{Event, Fatal, Pipeline, Received, SLOW_WRITER_NOTICE};
use crate::offsets::{OffsetAdvance, Refusal};
use crate::stats::Failure;
use crate::writer::{Outcome, WriteResult, WriterEvent};

impl Pipeline {
    /// Applies every result that has arrived, without blocking.
    pub fn on_results(&mut self) {
        while let Some(event) = self.writers.try_recv() {
            self.on_event(event);
        }
    }

    /// Blocks for one result; false if the writers are gone.
    pub(super) fn wait_for_result(&mut self) -> bool {
        let started = Instant::now();
        loop {
            match self.writers.recv_timeout(SLOW_WRITER_NOTICE) {
                Received::Event(event) => {
                    self.on_event(event);
                    return true;
                }
                Received::Timeout => tracing::warn!(
                    waited_s = started.elapsed().as_secs(),
                    "still waiting for a writer to answer (each transaction is bounded by postgres.statement_timeout)"
                ),
                Received::Closed => {
                    for lane in 0..self.lanes.count() {
                        self.writer_gone(lane, "every writer has stopped".into());
                    }
                    return false;
                }
            }
        }
    }

    /// A result, or a writer's death.
    pub(super) fn on_event(&mut self, event: WriterEvent) {
        match event {
            WriterEvent::Done(result) => self.on_result(*result),
            WriterEvent::Gone { lane, reason } => self.writer_gone(lane, reason),
        }
    }

    /// A dead writer stops the sink: its batches will never be answered, so waiting for them
    /// would hang. What it committed is in the database; the rest is read again at restart.
    pub(super) fn writer_gone(&mut self, lane: usize, reason: String) {
        if !self.lanes.gone(lane) {
            return;
        }
        self.table.writer_gone(lane);
        self.set_fatal(Fatal::WriterGone { lane, reason });
    }

    /// Waits until the selected lanes have nothing in flight.
    pub(super) fn wait_until(&mut self, selected: impl Fn(usize) -> bool) {
        while self.lanes.busy(&selected) {
            if !self.wait_for_result() {
                return;
            }
        }
    }

    /// Records taken so far are reported before a commit that holds them, so the consumed
    /// count never trails the committed one.
    pub(super) fn report_consumed(&mut self) {
        if self.unreported > 0 {
            self.observer.observe(Event::Consumed(self.unreported));
            self.unreported = 0;
        }
    }

    /// What a committed transaction (whole, or without a refused record) means for the
    /// counters and the positions mirrored to Kafka.
    pub(super) fn committed(&mut self, result: &WriteResult) {
        self.report_consumed();
        self.observer.observe(Event::Committed(result));
        if self.policy.mirror_commits {
            self.to_mirror
                .extend(result.offsets.iter().map(|a| (a.tp.clone(), a.next)));
        }
    }

    /// Every writer outcome lands here, so in-flight counts, stats and rewinds change only on
    /// the consumer thread.
    pub(super) fn on_result(&mut self, result: WriteResult) {
        let lane = result.lane;
        self.ddl_answered(
            result.batch_id,
            matches!(
                result.outcome,
                Outcome::Committed | Outcome::RejectedRecord { .. }
            ),
        );
        if !self.lanes.answered(lane) {
            return;
        }
        match result.outcome {
            Outcome::Committed => {
                self.committed(&result);
                self.lanes.committed(lane);
                tracing::trace!(
                    lane,
                    batch = result.batch_id,
                    ms = result.transaction_time.as_millis() as u64,
                    "batch committed"
                );
            }
            Outcome::Refused {
                why: Refusal::Fenced,
                matched,
                expected,
            } => {
                self.observer.observe(Event::Failed(Failure::Fenced));
                tracing::warn!(lane, batch = %describe(&result.offsets), matched, expected, "batch fenced: a partition changed owner; re-reading stored offsets");
                self.begin_rewind(lane);
            }
            Outcome::Refused {
                why: Refusal::Stale,
                ..
            } => {
                // Queued behind a failure that already started the rewind: not news.
                self.observer.observe(Event::Failed(Failure::Stale));
                tracing::debug!(lane, batch = %describe(&result.offsets), "batch queued behind a failed one refused; rewinding");
                self.begin_rewind(lane);
            }
            Outcome::Transient(ref reason) => {
                self.observer.observe(Event::Failed(Failure::Transient));
                tracing::warn!(lane, batch = %describe(&result.offsets), error = %reason, "batch transaction failed; nothing of it counts as written, rewinding to the stored offsets");
                self.begin_rewind(lane);
            }
            Outcome::Permanent(ref reason) => {
                self.observer.observe(Event::Failed(Failure::Rejected));
                self.begin_rewind(lane);
                self.set_fatal(Fatal::Rejected {
                    batch: describe(&result.offsets),
                    reason: reason.clone(),
                });
            }
            Outcome::RejectedRecord {
                ref tp,
                offset,
                ref reason,
            } => {
                // The rest of the batch committed; the record's partition rests on it.
                self.committed(&result);
                self.observer.observe(Event::Failed(Failure::Rejected));
                self.table.rejected_at(tp, offset);
                // The open batch holds the partition's later records: it must not commit (one
                // already sent fails its compare-and-set).
                self.begin_rewind(lane);
                self.set_fatal(Fatal::RejectedRecord {
                    tp: tp.clone(),
                    offset,
                    reason: reason.clone(),
                });
            }
        }
    }
}

/// A batch's ranges for messages: `orders/0@100..350, orders/3@..20`.
fn describe(offsets: &[OffsetAdvance]) -> String {
    offsets
        .iter()
        .map(|a| match a.expected {
            Some(from) => format!("{}@{}..{}", a.tp, from, a.next),
            None => format!("{}@..{}", a.tp, a.next),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
