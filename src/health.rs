//! What readiness is made of: updated by the consumer thread, read by `/ready`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Shared, lock-free readiness inputs. The database is checked live by `/ready` itself.
#[derive(Debug, Default)]
pub struct Health {
    assigned: AtomicUsize,
    /// Whether librdkafka's last statistics showed a broker up (unknown until the first).
    kafka_up: AtomicBool,
    kafka_known: AtomicBool,
}

impl Health {
    /// Relaxed, like every field here: readiness is advisory and orders nothing else.
    pub fn set_assigned(&self, partitions: usize) {
        self.assigned.store(partitions, Ordering::Relaxed);
    }

    /// `/ready` wants at least one: a member without partitions is not doing the sink's work.
    pub fn assigned(&self) -> usize {
        self.assigned.load(Ordering::Relaxed)
    }

    /// Set from librdkafka's statistics callback and read by `/ready` on another thread.
    pub fn set_kafka_up(&self, up: bool) {
        self.kafka_up.store(up, Ordering::Relaxed);
        self.kafka_known.store(true, Ordering::Relaxed);
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
