//! Streaming bitmap remap: postings are read a few rows at a time and each
//! posting's addresses are translated in slices of at most
//! [`MAX_TRANSLATION_BATCH`], so a dense posting (millions of rows compressed
//! into a few KiB) never expands into a row-count-sized buffer.

use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::reader::{check_schema, decode_postings};
use super::{BitmapDetails, BitmapWriter, BITMAP_FILE, ROWS_PER_BATCH, VALUE_COLUMN};
use crate::keys::KeyColumn;
use crate::types::{IndexContext, Translator, MAX_TRANSLATION_BATCH};

/// Rewrites the bitmap segment at `old_dir` into `new_dir` through `translator`.
pub(crate) async fn remap(
    ctx: &IndexContext,
    old_dir: &RelativePath,
    details: &BitmapDetails,
    new_dir: &RelativePath,
    translator: &dyn Translator,
) -> Result<BitmapDetails> {
    if details.num_keys == 0 {
        return Ok(details.clone());
    }
    let file = LanceFileReader::open(&ctx.store, &old_dir.join(BITMAP_FILE)?, None).await?;
    let value_type = check_schema(&file)?;
    if file.num_rows() != details.num_keys {
        return Err(Error::corrupt(
            "bitmap index",
            format!(
                "holds {} rows, details say {}",
                file.num_rows(),
                details.num_keys
            ),
        ));
    }
    let mut writer = BitmapWriter::new(ctx, new_dir, &value_type);
    // ROWS_PER_BATCH (256) fits in u32.
    let mut stream = file
        .read_range(0..file.num_rows(), None, ROWS_PER_BATCH as u32)
        .await?;
    let mut slice = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut out = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    while let Some(batch) = stream.try_next().await? {
        let values = batch
            .column_by_name(VALUE_COLUMN)
            .ok_or_else(|| Error::corrupt("bitmap index", "missing value column"))?;
        let keys = KeyColumn::new(values)?;
        for (i, old) in decode_postings(&batch)?.into_iter().enumerate() {
            let new = translate_posting(&old, translator, &mut slice, &mut out)?;
            writer.push(keys.key_at(i), &new).await?;
        }
    }
    writer.finish().await
}

/// Translates one posting in bounded slices; gone rows are dropped.
pub(crate) fn translate_posting(
    old: &RoaringTreemap,
    translator: &dyn Translator,
    slice: &mut Vec<u64>,
    out: &mut Vec<Option<u64>>,
) -> Result<RoaringTreemap> {
    let mut new = RoaringTreemap::new();
    let mut addrs = old.iter();
    loop {
        slice.clear();
        slice.extend(addrs.by_ref().take(MAX_TRANSLATION_BATCH));
        if slice.is_empty() {
            return Ok(new);
        }
        out.clear();
        translator.translate(slice, out)?;
        if out.len() != slice.len() {
            return Err(Error::invalid_input(format!(
                "translator returned {} results for {} addresses",
                out.len(),
                slice.len()
            )));
        }
        new.extend(out.iter().flatten().copied());
    }
}
