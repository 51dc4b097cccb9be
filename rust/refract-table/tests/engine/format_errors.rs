//! Manifest codec and the refusal of bad stored metadata: corrupt bytes, path
//! escapes, unknown feature flags.

use bytes::Bytes;
use refract_core::Error;
use refract_ledger::flags::{ClientFeatures, FLAG_FRAGMENT_REUSE_INDEX, FLAG_UNKNOWN};
use refract_table::io::manifest_path;
use refract_table::testing::{open_manifest, pb, ManifestParts};
use refract_table::{Dataset, Manifest, OpenOptions, VersionEntry};
use rstest::rstest;

use crate::common::*;

/// Publishes `manifest` as the next version, bypassing the commit protocol.
async fn publish_raw(dataset: &Dataset, bytes: Bytes) -> u64 {
    let version = dataset.latest_version().await.unwrap() + 1;
    dataset
        .store()
        .put(&manifest_path(version), bytes)
        .await
        .unwrap();
    version
}

/// The latest manifest as a protobuf message, with `version` bumped.
fn next_message(dataset: &Dataset) -> ManifestParts {
    let bytes = dataset.manifest().encode().unwrap();
    let mut message = open_manifest(&bytes).unwrap();
    message.manifest.version += 1;
    message
}

#[tokio::test]
async fn manifest_round_trips_through_protobuf() {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 30, 10).await;
    dataset.delete("id = 4").await.unwrap();
    let manifest: &Manifest = dataset.manifest();
    let decoded = Manifest::decode(&manifest.encode().unwrap()).unwrap();
    assert_eq!(&decoded, manifest);
    assert!(decoded.transaction.is_some());
}

/// Ways to break the bytes of the latest manifest.
#[derive(Debug, Clone, Copy)]
enum Breakage {
    Garbage,
    Truncated,
    Empty,
    FlippedTag,
}

/// Asserts `err` is Corrupt, one line, naming the manifest of `version` by
/// number and dataset-relative path, and free of build-machine paths.
fn assert_names_manifest(err: &Error, version: u64) {
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    let text = err.to_string();
    let path = manifest_path(version);
    assert!(
        text.starts_with(&format!("corrupt manifest of version {version} ({path}): ")),
        "{text}"
    );
    assert_clean(&text);
}

/// One line, no source location, no path of the build machine.
fn assert_clean(text: &str) {
    assert!(!text.contains('\n'), "{text}");
    for foreign in ["/root/", ".cargo", "registry/src", ".rs:"] {
        assert!(!text.contains(foreign), "{foreign} in {text}");
    }
}

/// The bytes of a manifest broken by `breakage` (`real` is a valid one).
fn break_bytes(real: &[u8], breakage: Breakage) -> Bytes {
    match breakage {
        Breakage::Garbage => Bytes::from_static(b"\xff\xfe this is not a manifest \x00\x01"),
        Breakage::Truncated => Bytes::from(real[..real.len() / 2].to_vec()),
        Breakage::Empty => Bytes::new(),
        Breakage::FlippedTag => {
            // Every bit of the first field's tag flipped: wire type 7 does not exist.
            let mut bytes = real.to_vec();
            bytes[0] ^= 0xFF;
            Bytes::from(bytes)
        }
    }
}

#[rstest]
#[case::garbage(Breakage::Garbage)]
#[case::truncated(Breakage::Truncated)]
#[case::empty(Breakage::Empty)]
#[case::flipped_tag(Breakage::FlippedTag)]
#[tokio::test]
async fn corrupt_latest_manifest_is_a_corrupt_error(#[case] breakage: Breakage) {
    let location = location(Backend::Local);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let real = next_message(&dataset).seal().to_vec();
    let version = publish_raw(&dataset, break_bytes(&real, breakage)).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert_names_manifest(&err, version);
    // The previous version is still readable.
    let previous = dataset.checkout_version(2).await.unwrap();
    assert_eq!(scan_ids(&previous).await, (0..10).collect::<Vec<_>>());
}

