//! Searching an opened ivf_flat segment.

use std::ops::Range;

use std::sync::Arc;

use arrow::buffer::Buffer;
use arrow_array::{FixedSizeBinaryArray, RecordBatch, UInt32Array, UInt64Array};
use async_trait::async_trait;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::build::{assign, BatchVectors};
use super::distance::{distance, partition_distance};
use super::layout::{vector_values, IvfLayout, VECTOR_COLUMN};
use super::topk::TopK;
use super::{open_file, IvfFlatDetails};
use crate::types::addresses::{bounded_pieces, read_addresses, read_column};
use crate::types::{
    EntrySink, IndexContext, IndexEntries, IndexQuery, IndexSegmentReader, Metric, SearchResult,
};

/// Rows per read of a partition (one translation batch).
const READ_BATCH_ROWS: u64 = 65_536;
/// What errors call these files.
const WHAT: &str = "ivf_flat index file";

/// An opened ivf_flat segment: centroids and partition ranges in memory,
/// vectors read per probed partition.
pub struct IvfFlatSegment {
    vectors: LanceFileReader,
    addresses: LanceFileReader,
    layout: IvfLayout,
    metric: Metric,
}

impl IvfFlatSegment {
    /// Opens the segment at `dir` (what `IndexType::open` returns, as the
    /// concrete type so callers can inspect its layout).
    ///
    /// # Errors
    /// Corrupt for bad details or files that disagree with them or each other;
    /// NotSupported for an unknown format or layout version; NotFound for a
    /// missing file; External for store failures.
    pub async fn open(ctx: &IndexContext, dir: &RelativePath, details: &[u8]) -> Result<Self> {
        let details = IvfFlatDetails::decode(details)?;
        let file = open_file(ctx, dir, &details).await?;
        Ok(Self {
            vectors: file.vectors,
            addresses: file.addresses,
            layout: file.layout,
            metric: details.metric,
        })
    }

    /// The centroids and partition sizes.
    pub fn layout(&self) -> &IvfLayout {
        &self.layout
    }

    /// The metric the segment was built for.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The `nprobes` partitions nearest to `query`, ascending by partition id
    /// (file order, so the reads are sequential).
    pub fn probe(&self, query: &[f32], nprobes: usize) -> Vec<usize> {
        let mut ranked: Vec<(f32, usize)> = (0..self.layout.partitions())
            .filter_map(|p| {
                self.layout
                    .centroid(p)
                    .map(|c| (partition_distance(self.metric, query, c), p))
            })
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut chosen: Vec<usize> = ranked
            .into_iter()
            .take(nprobes.max(1))
            .map(|(_, p)| p)
            .collect();
        chosen.sort_unstable();
        chosen
    }

    /// Scores every live row of the file rows `rows` into `top`, one bounded
    /// read of vectors and addresses at a time.
    async fn scan_rows(&self, rows: Range<u64>, query: &[f32], top: &mut TopK) -> Result<()> {
        let dim = self.layout.dim;
        for step in bounded_pieces(rows, READ_BATCH_ROWS) {
            let vectors = read_column(&self.vectors, VECTOR_COLUMN, step.clone(), WHAT).await?;
            let batch = RecordBatch::try_from_iter([(VECTOR_COLUMN, vectors)])
                .map_err(|e| Error::external("assembling ivf_flat vectors", e))?;
            let values = vector_values(&batch, dim)?;
            let addrs = read_addresses(&self.addresses, step, WHAT).await?;
            for (addr, v) in addrs.iter().zip(values.chunks_exact(dim)) {
                // A null address is a tombstone: the row is gone.
                if let Some(addr) = addr {
                    top.push(addr, distance(self.metric, query, v));
                }
            }
        }
        Ok(())
    }

    /// The `k` nearest stored rows among the `nprobes` nearest partitions, best first.
    ///
    /// # Errors
    /// InvalidInput for a query of another dimension than the index or with
    /// non-finite values; Corrupt, NotFound or External reading the partitions.
    pub async fn nearest(
        &self,
        query: &[f32],
        k: usize,
        nprobes: usize,
    ) -> Result<Vec<(u64, f32)>> {
        if query.len() != self.layout.dim {
            return Err(Error::invalid_input(format!(
                "query vector has {} dimensions, the index {}",
                query.len(),
                self.layout.dim
            )));
        }
        if query.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid_input("query vector has non-finite values"));
        }
        let mut top = TopK::new(k);
        if k == 0 {
            return Ok(Vec::new());
        }
        for p in self.probe(query, nprobes) {
            // `probe` only returns existing partitions.
            let rows = self.layout.partition_rows(p).unwrap_or(0..0);
            self.scan_rows(rows, query, &mut top).await?;
        }
        Ok(top.into_sorted())
    }
}

