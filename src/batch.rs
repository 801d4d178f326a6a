//! Batches: records encoded for COPY, accumulated per writer until a limit closes them.
//!
//! A sealed batch is everything one transaction needs: the fenced offset advances, the rows
//! already in the bytes COPY reads, and the statements that apply staged upserts and deletes.

use std::sync::Arc;
use std::time::Instant;

use crate::dead_letter::DeadLetter;
use crate::mapping::{Rows, TableRows, TopicMapper};
use crate::merge::{Merge, MASK, ORDINAL};
use crate::offsets::OffsetAdvance;
use crate::pgcopy::CopyData;
use crate::record::OwnedRecord;
use crate::schema::{quote_ident, Table};
use crate::staging::Staging;
use crate::unique_order::UniqueOrder;

/// What one table receives in a transaction.
pub struct TableWrite {
    /// `schema.table`, for dead letters and messages.
    pub table: String,
    /// The topic whose records the rows are (one per write: a batch has a write per route).
    pub topic: Arc<str>,
    /// Statements that prepare the session (temporary staging tables), run once per
    /// connection; the name identifies them.
    pub setup: Option<(String, Vec<String>)>,
    /// Statements run once before the copies (not again for each part a failed batch is
    /// split into), each with its record's partition and offset: a Debezium truncate, which
    /// is left out with the rows after it when `left_out` says so.
    pub before: Vec<(String, (i32, i64))>,
    /// COPY streams, each with its rows' ordinals (and records, where rejected rows become
    /// dead letters).
    pub copies: Vec<StagedCopy>,
    /// Statements run after the copies (upsert merges and deletes).
    pub statements: Vec<String>,
    /// Upserts that may all be new keys: the one staged copy, as a COPY straight into the
    /// table, tried first (`writer::copy_first`).
    pub plain: Option<PlainCopy>,
    /// Set when rows PostgreSQL rejects become dead letters instead of failing the batch.
    pub dead_letters: Option<DeadLetterTarget>,
    /// A partition whose rows from this offset on are left out: PostgreSQL refused the record
    /// there and the topic stops on errors, so its position rests on that record.
    pub left_out: Option<(i32, i64)>,
    /// Schema changes (`auto_create`, `auto_evolve`) the rows need, run first in the
    /// transaction so they commit or roll back with the rows.
    pub ddl: Vec<crate::ddl::Step>,
    /// Per copy, where its rows hold their key (in key order), for the rounds a write whose
    /// keys repeat is applied in (the writer's rounds); empty for writes without staging. The
    /// rounds are counted by the writer, off the consumer thread.
    pub keys_at: Vec<Option<Vec<usize>>>,
    /// Where it can stand for the rounds: the statement that shows PostgreSQL the records of
    /// repeated keys as the rows they propose alone (`Merge::probe`).
    pub probe: Option<String>,
    /// `version_from`: the merge leaves stale records out and notes them in the session's
    /// tally (`crate::stale`), which the writer reads after the write.
    pub versioned: bool,
    /// Where the table has unique indexes besides the key: how the writer orders the rows by
    /// them (`writer::unique_rounds`), so the batch ends as one-by-one apply would.
    pub unique: Option<UniqueOrder>,
    /// The ordinals of rows that kept columns Debezium sent as unavailable, for the count of
    /// those committed.
    pub placeholders: Vec<i64>,
}

/// An upsert write's staged rows as a COPY into the table itself: the columns its records
/// carried, without the ordinal and mask.
pub struct PlainCopy {
    pub statement: String,
    /// Per staged field, whether the table's COPY takes it.
    pub fields: Vec<bool>,
}

/// One COPY stream of a table write.
pub struct StagedCopy {
    pub statement: String,
    pub data: CopyData,
    /// Increasing; one per row.
    pub ordinals: Vec<i64>,
    /// One per row, or empty when not kept.
    pub origins: Vec<OwnedRecord>,
    /// One per row: its record's partition and offset.
    pub positions: Vec<(i32, i64)>,
}

impl StagedCopy {
    /// Whether row `i` is written, given the write's `left_out`.
    pub fn keeps(&self, i: usize, left_out: Option<(i32, i64)>) -> bool {
        kept(self.positions[i], left_out)
    }
}

/// Whether the record at `position` is written, given a write's `left_out`.
pub fn kept((p, offset): (i32, i64), left_out: Option<(i32, i64)>) -> bool {
    match left_out {
        Some((partition, from)) => p != partition || offset < from,
        None => true,
    }
}

/// Where a rejected row's dead letter goes.
#[derive(Debug, Clone)]
pub struct DeadLetterTarget {
    pub topic: Arc<str>,
    pub produce_to: Option<Arc<str>>,
}

