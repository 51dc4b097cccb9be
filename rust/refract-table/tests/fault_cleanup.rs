//! `cleanup_orphans`: deletes exactly the unreferenced files older than the
//! cutoff, never a file a live version references, and stops (deleting
//! nothing) when a manifest cannot be read.

use std::time::Duration;

use bytes::Bytes;
use refract_core::Error;
use refract_table::cleanup::cleanup_orphans;
use refract_table::io::{manifest_path, CallKind, FaultMode, RelativePath};
use refract_table::testing::{sample_rows, snapshot, FaultRig, RigBackend};
use refract_table::{Dataset, WriteOptions};
use rstest::rstest;

fn per_file(rows: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows,
        ..WriteOptions::default()
    }
}

/// Versions 1..=3 (append of 30 rows in 3 fragments, delete) plus orphans: the
/// data files of an append whose commit failed and the deletion file of a
/// delete whose commit failed. Returns the orphans, sorted.
async fn dataset_with_orphans(rig: &FaultRig) -> Vec<RelativePath> {
    let mut dataset = rig.create_sample().await.unwrap();
    dataset
        .append(vec![sample_rows(0, 30)], &per_file(10))
        .await
        .unwrap();
    dataset.delete("id = 3").await.unwrap();
    let mut faulty = rig.open_faulty().await.unwrap();
    rig.fault
        .fail_nth(CallKind::ConditionalPut, 0, FaultMode::Clean);
    faulty
        .append(vec![sample_rows(100, 15)], &per_file(10))
        .await
        .unwrap_err();
    let mut faulty = rig.open_faulty().await.unwrap();
    rig.fault
        .fail_nth(CallKind::ConditionalPut, 0, FaultMode::Clean);
    faulty.delete("id = 13").await.unwrap_err();
    let orphans = rig
        .open_clean()
        .await
        .unwrap()
        .list_orphan_files(Duration::ZERO)
        .await
        .unwrap();
    // Two appended data files, a deletion file, and the two failed
    // commits' transaction files.
    assert_eq!(orphans.len(), 5, "{orphans:?}");
    orphans
}

/// Files under data/ and _deletions/.
async fn stored_files(dataset: &Dataset) -> Vec<RelativePath> {
    let mut files = Vec::new();
    for dir in ["data", "_deletions", "_transactions"] {
        let prefix = RelativePath::parse(dir).unwrap();
        files.extend(
            dataset
                .store()
                .list(&prefix)
                .await
                .unwrap()
                .into_iter()
                .map(|o| o.path),
        );
    }
    files.sort();
    files
}

#[rstest]
#[case::memory(RigBackend::Memory)]
#[case::local(RigBackend::Local)]
#[tokio::test]
async fn deletes_exactly_the_orphans_and_keeps_every_version_readable(#[case] backend: RigBackend) {
    let rig = FaultRig::new(backend).unwrap();
    let orphans = dataset_with_orphans(&rig).await;
    let dataset = rig.open_clean().await.unwrap();
    let all_files = stored_files(&dataset).await;
    let rows_before = rig.check_every_version_readable().await.unwrap();

    // Too young: nothing deleted.
    let report = cleanup_orphans(&dataset, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(report.deleted.is_empty());
    assert_eq!(report.kept_referenced, (all_files.len() - 5) as u64);
    assert_eq!(stored_files(&dataset).await, all_files);

    let report = cleanup_orphans(&dataset, Duration::ZERO).await.unwrap();
    assert_eq!(report.deleted, orphans);
    // 3 data files, the deletion file of version 3 and the transaction
    // files of versions 2 and 3.
    assert_eq!(report.kept_referenced, 6);
    let remaining: Vec<RelativePath> = all_files
        .into_iter()
        .filter(|f| !orphans.contains(f))
        .collect();
    assert_eq!(stored_files(&dataset).await, remaining);
    assert_eq!(
        rig.check_every_version_readable().await.unwrap(),
        rows_before
    );

    // Idempotent.
    let again = cleanup_orphans(&dataset, Duration::ZERO).await.unwrap();
    assert!(again.deleted.is_empty());
    assert_eq!(again.kept_referenced, 6);
}

#[rstest]
#[tokio::test]
async fn a_failed_delete_stops_the_cleanup_and_a_rerun_finishes_it(
    #[values(0, 1, 2)] failing_delete: u64,
    #[values(FaultMode::Clean, FaultMode::Ambiguous)] mode: FaultMode,
) {
    let rig = FaultRig::memory();
    let orphans = dataset_with_orphans(&rig).await;
    let rows_before = rig.check_every_version_readable().await.unwrap();
    let faulty = rig.open_faulty().await.unwrap();
    rig.fault.fail_nth(CallKind::Delete, failing_delete, mode);
    let err = cleanup_orphans(&faulty, Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::External { .. }), "{err}");
    assert_eq!(
        rig.check_every_version_readable().await.unwrap(),
        rows_before
    );
    let report = cleanup_orphans(&rig.open_clean().await.unwrap(), Duration::ZERO)
        .await
        .unwrap();
    // The rerun deletes what the failed run left (an ambiguous delete did delete).
    let left_by_first_run = match mode {
        FaultMode::Clean => orphans.len() as u64 - failing_delete,
        FaultMode::Ambiguous => orphans.len() as u64 - failing_delete - 1,
    };
    assert_eq!(report.deleted.len() as u64, left_by_first_run);
    assert!(rig
        .open_clean()
        .await
        .unwrap()
        .list_orphan_files(Duration::ZERO)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        rig.check_every_version_readable().await.unwrap(),
        rows_before
    );
}

#[tokio::test]
async fn an_unreadable_manifest_deletes_nothing() {
    let rig = FaultRig::memory();
    dataset_with_orphans(&rig).await;
    let dataset = rig.open_clean().await.unwrap();
    let files = stored_files(&dataset).await;
    rig.clean_store()
        .put(&manifest_path(2), Bytes::from_static(b"not a manifest"))
        .await
        .unwrap();
    let err = cleanup_orphans(&rig.open_clean().await.unwrap(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(stored_files(&dataset).await, files);
    // The latest version is untouched and still readable.
    assert_eq!(
        snapshot(&rig.open_clean().await.unwrap())
            .await
            .unwrap()
            .num_rows(),
        29
    );
}

#[tokio::test]
async fn a_failed_listing_deletes_nothing() {
    let rig = FaultRig::memory();
    dataset_with_orphans(&rig).await;
    let files = stored_files(&rig.open_clean().await.unwrap()).await;
    for index in 0..9 {
        for mode in [FaultMode::Clean, FaultMode::Ambiguous] {
            let faulty = rig.open_faulty().await.unwrap();
            rig.fault.fail_nth(CallKind::List, index, mode);
            let result = cleanup_orphans(&faulty, Duration::ZERO).await;
            assert!(result.is_err(), "list #{index} {mode:?}");
            assert_eq!(stored_files(&rig.open_clean().await.unwrap()).await, files);
        }
    }
}
