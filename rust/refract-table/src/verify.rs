//! Verifying a dataset's stored files against the checksums recorded for
//! them: every file the current version (or every version) references is
//! read whole, in pieces, and compared block by block.

use std::collections::BTreeMap;

use futures::StreamExt;
use refract_core::Result;
use serde::Serialize;

use crate::dataset::{list_versions, Dataset};
use crate::io::{manifest_path, RecordedFile};
use crate::references::{version_references, FileKind, ReferencedFile};

/// Files read at once.
const FILES_IN_FLIGHT: usize = 8;

/// What [`verify_dataset`] checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Every listed version, not only the dataset's own.
    pub all_versions: bool,
}

/// One damaged, missing or unreadable file, or an index segment that does
/// not match its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyProblem {
    /// Dataset-relative path (a directory for an index segment).
    pub file: String,
    /// What the file is (`None` for a manifest).
    pub kind: Option<FileKind>,
    /// The error, one line.
    pub error: String,
}

/// What [`verify_dataset`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The versions whose files were checked.
    pub versions: Vec<u64>,
    /// Files read whole and matched against their checksums.
    pub files_verified: u64,
    /// Bytes of those files.
    pub bytes_verified: u64,
    /// Files written before checksums: only their presence (and recorded
    /// size) could be checked.
    pub files_without_checksum: u64,
    /// Index segments written before checksums, whose files are not listed
    /// (not checked).
    pub segments_without_file_list: u64,
    /// What the deep check of index segments against their data found
    /// (`refract_reader::verify_index_data`); `None` when it did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_data: Option<IndexDataReport>,
    /// Every problem, sorted by file.
    pub problems: Vec<VerifyProblem>,
}

/// The deep check's counts: segments compared entry for entry with the data
/// of the fragments they serve. Its problems join [`VerifyReport::problems`],
/// named by segment directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IndexDataReport {
    /// Segments whose every entry was compared with the data.
    pub segments_checked: u64,
    /// Entries (key and row pairs) the data implies for those segments.
    pub entries_checked: u64,
    /// Segments that could not be compared.
    pub segments_unchecked: Vec<UncheckedSegment>,
}

/// A segment the deep check could not compare, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UncheckedSegment {
    /// The segment's directory.
    pub segment: String,
    /// Why: a type that cannot list its entries, one not registered here,
    /// or a damaged file it depends on (reported on its own).
    pub reason: String,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Progress of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyProgress {
    /// Files checked so far.
    pub files_done: u64,
    /// Files to check.
    pub files_total: u64,
    /// Bytes read so far.
    pub bytes_done: u64,
}

/// Checks every file the dataset's version (or, with
/// [`VerifyOptions::all_versions`], every listed version) references
/// against its recorded size and checksum, reading up to eight files at a
/// time. Problems are collected, not returned as errors: a damaged manifest,
/// a missing file or a checksum mismatch each become one [`VerifyProblem`].
///
/// # Errors
/// Only when the versions cannot be listed (store failure).
pub async fn verify_dataset(
    dataset: &Dataset,
    options: VerifyOptions,
    progress: Option<&(dyn Fn(VerifyProgress) + Send + Sync)>,
) -> Result<VerifyReport> {
    let mut report = VerifyReport {
        versions: if options.all_versions {
            list_versions(dataset.store()).await?
        } else {
            vec![dataset.version()]
        },
        ..VerifyReport::default()
    };
    let mut files: BTreeMap<String, ReferencedFile> = BTreeMap::new();
    let mut problems: BTreeMap<String, VerifyProblem> = BTreeMap::new();
    for version in report.versions.clone() {
        let manifest = match dataset.load_manifest(version).await {
            Ok(manifest) => manifest,
            Err(err) => {
                let file = manifest_path(version).to_string();
                problems.insert(file.clone(), problem(file, None, &err));
                continue;
            }
        };
        match version_references(dataset.store(), &manifest).await {
            Ok(references) => {
                report.segments_without_file_list += references.unlisted_segments;
                for file in references.files {
                    files.entry(file.path.to_string()).or_insert(file);
                }
            }
            Err(err) => {
                let file = format!("FRI ledger of version {version}");
                problems.insert(file.clone(), problem(file, Some(FileKind::FriLedger), &err));
            }
        }
    }
    let files_total = files.len() as u64;
    let store = dataset.store();
    let mut checks = futures::stream::iter(files.into_values())
        .map(|file| async move {
            let outcome = check_file(store, &file).await;
            (file, outcome)
        })
        .buffer_unordered(FILES_IN_FLIGHT);
    let mut files_done = 0;
    while let Some((file, outcome)) = checks.next().await {
        files_done += 1;
        match outcome {
            Ok(Checked::Verified(bytes)) => {
                report.files_verified += 1;
                report.bytes_verified += bytes;
            }
            Ok(Checked::WithoutChecksum) => report.files_without_checksum += 1,
            Err(err) => {
                let name = file.path.to_string();
                problems.insert(name.clone(), problem(name, Some(file.kind), &err));
            }
        }
        if let Some(progress) = progress {
            progress(VerifyProgress {
                files_done,
                files_total,
                bytes_done: report.bytes_verified,
            });
        }
    }
    report.problems = problems.into_values().collect();
    Ok(report)
}

