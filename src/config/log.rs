//! Log output: text or JSON lines, and how often the progress line is written.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Log output settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    #[serde(default)]
    pub format: LogFormat,
    /// Interval of the progress line (records/s, rows committed).
    #[serde(default = "default_progress_interval", with = "humantime_serde")]
    pub progress_interval: Duration,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::default(),
            progress_interval: default_progress_interval(),
        }
    }
}

/// Human-readable lines or one JSON object per line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Often enough to see progress, rarely enough not to flood the log.
fn default_progress_interval() -> Duration {
    Duration::from_secs(10)
}
