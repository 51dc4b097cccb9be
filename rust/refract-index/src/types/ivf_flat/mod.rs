//! `ivf_flat`: k-means partitions of `FixedSizeList<Float32>` vectors, searched
//! exactly inside the `nprobes` partitions nearest to the query.
//!
//! Layout: [`layout::VECTORS_FILE`] holds `(partition, vector)` rows sorted by
//! partition, with the centroids and per-partition row counts in a global
//! buffer, so a search reads only the row ranges of the probed partitions;
//! [`layout::ADDRESSES_FILE`] holds the row address of each vector (null: the
//! row is gone).
//!
//! A build streams: k-means trains on a bounded reservoir sample
//! ([`sample`]) and rows past a memory budget are spilled and written out
//! partition by partition ([`stream`]). Training is deterministic (a seeded
//! reservoir over the scan order, seeded k-means++, capped Lloyd iterations).
//! Remap never retrains and never reassigns. It translates the addresses in
//! batches of at most [`MAX_TRANSLATION_BATCH`]; vectors never change, so
//! unless more than one entry in [`super::addresses::TOMBSTONE_DIVISOR`] would be gone,
//! the vectors file is copied server-side and only the addresses are
//! rewritten (gone rows become tombstones). Otherwise both files are
//! rewritten without the gone rows and the partition sizes recomputed.

pub mod build;
pub mod distance;
pub mod kmeans;
pub mod layout;
pub mod sample;
pub mod segment;
pub mod stream;
#[cfg(test)]
mod stream_tests;
pub mod topk;

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, LanceFileWriter, RelativePath};
use refract_table::io::{PageLayout, ReadOptions};
use serde::{Deserialize, Serialize};

use super::addresses::{
    addresses_schema, bounded_pieces, is_addresses_schema, read_addresses,
    write_translated_addresses, AddressTranslation,
};
use super::{
    IndexContext, IndexParams, IndexSegmentReader, IndexType, Metric, Translator,
    MAX_TRANSLATION_BATCH,
};
pub use distance::distance;
use layout::{
    addresses_path, partition_column, vectors_path, vectors_schema, IvfLayout, LAYOUT_BUFFER_KEY,
};
pub use segment::IvfFlatSegment;

/// On-disk layout version (2: vectors and addresses in separate files).
const FORMAT_VERSION: u32 = 2;

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

/// The opened files of a segment with the validated layout.
pub(crate) struct OpenedFile {
    pub(crate) vectors: LanceFileReader,
    pub(crate) addresses: LanceFileReader,
    pub(crate) layout: IvfLayout,
}

/// Opens the files of `dir` and checks them against `details`.
pub(crate) async fn open_file(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &IvfFlatDetails,
) -> Result<OpenedFile> {
    let vectors =
        LanceFileReader::open(&ctx.store, &vectors_path(dir)?, ReadOptions::default()).await?;
    let addresses =
        LanceFileReader::open(&ctx.store, &addresses_path(dir)?, ReadOptions::default()).await?;
    let corrupt = |message: String| Error::corrupt("ivf_flat index file", message);
    let schema = vectors.schema();
    let buffer_index: u32 = schema
        .metadata()
        .get(LAYOUT_BUFFER_KEY)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| corrupt(format!("schema metadata lacks {LAYOUT_BUFFER_KEY}")))?;
    let layout = IvfLayout::decode(&vectors.read_global_buffer(buffer_index).await?)?;
    if !layout::schema_matches(&schema, layout.dim) {
        return Err(corrupt(format!(
            "unexpected schema {schema:?} for dimension {}",
            layout.dim
        )));
    }
    if !is_addresses_schema(&addresses.schema()) {
        return Err(corrupt(format!(
            "unexpected addresses schema {:?}",
            addresses.schema()
        )));
    }
    let expected = IvfFlatDetails::for_layout(&layout, details.metric)?;
    if expected != *details
        || layout.rows() != vectors.num_rows()
        || addresses.num_rows() != vectors.num_rows()
    {
        return Err(corrupt(format!(
            "files hold {} vectors and {} addresses in {} partitions of dimension {}; details say {details:?}",
            vectors.num_rows(),
            addresses.num_rows(),
            layout.partitions(),
            layout.dim
        )));
    }
    Ok(OpenedFile {
        vectors,
        addresses,
        layout,
    })
}

/// Writes the files of a segment: the vectors with the layout buffer, and
/// their addresses.
async fn write_files(
    ctx: &IndexContext,
    dir: &RelativePath,
    dim: usize,
    batches: impl Iterator<Item = Result<(RecordBatch, UInt64Array)>>,
    layout: &IvfLayout,
) -> Result<()> {
    let mut vectors = LanceFileWriter::create(
        &ctx.store,
        &vectors_path(dir)?,
        vectors_schema(dim)?,
        PageLayout::default(),
    )
    .await?;
    let mut addresses = LanceFileWriter::create(
        &ctx.store,
        &addresses_path(dir)?,
        addresses_schema(),
        PageLayout::default(),
    )
    .await?;
    for batch in batches {
        let (batch, addrs) = batch?;
        vectors.write(&batch).await?;
        addresses.write(&addresses_batch(addrs)?).await?;
    }
    finish_vectors(vectors, layout).await?;
    addresses.finish().await?;
    Ok(())
}

