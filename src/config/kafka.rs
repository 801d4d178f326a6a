//! The Kafka consumer's settings: where the brokers are, which group, where a partition with no
//! (or an unusable) stored position starts, and librdkafka properties passed through.

use std::collections::BTreeMap;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::is_secret_key;

/// Kafka consumer settings; `properties` passes librdkafka options through verbatim.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    pub bootstrap_servers: String,
    #[serde(default = "default_group_id")]
    pub group_id: String,
    #[serde(default)]
    pub group_protocol: GroupProtocol,
    /// Static membership (KIP-345): a process restarted under the same id gets its partitions
    /// back at once instead of after the dead process's session timeout. Unique per process
    /// and stable across its restarts (a StatefulSet's pod name); `auto` then picks `classic`.
    #[serde(default)]
    pub group_instance_id: Option<String>,
    /// Where a partition with no stored offset starts.
    #[serde(default)]
    pub auto_offset_reset: ResetPolicy,
    /// A stored offset outside the partition's range (retention deleted the records, or the
    /// topic was recreated): stop (`fail`, the default), or move to `earliest` or `latest`
    /// and record it.
    #[serde(default = "default_out_of_range")]
    pub offset_out_of_range: ResetPolicy,
    /// Classic protocol only; the `consumer` protocol takes it from the broker.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// librdkafka properties (SASL, SSL, fetch sizes, …), applied after the sink's own.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// How often assigned partitions' watermarks are observed and stored (`kafka_watermarks`).
    #[serde(default = "default_watermark_interval", with = "humantime_serde")]
    pub watermark_interval: Duration,
    /// Also commit each position to the Kafka group after PostgreSQL commits it, for Kafka's
    /// own lag tools. Advisory only: PostgreSQL stays the source of truth.
    #[serde(default)]
    pub mirror_commits: bool,
    /// How long authentication with the brokers may keep failing before `run` gives up with
    /// exit 1: a wrong password or certificate is not something retrying fixes.
    #[serde(default = "default_auth_failure_timeout", with = "humantime_serde")]
    pub auth_failure_timeout: Duration,
    /// The resident memory the process is sized to: what it does not keep back for itself is
    /// prefetch, shared by the assigned partitions whatever their number (README, Sizing).
    #[serde(default = "default_memory_budget")]
    pub memory_budget: ByteSize,
}

/// The smallest `memory_budget` accepted: the part the process keeps back for itself
/// (`kafka::budget::RESERVED`) and some prefetch for each queue.
pub const MIN_MEMORY_BUDGET: ByteSize = ByteSize::mib(96);

impl KafkaSettings {
    /// librdkafka's `max.poll.interval.ms` as configured (its default is 300 s): the longest
    /// the consumer thread may stay away from `poll`, rebalance callbacks included.
    pub fn max_poll_interval(&self) -> Duration {
        self.properties
            .get("max.poll.interval.ms")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(300), Duration::from_millis)
    }
}

impl std::fmt::Debug for KafkaSettings {
    /// Property values that look like secrets are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_key(k) { "***" } else { v.as_str() },
                )
            })
            .collect();
        f.debug_struct("KafkaSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("group_id", &self.group_id)
            .field("group_protocol", &self.group_protocol)
            .field("group_instance_id", &self.group_instance_id)
            .field("auto_offset_reset", &self.auto_offset_reset)
            .field("offset_out_of_range", &self.offset_out_of_range)
            .field("session_timeout", &self.session_timeout)
            .field("properties", &properties)
            .field("watermark_interval", &self.watermark_interval)
            .field("mirror_commits", &self.mirror_commits)
            .field("auth_failure_timeout", &self.auth_failure_timeout)
            .field("memory_budget", &self.memory_budget)
            .finish()
    }
}

/// Kafka's own rule for an instance id (`JoinGroupRequest.validateGroupInstanceId`): refused
/// here, at load, rather than by the broker after the process has started. With the `consumer`
/// protocol librdkafka refuses a process restarted after a `kill -9` under the same id
/// (`UnreleasedInstanceId`, measured with librdkafka 2.12 and Kafka 4.1: it was given no
/// partition at all), so static membership is classic's.
pub(super) fn check_group_instance_id(id: &str, protocol: GroupProtocol) -> Result<(), String> {
    if id.is_empty() || id.len() > 249 {
        return Err("must be 1 to 249 characters".into());
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{c:?} is not allowed: Kafka takes ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    if protocol == GroupProtocol::Consumer {
        return Err(
            "static membership needs group_protocol \"classic\" (or \"auto\", which \
                    then picks it): with \"consumer\", librdkafka refuses a process restarted \
                    after a crash under the same id"
                .into(),
        );
    }
    Ok(())
}

/// The Kafka group protocol: `classic` (cooperative-sticky), KIP-848 `consumer`, or `auto`
/// (the default): `consumer` when the brokers offer it, asked at start
/// (`kafka::protocol::resolve`), because a group started together spreads in one step there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupProtocol {
    #[default]
    Auto,
    Classic,
    Consumer,
}

/// What to do with a partition that has no offset stored in PostgreSQL yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetPolicy {
    #[default]
    Earliest,
    Latest,
    /// Refuse to start the partition: an operator must set its offset first.
    Fail,
}

// Serde defaults; README's settings tables list each with its meaning.

