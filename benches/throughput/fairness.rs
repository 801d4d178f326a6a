//! The fairness readout: per-partition lag sampled from `kafka_offsets` while the sink drains
//! a backlog, so a drain that serves one partition at a time (the others' lag frozen) shows
//! as a number, a table and a plot, not only as a total rate.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

#[path = "../../tests/it/helpers/in_step.rs"]
mod in_step;
use in_step::in_step;

/// Lag per partition over one drain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Readout {
    /// Each partition's backlog at the start (its share of the produced records).
    pub totals: Vec<i64>,
    /// (seconds since the sink started, lag per partition).
    pub samples: Vec<(f64, Vec<i64>)>,
    /// The worst max/min ratio of per-partition advance since every partition began, from a
    /// tenth of the backlog past that point until the first partition finished (`finish`).
    pub worst_ratio: Option<f64>,
    /// How many samples `worst_ratio` was judged over.
    pub judged: usize,
}

impl Readout {
    /// Partition `p` holds the records `i` with `i % partitions == p` (`setup::produce`).
    pub fn new(n: u64, partitions: usize) -> Self {
        let p = partitions.max(1) as u64;
        let totals = (0..p).map(|i| ((n + p - 1 - i) / p) as i64).collect();
        Self {
            totals,
            ..Self::default()
        }
    }

    /// One sample: each partition's stored next offset (absent: nothing committed yet).
    pub fn sample(&mut self, at: Duration, next_offsets: &[(i32, Option<i64>)]) {
        let mut lag = self.totals.clone();
        for (p, next) in next_offsets {
            if let Some(l) = lag.get_mut(*p as usize) {
                *l -= next.unwrap_or(0);
            }
        }
        self.samples.push((at.as_secs_f64(), lag));
    }

    /// Computes `worst_ratio` by the fairness test's own rule (`in_step`): advance since the
    /// first sample in which every partition had progress, from a tenth of the backlog past
    /// it until the first partition is done. No such sample, or a partition seen waiting
    /// until past a tenth of the backlog, is infinitely behind; a drain too short to judge
    /// is `None`.
    pub fn finish(&mut self) {
        let total: i64 = self.totals.iter().sum();
        let progress: Vec<Vec<i64>> = self
            .samples
            .iter()
            .map(|(_, lag)| self.totals.iter().zip(lag).map(|(t, l)| t - l).collect())
            .collect();
        let Some(verdict) = in_step(&progress, &self.totals) else {
            self.worst_ratio = Some(f64::INFINITY);
            return;
        };
        self.judged = verdict.judged;
        // Late only if a partition was seen waiting over several samples while the others
        // drained (the test, with a backlog 8 times the smoke run's, asks no more than the
        // tenth): in a run of a few batches the first commits are already past a tenth, and
        // one lane's batch may finish its partitions before the other lane's commits.
        let none_done = |p: &&Vec<i64>| p.iter().zip(&self.totals).all(|(n, t)| n < t);
        let first = progress.iter().position(|p| p.iter().any(|&n| n > 0));
        let waiting = first.map_or(0, |f| {
            progress[f..verdict.base].iter().filter(none_done).count()
        });
        if verdict.base_done > total / 10 && waiting >= 5 {
            self.worst_ratio = Some(f64::INFINITY);
            return;
        }
        self.worst_ratio = verdict.worst.map(|(ratio, _)| ratio);
    }

    /// About `rows` samples, evenly spaced, as a text table of lag per partition.
    pub fn table(&self, rows: usize) -> String {
        let mut out = String::new();
        let _ = write!(out, "{:>7}", "t s");
        for p in 0..self.totals.len() {
            let _ = write!(out, " {:>8}", format!("p{p}"));
        }
        out.push('\n');
        let step = (self.samples.len() / rows.max(1)).max(1);
        let last = self.samples.len().saturating_sub(1);
        for (i, (t, lag)) in self.samples.iter().enumerate() {
            if i % step != 0 && i != last {
                continue;
            }
            let _ = write!(out, "{t:>7.2}");
            for l in lag {
                let _ = write!(out, " {l:>8}");
            }
            out.push('\n');
        }
        out
    }

    /// A line per partition: lag against time, as a standalone SVG.
    pub fn svg(&self, title: &str) -> String {
        let (w, h, left, bottom, top, right) = (720.0, 360.0, 70.0, 40.0, 30.0, 90.0);
        let t_max = self.samples.last().map_or(1.0, |(t, _)| *t).max(1e-3);
        let lag_max = self.totals.iter().copied().max().unwrap_or(1).max(1) as f64;
        let x = |t: f64| left + t / t_max * (w - left - right);
        let y = |l: f64| top + (1.0 - l / lag_max) * (h - top - bottom);
        let colours = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf",
        ];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(s, r#"<text x="{left}" y="18">{}</text>"#, escape(title));
        let (x0, x1, y0, y1) = (x(0.0), x(t_max), y(0.0), y(lag_max));
        let _ = writeln!(
            s,
            r#"<path d="M{x0:.1},{y1:.1} L{x0:.1},{y0:.1} L{x1:.1},{y0:.1}" stroke="black" fill="none"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{x0:.1}" y="{:.1}">0</text><text x="{:.1}" y="{:.1}" text-anchor="end">{t_max:.1} s</text>"#,
            y0 + 16.0,
            x1,
            y0 + 16.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{y1:.1}" text-anchor="end">{lag_max:.0}</text><text x="{:.1}" y="{y0:.1}" text-anchor="end">0</text><text x="8" y="{:.1}">lag</text>"#,
            x0 - 4.0,
            x0 - 4.0,
            (y0 + y1) / 2.0
        );
        for p in 0..self.totals.len() {
            let colour = colours[p % colours.len()];
            let points: Vec<String> = self
                .samples
                .iter()
                .map(|(t, lag)| format!("{:.1},{:.1}", x(*t), y(lag[p] as f64)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" stroke="{colour}" stroke-width="1.5" fill="none"/>"#,
                points.join(" ")
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" fill="{colour}">partition {p}</text>"#,
                w - right + 8.0,
                top + 14.0 * (p as f64 + 1.0)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Text for SVG: the title names scenarios, never markup.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
