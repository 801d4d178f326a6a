-- Where each partition resumes, written in the same transaction as the rows it covers.
-- PostgreSQL, not Kafka, is the source of truth for the sink's position.
CREATE TABLE IF NOT EXISTS kafka_offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL CHECK (partition >= 0),
    -- The next offset to read: last written offset + 1. NULL until the first commit,
    -- while the configured reset policy decides where reading starts.
    next_offset    bigint      CHECK (next_offset >= 0),
    -- Bumped by every claim. A commit must present the epoch it claimed with, so a consumer
    -- that lost the partition (a zombie) cannot advance it.
    owner_epoch    bigint      NOT NULL DEFAULT 0,
    owner_id       text,
    claimed_at     timestamptz,
    committed_at   timestamptz,
    PRIMARY KEY (consumer_group, topic, partition)
);

COMMENT ON TABLE kafka_offsets IS
    'kafka-pg-sink consumer positions; next_offset is committed atomically with the sink''s rows';
