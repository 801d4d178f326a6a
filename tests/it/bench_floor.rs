//! The benchmark's fetch-floor readout: its arithmetic, and that the benchmark uses it.

use crate::helpers::assert_bench_uses;
use crate::helpers::fetch_floor::{Bound, Costs};

/// The floors add to plain JSON's cost only what receiving the envelope's bytes costs more.
#[test]
fn the_floor_bound_adds_only_what_the_envelopes_bytes_cost_to_receive() {
    let c = |cpu, busy| Costs { cpu, busy };
    // Plain JSON: the sink 2.0 s, the machine 6.0 s, its topic's floor 0.5 s (1.0 s of the
    // machine). The envelope: the sink 4.2 s, its floor 1.7 s (3.0 s of the machine).
    let b = Bound::new(c(2.0, 6.0), c(4.2, 9.4), c(0.5, 1.0), c(1.7, 3.0));
    assert!((b.least_cpu_ratio - 1.6).abs() < 1e-9, "{b:?}");
    assert!((b.most_rows_ratio - 0.75).abs() < 1e-9, "{b:?}");
    assert!((b.own_cpu_ratio - 2.5 / 1.5).abs() < 1e-9, "{b:?}");
    // Bytes that cost nothing more to receive leave plain JSON's ratios: 1 and 1.
    let same = Bound::new(c(2.0, 6.0), c(2.0, 6.0), c(0.5, 1.0), c(0.5, 1.0));
    assert_eq!(
        (
            same.least_cpu_ratio,
            same.most_rows_ratio,
            same.own_cpu_ratio
        ),
        (1.0, 1.0, 1.0)
    );
}

/// README says the benchmark's floor readout is this arithmetic: it fails if the benchmark
/// stops including or calling it.
#[test]
fn the_benchmark_floor_readout_uses_the_shared_bound() {
    assert_bench_uses("floor.rs", "fetch_floor.rs", "Bound::new(");
}
