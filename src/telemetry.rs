//! Log output: readable lines by default, one JSON object per line on request.
//!
//! `RUST_LOG` narrows or widens what is shown; the default keeps librdkafka and sqlx quiet
//! unless they have something to warn about.

use std::io::IsTerminal;

use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber; later calls (tests) are ignored.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,rdkafka=warn,librdkafka=warn"));
    // Colour only on a terminal: log files and collectors get plain text.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_span_events(FmtSpan::NONE)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
