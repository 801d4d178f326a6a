//! The `partitions` scenario: the same backlog on 8, 64 and 256 partitions, drained by one
//! sink each, for rows/s and peak resident memory side by side (issue 26: memory follows
//! `kafka.memory_budget`, not the partition count, and speed holds). Order `i` goes to
//! partition `i % N`, or with `--partitioner murmur2` where Kafka's Java producer puts its key.

use kafka_pg_sink::config::WriteMode;
use sqlx::PgPool;

use crate::data;
use crate::scenarios::{self, Measurement, RowOrder, SinkRun};
use crate::setup;

/// Each count's drain, in the order given, and the ratios of each to the first.
pub async fn partitions<'a>(
    env: &setup::Env,
    run: &dyn Fn(&'static str, &'static str, WriteMode) -> SinkRun<'a>,
    url: &str,
    pool: &PgPool,
    n: u64,
    counts: &[i32],
    by_key: bool,
) -> anyhow::Result<(Vec<Measurement>, Vec<(String, f64)>)> {
    let mut measured: Vec<(i32, Measurement)> = Vec::new();
    let mut ceilings: Vec<(i32, f64)> = Vec::new();
    for &count in counts {
        let topic = format!("kps-bench-p{count}");
        eprintln!("producing {n} records on {count} partitions");
        setup::fresh_topic(env, &topic, count).await?;
        let (_, payload) = setup::produce_to(
            env,
            n,
            |i| {
                let partition = if by_key {
                    data::murmur2_partition(data::key(i).as_bytes(), count)
                } else {
                    (i % count as u64) as i32
                };
                (topic.as_str(), partition)
            },
            |i| Ok(data::order(i).into_bytes()),
        )
        .await?;
        eprintln!("sink, insert mode, {count} partitions");
        let name: &'static str = Box::leak(format!("sink insert, {count} partitions").into());
        let group: &'static str = Box::leak(format!("bench-partitions-{count}").into());
        let mut m = scenarios::sink(
            &SinkRun {
                topic: &topic,
                group,
                // The same for every count: 256 rows read 50 times a second cost PostgreSQL
                // more than 8 do, which the comparison would count against the sink.
                poll_every: std::time::Duration::from_millis(200),
                ..run(name, group, WriteMode::Insert)
            },
            pool,
            n,
            payload,
            true,
        )
        .await?;
        // 256 columns of lag would bury the table; the fairness test covers it.
        m.fairness = None;
        // PostgreSQL's own cost of the order the records arrived in: the more partitions, the
        // further apart the ids a batch inserts into the primary key (order `i` is on
        // partition `i % N`, or wherever its key hashes), and a producer's batch of thousands
        // of one partition's records arrives whole. The sink's rows, in the order it inserted
        // them, copied again without Kafka: the ceiling for this count.
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM bench_orders ORDER BY ctid")
            .fetch_all(pool)
            .await?;
        let order = ids
            .iter()
            .map(|id| id.trim_start_matches("o-").parse::<u64>())
            .collect::<Result<Vec<_>, _>>()?;
        eprintln!("COPY, the {count}-partition rows in the sink's order");
        let ceiling = scenarios::copy_ceiling(url, pool, n, payload, RowOrder::Ids(order)).await?;
        ceilings.push((count, m.rows_per_sec / ceiling.rows_per_sec));
        measured.push((count, m));
    }
    let mut ratios: Vec<(String, f64)> = ceilings
        .iter()
        .map(|(count, r)| {
            (
                format!("sink insert / COPY in its order, {count} partitions"),
                *r,
            )
        })
        .collect();
    if let Some((first, base)) = measured.first() {
        for (count, m) in measured.iter().skip(1) {
            ratios.push((
                format!("sink insert rows/s, {count} / {first} partitions"),
                m.rows_per_sec / base.rows_per_sec,
            ));
            if let (Some(p), Some(b)) = (m.peak_rss_mib, base.peak_rss_mib) {
                ratios.push((
                    format!("sink peak RSS, {count} / {first} partitions"),
                    p / b,
                ));
            }
        }
    }
    Ok((measured.into_iter().map(|(_, m)| m).collect(), ratios))
}
