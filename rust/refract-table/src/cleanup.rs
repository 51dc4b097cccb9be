//! Deleting orphaned files: data, deletion, index and row-map files that no
//! committed version references, left behind by failed or abandoned writes.
//!
//! Safety rests on three rules. Only files older than `older_than` are
//! candidates (younger ones may belong to a commit still in flight). The
//! candidate list comes from [`Dataset::list_orphan_files`], which reads every
//! committed manifest and fails rather than guesses when one is unreadable.
//! Right before deleting, the versions are listed again and, if any version
//! was committed meanwhile, the orphan listing is recomputed and only files
//! orphaned in both listings are deleted, so a commit that raced the cleanup
//! never loses a file it references.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use refract_core::{Error, Result};

use crate::dataset::{list_versions, Dataset};
use crate::io::paths::{COLLECTABLE_DIRS, FRI_DIR, INDICES_DIR};
use crate::io::RelativePath;
use crate::references::{version_references, FileKind};

/// What [`cleanup_orphans`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Orphaned files deleted, sorted by path.
    pub deleted: Vec<RelativePath>,
    /// Files under the scanned directories that a committed version references
    /// (and so were kept).
    pub kept_referenced: u64,
}

/// Deletes the files under `data/`, `_deletions/`, `_indices/` and `_fri/`
/// (stable-partition row maps) that no committed version of `dataset`
/// references — through its fragments, index entries, transaction or FRI
/// ledger — and that are older than `older_than`. A file a live version references is never deleted; an
/// unreadable manifest aborts the cleanup before anything is deleted.
///
/// A commit that takes longer than `older_than` between writing its files and
/// publishing its manifest can lose its files: choose `older_than` well above
/// the longest write (hours, not seconds, in production).
///
/// # Errors
/// InvalidInput when `older_than` is too large; Corrupt, NotFound or
/// NotSupported when a committed manifest or FRI ledger cannot be read (before
/// anything is deleted); External for store failures, listing or deleting.
pub async fn cleanup_orphans(dataset: &Dataset, older_than: Duration) -> Result<CleanupReport> {
    let store = dataset.store();
    let versions_before = list_versions(store).await?;
    let mut orphans: BTreeSet<RelativePath> = dataset
        .list_orphan_files(older_than)
        .await?
        .into_iter()
        .collect();
    let mut referenced = referenced_paths(dataset, &versions_before).await?;
    orphans.extend(unreferenced_row_maps(dataset, &referenced, older_than).await?);
    let versions_after = list_versions(store).await?;
    if versions_after != versions_before {
        // A commit landed meanwhile: keep only files orphaned in both listings.
        let again: BTreeSet<RelativePath> = dataset
            .list_orphan_files(older_than)
            .await?
            .into_iter()
            .collect();
        referenced = referenced_paths(dataset, &versions_after).await?;
        orphans.retain(|path| again.contains(path) || path.top_level_dir() == FRI_DIR);
    }
    // Never delete what our own reading of the manifests references.
    orphans.retain(|path| !is_referenced(&referenced, path));
    let kept_referenced = count_referenced_files(dataset, &referenced).await?;
    let mut deleted = Vec::with_capacity(orphans.len());
    for path in orphans {
        store.delete(&path).await?;
        deleted.push(path);
    }
    Ok(CleanupReport {
        deleted,
        kept_referenced,
    })
}

/// Files under `_fri/` older than `older_than` whose row-map directory no
/// version references.
async fn unreferenced_row_maps(
    dataset: &Dataset,
    referenced: &HashSet<String>,
    older_than: Duration,
) -> Result<Vec<RelativePath>> {
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(older_than)
            .map_err(|_| Error::invalid_input("older_than is too large"))?;
    let listed = dataset.store().list(&RelativePath::parse(FRI_DIR)?).await?;
    Ok(listed
        .into_iter()
        .filter(|object| object.last_modified < cutoff && !is_referenced(referenced, &object.path))
        .map(|object| object.path)
        .collect())
}

/// Files, and index and row-map directories (with a trailing `/`), that
/// `versions` reference.
pub(crate) async fn referenced_paths(
    dataset: &Dataset,
    versions: &[u64],
) -> Result<HashSet<String>> {
    let mut referenced = HashSet::new();
    for version in versions {
        let manifest = dataset.load_manifest(*version).await?;
        let references = version_references(dataset.store(), &manifest).await?;
        for file in references.files {
            let key = match (file.kind, file.path.as_str().rsplit_once('/')) {
                // A row map is kept with everything in its directory.
                (FileKind::RowMap, Some((dir, _))) => format!("{dir}/"),
                _ => file.path.as_str().to_string(),
            };
            referenced.insert(key);
        }
        referenced.extend(
            references
                .index_dirs
                .iter()
                .map(|dir| dir.as_str().to_string()),
        );
    }
    Ok(referenced)
}

/// True when `path` is referenced directly or lies in a referenced index or
/// row-map directory.
pub(crate) fn is_referenced(referenced: &HashSet<String>, path: &RelativePath) -> bool {
    if referenced.contains(path.as_str()) {
        return true;
    }
    let mut segments = path.as_str().splitn(3, '/');
    match (segments.next(), segments.next()) {
        (Some(dir @ (INDICES_DIR | FRI_DIR)), Some(id)) => {
            referenced.contains(&format!("{dir}/{id}/"))
        }
        _ => false,
    }
}

/// Files under the scanned directories that `referenced` covers.
async fn count_referenced_files(dataset: &Dataset, referenced: &HashSet<String>) -> Result<u64> {
    let mut count = 0u64;
    for dir in COLLECTABLE_DIRS {
        for object in dataset.store().list(&RelativePath::parse(dir)?).await? {
            if is_referenced(referenced, &object.path) {
                count += 1;
            }
        }
    }
    Ok(count)
}
