//! Unique rounds: the rounds of a write to a table with unique indexes besides its key, planned
//! so the table ends as applying the records one at a time, in record order, would leave it.
//!
//! PostgreSQL checks a non-deferrable unique index row by row, as each row is inserted or
//! updated, and a merge visits its rows in an order of its own. Folding a batch per key (or
//! splitting it only where keys repeat, `rounds`) can therefore show PostgreSQL a state no
//! record order passes through: `b` taking `a`'s old email before `a` let it go is refused
//! although the records are valid in commit order (a crash loop under `on_error = "fail"`);
//! and `a` taking an email `b` lets go only later is accepted although, one at a time, `a`'s
//! record would have been refused.
//!
//! So each row's round is the first after every earlier row it could meet in a unique index:
//! a row that takes value `v` comes after earlier rows that took or let go of `v`, and a row
//! that lets go of `v` after earlier rows that took it. Rows that meet nowhere share a round
//! (a batch of distinct keys and values is one round, one merge). A round's deletes run
//! before its merge (`Merge::statements`), so a delete and a later row taking the value it
//! let go of may share one. What a key holds before the batch is read from the table
//! (`Stored`); a value the planner cannot compare (an expression or partial index, a default
//! taken on insert, a type whose equality is not its bytes) meets every value of its index.
//!
//! The planner is a pure function of the rows and the stored values, so the property test
//! (`model`) runs the very code the writer runs against a model of PostgreSQL.

use foldhash::{HashMap, HashMapExt};

/// What a staged row does, in record order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// The key's bytes (equal bytes, equal key).
    pub(crate) key: Vec<u8>,
    pub(crate) change: Change,
}

/// An upsert (per unique index, what it sets) or a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Upsert(Vec<Sets>),
    Delete,
}

/// What an upsert sets in one unique index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sets {
    /// The index's columns, as bytes (every column carried, none NULL).
    Value(Vec<u8>),
    /// A NULL in the index's columns: under `NULLS DISTINCT` it meets nothing.
    Null,
    /// The record left a column of the index out: an update keeps the stored value, an
    /// insert takes the column's default.
    Kept,
    /// Left out, where the columns' defaults draw from a sequence (serial, identity): an
    /// update keeps the stored value, an insert takes a value no other row holds.
    Fresh,
    /// Something the planner cannot compare.
    Opaque,
}

/// What a key holds in one unique index before the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    Value(Vec<u8>),
    Null,
    Opaque,
}

/// A key's value in one index as the planner follows it through the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// NULL, or no row.
    Free,
    Value(Vec<u8>),
    Unknown,
}

impl From<&Stored> for Held {
    fn from(stored: &Stored) -> Self {
        match stored {
            Stored::Value(v) => Held::Value(v.clone()),
            Stored::Null => Held::Free,
            Stored::Opaque => Held::Unknown,
        }
    }
}

/// Per index: the latest round that took, let go of by an upsert, or let go of by a delete,
/// each value (and any value, and a value nobody can compare).
#[derive(Default)]
struct Index {
    took: HashMap<Vec<u8>, u32>,
    released: HashMap<Vec<u8>, u32>,
    deleted: HashMap<Vec<u8>, u32>,
    any: Marks,
    unknown: Marks,
}

/// The latest rounds of takes, upsert releases and delete releases.
#[derive(Default, Clone, Copy)]
struct Marks {
    took: u32,
    released: u32,
    deleted: u32,
}

/// A key as the planner follows it: its round, whether it has a row, its value per index.
struct Key {
    round: u32,
    exists: bool,
    held: Vec<Held>,
}

