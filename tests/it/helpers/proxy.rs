//! A TCP proxy in front of PostgreSQL that lets every n-th COMMIT reach the server and then
//! cuts the connection before the answer comes back: the commit happened, but the client
//! cannot know. The only correct reaction is to re-read the stored offsets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A simple-protocol Query message carrying `COMMIT` (what sqlx sends to commit).
const COMMIT: &[u8] = b"Q\x00\x00\x00\x0bCOMMIT\x00";

/// The running proxy; it stops with the test's runtime.
pub struct CommitCutter {
    pub port: u16,
    commits: Arc<AtomicUsize>,
    cuts: Arc<AtomicUsize>,
}

impl CommitCutter {
    /// Proxies to `upstream` (host:port), cutting after every `every`-th COMMIT.
    pub async fn start(upstream: String, every: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let commits = Arc::new(AtomicUsize::new(0));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (c, k) = (commits.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let (c, k) = (c.clone(), k.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        relay(client, server, every, c, k).await;
                    }
                });
            }
        });
        Self {
            port,
            commits,
            cuts,
        }
    }

    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::Relaxed)
    }

    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::Relaxed)
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    every: usize,
    commits: Arc<AtomicUsize>,
    cuts: Arc<AtomicUsize>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let back = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let is_commit = chunk.windows(COMMIT.len()).any(|w| w == COMMIT);
        if sw.write_all(chunk).await.is_err() {
            break;
        }
        if is_commit && (commits.fetch_add(1, Ordering::Relaxed) + 1) % every == 0 {
            // The server commits; its answer is never relayed.
            back.abort();
            tokio::time::sleep(Duration::from_millis(300)).await;
            cuts.fetch_add(1, Ordering::Relaxed);
            break;
        }
    }
    back.abort();
}
