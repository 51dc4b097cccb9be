//! Streaming bitmap remap: postings are read a few rows at a time and each
//! posting is translated from its stored bytes ([`translate_encoded`]): a
//! fragment's part that moves by one constant (compaction of a fragment that
//! lost no row) is shifted container by container straight from the bytes;
//! other parts are translated in ascending slices of at most
//! [`MAX_TRANSLATION_BATCH`](crate::types::MAX_TRANSLATION_BATCH), so a dense
//! posting (millions of rows compressed into a few KiB) never expands into a
//! row-count-sized buffer. Every row sits in exactly one posting, so each
//! address is translated once without a memo. Through an in-memory
//! translator, the postings of a read batch are translated on two threads.

use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::ReadOptions;
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::reader::{check_schema, posting_bytes, WHAT};
use super::{BitmapDetails, BitmapWriter, BITMAP_FILE, ROWS_PER_BATCH, VALUE_COLUMN};
use crate::keys::KeyColumn;
use crate::posting::{translate_encoded, TranslateScratch};
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
        let translated = translate_all(&old, translator, &mut scratch)?;
        for (i, new) in translated.iter().enumerate() {
            writer.push(keys.key_at(i), new).await?;
        }
    }
    writer.finish().await
}

/// Translates the encoded `postings` in order. A translator that answers
/// from memory ([`TranslatorFastPaths::worth_memoizing`](refract_core::TranslatorFastPaths::worth_memoizing) is false) is shared by two
/// threads, each translating half of the postings; others are called from
/// this thread only.
fn translate_all(
    postings: &[&[u8]],
    translator: &dyn Translator,
    scratch: &mut TranslateScratch,
) -> Result<Vec<RoaringTreemap>> {
    let translate = |part: &[&[u8]], scratch: &mut TranslateScratch| -> Result<Vec<_>> {
        part.iter()
            .map(|bytes| translate_encoded(bytes, WHAT, translator, scratch))
            .collect()
    };
    if translator.worth_memoizing() || postings.len() < 2 {
        return translate(postings, scratch);
    }
    // A dense posting is a few bytes of runs, so bytes say little about the
    // work: halves by count.
    let (first, second) = postings.split_at(postings.len() / 2);
    let (head, tail) = std::thread::scope(|threads| {
        let tail = threads.spawn(|| translate(second, &mut TranslateScratch::default()));
        (translate(first, scratch), tail.join())
    });
    let tail = tail.map_err(|_| Error::invalid_input("a bitmap remap thread panicked"))?;
    let mut all = head?;
    all.extend(tail?);
    Ok(all)
}
