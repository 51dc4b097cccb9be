//! The index plugin contract: what every index type (built-in or third-party)
//! implements, the queries a segment can answer and the results it returns.
//!
//! A type builds one *segment* from a stream of `(value, _rowaddr)` batches,
//! opens it for searching, and rewrites it through a [`Translator`] when the
//! fragments under it are rewritten (streaming remap, batches of at most
//! [`MAX_TRANSLATION_BATCH`] addresses, never a per-row map).
//!
//! Third-party types that only know the legacy `HashMap` remap implement
//! [`LegacyIndexPlugin`]; the framework serves them through the core's budgeted
//! materialized fallback (see [`crate::registry`]).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::stream::BoxStream;
use refract_core::{ByteWeightedCache, Result};
use refract_table::io::{DatasetStore, FileJournal, RelativePath};
use refract_table::predicate::Literal;
use refract_table::IndexMetadata;
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

pub(crate) mod addresses;
pub mod bitmap;
pub mod btree;
pub(crate) mod encoding_hints;
pub mod entries;
pub mod ivf_flat;
pub mod lance;
pub mod ngram;
#[cfg(test)]
pub(crate) mod test_support;

pub use crate::translate::{Translator, MAX_TRANSLATION_BATCH};
pub use entries::{EntrySink, IndexEntries};

/// Distance metric of a vector index / kNN query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Squared Euclidean distance.
    #[default]
    L2,
    /// 1 - cosine similarity.
    Cosine,
    /// Negative dot product (smaller is closer).
    Dot,
}

/// Build parameters. Every field is optional; a type ignores the ones it does
/// not use and documents its defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IndexParams {
    /// ivf_flat: number of k-means partitions.
    pub partitions: Option<u32>,
    /// ivf_flat: training sample rows per partition.
    pub sample_rate: Option<u32>,
    /// ivf_flat: k-means iterations.
    pub max_iterations: Option<u32>,
    /// ivf_flat: distance metric.
    pub metric: Option<Metric>,
    /// btree: rows per sorted page.
    pub page_rows: Option<u32>,
}

/// A question a segment may be able to answer. Values are predicate literals,
/// compared with the column's type (ints widen, floats compare as f64).
#[derive(Debug, Clone, PartialEq)]
pub enum IndexQuery {
    /// `column = value`.
    Equals(Literal),
    /// `low <op> column <op> high`.
    Range {
        /// Lower bound.
        low: Bound<Literal>,
        /// Upper bound.
        high: Bound<Literal>,
    },
    /// `column IN (values…)`.
    InList(Vec<Literal>),
    /// `column IS NULL`.
    IsNull,
    /// `contains(column, needle)` (case-sensitive substring).
    Contains(String),
    /// The `k` nearest vectors, probing `nprobes` partitions.
    Nearest {
        /// The query vector.
        vector: Vec<f32>,
        /// Results wanted.
        k: usize,
        /// Partitions probed.
        nprobes: usize,
        /// Distance metric (must match the index's).
        metric: Metric,
    },
}

/// What a segment search returns. Addresses are *stored* addresses: the ones
/// in the segment's files, which a resolver may still have to translate.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchResult {
    /// Exactly the rows (among the segment's stored rows) that match.
    Exact(RoaringTreemap),
    /// A superset of the matching rows; each must be rechecked against the column.
    Candidates(RoaringTreemap),
    /// Nearest rows with their distances, best first.
    Scored(Vec<(u64, f32)>),
}

/// What an index type needs for I/O: the dataset store and the session cache.
#[derive(Debug, Clone)]
pub struct IndexContext {
    /// The dataset root; every index file lives under `_indices/<uuid>/`.
    pub store: DatasetStore,
    /// The session's shared byte-weighted cache (index pages, lookups).
    pub cache: ByteWeightedCache,
}

impl IndexContext {
    /// The context for reading `segment`: every read of a file its metadata
    /// records is verified against the recorded checksum, and copying one
    /// (reuse in a remap) verifies it first.
    pub fn for_segment(&self, segment: &IndexMetadata) -> IndexContext {
        IndexContext {
            store: self.store.verifying(&segment.files),
            cache: self.cache.clone(),
        }
    }

    /// The context for writing a segment: every file written through it is
    /// recorded in `journal` with its size and checksum.
    pub fn recording(&self, journal: Arc<FileJournal>) -> IndexContext {
        IndexContext {
            store: self.store.recording(journal),
            cache: self.cache.clone(),
        }
    }
}

/// One index type. Implementations are stateless; segment state lives in the
/// files under `dir` and in the returned details bytes.
#[async_trait]
pub trait IndexType: Send + Sync {
    /// The stored type name: "btree", "bitmap", "ngram", "ivf_flat", ….
    fn name(&self) -> &'static str;

    /// On-disk layout version written by [`IndexType::build`] and [`IndexType::remap`].
    fn index_version(&self) -> u32 {
        0
    }

