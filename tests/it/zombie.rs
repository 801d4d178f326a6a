//! A consumer paused past its session timeout (a zombie) must not commit for partitions that
//! moved on while it slept.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{Sink, SinkConfig};
use crate::helpers::*;

const RECORDS: i64 = 20_000;

async fn owners(db: &TestDb, group: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT DISTINCT owner_id FROM kafka_offsets WHERE consumer_group = $1 ORDER BY 1",
    )
    .bind(group)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn zombie(protocol: &'static str) {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(6).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.protocol = protocol;
    config.max_records = 200;
    config.max_wait_ms = 300;

    let producer = producer();
    produce_orders(&producer, &topic, 0, 2_000).await;
    let mut zombie = Sink::start(&config, "zombie");
    let mut survivor = Sink::start(&config, "survivor");
    wait_until(
        "both sinks to own partitions",
        Duration::from_secs(60),
        || async { owners(&db, &config.group).await.len() == 2 },
    )
    .await;
    // Keep records flowing so the zombie has batches open and in flight when it stops.
    let handle = topic.handle();
    let feeder = tokio::spawn(async move {
        let topic = handle;
        let producer = crate::helpers::kafka::producer();
        let step = (RECORDS - 2_000) / 30;
        for slice in 0..30 {
            produce_orders(
                &producer,
                &topic,
                2_000 + slice * step,
                2_000 + (slice + 1) * step,
            )
            .await;
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;

    zombie.signal(Signal::SIGSTOP);
    let zombie_tag = format!("/{}/", zombie.pid());
    wait_until(
        "the survivor to claim every partition",
        Duration::from_secs(90),
        || async {
            let owners = owners(&db, &config.group).await;
            owners.len() == 1 && !owners[0].contains(&zombie_tag)
        },
    )
    .await;
    let claimed_at: i64 = sqlx::query_scalar("SELECT max(seq) FROM offset_audit")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log_mark = zombie.logs().len();
    zombie.signal(Signal::SIGCONT);

    feeder.await.unwrap();
    wait_drained(&db, &config.group, &topic, Duration::from_secs(180)).await;
    assert_exactly_once(&db, "orders", RECORDS).await;
    assert_rows_match_offsets(&db, "orders", &config.group, &topic.name).await;
    // Every advance after the takeover was made under the survivor's (or a later) epoch.
    assert_offset_history_is_a_chain(&db).await;
    let stale: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM offset_audit a
          WHERE a.seq > $1 AND a.new_next IS DISTINCT FROM a.old_next
            AND a.old_epoch < (SELECT max(b.new_epoch) FROM offset_audit b
                                WHERE b.seq <= $1 AND b.partition = a.partition)",
    )
    .bind(claimed_at)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(stale, 0, "a commit under an epoch older than the takeover");
    let after = &zombie.logs()[log_mark..];
    assert!(
        after.contains("lost=true")
            || after.contains("fenced")
            || after.contains("batch transaction failed"),
        "the zombie should have noticed it lost its partitions:\n{after}"
    );
    assert!(survivor.stop().success());
    if zombie.is_running() {
        zombie.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol() {
    zombie("classic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_consumer_protocol() {
    zombie("consumer").await;
}
