-- Records the sink could not write, kept in the same transaction as the batch and its offsets,
-- so a dead letter is written exactly once too.
CREATE TABLE IF NOT EXISTS kafka_dead_letters (
    id               bigserial   PRIMARY KEY,
    consumer_group   text        NOT NULL,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    record_timestamp timestamptz,
    key              bytea,
    value            bytea,
    headers          jsonb,
    -- decode (not the expected format), mapping (a value does not fit its column),
    -- rejected (PostgreSQL refused the row), too_large
    error_kind       text        NOT NULL,
    error_message    text        NOT NULL,
    target_table     text,
    failed_at        timestamptz NOT NULL DEFAULT now(),
    -- A backstop: the offset fence already makes a second copy impossible.
    UNIQUE (consumer_group, topic, partition, "offset")
);

-- Position changes the sink made on its own (a stored offset that fell out of the partition's
-- range and was reset by policy), so that a gap is never silent.
CREATE TABLE IF NOT EXISTS kafka_offset_events (
    id             bigserial   PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    kind           text        NOT NULL,
    from_offset    bigint,
    to_offset      bigint,
    detail         text        NOT NULL,
    at             timestamptz NOT NULL DEFAULT now()
);
