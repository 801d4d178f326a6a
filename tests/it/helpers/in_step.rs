//! Whether the partitions of a drain advanced in step: the one rule that the fairness test
//! (`tests/it/fairness.rs`) asserts and the benchmark's fairness readout
//! (`benches/throughput/fairness.rs`, which includes this file) prints, so the number the
//! benchmark reports is the number the test bounds.

/// How the partitions of one drain advanced, judged from samples of their committed
/// positions: one `Vec` per sample, in the order taken, with a position per partition.
#[derive(Debug, Clone, PartialEq)]
pub struct InStep {
    /// The first sample in which every partition had committed something: advance is counted
    /// from it. Which partition's start offset librdkafka resolves first, and so which one's
    /// first fetch arrives alone, is a race; the one that wins may fill a batch or two before
    /// the others have a record. That head start is not a partition served ahead of the
    /// others, so it is left out.
    pub base: usize,
    /// Records committed over all partitions at `base`. A partition that began only after
    /// the others drained a large share was left waiting, whatever its pace afterwards: each
    /// caller says how large.
    pub base_done: i64,
    /// How many samples were judged: from a tenth of the backlog past `base` (so every
    /// partition's expected advance is well above a batch's share) until the first partition
    /// is done (from then on the others catch up, which is in step too).
    pub judged: usize,
    /// The worst max/min ratio of advance since `base` over the judged samples, and the
    /// sample it was seen in; `None` when no sample was judged.
    pub worst: Option<(f64, usize)>,
}

/// Judges `progress` (positions per partition, per sample) against `totals` (each
/// partition's backlog). `None` when a partition never committed anything.
pub fn in_step(progress: &[Vec<i64>], totals: &[i64]) -> Option<InStep> {
    let base = progress.iter().position(|p| p.iter().all(|&n| n > 0))?;
    let from_base = &progress[base];
    let base_done: i64 = from_base.iter().sum();
    let from = base_done + totals.iter().sum::<i64>() / 10;
    let mut judged = 0;
    let mut worst: Option<(f64, usize)> = None;
    for (i, p) in progress.iter().enumerate() {
        let none_done = p.iter().zip(totals).all(|(n, total)| n < total);
        if p.iter().sum::<i64>() < from || !none_done {
            continue;
        }
        judged += 1;
        let ratio = advance_ratio(p, from_base);
        if worst.is_none_or(|(w, _)| ratio > w) {
            worst = Some((ratio, i));
        }
    }
    Some(InStep {
        base,
        base_done,
        judged,
        worst,
    })
}

/// The partition furthest ahead against the one furthest behind, in records advanced since
/// `base`; a partition that did not advance at all makes it infinite.
fn advance_ratio(progress: &[i64], base: &[i64]) -> f64 {
    let advance: Vec<i64> = progress.iter().zip(base).map(|(n, b)| n - b).collect();
    let max = advance.iter().copied().max().unwrap_or(0);
    let min = advance.iter().copied().min().unwrap_or(0);
    if min <= 0 {
        f64::INFINITY
    } else {
        max as f64 / min as f64
    }
}
