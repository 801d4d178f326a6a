//! Draining a backlog: every assigned partition should advance together, none waiting for
//! another's prefetched chunk to finish (issue 13's target; README, "Performance").

use std::time::{Duration, Instant};

use crate::helpers::db::TestDb;
use crate::helpers::in_step::in_step;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Records per partition: a backlog of several fetches per partition (about 1 MiB each) and
/// many batches, drained in seconds.
const PER_PARTITION: i64 = 20_000;
const PARTITIONS: i64 = 8;

/// A backlog on 8 equal partitions drains in step: at every sample of `kafka_offsets` taken
/// while it drains, the partition furthest ahead has advanced at most twice as far as the one
/// furthest behind since all of them began (within the first tenth of the backlog). Then
/// every order is a row exactly once, every column as produced.
///
/// Before each partition had its own queue served in turn, this failed: librdkafka's shared
/// queue was served chunk by chunk, a partition at 11,000 while five were at 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_on_eight_partitions_drains_them_in_step() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(PARTITIONS as i32).await;
    produce_orders(&producer(), &topic, 0, PER_PARTITION * PARTITIONS).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let sink = Sink::start(&config, "sink");

    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let stored = db.stored_offsets(&config.group, &topic.name).await;
        let mut progress = vec![0i64; PARTITIONS as usize];
        for (p, next) in stored {
            progress[p as usize] = next.unwrap_or(0);
        }
        let drained = progress.iter().all(|&n| n == PER_PARTITION);
        samples.push(progress);
        if drained {
            break;
        }
        assert!(Instant::now() < deadline, "not drained: {samples:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let totals = vec![PER_PARTITION; PARTITIONS as usize];
    let Some(verdict) = in_step(&samples, &totals) else {
        panic!("a partition never advanced: {samples:?}")
    };
    let base = &samples[verdict.base];
    // A partition left waiting while the others drain a tenth of the backlog is not in step
    // either, whatever its pace afterwards.
    assert!(
        verdict.base_done <= PER_PARTITION * PARTITIONS / 10,
        "a partition began only at {base:?}: {samples:?}"
    );
    let useful = verdict.judged;
    assert!(
        useful >= 5,
        "too few samples while draining to judge ({useful}): {samples:?}"
    );
    let (ratio, at) = verdict.worst.expect("samples were judged");
    let at = &samples[at];
    eprintln!("worst advance ratio {ratio:.2} at {at:?} from {base:?} over {useful} samples");
    assert!(
        ratio <= 2.0,
        "partitions did not drain in step: max/min advance {ratio:.2} at {at:?} from {base:?}; all samples: {samples:?}"
    );

    let copies = orders_as_produced(&db, "orders", PARTITIONS).await;
    let wrong: Vec<_> = copies.iter().filter(|(_, &c)| c != 1).collect();
    assert!(wrong.is_empty(), "(partition, offset) → copies: {wrong:?}");
    assert_eq!(copies.len() as i64, PER_PARTITION * PARTITIONS, "rows");
    // Eight partitions reached their ends, and that is no warning (librdkafka's client
    // passes each end to the error callback too).
    let logs = sink.logs();
    assert!(
        !logs.contains("PartitionEOF") && !logs.contains("end of partition"),
        "an end of partition was logged: {}",
        sink.logs_tail(20)
    );
}

/// The rule itself, on made-up samples of 2 partitions of 100 records: a partition's head
/// start before the other began is not counted against it, a partition served at half the
/// pace of the other is at the bound, one that stops while the other goes on is infinitely
/// behind, and a partition that never began has no verdict at all.
#[test]
fn the_in_step_rule_counts_advance_from_when_every_partition_began() {
    let totals = [100, 100];
    let head_start = vec![
        vec![30, 0],
        vec![30, 5],
        vec![50, 25],
        vec![70, 45],
        vec![90, 65],
    ];
    let v = in_step(&head_start, &totals).unwrap();
    assert_eq!((v.base, v.base_done, v.judged), (1, 35, 3));
    assert_eq!(v.worst, Some((1.0, 2)));

    let half_pace = vec![vec![10, 5], vec![30, 15], vec![50, 25], vec![70, 35]];
    let v = in_step(&half_pace, &totals).unwrap();
    assert_eq!(v.worst, Some((2.0, 1)));

    let stalled = vec![vec![10, 10], vec![30, 10], vec![60, 10]];
    let v = in_step(&stalled, &totals).unwrap();
    assert_eq!(
        v.worst.map(|(r, at)| (r.is_infinite(), at)),
        Some((true, 1))
    );
    // Once a partition is done the rest is catching up, and not judged.
    let v = in_step(&[vec![10, 10], vec![100, 40]], &totals).unwrap();
    assert_eq!((v.judged, v.worst), (0, None));

    assert_eq!(in_step(&[vec![10, 0], vec![20, 0]], &totals), None);
}

/// README says the benchmark's fairness readout judges by this same rule: its source includes
/// the rule's file and calls it, or the number it prints could drift from the bound above.
#[test]
fn the_benchmark_readout_judges_by_the_in_step_rule() {
    assert_bench_uses(
        "fairness.rs",
        "in_step.rs",
        "in_step(&progress, &self.totals)",
    );
}
