//! `remap_indices`: mixed chains, partial coverage, coverage withdrawal,
//! legacy upgrade, plugin fallback, concurrency, and direct inspection of the
//! remapped segments' stored addresses.

mod support;
use support::remap as common;

use std::sync::Arc;

use common::*;
use refract_core::{Error, RowAddress};
use refract_index::IndexRegistry;
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_optimize::fri::fri_uuid;
use refract_optimize::remap::{
    remap_indices, RemapOptions, SegmentStatus, SkipReason, UnchangedReason,
};
use refract_optimize::runtime::{MaintenanceRuntime, MaintenanceRuntimeOptions};
use refract_optimize::trim::trim_fri;
use refract_table::transaction::Operation;
use refract_table::{Dataset, IndexMetadata};
use roaring::{RoaringBitmap, RoaringTreemap};
use rstest::rstest;
use support::fri::{self, dataset_with_rows, rows};
use support::write_options;

fn builtins() -> Arc<IndexRegistry> {
    Arc::new(IndexRegistry::with_builtins())
}

fn live_bitmap(dataset: &Dataset) -> RoaringBitmap {
    dataset.fragments().iter().map(|f| f.id as u32).collect()
}

fn fragments_of(addresses: &RoaringTreemap) -> Vec<u32> {
    let mut out: Vec<u32> = addresses
        .iter()
        .map(|a| RowAddress(a).fragment_id())
        .collect();
    out.dedup();
    out
}

/// Ordered compaction then stable partition of part of the result.
async fn mixed_chain(name: &str) -> Dataset {
    let mut dataset = indexed_table(name, 600, 100).await;
    dataset.delete("id >= 100 AND id < 130").await.unwrap();
    dataset = deferred_rewrite(&dataset, &[vec![1, 2], vec![3, 4]], 1).await;
    // 5 and 6 follow the rewritten runs, relabelled 9 and 10.
    assert_eq!(fri::fragment_ids(&dataset), vec![7, 8, 9, 10]);
    partition(&mut dataset, Some(vec![8, 9, 10]), 3).await;
    assert_eq!(fri::fragment_ids(&dataset), vec![7, 11, 12, 13]);
    dataset
}

