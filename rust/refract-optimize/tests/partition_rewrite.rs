//! Stable partition rewrites: order within destinations, full content,
//! positional replacement, row maps, empty destinations, errors, conflicts.

mod support;

use refract_core::{DeletionVector, Error};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_optimize::fri::{
    deferred_remap_hook, fri_uuid, partition_fragments, PartitionBy, PartitionOptions,
};
use refract_table::io::write_deletion_file;
use refract_table::transaction::Operation;
use refract_table::Dataset;
use rstest::rstest;
use support::fri::*;
use support::partition::*;
use support::*;

fn range(boundaries: Vec<i64>) -> PartitionBy {
    PartitionBy::Range {
        column: "cat".into(),
        boundaries,
    }
}

fn options(by: PartitionBy, fragments: Option<Vec<u64>>) -> PartitionOptions {
    PartitionOptions {
        fragments,
        batch_size: 37,
        max_buffered_rows: 100,
        ..PartitionOptions::new(by)
    }
}

/// cat -> label for boundaries [1, 3]: null and 0 -> 0, 1..=2 -> 1, 3..=4 -> 2.
fn label_1_3(cat: Option<i32>) -> usize {
    match cat {
        None | Some(0) => 0,
        Some(1 | 2) => 1,
        _ => 2,
    }
}

/// 6 fragments of 100 rows, some deleted rows, an index on fragments 2..=4.
async fn indexed_with_deletions(name: &str) -> Dataset {
    let mut dataset = dataset_with_rows(name, 600, 100).await;
    dataset
        .delete("id = 5 or (id >= 120 and id < 160) or id = 599")
        .await
        .unwrap();
    add_user_index(&mut dataset, "by_id", &[2, 3, 4]).await;
    dataset
}

#[rstest]
#[case::all(None)]
#[case::run(Some(vec![2, 3, 4]))]
#[case::single(Some(vec![3]))]
#[tokio::test]
async fn range_partition_keeps_order_content_and_records_a_row_map(
    #[case] fragments: Option<Vec<u64>>,
) {
    let before = indexed_with_deletions("range").await;
    let sources = fragments.clone().unwrap_or_else(|| fragment_ids(&before));
    let mut after = before.clone();
    let metrics = partition_fragments(&mut after, options(range(vec![1, 3]), fragments))
        .await
        .unwrap();
    assert!(metrics.transition_recorded);
    assert!(metrics.map_id.is_some() && metrics.map_size_bytes > 0);
    assert_eq!(metrics.fragments_removed, sources.len() as u64);
    assert_eq!(metrics.fragments_added, 3);
    check_partition(&before, &after, &sources, &metrics, Some(&label_1_3), true).await;
    assert_eq!(
        after.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        FLAG_FRAGMENT_REUSE_INDEX
    );
    // The index segment is untouched: it translates through the history.
    assert_eq!(after.manifest().indices.len(), 2);
}

#[rstest]
#[case::int_column("cat", 3)]
#[case::string_column("name", 4)]
#[case::one_destination("id", 1)]
#[tokio::test]
async fn hash_partition_keeps_order_and_content(#[case] column: &str, #[case] destinations: u32) {
    let before = indexed_with_deletions("hash").await;
    let mut after = before.clone();
    let by = PartitionBy::Hash {
        column: column.into(),
        destinations,
    };
    let metrics = partition_fragments(&mut after, options(by, None))
        .await
        .unwrap();
    assert!(metrics.fragments_added <= u64::from(destinations));
    check_partition(
        &before,
        &after,
        &fragment_ids(&before),
        &metrics,
        None,
        column == "cat",
    )
    .await;
}

#[tokio::test]
async fn unindexed_partition_writes_no_row_map() {
    let before = dataset_with_rows("plain", 500, 100).await;
    let mut after = before.clone();
    let metrics = partition_fragments(&mut after, options(range(vec![1, 3]), Some(vec![2, 3])))
        .await
        .unwrap();
    assert!(!metrics.transition_recorded);
    assert_eq!(metrics.map_id, None);
    assert!(fri_uuid(after.manifest()).is_none());
    assert_eq!(
        after.manifest().reader_flags,
        before.manifest().reader_flags
    );
    check_partition(&before, &after, &[2, 3], &metrics, Some(&label_1_3), true).await;
    // 4 and 5 follow the destinations under fresh ids.
    assert_eq!(fragment_ids(&after), vec![1, 6, 7, 8, 9, 10]);
}

#[tokio::test]
async fn empty_destinations_are_dropped_and_labels_stay_dense() {
    let before = indexed_with_deletions("empty").await;
    let mut after = before.clone();
    // cat is 0..=4: destinations 3 (100..200) and 4 (>= 200) receive nothing.
    let label = |cat: Option<i32>| match cat {
        None | Some(0) => 0,
        Some(1) => 1,
        _ => 2,
    };
    let metrics = partition_fragments(&mut after, options(range(vec![1, 2, 100, 200]), None))
        .await
        .unwrap();
    assert_eq!(metrics.empty_destinations_dropped, 2);
    assert_eq!(metrics.fragments_added, 3);
    check_partition(
        &before,
        &after,
        &fragment_ids(&before),
        &metrics,
        Some(&label),
        true,
    )
    .await;
}

