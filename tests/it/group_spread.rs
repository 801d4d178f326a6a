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
use crate::helpers::sink::{ConfigFile, Sink, SinkConfig};
use crate::helpers::*;

const PROCESSES: usize = 4;

/// The time between two processes' starts: a Deployment's pods start within a second or so.
const STAGGER: Duration = Duration::from_millis(250);

/// When each process first owned partitions and first committed, counted from its own start,
/// and its assignments (with partitions, empty rounds before the first).
struct Spread {
    owns: Vec<Duration>,
    commits: Vec<Duration>,
    assignments: Vec<(usize, usize)>,
    drained: Duration,
    /// Each sink's `group_protocol auto: the brokers …` line, if it resolved one that way.
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

/// The `assigned` lines of a sink's log: (with partitions, empty before the first with any).
/// An empty one is a rebalance round the process sat through without getting anything, as
/// cooperative-sticky gives a newcomer while the owners have yet to revoke.
fn assignments(sink: &Sink) -> (usize, usize) {
    let logs = sink.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains(" assigned ")).collect();
    let full = lines
        .iter()
        .filter(|l| l.contains("partitions=[\""))
        .count();
    let empty_first = lines
        .iter()
        .take_while(|l| l.contains("partitions=[]"))
        .count();
    (full, empty_first)
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
    // The group timing a user gets: librdkafka's heartbeat (3 s) and the sink's session
    // timeout (45 s) under classic, the broker's under `consumer`; not the tests' short ones.
    let toml = config
        .toml()
        .replace("\"heartbeat.interval.ms\" = \"500\"\n", "")
        .replace(
            &format!("session_timeout = \"{}ms\"\n", config.session_timeout_ms),
            "",
        );
    let file = ConfigFile::new(&toml);
    // As a Deployment's pods start: within a couple of seconds of each other, not at once.
    let mut sinks = Vec::new();
    let mut starts = Vec::new();
    for i in 0..PROCESSES {
        if i > 0 {
            tokio::time::sleep(STAGGER).await;
        }
        starts.push(Instant::now());
        sinks.push(Sink::start_file(file.path(), &format!("sink {i}")));
    }
    let started = starts[0];
    let pids: Vec<i32> = sinks.iter().map(|s| s.pid().as_raw()).collect();

    let mut owns = vec![None; PROCESSES];
    let mut commits = vec![None; PROCESSES];
    while owns.iter().chain(&commits).any(Option::is_none) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "after 120 s, owned partitions since {owns:?}, committed since {commits:?}"
        );
        for (i, sink) in sinks.iter().enumerate() {
            if owns[i].is_none() && assignments(sink).0 > 0 {
                owns[i] = Some(starts[i].elapsed());
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
                commits[i].get_or_insert_with(|| starts[i].elapsed());
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
                    .find(|l| l.contains("group_protocol auto: the brokers"))
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

/// The shared broker (`group.initial.rebalance.delay.ms=0`, KIP-848 heartbeat 1 s) under the
/// default protocol, which resolves to `consumer` there: no process sits through an empty
/// rebalance round before its first partitions, and each owns partitions within 10 s of its
/// start. Under `classic` the processes that joined after the first one's join completed got
/// an empty round first and their partitions 6-7 s after their start (README, "Groups").
#[tokio::test(flavor = "multi_thread")]
async fn four_processes_started_together_each_get_partitions_at_once() {
    let spread = four_processes_on_a_backlog("auto", None, 64, 200_000).await;
    eprintln!(
        "auto: owns {:?}, commits {:?}, assignments {:?}, drained {:?}",
        spread.owns, spread.commits, spread.assignments, spread.drained
    );
    for line in &spread.resolved {
        assert!(line.contains("protocol=Consumer"), "{line}");
    }
    assert!(
        spread.assignments.iter().all(|(_, empty)| *empty == 0),
        "a process sat through empty rounds first: (assignments, empty rounds first) {:?}",
        spread.assignments
    );
    assert!(
        spread.last_owns() < Duration::from_secs(10),
        "the last process owned partitions only {:?} after its start ({:?})",
        spread.last_owns(),
        spread.owns
    );
}

/// A broker whose group coordinator offers only the classic protocol
/// (`group.coordinator.rebalance.protocols=classic`, as before Kafka 4.0): the default `auto`
/// says so and keeps `classic`, and the sink drains with every column as produced.
#[tokio::test(flavor = "multi_thread")]
async fn auto_keeps_classic_on_a_broker_without_the_consumer_protocol() {
    let kafka = Private::up_with(
        "kafka",
        &[(
            "KPS_KAFKA_BROKER_PROPERTIES",
            "group.coordinator.rebalance.protocols=classic",
        )],
    );
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create_on(&kafka.bootstrap(), "classic-only", 4).await;
    produce_orders(&producer_on(&kafka.bootstrap()), &topic, 0, 2_000).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.kafka = Some(kafka.bootstrap());
    assert_eq!(
        config.protocol, "auto",
        "the helper starts sinks as users do"
    );
    let mut sink = Sink::start(&config, "sink");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(120)).await;
    let logs = sink.logs();
    // Kafka 4.1 still lists ConsumerGroupHeartbeat there: only the heartbeat probe tells.
    assert!(
        logs.contains("the brokers list ConsumerGroupHeartbeat but refuse it"),
        "{}",
        sink.logs_tail(30)
    );
    assert!(
        logs.contains("the brokers do not offer the KIP-848 consumer protocol protocol=Classic"),
        "{}",
        sink.logs_tail(30)
    );
    let copies = orders_as_produced(&db, "orders", 4).await;
    assert_eq!(copies.len(), 2_000);
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 2_000).await;
    assert!(sink.stop().success(), "{}", sink.logs_tail(30));
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
    // Kafka's defaults for groups, where the dev broker shortens them for tests.
    let delayed = Private::up_with(
        "kafka",
        &[(
            "KPS_KAFKA_BROKER_PROPERTIES",
            "group.initial.rebalance.delay.ms=3000\ngroup.consumer.heartbeat.interval.ms=5000\ngroup.consumer.session.timeout.ms=45000",
        )],
    );
    let mut table = String::from(
        "| protocol | broker | last owns | last commits | drained | assignments (full, empty first) |\n|---|---|---:|---:|---:|---|\n",
    );
    for _ in 0..rounds {
        for (broker, kafka) in [
            ("delay 0, KIP-848 heartbeat 1 s", None),
            (
                "delay 3 s, KIP-848 heartbeat 5 s",
                Some(delayed.bootstrap()),
            ),
        ] {
            for protocol in ["classic", "consumer"] {
                let s = four_processes_on_a_backlog(protocol, kafka.clone(), 64, records).await;
                let line = format!(
                    "| {protocol} | {broker} | {:.1} s | {:.1} s | {:.1} s | {:?} |\n",
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
