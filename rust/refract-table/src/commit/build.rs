//! Applies an (already rebased) transaction to the latest manifest, producing
//! the candidate manifest of the next version.

use std::collections::HashSet;

use refract_core::{Error, Result};
use refract_ledger::flags::FLAG_DELETION_FILES;
use uuid::Uuid;

use crate::format::{Fragment, IndexMetadata, Manifest, MAX_FRAGMENT_ID};
use crate::transaction::{Operation, RewriteGroup, Transaction};

/// The next version, ready to publish.
pub(crate) struct Candidate {
    /// The new manifest (its `transaction` is the applied transaction).
    pub manifest: Manifest,
    /// Per rewrite group, the ids assigned to its new fragments.
    pub assigned: Vec<Vec<u64>>,
}

/// Hands out fresh fragment ids above the high-water mark.
struct IdAllocator {
    max: u64,
}

impl IdAllocator {
    fn next(&mut self) -> Result<u64> {
        if self.max >= MAX_FRAGMENT_ID {
            return Err(Error::not_supported(
                "fragment ids are exhausted (2^32 - 1 fragments were created)",
            ));
        }
        self.max += 1;
        Ok(self.max)
    }

    fn assign(&mut self, fragments: &[Fragment]) -> Result<Vec<Fragment>> {
        fragments
            .iter()
            .map(|fragment| {
                Ok(Fragment {
                    id: self.next()?,
                    ..fragment.clone()
                })
            })
            .collect()
    }
}

/// Builds version `base.version + 1` from `base` and `txn`. `restored` is the
/// manifest a Restore brings back (loaded by the caller).
pub(crate) fn build_candidate(
    base: &Manifest,
    txn: &Transaction,
    restored: Option<&Manifest>,
    timestamp_ms: i64,
) -> Result<Candidate> {
    let mut next = base.clone();
    let mut ids = IdAllocator {
        max: base.max_fragment_id,
    };
    let mut assigned = Vec::new();
    let applied = match &txn.operation {
        Operation::Append { fragments } => {
            let fragments = ids.assign(fragments)?;
            next.fragments.extend(fragments.iter().cloned());
            Operation::Append { fragments }
        }
        Operation::Delete {
            updated_fragments,
            removed_fragment_ids,
            predicate,
        } => {
            apply_delete(&mut next, updated_fragments, removed_fragment_ids)?;
            Operation::Delete {
                updated_fragments: updated_fragments.clone(),
                removed_fragment_ids: removed_fragment_ids.clone(),
                predicate: predicate.clone(),
            }
        }
        Operation::Rewrite {
            groups,
            new_indices,
            removed_index_uuids,
        } => {
            let groups = apply_rewrite(&mut next, groups, &mut ids, &mut assigned)?;
            apply_index_changes(&mut next, new_indices, removed_index_uuids)?;
            Operation::Rewrite {
                groups,
                new_indices: new_indices.clone(),
                removed_index_uuids: removed_index_uuids.clone(),
            }
        }
        Operation::CreateIndex {
            new_indices,
            removed_index_uuids,
        } => {
            apply_index_changes(&mut next, new_indices, removed_index_uuids)?;
            txn.operation.clone()
        }
        Operation::Restore { version } => {
            let restored = restored
                .filter(|restored| restored.version == *version)
                .ok_or_else(|| Error::not_found(format!("version {version} to restore")))?;
            apply_restore(&mut next, restored);
            txn.operation.clone()
        }
    };
    next.max_fragment_id = ids.max.max(next.max_fragment_id);
    next.version = base.version + 1;
    next.timestamp_ms = timestamp_ms;
    next.transaction = Some(Transaction {
        uuid: txn.uuid,
        read_version: txn.read_version,
        operation: applied,
    });
    Ok(Candidate {
        manifest: next,
        assigned,
    })
}

