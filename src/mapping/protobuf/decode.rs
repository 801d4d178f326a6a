//! Runs a compiled program over one message's bytes: reads the wire format (varints, zigzag,
//! fixed 32 and 64 bits, length-delimited values; packed and unpacked repeated scalars; maps
//! as repeated entries) and writes the JSON text, borrowing strings from the payload.
//!
//! Fields may come in any order and a non-repeated one more than once, but prost-reflect
//! writes them in field-number order, the last value of a scalar winning: so each message is
//! read twice, once to find where each known field's occurrences are, once to write the
//! fields in order. What prost-reflect would merge (a non-repeated message field twice), a
//! map with a key twice, groups and nesting near prost's recursion limit are left to it.

use std::collections::HashMap;
use std::ops::Range;

use base64::Engine as _;
use prost_reflect::DynamicMessage;

use super::program::{Field, Message, Program, Scalar, Shape};
use super::wire::{
    check_wire, field_key, field_value, fixed, flat_pair, next_field, packed_item, varint,
    wrapped_float, Occurrence,
};
use super::write::{default_of, has_duplicate_keys, write_float, write_str};
use crate::mapping::depth::nests_deeper_than;

/// Why the direct reader did not write a message.
#[derive(Debug)]
pub(super) enum Failure {
    /// The payload is not a valid message: prost-reflect refuses it too (and says why; this
    /// reason is for the tests).
    Bad(#[cfg_attr(not(test), allow(dead_code))] &'static str),
    /// Something prost-reflect must decide (merges, groups, deep nesting).
    Fallback,
}

/// The deepest message read directly; prost refuses past 100, and deeper records are left to
/// it so that its limit, and its error, apply exactly.
const MAX_DEPTH: usize = 90;

impl Program {
    /// Reads message `m` from `bytes` and writes its JSON. `depth` counts the messages around it.
    pub(super) fn run(
        &self,
        m: usize,
        bytes: &[u8],
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
    ) -> Result<(), Failure> {
        if depth > MAX_DEPTH {
            return Err(Failure::Fallback);
        }
        match self.messages.get(m).ok_or(Failure::Fallback)? {
            Message::Fields {
                fields,
                by_small,
                by_large,
            } => self.message_fields(
                (fields, by_small, by_large),
                bytes,
                depth,
                occurrences,
                out,
                None,
            ),
            Message::Timestamp => {
                let (seconds, nanos) = flat_pair(bytes)?;
                let seconds = seconds.map_or(0, |v| v as i64);
                let nanos = nanos.map_or(0, |v| v as i32);
                if !(-62_135_596_800..=253_402_300_799).contains(&seconds) {
                    // prost-reflect refuses it only where it writes it, not where a later
                    // value replaces it (a map key twice, a oneof's other member).
                    return Err(Failure::Fallback);
                }
                let ts = prost_reflect::prost_types::Timestamp { seconds, nanos };
                use std::fmt::Write as _;
                let _ = write!(out, "\"{ts}\"");
                Ok(())
            }
            Message::Wrapper(kind) => {
                let mut last = None;
                let mut pos = 0;
                while pos < bytes.len() {
                    let (number, wire, range) = next_field(bytes, &mut pos)?;
                    if number == 1 {
                        check_wire(*kind, wire)?;
                        // Every occurrence is read (prost-reflect would refuse a bad one).
                        let at = out.len();
                        self.scalar(*kind, &bytes[range.clone()], depth, occurrences, out)?;
                        out.truncate(at);
                        last = Some(range);
                    }
                }
                match (kind, last) {
                    (Scalar::Float | Scalar::Double, Some(range)) => {
                        // NaN and the infinities as proto3's JSON writes a wrapper: as the
                        // value it wraps (prost-reflect writes null, which would lose them).
                        let (wide, narrow) = wrapped_float(*kind, &bytes[range])?;
                        write_float(wide, narrow, out);
                    }
                    (_, Some(range)) => {
                        self.scalar(*kind, &bytes[range], depth, occurrences, out)?;
                    }
                    (_, None) => out.push_str(default_of(*kind)),
                }
                Ok(())
            }
            Message::ByValue(desc) => {
                // Decoded on its own it would have prost's whole recursion budget (100), not
                // what is left at this depth: unless its bytes cannot nest that deep (each
                // level takes at least a tag and a length), the record is decoded whole.
                if depth + bytes.len() / 2 + 5 > 100 {
                    return Err(Failure::Fallback);
                }
                let message = DynamicMessage::decode(desc.clone(), bytes)
                    .map_err(|_| Failure::Bad("a well-known type does not decode"))?;
                let mut json = Vec::new();
                message
                    .serialize_with_options(
                        &mut serde_json::Serializer::new(&mut json),
                        &super::serialize_options(),
                    )
                    // Refused only where written, as a timestamp out of range.
                    .map_err(|_| Failure::Fallback)?;
                // Decoded on its own, it had prost's whole recursion budget: a deep one is
                // decoded with the record instead.
                let budget = (100 - depth).saturating_sub(4) / 2;
                let json = String::from_utf8(json).map_err(|_| Failure::Fallback)?;
                if nests_deeper_than(json.as_bytes(), budget) {
                    return Err(Failure::Fallback);
                }
                out.push_str(&json);
                Ok(())
            }
            Message::Fallback => Err(Failure::Fallback),
        }
    }

