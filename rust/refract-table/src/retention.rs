//! Version retention: expiring old versions and deleting the files only they
//! referenced.
//!
//! A version is *retained* when it is the latest, one of the newest
//! `keep_last`, committed less than `older_than` ago, or tagged (with
//! `keep_tagged`); every other version *expires*. Cleanup deletes every file
//! that some expired version references and no retained version does — data,
//! deletion and index files, external FRI ledgers, row maps — and then the
//! expired manifests.
//!
//! Crash safety comes from the order. Files go first, manifests last, so as
//! long as an expired version's manifest exists, the files only it references
//! can be found again: a crash or a failed delete at any point leaves every
//! retained version intact (none of its files is ever a candidate), and a
//! rerun recomputes the same candidates minus what is already gone. A commit
//! that lands meanwhile is read before anything is deleted, and whatever it
//! references is kept; new commits build on the latest version, which is
//! retained, so they cannot bring back a file only expired versions held
//! (except `restore` of an expiring version, which must not race its own
//! cleanup).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use refract_core::{Error, Result};
use serde::Serialize;

use crate::cleanup::{is_referenced, referenced_paths};
use crate::dataset::{list_versions, Dataset};
use crate::io::paths::{COLLECTABLE_DIRS, FRI_DIR, INDICES_DIR, VERSIONS_DIR};
use crate::io::{manifest_path, RelativePath};
use crate::references::{version_references, FileKind};
use crate::tags::list_tags_in;

/// Which versions [`cleanup_old_versions`] keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Versions committed less than this long ago are kept; `None`: age
    /// keeps nothing by itself.
    pub older_than: Option<Duration>,
    /// The newest this many versions are kept (at least 1); `None`: only the
    /// latest.
    pub keep_last: Option<u64>,
    /// Tagged versions are kept.
    pub keep_tagged: bool,
    /// List what would be removed without removing it.
    pub dry_run: bool,
}

impl RetentionPolicy {
    /// Checks the policy keeps at least the latest version.
    ///
    /// # Errors
    /// InvalidInput for `keep_last: Some(0)` or an `older_than` too large to
    /// subtract from now.
    pub fn validate(&self) -> Result<()> {
        if self.keep_last == Some(0) {
            return Err(Error::invalid_input(
                "keep_last must be at least 1: the latest version is always kept",
            ));
        }
        self.cutoff_ms().map(|_| ())
    }

    /// Commit time (ms since the epoch) at or after which a version is young.
    fn cutoff_ms(&self) -> Result<Option<i64>> {
        let Some(age) = self.older_than else {
            return Ok(None);
        };
        let cutoff = chrono::Duration::from_std(age)
            .ok()
            .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
            .ok_or_else(|| Error::invalid_input(format!("older_than {age:?} is too large")))?;
        Ok(Some(cutoff.timestamp_millis()))
    }
}

impl Default for RetentionPolicy {
    /// Keep two weeks of versions and every tagged one.
    fn default() -> Self {
        Self {
            older_than: Some(Duration::from_secs(14 * 24 * 3600)),
            keep_last: None,
            keep_tagged: true,
            dry_run: false,
        }
    }
}

/// One removed (or, in a dry run, removable) file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemovedFile {
    /// Dataset-relative path.
    pub path: String,
    /// What it was; `None` for a manifest.
    pub kind: Option<FileKind>,
    /// Its size.
    pub size_bytes: u64,
}

/// What [`cleanup_old_versions`] did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    /// Versions kept, ascending.
    pub retained_versions: Vec<u64>,
    /// Versions expired (their manifests removed), ascending.
    pub expired_versions: Vec<u64>,
    /// Files removed, data and index files first, then the manifests.
    pub removed: Vec<RemovedFile>,
    /// Bytes of those files.
    pub bytes_freed: u64,
    /// Nothing was deleted.
    pub dry_run: bool,
}

impl RetentionReport {
    /// True when there was nothing to remove.
    pub fn is_noop(&self) -> bool {
        self.removed.is_empty()
    }
}

