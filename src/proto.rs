//! Registered `.proto` schemas, shared by the mapping (which transcodes records) and `ddl`
//! (which creates columns from a record's message): compiling the registry's text, with the
//! well-known types, and Confluent's message-index array, which names the message a record is.

use prost_reflect::{FileDescriptor, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The name the registered schema is compiled under (the registry gives it none).
const SCHEMA_FILE: &str = "registered.proto";

/// The deepest message-index array taken: one level per nesting of message declarations, so
/// a longer array is a corrupt payload, not a schema (and the array stays on the stack).
pub(crate) const MAX_INDEXES: usize = 32;

/// Compiles the registered `.proto` text; its errors say where in the text it is wrong.
pub(crate) fn compile(proto_source: &str) -> Result<FileDescriptor, String> {
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
    Ok(file)
}

/// Confluent's indexes: the first into the file's top-level messages, each next one into the
/// previous message's nested messages, in declaration order (as the descriptor lists them,
/// which counts the entry message protoc makes for each `map` field).
pub(crate) fn resolve(file: &FileDescriptor, path: &[u32]) -> Result<MessageDescriptor, String> {
    let (&first, rest) = path
        .split_first()
        .ok_or("the message-index array is empty")?;
    let top = file.messages().len();
    let mut message = file.messages().nth(first as usize).ok_or_else(|| {
        format!("message index {path:?} names no message: the schema has {top} top-level messages")
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

/// The message the index array at the front of `after_id` (a record after its schema id)
/// names, as the record's payload is read.
pub(crate) fn record_message(
    file: &FileDescriptor,
    after_id: &[u8],
) -> Result<MessageDescriptor, String> {
    let mut indexes = [0u32; MAX_INDEXES];
    let (depth, _) = message_indexes(after_id, &mut indexes)?;
    resolve(file, &indexes[..depth])
}

/// How many bytes the message-index array at the start of `payload` takes (what tells one
/// message of a schema from another), without resolving it; `None` when it is malformed.
pub(crate) fn message_index_len(payload: &[u8]) -> Option<usize> {
    let mut indexes = [0u32; MAX_INDEXES];
    let (_, body) = message_indexes(payload, &mut indexes).ok()?;
    Some(payload.len() - body.len())
}

/// Reads the message-index array at the start of `payload` into `indexes`: its length and the
/// message bytes after it. A zigzag varint count, then that many zigzag varint indexes; a
/// count of 0 (the single byte 0) stands for `[0]`, the first message.
pub(crate) fn message_indexes<'p>(
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
