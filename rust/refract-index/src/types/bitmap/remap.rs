//! Streaming bitmap remap: postings are read a few rows at a time and each
//! posting is translated from its stored bytes ([`translate_encoded`]): a
//! fragment's part that moves by one constant (compaction of a fragment that
//! lost no row) is shifted container by container straight from the bytes;
//! other parts are translated in ascending slices of at most
//! [`MAX_TRANSLATION_BATCH`](crate::types::MAX_TRANSLATION_BATCH), so a dense
//! posting (millions of rows compressed into a few KiB) never expands into a
//! row-count-sized buffer. Every row sits in exactly one posting, so each
//! address is translated once without a memo. Through an in-memory
//! translator, the postings of a read batch are translated on two threads
//! ([`translate_many`]).

use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::ReadOptions;
use refract_table::io::{LanceFileReader, RelativePath};

use super::reader::{check_schema, posting_bytes, WHAT};
use super::{BitmapDetails, BitmapWriter, BITMAP_FILE, ROWS_PER_BATCH, VALUE_COLUMN};
use crate::keys::KeyColumn;
use crate::posting::{translate_many, TranslateScratch};
use crate::types::{IndexContext, Translator};

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
    let file = LanceFileReader::open(
        &ctx.store,
        &old_dir.join(BITMAP_FILE)?,
        ReadOptions::default(),
    )
    .await?;
    let value_type = check_schema(&file)?.value_type;
    if file.num_rows() != details.num_keys {
        return Err(Error::corrupt(
            WHAT,
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
    let mut scratch = TranslateScratch::default();
    while let Some(batch) = stream.try_next().await? {
        let values = batch
            .column_by_name(VALUE_COLUMN)
            .ok_or_else(|| Error::corrupt(WHAT, "missing value column"))?;
        let keys = KeyColumn::new(values)?;
        // Read in place: no decoded copy of the old postings.
        let old: Vec<&[u8]> = posting_bytes(&batch)?
            .iter()
            .map(|bytes| bytes.unwrap_or_default())
            .collect();
        let translated = translate_many(&old, WHAT, translator, &mut scratch)?;
        for (i, new) in translated.iter().enumerate() {
            writer.push(keys.key_at(i), new).await?;
        }
    }
    writer.finish().await
}