/// Expires the versions `policy` does not keep and deletes every file only
/// they referenced, then their manifests (see the module docs for why in
/// that order).
///
/// # Errors
/// InvalidInput for `keep_last: Some(0)`; Corrupt when a manifest or ledger
/// cannot be read (nothing is deleted then: its references are unknown);
/// External when a list or delete fails (what was deleted stays deleted, every
/// retained version stays readable, and a rerun finishes the job).
pub async fn cleanup_old_versions(
    dataset: &Dataset,
    policy: &RetentionPolicy,
) -> Result<RetentionReport> {
    policy.validate()?;
    let store = dataset.store();
    let versions = list_versions(store).await?;
    let Some(&latest) = versions.last() else {
        return Err(Error::not_found(format!("no dataset at {}", dataset.uri())));
    };
    let tagged: BTreeSet<u64> = if policy.keep_tagged {
        list_tags_in(store).await?.into_values().collect()
    } else {
        BTreeSet::new()
    };
    let cutoff_ms = policy.cutoff_ms()?;
    let newest_kept = policy.keep_last.map_or(latest, |n| {
        versions[versions.len().saturating_sub(n as usize)]
    });
    let mut report = RetentionReport {
        dry_run: policy.dry_run,
        ..RetentionReport::default()
    };
    let mut expired_files: BTreeMap<String, FileKind> = BTreeMap::new();
    let mut expired_dirs: BTreeSet<String> = BTreeSet::new();
    for &version in &versions {
        let manifest = dataset.load_manifest(version).await?;
        let young = cutoff_ms.is_some_and(|cutoff| manifest.timestamp_ms >= cutoff);
        if version >= newest_kept || young || tagged.contains(&version) {
            report.retained_versions.push(version);
            continue;
        }
        report.expired_versions.push(version);
        let references = version_references(store, &manifest).await?;
        for file in references.files {
            expired_files.insert(file.path.to_string(), file.kind);
        }
        expired_dirs.extend(references.index_dirs.iter().map(|d| d.to_string()));
    }
    if report.expired_versions.is_empty() {
        return Ok(report);
    }
    let mut kept = referenced_paths(dataset, &report.retained_versions).await?;
    let candidates = expired_only_files(dataset, &expired_files, &expired_dirs).await?;
    // A commit that landed while we read: whatever it references stays.
    let now_listed = list_versions(store).await?;
    let landed: Vec<u64> = now_listed
        .iter()
        .copied()
        .filter(|v| !versions.contains(v))
        .collect();
    if !landed.is_empty() {
        kept.extend(referenced_paths(dataset, &landed).await?);
    }
    // Only here, after the last listing of versions, is `kept` complete.
    for (path, file) in candidates {
        if !is_referenced(&kept, &path) {
            report.removed.push(file);
        }
    }
    let manifest_sizes: BTreeMap<RelativePath, u64> = store
        .list(&RelativePath::parse(VERSIONS_DIR)?)
        .await?
        .into_iter()
        .map(|object| (object.path, object.size))
        .collect();
    for &version in &report.expired_versions {
        let path = manifest_path(version);
        let Some(&size_bytes) = manifest_sizes.get(&path) else {
            continue;
        };
        report.removed.push(RemovedFile {
            path: path.to_string(),
            kind: None,
            size_bytes,
        });
    }
    report.bytes_freed = report.removed.iter().map(|f| f.size_bytes).sum();
    if policy.dry_run {
        return Ok(report);
    }
    // Files first, manifests last (in `removed` order): see the module docs.
    for file in &report.removed {
        store.delete(&RelativePath::parse(&file.path)?).await?;
    }
    Ok(report)
}

