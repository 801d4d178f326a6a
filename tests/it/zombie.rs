//! A consumer paused past its session timeout (a zombie) must not commit for partitions that
//! moved on while it slept.

use std::time::Duration;

use nix::sys::signal::Signal;
use sqlx::Executor;

use crate::helpers::db::TestDb;
use crate::helpers::kafka::{produce_orders, producer, TestTopic};
use crate::helpers::sink::{run_cli, ConfigFile, Sink, SinkConfig};
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

/// An operator resets a partition whose owner had been taken over: only the owner at the time
/// of the reset may claim it back. Sink A owns it and stops past its session timeout with a
/// rewind due (its last transaction failed), B takes over, the operator resets twice, A wakes
/// while B pauses a moment, so A looks first: A must stay fenced, and B continue from the
/// reset position, every record once from there.
#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_waking_after_an_operator_reset_cannot_take_the_partition_back() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 200).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    // A long backoff: a rewind scheduled before the pause is still pending when A wakes, so
    // the first thing A does is re-read its partition, before librdkafka tells it it lost it.
    let mut a = Sink::start_with(
        &config,
        "zombie",
        &[
            "--set",
            "batch.retry_backoff_min=4s",
            "--set",
            "batch.retry_backoff_max=5s",
        ],
    );
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'kafka-pg-sink'",
    )
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(n > 0);
    produce_orders(&producer, &topic, 200, 210).await;
    wait_until(
        "A's rewind to be scheduled",
        Duration::from_secs(30),
        || async { a.logs().contains("rewind scheduled") },
    )
    .await;
    a.signal(Signal::SIGSTOP);

    let mut b = Sink::start(&config, "rightful owner");
    let b_tag = format!("/{}/", b.pid());
    wait_until(
        "B to take the partition over",
        Duration::from_secs(90),
        || async {
            owners(&db, &config.group)
                .await
                .iter()
                .all(|o| o.contains(&b_tag))
        },
    )
    .await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;

    // B pauses for a moment (well inside its session timeout) while the operator resets twice
    // and A wakes.
    b.signal(Signal::SIGSTOP);
    let file = ConfigFile::new(&config.toml());
    for to in ["80", "50"] {
        let out = run_cli(&[
            "offsets",
            "reset",
            "--config",
            file.arg(),
            "--topic",
            &topic.name,
            "--to-offset",
            to,
        ])
        .await;
        assert!(out.status.success(), "{}", out.stderr);
        // The first replaces B's epoch, the second the first reset's.
        let replaced = if to == "80" {
            b_tag.as_str()
        } else {
            "of reset:"
        };
        assert!(
            out.stdout.contains("(replaced epoch ") && out.stdout.contains(replaced),
            "{}",
            out.stdout
        );
    }
    let detail: String = sqlx::query_scalar(
        "SELECT detail FROM kafka_offset_events WHERE kind = 'manual_reset' ORDER BY id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        detail.contains("replacing epoch ") && detail.contains(&b_tag),
        "{detail}"
    );
    let reset_at: i64 = sqlx::query_scalar("SELECT max(seq) FROM offset_audit")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let log_mark = a.logs().len();
    a.signal(Signal::SIGCONT);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    b.signal(Signal::SIGCONT);

    produce_orders(&producer, &topic, 210, 300).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    for offset in 0..300 {
        let expected = if (50..210).contains(&offset) { 2 } else { 1 };
        assert_eq!(copies.get(&(0, offset)), Some(&expected), "offset {offset}");
    }
    // After the resets only B claimed or committed.
    let owners_since: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT owner FROM offset_audit WHERE seq > $1 ORDER BY 1")
            .bind(reset_at)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        !owners_since.is_empty() && owners_since.iter().all(|o| o.contains(&b_tag)),
        "A is /{}/, B {b_tag}: {owners_since:?}",
        a.pid()
    );
    // A learns it lost the partition either by re-reading it (its pending rewind: the reclaim
    // decision this test is about) or, when librdkafka's own session timer fires first on
    // waking, by a lost revoke. Which comes first is a race on a loaded machine; either way A
    // must say it no longer owns the partition, and the audit above shows it never wrote.
    let after = &a.logs()[log_mark..];
    assert!(
        after.contains("fenced") || after.contains("lost=true"),
        "A never noticed it had lost the partition:\n{after}"
    );
    if !after.contains("fenced") {
        eprintln!("A's session timer fired before its re-read: the reclaim refusal was not exercised this run");
    }
    assert!(b.stop().success());
    if a.is_running() {
        a.stop();
    }
}

/// A sink session blocked on a row lock, by pid.
async fn sink_session_waiting_on_a_lock(db: &TestDb) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'kafka-pg-sink' AND wait_event_type = 'Lock'",
    )
    .bind(&db.name)
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

