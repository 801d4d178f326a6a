//! `kafka.group_protocol = "auto"` (the default): the KIP-848 `consumer` protocol when the
//! brokers offer it, else `classic`. Under `classic` a group of processes started together
//! hands the whole backlog to the first one and spreads it only after further rebalance
//! rounds; under `consumer` the broker assigns every member in one step.
//!
//! librdkafka does not expose the brokers' API versions, but its `feature` debug context
//! logs the ApiVersions answer line by line; a short-lived client without a group reads
//! them from there.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::clients::{admin_config, redact_config_error};
use crate::config::{GroupProtocol, KafkaSettings};
use crate::shutdown::Shutdown;

/// The API key of ConsumerGroupHeartbeat, the KIP-848 protocol's only group request.
const CONSUMER_GROUP_HEARTBEAT: &str = " (68) Versions";

/// How long one attempt waits for a broker to answer.
const ATTEMPT: Duration = Duration::from_secs(5);

/// What the probe client's log and error callbacks saw.
#[derive(Default)]
struct Seen {
    /// A broker's ApiVersions answer arrived (its list was logged).
    versions: bool,
    /// That list named ConsumerGroupHeartbeat.
    heartbeat: bool,
    /// An authentication or TLS failure: retrying cannot fix it.
    auth_failure: Option<String>,
    /// The latest other error, for the warning while the brokers do not answer.
    error: Option<String>,
}

/// Collects the ApiVersions lines instead of forwarding librdkafka's debug output.
#[derive(Default)]
struct ProbeContext {
    seen: Mutex<Seen>,
}

impl ProbeContext {
    fn with<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        // A poisoned lock only means a callback panicked mid-update; the flags stay usable.
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut seen)
    }
}

impl ClientContext for ProbeContext {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        if fac != "APIVERSION" {
            return;
        }
        self.with(|seen| {
            if message.contains("Broker API support") {
                seen.versions = true;
            } else if message.contains("ApiKey ") && message.contains(CONSUMER_GROUP_HEARTBEAT) {
                seen.heartbeat = true;
            }
        });
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.with(|seen| match error.rdkafka_error_code() {
            Some(
                RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::SSL,
            ) => seen.auth_failure = Some(reason.to_string()),
            _ => seen.error = Some(reason.to_string()),
        });
    }
}

impl ConsumerContext for ProbeContext {}

/// The protocol the consumer is created with: an explicit `classic` or `consumer` as
/// configured; `auto` asks the brokers, waiting for them as the consumer would (until
/// shutdown). When the brokers refuse the credentials the answer is `classic`: the consumer
/// then meets the same failure and stops as `kafka.auth_failure_timeout` says.
pub(crate) fn resolve(kafka: &KafkaSettings, shutdown: &Shutdown) -> GroupProtocol {
    if kafka.group_protocol != GroupProtocol::Auto {
        return kafka.group_protocol;
    }
    let started = Instant::now();
    loop {
        match probe(kafka) {
            Ok(Some(offered)) => {
                let protocol = if offered {
                    GroupProtocol::Consumer
                } else {
                    GroupProtocol::Classic
                };
                tracing::info!(
                    protocol = ?protocol,
                    consumer_group_heartbeat = offered,
                    "group_protocol auto: the brokers {} the KIP-848 consumer protocol",
                    if offered { "offer" } else { "do not offer" }
                );
                return protocol;
            }
            Ok(None) if shutdown.is_triggered() => return GroupProtocol::Classic,
            Ok(None) => tracing::warn!(
                waited = ?started.elapsed(),
                "group_protocol auto: no broker answered yet; asking again"
            ),
            Err(reason) => {
                tracing::warn!(
                    reason = %reason,
                    "group_protocol auto: cannot ask the brokers; using classic"
                );
                return GroupProtocol::Classic;
            }
        }
    }
}

/// One attempt: `Some(offered)` once a broker listed its APIs, `None` when none answered
/// within `ATTEMPT`, `Err` when asking cannot succeed (credentials, configuration).
fn probe(kafka: &KafkaSettings) -> Result<Option<bool>, String> {
    let mut config = admin_config(kafka);
    // After the user's properties: their own `debug` setting must not hide the list.
    config
        .set("debug", "feature")
        .set_log_level(RDKafkaLogLevel::Debug);
    let client: BaseConsumer<ProbeContext> = config
        .create_with_context(ProbeContext::default())
        .map_err(|e| redact_config_error(e).to_string())?;
    let answered = client.fetch_metadata(None, ATTEMPT);
    // rust-rdkafka queues librdkafka's log lines and errors on the main queue (`log.queue`),
    // which a client without a group polls: the ApiVersions lines, logged before the metadata
    // answer was read, are all there by now.
    let _ = client.poll(Duration::from_millis(100));
    let context = client.context();
    context.with(|seen| {
        if let Some(reason) = seen.auth_failure.take() {
            return Err(reason);
        }
        if seen.versions {
            return Ok(Some(seen.heartbeat));
        }
        match answered {
            // A broker that answered metadata but sent no ApiVersions list predates them
            // (or `api.version.request=false`): it has no KIP-848 either.
            Ok(_) => Ok(Some(false)),
            Err(e) => {
                if let Some(reason) = seen.error.take() {
                    tracing::debug!(reason = %reason, error = %e, "group_protocol probe");
                }
                Ok(None)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines librdkafka 2.12's `feature` debug context writes for an ApiVersions answer
    /// (rdkafka_request.c) decide the protocol; other lines and facilities do not.
    #[test]
    fn the_api_versions_lines_decide() {
        let context = ProbeContext::default();
        let log = |fac: &str, line: &str| context.log(RDKafkaLogLevel::Debug, fac, line);
        log(
            "APIVERSION",
            "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Broker API support:",
        );
        log("APIVERSION", "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap:   ApiKey JoinGroup (11) Versions 0..9");
        log(
            "FEATURE",
            "ApiKey ConsumerGroupHeartbeat (68) Versions 0..1",
        );
        context.with(|seen| assert!(seen.versions && !seen.heartbeat));
        log("APIVERSION", "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap:   ApiKey ConsumerGroupHeartbeat (68) Versions 0..1");
        context.with(|seen| assert!(seen.heartbeat));
    }
}