impl TableWrite {
    /// Ordinals of the rows in `lo..hi`, across copies, in order.
    pub fn ordinals_in(&self, lo: i64, hi: i64) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .copies
            .iter()
            .flat_map(|c| c.ordinals.iter().copied().filter(|&o| o >= lo && o < hi))
            .collect();
        out.sort_unstable();
        out
    }

    /// Rows this write applies, deletes included (rows left out are not).
    pub fn rows(&self) -> usize {
        self.copies
            .iter()
            .map(|c| match self.left_out {
                None => c.ordinals.len(),
                Some(_) => (0..c.ordinals.len())
                    .filter(|&i| c.keeps(i, self.left_out))
                    .count(),
            })
            .sum()
    }

    /// The partition and offset of the row with `ordinal`.
    pub fn position_of(&self, ordinal: i64) -> Option<(i32, i64)> {
        self.copies.iter().find_map(|c| {
            let i = c.ordinals.binary_search(&ordinal).ok()?;
            c.positions.get(i).copied()
        })
    }

    /// The full ordinal range.
    pub fn span(&self) -> (i64, i64) {
        let lo = self
            .copies
            .iter()
            .filter_map(|c| c.ordinals.first())
            .min()
            .copied()
            .unwrap_or(0);
        let hi = self
            .copies
            .iter()
            .filter_map(|c| c.ordinals.last())
            .max()
            .copied()
            .unwrap_or(-1);
        (lo, hi + 1)
    }

    /// The dead letter for the row with `ordinal`, rejected with `message`.
    pub fn dead_letter(&self, ordinal: i64, message: String) -> Option<DeadLetter> {
        let target = self.dead_letters.as_ref()?;
        let record = self.copies.iter().find_map(|c| {
            let i = c.ordinals.binary_search(&ordinal).ok()?;
            c.origins.get(i).cloned()
        })?;
        Some(DeadLetter {
            topic: target.topic.clone(),
            record,
            kind: crate::dead_letter::ErrorKind::Rejected,
            message,
            table: self.table.clone(),
            produce_to: target.produce_to.clone(),
        })
    }
}

/// What one transaction writes; built by the consumer thread, consumed by a writer.
pub struct Batch {
    pub id: u64,
    pub offsets: Vec<OffsetAdvance>,
    pub writes: Vec<TableWrite>,
    /// Records that could not be mapped, kept as dead letters in this transaction.
    pub dead_letters: Vec<DeadLetter>,
    /// Records consumed.
    pub records: usize,
    pub opened_at: Instant,
}

/// The batch a writer lane is filling.
#[derive(Default)]
pub struct OpenBatch {
    /// Indexed by route; created on a route's first record.
    tables: Vec<Option<(DeadLetterTarget, TableRows)>>,
    /// Tables in `tables`.
    table_count: usize,
    /// The most rows any one table has (`note_rows`).
    largest: usize,
    /// Records that could not be mapped.
    pub dead_letters: Vec<DeadLetter>,
    pub records: usize,
    pub bytes: usize,
    pub opened_at: Option<Instant>,
}

impl OpenBatch {
    /// The rows for `route` (topic `topic`), created on first use.
    pub fn table_rows(
        &mut self,
        route: usize,
        topic: &Arc<str>,
        mapper: &TopicMapper,
    ) -> &mut TableRows {
        if self.tables.len() <= route {
            self.tables.resize_with(route + 1, || None);
        }
        let target = DeadLetterTarget {
            topic: topic.clone(),
            produce_to: mapper.dead_letter_topic().cloned(),
        };
        let slot = &mut self.tables[route];
        if slot.is_none() {
            self.table_count += 1;
        }
        &mut slot.get_or_insert_with(|| (target, mapper.new_rows())).1
    }

    /// A table of the batch now has `rows` rows (after a record was encoded into it).
    pub fn note_rows(&mut self, rows: usize) {
        self.largest = self.largest.max(rows);
    }

    /// Tables with rows (or a statement) in the batch: each is a COPY of its own.
    pub fn tables(&self) -> usize {
        self.table_count
    }

    /// The most rows one table of the batch has.
    pub fn largest_table(&self) -> usize {
        self.largest
    }

    /// Counts a record that has been encoded into this batch.
    pub fn record_added(&mut self, payload_bytes: usize) {
        self.records += 1;
        self.bytes += payload_bytes;
        self.opened_at.get_or_insert_with(Instant::now);
    }

    /// Drops everything (after a failure nothing buffered counts).
    pub fn clear(&mut self) {
        *self = OpenBatch::default();
    }

