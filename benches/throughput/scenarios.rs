//! The measured scenarios. Each returns a `Measurement`; none asserts a time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use kafka_pg_sink::config::{TopicSettings, WriteMode};
use kafka_pg_sink::mapping::{TableRows, TopicMapper};
use kafka_pg_sink::record::RecordView;
use kafka_pg_sink::schema;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::data;
use crate::fairness::Readout;
use crate::formats::{self, Format};
use crate::proc;
use crate::registry;
use crate::setup::Env;

/// One scenario's result.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measurement {
    pub name: String,
    pub rows: u64,
    pub seconds: f64,
    pub rows_per_sec: f64,
    /// Payload megabytes per second: the scenario's own encoding of the rows (JSON for most;
    /// Avro and Protobuf are smaller).
    pub mb_per_sec: f64,
    pub commit_p50_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    /// Mean resident MiB in each quarter of the drain (sink scenarios): flat when memory
    /// does not follow the backlog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_quarters_mib: Option<[Option<f64>; 4]>,
    pub cpu_seconds: Option<f64>,
    /// The local broker's CPU seconds over the drain (sink scenarios, where one runs here).
    pub broker_cpu_seconds: Option<f64>,
    /// The whole machine's busy CPU seconds over the drain, all cores (sink scenarios).
    pub machine_busy_seconds: Option<f64>,
    /// Rows/s from the first committed batch to the last (without start-up and group join).
    pub steady_rows_per_sec: Option<f64>,
    /// Seconds from process start to the first committed batch (sink scenarios): start-up,
    /// the group join and the tables' descriptions.
    pub first_commit_seconds: Option<f64>,
    /// Seconds from the sink's `starting` line to its last `assigned` line (sink scenarios):
    /// the group join, and the claims and table descriptions of the assignment.
    pub assigned_seconds: Option<f64>,
    /// Tables (one per topic) the drain wrote (`tables`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tables: Option<usize>,
    /// The sink's requests to the Schema Registry over the whole run (registry formats only).
    pub registry_requests: Option<u64>,
    pub note: String,
    /// Per-partition lag over the drain (sink scenarios).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness: Option<Readout>,
}

impl Measurement {
    pub fn new(name: &str, rows: u64, payload_bytes: u64, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Self {
            name: name.into(),
            rows,
            seconds: secs,
            rows_per_sec: rows as f64 / secs,
            mb_per_sec: payload_bytes as f64 / secs / 1e6,
            ..Default::default()
        }
    }
}

/// Total JSON bytes of orders `0..n`.
pub fn payload_bytes(n: u64) -> u64 {
    (0..n).map(|i| data::order(i).len() as u64).sum()
}

/// A topic's settings, from TOML as a user writes them.
fn topic_settings(name: &str, table: &str, mode: WriteMode) -> anyhow::Result<TopicSettings> {
    use figment::providers::{Format, Toml};
    let mode = match mode {
        WriteMode::Insert => "insert",
        WriteMode::Upsert => "upsert",
    };
    let toml = format!("name = \"{name}\"\ntable = \"{table}\"\nmode = \"{mode}\"\n");
    Ok(figment::Figment::from(Toml::string(&toml)).extract()?)
}

/// Encodes orders `0..n` with the sink's own mapping into binary COPY data, in chunks of
/// `chunk` rows (upsert chunks carry the ordinal column the staging table has).
async fn encode_rows(
    pool: &PgPool,
    n: u64,
    chunk: u64,
    mode: WriteMode,
) -> anyhow::Result<(Vec<Bytes>, Vec<String>)> {
    encode_rows_in(pool, 0..n, chunk, mode).await
}

