//! `kafka-pg-sink dead-letters list|replay`: inspect dead letters, and run them through the
//! mapping again once the data or the table is fixed.
//!
//! A replay is one transaction: every record that now maps and is accepted becomes its row and
//! leaves `kafka_dead_letters` together; a record that still fails stays, with the new reason.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use sqlx::{Connection, PgPool, Row};

use crate::batch::{table_write, DeadLetterTarget};
use crate::config::{Settings, WriteMode};
use crate::dead_letter::ErrorKind;
use crate::mapping::{EncodeError, MapError, TopicMapper};
use crate::pgtext::escape_nul;
use crate::record::{OwnedRecord, RecordView};
use crate::record_routing::{self, Picked, TablePicker};
use crate::registry::{RegistryClient, RegistryError};
use crate::routing::Router;
use crate::{startup, writer};

/// Which dead letters a command applies to.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub topic: Option<String>,
    pub ids: Vec<i64>,
    pub limit: i64,
}

/// One stored dead letter.
struct Stored {
    id: i64,
    topic: String,
    record: OwnedRecord,
    kind: String,
    message: String,
    failed_at: chrono::DateTime<chrono::Utc>,
}

/// Oldest first, so a replay retries records in the order they failed; `record_timestamp` back
/// to epoch milliseconds, as Kafka gives it.
const SELECT_SQL: &str = "
SELECT id, topic, partition, \"offset\", (extract(epoch FROM record_timestamp) * 1000)::int8,
       key, value, headers, error_kind, error_message, failed_at
  FROM kafka_dead_letters
 WHERE consumer_group = $1
   AND ($2::text IS NULL OR topic = $2)
   AND (cardinality($3::int8[]) = 0 OR id = ANY($3))
 ORDER BY id
 LIMIT $4";

/// Shared by `list` and `replay`, so a replay acts on exactly what `list` shows.
async fn load(pool: &PgPool, group: &str, sel: &Selection) -> anyhow::Result<Vec<Stored>> {
    let rows = sqlx::query(SELECT_SQL)
        .bind(group)
        .bind(&sel.topic)
        .bind(&sel.ids)
        .bind(sel.limit)
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|r| {
            let id: i64 = r.try_get(0)?;
            let headers: Option<serde_json::Value> = r.try_get(7)?;
            let headers = match headers {
                Some(json) => OwnedRecord::headers_from_json(&json)
                    .map_err(|e| anyhow::anyhow!("dead letter {id}: unreadable headers: {e}"))?,
                None => Vec::new(),
            };
            Ok(Stored {
                id,
                topic: r.try_get(1)?,
                record: OwnedRecord {
                    partition: r.try_get(2)?,
                    offset: r.try_get(3)?,
                    timestamp: r.try_get(4)?,
                    key: r.try_get::<Option<Vec<u8>>, _>(5)?.map(Bytes::from),
                    value: r.try_get::<Option<Vec<u8>>, _>(6)?.map(Bytes::from),
                    headers,
                },
                kind: r.try_get(8)?,
                message: r.try_get(9)?,
                failed_at: r.try_get(10)?,
            })
        })
        .collect()
}

/// Prints the selected dead letters, as a table or as JSON lines.
pub async fn list(settings: &Settings, sel: &Selection, json: bool) -> anyhow::Result<()> {
    let pool = startup::connect_pool(settings).await?;
    let letters = load(&pool, &settings.kafka.group_id, sel).await?;
    let mut out = String::new();
    if !json {
        let _ = writeln!(
            out,
            "{:>8}  {:<30} {:>5} {:>10}  {:<10} {:<20}  error",
            "id", "topic", "part", "offset", "kind", "failed at"
        );
    }
    for d in &letters {
        if json {
            let value = serde_json::json!({
                "id": d.id,
                "topic": d.topic,
                "partition": d.record.partition,
                "offset": d.record.offset,
                "kind": d.kind,
                "error": d.message,
                "failed_at": d.failed_at.to_rfc3339(),
                "key": d.record.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
                "value": d.record.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
            });
            let _ = writeln!(out, "{value}");
        } else {
            let _ = writeln!(
                out,
                "{:>8}  {:<30} {:>5} {:>10}  {:<10} {:<20}  {}",
                d.id,
                d.topic,
                d.record.partition,
                d.record.offset,
                d.kind,
                d.failed_at.format("%Y-%m-%d %H:%M:%S"),
                d.message
            );
        }
    }
    print!("{out}");
    if !json {
        println!("{} dead letter(s)", letters.len());
    }
    Ok(())
}

