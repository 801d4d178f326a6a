//! Protobuf records (Confluent's wire format) into JSON text, so they map like JSON records.
//!
//! The registry hands out `.proto` source, not descriptors, so the schema is compiled here at
//! run time (protox, which also supplies the `google/protobuf/*.proto` well-known types) and
//! each payload is decoded dynamically (prost-reflect). The JSON is prost-reflect's proto3
//! JSON mapping with the options that make it follow `transcode`'s conventions:
//! - field names as declared in the `.proto`, not lowerCamelCase: columns map by field name;
//! - `int64`, `uint64` and their kin as JSON numbers, not the mapping's strings: numeric
//!   columns take both, numbers are what every other format gives them, and the exact digits
//!   are written either way (the sink never reads them through a double);
//! - every field without presence (a proto3 scalar, enum, repeated or map field) is written,
//!   with its default when unset: proto3 cannot tell an unset scalar from its default, so
//!   `0`, `""` or `false` reaches the column rather than NULL or the column's default;
//! - a field with presence (proto3 `optional`, a `oneof` member, a message field, any proto2
//!   singular field) is left out when absent, so its column gets NULL or its default;
//! - bytes as base64, enums by value name (a number the schema does not name stays a number),
//!   `Timestamp` as RFC 3339 in UTC with its full precision, wrappers (`StringValue`, …) as
//!   their value, `Struct`/`Value`/`ListValue` as the JSON they hold, NaN and infinities as
//!   `"NaN"`, `"Infinity"`, `"-Infinity"`, map keys as strings; `Duration` and `FieldMask`
//!   keep the proto3 JSON strings (`"1.5s"`), which no column type converts.
//!
//! Fields the schema does not know (a newer writer's) are skipped. Imports other than the
//! well-known types (schema references) are not resolved: such a schema fails to compile.

use std::collections::HashMap;
use std::sync::RwLock;

use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use super::transcode::Transcoder;

/// The name the registered schema is compiled under (the registry gives it none).
const SCHEMA_FILE: &str = "registered.proto";

/// The deepest message-index array taken: one level per nesting of message declarations, so
/// a longer array is a corrupt payload, not a schema (and the array stays on the stack).
const MAX_INDEXES: usize = 32;

/// A `.proto` schema compiled for decoding its records.
#[allow(dead_code)] // wired into encode with the registry formats
pub(crate) struct ProtobufTranscoder {
    file: FileDescriptor,
    /// Message type per message-index path, resolved once: records of one schema nearly always
    /// name the same message, so the walk through the descriptors is paid once.
    resolved: RwLock<HashMap<Box<[u32]>, MessageDescriptor>>,
    options: SerializeOptions,
}

#[allow(dead_code)] // wired into encode with the registry formats
impl ProtobufTranscoder {
    /// Compiles the registered `.proto` text; its errors say where in the text it is wrong.
    pub(crate) fn new(proto_source: &str) -> Result<Self, String> {
        let mut resolver = ChainFileResolver::new();
        resolver.add(Registered(proto_source.to_owned()));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(SCHEMA_FILE).map_err(|e| {
            format!(
                "the .proto schema does not compile: {}",
                describe(&e, proto_source)
            )
        })?;
        let file = compiler
            .descriptor_pool()
            .get_file_by_name(SCHEMA_FILE)
            .ok_or("the .proto schema compiled to no file")?;
        if file.messages().len() == 0 {
            return Err("the .proto schema declares no message".into());
        }
        Ok(Self {
            file,
            resolved: RwLock::new(HashMap::new()),
            options: SerializeOptions::new()
                .use_proto_field_name(true)
                .stringify_64_bit_integers(false)
                .skip_default_fields(false),
        })
    }

    /// The message type an index path names, from the cache or by walking the descriptors.
    fn message(&self, path: &[u32]) -> Result<MessageDescriptor, String> {
        // A poisoned lock only means another thread panicked mid-insert of a complete value;
        // the map is still sound.
        if let Some(found) = self
            .resolved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
        {
            return Ok(found.clone());
        }
        let found = self.resolve(path)?;
        self.resolved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.into(), found.clone());
        Ok(found)
    }

    /// Confluent's indexes: the first into the file's top-level messages, each next one into
    /// the previous message's nested messages, in declaration order (as the descriptor lists
    /// them, which counts the entry message protoc makes for each `map` field).
    fn resolve(&self, path: &[u32]) -> Result<MessageDescriptor, String> {
        let (&first, rest) = path
            .split_first()
            .ok_or("the message-index array is empty")?;
        let top = self.file.messages().len();
        let mut message = self.file.messages().nth(first as usize).ok_or_else(|| {
            format!(
                "message index {path:?} names no message: the schema has {top} top-level messages"
            )
        })?;
        for &i in rest {
            let nested = message.child_messages().len();
            let next = message.child_messages().nth(i as usize).ok_or_else(|| {
                format!(
                    "message index {path:?} names no message: {} has {nested} nested messages",
                    message.full_name()
                )
            })?;
            message = next;
        }
        Ok(message)
    }
}

