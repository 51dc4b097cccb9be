//! The ivf_flat segment files: `ivf.lance` with rows `(partition: UInt32,
//! vector: FixedSizeList<Float32, dim>)` sorted by partition, and one global
//! buffer holding the centroids and the per-partition row counts (so partition
//! `p` is the row range `offsets[p]..offsets[p + 1]`); and `addresses.lance`
//! (see `crate::types::addresses`) whose row `i` is the row address of
//! vector `i`, null when that row is gone (a tombstone).
//!
//! Buffer layout, little endian: magic `RIVF`, version u32, dim u32,
//! partitions u32, `partitions × dim` f32 centroids, `partitions` u64 lengths.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt32Type};
use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::{BufMut, Bytes, BytesMut};
use refract_core::{Error, Result};

use refract_table::io::RelativePath;

pub use crate::types::addresses::ADDRESSES_FILE;

/// File name of the partitioned vectors file inside a segment directory.
pub const VECTORS_FILE: &str = "ivf.lance";
/// Partition id column.
pub const PARTITION_COLUMN: &str = "partition";
/// Vector column.
pub const VECTOR_COLUMN: &str = "vector";
/// Schema metadata key naming the global buffer that holds the [`IvfLayout`].
pub const LAYOUT_BUFFER_KEY: &str = "refract.ivf_flat.layout_buffer";

const MAGIC: &[u8; 4] = b"RIVF";
const LAYOUT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;

fn corrupt(message: impl Into<String>) -> Error {
    Error::corrupt("ivf_flat index file", message)
}

/// The vectors file of the segment at `dir`.
///
/// # Errors
/// PathEscape if the joined path is invalid (never for a validated `dir`).
pub fn vectors_path(dir: &RelativePath) -> Result<RelativePath> {
    dir.join(VECTORS_FILE)
}

/// The addresses file of the segment at `dir`.
///
/// # Errors
/// PathEscape if the joined path is invalid (never for a validated `dir`).
pub fn addresses_path(dir: &RelativePath) -> Result<RelativePath> {
    dir.join(ADDRESSES_FILE)
}

/// The item field of the vector column.
fn item_field() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Float32, true))
}

/// The schema of [`VECTORS_FILE`] for vectors of `dim` values.
///
/// # Errors
/// InvalidInput when `dim` does not fit `i32`.
pub fn vectors_schema(dim: usize) -> Result<SchemaRef> {
    Ok(Arc::new(Schema::new(vec![
        Field::new(PARTITION_COLUMN, DataType::UInt32, false),
        Field::new(VECTOR_COLUMN, vector_type(dim)?, false),
    ])))
}