    /// Turns the open batch into a sealed one and starts over.
    pub fn seal(&mut self, id: u64, offsets: Vec<OffsetAdvance>) -> Batch {
        let open = std::mem::take(self);
        let mut writes = Vec::new();
        for (target, table_rows) in open.tables.into_iter().flatten() {
            if let Some(write) = table_write(table_rows, target) {
                writes.push(write);
            }
        }
        Batch {
            id,
            offsets,
            writes,
            dead_letters: open.dead_letters,
            records: open.records,
            opened_at: open.opened_at.unwrap_or_else(Instant::now),
        }
    }
}

/// The statements for one table's rows: plain COPYs in insert mode; COPYs into staging tables
/// and the merge and delete in upsert mode.
pub fn table_write(rows: TableRows, target: DeadLetterTarget) -> Option<TableWrite> {
    let table = rows.table.clone();
    let topic = target.topic.clone();
    let dead_letters = rows.keep_origins.then_some(target);
    let names = |columns: &[u16]| -> Vec<String> {
        columns
            .iter()
            .map(|&i| quote_ident(&table.columns[i as usize].name))
            .collect()
    };
    let staged = |statement: String, r: Rows| StagedCopy {
        statement,
        data: r.buffer.finish_rows(),
        ordinals: r.ordinals,
        origins: r.origins,
        positions: r.positions,
    };
    // A truncate is the first of its table in the batch: it runs before every copy.
    let before: Vec<(String, (i32, i64))> = rows
        .truncate
        .map(|at| (format!("TRUNCATE {}", table.qualified()), at))
        .into_iter()
        .collect();
    let Some(keys) = rows.upsert_keys.clone() else {
        let copies: Vec<StagedCopy> = rows
            .shapes
            .into_iter()
            .filter(|r| !r.buffer.is_empty())
            .map(|r| staged(copy_statement(&table.qualified(), &names(&r.columns)), r))
            .collect();
        return unstaged(&table, topic, before, copies, dead_letters);
    };
    let staging = Staging::of(&table, rows.soft_delete.is_some(), rows.version.is_some());
    let key_names = names(&keys);
    // Soft deletes stage the mark with the key, versioned deletes their version after it.
    let mut delete_names = key_names.clone();
    if let Some(soft) = rows.soft_delete {
        delete_names.extend(names(&[soft.column]));
    }
    if let Some(version) = rows.version {
        delete_names.extend(names(&[version]));
    }
    let mut copies = Vec::new();
    // Where each copy's rows hold their key, in key order, for the rounds.
    let mut keys_at: Vec<Option<Vec<usize>>> = Vec::new();
    let has_deletes = rows.deletes.as_ref().is_some_and(|d| !d.buffer.is_empty());
    for r in rows.shapes {
        if !r.buffer.is_empty() {
            let mut cols = names(&r.columns);
            cols.push(quote_ident(ORDINAL));
            cols.push(quote_ident(MASK));
            keys_at.push(
                keys.iter()
                    .map(|k| r.columns.iter().position(|c| c == k))
                    .collect(),
            );
            copies.push(staged(copy_statement(&staging.upserts, &cols), r));
        }
    }
    if let Some(deletes) = rows.deletes.filter(|d| !d.buffer.is_empty()) {
        let mut cols = delete_names.clone();
        cols.push(quote_ident(ORDINAL));
        keys_at.push(Some((0..keys.len()).collect()));
        copies.push(staged(copy_statement(&staging.deletes, &cols), deletes));
    }
    if copies.is_empty() {
        // Nothing staged: only a truncate, if anything.
        return unstaged(&table, topic, before, copies, dead_letters);
    }
    let placeholded = !rows.placeholders.is_empty();
    // Rows keeping unavailable columns need a stored row, which a COPY into the table would
    // not check, and the check holds one row per key (rounds, not the probe's one merge).
    let plain = (!placeholded)
        .then(|| plain_copy(&table, &rows.presence, &copies))
        .flatten();
    let merge = Merge {
        table: &table,
        keys: &keys,
        upserts: &staging.upserts,
        deletes: &staging.deletes,
        presence: &rows.presence,
        has_deletes,
        soft_delete: rows.soft_delete,
        first_wins: rows.first_wins,
        version: rows.version,
    };
    let probe = merge.probe().filter(|_| !placeholded);
    let unique = if rows.first_wins {
        None
    } else {
        UniqueOrder::of(
            &table,
            &keys,
            &staging.upserts,
            has_deletes.then_some(staging.deletes.as_str()),
            rows.soft_delete.is_some(),
        )
    };
    // Stale records leave staging first: neither the placeholder's updates nor the merge
    // may apply them.
    let mut statements = merge.prune_stale();
    if placeholded {
        statements.push(merge.toast_check(&rows.placeholders.columns));
        statements.extend(merge.toast_updates());
    }
    statements.extend(merge.statements());
    // Another topic may stage rows for the same table in this transaction.
    statements.push(format!("TRUNCATE {}, {}", staging.upserts, staging.deletes));
    let mut setup = staging.create(&table, &delete_names);
    if rows.version.is_some() {
        setup.push(crate::stale::create_tally());
    }
    Some(TableWrite {
        table: table.to_string(),
        topic,
        // Named by both staging tables: topics of one table may stage deletes differently.
        setup: Some((format!("{} {}", staging.upserts, staging.deletes), setup)),
        before,
        copies,
        statements,
        plain,
        dead_letters,
        left_out: None,
        ddl: Vec::new(),
        keys_at,
        probe,
        versioned: rows.version.is_some(),
        unique,
        placeholders: rows.placeholders.ordinals,
    })
}

