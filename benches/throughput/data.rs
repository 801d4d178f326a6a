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

/// Order `i` as values, so every encoding (JSON, Avro, Protobuf) writes the same row.
pub struct Order {
    pub id: String,
    pub customer: String,
    /// The amount in cents: `numeric(12,2)` exactly, whatever the encoding.
    pub cents: u64,
    pub currency: &'static str,
    pub status: &'static str,
    /// Milliseconds since the epoch (the JSON's `created_at`, to the millisecond).
    pub created_ms: i64,
    pub channel: &'static str,
    pub items: u64,
    /// `attrs.tags`. (`attrs.coupon` is always null: no field needed.)
    pub tags: [&'static str; 2],
}

impl Order {
    /// Order `i`; deterministic, so every scenario sees the same rows.
    pub fn new(i: u64) -> Self {
        let secs = 1_700_000_000 + i % 10_000_000;
        Self {
            id: key(i),
            customer: format!("customer-{:06}", i % 100_000),
            cents: (i % 100_000) * 100 + i % 100,
            currency: "EUR",
            status: STATUSES[(i % 4) as usize],
            created_ms: secs as i64 * 1000 + (i % 1000) as i64,
            channel: CHANNELS[(i % 3) as usize],
            items: 1 + i % 9,
            tags: ["a", "b"],
        }
    }

    /// The amount as its decimal text, `"12345.67"`.
    pub fn amount(&self) -> String {
        format!("{}.{:02}", self.cents / 100, self.cents % 100)
    }

    /// `created_at` as RFC 3339 in UTC with milliseconds, `"2023-11-14T22:13:20.000Z"`.
    pub fn created_at(&self) -> String {
        chrono::DateTime::from_timestamp_millis(self.created_ms)
            .expect("valid time")
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    }
}

/// Order `i` as JSON; deterministic, so every scenario sees the same rows.
pub fn order(i: u64) -> String {
    let o = Order::new(i);
    format!(
        concat!(
            r#"{{"id":"{}","customer":"{}","amount":"{}","currency":"{}","#,
            r#""status":"{}","created_at":"{}","attrs":{{"channel":"{}","items":{},"coupon":null,"tags":["{}","{}"]}}}}"#
        ),
        o.id,
        o.customer,
        o.amount(),
        o.currency,
        o.status,
        o.created_at(),
        o.channel,
        o.items,
        o.tags[0],
        o.tags[1],
    )
}

/// The Connect struct schema of an order, as `JsonConverter` with `schemas.enable=true`
/// writes it in every record.
const CONNECT_SCHEMA: &str = concat!(
    r#"{"type":"struct","name":"shop.orders.Value","optional":false,"fields":["#,
    r#"{"field":"id","type":"string","optional":false},"#,
    r#"{"field":"customer","type":"string","optional":false},"#,
    r#"{"field":"amount","type":"string","optional":false},"#,
    r#"{"field":"currency","type":"string","optional":false},"#,
    r#"{"field":"status","type":"string","optional":false},"#,
    r#"{"field":"created_at","type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1},"#,
    r#"{"field":"attrs","type":"struct","name":"shop.orders.Attrs","optional":false,"fields":["#,
    r#"{"field":"channel","type":"string","optional":false},"#,
    r#"{"field":"items","type":"int32","optional":false},"#,
    r#"{"field":"coupon","type":"string","optional":true},"#,
    r#"{"field":"tags","type":"array","items":{"type":"string","optional":false},"optional":false}]}]}"#
);

/// Order `i` in Kafka Connect's JSON envelope: the schema, then the order as the payload.
pub fn connect_order(i: u64) -> String {
    format!(r#"{{"schema":{CONNECT_SCHEMA},"payload":{}}}"#, order(i))
}

/// Order `i` as a Debezium create event in the JSON converter's envelope, with the
/// `source` block Debezium writes.
pub fn debezium_order(i: u64) -> String {
    format!(
        concat!(
            r#"{{"schema":{{"type":"struct","name":"shop.orders.Envelope","optional":false,"fields":["#,
            r#"{{"field":"before","optional":true,{before}}},"#,
            r#"{{"field":"after","optional":true,{after}}},"#,
            r#"{{"field":"source","type":"struct","optional":false,"name":"io.debezium.connector.postgresql.Source","fields":["#,
            r#"{{"field":"version","type":"string","optional":false}},{{"field":"connector","type":"string","optional":false}},"#,
            r#"{{"field":"name","type":"string","optional":false}},{{"field":"ts_ms","type":"int64","optional":false}},"#,
            r#"{{"field":"db","type":"string","optional":false}},{{"field":"schema","type":"string","optional":false}},"#,
            r#"{{"field":"table","type":"string","optional":false}},{{"field":"lsn","type":"int64","optional":true}}]}},"#,
            r#"{{"field":"op","type":"string","optional":false}},{{"field":"ts_ms","type":"int64","optional":true}}]}},"#,
            r#""payload":{{"before":null,"after":{order},"source":{{"version":"2.7.0.Final","connector":"postgresql","#,
            r#""name":"shop","ts_ms":{ts},"db":"shop","schema":"public","table":"orders","lsn":{lsn}}},"op":"c","ts_ms":{ts}}}}}"#
        ),
        before = &CONNECT_SCHEMA[1..CONNECT_SCHEMA.len() - 1],
        after = &CONNECT_SCHEMA[1..CONNECT_SCHEMA.len() - 1],
        order = order(i),
        ts = 1_700_000_000_000u64 + i,
        lsn = 24_000_000 + i * 64,
    )
}

/// The key of order `i` (its id), so keyed partitioning and upserts line up.
pub fn key(i: u64) -> String {
    format!("o-{i:010}")
}