/// The state of a backend, None once it is gone.
async fn session_state(db: &TestDb, pid: i32) -> Option<String> {
    sqlx::query_scalar::<_, Option<String>>("SELECT state FROM pg_stat_activity WHERE pid = $1")
        .bind(pid)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
        .flatten()
}

/// A sink, its single partition drained once, then stopped (SIGSTOP) inside a batch
/// transaction right after its compare-and-set: its session is idle in transaction and holds
/// the offset row's lock. The test's own row lock holds the compare-and-set until the sink is
/// stopped, so the moment is always the same. Returns the sink and its writer's backend pid.
async fn stopped_inside_a_transaction(
    db: &TestDb,
    topic: &TestTopic,
    config: &SinkConfig,
    idle_in_transaction_timeout: &str,
) -> (Sink, i32) {
    let producer = producer();
    produce_orders(&producer, topic, 0, 10).await;
    let sink = Sink::start_with(
        config,
        "zombie",
        &[
            "--set",
            &format!("postgres.idle_in_transaction_timeout={idle_in_transaction_timeout}"),
        ],
    );
    wait_drained(db, &config.group, topic, Duration::from_secs(60)).await;
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM kafka_offsets WHERE consumer_group = $1 FOR UPDATE")
        .bind(&config.group)
        .fetch_all(&mut *holder)
        .await
        .unwrap();
    produce_orders(&producer, topic, 10, 20).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if let Some(pid) = sink_session_waiting_on_a_lock(db).await {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sink's compare-and-set never waited on the test's row lock\n{}",
            sink.logs_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    sink.signal(Signal::SIGSTOP);
    holder.rollback().await.unwrap();
    wait_until(
        "the stopped sink's compare-and-set to finish",
        // Seconds on a quiet machine; CI on two loaded cores once took longer than 10.
        Duration::from_secs(30),
        || async { session_state(db, pid).await.as_deref() == Some("idle in transaction") },
    )
    .await;
    (sink, pid)
}

/// The claim ends a stopped previous owner's session once `lock_timeout` (2 s here) has
/// passed, instead of waiting for `idle_in_transaction_timeout` (300 s here): the survivor
/// takes the partition, and the woken zombie is fenced and writes nothing more.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction() {
    claim_ends_a_stopped_owner(false).await;
}

/// The same under README's minimal grants: a role may end its own sessions, so sinks of one
/// group running as one role fence each other without `pg_signal_backend`.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_ends_a_stopped_owner_under_the_documented_minimal_grants() {
    claim_ends_a_stopped_owner(true).await;
}

