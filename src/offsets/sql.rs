//! Every statement of the offset store, and the argument arrays they unnest.
//!
//! Kept apart from the code that runs them so that the whole protocol can be read in one place:
//! claim, reclaim, reset, read, fence, advance.

use super::TopicPartition;

/// Splits partitions into the parallel arrays that `UNNEST` takes, sorted so that concurrent
/// claimers lock rows in the same order and cannot deadlock.
pub(super) fn unnest_args(tps: &[TopicPartition]) -> (Vec<String>, Vec<i32>) {
    let mut sorted: Vec<&TopicPartition> = tps.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .map(|tp| (tp.topic.to_string(), tp.partition))
        .unzip()
}

/// Insert-or-bump in one statement: a partition seen for the first time gets epoch 1, any other
/// a new epoch that fences whoever held it.
pub(super) const CLAIM_SQL: &str = "
INSERT INTO kafka_offsets AS o (consumer_group, topic, partition, owner_epoch, owner_id, claimed_at)
SELECT $1, v.topic, v.partition, 1, $4, now()
  FROM UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
ON CONFLICT (consumer_group, topic, partition) DO UPDATE
   SET owner_epoch = o.owner_epoch + 1, owner_id = EXCLUDED.owner_id, claimed_at = now(),
       reset_from_epoch = NULL
RETURNING topic, partition, next_offset, owner_epoch, owner_id, reset_from_epoch";

/// Claims back partitions an operator reset, but only those whose reset replaced the epoch
/// this consumer holds: an older owner waking after the reset matches nothing. Rows are
/// locked in the claims' order.
pub(super) const RECLAIM_SQL: &str = "
UPDATE kafka_offsets AS o
   SET owner_epoch = o.owner_epoch + 1, owner_id = $5, claimed_at = now(),
       reset_from_epoch = NULL
  FROM (SELECT k.topic, k.partition
          FROM kafka_offsets k
          JOIN UNNEST($2::text[], $3::int4[], $4::int8[]) AS v(topic, partition, epoch)
            ON k.topic = v.topic AND k.partition = v.partition AND k.reset_from_epoch = v.epoch
         WHERE k.consumer_group = $1
         ORDER BY k.topic, k.partition
           FOR UPDATE OF k) AS l
 WHERE o.consumer_group = $1 AND o.topic = l.topic AND o.partition = l.partition
RETURNING o.topic, o.partition, o.next_offset, o.owner_epoch, o.owner_id, o.reset_from_epoch";

/// Rows for partitions never claimed, so that the reset's single UPDATE takes every row.
/// Inside the reset's transaction: nobody sees them before they hold the reset position.
pub(super) const RESET_ROWS_SQL: &str = "
INSERT INTO kafka_offsets (consumer_group, topic, partition)
SELECT $1, $2, p FROM UNNEST($3::int4[]) AS v(p)
ON CONFLICT (consumer_group, topic, partition) DO NOTHING";

/// An operator's reset in one statement: locks the rows in the claims' order, moves each
/// position and bumps its epoch (fencing the owner's next commit), notes the epoch it replaced
/// (a second reset keeps the first one's, see `reset_from_epoch`), records the move in
/// `kafka_offset_events`, and returns what was replaced, as read under the lock.
pub(super) const RESET_SQL: &str = "
WITH moved AS (
    UPDATE kafka_offsets AS o
       SET next_offset = l.next, owner_epoch = o.owner_epoch + 1, owner_id = $5,
           claimed_at = now(), reset_from_epoch = coalesce(l.reset_from_epoch, l.owner_epoch)
      FROM (SELECT k.partition, k.next_offset, k.owner_epoch, k.owner_id, k.reset_from_epoch,
                   v.next
              FROM kafka_offsets k
              JOIN UNNEST($3::int4[], $4::int8[]) AS v(partition, next)
                ON k.partition = v.partition
             WHERE k.consumer_group = $1 AND k.topic = $2
             ORDER BY k.partition
               FOR UPDATE OF k) AS l
     WHERE o.consumer_group = $1 AND o.topic = $2 AND o.partition = l.partition
 RETURNING o.partition, l.next_offset AS from_offset, l.next AS to_offset,
           l.owner_epoch AS from_epoch, l.owner_id AS from_owner
), events AS (
    INSERT INTO kafka_offset_events
           (consumer_group, topic, partition, kind, from_offset, to_offset, detail)
    SELECT $1, $2, partition, 'manual_reset', from_offset, to_offset,
           $6 || ', replacing epoch ' || from_epoch || ' of ' || coalesce(from_owner, 'no owner')
      FROM moved
)
SELECT partition, from_offset, to_offset, from_epoch, from_owner FROM moved ORDER BY partition";

/// Reads without claiming: the epoch is left as it is, so a rewind keeps ownership.
pub(super) const READ_SQL: &str = "
SELECT o.topic, o.partition, o.next_offset, o.owner_epoch, o.owner_id, o.reset_from_epoch
  FROM kafka_offsets o
  JOIN UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
    ON o.topic = v.topic AND o.partition = v.partition
 WHERE o.consumer_group = $1";

