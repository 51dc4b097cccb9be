//! Committing compaction results that already landed: a coordinator that died
//! after its commit, or two coordinators racing with the same results, get the
//! version the results landed in and the same metrics, not an error a retry
//! can never clear. Results keep the options of their plan.

mod support;
use support::compaction as common;

use common::{batch, dataset_with_fragments};
use refract_core::Error;
use refract_optimize::compaction::{
    commit_compaction, compact_files, plan_compaction, CompactionOptions,
};
use refract_table::dataset::WriteOptions;
use support::scan_ids;

fn options(target: u64) -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: target,
        ..CompactionOptions::default()
    }
}

#[tokio::test]
async fn a_rerun_reports_the_version_the_results_landed_in() {
    let dataset = dataset_with_fragments(&[10, 10, 10, 500, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    assert_eq!(plan.tasks.len(), 2);
    let mut results = Vec::new();
    for task in &plan.tasks {
        results.push(task.execute(&dataset).await.unwrap());
    }
    let (committed, first) = commit_compaction(&dataset, results.clone()).await.unwrap();
    assert_eq!(first.committed_version, Some(dataset.version() + 1));
    assert_eq!(first.fragments_removed, 5);
    // From the stale handle and from the latest one: the same report, no commit.
    for handle in [&dataset, &committed] {
        let (_, again) = commit_compaction(handle, results.clone()).await.unwrap();
        assert_eq!(again, first);
    }
    let latest = committed.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), committed.version());
    assert_eq!(scan_ids(&latest).await, (0..550).collect::<Vec<i64>>());
}

#[tokio::test]
async fn results_rewritten_again_after_landing_still_report_their_version() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let result = plan.tasks[0].execute(&dataset).await.unwrap();
    let (mut committed, first) = commit_compaction(&dataset, vec![result.clone()])
        .await
        .unwrap();
    // New data, then a compaction that rewrites the landed output with it.
    committed
        .append(vec![batch(30, 10)], &WriteOptions::default())
        .await
        .unwrap();
    let metrics = compact_files(&mut committed, &options(100), None)
        .await
        .unwrap();
    assert!(metrics.committed_version.is_some());
    let (_, again) = commit_compaction(&dataset, vec![result]).await.unwrap();
    assert_eq!(again, first);
    let latest = committed.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), committed.version(), "nothing committed");
    assert_eq!(scan_ids(&latest).await, (0..40).collect::<Vec<i64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_commits_racing_both_report_the_one_version() {
    for _ in 0..8 {
        let dataset = dataset_with_fragments(&[10, 10, 10, 10]).await;
        let plan = plan_compaction(&dataset, &options(100)).unwrap();
        let result = plan.tasks[0].execute(&dataset).await.unwrap();
        let (a, b) = tokio::join!(
            commit_compaction(&dataset, vec![result.clone()]),
            commit_compaction(&dataset, vec![result.clone()]),
        );
        let (a, b) = (a.unwrap().1, b.unwrap().1);
        assert_eq!(a, b);
        assert_eq!(a.committed_version, Some(dataset.version() + 1));
        let latest = dataset.checkout_latest().await.unwrap();
        assert_eq!(latest.version(), dataset.version() + 1, "one commit");
        assert_eq!(scan_ids(&latest).await, (0..40).collect::<Vec<i64>>());
    }
}

#[tokio::test]
async fn a_rerun_where_only_some_results_landed_is_refused() {
    let dataset = dataset_with_fragments(&[10, 10, 500, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let mut results = Vec::new();
    for task in &plan.tasks {
        results.push(task.execute(&dataset).await.unwrap());
    }
    let (committed, _) = commit_compaction(&dataset, vec![results[0].clone()])
        .await
        .unwrap();
    let err = commit_compaction(&committed, results).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("already landed"), "{err}");
    let latest = committed.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), committed.version());
}

#[tokio::test]
async fn results_of_plans_with_different_options_are_refused() {
    let dataset = dataset_with_fragments(&[10, 10, 500, 10, 10]).await;
    let inline = plan_compaction(&dataset, &options(100)).unwrap();
    let deferred = plan_compaction(
        &dataset,
        &CompactionOptions {
            defer_index_remap: true,
            ..options(100)
        },
    )
    .unwrap();
    assert!(deferred.tasks.iter().all(|t| t.options.defer_index_remap));
    let first = inline.tasks[0].execute(&dataset).await.unwrap();
    let second = deferred.tasks[1].execute(&dataset).await.unwrap();
    assert!(
        second.options.defer_index_remap,
        "results carry the plan's options"
    );
    let err = commit_compaction(&dataset, vec![first, second])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("different options"), "{err}");
    assert_eq!(
        dataset.checkout_latest().await.unwrap().version(),
        dataset.version()
    );
}

#[tokio::test]
async fn a_batch_follows_sources_an_earlier_batch_relabelled_unless_they_changed() {
    // Two tasks: [1, 2, 3] and [5, 6]; committing the first relabels 4, 5, 6.
    let dataset = dataset_with_fragments(&[10, 10, 10, 500, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    assert_eq!(plan.tasks.len(), 2);
    let first = plan.tasks[0].execute(&dataset).await.unwrap();
    let second = plan.tasks[1].execute(&dataset).await.unwrap();
    let (committed, _) = commit_compaction(&dataset, vec![first.clone()])
        .await
        .unwrap();
    let (landed, metrics) = commit_compaction(&committed, vec![second.clone()])
        .await
        .unwrap();
    assert_eq!(metrics.committed_version, Some(committed.version() + 1));
    assert_eq!(scan_ids(&landed).await, (0..550).collect::<Vec<i64>>());
    let ids: Vec<u64> = landed.fragments().iter().map(|f| f.id).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");

    // Same race, but a row of the relabelled sources is deleted in between:
    // renaming would lose that delete, so the commit is a retryable conflict.
    let dataset = dataset_with_fragments(&[10, 10, 10, 500, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let first = plan.tasks[0].execute(&dataset).await.unwrap();
    let second = plan.tasks[1].execute(&dataset).await.unwrap();
    let (mut committed, _) = commit_compaction(&dataset, vec![first]).await.unwrap();
    committed.delete("id = 545").await.unwrap();
    let err = commit_compaction(&committed, vec![second])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Conflict {
                retryable: true,
                ..
            }
        ),
        "{err}"
    );
    let latest = committed.checkout_latest().await.unwrap();
    let want: Vec<i64> = (0..550).filter(|id| *id != 545).collect();
    assert_eq!(scan_ids(&latest).await, want);
}
