//! pylance's own scalar index types, kept correct through Refract's
//! maintenance.
//!
//! pylance 14.0.2 records a segment's type as the type URL of its details
//! message (`/lance.table.BTreeIndexDetails`, …), which is the stored type
//! name Refract registers them under. Refract does not build or search these
//! types (pylance does, and Refract's scans answer the filters); it *remaps*
//! them: a compaction rewrites the row addresses in their files by streaming,
//! in exactly pylance's layout, file version and metadata, so pylance keeps
//! answering through them. The details message, the index version (row-id or
//! row-address domain: the same on a table without stable row ids) and the
//! segment's metadata are carried over unchanged.
//!
//! A layout Refract does not rewrite (range-partitioned or sharded files, a
//! whole-fragment posting) is NotSupported before anything is written, and
//! the remap declines: the segment keeps translating through the
//! fragment-reuse index, as pylance's own deferred compaction leaves it.
//! Files pylance wrote carry no checksum, so every rewrite cross-checks what
//! it reads (pages against their lookup, postings against their framing);
//! a disagreement is Corrupt and nothing is committed.
//!
//! One skeleton ([`LanceIndex`]) serves every layout ([`LanceLayout`]):
//! [`btree`] (`page_data.lance` + `page_lookup.lance`), [`bitmap`]
//! (`bitmap_page_lookup.lance`, BITMAP and LABEL_LIST), [`ngram`]
//! (`ngram_postings.lance`) and [`ivf`] (`auxiliary.idx` + `index.idx`).

pub mod bitmap;
pub mod btree;
pub mod ivf;
pub mod ngram;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use async_trait::async_trait;
use futures::stream::BoxStream;
use lance_file::version::ConcreteFileVersion;
use refract_core::{Error, Result};
use refract_table::io::{
    LanceFileReader, LanceFileWriter, PageLayout, ReadMode, ReadOptions, RelativePath,
    STREAMING_READ_BUFFER_BYTES,
};
use roaring::RoaringTreemap;

use crate::types::{IndexContext, IndexParams, IndexQuery, SearchResult};
use crate::types::{IndexSegmentReader, IndexType, Translator};

/// One of pylance's file layouts: what [`LanceIndex`] needs beyond the
/// shared plumbing.
#[async_trait]
pub trait LanceLayout: Send + Sync + 'static {
    /// The type URL pylance records (the stored type name).
    const TYPE_URL: &'static str;
    /// pylance's name for the type, in messages.
    const LABEL: &'static str;
    /// Highest index version (pylance's `index_version`) the layout reads.
    const MAX_INDEX_VERSION: u32;

    /// Every row address the segment at `dir` stores.
    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap>;

    /// Rewrites the segment at `old_dir` into `new_dir` through `translator`,
    /// dropping rows that translate to `None`.
    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()>;
}

/// A pylance index type served by Refract's remap (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct LanceIndex<L>(std::marker::PhantomData<L>);

/// pylance's BTREE.
pub type LanceBTreeIndex = LanceIndex<btree::BTreeLayout>;
/// pylance's BITMAP.
pub type LanceBitmapIndex = LanceIndex<bitmap::BitmapLayout>;
/// pylance's LABEL_LIST.
pub type LanceLabelListIndex = LanceIndex<bitmap::LabelListLayout>;
/// pylance's IVF_FLAT, IVF_PQ and IVF_SQ.
pub type LanceIvfIndex = LanceIndex<ivf::IvfLayout>;
/// pylance's NGRAM.
pub type LanceNgramIndex = LanceIndex<ngram::NgramLayout>;

impl<L> LanceIndex<L> {
    /// The type.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

#[async_trait]
impl<L: LanceLayout> IndexType for LanceIndex<L> {
    fn name(&self) -> &'static str {
        L::TYPE_URL
    }

    fn supports(&self, _data_type: &DataType) -> bool {
        // Refract never builds this type; pylance decides what it indexes.
        false
    }

    fn remapped_index_version(&self, stored: u32) -> u32 {
        stored
    }

    async fn build(
        &self,
        _ctx: &IndexContext,
        _dir: &RelativePath,
        _input: BoxStream<'_, Result<RecordBatch>>,
        _params: &IndexParams,
    ) -> Result<Vec<u8>> {
        Err(Error::not_supported(format!(
            "Refract does not build pylance's {} index; build it with pylance's \
             create_scalar_index, or Refract's own type with create-index",
            L::LABEL
        )))
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        _details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        // Nothing is read here: Refract's queries scan instead of searching
        // pylance's files, and opening is on every query's path.
        Ok(Arc::new(LanceSegment::<L> {
            ctx: ctx.clone(),
            dir: dir.clone(),
            layout: std::marker::PhantomData,
        }))
    }

    async fn remap(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<Vec<u8>> {
        L::remap(ctx, old_dir, new_dir, translator).await?;
        Ok(details.to_vec())
    }

    fn check_index_version(&self, stored: u32) -> Result<()> {
        if stored > L::MAX_INDEX_VERSION {
            return Err(Error::not_supported(format!(
                "pylance {} index version {stored} (Refract remaps versions up to {})",
                L::LABEL,
                L::MAX_INDEX_VERSION
            )));
        }
        Ok(())
    }
}

/// An opened pylance segment: it lists its addresses and answers nothing.
struct LanceSegment<L> {
    ctx: IndexContext,
    dir: RelativePath,
    layout: std::marker::PhantomData<L>,
}

#[async_trait]
impl<L: LanceLayout> IndexSegmentReader for LanceSegment<L> {
    fn can_answer(&self, _query: &IndexQuery) -> bool {
        false
    }

    async fn search(&self, _query: &IndexQuery) -> Result<SearchResult> {
        Err(Error::not_supported(format!(
            "Refract does not search pylance's {} index; its scan answers the filter",
            L::LABEL
        )))
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        L::stored_addresses(&self.ctx, &self.dir).await
    }
}

/// Opens pylance's file `name` under `dir` for one pass.
async fn open_file(ctx: &IndexContext, dir: &RelativePath, name: &str) -> Result<LanceFileReader> {
    LanceFileReader::open(
        &ctx.store,
        &dir.join(name)?,
        ReadOptions {
            mode: ReadMode::Streaming {
                read_buffer_bytes: STREAMING_READ_BUFFER_BYTES,
            },
            ..ReadOptions::default()
        },
    )
    .await
}

/// Starts the rewrite of `old` at `new_dir/name`: same schema (metadata
/// included) and file version, so pylance reads it as its own.
async fn create_like(
    ctx: &IndexContext,
    old: &LanceFileReader,
    new_dir: &RelativePath,
    name: &str,
    schema: SchemaRef,
    layout: PageLayout,
) -> Result<LanceFileWriter> {
    let version: ConcreteFileVersion = old.file_version()?;
    LanceFileWriter::create_versioned(&ctx.store, &new_dir.join(name)?, schema, layout, version)
        .await
}

/// A column of pylance's file `what`, checked by name and type.
fn column<'a>(
    batch: &'a RecordBatch,
    name: &str,
    data_type: Option<&DataType>,
    what: &str,
) -> Result<&'a arrow_array::ArrayRef> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| Error::corrupt(what, format!("missing column '{name}'")))?;
    if let Some(expected) = data_type {
        if array.data_type() != expected {
            return Err(Error::corrupt(
                what,
                format!(
                    "column '{name}' is {}, expected {expected}",
                    array.data_type()
                ),
            ));
        }
    }
    Ok(array)
}