#[async_trait]
impl IndexSegmentReader for IvfFlatSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        matches!(query, IndexQuery::Nearest { vector, metric, .. }
            if *metric == self.metric && vector.len() == self.layout.dim)
    }

    async fn search(&self, query: &IndexQuery) -> Result<SearchResult> {
        match query {
            IndexQuery::Nearest {
                vector,
                k,
                nprobes,
                metric,
            } if *metric == self.metric => Ok(SearchResult::Scored(
                self.nearest(vector, *k, *nprobes).await?,
            )),
            other => Err(Error::invalid_input(format!(
                "an ivf_flat index ({:?}, dimension {}) cannot answer {other:?}",
                self.metric, self.layout.dim
            ))),
        }
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        let mut all = RoaringTreemap::new();
        for step in bounded_pieces(0..self.addresses.num_rows(), READ_BATCH_ROWS) {
            let addrs = read_addresses(&self.addresses, step, WHAT).await?;
            all.extend(addrs.iter().flatten());
        }
        Ok(all)
    }

    /// Every stored (partition, vector bytes, address), tombstones left out.
    async fn visit_entries(&self, sink: &mut dyn EntrySink) -> Result<bool> {
        let dim = self.layout.dim;
        for p in 0..self.layout.partitions() {
            let partition = u32::try_from(p)
                .map_err(|_| Error::corrupt(WHAT, "more than u32::MAX partitions"))?;
            // `p` is below `partitions()`.
            let rows = self.layout.partition_rows(p).unwrap_or(0..0);
            for step in bounded_pieces(rows, READ_BATCH_ROWS) {
                let vectors = read_column(&self.vectors, VECTOR_COLUMN, step.clone(), WHAT).await?;
                let batch = RecordBatch::try_from_iter([(VECTOR_COLUMN, vectors)])
                    .map_err(|e| Error::external("assembling ivf_flat vectors", e))?;
                let values = vector_values(&batch, dim)?;
                let addrs = read_addresses(&self.addresses, step, WHAT).await?;
                let mut kept_values = Vec::with_capacity(values.len());
                let mut kept_addrs = Vec::with_capacity(addrs.len());
                for (addr, v) in addrs.iter().zip(values.chunks_exact(dim)) {
                    if let Some(addr) = addr {
                        kept_values.extend_from_slice(v);
                        kept_addrs.push(addr);
                    }
                }
                let partitions = vec![partition; kept_addrs.len()];
                sink.accept(entries(dim, partitions, &kept_values, kept_addrs)?)
                    .await?;
            }
        }
        Ok(true)
    }

    /// One entry per non-null vector, in the partition of its nearest centroid.
    fn expected_entries(&self, rows: &RecordBatch) -> Result<Option<IndexEntries>> {
        let dim = self.layout.dim;
        let vectors = BatchVectors::read(rows, dim)?;
        let partitions = vectors
            .values
            .chunks_exact(dim)
            .map(|v| assign(&self.layout.centroids, dim, self.metric, v))
            .collect();
        Ok(Some(entries(
            dim,
            partitions,
            &vectors.values,
            vectors.addrs,
        )?))
    }
}

/// Entries keyed by partition and the vector's bytes.
fn entries(
    dim: usize,
    partitions: Vec<u32>,
    values: &[f32],
    addresses: Vec<u64>,
) -> Result<IndexEntries> {
    let width = i32::try_from(dim * std::mem::size_of::<f32>())
        .map_err(|_| Error::corrupt(WHAT, format!("vector dimension {dim} is too large")))?;
    let bytes = FixedSizeBinaryArray::try_new(width, Buffer::from_slice_ref(values), None)
        .map_err(|e| Error::external("assembling ivf_flat vector bytes", e))?;
    Ok(IndexEntries {
        keys: vec![Arc::new(UInt32Array::from(partitions)), Arc::new(bytes)],
        addresses: UInt64Array::from(addresses),
    })
}
