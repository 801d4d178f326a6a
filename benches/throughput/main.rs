//! The throughput benchmark: the sink measured against PostgreSQL's own COPY limit on the same
//! rows, in one run.
//!
//! `scripts/bench.sh` (or `cargo bench --bench throughput -- …`) runs it against the services
//! from `scripts/dev-services.sh`. It prints a table and can write JSON; it asserts no timing.

mod data;
mod fairness;
mod floor;
mod formats;
mod partitions;
mod proc;
mod registry;
mod scenarios;
mod setup;
mod tables;

use std::path::PathBuf;

use clap::Parser;
use kafka_pg_sink::config::WriteMode;
use serde::Serialize;

use formats::{Encoder, Format};
use scenarios::{Measurement, RegistryFormat, RowOrder, SinkRun, Trickle};

/// Measures the sink against binary COPY and against one transaction per record.
#[derive(Debug, Parser)]
struct Args {
    /// Records in the backlog the sink drains.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Writer connections of the sink.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// The producer's `compression.type` for every topic (none, gzip, snappy, lz4, zstd).
    #[arg(long, default_value = "none")]
    compression: String,
    /// Records for the one-transaction-per-record baseline (default: records / 50).
    #[arg(long)]
    naive_records: Option<u64>,
    /// Seconds of the 1,000 records/s trickle (0 skips it).
    #[arg(long, default_value_t = 10)]
    trickle_secs: u64,
    #[arg(long, default_value_t = 1000)]
    trickle_rate: u64,
    /// Scenarios to run, comma-separated: copy, insert, idle-topic, avro, protobuf,
    /// connect-json, debezium, upsert, sparse-upsert, tables, fetch-floor, naive, strategies,
    /// trickle; and (not by default) partitions. avro and protobuf need SCHEMA_REGISTRY_URL.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,insert,idle-topic,avro,protobuf,connect-json,debezium,upsert,sparse-upsert,tables,fetch-floor,naive,strategies,trickle"
    )]
    only: Vec<String>,
    /// The `tables` scenario's topic counts, comma-separated: the same `--records` spread over
    /// that many topics matched by one pattern, a table per topic, each compared with the
    /// first count.
    #[arg(long, value_delimiter = ',', default_value = "1,50,200")]
    tables: Vec<usize>,
    /// Rounds of the COPY ceiling, insert, idle-topic, registry-format, envelope, upsert (new
    /// keys), sparse-upsert and tables scenarios; with more than one, each ratio is also given as its
    /// median over the rounds (a shared, noisy machine moves single runs by ±10%).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Extra `[batch]` settings for the sink, as TOML lines (e.g. "max_records = 20000").
    #[arg(long, default_value = "")]
    batch: String,
    /// Extra `[kafka.properties]` for the sink, as TOML lines (e.g.
    /// "\"max.partition.fetch.bytes\" = \"1048576\"", to measure librdkafka's defaults).
    #[arg(long, default_value = "")]
    kafka_properties: String,
    /// Partition counts of the `partitions` scenario, each drained from a backlog of
    /// `--records`.
    #[arg(long, value_delimiter = ',', default_value = "8,64,256")]
    partition_counts: Vec<i32>,
    /// Where the `partitions` scenario's orders go: `modulo` (order `i` on partition
    /// `i % N`, as every other scenario) or `murmur2` (by key, as Kafka's Java producer).
    #[arg(long, default_value = "modulo", value_parser = ["modulo", "murmur2"])]
    partitioner: String,
    /// The sink's `kafka.memory_budget` (e.g. "128MiB"; default: the sink's own default).
    #[arg(long)]
    memory_budget: Option<String>,
    /// Write the results as JSON here too, and the insert drain's per-partition lag as an SVG
    /// next to it (`PATH.fairness.svg`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Names the benchmark's database (`-` written `_`) and topics (`NAME`, `NAME-…`): two
    /// runs on one machine under different names do not drop each other's.
    #[arg(long, default_value = "kps-bench")]
    name: String,
    /// The sink binary (default: the one cargo built with this benchmark).
    #[arg(long)]
    sink_bin: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Everything one run measured.