/// The stored files under the data, deletion, index and row-map directories
/// that expired versions reference (by path, or as a file of an expired
/// index or row-map directory), with their listed sizes. Files already gone
/// are left out; whether a retained version still needs one is the caller's
/// check.
async fn expired_only_files(
    dataset: &Dataset,
    expired_files: &BTreeMap<String, FileKind>,
    expired_dirs: &BTreeSet<String>,
) -> Result<Vec<(RelativePath, RemovedFile)>> {
    let mut out = Vec::new();
    for dir in COLLECTABLE_DIRS {
        for object in dataset.store().list(&RelativePath::parse(dir)?).await? {
            let path = object.path.as_str();
            let kind = match expired_files.get(path) {
                Some(kind) => *kind,
                None if dir == INDICES_DIR && in_dir(expired_dirs, path) => FileKind::IndexSegment,
                None if dir == FRI_DIR && row_map_dir_expired(expired_files, path) => {
                    FileKind::RowMap
                }
                None => continue,
            };
            let file = RemovedFile {
                path: path.to_string(),
                kind: Some(kind),
                size_bytes: object.size,
            };
            out.push((object.path, file));
        }
    }
    Ok(out)
}

/// True when `path` lies in one of `dirs` (each `_indices/<uuid>/`).
fn in_dir(dirs: &BTreeSet<String>, path: &str) -> bool {
    let mut segments = path.splitn(3, '/');
    match (segments.next(), segments.next()) {
        (Some(top), Some(id)) => dirs.contains(&format!("{top}/{id}/")),
        _ => false,
    }
}

