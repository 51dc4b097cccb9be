//! # refract-reader
//!
//! The dataset-level FRI reader: derives each index segment's usable coverage by
//! walking fragment lineage, translates stored row addresses hop by hop to live
//! fragments, and caches decoded ledgers, mapping readers and row-map chunks in the
//! session's shared index cache.

pub mod rowmap;
