//! The queues the assigned partitions' records arrive in: at most `budget::MAX_QUEUES`, each
//! shared by the partitions placed in it at their assignment.
//!
//! A queue is one partition's fetch queue (its *host*), split from the consumer's shared queue
//! (`split_partition_queue`); a partition placed in it forwards its own fetch queue there
//! (`rd_kafka_queue_forward`). librdkafka checks a partition's prefetch bounds against the
//! queue it forwards to, so the bounds hold per queue, not per partition (`budget`).
//!
//! Why before the assign: librdkafka forwards a partition's fetch queue to the consumer queue
//! when its fetch starts (`rd_kafka_toppar_op_fetch_start`), unless the application has set the
//! forwarding itself (`RD_KAFKA_Q_F_FWD_APP`, which both calls above set). Forwarding moves what
//! is queued along (`rd_kafka_q_fwd_set0`). Placed before the one assign call, no record of the
//! partition can reach another queue first, so its records are never split between two queues
//! and never reordered. A partition stays in its queue while it is assigned; records left in a
//! queue by a revoked partition are outdated by librdkafka's version barrier and never served.

use std::ffi::CString;
use std::sync::{Arc, Weak};
use std::thread::Thread;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::context::SinkContext;
use crate::offsets::TopicPartition;

/// One queue and the assigned partitions whose records arrive in it.
pub(crate) struct SharedQueue {
    /// The partition whose fetch queue this is; it need not be assigned any more.
    host: TopicPartition,
    pub(crate) queue: PartitionQueue<SinkContext>,
    /// Assigned partitions placed here, the host among them while it is assigned.
    pub(crate) members: Vec<TopicPartition>,
}

impl SharedQueue {
    /// The member a partition-end event of `partition` is for. librdkafka names no topic in
    /// it; partitions are placed so that a queue holds one partition of each number, and where
    /// that could not be kept the end is not attributed (the batch then seals on time).
    pub(crate) fn member_numbered(&self, partition: i32) -> Option<&TopicPartition> {
        let mut found = self.members.iter().filter(|m| m.partition == partition);
        match (found.next(), found.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }
}

/// The queues, each with a wake-up for the polling thread.
pub(crate) struct PartitionQueues {
    /// Weak: the queues are kept in the consumer's own context, and the consumer must still
    /// be dropped (and leave the group) when the poll loop is done with it.
    consumer: Weak<BaseConsumer<SinkContext>>,
    /// The polling thread, unparked when a queue turns non-empty.
    waker: Option<Thread>,
    /// At most this many queues (`budget::Prefetch::queues`).
    limit: usize,
    queues: Vec<SharedQueue>,
}

impl PartitionQueues {
    /// Queues for at most `limit` of them (at least one).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            consumer: Weak::new(),
            waker: None,
            limit: limit.max(1),
            queues: Vec::new(),
        }
    }

    /// Called by the poll loop before it subscribes: no assignment can come earlier.
    pub(crate) fn bind(&mut self, consumer: &Arc<BaseConsumer<SinkContext>>, waker: Thread) {
        self.consumer = Arc::downgrade(consumer);
        self.waker = Some(waker);
    }

    /// Places each partition about to be assigned in a queue. A partition that cannot be
    /// placed (no consumer bound, an invalid name) keeps the shared consumer queue, which the
    /// poll loop serves too: only its turn-taking is lost, never a record.
    pub(crate) fn place(&mut self, tps: &[TopicPartition]) {
        let Some(consumer) = self.consumer.upgrade() else {
            return;
        };
        for tp in tps {
            self.leave(tp);
            // Back in the queue it hosts, which its fetch queue already is.
            if let Some(q) = self.queues.iter_mut().find(|q| &q.host == tp) {
                q.members.push(tp.clone());
                continue;
            }
            let placed = if self.queues.len() < self.limit {
                self.host(&consumer, tp)
            } else {
                let i = self.least_loaded(tp.partition);
                forward(&consumer, tp, &self.queues[i].host).map(|()| i)
            };
            match placed {
                Ok(i) => self.queues[i].members.push(tp.clone()),
                Err(reason) => tracing::warn!(
                    %tp, reason,
                    "no queue of the sink's for the partition; it is served from the shared one"
                ),
            }
        }
    }

    /// A new queue hosted by `tp`'s own fetch queue. Returns its index.
    fn host(
        &mut self,
        consumer: &Arc<BaseConsumer<SinkContext>>,
        tp: &TopicPartition,
    ) -> Result<usize, &'static str> {
        let mut queue = consumer
            .split_partition_queue(&tp.topic, tp.partition)
            .ok_or("librdkafka has no queue for it")?;
        if let Some(waker) = self.waker.clone() {
            // Runs on a librdkafka thread when the queue turns non-empty.
            queue.set_nonempty_callback(move || waker.unpark());
        }
        self.queues.push(SharedQueue {
            host: tp.clone(),
            queue,
            members: Vec::new(),
        });
        Ok(self.queues.len() - 1)
    }

    /// The queue of the fewest members, preferring those with no partition numbered
    /// `partition` (so a partition's end stays attributable). There is at least one queue.
    fn least_loaded(&self, partition: i32) -> usize {
        (0..self.queues.len())
            .min_by_key(|&i| {
                let q = &self.queues[i];
                let clash = q.members.iter().any(|m| m.partition == partition);
                (clash, q.members.len())
            })
            .unwrap_or(0)
    }

    /// Takes a partition out of its queue.
    fn leave(&mut self, tp: &TopicPartition) {
        for q in &mut self.queues {
            q.members.retain(|m| m != tp);
        }
    }

    /// Revoked partitions: what their queues still hold belongs to the next owner. A queue
    /// left without members is dropped; a later partition starts a new one.
    pub(crate) fn remove(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            self.leave(tp);
        }
        self.queues.retain(|q| !q.members.is_empty());
    }

    /// Every queue: each holds the consumer, which could not be dropped while one is kept.
    pub(crate) fn clear(&mut self) {
        self.queues.clear();
    }

    /// The queues, for the poll loop's turns.
    pub(crate) fn all_mut(&mut self) -> &mut [SharedQueue] {
        &mut self.queues
    }
}

/// Forwards `tp`'s fetch queue to `host`'s, so its records arrive in `host`'s queue and count
/// against that queue's bounds.
fn forward(
    consumer: &BaseConsumer<SinkContext>,
    tp: &TopicPartition,
    host: &TopicPartition,
) -> Result<(), &'static str> {
    let (Ok(topic), Ok(host_topic)) = (CString::new(&*tp.topic), CString::new(&*host.topic)) else {
        return Err("a topic name with a NUL");
    };
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle (held by the `Arc` above); both queue handles
    // are checked for NULL and released before returning. Neither call keeps a pointer to the
    // topic strings. Releasing a handle neither destroys the queue (the partition owns it) nor
    // undoes the forwarding.
    unsafe {
        let src = rdsys::rd_kafka_queue_get_partition(rk, topic.as_ptr(), tp.partition);
        let dst = rdsys::rd_kafka_queue_get_partition(rk, host_topic.as_ptr(), host.partition);
        let forwarded = !src.is_null() && !dst.is_null();
        if forwarded {
            rdsys::rd_kafka_queue_forward(src, dst);
        }
        for handle in [src, dst] {
            if !handle.is_null() {
                rdsys::rd_kafka_queue_destroy(handle);
            }
        }
        if forwarded {
            Ok(())
        } else {
            Err("librdkafka has no queue for it")
        }
    }
}
