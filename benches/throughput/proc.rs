//! What a child process costs: peak resident memory and CPU time, from /proc.

/// Peak resident set size (VmHWM) in bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM:")
}

/// Resident set size now (VmRSS) in bytes: sampled over a drain, it shows whether memory
/// follows the backlog, which the peak of a longer run cannot (it is the highest of more
/// samples).
pub fn rss(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Mean resident MiB in each quarter of a drain, by progress (records committed), from
/// `(committed, rss bytes)` samples; a quarter without samples is `None`.
pub fn rss_by_quarter(samples: &[(u64, u64)], total: u64) -> [Option<f64>; 4] {
    let mut sums = [(0f64, 0u32); 4];
    for &(done, rss) in samples {
        let q = ((done.saturating_mul(4)) / total.max(1)).min(3) as usize;
        sums[q].0 += rss as f64 / (1024.0 * 1024.0);
        sums[q].1 += 1;
    }
    sums.map(|(sum, n)| (n > 0).then(|| sum / f64::from(n)))
}

/// User + system CPU seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Clock ticks per second for /proc's CPU times, asked of `getconf` once: every sink
/// scenario reads several CPU times.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The local Kafka broker's pid (`scripts/dev-services.sh` runs it as `java … kafka.Kafka`),
/// if exactly one runs here (with two, which one serves the benchmark is not known): its CPU
/// over a drain is what serving the records cost, which grows with their bytes and shares the
/// machine's cores with the sink and PostgreSQL.
pub fn broker_pid() -> Option<u32> {
    let mut brokers = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == b"kafka.Kafka")
                .then_some(pid)
        });
    let first = brokers.next()?;
    brokers.next().is_none().then_some(first)
}

/// Busy CPU seconds of the whole machine, all cores (user, system and interrupts; not idle,
/// I/O wait or time the hypervisor took), from /proc/stat: over a drain, against its length
/// times the cores, whether the machine was the bound.
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<f64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal …
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| fields.get(i)).sum();
    Some(busy / clock_ticks())
}
