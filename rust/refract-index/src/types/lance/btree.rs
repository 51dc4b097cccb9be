//! pylance's BTREE (`/lance.table.BTreeIndexDetails`, lance-index 14.0.2).
//!
//! Files under the segment directory:
//! * `page_data.lance`: columns `values` (the indexed type, nullable) and
//!   `ids` (UInt64 row addresses), sorted by value and cut into pages of
//!   exactly `batch_size` rows (the last page may hold fewer); pylance reads
//!   page `i` as rows `i * batch_size ..`;
//! * `page_lookup.lance`: one row per page, `min` (the page's first value),
//!   `max` (its last), `null_count`, `page_idx` (UInt32), with schema metadata
//!   `batch_size` (default 4096) and `range_partitioned`.
//!
//! The remap streams the pages in order, checks each against its lookup row
//! and translates the `ids` (at most [`MAX_TRANSLATION_BATCH`] per call).
//! While no row is gone, only `ids` is written anew: the values' encoded
//! pages are copied and the lookup with them. Otherwise it drops the rows
//! that are gone and re-cuts the survivors into pages of `batch_size` with a
//! fresh lookup. Translation never changes a value, so the value
//! order holds without sorting; addresses inside a run of equal values keep
//! their stored order, as pylance's own remap leaves them. Memory: one page,
//! one translation batch and the lookup (one row per page).

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::make_comparator;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, SortOptions};
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::STREAMING_PAGE_BYTES;
use refract_table::io::{
    ColumnRewriter, LanceFileReader, LanceFileWriter, PageLayout, RelativePath,
};
use roaring::RoaringTreemap;

use super::{column, create_like, open_file, LanceLayout};
use crate::keys::downcast;
use crate::types::addresses::AddressTranslation;
use crate::types::{IndexContext, Translator, MAX_TRANSLATION_BATCH};

/// Pages file.
pub const PAGE_DATA_FILE: &str = "page_data.lance";
/// Lookup file.
pub const PAGE_LOOKUP_FILE: &str = "page_lookup.lance";
const VALUES: &str = "values";
const IDS: &str = "ids";
const BATCH_SIZE_KEY: &str = "batch_size";
const RANGE_PARTITIONED_KEY: &str = "range_partitioned";
/// pylance's page size when the lookup does not name one.
const DEFAULT_BATCH_SIZE: u64 = 4096;
const WHAT: &str = "pylance BTREE index";

/// The BTREE layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct BTreeLayout;

#[async_trait]
impl LanceLayout for BTreeLayout {
    const TYPE_URL: &'static str = "/lance.table.BTreeIndexDetails";
    const LABEL: &'static str = "BTREE";
    // 0: row-id domain, 1: row-address domain (equal without stable row ids).
    const MAX_INDEX_VERSION: u32 = 1;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        let segment = Segment::open(ctx, dir).await?;
        let mut addresses = RoaringTreemap::new();
        let mut pages = segment.pages().await?;
        while let Some(page) = pages.next().await? {
            addresses.extend(ids_of(&page)?.values().iter().copied());
        }
        Ok(addresses)
    }

    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()> {
        let segment = Segment::open(ctx, old_dir).await?;
        if rewrite_ids_only(ctx, &segment, new_dir, translator).await? {
            return ctx
                .store
                .copy(
                    &old_dir.join(PAGE_LOOKUP_FILE)?,
                    &new_dir.join(PAGE_LOOKUP_FILE)?,
                )
                .await;
        }
        let writer = create_like(
            ctx,
            &segment.data,
            new_dir,
            PAGE_DATA_FILE,
            segment.data.schema(),
            PageLayout::Streaming {
                page_bytes: STREAMING_PAGE_BYTES,
            },
        )
        .await?;
        let mut cutter = PageCutter::new(writer, segment.batch_size);
        let mut translation = AddressTranslation::default();
        let mut pages = segment.pages().await?;
        while let Some(page) = pages.next().await? {
            for piece in translation_batches(&page) {
                let new = translation.translate(ids_of(&piece)?, translator)?;
                let values = column(&piece, VALUES, None, WHAT)?;
                let (values, new): (ArrayRef, ArrayRef) = if new.null_count() == 0 {
                    // Nothing dropped (a compaction without deletions).
                    (values.clone(), Arc::new(new))
                } else {
                    let keep = arrow::compute::is_not_null(&new)
                        .map_err(|e| Error::external("filtering remapped BTREE rows", e))?;
                    (
                        filter(values, &keep)?,
                        filter(&(Arc::new(new) as _), &keep)?,
                    )
                };
                let rows = RecordBatch::try_new(piece.schema(), vec![values, new])
                    .map_err(|e| Error::external("assembling remapped BTREE rows", e))?;
                cutter.push(&rows).await?;
            }
        }
        let lookup = cutter.finish(&segment.lookup.schema()).await?;
        let mut writer = create_like(
            ctx,
            &segment.lookup_file,
            new_dir,
            PAGE_LOOKUP_FILE,
            segment.lookup_file.schema(),
            PageLayout::Buffered,
        )
        .await?;
        writer.write(&lookup).await?;
        writer.finish().await?;
        Ok(())
    }
}