/// The plain COPY of an upsert write, when one can stand for its merge: every record carried
/// the same columns and none is a delete (a delete must come between the rows it separates,
/// and staged deletes are a second copy). Those columns' COPY leaves the others to their
/// defaults, as the merge's insert does.
fn plain_copy(
    table: &Table,
    presence: &crate::mapping::Presence,
    copies: &[StagedCopy],
) -> Option<PlainCopy> {
    let carried = presence.uniform()?;
    let [_] = copies else { return None };
    let all = table.columns.len() as u16;
    let mut fields: Vec<bool> = (0..all).map(|c| carried.contains(&c)).collect();
    // The ordinal and the mask.
    fields.extend([false, false]);
    // In the staged rows' order, the table's.
    let names: Vec<String> = (0..all)
        .filter(|&c| fields[c as usize])
        .map(|c| quote_ident(&table.columns[c as usize].name))
        .collect();
    Some(PlainCopy {
        statement: copy_statement(&table.qualified(), &names),
        fields,
    })
}

/// A write without staging: insert-mode copies straight into the table, or only a truncate;
/// `None` when there is nothing to run.
fn unstaged(
    table: &Table,
    topic: Arc<str>,
    before: Vec<(String, (i32, i64))>,
    copies: Vec<StagedCopy>,
    dead_letters: Option<DeadLetterTarget>,
) -> Option<TableWrite> {
    (!copies.is_empty() || !before.is_empty()).then(|| TableWrite {
        table: table.to_string(),
        topic,
        setup: None,
        before,
        copies,
        statements: Vec::new(),
        plain: None,
        dead_letters,
        left_out: None,
        ddl: Vec::new(),
        keys_at: Vec::new(),
        probe: None,
        versioned: false,
        unique: None,
        placeholders: Vec::new(),
    })
}

