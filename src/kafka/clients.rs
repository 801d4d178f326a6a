//! Client configurations for every librdkafka client the sink creates: the consumer, the
//! dead-letter producer and the admin client of the CLI verbs. The sink's own settings first,
//! then the user's `kafka.properties`, with the properties the sink manages refused.

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaConfRes;

use super::budget::Prefetch;
use crate::config::{is_secret_key, GroupProtocol, KafkaSettings};

/// A client configuration: the sink's settings for this client, then the user's
/// `kafka.properties` (SASL, SSL, tuning), which win.
fn with_properties(kafka: &KafkaSettings, own: &[(&str, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.bootstrap_servers)
        .set("client.id", "kafka-pg-sink")
        // librdkafka's messages reach the sink's log (filtered there by RUST_LOG); without an
        // explicit level they could be dropped before, depending on how logging started.
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Info);
    for (key, value) in own {
        config.set(*key, value);
    }
    for (key, value) in &kafka.properties {
        config.set(key, value);
    }
    config
}

/// librdkafka's configuration errors quote the offending value. For a property whose name
/// looks like a secret, or an unknown name (a misspelt `sasl.pasword` no longer looks like
/// one), that value may be the secret, so it is replaced before the error reaches a log line
/// or `check`'s report.
pub(crate) fn redact_config_error(e: KafkaError) -> KafkaError {
    match e {
        KafkaError::ClientConfig(res, desc, key, value)
            if is_secret_key(&key) || res == RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN =>
        {
            let desc = if value.is_empty() {
                desc
            } else {
                desc.replace(&value, "***")
            };
            KafkaError::ClientConfig(res, desc, key, "***".into())
        }
        other => other,
    }
}

/// A producer for dead-letter topics: idempotent, acknowledged by all replicas.
pub fn dead_letter_producer_config(kafka: &KafkaSettings) -> ClientConfig {
    with_properties(
        kafka,
        &[
            ("enable.idempotence", "true".into()),
            ("acks", "all".into()),
        ],
    )
}

/// A client for metadata and watermarks only (`check`, `lag`): no group membership.
pub fn admin_config(kafka: &KafkaSettings) -> ClientConfig {
    with_properties(kafka, &[])
}

/// librdkafka settings for the sink's consumer: Kafka never stores a position for it.
pub fn client_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut own = vec![
        ("group.id", kafka.group_id.clone()),
        ("enable.auto.commit", "false".into()),
        ("enable.auto.offset.store", "false".into()),
        // The end of a partition's log, after its last record: a backlog's last batch is
        // sealed there instead of waiting `batch.max_wait` (`Pipeline::on_end_of_partition`).
        ("enable.partition.eof", "true".into()),
        // Prefetch follows `memory_budget`, not the partition count or the backlog: bounds per
        // queue, and at most `budget::MAX_QUEUES` queues whatever the partitions (`budget`).
        // When a queue is at its bound, fetch again soon rather than after the default 1 s,
        // which left the writers idle half of the time.
        ("fetch.queue.backoff.ms", "10".into()),
        // librdkafka keeps one fetch in flight per broker, and leaves out of it the partitions
        // whose queue is at the bound above. When only partitions with nothing new are left
        // (an idle topic or partition beside a backlog, or the partitions that finished
        // first), the broker holds that fetch for this long (default 500 ms) while the full
        // queues drain and wait for it. 100 ms: an idle topic beside the benchmark's backlog
        // took its drain from 3.6 to 6.2-6.8 s at the default, and the backlog alone drained
        // 11% faster; an idle consumer sends ten small fetches a second instead of two.
        ("fetch.wait.max.ms", "100".into()),
        // Pattern subscriptions notice new topics at a metadata refresh (default 5 min).
        ("topic.metadata.refresh.interval.ms", "30000".into()),
        // Watermarks and broker states for lag and readiness come with the statistics.
        (
            "statistics.interval.ms",
            kafka.watermark_interval.as_millis().max(100).to_string(),
        ),
        // Start positions are always explicit (stored offset, or earliest/latest for a new
        // partition); a position that falls out of range while running must never be moved
        // silently, so librdkafka reports it and the sink applies `offset_out_of_range`.
        ("auto.offset.reset", "error".into()),
    ];
    own.extend(Prefetch::of(kafka.memory_budget).properties());
    match kafka.group_protocol {
        // `auto` is resolved at start (`protocol::resolve`); a caller that did not resolve it
        // gets the protocol every broker speaks.
        GroupProtocol::Classic | GroupProtocol::Auto => {
            own.push(("group.protocol", "classic".into()));
            own.push(("partition.assignment.strategy", "cooperative-sticky".into()));
            own.push((
                "session.timeout.ms",
                kafka.session_timeout.as_millis().to_string(),
            ));
            if let Some(id) = &kafka.group_instance_id {
                own.push(("group.instance.id", id.clone()));
            }
        }
        GroupProtocol::Consumer => own.push(("group.protocol", "consumer".into())),
    }
    with_properties(kafka, &own)
}