/// Overwrites the stored manifest of `version` with `bytes` (a damaged disk,
/// not a commit).
async fn damage_manifest(dataset: &Dataset, version: u64, bytes: Bytes) {
    dataset
        .store()
        .put(&manifest_path(version), bytes)
        .await
        .unwrap();
}

#[rstest]
#[case::garbage(Breakage::Garbage)]
#[case::truncated(Breakage::Truncated)]
#[case::empty(Breakage::Empty)]
#[case::flipped_tag(Breakage::FlippedTag)]
#[tokio::test]
async fn a_corrupt_old_manifest_leaves_the_latest_and_the_history_readable(
    #[case] breakage: Breakage,
) {
    let location = location(Backend::Local);
    let mut dataset = create_with_rows(&location.uri, 10, 10).await;
    dataset.append(vec![rows(10, 5)], &opts(10)).await.unwrap();
    assert_eq!(dataset.version(), 3);
    let real = dataset.store().get(&manifest_path(2)).await.unwrap();
    damage_manifest(&dataset, 2, break_bytes(&real, breakage)).await;

    // A fresh session, so nothing comes from a cache.
    let latest = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(latest.version(), 3);
    assert_eq!(scan_ids(&latest).await, (0..15).collect::<Vec<_>>());
    let err = latest.checkout_version(2).await.unwrap_err();
    assert_names_manifest(&err, 2);
    // The strict listing stops at the damaged version and says which.
    let err = latest.versions().await.unwrap_err();
    assert_names_manifest(&err, 2);

    // The history lists every version, the damaged one with its reason.
    let history = Dataset::version_history_at(&location.uri, OpenOptions::default())
        .await
        .unwrap();
    let versions: Vec<u64> = history.iter().map(VersionEntry::version).collect();
    assert_eq!(versions, vec![1, 2, 3]);
    match &history[..] {
        [VersionEntry::Readable(first), VersionEntry::Unreadable { version: 2, error }, VersionEntry::Readable(last)] =>
        {
            assert_eq!((first.version, first.operation.as_str()), (1, "Create"));
            assert_eq!((last.version, last.operation.as_str()), (3, "Append"));
            assert_names_manifest(error, 2);
        }
        other => panic!("unexpected history {other:?}"),
    }
}

#[tokio::test]
async fn a_corrupt_latest_manifest_is_listed_as_unreadable() {
    let location = location(Backend::Local);
    let mut dataset = create_with_rows(&location.uri, 10, 10).await;
    dataset.append(vec![rows(10, 5)], &opts(10)).await.unwrap();
    let real = dataset.store().get(&manifest_path(3)).await.unwrap();
    damage_manifest(&dataset, 3, break_bytes(&real, Breakage::Truncated)).await;
    assert_names_manifest(&Dataset::open(&location.uri).await.unwrap_err(), 3);
    let history = Dataset::version_history_at(&location.uri, OpenOptions::default())
        .await
        .unwrap();
    assert!(
        matches!(
            &history[..],
            [
                VersionEntry::Readable(_),
                VersionEntry::Readable(_),
                VersionEntry::Unreadable { version: 3, .. }
            ]
        ),
        "{history:?}"
    );
}

#[tokio::test]
async fn every_manifest_error_names_its_version_and_file() {
    let location = location(Backend::Local);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    // Missing: NotFound naming the version and the file.
    let err = dataset.checkout_version(42).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "not found: manifest of version 42 ({}) does not exist",
            manifest_path(42)
        )
    );
    // Validation: a manifest stored under another version's name.
    let mut message = next_message(&dataset);
    message.manifest.version += 5;
    let version = publish_raw(&dataset, message.seal()).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert_names_manifest(&err, version);
    assert!(
        err.to_string().ends_with("the file records version 8"),
        "{err}"
    );
    // A path leaving the root is damage, naming the manifest holding it.
    let mut message = next_message(&dataset);
    message.manifest.version = version + 1;
    message.manifest.fragments[0].files[0].path = "../x.lance".into();
    damage_manifest(&dataset, version + 1, message.seal()).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert_names_manifest(&err, version + 1);
    assert_eq!(
        err.to_string(),
        format!(
            "corrupt manifest of version {} ({}): file path \"data/../x.lance\" leaves the dataset root",
            version + 1,
            manifest_path(version + 1)
        )
    );
}

