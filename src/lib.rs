//! kafka-pg-sink: Kafka topics into PostgreSQL tables, exactly once.
//!
//! Rows and the consumer position commit in one PostgreSQL transaction; PostgreSQL, not Kafka,
//! says where each partition resumes. See README.md for the design.

pub(crate) mod batch;
pub mod cli;
pub mod commands;
pub mod config;
pub(crate) mod ddl;
pub mod dead_letter;
pub mod headers;
pub(crate) mod health;
pub(crate) mod http;
pub mod kafka;
pub mod mapping;
pub(crate) mod merge;
pub(crate) mod meters;
pub mod migrate;
pub(crate) mod offsets;
pub mod pgcopy;
pub(crate) mod pgtext;
pub(crate) mod pipeline;
pub(crate) mod proto;
pub mod record;
pub(crate) mod record_routing;
pub mod registry;
pub(crate) mod routing;
pub mod schema;
pub mod shutdown;
pub(crate) mod staging;
pub(crate) mod stale;
pub mod startup;
pub(crate) mod stats;
pub mod telemetry;
pub(crate) mod unique_order;
pub(crate) mod watermarks;
pub(crate) mod writer;
