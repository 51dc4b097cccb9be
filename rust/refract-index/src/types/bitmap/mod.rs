//! The bitmap index: one row per distinct value holding the posting (the set of
//! row addresses) of that value, plus one row with a null value for the null
//! posting.
//!
//! File under the segment directory: `bitmap.lance` with columns `value` (the
//! indexed type, nullable), `posting` (Binary, see [`crate::posting`]) and
//! the posting's read statistics `rows`, `fragments`, `ranges`, `read_rows`
//! (UInt64: its address count and what reading those rows costs, see
//! [`Work::index`]), sorted with the null row first, then by value. Opening
//! reads the value and statistics columns (cached in the session), so the
//! query planner knows what reading a search's answer costs before it
//! searches; a search takes just the postings it needs. Segments written
//! before the statistics existed open without them (no estimate). An empty
//! segment writes no file.

mod reader;
mod remap;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::compute::cast;
use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::PageLayout;
use refract_table::io::{LanceFileWriter, RelativePath};
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

use crate::keys::{downcast, Key, KeyColumn, KeyKind};
use crate::posting;
use crate::query::cost::Work;
use crate::types::{IndexContext, IndexParams, IndexSegmentReader, IndexType, Translator};

pub use reader::BitmapSegment;

/// Stored type name.
pub const BITMAP_TYPE: &str = "bitmap";
/// On-disk layout version.
pub const BITMAP_VERSION: u32 = 1;
/// File name.
pub const BITMAP_FILE: &str = "bitmap.lance";
/// Value column.
pub const VALUE_COLUMN: &str = "value";
/// Posting column.
pub const POSTING_COLUMN: &str = "posting";
/// Statistics columns: each posting's [`Work::index`] figures, in
/// [`PostingStats`] field order.
pub const STATS_COLUMNS: [&str; 4] = ["rows", "fragments", "ranges", "read_rows"];

/// What one posting holds and what reading its rows costs, as stored
/// (before deletions and translation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PostingStats {
    /// Addresses in the posting.
    pub rows: u64,
    /// Reading them, per [`Work::index`].
    pub read: Work,
}

impl PostingStats {
    /// The statistics of `posting`.
    pub fn of(posting: &RoaringTreemap) -> Self {
        Self {
            rows: posting.len(),
            read: Work::index(posting),
        }
    }
}
/// Rows per write / remap read batch.
const ROWS_PER_BATCH: usize = 256;

/// What the manifest stores for a bitmap segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitmapDetails {
    /// Rows in `bitmap.lance` (distinct values, plus one if nulls exist).
    pub num_keys: u64,
    /// Addresses stored over all postings.
    pub num_rows: u64,
}

impl BitmapDetails {
    /// Serializes for `IndexMetadata.details`.
    ///
    /// # Errors
    /// External if JSON encoding fails (it does not for these plain fields).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::external("encoding bitmap details", e))
    }

    /// Parses stored details.
    ///
    /// # Errors
    /// Corrupt (bitmap details) when `bytes` are not the JSON of these details.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| Error::corrupt("bitmap details", e.to_string()))
    }
}

/// The built-in bitmap type.
#[derive(Debug, Clone, Copy, Default)]
pub struct BitmapIndexType;

#[async_trait]
impl IndexType for BitmapIndexType {
    fn name(&self) -> &'static str {
        BITMAP_TYPE
    }

    fn index_version(&self) -> u32 {
        BITMAP_VERSION
    }

    fn supports(&self, data_type: &DataType) -> bool {
        KeyKind::of(data_type).is_some()
    }

    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        mut input: BoxStream<'_, Result<RecordBatch>>,
        _params: &IndexParams,
    ) -> Result<Vec<u8>> {
        let mut postings: BTreeMap<Key, RoaringTreemap> = BTreeMap::new();
        let mut nulls = RoaringTreemap::new();
        let mut value_type: Option<DataType> = None;
        while let Some(batch) = input.try_next().await? {
            let batch_type = check_input(&batch, value_type.as_ref())?;
            value_type.get_or_insert(batch_type);
            let keys = KeyColumn::new(batch.column(0))?;
            let addrs = downcast::<UInt64Array>(batch.column(1))?;
            for (i, addr) in addrs.values().iter().enumerate() {
                match keys.key_at(i) {
                    Some(key) => {
                        postings.entry(key).or_default().insert(*addr);
                    }
                    None => {
                        nulls.insert(*addr);
                    }
                }
            }
        }
        let Some(value_type) = value_type else {
            return empty_details().to_bytes();
        };
        let mut writer = BitmapWriter::new(ctx, dir, &value_type);
        if !nulls.is_empty() {
            writer.push(None, &nulls).await?;
        }
        for (key, posting) in postings {
            writer.push(Some(key), &posting).await?;
        }
        writer.finish().await?.to_bytes()
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        let details = BitmapDetails::from_bytes(details)?;
        Ok(reader::open_cached(ctx, dir, &details).await?)
    }

    async fn remap(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<Vec<u8>> {
        let details = BitmapDetails::from_bytes(details)?;
        remap::remap(ctx, old_dir, &details, new_dir, translator)
            .await?
            .to_bytes()
    }
}

fn empty_details() -> BitmapDetails {
    BitmapDetails {
        num_keys: 0,
        num_rows: 0,
    }
}