/// The `GRANT`s of README's "Minimal grants" for `role` on `db`, read from README (as
/// `security::the_documented_minimal_grants_are_enough` does), so they cannot drift apart.
fn readme_grants(db: &str, role: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = &readme[readme.find("**Minimal grants**").expect("grants")..];
    let start = section.find("```sql").expect("a sql block") + "```sql".len();
    let block = &section[start..start + section[start..].find("```").expect("its end")];
    block
        .lines()
        .map(|l| l.split("--").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.replace(" TO sink;", &format!(" TO {role};"))
                .replace("ON DATABASE app ", &format!("ON DATABASE \"{db}\" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn claim_ends_a_stopped_owner(minimal_role: bool) {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    install_offset_audit(&db).await;
    let topic = TestTopic::create(1).await;
    let mut url = url::Url::parse(&db.url).unwrap();
    if minimal_role {
        // README's grants also name a customers table; the test's audit writes with its
        // owner's rights, not the sink's.
        db.pool
            .execute(
                "CREATE TABLE customers (id bigint PRIMARY KEY, v text);
                 ALTER FUNCTION audit_offsets() SECURITY DEFINER;",
            )
            .await
            .unwrap();
        let role = format!("kps_fence_{}", &db.name[9..]);
        db.pool
            .execute(
                format!(
                    "CREATE ROLE {role} LOGIN PASSWORD 'sink-pass';\n{}",
                    readme_grants(&db.name, &role)
                )
                .as_str(),
            )
            .await
            .unwrap();
        url.set_username(&role).unwrap();
        url.set_password(Some("sink-pass")).unwrap();
    }
    let mut config = SinkConfig::new(url.as_str(), &topic.name, "orders");
    config.writers = 1;
    let (mut zombie, pid) = stopped_inside_a_transaction(&db, &topic, &config, "300s").await;

    let mut survivor = Sink::start(&config, "survivor");
    let survivor_tag = format!("/{}/", survivor.pid());
    wait_until(
        "the survivor to claim the partition",
        Duration::from_secs(90),
        || async {
            owners(&db, &config.group)
                .await
                .iter()
                .all(|o| o.contains(&survivor_tag))
        },
    )
    .await;
    assert_eq!(
        session_state(&db, pid).await,
        None,
        "the zombie's session is still there"
    );
    let ended = survivor.logs().lines().any(|l| {
        l.contains("WARN")
            && l.contains(
                "a previous owner still holds locks on claimed partitions: ended its sessions",
            )
            && l.contains(&pid.to_string())
    });
    assert!(ended, "{}", survivor.logs_tail(30));

    let log_mark = zombie.logs().len();
    zombie.signal(Signal::SIGCONT);
    produce_orders(&producer(), &topic, 20, 40).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    // Woken, it learns it lost the partition from the group (librdkafka's own session timer
    // fires first) or from its failed epoch check, whichever comes first.
    wait_until(
        "the zombie to log that it lost the partition",
        Duration::from_secs(30),
        || async {
            zombie.logs()[log_mark..].lines().any(|l| {
                (l.contains("INFO revoked") && l.contains("lost=true"))
                    || l.contains("WARN fenced: another consumer owns these partitions now")
            })
        },
    )
    .await;
    // No advance after the survivor's claim was made under an older epoch.
    let stale: i64 = sqlx::query_scalar(
        "WITH claim AS (SELECT seq, new_epoch FROM offset_audit
                         WHERE owner LIKE '%' || $1 || '%' ORDER BY seq LIMIT 1)
         SELECT count(*) FROM offset_audit a, claim
          WHERE a.seq > claim.seq AND a.new_next IS DISTINCT FROM a.old_next
            AND a.old_epoch < claim.new_epoch",
    )
    .bind(&survivor_tag)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stale, 0,
        "a commit under the zombie's epoch after the claim"
    );
    let copies = orders_as_produced(&db, "orders", 1).await;
    assert_eq!(copies.len(), 40, "{copies:?}");
    assert!(copies.values().all(|&c| c == 1), "{copies:?}");
    assert_offset_history_is_a_chain(&db).await;
    assert!(survivor.stop().success());
    if zombie.is_running() {
        zombie.stop();
    }
}

/// With no one to claim its partition, a sink stopped inside a transaction loses its session
/// to `postgres.idle_in_transaction_timeout` (2 s here), which releases the offset row; woken,
/// it retries and writes every record once.
#[tokio::test(flavor = "multi_thread")]
async fn idle_in_transaction_timeout_ends_the_session_of_a_stopped_sink() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let mut config = SinkConfig::new(&db.url, &topic.name, "orders");
    config.writers = 1;
    let (mut sink, pid) = stopped_inside_a_transaction(&db, &topic, &config, "2s").await;
    wait_until(
        "the server to end the stopped sink's session",
        Duration::from_secs(15),
        || async { session_state(&db, pid).await.is_none() },
    )
    .await;
    sink.signal(Signal::SIGCONT);
    produce_orders(&producer(), &topic, 20, 40).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    assert_eq!(copies.len(), 40, "{copies:?}");
    assert!(copies.values().all(|&c| c == 1), "{copies:?}");
    assert!(sink.stop().success());
}

/// A claim blocked by another application's row lock on `kafka_offsets` never ends that
/// session: only sink sessions are fenced. The sink claims once the lock is released.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_never_ends_the_session_of_another_application() {
    let db = TestDb::migrated().await;
    db.create_orders_table("orders").await;
    let topic = TestTopic::create(1).await;
    let producer = producer();
    produce_orders(&producer, &topic, 0, 10).await;
    let config = SinkConfig::new(&db.url, &topic.name, "orders");
    let mut first = Sink::start(&config, "first");
    wait_drained(&db, &config.group, &topic, Duration::from_secs(60)).await;
    assert!(first.stop().success());

    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM kafka_offsets WHERE consumer_group = $1 FOR UPDATE")
        .bind(&config.group)
        .fetch_all(&mut *holder)
        .await
        .unwrap();
    let mut sink = Sink::start(&config, "sink");
    wait_until(
        "the claim to time out on the lock",
        Duration::from_secs(60),
        || async { sink.logs().contains("a previous owner still holds locks") },
    )
    .await;
    // The holder's session is still there and still in its transaction.
    let alive: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *holder)
        .await
        .expect("the other application's session was ended");
    assert_eq!(alive, 1);
    holder.rollback().await.unwrap();

    produce_orders(&producer, &topic, 10, 30).await;
    wait_drained(&db, &config.group, &topic, Duration::from_secs(90)).await;
    let copies = orders_as_produced(&db, "orders", 1).await;
    assert_eq!(copies.len(), 30, "{copies:?}");
    assert!(copies.values().all(|&c| c == 1), "{copies:?}");
    assert!(sink.stop().success());
}
