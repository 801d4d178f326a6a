//! The rebalance callback: claim in PostgreSQL, then assign at the stored offsets in one call.
//!
//! librdkafka runs this on the thread that polls, inside `poll`, with a mutable partition list:
//! the one place where start offsets can be set before the first fetch. Seeking after an
//! assign races the fetcher (spurious resets, "Erroneous state"), so start positions are only
//! ever given here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::queues::PartitionQueues;
use crate::health::Health;
use crate::offsets::TopicPartition;
use crate::pipeline::{PartitionControl, Pipeline, SeekFailure};
use crate::shutdown::Shutdown;
use crate::watermarks::Watermarks;

/// The consumer's context: owns the pipeline so the callback and the poll loop share it.
pub struct SinkContext {
    pub pipeline: Mutex<Pipeline>,
    /// The queues the assigned partitions' records arrive in: placed in the rebalance
    /// callback, served in turn by the poll loop (`turns`).
    queues: Mutex<PartitionQueues>,
    /// Set by every callback the shared queue's events run, so the poll loop can tell "served
    /// an event" from "empty" (rdkafka's `poll` answers `None` to both).
    served_event: AtomicBool,
    shutdown: Shutdown,
    watermarks: Arc<Watermarks>,
    health: Arc<Health>,
}

impl SinkContext {
    /// The mutex is there because librdkafka calls the context through `&self`; only the
    /// polling thread ever takes it.
    pub fn new(
        pipeline: Pipeline,
        shutdown: Shutdown,
        watermarks: Arc<Watermarks>,
        health: Arc<Health>,
        queue_limit: usize,
    ) -> Self {
        Self {
            pipeline: Mutex::new(pipeline),
            queues: Mutex::new(PartitionQueues::new(queue_limit)),
            served_event: AtomicBool::new(false),
            shutdown,
            watermarks,
            health,
        }
    }

    /// The partitions' queues. Taken by the poll loop for a round and by the rebalance
    /// callback, which runs inside the shared queue's poll: never while a round holds it.
    pub(crate) fn queues(&self) -> std::sync::MutexGuard<'_, PartitionQueues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an event callback ran since the last call (and forgets it).
    pub(crate) fn take_served_event(&self) -> bool {
        self.served_event.swap(false, Ordering::Relaxed)
    }

    /// For the poll loop: how long authentication with the brokers has been failing.
    pub fn kafka_auth_failure(&self) -> Option<(Duration, String)> {
        self.health.kafka_auth_failure()
    }

    /// The pipeline; a panic elsewhere must not hide the state from the shutdown path.
    pub fn pipeline(&self) -> std::sync::MutexGuard<'_, Pipeline> {
        self.pipeline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for SinkContext {
    /// Through tracing at matching levels, so `RUST_LOG` and the JSON format cover librdkafka too.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel::*;
        match level {
            Emerg | Alert | Critical | Error => {
                tracing::error!(target: "librdkafka", fac, "{message}")
            }
            Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
            Notice | Info => tracing::info!(target: "librdkafka", fac, "{message}"),
            Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
        }
    }

    /// Authentication failures are remembered: retrying cannot fix a wrong password, so the
    /// poll loop stops the sink once they have lasted `kafka.auth_failure_timeout`. A failed
    /// TLS handshake (librdkafka's `SSL` code, e.g. a broker certificate the configured CA did
    /// not sign) is one too: retrying cannot fix a certificate either.
    ///
    /// The end of a partition is no error: rust-rdkafka passes every consumer event here
    /// before the queue returns it, and `enable.partition.eof` makes one each time a
    /// partition's last record is taken, which the poll loop handles.
    fn error(&self, error: KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode;
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::PartitionEOF) => {
                tracing::trace!(target: "librdkafka", "{reason}");
            }
            Some(
                RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::SSL,
            ) => {
                tracing::error!(target: "librdkafka", error = %error, "{reason}");
                self.health.set_kafka_auth_failed(reason);
            }
            _ => tracing::warn!(target: "librdkafka", error = %error, "{reason}"),
        }
    }

    /// librdkafka's statistics carry each fetched partition's watermarks and the brokers'
    /// states: lag and readiness without extra requests.
    fn stats(&self, statistics: rdkafka::statistics::Statistics) {
        self.served_event.store(true, Ordering::Relaxed);
        self.watermarks.observe(&statistics, &self.health);
    }
}

/// Owned copies: the list belongs to librdkafka and lives only as long as the callback.
fn to_vec(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

/// `None` adds a partition without an offset, as pause and resume take them.
fn to_tpl<'a>(
    items: impl IntoIterator<Item = (&'a TopicPartition, Option<Offset>)>,
) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (tp, offset) in items {
        match offset {
            Some(offset) => {
                let _ = tpl.add_partition_offset(&tp.topic, tp.partition, offset);
            }
            None => {
                tpl.add_partition(&tp.topic, tp.partition);
            }
        }
    }
    tpl
}

