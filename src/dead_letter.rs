//! Dead letters: records the sink could not write, kept in `kafka_dead_letters` in the same
//! transaction as the batch and its offsets, so each is written exactly once, and optionally
//! produced to a topic as well (at least once).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::PgConnection;

use crate::headers::{self, Header};
use crate::mapping::MapError;
use crate::pgtext::escape_nul;
use crate::record::OwnedRecord;

/// Why a record became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The value is not what the format expects (not JSON, not an envelope, a tombstone…).
    Decode,
    /// A value does not fit its column, or a required one is missing.
    Mapping,
    /// PostgreSQL refused the row (a constraint, a value out of range…).
    Rejected,
    /// Larger than `max_record_bytes`.
    TooLarge,
    /// Its registry schema is missing (an unknown id) or unusable for the topic.
    Schema,
    /// Routing by record: it names no table, or one outside the topic's allow-list.
    Routing,
    /// A Debezium update held the unavailable-value placeholder (an unchanged TOASTed
    /// column) for a key the table has no row for: no stored value to keep.
    ToastUnavailable,
}

impl ErrorKind {
    /// The name stored in `error_kind` and the `kps.error.kind` header; README lists these, so
    /// they are part of the interface.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Decode => "decode",
            ErrorKind::Mapping => "mapping",
            ErrorKind::Rejected => "rejected",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Schema => "schema",
            ErrorKind::Routing => "routing",
            ErrorKind::ToastUnavailable => "toast_unavailable",
        }
    }

    /// `decode` when the record as a whole is unusable, `mapping` when one of its values is
    /// (README's table of kinds).
    pub fn of(e: &MapError) -> Self {
        match e {
            MapError::Tombstone
            | MapError::NotAnObject(_)
            | MapError::Unsupported(_)
            | MapError::DeleteNeedsUpsert
            | MapError::TooDeep(_)
            | MapError::Wire(_) => ErrorKind::Decode,
            MapError::TooLarge { .. } => ErrorKind::TooLarge,
            MapError::Schema(_) => ErrorKind::Schema,
            _ => ErrorKind::Mapping,
        }
    }
}

/// A record that could not be written, and why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub topic: Arc<str>,
    pub record: OwnedRecord,
    pub kind: ErrorKind,
    pub message: String,
    pub table: String,
    /// Also produce it to this topic.
    pub produce_to: Option<Arc<str>>,
}

/// One statement for all of a batch's dead letters: arrays unnested, not a row per round trip.
/// A record already dead-lettered is met again only when an operator moved the position back
/// (`offsets reset`): the offset fence rules out any other second read. Its row is then
/// refreshed in place, so the reread neither trips the table's uniqueness (stopping the sink)
/// nor leaves two letters for one offset.
const INSERT_SQL: &str = "
INSERT INTO kafka_dead_letters
       (consumer_group, topic, partition, \"offset\", record_timestamp, key, value, headers,
        error_kind, error_message, target_table)
SELECT $1, t, p, o, to_timestamp(ts / 1000.0), k, v, h::jsonb, ek, em, tt
  FROM UNNEST($2::text[], $3::int4[], $4::int8[], $5::int8[], $6::bytea[], $7::bytea[],
              $8::text[], $9::text[], $10::text[], $11::text[])
       AS d(t, p, o, ts, k, v, h, ek, em, tt)
    ON CONFLICT (consumer_group, topic, partition, \"offset\") DO UPDATE
   SET record_timestamp = EXCLUDED.record_timestamp, key = EXCLUDED.key,
       value = EXCLUDED.value, headers = EXCLUDED.headers, error_kind = EXCLUDED.error_kind,
       error_message = EXCLUDED.error_message, target_table = EXCLUDED.target_table,
       failed_at = now()";

/// Inserts dead letters in the caller's open transaction.
pub async fn insert(
    conn: &mut PgConnection,
    group: &str,
    letters: &[DeadLetter],
) -> Result<(), sqlx::Error> {
    if letters.is_empty() {
        return Ok(());
    }
    let col = |f: &dyn Fn(&DeadLetter) -> String| letters.iter().map(f).collect::<Vec<String>>();
    sqlx::query(INSERT_SQL)
        .bind(group)
        .bind(col(&|d| d.topic.to_string()))
        .bind(
            letters
                .iter()
                .map(|d| d.record.partition)
                .collect::<Vec<i32>>(),
        )
        .bind(
            letters
                .iter()
                .map(|d| d.record.offset)
                .collect::<Vec<i64>>(),
        )
        .bind(
            letters
                .iter()
                .map(|d| d.record.timestamp)
                .collect::<Vec<Option<i64>>>(),
        )
        .bind(
            letters
                .iter()
                .map(|d| d.record.key.as_ref().map(|k| k.to_vec()))
                .collect::<Vec<Option<Vec<u8>>>>(),
        )
        .bind(
            letters
                .iter()
                .map(|d| d.record.value.as_ref().map(|v| v.to_vec()))
                .collect::<Vec<Option<Vec<u8>>>>(),
        )
        .bind(col(&|d| d.record.headers_json()))
        .bind(col(&|d| d.kind.as_str().to_string()))
        .bind(col(&|d| escape_nul(&d.message).into_owned()))
        .bind(col(&|d| d.table.clone()))
        .execute(conn)
        .await?;
    Ok(())
}

/// Produces dead letters to their topics and waits for every acknowledgement. Called before
/// the batch commits: a failure fails the batch (retried), so each reaches the topic at least
/// once.
pub async fn produce(producer: &FutureProducer, letters: &[DeadLetter]) -> Result<(), String> {
    let mut pending = Vec::new();
    for d in letters {
        let Some(topic) = &d.produce_to else { continue };
        let message = escape_nul(&d.message);
        let partition = d.record.partition.to_string();
        let offset = d.record.offset.to_string();
        let source: [Header<'_>; 5] = [
            (b"kps.error.kind", Some(d.kind.as_str().as_bytes())),
            (b"kps.error.message", Some(message.as_bytes())),
            (b"kps.source.topic", Some(d.topic.as_bytes())),
            (b"kps.source.partition", Some(partition.as_bytes())),
            (b"kps.source.offset", Some(offset.as_bytes())),
        ];
        let headers = headers::to_owned(d.record.header_views().into_iter().chain(source))
            .map_err(|e| format!("the headers of a dead letter: {e}"))?;
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers);
        if let Some(k) = &d.record.key {
            record = record.key(k.as_ref());
        }
        if let Some(v) = &d.record.value {
            record = record.payload(v.as_ref());
        }
        pending.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| format!("queueing a dead letter: {e}"))?,
        );
    }
    for p in pending {
        match tokio::time::timeout(Duration::from_secs(30), p).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err((e, _)))) => return Err(format!("producing a dead letter: {e}")),
            Ok(Err(_)) => return Err("the producer went away".into()),
            Err(_) => return Err("producing a dead letter timed out".into()),
        }
    }
    Ok(())
}
