//! # refract-index
//!
//! Built-in index types (btree, bitmap, ngram, ivf_flat) stored as Lance files
//! under `_indices/<uuid>/`, the plugin trait for third-party types, streaming
//! remap through bounded translators, and index-aware query execution.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod keys;
pub mod manage;
pub mod posting;
pub mod query;
pub mod registry;
pub mod remap;
pub mod resolver;
pub mod translate;
pub mod types;

pub use manage::{
    create_index, create_index_with, describe_index, drop_index, list_indices, optimize_indices,
    optimize_indices_with, IndexSummary, SegmentSummary,
};
pub use query::{AccessPath, CostEstimate, Explain, IndexUse, Query, QueryResult, SegmentExplain};
pub use registry::{IndexRegistry, RegisteredType};
pub use remap::{
    apply_index_rewrite, remap_indices_for_rewrite, remap_segment, DeclineReason, IndexRewrite,
    RemapOptions, RemapOutcome, RewrittenGroup, SkipReport,
};
pub use resolver::{DirectResolver, ResolvedSegment, SegmentResolver};
pub use translate::{Translator, MAX_TRANSLATION_BATCH};
pub use types::{
    EntrySink, IndexContext, IndexEntries, IndexParams, IndexQuery, IndexSegmentReader, IndexType,
    LegacyIndexPlugin, Metric, SearchResult,
};
