//! The values and addresses of a btree segment: opening and validating the
//! files of either layout, and reading bounded row ranges of each column.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lance_encoding::constants::{DICT_DIVISOR_META_KEY, RLE_THRESHOLD_META_KEY};
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath};

use super::{
    concat, BTreeDetails, ADDRESSES_FILE, ADDR_COLUMN, BTREE_VERSION, LEGACY_PAGE_DATA_FILE,
    VALUES_FILE, VALUE_COLUMN,
};
use crate::keys::{downcast, KeyKind};
use crate::types::{IndexContext, MAX_TRANSLATION_BATCH};

/// Rows per values read: one translation batch.
pub(crate) const VALUE_READ_ROWS: u64 = MAX_TRANSLATION_BATCH as u64;
/// Rows per addresses read (2 MiB of addresses): fewer, larger reads than
/// one per translation batch, still a bound independent of the segment size.
pub(crate) const ADDRESS_READ_ROWS: u64 = 4 * MAX_TRANSLATION_BATCH as u64;
/// Most rows one [`SegmentFiles::read_values`] / [`SegmentFiles::read_addresses`]
/// call returns: reads are bounded so memory does not follow the segment size.
const MAX_READ_ROWS: u64 = if VALUE_READ_ROWS > ADDRESS_READ_ROWS {
    VALUE_READ_ROWS
} else {
    ADDRESS_READ_ROWS
};

/// The schema of `values.lance`.
pub(crate) fn values_schema(value_type: &DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        VALUE_COLUMN,
        value_type.clone(),
        false,
    )]))
}

/// The schema of `addresses.lance` (a null address is a tombstone).
///
/// Addresses are (nearly) unique, so Lance's dictionary and run-length
/// encodings never pay off for them, yet by default the writer tries both on
/// every page (building a hash table of the values, counting runs). The field
/// metadata switches both off: bit-packing still applies.
pub(crate) fn addresses_schema() -> SchemaRef {
    let metadata = HashMap::from([
        (DICT_DIVISOR_META_KEY.to_string(), u64::MAX.to_string()),
        (RLE_THRESHOLD_META_KEY.to_string(), "0".to_string()),
    ]);
    Arc::new(Schema::new(vec![Field::new(
        ADDR_COLUMN,
        DataType::UInt64,
        true,
    )
    .with_metadata(metadata)]))
}

/// How the files are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caching {
    /// File metadata kept in the store's Lance cache (searches).
    Cached,
    /// Nothing cached (one-pass reads of a segment about to be replaced).
    Uncached,
}

/// The opened files of a non-empty segment.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFiles {
    /// Holds the `value` column (layout 1: `page_data.lance`).
    values: LanceFileReader,
    /// Holds the `_rowaddr` column (layout 1: the same file).
    addresses: LanceFileReader,
    value_type: DataType,
    kind: KeyKind,
    entries: u64,
}

impl SegmentFiles {
    /// Opens the files of the segment at `dir` and checks their columns and
    /// that both hold exactly `details.entries()` rows (Corrupt otherwise).
    /// A missing file is NotFound.
    pub(crate) async fn open(
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &BTreeDetails,
        caching: Caching,
    ) -> Result<Self> {
        let open = |name: &'static str| async move {
            let path = dir.join(name)?;
            match caching {
                Caching::Cached => LanceFileReader::open(&ctx.store, &path, None).await,
                Caching::Uncached => LanceFileReader::open_uncached(&ctx.store, &path, None).await,
            }
        };
        let (values, addresses) = if details.version == BTREE_VERSION {
            (open(VALUES_FILE).await?, open(ADDRESSES_FILE).await?)
        } else {
            let data = open(LEGACY_PAGE_DATA_FILE).await?;
            (data.clone(), data)
        };
        let value_type = value_column_type(&values)?;
        check_address_column(&addresses)?;
        let kind = KeyKind::of(&value_type).ok_or_else(|| {
            Error::corrupt(
                "btree values",
                format!("unsupported value type {value_type}"),
            )
        })?;
        let entries = details.entries()?;
        for (what, reader) in [("values", &values), ("addresses", &addresses)] {
            if reader.num_rows() != entries {
                return Err(Error::corrupt(
                    format!("btree {what}"),
                    format!(
                        "{} holds {} rows, the segment has {entries} entries ({} live, {} tombstones)",
                        reader.path(),
                        reader.num_rows(),
                        details.num_rows,
                        details.tombstones
                    ),
                ));
            }
        }
        Ok(SegmentFiles {
            values,
            addresses,
            value_type,
            kind,
            entries,
        })
    }

    /// The indexed value type.
    pub(crate) fn value_type(&self) -> &DataType {
        &self.value_type
    }

    /// How values compare.
    pub(crate) fn kind(&self) -> KeyKind {
        self.kind
    }

    /// Rows in each file (live rows plus tombstones).
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// The values of `rows` (at most [`MAX_READ_ROWS`]), non-null.
    pub(crate) async fn read_values(&self, rows: Range<u64>) -> Result<ArrayRef> {
        let values = read_column(&self.values, VALUE_COLUMN, rows).await?;
        if values.null_count() > 0 {
            return Err(Error::corrupt(
                "btree values",
                format!("{} holds a null value", self.values.path()),
            ));
        }
        Ok(values)
    }

    /// The addresses of `rows` (at most [`MAX_READ_ROWS`]); nulls are tombstones.
    pub(crate) async fn read_addresses(&self, rows: Range<u64>) -> Result<UInt64Array> {
        let addresses = read_column(&self.addresses, ADDR_COLUMN, rows).await?;
        Ok(downcast::<UInt64Array>(&addresses)?.clone())
    }
}

