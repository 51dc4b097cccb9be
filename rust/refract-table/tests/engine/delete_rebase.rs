//! A Delete racing compactions (Rewrites with a survivor capture, built here the
//! way compaction builds them) and partitions: exact rows, scan order and
//! deletion counts in both commit orders.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use refract_table::{Dataset, Fragment, Operation, RewriteGroup, ROW_ADDRESS_COLUMN};
use roaring::RoaringTreemap;
use rstest::rstest;

use crate::common::*;

/// A compaction of the run `old` at `dataset`'s version into fragments of
/// `per_file` rows, carrying the survivor capture rebasing needs.
async fn compaction(dataset: &Dataset, old: &[u64], per_file: u64) -> Operation {
    let batch = dataset
        .scan()
        .fragments(old)
        .with_row_address()
        .try_into_batch()
        .await
        .unwrap();
    let survivors: RoaringTreemap = batch
        .column_by_name(ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_primitive::<UInt64Type>()
        .values()
        .iter()
        .copied()
        .collect();
    let mut capture = Vec::new();
    survivors.serialize_into(&mut capture).unwrap();
    let data = batch
        .project(&(0..batch.num_columns() - 1).collect::<Vec<_>>())
        .unwrap();
    let new_fragments = dataset
        .write_fragments(futures::stream::iter(vec![Ok(data)]), &opts(per_file))
        .await
        .unwrap();
    Operation::Rewrite {
        groups: vec![RewriteGroup {
            old_fragment_ids: old.to_vec(),
            new_fragments,
            surviving_old_addresses: Some(capture),
        }],
        new_indices: vec![],
        removed_index_uuids: vec![],
    }
}

/// `(fragment id, deleted rows)` in manifest order.
fn deletion_counts(dataset: &Dataset) -> Vec<(u64, u64)> {
    dataset
        .fragments()
        .iter()
        .map(|fragment| {
            let deleted = fragment
                .deletion_file
                .as_ref()
                .map_or(0, |file| file.num_deleted_rows);
            (fragment.id, deleted)
        })
        .collect()
}

/// The transaction recorded in `dataset`'s version.
fn operation(dataset: &Dataset) -> Operation {
    dataset
        .manifest()
        .transaction
        .as_ref()
        .unwrap()
        .operation
        .clone()
}

/// Ids 0..40 without those `predicate` deletes, from a reference table.
async fn expected_after(predicate: &str) -> Vec<i64> {
    let location = location(Backend::Memory);
    let mut reference = create_with_rows(&location.uri, 40, 10).await;
    reference.delete(predicate).await.unwrap();
    scan_ids(&reference).await
}

// Fragments 1..=4 of 10 rows; the compaction turns 1, 2, 3 into 5 (ids 0..15)
// and 6 (ids 15..30) in place; 4 (ids 30..40) is not compacted but relabelled 7.
#[rstest]
#[case::scattered_rewrite_first("id % 4 = 1 OR id = 37", false, [4, 4, 2])]
#[case::scattered_delete_first("id % 4 = 1 OR id = 37", true, [4, 4, 2])]
#[case::whole_source_rewrite_first("id < 10 OR id = 35", false, [10, 0, 1])]
#[case::whole_source_delete_first("id < 10 OR id = 35", true, [10, 0, 1])]
#[case::across_new_fragments_rewrite_first("id >= 12 AND id < 28", false, [3, 13, 0])]
#[case::across_new_fragments_delete_first("id >= 12 AND id < 28", true, [3, 13, 0])]
#[tokio::test]
async fn delete_racing_a_compaction_of_its_rows_commits_in_either_order(
    #[case] predicate: &str,
    #[case] delete_first: bool,
    #[case] deleted: [u64; 3],
) {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let rewrite = compaction(&base, &[1, 2, 3], 15).await;
    let mut deleter = base.clone();
    let latest = if delete_first {
        let result = deleter.delete(predicate).await.unwrap();
        let committed = base.commit(rewrite).await.unwrap();
        assert_eq!(deleter.version(), 3);
        assert_eq!(result.rows_deleted, deleted.iter().sum::<u64>());
        committed
    } else {
        base.commit(rewrite).await.unwrap();
        let result = deleter.delete(predicate).await.unwrap();
        assert_eq!(deleter.version(), 4);
        assert!(matches!(operation(&deleter), Operation::Delete { .. }));
        assert_eq!(result.rows_deleted, deleted.iter().sum::<u64>());
        deleter
    };
    assert_eq!(latest.version(), 4);
    let expected = expected_after(predicate).await;
    assert_eq!(scan_ids(&latest).await, expected);
    let counts: Vec<(u64, u64)> = [5, 6, 7].into_iter().zip(deleted).collect();
    assert_eq!(deletion_counts(&latest), counts);
    assert_eq!(
        latest.count_rows(None).await.unwrap(),
        expected.len() as u64
    );
    // A fresh session reads the same from storage.
    let reopened = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(scan_ids(&reopened).await, expected);
}

#[tokio::test]
async fn delete_of_every_compacted_row_after_the_compaction_removes_its_output() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    base.commit(compaction(&base, &[1, 2, 3], 15).await)
        .await
        .unwrap();
    deleter.delete("id < 30 OR id = 31").await.unwrap();
    let Operation::Delete {
        updated_fragments,
        removed_fragment_ids,
        ..
    } = operation(&deleter)
    else {
        panic!("a Delete was committed");
    };
    assert_eq!(removed_fragment_ids, vec![5, 6]);
    assert_eq!(
        updated_fragments.iter().map(|f| f.id).collect::<Vec<_>>(),
        vec![7]
    );
    assert_eq!(fragment_ids(&deleter), vec![7]);
    assert_eq!(
        scan_ids(&deleter).await,
        expected_after("id < 30 OR id = 31").await
    );
}

