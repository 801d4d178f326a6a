//! The direct reader held against prost-reflect's: random messages of the test schemas,
//! encoded by prost, must become the same JSON both ways (the same text, field order
//! included, where no map has two entries to come in hash order), and every corruption of
//! them — bytes flipped, cut, appended, fields duplicated, reordered, packed runs unpacked —
//! must be an error both ways or the same JSON. The direct reader may leave a payload to
//! prost-reflect; it must never accept one prost-reflect refuses, nor refuse one it accepts.

use prost_reflect::prost::encoding::{decode_varint, encode_varint};
use prost_reflect::prost::Message as _;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value};
use serde_json::Value as Json;

use super::decode::Failure;
use super::tests::{EXTRA, PROTO2, SHOP};
use super::ProtobufTranscoder;
use crate::mapping::transcode::Transcoder as _;

/// A fixed xorshift, so a failure can be replayed.
struct Rng(u64, bool);

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

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Mostly small numbers, now and then anything: both readers' edges.
    fn int(&mut self) -> i64 {
        match self.below(8) {
            0 => self.next() as i64,
            1 => i64::MIN,
            _ => self.below(2000) as i64 - 1000,
        }
    }

    fn text(&mut self) -> String {
        const PIECES: [&str; 8] = ["a", "\"", "\\", "\n", "\u{0}", "é", "日本", "😀"];
        (0..self.below(5))
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }

    fn float(&mut self) -> f64 {
        match self.below(6) {
            0 => f64::from_bits(self.next()),
            1 => [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -0.0][self.below(5) as usize],
            _ => self.int() as f64 / 8.0,
        }
    }

    /// A random message; `few`: maps of at most one entry, so the text is deterministic.
    fn message(&mut self, desc: &MessageDescriptor, depth: usize, few: bool) -> DynamicMessage {
        let mut m = DynamicMessage::new(desc.clone());
        match desc.full_name() {
            "google.protobuf.Timestamp" => {
                let seconds = match self.below(10) {
                    0 => self.int(),
                    _ => self.below(253_402_300_799) as i64 - self.below(62_135_596_800) as i64,
                };
                m.set_field_by_name("seconds", Value::I64(seconds));
                m.set_field_by_name("nanos", Value::I32(self.below(1_000_000_000) as i32));
                return m;
            }
            "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
                // prost-reflect writes a wrapped NaN or infinity as null, the direct reader as
                // proto3's JSON does ("NaN"): a known difference, with a test of its own.
                let f = loop {
                    let f = self.float();
                    if (f as f32).is_finite() {
                        break f;
                    }
                };
                let value = if desc.full_name() == "google.protobuf.FloatValue" {
                    Value::F32(f as f32)
                } else {
                    Value::F64(f)
                };
                m.set_field_by_name("value", value);
                return m;
            }
            "google.protobuf.Any" if self.chance(80) => {
                let leaf = desc.parent_pool().get_message_by_name("extra.All.Leaf");
                if let Some(leaf) = leaf {
                    let inner = self.message(&leaf, depth + 1, few);
                    let url = "type.googleapis.com/extra.All.Leaf".to_string();
                    m.set_field_by_name("type_url", Value::String(url));
                    m.set_field_by_name("value", Value::Bytes(inner.encode_to_vec().into()));
                }
                return m;
            }
            _ => {}
        }
        for field in desc.fields() {
            if !self.chance(if self.1 { 100 } else { 60 })
                || (depth > 3 && matches!(field.kind(), Kind::Message(_)))
            {
                continue;
            }
            let value = if field.is_map() {
                let Kind::Message(entry) = field.kind() else {
                    continue;
                };
                let n = if few { self.below(2) } else { self.below(4) };
                let key_kind = entry.map_entry_key_field().kind();
                let value_kind = entry.map_entry_value_field().kind();
                Value::Map(
                    (0..n)
                        .map(|_| (self.key(&key_kind), self.value(&value_kind, depth, few)))
                        .collect(),
                )
            } else if field.is_list() {
                let kind = field.kind();
                Value::List(
                    (0..self.below(4))
                        .map(|_| self.value(&kind, depth, few))
                        .collect(),
                )
            } else {
                self.value(&field.kind(), depth, few)
            };
            m.set_field(&field, value);
        }
        m
    }

    fn key(&mut self, kind: &Kind) -> MapKey {
        match kind {
            Kind::Bool => MapKey::Bool(self.chance(50)),
            Kind::String => MapKey::String(self.text()),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(self.int() as i32),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(self.int()),
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(self.int() as u32),
            _ => MapKey::U64(self.int() as u64),
        }
    }

    fn value(&mut self, kind: &Kind, depth: usize, few: bool) -> Value {
        match kind {
            Kind::Double => Value::F64(self.float()),
            Kind::Float => Value::F32(self.float() as f32),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(self.int() as i32),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(self.int()),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(self.int() as u32),
            Kind::Uint64 | Kind::Fixed64 => Value::U64(self.int() as u64),
            Kind::Bool => Value::Bool(self.chance(50)),
            Kind::String => Value::String(self.text()),
            Kind::Bytes => Value::Bytes((0..self.below(6)).map(|_| self.next() as u8).collect()),
            Kind::Enum(e) => Value::EnumNumber(if self.chance(85) {
                let values: Vec<i32> = e.values().map(|v| v.number()).collect();
                values[self.below(values.len() as u64) as usize]
            } else {
                self.int() as i32
            }),
            Kind::Message(m) => Value::Message(self.message(m, depth + 1, few)),
        }
    }
}