#[derive(Debug, Serialize)]
struct Report {
    machine: String,
    records: u64,
    partitions: i32,
    writers: usize,
    produce_seconds: f64,
    /// Each encoding's payload bytes for all the records (what its MB/s counts).
    payload_bytes: Vec<(String, u64)>,
    results: Vec<Measurement>,
    ratios: Vec<(String, f64)>,
    trickle: Option<TrickleReport>,
}

#[derive(Debug, Serialize)]
struct TrickleReport {
    records: u64,
    rate: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    max_wait_ms: u64,
    sink_batch_age_p99_ms: Option<f64>,
}

impl From<Trickle> for TrickleReport {
    fn from(t: Trickle) -> Self {
        Self {
            records: t.records,
            rate: t.rate,
            p50_ms: t.p50_ms,
            p99_ms: t.p99_ms,
            max_ms: t.max_ms,
            max_wait_ms: t.max_wait_ms,
            sink_batch_age_p99_ms: t.sink_batch_age_p99_ms,
        }
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb / 1024 / 1024)
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    format!("{cpus} cores ({model}), {mem} GiB; Kafka, PostgreSQL and the sink on the same machine")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // sqlx logs every statement over 1 s: the `tables` scenario's DDL of hundreds of
        // tables would fill the screen.
        .with_env_filter("warn,sqlx::query=error")
        .init();
    let args = Args::parse();
    let mut env = setup::Env::from_env()?;
    env.compression = args.compression.clone();
    if let Some(budget) = &args.memory_budget {
        // Every sink this run spawns inherits it (`KAFKA_PG_SINK_` variables override the configuration).
        std::env::set_var("KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET", budget);
    }
    let bin = match &args.sink_bin {
        Some(b) => b.clone(),
        None => PathBuf::from(env!("CARGO_BIN_EXE_kafka-pg-sink")),
    };
    anyhow::ensure!(
        bin.exists(),
        "sink binary {} not found: build it (scripts/bench.sh does)",
        bin.display()
    );
    let n = args.records;
    let naive_n = args.naive_records.unwrap_or((n / 50).max(1000)).min(n);
    let say = |m: &str| eprintln!("bench: {m}");

    let wants = |name: &str| args.only.iter().any(|o| o == name);
    let formats: Vec<Format> = [Format::Avro, Format::Protobuf]
        .into_iter()
        .filter(|f| wants(f.setting()))
        .collect();
    // Before anything runs: a missing registry is found in a second, not after the COPY.
    let registry_url = if formats.is_empty() {
        None
    } else {
        Some(env.registry()?.to_string())
    };

    say("fresh database and topic");
    let (url, pool) = setup::fresh_database(&env, &args.name.replace('-', "_")).await?;
    let topic = args.name.as_str();
    setup::fresh_topic(&env, topic, args.partitions).await?;
    say(&format!("producing {n} records"));
    let (produce, payload) = setup::produce(&env, topic, n, args.partitions, |i| {
        Ok(data::order(i).into_bytes())
    })
    .await?;
    let mut payloads = vec![("json".to_string(), payload)];
    // The same orders in each registry format, each in a topic of its own, produced before
    // any scenario is timed.
    let mut encoded = Vec::new();
    for format in &formats {
        let name = format.setting();
        let topic = format!("{}-{name}", args.name);
        let base = registry_url.as_deref().unwrap_or_default();
        let id = registry::register(base, &format!("{topic}-value"), *format).await?;
        say(&format!("producing {n} {name} records (schema id {id})"));
        let encoder = Encoder::new(*format, id)?;
        setup::fresh_topic(&env, &topic, args.partitions).await?;
        let (_, bytes) =
            setup::produce(&env, &topic, n, args.partitions, |i| encoder.encode(i)).await?;
        payloads.push((name.to_string(), bytes));
        encoded.push((*format, topic, bytes));
    }