/// Also the `consumer_group` key of `kafka_offsets`: another name has no stored positions.
fn default_group_id() -> String {
    "kafka-pg-sink".into()
}
/// Skipping or re-reading records is a person's decision: stop and say how to continue.
fn default_out_of_range() -> ResetPolicy {
    ResetPolicy::Fail
}
/// librdkafka's own default; only the classic protocol uses it.
fn default_session_timeout() -> Duration {
    Duration::from_secs(45)
}
/// Authentication that keeps failing this long is a wrong credential, not a broker restart.
fn default_auth_failure_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Half the Helm chart's default pod limit of 512 MiB: batches in flight and PostgreSQL's
/// replies come on top (README, Sizing).
fn default_memory_budget() -> ByteSize {
    ByteSize::mib(256)
}
/// Also librdkafka's statistics interval: `kafka_lag` and `/ready`'s view of Kafka are about
/// this stale.
fn default_watermark_interval() -> Duration {
    Duration::from_secs(5)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{write, MINIMAL};
    use super::super::{Overrides, Settings};
    use super::*;

    /// README's `[kafka]` table: `memory_budget` is 256 MiB unless set, takes units, and a
    /// budget below 96 MiB is refused at load, naming the minimum.
    #[test]
    fn the_memory_budget_defaults_to_256_mib_and_refuses_less_than_96() {
        let s = Settings::load(Some(write(MINIMAL).path()), &Overrides::default()).unwrap();
        assert_eq!(s.kafka.memory_budget, ByteSize::mib(256));
        let set = |budget: &str| {
            let toml =
                MINIMAL.replace("[kafka]\n", &format!("[kafka]\nmemory_budget = {budget}\n"));
            Settings::load(Some(write(&toml).path()), &Overrides::default())
        };
        assert_eq!(
            set("\"1GiB\"").unwrap().kafka.memory_budget,
            ByteSize::gib(1)
        );
        assert_eq!(
            set("\"96 MiB\"").unwrap().kafka.memory_budget,
            ByteSize::mib(96)
        );
        let err = set("\"64MiB\"").expect_err("64 MiB is refused").to_string();
        assert!(
            err.contains("memory_budget") && err.contains("96.0 MiB"),
            "{err}"
        );
    }

    /// README's `[kafka]` table: an instance id Kafka would refuse, or one with the `consumer`
    /// protocol, is refused at load, naming the setting; a good one with `auto` or `classic`
    /// loads.
    #[test]
    fn a_group_instance_id_is_checked_at_load() {
        let set = |extra: &str| {
            let toml = MINIMAL.replace("[kafka]\n", &format!("[kafka]\n{extra}\n"));
            Settings::load(Some(write(&toml).path()), &Overrides::default())
        };
        let ok = set("group_instance_id = \"sink-0.eu_1\"").unwrap();
        assert_eq!(ok.kafka.group_instance_id.as_deref(), Some("sink-0.eu_1"));
        set("group_instance_id = \"sink-0\"\ngroup_protocol = \"classic\"").unwrap();
        assert_eq!(set("").unwrap().kafka.group_instance_id, None);
        for (extra, says) in [
            ("group_instance_id = \"\"", "1 to 249"),
            ("group_instance_id = \"pod 0\"", "' ' is not allowed"),
            ("group_instance_id = \"pod/0\"", "'/' is not allowed"),
            (
                "group_instance_id = \"sink-0\"\ngroup_protocol = \"consumer\"",
                "needs group_protocol \"classic\"",
            ),
        ] {
            let err = set(extra).expect_err(extra).to_string();
            assert!(
                err.contains("kafka.group_instance_id") && err.contains(says),
                "{extra}: {err}"
            );
        }
        let long = format!("group_instance_id = \"{}\"", "a".repeat(250));
        assert!(set(&long).is_err());
    }

    /// Every name README lists as secret-looking is hidden in `Debug`; other values show.
    #[test]
    fn every_secret_looking_property_is_redacted() {
        let secrets = [
            "sasl.password",
            "ssl.key.password",
            "sasl.oauthbearer.client.secret",
            "some.token",
            "sasl.jaas.config",
            "ssl.keystore.private",
            "ssl.key.pem",
            "SSL.KEY.PASSWORD",
        ];
        let mut toml =
            format!("{MINIMAL}\n[kafka.properties]\n\"client.rack\" = \"rack-visible\"\n");
        for (i, key) in secrets.iter().enumerate() {
            toml.push_str(&format!("\"{key}\" = \"hidden-{i}\"\n"));
        }
        let file = write(&toml);
        let s = Settings::load(Some(file.path()), &Overrides::default()).unwrap();
        let debug = format!("{s:?}");
        for (i, key) in secrets.iter().enumerate() {
            assert!(is_secret_key(key), "{key}");
            assert!(!debug.contains(&format!("hidden-{i}")), "{key}: {debug}");
            assert!(
                debug.contains(&format!("\"{key}\": \"***\"")),
                "{key}: {debug}"
            );
        }
        assert!(debug.contains("rack-visible"), "{debug}");
        assert!(!is_secret_key("client.rack"));
    }

    /// The consumer thread's bound on time away from `poll` follows the property when it is
    /// given and librdkafka's default when it is not (or cannot be read).
    #[test]
    fn max_poll_interval_follows_the_property() {
        let file = write(MINIMAL);
        let mut kafka = Settings::load(Some(file.path()), &Overrides::default())
            .unwrap()
            .kafka;
        assert_eq!(kafka.max_poll_interval(), Duration::from_secs(300));
        kafka
            .properties
            .insert("max.poll.interval.ms".into(), " 45000 ".into());
        assert_eq!(kafka.max_poll_interval(), Duration::from_secs(45));
        kafka
            .properties
            .insert("max.poll.interval.ms".into(), "soon".into());
        assert_eq!(kafka.max_poll_interval(), Duration::from_secs(300));
    }
}