/// `encode_rows` for the orders `order` yields, in that order.
async fn encode_rows_in(
    pool: &PgPool,
    order: impl IntoIterator<Item = u64>,
    chunk: u64,
    mode: WriteMode,
) -> anyhow::Result<(Vec<Bytes>, Vec<String>)> {
    let table = Arc::new(schema::describe(pool, "public", "bench_orders").await?);
    let mapper = TopicMapper::new(&topic_settings("bench", "bench_orders", mode)?, table)?;
    let mut chunks = Vec::new();
    let mut columns = Vec::new();
    let mut rows = mapper.new_rows();
    let mut pending = 0;
    // The encoded chunk's bytes and its columns (the same for every chunk of these orders).
    let mut flush = |rows: TableRows, chunks: &mut Vec<Bytes>| {
        for rows in rows.shapes {
            columns = rows
                .columns
                .iter()
                .map(|&c| mapper.table().columns[c as usize].name.clone())
                .collect();
            chunks.push(rows.buffer.finish());
        }
    };
    for i in order {
        let value = data::order(i);
        let record = RecordView {
            topic: "bench",
            partition: 0,
            offset: i as i64,
            timestamp: None,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        };
        mapper
            .encode(&record, &mut rows)
            .map_err(|e| anyhow::anyhow!("encoding order {i}: {e:?}"))?;
        pending += 1;
        if pending == chunk {
            flush(std::mem::replace(&mut rows, mapper.new_rows()), &mut chunks);
            pending = 0;
        }
    }
    if pending > 0 {
        flush(rows, &mut chunks);
    }
    Ok((chunks, columns))
}

/// The limit: the same rows, binary COPY in one stream, one transaction, no Kafka.
pub async fn copy_ceiling(
    url: &str,
    pool: &PgPool,
    n: u64,
    payload: u64,
    order: RowOrder,
) -> anyhow::Result<Measurement> {
    pool.execute("TRUNCATE bench_orders").await?;
    let name = match order {
        RowOrder::Key => "COPY ceiling (1 stream)",
        RowOrder::Topic { .. } => "COPY, rows in topic order",
        RowOrder::Ids(_) => "COPY, rows in the sink's order",
    };
    let (chunks, columns) = match order {
        RowOrder::Key => encode_rows(pool, n, 10_000, WriteMode::Insert).await?,
        RowOrder::Topic { partitions } => {
            encode_rows_in(pool, topic_order(n, partitions), 10_000, WriteMode::Insert).await?
        }
        RowOrder::Ids(ids) => encode_rows_in(pool, ids, 10_000, WriteMode::Insert).await?,
    };
    let statement = format!(
        "COPY bench_orders ({}) FROM STDIN (FORMAT binary)",
        columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // One stream: strip each chunk's header and trailer and send them as one COPY.
    let header = 19;
    let mut conn = PgConnection::connect(url).await?;
    let started = Instant::now();
    let mut tx = conn.begin().await?;
    let mut copy = tx.copy_in_raw(&statement).await?;
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let start = if i == 0 { 0 } else { header };
        let end = if i == last {
            chunk.len()
        } else {
            chunk.len() - 2
        };
        copy.send(chunk.slice(start..end)).await?;
    }
    copy.finish().await?;
    tx.commit().await?;
    let elapsed = started.elapsed();
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM bench_orders")
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(count as u64 == n, "COPY wrote {count} rows, expected {n}");
    let mut m = Measurement::new(name, n, payload, elapsed);
    m.note = "binary COPY of pre-encoded rows, one transaction, no Kafka".into();
    Ok(m)
}

/// The order rows are written in by a COPY without Kafka.
#[derive(Clone)]
pub enum RowOrder {
    /// Orders 0, 1, 2 …: ascending keys, so every insert lands on the index's rightmost leaf,
    /// which PostgreSQL reaches without descending the tree.
    Key,
    /// As the sink receives them: order `i` is on partition `i % partitions`, and the consumer
    /// takes up to a turn of records from each partition in rotation, so ascending runs of
    /// every `partitions`-th key interleave.
    Topic { partitions: i32 },
    /// The orders as a sink run inserted them (its table's rows in physical order): what
    /// PostgreSQL alone pays for the order the records arrived in.
    Ids(Vec<u64>),
}

