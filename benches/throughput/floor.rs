//! The fetch floor: what receiving a topic's records costs before any sink does anything with
//! them. A consumer with the sink's own client settings (`client_config`, the same
//! `[kafka.properties]`) and its per-partition queues reads every record of a topic and each of
//! its bytes once, and does nothing else.
//!
//! Why: the envelopes' targets are ratios to plain JSON on the same rows, but an envelope
//! record carries 5 to 13 times the bytes, and the broker serving them, the kernel copying them
//! and librdkafka framing them cost CPU that no decoding can save. Measured in the same run as
//! the sink, the floors say how much of an envelope's extra cost is the bytes' and how much is
//! the sink's own, and so the best ratio any librdkafka consumer could reach on this machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use kafka_pg_sink::config::{Overrides, Settings};
use kafka_pg_sink::kafka::clients::client_config;
use kafka_pg_sink::kafka::RECORDS_PER_TURN;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::proc;
use crate::scenarios::Measurement;

#[path = "../../tests/it/helpers/fetch_floor.rs"]
mod fetch_floor;
pub use fetch_floor::{Bound, Costs};

/// Reads all `n` records of `topic` (from its beginning, `partitions` partitions) as the
/// sink's consumer would receive them, and measures this process's CPU, the broker's and the
/// machine's over the read. `kafka_properties` is the `[kafka.properties]` section the
/// benchmark gives the sinks (empty for none).
pub async fn fetch_floor(
    name: &str,
    kafka: &str,
    topic: &str,
    partitions: i32,
    n: u64,
    kafka_properties: &str,
) -> anyhow::Result<Measurement> {
    let settings = sink_kafka_settings(kafka, kafka_properties)?;
    let (name, topic) = (name.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || read_all(&name, settings, &topic, partitions, n)).await?
}

/// The `[kafka]` section the benchmark's sinks run with, read by the sink's own loader.
fn sink_kafka_settings(
    kafka: &str,
    kafka_properties: &str,
) -> anyhow::Result<kafka_pg_sink::config::KafkaSettings> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("floor.toml");
    std::fs::write(
        &path,
        format!(
            "[kafka]\nbootstrap_servers = \"{kafka}\"\ngroup_id = \"kps-bench-floor\"\n{kafka_properties}\
             [postgres]\nurl = \"postgres://unused/unused\"\n[[topics]]\nname = \"t\"\ntable = \"t\"\n"
        ),
    )?;
    Ok(Settings::load(Some(&path), &Overrides::default())?.kafka)
}

/// On a thread of its own (it parks between records, as the sink's poll loop does).
fn read_all(
    name: &str,
    settings: kafka_pg_sink::config::KafkaSettings,
    topic: &str,
    partitions: i32,
    n: u64,
) -> anyhow::Result<Measurement> {
    // The end-of-partition events the sink asks for would reach the default context, which
    // logs each as an error; the floor knows its record count and needs none.
    let consumer: Arc<BaseConsumer> = Arc::new(
        client_config(&settings)
            .set("enable.partition.eof", "false")
            .create()?,
    );
    // Split before the assign, as the sink does (`kafka::queues`), so every record arrives in
    // its partition's queue.
    let waker = std::thread::current();
    let mut queues = Vec::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let mut queue = consumer
            .split_partition_queue(topic, p)
            .context("a partition queue of its own")?;
        let waker = waker.clone();
        queue.set_nonempty_callback(move || waker.unpark());
        queues.push(queue);
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    let pid = std::process::id();
    let broker = proc::broker_pid();
    let (cpu_before, broker_before, busy_before) = (
        proc::cpu_seconds(pid),
        broker.and_then(proc::cpu_seconds),
        proc::machine_busy_seconds(),
    );
    let started = Instant::now();
    consumer.assign(&tpl)?;
    let deadline = started + Duration::from_secs(120 + n / 1000);
    let (mut done, mut bytes) = (0u64, 0u64);
    while done < n {
        let mut got = 0;
        for queue in &queues {
            for _ in 0..RECORDS_PER_TURN {
                match queue.poll(Duration::ZERO) {
                    Some(Ok(record)) => {
                        // Every byte read once, as any decoder must (`black_box`: the
                        // compiler may not drop the read).
                        let payload = record.payload().unwrap_or_default();
                        std::hint::black_box(payload.iter().fold(0u8, |a, b| a ^ b));
                        bytes += payload.len() as u64;
                        got += 1;
                    }
                    None => break,
                    Some(Err(e)) => return Err(e).context("fetch floor"),
                }
            }
        }
        // Events (errors, statistics) arrive on the consumer's own queue.
        if let Some(Err(e)) = consumer.poll(Duration::ZERO) {
            return Err(e).context("fetch floor");
        }
        done += got;
        if got == 0 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "fetch floor: {done} of {n} records of {topic} read before the deadline"
            );
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
    let elapsed = started.elapsed();
    let since = |before: Option<f64>, now: Option<f64>| Some(now? - before?);
    let mut m = Measurement::new(name, done, bytes, elapsed);
    m.cpu_seconds = since(cpu_before, proc::cpu_seconds(pid));
    m.broker_cpu_seconds = since(broker_before, broker.and_then(proc::cpu_seconds));
    m.machine_busy_seconds = since(busy_before, proc::machine_busy_seconds());
    Ok(m)
}

/// The best an envelope could do against plain JSON in its write mode, from the sink's drains
/// and the floors of their topics in the same run (the same number of records each); `None`
/// where a CPU figure is missing (no /proc).
pub fn bound(
    plain: &Measurement,
    envelope: &Measurement,
    plain_floor: &Measurement,
    envelope_floor: &Measurement,
) -> Option<Bound> {
    let costs = |m: &Measurement| {
        Some(Costs {
            cpu: m.cpu_seconds?,
            busy: m.machine_busy_seconds?,
        })
    };
    Some(Bound::new(
        costs(plain)?,
        costs(envelope)?,
        costs(plain_floor)?,
        costs(envelope_floor)?,
    ))
}
