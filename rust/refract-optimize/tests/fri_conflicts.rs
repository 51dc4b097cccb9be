//! Concurrency of FRI writers: overlapping deferred rewrites, trims racing
//! rewrites, and rewrites straddling a concurrently created index.

mod support;

use refract_optimize::fri::{deferred_remap_hook, fri_uuid, load_ledger, new_fri_entry};
use refract_table::transaction::Operation;
use refract_table::Dataset;
use support::fri::*;
use support::*;

/// Fragments 1..=6 of 100 rows, an index covering all of them.
async fn indexed(name: &str) -> Dataset {
    let mut dataset = dataset_with_rows(name, 600, 100).await;
    add_user_index(&mut dataset, "by_id", &[1, 2, 3, 4, 5, 6]).await;
    dataset
}

#[tokio::test]
async fn overlapping_deferred_rewrites_conflict_for_the_second() {
    let dataset = indexed("overlap").await;
    let hook = deferred_remap_hook();
    let first = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let second = plan_rewrite(&dataset, &[vec![2, 3]], 1).await;
    let committed = commit_rewrite(&dataset, first, Some(hook.as_ref()))
        .await
        .unwrap();
    let err = commit_rewrite(&dataset, second, Some(hook.as_ref()))
        .await
        .unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    // The first's group and the run 3..=6 it relabelled; nothing of the second.
    assert_eq!(ledger_of(&committed).await.unwrap().transitions().len(), 2);
    assert_eq!(dataset.latest_version().await.unwrap(), committed.version());
}

#[tokio::test]
async fn disjoint_deferred_rewrites_both_land_in_the_ledger() {
    let dataset = indexed("disjoint").await;
    let hook = deferred_remap_hook();
    // The later run first: committing it relabels only fragment 6, which
    // the second does not name.
    let first = plan_rewrite(&dataset, &[vec![4, 5]], 1).await;
    let second = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    commit_rewrite(&dataset, first, Some(hook.as_ref()))
        .await
        .unwrap();
    // Read at the old version: rebased, and the hook appends to the latest ledger.
    let latest = commit_rewrite(&dataset, second, Some(hook.as_ref()))
        .await
        .unwrap();
    let ledger = ledger_of(&latest).await.unwrap();
    let sources: Vec<Vec<u64>> = ledger
        .transitions()
        .iter()
        .map(|t| t.sources().iter().map(|d| d.id).collect())
        .collect();
    // v: 4, 5 -> 7 and 6 relabelled 8; then 1, 2 -> 9 and 3, 7, 8 relabelled
    // in two runs (the index covers 3, not the new 7 and 8).
    assert_eq!(
        sources,
        vec![vec![4, 5], vec![6], vec![1, 2], vec![3], vec![7, 8]]
    );
    assert_eq!(scan_ids(&latest).await, (0..600).collect::<Vec<_>>());
}

#[tokio::test]
async fn rewrite_after_a_concurrent_trim_is_rebased_and_keeps_its_transition() {
    let dataset = indexed("trim").await;
    let hook = deferred_remap_hook();
    let first = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let with_first = commit_rewrite(&dataset, first, Some(hook.as_ref()))
        .await
        .unwrap();
    // Planned at `with_first` (fragments 4 and 5, relabelled), committed
    // after a trim lands.
    let renamed = ids_at(&with_first, 2..4);
    let second = plan_rewrite(&with_first, std::slice::from_ref(&renamed), 1).await;
    let (entry, ledger) = load_ledger(&with_first).await.unwrap().unwrap();
    let trimmed_away = *ledger.transitions()[0].fingerprint();
    let mut trimmed = ledger.clone();
    trimmed.remove_transitions([&trimmed_away]).unwrap();
    let trim = new_fri_entry(with_first.store(), &trimmed, with_first.version())
        .await
        .unwrap();
    let after_trim = with_first
        .commit(Operation::CreateIndex {
            new_indices: vec![trim],
            removed_index_uuids: vec![entry.uuid],
        })
        .await
        .unwrap();
    let latest = commit_rewrite(&with_first, second, Some(hook.as_ref()))
        .await
        .unwrap();
    assert_eq!(latest.version(), after_trim.version() + 1);
    let ledger = ledger_of(&latest).await.unwrap();
    let sources: Vec<Vec<u64>> = ledger
        .transitions()
        .iter()
        .map(|t| t.sources().iter().map(|d| d.id).collect())
        .collect();
    // The trim is kept (the first group is gone; its relabel run stays) and
    // the second commit adds its group and the run it relabelled.
    assert!(ledger
        .transitions()
        .iter()
        .all(|t| *t.fingerprint() != trimmed_away));
    assert_eq!(
        sources,
        vec![vec![3, 4, 5, 6], renamed, ids_at(&with_first, 4..5)]
    );
    assert_ne!(fri_uuid(latest.manifest()), fri_uuid(after_trim.manifest()));
}

#[tokio::test]
async fn trim_after_a_concurrent_rewrite_is_a_retryable_conflict() {
    let dataset = indexed("trim-late").await;
    let hook = deferred_remap_hook();
    let first = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let with_first = commit_rewrite(&dataset, first, Some(hook.as_ref()))
        .await
        .unwrap();
    let (entry, ledger) = load_ledger(&with_first).await.unwrap().unwrap();
    let second = plan_rewrite(&with_first, &[ids_at(&with_first, 2..4)], 1).await;
    commit_rewrite(&with_first, second, Some(hook.as_ref()))
        .await
        .unwrap();
    // The trim was derived from `with_first`'s entry, which no longer exists.
    let mut trimmed = ledger.clone();
    trimmed
        .remove_transitions([ledger.transitions()[0].fingerprint()])
        .unwrap();
    let trim = new_fri_entry(with_first.store(), &trimmed, with_first.version())
        .await
        .unwrap();
    let err = with_first
        .commit(Operation::CreateIndex {
            new_indices: vec![trim],
            removed_index_uuids: vec![entry.uuid],
        })
        .await
        .unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
}

#[tokio::test]
async fn rewrite_straddling_a_concurrently_created_index_conflicts() {
    let mut dataset = dataset_with_rows("straddle", 300, 100).await;
    add_user_index(&mut dataset, "by_id", &[1]).await;
    // Planned before fragment 2 was indexed.
    let stale = dataset.clone();
    let groups = plan_rewrite(&stale, &[vec![2, 3]], 1).await;
    let mut indexer = dataset.clone();
    add_user_index(&mut indexer, "by_id", &[2]).await;
    let hook = deferred_remap_hook();
    let err = commit_rewrite(&stale, groups, Some(hook.as_ref()))
        .await
        .unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    assert!(fri_uuid(indexer.checkout_latest().await.unwrap().manifest()).is_none());
}
