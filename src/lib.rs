//! kafka-pg-sink: Kafka topics into PostgreSQL tables, exactly once.
//!
//! Rows and the consumer position commit in one PostgreSQL transaction; PostgreSQL, not Kafka,
//! says where each partition resumes. See README.md for the design.

pub mod batch;
pub mod check;
pub mod cli;
pub mod config;
pub mod consumer;
pub mod dead_letter;
pub mod dead_letter_cmd;
pub mod health;
pub mod http;
pub mod lag_cmd;
pub mod mapping;
pub mod meters;
pub mod migrate;
pub mod offsets;
pub mod offsets_cmd;
pub mod pgcopy;
pub mod pipeline;
pub mod rebalance;
pub mod routing;
pub mod schema;
pub mod shutdown;
pub mod startup;
pub mod stats;
pub mod telemetry;
pub mod watermarks;
pub mod writer;
