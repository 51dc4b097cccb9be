//! Scans restricted to selected rows (the index path of a query): exactly the
//! selected live rows that match the filter, in scan order, read as coalesced
//! ranges; fragments without a selected row are not opened.

use arrow_array::{Array, RecordBatch, UInt64Array};
use refract_table::dataset::{RowSelection, COALESCE_GAP_ROWS};
use refract_table::{Dataset, ROW_ADDRESS_COLUMN};
use roaring::{RoaringBitmap, RoaringTreemap};
use rstest::rstest;

use crate::common::*;

fn addresses(batch: &RecordBatch) -> Vec<u64> {
    batch
        .column_by_name(ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .values()
        .to_vec()
}

/// The reference: a filtered scan, keeping the rows of restricted fragments
/// whose address is selected.
async fn reference(dataset: &Dataset, filter: &str, selection: &RowSelection) -> RecordBatch {
    let all = dataset
        .scan()
        .filter(filter)
        .unwrap()
        .with_row_address()
        .try_into_batch()
        .await
        .unwrap();
    let keep: arrow_array::BooleanArray = addresses(&all)
        .iter()
        .map(|address| {
            let offsets = selection.get(address >> 32);
            Some(offsets.is_none_or(|o| o.contains((address & 0xFFFF_FFFF) as u32)))
        })
        .collect();
    arrow::compute::filter_record_batch(&all, &keep).unwrap()
}

#[rstest]
#[case::batch_spans_ranges(7)]
#[case::default_batches(8_192)]
#[tokio::test]
async fn selected_rows_equal_a_filtered_scan_of_them(#[case] batch_size: usize) {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 2_000, 500).await;
    dataset.delete("id % 9 = 4").await.unwrap();
    let ids = fragment_ids(&dataset);
    assert_eq!(ids.len(), 4);
    let mut selection = RowSelection::new();
    // Runs, rows within a coalescing gap, far rows, deleted rows (offset 4, 13),
    // the first and the last offset.
    let gap = COALESCE_GAP_ROWS;
    let first: RoaringBitmap = (0..20)
        .chain([20 + gap / 2, 300, 301, 302, 499])
        .chain([4, 13])
        .collect();
    selection.insert(ids[0], first);
    // Nothing selected: the fragment is skipped.
    selection.insert(ids[1], RoaringBitmap::new());
    // ids[2] has no entry: read whole.
    selection.insert(ids[3], [251].into_iter().collect());
    let filter = "id % 3 != 0";
    let expected = reference(&dataset, filter, &selection).await;
    let got = dataset
        .scan()
        .filter(filter)
        .unwrap()
        .with_row_address()
        .batch_size(batch_size)
        .select_rows(selection)
        .try_into_batch()
        .await
        .unwrap();
    assert_eq!(got, expected);
    // Spot-check the reference itself: fragment 1 contributes nothing, 2 everything.
    let by_fragment = |id: u64| {
        addresses(&got)
            .into_iter()
            .filter(|a| a >> 32 == id)
            .count()
    };
    assert_eq!(by_fragment(ids[1]), 0);
    assert_eq!(
        by_fragment(ids[2]),
        (1_000..1_500).filter(|i| i % 9 != 4 && i % 3 != 0).count()
    );
    // Offset 251 of the last fragment is id 1751: live and matching.
    assert_eq!(by_fragment(ids[3]), 1);
}

#[tokio::test]
async fn a_point_selection_reads_a_fraction_of_the_data_and_skips_other_fragments() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 4_000, 1_000).await;
    let ids = fragment_ids(&dataset);
    let full = |fragments: Vec<u64>| {
        let dataset = dataset.clone();
        async move {
            dataset.store().reset_stats();
            let batch = dataset
                .scan()
                .fragments(&fragments)
                .try_into_batch()
                .await
                .unwrap();
            (batch.num_rows(), dataset.store().stats())
        }
    };
    let (rows, whole) = full(vec![ids[2]]).await;
    assert_eq!(rows, 1_000);
    let point: RoaringTreemap = [(ids[2] << 32) | 617].into_iter().collect();
    dataset.store().reset_stats();
    let batch = dataset
        .scan()
        .select_rows(RowSelection::from_addresses(&point))
        .fragments(&[ids[2]])
        .try_into_batch()
        .await
        .unwrap();
    let selected = dataset.store().stats();
    assert_eq!(batch.num_rows(), 1);
    assert!(
        selected.by_prefix["data"].bytes_read * 4 < whole.by_prefix["data"].bytes_read,
        "{selected:?} vs {whole:?}"
    );
    // Without `.fragments`, the unrestricted fragments are read whole and a
    // fragment with an empty selection is never opened.
    let mut selection = RowSelection::from_addresses(&point);
    selection.insert(ids[0], RoaringBitmap::new());
    dataset.store().reset_stats();
    let batch = dataset
        .scan()
        .select_rows(selection)
        .try_into_batch()
        .await
        .unwrap();
    let mixed = dataset.store().stats();
    assert_eq!(batch.num_rows(), 1 + 2 * 1_000);
    let (_, two_whole) = full(vec![ids[1], ids[3]]).await;
    assert_eq!(
        mixed.by_prefix["data"].requests,
        two_whole.by_prefix["data"].requests + selected.by_prefix["data"].requests,
        "{mixed:?}"
    );
}