fn apply_delete(next: &mut Manifest, updated: &[Fragment], removed: &[u64]) -> Result<()> {
    for fragment in updated {
        let slot = next
            .fragments
            .iter_mut()
            .find(|existing| existing.id == fragment.id)
            .ok_or_else(|| missing_fragment(fragment.id))?;
        slot.deletion_file = fragment.deletion_file.clone();
    }
    let removed: HashSet<u64> = removed.iter().copied().collect();
    if let Some(id) = removed.iter().find(|id| next.fragment(**id).is_none()) {
        return Err(missing_fragment(*id));
    }
    next.fragments
        .retain(|fragment| !removed.contains(&fragment.id));
    next.reader_flags |= FLAG_DELETION_FILES;
    next.writer_flags |= FLAG_DELETION_FILES;
    Ok(())
}

/// Replaces each group's contiguous run in place with its new fragments.
fn apply_rewrite(
    next: &mut Manifest,
    groups: &[RewriteGroup],
    ids: &mut IdAllocator,
    assigned: &mut Vec<Vec<u64>>,
) -> Result<Vec<RewriteGroup>> {
    let mut seen = HashSet::new();
    for id in groups.iter().flat_map(|group| &group.old_fragment_ids) {
        if !seen.insert(*id) {
            return Err(Error::invalid_input(format!(
                "fragment {id} appears in more than one rewrite group"
            )));
        }
    }
    let mut applied = Vec::with_capacity(groups.len());
    for group in groups {
        let first = group
            .old_fragment_ids
            .first()
            .ok_or_else(|| Error::invalid_input("a rewrite group has no old fragments"))?;
        let start = next
            .fragment_position(*first)
            .ok_or_else(|| missing_fragment(*first))?;
        let end = start + group.old_fragment_ids.len();
        let run_matches = next.fragments.get(start..end).is_some_and(|run| {
            run.iter()
                .map(|fragment| fragment.id)
                .eq(group.old_fragment_ids.iter().copied())
        });
        if !run_matches {
            if let Some(id) = group
                .old_fragment_ids
                .iter()
                .find(|id| next.fragment(**id).is_none())
            {
                return Err(missing_fragment(*id));
            }
            return Err(Error::invalid_input(format!(
                "rewrite group {:?} is not a contiguous run of the fragment list in order",
                group.old_fragment_ids
            )));
        }
        let new_fragments = ids.assign(&group.new_fragments)?;
        assigned.push(new_fragments.iter().map(|fragment| fragment.id).collect());
        next.fragments
            .splice(start..end, new_fragments.iter().cloned());
        applied.push(RewriteGroup {
            new_fragments,
            ..group.clone()
        });
    }
    Ok(applied)
}

fn apply_index_changes(
    next: &mut Manifest,
    new_indices: &[IndexMetadata],
    removed: &[Uuid],
) -> Result<()> {
    for uuid in removed {
        let before = next.indices.len();
        next.indices.retain(|index| index.uuid != *uuid);
        if next.indices.len() == before {
            return Err(Error::conflict(
                format!("index segment {uuid} to replace no longer exists"),
                true,
            ));
        }
    }
    for index in new_indices {
        if next
            .indices
            .iter()
            .any(|existing| existing.uuid == index.uuid)
        {
            return Err(Error::invalid_input(format!(
                "index segment {} already exists",
                index.uuid
            )));
        }
        next.indices.push(index.clone());
    }
    Ok(())
}

/// Restores content; keeps the id high-water mark and sticky flags.
fn apply_restore(next: &mut Manifest, restored: &Manifest) {
    next.schema = restored.schema.clone();
    next.fragments = restored.fragments.clone();
    next.indices = restored.indices.clone();
    next.max_fragment_id = next.max_fragment_id.max(restored.max_fragment_id);
    next.reader_flags |= restored.reader_flags;
    next.writer_flags |= restored.writer_flags;
}

fn missing_fragment(id: u64) -> Error {
    Error::conflict(
        format!("fragment {id} was removed or rewritten by a concurrent commit"),
        true,
    )
}