/// True when `schema` is the vectors schema for `dim`.
pub fn schema_matches(schema: &Schema, dim: usize) -> bool {
    let Ok(expected) = vectors_schema(dim) else {
        return false;
    };
    schema.fields().len() == expected.fields().len()
        && schema
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

/// The vector column's type for vectors of `dim` values.
///
/// # Errors
/// InvalidInput when `dim` does not fit `i32`.
pub fn vector_type(dim: usize) -> Result<DataType> {
    let size = i32::try_from(dim)
        .map_err(|_| Error::invalid_input(format!("vector dimension {dim} is too large")))?;
    Ok(DataType::FixedSizeList(item_field(), size))
}

/// A vector column of `values.len() / dim` vectors (row-major values).
///
/// # Errors
/// InvalidInput when `dim` does not fit `i32`; External when `values` does not
/// divide into vectors of `dim` values.
pub fn vector_array(dim: usize, values: Vec<f32>) -> Result<FixedSizeListArray> {
    let size = i32::try_from(dim)
        .map_err(|_| Error::invalid_input(format!("vector dimension {dim} is too large")))?;
    FixedSizeListArray::try_new(
        item_field(),
        size,
        Arc::new(Float32Array::from(values)),
        None,
    )
    .map_err(|e| Error::external("assembling ivf_flat vectors", e))
}

/// Assembles one vectors-file batch.
///
/// # Errors
/// Those of [`vector_array`]; External when `partitions` and the vectors
/// differ in count.
pub fn vectors_batch(dim: usize, partitions: Vec<u32>, values: Vec<f32>) -> Result<RecordBatch> {
    let vectors = vector_array(dim, values)?;
    RecordBatch::try_new(
        vectors_schema(dim)?,
        vec![Arc::new(UInt32Array::from(partitions)), Arc::new(vectors)],
    )
    .map_err(|e| Error::external("assembling an ivf_flat batch", e))
}

/// The partition column of a batch read from the vectors file.
///
/// # Errors
/// Corrupt when the column is missing, not UInt32 or holds nulls.
pub fn partition_column(batch: &RecordBatch) -> Result<&UInt32Array> {
    batch
        .column_by_name(PARTITION_COLUMN)
        .and_then(|c| c.as_primitive_opt::<UInt32Type>())
        .filter(|c| c.null_count() == 0)
        .ok_or_else(|| corrupt("missing or null partition column"))
}

/// The flat vector values of a batch read from the vectors file
/// (`num_rows × dim` values, row-major).
///
/// # Errors
/// Corrupt when the vector column is missing, holds nulls, is not of `dim`
/// Float32 items, or its values are shorter than the rows.
pub fn vector_values(batch: &RecordBatch, dim: usize) -> Result<&[f32]> {
    let list = batch
        .column_by_name(VECTOR_COLUMN)
        .and_then(|c| c.as_fixed_size_list_opt())
        .filter(|c| c.null_count() == 0 && usize::try_from(c.value_length()).ok() == Some(dim))
        .ok_or_else(|| corrupt("missing, null or mis-sized vector column"))?;
    let values = list
        .values()
        .as_primitive_opt::<Float32Type>()
        .ok_or_else(|| corrupt("vector items are not Float32"))?;
    let start =
        usize::try_from(list.value_offset(0)).map_err(|_| corrupt("negative vector offset"))?;
    let end = start + list.len() * dim;
    values
        .values()
        .get(start..end)
        .ok_or_else(|| corrupt("vector values shorter than the rows"))
}

/// Centroids and partition sizes of one segment.
#[derive(Debug, Clone, PartialEq)]
pub struct IvfLayout {
    /// Vector dimension.
    pub dim: usize,
    /// `partitions × dim` centroid values, row-major.
    pub centroids: Vec<f32>,
    /// Rows per partition, in file order.
    pub lengths: Vec<u64>,
}

impl IvfLayout {
    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.lengths.len()
    }

    /// Total rows.
    pub fn rows(&self) -> u64 {
        self.lengths.iter().sum()
    }

    /// Centroid `p`, if it exists.
    pub fn centroid(&self, p: usize) -> Option<&[f32]> {
        self.centroids.get(p * self.dim..(p + 1) * self.dim)
    }

    /// The file rows of partition `p`.
    pub fn partition_rows(&self, p: usize) -> Option<Range<u64>> {
        let start: u64 = self.lengths.get(..p)?.iter().sum();
        Some(start..start + *self.lengths.get(p)?)
    }

    /// Serializes the layout into the global buffer format.
    ///
    /// # Errors
    /// InvalidInput when `dim` or the partition count does not fit `u32`, or
    /// the centroids are not `dim` values per partition.
    pub fn encode(&self) -> Result<Bytes> {
        let dim = u32::try_from(self.dim)
            .map_err(|_| Error::invalid_input("vector dimension too large"))?;
        let partitions = u32::try_from(self.lengths.len())
            .map_err(|_| Error::invalid_input("too many partitions"))?;
        if self.centroids.len() != self.dim * self.lengths.len() {
            return Err(Error::invalid_input(
                "centroids do not match the partition count",
            ));
        }
        let mut buf = BytesMut::with_capacity(
            HEADER_BYTES + self.centroids.len() * 4 + self.lengths.len() * 8,
        );
        buf.put_slice(MAGIC);
        buf.put_u32_le(LAYOUT_VERSION);
        buf.put_u32_le(dim);
        buf.put_u32_le(partitions);
        self.centroids.iter().for_each(|c| buf.put_f32_le(*c));
        self.lengths.iter().for_each(|l| buf.put_u64_le(*l));
        Ok(buf.freeze())
    }

    /// Parses a global buffer.
    ///
    /// # Errors
    /// NotSupported for an unknown layout version; [`Error::Corrupt`] for any
    /// inconsistency (short buffer, bad magic, zero `dim`, wrong length).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let header = bytes
            .get(..HEADER_BYTES)
            .ok_or_else(|| corrupt("layout buffer too short"))?;
        if &header[..4] != MAGIC {
            return Err(corrupt("layout buffer has a bad magic"));
        }
        let word =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (version, dim, partitions) = (word(4), word(8) as usize, word(12) as usize);
        if version != LAYOUT_VERSION {
            return Err(Error::not_supported(format!(
                "ivf_flat layout version {version}"
            )));
        }
        let centroid_bytes = dim
            .checked_mul(partitions)
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| corrupt("layout sizes overflow"))?;
        let expected = partitions
            .checked_mul(8)
            .and_then(|n| n.checked_add(centroid_bytes))
            .and_then(|n| n.checked_add(HEADER_BYTES))
            .ok_or_else(|| corrupt("layout sizes overflow"))?;
        if bytes.len() != expected || dim == 0 {
            return Err(corrupt(format!(
                "layout buffer of {} bytes, expected {expected} for dim {dim} and {partitions} partitions",
                bytes.len()
            )));
        }
        let body = &bytes[HEADER_BYTES..];
        let centroids = body[..centroid_bytes]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let lengths = body[centroid_bytes..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        Ok(Self {
            dim,
            centroids,
            lengths,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IvfLayout {
        IvfLayout {
            dim: 2,
            centroids: vec![0.0, 1.0, 2.0, 3.0],
            lengths: vec![5, 0],
        }
    }

    #[test]
    fn round_trips_and_answers_ranges() {
        let layout = sample();
        let decoded = IvfLayout::decode(&layout.encode().unwrap()).unwrap();
        assert_eq!(decoded, layout);
        assert_eq!(decoded.partition_rows(0), Some(0..5));
        assert_eq!(decoded.partition_rows(1), Some(5..5));
        assert_eq!(decoded.partition_rows(2), None);
        assert_eq!(decoded.centroid(1), Some(&[2.0, 3.0][..]));
        assert_eq!(decoded.rows(), 5);
    }

    #[test]
    fn truncated_or_garbled_buffers_are_corrupt() {
        let bytes = sample().encode().unwrap();
        for len in [0, 3, 15, 16, bytes.len() - 1] {
            assert!(
                matches!(IvfLayout::decode(&bytes[..len]), Err(Error::Corrupt { .. })),
                "len {len}"
            );
        }
        let mut bad_magic = bytes.to_vec();
        bad_magic[0] = b'X';
        assert!(matches!(
            IvfLayout::decode(&bad_magic),
            Err(Error::Corrupt { .. })
        ));
        let mut huge = bytes.to_vec();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            IvfLayout::decode(&huge),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn batch_columns_round_trip() {
        let batch = vectors_batch(2, vec![0, 1], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(schema_matches(&batch.schema(), 2));
        assert!(!schema_matches(&batch.schema(), 3));
        assert_eq!(
            partition_column(&batch).unwrap().values().to_vec(),
            vec![0, 1]
        );
        assert_eq!(vector_values(&batch.slice(1, 1), 2).unwrap(), &[3.0, 4.0]);
    }
}
