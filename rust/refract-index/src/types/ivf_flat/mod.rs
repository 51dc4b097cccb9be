//! `ivf_flat`: k-means partitions of FixedSizeList<Float32> vectors, searched
//! exactly inside the `nprobes` partitions nearest to the query.
//!
//! Layout: one Lance file per segment ([`layout::VECTORS_FILE`]) of
//! `(partition, _rowaddr, vector)` rows sorted by partition, with the centroids
//! and per-partition row counts in a global buffer, so a search reads only the
//! row ranges of the probed partitions.
//!
//! Training is deterministic (seeded k-means++ and capped Lloyd iterations).
//! Remap never retrains and never reassigns: it streams the file, translates
//! the addresses in batches of at most [`MAX_TRANSLATION_BATCH`], drops rows
//! that are gone and rewrites the partition sizes.

pub mod build;
pub mod distance;
pub mod kmeans;
pub mod layout;
pub mod segment;
pub mod topk;

use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, LanceFileWriter, RelativePath};
use serde::{Deserialize, Serialize};

use super::{
    IndexContext, IndexParams, IndexSegmentReader, IndexType, Metric, Translator,
    MAX_TRANSLATION_BATCH,
};
use build::{train_centroids, CollectedVectors, PartitionPlan};
pub use distance::distance;
use layout::{
    addr_column, partition_column, vectors_path, vectors_schema, IvfLayout, LAYOUT_BUFFER_KEY,
};
pub use segment::IvfFlatSegment;

/// On-disk layout version.
const FORMAT_VERSION: u32 = 1;

/// The ivf_flat index type.
#[derive(Debug, Clone, Copy, Default)]
pub struct IvfFlatIndex;

/// Segment details stored in `IndexMetadata.details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IvfFlatDetails {
    /// Layout version of the files.
    pub format_version: u32,
    /// Vector dimension.
    pub dim: u32,
    /// Distance metric the index was trained for.
    pub metric: Metric,
    /// Number of partitions.
    pub partitions: u32,
    /// Indexed rows.
    pub rows: u64,
}

impl IvfFlatDetails {
    fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::external("encoding ivf_flat details", e))
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let details: IvfFlatDetails = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt("ivf_flat index details", e.to_string()))?;
        if details.format_version != FORMAT_VERSION {
            return Err(Error::not_supported(format!(
                "ivf_flat index format version {} (this client reads {FORMAT_VERSION})",
                details.format_version
            )));
        }
        Ok(details)
    }

    fn for_layout(layout: &IvfLayout, metric: Metric) -> Result<Self> {
        Ok(Self {
            format_version: FORMAT_VERSION,
            dim: u32::try_from(layout.dim)
                .map_err(|_| Error::invalid_input("vector dimension too large"))?,
            metric,
            partitions: u32::try_from(layout.partitions())
                .map_err(|_| Error::invalid_input("too many partitions"))?,
            rows: layout.rows(),
        })
    }
}

/// An opened vectors file with its validated layout.
pub(crate) struct OpenedFile {
    pub(crate) reader: LanceFileReader,
    pub(crate) layout: IvfLayout,
}

/// Opens the vectors file of `dir` and checks it against `details`.
pub(crate) async fn open_file(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &IvfFlatDetails,
) -> Result<OpenedFile> {
    let reader = LanceFileReader::open(&ctx.store, &vectors_path(dir)?, None).await?;
    let corrupt = |message: String| Error::corrupt("ivf_flat index file", message);
    let schema = reader.schema();
    let buffer_index: u32 = schema
        .metadata()
        .get(LAYOUT_BUFFER_KEY)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| corrupt(format!("schema metadata lacks {LAYOUT_BUFFER_KEY}")))?;
    let layout = IvfLayout::decode(&reader.read_global_buffer(buffer_index).await?)?;
    if !layout::schema_matches(&schema, layout.dim) {
        return Err(corrupt(format!(
            "unexpected schema {schema:?} for dimension {}",
            layout.dim
        )));
    }
    let expected = IvfFlatDetails::for_layout(&layout, details.metric)?;
    if expected != *details || layout.rows() != reader.num_rows() {
        return Err(corrupt(format!(
            "file holds {} rows in {} partitions of dimension {}; details say {details:?}",
            reader.num_rows(),
            layout.partitions(),
            layout.dim
        )));
    }
    Ok(OpenedFile { reader, layout })
}

/// Writes a vectors file: the batches, then the layout buffer.
async fn write_file(
    ctx: &IndexContext,
    dir: &RelativePath,
    dim: usize,
    batches: impl Iterator<Item = Result<RecordBatch>>,
    layout: &IvfLayout,
) -> Result<()> {
    let mut writer =
        LanceFileWriter::create(&ctx.store, &vectors_path(dir)?, vectors_schema(dim)?).await?;
    for batch in batches {
        writer.write(&batch?).await?;
    }
    let index = writer.add_global_buffer(layout.encode()?)?;
    writer.add_schema_metadata(LAYOUT_BUFFER_KEY, &index.to_string());
    writer.finish().await?;
    Ok(())
}