/// The orders `0..n` in the sequence the sink's consumer delivers them (see `RowOrder::Topic`).
fn topic_order(n: u64, partitions: i32) -> Vec<u64> {
    const TURN: u64 = kafka_pg_sink::kafka::RECORDS_PER_TURN as u64;
    let p = partitions.max(1) as u64;
    let mut out = Vec::with_capacity(n as usize);
    let mut round = 0;
    while (out.len() as u64) < n {
        for partition in 0..p {
            for k in round * TURN..(round + 1) * TURN {
                let i = k * p + partition;
                if i < n {
                    out.push(i);
                }
            }
        }
        round += 1;
    }
    out
}

/// Upsert without Kafka, batches of `batch` rows: COPY into staging + one merge (what the sink
/// does) against INSERT … SELECT FROM UNNEST(…) ON CONFLICT, on the same rows.
pub async fn upsert_strategies(
    url: &str,
    pool: &PgPool,
    n: u64,
    batch: u64,
    payload: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let mut out = Vec::new();

    pool.execute("TRUNCATE bench_orders").await?;
    let (chunks, columns) = encode_rows(pool, n, batch, WriteMode::Upsert).await?;
    let mut conn = PgConnection::connect(url).await?;
    conn.execute(
        "CREATE TEMP TABLE stage ON COMMIT DELETE ROWS AS SELECT * FROM bench_orders WITH NO DATA;
         ALTER TABLE stage ADD COLUMN __kps_ord bigint, ADD COLUMN __kps_mask bytea",
    )
    .await?;
    let cols = columns
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    // The sink's upsert rows: every column, the record's ordinal and its presence mask.
    let copy_sql = format!("COPY stage ({cols}, __kps_ord, __kps_mask) FROM STDIN (FORMAT binary)");
    let updates = columns
        .iter()
        .filter(|c| *c != "id")
        .map(|c| format!("\"{c}\" = EXCLUDED.\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let merge_sql = format!(
        "INSERT INTO bench_orders ({cols}) SELECT DISTINCT ON (id) {cols} FROM stage ORDER BY id, __kps_ord DESC \
         ON CONFLICT (id) DO UPDATE SET {updates}"
    );
    let started = Instant::now();
    for chunk in chunks {
        let mut tx = conn.begin().await?;
        let mut copy = tx.copy_in_raw(&copy_sql).await?;
        copy.send(chunk).await?;
        copy.finish().await?;
        tx.execute(merge_sql.as_str()).await?;
        tx.commit().await?;
    }
    let mut m = Measurement::new(
        "upsert: COPY staging + merge",
        n,
        payload,
        started.elapsed(),
    );
    m.note = format!("batches of {batch}, new keys, no Kafka");
    out.push(m);

    pool.execute("TRUNCATE bench_orders").await?;
    let unnest_sql = format!(
        "INSERT INTO bench_orders ({cols})
         SELECT DISTINCT ON (id) id, customer, amount, currency, status, created_at, attrs
           FROM UNNEST($1::text[], $2::text[], $3::numeric[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[])
                WITH ORDINALITY AS u(id, customer, amount, currency, status, created_at, attrs, ord)
          ORDER BY id, ord DESC
         ON CONFLICT (id) DO UPDATE SET {updates}"
    );
    anyhow::ensure!(
        cols == "\"id\", \"customer\", \"amount\", \"currency\", \"status\", \"created_at\", \"attrs\"",
        "the UNNEST statement assumes the table's column order"
    );
    // Build every batch's arrays first: like the staging path's encoding, it is not timed.
    let mut batches = Vec::new();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let mut arrays: [Vec<String>; 7] = Default::default();
        for j in i..end {
            let v: serde_json::Value = serde_json::from_str(&data::order(j))?;
            for (k, name) in [
                "id",
                "customer",
                "amount",
                "currency",
                "status",
                "created_at",
            ]
            .iter()
            .enumerate()
            {
                arrays[k].push(v[name].as_str().unwrap_or_default().to_string());
            }
            arrays[6].push(v["attrs"].to_string());
        }
        batches.push(arrays);
        i = end;
    }
    let started = Instant::now();
    for arrays in batches {
        let mut tx = conn.begin().await?;
        let [a0, a1, a2, a3, a4, a5, a6] = arrays;
        sqlx::query(&unnest_sql)
            .bind(a0)
            .bind(a1)
            .bind(a2)
            .bind(a3)
            .bind(a4)
            .bind(a5)
            .bind(a6)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    let mut m = Measurement::new(
        "upsert: INSERT … FROM UNNEST",
        n,
        payload,
        started.elapsed(),
    );
    m.note = format!("batches of {batch}, new keys, no Kafka; text arrays cast by the server");
    out.push(m);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM bench_orders")
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(count as u64 == n, "UNNEST wrote {count} rows, expected {n}");
    Ok(out)
}

/// Starts the real sink binary with `config`, its log (JSON lines) going to `log`. Only the
/// file configures it: the service variables of this process are removed.
fn spawn_sink(bin: &Path, config: &Path, log: &Path) -> anyhow::Result<std::process::Child> {
    Command::new(bin)
        .args(["run", "--config"])
        .arg(config)
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP_SERVERS")
        .env_remove("SCHEMA_REGISTRY_URL")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// Options of one run of the real sink binary.
pub struct SinkRun<'a> {
    pub name: &'a str,
    pub bin: &'a Path,
    pub url: &'a str,
    pub kafka: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    /// `bench_orders`, or `bench_sparse` for the sparse-upsert scenario.
    pub table: &'a str,
    pub mode: WriteMode,
    pub writers: usize,
    pub extra: &'a str,
    /// The topic's records are in a registry format (JSON when `None`).
    pub registry: Option<RegistryFormat<'a>>,
    /// The topic's `format` when it is not plain JSON nor a registry format
    /// (`connect-json`, `debezium`).
    pub format: Option<&'a str>,
    /// An empty topic the sink also consumes, into the same table: a quiet topic beside a
    /// busy one, as a sink with several topics has (`idle-topic`).
    pub idle_topic: Option<&'a str>,
    /// Consume every topic whose name starts with this prefix, each into the table named
    /// after it (`tables`), instead of `topic`; `table` is then a view of all those tables.
    pub pattern: Option<&'a str>,
    /// How often the drain's progress is read from `kafka_offsets`: 20 ms, or longer where
    /// reading hundreds of partitions' rows that often would itself load PostgreSQL and skew
    /// a comparison with fewer partitions (`partitions`).
    pub poll_every: Duration,
}

/// A topic whose records are framed for a Schema Registry.
pub struct RegistryFormat<'a> {
    pub format: Format,
    /// The registry's API root, as `[schema_registry] url`.
    pub url: &'a str,
    /// Distinct schema ids in the topic: the most registry requests a sink that caches by id
    /// may make; any more is a request on the hot path.
    pub schema_ids: u64,
}

/// The first JSON line of the sink's log whose message is `message`.
fn log_line(log: &Path, message: &str) -> anyhow::Result<Option<serde_json::Value>> {
    Ok(BufReader::new(std::fs::File::open(log)?)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .find(|v| v["message"] == message))
}

/// Seconds between the sink's `starting` line and its last `assigned` line, by their
/// timestamps.
fn assigned_after_start(log: &Path) -> anyhow::Result<Option<f64>> {
    let at = |v: &serde_json::Value| {
        v["timestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    let mut started = None;
    let mut assigned = None;
    for line in BufReader::new(std::fs::File::open(log)?)
        .lines()
        .map_while(Result::ok)
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        match v["message"].as_str() {
            Some("starting") => started = started.or(at(&v)),
            Some("assigned") => assigned = at(&v).or(assigned),
            _ => {}
        }
    }
    Ok(started
        .zip(assigned)
        .map(|(s, a)| (a - s).num_microseconds().unwrap_or(0) as f64 / 1e6))
}

/// Checks a sample of the rows (about 100, first and last included) column by column against
/// the orders they came from, so a format that decodes wrongly fails the run, not just a count.
async fn check_sample(
    pool: &PgPool,
    relation: &str,
    n: u64,
    format: Option<Format>,
) -> anyhow::Result<()> {
    let stride = (n / 100).max(1);
    let expected: Vec<String> = (0..n)
        .step_by(stride as usize)
        .chain(n.checked_sub(1))
        .map(|i| formats::expected_json(format, i))
        .collect();
    let wrong: Vec<(String, Option<String>)> = sqlx::query_as(&format!(
        "SELECT e::text, row_to_json(b)::text
           FROM unnest($1::jsonb[]) e LEFT JOIN {relation} b ON b.id = e->>'id'
          WHERE b.id IS NULL OR b.customer <> e->>'customer' OR b.amount <> (e->>'amount')::numeric
             OR b.currency <> e->>'currency' OR b.status <> e->>'status'
             OR b.created_at <> (e->>'created_at')::timestamptz OR b.attrs <> e->'attrs'"
    ))
    .bind(&expected)
    .fetch_all(pool)
    .await?;
    if let Some((want, got)) = wrong.first() {
        anyhow::bail!(
            "{} of {} sampled rows differ from their records; first: expected {want}, found {}",
            wrong.len(),
            expected.len(),
            got.as_deref().unwrap_or("no row")
        );
    }
    Ok(())
}

/// Samples `bench_sparse` after the sparse records ran over the full orders: each column is
/// the sparse record's value where it carried the column and the order's own value elsewhere.
pub async fn check_sparse(pool: &PgPool, n: u64) -> anyhow::Result<()> {
    let stride = (n / 200).max(1);
    let mut expected = Vec::new();
    for i in (0..n).step_by(stride as usize).chain(n.checked_sub(1)) {
        let mut row: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&data::order(i))?;
        for (c, name) in data::SPARSE_COLUMNS.iter().enumerate() {
            if data::sparse_carried(i) & (1 << c) != 0 {
                row.insert(
                    name.to_string(),
                    serde_json::from_str(&data::sparse_value(i, c))?,
                );
            }
        }
        expected.push(serde_json::Value::Object(row).to_string());
    }
    let wrong: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT e::text, row_to_json(b)::text
           FROM unnest($1::jsonb[]) e LEFT JOIN bench_sparse b ON b.id = e->>'id'
          WHERE b.id IS NULL OR b.customer IS DISTINCT FROM e->>'customer'
             OR b.amount IS DISTINCT FROM (e->>'amount')::numeric
             OR b.currency IS DISTINCT FROM e->>'currency' OR b.status IS DISTINCT FROM e->>'status'
             OR b.created_at IS DISTINCT FROM (e->>'created_at')::timestamptz
             OR b.attrs IS DISTINCT FROM e->'attrs'",
    )
    .bind(&expected)
    .fetch_all(pool)
    .await?;
    if let Some((want, got)) = wrong.first() {
        anyhow::bail!(
            "{} of {} sampled sparse rows differ from their records; first: expected {want}, found {}",
            wrong.len(),
            expected.len(),
            got.as_deref().unwrap_or("no row")
        );
    }
    Ok(())
}