/// Keeps a letter that fails again, with its new kind and reason, and says so.
async fn still_fails(
    tx: &mut sqlx::PgConnection,
    d: &Stored,
    kind: &str,
    message: String,
) -> anyhow::Result<()> {
    sqlx::query("UPDATE kafka_dead_letters SET error_kind = $2, error_message = $3, failed_at = now() WHERE id = $1")
        .bind(d.id)
        .bind(kind)
        .bind(escape_nul(&message))
        .execute(&mut *tx)
        .await?;
    println!(
        "dead letter {} ({}/{}@{}) still fails: {message}",
        d.id, d.topic, d.record.partition, d.record.offset
    );
    Ok(())
}

/// What a replay did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub written: usize,
    pub still_failing: usize,
}

/// Maps the selected dead letters again and writes those that now succeed, in one transaction.
pub async fn replay(
    settings: &Settings,
    sel: &Selection,
    dry_run: bool,
) -> anyhow::Result<Replayed> {
    let pool = startup::connect_pool(settings).await?;
    let letters = load(&pool, &settings.kafka.group_id, sel).await?;
    let router = Router::new(&settings.topics)?;
    let mut mappers: HashMap<(String, String), TopicMapper> = HashMap::new();
    let registry = match &settings.schema_registry {
        Some(r) => Some(RegistryClient::new(r)?),
        None => None,
    };
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let mut staged = HashSet::new();
    let mut done = Replayed::default();
    for d in letters {
        let settings = router.settings_for(&d.topic).ok_or_else(|| {
            anyhow::anyhow!(
                "dead letter {}: topic {:?} is no longer configured",
                d.id,
                d.topic
            )
        })?;
        let topic: Arc<str> = d.topic.as_str().into();
        let headers = d.record.header_views();
        let view = RecordView {
            topic: &d.topic,
            partition: d.record.partition,
            offset: d.record.offset,
            timestamp: d.record.timestamp,
            key: d.record.key.as_deref(),
            value: d.record.value.as_deref(),
            headers: &headers,
        };
        // Routed by record: the record names its table again, under today's allow-list.
        let picker = TablePicker::new(settings).map_err(anyhow::Error::msg)?;
        let table = match &picker {
            None => None,
            Some(p) => match p.pick(&view) {
                Ok(Picked::Table(t)) => Some(t),
                picked => {
                    let (kind, why) = match picked {
                        Err(e) => (e.kind, e.why),
                        _ => (ErrorKind::Routing, "the record names no table".into()),
                    };
                    still_fails(&mut tx, &d, kind.as_str(), why).await?;
                    done.still_failing += 1;
                    continue;
                }
            },
        };
        let slot = (d.topic.clone(), table.clone().unwrap_or_default());
        if !mappers.contains_key(&slot) {
            if settings.write_mode() == WriteMode::Upsert {
                tracing::warn!(topic = %d.topic, "replaying into an upsert table writes the old record over any newer row with its key");
            }
            let m = match &table {
                None => TopicMapper::load(&pool, settings, &d.topic).await?,
                Some(t) => match record_routing::load_mapper(&pool, settings, &d.topic, t).await {
                    Ok(m) => m,
                    // PostgreSQL not answering stops the replay, every letter as it was.
                    Err(e) if record_routing::is_unavailable(&e) => return Err(e),
                    // The table this letter names cannot be used (missing, a mapping that does
                    // not fit): the letter fails alone; others, of other tables, go on.
                    Err(e) => {
                        let why = format!("the table it names cannot be used: {e:#}");
                        still_fails(&mut tx, &d, ErrorKind::Routing.as_str(), why).await?;
                        done.still_failing += 1;
                        continue;
                    }
                },
            };
            // A replay never creates a table: only the sink does, with a batch's rows.
            anyhow::ensure!(
                m.table().oid != crate::ddl::MISSING_OID,
                "topic {:?}: table {} does not exist yet (auto_create makes it with the first batch the sink writes)",
                d.topic,
                m.table()
            );
            mappers.insert(slot.clone(), m);
        }
        let mapper = mappers.get_mut(&slot).expect("inserted above when missing");
        let mut rows = mapper.new_rows();
        let mut encoded = mapper.encode(&view, &mut rows);
        // A value and its key may each bring a schema the mapping has not learnt.
        for _ in 0..2 {
            let Err(EncodeError::NeedSchema(id)) = encoded else {
                break;
            };
            let learnt = match &registry {
                Some(client) => match client.schema_by_id(id).await {
                    Ok(schema) => mapper.learn(id, &schema),
                    Err(RegistryError::NotFound(what)) => Err(MapError::Schema(format!(
                        "the record's schema id {id} is not in the registry ({what})"
                    ))),
                    // Replay is a one-off command: an unreachable registry stops it, and every
                    // letter stays as it was.
                    Err(e @ RegistryError::Unavailable(_)) => return Err(e.into()),
                },
                None => Err(MapError::Schema(format!(
                    "schema {id} is needed and no [schema_registry] is configured"
                ))),
            };
            encoded = match learnt {
                Ok(()) => {
                    rows = mapper.new_rows();
                    mapper.encode(&view, &mut rows)
                }
                Err(e) => Err(EncodeError::Invalid(e)),
            };
        }
        let failure = match encoded {
            // The sink's own kinds, so a replay never relabels a `decode` letter `mapping`.
            Err(EncodeError::Invalid(e)) => Some((ErrorKind::of(&e).as_str(), e.to_string())),
            Err(EncodeError::NeedsFreshBatch) => unreachable!("a fresh batch takes any record"),
            // Replayed now, a truncate would empty the table of every row written after it.
            Ok(()) if rows.truncate.is_some() => Some((
                ErrorKind::Decode.as_str(),
                "a Debezium truncate is never replayed: it would delete the rows written since"
                    .to_string(),
            )),
            Err(EncodeError::NeedSchema(id)) => Some((
                ErrorKind::Schema.as_str(),
                format!("schema {id} is still unknown after it was fetched"),
            )),
            Ok(()) => {
                let target = DeadLetterTarget {
                    topic,
                    produce_to: None,
                };
                // An ignored truncate writes nothing: replayed, it is done.
                match table_write(rows, target) {
                    None => None,
                    Some(write) => apply_replayed(&mut tx, write, &mut staged).await?,
                }
            }
        };
        match failure {
            None => {
                sqlx::query("DELETE FROM kafka_dead_letters WHERE id = $1")
                    .bind(d.id)
                    .execute(&mut *tx)
                    .await?;
                done.written += 1;
            }
            Some((kind, message)) => {
                still_fails(&mut tx, &d, kind, message).await?;
                done.still_failing += 1;
            }
        }
    }
    if dry_run {
        tx.rollback().await?;
        println!(
            "dry run: {} would be written, {} still fail; nothing changed",
            done.written, done.still_failing
        );
    } else {
        tx.commit().await?;
        println!(
            "replayed {} dead letter(s); {} still fail",
            done.written, done.still_failing
        );
    }
    Ok(done)
}

/// Applies one replayed letter's write under a savepoint: a row PostgreSQL refuses is a
/// `rejected` failure and leaves nothing behind.
async fn apply_replayed(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    write: crate::batch::TableWrite,
    staged: &mut std::collections::HashSet<String>,
) -> Result<Option<(&'static str, String)>, sqlx::Error> {
    sqlx::query("SAVEPOINT kps_replay")
        .execute(&mut **tx)
        .await?;
    let mut unused = Vec::new();
    let write = crate::batch::TableWrite {
        dead_letters: None,
        ..write
    };
    Ok(
        match writer::apply_table(
            tx,
            &write,
            staged,
            &mut writer::CopyFirst::default(),
            &mut unused,
        )
        .await
        {
            Ok(_) => None,
            Err(e) => {
                sqlx::query("ROLLBACK TO SAVEPOINT kps_replay")
                    .execute(&mut **tx)
                    .await?;
                let kind = if writer::is_toast_unavailable(&e) {
                    crate::dead_letter::ErrorKind::ToastUnavailable
                } else {
                    crate::dead_letter::ErrorKind::Rejected
                };
                Some((kind.as_str(), e.to_string()))
            }
        },
    )
}
