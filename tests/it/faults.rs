//! Failed transactions: whatever a failure interrupts, nothing is lost or written twice.

use std::time::Duration;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::proxy::CommitCutter;
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 40_000;

#[tokio::test(flavor = "multi_thread")]
async fn writer_sessions_killed_mid_transaction_roll_back_and_rewind() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let ender = SessionEnder::arm(&db, "orders", Duration::from_millis(30)).await;
    let topic = TestTopic::create(4).await;
    produce_orders(&producer(), &topic, 0, RECORDS).await;

    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.max_records = 250;
    let mut sink = Sink::start(&config, "sink");

    // The sink's sessions in this database are ended over and over, as a failover or an
    // administrator would: transactions die before, during and after COPY.
    ender
        .end_busy(RECORDS, 20, i64::MAX, Duration::from_millis(150))
        .await;

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, RECORDS).await;
    let logs = sink.logs();
    assert!(
        logs.contains("rewound to stored offsets"),
        "{}",
        sink.logs_tail(40)
    );
    assert!(sink.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_whose_answer_is_lost_is_resolved_by_rereading_not_by_guessing() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    produce_orders(&producer(), &topic, 0, 20_000).await;

    // The sink reaches PostgreSQL through a proxy that loses the answer to every 7th COMMIT.
    let mut url = url::Url::parse(&db.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let cutter = CommitCutter::start(upstream, 7).await;
    url.set_port(Some(cutter.port)).unwrap();
    // The proxy reads the protocol, so no TLS on this path.
    url.query_pairs_mut().append_pair("sslmode", "disable");
    let mut config = SinkConfig::new(url.as_str(), &topic.name, "orders");
    config.max_records = 400;
    let mut sink = Sink::start(&config, "sink");

    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert!(
        cutter.cuts() >= 3,
        "only {} of {} commits lost their answer",
        cutter.cuts(),
        cutter.commits()
    );
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 20_000).await;
    assert!(sink.stop().success());
}

/// A TCP proxy in front of PostgreSQL that, while frozen, holds every byte in both directions
/// (a network that stopped answering): the server never sees a query, so no server-side
/// timeout can fire.
struct FreezingProxy {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FreezingProxy {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(Self::pipe(client_read, server_write, flag.clone()));
                tokio::spawn(Self::pipe(server_read, client_write, flag.clone()));
            }
        });
        Self { port, frozen }
    }

    /// Copies one direction, holding each chunk while the proxy is frozen.
    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            while frozen.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A claim whose database stops answering (the query never reaches the server, so its
/// statement_timeout cannot fire) is abandoned client-side within
/// `statement_timeout + connect_timeout` (1 s + 1 s) and retried; once the database answers
/// again the partition is claimed and every record written once.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_the_network_never_answers_is_abandoned_client_side_and_retried() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(2).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 100).await;

    let mut url = url::Url::parse(&db.url).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = FreezingProxy::start(upstream).await;
    url.set_port(Some(proxy.port)).unwrap();
    let config = SinkConfig::new(url.as_str(), &topic.name, "orders");
    let mut a = Sink::start_with(
        &config,
        "a",
        &[
            "--set",
            "postgres.statement_timeout=1s",
            "--set",
            "postgres.connect_timeout=1s",
        ],
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    // B (straight to PostgreSQL) joins and takes a partition; A gets it back when B leaves,
    // and must claim it while its database is silent.
    let direct = SinkConfig {
        database_url: db.url.clone(),
        ..config.clone()
    };
    let mut b = Sink::start(&direct, "b");
    let b_tag = format!("/{}/", b.pid());
    wait_until(
        "B to claim a partition",
        Duration::from_secs(60),
        || async {
            let owners: Vec<String> =
                sqlx::query_scalar("SELECT owner_id FROM kafka_offsets WHERE consumer_group = $1")
                    .bind(&config.group)
                    .fetch_all(&db.pool)
                    .await
                    .unwrap();
            owners.iter().any(|o| o.contains(&b_tag))
        },
    )
    .await;
    proxy.freeze(true);
    let log_mark = a.logs().len();
    assert!(b.stop().success());
    // Each attempt is given up on the client side (waiting for a connection, or for the
    // answer to the claim) within statement_timeout + connect_timeout, then retried after at
    // most retry_backoff_max (1 s): five attempts fit in well under 25 s.
    let abandoned = |logs: &str| {
        logs.lines()
            .filter(|l| {
                l.contains("WARN")
                    && l.contains("cannot claim assigned partitions in PostgreSQL; retrying")
                    && (l.contains("PostgreSQL did not answer within 2s")
                        || l.contains("pool timed out while waiting for an open connection"))
            })
            .count()
    };
    wait_until(
        "A to give up on claims the database never answered",
        Duration::from_secs(25),
        || async { abandoned(&a.logs()[log_mark..]) >= 5 },
    )
    .await;
    proxy.freeze(false);

    produce_orders(&producer, &topic, 100, 200).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let a_tag = format!("/{}/", a.pid());
    let owners: Vec<String> =
        sqlx::query_scalar("SELECT owner_id FROM kafka_offsets WHERE consumer_group = $1")
            .bind(&config.group)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(owners.iter().all(|o| o.contains(&a_tag)), "{owners:?}");
    assert_delivered_exactly_once(&db, "orders", &config.group, &topic.name, 200).await;
    let copies = orders_as_produced(&db, "orders", 2).await;
    assert!(copies.values().all(|&c| c == 1), "{copies:?}");
    assert!(a.stop().success());
}