/// The remap of a segment none of whose rows is gone: the pages keep their
/// values and sizes, so only `ids` is written anew and the values' encoded
/// pages are copied (each page is still read and checked against its
/// lookup, which stays as it is). `Ok(false)`, with nothing written, when a
/// row is gone or the file's layout cannot be copied page by page: then the
/// pages are re-cut. The translation done up to a gone row is lost; the
/// common compaction (no deletions) pays it never.
async fn rewrite_ids_only(
    ctx: &IndexContext,
    segment: &Segment,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<bool> {
    let target = new_dir.join(PAGE_DATA_FILE)?;
    let mut rewriter = match ColumnRewriter::start(&ctx.store, &segment.data, &target, IDS).await {
        Ok(rewriter) => rewriter,
        Err(Error::NotSupported { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut translation = AddressTranslation::default();
    let mut pages = segment.pages().await?;
    while let Some(page) = pages.next().await? {
        for piece in translation_batches(&page) {
            let new = translation.translate(ids_of(&piece)?, translator)?;
            if new.null_count() > 0 {
                rewriter.abort().await;
                return Ok(false);
            }
            rewriter.write(Arc::new(new)).await?;
        }
    }
    rewriter.finish().await?;
    Ok(true)
}

/// `page` in slices of at most [`MAX_TRANSLATION_BATCH`] rows, in order.
fn translation_batches(page: &RecordBatch) -> impl Iterator<Item = RecordBatch> + '_ {
    (0..page.num_rows())
        .step_by(MAX_TRANSLATION_BATCH)
        .map(|start| page.slice(start, MAX_TRANSLATION_BATCH.min(page.num_rows() - start)))
}

/// An opened BTREE segment: its pages file and its lookup, checked against
/// each other.
struct Segment {
    data: LanceFileReader,
    lookup_file: LanceFileReader,
    lookup: RecordBatch,
    batch_size: u64,
}

impl Segment {
    async fn open(ctx: &IndexContext, dir: &RelativePath) -> Result<Self> {
        let lookup_file = open_file(ctx, dir, PAGE_LOOKUP_FILE).await?;
        let metadata = &lookup_file.schema().metadata;
        if metadata.get(RANGE_PARTITIONED_KEY).map(String::as_str) == Some("true") {
            return Err(Error::not_supported(format!(
                "{WHAT} {dir}: range-partitioned pages are not remapped"
            )));
        }
        // pylance reads an unparsable page size as its default too.
        let batch_size = metadata
            .get(BATCH_SIZE_KEY)
            .and_then(|size| size.parse::<u64>().ok())
            .unwrap_or(DEFAULT_BATCH_SIZE);
        if batch_size == 0 {
            return Err(Error::corrupt(WHAT, format!("{dir}: page size 0")));
        }
        let batches = lookup_file.read_all(None).await?;
        let lookup = arrow::compute::concat_batches(&lookup_file.schema(), &batches)
            .map_err(|e| Error::external("reading the BTREE lookup", e))?;
        let data = open_file(ctx, dir, PAGE_DATA_FILE).await?;
        let segment = Segment {
            data,
            lookup_file,
            lookup,
            batch_size,
        };
        segment.check_shape(dir)?;
        Ok(segment)
    }

    /// The lookup lists pages `0..n` in order, `n` pages of `batch_size`
    /// rows holding the pages file's rows, and both files agree on the type.
    fn check_shape(&self, dir: &RelativePath) -> Result<()> {
        let min = column(&self.lookup, "min", None, WHAT)?;
        let value_type = min.data_type();
        column(&self.lookup, "max", Some(value_type), WHAT)?;
        column(&self.lookup, "null_count", Some(&DataType::UInt32), WHAT)?;
        let pages = page_idx(&self.lookup)?;
        if pages.null_count() > 0 || pages.values().iter().zip(0u32..).any(|(idx, i)| *idx != i) {
            return Err(Error::corrupt(
                WHAT,
                format!("{dir}: lookup pages are not numbered 0..{}", pages.len()),
            ));
        }
        let schema = self.data.schema();
        let fields = schema.fields();
        let shape_ok = fields.len() == 2
            && fields[0].name() == VALUES
            && fields[0].data_type() == value_type
            && fields[1].name() == IDS
            && fields[1].data_type() == &DataType::UInt64;
        if !shape_ok {
            return Err(Error::corrupt(
                WHAT,
                format!("{dir}: {PAGE_DATA_FILE} is not (values {value_type}, ids UInt64)"),
            ));
        }
        let expected_pages = self.data.num_rows().div_ceil(self.batch_size);
        if expected_pages != pages.len() as u64 {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "{dir}: {} rows in pages of {} make {expected_pages} pages, the lookup lists {}",
                    self.data.num_rows(),
                    self.batch_size,
                    pages.len()
                ),
            ));
        }
        Ok(())
    }

    /// The pages in order, each checked against its lookup row.
    async fn pages(&self) -> Result<Pages<'_>> {
        // A page fits in u32 rows: its lookup counts nulls in a UInt32.
        let batch_rows = u32::try_from(self.batch_size)
            .map_err(|_| Error::corrupt(WHAT, "page size above u32"))?;
        Ok(Pages {
            stream: self
                .data
                .read_range(0..self.data.num_rows(), None, batch_rows)
                .await?,
            segment: self,
            pending: None,
            next_page: 0,
        })
    }
}

