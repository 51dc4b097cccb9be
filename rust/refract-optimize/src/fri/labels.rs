//! Partition labels: which destination a row goes to, from one column.
//!
//! Labels are deterministic functions of the value (a stable hash or a range
//! lookup), so the counting pass and the writing pass of a partition agree.
//! Null values go to label 0.

use arrow::compute::cast;
use arrow_array::{Array, ArrayRef, Int64Array, LargeStringArray, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Schema};
use refract_core::{Error, Result};
use refract_ledger::MAX_PARTITION_DESTINATIONS as MAX_DESTINATIONS;
use serde::{Deserialize, Serialize};

/// How rows are assigned to destinations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionBy {
    /// `hash(value) % destinations` (integers: splitmix64; strings: FNV-1a).
    Hash {
        /// The column hashed (integer or string).
        column: String,
        /// Number of destinations, 1..=65,535.
        destinations: u32,
    },
    /// Destination = number of boundaries `<=` the value, so
    /// `boundaries.len() + 1` destinations.
    Range {
        /// The column compared (integer).
        column: String,
        /// Strictly ascending boundaries, at most 65,534.
        boundaries: Vec<i64>,
    },
}

impl PartitionBy {
    /// The column labels are computed from.
    pub fn column(&self) -> &str {
        match self {
            PartitionBy::Hash { column, .. } | PartitionBy::Range { column, .. } => column,
        }
    }

    /// Number of labels (before empty destinations are dropped), validated.
    ///
    /// # Errors
    /// InvalidInput for range boundaries that do not ascend strictly, or a
    /// label count outside 1..=65,535.
    pub fn num_labels(&self) -> Result<u32> {
        let labels = match self {
            PartitionBy::Hash { destinations, .. } => *destinations,
            PartitionBy::Range { boundaries, .. } => {
                if boundaries.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(Error::invalid_input(
                        "partition range boundaries must be strictly ascending",
                    ));
                }
                u32::try_from(boundaries.len() + 1).unwrap_or(u32::MAX)
            }
        };
        // The row map stores labels as UInt16 and caps destinations accordingly.
        if labels == 0 || labels > MAX_DESTINATIONS {
            return Err(Error::invalid_input(format!(
                "a partition needs 1..={MAX_DESTINATIONS} destinations, got {labels}"
            )));
        }
        Ok(labels)
    }

    /// Checks the column exists with a supported type.
    pub(crate) fn check_schema(&self, schema: &Schema) -> Result<()> {
        self.num_labels()?;
        let (_, field) = schema.column_with_name(self.column()).ok_or_else(|| {
            Error::invalid_input(format!(
                "partition column '{}' is not in the table",
                self.column()
            ))
        })?;
        let supported = match self {
            PartitionBy::Hash { .. } => {
                is_integer(field.data_type()) || is_string(field.data_type())
            }
            PartitionBy::Range { .. } => is_integer(field.data_type()),
        };
        if !supported {
            return Err(Error::invalid_input(format!(
                "partition column '{}' has type {}, which this partitioning does not support",
                self.column(),
                field.data_type()
            )));
        }
        Ok(())
    }

    /// The label of every row of `batch` (which must contain the column).
    pub(crate) fn labels(&self, batch: &RecordBatch) -> Result<Vec<u16>> {
        let column = batch.column_by_name(self.column()).ok_or_else(|| {
            Error::invalid_input(format!("batch lacks partition column '{}'", self.column()))
        })?;
        match self {
            PartitionBy::Hash { destinations, .. } => hash_labels(column, *destinations),
            PartitionBy::Range { boundaries, .. } => range_labels(column, boundaries),
        }
    }
}

fn is_integer(data_type: &DataType) -> bool {
    data_type.is_integer()
}

fn is_string(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8 | DataType::LargeUtf8)
}

fn cast_to(column: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    cast(column, to).map_err(|e| Error::external("casting the partition column", e))
}

/// splitmix64: a fixed, well-mixed integer hash (stable across runs and builds).
fn mix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over the bytes, then mixed (stable across runs and builds).
fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(hash)
}

