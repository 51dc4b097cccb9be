//! Garbage collection never deletes outside the dataset root.
//!
//! Orphan cleanup and version expiry decide what to delete from listings and
//! from manifests. A symbolic link inside the dataset (`data/evil ->
//! /elsewhere`) must not make a listing report, or a delete reach, files
//! outside the root: a link is at most removed as a link. A manifest,
//! transaction or index record naming a file outside the root (`../x`,
//! `/abs/x`, `s3://other-bucket/x`, `%2e%2e`) is Corrupt when read, and
//! expiring the version holding it deletes nothing.
//!
//! Every test snapshots everything outside the root byte for byte (a sibling
//! directory on local disk, sibling and parent prefixes on S3) and checks it
//! is unchanged afterwards, and that the dataset still reads and verifies.
//! The S3 cases need `REFRACT_TEST_S3_ENDPOINT` (`ci/test.sh` starts moto).

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use refract_core::Error;
use refract_table::cleanup::cleanup_orphans;
use refract_table::io::{manifest_path, DatasetStore, RelativePath, StorageOptions};
use refract_table::testing::{
    open_manifest, pb, s3_test_location, sample_rows, sample_schema, snapshot,
};
use refract_table::{
    cleanup_old_versions, verify_dataset, Dataset, OpenOptions, RetentionPolicy, VerifyOptions,
    WriteOptions,
};
use rstest::rstest;

/// Where a test runs.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Local,
    S3,
}

/// A dataset and, beside it, files it must never touch.
struct Rig {
    uri: String,
    storage: StorageOptions,
    /// Stores rooted outside the dataset, each with the files written there.
    outside: Vec<(DatasetStore, Vec<RelativePath>)>,
    /// Local only: the temp dir holding both.
    dir: Option<tempfile::TempDir>,
}

const THIRTY_DAYS: Duration = Duration::from_secs(30 * 24 * 3600);

/// The files written outside: the target of every link and forged path.
const OUTSIDE_FILES: [&str; 2] = ["precious.txt", "nested/other.bin"];

/// Writes `bytes` at `file` under `store`'s root.
async fn put(store: &DatasetStore, file: &str, bytes: &'static [u8]) {
    store
        .put(
            &RelativePath::parse(file).unwrap(),
            Bytes::from_static(bytes),
        )
        .await
        .unwrap();
}

impl Rig {
    async fn new(backend: Backend, name: &str) -> Option<Rig> {
        let (uri, storage, roots, dir) = match backend {
            Backend::Local => {
                let dir = tempfile::tempdir().unwrap();
                let outside = dir.path().join("outside");
                let uri = dir.path().join("ds").to_str().unwrap().to_string();
                let roots = vec![(outside.to_str().unwrap().to_string(), &OUTSIDE_FILES[..])];
                (uri, StorageOptions::new(), roots, Some(dir))
            }
            Backend::S3 => {
                let (uri, storage) = s3_test_location(name)?;
                // `s3://bucket/name-<uuid>`: its parent prefix is shared by
                // every test, so give this one a parent of its own.
                let (bucket_uri, leaf) = uri.rsplit_once('/').unwrap();
                let parent = format!("{bucket_uri}/{leaf}-parent");
                // A sibling whose name extends the root's, the parent itself
                // and a sibling directory.
                let roots = vec![
                    (format!("{parent}/ds-outside"), &OUTSIDE_FILES[..1]),
                    (parent.clone(), &OUTSIDE_FILES[..1]),
                    (format!("{parent}/outside"), &OUTSIDE_FILES[1..]),
                ];
                (format!("{parent}/ds"), storage, roots, None)
            }
        };
        let mut outside = Vec::new();
        for (root, files) in roots {
            let store = DatasetStore::open_with_options(&root, true, &storage)
                .await
                .unwrap();
            for file in files {
                put(&store, file, b"keep").await;
            }
            outside.push((
                store,
                files
                    .iter()
                    .map(|f| RelativePath::parse(f).unwrap())
                    .collect(),
            ));
        }
        if let Some(dir) = &dir {
            // Old enough for any age cutoff.
            let old = SystemTime::now() - THIRTY_DAYS;
            for file in OUTSIDE_FILES {
                std::fs::File::options()
                    .write(true)
                    .open(dir.path().join("outside").join(file))
                    .unwrap()
                    .set_modified(old)
                    .unwrap();
            }
        }
        Some(Rig {
            uri,
            storage,
            outside,
            dir,
        })
    }