#[cfg(test)]
mod tests {
    use super::*;

    use rdkafka::consumer::BaseConsumer;

    use crate::config::kafka_for_test as kafka;

    /// README's `[kafka]` section: what the sink sets on its consumer, per group protocol.
    #[test]
    fn the_consumer_gets_the_documented_settings_per_protocol() {
        let classic = client_config(&kafka("group_protocol = \"classic\""));
        for (key, value) in [
            ("group.id", "kafka-pg-sink"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("queued.max.messages.kbytes", "2048"),
            ("queued.min.messages", "4096"),
            ("max.partition.fetch.bytes", "131072"),
            ("fetch.max.bytes", "1048576"),
            ("fetch.queue.backoff.ms", "10"),
            ("fetch.wait.max.ms", "100"),
            ("topic.metadata.refresh.interval.ms", "30000"),
            ("auto.offset.reset", "error"),
            ("group.protocol", "classic"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "45000"),
        ] {
            assert_eq!(classic.get(key), Some(value), "{key}");
        }

        let consumer = client_config(&kafka(
            "group_protocol = \"consumer\"\nsession_timeout = \"10s\"",
        ));
        assert_eq!(consumer.get("group.protocol"), Some("consumer"));
        // KIP-848: the broker decides the session timeout and the assignment.
        assert_eq!(consumer.get("session.timeout.ms"), None);
        assert_eq!(consumer.get("partition.assignment.strategy"), None);
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(consumer.get("auto.offset.reset"), Some("error"));

        let classic = client_config(&kafka(
            "group_protocol = \"classic\"\nsession_timeout = \"10s\"",
        ));
        assert_eq!(classic.get("session.timeout.ms"), Some("10000"));
        assert_eq!(classic.get("group.instance.id"), None);
        let static_member = client_config(&kafka(
            "group_protocol = \"classic\"\ngroup_instance_id = \"sink-0\"",
        ));
        assert_eq!(static_member.get("group.instance.id"), Some("sink-0"));
    }

    /// `kafka.properties` wins over the sink's tuning (fetch settings), and passes other
    /// librdkafka options through verbatim.
    #[test]
    fn user_properties_override_the_fetch_settings() {
        let config = client_config(&kafka(
            "[kafka.properties]\n\"fetch.queue.backoff.ms\" = \"250\"\n\"fetch.wait.max.ms\" = \"500\"\n\"queued.max.messages.kbytes\" = \"8192\"\n\"max.partition.fetch.bytes\" = \"1048576\"\n\"queued.min.messages\" = \"20000\"\n\"fetch.max.bytes\" = \"4194304\"\n\"security.protocol\" = \"SASL_SSL\"",
        ));
        assert_eq!(config.get("fetch.queue.backoff.ms"), Some("250"));
        assert_eq!(config.get("fetch.wait.max.ms"), Some("500"));
        assert_eq!(config.get("queued.max.messages.kbytes"), Some("8192"));
        assert_eq!(config.get("max.partition.fetch.bytes"), Some("1048576"));
        assert_eq!(config.get("queued.min.messages"), Some("20000"));
        assert_eq!(config.get("fetch.max.bytes"), Some("4194304"));
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
    }

    /// A misspelt secret property is refused by librdkafka without its value being repeated;
    /// other values still show, since they help find the mistake.
    #[test]
    fn a_refused_secret_property_does_not_repeat_its_value() {
        let err = admin_config(&kafka("[kafka.properties]\n\"sasl.pasword\" = \"hunter2\""))
            .create::<BaseConsumer>()
            .map_err(redact_config_error)
            .err()
            .expect("librdkafka refuses an unknown property");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sasl.pasword"), "{shown}");

        let err = admin_config(&kafka(
            "[kafka.properties]\n\"security.protocol\" = \"bogus-protocol\"",
        ))
        .create::<BaseConsumer>()
        .map_err(redact_config_error)
        .err()
        .expect("librdkafka refuses an invalid value");
        assert!(err.to_string().contains("bogus-protocol"), "{err}");
    }
}
