//! The btree index: every non-null `(value, row address)` pair sorted by value
//! (then address) and cut into fixed-size pages, plus a page lookup holding
//! each page's first row, row count and `[min, max]` value.
//!
//! Files under the segment directory:
//! * `page_data.lance`: columns `value` (the indexed type) and `_rowaddr` (UInt64);
//! * `page_lookup.lance`: one row per page, columns `min`, `max` (the indexed
//!   type), `row_start`, `num_rows` (UInt64).
//!
//! A search reads the lookup (cached in the session) and only the pages whose
//! `[min, max]` can match. Nulls are not stored; `IS NULL` is left to a scan.
//! An empty segment writes no files.

mod lookup;
mod pages;
mod reader;
mod remap;

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, SortOptions};
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::RelativePath;
use serde::{Deserialize, Serialize};

use crate::keys::KeyKind;
use crate::types::{IndexContext, IndexParams, IndexSegmentReader, IndexType, Translator};

pub use lookup::PageEntry;
pub use reader::BTreeSegment;

/// Stored type name.
pub const BTREE_TYPE: &str = "btree";
/// On-disk layout version.
pub const BTREE_VERSION: u32 = 1;
/// Default rows per page.
pub const DEFAULT_PAGE_ROWS: u32 = 4096;
/// Data file name.
pub const PAGE_DATA_FILE: &str = "page_data.lance";
/// Lookup file name.
pub const PAGE_LOOKUP_FILE: &str = "page_lookup.lance";
/// Name of the value column in the index files.
pub const VALUE_COLUMN: &str = "value";
/// Name of the address column in the index files.
pub const ADDR_COLUMN: &str = "_rowaddr";

/// What the manifest stores for a btree segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BTreeDetails {
    /// Rows (non-null values) stored.
    pub num_rows: u64,
    /// Pages stored.
    pub num_pages: u64,
    /// Rows per page (the last page may hold fewer).
    pub page_rows: u32,
}

impl BTreeDetails {
    /// Serializes for `IndexMetadata.details`.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::external("encoding btree details", e))
    }

    /// Parses stored details; Corrupt on bad bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let details: BTreeDetails = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt("btree details", e.to_string()))?;
        if details.page_rows == 0 {
            return Err(Error::corrupt("btree details", "page_rows is 0"));
        }
        Ok(details)
    }
}

/// The built-in btree type.
#[derive(Debug, Clone, Copy, Default)]
pub struct BTreeIndexType;

#[async_trait]
impl IndexType for BTreeIndexType {
    fn name(&self) -> &'static str {
        BTREE_TYPE
    }

    fn index_version(&self) -> u32 {
        BTREE_VERSION
    }

    fn supports(&self, data_type: &DataType) -> bool {
        KeyKind::of(data_type).is_some()
    }

    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>> {
        let page_rows = params.page_rows.unwrap_or(DEFAULT_PAGE_ROWS);
        if page_rows == 0 {
            return Err(Error::invalid_input("page_rows must be at least 1"));
        }
        let batches: Vec<RecordBatch> = input.try_collect().await?;
        let Some(first) = batches.first() else {
            return BTreeDetails {
                num_rows: 0,
                num_pages: 0,
                page_rows,
            }
            .to_bytes();
        };
        let value_type = input_value_type(first)?;
        let sorted = sort_non_null(&batches, &value_type)?;
        let mut writer = pages::PageWriter::new(ctx.clone(), dir.clone(), value_type, page_rows);
        writer.push(&sorted).await?;
        writer.finish().await?.to_bytes()
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        let details = BTreeDetails::from_bytes(details)?;
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
        let details = BTreeDetails::from_bytes(details)?;
        remap::remap(ctx, old_dir, &details, new_dir, translator)
            .await?
            .to_bytes()
    }
}

/// The value type of a build input batch (column 0), checked to be indexable.
fn input_value_type(batch: &RecordBatch) -> Result<DataType> {
    if batch.num_columns() != 2 || batch.schema().field(1).name() != ADDR_COLUMN {
        return Err(Error::invalid_input(
            "index build input must have two columns: the value and _rowaddr",
        ));
    }
    let value_type = batch.schema().field(0).data_type().clone();
    if KeyKind::of(&value_type).is_none() {
        return Err(Error::not_supported(format!(
            "btree index on a column of type {value_type}"
        )));
    }
    Ok(value_type)
}

/// The schema of `page_data.lance`.
pub(crate) fn data_schema(value_type: &DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(VALUE_COLUMN, value_type.clone(), false),
        Field::new(ADDR_COLUMN, DataType::UInt64, false),
    ]))
}

/// Concatenates the input, drops null values and sorts by (value, address).
fn sort_non_null(batches: &[RecordBatch], value_type: &DataType) -> Result<RecordBatch> {
    let schema = data_schema(value_type);
    let mut values: Vec<ArrayRef> = Vec::with_capacity(batches.len());
    let mut addrs: Vec<ArrayRef> = Vec::with_capacity(batches.len());
    for batch in batches {
        if batch.num_columns() != 2 || batch.column(0).data_type() != value_type {
            return Err(Error::invalid_input(
                "index build input batches disagree on their schema",
            ));
        }
        let keep = arrow::compute::is_not_null(batch.column(0))
            .map_err(|e| Error::external("filtering null index values", e))?;
        values.push(filter(batch.column(0), &keep)?);
        addrs.push(filter(batch.column(1), &keep)?);
    }
    let value = concat(&values)?;
    let addr = concat(&addrs)?;
    if addr.as_any().downcast_ref::<UInt64Array>().is_none() {
        return Err(Error::invalid_input("_rowaddr must be UInt64"));
    }
    let order = arrow::compute::lexsort_to_indices(
        &[
            arrow::compute::SortColumn {
                values: value.clone(),
                options: Some(SortOptions::default()),
            },
            arrow::compute::SortColumn {
                values: addr.clone(),
                options: Some(SortOptions::default()),
            },
        ],
        None,
    )
    .map_err(|e| Error::external("sorting btree input", e))?;
    let value = take(&value, &order)?;
    let addr = take(&addr, &order)?;
    RecordBatch::try_new(schema, vec![value, addr])
        .map_err(|e| Error::external("assembling sorted btree rows", e))
}

pub(crate) fn filter(array: &ArrayRef, mask: &arrow_array::BooleanArray) -> Result<ArrayRef> {
    arrow::compute::filter(array.as_ref(), mask).map_err(|e| Error::external("filtering rows", e))
}

pub(crate) fn take(array: &ArrayRef, indices: &arrow_array::UInt32Array) -> Result<ArrayRef> {
    arrow::compute::take(array.as_ref(), indices, None)
        .map_err(|e| Error::external("reordering rows", e))
}

pub(crate) fn concat(arrays: &[ArrayRef]) -> Result<ArrayRef> {
    let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
    arrow::compute::concat(&refs).map_err(|e| Error::external("concatenating rows", e))
}
