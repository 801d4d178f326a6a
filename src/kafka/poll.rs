//! The consumer thread: one `BaseConsumer` polled by one dedicated thread.
//!
//! Rebalance callbacks run inside `poll` on this thread and block on PostgreSQL, which would
//! stall (or panic) a tokio worker; a plain thread with a runtime handle is the safe place.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

use super::context::SinkContext;
use crate::offsets::TopicPartition;
use crate::pipeline::Fatal;
use crate::record::RecordView;
use crate::shutdown::Shutdown;

/// The longest the loop sleeps in `poll`; bounds how late a due batch is sealed.
const MAX_POLL_WAIT: Duration = Duration::from_millis(100);

/// Polls until shutdown or a fatal error, then commits what is complete and leaves the group.
pub fn run(
    consumer: BaseConsumer<SinkContext>,
    topics: Vec<String>,
    shutdown: Shutdown,
    auth_failure_timeout: Duration,
) -> Result<(), Fatal> {
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topic_refs)
        .map_err(|e| Fatal::Other(format!("cannot subscribe to {topics:?}: {e}")))?;
    tracing::info!(?topics, "subscribed");
    let ctx = consumer.context().clone();
    let mut fatal = None;
    while !shutdown.is_triggered() {
        let now = Instant::now();
        if let Some((failing, reason)) = ctx.kafka_auth_failure() {
            if failing >= auth_failure_timeout {
                fatal = Some(Fatal::Other(format!(
                    "authentication with the Kafka brokers has failed for {}s: {reason}. Check the SASL/SSL settings in kafka.properties",
                    failing.as_secs()
                )));
                break;
            }
        }
        let wait = {
            let mut pipeline = ctx.pipeline();
            let next = pipeline.on_tick(&consumer, now);
            if pipeline.has_fatal() {
                break;
            }
            next.map_or(MAX_POLL_WAIT, |t| {
                t.saturating_duration_since(now).min(MAX_POLL_WAIT)
            })
        };
        match consumer.poll(wait) {
            None => {}
            Some(Ok(message)) => {
                let mut pipeline = ctx.pipeline();
                let headers = match message.headers() {
                    Some(h) if pipeline.needs_headers(message.topic()) => {
                        match crate::headers::read(h) {
                            Ok(headers) => headers,
                            Err(e) => {
                                // Never a record with headers missing: stop at it, as at any
                                // record that cannot be written.
                                fatal = Some(Fatal::Mapping {
                                    tp: TopicPartition::new(message.topic(), message.partition()),
                                    offset: message.offset(),
                                    reason: e,
                                });
                                break;
                            }
                        }
                    }
                    _ => Vec::new(),
                };
                let record = RecordView {
                    topic: message.topic(),
                    partition: message.partition(),
                    offset: message.offset(),
                    timestamp: message.timestamp().to_millis(),
                    key: message.key(),
                    value: message.payload(),
                    headers: &headers,
                };
                pipeline.on_record(&record);
                if pipeline.has_fatal() {
                    break;
                }
            }
            Some(Err(e)) => {
                let mut pipeline = ctx.pipeline();
                pipeline.on_consumer_error(&consumer, &e);
                if pipeline.has_fatal() {
                    break;
                }
            }
        }
    }
    let fatal = {
        let mut pipeline = ctx.pipeline();
        pipeline.drain();
        pipeline.take_fatal().or(fatal)
    };
    // Leaving the group runs the revoke callback; nothing is left to commit by then.
    consumer.unsubscribe();
    drop(consumer);
    tracing::info!("left the consumer group");
    match fatal {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