/// The sessions `a` holding a row lock on any of the partitions' rows (`$1` the group, `$2` and
/// `$3` the topics and partitions): a locked row's `xmax` is the locking transaction, and
/// `pg_locks` names the backend that holds it. The caller's own session is never one of them.
/// Shared by `FENCE_HOLDERS_SQL` and `HOLDERS_SQL`, which must find the same sessions.
macro_rules! lock_holders {
    () => {
        "
  FROM kafka_offsets o
  JOIN UNNEST($2::text[], $3::int4[]) AS v(topic, partition)
    ON o.topic = v.topic AND o.partition = v.partition
  JOIN pg_locks l
    ON l.locktype = 'transactionid' AND l.transactionid = o.xmax AND l.granted
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE o.consumer_group = $1
   AND a.pid <> pg_backend_pid()"
    };
}

/// Ends the sessions of other sink processes that hold a row lock on partitions being claimed.
/// Such a holder lost the partitions (it was paused past its session timeout, or its network
/// broke) but its transaction is still open; waiting for the server's idle timeout would stall
/// the new owner, and a session stopped in the middle of COPY is not idle at all.
pub(super) const FENCE_HOLDERS_SQL: &str = concat!(
    "
SELECT a.pid, pg_terminate_backend(a.pid)",
    lock_holders!(),
    "
   AND a.application_name = $4"
);

/// Sessions holding a lock on any of the partitions' rows, whatever their application: named
/// when a reset gives up waiting for them.
pub(super) const HOLDERS_SQL: &str = concat!(
    "
SELECT DISTINCT a.pid, a.application_name",
    lock_holders!()
);

/// The fenced compare-and-set that opens every batch transaction.
pub(super) const ADVANCE_SQL: &str = "
UPDATE kafka_offsets AS o
   SET next_offset = v.next, committed_at = now()
  FROM UNNEST($2::text[], $3::int4[], $4::int8[], $5::int8[], $6::int8[])
       AS v(topic, partition, epoch, expected, next)
 WHERE o.consumer_group = $1
   AND o.topic = v.topic AND o.partition = v.partition
   AND o.owner_epoch = v.epoch
   AND o.next_offset IS NOT DISTINCT FROM v.expected";

/// How many of a batch's partitions another claim (or an operator's reset) has taken: their
/// epoch is no longer the batch's. Run after a compare-and-set matched too few rows, to tell a
/// batch fenced by another owner from one queued behind a batch that failed.
pub(super) const EPOCH_MOVED_SQL: &str = "
SELECT count(*)
  FROM kafka_offsets AS o
  JOIN UNNEST($2::text[], $3::int4[], $4::int8[]) AS v(topic, partition, epoch)
    ON o.topic = v.topic AND o.partition = v.partition
 WHERE o.consumer_group = $1 AND o.owner_epoch <> v.epoch";

/// SQLSTATE of `lock_timeout` expiring.
pub(super) const LOCK_NOT_AVAILABLE: &str = "55P03";

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever order the caller's partitions come in, the arrays are sorted by topic, then
    /// partition (numerically), and stay parallel: two claimers of overlapping sets then lock
    /// rows in one order and cannot deadlock each other.
    #[test]
    fn unnest_args_sorts_by_topic_then_partition() {
        let tps = [
            TopicPartition::new("b", 0),
            TopicPartition::new("a", 10),
            TopicPartition::new("b", -1),
            TopicPartition::new("a", 2),
            TopicPartition::new("a", 9),
        ];
        let (topics, partitions) = unnest_args(&tps);
        assert_eq!(topics, ["a", "a", "a", "b", "b"]);
        assert_eq!(partitions, [2, 9, 10, -1, 0]);
        let mut reversed = tps.clone();
        reversed.reverse();
        assert_eq!(unnest_args(&reversed), (topics, partitions));
        assert_eq!(unnest_args(&[]), (Vec::<String>::new(), Vec::<i32>::new()));
    }

    /// The placeholders a statement uses, in order of number.
    fn placeholders(sql: &str) -> Vec<u32> {
        let mut found: Vec<u32> = sql
            .split('$')
            .skip(1)
            .filter_map(|s| {
                let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Both statements find the lock holders through the one join; the fence narrows them to
    /// sink sessions (`$4`, bound to `APPLICATION_NAME`) and ends them, the other only names
    /// them and binds three arguments.
    #[test]
    fn the_fence_and_the_holders_share_one_join() {
        let join = lock_holders!();
        assert!(FENCE_HOLDERS_SQL.contains(join) && HOLDERS_SQL.contains(join));
        assert!(FENCE_HOLDERS_SQL.contains("pg_terminate_backend(a.pid)"));
        assert!(FENCE_HOLDERS_SQL.ends_with("AND a.application_name = $4"));
        assert!(!HOLDERS_SQL.contains("pg_terminate_backend"));
        assert_eq!(placeholders(FENCE_HOLDERS_SQL), [1, 2, 3, 4]);
        assert_eq!(placeholders(HOLDERS_SQL), [1, 2, 3]);
        assert!(
            join.contains("a.pid <> pg_backend_pid()"),
            "never the caller itself"
        );
    }
}
