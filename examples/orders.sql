-- The table examples/orders.toml writes to. Apply with:
--   psql "$DATABASE_URL" -f examples/orders.sql
CREATE TABLE IF NOT EXISTS orders (
    id              text        PRIMARY KEY,
    customer        text        NOT NULL,
    amount          numeric(12,2) NOT NULL,
    currency        text        NOT NULL DEFAULT 'EUR',
    status          text,
    created_at      timestamptz NOT NULL,
    attrs           jsonb,
    -- Filled from the Kafka record, not from its value.
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    kafka_timestamp timestamptz,
    inserted_at     timestamptz NOT NULL DEFAULT now()
);
