//! Streaming btree remap.
//!
//! **Address-only remap** (the usual case, layout 2): values and their order
//! do not change, so `values.lance` and `page_lookup.lance` are copied with
//! the store's server-side copy and only `addresses.lance` is rewritten, in
//! slices of at most [`MAX_TRANSLATION_BATCH`] rows. Rows whose address
//! translates to `None` become tombstones (nulls).
//!
//! **Full rewrite** (layout 1 segments, or when the tombstones would exceed
//! `entries / TOMBSTONE_DIVISOR`): pages are read in slices of at most
//! [`MAX_TRANSLATION_BATCH`] rows; each slice's addresses are translated in
//! one call, tombstones and rows that translate to `None` are dropped, and
//! the survivors are re-cut into fresh pages with a rebuilt lookup. Values
//! are never re-sorted: translation does not change a value, so only the
//! addresses inside a run of equal values can fall out of order, and only
//! those runs are sorted. A run that crosses a slice boundary is carried
//! into the next slice (up to [`MAX_CARRIED_ROWS`]; a longer run is sorted in
//! pieces, which searches do not depend on).
//!
//! Both paths hold one slice at a time plus the Lance writers' page buffers,
//! so their memory does not grow with the segment.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};

use refract_core::{Error, Result};
use refract_table::io::RelativePath;

use super::files::{Caching, SegmentFiles, VALUE_READ_ROWS};
use super::pages::PageWriter;
use super::{
    data_schema, filter, BTreeDetails, ADDRESSES_FILE, ADDR_COLUMN, BTREE_VERSION,
    PAGE_LOOKUP_FILE, VALUES_FILE, VALUE_COLUMN,
};
use crate::keys::{downcast, KeyColumn};
use crate::types::addresses::{
    bounded_pieces, write_translated_addresses, AddressTranslation, TOMBSTONE_DIVISOR,
};
use crate::types::{IndexContext, Translator, MAX_TRANSLATION_BATCH};

/// Longest equal-value run carried across slices to keep its addresses sorted.
pub const MAX_CARRIED_ROWS: usize = 4 * MAX_TRANSLATION_BATCH;

