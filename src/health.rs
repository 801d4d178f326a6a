//! What readiness is made of: updated by the consumer thread, read by `/ready`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shared, lock-free readiness inputs. The database is checked live by `/ready` itself.
#[derive(Debug, Default)]
pub struct Health {
    assigned: AtomicUsize,
    /// Whether librdkafka's last statistics showed a broker up (unknown until the first).
    kafka_up: AtomicBool,
    kafka_known: AtomicBool,
    /// Since when, and why, authentication with the brokers keeps failing (cleared when a
    /// broker is up again): `run` gives up after `kafka.auth_failure_timeout`.
    auth_failure: Mutex<Option<(Instant, String)>>,
}

impl Health {
    /// Relaxed, like every field here: readiness is advisory and orders nothing else.
    pub fn set_assigned(&self, partitions: usize) {
        self.assigned.store(partitions, Ordering::Relaxed);
        if partitions > 0 {
            self.set_kafka_authenticated();
        }
    }

    /// `/ready` wants at least one: a member without partitions is not doing the sink's work.
    pub fn assigned(&self) -> usize {
        self.assigned.load(Ordering::Relaxed)
    }

    /// Set from librdkafka's statistics callback and read by `/ready` on another thread.
    pub fn set_kafka_up(&self, up: bool) {
        self.kafka_up.store(up, Ordering::Relaxed);
        self.kafka_known.store(true, Ordering::Relaxed);
        if up {
            self.set_kafka_authenticated();
        }
    }

    /// librdkafka reported an authentication failure; the first one starts the clock.
    pub fn set_kafka_auth_failed(&self, reason: &str) {
        let mut failure = self.auth_failure.lock().unwrap_or_else(|e| e.into_inner());
        let since = failure
            .as_ref()
            .map_or_else(Instant::now, |(since, _)| *since);
        *failure = Some((since, reason.to_string()));
    }

    /// A broker answered as an authenticated client would (up in the statistics, or an
    /// assignment arrived): the failure clock stops.
    pub fn set_kafka_authenticated(&self) {
        *self.auth_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How long authentication has been failing, and the last reason.
    pub fn kafka_auth_failure(&self) -> Option<(Duration, String)> {
        self.auth_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(since, reason)| (since.elapsed(), reason.clone()))
    }

    /// Before the first statistics, an assignment is evidence enough that Kafka answers.
    pub fn kafka_up(&self) -> bool {
        if self.kafka_known.load(Ordering::Relaxed) {
            self.kafka_up.load(Ordering::Relaxed)
        } else {
            self.assigned() > 0
        }
    }
}