/// Runs the sink until `kafka_offsets` reaches the end offsets (`n` records in all).
pub async fn sink(
    run: &SinkRun<'_>,
    pool: &PgPool,
    n: u64,
    payload: u64,
    truncate: bool,
) -> anyhow::Result<Measurement> {
    if truncate {
        pool.execute(format!("TRUNCATE {}", run.table).as_str())
            .await?;
    }
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("bench.toml");
    let mode = match run.mode {
        WriteMode::Insert => "insert",
        WriteMode::Upsert => "upsert",
    };
    let (registry, format) = match &run.registry {
        Some(r) => (
            format!("[schema_registry]\nurl = \"{}\"\n", r.url),
            format!("format = \"{}\"\n", r.format.setting()),
        ),
        None => (
            String::new(),
            run.format
                .map(|f| format!("format = \"{f}\"\n"))
                .unwrap_or_default(),
        ),
    };
    // The drained topic, and the idle one beside it where there is one: the same table,
    // mode and format.
    let topics: String = match run.pattern {
        // A table per topic, named after it (`{topic}`, written snake_case).
        Some(prefix) => format!(
            "[[topics]]\npattern = \"{prefix}.*\"\ntable = \"{{topic}}\"\nmode = \"{mode}\"\n{format}"
        ),
        None => std::iter::once(run.topic)
            .chain(run.idle_topic)
            .map(|t| {
                format!(
                    "[[topics]]\nname = \"{t}\"\ntable = \"{}\"\nmode = \"{mode}\"\n{format}",
                    run.table
                )
            })
            .collect(),
    };
    std::fs::write(
        &config,
        format!(
            "[kafka]\nbootstrap_servers = \"{}\"\ngroup_id = \"{}\"\n[postgres]\nurl = \"{}\"\nwriters = {}\n{}\n\
             [log]\nformat = \"json\"\nprogress_interval = \"5s\"\n[http]\nlisten = \"127.0.0.1:0\"\n{registry}\
             {topics}",
            run.kafka, run.group, run.url, run.writers, run.extra
        ),
    )?;
    let log_path = dir.path().join("sink.log");
    let broker = proc::broker_pid();
    let broker_before = broker.and_then(proc::cpu_seconds);
    let busy_before = proc::machine_busy_seconds();
    let started = Instant::now();
    let mut child = spawn_sink(run.bin, &config, &log_path)?;
    let pid = child.id();
    let mut first_commit = None;
    let mut peak = 0u64;
    let mut rss_samples = Vec::new();
    let deadline = started + Duration::from_secs(600 + n / 1000);
    let mut fairness: Option<Readout> = None;
    loop {
        let offsets: Vec<(i32, Option<i64>)> = sqlx::query_as(
            "SELECT partition, next_offset FROM kafka_offsets
              WHERE consumer_group = $1 AND (topic = $2 OR starts_with(topic, $3))
              ORDER BY topic, partition",
        )
        .bind(run.group)
        .bind(run.topic)
        .bind(run.pattern)
        .fetch_all(pool)
        .await?;
        // Every partition has a row from its claim on, before any commits. The readout
        // tells partitions by number, so only one topic's.
        if !offsets.is_empty() && run.pattern.is_none() {
            fairness
                .get_or_insert_with(|| Readout::new(n, offsets.len()))
                .sample(started.elapsed(), &offsets);
        }
        let done = offsets.iter().filter_map(|(_, o)| *o).sum::<i64>() as u64;
        if done > 0 && first_commit.is_none() {
            first_commit = Some(Instant::now());
        }
        peak = peak.max(proc::peak_rss(pid).unwrap_or(0));
        // From the first commit on: start-up is not the drain.
        if let (Some(_), Some(rss)) = (first_commit, proc::rss(pid)) {
            rss_samples.push((done, rss));
        }
        if done >= n {
            break;
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "the sink exited ({status}) before draining; log: {}",
                std::fs::read_to_string(&log_path)?
            );
        }
        anyhow::ensure!(Instant::now() < deadline, "the sink did not drain in time");
        tokio::time::sleep(run.poll_every).await;
    }
    let elapsed = started.elapsed();
    let steady = first_commit.map(|t| t.elapsed());
    let cpu = proc::cpu_seconds(pid);
    let broker_cpu = broker
        .and_then(proc::cpu_seconds)
        .zip(broker_before)
        .map(|(after, before)| after - before);
    let busy = proc::machine_busy_seconds()
        .zip(busy_before)
        .map(|(after, before)| after - before);
    peak = peak.max(proc::peak_rss(pid).unwrap_or(0));
    // Scraped while the sink still runs: the whole drain's requests, start-up included.
    let registry_requests = match &run.registry {
        Some(_) => {
            let serving = log_line(&log_path, "serving /metrics, /health and /ready")?
                .context("the sink never logged its HTTP address")?;
            let address = serving["address"]
                .as_str()
                .context("no address in the sink's HTTP line")?;
            Some(registry::requests(address).await?)
        }
        None => None,
    };
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "the sink did not stop cleanly: {status}");
    let summary = log_line(&log_path, "summary")?;
    let assigned = assigned_after_start(&log_path)?;
    let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", run.table))
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(
        count as u64 == n,
        "the sink left {count} rows, expected {n}"
    );
    if run.table == "bench_orders" || run.pattern.is_some() {
        check_sample(pool, run.table, n, run.registry.as_ref().map(|r| r.format)).await?;
    }
    if let (Some(r), Some(requests)) = (&run.registry, registry_requests) {
        anyhow::ensure!(
            requests <= r.schema_ids,
            "{}: the sink made {requests} schema registry requests for {} schema id(s): a request on the hot path",
            run.name,
            r.schema_ids
        );
    }

    let mut m = Measurement::new(run.name, n, payload, elapsed);
    m.fairness = fairness.map(|mut f| {
        f.finish();
        f
    });
    m.peak_rss_mib = Some(peak as f64 / (1024.0 * 1024.0));
    m.rss_quarters_mib = Some(proc::rss_by_quarter(&rss_samples, n));
    m.cpu_seconds = cpu;
    m.broker_cpu_seconds = broker_cpu;
    m.machine_busy_seconds = busy;
    // Too short a window (a tiny run drains between two polls) says nothing.
    m.steady_rows_per_sec = steady
        .filter(|s| *s > Duration::from_millis(500))
        .map(|s| n as f64 / s.as_secs_f64());
    m.first_commit_seconds = first_commit.map(|t| (t - started).as_secs_f64());
    m.assigned_seconds = assigned;
    if let Some(s) = summary {
        m.commit_p50_ms = s["commit_p50_ms"].as_f64();
        m.commit_p99_ms = s["commit_p99_ms"].as_f64();
    }
    m.registry_requests = registry_requests;
    m.note = format!(
        "real binary, {} writers, end to end from process start{}",
        run.writers,
        match &run.registry {
            Some(r) => format!(", {} via the schema registry", r.format.setting()),
            None => run.format.map(|f| format!(", {f}")).unwrap_or_default(),
        }
    );
    Ok(m)
}

