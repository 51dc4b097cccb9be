//! Index-aware query execution.
//!
//! A filter query picks one index that can answer a top-level conjunct, asks
//! every segment the resolver says serves live fragments, translates stored
//! addresses when the resolver says so, drops deleted rows, fetches the rows,
//! applies the rest of the filter (the whole filter when a segment only
//! returned candidates), and unions that with a filtered scan of the live
//! fragments no segment serves. Rows come back in scan order (fragment
//! position, then offset), exactly as a brute-force scan returns them.
//!
//! A nearest-neighbour query merges each serving segment's top hits with
//! exact distances computed over the unserved fragments.

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

/// What a query did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Explain {
    /// The logical index used, if any.
    pub index: Option<String>,
    /// Segments that served fragments.
    pub segments: Vec<SegmentExplain>,
    /// Live fragments scanned without an index, in scan order.
    pub scanned_fragments: Vec<u64>,
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
    pub(crate) use_index: bool,
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
            use_index: true,
        }
    }

    /// Keeps rows matching the predicate text; InvalidInput on bad text or columns.
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

    /// `false` forces a brute-force scan (reference results, benchmarks).
    pub fn use_index(mut self, use_index: bool) -> Self {
        self.use_index = use_index;
        self
    }

    /// Runs the query.
    pub async fn execute(self) -> Result<QueryResult> {
        match self.nearest.clone() {
            Some(nearest) => knn::execute(&self, &nearest).await,
            None => exec::execute(&self).await,
        }
    }
}