    fn options(&self) -> OpenOptions {
        OpenOptions {
            storage_options: self.storage.clone(),
            ..OpenOptions::default()
        }
    }

    async fn open(&self) -> Dataset {
        Dataset::open_with(&self.uri, self.options()).await.unwrap()
    }

    fn local_root(&self) -> PathBuf {
        PathBuf::from(&self.uri)
    }

    fn local_outside(&self) -> PathBuf {
        self.dir.as_ref().unwrap().path().join("outside")
    }

    /// Every file written outside the root, with its bytes (`None`: gone).
    async fn outside_snapshot(&self) -> BTreeMap<String, Option<Bytes>> {
        let mut all = BTreeMap::new();
        for (n, (store, files)) in self.outside.iter().enumerate() {
            for file in files {
                all.insert(format!("{n}:{file}"), store.get(file).await.ok());
            }
        }
        assert!(all.values().all(Option::is_some), "{all:?}");
        all
    }

    /// Versions 1..=4: create, append 2,000 rows in 500-row fragments,
    /// delete (a deletion file), append 500 more.
    async fn create_dataset(&self) -> Dataset {
        let mut dataset = Dataset::create(&self.uri, sample_schema(), self.options())
            .await
            .unwrap();
        let per_file = WriteOptions {
            max_rows_per_file: 500,
            ..WriteOptions::default()
        };
        dataset
            .append(vec![sample_rows(0, 2000)], &per_file)
            .await
            .unwrap();
        dataset.delete("id < 10").await.unwrap();
        dataset
            .append(vec![sample_rows(2000, 500)], &per_file)
            .await
            .unwrap();
        assert_eq!(dataset.version(), 4);
        dataset
    }
}

/// Every object under the dataset root, with its bytes.
async fn root_snapshot(dataset: &Dataset) -> BTreeMap<String, Bytes> {
    let mut all = BTreeMap::new();
    for dir in [
        "data",
        "_deletions",
        "_indices",
        "_fri",
        "_versions",
        "_refs",
    ] {
        let prefix = RelativePath::parse(dir).unwrap();
        for object in dataset.store().list(&prefix).await.unwrap() {
            if let Ok(bytes) = dataset.store().get(&object.path).await {
                all.insert(object.path.to_string(), bytes);
            }
        }
    }
    all
}