/// Each step's round, from 1, for a table with `indexes` unique indexes besides the key
/// (`steps[i].change` has one `Sets` per index). `stored` holds what the keys that have a row
/// hold; a key missing from it has none. Soft deletes keep the row and its values.
pub(crate) fn plan(
    steps: &[Step],
    stored: &HashMap<Vec<u8>, Vec<Stored>>,
    indexes: usize,
    soft_delete: bool,
) -> Vec<u32> {
    let mut keys: HashMap<&[u8], Key> = HashMap::with_capacity(steps.len());
    let mut state: Vec<Index> = (0..indexes).map(|_| Index::default()).collect();
    let mut rounds = Vec::with_capacity(steps.len());
    // Per index: the value the step lets go of and the one it takes; and what the key holds
    // after it.
    let mut events: Vec<(Held, Held)> = Vec::with_capacity(indexes);
    let mut after: Vec<Held> = Vec::with_capacity(indexes);
    for step in steps {
        let key = keys
            .entry(&step.key)
            .or_insert_with(|| match stored.get(&step.key) {
                Some(values) => Key {
                    round: 0,
                    exists: true,
                    held: (0..indexes)
                        .map(|u| values.get(u).map_or(Held::Unknown, Held::from))
                        .collect(),
                },
                None => Key {
                    round: 0,
                    exists: false,
                    held: vec![Held::Free; indexes],
                },
            });
        events.clear();
        after.clear();
        let delete = matches!(step.change, Change::Delete);
        match &step.change {
            // A soft delete keeps the row and its values; a delete of nothing changes nothing.
            Change::Delete if soft_delete || !key.exists => {
                after.extend(key.held.iter().cloned());
            }
            Change::Delete => {
                after.extend((0..indexes).map(|_| Held::Free));
            }
            Change::Upsert(sets) => {
                for (u, held) in key.held.iter().enumerate() {
                    after.push(match sets.get(u).unwrap_or(&Sets::Opaque) {
                        Sets::Value(v) => Held::Value(v.clone()),
                        Sets::Null => Held::Free,
                        Sets::Kept | Sets::Fresh if key.exists => held.clone(),
                        Sets::Fresh => Held::Free,
                        Sets::Kept | Sets::Opaque => Held::Unknown,
                    });
                }
            }
        }
        for (u, (held, new)) in key.held.iter().zip(&after).enumerate() {
            let kept = match &step.change {
                Change::Upsert(sets) => {
                    key.exists && matches!(sets.get(u), Some(Sets::Kept | Sets::Fresh))
                }
                Change::Delete => soft_delete || !key.exists,
            };
            events.push(match (held, new) {
                // Unchanged: the index entry stays, nothing is checked.
                _ if kept => (Held::Free, Held::Free),
                (Held::Value(a), Held::Value(b)) if a == b => (Held::Free, Held::Free),
                _ => (held.clone(), new.clone()),
            });
        }
        let mut round = key.round + 1;
        for ((released, taken), index) in events.iter().zip(&state) {
            round = round.max(index.after(released, taken));
        }
        rounds.push(round);
        key.round = round;
        key.exists = match (delete, soft_delete) {
            (false, _) => true,
            (true, true) => key.exists,
            (true, false) => false,
        };
        std::mem::swap(&mut key.held, &mut after);
        for ((released, taken), index) in events.drain(..).zip(&mut state) {
            index.note(released, taken, round, delete);
        }
    }
    rounds
}

impl Index {
    /// The first round a step may take, given what it lets go of and takes in this index.
    fn after(&self, released: &Held, taken: &Held) -> u32 {
        let mut round = 1;
        match taken {
            Held::Free => {}
            Held::Value(v) => {
                let at = |m: &HashMap<Vec<u8>, u32>| m.get(v).copied().unwrap_or(0);
                round = round
                    .max(at(&self.took) + 1)
                    .max(at(&self.released) + 1)
                    .max(at(&self.deleted))
                    .max(self.unknown.took + 1)
                    .max(self.unknown.released + 1)
                    .max(self.unknown.deleted);
            }
            Held::Unknown => {
                round = round
                    .max(self.any.took + 1)
                    .max(self.any.released + 1)
                    .max(self.any.deleted);
            }
        }
        match released {
            Held::Free => {}
            Held::Value(v) => {
                let took = self.took.get(v).copied().unwrap_or(0);
                round = round.max(took + 1).max(self.unknown.took + 1);
            }
            Held::Unknown => round = round.max(self.any.took + 1),
        }
        round
    }