#[tokio::test]
async fn delete_whose_rows_the_compaction_already_dropped_changes_nothing() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    let mut other = base.clone();
    other.delete("id = 3").await.unwrap();
    // Compacted after the other delete: row 3 is not carried over.
    other
        .commit(compaction(&other, &[1, 2], 20).await)
        .await
        .unwrap();
    let result = deleter.delete("id = 3").await.unwrap();
    assert_eq!(result.rows_deleted, 1);
    assert_eq!(deleter.version(), 5);
    assert_eq!(
        operation(&deleter),
        Operation::Delete {
            updated_fragments: vec![],
            removed_fragment_ids: vec![],
            predicate: "id = 3".to_string(),
        }
    );
    assert_eq!(scan_ids(&deleter).await, expected_after("id = 3").await);
    assert_eq!(deletion_counts(&deleter), vec![(5, 0), (6, 0), (7, 0)]);
}

#[tokio::test]
async fn delete_is_chained_through_two_successive_compactions() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    // v3: 1, 2 -> 5 (3, 4 relabelled 6, 7). v4: another delete.
    // v5: 5, 6 -> 8 (without row 7), 7 relabelled 9.
    let first = base
        .commit(compaction(&base, &[1, 2], 20).await)
        .await
        .unwrap();
    let mut other = first.clone();
    other.delete("id = 7 OR id = 31").await.unwrap();
    let second = other
        .commit(compaction(&other, &[5, 6], 30).await)
        .await
        .unwrap();
    assert_eq!(fragment_ids(&second), vec![8, 9]);
    let result = deleter.delete("id % 3 = 0 OR id = 35").await.unwrap();
    assert_eq!(result.rows_deleted, 15);
    assert_eq!(deleter.version(), 6);
    let expected = expected_after("id % 3 = 0 OR id = 35 OR id = 7 OR id = 31").await;
    assert_eq!(scan_ids(&deleter).await, expected);
    // Fragment 8 (ids 0..30 but 7): the 10 multiples of 3 below 30.
    // Fragment 9: 30, 33, 35, 36, 39 and the other delete's 31.
    assert_eq!(deletion_counts(&deleter), vec![(8, 10), (9, 6)]);
}

