//! Compaction by page copy: runs of fragments without deletions are joined by
//! copying their encoded pages. The result must be indistinguishable from a
//! decode/re-encode compaction: same layout, same rows in the same order at
//! the same new addresses, readable by scans, filters and point lookups.

mod support;
use support::compaction as common;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use common::{batch, dataset_with_fragments, fragment_sizes, schema};
use refract_optimize::compaction::{
    commit_compaction, execute_plan, plan_compaction, CompactionOptions, RewriteResult,
};
use refract_table::dataset::{Dataset, OpenOptions, WriteOptions, ROW_ADDRESS_COLUMN};
use rstest::rstest;
use support::scan_ids;

fn options(target: u64, binary_copy: bool) -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: target,
        binary_copy,
        // The fixtures are small; copy them anyway.
        binary_copy_min_source_rows: 0,
        ..CompactionOptions::default()
    }
}

/// Plans, executes and commits one round; returns the task results.
async fn compact_once(dataset: &mut Dataset, options: &CompactionOptions) -> Vec<RewriteResult> {
    let plan = plan_compaction(dataset, options).unwrap();
    let results = execute_plan(dataset, &plan, None).await.unwrap();
    let (committed, _) = commit_compaction(dataset, results.clone()).await.unwrap();
    *dataset = committed;
    results
}

/// Every row with its address, in scan order.
async fn rows_with_addresses(dataset: &Dataset) -> (Vec<i64>, Vec<String>, Vec<u64>) {
    let batch = dataset
        .scan()
        .with_row_address()
        .try_into_batch()
        .await
        .unwrap();
    (ids(&batch), texts(&batch), addresses(&batch))
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let column = batch.column_by_name("id").unwrap();
    let ids = column.as_any().downcast_ref::<Int64Array>().unwrap();
    ids.values().to_vec()
}

fn texts(batch: &RecordBatch) -> Vec<String> {
    let column = batch.column_by_name("text").unwrap();
    let texts = column.as_any().downcast_ref::<StringArray>().unwrap();
    (0..texts.len())
        .map(|i| texts.value(i).to_string())
        .collect()
}

fn addresses(batch: &RecordBatch) -> Vec<u64> {
    let column = batch.column_by_name(ROW_ADDRESS_COLUMN).unwrap();
    let addresses = column.as_any().downcast_ref::<UInt64Array>().unwrap();
    addresses.values().to_vec()
}

#[rstest]
#[case::all_into_one(&[100; 6], 500, 1)]
#[case::two_balanced_outputs(&[100; 8], 400, 2)]
#[case::uneven_sources(&[30, 170, 100, 250, 50], 300, 2)]
#[tokio::test]
async fn copied_pages_match_a_re_encoded_compaction(
    #[case] sizes: &[u64],
    #[case] target: u64,
    #[case] outputs: usize,
) {
    let mut copied = dataset_with_fragments(sizes).await;
    let mut encoded = dataset_with_fragments(sizes).await;
    let before = rows_with_addresses(&copied).await;

    let copied_results = compact_once(&mut copied, &options(target, true)).await;
    let encoded_results = compact_once(&mut encoded, &options(target, false)).await;

    assert!(copied_results.iter().all(|r| r.pages_copied));
    assert!(encoded_results.iter().all(|r| !r.pages_copied));
    assert_eq!(fragment_sizes(&copied).len(), outputs);
    assert_eq!(fragment_sizes(&copied), fragment_sizes(&encoded));
    let after = rows_with_addresses(&copied).await;
    assert_eq!(after, rows_with_addresses(&encoded).await);
    // Same rows, same order; only the addresses moved.
    assert_eq!((&after.0, &after.1), (&before.0, &before.1));
    for (copy, encode) in copied_results.iter().zip(&encoded_results) {
        assert_eq!(copy.surviving().unwrap(), encode.surviving().unwrap());
        assert_eq!(copy.rows_read, encode.rows_read);
    }
}

