//! Streaming btree remap.
//!
//! Pages are read in slices of at most [`MAX_TRANSLATION_BATCH`] rows; each
//! slice's addresses are translated in one call, rows that translate to `None`
//! are dropped, and the survivors are re-cut into fresh pages with a rebuilt
//! lookup. Values are never re-sorted: translation does not change a value, so
//! only the addresses inside a run of equal values can fall out of order, and
//! only those runs are sorted. A run that crosses a slice boundary is carried
//! into the next slice (up to [`MAX_CARRIED_ROWS`]; a longer run is sorted in
//! pieces, which searches do not depend on).

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch, UInt64Array};
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath};

use super::pages::PageWriter;
use super::reader::{check_data_schema, split_page_batch};
use super::{data_schema, filter, BTreeDetails, PAGE_DATA_FILE};
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
    if details.num_rows == 0 {
        return Ok(details.clone());
    }
    let data = LanceFileReader::open(&ctx.store, &old_dir.join(PAGE_DATA_FILE)?, None).await?;
    let value_type = check_data_schema(&data)?;
    if data.num_rows() != details.num_rows {
        return Err(Error::corrupt(
            "btree page data",
            format!(
                "holds {} rows, details say {}",
                data.num_rows(),
                details.num_rows
            ),
        ));
    }
    let mut writer = PageWriter::new(
        ctx.clone(),
        new_dir.clone(),
        value_type.clone(),
        details.page_rows,
    );
    // MAX_TRANSLATION_BATCH (65,536) fits in u32.
    let mut stream = data
        .read_range(0..data.num_rows(), None, MAX_TRANSLATION_BATCH as u32)
        .await?;
    let mut translated = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut carry: Option<RecordBatch> = None;
    while let Some(batch) = stream.try_next().await? {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = (batch.num_rows() - offset).min(MAX_TRANSLATION_BATCH);
            let slice = translate_slice(&batch.slice(offset, len), translator, &mut translated)?;
            offset += len;
            let joined = match carry.take() {
                Some(prev) => {
                    arrow::compute::concat_batches(&data_schema(&value_type), [&prev, &slice])
                        .map_err(|e| Error::external("joining btree runs", e))?
                }
                None => slice,
            };
            let (ready, tail) = split_last_run(&joined)?;
            writer.push(&sort_addresses_within_runs(&ready)?).await?;
            carry = tail;
        }
    }
    if let Some(tail) = carry {
        writer.push(&sort_addresses_within_runs(&tail)?).await?;
    }
    writer.finish().await
}

/// Translates the addresses of `slice` (at most one batch) and drops gone rows.
fn translate_slice(
    slice: &RecordBatch,
    translator: &dyn Translator,
    out: &mut Vec<Option<u64>>,
) -> Result<RecordBatch> {
    let (_, addrs) = split_page_batch(slice)?;
    out.clear();
    translator.translate(addrs.values(), out)?;
    if out.len() != addrs.len() {
        return Err(Error::invalid_input(format!(
            "translator returned {} results for {} addresses",
            out.len(),
            addrs.len()
        )));
    }
    let keep: BooleanArray = out.iter().map(|a| Some(a.is_some())).collect();
    let new_addrs: UInt64Array = out.iter().flatten().copied().collect();
    // `split_page_batch` found both columns, so column 0 (the value) exists.
    let value = filter(slice.column(0), &keep)?;
    RecordBatch::try_new(
        data_schema(value.data_type()),
        vec![value, Arc::new(new_addrs)],
    )
    .map_err(|e| Error::external("assembling translated btree rows", e))
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
                    return Err(Error::corrupt("btree page data", "values are not sorted"))
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