fn to_label(hash: u64, destinations: u32) -> u16 {
    // destinations <= 65,535 (checked by num_labels), so the remainder fits u16.
    (hash % u64::from(destinations)) as u16
}

fn hash_labels(column: &ArrayRef, destinations: u32) -> Result<Vec<u16>> {
    let data_type = column.data_type();
    if is_string(data_type) {
        let strings = cast_to(column, &DataType::LargeUtf8)?;
        let strings = strings
            .as_any()
            .downcast_ref::<LargeStringArray>()
            .ok_or_else(|| Error::invalid_input("partition column is not a string column"))?;
        return Ok((0..strings.len())
            .map(|i| {
                if strings.is_null(i) {
                    0
                } else {
                    to_label(hash_bytes(strings.value(i).as_bytes()), destinations)
                }
            })
            .collect());
    }
    if data_type.is_signed_integer() {
        let values = cast_to(column, &DataType::Int64)?;
        let values = values
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::invalid_input("partition column is not an integer column"))?;
        return Ok((0..values.len())
            .map(|i| {
                if values.is_null(i) {
                    0
                } else {
                    to_label(mix64(values.value(i) as u64), destinations)
                }
            })
            .collect());
    }
    let values = cast_to(column, &DataType::UInt64)?;
    let values = values
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| Error::invalid_input("partition column is not an integer column"))?;
    Ok((0..values.len())
        .map(|i| {
            if values.is_null(i) {
                0
            } else {
                to_label(mix64(values.value(i)), destinations)
            }
        })
        .collect())
}

fn range_labels(column: &ArrayRef, boundaries: &[i64]) -> Result<Vec<u16>> {
    let values = cast(column, &DataType::Int64).map_err(|e| {
        Error::invalid_input(format!("partition column does not fit in Int64: {e}"))
    })?;
    let values = values
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| Error::invalid_input("partition column is not an integer column"))?;
    if values.null_count() > column.null_count() {
        return Err(Error::invalid_input(
            "partition column holds values that do not fit in Int64",
        ));
    }
    Ok((0..values.len())
        .map(|i| {
            if values.is_null(i) {
                0
            } else {
                let value = values.value(i);
                // At most 65,534 boundaries (checked by num_labels): fits u16.
                boundaries.partition_point(|b| *b <= value) as u16
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::Field;
    use rstest::rstest;

    use super::*;

    fn batch(column: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![Field::new("c", column.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![column]).unwrap()
    }

    #[test]
    fn range_labels_count_boundaries_at_or_below() {
        let by = PartitionBy::Range {
            column: "c".into(),
            boundaries: vec![10, 20],
        };
        let column: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(-5),
            Some(10),
            Some(19),
            Some(20),
            Some(99),
            None,
        ]));
        assert_eq!(by.labels(&batch(column)).unwrap(), vec![0, 1, 1, 2, 2, 0]);
    }

    #[test]
    fn hash_labels_are_stable_and_in_range() {
        let by = PartitionBy::Hash {
            column: "c".into(),
            destinations: 7,
        };
        let column: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            None,
            Some("a"),
        ]));
        let labels = by.labels(&batch(column)).unwrap();
        assert!(labels.iter().all(|l| *l < 7));
        assert_eq!(labels[0], labels[3]);
        assert_eq!(labels[2], 0);
        assert_eq!(hash_bytes(b"a"), mix64(0xaf63_dc4c_8601_ec8c));
    }

    #[rstest]
    #[case::zero_destinations(PartitionBy::Hash { column: "c".into(), destinations: 0 })]
    #[case::too_many(PartitionBy::Hash { column: "c".into(), destinations: 65_537 })]
    #[case::unsorted(PartitionBy::Range { column: "c".into(), boundaries: vec![5, 5] })]
    fn bad_partitionings_are_invalid_input(#[case] by: PartitionBy) {
        assert!(matches!(by.num_labels(), Err(Error::InvalidInput { .. })));
    }
}