/// A message's top-level fields: (number, wire type, the field's bytes with its key).
fn split(body: &[u8]) -> Option<Vec<(u32, u8, Vec<u8>)>> {
    let mut fields = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let before = rest;
        let key = decode_varint(&mut rest).ok()?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let len = match wire {
            0 => decode_varint(&mut rest).map(|_| 0).ok()?,
            1 => 8,
            5 => 4,
            2 => decode_varint(&mut rest).ok()? as usize,
            _ => return None,
        };
        rest = rest.get(len..)?;
        fields.push((number, wire, before[..before.len() - rest.len()].to_vec()));
    }
    Some(fields)
}

/// A packed run of field `f` as the unpacked elements an older writer sends.
fn unpack(f: &FieldDescriptor, whole: &[u8]) -> Option<Vec<u8>> {
    let wire = match f.kind() {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => 1,
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => 5,
        Kind::String | Kind::Bytes | Kind::Message(_) => return None,
        _ => 0,
    };
    let mut rest = whole;
    decode_varint(&mut rest).ok()?;
    let len = decode_varint(&mut rest).ok()? as usize;
    let mut run = rest.get(..len)?;
    let mut out = Vec::new();
    while !run.is_empty() {
        let before = run;
        match wire {
            0 => {
                decode_varint(&mut run).ok()?;
            }
            1 => run = run.get(8..)?,
            _ => run = run.get(4..)?,
        }
        encode_varint(u64::from(f.number() << 3 | wire), &mut out);
        out.extend_from_slice(&before[..before.len() - run.len()]);
    }
    Some(out)
}

/// A corruption of `body`: mostly structural (fields duplicated, reordered, unpacked, taken
/// from `other`, another message of the type, so oneof members meet), else bytes flipped,
/// cut or appended.
fn corrupt(rng: &mut Rng, desc: &MessageDescriptor, body: &[u8], other: &[u8]) -> Vec<u8> {
    let mut bad = body.to_vec();
    let fields = split(body).unwrap_or_default();
    match rng.below(7) {
        5 => {
            let theirs = split(other).unwrap_or_default();
            let mut mixed = fields.clone();
            for field in theirs {
                if rng.chance(50) {
                    let at = rng.below(mixed.len() as u64 + 1) as usize;
                    mixed.insert(at, field);
                }
            }
            bad = mixed.into_iter().flat_map(|(_, _, b)| b).collect();
        }
        0 if !fields.is_empty() => {
            let (_, _, dup) = &fields[rng.below(fields.len() as u64) as usize];
            let at = [0, bad.len()][rng.below(2) as usize];
            bad.splice(at..at, dup.iter().copied());
        }
        1 if fields.len() > 1 => {
            let mut shuffled = fields.clone();
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, rng.below(i as u64 + 1) as usize);
            }
            bad = shuffled.into_iter().flat_map(|(_, _, b)| b).collect();
        }
        2 => {
            bad = fields
                .iter()
                .flat_map(|(number, wire, whole)| {
                    let f = desc
                        .get_field(*number)
                        .filter(|f| f.is_list() && *wire == 2);
                    f.and_then(|f| unpack(&f, whole))
                        .unwrap_or_else(|| whole.clone())
                })
                .collect();
        }
        3 if !bad.is_empty() => {
            let at = rng.below(bad.len() as u64) as usize;
            bad[at] = rng.next() as u8;
        }
        4 => bad.truncate(rng.below(bad.len() as u64 + 1) as usize),
        _ => (0..1 + rng.below(3)).for_each(|_| bad.push(rng.next() as u8)),
    }
    bad
}

