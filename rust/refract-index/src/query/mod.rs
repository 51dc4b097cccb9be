//! Index-aware query execution.
//!
//! A filter query considers the indices that can answer a top-level conjunct.
//! For each, it asks every segment the resolver says serves live fragments,
//! translates stored addresses when the resolver says so and drops deleted
//! rows; then [`cost`] compares reading those rows (coalesced ranged reads)
//! with scanning the covered fragments, and the first index that is clearly
//! cheaper is used. A btree declines before searching when its page lookup
//! shows the answer is too large. One scan then reads the chosen index's rows
//! in the covered fragments and every row of the fragments no segment serves,
//! rechecking the whole filter on every row. Rows come back in scan order
//! (fragment position, then offset), exactly as a brute-force scan returns
//! them. [`Explain`] says which path was taken and why.
//!
//! A nearest-neighbour query merges each serving segment's top hits with
//! exact distances computed over the unserved fragments.

pub mod cost;
mod exec;
mod knn;
pub mod plan;

use std::sync::Arc;

use arrow_array::RecordBatch;
use refract_core::Result;
use refract_table::predicate::{self, Expr};
use refract_table::Dataset;
use serde::Serialize;
use uuid::Uuid;

use crate::registry::IndexRegistry;
use crate::resolver::{DirectResolver, SegmentResolver};
use crate::types::Metric;

/// Name of the distance column of nearest-neighbour results.
pub const DISTANCE_COLUMN: &str = "_distance";

/// How one segment took part in a query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentExplain {
    /// Segment uuid.
    pub uuid: Uuid,
    /// Index type.
    pub index_type: String,
    /// Live fragments it served.
    pub fragments: Vec<u64>,
    /// Whether stored addresses went through a translator.
    pub translated: bool,
    /// Rewrite hops between stored and current addresses.
    pub hops: usize,
    /// "exact", "candidates" or "scored".
    pub result: String,
}

/// How a filter query read the fragments an index covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessPath {
    /// Every fragment was scanned with the filter.
    #[default]
    Scan,
    /// The rows an index returned were read (and rechecked).
    Index,
}

/// Whether a filter query may use an index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexUse {
    /// Use an index when the cost model says it reads less than the scan.
    #[default]
    Auto,
    /// Use the first index that can answer a conjunct, whatever it costs
    /// (tests of the index path, diagnostics).
    Always,
    /// Never use an index (reference results, benchmarks).
    Never,
}

/// The planner's figures for one index it considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CostEstimate {
    /// The logical index.
    pub index: String,
    /// Lower bound on its answer known before searching (btree pages wholly
    /// inside the query, bitmap posting counts).
    pub estimated_rows: Option<u64>,
    /// Lower bound on what reading its answer reads, known before searching
    /// (bitmap posting statistics).
    pub estimated_work: Option<cost::Work>,
    /// Live rows it returned (`None`: declined before searching).
    pub matched_rows: Option<u64>,
    /// What reading its rows would read (`None`: declined before searching).
    pub index_work: Option<cost::Work>,
    /// What scanning the fragments it covers reads.
    pub scan_work: cost::Work,
}

/// What a query did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Explain {
    /// The logical index used, if any.
    pub index: Option<String>,
    /// Segments that served fragments.
    pub segments: Vec<SegmentExplain>,
    /// Live fragments scanned without an index, in scan order.
    pub scanned_fragments: Vec<u64>,
    /// How the covered fragments were read (filter queries).
    pub path: AccessPath,
    /// Why that path was taken, one line.
    pub reason: String,
    /// The indices considered, in the order they were.
    pub considered: Vec<CostEstimate>,
}

/// Rows and the explanation of how they were found.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// Projected columns, then `_rowaddr` (and `_distance` for kNN).
    pub batch: RecordBatch,
    /// How the query was served.
    pub explain: Explain,
}

/// A nearest-neighbour request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NearestRequest {
    pub(crate) column: String,
    pub(crate) vector: Vec<f32>,
    pub(crate) k: usize,
    pub(crate) nprobes: usize,
    pub(crate) metric: Metric,
}

/// A query builder over one dataset version.
#[derive(Clone)]
pub struct Query {
    pub(crate) dataset: Dataset,
    pub(crate) filter: Option<Expr>,
    pub(crate) projection: Option<Vec<String>>,
    pub(crate) nearest: Option<NearestRequest>,
    pub(crate) resolver: Arc<dyn SegmentResolver>,
    pub(crate) registry: Arc<IndexRegistry>,
    pub(crate) index_use: IndexUse,
}

impl Query {
    /// A query returning every live row of `dataset`.
    pub fn new(dataset: &Dataset) -> Self {
        Self {
            dataset: dataset.clone(),
            filter: None,
            projection: None,
            nearest: None,
            resolver: Arc::new(DirectResolver),
            registry: Arc::new(IndexRegistry::with_builtins()),
            index_use: IndexUse::Auto,
        }
    }

    /// Keeps rows matching the predicate text.
    ///
    /// # Errors
    /// InvalidInput when the text does not parse or does not fit the schema
    /// (unknown column, literal of the wrong type; see `Expr::validate`).
    pub fn filter(mut self, expr: &str) -> Result<Self> {
        let expr = predicate::parse(expr)?;
        expr.validate(&self.dataset.schema())?;
        self.filter = Some(expr);
        Ok(self)
    }

    /// Outputs only these columns (default: every column), then `_rowaddr`.
    pub fn project(mut self, columns: &[&str]) -> Self {
        self.projection = Some(columns.iter().map(|c| c.to_string()).collect());
        self
    }

    /// Asks for the `k` rows whose `column` vector is nearest to `vector`,
    /// probing `nprobes` partitions of a vector index (L2 unless [`Query::metric`]).
    pub fn nearest(mut self, column: &str, vector: &[f32], k: usize, nprobes: usize) -> Self {
        self.nearest = Some(NearestRequest {
            column: column.to_string(),
            vector: vector.to_vec(),
            k,
            nprobes,
            metric: self
                .nearest
                .as_ref()
                .map_or(Metric::default(), |n| n.metric),
        });
        self
    }

    /// Distance metric of a nearest-neighbour query.
    pub fn metric(mut self, metric: Metric) -> Self {
        if let Some(nearest) = self.nearest.as_mut() {
            nearest.metric = metric;
        }
        self
    }

    /// Resolves segment coverage and translation with `resolver` (default: [`DirectResolver`]).
    pub fn with_resolver(mut self, resolver: Arc<dyn SegmentResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Opens segments through `registry` (default: the built-ins).
    pub fn with_registry(mut self, registry: Arc<IndexRegistry>) -> Self {
        self.registry = registry;
        self
    }

    /// `false` forces a brute-force scan (reference results, benchmarks);
    /// `true` restores the default, [`IndexUse::Auto`].
    pub fn use_index(self, use_index: bool) -> Self {
        self.index_use(if use_index {
            IndexUse::Auto
        } else {
            IndexUse::Never
        })
    }

    /// Whether and how a filter may use an index (default [`IndexUse::Auto`]).
    pub fn index_use(mut self, index_use: IndexUse) -> Self {
        self.index_use = index_use;
        self
    }

    /// Runs the query.
    ///
    /// # Errors
    /// InvalidInput for an unknown projected column or a nearest column that is
    /// missing or not `FixedSizeList<Float32>` of the vector's length; Corrupt
    /// for a damaged index segment or data file; the errors of reading files.
    pub async fn execute(self) -> Result<QueryResult> {
        match self.nearest.clone() {
            Some(nearest) => knn::execute(&self, &nearest).await,
            None => exec::execute(&self).await,
        }
    }
}