    // The same orders in the JSON envelopes, which carry the schema in every record.
    let mut envelopes: Vec<(&'static str, String, u64)> = Vec::new();
    for (name, encode) in [
        ("connect-json", data::connect_order as fn(u64) -> String),
        ("debezium", data::debezium_order),
    ] {
        if !wants(name) {
            continue;
        }
        let topic = format!("{}-{name}", args.name);
        say(&format!("producing {n} {name} records"));
        setup::fresh_topic(&env, &topic, args.partitions).await?;
        let (_, bytes) = setup::produce(&env, &topic, n, args.partitions, |i| {
            Ok(encode(i).into_bytes())
        })
        .await?;
        payloads.push((name.to_string(), bytes));
        envelopes.push((name, topic, bytes));
    }

    // An empty topic beside the orders, for the sink to consume as well (`idle-topic`).
    let idle_topic = &format!("{}-idle", args.name);
    if wants("idle-topic") {
        setup::fresh_topic(&env, idle_topic, args.partitions).await?;
    }

    // The same orders over many topics, a table each (`tables`).
    let mut spreads = Vec::new();
    if wants("tables") {
        for &count in &args.tables {
            say(&format!(
                "producing {n} records over {count} topics and tables"
            ));
            spreads
                .push(tables::prepare(&env, &pool, &args.name, count, n, args.partitions).await?);
        }
    }

    // The fetch floor's consumer gets the same `[kafka.properties]` as the sinks.
    let kafka_properties = if args.kafka_properties.is_empty() {
        String::new()
    } else {
        format!("[kafka.properties]\n{}\n", args.kafka_properties)
    };
    let mut batch = if args.batch.is_empty() {
        String::new()
    } else {
        format!("[batch]\n{}\n", args.batch)
    };
    batch.push_str(&kafka_properties);
    let mut results = Vec::new();
    let run = |name: &'static str, group: &'static str, mode| SinkRun {
        name,
        bin: &bin,
        url: &url,
        kafka: &env.kafka,
        topic,
        group,
        table: "bench_orders",
        mode,
        writers: args.writers,
        extra: &batch,
        registry: None,
        format: None,
        idle_topic: None,
        pattern: None,
        poll_every: std::time::Duration::from_millis(20),
    };
    let rounds = args.rounds.max(1);
    let mut per_round: Vec<Vec<(String, f64)>> = Vec::new();
    let (mut ceiling, mut insert, mut upsert, mut by_format) = (None, None, None, Vec::new());
    let mut in_topic_order = None;
    let mut by_tables = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            say(&format!("round {round} of {rounds}"));
        }
        ceiling = None;
        in_topic_order = None;
        if wants("copy") {
            say("COPY ceiling");
            ceiling = Some(scenarios::copy_ceiling(&url, &pool, n, payload, RowOrder::Key).await?);
            say("COPY, rows in topic order");
            in_topic_order = Some(
                scenarios::copy_ceiling(
                    &url,
                    &pool,
                    n,
                    payload,
                    RowOrder::Topic {
                        partitions: args.partitions,
                    },
                )
                .await?,
            );
        }
        // Each round's sink starts from the beginning: a consumer group of its own.
        let insert_group = format!("bench-insert-{round}");
        insert = None;
        if wants("insert") {
            say("sink, insert mode");
            insert = Some(
                scenarios::sink(
                    &SinkRun {
                        group: &insert_group,
                        ..run("sink insert", "", WriteMode::Insert)
                    },
                    &pool,
                    n,
                    payload,
                    true,
                )
                .await?,
            );
        }
        by_format = Vec::new();
        if wants("idle-topic") {
            say("sink, insert mode, an idle topic beside");
            let measured = scenarios::sink(
                &SinkRun {
                    group: &format!("bench-idle-{round}"),
                    idle_topic: Some(idle_topic),
                    ..run("sink insert + idle topic", "", WriteMode::Insert)
                },
                &pool,
                n,
                payload,
                true,
            )
            .await?;
            by_format.push(("idle-topic", WriteMode::Insert, measured));
        }
        for (format, format_topic, bytes) in &encoded {
            let name = format.setting();
            say(&format!("sink, {name}, insert mode"));
            let measured = scenarios::sink(
                &SinkRun {
                    name: match format {
                        Format::Avro => "sink avro (insert)",
                        Format::Protobuf => "sink protobuf (insert)",
                    },
                    topic: format_topic,
                    group: &format!("bench-{name}-{round}"),
                    registry: Some(RegistryFormat {
                        format: *format,
                        url: registry_url.as_deref().unwrap_or_default(),
                        schema_ids: 1,
                    }),
                    ..run("", "", WriteMode::Insert)
                },
                &pool,
                n,
                *bytes,
                true,
            )
            .await?;
            by_format.push((name, WriteMode::Insert, measured));
        }
        for (name, envelope_topic, bytes) in &envelopes {
            // Debezium events are changes, applied in upsert mode (all creates here).
            let (label, mode) = match *name {
                "connect-json" => ("sink connect-json (insert)", WriteMode::Insert),
                _ => ("sink debezium (upsert)", WriteMode::Upsert),
            };
            say(&format!("sink, {label}"));
            let measured = scenarios::sink(
                &SinkRun {
                    name: label,
                    topic: envelope_topic,
                    group: &format!("bench-{name}-{round}"),
                    format: Some(name),
                    ..run("", "", mode)
                },
                &pool,
                n,
                *bytes,
                true,
            )
            .await?;
            by_format.push((name, mode, measured));
        }
        // Last in each round, so the existing-keys run after the rounds finds the last
        // round's rows in the table.
        upsert = None;
        if wants("upsert") {
            say("sink, upsert mode (new keys)");
            let new_keys = SinkRun {
                group: &format!("bench-upsert-{round}"),
                ..run("sink upsert (new keys)", "", WriteMode::Upsert)
            };
            upsert = Some(scenarios::sink(&new_keys, &pool, n, payload, true).await?);
        }
        by_tables = Vec::new();
        for spread in &spreads {
            say(&format!("sink, insert mode, {} tables", spread.topics));
            let base = run("", "", WriteMode::Insert);
            by_tables.push(tables::drain(spread, base, &pool, n, round).await?);
        }
        let mut round_ratios =
            format_ratios(&ceiling, &in_topic_order, &insert, &upsert, &by_format);
        round_ratios.extend(tables::ratios(&by_tables));
        per_round.push(round_ratios);
    }
    let mut ratios_extra = Vec::new();
    if wants("upsert") {
        say("sink, upsert mode (existing keys)");
        let existing = run(
            "sink upsert (existing keys)",
            "bench-upsert-again",
            WriteMode::Upsert,
        );
        results.push(scenarios::sink(&existing, &pool, n, payload, false).await?);
    }
    if wants("partitions") {
        let (measured, ratios) = partitions::partitions(
            &env,
            &run,
            &url,
            &pool,
            n,
            &args.partition_counts,
            args.partitioner == "murmur2",
        )
        .await?;
        results.extend(measured);
        ratios_extra.extend(ratios);
    }
    if wants("sparse-upsert") {
        let runs = sparse_upsert(&env, &run, &pool, n, payload, args.partitions, rounds).await?;
        let name = "sink sparse-upsert / uniform upsert (existing keys)";
        let mut per: Vec<f64> = runs
            .iter()
            .map(|(uniform, sparse)| sparse.rows_per_sec / uniform.rows_per_sec)
            .collect();
        if rounds == 1 {
            ratios_extra.extend(per.first().map(|r| (name.to_string(), *r)));
        } else {
            for (i, r) in per.iter().enumerate() {
                ratios_extra.push((format!("round {}: {name}", i + 1), *r));
            }
            per.sort_by(f64::total_cmp);
            ratios_extra.push((format!("median of {rounds}: {name}"), per[per.len() / 2]));
        }
        // The table shows the last round's measurements.
        if let Some((uniform, sparse)) = runs.into_iter().last() {
            results.extend([uniform, sparse]);
        }
    }
    if wants("fetch-floor") {
        let floors = fetch_floors(&env, &args, &kafka_properties, topic, &envelopes).await?;
        ratios_extra.extend(floor_ratios(&floors, &insert, &upsert, &by_format));
        results.extend(floors.into_iter().map(|(_, m)| m));
    }
    let mut naive = None;
    if wants("naive") {
        say(&format!("naive baseline on {naive_n} records"));
        naive = Some(
            scenarios::naive(
                &env,
                &url,
                &pool,
                topic,
                args.partitions,
                naive_n,
                scenarios::payload_bytes(naive_n),
            )
            .await?,
        );
    }
    if wants("strategies") {
        say("upsert strategies without Kafka");
        results.extend(scenarios::upsert_strategies(&url, &pool, n, 10_000, payload).await?);
    }
    let trickle = if wants("trickle") && args.trickle_secs > 0 {
        say(&format!(
            "trickle: {} records/s for {} s",
            args.trickle_rate, args.trickle_secs
        ));
        let trickle_topic = format!("{}-trickle", args.name);
        setup::fresh_topic(&env, &trickle_topic, args.partitions).await?;
        Some(
            scenarios::trickle(
                &env,
                &bin,
                &url,
                &pool,
                &trickle_topic,
                args.trickle_rate,
                args.trickle_secs,
            )
            .await?,
        )
    } else {
        None
    };

    let rate = |m: &Option<Measurement>| m.as_ref().map(|m| m.rows_per_sec);
    // One round: its ratios as measured (the last round's measurements are in the table).
    // More: each round's ratio, then the median of the rounds.
    let mut ratios = Vec::new();
    if rounds == 1 {
        ratios.extend(per_round.pop().unwrap_or_default());
    } else {
        for (i, round) in per_round.iter().enumerate() {
            ratios.extend(
                round
                    .iter()
                    .map(|(k, v)| (format!("round {}: {k}", i + 1), *v)),
            );
        }
        let names: Vec<String> = per_round[0].iter().map(|(k, _)| k.clone()).collect();
        for name in names {
            let mut values: Vec<f64> = per_round
                .iter()
                .filter_map(|r| r.iter().find(|(k, _)| *k == name).map(|(_, v)| *v))
                .collect();
            values.sort_by(f64::total_cmp);
            ratios.push((
                format!("median of {rounds}: {name}"),
                values[values.len() / 2],
            ));
        }
    }
    if let (Some(i), Some(nv)) = (rate(&insert), rate(&naive)) {
        ratios.push(("sink insert / naive".to_string(), i / nv));
    }
    ratios.append(&mut ratios_extra);
    let mut ordered: Vec<Measurement> = [ceiling, in_topic_order, insert]
        .into_iter()
        .flatten()
        .collect();
    ordered.extend(by_format.into_iter().map(|(_, _, m)| m));
    ordered.extend(upsert);
    ordered.append(&mut by_tables);
    ordered.append(&mut results);
    ordered.extend(naive);
    let results = ordered;
    let report = Report {
        machine: machine(),
        records: n,
        partitions: args.partitions,
        writers: args.writers,
        produce_seconds: produce.as_secs_f64(),
        payload_bytes: payloads,
        results,
        ratios,
        trickle: trickle.map(Into::into),
    };
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        say(&format!("wrote {}", path.display()));
        if let Some((name, f)) = insert_fairness(&report) {
            let svg = PathBuf::from(format!("{}.fairness.svg", path.display()));
            std::fs::write(&svg, f.svg(&format!("{name}: lag per partition")))?;
            say(&format!("wrote {}", svg.display()));
        }
    }
    Ok(())
}

