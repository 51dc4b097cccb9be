//! # refract-ledger
//!
//! The fragment-reuse-index (FRI) ledger: the protobuf types of `protos/fri.proto`,
//! decoding with full validation (digests, row conservation, lineage), canonical
//! encoding and fingerprints, and the feature flags plus write gate that fence
//! tables carrying a version-1 history.

pub mod flags;
