//! The btree index: every non-null `(value, row address)` pair sorted by value
//! (then address) and cut into fixed-size pages, plus a page lookup holding
//! each page's first row, row count and `[min, max]` value.
//!
//! Files under the segment directory (layout version 2, [`BTREE_VERSION`]):
//! * `values.lance`: column `value` (the indexed type, non-null), sorted;
//! * `addresses.lance`: column `_rowaddr` (UInt64, nullable); row `i` is the
//!   address of row `i` of `values.lance`. A null is a *tombstone*: the row
//!   was deleted by a remap that kept the values file as it was;
//! * `page_lookup.lance`: one row per page, columns `min`, `max` (the indexed
//!   type), `row_start`, `num_rows` (UInt64), over the rows of `values.lance`.
//!
//! Values and addresses live in separate files because a remap never changes
//! a value or the order of values, only addresses: a remap copies
//! `values.lance` and `page_lookup.lance` with the store's server-side copy
//! (a hard link on local disk) and rewrites only `addresses.lance`. Once
//! tombstones would exceed `1 / TOMBSTONE_DIVISOR` of the entries, the remap
//! rewrites everything instead, dropping them and cutting a fresh lookup, so
//! dead entries never accumulate without bound. After an address-only remap
//! the addresses inside a run of equal values are in no particular order.
//!
//! Layout version 1 (details without a `version`) stored both columns in one
//! `page_data.lance`, without tombstones; it is still read, and its remap
//! writes version 2. Other versions are NotSupported.
//!
//! A search reads the lookup (cached in the session), only the values of the
//! pages whose `[min, max]` can match, and the addresses of the matching rows
//! only, skipping tombstones. Nulls are not stored; `IS NULL` is left to a
//! scan. An empty segment writes no files.

mod files;
mod lookup;
mod pages;
mod reader;
mod remap;
#[cfg(test)]
mod tests;

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

/// Addresses file name (layout 2) and its column, shared with other index types.
pub use crate::types::addresses::{ADDRESSES_FILE, ADDR_COLUMN};
pub use lookup::PageEntry;
pub use reader::BTreeSegment;

/// Stored type name.
pub const BTREE_TYPE: &str = "btree";
/// On-disk layout version written by build and remap (see the module docs).
pub const BTREE_VERSION: u32 = 2;
/// The layout with one `page_data.lance` holding values and addresses.
pub const LEGACY_BTREE_VERSION: u32 = 1;
/// Default rows per page.
pub const DEFAULT_PAGE_ROWS: u32 = 4096;
/// Sorted values file name (layout 2).
pub const VALUES_FILE: &str = "values.lance";
/// Values-and-addresses file name of layout 1.
pub const LEGACY_PAGE_DATA_FILE: &str = "page_data.lance";
/// Lookup file name.
pub const PAGE_LOOKUP_FILE: &str = "page_lookup.lance";
/// Name of the value column in the index files.
pub const VALUE_COLUMN: &str = "value";
pub use crate::types::addresses::TOMBSTONE_DIVISOR;

/// What the manifest stores for a btree segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BTreeDetails {
    /// Live rows: stored values whose address is not a tombstone.
    pub num_rows: u64,
    /// Pages stored.
    pub num_pages: u64,
    /// Rows per page (the last page may hold fewer; counts tombstones).
    pub page_rows: u32,
    /// File layout version; details written before the field existed are
    /// version 1 ([`LEGACY_BTREE_VERSION`]).
    #[serde(default = "legacy_version")]
    pub version: u32,
    /// Entries whose address is a tombstone (null).
    #[serde(default)]
    pub tombstones: u64,
}

fn legacy_version() -> u32 {
    LEGACY_BTREE_VERSION
}

impl BTreeDetails {
    /// Details of a segment without rows (no files).
    pub fn empty(page_rows: u32) -> Self {
        BTreeDetails {
            num_rows: 0,
            num_pages: 0,
            page_rows,
            version: BTREE_VERSION,
            tombstones: 0,
        }
    }

    /// Rows in the values and addresses files: live rows plus tombstones.
    ///
    /// # Errors
    /// Corrupt (btree details) when the sum overflows `u64`.
    pub fn entries(&self) -> Result<u64> {
        self.num_rows
            .checked_add(self.tombstones)
            .ok_or_else(|| Error::corrupt("btree details", "row count overflows"))
    }

    /// Serializes for `IndexMetadata.details`.
    ///
    /// # Errors
    /// External if JSON encoding fails (it does not for these plain fields).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::external("encoding btree details", e))
    }

    /// Parses stored details.
    ///
    /// # Errors
    /// Corrupt (btree details) for bad JSON, zero `page_rows`, tombstones in a
    /// version 1 segment or an overflowing row count; NotSupported for a layout
    /// version this client does not know.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let details: BTreeDetails = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt("btree details", e.to_string()))?;
        if details.version != BTREE_VERSION && details.version != LEGACY_BTREE_VERSION {
            return Err(Error::not_supported(format!(
                "btree layout version {} (this client reads versions {LEGACY_BTREE_VERSION} and {BTREE_VERSION}); upgrade the client or rebuild the index",
                details.version
            )));
        }
        if details.page_rows == 0 {
            return Err(Error::corrupt("btree details", "page_rows is 0"));
        }
        if details.version == LEGACY_BTREE_VERSION && details.tombstones != 0 {
            return Err(Error::corrupt(
                "btree details",
                "a version 1 segment cannot hold tombstones",
            ));
        }
        details.entries()?;
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
            return BTreeDetails::empty(page_rows).to_bytes();
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

/// The schema of sorted `(value, address)` rows in memory (and of layout 1's
/// `page_data.lance`).
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
