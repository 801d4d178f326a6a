//! The benchmark's rows: orders of about 200 bytes of JSON, the same for every scenario.

/// The table every scenario writes: a primary key, a numeric, a timestamptz and a jsonb.
pub const TABLE_DDL: &str = "
CREATE TABLE bench_orders (
    id         text          PRIMARY KEY,
    customer   text          NOT NULL,
    amount     numeric(12,2) NOT NULL,
    currency   text          NOT NULL,
    status     text          NOT NULL,
    created_at timestamptz   NOT NULL,
    attrs      jsonb         NOT NULL
)";

/// The trickle scenario's table: the same columns, plus when each record was produced and
/// when it was written.
pub const TRICKLE_DDL: &str = "
CREATE TABLE bench_trickle (
    LIKE bench_orders INCLUDING ALL,
    kafka_ts   timestamptz NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
)";

const STATUSES: [&str; 4] = ["new", "paid", "shipped", "delivered"];
const CHANNELS: [&str; 3] = ["web", "app", "store"];

/// Order `i` as JSON; deterministic, so every scenario sees the same rows.
pub fn order(i: u64) -> String {
    let secs = 1_700_000_000 + i % 10_000_000;
    let t = chrono::DateTime::from_timestamp(secs as i64, ((i % 1000) * 1_000_000) as u32)
        .expect("valid time")
        .format("%Y-%m-%dT%H:%M:%S%.3fZ");
    format!(
        concat!(
            r#"{{"id":"o-{:010}","customer":"customer-{:06}","amount":"{}.{:02}","currency":"EUR","#,
            r#""status":"{}","created_at":"{}","attrs":{{"channel":"{}","items":{},"coupon":null,"tags":["a","b"]}}}}"#
        ),
        i,
        i % 100_000,
        i % 100_000,
        i % 100,
        STATUSES[(i % 4) as usize],
        t,
        CHANNELS[(i % 3) as usize],
        1 + i % 9,
    )
}

/// The key of order `i` (its id), so keyed partitioning and upserts line up.
pub fn key(i: u64) -> String {
    format!("o-{i:010}")
}
