//! Draining a backlog: every assigned partition should advance together, none waiting for
//! another's prefetched chunk to finish (issue 13's target; README, "Performance").

use std::time::{Duration, Instant};

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Records per partition: a backlog of several fetches per partition (about 1 MiB each) and
/// many batches, drained in seconds.
const PER_PARTITION: i64 = 20_000;
const PARTITIONS: i64 = 8;

/// The samples to judge by: from a tenth of the backlog past `base` (so every partition's
/// expected advance is well above a turn or a batch's share), until the first partition is
/// finished (from then on the others catch up, which is in step too).
fn window<'a>(samples: &'a [Vec<i64>], base: &[i64]) -> Vec<&'a Vec<i64>> {
    let total = PER_PARTITION * PARTITIONS;
    let from = base.iter().sum::<i64>() + total / 10;
    samples
        .iter()
        .filter(|s| s.iter().sum::<i64>() >= from)
        .filter(|s| s.iter().all(|&n| n < PER_PARTITION))
        .collect()
}

/// The worst max/min ratio of per-partition advance (`kafka_offsets.next_offset` less its
/// value at `base`) over `samples`.
fn worst_ratio(samples: &[&Vec<i64>], base: &[i64]) -> (f64, Option<Vec<i64>>) {
    let mut worst = (1.0, None);
    for s in samples {
        let advance: Vec<i64> = s.iter().zip(base).map(|(n, b)| n - b).collect();
        let max = *advance.iter().max().unwrap_or(&0);
        let min = *advance.iter().min().unwrap_or(&0);
        let ratio = if min <= 0 {
            f64::INFINITY
        } else {
            max as f64 / min as f64
        };
        if ratio > worst.0 {
            worst = (ratio, Some(s.to_vec()));
        }
    }
    worst
}

/// The positions when every partition had committed something: where advancing in step
/// is counted from. Which partition's start offset librdkafka resolves first, and so which
/// one's first fetch arrives alone, is a race; the one that wins may fill a batch or two
/// before the others have a record. That head start is not a partition being served
/// ahead of the others, so it is left out; a partition never served has no base at all.
fn base_of(samples: &[Vec<i64>]) -> Option<&Vec<i64>> {
    samples.iter().find(|s| s.iter().all(|&n| n > 0))
}

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
    let Some(base) = base_of(&samples) else {
        panic!("a partition never advanced: {samples:?}")
    };
    // A partition left waiting while the others drain a tenth of the backlog is not in step
    // either, whatever its pace afterwards.
    assert!(
        base.iter().sum::<i64>() <= PER_PARTITION * PARTITIONS / 10,
        "a partition began only at {base:?}: {samples:?}"
    );
    let judged = window(&samples, base);
    let useful = judged.len();
    assert!(
        useful >= 5,
        "too few samples while draining to judge ({useful}): {samples:?}"
    );
    let (ratio, at) = worst_ratio(&judged, base);
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
