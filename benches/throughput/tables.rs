//! The `tables` scenario: the same orders spread over 1, 50, 200 … topics that one pattern
//! matches, a table per topic, so what each table costs the sink shows as CPU per record
//! against the one-table drain of the same records.

use kafka_pg_sink::config::WriteMode;
use sqlx::{Executor, PgPool};

use crate::data;
use crate::scenarios::{self, Measurement, SinkRun};
use crate::setup::{self, Env};

/// One topic count's backlog: its topics (the pattern's prefix), tables and the view over them.
pub struct Spread {
    pub topics: usize,
    /// Every topic's name starts with it, and no other topic's does.
    pub prefix: String,
    /// The tables, one per topic, in topic order.
    tables: Vec<String>,
    /// A view of every table's rows, which the run counts and samples.
    pub view: String,
    /// The orders' JSON bytes.
    pub payload: u64,
}

/// Makes `topics` topics and their tables, and produces orders `0..n` over them: order `i` to
/// topic `i % topics`. A topic has `partitions / topics` partitions (at least one), so one
/// topic is the plain insert drain and many topics do not multiply the partitions beyond
/// what they need.
pub async fn prepare(
    env: &Env,
    pool: &PgPool,
    name: &str,
    topics: usize,
    n: u64,
    partitions: i32,
) -> anyhow::Result<Spread> {
    let k = topics.max(1);
    // `t2-` is no prefix of `t200-`: each count's pattern matches its own topics only.
    let prefix = format!("{name}-t{k}-");
    let names: Vec<String> = (0..k).map(|t| format!("{prefix}{t:03}")).collect();
    let per_topic = (partitions / k as i32).max(1);
    let spec: Vec<(String, i32)> = names.iter().map(|t| (t.clone(), per_topic)).collect();
    setup::fresh_topics(env, &spec).await?;
    // As the sink names them: `{topic}` written snake_case.
    let snake = |t: &str| -> String {
        t.to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    let tables: Vec<String> = names.iter().map(|t| snake(t)).collect();
    let view = format!("bench_t{k}");
    let mut ddl = format!("DROP VIEW IF EXISTS {view};");
    for t in &tables {
        ddl.push_str(&format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (LIKE bench_orders INCLUDING ALL);"
        ));
    }
    let union: Vec<String> = tables
        .iter()
        .map(|t| format!("SELECT * FROM {t}"))
        .collect();
    ddl.push_str(&format!(
        "CREATE VIEW {view} AS {};",
        union.join(" UNION ALL ")
    ));
    pool.execute(ddl.as_str()).await?;
    let (_, payload) = setup::produce_to(
        env,
        n,
        |i| {
            let topic = (i % k as u64) as usize;
            (
                names[topic].as_str(),
                ((i / k as u64) % per_topic as u64) as i32,
            )
        },
        |i| Ok(data::order(i).into_bytes()),
    )
    .await?;
    Ok(Spread {
        topics: k,
        prefix,
        tables,
        view,
        payload,
    })
}

/// Drains one spread with the real sink (insert mode), from empty tables.
pub async fn drain(
    spread: &Spread,
    base: SinkRun<'_>,
    pool: &PgPool,
    n: u64,
    round: usize,
) -> anyhow::Result<Measurement> {
    pool.execute(format!("TRUNCATE {}", spread.tables.join(", ")).as_str())
        .await?;
    let name = format!("sink insert, {} tables", spread.topics);
    let group = format!("bench-tables-{}-{round}", spread.topics);
    let mut m = scenarios::sink(
        &SinkRun {
            name: &name,
            group: &group,
            table: &spread.view,
            mode: WriteMode::Insert,
            pattern: Some(&spread.prefix),
            ..base
        },
        pool,
        n,
        spread.payload,
        false,
    )
    .await?;
    m.tables = Some(spread.topics);
    Ok(m)
}

/// Each count's drain against the first count's (the fewest tables): CPU per record, rows/s,
/// the drain's seconds, the time to the first commit and from start to assigned.
pub fn ratios(drains: &[Measurement]) -> Vec<(String, f64)> {
    let Some(first) = drains.first() else {
        return Vec::new();
    };
    let base = first.tables.unwrap_or(1);
    let mut out = Vec::new();
    for m in &drains[1..] {
        let k = m.tables.unwrap_or(0);
        let label = |what: &str| format!("tables {k} / {base}: {what}");
        if let (Some(cpu), Some(cpu1)) = (m.cpu_seconds, first.cpu_seconds) {
            out.push((label("CPU per record"), cpu / cpu1.max(1e-3)));
        }
        out.push((label("rows/s"), m.rows_per_sec / first.rows_per_sec));
        out.push((label("drain seconds"), m.seconds / first.seconds));
        if let (Some(fc), Some(fc1)) = (m.first_commit_seconds, first.first_commit_seconds) {
            out.push((label("first commit seconds"), fc / fc1.max(1e-3)));
        }
        if let (Some(a), Some(a1)) = (m.assigned_seconds, first.assigned_seconds) {
            out.push((label("start to assigned seconds"), a / a1.max(1e-3)));
        }
    }
    out
}
