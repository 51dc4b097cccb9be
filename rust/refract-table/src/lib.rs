//! # refract-table
//!
//! The Refract dataset engine: a versioned, columnar table on an `object_store`.
//! Manifests (`_versions/<n>.manifest`), fragments of Lance data files under
//! `data/`, deletion files under `_deletions/`, transactions and the
//! put-if-absent commit protocol, scan/take/append/delete, index metadata and
//! the `Session` that shares caches between dataset handles.

pub mod io;
pub mod predicate;
