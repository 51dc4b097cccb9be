//! # refract-index
//!
//! Built-in index types (btree, bitmap, ngram, ivf_flat) stored as Lance files
//! under `_indices/<uuid>/`, the plugin trait for third-party types, streaming
//! remap through bounded translators, and index-aware query execution.

pub mod keys;
pub mod posting;
pub mod registry;
pub mod translate;
pub mod types;

pub use registry::{IndexRegistry, RegisteredType};
pub use translate::{Translator, MAX_TRANSLATION_BATCH};
pub use types::{
    IndexContext, IndexParams, IndexQuery, IndexSegmentReader, IndexType, LegacyIndexPlugin,
    Metric, SearchResult,
};