async fn assert_verifies(dataset: &Dataset) {
    let report = verify_dataset(
        dataset,
        VerifyOptions {
            all_versions: false,
        },
        None,
    )
    .await
    .unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

fn expire_all_but_latest() -> RetentionPolicy {
    RetentionPolicy {
        older_than: None,
        keep_last: Some(1),
        keep_tagged: true,
        dry_run: false,
    }
}

/// Links placed in every directory cleanup lists or deletes in, each
/// pointing outside: (link, target relative to `outside`; `None`: the
/// directory itself).
const LINKS: &[(&str, Option<&str>)] = &[
    ("data/evil", None),
    ("data/precious.lance", Some("precious.txt")),
    ("_deletions/evil", None),
    ("_deletions/9-evil.bin", Some("nested/other.bin")),
    ("_indices/00000000-0000-0000-0000-00000000e0e0", None),
    (
        "_indices/00000000-0000-0000-0000-00000000e0e1/index.lance",
        Some("precious.txt"),
    ),
    ("_fri/00000000-0000-0000-0000-00000000e0e2", None),
    ("_versions/evil", None),
    ("_versions/notes.txt", Some("precious.txt")),
];

fn place_links(root: &Path, outside: &Path) {
    for (link, target) in LINKS {
        let link = root.join(link);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let target = match target {
            Some(file) => outside.join(file),
            None => outside.to_path_buf(),
        };
        symlink(target, link).unwrap();
    }
}

/// What a cleanup run does in the link test.
#[derive(Debug, Clone, Copy)]
enum Run {
    Orphans,
    Expiry,
    ExpiryThenOrphans,
}

#[rstest]
#[case::orphans(Run::Orphans)]
#[case::expiry(Run::Expiry)]
#[case::expiry_then_orphans(Run::ExpiryThenOrphans)]
#[tokio::test]
async fn links_inside_the_dataset_are_never_followed(#[case] run: Run) {
    let rig = Rig::new(Backend::Local, "links").await.unwrap();
    let dataset = rig.create_dataset().await;
    let rows = snapshot(&dataset).await.unwrap();
    let outside = rig.outside_snapshot().await;
    place_links(&rig.local_root(), &rig.local_outside());

    let dataset = rig.open().await;
    let mut removed: Vec<String> = Vec::new();
    if matches!(run, Run::Expiry | Run::ExpiryThenOrphans) {
        let report = cleanup_old_versions(&dataset, &expire_all_but_latest())
            .await
            .unwrap();
        assert_eq!(report.expired_versions, [1, 2, 3]);
        removed.extend(report.removed.iter().map(|f| f.path.clone()));
    }
    if matches!(run, Run::Orphans | Run::ExpiryThenOrphans) {
        let report = cleanup_orphans(&dataset, Duration::ZERO).await.unwrap();
        removed.extend(report.deleted.iter().map(|p| p.to_string()));
    }

    assert_eq!(rig.outside_snapshot().await, outside, "outside the root");
    for path in &removed {
        assert!(
            LINKS
                .iter()
                .all(|(link, _)| !path.starts_with(&format!("{link}/"))),
            "{path} was reached through a link"
        );
    }
    // Orphaned links go as links; links under `_versions/` are not cleanup's.
    for (link, _) in LINKS {
        let exists = std::fs::symlink_metadata(rig.local_root().join(link)).is_ok();
        let orphan_run = !matches!(run, Run::Expiry);
        let expected = link.starts_with("_versions/") || !orphan_run;
        assert_eq!(exists, expected, "{link} after {run:?}");
    }
    let reopened = rig.open().await;
    assert_eq!(snapshot(&reopened).await.unwrap(), rows);
    assert_verifies(&reopened).await;
}

#[tokio::test]
async fn the_reproduction_with_default_age_deletes_nothing_outside() {
    let rig = Rig::new(Backend::Local, "repro").await.unwrap();
    let dataset = rig.create_dataset().await;
    let outside = rig.outside_snapshot().await;
    symlink(rig.local_outside(), rig.local_root().join("data/evil")).unwrap();
    let report = cleanup_orphans(&dataset, Duration::from_secs(14 * 24 * 3600))
        .await
        .unwrap();
    assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    assert_eq!(rig.outside_snapshot().await, outside);
    assert!(std::fs::symlink_metadata(rig.local_root().join("data/evil")).is_ok());
}

#[tokio::test]
async fn a_data_directory_that_is_a_link_is_not_collected_through() {
    let rig = Rig::new(Backend::Local, "linked-data").await.unwrap();
    let dataset = rig.create_dataset().await;
    let rows = snapshot(&dataset).await.unwrap();
    // The data lives elsewhere, `data/` links to it.
    let moved = rig.dir.as_ref().unwrap().path().join("moved-data");
    std::fs::rename(rig.local_root().join("data"), &moved).unwrap();
    symlink(&moved, rig.local_root().join("data")).unwrap();
    let stray = moved.join("stray.lance");
    std::fs::write(&stray, b"not referenced").unwrap();
    let before: Vec<_> = std::fs::read_dir(&moved)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();

    let dataset = rig.open().await;
    let report = cleanup_orphans(&dataset, Duration::ZERO).await.unwrap();
    assert!(
        report
            .deleted
            .iter()
            .all(|p| !p.as_str().starts_with("data/")),
        "{:?}",
        report.deleted
    );
    // Expiry finds no file of `data/` to delete (none is listed through the
    // link) and removes only manifests and deletion files.
    let report = cleanup_old_versions(&dataset, &expire_all_but_latest())
        .await
        .unwrap();
    assert!(report.removed.iter().all(|f| !f.path.starts_with("data/")));
    let mut after: Vec<_> = std::fs::read_dir(&moved)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(after, before, "nothing behind the link was deleted");
    assert_eq!(snapshot(&rig.open().await).await.unwrap(), rows);
}

#[tokio::test]
async fn a_symlinked_dataset_root_keeps_working() {
    let rig = Rig::new(Backend::Local, "linked-root").await.unwrap();
    let dataset = rig.create_dataset().await;
    let rows = snapshot(&dataset).await.unwrap();
    let link = rig.dir.as_ref().unwrap().path().join("ds-link");
    symlink(rig.local_root(), &link).unwrap();
    let orphan = rig.local_root().join("data/orphan.lance");
    std::fs::write(&orphan, b"left by a failed write").unwrap();

    let through_link = Dataset::open(link.to_str().unwrap()).await.unwrap();
    let report = cleanup_orphans(&through_link, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        report.deleted,
        [RelativePath::parse("data/orphan.lance").unwrap()]
    );
    let report = cleanup_old_versions(&through_link, &expire_all_but_latest())
        .await
        .unwrap();
    assert_eq!(report.expired_versions, [1, 2, 3]);
    let reopened = Dataset::open(link.to_str().unwrap()).await.unwrap();
    assert_eq!(snapshot(&reopened).await.unwrap(), rows);
    assert_verifies(&reopened).await;
}

/// Where a forged old version names a file.
#[derive(Debug, Clone, Copy)]
enum Record {
    DataFile,
    TransactionFile,
    Transaction,
    IndexFile,
}

/// Overwrites the manifest of `version` with `original` (its real bytes)
/// changed so that `record` names `path`.
async fn forge_version(
    dataset: &Dataset,
    version: u64,
    original: &Bytes,
    record: Record,
    path: &str,
) {
    let store = dataset.store();
    let mut parts = open_manifest(original).unwrap();
    let message = &mut parts.manifest;
    let fragment = message.fragments.last_mut().unwrap();
    match record {
        Record::DataFile => fragment.files[0].path = path.to_string(),
        Record::TransactionFile => message.transaction_file = path.to_string(),
        Record::Transaction => {
            let transaction = parts.transaction.as_mut().unwrap();
            let Some(pb::transaction::Operation::Append(append)) = transaction.operation.as_mut()
            else {
                panic!("version {version} is not an append");
            };
            append.fragments[0].files[0].path = path.to_string();
        }
        Record::IndexFile => {
            let file = &fragment.files[0];
            parts.indices.push(pb::IndexMetadata {
                uuid: Some(pb::Uuid {
                    uuid: uuid::Uuid::new_v4().as_bytes().to_vec(),
                }),
                name: "forged".to_string(),
                fields: vec![0],
                index_details: Some(prost_types::Any {
                    type_url: "/refract.index.btree".to_string(),
                    value: Vec::new(),
                }),
                dataset_version: version,
                files: vec![pb::IndexFile {
                    path: path.to_string(),
                    size_bytes: file.file_size_bytes,
                }],
                ..Default::default()
            });
        }
    }
    store
        .put(&manifest_path(version), parts.seal())
        .await
        .unwrap();
}

/// The forged paths: relative escapes, an absolute path, another bucket,
/// percent-encoded parents. `{outside}` is the outside file's absolute path
/// on local disk (its key elsewhere).
const FORGED: &[&str] = &[
    "../outside/precious.txt",
    "data/../../outside/precious.txt",
    "{outside}",
    "s3://other-bucket/precious.txt",
    "data/%2e%2e/%2E%2E/outside/precious.txt",
    "../ds-outside/precious.txt",
];

#[rstest]
#[tokio::test]
async fn forged_paths_in_an_expired_version_are_corrupt_and_nothing_is_deleted(
    #[values(Backend::Local, Backend::S3)] backend: Backend,
    #[values(
        Record::DataFile,
        Record::TransactionFile,
        Record::Transaction,
        Record::IndexFile
    )]
    record: Record,
) {
    let Some(rig) = Rig::new(backend, "forged").await else {
        return;
    };
    let dataset = rig.create_dataset().await;
    let rows = snapshot(&dataset).await.unwrap();
    let outside = rig.outside_snapshot().await;
    let outside_file = match backend {
        Backend::Local => rig.local_outside().join("precious.txt"),
        Backend::S3 => PathBuf::from("/precious.txt"),
    };
    // Version 2 appended (data files and a transaction file).
    let version = 2;
    let original = dataset.store().get(&manifest_path(version)).await.unwrap();
    for forged in FORGED {
        let forged = forged.replace("{outside}", outside_file.to_str().unwrap());
        forge_version(&dataset, version, &original, record, &forged).await;
        let before = root_snapshot(&dataset).await;
        // A fresh session: the forged bytes, not a cached manifest.
        let dataset = rig.open().await;

        let err = cleanup_old_versions(&dataset, &expire_all_but_latest())
            .await
            .unwrap_err();
        assert_forged_is_corrupt(&err, version, &forged);
        let err = cleanup_orphans(&dataset, Duration::ZERO).await.unwrap_err();
        assert_forged_is_corrupt(&err, version, &forged);
        let err = Dataset::open_with(
            &rig.uri,
            OpenOptions {
                version: Some(version),
                ..rig.options()
            },
        )
        .await
        .unwrap_err();
        assert_forged_is_corrupt(&err, version, &forged);

        assert_eq!(root_snapshot(&dataset).await, before, "{forged}: inside");
        assert_eq!(rig.outside_snapshot().await, outside, "{forged}: outside");
        let latest = rig.open().await;
        assert_eq!(snapshot(&latest).await.unwrap(), rows);
        assert_verifies(&latest).await;
    }
}