#[tokio::test]
async fn fully_deleted_sources_are_removed() {
    let mut before = dataset_with_rows("deleted", 300, 100).await;
    add_user_index(&mut before, "by_id", &[1, 2, 3]).await;
    before.delete("id >= 100 and id < 300").await.unwrap();
    // Fragments 2 and 3 are entirely deleted and already gone; delete most of 1.
    before.delete("id >= 1").await.unwrap();
    let mut after = before.clone();
    let metrics = partition_fragments(&mut after, options(range(vec![1]), None))
        .await
        .unwrap();
    assert_eq!(metrics.fragments_added, 1);
    assert_eq!(scan_ids(&after).await, vec![0]);
    after.delete("id = 0").await.unwrap();
    assert!(after.fragments().is_empty());
}

#[tokio::test]
async fn all_deleted_run_is_recorded_without_destinations() {
    let mut before = dataset_with_rows("alldeleted", 300, 100).await;
    add_user_index(&mut before, "by_id", &[1, 2, 3]).await;
    // A fragment whose deletion file covers every row (this engine's delete would
    // drop it, other writers may leave it).
    let mut fragment = before.fragments()[1].clone();
    let all: DeletionVector = DeletionVector::from_bitmap((0..100u32).collect());
    fragment.deletion_file = Some(
        write_deletion_file(before.store(), fragment.id, before.version(), &all)
            .await
            .unwrap(),
    );
    before = before
        .commit(Operation::Delete {
            updated_fragments: vec![fragment],
            removed_fragment_ids: vec![],
            predicate: "id >= 100 and id < 200".into(),
        })
        .await
        .unwrap();
    let mut after = before.clone();
    let metrics = partition_fragments(&mut after, options(range(vec![1]), Some(vec![2])))
        .await
        .unwrap();
    assert_eq!((metrics.fragments_removed, metrics.fragments_added), (1, 0));
    assert_eq!(metrics.deleted_rows_dropped, 100);
    assert_eq!(fragment_ids(&after), vec![1, 3]);
    assert_eq!(scan_ids(&after).await, scan_ids(&before).await);
    let ledger = ledger_of(&after).await.unwrap();
    let record = ledger.lineage().consumer_of(2).unwrap();
    assert_eq!(record.mapping().kind(), "ordered_compaction");
    assert!(record.destinations().is_empty());
}

#[rstest]
#[case::not_contiguous(Some(vec![1, 3]), "cat")]
#[case::wrong_order(Some(vec![2, 1]), "cat")]
#[case::unknown_fragment(Some(vec![99]), "cat")]
#[case::empty_list(Some(vec![]), "cat")]
#[case::unknown_column(None, "nope")]
#[case::string_range(None, "name")]
#[tokio::test]
async fn bad_requests_are_invalid_input(#[case] fragments: Option<Vec<u64>>, #[case] column: &str) {
    let before = dataset_with_rows("bad", 300, 100).await;
    let mut after = before.clone();
    let by = PartitionBy::Range {
        column: column.into(),
        boundaries: vec![1],
    };
    let err = partition_fragments(&mut after, options(by, fragments))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(after.version(), before.version());
    assert_eq!(before.latest_version().await.unwrap(), before.version());
}

#[tokio::test]
async fn partition_racing_a_delete_of_its_sources_conflicts() {
    let before = indexed_with_deletions("race").await;
    let mut deleter = before.clone();
    deleter.delete("id = 250").await.unwrap();
    let mut stale = before.clone();
    let err = partition_fragments(&mut stale, options(range(vec![1, 3]), Some(vec![3])))
        .await
        .unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    // Retrying on the latest version succeeds.
    let mut latest = before.checkout_latest().await.unwrap();
    let snapshot = latest.clone();
    let metrics = partition_fragments(&mut latest, options(range(vec![1, 3]), Some(vec![3])))
        .await
        .unwrap();
    check_partition(&snapshot, &latest, &[3], &metrics, Some(&label_1_3), true).await;
}

#[tokio::test]
async fn partition_of_compacted_fragments_extends_the_chain() {
    let before = indexed_with_deletions("chain").await;
    let groups = plan_rewrite(&before, &[vec![2, 3]], 1).await;
    let hook = deferred_remap_hook();
    let compacted = commit_rewrite(&before, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    // 4 follows the new fragment, relabelled.
    let produced = compacted.fragments()[1].id;
    let relabelled = compacted.fragments()[2].id;
    let mut after = compacted.clone();
    let metrics = partition_fragments(
        &mut after,
        options(range(vec![1, 3]), Some(vec![produced, relabelled])),
    )
    .await
    .unwrap();
    check_partition(
        &compacted,
        &after,
        &[produced, relabelled],
        &metrics,
        Some(&label_1_3),
        true,
    )
    .await;
    let ledger = ledger_of(&after).await.unwrap();
    assert_eq!(
        ledger.transitions().len(),
        5,
        "compaction, relabel of the indexed 4 and of 5, 6, partition, relabel of 5, 6 again \
         (the history covers them)"
    );
    assert_eq!(
        ledger
            .lineage()
            .producer_of(produced)
            .unwrap()
            .mapping()
            .kind(),
        "ordered_compaction"
    );
    assert_eq!(
        ledger
            .lineage()
            .consumer_of(produced)
            .unwrap()
            .mapping()
            .kind(),
        "stable_partition"
    );
}