/// How a file checked out.
enum Checked {
    /// Read whole and matched; its size.
    Verified(u64),
    /// Present (with the recorded size, if any); no checksum to compare.
    WithoutChecksum,
}

async fn check_file(store: &crate::io::DatasetStore, file: &ReferencedFile) -> Result<Checked> {
    match (&file.checksum, file.size_bytes) {
        (Some(checksum), Some(size_bytes)) => {
            store
                .verify_file(&RecordedFile {
                    path: file.path.clone(),
                    size_bytes,
                    checksum: checksum.clone(),
                })
                .await?;
            Ok(Checked::Verified(size_bytes))
        }
        (Some(checksum), None) => Ok(Checked::Verified(
            store.verify_checksum(&file.path, checksum).await?,
        )),
        (None, expected) => {
            let size = store.head(&file.path).await?;
            if let Some(expected) = expected.filter(|expected| *expected != size) {
                return Err(refract_core::Error::corrupt(
                    file.path.to_string(),
                    format!("file is {size} bytes but {expected} bytes were recorded"),
                ));
            }
            Ok(Checked::WithoutChecksum)
        }
    }
}

fn problem(file: String, kind: Option<FileKind>, err: &refract_core::Error) -> VerifyProblem {
    VerifyProblem {
        file,
        kind,
        error: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::dataset::OpenOptions;
    use crate::testing::{sample_rows, sample_schema};
    use crate::WriteOptions;

    async fn table(uri: &str) -> Dataset {
        let mut dataset = Dataset::create(uri, sample_schema(), OpenOptions::default())
            .await
            .unwrap();
        let options = WriteOptions {
            max_rows_per_file: 100,
            ..WriteOptions::default()
        };
        dataset
            .append(vec![sample_rows(0, 300)], &options)
            .await
            .unwrap();
        dataset.delete("id < 10").await.unwrap();
        dataset
    }

    #[tokio::test]
    async fn a_clean_table_verifies_every_file() {
        let uri = format!("memory://verify-{}", uuid::Uuid::new_v4());
        let dataset = table(&uri).await;
        let seen = std::sync::Mutex::new(Vec::new());
        let record = |p: VerifyProgress| seen.lock().unwrap().push(p.files_done);
        let report = verify_dataset(&dataset, VerifyOptions::default(), Some(&record))
            .await
            .unwrap();
        assert!(report.is_clean(), "{report:?}");
        // Three data files, one deletion file and the transaction file.
        assert_eq!(report.files_verified, 5, "{report:?}");
        assert_eq!(*seen.lock().unwrap(), vec![1, 2, 3, 4, 5]);
        let data: u64 = dataset.fragments().iter().map(|f| f.size_bytes()).sum();
        assert!(report.bytes_verified > data, "{report:?}");
    }

    #[tokio::test]
    async fn damaged_and_missing_files_are_each_reported() {
        let uri = format!("memory://verify-{}", uuid::Uuid::new_v4());
        let dataset = table(&uri).await;
        let store = dataset.store();
        let first = dataset.fragments()[0].files[0].path.clone();
        let mut bytes = store.get(&first).await.unwrap().to_vec();
        bytes[100] ^= 0x40;
        store.put(&first, Bytes::from(bytes)).await.unwrap();
        let deletion = dataset.fragments()[0].deletion_file.clone().unwrap().path;
        store.delete(&deletion).await.unwrap();
        let report = verify_dataset(&dataset, VerifyOptions::default(), None)
            .await
            .unwrap();
        let found: Vec<(&str, Option<FileKind>)> = report
            .problems
            .iter()
            .map(|p| (p.file.as_str(), p.kind))
            .collect();
        let mut expected = vec![
            (deletion.as_str(), Some(FileKind::Deletion)),
            (first.as_str(), Some(FileKind::Data)),
        ];
        expected.sort();
        assert_eq!(found, expected);
        let data = report
            .problems
            .iter()
            .find(|p| p.file == first.as_str())
            .unwrap();
        assert!(
            data.error.contains("checksum mismatch in block 0"),
            "{}",
            data.error
        );
        // The two other data files and the transaction file.
        assert_eq!(report.files_verified, 3);
    }

    #[tokio::test]
    async fn all_versions_covers_files_only_older_versions_reference() {
        let uri = format!("memory://verify-{}", uuid::Uuid::new_v4());
        let dataset = table(&uri).await;
        // Version 2 (the append) has no deletion file; version 3 replaced
        // nothing, so both reference the same data files.
        let report = verify_dataset(&dataset, VerifyOptions { all_versions: true }, None)
            .await
            .unwrap();
        assert_eq!(report.versions, vec![1, 2, 3]);
        // Data and deletion files, and the transaction files of versions 2 and 3.
        assert_eq!(report.files_verified, 6);
        // A damaged old manifest is one problem; the rest still verifies.
        dataset
            .store()
            .put(&manifest_path(2), Bytes::from_static(b"RFM1garbage"))
            .await
            .unwrap();
        let fresh = Dataset::open(&uri).await.unwrap();
        let report = verify_dataset(&fresh, VerifyOptions { all_versions: true }, None)
            .await
            .unwrap();
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert_eq!(report.problems[0].file, manifest_path(2).to_string());
        // Version 2's transaction file is known only through its manifest.
        assert_eq!(report.files_verified, 5);
    }
}
