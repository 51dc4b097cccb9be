//! Inline index remap: compaction rewrites every affected index segment in the
//! Rewrite commit, and indexed queries still equal a brute-force scan.

mod support;
use support::compaction as common;

use std::collections::BTreeSet;

use arrow_array::{Array, Int64Array};
use common::dataset_with_fragments;
use refract_index::manage::create_index;
use refract_index::query::Query;
use refract_index::types::IndexParams;
use std::sync::Arc;

use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::runtime::{MaintenanceRuntime, MaintenanceRuntimeOptions};
use refract_table::dataset::Dataset;
use support::scan_ids;

async fn query_ids(dataset: &Dataset, filter: &str, use_index: bool) -> Vec<i64> {
    let result = Query::new(dataset)
        .filter(filter)
        .unwrap()
        .project(&["id"])
        .use_index(use_index)
        .execute()
        .await
        .unwrap();
    let column = result.batch.column_by_name("id").unwrap();
    let ids = column.as_any().downcast_ref::<Int64Array>().unwrap();
    (0..ids.len()).map(|i| ids.value(i)).collect()
}

#[tokio::test]
async fn btree_and_bitmap_follow_an_inline_compaction() {
    let dataset = dataset_with_fragments(&[50, 50, 50, 50]).await;
    let dataset = create_index(&dataset, "id_btree", "id", "btree", &IndexParams::default())
        .await
        .unwrap();
    let mut dataset = create_index(
        &dataset,
        "text_bitmap",
        "text",
        "bitmap",
        &IndexParams::default(),
    )
    .await
    .unwrap();
    dataset.delete("id % 7 = 0").await.unwrap();
    let before: BTreeSet<u128> = dataset
        .manifest()
        .indices
        .iter()
        .map(|i| i.uuid.as_u128())
        .collect();
    let options = CompactionOptions {
        target_rows_per_fragment: 1_000,
        ..CompactionOptions::default()
    };
    // The host's own maintenance runtime: every rewrite runs on its thread.
    let runtime = Arc::new(
        MaintenanceRuntime::new(MaintenanceRuntimeOptions {
            rewrite_threads: 1,
            remap_workers: 1,
        })
        .unwrap(),
    );
    let metrics = runtime
        .scope(compact_files(&mut dataset, &options, None))
        .await
        .unwrap();
    assert!(metrics.committed_version.is_some());
    assert_eq!(
        runtime.rewrites_started(),
        1,
        "the inline remap ran once (one commit attempt), on the scope's thread"
    );
    assert_eq!(dataset.fragments().len(), 1);
    let new_id = dataset.fragments()[0].id as u32;
    for index in dataset.manifest().indices.iter().filter(|i| !i.is_system()) {
        assert!(
            !before.contains(&index.uuid.as_u128()),
            "segment {} was not rewritten",
            index.name
        );
        let coverage: Vec<u32> = index.fragment_bitmap.as_ref().unwrap().iter().collect();
        assert_eq!(
            coverage,
            vec![new_id],
            "coverage of {} not restamped",
            index.name
        );
    }
    for filter in [
        "id = 10",
        "id = 14",
        "id >= 40 AND id < 120",
        "id IN (1, 7, 199)",
        "text = 'row 33'",
    ] {
        let indexed = query_ids(&dataset, filter, true).await;
        let scanned = query_ids(&dataset, filter, false).await;
        assert_eq!(indexed, scanned, "filter {filter}");
    }
    let all = scan_ids(&dataset).await;
    assert_eq!(all, (0..200).filter(|id| id % 7 != 0).collect::<Vec<i64>>());
}