/// The pages of a [`Segment`], re-assembled from whatever batches the
/// reader yields and checked against the lookup.
struct Pages<'a> {
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    segment: &'a Segment,
    pending: Option<RecordBatch>,
    next_page: usize,
}

impl Pages<'_> {
    async fn next(&mut self) -> Result<Option<RecordBatch>> {
        let total = self.segment.data.num_rows();
        let start = self.next_page as u64 * self.segment.batch_size;
        if start >= total {
            return Ok(None);
        }
        // The page's rows: the rest of the file up to one page (fits in usize:
        // the page size fits in u32).
        let want = (total - start).min(self.segment.batch_size) as usize;
        if self.pending.is_none() {
            // The reader yields pages of `batch_size`: most pages are one batch.
            if let Some(batch) = self.stream.try_next().await? {
                if batch.num_rows() == want {
                    check_page(&self.segment.lookup, self.next_page, &batch)?;
                    self.next_page += 1;
                    return Ok(Some(batch));
                }
                self.pending = Some(batch);
            }
        }
        let mut parts = Vec::new();
        let mut have = 0;
        while have < want {
            let batch =
                match self.pending.take() {
                    Some(batch) => batch,
                    None => self.stream.try_next().await?.ok_or_else(|| {
                        Error::corrupt(WHAT, "pages file ended before its row count")
                    })?,
                };
            let take = (want - have).min(batch.num_rows());
            if take < batch.num_rows() {
                self.pending = Some(batch.slice(take, batch.num_rows() - take));
            }
            parts.push(batch.slice(0, take));
            have += take;
        }
        let page = arrow::compute::concat_batches(&self.segment.data.schema(), &parts)
            .map_err(|e| Error::external("assembling a BTREE page", e))?;
        check_page(&self.segment.lookup, self.next_page, &page)?;
        self.next_page += 1;
        Ok(Some(page))
    }
}

/// Page `index` holds what its lookup row says: first and last value, nulls.
fn check_page(lookup: &RecordBatch, index: usize, page: &RecordBatch) -> Result<()> {
    let values = column(page, VALUES, None, WHAT)?;
    let (first, last) = (0, page.num_rows().saturating_sub(1));
    let agrees = |name: &str, row: usize| -> Result<bool> {
        let stats = column(lookup, name, None, WHAT)?;
        let compare = make_comparator(stats.as_ref(), values.as_ref(), SortOptions::default())
            .map_err(|e| Error::external("comparing BTREE values", e))?;
        Ok(compare(index, row) == Ordering::Equal)
    };
    let nulls = downcast::<UInt32Array>(column(lookup, "null_count", None, WHAT)?)?.value(index);
    if !agrees("min", first)? || !agrees("max", last)? || nulls as usize != values.null_count() {
        return Err(Error::corrupt(
            WHAT,
            format!("page {index} does not match its lookup row"),
        ));
    }
    if ids_of(page)?.null_count() > 0 {
        return Err(Error::corrupt(
            WHAT,
            format!("page {index} has a null row id"),
        ));
    }
    Ok(())
}

