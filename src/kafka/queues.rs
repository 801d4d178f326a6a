//! Each assigned partition's own queue, split from the consumer's shared one before the assign.
//!
//! Why before: librdkafka forwards a partition's fetch queue to the consumer queue when its
//! fetch starts (`rd_kafka_toppar_op_fetch_start`), unless the application has set the
//! forwarding itself (`RD_KAFKA_Q_F_FWD_APP`, set by `rd_kafka_queue_forward`, which
//! `split_partition_queue` calls with no destination). Forwarding moves what is queued along
//! (`rd_kafka_q_fwd_set0`), and un-forwarding leaves what was moved in the shared queue. Split
//! before the one assign call, no record of the partition can ever reach the shared queue, so
//! its records are never split between two queues and never reordered. The flag stays on the
//! partition's fetch queue for good, which is why every assignment splits again (a queue
//! dropped at a revoke would otherwise leave a re-assigned partition's records unread).

use std::sync::{Arc, Weak};
use std::thread::Thread;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::BaseConsumer;

use super::context::SinkContext;
use crate::offsets::TopicPartition;

/// The partitions' queues, each with a wake-up for the polling thread.
#[derive(Default)]
pub(crate) struct PartitionQueues {
    /// Weak: the queues are kept in the consumer's own context, and the consumer must still
    /// be dropped (and leave the group) when the poll loop is done with it.
    consumer: Weak<BaseConsumer<SinkContext>>,
    /// The polling thread, unparked when a queue turns non-empty.
    waker: Option<Thread>,
    queues: Vec<(TopicPartition, PartitionQueue<SinkContext>)>,
}

impl PartitionQueues {
    /// Called by the poll loop before it subscribes: no assignment can come earlier.
    pub(crate) fn bind(&mut self, consumer: &Arc<BaseConsumer<SinkContext>>, waker: Thread) {
        self.consumer = Arc::downgrade(consumer);
        self.waker = Some(waker);
    }

    /// Gives each partition about to be assigned its own queue. A partition that cannot have
    /// one (no consumer bound, an invalid name) keeps the shared queue, which the poll loop
    /// serves too: only its turn-taking is lost, never a record.
    pub(crate) fn split(&mut self, tps: &[TopicPartition]) {
        let Some(consumer) = self.consumer.upgrade() else {
            return;
        };
        for tp in tps {
            // A queue held from before refers to the fetch queue of its time; take it anew.
            self.queues.retain(|(held, _)| held != tp);
            match consumer.split_partition_queue(&tp.topic, tp.partition) {
                Some(mut queue) => {
                    if let Some(waker) = self.waker.clone() {
                        // Runs on a librdkafka thread when the queue turns non-empty.
                        queue.set_nonempty_callback(move || waker.unpark());
                    }
                    self.queues.push((tp.clone(), queue));
                }
                None => {
                    tracing::warn!(%tp, "no queue of its own for the partition; it is served from the shared one")
                }
            }
        }
    }

    /// Revoked partitions: what their queues still hold belongs to the next owner.
    pub(crate) fn remove(&mut self, tps: &[TopicPartition]) {
        self.queues.retain(|(held, _)| !tps.contains(held));
    }

    /// Every queue: each holds the consumer, which could not be dropped while one is kept.
    pub(crate) fn clear(&mut self) {
        self.queues.clear();
    }

    /// The queues, for the poll loop's turns.
    pub(crate) fn all_mut(&mut self) -> &mut [(TopicPartition, PartitionQueue<SinkContext>)] {
        &mut self.queues
    }
}
