//! The real `kafka-pg-sink` binary as a child process: started with a generated config,
//! stopped with real signals.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::services::services;

pub const BIN: &str = env!("CARGO_BIN_EXE_kafka-pg-sink");

/// Output of a finished CLI command.
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary to completion (for `migrate`, `check`, …).
pub async fn run_cli(args: &[&str]) -> CliOutput {
    run_cli_env(args, &[]).await
}

/// Runs the binary with extra environment variables (and without the test's own service
/// variables, so only what the test passes counts).
pub async fn run_cli_env(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP_SERVERS")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run kafka-pg-sink");
    CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A configuration file the test wrote, removed when dropped.
pub struct ConfigFile {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl ConfigFile {
    pub fn new(toml: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sink.toml");
        std::fs::write(&path, toml).expect("write config");
        Self { _dir: dir, path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The path as a command-line argument.
    pub fn arg(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8")
    }
}

/// What a sink process is started with.
#[derive(Clone)]
pub struct SinkConfig {
    pub database_url: String,
    pub group: String,
    pub protocol: &'static str,
    pub topic: String,
    pub table: String,
    pub max_records: usize,
    pub max_wait_ms: u64,
    pub writers: usize,
    pub session_timeout_ms: u64,
    /// kafka.auto_offset_reset
    pub reset: &'static str,
    /// Extra settings of the (first) topic, e.g. `mode = "upsert"`.
    pub topic_settings: String,
    /// The first topic's `[topics.metadata]` lines (default: partition and offset columns).
    pub metadata: String,
    /// Extra TOML appended verbatim.
    pub extra: String,
    /// Another broker than the shared one (a test's private Kafka).
    pub kafka: Option<String>,
    /// `[kafka.properties]` lines added to the test defaults.
    pub kafka_properties: String,
    /// Environment variables for the sink process.
    pub env: Vec<(String, String)>,
}

impl SinkConfig {
    pub fn new(database_url: &str, topic: &str, table: &str) -> Self {
        Self {
            database_url: database_url.into(),
            group: format!("g-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            // The sink's own default: `consumer` on the test brokers, which offer it.
            protocol: "auto",
            topic: topic.into(),
            table: table.into(),
            max_records: 1000,
            max_wait_ms: 100,
            writers: 2,
            session_timeout_ms: 6000,
            reset: "earliest",
            topic_settings: String::new(),
            metadata: "partition = \"kafka_partition\"\noffset = \"kafka_offset\"".into(),
            extra: String::new(),
            kafka: None,
            kafka_properties: String::new(),
            env: Vec::new(),
        }
    }

    pub fn toml(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            r#"
[kafka]
bootstrap_servers = "{kafka}"
group_id = "{group}"
group_protocol = "{protocol}"
auto_offset_reset = "{reset}"
session_timeout = "{session}ms"
[kafka.properties]
"heartbeat.interval.ms" = "500"
"topic.metadata.refresh.interval.ms" = "1000"
{debug}{kafka_properties}
[postgres]
url = "{db}"
writers = {writers}
lock_timeout = "2s"
idle_in_transaction_timeout = "10s"

[batch]
max_records = {max_records}
max_wait = "{max_wait}ms"
retry_backoff_min = "50ms"
retry_backoff_max = "1s"

[log]
progress_interval = "2s"

[http]
# Many sinks run side by side in the tests: any free port.
listen = "127.0.0.1:0"

[[topics]]
name = "{topic}"
table = "{table}"
{topic_settings}
[topics.metadata]
{metadata}
{extra}
"#,
            kafka = self
                .kafka
                .clone()
                .unwrap_or_else(|| services().kafka.clone()),
            kafka_properties = if self.kafka_properties.is_empty() {
                String::new()
            } else {
                format!("{}\n", self.kafka_properties)
            },
            group = self.group,
            protocol = self.protocol,
            reset = self.reset,
            session = self.session_timeout_ms,
            db = self.database_url,
            writers = self.writers,
            max_records = self.max_records,
            max_wait = self.max_wait_ms,
            topic = self.topic,
            table = self.table,
            topic_settings = self.topic_settings,
            metadata = self.metadata,
            extra = self.extra,
            // KPS_TEST_RDKAFKA_DEBUG=cgrp,fetch turns on librdkafka's own tracing when debugging.
            debug = std::env::var("KPS_TEST_RDKAFKA_DEBUG")
                .map(|d| format!("\"debug\" = \"{d}\"\n"))
                .unwrap_or_default(),
        );
        if self.protocol != "classic" {
            // The KIP-848 protocol takes heartbeat timing from the broker, and librdkafka
            // refuses the property with it (`auto` resolves to it on the test brokers).
            s = s.replace("\"heartbeat.interval.ms\" = \"500\"\n", "");
        }
        if self.protocol == "consumer" {
            // ... and the session timeout too.
            s = s.replace(
                &format!("session_timeout = \"{}ms\"\n", self.session_timeout_ms),
                "",
            );
        }
        s
    }
}

/// A running sink process; killed when dropped.
pub struct Sink {
    child: Child,
    pub name: String,
    pub log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sink {
    pub fn start(config: &SinkConfig, name: &str) -> Self {
        Self::start_with(config, name, &[])
    }

    /// Starts with extra command-line arguments after `run`.
    pub fn start_with(config: &SinkConfig, name: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("sink.toml");
        std::fs::write(&config_path, config.toml()).expect("write config");
        Self::spawn(dir, &config_path, name, args, &config.env)
    }

    /// Starts from a configuration file the test wrote itself.
    pub fn start_file(config_path: &std::path::Path, name: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::spawn(dir, config_path, name, &[], &[])
    }

    fn spawn(
        dir: tempfile::TempDir,
        config_path: &std::path::Path,
        name: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> Self {
        let log_path = dir.path().join("sink.log");
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = Command::new(BIN)
            .arg("run")
            .arg("--config")
            .arg(config_path)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("KAFKA_BOOTSTRAP_SERVERS")
            .env(
                "RUST_LOG",
                if std::env::var_os("KPS_TEST_RDKAFKA_DEBUG").is_some() {
                    "info,kafka_pg_sink=debug,librdkafka=debug"
                } else {
                    "info,kafka_pg_sink=debug,librdkafka=warn"
                },
            )
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kafka-pg-sink");
        Self {
            child,
            name: name.into(),
            log_path,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, signal: Signal) {
        let _ = kill(self.pid(), signal);
    }

    /// SIGKILL: no chance to clean up, like a machine dying.
    pub fn kill9(&mut self) {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// Waits for exit; None if it is still running after `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM and wait: the clean stop an orchestrator does.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(Signal::SIGTERM);
        self.wait_timeout(Duration::from_secs(60))
            .unwrap_or_else(|| {
                panic!(
                    "{} did not stop after SIGTERM\n{}",
                    self.name,
                    self.logs_tail(40)
                )
            })
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The address of the sink's HTTP endpoint, from its log (it binds a free port).
    pub fn http_address(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let logs = self.logs();
            if let Some(line) = logs.lines().find(|l| l.contains("serving /metrics")) {
                let address = line.split("address=").nth(1).expect("address field");
                return address.split_whitespace().next().unwrap().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no HTTP endpoint in the log:\n{}",
                self.logs_tail(20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last lines of the log, without the periodic progress lines that would hide events.
    pub fn logs_tail(&self, lines: usize) -> String {
        let logs = self.logs();
        let events: Vec<&str> = logs.lines().filter(|l| !l.contains(" progress ")).collect();
        format!(
            "--- {} (last {lines} event lines of {}) ---\n{}",
            self.name,
            self.log_path.display(),
            events[events.len().saturating_sub(lines)..].join("\n")
        )
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs_tail(60));
            // Keep the whole log for a post-mortem.
            let kept = std::env::temp_dir().join(format!(
                "kps-{}-{}.log",
                self.name.replace(' ', "_"),
                self.child.id()
            ));
            if std::fs::copy(&self.log_path, &kept).is_ok() {
                eprintln!("full log kept at {}", kept.display());
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints a sink's last log lines if the test panics while it is held: a wait that times out
/// then says what the sink was doing, not only that it did not finish.
pub struct LogsOnPanic<'a>(pub &'a Sink);

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.0.logs_tail(80));
        }
    }
}
