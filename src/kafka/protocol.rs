//! `kafka.group_protocol = "auto"` (the default): the KIP-848 `consumer` protocol when the
//! brokers offer it, else `classic`. Under `classic` processes started together hand the
//! whole backlog to the first one to join, and those joining after its join completed sit
//! through an empty rebalance round first; under `consumer` the broker gives each member its
//! share as the owner revokes it, one heartbeat later.
//!
//! librdkafka does not expose the brokers' API versions, but its `feature` debug context
//! logs the ApiVersions answer line by line; a short-lived client without a group reads
//! them from there. Kafka 4 lists ConsumerGroupHeartbeat even when its coordinator has the
//! protocol off, so a listed API is confirmed by one heartbeat in a group of its own.

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

/// librdkafka's `cgrp` debug line for a heartbeat answered without an error.
const HEARTBEAT_ANSWERED: &str = "ConsumerGroupHeartbeat response received for member";

/// How long one attempt waits for a broker to answer, before it warns and tries again.
const ATTEMPT: Duration = Duration::from_secs(5);

/// One metadata request of an attempt.
const STEP: Duration = Duration::from_millis(250);

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
    /// A heartbeat of the probe's member was answered without an error: the protocol works.
    accepted: bool,
    /// The broker refused ConsumerGroupHeartbeat although it lists it.
    refused: Option<String>,
    /// The probe's group is not the sink's to use (ACLs): no verdict, and no point waiting.
    unauthorized: Option<String>,
}