/// Checks a build batch and returns its value type.
fn check_input(batch: &RecordBatch, expected: Option<&DataType>) -> Result<DataType> {
    let schema = batch.schema();
    if batch.num_columns() != 2 || schema.field(1).data_type() != &DataType::UInt64 {
        return Err(Error::invalid_input(
            "index build input must have two columns: the value and _rowaddr (UInt64)",
        ));
    }
    let value_type = schema.field(0).data_type().clone();
    if KeyKind::of(&value_type).is_none() {
        return Err(Error::not_supported(format!(
            "bitmap index on a column of type {value_type}"
        )));
    }
    if expected.is_some_and(|t| t != &value_type) {
        return Err(Error::invalid_input(
            "index build input batches disagree on their schema",
        ));
    }
    Ok(value_type)
}

/// The schema of `bitmap.lance`.
pub(crate) fn file_schema(value_type: &DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(VALUE_COLUMN, value_type.clone(), true),
        Field::new(POSTING_COLUMN, DataType::Binary, false),
        Field::new(STATS_COLUMNS[0], DataType::UInt64, false),
        Field::new(STATS_COLUMNS[1], DataType::UInt64, false),
        Field::new(STATS_COLUMNS[2], DataType::UInt64, false),
        Field::new(STATS_COLUMNS[3], DataType::UInt64, false),
    ]))
}

/// Builds an array of `value_type` from keys (`None` = null).
pub(crate) fn keys_to_array(keys: &[Option<Key>], value_type: &DataType) -> Result<ArrayRef> {
    let widened: ArrayRef = match KeyKind::of(value_type) {
        Some(KeyKind::Int) => {
            let signed = !matches!(
                value_type,
                DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64
            );
            let ints = keys.iter().map(|k| match k {
                Some(Key::Int(v)) => Ok(Some(*v)),
                None => Ok(None),
                Some(Key::Str(_)) => Err(Error::corrupt(
                    "bitmap index",
                    "string key in an integer index",
                )),
            });
            if signed {
                let values: Result<Vec<Option<i64>>> = ints
                    .map(|v| v.and_then(|v| v.map(narrow::<i64>).transpose()))
                    .collect();
                Arc::new(Int64Array::from(values?))
            } else {
                let values: Result<Vec<Option<u64>>> = ints
                    .map(|v| v.and_then(|v| v.map(narrow::<u64>).transpose()))
                    .collect();
                Arc::new(UInt64Array::from(values?))
            }
        }
        Some(KeyKind::Str) => {
            let strs: Result<Vec<Option<&str>>> = keys
                .iter()
                .map(|k| match k {
                    Some(Key::Str(s)) => Ok(Some(s.as_str())),
                    None => Ok(None),
                    Some(Key::Int(_)) => Err(Error::corrupt(
                        "bitmap index",
                        "integer key in a string index",
                    )),
                })
                .collect();
            Arc::new(StringArray::from(strs?))
        }
        None => {
            return Err(Error::not_supported(format!(
                "bitmap keys of type {value_type}"
            )))
        }
    };
    cast(&widened, value_type).map_err(|e| Error::external("narrowing bitmap keys", e))
}

fn narrow<T: TryFrom<i128>>(v: i128) -> Result<T> {
    T::try_from(v).map_err(|_| Error::corrupt("bitmap index", format!("key {v} out of range")))
}

/// Writes `(value, posting)` rows in order.
pub(crate) struct BitmapWriter {
    ctx: IndexContext,
    dir: RelativePath,
    value_type: DataType,
    file: Option<LanceFileWriter>,
    keys: Vec<Option<Key>>,
    postings: Vec<Vec<u8>>,
    stats: Vec<PostingStats>,
    details: BitmapDetails,
}

impl BitmapWriter {
    pub(crate) fn new(ctx: &IndexContext, dir: &RelativePath, value_type: &DataType) -> Self {
        Self {
            ctx: ctx.clone(),
            dir: dir.clone(),
            value_type: value_type.clone(),
            file: None,
            keys: Vec::new(),
            postings: Vec::new(),
            stats: Vec::new(),
            details: empty_details(),
        }
    }

    /// Adds one row; empty postings are skipped.
    pub(crate) async fn push(&mut self, key: Option<Key>, posting: &RoaringTreemap) -> Result<()> {
        if posting.is_empty() {
            return Ok(());
        }
        self.details.num_keys += 1;
        self.details.num_rows += posting.len();
        self.keys.push(key);
        self.postings.push(posting::encode(posting));
        self.stats.push(PostingStats::of(posting));
        if self.keys.len() >= ROWS_PER_BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    pub(crate) async fn finish(mut self) -> Result<BitmapDetails> {
        self.flush().await?;
        if let Some(file) = self.file.take() {
            file.finish().await?;
        }
        Ok(self.details)
    }

    async fn flush(&mut self) -> Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let schema = file_schema(&self.value_type);
        let values = keys_to_array(&self.keys, &self.value_type)?;
        let postings: BinaryArray = self.postings.iter().map(|p| Some(p.as_slice())).collect();
        let stat = |field: fn(&PostingStats) -> u64| -> ArrayRef {
            Arc::new(self.stats.iter().map(field).collect::<UInt64Array>())
        };
        let columns = vec![
            values,
            Arc::new(postings),
            stat(|s| s.rows),
            stat(|s| s.read.fragments),
            stat(|s| s.read.ranges),
            stat(|s| s.read.rows),
        ];
        self.stats.clear();
        let batch = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::external("assembling bitmap rows", e))?;
        self.keys.clear();
        self.postings.clear();
        let file = match self.file.as_mut() {
            Some(file) => file,
            None => {
                let path = self.dir.join(BITMAP_FILE)?;
                self.file.insert(
                    LanceFileWriter::create(&self.ctx.store, &path, schema, PageLayout::default())
                        .await?,
                )
            }
        };
        file.write(&batch).await
    }
}
