//! Version history: listing, restore, and finding orphaned files.

use std::collections::HashSet;
use std::time::Duration;

use refract_core::{Error, Result};

use super::{list_versions, Dataset, OpenOptions};
use crate::format::Manifest;
use crate::io::paths::{DATA_DIR, DELETIONS_DIR, INDICES_DIR, TRANSACTIONS_DIR};
use crate::io::RelativePath;

/// One committed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    /// The version number.
    pub version: u64,
    /// Commit time, ms since the epoch.
    pub timestamp_ms: i64,
    /// The operation that produced it ("Create" for version 1).
    pub operation: String,
}

/// One listed version of [`Dataset::version_history`]: readable, or not with
/// the reason.
#[derive(Debug)]
pub enum VersionEntry {
    /// The manifest loads and validates.
    Readable(VersionInfo),
    /// The manifest is listed but cannot be used (corrupt, missing, escaping
    /// paths, unsupported); `error` names the version and its manifest file.
    Unreadable {
        /// The version number.
        version: u64,
        /// Why its manifest cannot be used.
        error: Error,
    },
}

impl VersionEntry {
    /// The version number.
    pub fn version(&self) -> u64 {
        match self {
            VersionEntry::Readable(info) => info.version,
            VersionEntry::Unreadable { version, .. } => *version,
        }
    }
}

impl Dataset {
    /// Every committed version, ascending; fails on the first manifest that
    /// cannot be read (the error names its version and file). See
    /// [`Self::version_history`] to list past unreadable versions.
    ///
    /// # Errors
    /// NotFound or Corrupt (naming the version and its file) for the
    /// first manifest that cannot be read; External on store failures.
    pub async fn versions(&self) -> Result<Vec<VersionInfo>> {
        let mut infos = Vec::new();
        for version in list_versions(&self.store).await? {
            infos.push(version_info(
                &*self.load_manifest_with_transaction(version).await?,
            ));
        }
        Ok(infos)
    }

    /// Every committed version, ascending, each readable or unreadable with
    /// the reason: one damaged manifest does not hide the others. Only a
    /// failure to reach the store (External) fails the whole listing, since
    /// it says nothing about any one version.
    ///
    /// # Errors
    /// External when listing or reading from the store fails; PathEscape for a
    /// listed key that is not a relative path.
    pub async fn version_history(&self) -> Result<Vec<VersionEntry>> {
        let mut entries = Vec::new();
        for version in list_versions(&self.store).await? {
            entries.push(match self.load_manifest_with_transaction(version).await {
                Ok(manifest) => VersionEntry::Readable(version_info(&manifest)),
                Err(err @ Error::External { .. }) => return Err(err),
                Err(error) => VersionEntry::Unreadable { version, error },
            });
        }
        Ok(entries)
    }

    /// [`Self::version_history`] of the dataset at `uri`, without loading
    /// any manifest first: it works when the latest version is unreadable.
    ///
    /// # Errors
    /// InvalidInput for a bad URI or storage option; NotFound when no version is
    /// listed there (or a local directory is missing); else those of
    /// [`Self::version_history`].
    pub async fn version_history_at(uri: &str, options: OpenOptions) -> Result<Vec<VersionEntry>> {
        let probe = Dataset::probe(uri, options).await?;
        if list_versions(&probe.store).await?.is_empty() {
            return Err(Error::not_found(format!("no dataset at {}", probe.uri())));
        }
        probe.version_history().await
    }

    /// Data, deletion and index files that no version's manifest references and
    /// that are older than `older_than` (younger ones may belong to a commit in
    /// flight). Never returns a file a live version references; any unreadable
    /// manifest is an error rather than a guess.
    ///
    /// # Errors
    /// InvalidInput when `older_than` is too large; those of [`Self::versions`]
    /// for an unreadable manifest; External or PathEscape when listing fails.
    pub async fn list_orphan_files(&self, older_than: Duration) -> Result<Vec<RelativePath>> {
        let referenced = self.referenced_paths().await?;
        let cutoff = chrono::Utc::now()
            - chrono::Duration::from_std(older_than)
                .map_err(|_| Error::invalid_input("older_than is too large"))?;
        let mut orphans = Vec::new();
        for dir in [DATA_DIR, DELETIONS_DIR, INDICES_DIR, TRANSACTIONS_DIR] {
            for object in self.store.list(&RelativePath::parse(dir)?).await? {
                if object.last_modified >= cutoff
                    || crate::cleanup::is_referenced(&referenced, &object.path)
                {
                    continue;
                }
                orphans.push(object.path);
            }
        }
        orphans.sort();
        Ok(orphans)
    }

    /// Paths (files, and index and row-map directories with a trailing
    /// `/`) referenced by any version.
    async fn referenced_paths(&self) -> Result<HashSet<String>> {
        let versions = list_versions(&self.store).await?;
        crate::cleanup::referenced_paths(self, &versions).await
    }
}

/// The listing of one loaded manifest.
fn version_info(manifest: &Manifest) -> VersionInfo {
    VersionInfo {
        version: manifest.version,
        timestamp_ms: manifest.timestamp_ms,
        operation: manifest
            .transaction
            .as_ref()
            .map_or("Create", |txn| txn.operation.name())
            .to_string(),
    }
}
