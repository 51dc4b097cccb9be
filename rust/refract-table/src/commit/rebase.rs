//! Rebasing a transaction over the commits that landed after its read version.
//!
//! Compatibility matrix (ours = the transaction being committed, theirs = an
//! intervening committed transaction):
//!
//! | ours \ theirs | Append | Delete                  | Rewrite                 | CreateIndex               | Restore |
//! |---------------|--------|-------------------------|-------------------------|---------------------------|---------|
//! | Append        | ok     | ok                      | ok                      | ok                        | ok      |
//! | Delete        | ok     | merge (union vectors)   | translate (delete_rebase) | ok                      | conflict|
//! | Rewrite       | ok     | translate (rewrite_rebase) | conflict if overlapping | conflict if it covers our sources | conflict|
//! | CreateIndex   | ok     | ok                      | conflict if it rewrote covered fragments | conflict if same removed segment | conflict|
//! | Restore       | conflict on anything committed in between                                                  |||||
//!
//! A Delete over a Rewrite moves the rows it newly deletes through the
//! rewrite's compact remap onto the new fragments (chained over successive
//! rewrites); it conflicts only when a rewrite that replaced fragments holding
//! its rows carries no `surviving_old_addresses` capture.
//!
//! Partition behaves like Rewrite, except against a Delete: a Delete racing a
//! Partition that replaced fragments holding its rows (after following any
//! intervening rewrites) conflicts, whichever commits second (the partition's
//! labels were computed over the old deletions, and translating a delete
//! through its row map needs refract-reader). A CreateIndex that only swaps
//! *system* entries (an FRI trim) does not conflict with a Rewrite or
//! Partition: their commit hook re-reads the latest ledger on every attempt
//! and appends its transition to it.
//!
//! Every conflict here is retryable: running the operation again against the
//! new latest version may succeed.

use std::collections::HashSet;
use std::sync::Arc;

use refract_core::{Error, Result};

use crate::dataset::Dataset;
use crate::format::{IndexMetadata, Manifest};
use crate::transaction::{Operation, Transaction};

use super::delete_rebase::rebase_delete;
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
    }
    if intervening.is_empty() {
        return Ok(Rebased::Ready(txn.clone()));
    }
    let operation = match &txn.operation {
        Operation::Delete { .. } => rebase_delete(latest, txn, intervening).await?,
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
        (_, Operation::Lance { name }) => conflict(&format!(
            "another Lance writer's {name} cannot be rebased over; retry on the new version"
        )),
        (Operation::Lance { name }, _) => {
            conflict(&format!("Refract does not commit Lance's {name}"))
        }
        (Operation::Append { .. }, _) => Ok(()),
        (Operation::Restore { .. }, _) => conflict("a restore requires no intervening commit"),
        (_, Operation::Restore { .. }) => conflict("the table was restored to another version"),
        // Decided while rebasing (`delete_rebase`), where the fragments holding
        // its rows are followed through every intervening rewrite.
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
