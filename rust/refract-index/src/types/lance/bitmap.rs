//! pylance's BITMAP (`/lance.table.BitmapIndexDetails`) and LABEL_LIST
//! (`/lance.table.LabelListIndexDetails`), lance-index 14.0.2: one layout.
//!
//! One file, `bitmap_page_lookup.lance`: columns `keys` (the indexed type,
//! nullable; the null key holds the rows whose value is null) and `bitmaps`
//! (Binary: the key's rows as a Lance `RowAddrTreeMap`, see
//! [`posting::lance`](crate::posting::codec::lance)), one row per key in key
//! order, with schema metadata `lance:index_stats` = `{"num_bitmaps":N}`.
//! LABEL_LIST (a key per label) adds the rows whose list is null, a
//! `RowAddrTreeMap` in the global buffer whose index the schema metadata
//! `lance:label_list_nulls` names (index version 1; version 0 has none).
//!
//! The remap streams the keys a few rows at a time and translates each
//! posting from its stored bytes (the same translation as Refract's own
//! bitmap: constant shifts straight from the containers, other parts in
//! ascending batches of at most
//! [`MAX_TRANSLATION_BATCH`](crate::types::MAX_TRANSLATION_BATCH)); a key
//! whose rows are all gone is left out, as pylance's remap leaves it out.
//! The null rows of a LABEL_LIST are translated the same way, into a new
//! global buffer.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, PageLayout, RelativePath};
use roaring::RoaringTreemap;

use super::{column, create_like, open_file, LanceLayout};
use crate::keys::downcast;
use crate::posting::codec::lance;
use crate::posting::{translate_many, TranslateScratch};
use crate::types::{IndexContext, Translator};

/// The lookup file (the only file of a BITMAP segment).
pub const BITMAP_LOOKUP_FILE: &str = "bitmap_page_lookup.lance";
const KEYS: &str = "keys";
const BITMAPS: &str = "bitmaps";
const STATS_KEY: &str = "lance:index_stats";
const LIST_NULLS_KEY: &str = "lance:label_list_nulls";
/// Keys per read and per written batch.
const ROWS_PER_BATCH: u32 = 256;
const WHAT: &str = "pylance BITMAP index";

/// The BITMAP layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct BitmapLayout;

/// The LABEL_LIST layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct LabelListLayout;

#[async_trait]
impl LanceLayout for BitmapLayout {
    const TYPE_URL: &'static str = "/lance.table.BitmapIndexDetails";
    const LABEL: &'static str = "BITMAP";
    const MAX_INDEX_VERSION: u32 = 0;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        stored_addresses(ctx, dir, WHAT).await
    }

    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()> {
        remap(ctx, old_dir, new_dir, translator, WHAT).await
    }
}

#[async_trait]
impl LanceLayout for LabelListLayout {
    const TYPE_URL: &'static str = "/lance.table.LabelListIndexDetails";
    const LABEL: &'static str = "LABEL_LIST";
    // 0: no null-list rows recorded, 1: recorded in a global buffer.
    const MAX_INDEX_VERSION: u32 = 1;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        stored_addresses(ctx, dir, LABEL_LIST_WHAT).await
    }

    async fn remap(
        ctx: &IndexContext,
        old_dir: &RelativePath,
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<()> {
        remap(ctx, old_dir, new_dir, translator, LABEL_LIST_WHAT).await
    }
}

const LABEL_LIST_WHAT: &str = "pylance LABEL_LIST index";

/// Every address of the postings and of the null rows (if recorded).
async fn stored_addresses(
    ctx: &IndexContext,
    dir: &RelativePath,
    what: &str,
) -> Result<RoaringTreemap> {
    let file = open_file(ctx, dir, BITMAP_LOOKUP_FILE).await?;
    check_schema(&file.schema(), what)?;
    let mut addresses = match list_nulls(&file, what).await? {
        Some(bytes) => crate::posting::decode(lance::parts(&bytes, what)?, what)?,
        None => RoaringTreemap::new(),
    };
    let mut stream = file
        .read_range(0..file.num_rows(), Some(&[BITMAPS]), ROWS_PER_BATCH)
        .await?;
    while let Some(batch) = stream.try_next().await? {
        for bytes in postings(&batch, what)?.iter() {
            let parts = lance::parts(bytes.unwrap_or_default(), what)?;
            addresses |= crate::posting::decode(parts, what)?;
        }
    }
    Ok(addresses)
}

