//! The CLI verbs besides `run` and `migrate`, each in its own file beside `main.rs`'s dispatch:
//! they read and change the sink's tables and ask Kafka, but never run the pipeline.

pub mod check;
mod check_schemas;
pub mod dead_letters;
pub mod lag;
pub mod offsets;
mod plan;
