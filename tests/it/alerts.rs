//! `deploy/prometheus/alerts.yml` against the real tools: promtool checks the rules and runs
//! their unit tests, and a real Prometheus (Debian's `prometheus` package) scrapes a running
//! sink, finds every series the alerts read, and evaluates every rule without an error and
//! without an alert on a healthy sink.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::db::TestDb;
use crate::helpers::http::get;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::orders::assert_orders_are;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

/// Where the rules and their unit tests live in the repository.
fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// A Prometheus tool from PATH. Missing tools fail the test with the way to get them: these
/// tests never skip.
fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed: it comes with Debian's prometheus package \
             (`apt-get install -y prometheus`, which `scripts/dev-services.sh up` does when it is missing)"
        )
    })
}

/// Every `kafka_pg_sink_*` metric name the rules read, and `up`.
fn series_the_rules_read() -> BTreeSet<String> {
    let rules = std::fs::read_to_string(rules_dir().join("alerts.yml")).expect("alerts.yml");
    let re = regex::Regex::new(r"\b(kafka_pg_sink_[a-z_]+|up)\{|\b(kafka_pg_sink_[a-z_]+)\b")
        .expect("pattern");
    re.captures_iter(&rules)
        .filter_map(|c| c.get(1).or(c.get(2)))
        .map(|m| m.as_str().to_string())
        .collect()
}

/// `promtool check rules` accepts the file, and `promtool test rules` passes: each alert fires
/// on the series that should fire it and stays silent on the others (alerts.test.yml). The
/// metric names the rules read are the sink's own, as src/meters.rs defines them.
#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let promtool = tool("promtool");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(rules_dir())
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let meters =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/meters.rs"))
            .expect("src/meters.rs");
    let read = series_the_rules_read();
    assert!(read.len() >= 7, "the rules read too few series: {read:?}");
    for name in read.iter().filter(|n| n.starts_with("kafka_pg_sink_")) {
        assert!(
            meters.contains(&format!("\"{name}\"")),
            "alerts.yml reads {name}, which src/meters.rs does not define"
        );
    }
}

/// A Prometheus server started for one test and killed with it.
struct Prometheus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `target` every second as job `kafka-pg-sink` and evaluates alerts.yml every
    /// second.
    fn start(target: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: kafka-pg-sink\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules = rules_dir().join("alerts.yml").display(),
            ),
        )
        .expect("write prometheus.yml");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Self {
            child,
            address: format!("127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The JSON answer of an API path, once Prometheus serves it.
    fn api(&self, path: &str) -> serde_json::Value {
        let (status, body) = get(&self.address, path);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("JSON from the Prometheus API")
    }

    /// The samples of an instant query: (labels, value).
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let encoded: String = url::form_urlencoded::byte_serialize(promql.as_bytes()).collect();
        let answer = self.api(&format!("/api/v1/query?query={encoded}"));
        answer["data"]["result"]
            .as_array()
            .expect("a vector result")
            .iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .expect("sample value")
                    .parse()
                    .unwrap();
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// Waits until Prometheus answers at all.
    fn wait_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("prometheus status") {
                panic!("prometheus exited ({status}):\n{}", self.log());
            }
            if std::net::TcpStream::connect(&self.address).is_ok()
                && get(&self.address, "/-/ready").0 == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after 60 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `condition` (blocking HTTP) until it holds; panics with `what` and the last value.
fn eventually<T: std::fmt::Debug>(what: &str, mut probe: impl FnMut() -> (bool, T)) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (ok, value) = probe();
        if ok {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last: {value:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A real Prometheus scrapes the running sink: the target is up, the sink's rows and
/// partitions are what the database and the topic say, every series the alert rules read
/// exists, every rule evaluates without an error, and none fires on a healthy sink that has
/// drained its topic.
#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_scrapes_the_sink_and_evaluates_every_alert_rule() {
    // Fail before starting anything when the tools are missing.
    tool("prometheus");
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(3).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut sink = Sink::start_with(
        &config,
        "sink",
        &["--set", "kafka.watermark_interval=300ms"],
    );
    let target = sink.http_address();
    produce_orders(&producer(), &topic, 0, 300).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let ids: Vec<i64> = (0..300).collect();
    assert_orders_are(&db, "orders", &ids).await;

    let mut prometheus = Prometheus::start(&target);
    let (rows, assigned) = tokio::task::spawn_blocking(move || {
        prometheus.wait_up();
        let up = eventually("the sink's target to be up", || {
            let up = prometheus.query("up{job=\"kafka-pg-sink\"}");
            (up.len() == 1 && up[0].1 == 1.0, up)
        });
        assert_eq!(up[0].0["instance"], target.as_str());

        let rows = eventually("rows_written_total to reach 300", || {
            let v =
                prometheus.query("sum(kafka_pg_sink_rows_written_total{job=\"kafka-pg-sink\"})");
            (v.first().map(|s| s.1) == Some(300.0), v)
        });
        let assigned = prometheus.query("sum(kafka_pg_sink_assigned_partitions)");
        // Each series the rules read, as Prometheus has it from the sink (lag: one per
        // partition, once the watermarks were observed).
        eventually("every series the rules read", || {
            let missing: Vec<String> = series_the_rules_read()
                .into_iter()
                .filter(|name| {
                    prometheus
                        .query(&format!(
                            "count({{__name__=\"{name}\", job=\"kafka-pg-sink\"}})"
                        ))
                        .is_empty()
                })
                .collect();
            (missing.is_empty(), missing)
        });
        let lag = prometheus.query("count(kafka_pg_sink_lag) by (topic)");
        assert_eq!(lag.len(), 1, "{lag:?}");
        assert_eq!(lag[0].1, 3.0, "one lag series per partition: {lag:?}");

        // Every rule evaluated at least once and without an error; none pending or firing.
        let rules = eventually("every rule evaluated without an error", || {
            let answer = prometheus.api("/api/v1/rules");
            let rules: Vec<(String, String, String)> = answer["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .map(|r| {
                    (
                        r["name"].as_str().unwrap_or("").to_string(),
                        r["health"].as_str().unwrap_or("").to_string(),
                        r["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let ok = rules.len() == 8 && rules.iter().all(|(_, health, _)| health == "ok");
            (ok, rules)
        });
        for (name, _, state) in &rules {
            assert_eq!(state, "inactive", "{name} is {state} on a healthy sink");
        }
        (rows, assigned)
    })
    .await
    .expect("the Prometheus checks");

    assert_eq!(rows[0].1, 300.0);
    assert_eq!(assigned.first().map(|s| s.1), Some(3.0), "{assigned:?}");
    sink.signal(nix::sys::signal::Signal::SIGTERM);
    let status = sink.wait_timeout(Duration::from_secs(30)).expect("exit");
    assert!(status.success(), "{}", sink.logs_tail(20));
}