/// Stores the layout buffer and completes a vectors file.
async fn finish_vectors(mut writer: LanceFileWriter, layout: &IvfLayout) -> Result<()> {
    let index = writer.add_global_buffer(layout.encode()?)?;
    writer.add_schema_metadata(LAYOUT_BUFFER_KEY, &index.to_string());
    writer.finish().await?;
    Ok(())
}

/// One batch of an addresses file.
fn addresses_batch(addrs: UInt64Array) -> Result<RecordBatch> {
    RecordBatch::try_new(addresses_schema(), vec![Arc::new(addrs)])
        .map_err(|e| Error::external("assembling ivf_flat addresses", e))
}

/// Rows each full-rewrite step reads and translates: one translation batch.
const REMAP_STEP_ROWS: u64 = MAX_TRANSLATION_BATCH as u64;
/// What errors call these files.
const WHAT: &str = "ivf_flat index file";

/// Remap that drops tombstones: rewrites both files with only the live
/// entries, keeping partition order, and returns the new layout.
async fn remap_rewriting(
    ctx: &IndexContext,
    old: &OpenedFile,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<IvfLayout> {
    let mut translation = AddressTranslation::default();
    let dim = old.layout.dim;
    let mut lengths = vec![0u64; old.layout.partitions()];
    let mut vectors = LanceFileWriter::create(
        &ctx.store,
        &vectors_path(new_dir)?,
        vectors_schema(dim)?,
        PageLayout::default(),
    )
    .await?;
    let mut addresses = LanceFileWriter::create(
        &ctx.store,
        &addresses_path(new_dir)?,
        addresses_schema(),
        PageLayout::default(),
    )
    .await?;
    let mut last = 0u32;
    for rows in bounded_pieces(0..old.vectors.num_rows(), REMAP_STEP_ROWS) {
        let stored = read_addresses(&old.addresses, rows.clone(), WHAT).await?;
        let translated = translation.translate(&stored, translator)?;
        let batch = read_vectors(&old.vectors, rows).await?;
        count_live(&batch, &translated, &mut lengths, &mut last)?;
        let keep = BooleanArray::from_iter(translated.iter().map(|t| Some(t.is_some())));
        let kept = arrow::compute::filter_record_batch(&batch, &keep)
            .map_err(|e| Error::external("filtering remapped ivf_flat rows", e))?;
        if kept.num_rows() == 0 {
            continue;
        }
        let live: UInt64Array = translated.iter().flatten().collect();
        vectors.write(&kept).await?;
        addresses.write(&addresses_batch(live)?).await?;
    }
    let layout = IvfLayout {
        dim,
        centroids: old.layout.centroids.clone(),
        lengths,
    };
    finish_vectors(vectors, &layout).await?;
    addresses.finish().await?;
    Ok(layout)
}

/// The vectors-file rows `rows` (at most one remap step) as one batch.
async fn read_vectors(reader: &LanceFileReader, rows: Range<u64>) -> Result<RecordBatch> {
    // REMAP_STEP_ROWS (65,536) fits u32.
    let batches: Vec<RecordBatch> = reader
        .read_range(rows.clone(), None, REMAP_STEP_ROWS as u32)
        .await?
        .try_collect()
        .await?;
    let batch = match batches.as_slice() {
        [single] => single.clone(),
        _ => arrow::compute::concat_batches(&reader.schema(), &batches)
            .map_err(|e| Error::external("concatenating ivf_flat rows", e))?,
    };
    if batch.num_rows() as u64 != rows.end - rows.start {
        return Err(Error::corrupt(
            "ivf_flat index file",
            format!(
                "{} returned {} rows for {rows:?}",
                reader.path(),
                batch.num_rows()
            ),
        ));
    }
    Ok(batch)
}

/// Counts the live entries of `batch` per partition into `lengths`;
/// partitions must not decrease across the file (`last` carries the previous one).
fn count_live(
    batch: &RecordBatch,
    translated: &UInt64Array,
    lengths: &mut [u64],
    last: &mut u32,
) -> Result<()> {
    let corrupt = |message: String| Error::corrupt("ivf_flat index file", message);
    let partitions = partition_column(batch)?;
    for (position, p) in partitions.values().iter().enumerate() {
        if *p < *last {
            return Err(corrupt(format!("partition {p} follows partition {last}")));
        }
        *last = *p;
        let slot = lengths
            .get_mut(*p as usize)
            .ok_or_else(|| corrupt(format!("partition id {p} out of range")))?;
        if translated.is_valid(position) {
            *slot += 1;
        }
    }
    Ok(())
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
        input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>> {
        let (details, _) =
            stream::build(ctx, dir, input, params, stream::BuildLimits::default()).await?;
        Ok(details)
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
        let copied = write_translated_addresses(
            &ctx.store,
            &old.addresses,
            &addresses_path(new_dir)?,
            translator,
            WHAT,
        )
        .await?;
        let layout = match copied {
            // Vectors never change: the old file serves the new segment as is.
            Some(_) => {
                ctx.store
                    .copy(&vectors_path(old_dir)?, &vectors_path(new_dir)?)
                    .await?;
                old.layout
            }
            None => remap_rewriting(ctx, &old, new_dir, translator).await?,
        };
        IvfFlatDetails::for_layout(&layout, details.metric)?.encode()
    }
}
