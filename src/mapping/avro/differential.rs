//! The direct decoder held against apache-avro's: random values of the test schemas, encoded
//! by apache-avro's writer, must become the same JSON both ways, and every corruption of
//! them must be an error both ways or the same JSON. The direct decoder is what the sink
//! runs; apache-avro's value tree is the reference it was written to equal.

use std::collections::HashMap;

use apache_avro::schema::{DecimalSchema, Schema};
use apache_avro::types::Value;
use apache_avro::{Days, Decimal, Duration, Millis, Months};

use super::decode::{ends_early, trailing};
use super::tests::{DEBEZIUM, EVERY_TYPE};
use super::{AvroTranscoder, Payload};
use crate::mapping::transcode::Transcoder as _;

impl AvroTranscoder {
    /// The JSON of `payload` as apache-avro decodes it into a value tree, written by `write`:
    /// what `to_json` must equal, for the tests.
    fn to_json_by_value(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        let mut reader = Payload {
            rest: payload,
            ran_out: false,
        };
        // No schemata: every reference is inlined, so no name table is built per record.
        let decoded =
            apache_avro::from_avro_datum_schemata(&self.schema, Vec::new(), &mut reader, None);
        // apache-avro reads a missing boolean, string or union branch at the end of the input
        // as null, so running out is noticed here, not from its result.
        if reader.ran_out {
            return Err(ends_early(payload));
        }
        let value = decoded.map_err(|e| format!("the payload is not Avro of its schema: {e}"))?;
        if !reader.rest.is_empty() {
            return Err(trailing(reader.rest));
        }
        let start = out.len();
        self.write(&value, self.root, 0, out)
            .inspect_err(|_| out.truncate(start))
    }
}

/// For the tests: `to_json`'s result, once checked against `to_json_by_value`'s (equal JSON,
/// map entries in any order; or both errors).
pub(super) fn checked_json(t: &AvroTranscoder, payload: &[u8]) -> Result<String, String> {
    let mut direct = String::new();
    let mut by_value = String::new();
    let a = t.to_json(payload, &mut direct).map(|()| direct);
    let b = t
        .to_json_by_value(payload, &mut by_value)
        .map(|()| by_value);
    match (&a, &b) {
        (Ok(x), Ok(y)) => {
            let parse =
                |s: &str| serde_json::from_str::<serde_json::Value>(s).expect("JSON is written");
            assert_eq!(
                parse(x),
                parse(y),
                "direct and by-value JSON of {payload:?}"
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!("direct {a:?} but by value {b:?} for {payload:?}"),
    }
    a
}

/// The benchmark's orders, as an Avro producer writes them, with a map and a big-decimal. (A
/// fixed uuid is left out: apache-avro 0.21 reads it as length-prefixed bytes, the direct
/// decoder as its 16 bytes; it has a test of its own.)
const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"kps.bench","fields":[
    {"name":"id","type":"string"},
    {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
    {"name":"created_at","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"attrs","type":{"type":"record","name":"Attrs","fields":[
        {"name":"items","type":"int"},
        {"name":"coupon","type":["null","string"],"default":null},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"flags","type":{"type":"map","values":"boolean"}}]}},
    {"name":"big","type":{"type":"bytes","logicalType":"big-decimal"}}
]}"#;

