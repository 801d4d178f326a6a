//! The memory budget, turned into how much librdkafka may prefetch and into how many queues.
//!
//! librdkafka bounds prefetched records per *queue* (`queued.max.messages.kbytes`,
//! `queued.min.messages`), and a queue of its own per partition made those bounds per
//! partition: 256 partitions with a backlog held 256 full queues (1 GiB and more). The bounds
//! are fixed when the client is created, but which queue a partition's fetches land in is not:
//! librdkafka checks a partition's bounds against the queue its fetch queue forwards to. So the
//! sink keeps at most [`Prefetch::queues`] queues whatever the partition count, a partition
//! joining one of them at its assignment (`queues`), and sizes each queue's bounds to its share
//! of the budget here. Memory then follows the budget, not the partitions or the backlog.

use bytesize::ByteSize;

/// What the budget keeps back from prefetching: the process itself (runtime, clients, the
/// pipeline's state) and its batches at the default batch settings, as measured with 1 to
/// 1,024 partitions. README's Sizing gives the figure; the rest of the budget is prefetch.
pub(crate) const RESERVED: ByteSize = ByteSize::mib(64);

/// The most queues the partitions share. As many partitions as that drain in turns, each
/// alone in its queue (every partition of the benchmark and of the fairness test at the
/// default budget); beyond, a queue's partitions share its fetched chunks in order.
const MAX_QUEUES: usize = 16;

/// `fetch.max.bytes`: the most one fetch response brings, compressed. librdkafka refuses less
/// than its `message.max.bytes` (1,000,000). The broker still sends a larger first record.
const RESPONSE: u64 = 1024 * 1024;

/// What one queue may cost at its worst, as measured: its bounds below, plus one response
/// above them, decompressed (lz4 JSON: about 4x) with librdkafka's ~0.7 KB per record.
const QUEUE_COST: u64 = 24 * 1024 * 1024;

/// A queue's payload bound (`queued.max.messages.kbytes`): 2 MiB per partition drained 8
/// partitions at full speed (README, Performance).
const QUEUE_KBYTES: u64 = 2048;

/// A queue's record bound (`queued.min.messages`): librdkafka's per-record overhead is several
/// times a small record, so the record count, not the payload, bounds small records' memory.
const QUEUE_RECORDS: u64 = 4096;

/// `max.partition.fetch.bytes`: one partition's part of a response, so that a response feeds
/// eight partitions of a shared queue rather than one, and they advance together.
const PARTITION_FETCH: u64 = 128 * 1024;

// A response, decompressed and with its records' overhead, is a fraction of a queue's cost,
// and feeds several of the partitions sharing the queue.
const _: () = assert!(RESPONSE * 4 * 4 < QUEUE_COST && RESPONSE / PARTITION_FETCH == 8);

/// The prefetch settings a budget gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefetch {
    /// Queues the assigned partitions are spread over, at most.
    pub(crate) queues: usize,
}

impl Prefetch {
    /// The settings for `budget` (at least `MIN_MEMORY_BUDGET`, checked when the
    /// configuration loads): as many queues as the part beyond the reserve pays for.
    pub(crate) fn of(budget: ByteSize) -> Self {
        let prefetch = budget.as_u64().saturating_sub(RESERVED.as_u64());
        Self {
            queues: ((prefetch / QUEUE_COST) as usize).clamp(1, MAX_QUEUES),
        }
    }

    /// The most the prefetch may hold at its worst.
    pub(crate) fn worst_case(&self) -> ByteSize {
        ByteSize::b(self.queues as u64 * QUEUE_COST)
    }

    /// The librdkafka properties, for the consumer's configuration.
    pub(crate) fn properties(&self) -> [(&'static str, String); 4] {
        [
            ("queued.max.messages.kbytes", QUEUE_KBYTES.to_string()),
            ("queued.min.messages", QUEUE_RECORDS.to_string()),
            ("max.partition.fetch.bytes", PARTITION_FETCH.to_string()),
            ("fetch.max.bytes", RESPONSE.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queues_at_their_worst_stay_within_the_prefetch_part_of_the_budget() {
        for mib in [96, 128, 256, 512, 1024, 4096] {
            let budget = ByteSize::mib(mib);
            let p = Prefetch::of(budget);
            assert!(
                p.worst_case().as_u64() + RESERVED.as_u64() <= budget.as_u64(),
                "{mib} MiB: {p:?}"
            );
        }
    }

    #[test]
    fn the_default_budget_gives_the_benchmarks_eight_partitions_a_queue_each() {
        assert_eq!(Prefetch::of(ByteSize::mib(256)).queues, 8);
        assert_eq!(Prefetch::of(ByteSize::mib(128)).queues, 2);
        assert_eq!(Prefetch::of(ByteSize::mib(96)).queues, 1);
        assert_eq!(Prefetch::of(ByteSize::gib(4)).queues, MAX_QUEUES);
    }
}