    /// Records a step's events at `round`.
    fn note(&mut self, released: Held, taken: Held, round: u32, delete: bool) {
        let bump = |m: &mut u32| *m = (*m).max(round);
        match released {
            Held::Free => {}
            Held::Value(v) => {
                let map = if delete {
                    &mut self.deleted
                } else {
                    &mut self.released
                };
                bump(map.entry(v).or_insert(0));
                bump(if delete {
                    &mut self.any.deleted
                } else {
                    &mut self.any.released
                });
            }
            Held::Unknown => {
                let (any, unknown) = if delete {
                    (&mut self.any.deleted, &mut self.unknown.deleted)
                } else {
                    (&mut self.any.released, &mut self.unknown.released)
                };
                bump(any);
                bump(unknown);
            }
        }
        match taken {
            Held::Free => {}
            Held::Value(v) => {
                bump(self.took.entry(v).or_insert(0));
                bump(&mut self.any.took);
            }
            Held::Unknown => {
                bump(&mut self.any.took);
                bump(&mut self.unknown.took);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::pg_model::{self, Mode, Record, Row, Table};
    use super::*;

    /// An upsert of `key` setting `email`, as the planner sees it.
    fn up(key: u8, email: u8) -> Step {
        Step {
            key: vec![key],
            change: Change::Upsert(vec![Sets::Value(vec![email])]),
        }
    }

    /// Keys 1..=n holding emails 101.. before the batch.
    fn stored(n: u8) -> HashMap<Vec<u8>, Vec<Stored>> {
        (1..=n)
            .map(|k| (vec![k], vec![Stored::Value(vec![100 + k])]))
            .collect()
    }

    /// Distinct keys and values, nothing let go of that another takes: one round, as before.
    #[test]
    fn distinct_keys_and_values_are_one_round() {
        let steps = [up(1, 1), up(2, 2), up(3, 3), up(9, 9)];
        assert_eq!(plan(&steps, &stored(3), 1, false), [1, 1, 1, 1]);
    }

    /// The swap (a -> temp, b -> a's old, a -> b's old) takes three rounds: b waits
    /// for a to let go, a for b.
    #[test]
    fn a_swap_is_ordered_by_who_lets_go_first() {
        let steps = [up(1, 50), up(2, 101), up(1, 102)];
        assert_eq!(plan(&steps, &stored(2), 1, false), [1, 2, 3]);
    }

    /// A key change (a delete of the old key, the new key with its value) shares a round: the
    /// round's deletes run first. A delete after the row that takes its value does not.
    #[test]
    fn a_delete_shares_a_round_only_with_later_takers() {
        let delete = |key: u8| Step {
            key: vec![key],
            change: Change::Delete,
        };
        assert_eq!(plan(&[delete(1), up(7, 101)], &stored(1), 1, false), [1, 1]);
        assert_eq!(plan(&[up(7, 101), delete(1)], &stored(1), 1, false), [1, 2]);
        // A soft delete lets go of nothing: the marked row keeps its value.
        assert_eq!(plan(&[delete(1), up(7, 101)], &stored(1), 1, true), [1, 1]);
    }

    /// A value taken from a key the table holds but whose record comes later waits for it:
    /// applied one at a time the taker is refused, and so it must be here.
    #[test]
    fn a_value_let_go_of_later_is_taken_after() {
        let steps = [up(2, 101), up(1, 5)];
        assert_eq!(plan(&steps, &stored(2), 1, false), [1, 2]);
    }

    /// New keys leaving a serial column out each take a value nobody holds: one round. Left
    /// out under another default, the values could meet: a round each.
    #[test]
    fn inserts_leaving_a_sequence_column_out_share_a_round() {
        let insert = |key: u8, sets: Sets| Step {
            key: vec![key],
            change: Change::Upsert(vec![sets]),
        };
        let fresh = [insert(1, Sets::Fresh), insert(2, Sets::Fresh)];
        assert_eq!(plan(&fresh, &HashMap::new(), 1, false), [1, 1]);
        let kept = [insert(1, Sets::Kept), insert(2, Sets::Kept)];
        assert_eq!(plan(&kept, &HashMap::new(), 1, false), [1, 2]);
        // An update that leaves it out keeps the stored value and meets nothing.
        let updates = [insert(1, Sets::Fresh), up(2, 101)];
        assert_eq!(plan(&updates, &stored(1), 1, false), [1, 1]);
    }

    /// Generated records over keys 0..5 and emails 0..4: upserts that carry the email, NULL or
    /// leave it out, deletes, key changes (a delete and an upsert of another key with an
    /// email) and swaps.
    fn records() -> impl Strategy<Value = Vec<Record>> {
        let key = 0u8..5;
        let email = prop_oneof![
            Just(None),
            Just(Some(None)),
            (0u8..4).prop_map(|e| Some(Some(e)))
        ];
        let n = prop_oneof![Just(None), (0u8..3).prop_map(|v| Some(Some(v)))];
        let upsert = (key.clone(), email, n)
            .prop_map(|(key, email, n)| vec![Record::Upsert { key, email, n }]);
        let delete = key.clone().prop_map(|key| vec![Record::Delete { key }]);
        let key_change = (key.clone(), key.clone(), 0u8..4).prop_map(|(old, new, e)| {
            vec![
                Record::Delete { key: old },
                Record::Upsert {
                    key: new,
                    email: Some(Some(e)),
                    n: Some(Some(1)),
                },
            ]
        });
        let swap = (key.clone(), key, 0u8..4, 0u8..4, 0u8..4).prop_map(|(a, b, t, x, y)| {
            let set = |key, e| Record::Upsert {
                key,
                email: Some(Some(e)),
                n: None,
            };
            vec![set(a, t), set(b, x), set(a, y)]
        });
        proptest::collection::vec(
            prop_oneof![3 => upsert, 2 => delete, 1 => key_change, 1 => swap],
            0..14,
        )
        .prop_map(|groups| groups.into_iter().flatten().collect())
    }

    /// A table the records start from: some keys with distinct emails (or NULL).
    fn table() -> impl Strategy<Value = Table> {
        proptest::collection::btree_map(
            0u8..5,
            (proptest::option::of(0u8..4), proptest::option::of(0u8..3)),
            0..5,
        )
        .prop_map(|rows| {
            let mut table = Table::new();
            for (key, (email, n)) in rows {
                let taken = email.is_some_and(|e| table.values().any(|r: &Row| r.email == Some(e)));
                let email = if taken { None } else { email };
                table.insert(
                    key,
                    Row {
                        email,
                        n,
                        deleted: false,
                    },
                );
            }
            table
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The planned rounds, applied as PostgreSQL applies them (whatever order the merge
        /// visits its rows in) and split where a statement fails, end in the table applying
        /// the records one at a time leaves, refuse exactly the records one at a time
        /// refuses, and apply a batch that has none to refuse without a split.
        #[test]
        fn planned_rounds_equal_one_record_at_a_time(
            start in table(),
            records in records(),
            soft_delete in any::<bool>(),
            opaque in any::<bool>(),
            order in any::<u64>(),
        ) {
            let mode = Mode { soft_delete, opaque };
            let (want, want_refused) = pg_model::serial(start.clone(), &records, mode);
            let (got, refused, whole) = pg_model::writer(start, &records, mode, order);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(&refused, &want_refused);
            if want_refused.is_empty() {
                prop_assert!(whole, "a batch valid one record at a time was split");
            }
        }
    }
}
