//! The `kafka-pg-sink` binary: parse the command line, set up logging, dispatch.

use std::process::ExitCode;

use clap::Parser;
use kafka_pg_sink::cli::{Cli, Command, DeadLetterCommand, OffsetsCommand, OutputFormat};
use kafka_pg_sink::commands::{check, dead_letters, lag, offsets};
use kafka_pg_sink::config::Settings;
use kafka_pg_sink::shutdown::Shutdown;
use kafka_pg_sink::{migrate, startup, telemetry};

/// Logging starts before settings load, so even a configuration error is logged in the chosen
/// format; a failed command ends as one error line and exit code 1.
fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(Settings::peek_log_format(
        cli.config.as_deref(),
        &cli.overrides(),
    ));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Each command loads only what it needs: `migrate` reads just the database URL, so it runs
/// before the topics are configured.
async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let overrides = cli.overrides();
    let file = cli.config.as_deref();
    match cli.command {
        Command::Migrate => {
            let url = Settings::load_database_url(file, &overrides)?;
            let applied = migrate::apply(&url).await?;
            if applied.is_empty() {
                tracing::info!("migrations: already up to date");
            } else {
                tracing::info!(?applied, "migrations applied");
            }
            Ok(())
        }
        Command::Check { plan } => {
            let settings = Settings::load(file, &overrides)?;
            check::run(&settings, plan).await
        }
        Command::DeadLetters(command) => {
            let settings = Settings::load(file, &overrides)?;
            match command {
                DeadLetterCommand::List { selection, json } => {
                    dead_letters::list(&settings, &selection.selection(), json).await
                }
                DeadLetterCommand::Replay { selection, dry_run } => {
                    let done =
                        dead_letters::replay(&settings, &selection.selection(), dry_run).await?;
                    if done.still_failing > 0 {
                        anyhow::bail!(
                            "{} dead letter(s) still fail; see above",
                            done.still_failing
                        );
                    }
                    Ok(())
                }
            }
        }
        Command::Lag { format, max_lag } => {
            let settings = Settings::load(file, &overrides)?;
            lag::run(&settings, format == OutputFormat::Json, max_lag).await
        }
        Command::Offsets(command) => {
            let settings = Settings::load(file, &overrides)?;
            match command {
                OffsetsCommand::Show { topic } => offsets::show(&settings, topic.as_deref()).await,
                OffsetsCommand::Reset {
                    topic,
                    partitions,
                    to,
                    dry_run,
                } => offsets::reset(&settings, &topic, &partitions, &to.target()?, dry_run)
                    .await
                    .map(|_| ()),
            }
        }
        Command::Run => {
            let settings = Settings::load(file, &overrides)?;
            let shutdown = Shutdown::new();
            shutdown.listen_for_signals();
            startup::run(settings, shutdown).await
        }
    }
}
