//! The engine on a real S3 server (moto, started by `ci/test.sh`): the whole
//! maintenance story on `s3://` ends in exactly the rows, order and layout
//! of the same story on a local directory; a store without conditional writes
//! refuses to commit; hostile locations fail with one typed line.
//!
//! Needs `REFRACT_TEST_S3_ENDPOINT` (and optionally `REFRACT_TEST_S3_BUCKET`).
//! Without it the tests say loudly that they skipped, unless
//! `REFRACT_TEST_S3_REQUIRED` is set (CI), where that is a failure.

#[path = "remap_common.rs"]
mod common;
#[path = "support/store_story.rs"]
mod store_story;

use std::sync::Arc;

use common::fri_common::{rows, scan_ids, schema, write_options};
use refract_core::Error;
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_table::testing::{s3_test_location, s3_test_options};
use refract_table::Dataset;
use store_story::{assert_story_ends_as_on_a_local_directory, open_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maintenance_story_on_s3_ends_as_on_a_local_directory() {
    let Some((uri, storage)) = s3_test_location("story") else {
        return;
    };
    assert_story_ends_as_on_a_local_directory(&uri, &storage).await;
}

#[tokio::test]
async fn a_store_without_conditional_writes_refuses_to_commit() {
    let Some((uri, storage)) = s3_test_location("noconditional") else {
        return;
    };
    let mut dataset = Dataset::create(&uri, schema(), open_options(&storage))
        .await
        .unwrap();
    dataset
        .append(vec![rows(0, 10)], &write_options(10))
        .await
        .unwrap();
    let mut unsafe_options = storage.clone();
    unsafe_options.insert("aws_conditional_put", "disabled");
    let mut risky = Dataset::open_with(&uri, open_options(&unsafe_options))
        .await
        .unwrap();
    let err = risky
        .append(vec![rows(10, 10)], &write_options(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("conditional"), "{err}");
    let after = Dataset::open_with(&uri, open_options(&storage))
        .await
        .unwrap();
    assert_eq!(after.version(), dataset.version(), "nothing committed");
    assert_eq!(scan_ids(&after).await, (0..10).collect::<Vec<i64>>());
}

#[tokio::test]
async fn hostile_locations_fail_with_one_typed_line() {
    let Some((_, storage)) = s3_test_location("hostile") else {
        return;
    };
    // A bucket that does not exist.
    let missing = format!("s3://no-such-bucket-{}/t", std::process::id());
    let err = Dataset::open_with(&missing, open_options(&storage))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(
        matches!(err, Error::NotFound { .. } | Error::External { .. }),
        "{err}"
    );
    // An empty prefix holds no dataset.
    let (empty, _) = s3_test_location("empty").unwrap();
    let err = Dataset::open_with(&empty, open_options(&storage))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    // A misspelt key, named; the secret never shown.
    let mut typo = storage.clone();
    typo.insert("aws_secret_acess_key", "hunter2");
    let err = Dataset::open_with(&empty, open_options(&typo))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("aws_secret_acess_key"), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // Nothing listens on the endpoint.
    let mut nowhere = s3_test_options("http://127.0.0.1:9");
    nowhere.insert("aws_secret_access_key", "s3cr3t-value");
    let err = Dataset::open_with(&empty, open_options(&nowhere))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(!err.to_string().contains("s3cr3t"), "no credential: {err}");
    // Options for a local path are refused.
    let dir = tempfile::tempdir().unwrap();
    let err = Dataset::open_with(dir.path().to_str().unwrap(), open_options(&storage))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

/// A subset of the fault matrix over the S3 client: every sampled call of an
/// inline-remap compaction and of a distributed plan/execute/commit fails
/// once, cleanly and ambiguously, on a fresh prefix; the table is always
/// exactly before or after, every version readable, and a retry converges.
#[rstest::rstest]
#[case::inline(false)]
#[case::distributed(true)]
#[tokio::test(flavor = "current_thread")]
async fn compaction_survives_faults_on_s3(#[case] distributed: bool) {
    use futures::FutureExt;
    use refract_index::{create_index, IndexParams};
    use refract_optimize::compaction::{commit_compaction, plan_compaction};
    use refract_table::testing::{
        run_fault_matrix, sample_rows, Coverage, FaultRig, OperationFn, RigBackend, SetupFn,
    };
    use refract_table::WriteOptions;

    let Some(_) = s3_test_location("faults") else {
        return;
    };
    // The rig's backend holds `'static` strings; one leak per test.
    let endpoint: &'static str = Box::leak(
        std::env::var("REFRACT_TEST_S3_ENDPOINT")
            .unwrap()
            .into_boxed_str(),
    );
    let bucket: &'static str = Box::leak(
        std::env::var("REFRACT_TEST_S3_BUCKET")
            .unwrap_or_else(|_| "refract-test".to_string())
            .into_boxed_str(),
    );
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
    let report = run_fault_matrix(
        "compaction on s3",
        RigBackend::S3 { endpoint, bucket },
        setup,
        operation,
        Coverage::Sampled(2),
    )
    .await;
    assert!(report.runs > 0 && report.faults_fired > 0, "{report:?}");
}