#[rstest]
#[case::parent("../x.lance")]
#[case::nested_parent("data/../../x.lance")]
#[case::absolute("/etc/passwd")]
#[case::url("s3://other-bucket/x.lance")]
#[case::encoded_parent("data/%2e%2e/%2E%2E/x.lance")]
#[tokio::test]
async fn path_escapes_in_manifest_are_corrupt(#[case] path: &str) {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let mut message = next_message(&dataset);
    message.manifest.fragments[0].files[0].path = path.to_string();
    publish_raw(&dataset, message.seal()).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().ends_with(&format!(
            "file path {:?} leaves the dataset root",
            format!("data/{path}")
        )),
        "{err}"
    );
}

#[rstest]
#[case::duplicate_ids(|m: &mut pb::Manifest| { let f = m.fragments[0].clone(); m.fragments.push(f); })]
#[case::fields_columns_mismatch(|m: &mut pb::Manifest| { m.fragments[0].files[0].column_indices.pop(); })]
#[case::id_above_max(|m: &mut pb::Manifest| m.max_fragment_id = Some(0))]
#[case::no_max_id(|m: &mut pb::Manifest| m.max_fragment_id = None)]
#[case::tombstone_id(|m: &mut pb::Manifest| { m.fragments[0].id = u32::MAX as u64; m.max_fragment_id = Some(u32::MAX); })]
#[case::too_many_deleted(|m: &mut pb::Manifest| m.fragments[0].deletion_file = Some(pb::DeletionFile { file_type: 1, read_version: 1, id: 7, num_deleted_rows: 11, base_id: None }))]
#[case::bad_schema(|m: &mut pb::Manifest| m.fields[0].logical_type = "no-such-type".into())]
#[case::one_sided_fri(|m: &mut pb::Manifest| m.reader_feature_flags |= FLAG_FRAGMENT_REUSE_INDEX)]
#[tokio::test]
async fn inconsistent_manifests_are_corrupt(#[case] damage: fn(&mut pb::Manifest)) {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let mut message = next_message(&dataset);
    damage(&mut message.manifest);
    publish_raw(&dataset, message.seal()).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn unknown_reader_flag_is_refused_on_open() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let mut message = next_message(&dataset);
    message.manifest.reader_feature_flags |= FLAG_UNKNOWN;
    publish_raw(&dataset, message.seal()).await;
    let err = Dataset::open(&location.uri).await.unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
}

#[tokio::test]
async fn unknown_writer_flag_is_refused_on_write() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let mut message = next_message(&dataset);
    message.manifest.writer_feature_flags |= FLAG_UNKNOWN << 5;
    publish_raw(&dataset, message.seal()).await;
    let mut latest = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(scan_ids(&latest).await, (0..10).collect::<Vec<_>>());
    let err = latest
        .append(vec![rows(10, 1)], &opts(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    let err = latest.delete("id = 1").await.unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    // A stale handle cannot sneak a write past the flag either.
    let mut stale = dataset.clone();
    let err = stale
        .append(vec![rows(10, 1)], &opts(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    assert_eq!(latest.latest_version().await.unwrap(), 3);
}

#[tokio::test]
async fn pre_fri_client_refuses_the_fri_flag_pair() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 10, 10).await;
    let mut message = next_message(&dataset);
    message.manifest.reader_feature_flags |= FLAG_FRAGMENT_REUSE_INDEX;
    message.manifest.writer_feature_flags |= FLAG_FRAGMENT_REUSE_INDEX;
    publish_raw(&dataset, message.seal()).await;
    let old_client = OpenOptions {
        features: ClientFeatures::before_fri(),
        ..OpenOptions::default()
    };
    let err = Dataset::open_with(&location.uri, old_client)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    let current = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(current.version(), 3);
}
