//! Everything that talks to Kafka for the running sink: the client configurations, the
//! consumer thread's poll loop, and the consumer context whose rebalance callback claims
//! partitions and which moves the consumer's positions for the pipeline.

pub(crate) mod budget;
pub mod clients;
pub(crate) mod context;
pub(crate) mod poll;
pub(crate) mod protocol;
pub(crate) mod queues;
pub(crate) mod turns;

/// The benchmark's COPY of rows in topic order interleaves partitions as the poll loop does.
pub use turns::RECORDS_PER_TURN;