/// A fixed xorshift, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Mostly small numbers, now and then the extremes: both decoders' edges.
    fn int(&mut self, small: i64, min: i64, max: i64) -> i64 {
        match self.below(60) {
            0 => min,
            1 => max,
            2 => self.next() as i64,
            _ => self.below(2 * small as u64) as i64 - small,
        }
    }

    /// Mostly between `lo` and `hi`, now and then just outside.
    fn within(&mut self, lo: i64, hi: i64) -> i64 {
        match self.below(60) {
            0 => lo - 1,
            1 => hi + 1,
            _ => lo + self.below((hi - lo + 1) as u64) as i64,
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Text with the characters JSON escapes, non-ASCII and NUL.
    fn text(&mut self) -> String {
        const PIECES: [&str; 8] = ["a", "\"", "\\", "\n", "\u{0}", "é", "日本", "😀"];
        (0..self.below(6))
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }

    /// A value of `schema`, which has its references inlined.
    fn value(&mut self, schema: &Schema) -> Value {
        match schema {
            Schema::Null => Value::Null,
            Schema::Boolean => Value::Boolean(self.below(2) == 1),
            Schema::Int => Value::Int(self.int(1000, i32::MIN.into(), i32::MAX.into()) as i32),
            Schema::Long => Value::Long(self.int(1 << 40, i64::MIN, i64::MAX)),
            Schema::Float => Value::Float(f32::from_bits(self.next() as u32)),
            Schema::Double => Value::Double(match self.below(3) {
                0 => f64::from_bits(self.next()),
                _ => self.int(1000, -5, 5) as f64 / 8.0,
            }),
            Schema::Bytes => Value::Bytes({
                let n = self.below(20) as usize;
                self.bytes(n)
            }),
            Schema::String => Value::String(self.text()),
            Schema::Fixed(f) => Value::Fixed(f.size, self.bytes(f.size)),
            Schema::Enum(e) => {
                let i = self.below(e.symbols.len() as u64) as usize;
                Value::Enum(i as u32, e.symbols[i].clone())
            }
            Schema::Array(a) => {
                Value::Array((0..self.below(4)).map(|_| self.value(&a.items)).collect())
            }
            Schema::Map(m) => Value::Map(
                (0..self.below(4))
                    .map(|_| (self.text(), self.value(&m.types)))
                    .collect::<HashMap<_, _>>(),
            ),
            Schema::Union(u) => {
                let i = self.below(u.variants().len() as u64) as usize;
                Value::Union(i as u32, Box::new(self.value(&u.variants()[i])))
            }
            Schema::Record(r) => Value::Record(
                r.fields
                    .iter()
                    .map(|f| (f.name.clone(), self.value(&f.schema)))
                    .collect(),
            ),
            Schema::Decimal(DecimalSchema { inner, .. }) => {
                let n = match inner.as_ref() {
                    Schema::Fixed(f) => f.size,
                    _ => 1 + self.below(20) as usize,
                };
                Value::Decimal(Decimal::from(self.bytes(n)))
            }
            Schema::BigDecimal => Value::BigDecimal(
                format!("{}.{}", self.int(1000, -99, 99), self.below(1000))
                    .parse()
                    .expect("a decimal"),
            ),
            Schema::Uuid => Value::Uuid(uuid::Uuid::from_u64_pair(self.next(), self.next())),
            Schema::Date => Value::Date(self.int(30_000, i32::MIN.into(), i32::MAX.into()) as i32),
            Schema::TimeMillis => Value::TimeMillis(self.within(0, 86_400_000) as i32),
            Schema::TimeMicros => Value::TimeMicros(self.within(0, 86_400_000_000)),
            Schema::TimestampMillis => {
                Value::TimestampMillis(self.int(1 << 42, i64::MIN, i64::MAX))
            }
            Schema::TimestampMicros => {
                Value::TimestampMicros(self.int(1 << 52, i64::MIN, i64::MAX))
            }
            Schema::TimestampNanos => Value::TimestampNanos(self.next() as i64),
            Schema::LocalTimestampMillis => {
                Value::LocalTimestampMillis(self.int(1 << 42, i64::MIN, i64::MAX))
            }
            Schema::LocalTimestampMicros => {
                Value::LocalTimestampMicros(self.int(1 << 52, i64::MIN, i64::MAX))
            }
            Schema::LocalTimestampNanos => Value::LocalTimestampNanos(self.next() as i64),
            Schema::Duration => Value::Duration(Duration::new(
                Months::new(self.next() as u32),
                Days::new(self.next() as u32),
                Millis::new(self.next() as u32),
            )),
            Schema::Ref { .. } => unreachable!("references are inlined"),
        }
    }
}

#[test]
fn random_values_and_their_corruptions_read_the_same_both_ways() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut agreed = 0;
    for schema in [EVERY_TYPE, DEBEZIUM, ORDER] {
        let t = AvroTranscoder::new(schema).expect("a valid schema");
        // Values follow the inlined schema (no references to resolve); apache-avro's writer
        // takes the schema as written (the inlined one defines names more than once).
        let written = Schema::parse_str(schema).expect("a valid schema");
        for _ in 0..3_000 {
            let value = rng.value(&t.schema);
            let payload = apache_avro::to_avro_datum(&written, value).expect("a valid value");
            if let Ok(json) = checked_json(&t, &payload) {
                agreed += 1;
                spans_are_the_fields(&t, &payload, &json);
            }
            for _ in 0..3 {
                let mut bad = payload.clone();
                match rng.below(3) {
                    0 if !bad.is_empty() => {
                        let at = rng.below(bad.len() as u64) as usize;
                        bad[at] = rng.next() as u8;
                    }
                    1 => bad.truncate(rng.below(bad.len() as u64) as usize),
                    _ => bad.push(rng.next() as u8),
                }
                let _ = checked_json(&t, &bad);
            }
        }
    }
    // Many random values are in range (EVERY_TYPE has dozens of fields that can be out of
    // range): the comparison is not only of errors.
    assert!(agreed > 4_000, "only {agreed} values read without error");
}

