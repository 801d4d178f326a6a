//! Runs a compiled program over one payload: reads the Avro binary encoding (zig-zag
//! varints, length-prefixed bytes and strings, blocked arrays and maps, union branch indices)
//! and writes the JSON text as it goes, borrowing strings from the payload.
//!
//! It reads what apache-avro's decoder reads, with its checks: an `int` beyond 32 bits, a
//! boolean byte other than 0 or 1, invalid UTF-8, a negative length, a length or block count
//! above its allocation limit, an enum or union index out of range are errors. Where they
//! differ: a payload that ends early is always an error (apache-avro reads some values at the
//! end of its input as null); a map's entries are written in payload order, a repeated key
//! each time (apache-avro keeps the last in a hash map of its own order; JSON readers, jsonb
//! among them, take the last too); a 16-byte `fixed` uuid is its raw bytes.

use std::fmt::Write as _;

use base64::Engine as _;

use super::program::{Blob, Number, Step, Text};
use super::write::{
    push_int, write_date, write_decimal, write_float, write_json_string, write_micro_duration,
    write_str, write_time_of_day, write_timestamp,
};
use super::{AvroTranscoder, Payload, MAX_ALLOCATION_BYTES, MAX_JSON_DEPTH};

/// The most JSON one record may become. An array of nulls (or of empty records) costs no
/// payload bytes per item, so a few bytes of a bad payload could claim billions of items.
pub(super) const MAX_JSON_BYTES: usize = 256 << 20;

/// Why a payload could not be read.
#[derive(Debug)]
pub(super) enum Failure {
    /// The payload ended before the datum did.
    EndsEarly,
    /// The payload is not of its schema, or a value is out of range; says why.
    Bad(String),
}

impl From<String> for Failure {
    fn from(reason: String) -> Self {
        Failure::Bad(reason)
    }
}

/// The rest of the payload.
pub(super) struct Input<'a> {
    /// What is still unread; it only ever shrinks from the front.
    pub(super) rest: &'a [u8],
}

impl<'a> Input<'a> {
    /// The next `n` bytes, borrowed.
    fn take(&mut self, n: usize) -> Result<&'a [u8], Failure> {
        if n > self.rest.len() {
            return Err(Failure::EndsEarly);
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    /// The next `N` bytes, for fixed-size values.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Failure> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A zig-zag varint of at most ten bytes, as apache-avro reads it.
    fn long(&mut self) -> Result<i64, Failure> {
        let mut n = 0u64;
        for i in 0..10 {
            let [b] = self.array::<1>()?;
            n |= u64::from(b & 0x7f) << (i * 7);
            if b & 0x80 == 0 {
                return Ok((n >> 1) as i64 ^ -((n & 1) as i64));
            }
        }
        Err(Failure::Bad(
            "a variable-length integer is longer than 10 bytes".into(),
        ))
    }

    /// An `int`: a varint that must fit 32 bits, as apache-avro's `zag_i32`.
    fn int(&mut self) -> Result<i32, Failure> {
        let n = self.long()?;
        i32::try_from(n).map_err(|_| Failure::Bad(format!("int {n} does not fit 32 bits")))
    }

    /// A length: never negative.
    fn len(&mut self) -> Result<usize, Failure> {
        let n = self.long()?;
        let n = u64::try_from(n).map_err(|_| Failure::Bad(format!("negative length {n}")))?;
        bounded(n, "length")
    }

    /// Length-prefixed bytes, borrowed.
    fn bytes(&mut self) -> Result<&'a [u8], Failure> {
        let n = self.len()?;
        self.take(n)
    }

    /// A length-prefixed string, borrowed once it is checked to be UTF-8.
    fn str(&mut self) -> Result<&'a str, Failure> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|e| Failure::Bad(format!("a string is not UTF-8: {e}")))
    }

    /// An array or map block's item count; 0 ends the value. A negative count is followed by
    /// the block's size in bytes, which is not needed.
    fn block(&mut self) -> Result<usize, Failure> {
        let n = self.long()?;
        if n < 0 {
            self.long()?;
        }
        bounded(
            n.checked_neg().map_or(u64::MAX, i64::unsigned_abs),
            "block count",
        )
    }
}