/// Binary format: the rows are already encoded as COPY reads them.
fn copy_statement(target: &str, columns: &[String]) -> String {
    format!(
        "COPY {target} ({}) FROM STDIN (FORMAT binary)",
        columns.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use figment::providers::{Format, Toml};
    use figment::Figment;

    use super::*;
    use crate::config::TopicSettings;
    use crate::mapping::EncodeError;
    use crate::offsets::TopicPartition;
    use crate::record::RecordView;
    use crate::schema::{Column, ColumnType, RowRules};

    /// `id bigint NOT NULL` (the primary key) and `note text DEFAULT …`, described by hand.
    fn table(name: &str, oid: u32) -> Arc<Table> {
        let column = |name: &str, ty, not_null, has_default| Column {
            name: name.into(),
            ty,
            sql_type: format!("{ty:?}").to_lowercase(),
            not_null,
            has_default,
            default_sql: has_default.then(|| "'default'".into()),
        };
        Arc::new(Table {
            oid,
            schema: "public".into(),
            name: name.into(),
            columns: vec![
                column("id", ColumnType::Int8, true, false),
                column("note", ColumnType::Text, false, true),
            ],
            skipped: vec![],
            rules: crate::schema::RowRules::default(),
            primary_key: vec!["id".into()],
            unique_keys: vec![vec!["id".into()]],
        })
    }

    /// The mapper of topic `topic` onto table `name`, with extra `[[topics]]` settings.
    fn mapper(topic: &str, name: &str, oid: u32, extra: &str) -> TopicMapper {
        let settings: TopicSettings = Figment::from(Toml::string(&format!(
            "name = \"{topic}\"\ntable = \"{name}\"\n{extra}"
        )))
        .extract()
        .unwrap();
        TopicMapper::new(&settings, table(name, oid)).unwrap()
    }

    /// Encodes one record of `topic` into the open batch's rows for `route`, and counts it.
    fn add(
        open: &mut OpenBatch,
        route: usize,
        m: &TopicMapper,
        topic: &Arc<str>,
        offset: i64,
        value: &str,
    ) -> Result<(), EncodeError> {
        let record = RecordView {
            topic,
            partition: 0,
            offset,
            timestamp: None,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        };
        m.encode(&record, open.table_rows(route, topic, m))?;
        open.record_added(value.len());
        Ok(())
    }

    /// An advance of `topic/0` to `next`.
    fn advance(topic: &str, next: i64) -> OffsetAdvance {
        OffsetAdvance {
            tp: TopicPartition::new(topic, 0),
            epoch: 3,
            expected: None,
            next,
        }
    }

    /// Each record counts once with its payload bytes; the batch's age starts at its first
    /// record and later records do not move it.
    #[test]
    fn record_added_counts_records_bytes_and_the_first_record_time() {
        let mut open = OpenBatch::default();
        assert_eq!((open.records, open.bytes, open.opened_at), (0, 0, None));
        open.record_added(10);
        let first = open.opened_at.expect("the first record opens the batch");
        std::thread::sleep(Duration::from_millis(2));
        open.record_added(0);
        open.record_added(5);
        assert_eq!((open.records, open.bytes), (3, 15));
        assert_eq!(open.opened_at, Some(first));
    }

    /// The sealed batch is what the open one held, with the id and advances given; the open
    /// batch is then empty, so the next seal carries nothing of this one.
    #[test]
    fn seal_carries_everything_and_leaves_the_open_batch_empty() {
        let orders: Arc<str> = "orders".into();
        let m = mapper("orders", "orders", 10, "");
        let mut open = OpenBatch::default();
        add(&mut open, 0, &m, &orders, 5, r#"{"id":1,"note":"a"}"#).unwrap();
        add(&mut open, 0, &m, &orders, 6, r#"{"id":2,"note":"b"}"#).unwrap();
        open.dead_letters.push(DeadLetter {
            topic: orders.clone(),
            record: crate::record::OwnedRecord {
                partition: 0,
                offset: 7,
                timestamp: None,
                key: None,
                value: None,
                headers: Vec::new(),
            },
            kind: crate::dead_letter::ErrorKind::Decode,
            message: "tombstone".into(),
            table: "public.orders".into(),
            produce_to: None,
        });
        open.record_added(0);
        let opened_at = open.opened_at.unwrap();
        let bytes = open.bytes;

        let batch = open.seal(42, vec![advance("orders", 8)]);
        assert_eq!(batch.id, 42);
        assert_eq!(batch.offsets, [advance("orders", 8)]);
        assert_eq!(batch.opened_at, opened_at);
        assert_eq!(batch.records, 3);
        assert_eq!(batch.dead_letters.len(), 1);
        assert_eq!(batch.dead_letters[0].record.offset, 7);
        assert_eq!(batch.writes.len(), 1);
        let write = &batch.writes[0];
        assert_eq!(
            (write.table.as_str(), &*write.topic),
            ("public.orders", "orders")
        );
        assert_eq!(write.rows(), 2);
        assert_eq!(write.copies[0].positions, [(0, 5), (0, 6)]);
        assert!(bytes > 0);

        assert_eq!((open.records, open.bytes, open.opened_at), (0, 0, None));
        assert!(open.dead_letters.is_empty());
        let next = open.seal(43, Vec::new());
        assert!(next.writes.is_empty() && next.records == 0 && next.dead_letters.is_empty());
    }

    /// After a failure nothing buffered counts: cleared, the batch seals to nothing.
    #[test]
    fn clear_drops_rows_counts_and_dead_letters() {
        let orders: Arc<str> = "orders".into();
        let m = mapper("orders", "orders", 10, "");
        let mut open = OpenBatch::default();
        add(&mut open, 0, &m, &orders, 1, r#"{"id":1}"#).unwrap();
        open.clear();
        assert_eq!((open.records, open.bytes, open.opened_at), (0, 0, None));
        let batch = open.seal(1, Vec::new());
        assert!(batch.writes.is_empty(), "no rows survive a clear");
        assert_eq!(batch.records, 0);
    }

    /// One entry per route: a route's rows are created on its first record and reused after,
    /// routes come out in route order whatever order they were first used in, and a route
    /// never used gives no write.
    #[test]
    fn table_rows_keeps_one_entry_per_route() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let ma = mapper("a", "ta", 1, "");
        let mb = mapper(
            "b",
            "tb",
            2,
            "on_error = \"dead_letter\"\ndead_letter_topic = \"b.dlq\"",
        );
        let mut open = OpenBatch::default();
        add(&mut open, 3, &mb, &b, 0, r#"{"id":1}"#).unwrap();
        add(&mut open, 1, &ma, &a, 0, r#"{"id":1}"#).unwrap();
        add(&mut open, 3, &mb, &b, 1, r#"{"id":2}"#).unwrap();
        add(&mut open, 1, &ma, &a, 1, r#"{"id":2}"#).unwrap();
        add(&mut open, 3, &mb, &b, 2, r#"{"id":3}"#).unwrap();
        assert_eq!(open.table_rows(3, &b, &mb).rows(), 3);
        assert_eq!(open.table_rows(1, &a, &ma).rows(), 2);

        let batch = open.seal(1, Vec::new());
        let writes: Vec<(&str, &str, usize)> = batch
            .writes
            .iter()
            .map(|w| (w.table.as_str(), &*w.topic, w.rows()))
            .collect();
        assert_eq!(writes, [("public.ta", "a", 2), ("public.tb", "b", 3)]);
        assert!(batch.writes[0].dead_letters.is_none());
        let target = batch.writes[1]
            .dead_letters
            .as_ref()
            .expect("b dead-letters");
        assert_eq!(
            (&*target.topic, target.produce_to.as_deref()),
            ("b", Some("b.dlq"))
        );
        assert_eq!(batch.writes[1].copies[0].origins.len(), 3, "records kept");
    }

    /// Insert mode: a record without the defaulted column gets a COPY without that column, so
    /// the default applies; both shapes go into one table write, in first-seen order.
    #[test]
    fn insert_shapes_become_copies_of_one_write() {
        let t: Arc<str> = "t".into();
        let m = mapper("t", "t", 5, "");
        let mut open = OpenBatch::default();
        add(&mut open, 0, &m, &t, 0, r#"{"id":1,"note":"x"}"#).unwrap();
        add(&mut open, 0, &m, &t, 1, r#"{"id":2}"#).unwrap();
        add(&mut open, 0, &m, &t, 2, r#"{"id":3,"note":"y"}"#).unwrap();
        let batch = open.seal(1, Vec::new());
        assert_eq!(batch.writes.len(), 1);
        let copies: Vec<(&str, &[i64])> = batch.writes[0]
            .copies
            .iter()
            .map(|c| (c.statement.as_str(), &c.ordinals[..]))
            .collect();
        assert_eq!(
            copies,
            [
                (
                    r#"COPY "public"."t" ("id", "note") FROM STDIN (FORMAT binary)"#,
                    &[0, 2][..]
                ),
                (
                    r#"COPY "public"."t" ("id") FROM STDIN (FORMAT binary)"#,
                    &[1][..]
                ),
            ]
        );
        assert!(batch.writes[0].setup.is_none() && batch.writes[0].statements.is_empty());
    }

    /// Upsert rows have every column and a presence mask: records that carry different
    /// columns go into one staging COPY (no new batch), and only then is the merge the one
    /// that goes column by column; a batch whose rows agree keeps the plain merge.
    #[test]
    fn upsert_records_of_different_shapes_share_one_copy() {
        let t: Arc<str> = "t".into();
        let m = mapper("t", "t", 5, "mode = \"upsert\"");
        let mut open = OpenBatch::default();
        add(&mut open, 0, &m, &t, 0, r#"{"id":1,"note":"x"}"#).unwrap();
        add(&mut open, 0, &m, &t, 1, r#"{"id":1,"note":"y"}"#).unwrap();
        let uniform = open.seal(1, vec![advance("t", 2)]);
        add(&mut open, 0, &m, &t, 2, r#"{"id":1,"note":"x"}"#).unwrap();
        add(&mut open, 0, &m, &t, 3, r#"{"id":2}"#).unwrap();
        assert_eq!(open.records, 2);
        let varied = open.seal(2, vec![advance("t", 4)]);

        for (write, folds) in [(&uniform.writes[0], false), (&varied.writes[0], true)] {
            assert_eq!(write.copies.len(), 1);
            assert_eq!(write.rows(), 2);
            // The setup is named by both staging tables, the upserts' first.
            let setup = write.setup.as_ref().map(|(id, _)| id.as_str()).unwrap();
            let (staging, deletes) = setup.split_once(' ').unwrap();
            assert!(staging.starts_with("pg_temp.\"kps_stage_5_"), "{staging}");
            assert!(deletes.starts_with("pg_temp.\"kps_delete_5_"), "{deletes}");
            assert_eq!(
                write.copies[0].statement,
                format!(
                    r#"COPY {staging} ("id", "note", "__kps_ord", "__kps_mask") FROM STDIN (FORMAT binary)"#
                )
            );
            let merge = &write.statements[0];
            assert_eq!(merge.contains("DISTINCT ON"), !folds, "{merge}");
            assert_eq!(merge.contains("get_bit"), folds, "{merge}");
        }
        assert!(uniform.writes[0].statements[0]
            .contains("ON CONFLICT (\"id\") DO UPDATE SET \"note\" = EXCLUDED.\"note\""));
        // A new key whose records never carried `note` gets its default.
        assert!(varied.writes[0].statements[0].contains("ELSE ('default') END"));
        // Only keys with several rows are folded; a key's single row is merged as it is.
        assert!(varied.writes[0].statements[0].contains("WHERE g.__kps_n > 1"));
        assert!(varied.writes[0].statements[0].contains("WHERE g.__kps_n = 1"));
    }

    /// Debezium records holding the unavailable-value placeholder keep the stored value, so
    /// their write never goes in by a plain COPY (which would insert a row without it) nor by
    /// the probe's one merge: the check that a row exists, and the updates of those rows,
    /// come first, in each round; the write knows which rows they were, for the count.
    #[test]
    fn placeholder_rows_are_checked_and_updated_before_the_merge() {
        let t: Arc<str> = "t".into();
        let m = mapper("t", "t", 5, "format = \"debezium\"");
        let mut open = OpenBatch::default();
        let event = |id: i64, note: &str| {
            format!(r#"{{"op":"u","before":null,"after":{{"id":{id},"note":"{note}"}}}}"#)
        };
        add(&mut open, 0, &m, &t, 0, &event(1, "x")).unwrap();
        add(&mut open, 0, &m, &t, 1, &event(2, "x")).unwrap();
        let plain = open.seal(1, vec![advance("t", 2)]);
        assert!(plain.writes[0].plain.is_some() && plain.writes[0].placeholders.is_empty());

        add(
            &mut open,
            0,
            &m,
            &t,
            2,
            &event(1, "__debezium_unavailable_value"),
        )
        .unwrap();
        add(&mut open, 0, &m, &t, 3, &event(2, "y")).unwrap();
        let kept = open.seal(2, vec![advance("t", 4)]);
        let write = &kept.writes[0];
        assert!(write.plain.is_none() && write.probe.is_none());
        assert_eq!(write.placeholders, [0]);
        let statements = &write.statements;
        assert!(
            statements[0].starts_with("DO $kps_toast$"),
            "{}",
            statements[0]
        );
        assert!(
            statements[0].contains("ERRCODE = '22K01'"),
            "{}",
            statements[0]
        );
        // `note` is column 1: its unavailable bit follows the one byte of presence bits.
        assert!(
            statements[0].contains("get_bit(u.\"__kps_mask\", 9) = 1 THEN 'note'"),
            "{}",
            statements[0]
        );
        assert!(statements[1].starts_with("UPDATE \"public\".\"t\" t SET \"note\" = CASE WHEN get_bit(u.\"__kps_mask\", 1) = 1"), "{}", statements[1]);
        assert!(
            statements[2].starts_with("DELETE FROM pg_temp."),
            "{}",
            statements[2]
        );
        assert!(
            statements[2].ends_with("length(u.\"__kps_mask\") > 1"),
            "{}",
            statements[2]
        );
        // Then the merge, column by column (the rows carried different columns).
        assert!(statements[3].contains("INSERT INTO"), "{}", statements[3]);
    }

    /// Uniform upserts may go in by a COPY of the columns their records carried (a key-only
    /// stream leaves `note` to its default); rows that differ, or a delete between them, need
    /// the merge.
    #[test]
    fn uniform_upserts_have_a_plain_copy_of_what_they_carried() {
        let t: Arc<str> = "t".into();
        let m = mapper("t", "t", 5, "mode = \"upsert\"\ndelete_on_tombstone = true");
        let mut open = OpenBatch::default();
        let plain = |open: &mut OpenBatch, next| {
            let batch = open.seal(1, vec![advance("t", next)]);
            batch.writes[0]
                .plain
                .as_ref()
                .map(|p| (p.statement.clone(), p.fields.clone()))
        };
        add(&mut open, 0, &m, &t, 0, r#"{"id":1,"note":"x"}"#).unwrap();
        add(&mut open, 0, &m, &t, 1, r#"{"id":2,"note":null}"#).unwrap();
        assert_eq!(
            plain(&mut open, 2),
            Some((
                r#"COPY "public"."t" ("id", "note") FROM STDIN (FORMAT binary)"#.to_string(),
                vec![true, true, false, false]
            ))
        );
        add(&mut open, 0, &m, &t, 2, r#"{"id":1}"#).unwrap();
        add(&mut open, 0, &m, &t, 3, r#"{"id":2}"#).unwrap();
        assert_eq!(
            plain(&mut open, 4),
            Some((
                r#"COPY "public"."t" ("id") FROM STDIN (FORMAT binary)"#.to_string(),
                vec![true, false, false, false]
            ))
        );
        add(&mut open, 0, &m, &t, 4, r#"{"id":1}"#).unwrap();
        add(&mut open, 0, &m, &t, 5, r#"{"id":2,"note":"y"}"#).unwrap();
        assert_eq!(plain(&mut open, 6), None);
    }

    /// A probe stands for the rounds only where the table refuses a row for its own values and
    /// the records carried the same columns (all of them, under `CHECK`s); soft deletes, rules
    /// beyond the row and partial records go in rounds.
    #[test]
    fn the_probe_stands_for_rounds_only_where_the_row_alone_decides() {
        let t: Arc<str> = "t".into();
        let probe = |rules: RowRules, extra: &str, values: &[&str]| {
            let mut described = (*table("t", 5)).clone();
            described.rules = rules;
            // The soft-delete mark, which no record carries.
            if extra.contains("soft") {
                described.columns.push(Column {
                    name: "gone".into(),
                    ty: ColumnType::Bool,
                    sql_type: "boolean".into(),
                    not_null: false,
                    has_default: false,
                    default_sql: None,
                });
            }
            let settings: TopicSettings = Figment::from(Toml::string(&format!(
                "name = \"t\"\ntable = \"t\"\nmode = \"upsert\"\n{extra}"
            )))
            .extract()
            .unwrap();
            let m = TopicMapper::new(&settings, Arc::new(described)).unwrap();
            let mut open = OpenBatch::default();
            for (offset, value) in values.iter().enumerate() {
                add(&mut open, 0, &m, &t, offset as i64, value).unwrap();
            }
            let batch = open.seal(1, vec![advance("t", values.len() as i64)]);
            batch.writes[0].probe.clone()
        };
        let whole = [r#"{"id":1,"note":"a"}"#, r#"{"id":1,"note":"b"}"#];
        let id_only = [r#"{"id":1}"#, r#"{"id":1}"#];
        let partial = [r#"{"id":1,"note":"a"}"#, r#"{"id":1}"#];
        let none = RowRules::default();
        let checks = RowRules {
            checks: true,
            ..RowRules::default()
        };
        let beyond = RowRules {
            beyond_the_row: true,
            ..RowRules::default()
        };
        let statement = probe(none, "", &whole).expect("a probe");
        assert!(
            statement.starts_with(
                r#"INSERT INTO "public"."t" ("id", "note") SELECT "id", "note" FROM pg_temp."#
            ) && statement
                .ends_with(r#"WHERE "__kps_ord" = ANY($1) ON CONFLICT ("id") DO NOTHING"#),
            "{statement}"
        );
        assert!(probe(checks, "", &whole).is_some(), "every column carried");
        assert!(
            probe(none, "", &id_only).is_some(),
            "no CHECK to relate columns"
        );
        assert_eq!(probe(checks, "", &id_only), None, "a CHECK may read `note`");
        assert_eq!(probe(beyond, "", &whole), None);
        assert_eq!(probe(none, "", &partial), None);
        let soft =
            "delete_on_tombstone = true\ndelete_mode = \"soft\"\nsoft_delete_column = \"gone\"";
        assert_eq!(probe(none, soft, &whole), None);
    }

    /// A column added to the table (`auto_evolve`) gives its staging tables new names, so a
    /// session whose staging was made before the column makes them again with it; the same
    /// shape keeps its names, and the delete staging follows the upsert staging.
    #[test]
    fn staging_is_named_by_the_tables_shape() {
        let before = table("t", 5);
        let mut after = (*before).clone();
        after.columns.push(Column {
            name: "email".into(),
            ty: ColumnType::Text,
            sql_type: "text".into(),
            not_null: false,
            has_default: true,
            default_sql: None,
        });
        let (a, b, again) = (
            Staging::of(&before, false, false),
            Staging::of(&after, false, false),
            Staging::of(&table("t", 5), false, false),
        );
        assert_ne!(a.upserts, b.upserts);
        assert_ne!(a.deletes, b.deletes);
        assert_eq!(a.upserts, again.upserts);
        assert_eq!(
            a.deletes.replace("kps_delete_", "kps_stage_"),
            a.upserts,
            "{} {}",
            a.deletes,
            a.upserts
        );
        assert!(b.upserts.len() < 63, "{}", b.upserts);
    }
}
