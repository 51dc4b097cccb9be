//! Index entries: what a segment holds, one (key, stored row address) pair at
//! a time, so deep verification can compare a segment with the data it covers
//! without knowing its type.
//!
//! A btree or bitmap entry's key is the value, an ngram entry's the trigram,
//! an ivf_flat entry's the partition and the vector's bytes. Both sides of the
//! comparison (the segment's files and [`IndexSegmentReader::expected_entries`]
//! of the data) produce the same key columns, so a multiset of entries can be
//! fingerprinted the same way from either.
//!
//! [`IndexSegmentReader::expected_entries`]: super::IndexSegmentReader::expected_entries

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use async_trait::async_trait;
use refract_core::{Error, Result};
use roaring::RoaringTreemap;

use super::MAX_TRANSLATION_BATCH;

/// Name of the row-address column in build input and data batches.
pub(crate) const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// Entries of one segment: row `i` is the pair (`keys[..][i]`,
/// `addresses[i]`). At most [`MAX_TRANSLATION_BATCH`] rows.
#[derive(Debug, Clone)]
pub struct IndexEntries {
    /// The key columns, all of `addresses.len()` rows.
    pub keys: Vec<ArrayRef>,
    /// Stored row addresses, non-null.
    pub addresses: UInt64Array,
}

/// Receives the entries of a segment, one bounded piece at a time.
#[async_trait]
pub trait EntrySink: Send {
    /// Takes one piece.
    ///
    /// # Errors
    /// Whatever the receiver fails with; the segment's walk stops there.
    async fn accept(&mut self, entries: IndexEntries) -> Result<()>;
}

/// Splits `(value column, _rowaddr)` data batches as index builds receive
/// them: the value column and the non-null addresses.
///
/// # Errors
/// InvalidInput when either column is missing or the addresses hold a null.
pub(crate) fn value_and_addresses(batch: &RecordBatch) -> Result<(&ArrayRef, &UInt64Array)> {
    let addresses = batch
        .column_by_name(ROW_ADDRESS_COLUMN)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .filter(|c| c.null_count() == 0)
        .ok_or_else(|| Error::invalid_input("index input needs a non-null UInt64 `_rowaddr`"))?;
    let position = batch
        .schema()
        .fields()
        .iter()
        .position(|f| f.name() != ROW_ADDRESS_COLUMN)
        .ok_or_else(|| Error::invalid_input("index input has no value column"))?;
    Ok((batch.column(position), addresses))
}

