//! The shutdown signal shared by the consumer thread, the writers and the signal handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Cloneable handle: one trigger, many observers, on threads and in tasks alike.
#[derive(Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    /// Set by a second signal: stop waiting for in-flight work.
    forced: Arc<AtomicBool>,
}

impl Shutdown {
    /// Not yet triggered; every clone shares the one trigger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks everything to stop after finishing what is complete.
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Polled by the consumer thread between records.
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Awaited by async tasks.
    pub async fn triggered(&self) {
        self.token.cancelled().await
    }

    /// Whether the operator asked twice and wants out now.
    pub fn is_forced(&self) -> bool {
        self.forced.load(Ordering::Relaxed)
    }

    /// Spawns the handler for SIGINT and SIGTERM: the first asks for a clean stop, the second
    /// forces an exit (nothing uncommitted counts as written, so that is still safe).
    pub fn listen_for_signals(&self) {
        let shutdown = self.clone();
        tokio::spawn(async move {
            let mut count = 0;
            loop {
                wait_for_signal().await;
                count += 1;
                if count == 1 {
                    tracing::info!(
                        "shutdown requested: committing complete batches, then leaving the group"
                    );
                    shutdown.trigger();
                } else {
                    tracing::warn!(
                        "second signal: exiting now; uncommitted records will be read again"
                    );
                    shutdown.forced.store(true, Ordering::Relaxed);
                    std::process::exit(130);
                }
            }
        });
    }
}

/// SIGINT by hand, SIGTERM from `docker stop` and Kubernetes: both mean the same.
#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Elsewhere Ctrl-C is the only signal tokio offers portably.
#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