impl AvroTranscoder {
    /// Reads the payload into `out`; with `spans`, notes where each top-level field went.
    pub(super) fn read(
        &self,
        payload: &[u8],
        out: &mut String,
        spans: Option<&mut Vec<std::ops::Range<usize>>>,
    ) -> Result<(), String> {
        let start = out.len();
        let mut input = Input { rest: payload };
        let read = match (self.steps.get(self.top), spans) {
            (Some(Step::Record(fields)), Some(spans)) => {
                out.push('{');
                let mut read = Ok(());
                for (i, (key, field)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(key);
                    let at = out.len();
                    // The fields of the top-level record are one level down.
                    read = self.run(*field, &mut input, 1, out);
                    if read.is_err() {
                        break;
                    }
                    spans.push(at..out.len());
                }
                out.push('}');
                read
            }
            _ => self.run(self.top, &mut input, 0, out),
        };
        let result = match read {
            Err(Failure::EndsEarly) => Err(ends_early(payload)),
            Err(Failure::Bad(reason)) => {
                Err(format!("the payload is not Avro of its schema: {reason}"))
            }
            Ok(()) if !input.rest.is_empty() => Err(trailing(input.rest)),
            Ok(()) => Ok(()),
        };
        result.inspect_err(|_| out.truncate(start))
    }
}

/// The error for a payload shorter than its datum.
pub(super) fn ends_early(payload: &[u8]) -> String {
    format!(
        "the Avro payload ends early ({} bytes): it is truncated or not of this schema",
        payload.len()
    )
}

/// The error for bytes after the datum.
pub(super) fn trailing(rest: &[u8]) -> String {
    format!(
        "{} bytes follow the Avro datum: the payload is not of this schema",
        rest.len()
    )
}

