-- The owner epoch an operator's reset (`kafka-pg-sink offsets reset`) replaced. Only the sink
-- that owned the partition under that epoch may claim it back and continue from the reset
-- position; an older owner that wakes after the reset (a zombie) is fenced like after any
-- takeover. NULL except between a reset and the next claim, which clears it; a second reset
-- in a row keeps the first one's value, so the rightful owner still reclaims.
ALTER TABLE kafka_offsets ADD COLUMN IF NOT EXISTS reset_from_epoch bigint;
