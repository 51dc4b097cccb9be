//! The commit protocol.
//!
//! 1. Find the latest version (the highest `_versions/*.manifest`).
//! 2. Rebase the transaction over every version after its read version
//!    (`rebase.rs`); an incompatible change is a retryable conflict.
//! 3. Build the candidate manifest (new fragment ids from `max_fragment_id + 1`,
//!    rewrites spliced in place) and run the [`CommitHook`].
//!    The write gate (`gate.rs`) then classifies the candidate on tables tagged
//!    with the FRI flag and sets the flag pair for a version-1 FRI entry.
//! 4. Publish it with put-if-absent at `latest + 1`. Losing the race loops to 1.
//!    A put that fails *ambiguously* (the object may exist) is resolved by
//!    reading that version back: it is ours iff its transaction uuid is ours.
//!    A later attempt that finds our uuid among the intervening versions also
//!    returns that version, so a transaction is never applied twice.

pub(crate) mod build;
mod delete_rebase;
pub mod fri_entry;
mod gate;
mod group_remap;
mod rebase;
mod rewrite_rebase;

use std::sync::Arc;

use async_trait::async_trait;
use refract_core::{Error, Result};

use crate::dataset::Dataset;
use crate::format::{DeletionFileRef, Fragment, Manifest};
use crate::io::deletion_file::copy_for_fragment;
use crate::io::manifest_path;
use crate::io::{DatasetStore, RelativePath};
use crate::transaction::{Operation, Transaction};
use build::build_candidate;
use rebase::{rebase, Rebased};

/// How many times a commit is retried after losing the put-if-absent race.
pub const MAX_COMMIT_ATTEMPTS: usize = 64;

/// Runs on every commit attempt, after the candidate manifest is built (new
/// fragment ids assigned, rebase done) and before it is published.
#[async_trait]
pub trait CommitHook: Send + Sync {
    /// May add or replace index entries in `candidate` (e.g. an inline index
    /// remap). `dataset` is the latest version the candidate is based on;
    /// `assigned` lists, per rewrite group, the final ids of its new fragments.
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<()>;
}

impl Dataset {
    /// Commits `operation` computed against this version.
    ///
    /// # Errors
    /// Those of [`Self::commit_transaction`].
    pub async fn commit(&self, operation: Operation) -> Result<Dataset> {
        self.commit_transaction(Transaction::new(self.version(), operation), None)
            .await
    }

    /// Commits a prepared transaction (rebased over concurrent commits when compatible).
    ///
    /// # Errors
    /// Conflict (retryable) when a concurrent commit is incompatible with `txn` or
    /// [`MAX_COMMIT_ATTEMPTS`] races are lost; NotSupported for unsupported flags,
    /// exhausted fragment ids or an FRI history this client cannot keep;
    /// InvalidInput for a malformed or stale operation, or a store without
    /// conditional writes; Corrupt, NotFound or External reading the table or
    /// publishing; any error of `hook`.
    pub async fn commit_transaction(
        &self,
        txn: Transaction,
        hook: Option<&dyn CommitHook>,
    ) -> Result<Dataset> {
        commit_transaction(self, txn, hook).await
    }
}