/// Both readers of one payload; `exact`: the texts must be equal, not only the values.
/// Returns whether the direct reader wrote it (not left it to prost-reflect).
fn compare(t: &ProtobufTranscoder, payload: &[u8], exact: bool) -> bool {
    let (mut direct, mut by_value) = (String::new(), String::new());
    let a = t.to_json_direct(payload, &mut direct);
    let b = t.to_json_by_value(payload, &mut by_value);
    match (&a, &b) {
        (Ok(()), Ok(())) => {
            let parse = |s: &str| serde_json::from_str::<Json>(s).expect("JSON is written");
            if exact {
                assert_eq!(direct, by_value, "direct and by-value text of {payload:?}");
            }
            assert_eq!(
                parse(&direct),
                parse(&by_value),
                "direct and by-value JSON of {payload:?}"
            );
        }
        (Err(Failure::Bad(why)), Ok(())) => {
            panic!("direct refused ({why}) what by value reads, {by_value}, of {payload:?}")
        }
        (Ok(()), Err(e)) => panic!("direct wrote {direct} but by value {e} for {payload:?}"),
        (Err(Failure::Bad(_)) | Err(Failure::Fallback), Err(_))
        | (Err(Failure::Fallback), Ok(())) => {}
    }
    if a.is_ok() {
        spans_are_the_fields(t, payload, &direct);
    }
    // `to_json` is the direct reader where it reads, prost-reflect elsewhere.
    let mut through = String::new();
    let c = t.to_json(payload, &mut through);
    assert_eq!(c.is_ok(), b.is_ok(), "to_json of {payload:?}");
    if a.is_err() {
        // prost-reflect's maps come in hash order, which differs per decode.
        let parse = |s: &str| serde_json::from_str::<Json>(s).expect("JSON is written");
        match (c, b.clone()) {
            (Ok(()), Ok(())) => assert_eq!(parse(&through), parse(&by_value)),
            (c, b) => assert_eq!(c, b, "the same error, in prost-reflect's words"),
        }
    }
    a.is_ok()
}

/// How many records `spans_are_the_fields` checked spans of.
static SPANNED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `to_json_fields` writes what the direct reader writes and, for the first message with
/// every field written, each span is its field's value, as the mapping takes it instead of
/// scanning the object; otherwise it notes no span.
fn spans_are_the_fields(t: &ProtobufTranscoder, payload: &[u8], json: &str) {
    let names = t
        .top_fields()
        .expect("the test schemas' first messages have fields");
    let mut out = String::from("[");
    // One span there before, which must stay.
    let before: std::ops::Range<usize> = 0..0;
    let mut spans = Vec::from([before.clone()]);
    t.to_json_fields(payload, &mut out, &mut spans).unwrap();
    assert_eq!(out[1..], *json);
    let object: serde_json::Map<String, Json> = serde_json::from_str(json).unwrap();
    let first = payload.starts_with(&[0]) || payload.starts_with(&[2, 0]);
    if !first || object.len() < names.len() {
        assert_eq!(spans, Vec::from([before]), "no spans for {json}");
        return;
    }
    SPANNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(spans.len(), names.len() + 1);
    for (name, span) in names.iter().zip(&spans[1..]) {
        let field: Json = serde_json::from_str(&out[span.clone()]).expect("one JSON value");
        assert_eq!(Some(&field), object.get(name), "field {name} of {json}");
    }
}

#[test]
fn random_messages_and_their_corruptions_read_the_same_both_ways() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15, false);
    let (mut direct, mut total) = (0, 0);
    for (schema, roots) in [
        (SHOP, &["shop.Order", "shop.Refund"][..]),
        (EXTRA, &["extra.All"][..]),
        (PROTO2, &["old.Row"][..]),
    ] {
        let t = ProtobufTranscoder::new(schema).expect("a valid schema");
        for (index, root) in roots.iter().enumerate() {
            let desc = t.file.parent_pool().get_message_by_name(root).unwrap();
            for round in 0..2_000 {
                let few = round % 2 == 0;
                // Now and then every field set (as far as oneofs let), so spans are noted.
                rng.1 = round % 4 == 0;
                let mut m = rng.message(&desc, 0, few);
                if *root == "old.Row" && rng.chance(90) {
                    m.set_field_by_name("b", Value::String(rng.text()));
                }
                let body = m.encode_to_vec();
                let other = rng.message(&desc, 0, few).encode_to_vec();
                let mut payload = vec![2, 2 * index as u8];
                payload.extend_from_slice(&body);
                total += 1;
                if compare(&t, &payload, few) {
                    direct += 1;
                }
                for _ in 0..4 {
                    let mut bad = vec![2, 2 * index as u8];
                    bad.extend(corrupt(&mut rng, &desc, &body, &other));
                    compare(&t, &bad, false);
                }
            }
        }
    }
    let spanned = SPANNED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        spanned > 100,
        "only {spanned} records had every field to note"
    );
    // Most valid messages are read directly: the comparison is not only of fallbacks.
    assert!(
        direct * 10 > total * 7,
        "only {direct} of {total} read directly"
    );
}