/// True when `path` (under `_fri/`) shares the directory of an expired row map.
fn row_map_dir_expired(expired_files: &BTreeMap<String, FileKind>, path: &str) -> bool {
    let Some((dir, _)) = path.rsplit_once('/') else {
        return false;
    };
    let prefix = format!("{dir}/");
    expired_files
        .range(prefix.clone()..)
        .take_while(|(p, _)| p.starts_with(&prefix))
        .any(|(_, kind)| *kind == FileKind::RowMap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::OpenOptions;
    use crate::tags::create_tag;
    use crate::testing::{sample_rows, sample_schema, snapshot};
    use crate::WriteOptions;

    /// v1 create, v2 append (3 data files), v3 and v4 deletes (a deletion
    /// file each, the second replacing the first), v5 a restore of v2.
    async fn history() -> Dataset {
        let uri = format!("memory://retention-{}", uuid::Uuid::new_v4());
        let mut dataset = Dataset::create(&uri, sample_schema(), OpenOptions::default())
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
        dataset.delete("id < 20").await.unwrap();
        let mut old = dataset.checkout_version(2).await.unwrap();
        old.restore().await.unwrap();
        assert_eq!(old.version(), 5);
        old
    }

    fn only_latest() -> RetentionPolicy {
        RetentionPolicy {
            older_than: None,
            keep_last: Some(1),
            ..RetentionPolicy::default()
        }
    }

    fn deletion_files(dataset: &Dataset) -> Vec<String> {
        dataset
            .fragments()
            .iter()
            .filter_map(|f| f.deletion_file.as_ref().map(|d| d.path.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn expired_versions_and_the_files_only_they_held_go() {
        let dataset = history().await;
        let v3 = deletion_files(&dataset.checkout_version(3).await.unwrap());
        let v4 = deletion_files(&dataset.checkout_version(4).await.unwrap());
        let before = snapshot(&dataset).await.unwrap();
        let report = cleanup_old_versions(&dataset, &only_latest())
            .await
            .unwrap();
        assert_eq!(report.retained_versions, vec![5]);
        assert_eq!(report.expired_versions, vec![1, 2, 3, 4]);
        let mut expected: Vec<(String, Option<FileKind>)> = v3
            .iter()
            .chain(&v4)
            .map(|p| (p.clone(), Some(FileKind::Deletion)))
            .collect();
        for version in 2..=4 {
            let expired = dataset.checkout_version(version).await.unwrap();
            let name = &expired.manifest().lance.transaction_file;
            expected.push((format!("_transactions/{name}"), Some(FileKind::Transaction)));
        }
        expected.sort();
        expected.extend((1..=4).map(|v| (manifest_path(v).to_string(), None)));
        let removed: Vec<(String, Option<FileKind>)> = report
            .removed
            .iter()
            .map(|f| (f.path.clone(), f.kind))
            .collect();
        assert_eq!(removed, expected);
        assert_eq!(
            report.bytes_freed,
            report.removed.iter().map(|f| f.size_bytes).sum::<u64>()
        );
        assert!(report.removed.iter().all(|f| f.size_bytes > 0));
        // The latest version reads the same; the expired ones are gone.
        let fresh = Dataset::open(dataset.uri()).await.unwrap();
        assert_eq!(snapshot(&fresh).await.unwrap(), before);
        assert_eq!(list_versions(fresh.store()).await.unwrap(), vec![5]);
        for path in v3.iter().chain(&v4) {
            let path = RelativePath::parse(path).unwrap();
            assert!(matches!(
                fresh.store().head(&path).await,
                Err(Error::NotFound { .. })
            ));
        }
        // Execute until no-op: a second run removes nothing.
        let again = cleanup_old_versions(&fresh, &only_latest()).await.unwrap();
        assert!(again.is_noop(), "{again:?}");
        assert!(again.expired_versions.is_empty());
    }

    #[tokio::test]
    async fn a_dry_run_lists_exactly_what_a_run_removes() {
        let dataset = history().await;
        let dry = cleanup_old_versions(
            &dataset,
            &RetentionPolicy {
                dry_run: true,
                ..only_latest()
            },
        )
        .await
        .unwrap();
        assert!(dry.dry_run);
        assert_eq!(list_versions(dataset.store()).await.unwrap().len(), 5);
        let real = cleanup_old_versions(&dataset, &only_latest())
            .await
            .unwrap();
        assert_eq!(
            RetentionReport {
                dry_run: true,
                ..real
            },
            dry
        );
    }

    #[tokio::test]
    async fn tagged_recent_and_last_n_versions_stay_readable() {
        let dataset = history().await;
        create_tag(&dataset, "after-first-delete", 3).await.unwrap();
        let v3_rows = snapshot(&dataset.checkout_version(3).await.unwrap())
            .await
            .unwrap();
        let v4_only = deletion_files(&dataset.checkout_version(4).await.unwrap());
        let report = cleanup_old_versions(&dataset, &only_latest())
            .await
            .unwrap();
        assert_eq!(report.retained_versions, vec![3, 5]);
        assert_eq!(report.expired_versions, vec![1, 2, 4]);
        let deleted: Vec<&str> = report
            .removed
            .iter()
            .filter(|f| f.kind.is_some_and(|kind| kind != FileKind::Transaction))
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(deleted, v4_only);
        let tagged = Dataset::open(dataset.uri())
            .await
            .unwrap()
            .checkout_tag("after-first-delete")
            .await
            .unwrap();
        assert_eq!(snapshot(&tagged).await.unwrap(), v3_rows);

        // Young versions and the last N are kept.
        let dataset = history().await;
        let young = RetentionPolicy {
            older_than: Some(Duration::from_secs(3600)),
            keep_last: None,
            ..RetentionPolicy::default()
        };
        let report = cleanup_old_versions(&dataset, &young).await.unwrap();
        assert!(report.is_noop() && report.expired_versions.is_empty());
        let last_two = RetentionPolicy {
            keep_last: Some(2),
            ..only_latest()
        };
        let report = cleanup_old_versions(&dataset, &last_two).await.unwrap();
        assert_eq!(report.retained_versions, vec![4, 5]);
    }

    #[tokio::test]
    async fn keeping_no_version_is_refused() {
        let dataset = history().await;
        let err = cleanup_old_versions(
            &dataset,
            &RetentionPolicy {
                keep_last: Some(0),
                ..RetentionPolicy::default()
            },
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: keep_last must be at least 1: the latest version is always kept"
        );
        assert_eq!(list_versions(dataset.store()).await.unwrap().len(), 5);
    }
}
