//! The limits that close a batch and the backoff between retries of a failed one.

use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;

/// Limits that close a batch; whichever is reached first wins.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSettings {
    #[serde(default = "default_max_records")]
    pub max_records: usize,
    #[serde(default = "default_max_bytes")]
    pub max_bytes: ByteSize,
    #[serde(default = "default_max_wait", with = "humantime_serde")]
    pub max_wait: Duration,
    /// Sealed batches a writer may hold before the consumer waits for it.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// First and last delay between retries of a failed transaction.
    #[serde(default = "default_retry_min", with = "humantime_serde")]
    pub retry_backoff_min: Duration,
    #[serde(default = "default_retry_max", with = "humantime_serde")]
    pub retry_backoff_max: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_records: default_max_records(),
            max_bytes: default_max_bytes(),
            max_wait: default_max_wait(),
            max_in_flight: default_max_in_flight(),
            retry_backoff_min: default_retry_min(),
            retry_backoff_max: default_retry_max(),
        }
    }
}

// Serde defaults; README's settings tables list each with its meaning.

/// With `max_bytes`, bounds a writer's open batch, so memory does not grow with the backlog.
fn default_max_records() -> usize {
    10_000
}
/// Payload bytes; with `max_records`, bounds a writer's open batch.
fn default_max_bytes() -> ByteSize {
    ByteSize::mib(8)
}
/// The latency bound when records trickle in: the longest a record waits for its commit.
fn default_max_wait() -> Duration {
    Duration::from_millis(250)
}
/// Lets the consumer fill the next batch while the writer commits one.
fn default_max_in_flight() -> usize {
    2
}
/// The first retry comes quickly; backoff doubles from here.
fn default_retry_min() -> Duration {
    Duration::from_millis(100)
}
/// The cap, so the sink resumes within half a minute of an outage ending.
fn default_retry_max() -> Duration {
    Duration::from_secs(30)
}