#[tokio::test]
async fn mixed_chain_remaps_every_type_onto_live_addresses() {
    let mut dataset = mixed_chain("mixed").await;
    assert_queries_match(&dataset, builtins()).await;
    let read_version = dataset.version();
    let runtime = Arc::new(MaintenanceRuntime::new(MaintenanceRuntimeOptions::default()).unwrap());
    let report = runtime
        .scope(remap_indices(&mut dataset, RemapOptions::default()))
        .await
        .unwrap();
    assert_eq!(report.read_version, read_version);
    assert_eq!(report.committed_version, Some(read_version + 1));
    assert_eq!(report.remapped(), 4, "{report:#?}");
    // Prepared (in-memory) translators: every segment on a rewrite thread.
    assert_eq!(
        runtime.rewrites_started(),
        4,
        "rewrites on the scope's threads"
    );
    let live = live_addresses(&dataset, None).await;
    assert_eq!(live.len(), 570);
    for (name, _, index_type) in INDICES {
        let segs = segments(&dataset, name);
        assert_eq!(segs.len(), 1, "{name}");
        let seg = &segs[0];
        assert_eq!(seg.fragment_bitmap.as_ref(), Some(&live_bitmap(&dataset)));
        assert_eq!(seg.dataset_version, read_version);
        let stored = stored_addresses(&dataset, &builtins(), seg).await;
        if index_type == "bitmap" {
            assert!(stored.is_subset(&live), "{name}");
        } else {
            assert_eq!(stored, live, "{name} holds exactly the live rows");
        }
        let line = report.segments.iter().find(|s| s.name == name).unwrap();
        assert!(
            matches!(
                &line.status,
                SegmentStatus::Remapped { new_uuid, coverage, transitions: 4, provenance_recovered: false }
                    if *new_uuid == seg.uuid && *coverage == vec![7, 11, 12, 13]
            ),
            "{line:?}"
        );
    }
    assert_queries_match(&dataset, builtins()).await;

    // Nothing translates any more: the whole history drains.
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert!(trim.fri_removed, "{trim:?}");
    assert_eq!(trim.row_maps_released.len(), 1);
    assert!(fri_uuid(dataset.manifest()).is_none());
    assert_ne!(
        dataset.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
    assert_queries_match(&dataset, builtins()).await;

    let version = dataset.version();
    let again = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert!(all_caught_up(&again) && again.committed_version.is_none());
    assert!(trim_fri(&mut dataset).await.unwrap().is_noop());
    assert_eq!(dataset.version(), version);
}

#[tokio::test]
async fn partial_coverage_is_left_translating() {
    let mut dataset = dataset_with_rows("partial", 400, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    dataset
        .append(vec![rows(400, 200)], &write_options(100))
        .await
        .unwrap();
    // Every destination mixes indexed (1..=4) and unindexed (5, 6) rows.
    partition(&mut dataset, None, 2).await;
    let version = dataset.version();
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.committed_version, None);
    assert_eq!(
        report.unchanged(UnchangedReason::PartialCoverage),
        1,
        "{report:#?}"
    );
    assert_eq!(dataset.version(), version);
    assert_queries_match(&dataset, builtins()).await;
    // The history stays: the segment still translates through it.
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert!(trim.is_noop(), "{trim:?}");
    assert_eq!(trim.transitions_kept, 1);
    assert!(fri_uuid(dataset.manifest()).is_some());
}

#[tokio::test]
async fn withdrawn_rows_are_dropped_from_the_new_files() {
    let mut dataset = indexed_table("withdrawn", 600, 100).await;
    dataset = deferred_rewrite(&dataset, &[vec![1, 2], vec![3, 4]], 1).await;
    // Fragment 8 loses every row (withdrawn), fragment 7 one row; 5 and 6
    // were relabelled 9 and 10.
    dataset.delete("id >= 200 AND id < 400").await.unwrap();
    dataset.delete("id = 5").await.unwrap();
    assert_eq!(fri::fragment_ids(&dataset), vec![7, 9, 10]);
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.remapped(), 4, "{report:#?}");
    let live = live_addresses(&dataset, None).await;
    for (name, _, _) in [INDICES[0], INDICES[2], INDICES[3]] {
        let seg = &segments(&dataset, name)[0];
        assert_eq!(
            seg.fragment_bitmap,
            Some([7u32, 9, 10].into_iter().collect())
        );
        let stored = stored_addresses(&dataset, &builtins(), seg).await;
        assert_eq!(fragments_of(&stored), vec![7, 9, 10], "{name}");
        // The row deleted after the rewrite stays indexed (queries filter it).
        assert_eq!(stored.len(), live.len() + 1, "{name}");
        assert!(live.is_subset(&stored));
    }
    assert_queries_match(&dataset, builtins()).await;
    assert!(trim_fri(&mut dataset).await.unwrap().fri_removed);
}

#[tokio::test]
async fn legacy_projection_recovers_its_source_provenance() {
    let mut dataset = dataset_with_rows("legacy-up", 600, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    dataset = legacy_rewrite(&dataset, &[vec![1, 2]], 1).await;
    // A legacy writer persisted the load-time projected bitmap: it names the
    // destinations (7, and 8..=11 relabelled from 3..=6) while the files
    // still hold the old addresses.
    let original = segments(&dataset, "by_id").remove(0);
    let projected = IndexMetadata {
        fragment_bitmap: Some([7u32, 8, 9, 10, 11].into_iter().collect()),
        ..original.clone()
    };
    dataset = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![projected],
            removed_index_uuids: vec![original.uuid],
        })
        .await
        .unwrap();
    // The first tagged commit lifts the legacy history to version 1.
    let tail = fri::ids_at(&dataset, 3..5);
    partition(&mut dataset, Some(tail), 2).await;
    assert_ne!(
        dataset.manifest().writer_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert!(
        matches!(
            report.segments[0].status,
            SegmentStatus::Remapped {
                provenance_recovered: true,
                ..
            }
        ),
        "{report:#?}"
    );
    let seg = &segments(&dataset, "by_id")[0];
    let stored = stored_addresses(&dataset, &builtins(), seg).await;
    assert_eq!(stored.len(), 600, "no row is lost");
    assert_eq!(stored, live_addresses(&dataset, None).await);
    assert_queries_match(&dataset, builtins()).await;
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert!(trim.fri_removed, "{trim:?}");
    assert_queries_match(&dataset, builtins()).await;
}

