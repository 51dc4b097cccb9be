//! Execute-until-noop maintenance on a table with all four index types:
//! rounds of append, delete, deferred budgeted compaction, stable partition,
//! `remap_indices` and `trim_fri`, then `maintain` until a round commits
//! nothing. At the end the FRI is gone, every segment is caught up, every
//! query equals a brute-force scan, and one more round commits nothing.

mod support;
use support::remap as common;

use std::sync::Arc;

use common::*;
use refract_index::{optimize_indices, IndexRegistry};
use refract_optimize::compaction::CompactionOptions;
use refract_optimize::fri::fri_uuid;
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use rstest::rstest;
use support::fri::{fragment_ids, rows};
use support::{scan_ids as scan_ids_of, write_options};

fn builtins() -> Arc<IndexRegistry> {
    Arc::new(IndexRegistry::with_builtins())
}

#[rstest]
#[case::two_sources(2)]
#[case::three_sources(3)]
#[tokio::test]
async fn maintenance_converges_and_drains_the_history(#[case] max_source_fragments: u64) {
    let mut dataset = indexed_table("loop", 600, 100).await;
    let compaction = CompactionOptions {
        target_rows_per_fragment: 250,
        max_source_fragments: Some(max_source_fragments),
        ..CompactionOptions::default()
    };
    let mut next = 600i64;
    let mut expected: Vec<i64> = (0..600).collect();
    let (mut compactions, mut remapped, mut trimmed) = (0, 0, 0);
    for round in 0..4i64 {
        dataset
            .append(vec![rows(next, 150)], &write_options(75))
            .await
            .unwrap();
        expected.extend(next..next + 150);
        next += 150;
        // New data is indexed as it arrives (a segment per index).
        for (name, _, _) in INDICES {
            dataset = optimize_indices(&dataset, name).await.unwrap();
        }
        let (low, high) = (round * 97 + 3, round * 97 + 23);
        dataset
            .delete(&format!("id >= {low} AND id < {high}"))
            .await
            .unwrap();
        expected.retain(|id| !(low..high).contains(id));
        compactions += usize::from(deferred_compaction(&mut dataset, &compaction).await);
        let ids = fragment_ids(&dataset);
        let run = ids[ids.len().saturating_sub(3)..].to_vec();
        partition(&mut dataset, Some(run), 2).await;
        assert_queries_match(&dataset, builtins()).await;
        remapped += remap_indices(&mut dataset, RemapOptions::default())
            .await
            .unwrap()
            .remapped();
        trimmed += trim_fri(&mut dataset)
            .await
            .unwrap()
            .removed_transitions
            .len();
        assert_queries_match(&dataset, builtins()).await;
        let mut scanned = scan_ids_of(&dataset).await;
        scanned.sort_unstable();
        assert_eq!(
            scanned, expected,
            "round {round}: no row lost or resurrected"
        );
    }
    assert!(compactions > 0 && remapped > 0 && trimmed > 0);
    // Unindexed new data, then a partition mixing it with indexed rows: every
    // segment is left partially covering, so only a reindex can catch up.
    dataset
        .append(vec![rows(next, 120)], &write_options(60))
        .await
        .unwrap();
    expected.extend(next..next + 120);
    partition(&mut dataset, None, 3).await;
    let partial = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert_eq!(partial.remapped(), 0, "{partial:#?}");
    assert!(fri_uuid(dataset.manifest()).is_some());
    assert_queries_match(&dataset, builtins()).await;
    let options = MaintainOptions {
        compaction: None,
        reindex: true,
        until_noop: true,
        ..MaintainOptions::default()
    };
    let report = maintain(&mut dataset, options.clone()).await.unwrap();
    assert!(report.converged, "{report:#?}");
    assert!(report.rounds.len() >= 2);
    assert!(fri_uuid(dataset.manifest()).is_none(), "the FRI is gone");
    for (name, _, _) in INDICES {
        assert!(!segments(&dataset, name).is_empty(), "{name} still exists");
    }
    assert_queries_match(&dataset, builtins()).await;
    let mut scanned = scan_ids_of(&dataset).await;
    scanned.sort_unstable();
    assert_eq!(scanned, expected);

    // Every segment is caught up and one more round commits nothing.
    let version = dataset.version();
    let check = remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    assert!(all_caught_up(&check), "{check:#?}");
    let again = maintain(
        &mut dataset,
        MaintainOptions {
            until_noop: false,
            ..options
        },
    )
    .await
    .unwrap();
    assert!(again.converged && again.rounds.len() == 1 && again.rounds[0].is_noop());
    assert_eq!(dataset.latest_version().await.unwrap(), version);
}

#[tokio::test]
async fn maintain_rejects_zero_rounds_and_compacts_inline_without_history() {
    let mut dataset = indexed_table("inline", 400, 50).await;
    let err = maintain(
        &mut dataset,
        MaintainOptions {
            max_rounds: 0,
            ..MaintainOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, refract_core::Error::InvalidInput { .. }),
        "{err}"
    );
    let options = MaintainOptions {
        compaction: Some(CompactionOptions {
            target_rows_per_fragment: 200,
            ..CompactionOptions::default()
        }),
        until_noop: true,
        ..MaintainOptions::default()
    };
    let report = maintain(&mut dataset, options).await.unwrap();
    assert!(report.converged);
    assert_eq!(report.rounds.len(), 2, "{report:#?}");
    assert_eq!(report.rounds[0].compaction.fragments_removed, 8);
    assert!(fri_uuid(dataset.manifest()).is_none());
    assert_eq!(dataset.fragments().len(), 2);
    assert_queries_match(&dataset, builtins()).await;
}