/// `to_json_fields` writes what `to_json` writes, and each span is its field's value, as the
/// mapping takes it instead of scanning the object.
fn spans_are_the_fields(t: &AvroTranscoder, payload: &[u8], json: &str) {
    let names = t.top_fields().expect("the test schemas are records");
    let mut out = String::new();
    let mut spans = Vec::new();
    t.to_json_fields(payload, &mut out, &mut spans).unwrap();
    assert_eq!(out, json);
    assert_eq!(spans.len(), names.len());
    // Exactly the text the object scan would take for each field (serde_json's raw value:
    // no whitespace around it), which the converters rely on.
    let object: HashMap<String, &serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
    for (name, span) in names.iter().zip(spans) {
        let scanned = object.get(name).map(|raw| raw.get());
        assert_eq!(Some(&out[span]), scanned, "field {name} of {json}");
    }
}

#[test]
fn json_text_lands_without_its_whitespace_and_an_empty_decimal_is_no_number() {
    let t = AvroTranscoder::new(
        r#"{"type":"record","name":"R","fields":[
            {"name":"js","type":{"type":"string","connect.name":"io.debezium.data.Json"}},
            {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}}]}"#,
    )
    .unwrap();
    let text = "\t\"abc\"\n";
    let payload = [&[(text.len() * 2) as u8][..], text.as_bytes(), &[2, 0x30]].concat();
    let json = checked_json(&t, &payload).unwrap();
    assert_eq!(json, r#"{"js":"abc","d":0.48}"#);
    spans_are_the_fields(&t, &payload, &json);
    let empty = [&[(text.len() * 2) as u8][..], text.as_bytes(), &[0]].concat();
    let err = checked_json(&t, &empty).unwrap_err();
    assert!(err.contains("no bytes"), "{err}");
}

#[test]
fn a_fixed_uuid_is_read_as_its_sixteen_bytes() {
    let t = AvroTranscoder::new(r#"{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}"#)
        .unwrap();
    let id = uuid::Uuid::parse_str("6f1d2c3b-0a9e-4d8c-b7a6-5e4f3d2c1b0a").unwrap();
    let mut out = String::new();
    t.to_json(id.as_bytes(), &mut out).unwrap();
    assert_eq!(out, "\"6f1d2c3b-0a9e-4d8c-b7a6-5e4f3d2c1b0a\"");
    let err = t
        .to_json(&id.as_bytes()[..15], &mut String::new())
        .unwrap_err();
    assert!(err.contains("ends early"), "{err}");
}

#[test]
fn an_array_of_nulls_cannot_claim_unbounded_json() {
    let t = AvroTranscoder::new(r#"{"type":"array","items":"null"}"#).unwrap();
    // One block may claim at most as many items as apache-avro allows (2^24; here 2^61,
    // whose zig-zag 2^62 is nine varint bytes)...
    let huge = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0];
    let err = checked_json(&t, &huge).unwrap_err();
    assert!(err.contains("more than 16777216"), "{err}");
    // ...and many blocks of items that take no bytes each cannot make more JSON than the cap:
    // 2^24 items zig-zag to 2^25, four varint bytes.
    let mut payload = Vec::new();
    for _ in 0..100 {
        payload.extend([0x80, 0x80, 0x80, 0x10]);
    }
    payload.push(0);
    let err = t.to_json(&payload, &mut String::new()).unwrap_err();
    assert!(err.contains("MiB of JSON"), "{err}");
}

#[test]
fn blocks_with_a_negative_count_carry_their_size_and_read_the_same() {
    let t =
        AvroTranscoder::new(r#"{"type":"map","values":{"type":"array","items":"int"}}"#).unwrap();
    // One map block of -1 entries (then its size, 9 bytes): "k" → an array in two blocks, one
    // of -2 items with its size, one of 1 item.
    let payload = [1, 18, 2, b'k', 3, 4, 2, 4, 2, 6, 0, 0];
    assert_eq!(checked_json(&t, &payload).unwrap(), r#"{"k":[1,2,3]}"#);
}