fn assert_forged_is_corrupt(err: &Error, version: u64, forged: &str) {
    assert!(matches!(err, Error::Corrupt { .. }), "{forged}: {err}");
    let text = err.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert!(
        text.starts_with(&format!("corrupt manifest of version {version} ")),
        "{text}"
    );
    // The path as the manifest resolves it: Lance records data files under
    // `data/`, index files under their segment's directory.
    assert!(
        text.ends_with("leaves the dataset root") && text.contains(forged),
        "{text}"
    );
}

#[rstest]
#[tokio::test]
async fn a_directory_that_is_not_a_dataset_is_refused_and_nothing_is_deleted(
    #[values(Backend::Local, Backend::S3)] backend: Backend,
) {
    let Some(rig) = Rig::new(backend, "not-a-dataset").await else {
        return;
    };
    // Files where a dataset's would be, but no `_versions/`.
    let store = DatasetStore::open_with_options(&rig.uri, true, &rig.storage)
        .await
        .unwrap();
    for file in [
        "data/a.lance",
        "_deletions/1-x.bin",
        "_indices/u/index.lance",
    ] {
        store
            .put(
                &RelativePath::parse(file).unwrap(),
                Bytes::from_static(b"mine"),
            )
            .await
            .unwrap();
    }
    let outside = rig.outside_snapshot().await;
    let err = Dataset::open_with(&rig.uri, rig.options())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    for file in [
        "data/a.lance",
        "_deletions/1-x.bin",
        "_indices/u/index.lance",
    ] {
        let bytes = store
            .get(&RelativePath::parse(file).unwrap())
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"mine");
    }
    assert_eq!(rig.outside_snapshot().await, outside);
}
