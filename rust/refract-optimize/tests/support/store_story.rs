//! The maintenance story shared by the object-store suites (`s3_store.rs`,
//! `azure_store.rs`): the same steps on any URI with its storage options,
//! ending in an [`Outcome`] to compare with the story on a local directory.

use std::sync::Arc;

use super::fri::{rows, schema};
use super::remap::*;
use super::{scan_ids, write_options};
use refract_index::IndexRegistry;
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::fri_uuid;
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_table::io::StorageOptions;
use refract_table::{Dataset, OpenOptions};

/// Open options carrying `storage`, defaults otherwise.
pub fn open_options(storage: &StorageOptions) -> OpenOptions {
    OpenOptions {
        storage_options: storage.clone(),
        ..OpenOptions::default()
    }
}

fn builtins() -> Arc<IndexRegistry> {
    Arc::new(IndexRegistry::with_builtins())
}

/// What a story ends with: ids in scan order, fragment sizes, the version.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Row ids in scan order after a fresh open.
    pub ids: Vec<i64>,
    /// Physical rows of each fragment, in manifest order.
    pub fragment_rows: Vec<u64>,
    /// The final version.
    pub version: u64,
}

/// Load, index, delete, deferred compaction, partition, remap, trim, inline
/// compaction, then maintain until no-op; every indexed query equals a scan
/// after each step.
pub async fn story(uri: &str, storage: &StorageOptions) -> Outcome {
    let mut dataset = Dataset::create(uri, schema(), open_options(storage))
        .await
        .unwrap();
    dataset
        .append(vec![rows(0, 600)], &write_options(50))
        .await
        .unwrap();
    for (name, column, index_type) in INDICES {
        dataset = add_index(&dataset, name, column, index_type).await;
    }
    dataset.delete("id >= 100 AND id < 130").await.unwrap();
    let compaction = CompactionOptions {
        target_rows_per_fragment: 200,
        ..CompactionOptions::default()
    };
    assert!(deferred_compaction(&mut dataset, &compaction).await);
    assert!(fri_uuid(dataset.manifest()).is_some());
    assert_queries_match(&dataset, builtins()).await;
    dataset
        .append(vec![rows(600, 120)], &write_options(40))
        .await
        .unwrap();
    partition(&mut dataset, None, 2).await;
    assert_queries_match(&dataset, builtins()).await;
    remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    trim_fri(&mut dataset).await.unwrap();
    assert_queries_match(&dataset, builtins()).await;
    compact_files(&mut dataset, &compaction, None)
        .await
        .unwrap();
    assert_queries_match(&dataset, builtins()).await;
    let options = MaintainOptions {
        compaction: Some(compaction),
        reindex: true,
        until_noop: true,
        ..MaintainOptions::default()
    };
    let report = maintain(&mut dataset, options.clone()).await.unwrap();
    assert!(report.converged, "{report:#?}");
    assert_queries_match(&dataset, builtins()).await;
    // One more round commits nothing.
    let version = dataset.version();
    let again = maintain(&mut dataset, options).await.unwrap();
    assert!(again.rounds.iter().all(|r| r.is_noop()), "{again:#?}");
    assert_eq!(dataset.latest_version().await.unwrap(), version);
    // A fresh open through the same options sees the same table.
    let reopened = Dataset::open_with(uri, open_options(storage))
        .await
        .unwrap();
    assert_eq!(reopened.version(), version);
    Outcome {
        ids: scan_ids(&reopened).await,
        fragment_rows: reopened
            .fragments()
            .iter()
            .map(|f| f.physical_rows)
            .collect(),
        version,
    }
}

/// Runs [`story`] on `uri` and on a fresh local directory and asserts both
/// end alike, with every id of the story exactly once.
pub async fn assert_story_ends_as_on_a_local_directory(uri: &str, storage: &StorageOptions) {
    let remote = story(uri, storage).await;
    let dir = tempfile::tempdir().unwrap();
    let local = story(dir.path().to_str().unwrap(), &StorageOptions::new()).await;
    assert_eq!(remote, local);
    let mut expected: Vec<i64> = (0..720).filter(|id| !(100..130).contains(id)).collect();
    let mut got = remote.ids.clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(got, expected, "nothing lost or duplicated");
}

/// A subset of the fault matrix over a cloud client (`backend`): every
/// sampled call of an inline-remap compaction (or, with `distributed`, a
/// plan/execute/commit) fails once, cleanly and ambiguously, on a fresh
/// prefix; the table is always exactly before or after, every version
/// readable, and a retry converges.
pub async fn compaction_survives_faults(
    name: &str,
    backend: refract_table::testing::RigBackend,
    distributed: bool,
) {
    use futures::FutureExt;
    use refract_index::{create_index, IndexParams};
    use refract_optimize::compaction::{commit_compaction, plan_compaction};
    use refract_table::testing::{
        run_fault_matrix, sample_rows, Coverage, FaultRig, OperationFn, SetupFn,
    };
    use refract_table::WriteOptions;

    let setup: SetupFn = Arc::new(|rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            let per_file = WriteOptions {
                max_rows_per_file: 10,
                ..WriteOptions::default()
            };
            dataset.append(vec![sample_rows(0, 40)], &per_file).await?;
            dataset.delete("id % 7 = 3").await?;
            create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
            Ok(())
        }
        .boxed_local()
    });
    let options = CompactionOptions {
        target_rows_per_fragment: 25,
        num_threads: Some(2),
        ..CompactionOptions::default()
    };
    let operation: OperationFn = Arc::new(move |dataset: Dataset| {
        let options = options.clone();
        async move {
            if distributed {
                let plan = plan_compaction(&dataset, &options)?;
                let mut results = Vec::new();
                for task in &plan.tasks {
                    results.push(task.execute(&dataset).await?);
                }
                Ok(commit_compaction(&dataset, results).await?.0)
            } else {
                let mut dataset = dataset;
                compact_files(&mut dataset, &options, None).await?;
                Ok(dataset)
            }
        }
        .boxed_local()
    });
    let report = run_fault_matrix(name, backend, setup, operation, Coverage::Sampled(2)).await;
    assert!(report.runs > 0 && report.faults_fired > 0, "{report:?}");
}