    /// A message of fields: where each field occurs, then the fields in order. With `spans`,
    /// where each field's value went (nothing when a field is absent: it has no value).
    #[allow(clippy::type_complexity)]
    fn message_fields(
        &self,
        (fields, by_small, by_large): (&[Field], &[u32], &HashMap<u32, u32>),
        bytes: &[u8],
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
        spans: Option<&mut Vec<Range<usize>>>,
    ) -> Result<(), Failure> {
        let base = occurrences.len();
        let mut pos = 0;
        while pos < bytes.len() {
            let (number, wire) = field_key(bytes, &mut pos)?;
            let field = Field::lookup(by_small, by_large, number);
            let known = fields.get(field as usize);
            if wire != 2 && known.is_some_and(|f| matches!(f.shape, Shape::Map { .. })) {
                // prost reads any map entry as length-delimited: its call.
                return Err(Failure::Fallback);
            }
            let range = field_value(bytes, &mut pos, wire)?;
            if known.is_some() {
                occurrences.push(Occurrence {
                    field,
                    wire,
                    start: range.start,
                    end: range.end,
                });
            }
        }
        // Stable: each field's occurrences stay in payload order (usually already sorted).
        occurrences[base..].sort_by_key(|o| o.field);
        let written = self.fields((fields, bytes, base), depth, occurrences, out, spans);
        occurrences.truncate(base);
        written
    }

    /// The record's message, noting in `spans` where each top-level field's value went when
    /// every field has one.
    pub(super) fn run_top(
        &self,
        bytes: &[u8],
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
        spans: &mut Vec<Range<usize>>,
    ) -> Result<(), Failure> {
        match self.messages.get(self.root) {
            Some(Message::Fields {
                fields,
                by_small,
                by_large,
            }) => self.message_fields(
                (fields, by_small, by_large),
                bytes,
                0,
                occurrences,
                out,
                Some(spans),
            ),
            _ => self.run(self.root, bytes, 0, occurrences, out),
        }
    }

    /// Writes a message's fields from the occurrences found from `base` on (sorted by field).
    fn fields(
        &self,
        (fields, bytes, base): (&[Field], &[u8], usize),
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
        mut spans: Option<&mut Vec<Range<usize>>>,
    ) -> Result<(), Failure> {
        let spans_from = spans.as_ref().map_or(0, |s| s.len());
        let mut every = true;
        out.push('{');
        let mut first = true;
        let mut comma = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
        };
        let end = occurrences.len();
        let mut cursor = base;
        for (i, field) in fields.iter().enumerate() {
            let mark = out.len();
            let from = cursor;
            while cursor < end && occurrences[cursor].field == i as u32 {
                cursor += 1;
            }
            let (from, to) = (from, cursor);
            if from == to {
                if !field.presence {
                    comma(out);
                    out.push_str(&field.key);
                    out.push_str(&field.default);
                }
            } else {
                self.field(
                    (i, field, fields),
                    bytes,
                    (base, from, to, end),
                    depth,
                    occurrences,
                    out,
                    &mut comma,
                )?;
            }
            if let Some(spans) = spans.as_deref_mut() {
                if out.len() > mark {
                    let comma = usize::from(out.as_bytes()[mark] == b',');
                    spans.push(mark + comma + field.key.len()..out.len());
                } else {
                    every = false;
                }
            }
        }
        if let (Some(spans), false) = (spans, every) {
            spans.truncate(spans_from);
        }
        out.push('}');
        Ok(())
    }