/// Cuts a stream of sorted rows into pages of `batch_size`, writing each and
/// keeping its lookup row.
struct PageCutter {
    writer: LanceFileWriter,
    batch_size: usize,
    buffered: Vec<RecordBatch>,
    buffered_rows: usize,
    mins: Vec<ArrayRef>,
    maxs: Vec<ArrayRef>,
    null_counts: Vec<u32>,
}

impl PageCutter {
    fn new(writer: LanceFileWriter, batch_size: u64) -> Self {
        PageCutter {
            writer,
            // The page size fits in u32 (checked when the pages are read).
            batch_size: usize::try_from(batch_size).unwrap_or(usize::MAX),
            buffered: Vec::new(),
            buffered_rows: 0,
            mins: Vec::new(),
            maxs: Vec::new(),
            null_counts: Vec::new(),
        }
    }

    async fn push(&mut self, rows: &RecordBatch) -> Result<()> {
        if self.buffered_rows == 0 && rows.num_rows() == self.batch_size {
            // A whole page as it is: no copy.
            return self.write_page(rows).await;
        }
        let mut start = 0;
        while start < rows.num_rows() {
            let take = (self.batch_size - self.buffered_rows).min(rows.num_rows() - start);
            self.buffered.push(rows.slice(start, take));
            self.buffered_rows += take;
            start += take;
            if self.buffered_rows == self.batch_size {
                self.write_buffered().await?;
            }
        }
        Ok(())
    }

    async fn write_buffered(&mut self) -> Result<()> {
        let page = arrow::compute::concat_batches(&self.writer.schema(), &self.buffered)
            .map_err(|e| Error::external("assembling a BTREE page", e))?;
        self.buffered.clear();
        self.buffered_rows = 0;
        self.write_page(&page).await
    }

    async fn write_page(&mut self, page: &RecordBatch) -> Result<()> {
        let values = column(page, VALUES, None, WHAT)?;
        self.mins.push(values.slice(0, 1));
        self.maxs.push(values.slice(page.num_rows() - 1, 1));
        // A page holds at most `batch_size` (u32) rows.
        self.null_counts.push(values.null_count() as u32);
        self.writer.write(page).await
    }

    /// Writes the last page and closes the pages file; returns the lookup.
    async fn finish(mut self, lookup_schema: &arrow_schema::SchemaRef) -> Result<RecordBatch> {
        if self.buffered_rows > 0 {
            self.write_buffered().await?;
        }
        self.writer.finish().await?;
        let value_type = lookup_schema
            .fields()
            .first()
            .map(|field| field.data_type().clone())
            .ok_or_else(|| Error::corrupt(WHAT, "lookup without columns"))?;
        let stack = |parts: &[ArrayRef]| -> Result<ArrayRef> {
            if parts.is_empty() {
                return Ok(arrow_array::new_empty_array(&value_type));
            }
            let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&parts).map_err(|e| Error::external("building the lookup", e))
        };
        let pages = u32::try_from(self.null_counts.len())
            .map_err(|_| Error::invalid_input("BTREE with more than u32::MAX pages"))?;
        RecordBatch::try_new(
            lookup_schema.clone(),
            vec![
                stack(&self.mins)?,
                stack(&self.maxs)?,
                Arc::new(UInt32Array::from(self.null_counts)),
                Arc::new(UInt32Array::from_iter_values(0..pages)),
            ],
        )
        .map_err(|e| Error::external("building the BTREE lookup", e))
    }
}

fn ids_of(batch: &RecordBatch) -> Result<&UInt64Array> {
    downcast(column(batch, IDS, Some(&DataType::UInt64), WHAT)?)
}

fn page_idx(lookup: &RecordBatch) -> Result<&UInt32Array> {
    downcast(column(lookup, "page_idx", Some(&DataType::UInt32), WHAT)?)
}

fn filter(array: &ArrayRef, keep: &arrow_array::BooleanArray) -> Result<ArrayRef> {
    arrow::compute::filter(array, keep).map_err(|e| Error::external("filtering BTREE rows", e))
}