#[tokio::test]
async fn delete_racing_a_compaction_elsewhere_is_applied_as_written() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    base.commit(compaction(&base, &[1, 2], 20).await)
        .await
        .unwrap();
    deleter.delete("id = 25 OR id = 36").await.unwrap();
    let Operation::Delete {
        updated_fragments, ..
    } = operation(&deleter)
    else {
        panic!("a Delete was committed");
    };
    let ids: Vec<u64> = updated_fragments.iter().map(|f| f.id).collect();
    // Relabelled by the compaction; the deletes followed them.
    assert_eq!(ids, vec![6, 7]);
    assert_eq!(
        scan_ids(&deleter).await,
        expected_after("id = 25 OR id = 36").await
    );
    assert_eq!(deletion_counts(&deleter), vec![(5, 0), (6, 1), (7, 1)]);
}

#[tokio::test]
async fn delete_after_a_rewrite_without_a_row_capture_is_a_retryable_conflict() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 30, 10).await;
    let mut deleter = base.clone();
    let Operation::Rewrite { mut groups, .. } = compaction(&base, &[1, 2], 20).await else {
        unreachable!("compaction builds a Rewrite");
    };
    groups[0].surviving_old_addresses = None;
    base.commit(Operation::Rewrite {
        groups,
        new_indices: vec![],
        removed_index_uuids: vec![],
    })
    .await
    .unwrap();
    let err = deleter.delete("id = 3").await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    assert!(err.to_string().contains("no row capture"), "{err}");
    let mut retry = deleter.checkout_latest().await.unwrap();
    retry.delete("id = 3").await.unwrap();
    assert_eq!(retry.count_rows(None).await.unwrap(), 29);
}

fn partition_of(sources: Vec<u64>, destinations: Vec<Fragment>) -> Operation {
    Operation::Partition {
        source_fragment_ids: sources,
        destinations,
        map_id: None,
        map_size_bytes: 0,
        map_checksum: None,
        relabelled: Vec::new(),
    }
}

async fn destinations(dataset: &Dataset, rows: usize) -> Vec<Fragment> {
    dataset
        .write_fragments(
            futures::stream::iter(vec![Ok(crate::common::rows(1_000, rows))]),
            &opts(1_000),
        )
        .await
        .unwrap()
}

#[rstest]
#[case::partition_of_its_fragment(&[2], true, 0)]
#[case::partition_after_it(&[4], false, 2)]
// Fragment 2 follows the destination 5 relabelled 6: the delete follows it.
#[case::partition_before_it(&[1], false, 6)]
#[tokio::test]
async fn delete_racing_a_partition(
    #[case] sources: &[u64],
    #[case] conflicts: bool,
    #[case] followed_id: u64,
) {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    base.commit(partition_of(
        sources.to_vec(),
        destinations(&base, 10).await,
    ))
    .await
    .unwrap();
    match deleter.delete("id = 15").await {
        Ok(_) => {
            assert!(!conflicts);
            assert_eq!(deletion_counts(&deleter)[1], (followed_id, 1));
            // Rows in list order: the partition's rows in place of its source.
            let expected: Vec<i64> = (1..=4u64)
                .flat_map(|fragment| {
                    let first = if sources.contains(&fragment) {
                        1_000
                    } else {
                        (fragment as i64 - 1) * 10
                    };
                    first..first + 10
                })
                .filter(|id| *id != 15)
                .collect();
            assert_eq!(scan_ids(&deleter).await, expected);
        }
        Err(err) => {
            assert!(conflicts, "{err}");
            assert!(err.is_retryable_conflict(), "{err}");
        }
    }
}

#[tokio::test]
async fn delete_whose_rows_a_partition_replaced_after_a_compaction_conflicts() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let mut deleter = base.clone();
    // 1, 2 -> 5, then 5 is partitioned: the delete's fragment 1 is followed to 5.
    let compacted = base
        .commit(compaction(&base, &[1, 2], 20).await)
        .await
        .unwrap();
    compacted
        .commit(partition_of(vec![5], destinations(&compacted, 20).await))
        .await
        .unwrap();
    let err = deleter.delete("id = 3").await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    assert!(err.to_string().contains("Partition"), "{err}");
}
