//! pylance's BITMAP (`/lance.table.BitmapIndexDetails`, lance-index 14.0.2).
//!
//! One file, `bitmap_page_lookup.lance`: columns `keys` (the indexed type,
//! nullable; the null key holds the rows whose value is null) and `bitmaps`
//! (Binary: the key's rows as a Lance `RowAddrTreeMap`, see
//! [`posting::lance`](crate::posting::codec::lance)), one row per key in key
//! order, with schema metadata `lance:index_stats` = `{"num_bitmaps":N}`.
//!
//! The remap streams the keys a few rows at a time and translates each
//! posting from its stored bytes (the same translation as Refract's own
//! bitmap: constant shifts straight from the containers, other parts in
//! ascending batches of at most
//! [`MAX_TRANSLATION_BATCH`](crate::types::MAX_TRANSLATION_BATCH)); a key
//! whose rows are all gone is left out, as pylance's remap leaves it out.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{PageLayout, RelativePath};
use roaring::RoaringTreemap;

use super::{column, create_like, open_file, LanceLayout};
use crate::posting::codec::lance;
use crate::posting::{translate_many, TranslateScratch};
use crate::types::{IndexContext, Translator};

/// The lookup file (the only file of a BITMAP segment).
pub const BITMAP_LOOKUP_FILE: &str = "bitmap_page_lookup.lance";
const KEYS: &str = "keys";
const BITMAPS: &str = "bitmaps";
const STATS_KEY: &str = "lance:index_stats";
/// Keys per read and per written batch.
const ROWS_PER_BATCH: u32 = 256;
const WHAT: &str = "pylance BITMAP index";

/// The BITMAP layout.
#[derive(Debug, Default, Clone, Copy)]
pub struct BitmapLayout;

#[async_trait]
impl LanceLayout for BitmapLayout {
    const TYPE_URL: &'static str = "/lance.table.BitmapIndexDetails";
    const LABEL: &'static str = "BITMAP";
    const MAX_INDEX_VERSION: u32 = 0;

    async fn stored_addresses(ctx: &IndexContext, dir: &RelativePath) -> Result<RoaringTreemap> {
        let file = open_file(ctx, dir, BITMAP_LOOKUP_FILE).await?;
        check_schema(&file.schema())?;
        let mut stream = file
            .read_range(0..file.num_rows(), Some(&[BITMAPS]), ROWS_PER_BATCH)
            .await?;
        let mut addresses = RoaringTreemap::new();
        while let Some(batch) = stream.try_next().await? {
            for bytes in postings(&batch)?.iter() {
                let parts = lance::parts(bytes.unwrap_or_default(), WHAT)?;
                addresses |= crate::posting::decode(parts, WHAT)?;
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
        let file = open_file(ctx, old_dir, BITMAP_LOOKUP_FILE).await?;
        let schema = file.schema();
        check_schema(&schema)?;
        let mut writer = create_like(
            ctx,
            &file,
            new_dir,
            BITMAP_LOOKUP_FILE,
            schema.clone(),
            PageLayout::Buffered,
        )
        .await?;
        let mut stream = file
            .read_range(0..file.num_rows(), None, ROWS_PER_BATCH)
            .await?;
        let (mut scratch, mut kept_keys) = (TranslateScratch::default(), 0u64);
        while let Some(batch) = stream.try_next().await? {
            let keys = column(&batch, KEYS, None, WHAT)?;
            let old = postings(&batch)?
                .iter()
                .map(|bytes| lance::parts(bytes.unwrap_or_default(), WHAT))
                .collect::<Result<Vec<_>>>()?;
            let translated = translate_many(&old, WHAT, translator, &mut scratch)?;
            let kept: Vec<u32> = (0u32..)
                .zip(&translated)
                .filter(|(_, posting)| !posting.is_empty())
                .map(|(row, _)| row)
                .collect();
            if kept.is_empty() {
                continue;
            }
            let keys = arrow::compute::take(keys.as_ref(), &UInt32Array::from(kept.clone()), None)
                .map_err(|e| Error::external("selecting BITMAP keys", e))?;
            let bitmaps: BinaryArray = kept
                .iter()
                .map(|row| Some(lance::encode(&translated[*row as usize])))
                .collect();
            kept_keys += kept.len() as u64;
            let out = RecordBatch::try_new(schema.clone(), vec![keys, Arc::new(bitmaps)])
                .map_err(|e| Error::external("assembling remapped BITMAP rows", e))?;
            writer.write(&out).await?;
        }
        writer.add_schema_metadata(STATS_KEY, &format!("{{\"num_bitmaps\":{kept_keys}}}"));
        writer.finish().await?;
        Ok(())
    }
}

/// `keys` (any type) and `bitmaps` (Binary), in that order.
fn check_schema(schema: &arrow_schema::Schema) -> Result<()> {
    let fields = schema.fields();
    if fields.len() != 2
        || fields[0].name() != KEYS
        || fields[1].name() != BITMAPS
        || fields[1].data_type() != &DataType::Binary
    {
        return Err(Error::corrupt(
            WHAT,
            format!("{BITMAP_LOOKUP_FILE} is not (keys, bitmaps Binary)"),
        ));
    }
    Ok(())
}

fn postings(batch: &RecordBatch) -> Result<&BinaryArray> {
    let array = column(batch, BITMAPS, Some(&DataType::Binary), WHAT)?;
    let postings = array
        .as_any()
        .downcast_ref::<BinaryArray>()
        .ok_or_else(|| Error::corrupt(WHAT, "bitmaps are not Binary"))?;
    if postings.null_count() > 0 {
        return Err(Error::corrupt(WHAT, "null bitmap"));
    }
    Ok(postings)
}