/// Upserts whose records each carry a different subset of the columns, against the same
/// table written by uniform upserts: the orders fill `bench_sparse` (new keys), then each
/// round upserts them again whole (existing keys: the baseline) and runs the sparse records
/// over the same keys, so both see the same table. Returns each round's baseline and sparse
/// run.
async fn sparse_upsert<'a>(
    env: &setup::Env,
    run: &dyn Fn(&'static str, &'static str, WriteMode) -> SinkRun<'a>,
    pool: &sqlx::PgPool,
    n: u64,
    payload: u64,
    partitions: i32,
    rounds: usize,
) -> anyhow::Result<Vec<(Measurement, Measurement)>> {
    // Named after the run's own topic (`--name`).
    let topic = &format!("{}-sparse", run("", "", WriteMode::Upsert).topic);
    eprintln!("bench: producing {n} sparse records");
    setup::fresh_topic(env, topic, partitions).await?;
    let (_, bytes) = setup::produce(env, topic, n, partitions, |i| {
        Ok(data::sparse_order(i).into_bytes())
    })
    .await?;
    let on_sparse = |name, group| SinkRun {
        table: "bench_sparse",
        ..run(name, group, WriteMode::Upsert)
    };
    scenarios::sink(&on_sparse("", "bench-sparse-fill"), pool, n, payload, true).await?;
    let mut out = Vec::new();
    for round in 1..=rounds {
        eprintln!("bench: sink, sparse-upsert round {round} (uniform upserts first, then the sparse ones)");
        // Each round's sinks start from the beginning: consumer groups of their own.
        let (uniform_group, sparse_group) = (
            format!("bench-sparse-uniform-{round}"),
            format!("bench-sparse-{round}"),
        );
        let uniform = scenarios::sink(
            &SinkRun {
                group: &uniform_group,
                ..on_sparse("sink upsert uniform (existing keys)", "")
            },
            pool,
            n,
            payload,
            false,
        )
        .await?;
        let sparse = scenarios::sink(
            &SinkRun {
                topic,
                group: &sparse_group,
                ..on_sparse("sink sparse-upsert (existing keys)", "")
            },
            pool,
            n,
            bytes,
            false,
        )
        .await?;
        scenarios::check_sparse(pool, n).await?;
        out.push((uniform, sparse));
    }
    Ok(out)
}

