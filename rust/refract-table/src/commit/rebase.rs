//! Rebasing a transaction over the commits that landed after its read version.
//!
//! Compatibility matrix (ours = the transaction being committed, theirs = an
//! intervening committed transaction):
//!
//! | ours \ theirs | Append | Delete                  | Rewrite                 | CreateIndex               | Restore |
//! |---------------|--------|-------------------------|-------------------------|---------------------------|---------|
//! | Append        | ok     | ok                      | ok                      | ok                        | ok      |
//! | Delete        | ok     | merge (union vectors)   | conflict if overlapping | ok                        | conflict|
//! | Rewrite       | ok     | translate (rewrite_rebase) | conflict if overlapping | conflict if it covers our sources | conflict|
//! | CreateIndex   | ok     | ok                      | conflict if it rewrote covered fragments | conflict if same removed segment | conflict|
//! | Restore       | conflict on anything committed in between                                                  |||||
//!
//! Partition behaves like Rewrite, except that a Delete overlapping its sources is
//! always a conflict (its labels were computed over the old deletions). A
//! CreateIndex that only swaps *system* entries (an FRI trim) does not conflict
//! with a Rewrite or Partition: their commit hook re-reads the latest ledger on
//! every attempt and appends its transition to it.
//!
//! Every conflict here is retryable: running the operation again against the
//! new latest version may succeed.

use std::collections::HashSet;
use std::sync::Arc;

use refract_core::{DeletionVector, Error, Result};
use roaring::RoaringBitmap;

use crate::dataset::Dataset;
use crate::format::{Fragment, IndexMetadata, Manifest};
use crate::io::deletion_file::write_deletion_file;
use crate::transaction::{Operation, Transaction};

use super::rewrite_rebase::translate_deletes_through_rewrite;

/// What rebasing found.
pub(crate) enum Rebased {
    /// The transaction, adjusted to apply on top of the latest version.
    Ready(Transaction),
    /// An intervening version *is* this transaction (an earlier ambiguous put
    /// succeeded); committing again would apply it twice.
    AlreadyCommitted(Arc<Manifest>),
}

/// Rebases `txn` over `intervening` (versions `read_version + 1 ..= latest`, in order).
pub(crate) async fn rebase(
    latest: &Dataset,
    txn: &Transaction,
    intervening: &[Arc<Manifest>],
) -> Result<Rebased> {
    let mut theirs_all = Vec::with_capacity(intervening.len());
    for manifest in intervening {
        let theirs = manifest.transaction.as_ref().ok_or_else(|| {
            Error::conflict(
                format!(
                    "version {} has no recorded transaction; cannot rebase over it",
                    manifest.version
                ),
                true,
            )
        })?;
        if theirs.uuid == txn.uuid {
            return Ok(Rebased::AlreadyCommitted(manifest.clone()));
        }
        check_compatible(&txn.operation, &theirs.operation, manifest.version)?;
        theirs_all.push(&theirs.operation);
    }
    if intervening.is_empty() {
        return Ok(Rebased::Ready(txn.clone()));
    }
    let operation = match &txn.operation {
        Operation::Delete {
            updated_fragments,
            removed_fragment_ids,
            predicate,
        } => {
            merge_deletes(
                latest,
                updated_fragments,
                removed_fragment_ids,
                predicate,
                &theirs_all,
            )
            .await?
        }
        Operation::Rewrite { .. } => translate_deletes_through_rewrite(latest, txn).await?,
        other => other.clone(),
    };
    Ok(Rebased::Ready(Transaction {
        operation,
        ..txn.clone()
    }))
}