#[test]
fn nesting_up_to_prosts_limit_reads_the_same_both_ways() {
    let t = ProtobufTranscoder::new(
        "syntax = \"proto3\";\nmessage Node { Node child = 1; int32 n = 2; }",
    )
    .unwrap();
    for depth in [1, 50, 89, 90, 91, 99, 100, 101, 102] {
        // Field 1 nested `depth` times, with an unknown field at the bottom.
        let mut body: Vec<u8> = vec![0x18, 0x01, 0x10, 0x05];
        for _ in 0..depth {
            let mut outer = vec![0x0a];
            encode_varint(body.len() as u64, &mut outer);
            outer.extend_from_slice(&body);
            body = outer;
        }
        body.insert(0, 0);
        compare(&t, &body, true);
        let mut out = String::new();
        let read = t.to_json(&body, &mut out);
        assert_eq!(read.is_ok(), depth <= 100, "depth {depth}: {read:?}");
    }
}

#[test]
fn what_prost_reflect_merges_is_left_to_it() {
    let t = ProtobufTranscoder::new(EXTRA).unwrap();
    let field =
        |number: u8, bytes: &[u8]| [&[number << 3 | 2, bytes.len() as u8][..], bytes].concat();
    let name_a = field(1, b"a"); // Leaf { name: "a" }
    let marks = [0x12, 0x01, 0x02]; // Leaf { marks: [1] }
    let leaf = |bytes: &[u8]| [&[0x42, bytes.len() as u8][..], bytes].concat(); // `leaf`, 8
                                                                                // A message field twice merges; a oneof's member, another, then the first again keeps
                                                                                // only the last; a map entry's message value twice merges.
    let twice = [leaf(&name_a), leaf(&marks)].concat();
    let again = [leaf(&name_a), vec![0x4d, 0, 0, 0x80, 0x3f], leaf(&marks)].concat();
    let entry = [field(1, b"k"), field(2, &name_a), field(2, &marks)].concat();
    let map = field(3, &entry);
    for (body, expect) in [
        (&twice, r#""leaf":{"name":"a","marks":[1]}"#),
        (&again, r#""leaf":{"name":"","marks":[1]}"#),
        (&map, r#""leaves":{"k":{"name":"a","marks":[1]}}"#),
    ] {
        let payload = [&[0u8][..], body].concat();
        assert!(matches!(
            t.to_json_direct(&payload, &mut String::new()),
            Err(Failure::Fallback)
        ));
        let mut out = String::new();
        t.to_json(&payload, &mut out).unwrap();
        assert!(out.contains(expect), "{expect} in {out}");
    }
}

#[test]
fn a_wrapped_negative_zero_is_written_as_prost_reflect_writes_it() {
    let t = ProtobufTranscoder::new(EXTRA).unwrap();
    // w_double (11) = DoubleValue { value: -0.0 }, w_float (12) = FloatValue { value: -0.0 }.
    let double = [0x09, 0, 0, 0, 0, 0, 0, 0, 0x80];
    let float = [0x0d, 0, 0, 0, 0x80];
    let body = [
        &[0u8, 11 << 3 | 2, double.len() as u8][..],
        &double,
        &[12 << 3 | 2, float.len() as u8],
        &float,
    ]
    .concat();
    compare(&t, &body, true);
    let mut out = String::new();
    t.to_json_direct(&body, &mut out).unwrap();
    assert!(out.contains(r#""w_double":0.0"#), "{out}");
}

#[test]
fn a_well_known_type_deep_in_a_record_is_decoded_with_the_record() {
    let t = ProtobufTranscoder::new(EXTRA).unwrap();
    // any_value (20) = Value { number_value (2): 1.0 }, after enough bytes that it could
    // nest past what prost leaves at this depth: decoded whole, with the same answer.
    let mut value = vec![0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f];
    // Field 20's key, 20 << 3 | 2, takes two varint bytes.
    let key = [0xa2, 0x01];
    let small = [&[0u8][..], &key, &[value.len() as u8], &value].concat();
    compare(&t, &small, true);
    let direct = t.to_json_direct(&small, &mut String::new());
    assert!(direct.is_ok(), "{direct:?}");
    // A long run of unknown fields before the number: its bytes could hide deep nesting.
    let mut padded = Vec::new();
    for _ in 0..100 {
        padded.extend([0x38, 0x01]); // unknown field 7, varint 1
    }
    padded.append(&mut value);
    let mut body = [&[0u8][..], &key].concat();
    encode_varint(padded.len() as u64, &mut body);
    body.extend_from_slice(&padded);
    compare(&t, &body, true);
    assert!(matches!(
        t.to_json_direct(&body, &mut String::new()),
        Err(Failure::Fallback)
    ));
    let mut out = String::new();
    t.to_json(&body, &mut out).unwrap();
    assert!(out.contains(r#""any_value":1.0"#), "{out}");
}