/// Collects the ApiVersions and heartbeat lines instead of forwarding librdkafka's debug
/// output.
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
        self.with(|seen| match fac {
            "APIVERSION" if message.contains("Broker API support") => seen.versions = true,
            "APIVERSION"
                if message.contains("ApiKey ") && message.contains(CONSUMER_GROUP_HEARTBEAT) =>
            {
                seen.heartbeat = true
            }
            // The `cgrp` debug line of an answered heartbeat (rdkafka_cgrp.c), written only
            // once the answer carried no error.
            "HEARTBEAT" if message.contains(HEARTBEAT_ANSWERED) => seen.accepted = true,
            _ => {}
        });
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.with(|seen| match error.rdkafka_error_code() {
            Some(
                RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::SSL,
            ) => seen.auth_failure = Some(reason.to_string()),
            Some(RDKafkaErrorCode::UnsupportedVersion | RDKafkaErrorCode::UnsupportedFeature) => {
                seen.refused = Some(reason.to_string())
            }
            Some(
                RDKafkaErrorCode::GroupAuthorizationFailed
                | RDKafkaErrorCode::TopicAuthorizationFailed,
            ) => seen.unauthorized = Some(reason.to_string()),
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
    if let Some(id) = &kafka.group_instance_id {
        tracing::info!(
            protocol = ?GroupProtocol::Classic,
            group_instance_id = %id,
            "group_protocol auto: static membership is classic's (librdkafka refuses a process \
             restarted after a crash under the same id with the consumer protocol)"
        );
        return GroupProtocol::Classic;
    }
    if let Some(property) = classic_only_property(kafka) {
        tracing::info!(
            protocol = ?GroupProtocol::Classic,
            property,
            "group_protocol auto: kafka.properties sets a property only the classic protocol takes"
        );
        return GroupProtocol::Classic;
    }
    let started = Instant::now();
    loop {
        match probe(kafka) {
            Ok(Some(listed)) => {
                if let Some(assignor) = listed.then(|| running_classic_group(kafka)).flatten() {
                    tracing::info!(
                        protocol = ?GroupProtocol::Classic,
                        group = %kafka.group_id,
                        assignor,
                        "group_protocol auto: the group runs the classic protocol; joining it \
                         as it is (Kafka cannot move it to KIP-848 while members remain)"
                    );
                    return GroupProtocol::Classic;
                }
                // Kafka 4 lists the API even when `group.coordinator.rebalance.protocols`
                // leaves `consumer` out, and then refuses the heartbeat as a fatal error.
                let offered = listed && heartbeat_accepted(kafka);
                let protocol = if offered {
                    GroupProtocol::Consumer
                } else {
                    GroupProtocol::Classic
                };
                tracing::info!(
                    protocol = ?protocol,
                    consumer_group_heartbeat = listed,
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

/// librdkafka refuses these with the `consumer` protocol (the broker decides them there): a
/// configuration that sets one was written for `classic` and keeps it under `auto`.
const CLASSIC_ONLY: &[&str] = &[
    "heartbeat.interval.ms",
    "session.timeout.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
];

/// The first property of `kafka.properties` that only the classic protocol takes.
fn classic_only_property(kafka: &KafkaSettings) -> Option<&'static str> {
    CLASSIC_ONLY
        .iter()
        .copied()
        .find(|p| kafka.properties.contains_key(*p))
}

/// One attempt: `Some(offered)` once a broker listed its APIs, `None` when none answered
/// within `ATTEMPT`, `Err` when asking cannot succeed (credentials, configuration). Short
/// metadata requests, so an authentication failure ends it at once rather than after
/// `ATTEMPT` (the consumer reports it, and `/ready` with it).
fn probe(kafka: &KafkaSettings) -> Result<Option<bool>, String> {
    let mut config = admin_config(kafka);
    // After the user's properties: their own `debug` setting must not hide the list.
    config
        .set("debug", "feature")
        .set_log_level(RDKafkaLogLevel::Debug);
    let client: BaseConsumer<ProbeContext> = config
        .create_with_context(ProbeContext::default())
        .map_err(|e| redact_config_error(e).to_string())?;
    let deadline = Instant::now() + ATTEMPT;
    loop {
        let answered = client.fetch_metadata(None, STEP).is_ok();
        // rust-rdkafka queues librdkafka's log lines and errors on the main queue
        // (`log.queue`), which a client without a group polls. The ApiVersions lines are
        // logged one after another as the answer is read: once the first is here, the rest
        // are within this poll's wait.
        let _ = client.poll(Duration::from_millis(50));
        let verdict = client.context().with(|seen| {
            if let Some(reason) = seen.auth_failure.take() {
                return Some(Err(reason));
            }
            if seen.versions {
                return Some(Ok(Some(seen.heartbeat)));
            }
            // A broker that answered metadata but sent no ApiVersions list predates them
            // (or `api.version.request=false`): it has no KIP-848 either.
            if answered {
                return Some(Ok(Some(false)));
            }
            if let Some(reason) = seen.error.take() {
                tracing::debug!(reason = %reason, "group_protocol probe");
            }
            None
        });
        if let Some(verdict) = verdict {
            return verdict;
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
    }
}

/// The assignor of the sink's group when it is a classic group with members. A process
/// joining it with the `consumer` protocol would get nothing: Kafka upgrades a classic group
/// online only when no member's assignor keeps user data, and librdkafka's
/// cooperative-sticky does ("Cannot upgrade classic group … userData from a custom assignor
/// would be lost"), so a rolling update onto `auto` would stall on its first new process.
/// An empty group, a KIP-848 group or no answer: `None`.
fn running_classic_group(kafka: &KafkaSettings) -> Option<String> {
    let client: BaseConsumer = admin_config(kafka).create().ok()?;
    let groups = match client.fetch_group_list(Some(&kafka.group_id), ATTEMPT) {
        Ok(groups) => groups,
        Err(e) => {
            tracing::debug!(error = %e, "group_protocol auto: cannot describe the group");
            return None;
        }
    };
    let group = groups
        .groups()
        .iter()
        .find(|g| g.name() == kafka.group_id)?;
    tracing::debug!(
        state = group.state(),
        protocol_type = group.protocol_type(),
        protocol = group.protocol(),
        members = group.members().len(),
        "group_protocol auto: the group as described"
    );
    // The assignor is empty while the group rebalances; the members say it is running.
    // Kafka describes only classic groups this way: a KIP-848 group is refused.
    (!group.members().is_empty()).then(|| match group.protocol() {
        "" => format!("(rebalancing: {})", group.state()),
        assignor => assignor.to_string(),
    })
}

/// How long the heartbeat probe waits for its first heartbeat's answer.
const HEARTBEAT_WAIT: Duration = Duration::from_secs(10);

/// Whether the brokers accept a KIP-848 heartbeat: one member of a group of its own
/// (`<group_id>.protocol-probe`, so the sink's group never sees it), subscribed to a topic
/// that does not exist, waits for its first heartbeat's answer. A refusal means `classic`;
/// no verdict (the probe group not authorized, no answer in time) trusts the ApiVersions list.
fn heartbeat_accepted(kafka: &KafkaSettings) -> bool {
    let mut config = admin_config(kafka);
    config
        .set("group.id", format!("{}.protocol-probe", kafka.group_id))
        .set("group.protocol", "consumer")
        .set("enable.auto.commit", "false")
        .set("debug", "cgrp")
        .set_log_level(RDKafkaLogLevel::Debug);
    let client: BaseConsumer<ProbeContext> = match config
        .create_with_context(ProbeContext::default())
        .map_err(|e| redact_config_error(e).to_string())
    {
        Ok(client) => client,
        Err(reason) => {
            tracing::warn!(%reason, "group_protocol auto: cannot create the heartbeat probe");
            return true;
        }
    };
    if let Err(e) = client.subscribe(&["kafka-pg-sink.protocol-probe.no-such-topic"]) {
        tracing::warn!(error = %e, "group_protocol auto: the heartbeat probe cannot subscribe");
        return true;
    }
    let deadline = Instant::now() + HEARTBEAT_WAIT;
    let verdict = loop {
        let _ = client.poll(Duration::from_millis(100));
        // Credentials the brokers refuse count as "not authorized" here: the consumer meets
        // the same failure at once and reports it (`/ready`, `kafka.auth_failure_timeout`).
        let (accepted, refused, unauthorized) = client.context().with(|seen| {
            (
                seen.accepted,
                seen.refused.take(),
                seen.unauthorized
                    .take()
                    .or_else(|| seen.auth_failure.take()),
            )
        });
        if let Some(reason) = refused {
            tracing::warn!(
                %reason,
                "group_protocol auto: the brokers list ConsumerGroupHeartbeat but refuse it \
                 (is `consumer` missing from group.coordinator.rebalance.protocols?)"
            );
            break false;
        }
        if accepted {
            break true;
        }
        if unauthorized.is_some() || Instant::now() >= deadline {
            let reason = unauthorized.or_else(|| client.context().with(|seen| seen.error.take()));
            tracing::warn!(
                reason = reason.as_deref().unwrap_or("no answer"),
                "group_protocol auto: the heartbeat probe got no verdict; going by the \
                 brokers' API list"
            );
            break true;
        }
    };
    client.unsubscribe();
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::kafka_for_test as kafka;

    /// An explicit protocol is used as written, and `auto` with a property only the classic
    /// protocol takes, or with a `group_instance_id`, keeps classic, in every case without asking a broker (none listens at
    /// the configured address).
    #[test]
    fn explicit_protocols_and_classic_only_properties_need_no_broker() {
        let shutdown = Shutdown::new();
        for (extra, expected) in [
            ("group_protocol = \"classic\"", GroupProtocol::Classic),
            ("group_protocol = \"consumer\"", GroupProtocol::Consumer),
            (
                "[kafka.properties]\n\"heartbeat.interval.ms\" = \"500\"",
                GroupProtocol::Classic,
            ),
            (
                "group_protocol = \"auto\"\n[kafka.properties]\n\"partition.assignment.strategy\" = \"range\"",
                GroupProtocol::Classic,
            ),
            // Static membership is classic's.
            ("group_instance_id = \"sink-0\"", GroupProtocol::Classic),
        ] {
            assert_eq!(resolve(&kafka(extra), &shutdown), expected, "{extra}");
        }
        assert_eq!(classic_only_property(&kafka("")), None);
    }

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
        context.with(|seen| assert!(seen.heartbeat && !seen.accepted));
        log("HEARTBEAT", "[thrd:main]: ConsumerGroupHeartbeat response received for member id \"abc\" with epoch 1");
        context.with(|seen| assert!(seen.accepted));
    }
}
