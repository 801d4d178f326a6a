//! Integration tests: the real binary against a real Kafka broker and a real PostgreSQL.
//! Each test makes its own database and topics, so they run in parallel.

mod alerts;
mod arrays;
mod avro;
mod bad_input;
mod batching;
mod claims;
mod cli;
mod crash;
mod dead_letters;
mod delivery;
mod deploy;
mod fairness;
mod faults;
mod formats;
mod helpers;
mod layout;
mod mapping;
mod metrics;
mod operations;
mod out_of_range;
mod partitioned;
mod positions;
mod protobuf;
mod rebalance;
mod registry;
mod rejected;
mod restarts;
mod routing;
mod security;
mod supervision;
mod types;
mod upsert;
mod zombie;
