//! pylance's IVF vector indices (`/lance.index.pb.VectorIndexDetails`:
//! IVF_FLAT, IVF_PQ, IVF_SQ; lance 14.0.2).
//!
//! Files under the segment directory:
//! * `auxiliary.idx`: the storage, column `_rowid` (UInt64 row addresses)
//!   beside the vectors or their codes (`flat`, `__pq_code`, …), rows grouped
//!   by partition; the IVF model (centroids, partition offsets and lengths)
//!   and any codebook in global buffers named by schema metadata (`lance:ivf`);
//! * `index.idx`: the per-partition sub-index; with a flat sub-index (the
//!   types above, schema metadata `lance:index` `type`) it holds no rows, only
//!   metadata and the IVF model again.
//!
//! The remap rewrites `_rowid` in `auxiliary.idx` (at most
//! [`MAX_TRANSLATION_BATCH`] addresses per call), copying every other
//! column's encoded pages, the schema metadata and the global buffers as
//! they are (a layout whose pages cannot be copied is decoded and encoded
//! again, in windows of [`WINDOW_ROWS`]), and copies `index.idx`: vectors, codes and partitions do not change. That holds only
//! while every row survives: a dropped row would move the partition offsets
//! of both files (and IVF_PQ's transposed codes), which Refract does not
//! rewrite yet, so the remap is NotSupported as soon as it meets one (the
//! unfinished file is abandoned, nothing is written) and the segment keeps
//! translating through the fragment-reuse index, where pylance drops the rows
//! as it loads each partition. Graph sub-indices (HNSW) are NotSupported.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{
    read_ahead, ColumnRewriter, LanceFileReader, PageLayout, RelativePath, WindowSize,
    STREAMING_PAGE_BYTES,
};
use roaring::RoaringTreemap;

use super::{column, create_like, open_file, LanceLayout};
use crate::keys::downcast;
use crate::types::addresses::AddressTranslation;
use crate::types::{IndexContext, Translator, MAX_TRANSLATION_BATCH};

/// The storage file.
pub const AUXILIARY_FILE: &str = "auxiliary.idx";
/// The sub-index file.
pub const INDEX_FILE: &str = "index.idx";
const ROW_ID: &str = "_rowid";
const INDEX_KEY: &str = "lance:index";
/// Sub-index types whose `index.idx` holds no row addresses.
const FLAT_TYPES: [&str; 3] = ["IVF_FLAT", "IVF_PQ", "IVF_SQ"];
const WHAT: &str = "pylance vector index";
/// Rows per read window of the storage (a few MiB of vectors).
const WINDOW_ROWS: u32 = 16_384;
/// Windows read ahead of the rewrite.
const READ_AHEAD: usize = 2;

/// The IVF layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct IvfLayout;

#[async_trait]
impl LanceLayout for IvfLayout {
    const TYPE_URL: &'static str = "/lance.index.pb.VectorIndexDetails";
    const LABEL: &'static str = "IVF";
    const MAX_INDEX_VERSION: u32 = 1;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        let storage = open_file(ctx, dir, AUXILIARY_FILE).await?;
        let mut stream = storage
            .read_range(0..storage.num_rows(), Some(&[ROW_ID]), batch_rows())
            .await?;
        let mut addresses = RoaringTreemap::new();
        while let Some(batch) = stream.try_next().await? {
            addresses.extend(row_ids(&batch)?.values().iter().copied());
        }
        Ok(addresses)
    }

    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()> {
        let index = open_file(ctx, old_dir, INDEX_FILE).await?;
        check_flat(&index.schema(), index.num_rows())?;
        let storage = open_file(ctx, old_dir, AUXILIARY_FILE).await?;
        if !storage
            .schema()
            .field_with_name(ROW_ID)
            .is_ok_and(|f| f.data_type() == &DataType::UInt64)
        {
            return Err(Error::corrupt(
                WHAT,
                format!("{AUXILIARY_FILE} has no UInt64 {ROW_ID}"),
            ));
        }
        let target = new_dir.join(AUXILIARY_FILE)?;
        match ColumnRewriter::start(&ctx.store, &storage, &target, ROW_ID).await {
            Ok(rewriter) => rewrite_row_ids(rewriter, &storage, translator, old_dir).await?,
            // A layout whose pages cannot be copied: decode and encode it all.
            Err(Error::NotSupported { .. }) => {
                reencode(ctx, &storage, new_dir, translator, old_dir).await?
            }
            Err(e) => return Err(e),
        }
        ctx.store
            .copy(&old_dir.join(INDEX_FILE)?, &new_dir.join(INDEX_FILE)?)
            .await
    }
}

