//! The direct reader held against prost-reflect's.
