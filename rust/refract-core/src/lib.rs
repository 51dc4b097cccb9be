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
//!
//! ```
//! use refract_core::{row_address, FragmentRows, RewriteGroupInput, RowAddrRemap};
//! use roaring::RoaringTreemap;
//!
//! // Fragments 1 and 2 (4 rows each; row 1 of fragment 1 deleted) were
//! // compacted into fragment 3, in order.
//! let surviving: RoaringTreemap = [(1, 0), (1, 2), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
//!     .into_iter()
//!     .map(|(fragment, offset)| row_address(fragment, offset))
//!     .collect();
//! let remap = RowAddrRemap::compact(vec![RewriteGroupInput {
//!     old_fragments: vec![FragmentRows::new(1, 4), FragmentRows::new(2, 4)],
//!     new_fragments: vec![FragmentRows::new(3, 7)],
//!     surviving,
//! }])?;
//! assert_eq!(remap.get(row_address(1, 2)), Some(Some(row_address(3, 1))));
//! assert_eq!(remap.get(row_address(2, 0)), Some(Some(row_address(3, 3))));
//! assert_eq!(remap.get(row_address(1, 1)), Some(None)); // deleted: gone
//! assert_eq!(remap.get(row_address(9, 0)), None); // not rewritten
//! # Ok::<(), refract_core::Error>(())
//! ```

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

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
mod hashmap_size;
pub mod mapping;
pub mod materialize;
mod ranked;
pub mod remap;
#[cfg(test)]
mod remap_props;
pub mod roaring_format;
pub mod translate;

pub use chain::RemapChain;
pub use hashmap_size::estimate_hashmap_bytes;
pub use mapping::{MappingReader, OrderedCompactionMapping};
pub use materialize::{
    estimate_materialize_bytes, materialize, materialize_async, MaterializeBudget,
    DEFAULT_MATERIALIZE_BUDGET_BYTES,
};
pub use ranked::RankedLayout;
pub use remap::{CompactRemap, FragmentRows, RemapCursor, RewriteGroupInput, RowAddrRemap};
pub use translate::{
    translate_all, translate_all_async, translate_stream, translate_stream_async, AddressSink,
    BatchTranslator, Translator, TranslatorFastPaths, MAX_TRANSLATION_BATCH,
};