/// Translates one batch of the vectors file and drops the rows that are gone.
/// Counts the surviving rows per partition into `lengths`; partitions must not
/// decrease across the file (`last` carries the previous one).
fn remap_batch(
    batch: &RecordBatch,
    translator: &dyn Translator,
    lengths: &mut [u64],
    last: &mut u32,
    out: &mut Vec<Option<u64>>,
) -> Result<Option<RecordBatch>> {
    let corrupt = |message: String| Error::corrupt("ivf_flat index file", message);
    let addrs = addr_column(batch)?;
    let partitions = partition_column(batch)?;
    // Batches are read with at most MAX_TRANSLATION_BATCH rows; slice anyway so
    // the bound does not depend on the reader honouring the batch size.
    out.clear();
    let mut translated: Vec<Option<u64>> = Vec::with_capacity(addrs.len());
    for chunk in addrs.values().chunks(MAX_TRANSLATION_BATCH) {
        translator.translate(chunk, out)?;
        if out.len() != chunk.len() {
            return Err(Error::invalid_input(format!(
                "translator returned {} results for {} addresses",
                out.len(),
                chunk.len()
            )));
        }
        translated.append(out);
    }
    for (p, kept) in partitions.values().iter().zip(&translated) {
        if *p < *last {
            return Err(corrupt(format!("partition {p} follows partition {last}")));
        }
        *last = *p;
        let slot = lengths
            .get_mut(*p as usize)
            .ok_or_else(|| corrupt(format!("partition id {p} out of range")))?;
        if kept.is_some() {
            *slot += 1;
        }
    }
    let keep = BooleanArray::from_iter(translated.iter().map(|t| Some(t.is_some())));
    let new_addrs = UInt64Array::from_iter_values(translated.iter().flatten().copied());
    let filtered = arrow::compute::filter_record_batch(batch, &keep)
        .map_err(|e| Error::external("filtering remapped ivf_flat rows", e))?;
    if filtered.num_rows() == 0 {
        return Ok(None);
    }
    let mut columns = filtered.columns().to_vec();
    let addr_position = filtered
        .schema()
        .index_of(layout::ADDR_COLUMN)
        .map_err(|e| corrupt(e.to_string()))?;
    columns[addr_position] = Arc::new(new_addrs);
    RecordBatch::try_new(filtered.schema(), columns)
        .map(Some)
        .map_err(|e| Error::external("assembling a remapped ivf_flat batch", e))
}

#[async_trait]
impl IndexType for IvfFlatIndex {
    fn name(&self) -> &'static str {
        "ivf_flat"
    }

    fn index_version(&self) -> u32 {
        FORMAT_VERSION
    }

    fn supports(&self, data_type: &DataType) -> bool {
        build::supports(data_type)
    }

    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        mut input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>> {
        let metric = params.metric.unwrap_or_default();
        let mut vectors = CollectedVectors::default();
        while let Some(batch) = input.next().await {
            vectors.add_batch(&batch?)?;
        }
        // Validate the parameters even when there is nothing to train on.
        build::partition_count(params, vectors.len())?;
        let centroids = if vectors.is_empty() {
            Vec::new()
        } else {
            train_centroids(&vectors, params, metric)?
        };
        let plan = PartitionPlan::new(&vectors, centroids, metric);
        write_file(
            ctx,
            dir,
            plan.layout.dim,
            plan.batches(&vectors),
            &plan.layout,
        )
        .await?;
        IvfFlatDetails::for_layout(&plan.layout, metric)?.encode()
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        Ok(Arc::new(IvfFlatSegment::open(ctx, dir, details).await?))
    }

    async fn remap(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<Vec<u8>> {
        let details = IvfFlatDetails::decode(details)?;
        let old = open_file(ctx, old_dir, &details).await?;
        let dim = old.layout.dim;
        let mut lengths = vec![0u64; old.layout.partitions()];
        let mut writer =
            LanceFileWriter::create(&ctx.store, &vectors_path(new_dir)?, vectors_schema(dim)?)
                .await?;
        if old.reader.num_rows() > 0 {
            // MAX_TRANSLATION_BATCH (65,536) fits u32.
            let batch_rows = MAX_TRANSLATION_BATCH as u32;
            let mut batches = old
                .reader
                .read_range(0..old.reader.num_rows(), None, batch_rows)
                .await?;
            let mut last = 0u32;
            let mut out = Vec::with_capacity(MAX_TRANSLATION_BATCH);
            while let Some(batch) = batches.try_next().await? {
                if let Some(kept) =
                    remap_batch(&batch, translator, &mut lengths, &mut last, &mut out)?
                {
                    writer.write(&kept).await?;
                }
            }
        }
        let layout = IvfLayout {
            dim,
            centroids: old.layout.centroids,
            lengths,
        };
        let index = writer.add_global_buffer(layout.encode()?)?;
        writer.add_schema_metadata(LAYOUT_BUFFER_KEY, &index.to_string());
        writer.finish().await?;
        IvfFlatDetails::for_layout(&layout, details.metric)?.encode()
    }
}
