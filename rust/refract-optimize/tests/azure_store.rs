//! The engine on Azure Blob Storage, against a local Azurite emulator (started
//! by `ci/test.sh` through `ci/azure.sh`): the maintenance story on `az://`
//! ends in exactly the rows, order and layout of the same story on a local
//! directory; parallel writers each win their own version through Azure's
//! conditional create; hostile locations fail with one typed line.
//!
//! Needs `REFRACT_TEST_AZURE_ENDPOINT` (and optionally
//! `REFRACT_TEST_AZURE_CONTAINER`). Without it the tests say loudly that they
//! skipped, unless `REFRACT_TEST_AZURE_REQUIRED` is set (CI), where that is a
//! failure.

mod support;
use support::store_story;

use refract_core::Error;
use refract_table::testing::{azure_test_location, azure_test_options, AZURITE_ACCOUNT_KEY};
use refract_table::Dataset;
use store_story::{assert_story_ends_as_on_a_local_directory, open_options};
use support::fri::{rows, schema};
use support::{scan_ids, write_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maintenance_story_on_azure_ends_as_on_a_local_directory() {
    let Some((uri, storage)) = azure_test_location("story") else {
        return;
    };
    assert_story_ends_as_on_a_local_directory(&uri, &storage).await;
}

/// The primitives the engine relies on, straight on the Azure client:
/// conditional create with exactly one winner among racing writers, ranged
/// reads, sorted recursive listing, server-side copy, delete, NotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_primitives_hold_on_azurite() {
    use bytes::Bytes;
    use refract_table::io::{DatasetStore, RelativePath};

    let Some((uri, storage)) = azure_test_location("primitives") else {
        return;
    };
    let store = DatasetStore::open_with_options(&uri, true, &storage)
        .await
        .unwrap();
    let path = |raw: &str| RelativePath::parse(raw).unwrap();
    let target = path("_versions/1.manifest");
    let mut racers = Vec::new();
    for writer in 0..16u8 {
        let (store, target) = (store.clone(), target.clone());
        racers.push(tokio::spawn(async move {
            let won = store
                .put_if_absent(&target, Bytes::from(vec![writer; 64]))
                .await
                .unwrap();
            (writer, won)
        }));
    }
    let mut winners = Vec::new();
    for racer in racers {
        let (writer, won) = racer.await.unwrap();
        if won {
            winners.push(writer);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one creator wins: {winners:?}");
    let stored = store.get(&target).await.unwrap();
    assert_eq!(stored, Bytes::from(vec![winners[0]; 64]));
    assert!(!store
        .put_if_absent(&target, Bytes::from_static(b"late"))
        .await
        .unwrap());

    let data = path("data/a.lance");
    let body: Vec<u8> = (0..=255u8).collect();
    store.put(&data, Bytes::from(body.clone())).await.unwrap();
    assert_eq!(store.head(&data).await.unwrap(), 256);
    assert_eq!(
        store.get_range(&data, 250..256).await.unwrap(),
        Bytes::from(body[250..].to_vec())
    );
    store.copy(&data, &path("data/b.lance")).await.unwrap();
    let listed: Vec<String> = store
        .list(&path("data"))
        .await
        .unwrap()
        .iter()
        .map(|info| info.path.to_string())
        .collect();
    assert_eq!(listed, vec!["data/a.lance", "data/b.lance"]);
    store.delete(&data).await.unwrap();
    store.delete(&data).await.unwrap();
    let err = store.get(&data).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert_eq!(
        store.get(&path("data/b.lance")).await.unwrap(),
        Bytes::from(body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_appenders_each_win_one_version() {
    let Some((uri, storage)) = azure_test_location("appenders") else {
        return;
    };
    let base = Dataset::create(&uri, schema(), open_options(&storage))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for writer in 0..4i64 {
        let mut handle = base.clone();
        tasks.push(tokio::spawn(async move {
            handle
                .append(vec![rows(writer * 1000, 10)], &write_options(100))
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let latest = Dataset::open_with(&uri, open_options(&storage))
        .await
        .unwrap();
    assert_eq!(latest.version(), 5);
    let versions: Vec<u64> = latest
        .versions()
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(versions, vec![1, 2, 3, 4, 5]);
    let mut ids = scan_ids(&latest).await;
    ids.sort_unstable();
    let expected: Vec<i64> = (0..4)
        .flat_map(|writer| writer * 1000..writer * 1000 + 10)
        .collect();
    assert_eq!(ids, expected, "nothing lost or duplicated");
}

#[tokio::test]
async fn hostile_locations_fail_with_one_typed_line() {
    let Some((empty, storage)) = azure_test_location("hostile") else {
        return;
    };
    // A container that does not exist.
    let missing = format!("az://no-such-container-{}/t", std::process::id());
    let err = Dataset::open_with(&missing, open_options(&storage))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(
        matches!(err, Error::NotFound { .. } | Error::External { .. }),
        "{err}"
    );
    assert!(!err.to_string().contains(AZURITE_ACCOUNT_KEY), "{err}");
    assert!(err.to_string().contains("ContainerNotFound"), "{err}");
    // Creating a table there fails the same way, and creates nothing.
    let err = Dataset::create(&missing, schema(), open_options(&storage))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(
        matches!(err, Error::NotFound { .. } | Error::External { .. }),
        "{err}"
    );
    // An empty prefix holds no dataset.
    let err = Dataset::open_with(&empty, open_options(&storage))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    // A misspelt key, named; the secret never shown.
    let mut typo = storage.clone();
    typo.insert("azure_storage_acount_key", "hunter2");
    let err = Dataset::open_with(&empty, open_options(&typo))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(
        err.to_string().contains("azure_storage_acount_key"),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // A key that is not base64 is refused by name before any request.
    let mut bad_key = storage.clone();
    bad_key.insert("azure_storage_account_key", "not base64 !");
    let err = Dataset::open_with(&empty, open_options(&bad_key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(!err.to_string().contains("not base64 !"), "{err}");
    // Nothing listens on the endpoint.
    let nowhere = azure_test_options("http://127.0.0.1:9/devstoreaccount1");
    let err = Dataset::open_with(&empty, open_options(&nowhere))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::External { .. }), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(!err.to_string().contains(AZURITE_ACCOUNT_KEY), "{err}");
}

/// A subset of the fault matrix over the Azure client: every sampled call of
/// an inline-remap compaction fails once, cleanly and ambiguously, on a fresh
/// prefix; the table is always exactly before or after, every version
/// readable, and a retry converges.
#[tokio::test(flavor = "current_thread")]
async fn compaction_survives_faults_on_azure() {
    use refract_table::testing::RigBackend;

    let Some(_) = azure_test_location("faults") else {
        return;
    };
    // The rig's backend holds `'static` strings; one leak per test.
    let endpoint: &'static str = Box::leak(
        std::env::var("REFRACT_TEST_AZURE_ENDPOINT")
            .unwrap()
            .into_boxed_str(),
    );
    let container: &'static str = Box::leak(
        std::env::var("REFRACT_TEST_AZURE_CONTAINER")
            .unwrap_or_else(|_| "refract-test".to_string())
            .into_boxed_str(),
    );
    store_story::compaction_survives_faults(
        "compaction on azure",
        RigBackend::Azure {
            endpoint,
            container,
        },
        false,
    )
    .await;
}
