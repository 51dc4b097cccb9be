//! `trim_fri`: retention, byte-exact survivors, row-map deletion, superseded
//! pruning, no-op runs and lost races.

mod support;
use support::remap as common;

use std::sync::Arc;

use common::*;
use refract_core::Error;
use refract_index::{optimize_indices, IndexRegistry};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_ledger::Mapping;
use refract_optimize::fri::fri_uuid;
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_reader::rowmap::row_map_path;
use refract_table::Dataset;
use support::fri::{self, dataset_with_rows, ledger, rows};
use support::write_options;

fn builtins() -> Arc<IndexRegistry> {
    Arc::new(IndexRegistry::with_builtins())
}

async fn exists(dataset: &Dataset, map_id: &uuid::Uuid) -> bool {
    match dataset.store().head(&row_map_path(map_id)).await {
        Ok(_) => true,
        Err(Error::NotFound { .. }) => false,
        Err(err) => panic!("{err}"),
    }
}

fn map_id(mapping: &Mapping) -> Option<uuid::Uuid> {
    match mapping {
        Mapping::StablePartition { map_id, .. } => Some(*map_id),
        Mapping::OrderedCompaction { .. } => None,
    }
}

#[tokio::test]
async fn unneeded_transitions_go_and_survivors_stay_byte_exact() {
    let mut dataset = dataset_with_rows("retain", 400, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    // Fragments 1..=4 indexed. A compaction of the tail the index translates
    // through (3, 4 into 5; nothing after it to relabel), a partition of the
    // tail the index needs (2, 5 into 6, 7), then 8 and 9 appended
    // unindexed and a partition of them (recorded: the table has a history).
    dataset = deferred_rewrite(&dataset, &[vec![3, 4]], 1).await;
    partition(&mut dataset, Some(vec![2, 5]), 2).await;
    dataset
        .append(vec![rows(400, 200)], &write_options(100))
        .await
        .unwrap();
    assert_eq!(fri::fragment_ids(&dataset), vec![1, 6, 7, 8, 9]);
    partition(&mut dataset, Some(vec![8, 9]), 2).await;
    let before = ledger(&dataset).await.unwrap();
    assert_eq!(before.transitions().len(), 3);
    let unneeded = before.transitions()[2].clone();
    let unneeded_map = map_id(unneeded.mapping()).unwrap();
    let needed_map = map_id(before.transitions()[1].mapping()).unwrap();
    assert!(exists(&dataset, &unneeded_map).await);

    let version = dataset.version();
    let report = trim_fri(&mut dataset).await.unwrap();
    assert_eq!(report.prune_version, None);
    assert_eq!(report.committed_version, Some(version + 1));
    assert_eq!((report.transitions_before, report.transitions_kept), (3, 2));
    assert_eq!(
        report.removed_transitions,
        vec![refract_ledger::fingerprint_hex(unneeded.fingerprint())]
    );
    assert!(!report.fri_removed);
    let after = ledger(&dataset).await.unwrap();
    let kept: Vec<_> = after.transitions().to_vec();
    assert_eq!(
        kept,
        vec![
            before.transitions()[0].clone(),
            before.transitions()[1].clone()
        ]
    );
    for (a, b) in kept
        .iter()
        .zip([&before.transitions()[0], &before.transitions()[1]])
    {
        assert_eq!(a.fingerprint(), b.fingerprint(), "same canonical bytes");
    }
    // Released, not deleted: older versions still translate through it.
    assert_eq!(
        report.row_maps_released,
        vec![row_map_path(&unneeded_map).to_string()]
    );
    assert!(exists(&dataset, &unneeded_map).await);
    assert!(exists(&dataset, &needed_map).await);
    assert_queries_match(&dataset, builtins()).await;
    // Retention deletes it once no retained version references it.
    let only_latest = refract_table::RetentionPolicy {
        older_than: None,
        keep_last: Some(1),
        ..Default::default()
    };
    refract_table::cleanup_old_versions(&dataset, &only_latest)
        .await
        .unwrap();
    assert!(!exists(&dataset, &unneeded_map).await);
    assert!(exists(&dataset, &needed_map).await);
    assert_queries_match(&dataset, builtins()).await;

    // Nothing more to trim: no commit.
    let version = dataset.version();
    assert!(trim_fri(&mut dataset).await.unwrap().is_noop());
    assert_eq!(dataset.latest_version().await.unwrap(), version);
}

#[tokio::test]
async fn superseded_segments_are_pruned_in_their_own_commit() {
    let mut dataset = dataset_with_rows("prune", 400, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    let old = segments(&dataset, "by_id")[0].uuid;
    dataset = deferred_rewrite(&dataset, &[vec![1, 2, 3, 4]], 2).await;
    // Re-indexing the destinations supersedes the old segment.
    dataset = optimize_indices(&dataset, "by_id").await.unwrap();
    assert_eq!(segments(&dataset, "by_id").len(), 2);
    let version = dataset.version();
    let report = trim_fri(&mut dataset).await.unwrap();
    assert_eq!(report.pruned_segments, vec![old]);
    assert_eq!(report.prune_version, Some(version + 1));
    assert_eq!(report.committed_version, Some(version + 2));
    assert!(report.fri_removed);
    let pruned = dataset.checkout_version(version + 1).await.unwrap();
    assert!(fri_uuid(pruned.manifest()).is_some(), "removal-only commit");
    assert_eq!(segments(&pruned, "by_id").len(), 1);
    assert!(fri_uuid(dataset.manifest()).is_none());
    assert_ne!(
        dataset.manifest().writer_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
    assert_queries_match(&dataset, builtins()).await;
}

#[tokio::test]
async fn a_lost_race_is_derived_again_and_keeps_the_new_transition() {
    let mut dataset = dataset_with_rows("trim-race", 600, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    dataset = deferred_rewrite(&dataset, &[vec![1, 2]], 1).await;
    remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    let mut stale = dataset.clone();
    // A deferred compaction the (remapped) index translates through lands first.
    // (Fragments 3 and 4, relabelled by the first rewrite.)
    let latest = deferred_rewrite(&dataset, &[fri::ids_at(&dataset, 1..3)], 1).await;
    // Its group and the run it relabelled.
    let fresh = ledger(&latest).await.unwrap().transitions()[2..].to_vec();
    let report = trim_fri(&mut stale).await.unwrap();
    assert!(report.committed_version.is_some(), "{report:?}");
    assert!(!report.fri_removed);
    let after = ledger(&stale).await.unwrap();
    assert_eq!(after.transitions(), fresh.as_slice());
    assert_queries_match(&stale, builtins()).await;
}

#[tokio::test]
async fn tables_without_history_only_prune() {
    let mut dataset = dataset_with_rows("nohist", 200, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    let version = dataset.version();
    assert!(trim_fri(&mut dataset).await.unwrap().is_noop());
    assert_eq!(dataset.version(), version);
    assert_eq!(fri::fragment_ids(&dataset), vec![1, 2]);
}
