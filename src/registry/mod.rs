//! A Confluent-compatible Schema Registry, as the sink reads it: schemas by id (cached: ids
//! are immutable) and the latest schema of a subject (for `check`).
//!
//! One concept per file: the HTTP client with its failover (`client.rs`), the reading of an
//! answer (`answer.rs`), the cache by id (`cache.rs`) and the connection's TLS (`tls.rs`).

mod answer;
mod cache;
mod client;
mod tls;

pub use client::RegistryClient;

/// Which format a registered schema describes (`schemaType`; absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    Avro,
    Protobuf,
    Json,
}

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    pub kind: SchemaKind,
    /// The schema text as registered (Avro JSON, `.proto` source or base64 of a
    /// `FileDescriptorProto`, JSON Schema).
    pub text: String,
    /// The schemas its references name, transitively, each under the name it is imported by:
    /// a `.proto` that imports another file needs that file to compile.
    pub imports: Vec<Import>,
}

impl RegisteredSchema {
    /// A schema that references no other.
    pub fn new(kind: SchemaKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
            imports: Vec::new(),
        }
    }
}

/// One schema a registered schema references (Confluent's `references`): the name the
/// referring schema uses for it (a `.proto` import path) and its text as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub text: String,
}

/// A reference as the registry lists it, before the client fetches what it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Reference {
    pub(crate) name: String,
    pub(crate) subject: String,
    pub(crate) version: i64,
}

/// Why a schema could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered that the id (or subject) does not exist (`40403`, `40401`): the
    /// record refers to a schema that is not there, which retrying cannot fix.
    #[error("schema {0} is not in the registry")]
    NotFound(String),
    /// No registry answered, or it failed (5xx, timeouts, refused credentials): retried.
    #[error("the schema registry is unavailable: {0}")]
    Unavailable(String),
}
