//! The values and addresses of a btree segment: opening and validating the
//! files of either layout, and reading bounded row ranges of each column.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, RelativePath, STREAMING_READ_BUFFER_BYTES};
use refract_table::io::{ReadMode, ReadOptions};

use super::{
    BTreeDetails, ADDRESSES_FILE, ADDR_COLUMN, BTREE_VERSION, LEGACY_PAGE_DATA_FILE, VALUES_FILE,
    VALUE_COLUMN,
};
use crate::keys::KeyKind;
use crate::types::addresses::{read_addresses, read_column, MAX_COLUMN_READ_ROWS};
use crate::types::encoding_hints::without_dictionary;
use crate::types::{IndexContext, MAX_TRANSLATION_BATCH};

/// Rows per values read: one translation batch.
pub(crate) const VALUE_READ_ROWS: u64 = MAX_TRANSLATION_BATCH as u64;
/// Rows per addresses read (2 MiB of addresses): fewer, larger reads than
/// one per translation batch, still a bound independent of the segment size.
pub(crate) const ADDRESS_READ_ROWS: u64 = MAX_COLUMN_READ_ROWS;

/// The schema of `values.lance`: sorted, so duplicates are runs and a
/// dictionary never pays.
pub(crate) fn values_schema(value_type: &DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![without_dictionary(Field::new(
        VALUE_COLUMN,
        value_type.clone(),
        false,
    ))]))
}

/// How the files are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caching {
    /// File metadata kept in the store's Lance cache (searches).
    Cached,
    /// Nothing cached, small read-ahead (one-pass reads of a segment about to
    /// be replaced).
    Streaming,
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
                Caching::Cached => {
                    LanceFileReader::open(&ctx.store, &path, ReadOptions::default()).await
                }
                Caching::Streaming => {
                    LanceFileReader::open(
                        &ctx.store,
                        &path,
                        ReadOptions {
                            mode: ReadMode::Streaming {
                                read_buffer_bytes: STREAMING_READ_BUFFER_BYTES,
                            },
                            ..ReadOptions::default()
                        },
                    )
                    .await
                }
            }
        };
        let (values, addresses) = if details.version == BTREE_VERSION {
            // Concurrently: each open is a round trip or two on a cloud store.
            futures::try_join!(open(VALUES_FILE), open(ADDRESSES_FILE))?
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

    /// The values of `rows` (at most [`MAX_COLUMN_READ_ROWS`]), non-null.
    pub(crate) async fn read_values(&self, rows: Range<u64>) -> Result<ArrayRef> {
        let values = read_column(&self.values, VALUE_COLUMN, rows, "btree values").await?;
        if values.null_count() > 0 {
            return Err(Error::corrupt(
                "btree values",
                format!("{} holds a null value", self.values.path()),
            ));
        }
        Ok(values)
    }

    /// The file holding the addresses (layout 1: the page data file).
    pub(crate) fn addresses(&self) -> &LanceFileReader {
        &self.addresses
    }

    /// The addresses of `rows` (at most [`MAX_COLUMN_READ_ROWS`]); nulls are tombstones.
    pub(crate) async fn read_addresses(&self, rows: Range<u64>) -> Result<UInt64Array> {
        read_addresses(&self.addresses, rows, "btree addresses").await
    }
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