    /// One field with occurrences `from..to` (of the message's `base..end`).
    #[allow(clippy::too_many_arguments)]
    fn field(
        &self,
        (i, field, fields): (usize, &Field, &[Field]),
        bytes: &[u8],
        (base, from, to, end): (usize, usize, usize, usize),
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
        comma: &mut impl FnMut(&mut String),
    ) -> Result<(), Failure> {
        match &field.shape {
            Shape::Single => {
                if matches!(field.kind, Scalar::Message(_)) && to - from > 1 {
                    return Err(Failure::Fallback); // merged by prost-reflect
                }
                let wins = match field.oneof {
                    None => true,
                    Some(o) => {
                        let last = occurrences[to - 1].start;
                        !occurrences[base..end].iter().any(|x| {
                            x.start > last
                                && x.field != i as u32
                                && fields[x.field as usize].oneof == Some(o)
                        })
                    }
                };
                for k in from..to {
                    let o = occurrences[k];
                    check_wire(field.kind, o.wire)?;
                    let at = out.len();
                    let written = k + 1 == to && wins;
                    if written {
                        comma(out);
                        out.push_str(&field.key);
                    }
                    self.scalar(field.kind, &bytes[o.start..o.end], depth, occurrences, out)?;
                    if !written {
                        out.truncate(at);
                    }
                }
            }
            Shape::List => {
                comma(out);
                out.push_str(&field.key);
                out.push('[');
                let mut item = 0;
                for k in from..to {
                    let o = occurrences[k];
                    let value = &bytes[o.start..o.end];
                    if o.wire == 2 && field.kind.packable() {
                        let mut pos = 0;
                        while pos < value.len() {
                            let one = packed_item(field.kind, value, &mut pos)?;
                            if item > 0 {
                                out.push(',');
                            }
                            item += 1;
                            self.scalar(field.kind, one, depth, occurrences, out)?;
                        }
                    } else {
                        check_wire(field.kind, o.wire)?;
                        if item > 0 {
                            out.push(',');
                        }
                        item += 1;
                        self.scalar(field.kind, value, depth, occurrences, out)?;
                    }
                }
                out.push(']');
            }
            Shape::Map {
                key,
                value,
                value_default,
            } => {
                comma(out);
                out.push_str(&field.key);
                out.push('{');
                let mut keys: Vec<Range<usize>> = Vec::new();
                for k in from..to {
                    let o = occurrences[k];
                    if k > from {
                        out.push(',');
                    }
                    let at = out.len();
                    self.entry(
                        (*key, *value, value_default),
                        &bytes[o.start..o.end],
                        depth,
                        occurrences,
                        out,
                    )?;
                    if to - from > 1 {
                        keys.push(at..out.len());
                    }
                }
                if has_duplicate_keys(out, &keys) {
                    return Err(Failure::Fallback); // the last entry wins, where the first was
                }
                out.push('}');
            }
        }
        Ok(())
    }