impl AvroTranscoder {
    /// Reads the value of step `at` and writes it as JSON. `depth` counts the arrays, maps and
    /// records around it, bounded as the JSON mapping bounds nesting.
    pub(super) fn run(
        &self,
        at: usize,
        input: &mut Input<'_>,
        depth: usize,
        out: &mut String,
    ) -> Result<(), Failure> {
        let nested = || {
            if depth >= MAX_JSON_DEPTH {
                Err(Failure::Bad(format!(
                    "the value nests deeper than {MAX_JSON_DEPTH} levels"
                )))
            } else {
                Ok(depth + 1)
            }
        };
        let Some(step) = self.steps.get(at) else {
            return Err(Failure::Bad(format!("no step {at}")));
        };
        match step {
            Step::Null => out.push_str("null"),
            Step::Boolean => match input.array::<1>()? {
                [0] => out.push_str("false"),
                [1] => out.push_str("true"),
                [b] => return Err(Failure::Bad(format!("{b:#04x} is not a boolean"))),
            },
            Step::Int(number) => write_number(i64::from(input.int()?), *number, out)?,
            Step::Long(number) => write_number(input.long()?, *number, out)?,
            Step::Float => {
                let f = f32::from_le_bytes(input.array()?);
                write_float(f, f64::from(f), out);
            }
            Step::Double => {
                let f = f64::from_le_bytes(input.array()?);
                write_float(f, f, out);
            }
            Step::Bytes(blob) => write_blob(input.bytes()?, *blob, out)?,
            Step::Fixed(size, blob) => write_blob(input.take(*size)?, *blob, out)?,
            Step::String(Text::Plain) => write_str(input.str()?, out),
            Step::String(Text::Json) => write_json_string(input.str()?, depth, out)?,
            Step::String(Text::Uuid) => {
                let bytes = input.bytes()?;
                let uuid = if bytes.len() == 16 {
                    uuid::Uuid::from_slice(bytes).map_err(|e| Failure::Bad(e.to_string()))?
                } else {
                    std::str::from_utf8(bytes)
                        .ok()
                        .and_then(|s| uuid::Uuid::parse_str(s).ok())
                        .ok_or_else(|| Failure::Bad("a uuid string is not a UUID".into()))?
                };
                let _ = write!(out, "\"{}\"", uuid.hyphenated());
            }
            Step::UuidFixed => {
                let uuid = uuid::Uuid::from_bytes(input.array()?);
                let _ = write!(out, "\"{}\"", uuid.hyphenated());
            }
            Step::Duration => {
                nested()?;
                let b: [u8; 12] = input.array()?;
                let part = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                let _ = write!(
                    out,
                    r#"{{"months":{},"days":{},"millis":{}}}"#,
                    part(0),
                    part(4),
                    part(8)
                );
            }
            Step::Enum(symbols) => {
                let i = input.int()?;
                let symbol = usize::try_from(i).ok().and_then(|i| symbols.get(i));
                out.push_str(symbol.ok_or_else(|| {
                    Failure::Bad(format!(
                        "enum index {i} is not one of the {} symbols",
                        symbols.len()
                    ))
                })?);
            }
            Step::Union(branches) => {
                let i = input.long()?;
                let branch = usize::try_from(i).ok().and_then(|i| branches.get(i));
                let branch = branch.ok_or_else(|| {
                    Failure::Bad(format!(
                        "union branch {i} is not one of its {} branches",
                        branches.len()
                    ))
                })?;
                self.run(*branch, input, depth, out)?;
            }
            Step::Array(item) => {
                let depth = nested()?;
                out.push('[');
                let mut first = true;
                loop {
                    let n = input.block()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        bound(out)?;
                        if !std::mem::take(&mut first) {
                            out.push(',');
                        }
                        self.run(*item, input, depth, out)?;
                    }
                }
                out.push(']');
            }
            Step::Map(each) => {
                let depth = nested()?;
                out.push('{');
                let mut first = true;
                loop {
                    let n = input.block()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        bound(out)?;
                        if !std::mem::take(&mut first) {
                            out.push(',');
                        }
                        write_str(input.str()?, out);
                        out.push(':');
                        self.run(*each, input, depth, out)?;
                    }
                }
                out.push('}');
            }
            Step::Record(fields) => {
                let depth = nested()?;
                out.push('{');
                for (i, (key, field)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(key);
                    self.run(*field, input, depth, out)?;
                }
                out.push('}');
            }
            Step::ByValue(schema, node) => {
                let mut reader = Payload {
                    rest: input.rest,
                    ran_out: false,
                };
                let decoded =
                    apache_avro::from_avro_datum_schemata(schema, Vec::new(), &mut reader, None);
                if reader.ran_out {
                    return Err(Failure::EndsEarly);
                }
                let value = decoded.map_err(|e| Failure::Bad(e.to_string()))?;
                input.rest = reader.rest;
                self.write(&value, *node, depth, out)?;
            }
        }
        Ok(())
    }
}

/// An integer as its step (or plan node) says.
pub(super) fn write_number(n: i64, number: Number, out: &mut String) -> Result<(), String> {
    match number {
        Number::Plain => push_int(out, n),
        Number::Days => write_date(n, out)?,
        Number::TimeOfDay(unit) => write_time_of_day(n, unit, out)?,
        Number::MicroDuration => write_micro_duration(n, out),
        Number::Epoch { unit, zone } => write_timestamp(n, unit, zone, out)?,
    }
    Ok(())
}

/// Bytes as their step says.
fn write_blob(bytes: &[u8], blob: Blob, out: &mut String) -> Result<(), String> {
    match blob {
        Blob::Decimal(scale) => write_decimal(bytes, scale, out)?,
        Blob::Base64 => {
            out.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(bytes, out);
            out.push('"');
        }
    }
    Ok(())
}

/// A length or count as apache-avro bounds it (`safe_len`): at most `MAX_ALLOCATION_BYTES`,
/// whatever the payload holds, so both read the same records.
fn bounded(n: u64, what: &str) -> Result<usize, Failure> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_ALLOCATION_BYTES)
        .ok_or_else(|| {
            Failure::Bad(format!(
                "{what} {n} is more than {MAX_ALLOCATION_BYTES} (a corrupt payload)"
            ))
        })
}

/// Stops a record whose JSON has grown past `MAX_JSON_BYTES`.
fn bound(out: &str) -> Result<(), Failure> {
    if out.len() > MAX_JSON_BYTES {
        return Err(Failure::Bad(format!(
            "the value becomes more than {} MiB of JSON",
            MAX_JSON_BYTES >> 20
        )));
    }
    Ok(())
}