/// Commits `txn` on top of whatever is latest, returning the new version.
async fn commit_transaction(
    handle: &Dataset,
    txn: Transaction,
    hook: Option<&dyn CommitHook>,
) -> Result<Dataset> {
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        let latest_version = handle.latest_version().await?;
        if latest_version < txn.read_version {
            return Err(Error::conflict(
                format!(
                    "read version {} is newer than the latest listed version {latest_version}",
                    txn.read_version
                ),
                true,
            ));
        }
        let latest = handle.checkout_version(latest_version).await?;
        handle
            .features()
            .check_read(latest.manifest().reader_flags)?;
        handle
            .features()
            .check_write(latest.manifest().writer_flags)?;

        let mut intervening = Vec::new();
        for version in txn.read_version + 1..=latest_version {
            intervening.push(handle.load_manifest_with_transaction(version).await?);
        }
        let ready = match rebase(&latest, &txn, &intervening).await? {
            Rebased::AlreadyCommitted(manifest) => return Ok(handle.with_manifest(manifest)),
            Rebased::Ready(ready) => ready,
        };
        let restored = match ready.operation {
            Operation::Restore { version } => Some(handle.load_manifest(version).await?),
            _ => None,
        };
        let mut candidate = build_candidate(
            latest.manifest(),
            &ready,
            restored.as_deref(),
            chrono::Utc::now().timestamp_millis(),
        )?;
        if let Some(hook) = hook {
            hook.before_publish(&latest, &mut candidate.manifest, &candidate.assigned)
                .await?;
        }
        gate::admit(&latest, &mut candidate.manifest).await?;
        let mut manifest = candidate.manifest;
        rename_renumbered_deletions(handle.store(), &mut manifest).await?;
        // Lance's readers and conflict resolution find the transaction in
        // its own file, written (and checksummed) before the manifest names it.
        if let Some((txn_path, txn_bytes)) = manifest.encode_transaction_file()? {
            manifest.lance.transaction_file_checksum =
                Some(refract_core::checksum::FileChecksum::of(&txn_bytes));
            handle.store().put(&txn_path, txn_bytes).await?;
        }
        let bytes = manifest.encode()?;
        let path = manifest_path(manifest.version);
        match handle.store().put_if_absent(&path, bytes).await {
            Ok(true) => return Ok(handle.publish(manifest).await),
            Ok(false) => continue,
            Err(put_error) => match resolve_ambiguous_put(handle, &txn, manifest.version).await {
                PutOutcome::Ours(ours) => return Ok(handle.with_manifest(ours)),
                PutOutcome::Theirs => continue,
                PutOutcome::Unknown => return Err(put_error),
            },
        }
    }
    Err(Error::conflict(
        format!("gave up after {MAX_COMMIT_ATTEMPTS} lost commit races"),
        true,
    ))
}

/// Gives every deletion file of a fragment renumbered at commit the name
/// Lance derives from its final id (in the fragment list and in the
/// transaction alike).
async fn rename_renumbered_deletions(store: &DatasetStore, manifest: &mut Manifest) -> Result<()> {
    let mut renamed: Vec<(RelativePath, DeletionFileRef)> = Vec::new();
    for fragment in &mut manifest.fragments {
        if let Some(file) = &fragment.deletion_file {
            let copied = copy_for_fragment(store, file, fragment.id).await?;
            if copied.path != file.path {
                renamed.push((file.path.clone(), copied.clone()));
                fragment.deletion_file = Some(copied);
            }
        }
    }
    if renamed.is_empty() {
        return Ok(());
    }
    let Some(txn) = manifest.transaction.as_mut() else {
        return Ok(());
    };
    let fragments: Vec<&mut Fragment> = match &mut txn.operation {
        Operation::Append { fragments } => fragments.iter_mut().collect(),
        Operation::Delete {
            updated_fragments, ..
        } => updated_fragments.iter_mut().collect(),
        Operation::Rewrite { groups, .. } => groups
            .iter_mut()
            .flat_map(|group| group.new_fragments.iter_mut())
            .collect(),
        Operation::Partition {
            destinations,
            relabelled,
            ..
        } => destinations
            .iter_mut()
            .chain(
                relabelled
                    .iter_mut()
                    .flat_map(|group| group.new_fragments.iter_mut()),
            )
            .collect(),
        Operation::CreateIndex { .. } | Operation::Restore { .. } | Operation::Lance { .. } => {
            Vec::new()
        }
    };
    for fragment in fragments {
        if let Some(file) = &fragment.deletion_file {
            if let Some((_, copied)) = renamed.iter().find(|(old, _)| *old == file.path) {
                fragment.deletion_file = Some(copied.clone());
            }
        }
    }
    Ok(())
}

/// What a failed put left behind.
enum PutOutcome {
    /// The version exists and carries our transaction uuid: the put succeeded.
    Ours(Arc<Manifest>),
    /// Another writer published that version: retry on top of it.
    Theirs,
    /// The version is absent or unreadable: report the put error.
    Unknown,
}

/// Reads the version back after a put that failed ambiguously.
async fn resolve_ambiguous_put(handle: &Dataset, txn: &Transaction, version: u64) -> PutOutcome {
    match handle.load_manifest(version).await {
        Ok(manifest) => {
            let is_ours = manifest
                .transaction
                .as_ref()
                .is_some_and(|committed| committed.uuid == txn.uuid);
            if is_ours {
                PutOutcome::Ours(manifest)
            } else {
                PutOutcome::Theirs
            }
        }
        Err(_) => PutOutcome::Unknown,
    }
}