#[tokio::test]
async fn legacy_history_is_remapped_through_the_legacy_chain() {
    let mut dataset = indexed_table("legacy-v0", 600, 100).await;
    dataset = legacy_rewrite(&dataset, &[vec![1, 2, 3], vec![5, 6]], 2).await;
    assert_eq!(
        dataset.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
    assert_queries_match(&dataset, builtins()).await;
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.remapped(), 4, "{report:#?}");
    let seg = &segments(&dataset, "by_id")[0];
    assert_eq!(
        stored_addresses(&dataset, &builtins(), seg).await,
        live_addresses(&dataset, None).await
    );
    assert_queries_match(&dataset, builtins()).await;
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert!(
        trim.fri_removed && trim.row_maps_released.is_empty(),
        "{trim:?}"
    );
    assert_eq!(
        dataset.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
}

#[rstest]
#[case::over_budget(1, true)]
#[case::fits(refract_core::DEFAULT_MATERIALIZE_BUDGET_BYTES, false)]
#[tokio::test]
async fn plugin_fallback_is_budgeted(#[case] budget_bytes: u64, #[case] declined: bool) {
    let mut dataset = dataset_with_rows("plugin", 400, 100).await;
    dataset = add_legacy_index(&dataset, "legacy").await;
    dataset = deferred_rewrite(&dataset, &[vec![1, 2, 3]], 1).await;
    // 5, then 4 relabelled 6.
    partition(&mut dataset, Some(vec![5, 6]), 2).await;
    let options = RemapOptions {
        budget_bytes,
        registry: legacy_registry(),
        ..RemapOptions::default()
    };
    let report = remap_indices(&mut dataset, options).await.unwrap();
    let status = &report.segments[0].status;
    if declined {
        assert!(
            matches!(status, SegmentStatus::Skipped { reason: SkipReason::OverBudget, message } if message.contains("budget")),
            "{status:?}"
        );
        assert_eq!(report.committed_version, None);
        let trim = trim_fri(&mut dataset).await.unwrap();
        assert_eq!(
            trim.transitions_kept, 3,
            "the skipped segment keeps its history"
        );
    } else {
        assert!(
            matches!(status, SegmentStatus::Remapped { .. }),
            "{status:?}"
        );
        let seg = &segments(&dataset, "legacy")[0];
        assert_eq!(
            stored_addresses(&dataset, &legacy_registry(), seg).await,
            live_addresses(&dataset, None).await
        );
        assert!(trim_fri(&mut dataset).await.unwrap().fri_removed);
    }
    assert_queries_match(&dataset, legacy_registry()).await;
}

#[tokio::test]
async fn a_concurrent_rewrite_of_the_new_coverage_is_a_retryable_conflict() {
    let mut dataset = dataset_with_rows("race", 400, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    dataset = deferred_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let mut stale = dataset.clone();
    partition(&mut dataset, Some(vec![5]), 2).await;
    let err = remap_indices(&mut stale, RemapOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    let latest = dataset.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), dataset.version(), "nothing was committed");
    // Derived again on the latest version it goes through.
    let mut latest = latest;
    let report = remap_indices(&mut latest, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.remapped(), 1);
    assert_queries_match(&latest, builtins()).await;
}

#[tokio::test]
async fn names_select_indices_and_unknown_names_are_not_found() {
    let mut dataset = mixed_chain("names").await;
    let only = RemapOptions {
        names: Some(vec!["by_cat".to_string()]),
        ..RemapOptions::default()
    };
    let report = remap_indices(&mut dataset, only).await.unwrap();
    assert_eq!(report.segments.len(), 1);
    assert_eq!(report.remapped(), 1);
    // The others still translate, so the history stays.
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert_eq!(trim.transitions_kept, 4, "{trim:?}");
    assert_queries_match(&dataset, builtins()).await;
    let missing = RemapOptions {
        names: Some(vec!["nope".to_string()]),
        ..RemapOptions::default()
    };
    let err = remap_indices(&mut dataset, missing).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn multi_block_row_maps_are_translated_in_bounded_batches() {
    // 140,000 rows: the row map spans three 65,536-row blocks and the btree
    // remap needs three translation batches.
    let mut dataset = dataset_with_rows("blocks", 140_000, 70_000).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    partition(&mut dataset, None, 3).await;
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.remapped(), 1, "{report:#?}");
    let seg = &segments(&dataset, "by_id")[0];
    let stored = stored_addresses(&dataset, &builtins(), seg).await;
    assert_eq!(stored.len(), 140_000);
    assert_eq!(stored, live_addresses(&dataset, None).await);
    for filter in ["id >= 65530 AND id < 65545", "id = 139999", "id < 3"] {
        let run = |use_index: bool| {
            refract_index::Query::new(&dataset)
                .filter(filter)
                .unwrap()
                .project(&["id"])
                .index_use(if use_index {
                    refract_index::IndexUse::Always
                } else {
                    refract_index::IndexUse::Never
                })
                .execute()
        };
        let got = run(true).await.unwrap();
        let want = run(false).await.unwrap();
        assert_eq!(got.batch.num_rows(), want.batch.num_rows(), "{filter}");
        assert!(got.explain.index.is_some());
    }
}

#[tokio::test]
async fn a_partition_before_the_tail_relabels_and_remap_drains_the_history() {
    let mut dataset = indexed_table("partition_relabel", 600, 100).await;
    dataset.delete("id = 450 or id = 451").await.unwrap();
    let scan_before = support::scan_ids(&dataset).await;
    partition(&mut dataset, Some(vec![2, 3]), 2).await;
    // 4, 5, 6 follow the destinations 7, 8 under fresh ids, 5 keeping its deletions.
    assert_eq!(fri::fragment_ids(&dataset), vec![1, 7, 8, 9, 10, 11]);
    let relabelled = dataset.fragments()[4].clone();
    assert_eq!(relabelled.num_deleted_rows(), 2);
    let Some(txn) = &dataset.manifest().transaction else {
        panic!("the partition records a transaction");
    };
    let Operation::Partition {
        relabelled: groups, ..
    } = &txn.operation
    else {
        panic!("expected a Partition");
    };
    assert_eq!(groups.len(), 1, "one run: every index covers 4, 5, 6");
    assert_eq!(groups[0].old_fragment_ids, vec![4, 5, 6]);
    let ledger = fri::ledger(&dataset).await.unwrap();
    let kinds: Vec<&str> = ledger
        .transitions()
        .iter()
        .map(|t| t.mapping().kind())
        .collect();
    assert_eq!(kinds, ["stable_partition", "ordered_compaction"]);
    // Rows outside the run keep their places; the queries translate through both.
    let mut scan_after = support::scan_ids(&dataset).await;
    assert_eq!(scan_after[..100], scan_before[..100]);
    assert_eq!(scan_after[300..], scan_before[300..]);
    scan_after.sort_unstable();
    let mut sorted_before = scan_before.clone();
    sorted_before.sort_unstable();
    assert_eq!(scan_after, sorted_before);
    assert_queries_match(&dataset, builtins()).await;

    // Execute until no-op: one remap commit, then nothing; the history drains.
    let report = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(report.remapped(), 4, "{report:#?}");
    assert_queries_match(&dataset, builtins()).await;
    let again = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(again.committed_version, None);
    assert!(all_caught_up(&again), "{again:#?}");
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert_eq!(trim.transitions_kept, 0, "{trim:?}");
    assert!(trim_fri(&mut dataset).await.unwrap().is_noop());
    assert_queries_match(&dataset, builtins()).await;
}
