//! The engine on a real S3 server (moto, started by `ci/test.sh`): the whole
//! maintenance story on `s3://` ends in exactly the rows, order and layout
//! of the same story on a local directory; a store without conditional writes
//! refuses to commit; hostile locations fail with one typed line.
//!
//! Needs `REFRACT_TEST_S3_ENDPOINT` (and optionally `REFRACT_TEST_S3_BUCKET`).
//! Without it the tests say loudly that they skipped, unless
//! `REFRACT_TEST_S3_REQUIRED` is set (CI), where that is a failure.

mod support;
use support::store_story;

use refract_core::Error;
use refract_table::testing::{s3_test_location, s3_test_options};
use refract_table::Dataset;
use store_story::{assert_story_ends_as_on_a_local_directory, open_options};
use support::fri::{rows, schema};
use support::{scan_ids, write_options};

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
    use refract_table::testing::RigBackend;

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
    store_story::compaction_survives_faults(
        "compaction on s3",
        RigBackend::S3 { endpoint, bucket },
        distributed,
    )
    .await;
}
