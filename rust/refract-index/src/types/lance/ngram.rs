//! pylance's NGRAM (`/lance.table.NGramIndexDetails`, lance-index 14.0.2).
//!
//! One file, `ngram_postings.lance`: columns `tokens` (UInt32, the trigram
//! token) and `posting_list` (Binary, field metadata `lance-encoding:compression`
//! = `none`: the token's rows as a serialized `RoaringTreemap`, the form
//! Refract's own ngram stores), one row per token in token order.
//!
//! The remap streams the tokens a window at a time; a row sits in one
//! posting per trigram of its value, so addresses go through a
//! [`TranslationMemo`] (each translated once, in ascending batches of at most
//! [`MAX_TRANSLATION_BATCH`](crate::types::MAX_TRANSLATION_BATCH)). Every token
//! is kept, its posting possibly empty, as pylance's own remap keeps it.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{read_ahead, PageLayout, RelativePath, WindowSize, STREAMING_PAGE_BYTES};
use roaring::RoaringTreemap;

use super::{column, create_like, open_file, LanceLayout};
use crate::keys::downcast;
use crate::posting::TranslationMemo;
use crate::types::{IndexContext, Translator};

/// The postings file (the only file of an NGRAM segment).
pub const POSTINGS_FILE: &str = "ngram_postings.lance";
const TOKENS: &str = "tokens";
const POSTINGS: &str = "posting_list";
/// Posting bytes one read window aims at, and its most rows.
const WINDOW_BYTES: usize = 256 << 10;
const WINDOW_MAX_ROWS: u32 = 1024;
/// Windows read ahead of the rewrite.
const READ_AHEAD: usize = 2;
const WHAT: &str = "pylance NGRAM index";

/// The NGRAM layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct NgramLayout;

#[async_trait]
impl LanceLayout for NgramLayout {
    const TYPE_URL: &'static str = "/lance.table.NGramIndexDetails";
    const LABEL: &'static str = "NGRAM";
    const MAX_INDEX_VERSION: u32 = 0;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        let file = open_file(ctx, dir, POSTINGS_FILE).await?;
        check_schema(&file.schema())?;
        let mut windows = read_ahead(&file, WindowSize::bytes(WINDOW_BYTES, WINDOW_MAX_ROWS), 1)?;
        let mut addresses = RoaringTreemap::new();
        while let Some(batch) = windows.try_next().await? {
            let (_, postings) = columns(&batch)?;
            for bytes in postings.iter() {
                addresses |= decode(bytes.unwrap_or_default())?;
            }
        }
        Ok(addresses)
    }

    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()> {
        let file = open_file(ctx, old_dir, POSTINGS_FILE).await?;
        let schema = file.schema();
        check_schema(&schema)?;
        let mut writer = create_like(
            ctx,
            &file,
            new_dir,
            POSTINGS_FILE,
            schema.clone(),
            PageLayout::Streaming {
                page_bytes: STREAMING_PAGE_BYTES,
            },
        )
        .await?;
        let mut memo = TranslationMemo::new();
        let mut windows = read_ahead(
            &file,
            WindowSize::bytes(WINDOW_BYTES, WINDOW_MAX_ROWS),
            READ_AHEAD,
        )?;
        let mut previous: Option<u32> = None;
        while let Some(batch) = windows.try_next().await? {
            let (tokens, postings) = columns(&batch)?;
            let mut remapped = Vec::with_capacity(batch.num_rows());
            for (row, token) in tokens.values().iter().enumerate() {
                if previous.is_some_and(|p| p >= *token) {
                    return Err(Error::corrupt(WHAT, "tokens are not strictly ascending"));
                }
                previous = Some(*token);
                let mut posting = memo.remap_serialized(postings.value(row), WHAT, translator)?;
                posting.optimize();
                let mut bytes = Vec::with_capacity(posting.serialized_size());
                posting
                    .serialize_into(&mut bytes)
                    .map_err(|e| Error::external("serializing an NGRAM posting", e))?;
                remapped.push(bytes);
            }
            let postings: BinaryArray = remapped.iter().map(|b| Some(b.as_slice())).collect();
            let out = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(tokens.clone()), Arc::new(postings)],
            )
            .map_err(|e| Error::external("assembling remapped NGRAM rows", e))?;
            writer.write(&out).await?;
        }
        writer.finish().await?;
        Ok(())
    }
}

/// `tokens` (UInt32) and `posting_list` (Binary), in that order.
fn check_schema(schema: &arrow_schema::Schema) -> Result<()> {
    let fields = schema.fields();
    let shape_ok = fields.len() == 2
        && fields[0].name() == TOKENS
        && fields[0].data_type() == &DataType::UInt32
        && fields[1].name() == POSTINGS
        && fields[1].data_type() == &DataType::Binary;
    if !shape_ok {
        return Err(Error::corrupt(
            WHAT,
            format!("{POSTINGS_FILE} is not (tokens UInt32, posting_list Binary)"),
        ));
    }
    Ok(())
}

fn columns(batch: &RecordBatch) -> Result<(&UInt32Array, &BinaryArray)> {
    let tokens: &UInt32Array = downcast(column(batch, TOKENS, Some(&DataType::UInt32), WHAT)?)?;
    let postings: &BinaryArray = downcast(column(batch, POSTINGS, Some(&DataType::Binary), WHAT)?)?;
    if tokens.null_count() > 0 || postings.null_count() > 0 {
        return Err(Error::corrupt(WHAT, "null token or posting"));
    }
    Ok((tokens, postings))
}

/// A stored posting (framing checked by the memo's reader on remap; here
/// through roaring's own, then required to end where the bytes end).
fn decode(bytes: &[u8]) -> Result<RoaringTreemap> {
    let mut rest = bytes;
    let posting = RoaringTreemap::deserialize_from(&mut rest)
        .map_err(|e| Error::corrupt(WHAT, e.to_string()))?;
    if !rest.is_empty() {
        return Err(Error::corrupt(WHAT, "trailing bytes after a posting"));
    }
    Ok(posting)
}
