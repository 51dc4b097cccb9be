//! Searching an opened ivf_flat segment.

use std::ops::Range;

use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::distance::{distance, partition_distance};
use super::layout::{addr_column, vector_values, IvfLayout, ADDR_COLUMN, VECTOR_COLUMN};
use super::topk::TopK;
use super::{open_file, IvfFlatDetails};
use crate::types::{IndexContext, IndexQuery, IndexSegmentReader, Metric, SearchResult};

/// Rows per batch when reading a partition.
const READ_BATCH_ROWS: u32 = 65_536;

/// An opened ivf_flat segment: centroids and partition ranges in memory,
/// vectors read per probed partition.
pub struct IvfFlatSegment {
    reader: LanceFileReader,
    layout: IvfLayout,
    metric: Metric,
}

impl IvfFlatSegment {
    /// Opens the segment at `dir` (what `IndexType::open` returns, as the
    /// concrete type so callers can inspect its layout).
    pub async fn open(ctx: &IndexContext, dir: &RelativePath, details: &[u8]) -> Result<Self> {
        let details = IvfFlatDetails::decode(details)?;
        let file = open_file(ctx, dir, &details).await?;
        Ok(Self {
            reader: file.reader,
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

    /// Scores every row of the file rows `rows` into `top`.
    async fn scan_rows(&self, rows: Range<u64>, query: &[f32], top: &mut TopK) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let dim = self.layout.dim;
        let mut batches = self
            .reader
            .read_range(rows, Some(&[ADDR_COLUMN, VECTOR_COLUMN]), READ_BATCH_ROWS)
            .await?;
        while let Some(batch) = batches.try_next().await? {
            let addrs = addr_column(&batch)?;
            let values = vector_values(&batch, dim)?;
            for (addr, v) in addrs.values().iter().zip(values.chunks_exact(dim)) {
                top.push(*addr, distance(self.metric, query, v));
            }
        }
        Ok(())
    }

    /// The `k` nearest stored rows among the `nprobes` nearest partitions, best first.
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
        if self.reader.num_rows() == 0 {
            return Ok(all);
        }
        let mut batches = self
            .reader
            .read_range(
                0..self.reader.num_rows(),
                Some(&[ADDR_COLUMN]),
                READ_BATCH_ROWS,
            )
            .await?;
        while let Some(batch) = batches.try_next().await? {
            all.extend(addr_column(&batch)?.values().iter().copied());
        }
        Ok(all)
    }
}