/// Rewrites the btree at `old_dir` into `new_dir` through `translator`.
pub(crate) async fn remap(
    ctx: &IndexContext,
    old_dir: &RelativePath,
    details: &BTreeDetails,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<BTreeDetails> {
    if details.entries()? == 0 {
        return Ok(BTreeDetails::empty(details.page_rows));
    }
    let files = SegmentFiles::open(ctx, old_dir, details, Caching::Streaming).await?;
    if details.version == BTREE_VERSION {
        if let Some(new) =
            remap_addresses(ctx, &files, old_dir, details, new_dir, translator).await?
        {
            return Ok(new);
        }
    }
    rewrite(ctx, &files, details, new_dir, translator).await
}

/// The address-only remap; `None` (and nothing written) when the tombstones
/// would exceed the limit.
async fn remap_addresses(
    ctx: &IndexContext,
    files: &SegmentFiles,
    old_dir: &RelativePath,
    details: &BTreeDetails,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<Option<BTreeDetails>> {
    let entries = files.entries();
    if details.tombstones > entries / TOMBSTONE_DIVISOR {
        return Ok(None);
    }
    let Some(tombstones) = write_translated_addresses(
        &ctx.store,
        files.addresses(),
        &new_dir.join(ADDRESSES_FILE)?,
        translator,
        "btree addresses",
    )
    .await?
    else {
        return Ok(None);
    };
    for name in [VALUES_FILE, PAGE_LOOKUP_FILE] {
        ctx.store
            .copy(&old_dir.join(name)?, &new_dir.join(name)?)
            .await?;
    }
    Ok(Some(BTreeDetails {
        num_rows: entries - tombstones,
        num_pages: details.num_pages,
        page_rows: details.page_rows,
        version: BTREE_VERSION,
        tombstones,
    }))
}

/// The full rewrite: drops tombstones and gone rows, re-cuts pages and lookup.
async fn rewrite(
    ctx: &IndexContext,
    files: &SegmentFiles,
    details: &BTreeDetails,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<BTreeDetails> {
    let value_type = files.value_type().clone();
    let schema = data_schema(&value_type);
    let mut writer = PageWriter::new(ctx.clone(), new_dir.clone(), value_type, details.page_rows);
    let mut translation = AddressTranslation::default();
    let mut carry: Option<RecordBatch> = None;
    for piece in bounded_pieces(0..files.entries(), VALUE_READ_ROWS) {
        let values = files.read_values(piece.clone()).await?;
        let old = files.read_addresses(piece).await?;
        let new = translation.translate(&old, translator)?;
        let keep = arrow::compute::is_not_null(&new)
            .map_err(|e| Error::external("filtering remapped btree rows", e))?;
        let slice = RecordBatch::try_new(
            schema.clone(),
            vec![
                filter(&values, &keep)?,
                filter(&(Arc::new(new) as _), &keep)?,
            ],
        )
        .map_err(|e| Error::external("assembling translated btree rows", e))?;
        let joined = match carry.take() {
            Some(prev) => arrow::compute::concat_batches(&schema, [&prev, &slice])
                .map_err(|e| Error::external("joining btree runs", e))?,
            None => slice,
        };
        let (ready, tail) = split_last_run(&joined)?;
        writer.push(&sort_addresses_within_runs(&ready)?).await?;
        carry = tail;
    }
    if let Some(tail) = carry {
        writer.push(&sort_addresses_within_runs(&tail)?).await?;
    }
    writer.finish().await
}

/// Splits off the last run of equal values (unless it is too long to carry).
fn split_last_run(batch: &RecordBatch) -> Result<(RecordBatch, Option<RecordBatch>)> {
    let n = batch.num_rows();
    if n == 0 {
        return Ok((batch.clone(), None));
    }
    let (values, _) = split_page_batch(batch)?;
    let mut start = n - 1;
    while start > 0 && values.cmp_rows(start - 1, n - 1) == Ordering::Equal {
        start -= 1;
    }
    if n - start > MAX_CARRIED_ROWS {
        return Ok((batch.clone(), None));
    }
    Ok((batch.slice(0, start), Some(batch.slice(start, n - start))))
}

/// Sorts the addresses inside each run of equal values; checks the values are sorted.
fn sort_addresses_within_runs(batch: &RecordBatch) -> Result<RecordBatch> {
    let (values, addrs) = split_page_batch(batch)?;
    let mut sorted = addrs.values().to_vec();
    let mut run_start = 0;
    for i in 1..=sorted.len() {
        let run_ends = i == sorted.len() || {
            match values.cmp_rows(i - 1, i) {
                Ordering::Equal => false,
                Ordering::Less => true,
                Ordering::Greater => {
                    return Err(Error::corrupt("btree values", "values are not sorted"))
                }
            }
        };
        if run_ends {
            if let Some(run) = sorted.get_mut(run_start..i) {
                run.sort_unstable();
            }
            run_start = i;
        }
    }
    // `split_page_batch` found both columns, so column 0 (the value) exists.
    RecordBatch::try_new(
        batch.schema(),
        vec![batch.column(0).clone(), Arc::new(UInt64Array::from(sorted))],
    )
    .map_err(|e| Error::external("assembling remapped btree rows", e))
}

/// The value keys and addresses of a sorted `(value, _rowaddr)` batch.
fn split_page_batch(batch: &RecordBatch) -> Result<(KeyColumn, UInt64Array)> {
    let value = batch
        .column_by_name(VALUE_COLUMN)
        .ok_or_else(|| Error::corrupt("btree rows", "missing value column"))?;
    let addr = batch
        .column_by_name(ADDR_COLUMN)
        .ok_or_else(|| Error::corrupt("btree rows", "missing _rowaddr column"))?;
    if value.null_count() > 0 || addr.null_count() > 0 {
        return Err(Error::corrupt("btree rows", "null value or address"));
    }
    Ok((
        KeyColumn::new(value)?,
        downcast::<UInt64Array>(addr)?.clone(),
    ))
}
