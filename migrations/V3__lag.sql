-- Kafka's own lag tools cannot see positions kept in PostgreSQL. The sink records each assigned
-- partition's watermarks here every few seconds, so lag can be read from SQL alone.
CREATE TABLE IF NOT EXISTS kafka_watermarks (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    low_watermark  bigint      NOT NULL,
    high_watermark bigint      NOT NULL,
    observed_at    timestamptz NOT NULL,
    PRIMARY KEY (consumer_group, topic, partition)
);

-- How far behind each partition is: the end of the partition (as last observed) minus where
-- the sink resumes. Partitions no sink owns right now keep their last observation; the
-- watermark age says how old it is.
CREATE OR REPLACE VIEW kafka_lag AS
SELECT consumer_group,
       topic,
       partition,
       o.next_offset,
       w.low_watermark,
       w.high_watermark,
       greatest(w.high_watermark - coalesce(o.next_offset, w.low_watermark), 0) AS lag,
       o.owner_id,
       o.committed_at                                   AS last_commit_at,
       extract(epoch FROM now() - o.committed_at)::float8 AS seconds_since_commit,
       w.observed_at                                    AS watermark_observed_at,
       extract(epoch FROM now() - w.observed_at)::float8  AS watermark_age_seconds
  FROM kafka_offsets o
  FULL JOIN kafka_watermarks w USING (consumer_group, topic, partition);
