//! Four processes started together on a backlog: how soon each one owns partitions and
//! commits, per group protocol, and every record exactly once. Under the classic protocol
//! the first process to join took every partition and the others got theirs only after
//! further rebalance rounds; the default `group_protocol = "auto"` picks KIP-848's
//! `consumer` protocol on a broker that offers it, where the broker assigns every member.

use std::time::{Duration, Instant};

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer_on, TestTopic};
use crate::helpers::private::Private;
use crate::helpers::services::services;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const PROCESSES: usize = 4;

/// When each process first owned partitions and first committed, counted from the moment
/// all four were started, and how many non-empty assignments each went through.
struct Spread {
    owns: Vec<Duration>,
    commits: Vec<Duration>,
    assignments: Vec<usize>,
    drained: Duration,
    /// Each sink's `group_protocol auto` line, if it resolved one.
    resolved: Vec<String>,
}

impl Spread {
    fn last_owns(&self) -> Duration {
        self.owns.iter().copied().max().unwrap_or_default()
    }

    fn last_commits(&self) -> Duration {
        self.commits.iter().copied().max().unwrap_or_default()
    }
}

/// The non-empty `assigned` lines of a sink's log.
fn assignments(sink: &Sink) -> usize {
    sink.logs()
        .lines()
        .filter(|l| l.contains(" assigned") && l.contains("partitions=[\""))
        .count()
}

/// The sink whose process id is in `owner_id` (`host/pid/nonce`).
fn sink_of(owner: &str, pids: &[i32]) -> Option<usize> {
    let pid: i32 = owner.split('/').nth(1)?.parse().ok()?;
    pids.iter().position(|p| *p == pid)
}

/// Starts four sinks together on `records` orders over `partitions` partitions of `kafka`
/// (the shared broker when `None`), watches when each owns and commits, waits for the drain
/// and checks every row column by column.
async fn four_processes_on_a_backlog(
    protocol: &'static str,
    kafka: Option<String>,
    partitions: i32,
    records: i64,
) -> Spread {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let bootstrap = kafka.clone().unwrap_or_else(|| services().kafka.clone());
    let name = format!("spread-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let topic = TestTopic::create_on(&bootstrap, &name, partitions).await;
    let producer = producer_on(&bootstrap);
    let step = 100_000;
    for from in (0..records).step_by(step as usize) {
        produce_orders(&producer, &topic, from, (from + step).min(records)).await;
    }

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.protocol = protocol;
    config.kafka = kafka;
    config.max_records = 5_000;
    let started = Instant::now();
    let sinks: Vec<Sink> = (0..PROCESSES)
        .map(|i| Sink::start(&config, &format!("sink {i}")))
        .collect();
    let pids: Vec<i32> = sinks.iter().map(|s| s.pid().as_raw()).collect();

    let mut owns = vec![None; PROCESSES];
    let mut commits = vec![None; PROCESSES];
    while owns.iter().chain(&commits).any(Option::is_none) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "after 120 s, owned partitions since {owns:?}, committed since {commits:?}"
        );
        let now = started.elapsed();
        for (i, sink) in sinks.iter().enumerate() {
            if owns[i].is_none() && assignments(sink) > 0 {
                owns[i] = Some(now);
            }
        }
        let committers: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT owner FROM offset_audit WHERE new_next IS DISTINCT FROM old_next",
        )
        .fetch_all(&db.pool)
        .await
        .expect("read the audit");
        for owner in committers {
            if let Some(i) = sink_of(&owner, &pids) {
                commits[i].get_or_insert(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_drained(&db, &config.group, &topic, Duration::from_secs(600)).await;
    let drained = started.elapsed();

    let copies = orders_as_produced(&db, "orders", partitions as i64).await;
    assert_eq!(copies.len() as i64, records, "distinct (partition, offset)");
    assert!(
        copies.values().all(|n| *n == 1),
        "a record landed twice: {:?}",
        copies
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .collect::<Vec<_>>()
    );
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, records).await;
    let spread = Spread {
        owns: owns.into_iter().flatten().collect(),
        commits: commits.into_iter().flatten().collect(),
        assignments: sinks.iter().map(assignments).collect(),
        drained,
        resolved: sinks
            .iter()
            .map(|s| {
                let logs = s.logs();
                logs.lines()
                    .find(|l| l.contains("group_protocol auto"))
                    .unwrap_or_default()
                    .to_string()
            })
            .collect(),
    };
    for mut sink in sinks {
        let status = sink.stop();
        assert!(status.success(), "{}: {status:?}", sink.name);
    }
    spread
}

/// The shared broker (`group.initial.rebalance.delay.ms=0`, heartbeat 1 s) under the default
/// protocol: every process owns partitions within 4 s and commits within 8 s. Measured on
/// this broker with 64 partitions and a backlog (README, "Groups"), the classic protocol
/// took 6-9 s until the last process owned any, the `consumer` protocol 1-2 s.
#[tokio::test(flavor = "multi_thread")]
async fn four_processes_started_together_each_get_partitions_at_once() {
    let spread = four_processes_on_a_backlog("auto", None, 64, 200_000).await;
    eprintln!(
        "auto: owns {:?}, commits {:?}, assignments {:?}, drained {:?}\n{}",
        spread.owns,
        spread.commits,
        spread.assignments,
        spread.drained,
        spread.resolved.join("\n")
    );
    assert!(
        spread.last_owns() < Duration::from_secs(4),
        "the last process owned partitions only after {:?} ({:?})",
        spread.last_owns(),
        spread.owns
    );
    assert!(
        spread.last_commits() < Duration::from_secs(8),
        "the last process committed only after {:?} ({:?})",
        spread.last_commits(),
        spread.commits
    );
}

/// The measurement README quotes: both protocols on the shared broker (initial rebalance
/// delay 0) and on a private one with the production default of 3 s, 64 partitions and
/// 1,000,000 records. Minutes long, so run by hand:
/// `cargo test --release --test it group_spread::measure -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement of several minutes, run by hand"]
async fn measure() {
    let records: i64 = std::env::var("KPS_SPREAD_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("KPS_SPREAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let delayed = Private::up_with(
        "kafka",
        &[(
            "KPS_KAFKA_BROKER_PROPERTIES",
            "group.initial.rebalance.delay.ms=3000",
        )],
    );
    let mut table = String::from(
        "| protocol | initial rebalance delay | last owns | last commits | drained | assignments |\n|---|---:|---:|---:|---:|---|\n",
    );
    for _ in 0..rounds {
        for (delay, kafka) in [("0", None), ("3000", Some(delayed.bootstrap()))] {
            for protocol in ["classic", "consumer"] {
                let s = four_processes_on_a_backlog(protocol, kafka.clone(), 64, records).await;
                let line = format!(
                    "| {protocol} | {delay} ms | {:.1} s | {:.1} s | {:.1} s | {:?} |\n",
                    s.last_owns().as_secs_f64(),
                    s.last_commits().as_secs_f64(),
                    s.drained.as_secs_f64(),
                    s.assignments
                );
                eprint!("{line}");
                table.push_str(&line);
            }
        }
    }
    eprintln!("{table}");
}