/// The null-list rows' global buffer, when the metadata names one.
async fn list_nulls(file: &LanceFileReader, what: &str) -> Result<Option<bytes::Bytes>> {
    let Some(index) = file.schema().metadata.get(LIST_NULLS_KEY).cloned() else {
        return Ok(None);
    };
    let index: u32 = index.parse().map_err(|_| {
        Error::corrupt(what, format!("{LIST_NULLS_KEY} names no buffer: '{index}'"))
    })?;
    Ok(Some(file.read_global_buffer(index).await?))
}

async fn remap(
    ctx: &IndexContext,
    old_dir: &RelativePath,
    new_dir: &RelativePath,
    translator: &dyn Translator,
    what: &str,
) -> Result<()> {
    let file = open_file(ctx, old_dir, BITMAP_LOOKUP_FILE).await?;
    let schema = file.schema();
    check_schema(&schema, what)?;
    let nulls = list_nulls(&file, what).await?;
    let mut writer = create_like(
        ctx,
        &file,
        new_dir,
        BITMAP_LOOKUP_FILE,
        schema.clone(),
        PageLayout::Buffered,
    )
    .await?;
    let mut scratch = TranslateScratch::default();
    if let Some(nulls) = nulls {
        let parts = lance::parts(&nulls, what)?;
        let translated = translate_many(&[parts], what, translator, &mut scratch)?;
        let index = writer.add_global_buffer(lance::encode(&translated[0]).into())?;
        writer.add_schema_metadata(LIST_NULLS_KEY, &index.to_string());
    }
    let mut stream = file
        .read_range(0..file.num_rows(), None, ROWS_PER_BATCH)
        .await?;
    let mut kept_keys = 0u64;
    while let Some(batch) = stream.try_next().await? {
        let keys = column(&batch, KEYS, None, what)?;
        let old = postings(&batch, what)?
            .iter()
            .map(|bytes| lance::parts(bytes.unwrap_or_default(), what))
            .collect::<Result<Vec<_>>>()?;
        let translated = translate_many(&old, what, translator, &mut scratch)?;
        let kept: Vec<u32> = (0u32..)
            .zip(&translated)
            .filter(|(_, posting)| !posting.is_empty())
            .map(|(row, _)| row)
            .collect();
        if kept.is_empty() {
            continue;
        }
        let keys = arrow::compute::take(keys.as_ref(), &UInt32Array::from(kept.clone()), None)
            .map_err(|e| Error::external("selecting bitmap keys", e))?;
        let bitmaps: BinaryArray = kept
            .iter()
            .map(|row| Some(lance::encode(&translated[*row as usize])))
            .collect();
        kept_keys += kept.len() as u64;
        let out = RecordBatch::try_new(schema.clone(), vec![keys, Arc::new(bitmaps)])
            .map_err(|e| Error::external("assembling remapped bitmap rows", e))?;
        writer.write(&out).await?;
    }
    writer.add_schema_metadata(STATS_KEY, &format!("{{\"num_bitmaps\":{kept_keys}}}"));
    writer.finish().await?;
    Ok(())
}

/// `keys` (any type) and `bitmaps` (Binary), in that order.
fn check_schema(schema: &arrow_schema::Schema, what: &str) -> Result<()> {
    let fields = schema.fields();
    if fields.len() != 2
        || fields[0].name() != KEYS
        || fields[1].name() != BITMAPS
        || fields[1].data_type() != &DataType::Binary
    {
        return Err(Error::corrupt(
            what,
            format!("{BITMAP_LOOKUP_FILE} is not (keys, bitmaps Binary)"),
        ));
    }
    Ok(())
}

fn postings<'a>(batch: &'a RecordBatch, what: &str) -> Result<&'a BinaryArray> {
    let postings: &BinaryArray = downcast(column(batch, BITMAPS, Some(&DataType::Binary), what)?)?;
    if postings.null_count() > 0 {
        return Err(Error::corrupt(what, "null bitmap"));
    }
    Ok(postings)
}
