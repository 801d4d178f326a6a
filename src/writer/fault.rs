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

/// `KPS_FAULT_PAUSE_AFTER_DDL_MS`: a transaction that ran schema changes waits this long before
/// its rows, so a test can kill the sink between the change and its batch.
pub(super) async fn pause_after_ddl() {
    if let Some(ms) = std::env::var("KPS_FAULT_PAUSE_AFTER_DDL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        tracing::info!(
            ms,
            "fault injected: pausing between the schema change and its rows"
        );
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}
