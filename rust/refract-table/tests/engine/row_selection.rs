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

/// Data requests of `scan` on a freshly opened dataset (cold caches); rows returned.
async fn data_requests(
    uri: &str,
    selection: Option<RowSelection>,
    fragments: Option<&[u64]>,
) -> (usize, u64) {
    let dataset = Dataset::open(uri).await.unwrap();
    dataset.store().reset_stats();
    let mut scanner = dataset.scan();
    if let Some(selection) = selection {
        scanner = scanner.select_rows(selection);
    }
    if let Some(fragments) = fragments {
        scanner = scanner.fragments(fragments);
    }
    let rows = scanner.try_into_batch().await.unwrap().num_rows();
    (rows, dataset.store().stats().requests_under("data"))
}

#[tokio::test]
async fn a_point_selection_reads_its_fragment_only_and_skips_empty_ones() {
    let location = location(Backend::Local);
    let dataset = create_with_rows(&location.uri, 4_000, 1_000).await;
    let ids = fragment_ids(&dataset);
    let uri = location.uri.as_str();
    let point: RoaringTreemap = [(ids[2] << 32) | 617].into_iter().collect();
    let (rows, whole) = data_requests(uri, None, Some(&[ids[2]])).await;
    assert_eq!(rows, 1_000);
    let selection = RowSelection::from_addresses(&point);
    let (rows, selected) = data_requests(uri, Some(selection.clone()), Some(&[ids[2]])).await;
    assert_eq!(rows, 1);
    // A ranged read asks for each column's pages on its own, so on a tiny
    // file it costs a few more requests than reading the file whole (the
    // planner charges every range for this).
    assert!(selected > 0 && whole > 0, "{selected} vs {whole}");
    // Without `.fragments`, the unrestricted fragments are read whole and a
    // fragment with an empty selection is never opened.
    let mut mixed_selection = selection;
    mixed_selection.insert(ids[0], RoaringBitmap::new());
    let (rows, mixed) = data_requests(uri, Some(mixed_selection), None).await;
    assert_eq!(rows, 1 + 2 * 1_000);
    let (_, two_whole) = data_requests(uri, None, Some(&[ids[1], ids[3]])).await;
    assert_eq!(mixed, two_whole + selected);
}
