//! The consumer thread: one `BaseConsumer` polled by one dedicated thread.
//!
//! Rebalance callbacks run inside `poll` on this thread and block on PostgreSQL, which would
//! stall (or panic) a tokio worker; a plain thread with a runtime handle is the safe place.
//!
//! The assigned partitions' records arrive in a bounded number of queues (`queues`), and every
//! round of the loop gives each a turn of a bounded number of records per partition in it
//! (`turns`), so a backlog drains every partition together; the shared queue is still polled each round for rebalances, errors, statistics
//! and commit results. When nothing is ready anywhere the thread parks until a queue turns
//! non-empty (each queue's callback unparks it) or the next batch is due.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message};

use super::context::SinkContext;
use super::turns::{Took, Turns, RECORDS_PER_TURN};
use crate::offsets::TopicPartition;
use crate::pipeline::Fatal;
use crate::record::RecordView;
use crate::shutdown::Shutdown;

/// The longest the loop parks; bounds how late a due batch is sealed.
const MAX_POLL_WAIT: Duration = Duration::from_millis(100);

/// How many events of the shared queue one round serves at most: a few, so a burst of commit
/// results cannot starve the partitions' turns, and more than the one `poll` returns, so
/// events do not wait for the next round.
const SHARED_POLLS_PER_ROUND: usize = 8;

/// Why the loop stops taking records.
struct Stop(Option<Fatal>);

/// Polls until shutdown or a fatal error, then commits what is complete and leaves the group.
pub fn run(
    consumer: BaseConsumer<SinkContext>,
    topics: Vec<String>,
    shutdown: Shutdown,
    auth_failure_timeout: Duration,
) -> Result<(), Fatal> {
    let mut consumer = consumer;
    let this_thread = std::thread::current();
    let waker = this_thread.clone();
    // Runs on a librdkafka thread when the shared queue turns non-empty: a rebalance or an
    // error must not wait for the park to time out.
    consumer.set_nonempty_callback(move || waker.unpark());
    // An `Arc` because a partition's queue holds its consumer.
    let consumer = Arc::new(consumer);
    let ctx = consumer.context().clone();
    ctx.queues().bind(&consumer, this_thread);
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topic_refs)
        .map_err(|e| Fatal::Other(format!("cannot subscribe to {topics:?}: {e}")))?;
    tracing::info!(?topics, "subscribed");
    let mut turns = Turns::new(RECORDS_PER_TURN);
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
            let next = pipeline.on_tick(&*consumer, now);
            if pipeline.has_fatal() {
                break;
            }
            next.map_or(MAX_POLL_WAIT, |t| {
                t.saturating_duration_since(now).min(MAX_POLL_WAIT)
            })
        };
        let shared = match serve_shared(&consumer, &ctx, &shutdown) {
            Ok(served) => served,
            Err(Stop(f)) => {
                fatal = f;
                break;
            }
        };
        let round = {
            let mut queues = ctx.queues();
            turns.round(
                queues.all_mut(),
                |q| q.members.len(),
                |q| {
                    // As before every record: a stop takes nothing more, not even the rest of
                    // a turn (the consumer thread may just come back from waiting for a writer).
                    if shutdown.is_triggered() {
                        return Took::Stop;
                    }
                    match q.queue.poll(Duration::ZERO) {
                        None => Took::Empty,
                        // The end names a partition, not its topic: the queue's member of
                        // that number (`queues` keeps one per number where it can).
                        Some(Err(KafkaError::PartitionEOF(partition))) => {
                            if let Some(tp) = q.member_numbered(partition) {
                                ctx.pipeline()
                                    .on_end_of_partition(&*consumer, tp, Instant::now());
                            }
                            Took::Item
                        }
                        Some(item) => match deliver(&consumer, &ctx, item) {
                            Ok(()) => Took::Item,
                            Err(Stop(f)) => {
                                fatal = f;
                                Took::Stop
                            }
                        },
                    }
                },
            )
        };
        if round.stopped {
            break;
        }
        if shared == 0 && round.idle() {
            ctx.pipeline().on_idle();
            // Every queue was empty when polled, and each unparks this thread when it turns
            // non-empty: an unpark since then makes this return at once.
            std::thread::park_timeout(wait);
        }
    }
    let fatal = {
        let mut pipeline = ctx.pipeline();
        pipeline.drain();
        pipeline.take_fatal().or(fatal)
    };
    // The queues hold the consumer: without them it is dropped below, and leaves the group.
    ctx.queues().clear();
    // Leaving the group runs the revoke callback; nothing is left to commit by then.
    consumer.unsubscribe();
    drop(consumer);
    tracing::info!("left the consumer group");
    match fatal {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Serves the shared queue without waiting: events (their callbacks), errors, and the records
/// of any partition that has no queue of its own. Returns how many things it served.
fn serve_shared(
    consumer: &BaseConsumer<SinkContext>,
    ctx: &SinkContext,
    shutdown: &Shutdown,
) -> Result<usize, Stop> {
    let mut served = 0;
    for _ in 0..SHARED_POLLS_PER_ROUND {
        if shutdown.is_triggered() {
            break;
        }
        let _ = ctx.take_served_event();
        match consumer.poll(Duration::ZERO) {
            Some(item) => deliver(consumer, ctx, item)?,
            None if ctx.take_served_event() => {}
            None => break,
        }
        served += 1;
    }
    Ok(served)
}

/// Hands a record (or a consumer error) from either kind of queue to the pipeline.
fn deliver(
    consumer: &BaseConsumer<SinkContext>,
    ctx: &SinkContext,
    item: KafkaResult<BorrowedMessage<'_>>,
) -> Result<(), Stop> {
    let mut pipeline = ctx.pipeline();
    match item {
        Ok(message) => {
            // librdkafka parses a record's headers when they are asked for (5% of the
            // consumer thread), so only a topic that uses them asks.
            let asked = if pipeline.needs_headers(message.topic()) {
                message.headers()
            } else {
                None
            };
            let headers = match asked {
                Some(h) => {
                    match crate::headers::read(h) {
                        Ok(headers) => headers,
                        Err(e) => {
                            // Never a record with headers missing: stop at it, as at any
                            // record that cannot be written.
                            return Err(Stop(Some(Fatal::Mapping {
                                tp: TopicPartition::new(message.topic(), message.partition()),
                                offset: message.offset(),
                                reason: e,
                            })));
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
        }
        // From the shared queue, which names no topic: the gap check covers what it would.
        Err(KafkaError::PartitionEOF(_)) => {}
        Err(e) => pipeline.on_consumer_error(consumer, &e),
    }
    if pipeline.has_fatal() {
        return Err(Stop(None));
    }
    Ok(())
}