#[tokio::test]
async fn copied_output_serves_filters_and_point_lookups() {
    let mut dataset = dataset_with_fragments(&[100; 10]).await;
    let results = compact_once(&mut dataset, &options(1_000, true)).await;
    assert!(results[0].pages_copied);
    assert_eq!(fragment_sizes(&dataset), vec![1_000]);

    let filtered = dataset
        .scan()
        .filter("id >= 95 AND id < 105")
        .unwrap()
        .try_into_batch()
        .await
        .unwrap();
    assert_eq!(ids(&filtered), (95..105).collect::<Vec<i64>>());

    let fragment = dataset.fragments()[0].id;
    let wanted: Vec<u64> = [999u64, 0, 100, 99, 500]
        .iter()
        .map(|offset| (fragment << 32) | offset)
        .collect();
    let taken = dataset.take(&wanted, None).await.unwrap();
    assert_eq!(ids(&taken), vec![999, 0, 100, 99, 500]);
    assert_eq!(texts(&taken)[0], "row 999");
}

#[tokio::test]
async fn sources_below_the_copy_threshold_re_encode() {
    let mut dataset = dataset_with_fragments(&[100, 100, 99]).await;
    let options = CompactionOptions {
        binary_copy_min_source_rows: 100,
        ..options(300, true)
    };
    let results = compact_once(&mut dataset, &options).await;
    assert!(!results[0].pages_copied);
    assert_eq!(scan_ids(&dataset).await, (0..299).collect::<Vec<i64>>());

    let mut dataset = dataset_with_fragments(&[100, 100, 100]).await;
    let results = compact_once(&mut dataset, &options).await;
    assert!(results[0].pages_copied);
    assert_eq!(scan_ids(&dataset).await, (0..300).collect::<Vec<i64>>());
}

#[tokio::test]
async fn deletions_anywhere_in_the_run_re_encode_it() {
    let mut dataset = dataset_with_fragments(&[100; 4]).await;
    dataset.delete("id = 150").await.unwrap();
    let results = compact_once(&mut dataset, &options(400, true)).await;
    assert_eq!(results.len(), 1);
    assert!(!results[0].pages_copied);
    let expected: Vec<i64> = (0..400).filter(|id| *id != 150).collect();
    assert_eq!(scan_ids(&dataset).await, expected);
}

#[tokio::test]
async fn an_output_boundary_inside_a_fragment_re_encodes() {
    // 3 × 100 rows at target 150: one output of 300 rows holds whole
    // fragments; 5 × 100 at target 250 splits into 250 + 250, cutting the
    // third fragment, so that task re-encodes.
    let mut dataset = dataset_with_fragments(&[100; 5]).await;
    let results = compact_once(&mut dataset, &options(250, true)).await;
    assert_eq!(fragment_sizes(&dataset), vec![250, 250]);
    assert!(results.iter().all(|r| !r.pages_copied));
    assert_eq!(scan_ids(&dataset).await, (0..500).collect::<Vec<i64>>());
}

#[tokio::test]
async fn copies_on_a_local_directory_until_noop() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("file://{}", dir.path().join("table").display());
    let mut dataset = Dataset::create(&uri, schema(), OpenOptions::default())
        .await
        .unwrap();
    let mut next = 0i64;
    for rows in [100u64, 200, 150, 150, 400] {
        let write = WriteOptions {
            max_rows_per_file: rows,
            ..WriteOptions::default()
        };
        dataset
            .append(vec![batch(next, rows)], &write)
            .await
            .unwrap();
        next += rows as i64;
    }
    let expected: Vec<i64> = (0..next).collect();
    let options = options(300, true);
    let mut copied_rounds = 0;
    for _ in 0..10 {
        let results = compact_once(&mut dataset, &options).await;
        assert_eq!(scan_ids(&dataset).await, expected);
        if results.is_empty() {
            break;
        }
        copied_rounds += results.iter().filter(|r| r.pages_copied).count();
    }
    assert!(plan_compaction(&dataset, &options).unwrap().is_empty());
    assert!(copied_rounds >= 1, "no task was copied");
    let reopened = Dataset::open(&uri).await.unwrap();
    assert_eq!(scan_ids(&reopened).await, expected);
}
