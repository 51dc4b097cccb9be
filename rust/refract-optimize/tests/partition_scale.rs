//! A large stable partition whose row map validates and translates every
//! source row onto a destination row with the same content.

mod support;

use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use support::fri::*;
use support::partition::*;

async fn partition_rows(rows: usize) {
    let mut before = dataset_with_rows("scale", rows, 250_000).await;
    let ids = fragment_ids(&before);
    add_user_index(&mut before, "by_id", &ids).await;
    before
        .delete("id < 1000 or (id >= 70000 and id < 70100)")
        .await
        .unwrap();
    let mut after = before.clone();
    let by = PartitionBy::Hash {
        column: "cat".into(),
        destinations: 16,
    };
    let metrics = partition_fragments(&mut after, PartitionOptions::new(by))
        .await
        .unwrap();
    // cat takes 5 values plus null (which hashes like label 0).
    assert!(metrics.fragments_added <= 6);
    assert!(metrics.empty_destinations_dropped >= 10);
    assert_eq!(metrics.rows_written, rows as u64 - 1_100);
    check_partition(&before, &after, &ids, &metrics, None, true).await;
}

/// Several row-map blocks (65,536 rows each) and a short last one.
#[tokio::test]
async fn partition_of_200k_rows_validates_its_row_map() {
    partition_rows(200_000).await;
}

/// The 2M-row run of issue #6 (12 s in a debug build here); part of the
/// default suite.
#[tokio::test]
async fn partition_of_2m_rows_validates_its_row_map() {
    partition_rows(2_000_000).await;
}
