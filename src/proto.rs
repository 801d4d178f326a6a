//! Registered `.proto` schemas, shared by the mapping (which transcodes records) and `ddl`
//! (which creates columns from a record's message): compiling the registry's text, with the
//! well-known types and the schemas it references, and Confluent's message-index array, which
//! names the message a record is.
//!
//! A schema is registered in one of two forms, and the registry hands it back as it came:
//! `.proto` source (Java's serializer, hand registrations) or the base64 of a serialized
//! `FileDescriptorProto` (confluent-kafka's Python, Go and .NET serializers). Both are taken,
//! for the schema and for each file it imports.

use base64::Engine as _;
use prost_reflect::{FileDescriptor, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use crate::registry::{Import, RegisteredSchema};

/// The name a `.proto` source schema is compiled under (the registry gives it none).
const SCHEMA_FILE: &str = "registered.proto";

/// The deepest message-index array taken: one level per nesting of message declarations, so
/// a longer array is a corrupt payload, not a schema (and the array stays on the stack).
pub(crate) const MAX_INDEXES: usize = 32;

/// Compiles a registered schema that imports nothing but the well-known types.
#[cfg(test)]
pub(crate) fn compile(proto_source: &str) -> Result<FileDescriptor, String> {
    compile_with(proto_source, &[])
}

/// Compiles a registered schema with the schemas its references brought.
pub(crate) fn compile_registered(schema: &RegisteredSchema) -> Result<FileDescriptor, String> {
    compile_with(&schema.text, &schema.imports)
}

/// Compiles `text` (either form), its imports resolved from `imports` (either form) and the
/// well-known types; errors in `.proto` source say where in the text it is wrong.
fn compile_with(text: &str, imports: &[Import]) -> Result<FileDescriptor, String> {
    let main = match descriptor_bytes(text) {
        Some(bytes) => {
            let file = File::decode_file_descriptor_proto(bytes.as_slice()).map_err(|e| {
                format!("the schema is base64 but not a serialized FileDescriptorProto: {e}")
            })?;
            // A descriptor without a name is compiled under the name source would be.
            let name = Some(file.name())
                .filter(|n| !n.is_empty())
                .unwrap_or(SCHEMA_FILE);
            Form::Descriptor(name.to_owned(), bytes)
        }
        None => Form::Source(SCHEMA_FILE.to_owned(), text.to_owned()),
    };
    let name = main.name().to_owned();
    let mut files = vec![main];
    for import in imports {
        files.push(match descriptor_bytes(&import.text) {
            Some(bytes) => Form::Descriptor(import.name.clone(), bytes),
            None => Form::Source(import.name.clone(), import.text.clone()),
        });
    }
    let mut resolver = ChainFileResolver::new();
    resolver.add(Registered(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler
        .open_file(&name)
        .map_err(|e| format!("the .proto schema does not compile: {}", describe(&e, text)))?;
    let file = compiler
        .descriptor_pool()
        .get_file_by_name(&name)
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

/// The bytes of a schema registered as base64 of a `FileDescriptorProto` (line breaks
/// allowed, as some clients wrap it), or `None` for `.proto` source, which always holds a `;`
/// or `{` that base64 never does.
fn descriptor_bytes(text: &str) -> Option<Vec<u8>> {
    let compact: String = text.split_ascii_whitespace().collect();
    let base64_only = !compact.is_empty()
        && compact
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if !base64_only {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

/// One file the compiler may read, in the form it was registered in, under the name it is
/// compiled (the schema) or imported (a reference) by.
enum Form {
    Source(String, String),
    Descriptor(String, Vec<u8>),
}

impl Form {
    fn name(&self) -> &str {
        match self {
            Form::Source(name, _) | Form::Descriptor(name, _) => name,
        }
    }
}

/// The registered schema and its references as the files the compiler reads; every other
/// name goes on down the chain (the well-known types) or is not found.
struct Registered(Vec<Form>);

impl FileResolver for Registered {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.iter().find(|f| f.name() == name) {
            Some(Form::Source(name, text)) => File::from_source(name, text),
            Some(Form::Descriptor(name, bytes)) => {
                let mut file = File::decode_file_descriptor_proto(bytes.as_slice())
                    .map_err(|e| protox::Error::new(format!("{name}: {e}")))?;
                // A reference is imported by its name, whatever name its producer gave it.
                if file.name() != name {
                    let mut descriptor = file.file_descriptor_proto().clone();
                    descriptor.name = Some(name.clone());
                    file = File::from_file_descriptor_proto(descriptor);
                }
                Ok(file)
            }
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::SchemaKind;
    use prost_reflect::prost::Message as _;

    const MONEY: &str =
        "syntax = \"proto3\"; package kps.common; message Money { string currency = 1; int64 units = 2; }";
    const ORDER: &str = "syntax = \"proto3\"; package kps; import \"google/protobuf/timestamp.proto\"; \
        import \"common/money.proto\"; message Order { int64 id = 1; google.protobuf.Timestamp at = 2; \
        kps.common.Money price = 3; }";

    /// `source` as a non-Java serializer registers it: base64 of its `FileDescriptorProto`.
    fn descriptor_base64(name: &str, source: &str, imports: &[(&str, &str)]) -> String {
        let mut files = vec![Form::Source(name.into(), source.into())];
        files.extend(
            imports
                .iter()
                .map(|(n, s)| Form::Source(n.to_string(), s.to_string())),
        );
        let mut resolver = ChainFileResolver::new();
        resolver.add(Registered(files));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(name).unwrap();
        let file = compiler.descriptor_pool().get_file_by_name(name).unwrap();
        base64::engine::general_purpose::STANDARD
            .encode(file.file_descriptor_proto().encode_to_vec())
    }

    fn fields(file: &FileDescriptor) -> Vec<String> {
        let order = resolve(file, &[0]).unwrap();
        order
            .fields()
            .map(|f| format!("{} {:?}", f.name(), f.kind()))
            .collect()
    }

    #[test]
    fn a_schema_and_its_imports_compile_from_text_or_base64_descriptors_alike() {
        let money_b64 = descriptor_base64("common/money.proto", MONEY, &[]);
        let order_b64 = descriptor_base64("main.proto", ORDER, &[("common/money.proto", MONEY)]);
        let expected = fields(
            &compile_registered(&RegisteredSchema {
                kind: SchemaKind::Protobuf,
                text: ORDER.into(),
                imports: vec![Import {
                    name: "common/money.proto".into(),
                    text: MONEY.into(),
                }],
            })
            .unwrap(),
        );
        assert_eq!(expected.len(), 3, "{expected:?}");
        // Wrapped at 76 columns, as some clients send base64.
        let wrapped = order_b64
            .as_bytes()
            .chunks(76)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        for (text, import) in [
            (&wrapped, &money_b64),
            (&order_b64, &money_b64),
            (&order_b64, &MONEY.to_string()),
            (&ORDER.to_string(), &money_b64),
        ] {
            let schema = RegisteredSchema {
                kind: SchemaKind::Protobuf,
                text: text.clone(),
                imports: vec![Import {
                    name: "common/money.proto".into(),
                    text: import.clone(),
                }],
            };
            assert_eq!(fields(&compile_registered(&schema).unwrap()), expected);
        }
        // Without the reference's schema the import is named as missing.
        let err = compile(&order_b64).unwrap_err();
        assert!(err.contains("common/money.proto"), "{err}");
    }

    #[test]
    fn base64_that_is_no_descriptor_is_refused_saying_so() {
        let err = compile("AAAA").unwrap_err();
        assert!(
            err.contains("not a serialized FileDescriptorProto"),
            "{err}"
        );
        // Text is still text: its errors point into it.
        let err = compile("syntax = \"proto3\";\nmessage {").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }
}
