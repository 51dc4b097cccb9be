//! # refract-core
//!
//! The vocabulary every other Refract crate speaks:
//!
//! * row addresses (`fragment_id << 32 | offset`) and deletion vectors;
//! * `RowAddrRemap`, the compact old-address → new-address map produced by a
//!   compaction, and its chains;
//! * `MappingReader`, the read contract for one fragment transition;
//! * bounded translators (batches of at most 65,536 addresses) and the budgeted
//!   materialized fallback for legacy `HashMap` remap APIs;
//! * block checksums of stored files;
//! * the shared byte-weighted cache and the common error type.
//!
//! This crate does no I/O.

pub mod checksum;
pub mod error;

pub use error::{Error, Result};
pub mod cache;

pub use cache::{ByteWeightedCache, CacheKey, CacheNamespace, DeepSize, KeyParts};

pub mod address;
pub mod deletion;

pub use address::{row_address, RowAddress};
pub use deletion::DeletionVector;
pub mod chain;
pub mod mapping;
pub mod materialize;
mod ranked;
pub mod remap;
#[cfg(test)]
mod remap_props;
pub mod roaring_format;
pub mod translate;

pub use chain::RemapChain;
pub use mapping::{MappingReader, OrderedCompactionMapping};
pub use materialize::{
    estimate_hashmap_bytes, estimate_materialize_bytes, materialize, materialize_async,
    MaterializeBudget, DEFAULT_MATERIALIZE_BUDGET_BYTES,
};
pub use ranked::RankedLayout;
pub use remap::{CompactRemap, FragmentRows, RemapCursor, RewriteGroupInput, RowAddrRemap};
pub use translate::{
    translate_all, translate_all_async, translate_stream, translate_stream_async, AddressSink,
    BatchTranslator, Translator, MAX_TRANSLATION_BATCH,
};