    /// True if the type can index a column of `data_type`.
    fn supports(&self, data_type: &DataType) -> bool;

    /// The index version a remap of a segment stored at version `stored`
    /// records: [`IndexType::index_version`] (a remap writes the current
    /// layout) unless the type keeps the segment's own.
    fn remapped_index_version(&self, stored: u32) -> u32 {
        let _ = stored;
        self.index_version()
    }

    /// Whether a segment stored at index version `stored` can be remapped;
    /// checked before anything is written. NotSupported makes the remap
    /// decline (the segment keeps translating through the fragment-reuse
    /// index).
    ///
    /// # Errors
    /// NotSupported for a version the type does not remap.
    fn check_index_version(&self, stored: u32) -> Result<()> {
        let _ = stored;
        Ok(())
    }

    /// Builds a segment from batches with two columns, the value column (named
    /// as the indexed column) and `_rowaddr` (UInt64), in scan order. Writes its
    /// files under `dir` and returns type details (stored in
    /// `IndexMetadata.details`).
    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>>;

    /// Opens a segment written by `build` or `remap`. Bad files or details are
    /// `Error::Corrupt`, missing files `Error::NotFound`.
    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>>;

    /// Streaming remap: rewrites the segment at `old_dir` into `new_dir`,
    /// translating every stored address through `translator` in batches of at
    /// most [`MAX_TRANSLATION_BATCH`], dropping rows that translate to `None`.
    /// Never materializes a per-row map. Returns the new details.
    async fn remap(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<Vec<u8>>;
}

/// An opened segment.
#[async_trait]
pub trait IndexSegmentReader: Send + Sync {
    /// True if [`IndexSegmentReader::search`] can answer `query`.
    fn can_answer(&self, query: &IndexQuery) -> bool;

    /// Answers `query` with stored addresses.
    async fn search(&self, query: &IndexQuery) -> Result<SearchResult>;

    /// A lower bound on the addresses [`IndexSegmentReader::search`] would
    /// return for `query` (stored rows that certainly match), from what the
    /// opened segment holds in memory (no I/O); `None` when the type cannot
    /// tell without searching. The query planner declines the index before
    /// searching when reading even these rows costs more than the scan.
    fn estimate_rows(&self, _query: &IndexQuery) -> Option<u64> {
        None
    }

    /// A lower bound on what reading the addresses
    /// [`IndexSegmentReader::search`] would return for `query` costs, as
    /// stored (fragments, coalesced ranges and rows, see
    /// [`Work::index`](crate::query::cost::Work::index)), from what the opened
    /// segment holds in memory (no I/O); `None` when the type cannot tell
    /// without searching. Tighter than [`IndexSegmentReader::estimate_rows`]
    /// for scattered matches: the planner declines the index before searching
    /// when reading them costs more than the scan.
    fn estimate_work(&self, _query: &IndexQuery) -> Option<crate::query::cost::Work> {
        None
    }

    /// Every stored address, ascending (diagnostics and tests).
    async fn stored_addresses(&self) -> Result<RoaringTreemap>;

    /// Deep verification: gives `sink` every entry the segment stores
    /// (tombstones left out), in pieces of at most [`MAX_TRANSLATION_BATCH`],
    /// in any order. `Ok(false)` without calling `sink` when the type cannot
    /// list its entries (the default).
    ///
    /// # Errors
    /// Corrupt or NotFound when a file cannot be read; the sink's errors.
    async fn visit_entries(&self, sink: &mut dyn EntrySink) -> Result<bool> {
        let _ = sink;
        Ok(false)
    }

    /// Deep verification: the entries this segment must hold for `rows`
    /// (`(value column, _rowaddr)` batches, as builds receive them), with the
    /// key columns [`IndexSegmentReader::visit_entries`] gives. `Ok(None)`
    /// when the type cannot tell (the default).
    ///
    /// # Errors
    /// InvalidInput when `rows` is not such a batch.
    fn expected_entries(&self, rows: &RecordBatch) -> Result<Option<IndexEntries>> {
        let _ = rows;
        Ok(None)
    }
}

/// A third-party type that can build, open and search, but only remaps through
/// a fully materialized `old → new` map (the legacy Lance API). The framework
/// serves it with the core's budgeted fallback; a declined segment is skipped.
#[async_trait]
pub trait LegacyIndexPlugin: Send + Sync {
    /// The stored type name.
    fn name(&self) -> &'static str;

    /// On-disk layout version.
    fn index_version(&self) -> u32 {
        0
    }

    /// True if the type can index a column of `data_type`.
    fn supports(&self, data_type: &DataType) -> bool;

    /// See [`IndexType::build`].
    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>>;

    /// See [`IndexType::open`].
    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>>;

    /// Legacy remap: a missing key means "unchanged", `Some(None)` means
    /// deleted, `Some(Some(new))` moved.
    async fn remap_legacy(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        mapping: &HashMap<u64, Option<u64>>,
    ) -> Result<Vec<u8>>;
}