/// The rows of `keys` at `rows`, paired with `addresses`.
///
/// # Errors
/// Only if `take` fails (an index out of range: a caller bug).
pub(crate) fn take_entries(
    keys: &[ArrayRef],
    rows: &UInt32Array,
    addresses: Vec<u64>,
) -> Result<IndexEntries> {
    let keys = keys
        .iter()
        .map(|k| {
            arrow::compute::take(k.as_ref(), rows, None)
                .map_err(|e| Error::external("selecting index keys", e))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(IndexEntries {
        keys,
        addresses: UInt64Array::from(addresses),
    })
}

/// Gives `sink` one entry per address of `posting`, all with the key at row
/// `key_row` of `keys`, in pieces of at most [`MAX_TRANSLATION_BATCH`].
///
/// # Errors
/// The sink's.
pub(crate) async fn expand_posting(
    keys: &[ArrayRef],
    key_row: u32,
    posting: &RoaringTreemap,
    sink: &mut dyn EntrySink,
) -> Result<()> {
    let mut addresses = posting.iter();
    loop {
        let piece: Vec<u64> = addresses.by_ref().take(MAX_TRANSLATION_BATCH).collect();
        if piece.is_empty() {
            return Ok(());
        }
        let rows = UInt32Array::from(vec![key_row; piece.len()]);
        sink.accept(take_entries(keys, &rows, piece)?).await?;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field};
    use rstest::rstest;

    use super::*;
    use crate::types::test_support::{context, seg};
    use crate::types::{IndexParams, IndexType};

    /// Every entry received, rendered as `(keys, address)`.
    #[derive(Default)]
    struct Collected(Vec<(String, u64)>);

    #[async_trait]
    impl EntrySink for Collected {
        async fn accept(&mut self, entries: IndexEntries) -> Result<()> {
            assert!(entries.addresses.len() <= MAX_TRANSLATION_BATCH);
            for (i, address) in entries.addresses.values().iter().enumerate() {
                let key: Vec<String> = entries
                    .keys
                    .iter()
                    .map(|k| arrow::util::display::array_value_to_string(k, i).unwrap())
                    .collect();
                self.0.push((key.join("|"), *address));
            }
            Ok(())
        }
    }

    /// 300 rows over three fragments: ids, names (null every seventh row,
    /// repeating every 11) and 2-d vectors in three clusters.
    fn input(column: &str) -> RecordBatch {
        let addresses: Vec<u64> = (0..300u64).map(|i| ((i / 100) << 32) | (i % 100)).collect();
        let values: ArrayRef = match column {
            "id" => Arc::new(Int64Array::from_iter_values(
                (0..300).map(|i| (i * 37) % 101),
            )),
            "name" => Arc::new(StringArray::from_iter(
                (0..300).map(|i| (i % 7 != 0).then(|| format!("Name-{}", i % 11))),
            )),
            _ => {
                let flat: Float32Array = (0..300)
                    .flat_map(|i| {
                        let centre = (i % 3) as f32 * 10.0;
                        [centre + (i % 5) as f32 * 0.1, centre - (i % 4) as f32 * 0.1]
                    })
                    .collect();
                let item = Arc::new(Field::new("item", DataType::Float32, true));
                Arc::new(FixedSizeListArray::new(item, 2, Arc::new(flat), None))
            }
        };
        RecordBatch::try_from_iter([
            (column, values),
            (
                ROW_ADDRESS_COLUMN,
                Arc::new(UInt64Array::from(addresses)) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[rstest]
    #[case::btree(Arc::new(crate::types::btree::BTreeIndexType) as Arc<dyn IndexType>, "id", 300)]
    #[case::bitmap(Arc::new(crate::types::bitmap::BitmapIndexType), "name", 300)]
    #[case::ngram(Arc::new(crate::types::ngram::NgramIndex), "name", 0)]
    #[case::ivf_flat(Arc::new(crate::types::ivf_flat::IvfFlatIndex), "vec", 300)]
    #[tokio::test]
    async fn a_built_segment_holds_exactly_the_entries_its_input_implies(
        #[case] index_type: Arc<dyn IndexType>,
        #[case] column: &str,
        #[case] one_per_row: usize,
    ) {
        let (ctx, _dir) = context().await;
        let rows = input(column);
        let params = IndexParams {
            partitions: Some(3),
            ..IndexParams::default()
        };
        let dir = seg("entries");
        let stream = Box::pin(futures::stream::iter([Ok(rows.clone())]));
        let details = index_type.build(&ctx, &dir, stream, &params).await.unwrap();
        let segment = index_type.open(&ctx, &dir, &details).await.unwrap();

        let mut stored = Collected::default();
        assert!(segment.visit_entries(&mut stored).await.unwrap());
        let mut implied = Collected::default();
        implied
            .accept(segment.expected_entries(&rows).unwrap().unwrap())
            .await
            .unwrap();
        stored.0.sort();
        implied.0.sort();
        assert_eq!(stored.0, implied.0);
        if one_per_row > 0 {
            // btree leaves nulls out; the others keep one entry per row.
            assert_eq!(stored.0.len(), one_per_row);
        } else {
            // "name-N" (lowercased): four distinct trigrams for N < 10, five for 10.
            let named = (0..300).filter(|i| i % 7 != 0);
            let expected: usize = named.map(|i| if i % 11 == 10 { 5 } else { 4 }).sum();
            assert_eq!(stored.0.len(), expected);
        }

        // One entry moved to another row no longer matches.
        let mut moved = stored.0.clone();
        moved[0].1 ^= 1;
        moved.sort();
        assert_ne!(moved, implied.0);
    }
}