/// The fetch floor of the plain-JSON topic and of each envelope's (`floor`), after the rounds:
/// each keyed by its format's name (`json` for plain JSON).
async fn fetch_floors(
    env: &setup::Env,
    args: &Args,
    kafka_properties: &str,
    json_topic: &str,
    envelopes: &[(&'static str, String, u64)],
) -> anyhow::Result<Vec<(&'static str, Measurement)>> {
    let mut floors = Vec::new();
    let topics = std::iter::once(("json", json_topic)).chain(
        envelopes
            .iter()
            .map(|(name, topic, _)| (*name, topic.as_str())),
    );
    for (name, topic) in topics {
        eprintln!("bench: fetch floor of the {name} topic (receive every record, nothing else)");
        let label = format!("fetch floor, {name}");
        let measured = floor::fetch_floor(
            &label,
            &env.kafka,
            topic,
            args.partitions,
            args.records,
            kafka_properties,
        )
        .await?;
        floors.push((name, measured));
    }
    Ok(floors)
}

/// What the floors bound for each envelope against plain JSON in its write mode, from the last
/// round's drains: the least CPU per record and the most rows/s the bytes allow, and the
/// sink's own cost beyond them.
fn floor_ratios(
    floors: &[(&str, Measurement)],
    insert: &Option<Measurement>,
    upsert: &Option<Measurement>,
    by_format: &[(&str, WriteMode, Measurement)],
) -> Vec<(String, f64)> {
    let floor_of = |name: &str| floors.iter().find(|(n, _)| *n == name).map(|(_, m)| m);
    let Some(plain_floor) = floor_of("json") else {
        return Vec::new();
    };
    let mut ratios = Vec::new();
    for (name, mode, envelope) in by_format {
        let (plain, label) = plain_in_mode(*mode, insert, upsert);
        let Some(b) = floor_of(name)
            .zip(plain.as_ref())
            .and_then(|(envelope_floor, plain)| {
                floor::bound(plain, envelope, plain_floor, envelope_floor)
            })
        else {
            continue;
        };
        ratios.extend([
            (
                format!("{name} at best (fetch floors): CPU per record / {label}'s"),
                b.least_cpu_ratio,
            ),
            (
                format!("{name} at best (fetch floors): rows/s / {label}'s"),
                b.most_rows_ratio,
            ),
            (
                format!("sink {name} CPU beyond its floor / {label}'s beyond its"),
                b.own_cpu_ratio,
            ),
        ]);
    }
    ratios
}

/// The plain-JSON drain a format is compared with: the one in its write mode (Debezium's
/// upserts with the plain upserts), and its label.
fn plain_in_mode<'a>(
    mode: WriteMode,
    insert: &'a Option<Measurement>,
    upsert: &'a Option<Measurement>,
) -> (&'a Option<Measurement>, &'static str) {
    match mode {
        WriteMode::Upsert => (upsert, "sink upsert"),
        WriteMode::Insert => (insert, "sink insert"),
    }
}

/// The ratios of one round's COPY (both orders), insert, upsert and per-format scenarios.
/// A format is compared with plain JSON in its own write mode (Debezium's upserts with the
/// plain upserts), in rows/s and in sink CPU per record.
fn format_ratios(
    ceiling: &Option<Measurement>,
    in_topic_order: &Option<Measurement>,
    insert: &Option<Measurement>,
    upsert: &Option<Measurement>,
    by_format: &[(&str, WriteMode, Measurement)],
) -> Vec<(String, f64)> {
    let rate = |m: &Option<Measurement>| m.as_ref().map(|m| m.rows_per_sec);
    let mut ratios = Vec::new();
    if let (Some(c), Some(i)) = (rate(ceiling), rate(insert)) {
        ratios.push(("sink insert / COPY".to_string(), i / c));
        if let Some(steady) = insert.as_ref().and_then(|m| m.steady_rows_per_sec) {
            ratios.push(("sink insert (steady) / COPY".to_string(), steady / c));
        }
    }
    if let (Some(c), Some(u)) = (rate(ceiling), rate(upsert)) {
        ratios.push(("sink upsert / COPY".to_string(), u / c));
    }
    for (name, mode, m) in by_format {
        if let Some(c) = rate(ceiling) {
            ratios.push((format!("sink {name} / COPY"), m.rows_per_sec / c));
            if let Some(steady) = m.steady_rows_per_sec {
                ratios.push((format!("sink {name} (steady) / COPY"), steady / c));
            }
        }
        let (plain, label) = plain_in_mode(*mode, insert, upsert);
        let Some(plain) = plain else { continue };
        ratios.push((
            format!("sink {name} / {label}"),
            m.rows_per_sec / plain.rows_per_sec,
        ));
        // Both drained the same number of records, so CPU seconds compare per record: the
        // sink's own, and the broker's for serving the records (it grows with their bytes).
        for (what, cpu, plain_cpu) in [
            ("CPU", m.cpu_seconds, plain.cpu_seconds),
            ("broker CPU", m.broker_cpu_seconds, plain.broker_cpu_seconds),
        ] {
            if let (Some(cpu), Some(plain_cpu)) = (cpu, plain_cpu) {
                ratios.push((
                    format!("sink {name} {what} per record / {label}'s"),
                    cpu / plain_cpu.max(1e-3),
                ));
            }
        }
    }
    if let (Some(c), Some(t), Some(i)) = (rate(ceiling), rate(in_topic_order), rate(insert)) {
        ratios.push(("COPY in topic order / COPY".to_string(), t / c));
        ratios.push(("sink insert / COPY in topic order".to_string(), i / t));
    }
    ratios
}

fn print_report(r: &Report) {
    println!(
        "\nkafka-pg-sink benchmark: {} records of ~{} bytes JSON, {} partitions, {} writers",
        r.records, 200, r.partitions, r.writers
    );
    println!("machine: {}", r.machine);
    println!(
        "(producing the JSON backlog took {:.1} s)",
        r.produce_seconds
    );
    let sizes: Vec<String> = r
        .payload_bytes
        .iter()
        .map(|(name, bytes)| format!("{name} {:.0}", *bytes as f64 / r.records.max(1) as f64))
        .collect();
    println!(
        "payload bytes per record (MB/s counts each scenario's own): {}\n",
        sizes.join(", ")
    );
    println!(
        "{:<34} {:>9} {:>8} {:>11} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9}",
        "scenario",
        "rows",
        "seconds",
        "rows/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "RSS MiB",
        "CPU s",
        "broker s",
        "busy s",
        "registry"
    );
    let opt =
        |v: Option<f64>, p: usize| v.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
    for m in &r.results {
        println!(
            "{:<34} {:>9} {:>8.2} {:>11.0} {:>8.1} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9}",
            m.name,
            m.rows,
            m.seconds,
            m.rows_per_sec,
            m.mb_per_sec,
            opt(m.commit_p50_ms, 1),
            opt(m.commit_p99_ms, 1),
            opt(m.peak_rss_mib, 1),
            opt(m.cpu_seconds, 2),
            opt(m.broker_cpu_seconds, 2),
            opt(m.machine_busy_seconds, 2),
            m.registry_requests
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    let quarters: Vec<_> = r
        .results
        .iter()
        .filter_map(|m| m.rss_quarters_mib.map(|q| (&m.name, q)))
        .collect();
    if !quarters.is_empty() {
        println!("\nresident MiB over each drain, mean by quarter of progress (flat: memory does not follow the backlog)");
        for (name, q) in quarters {
            let q: Vec<String> = q.iter().map(|v| opt(*v, 1)).collect();
            println!("{name:<34} {}", q.join(" / "));
        }
    }
    let spread: Vec<&Measurement> = r.results.iter().filter(|m| m.tables.is_some()).collect();
    if !spread.is_empty() {
        println!("\nthe same records over N topics of one pattern, a table each (insert)");
        println!(
            "{:>7} {:>11} {:>9} {:>15} {:>16} {:>12}",
            "tables", "rows/s", "drain s", "CPU us/record", "first commit s", "assigned s"
        );
        for m in spread {
            println!(
                "{:>7} {:>11.0} {:>9.2} {:>15} {:>16} {:>12}",
                m.tables.unwrap_or(0),
                m.rows_per_sec,
                m.seconds,
                opt(m.cpu_seconds.map(|c| c * 1e6 / m.rows.max(1) as f64), 2),
                opt(m.first_commit_seconds, 2),
                opt(m.assigned_seconds, 2),
            );
        }
    }
    println!();
    for (name, ratio) in &r.ratios {
        println!("{name:<48} {ratio:>6.2}x");
    }
    if let Some((name, f)) = insert_fairness(r) {
        println!(
            "\nfairness ({name}): lag per partition over the drain; worst max/min advance ratio {}",
            f.worst_ratio
                .map(|w| format!("{w:.2} over {} samples", f.judged))
                .unwrap_or_else(|| "- (too few samples)".into())
        );
        print!("{}", f.table(12));
    }
    if let Some(t) = &r.trickle {
        println!(
            "\ntrickle {} records at {}/s: produce→row p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (max_wait {} ms; sink batch age p99 {})",
            t.records,
            t.rate,
            t.p50_ms,
            t.p99_ms,
            t.max_ms,
            t.max_wait_ms,
            opt(t.sink_batch_age_p99_ms, 0)
        );
    }
}

/// The plain-JSON insert drain's fairness readout (the last round's), if it ran.
fn insert_fairness(r: &Report) -> Option<(&str, &fairness::Readout)> {
    r.results
        .iter()
        .find(|m| m.name == "sink insert")
        .and_then(|m| m.fairness.as_ref().map(|f| (m.name.as_str(), f)))
}