/// The pattern most teams write first: one transaction per record (row + offset upsert).
pub async fn naive(
    env: &Env,
    url: &str,
    pool: &PgPool,
    topic: &str,
    partitions: i32,
    n: u64,
    payload: u64,
) -> anyhow::Result<Measurement> {
    pool.execute("TRUNCATE bench_orders").await?;
    let consumer: BaseConsumer = env
        .kafka_config()
        .set("group.id", "kps-bench-naive")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut conn = PgConnection::connect(url).await?;
    let insert =
        "INSERT INTO bench_orders (id, customer, amount, currency, status, created_at, attrs)
                  VALUES ($1, $2, $3::numeric, $4, $5, $6::timestamptz, $7::jsonb)";
    let offset = "INSERT INTO kafka_offsets (consumer_group, topic, partition, next_offset)
                  VALUES ('naive', $1, $2, $3)
                  ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset";
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let Some(message) = consumer.poll(Duration::from_secs(10)) else {
            anyhow::bail!("no record within 10 s after {done}");
        };
        let message = message?;
        let v: serde_json::Value = serde_json::from_slice(message.payload().unwrap_or_default())?;
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let mut tx = conn.begin().await?;
        sqlx::query(insert)
            .bind(s("id"))
            .bind(s("customer"))
            .bind(s("amount"))
            .bind(s("currency"))
            .bind(s("status"))
            .bind(s("created_at"))
            .bind(v["attrs"].to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query(offset)
            .bind(message.topic())
            .bind(message.partition())
            .bind(message.offset() + 1)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        done += 1;
    }
    let mut m = Measurement::new(
        "naive: 1 transaction per record",
        n,
        payload,
        started.elapsed(),
    );
    m.note = format!("{n} records (a slice), one connection");
    Ok(m)
}

