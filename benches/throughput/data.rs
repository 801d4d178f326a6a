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

/// The partition Kafka's Java producer gives a key by default (murmur2 of the key bytes,
/// made positive, modulo the partition count): orders spread as users' keyed records are,
/// rather than order `i` on partition `i % N`.
pub fn murmur2_partition(key: &[u8], partitions: i32) -> i32 {
    const M: u32 = 0x5bd1e995;
    let mut h: u32 = 0x9747b28c ^ key.len() as u32;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    ((h & 0x7fff_ffff) % partitions as u32) as i32
}

/// The sparse-upsert scenario's table: the orders' columns, nullable, so records may leave
/// any of them out.
pub const SPARSE_DDL: &str = "
CREATE TABLE bench_sparse (
    id         text          PRIMARY KEY,
    customer   text,
    amount     numeric(12,2),
    currency   text,
    status     text,
    created_at timestamptz,
    attrs      jsonb
)";

/// The non-key columns of an order, in table order.
pub const SPARSE_COLUMNS: [&str; 6] = [
    "customer",
    "amount",
    "currency",
    "status",
    "created_at",
    "attrs",
];

/// Which of `SPARSE_COLUMNS` the sparse record `i` carries: a bit each, from a hash of `i`, so
/// records differ in column list from one to the next, as CDC changes with changed columns
/// only do.
pub fn sparse_carried(i: u64) -> u8 {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    (x.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 58) as u8 & 0x3f
}

/// Column `c`'s value in sparse record `i`, as JSON: never the order's own value, so a merge
/// that drops it is seen.
pub fn sparse_value(i: u64, c: usize) -> String {
    match c {
        0 => format!(r#""customer-sparse-{i}""#),
        1 => format!(r#""{}.01""#, i % 1000),
        2 => r#""USD""#.into(),
        3 => r#""returned""#.into(),
        4 => r#""2024-01-01T00:00:00.000Z""#.into(),
        _ => format!(r#"{{"sparse":{i}}}"#),
    }
}

/// Order `i`'s key with the columns `sparse_carried(i)` picks, each with its sparse value.
pub fn sparse_order(i: u64) -> String {
    let carried = sparse_carried(i);
    let mut fields = vec![format!(r#""id":"{}""#, key(i))];
    for (c, name) in SPARSE_COLUMNS.iter().enumerate() {
        if carried & (1 << c) != 0 {
            fields.push(format!(r#""{name}":{}"#, sparse_value(i, c)));
        }
    }
    format!("{{{}}}", fields.join(","))
}
