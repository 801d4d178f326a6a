//! Fault injection for the integration tests, compiled into debug builds only: a writer that
//! dies must stop the sink, never hang it, and nothing else can make a writer panic on purpose.

/// once it has committed `batches`.
pub(super) struct WriterPanic {
    after: Option<u64>,
    seen: u64,
}

impl WriterPanic {
    /// Reads the variable once, when the writer starts.
    pub(super) fn from_env(lane: usize) -> Self {
        let after = std::env::var("KPS_FAULT_WRITER_PANIC").ok().and_then(|v| {
            let (l, n) = v.split_once(':')?;
            (l.parse::<usize>().ok()? == lane).then(|| n.parse().ok())?
        });
        Self { after, seen: 0 }
    }

    /// Panics when the count is reached.
    pub(super) fn before_batch(&mut self) {
        if self.after.is_some_and(|n| self.seen >= n) {
            panic!("fault injected by KPS_FAULT_WRITER_PANIC");
        }
        self.seen += 1;
    }
}
