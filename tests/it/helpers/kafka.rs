//! Topics, a producer of known records, and end offsets, against the real broker.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use super::services::services;

/// A topic made for one test, deleted when dropped.
pub struct TestTopic {
    pub name: String,
    pub partitions: i32,
    /// Its broker, when not the shared one.
    pub bootstrap: Option<String>,
    /// Only the original deletes the topic; copies for background tasks do not.
    owned: bool,
}

impl TestTopic {
    pub async fn create(partitions: i32) -> Self {
        Self::create_named(
            &format!("t-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            partitions,
        )
        .await
    }

    /// A topic with a chosen (still unique) name, e.g. to match a pattern.
    pub async fn create_named(name: &str, partitions: i32) -> Self {
        Self::create_on(&services().kafka, name, partitions).await
    }

    /// A topic on another broker (a test's private Kafka).
    pub async fn create_on(bootstrap: &str, name: &str, partitions: i32) -> Self {
        let name = name.to_string();
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .expect("admin client");
        // Tests produce records with timestamps years old (fixed, so rows can be compared);
        // under the broker's default 7-day retention its periodic check deletes them
        // mid-test, which looks exactly like records lost before the low watermark.
        let topic =
            NewTopic::new(&name, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
        let results = admin
            .create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .unwrap_or_else(|e| panic!("create topic {name} on {bootstrap}: {e}"));
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
        let bootstrap = (bootstrap != services().kafka).then(|| bootstrap.to_string());
        Self {
            name,
            partitions,
            bootstrap,
            owned: true,
        }
    }

    /// A handle for a background task; dropping it leaves the topic alone.
    pub fn handle(&self) -> Self {
        Self {
            name: self.name.clone(),
            partitions: self.partitions,
            bootstrap: self.bootstrap.clone(),
            owned: false,
        }
    }

    fn config(&self) -> ClientConfig {
        let mut config = client_config();
        if let Some(b) = &self.bootstrap {
            config.set("bootstrap.servers", b);
        }
        config
    }

    /// The end offset of every partition, read from the broker.
    pub fn end_offsets(&self) -> Vec<(i32, i64)> {
        let consumer: BaseConsumer = self.config().create().expect("consumer");
        (0..self.partitions)
            .map(|p| {
                let (_, high) = consumer
                    .fetch_watermarks(&self.name, p, Duration::from_secs(10))
                    .expect("watermarks");
                (p, high)
            })
            .collect()
    }

    /// The end offsets as `kafka_offsets` holds them once everything is committed.
    pub fn end_positions(&self) -> Vec<(i32, Option<i64>)> {
        self.end_offsets()
            .into_iter()
            .map(|(p, o)| (p, Some(o)))
            .collect()
    }
}

impl Drop for TestTopic {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let name = self.name.clone();
        let config = self.config();
        super::run_detached(async move {
            let admin: AdminClient<DefaultClientContext> = config.create().ok()?;
            admin
                .delete_topics(&[&name], &AdminOptions::new())
                .await
                .ok()
        });
    }
}

pub fn client_config() -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &services().kafka);
    config
}

/// A producer that neither loses nor duplicates: idempotent, acks from all replicas.
pub fn producer() -> FutureProducer {
    producer_on(&services().kafka)
}

/// The same, for another broker.
pub fn producer_on(bootstrap: &str) -> FutureProducer {
    client_config()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .create()
        .expect("producer")
}

/// The value of order `id`: every column type the test table has, alternating timestamp forms.
pub fn order_json(id: i64) -> String {
    let status = ["new", "paid", "shipped"][(id % 3) as usize];
    let created = 1_700_000_000_000i64 + id * 1000;
    let created = if id % 2 == 0 {
        let t = chrono::DateTime::from_timestamp_millis(created).unwrap();
        format!("\"{}\"", t.to_rfc3339())
    } else {
        created.to_string()
    };
    format!(
        r#"{{"id":{id},"customer":"c-{}","amount":"{}.{:02}","status":"{status}","created_at":{created},"attrs":{{"n":{id},"tags":["a","b"]}},"ignored":true}}"#,
        id % 97,
        id % 1000,
        id % 100
    )
}

/// Produces orders `from..to`, order `id` to partition `id % partitions`, and waits for
/// every acknowledgement.
pub async fn produce_orders(producer: &FutureProducer, topic: &TestTopic, from: i64, to: i64) {
    let records: Vec<RawRecord> = (from..to)
        .map(|id| RawRecord {
            key: Some(id.to_string().into_bytes()),
            ..RawRecord::json((id % topic.partitions as i64) as i32, &order_json(id))
        })
        .collect();
    produce_raw(producer, &topic.name, &records).await;
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// A record spelled out in full, for tests of mapping and bad input.
#[derive(Clone, Default)]
pub struct RawRecord {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Names and values as bytes: any name Kafka allows, not only UTF-8.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
}

impl RawRecord {
    pub fn json(partition: i32, value: &str) -> Self {
        Self {
            partition,
            value: Some(value.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    /// A JSON record on partition 0 whose `table` header names where routing sends it:
    /// `{"id": id}`, the smallest record the routing tests need.
    pub fn routed(table: &str, id: i64) -> Self {
        Self {
            headers: vec![(b"table".to_vec(), Some(table.as_bytes().to_vec()))],
            ..Self::json(0, &format!(r#"{{"id":{id}}}"#))
        }
    }
}

/// Produces the records in order (idempotent producer: order holds while in flight) and waits
/// for every acknowledgement.
pub async fn produce_raw(producer: &FutureProducer, topic: &str, records: &[RawRecord]) {
    let mut pending = Vec::with_capacity(1000);
    for r in records {
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(topic).partition(r.partition);
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            record = record.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp_ms {
            record = record.timestamp(ts);
        }
        if !r.headers.is_empty() {
            // Not `OwnedHeaders::insert`, whose names are `&str`.
            let headers = kafka_pg_sink::headers::to_owned(
                r.headers.iter().map(|(k, v)| (&k[..], v.as_deref())),
            )
            .expect("headers");
            record = record.headers(headers);
        }
        pending.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .expect("queue record"),
        );
        if pending.len() == 1000 {
            for delivery in pending.drain(..) {
                delivery
                    .await
                    .expect("delivery")
                    .expect("record acknowledged");
            }
        }
    }
    for delivery in pending {
        delivery
            .await
            .expect("delivery")
            .expect("record acknowledged");
    }
}
