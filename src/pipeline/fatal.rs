//! Why the sink stops: each reason with the message an operator acts on. Reported after
//! everything complete is committed, so the stored position is where the reason points.

use crate::offsets::TopicPartition;

/// Why the sink must stop; reported after everything complete is committed.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    #[error("record {tp}@{offset} cannot be written: {reason}. The stored position stays at this record; fix the producer or the table and restart")]
    Mapping {
        tp: TopicPartition,
        offset: i64,
        reason: String,
    },
    #[error("PostgreSQL rejected a batch ({batch}): {reason}. Nothing of it was written; fix the table or the data and restart")]
    Rejected { batch: String, reason: String },
    #[error("PostgreSQL refused record {tp}@{offset}: {reason}. Everything before it is committed and the stored position rests on this record; fix the table or the data and restart")]
    RejectedRecord {
        tp: TopicPartition,
        offset: i64,
        reason: String,
    },
    #[error("{tp} has no stored offset and kafka.auto_offset_reset = \"fail\": set its offset in kafka_offsets or choose earliest/latest")]
    NoStoredOffset { tp: TopicPartition },
    #[error("{tp} resumes at offset {stored}, outside its range {low}..{high}: {why}. Nothing was skipped yet. To continue, set kafka.offset_out_of_range = \"earliest\" (or \"latest\"), or move the position: kafka-pg-sink offsets reset --group-id {group} --topic {topic} --partition {partition} --to-offset {low}")]
    OutOfRange {
        tp: TopicPartition,
        group: String,
        topic: String,
        partition: i32,
        stored: i64,
        low: i64,
        high: i64,
        why: &'static str,
    },
    #[error("writer {lane} stopped unexpectedly ({reason}); what it had not committed is read again at the next start, from the stored offsets")]
    WriterGone { lane: usize, reason: String },
    #[error("{0}")]
    Other(String),
}