/// Splits `rows` into consecutive pieces of at most `max` rows (`max` ≥ 1).
pub(crate) fn bounded_pieces(rows: Range<u64>, max: u64) -> impl Iterator<Item = Range<u64>> {
    let end = rows.end;
    let max = max.max(1);
    (rows.start..end)
        .step_by(usize::try_from(max).unwrap_or(usize::MAX))
        .map(move |start| start..end.min(start.saturating_add(max)))
}

/// Reads one column of `rows` (at most [`MAX_READ_ROWS`]) as one array.
async fn read_column(reader: &LanceFileReader, column: &str, rows: Range<u64>) -> Result<ArrayRef> {
    let len = rows.end.saturating_sub(rows.start);
    if len > MAX_READ_ROWS {
        return Err(Error::invalid_input(format!(
            "btree read of {len} rows exceeds the {MAX_READ_ROWS}-row bound"
        )));
    }
    // MAX_READ_ROWS (262,144) fits in u32.
    let batches: Vec<RecordBatch> = reader
        .read_range(rows, Some(&[column]), MAX_READ_ROWS as u32)
        .await?
        .try_collect()
        .await?;
    let mut arrays = Vec::with_capacity(batches.len());
    for batch in &batches {
        let array = batch.column_by_name(column).ok_or_else(|| {
            Error::corrupt(
                "btree segment",
                format!("{} has no column {column}", reader.path()),
            )
        })?;
        arrays.push(array.clone());
    }
    let joined = match arrays.len() {
        0 => {
            let field = reader
                .schema()
                .field_with_name(column)
                .cloned()
                .map_err(|_| {
                    Error::corrupt(
                        "btree segment",
                        format!("{} has no column {column}", reader.path()),
                    )
                })?;
            arrow_array::new_empty_array(field.data_type())
        }
        1 => arrays.swap_remove(0),
        _ => concat(&arrays)?,
    };
    if joined.len() as u64 != len {
        return Err(Error::corrupt(
            "btree segment",
            format!(
                "{} returned {} rows for a {len}-row read",
                reader.path(),
                joined.len()
            ),
        ));
    }
    Ok(joined)
}

/// The type of the `value` column, checked to be indexable.
fn value_column_type(reader: &LanceFileReader) -> Result<DataType> {
    let schema = reader.schema();
    let value = schema.field_with_name(VALUE_COLUMN).map_err(|_| {
        Error::corrupt(
            "btree values",
            format!("{} has no value column", reader.path()),
        )
    })?;
    if KeyKind::of(value.data_type()).is_none() {
        return Err(Error::corrupt(
            "btree values",
            format!("unexpected value type {}", value.data_type()),
        ));
    }
    Ok(value.data_type().clone())
}

/// Checks that the `_rowaddr` column exists and is UInt64.
fn check_address_column(reader: &LanceFileReader) -> Result<()> {
    let schema = reader.schema();
    let addr = schema.field_with_name(ADDR_COLUMN).map_err(|_| {
        Error::corrupt(
            "btree addresses",
            format!("{} has no _rowaddr column", reader.path()),
        )
    })?;
    if addr.data_type() != &DataType::UInt64 {
        return Err(Error::corrupt(
            "btree addresses",
            format!("unexpected address type {}", addr.data_type()),
        ));
    }
    Ok(())
}
