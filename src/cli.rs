//! Command line: global options that override settings, and the subcommands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{LogFormat, Overrides};

/// Moves records from Kafka topics into PostgreSQL tables exactly once.
#[derive(Debug, Parser)]
#[command(name = "kafka-pg-sink", version, about)]
pub struct Cli {
    /// TOML configuration file.
    #[arg(short, long, global = true, env = "KAFKA_PG_SINK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Kafka bootstrap servers (overrides kafka.bootstrap_servers).
    #[arg(long, global = true)]
    pub bootstrap_servers: Option<String>,
    /// PostgreSQL URL (overrides postgres.url).
    #[arg(long, global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Kafka consumer group (overrides kafka.group_id).
    #[arg(long, global = true)]
    pub group_id: Option<String>,
    /// Log format (overrides log.format).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Any setting as key.path=value, e.g. --set batch.max_records=5000; repeatable.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Consume the configured topics and write them to PostgreSQL until stopped.
    Run,
    /// Create or upgrade the sink's own tables (kafka_offsets); safe to run repeatedly.
    Migrate,
    /// Validate the configuration, reach Kafka and PostgreSQL, and check every table mapping.
    Check {
        /// Also print the DDL auto_create/auto_evolve would run now (changing nothing).
        #[arg(long)]
        plan: bool,
    },
    /// Inspect dead letters, or write them again after fixing the data or the table.
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// How far behind each partition is: stored positions against Kafka's watermarks now.
    Lag {
        /// JSON instead of a table.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
        /// Exit 1 when the total lag is larger (for cron jobs and health checks).
        #[arg(long)]
        max_lag: Option<i64>,
    },
    /// Show or move the stored positions.
    #[command(subcommand)]
    Offsets(OffsetsCommand),
}

/// Table for people, JSON for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// `offsets show|reset`.
#[derive(Debug, Subcommand)]
pub enum OffsetsCommand {
    /// Print the group's stored positions.
    Show {
        #[arg(long)]
        topic: Option<String>,
    },
    /// Move positions; a running sink is fenced and continues from the new position.
    Reset {
        #[arg(long)]
        topic: String,
        /// Only these partitions (repeatable; default: all).
        #[arg(long = "partition")]
        partitions: Vec<i32>,
        #[command(flatten)]
        to: ResetTarget,
        /// Print the plan, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Exactly one target.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ResetTarget {
    /// `earliest` or `latest`.
    #[arg(long, value_parser = ["earliest", "latest"])]
    pub to: Option<String>,
    /// This offset (must lie within the partition's range).
    #[arg(long)]
    pub to_offset: Option<i64>,
    /// The first record at or after this time: RFC 3339 (2024-05-01T12:00:00Z) or epoch ms.
    #[arg(long)]
    pub to_timestamp: Option<String>,
}

impl ResetTarget {
    /// Parsed before any connection is made, so a bad `--to-timestamp` fails having touched
    /// nothing.
    pub fn target(&self) -> anyhow::Result<crate::commands::offsets::Target> {
        use crate::commands::offsets::Target;
        Ok(match (&self.to, self.to_offset, &self.to_timestamp) {
            (Some(to), _, _) if to == "earliest" => Target::Earliest,
            (Some(_), _, _) => Target::Latest,
            (_, Some(offset), _) => Target::Offset(offset),
            (_, _, Some(ts)) => Target::Timestamp(match ts.parse::<i64>() {
                Ok(ms) => ms,
                Err(_) => chrono::DateTime::parse_from_rfc3339(ts)
                    .map_err(|e| anyhow::anyhow!("--to-timestamp {ts:?}: {e}"))?
                    .timestamp_millis(),
            }),
            _ => anyhow::bail!("give --to, --to-offset or --to-timestamp"),
        })
    }
}

/// `dead-letters list|replay`.
#[derive(Debug, Subcommand)]
pub enum DeadLetterCommand {
    /// Print dead letters of this consumer group.
    List {
        #[command(flatten)]
        selection: SelectionArgs,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Map the selected dead letters again; those that now succeed become rows and leave the
    /// dead-letter table, in one transaction.
    Replay {
        #[command(flatten)]
        selection: SelectionArgs,
        /// Report what would happen, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which dead letters.
#[derive(Debug, clap::Args)]
pub struct SelectionArgs {
    /// Only this topic.
    #[arg(long)]
    pub topic: Option<String>,
    /// Only these ids (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<i64>,
    /// At most this many.
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
}

impl SelectionArgs {
    /// Keeps clap types out of `commands::dead_letters`.
    pub fn selection(&self) -> crate::commands::dead_letters::Selection {
        crate::commands::dead_letters::Selection {
            topic: self.topic.clone(),
            ids: self.ids.clone(),
            limit: self.limit,
        }
    }
}

impl Cli {
    /// Just the setting overrides: `Settings` loads them the same way for every subcommand.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            bootstrap_servers: self.bootstrap_servers.clone(),
            database_url: self.database_url.clone(),
            group_id: self.group_id.clone(),
            log_format: self.log_format,
            set: self.set.clone(),
        }
    }
}
