//! `kafka.memory_budget`: the sink's memory follows its budget, not the partition count or the
//! backlog (issue 26; README, "Sizing").

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{client_config, produce_orders, produce_raw, RawRecord, TestTopic};
use crate::helpers::sink::{LogsOnPanic, Sink, SinkConfig};
use crate::helpers::*;

const PARTITIONS: i64 = 64;
const RECORDS: i64 = 1_000_000;
const BUDGET_MIB: u64 = 128;

/// README's Sizing: what the budget does not cover (the batches in flight, PostgreSQL's
/// replies, the allocator's slack) at the default batch settings, as measured.
const BEYOND_BUDGET_MIB: u64 = 32;

/// The process's peak resident memory, from the kernel.
fn vm_hwm_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024
}

/// 64 partitions with a backlog of 1,000,000 lz4-compressed records, drained under a 128 MiB
/// budget: the peak resident memory stays under the budget plus the documented constant, and
/// every order is a row exactly once, every column as produced. Before the budget each
/// partition prefetched up to 10,000 records: this shape peaked at 742 MiB.
#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_partitions_and_a_deep_backlog_stay_within_the_budget() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(PARTITIONS as i32).await;
    // Users' producers compress: a compressed fetch is several times its size once in memory.
    let producer = client_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("compression.type", "lz4")
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    produce_orders(&producer, &topic, 0, RECORDS).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.env.push((
        "KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET".into(),
        format!("{BUDGET_MIB}MiB"),
    ));
    let sink = Sink::start(&config, "sink");
    let _logs = LogsOnPanic(&sink);
    wait_until(
        "the backlog is drained",
        Duration::from_secs(600),
        || async { db.count("orders").await == RECORDS },
    )
    .await;
    let peak = vm_hwm_mib(sink.pid().as_raw() as u32);
    eprintln!("peak resident memory {peak} MiB under a {BUDGET_MIB} MiB budget");
    assert!(
        sink.logs().contains("\"queues\":2") || sink.logs().contains("queues=2"),
        "the budget was not the one set: {}",
        sink.logs_tail(40)
    );
    assert!(
        peak <= BUDGET_MIB + BEYOND_BUDGET_MIB,
        "peak resident memory {peak} MiB, budget {BUDGET_MIB} MiB + {BEYOND_BUDGET_MIB} MiB"
    );

    let copies = orders_as_produced(&db, "orders", PARTITIONS).await;
    let wrong: Vec<_> = copies.iter().filter(|(_, &c)| c != 1).collect();
    assert!(wrong.is_empty(), "(partition, offset) → copies: {wrong:?}");
    assert_eq!(copies.len() as i64, RECORDS, "rows");
    let stored = db.stored_offsets(&config.group, &topic.name).await;
    for (p, next) in stored {
        assert_eq!(next, Some(RECORDS / PARTITIONS), "partition {p}'s position");
    }
}

/// Records several times a queue's bound (3 MiB against 2 MiB, and three times a fetch
/// response) still come, one at a time, between small ones, under the smallest budget (one
/// queue the two partitions share): every record is its row exactly once, every byte as
/// produced, and the positions end at the ends.
#[tokio::test(flavor = "multi_thread")]
async fn records_larger_than_a_queues_bound_still_come_under_the_smallest_budget() {
    const BIG: usize = 3 * 1024 * 1024;
    let db = TestDb::migrated().await;
    sqlx::query("CREATE TABLE docs (id bigint PRIMARY KEY, body text NOT NULL, kafka_partition int NOT NULL, kafka_offset bigint NOT NULL)")
        .execute(&db.pool)
        .await
        .expect("create docs");
    let topic = TestTopic::create(2).await;
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        client_config().create().expect("admin client");
    let larger =
        rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic(&topic.name))
            .set("max.message.bytes", "8388608");
    for r in admin
        .alter_configs([&larger], &rdkafka::admin::AdminOptions::new())
        .await
        .expect("alter topic")
    {
        r.expect("max.message.bytes");
    }
    let producer: rdkafka::producer::FutureProducer = client_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.max.bytes", "8388608")
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    let body = |id: i64| {
        let len = if id % 4 == 1 { BIG } else { 100 };
        let c = char::from(b'a' + (id % 26) as u8);
        format!("{id}:{}", c.to_string().repeat(len))
    };
    let records: Vec<RawRecord> = (0..24i64)
        .map(|id| {
            let value = serde_json::json!({"id": id, "body": body(id)}).to_string();
            RawRecord::json((id % 2) as i32, &value)
        })
        .collect();
    produce_raw(&producer, &topic.name, &records).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "docs");
    config
        .env
        .push(("KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET".into(), "96MiB".into()));
    let sink = Sink::start(&config, "sink");
    let _logs = LogsOnPanic(&sink);
    wait_until(
        "every record is a row",
        Duration::from_secs(120),
        || async { db.count("docs").await == 24 },
    )
    .await;
    assert!(
        sink.logs().contains("\"queues\":1") || sink.logs().contains("queues=1"),
        "the budget was not the one set: {}",
        sink.logs_tail(40)
    );
    let rows: Vec<(i64, String, i32, i64)> =
        sqlx::query_as("SELECT id, body, kafka_partition, kafka_offset FROM docs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .expect("read docs");
    assert_eq!(rows.len(), 24);
    for (i, (id, got, partition, offset)) in rows.iter().enumerate() {
        assert_eq!(*id, i as i64);
        assert_eq!(
            (*partition, *offset),
            ((id % 2) as i32, id / 2),
            "row {id}'s record"
        );
        assert!(*got == body(*id), "row {id} differs ({} bytes)", got.len());
    }
    let stored = db.stored_offsets(&config.group, &topic.name).await;
    assert_eq!(stored, vec![(0, Some(12)), (1, Some(12))]);
}