/// The partitions' row ids translated, every other column's pages copied.
async fn rewrite_row_ids(
    mut rewriter: ColumnRewriter,
    storage: &LanceFileReader,
    translator: &dyn Translator,
    old_dir: &RelativePath,
) -> Result<()> {
    let mut translation = AddressTranslation::default();
    let mut stream = storage
        .read_range(0..storage.num_rows(), Some(&[ROW_ID]), batch_rows())
        .await?;
    while let Some(batch) = stream.try_next().await? {
        let new = translation.translate(row_ids(&batch)?, translator)?;
        if new.null_count() > 0 {
            rewriter.abort().await;
            return Err(rows_dropped(old_dir));
        }
        rewriter.write(Arc::new(new)).await?;
    }
    rewriter.finish().await?;
    Ok(())
}

/// [`rewrite_row_ids`] for a layout whose pages cannot be copied: every
/// column decoded and encoded again.
async fn reencode(
    ctx: &IndexContext,
    storage: &LanceFileReader,
    new_dir: &RelativePath,
    translator: &dyn Translator,
    old_dir: &RelativePath,
) -> Result<()> {
    let schema = storage.schema();
    let mut writer = create_like(
        ctx,
        storage,
        new_dir,
        AUXILIARY_FILE,
        schema.clone(),
        PageLayout::Streaming {
            page_bytes: STREAMING_PAGE_BYTES,
        },
    )
    .await?;
    // Same buffers in the same order: the indices the metadata names hold.
    for buffer in 1..storage.global_buffers() {
        writer.add_global_buffer(storage.read_global_buffer(buffer).await?)?;
    }
    let mut translation = AddressTranslation::default();
    // Small windows, read ahead: vectors are wide, and one long range
    // would keep far more of them in flight than is being rewritten.
    let mut stream = read_ahead(storage, WindowSize::rows(WINDOW_ROWS), READ_AHEAD)?;
    while let Some(batch) = stream.try_next().await? {
        let new = translation.translate(row_ids(&batch)?, translator)?;
        if new.null_count() > 0 {
            writer.abort().await;
            return Err(rows_dropped(old_dir));
        }
        let columns = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, array)| {
                if field.name() == ROW_ID {
                    Arc::new(new.clone()) as _
                } else {
                    array.clone()
                }
            })
            .collect();
        let out = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::external("assembling remapped vector storage", e))?;
        writer.write(&out).await?;
    }
    writer.finish().await?;
    Ok(())
}

fn rows_dropped(old_dir: &RelativePath) -> Error {
    Error::not_supported(format!(
        "{WHAT} {old_dir}: rows were dropped; partition offsets are not rewritten"
    ))
}

/// Rows per read: one translation batch (65,536 fits in u32).
fn batch_rows() -> u32 {
    MAX_TRANSLATION_BATCH as u32
}

/// `index.idx` is a flat sub-index: no rows, a type in [`FLAT_TYPES`].
fn check_flat(schema: &arrow_schema::Schema, rows: u64) -> Result<()> {
    let described = schema.metadata.get(INDEX_KEY).ok_or_else(|| {
        Error::corrupt(WHAT, format!("{INDEX_FILE} has no '{INDEX_KEY}' metadata"))
    })?;
    let kind = serde_json::from_str::<serde_json::Value>(described)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .ok_or_else(|| Error::corrupt(WHAT, format!("'{INDEX_KEY}' is not {{\"type\": ...}}")))?;
    if !FLAT_TYPES.contains(&kind.as_str()) {
        return Err(Error::not_supported(format!(
            "{WHAT}: {kind} (Refract remaps {})",
            FLAT_TYPES.join(", ")
        )));
    }
    if rows != 0 {
        return Err(Error::not_supported(format!(
            "{WHAT}: {kind} with {rows} rows in {INDEX_FILE}"
        )));
    }
    Ok(())
}

fn row_ids(batch: &RecordBatch) -> Result<&UInt64Array> {
    let ids: &UInt64Array = downcast(column(batch, ROW_ID, Some(&DataType::UInt64), WHAT)?)?;
    if ids.null_count() > 0 {
        return Err(Error::corrupt(WHAT, "null row id"));
    }
    Ok(ids)
}
