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
    /// The schema text as registered (Avro JSON, `.proto` source, JSON Schema).
    pub text: String,
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
