//! `kafka-pg-sink offsets show|reset`: read and move the stored positions safely.
//!
//! A reset bumps the partition's owner epoch in the same statement that moves the position, so
//! a running sink's next commit is fenced: it cannot overwrite the reset. The sink notices,
//! claims the partition again and continues from the new position.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::commands::lag;
use crate::config::Settings;
use crate::kafka::clients;
use crate::offsets::{OffsetStore, Owner};
use crate::startup;

/// Where to move the positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Earliest,
    Latest,
    Offset(i64),
    /// The first record at or after this time (epoch milliseconds).
    Timestamp(i64),
}

/// A row of `kafka_offsets`.
#[derive(sqlx::FromRow)]
struct Position {
    topic: String,
    partition: i32,
    next_offset: Option<i64>,
    owner_epoch: i64,
    owner_id: Option<String>,
    committed_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Prints the stored positions of the group.
pub async fn show(settings: &Settings, topic: Option<&str>) -> anyhow::Result<()> {
    let pool = startup::connect_pool(settings).await?;
    let rows: Vec<Position> = sqlx::query_as(
        "SELECT topic, partition, next_offset, owner_epoch, owner_id, committed_at FROM kafka_offsets
          WHERE consumer_group = $1 AND ($2::text IS NULL OR topic = $2) ORDER BY topic, partition",
    )
    .bind(&settings.kafka.group_id)
    .bind(topic)
    .fetch_all(&pool)
    .await?;
    println!("consumer group {:?}", settings.kafka.group_id);
    println!(
        "{:<32} {:>5} {:>12} {:>6}  {:<25} owner",
        "topic", "part", "next offset", "epoch", "last commit"
    );
    for r in rows {
        println!(
            "{:<32} {:>5} {:>12} {:>6}  {:<25} {}",
            r.topic,
            r.partition,
            r.next_offset.map_or("-".into(), |n| n.to_string()),
            r.owner_epoch,
            r.committed_at.map_or("never".into(), |a| a
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()),
            r.owner_id.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

/// One partition's planned move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub partition: i32,
    pub from: Option<i64>,
    pub to: i64,
}

/// Plans (and unless `dry_run`, applies) a reset of `partitions` (all when empty) of `topic`.
pub async fn reset(
    settings: &Settings,
    topic: &str,
    partitions: &[i32],
    target: &Target,
    dry_run: bool,
) -> anyhow::Result<Vec<Move>> {
    let kafka: BaseConsumer = clients::admin_config(&settings.kafka)
        .create()
        .map_err(clients::redact_config_error)?;
    let Some((_, count)) = lag::topics(settings, &kafka)?
        .into_iter()
        .find(|(t, _)| t == topic)
    else {
        anyhow::bail!("topic {topic:?} is not one the sink reads (check [[topics]]), or it does not exist in Kafka");
    };
    let mut chosen: Vec<i32> = if partitions.is_empty() {
        (0..count).collect()
    } else {
        partitions.to_vec()
    };
    chosen.sort_unstable();
    chosen.dedup();
    if let Some(p) = chosen.iter().find(|&&p| p < 0 || p >= count) {
        anyhow::bail!("topic {topic:?} has partitions 0..{count}; there is no partition {p}");
    }
    let by_time = match target {
        Target::Timestamp(ms) => {
            let mut tpl = TopicPartitionList::new();
            for &p in &chosen {
                tpl.add_partition_offset(topic, p, Offset::Offset(*ms))?;
            }
            let found = kafka.offsets_for_times(tpl, Duration::from_secs(10))?;
            found
                .elements()
                .iter()
                .map(|e| (e.partition(), e.offset()))
                .collect::<HashMap<i32, Offset>>()
        }
        _ => HashMap::new(),
    };
    let mut targets = Vec::new();
    for &p in &chosen {
        let (low, high) = kafka.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        let to = match target {
            Target::Earliest => low,
            Target::Latest => high,
            Target::Offset(n) if (low..=high).contains(n) => *n,
            Target::Offset(n) => {
                anyhow::bail!("offset {n} is outside {topic}/{p}'s range {low}..{high}")
            }
            // No record at or after the time: the end of the partition.
            Target::Timestamp(_) => match by_time.get(&p) {
                Some(Offset::Offset(o)) => *o,
                _ => high,
            },
        };
        targets.push((p, to));
    }
    let pool = startup::connect_pool(settings).await?;
    let show = |from: Option<i64>| from.map_or("(none)".into(), |f| f.to_string());
    if dry_run {
        // Only a plan: a running sink may move the positions before a real reset.
        let stored: HashMap<i32, Option<i64>> = sqlx::query_as::<_, (i32, Option<i64>)>(
            "SELECT partition, next_offset FROM kafka_offsets WHERE consumer_group = $1 AND topic = $2",
        )
        .bind(&settings.kafka.group_id)
        .bind(topic)
        .fetch_all(&pool)
        .await?
        .into_iter()
        .collect();
        let moves: Vec<Move> = targets
            .iter()
            .map(|&(partition, to)| Move {
                partition,
                from: stored.get(&partition).copied().flatten(),
                to,
            })
            .collect();
        for m in &moves {
            println!("{topic}/{}: {} -> {}", m.partition, show(m.from), m.to);
        }
        println!("dry run: nothing changed");
        return Ok(moves);
    }
    let who = Owner::Operator {
        user: std::env::var("USER").unwrap_or_else(|_| "operator".into()),
        host: std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
    };
    let store = OffsetStore::new(
        pool,
        settings.kafka.group_id.clone(),
        &who,
        settings.postgres.lock_timeout,
    );
    let replaced = store
        .reset(topic, &targets, &format!("{target:?} by {who}"))
        .await
        .map_err(|e| anyhow::anyhow!("reset not applied: {e}"))?;
    for r in &replaced {
        println!(
            "{topic}/{}: {} -> {} (replaced epoch {} of {})",
            r.partition,
            show(r.from_offset),
            r.to_offset,
            r.from_epoch,
            r.from_owner.as_deref().unwrap_or("no owner")
        );
    }
    println!(
        "reset {} partition(s); a running sink is fenced and continues from here",
        replaced.len()
    );
    Ok(replaced
        .into_iter()
        .map(|r| Move {
            partition: r.partition,
            from: r.from_offset,
            to: r.to_offset,
        })
        .collect())
}
