//! What the fetch floor says of an envelope's cost: the one arithmetic that the benchmark's
//! floor readout (`benches/throughput/floor.rs`, which includes this file) prints and
//! `tests/it/bench_floor.rs` checks.
//!
//! An envelope record carries several times plain JSON's bytes for the same row. Receiving
//! those bytes (the broker serving them, the kernel copying them, librdkafka framing them)
//! costs the same whatever consumes them. So the best an envelope can do against plain JSON
//! is plain JSON's cost plus the difference of the two topics' fetch floors.

/// CPU seconds over one drain of a topic's records (the same number of records for every
/// drain compared): the consumer's own, and the whole machine's busy time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub cpu: f64,
    pub busy: f64,
}

/// The best ratios an envelope could reach against plain JSON in its write mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The least CPU per record the sink could have for the envelope, over plain JSON's:
    /// plain JSON's, plus what receiving the envelope's bytes costs a consumer beyond
    /// receiving plain JSON's.
    pub least_cpu_ratio: f64,
    /// The most rows/s over plain JSON's, when the machine was the bound of the plain drain
    /// (its busy time near the drain's length times the cores): the plain drain's busy time
    /// per record against that plus what receiving the envelope's bytes adds to the machine.
    pub most_rows_ratio: f64,
    /// The sink's CPU per record beyond the envelope's fetch floor, over plain JSON's beyond
    /// its floor: what decoding and writing the envelope costs the sink's own code.
    pub own_cpu_ratio: f64,
}

impl Bound {
    /// `plain` and `envelope` are the sink's drains; the floors are of their topics.
    pub fn new(plain: Costs, envelope: Costs, plain_floor: Costs, envelope_floor: Costs) -> Self {
        let tiny = 1e-3;
        let extra_cpu = envelope_floor.cpu - plain_floor.cpu;
        let extra_busy = envelope_floor.busy - plain_floor.busy;
        Self {
            least_cpu_ratio: (plain.cpu + extra_cpu) / plain.cpu.max(tiny),
            most_rows_ratio: plain.busy / (plain.busy + extra_busy).max(tiny),
            own_cpu_ratio: (envelope.cpu - envelope_floor.cpu)
                / (plain.cpu - plain_floor.cpu).max(tiny),
        }
    }
}
