//! PostgreSQL settings and the one place that turns them into connection options, per role.

use std::str::FromStr;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;

/// PostgreSQL connection and writer settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSettings {
    /// Kept secret so that it never reaches a log line or a `Debug` print.
    pub url: SecretString,
    /// Writer connections; each owns a disjoint set of partitions and commits on its own.
    #[serde(default = "default_writers")]
    pub writers: usize,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Upper bound for any one statement of a batch transaction.
    #[serde(default = "default_statement_timeout", with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// How long claiming a partition waits for a row lock before fencing the holder.
    #[serde(default = "default_lock_timeout", with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Lets the server end a transaction whose client stopped (SIGSTOP, network partition).
    #[serde(
        default = "default_idle_in_transaction_timeout",
        with = "humantime_serde"
    )]
    pub idle_in_transaction_timeout: Duration,
}

/// Which part of the sink a PostgreSQL session serves. Each gets the session settings that
/// bound what it can hold, from the one place that builds connection options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRole {
    /// A writer's connection: no statement runs forever, and a transaction whose client went
    /// away releases its offset rows.
    Writer,
    /// The shared pool of the consumer thread, the HTTP endpoint and the CLI verbs: claims,
    /// rereads and table descriptions run on the consumer thread, so none runs unbounded.
    Control,
    /// `migrate`: a migration may take long, and its advisory lock waits for another run.
    Migrate,
}

impl PostgresSettings {
    /// Only a URL, the other settings at their defaults: for `migrate`, which reads nothing else.
    pub fn with_url(url: SecretString) -> Self {
        Self {
            url,
            writers: default_writers(),
            connect_timeout: default_connect_timeout(),
            statement_timeout: default_statement_timeout(),
            lock_timeout: default_lock_timeout(),
            idle_in_transaction_timeout: default_idle_in_transaction_timeout(),
        }
    }

    /// Connection options for a session of `role`. A writer's and the pool's sessions name
    /// themselves `kafka-pg-sink`, the only sessions a claim's fence may end; `migrate` names
    /// itself apart, so no fence ever ends a migration. Statements are logged at trace.
    pub fn connect_options(&self, role: SessionRole) -> Result<PgConnectOptions, sqlx::Error> {
        let ms = |d: Duration| d.as_millis().max(1).to_string();
        let name = match role {
            SessionRole::Writer | SessionRole::Control => crate::offsets::APPLICATION_NAME,
            SessionRole::Migrate => "kafka-pg-sink-migrate",
        };
        let options = PgConnectOptions::from_str(self.url.expose_secret())?
            .application_name(name)
            .log_statements(tracing::log::LevelFilter::Trace)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(10));
        Ok(match role {
            SessionRole::Writer => options.options([
                ("statement_timeout", ms(self.statement_timeout)),
                (
                    "idle_in_transaction_session_timeout",
                    ms(self.idle_in_transaction_timeout),
                ),
            ]),
            SessionRole::Control => {
                options.options([("statement_timeout", ms(self.statement_timeout))])
            }
            SessionRole::Migrate => options,
        })
    }
}

// Serde defaults; README's settings tables list each with its meaning.

/// Measured best with two cores shared by Kafka, PostgreSQL and the sink (README).
fn default_writers() -> usize {
    2
}
/// Per attempt, so an unreachable server fails the attempt instead of hanging it.
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}
/// A stuck statement fails its transaction, which is then retried like any transient error.
fn default_statement_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Short: a claim should not wait long on a stopped owner's row locks before ending its session.
fn default_lock_timeout() -> Duration {
    Duration::from_secs(5)
}
/// A second, server-side bound on a writer transaction whose client stopped.
fn default_idle_in_transaction_timeout() -> Duration {
    Duration::from_secs(60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_role_gets_the_bounds_it_needs() {
        let pg = PostgresSettings {
            statement_timeout: Duration::from_secs(7),
            idle_in_transaction_timeout: Duration::from_secs(9),
            ..PostgresSettings::with_url(SecretString::from("postgres://u:p@127.0.0.1:5432/db"))
        };
        let writer = pg.connect_options(SessionRole::Writer).unwrap();
        assert_eq!(writer.get_application_name(), Some("kafka-pg-sink"));
        let options = writer.get_options().unwrap_or_default();
        assert!(
            options.contains("statement_timeout=7000")
                && options.contains("idle_in_transaction_session_timeout=9000"),
            "{options}"
        );
        let control = pg.connect_options(SessionRole::Control).unwrap();
        assert_eq!(control.get_application_name(), Some("kafka-pg-sink"));
        let options = control.get_options().unwrap_or_default();
        assert!(
            options.contains("statement_timeout=7000") && !options.contains("idle_in"),
            "{options}"
        );
        // A fence ends only `kafka-pg-sink` sessions; a migration is never one of them.
        let migrate = pg.connect_options(SessionRole::Migrate).unwrap();
        assert_eq!(
            migrate.get_application_name(),
            Some("kafka-pg-sink-migrate")
        );
        assert_eq!(migrate.get_options(), None);
    }
}
