//! The offset store: where each partition resumes, and who may advance it.
//!
//! Every row of `kafka_offsets` carries an owner epoch. Claiming a partition bumps it; a batch
//! commit advances the offset only if the epoch and the expected offset still match (a
//! compare-and-set), so a consumer that lost a partition can never move it again.
//!
//! Here: the values the store speaks in (partitions, stored positions, advances, refusals) and
//! the names sessions go by. The store's claims and reads are in `store.rs`, the operator's
//! reset in `reset.rs`, the writer's fenced advance in `advance.rs`, who a row names as its
//! owner in `owner.rs`, and every statement in `sql.rs`.

use std::fmt;
use std::sync::Arc;

mod advance;
mod owner;
mod reset;
mod sql;
mod store;

pub use advance::{advance, refusal};
pub use owner::Owner;
pub use store::OffsetStore;

/// A topic and partition; the topic is shared so that cloning is cheap on the hot path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    /// Takes a `&str` from librdkafka or an `Arc` already shared, so callers on the hot path can
    /// avoid a copy.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// `topic/partition`, the form logs and error messages use.
impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// The same form, for `%tp` in tracing fields.
impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A stored position as read (or claimed) from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOffset {
    pub tp: TopicPartition,
    /// `None` until the first commit: the reset policy decides where reading starts.
    pub next_offset: Option<i64>,
    pub epoch: i64,
    /// Who claimed it last, as `Owner` displays it (`reset:…` after `kafka-pg-sink offsets
    /// reset`).
    pub owner_id: Option<String>,
    /// Set by an operator's reset to the epoch it replaced; cleared by the next claim. Only the
    /// owner under that epoch may claim the partition back.
    pub reset_from_epoch: Option<i64>,
}

/// The `owner_id` prefix of a position set by an operator (`Owner::Operator`), so a reader of
/// `kafka_offsets` sees who moved it. Informational only: the protocol reads
/// `reset_from_epoch`, never this text.
pub const RESET_OWNER_PREFIX: &str = "reset:";

/// The application name of `offsets reset` sessions: not `APPLICATION_NAME`, so a sink's
/// fence (which ends sink sessions holding claimed rows) never ends a reset.
pub const RESET_APPLICATION_NAME: &str = "kafka-pg-sink offsets reset";

/// One partition's advance inside a batch transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAdvance {
    pub tp: TopicPartition,
    /// The epoch this consumer claimed the partition with.
    pub epoch: i64,
    /// What the row must hold now for the commit to be ours to make.
    pub expected: Option<i64>,
    /// Last offset in the batch + 1.
    pub next: i64,
}

/// The application name every sink session uses; fencing only ever ends sessions with it.
pub const APPLICATION_NAME: &str = "kafka-pg-sink";

/// Why a compare-and-set matched fewer partitions than its batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Another consumer (or an operator's reset) holds a newer epoch: the partition is lost.
    Fenced,
    /// The epochs are ours but a stored position is not what the batch expected: it was queued
    /// behind a batch that failed and never committed. A retry, not a fence.
    Stale,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs, errors and tracing fields all name a partition `topic/partition`.
    #[test]
    fn a_topic_partition_shows_as_topic_slash_partition() {
        let tp = TopicPartition::new("orders.v2", 11);
        assert_eq!(tp.to_string(), "orders.v2/11");
        assert_eq!(format!("{tp:?}"), "orders.v2/11");
        assert_eq!(format!("{:?}", Some(&tp)), "Some(orders.v2/11)");
        assert_eq!(tp, TopicPartition::new(Arc::<str>::from("orders.v2"), 11));
    }
}