impl ConsumerContext for SinkContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        self.served_event.store(true, Ordering::Relaxed);
        // Cooperative-sticky and the KIP-848 `consumer` protocol both report cooperative and
        // hand over deltas; plain assign fails there.
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let tps = to_vec(tpl);
                let starts = self
                    .pipeline()
                    .on_assign(consumer, &tps, &|| self.shutdown.is_triggered());
                tracing::info!(
                    partitions = ?starts.iter().map(|(tp, o)| format!("{tp}@{}", show_offset(*o))).collect::<Vec<_>>(),
                    "assigned"
                );
                let assignment = to_tpl(starts.iter().map(|(tp, o)| (tp, Some(*o))));
                // Before the assign, so no record of these partitions reaches the shared
                // queue (`queues`).
                let assigned: Vec<TopicPartition> =
                    starts.iter().map(|(tp, _)| tp.clone()).collect();
                self.queues().place(&assigned);
                // Exactly one assign call, even when the list is empty.
                let result = if cooperative {
                    consumer.incremental_assign(&assignment)
                } else {
                    consumer.assign(&assignment)
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "assign failed");
                }
                // librdkafka keeps an application pause across revoke and re-assignment; a
                // partition paused during an earlier rewind must not come back stalled.
                if !starts.is_empty() {
                    if let Err(e) = Consumer::resume(consumer, &assignment) {
                        tracing::warn!(error = %e, "resume after assign failed");
                    }
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let tps = to_vec(tpl);
                let lost = consumer.assignment_lost();
                self.pipeline().on_revoke(&tps);
                tracing::info!(partitions = ?tps, lost, "revoked");
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "unassign failed");
                }
                self.queues().remove(&tps);
            }
            other => {
                tracing::error!(error = ?other, "rebalance error: giving up every partition");
                let owned = self.pipeline().owned();
                self.pipeline().on_revoke(&owned);
                let _ = consumer.unassign();
                self.queues().clear();
            }
        }
    }

    /// Commit results (`kafka.mirror_commits`) are events on the shared queue like the others.
    fn commit_callback(
        &self,
        _result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        self.served_event.store(true, Ordering::Relaxed);
    }
}

/// `earliest` and `latest`, the configuration's words, rather than rdkafka's `Beginning`/`End`.
fn show_offset(o: Offset) -> String {
    match o {
        Offset::Offset(n) => n.to_string(),
        Offset::Beginning => "earliest".into(),
        Offset::End => "latest".into(),
        other => format!("{other:?}"),
    }
}

impl PartitionControl for BaseConsumer<SinkContext> {
    fn restart_at(&self, tp: &TopicPartition, offset: Offset) -> Result<(), String> {
        let one = to_tpl([(tp, Some(offset))]);
        if matches!(self.rebalance_protocol(), RebalanceProtocol::Cooperative) {
            self.incremental_unassign(&one).map_err(|e| e.to_string())?;
            self.incremental_assign(&one).map_err(|e| e.to_string())
        } else {
            // Eager: the whole assignment again, this partition at its new offset.
            let mut all = self.assignment().map_err(|e| e.to_string())?;
            all.set_partition_offset(&tp.topic, tp.partition, offset)
                .map_err(|e| e.to_string())?;
            self.assign(&all).map_err(|e| e.to_string())
        }
    }

    fn commit_to_kafka(&self, positions: &[(TopicPartition, i64)]) {
        if positions.is_empty() {
            return;
        }
        let tpl = to_tpl(
            positions
                .iter()
                .map(|(tp, next)| (tp, Some(Offset::Offset(*next)))),
        );
        // Advisory: a failure (say, during a rebalance) is logged and the next commit catches up.
        if let Err(e) = self.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
            tracing::debug!(error = %e, "mirroring positions to the Kafka group failed");
        }
    }

    fn watermarks(&self, tp: &TopicPartition) -> Result<(i64, i64), String> {
        self.fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(10))
            .map_err(|e| e.to_string())
    }

    fn positions(&self, tps: &[TopicPartition]) -> Vec<Option<i64>> {
        // One call for the whole assignment: it reads librdkafka's local state, no request.
        let all = match Consumer::position(self) {
            Ok(all) => all,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read consumer positions");
                return vec![None; tps.len()];
            }
        };
        tps.iter()
            .map(|tp| {
                all.find_partition(&tp.topic, tp.partition)
                    .and_then(|e| match e.offset() {
                        Offset::Offset(n) => Some(n),
                        _ => None,
                    })
            })
            .collect()
    }

    fn pause(&self, tps: &[TopicPartition]) {
        if tps.is_empty() {
            return;
        }
        if let Err(e) = Consumer::pause(self, &to_tpl(tps.iter().map(|tp| (tp, None)))) {
            tracing::warn!(error = %e, "pause failed");
        }
    }

    fn resume(&self, tps: &[TopicPartition]) {
        if tps.is_empty() {
            return;
        }
        if let Err(e) = Consumer::resume(self, &to_tpl(tps.iter().map(|tp| (tp, None)))) {
            tracing::warn!(error = %e, "resume failed");
        }
    }

    fn seek(&self, targets: &[(TopicPartition, Offset)]) -> Vec<(TopicPartition, SeekFailure)> {
        if targets.is_empty() {
            return Vec::new();
        }
        let tpl = to_tpl(targets.iter().map(|(tp, o)| (tp, Some(*o))));
        match self.seek_partitions(tpl, Duration::from_secs(10)) {
            // `Ok` overall says nothing about each partition: check every one.
            Ok(result) => result
                .elements()
                .iter()
                .filter_map(|e| {
                    e.error().err().map(|err| {
                        (
                            TopicPartition::new(e.topic(), e.partition()),
                            seek_failure(&err),
                        )
                    })
                })
                .collect(),
            Err(e) => targets
                .iter()
                .map(|(tp, _)| (tp.clone(), seek_failure(&e)))
                .collect(),
        }
    }
}

/// Sorts a seek error by librdkafka's code: a stopped fetcher has its own remedy.
fn seek_failure(error: &KafkaError) -> SeekFailure {
    use rdkafka::types::RDKafkaErrorCode;
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::State) => SeekFailure::FetcherStopped(error.to_string()),
        _ => SeekFailure::Other(error.to_string()),
    }
}