/// Fails with a retryable conflict when `ours` cannot be applied after `theirs`.
fn check_compatible(ours: &Operation, theirs: &Operation, their_version: u64) -> Result<()> {
    let conflict = |why: &str| {
        Err(Error::conflict(
            format!(
                "{} conflicts with the {} committed as version {their_version}: {why}",
                ours.name(),
                theirs.name()
            ),
            true,
        ))
    };
    match (ours, theirs) {
        (Operation::Append { .. }, _) => Ok(()),
        (Operation::Restore { .. }, _) => conflict("a restore requires no intervening commit"),
        (_, Operation::Restore { .. }) => conflict("the table was restored to another version"),
        (Operation::Delete { .. }, Operation::Rewrite { .. } | Operation::Partition { .. }) => {
            if overlaps(ours, theirs) {
                conflict("the rows it deletes were rewritten")
            } else {
                Ok(())
            }
        }
        (Operation::Delete { .. }, _) => Ok(()),
        (Operation::Rewrite { .. }, Operation::Delete { .. }) => {
            // Overlapping deletes are translated through the rewrite's remap
            // (see `rewrite_rebase`), never a conflict.
            Ok(())
        }
        (Operation::Partition { .. }, Operation::Delete { .. }) => {
            if overlaps(ours, theirs) {
                conflict("rows of the partitioned fragments were deleted concurrently")
            } else {
                Ok(())
            }
        }
        (
            Operation::Rewrite { .. } | Operation::Partition { .. },
            Operation::Rewrite { .. } | Operation::Partition { .. },
        ) => {
            if overlaps(ours, theirs) {
                conflict("both rewrite the same fragments")
            } else {
                Ok(())
            }
        }
        (
            Operation::Rewrite { .. } | Operation::Partition { .. },
            Operation::CreateIndex { new_indices, .. },
        ) => {
            let sources: HashSet<u64> = ours.touched_fragment_ids().into_iter().collect();
            if new_indices
                .iter()
                .any(|index| !index.is_system() && index_may_cover(index, &sources))
            {
                conflict("a new index segment covers fragments this rewrite replaces")
            } else {
                Ok(())
            }
        }
        (Operation::Rewrite { .. } | Operation::Partition { .. }, Operation::Append { .. }) => {
            Ok(())
        }
        (
            Operation::CreateIndex { new_indices, .. },
            Operation::Rewrite { .. } | Operation::Partition { .. },
        ) => {
            let rewritten: HashSet<u64> = theirs.touched_fragment_ids().into_iter().collect();
            if new_indices
                .iter()
                .any(|index| index_may_cover(index, &rewritten))
            {
                conflict("fragments the index covers were rewritten")
            } else {
                Ok(())
            }
        }
        (
            Operation::CreateIndex {
                removed_index_uuids: ours_removed,
                ..
            },
            Operation::CreateIndex {
                removed_index_uuids: theirs_removed,
                ..
            },
        ) => {
            if ours_removed
                .iter()
                .any(|uuid| theirs_removed.contains(uuid))
            {
                conflict("both replace the same index segment")
            } else {
                Ok(())
            }
        }
        (Operation::CreateIndex { .. }, _) => Ok(()),
    }
}

fn overlaps(ours: &Operation, theirs: &Operation) -> bool {
    let theirs: HashSet<u64> = theirs.touched_fragment_ids().into_iter().collect();
    ours.touched_fragment_ids()
        .iter()
        .any(|id| theirs.contains(id))
}

/// An index without a stored bitmap may cover anything.
fn index_may_cover(index: &IndexMetadata, fragments: &HashSet<u64>) -> bool {
    match &index.fragment_bitmap {
        None => true,
        Some(bitmap) => fragments
            .iter()
            .any(|id| u32::try_from(*id).is_ok_and(|id| bitmap.contains(id))),
    }
}

/// Merges our Delete with intervening Deletes of the same fragments: both
/// evaluated the same physical rows, so the union of the vectors is exact.
async fn merge_deletes(
    latest: &Dataset,
    updated_fragments: &[Fragment],
    removed_fragment_ids: &[u64],
    predicate: &str,
    theirs: &[&Operation],
) -> Result<Operation> {
    let touched_by_them: HashSet<u64> = theirs
        .iter()
        .filter(|operation| matches!(operation, Operation::Delete { .. }))
        .flat_map(|operation| operation.touched_fragment_ids())
        .collect();
    let mut updated = Vec::with_capacity(updated_fragments.len());
    let mut removed: Vec<u64> = Vec::new();
    for id in removed_fragment_ids {
        // Already removed by them: nothing left to do for this fragment.
        if latest.manifest().fragment(*id).is_some() {
            removed.push(*id);
        }
    }
    for ours in updated_fragments {
        let Some(current) = latest.manifest().fragment(ours.id) else {
            // Removed concurrently: all its rows are deleted already.
            continue;
        };
        if !touched_by_them.contains(&ours.id) || current.deletion_file == ours.deletion_file {
            updated.push(ours.clone());
            continue;
        }
        let mut union: RoaringBitmap = latest.deletion_vector(current).await?.bitmap().clone();
        union |= latest.deletion_vector(ours).await?.bitmap();
        if union.len() >= current.physical_rows {
            removed.push(ours.id);
            continue;
        }
        let deletion =
            write_deletion_file(latest.store(), ours.id, &DeletionVector::from_bitmap(union))
                .await?;
        updated.push(Fragment {
            deletion_file: Some(deletion),
            ..current.clone()
        });
    }
    Ok(Operation::Delete {
        updated_fragments: updated,
        removed_fragment_ids: removed,
        predicate: predicate.to_string(),
    })
}