/// Latency under a trickle: records produced at `rate`/s for `secs` while the sink runs with
/// its shipped settings; from produce (record timestamp) to row written, measured in SQL.
pub struct Trickle {
    pub records: u64,
    pub rate: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub max_wait_ms: u64,
    pub sink_batch_age_p99_ms: Option<f64>,
}

pub async fn trickle(
    env: &Env,
    bin: &Path,
    url: &str,
    pool: &PgPool,
    topic: &str,
    rate: u64,
    secs: u64,
) -> anyhow::Result<Trickle> {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let group = format!("kps-bench-trickle-{}", std::process::id());
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("trickle.toml");
    let settings = kafka_pg_sink::config::BatchSettings::default();
    std::fs::write(
        &config,
        format!(
            "[kafka]\nbootstrap_servers = \"{}\"\ngroup_id = \"{group}\"\n[postgres]\nurl = \"{url}\"\n\
             [log]\nformat = \"json\"\n[http]\nlisten = \"127.0.0.1:0\"\n[[topics]]\nname = \"{topic}\"\ntable = \"bench_trickle\"\n\
             [topics.metadata]\ntimestamp = \"kafka_ts\"\n",
            env.kafka
        ),
    )?;
    let log_path = dir.path().join("sink.log");
    let mut child = spawn_sink(bin, &config, &log_path)?;
    // Wait for the assignment, so start-up does not count as latency.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log_path)?.contains("assigned") {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the trickle sink was never assigned partitions"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let producer: FutureProducer = env
        .kafka_config()
        .set("linger.ms", "0")
        .set("acks", "all")
        .create()?;
    let total = rate * secs;
    let started = Instant::now();
    let mut pending = Vec::new();
    for i in 0..total {
        // Pace to the wall clock: record i is due at i / rate seconds.
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let (key, value) = (data::key(i), data::order(i));
        let now_ms = chrono::Utc::now().timestamp_millis();
        let record = FutureRecord::to(topic)
            .key(&key)
            .payload(&value)
            .timestamp(now_ms);
        pending.push(producer.send_result(record).map_err(|(e, _)| e)?);
    }
    for d in pending {
        d.await?.map_err(|(e, _)| e)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM bench_trickle")
            .fetch_one(pool)
            .await?;
        if count as u64 >= total {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "trickle: only {count} of {total} rows arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    child.wait()?;
    let (p50, p99, max): (f64, f64, f64) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms)
           FROM (SELECT (extract(epoch FROM written_at - kafka_ts) * 1000)::float8 AS ms FROM bench_trickle) l",
    )
    .fetch_one(pool)
    .await?;
    let age = BufReader::new(std::fs::File::open(&log_path)?)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .find(|v| v["message"] == "summary")
        .and_then(|s| s["batch_age_p99_ms"].as_f64());
    Ok(Trickle {
        records: total,
        rate,
        p50_ms: p50,
        p99_ms: p99,
        max_ms: max,
        max_wait_ms: settings.max_wait.as_millis() as u64,
        sink_batch_age_p99_ms: age,
    })
}