    /// One map entry, `"key":value`, the last key and value of the entry winning.
    fn entry(
        &self,
        (key, value, value_default): (Scalar, Scalar, &str),
        bytes: &[u8],
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
    ) -> Result<(), Failure> {
        let (mut key_at, mut value_at) = (None, None);
        let mut values = 0;
        let mut pos = 0;
        while pos < bytes.len() {
            let (number, wire, range) = next_field(bytes, &mut pos)?;
            let kind = match number {
                1 => key,
                2 => value,
                _ => continue,
            };
            check_wire(kind, wire)?;
            if number == 2 {
                values += 1;
                if values > 1 && matches!(value, Scalar::Message(_)) {
                    return Err(Failure::Fallback); // merged by prost-reflect
                }
            }
            // Every occurrence is read: a bad one is refused even when another follows. (A
            // message value comes once, and is read where it is written.)
            if !matches!(kind, Scalar::Message(_)) {
                let at = out.len();
                self.scalar(kind, &bytes[range.clone()], depth, occurrences, out)?;
                out.truncate(at);
            }
            *(if number == 1 {
                &mut key_at
            } else {
                &mut value_at
            }) = Some(range);
        }
        // Map keys are JSON strings; string keys already are.
        let quote = key != Scalar::String;
        if quote {
            out.push('"');
        }
        match key_at {
            Some(range) => self.scalar(key, &bytes[range], depth, occurrences, out)?,
            None => out.push_str(default_of(key)),
        }
        if quote {
            out.push('"');
        }
        out.push(':');
        match (value_at, value) {
            (Some(range), _) => self.scalar(value, &bytes[range], depth, occurrences, out),
            (None, Scalar::Message(m)) => self.run(m, &[], depth + 1, occurrences, out),
            (None, _) => {
                out.push_str(value_default);
                Ok(())
            }
        }
    }

    /// One value of `kind` from its bytes (a varint's, a fixed width's, or a length-delimited
    /// value's content).
    fn scalar(
        &self,
        kind: Scalar,
        b: &[u8],
        depth: usize,
        occurrences: &mut Vec<Occurrence>,
        out: &mut String,
    ) -> Result<(), Failure> {
        let v = || varint(b, &mut 0);
        let mut digits = itoa::Buffer::new();
        match kind {
            Scalar::Int32 => out.push_str(digits.format(v()? as i32)),
            Scalar::Int64 => out.push_str(digits.format(v()? as i64)),
            Scalar::Uint32 => out.push_str(digits.format(v()? as u32)),
            Scalar::Uint64 => out.push_str(digits.format(v()?)),
            Scalar::Sint32 => {
                let n = v()? as u32;
                out.push_str(digits.format(((n >> 1) as i32) ^ -((n & 1) as i32)));
            }
            Scalar::Sint64 => {
                let n = v()?;
                out.push_str(digits.format(((n >> 1) as i64) ^ -((n & 1) as i64)));
            }
            Scalar::Bool => out.push_str(if v()? != 0 { "true" } else { "false" }),
            Scalar::Enum(e) => {
                let n = v()? as i32;
                match self.enums.get(e) {
                    Some(None) => out.push_str("null"),
                    Some(Some(names)) => match names.binary_search_by_key(&n, |(k, _)| *k) {
                        Ok(i) => out.push_str(&names[i].1),
                        Err(_) => out.push_str(digits.format(n)),
                    },
                    None => return Err(Failure::Fallback),
                }
            }
            Scalar::Fixed32 => out.push_str(digits.format(u32::from_le_bytes(fixed(b)?))),
            Scalar::Sfixed32 => out.push_str(digits.format(i32::from_le_bytes(fixed(b)?))),
            Scalar::Fixed64 => out.push_str(digits.format(u64::from_le_bytes(fixed(b)?))),
            Scalar::Sfixed64 => out.push_str(digits.format(i64::from_le_bytes(fixed(b)?))),
            Scalar::Float => {
                let f = f32::from_le_bytes(fixed(b)?);
                write_float(f64::from(f), Some(f), out);
            }
            Scalar::Double => write_float(f64::from_le_bytes(fixed(b)?), None, out),
            Scalar::String => {
                let s = std::str::from_utf8(b).map_err(|_| Failure::Bad("a string not UTF-8"))?;
                write_str(s, out);
            }
            Scalar::Bytes => {
                out.push('"');
                base64::engine::general_purpose::STANDARD.encode_string(b, out);
                out.push('"');
            }
            Scalar::Message(m) => self.run(m, b, depth + 1, occurrences, out)?,
        }
        Ok(())
    }
}