impl Transcoder for ProtobufTranscoder {
    fn to_json(&self, payload: &[u8], out: &mut String) -> Result<(), String> {
        let mut indexes = [0u32; MAX_INDEXES];
        let (depth, body) = message_indexes(payload, &mut indexes)?;
        let desc = self.message(&indexes[..depth])?;
        let message = DynamicMessage::decode(desc.clone(), body).map_err(|e| {
            format!(
                "the payload is not a valid {} message: {e}",
                desc.full_name()
            )
        })?;
        // Serialised into `out`'s own buffer: no copy of the JSON per record.
        let start = out.len();
        let mut buf = std::mem::take(out).into_bytes();
        let written = message
            .serialize_with_options(&mut serde_json::Serializer::new(&mut buf), &self.options);
        if written.is_err() {
            buf.truncate(start);
        }
        *out = String::from_utf8(buf).map_err(|e| {
            // serde_json writes UTF-8 only; kept as an error all the same, never a panic.
            format!(
                "the JSON written for {} is not UTF-8: {e}",
                desc.full_name()
            )
        })?;
        written.map_err(|e| format!("{} cannot be written as JSON: {e}", desc.full_name()))
    }
}

/// Reads the message-index array at the start of `payload` into `indexes`: its length and the
/// message bytes after it. A zigzag varint count, then that many zigzag varint indexes; a
/// count of 0 (the single byte 0) stands for `[0]`, the first message.
fn message_indexes<'p>(
    payload: &'p [u8],
    indexes: &mut [u32; MAX_INDEXES],
) -> Result<(usize, &'p [u8]), String> {
    let mut rest = payload;
    let count = zigzag_varint(&mut rest, "count")?;
    let count = u32::try_from(count)
        .map_err(|_| format!("the message-index array has a negative count ({count})"))?
        as usize;
    if count == 0 {
        return Ok((1, rest)); // `indexes` starts zeroed: [0]
    }
    if count > MAX_INDEXES {
        return Err(format!(
            "the message-index array claims {count} entries; more than {MAX_INDEXES} levels of nested messages are not taken"
        ));
    }
    for slot in indexes.iter_mut().take(count) {
        let index = zigzag_varint(&mut rest, "index")?;
        *slot = u32::try_from(index)
            .map_err(|_| format!("the message-index array has a negative index ({index})"))?;
    }
    Ok((count, rest))
}

/// One zigzag varint of at most 32 bits (Java's `ByteUtils.readVarint`, as Confluent's
/// serializer writes them), consumed from the front of `rest`.
fn zigzag_varint(rest: &mut &[u8], what: &str) -> Result<i32, String> {
    let mut value: u32 = 0;
    for (i, &byte) in rest.iter().enumerate().take(5) {
        if i == 4 && byte > 0x0f {
            break; // bits past 32
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *rest = &rest[i + 1..];
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    if rest.len() < 5 && rest.iter().all(|b| b & 0x80 != 0) {
        Err(format!(
            "the payload ends inside the message-index array (its {what})"
        ))
    } else {
        Err(format!(
            "the message-index array's {what} is not a 32-bit varint"
        ))
    }
}

/// protox's message, with the line and column in `source` that its first label points at
/// (the registry's schema text is all an operator has to go on).
fn describe(e: &protox::Error, source: &str) -> String {
    use miette::Diagnostic as _;
    let at = e
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset())
        .filter(|&offset| offset <= source.len() && source.is_char_boundary(offset));
    match at {
        Some(offset) => {
            let before = &source[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {e}")
        }
        None => e.to_string(),
    }
}

/// The registered schema as the one source file the compiler reads; every other name goes on
/// down the chain (the well-known types) or is not found.
struct Registered(String);

impl FileResolver for Registered {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == SCHEMA_FILE {
            File::from_source(name, &self.0)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}
