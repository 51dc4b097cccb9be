//! What one version of a dataset references: every stored file its manifest
//! names, directly or through its FRI ledger, with the size and checksum
//! recorded for it. Cleanup keeps these files; verification checks them.

use refract_core::checksum::FileChecksum;
use refract_core::Result;
use refract_ledger::Mapping;
use serde::Serialize;

use crate::commit::fri_entry::{is_fri_entry, load_ledger_of};
use crate::format::Manifest;
use crate::io::paths::{index_dir, row_map_path, transaction_file_path};
use crate::io::{DatasetStore, RelativePath};
use crate::transaction::Operation;

/// What a referenced file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A fragment's Lance data file.
    Data,
    /// A fragment's deletion file.
    Deletion,
    /// A file of a user index segment.
    IndexSegment,
    /// The external content of the FRI ledger.
    FriLedger,
    /// A stable-partition row map.
    RowMap,
    /// Lance's transaction file of the version (`_transactions/`).
    Transaction,
}

/// One file a version references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferencedFile {
    /// Path relative to the dataset root.
    pub path: RelativePath,
    /// What the file is.
    pub kind: FileKind,
    /// The size the metadata records, when it records one.
    pub size_bytes: Option<u64>,
    /// The checksum the metadata records (absent for files written before
    /// checksums).
    pub checksum: Option<FileChecksum>,
}

/// Everything one version references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionReferences {
    /// Files named with their path, in manifest order (data and deletion
    /// files by fragment, then index files, then row maps).
    pub files: Vec<ReferencedFile>,
    /// The directory of every index segment (`_indices/<uuid>/`): segments
    /// written before checksums do not list their files.
    pub index_dirs: Vec<RelativePath>,
    /// Index segments that do not list their files (written before checksums).
    pub unlisted_segments: u64,
}

/// The files `manifest` references through `store` (its FRI ledger is read
/// to find the row maps the history still needs).
///
/// # Errors
/// As loading the ledger: Corrupt or NotFound for a damaged or missing
/// external ledger, External on store failures.
pub async fn version_references(
    store: &DatasetStore,
    manifest: &Manifest,
) -> Result<VersionReferences> {
    let mut references = VersionReferences::default();
    for fragment in &manifest.fragments {
        references
            .files
            .extend(fragment.files.iter().map(|file| ReferencedFile {
                path: file.path.clone(),
                kind: FileKind::Data,
                size_bytes: Some(file.size_bytes),
                checksum: file.checksum.clone(),
            }));
        if let Some(deletion) = &fragment.deletion_file {
            references.files.push(ReferencedFile {
                path: deletion.path.clone(),
                kind: FileKind::Deletion,
                size_bytes: None,
                checksum: deletion.checksum.clone(),
            });
        }
    }
    for index in &manifest.indices {
        references.index_dirs.push(index_dir(&index.uuid));
        let kind = if is_fri_entry(index) {
            FileKind::FriLedger
        } else {
            if index.files.is_empty() {
                references.unlisted_segments += 1;
            }
            FileKind::IndexSegment
        };
        references
            .files
            .extend(index.files.iter().map(|file| ReferencedFile {
                path: file.path.clone(),
                kind,
                size_bytes: Some(file.size_bytes),
                checksum: Some(file.checksum.clone()),
            }));
        references
            .files
            .extend(
                index
                    .lance
                    .unverified_files
                    .iter()
                    .map(|(path, size)| ReferencedFile {
                        path: path.clone(),
                        kind,
                        size_bytes: Some(*size),
                        checksum: None,
                    }),
            );
    }
    if !manifest.lance.transaction_file.is_empty() {
        references.files.push(ReferencedFile {
            path: transaction_file_path(&manifest.lance.transaction_file)?,
            kind: FileKind::Transaction,
            size_bytes: None,
            checksum: manifest.lance.transaction_file_checksum.clone(),
        });
    }
    if let Some(txn) = &manifest.transaction {
        if let Operation::Partition {
            map_id: Some(map_id),
            map_size_bytes,
            map_checksum,
            ..
        } = &txn.operation
        {
            push_row_map(
                &mut references,
                row_map_path(map_id),
                *map_size_bytes,
                map_checksum,
            );
        }
    }
    if let Some((_, ledger)) = load_ledger_of(store, manifest).await? {
        for transition in ledger.transitions() {
            if let Mapping::StablePartition {
                map_id,
                map_size_bytes,
                map_checksum,
            } = transition.mapping()
            {
                push_row_map(
                    &mut references,
                    row_map_path(map_id),
                    *map_size_bytes,
                    map_checksum,
                );
            }
        }
    }
    Ok(references)
}

/// Adds a row map unless it is already listed (a partition's own version
/// names it twice: in its transaction and in its ledger).
fn push_row_map(
    references: &mut VersionReferences,
    path: RelativePath,
    size_bytes: u64,
    checksum: &Option<FileChecksum>,
) {
    if references.files.iter().any(|file| file.path == path) {
        return;
    }
    references.files.push(ReferencedFile {
        path,
        kind: FileKind::RowMap,
        size_bytes: (size_bytes > 0).then_some(size_bytes),
        checksum: checksum.clone(),
    });
}
