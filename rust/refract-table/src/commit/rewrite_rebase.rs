//! Rebasing a Rewrite over Deletes that landed after its read version.
//!
//! The peer returns a conflict here, so a busy table can starve compaction. We
//! translate instead: every surviving old row that is deleted at the latest
//! version is mapped through the rewrite's own compact remap (built from the
//! captured surviving addresses) and deleted in the new fragment that holds it.
//! No delete is lost and no row is resurrected; all other rows are untouched.

use refract_core::{DeletionVector, Error, Result, RowAddress};
use roaring::RoaringTreemap;

use crate::dataset::Dataset;
use crate::format::{FragmentIndex, Manifest};
use crate::io::deletion_file::write_deletion_file;
use crate::transaction::{Operation, RewriteGroup, Transaction};

use super::group_remap::{decode_survivors, group_remap, old_fragment_rows, translate};

/// Returns `txn`'s Rewrite adjusted so rows deleted after its read version stay
/// deleted. Other operations are returned unchanged.
pub(crate) async fn translate_deletes_through_rewrite(
    latest: &Dataset,
    txn: &Transaction,
) -> Result<Operation> {
    let Operation::Rewrite {
        groups,
        new_indices,
        removed_index_uuids,
    } = &txn.operation
    else {
        return Ok(txn.operation.clone());
    };
    let base = latest.checkout_version(txn.read_version).await?;
    // Both versions indexed once: a lookup per source, not a scan per group.
    let (base_index, latest_index) = (
        base.manifest().fragment_index(),
        latest.manifest().fragment_index(),
    );
    let mut rebased = Vec::with_capacity(groups.len());
    for group in groups {
        rebased
            .push(rebase_group(latest, &latest_index, base.manifest(), &base_index, group).await?);
    }
    Ok(Operation::Rewrite {
        groups: rebased,
        new_indices: new_indices.clone(),
        removed_index_uuids: removed_index_uuids.clone(),
    })
}

/// Rows of `group`'s survivors deleted at `latest`, translated onto its new fragments.
async fn rebase_group(
    latest: &Dataset,
    latest_index: &FragmentIndex<'_>,
    base: &Manifest,
    base_index: &FragmentIndex<'_>,
    group: &RewriteGroup,
) -> Result<RewriteGroup> {
    let changed = group.old_fragment_ids.iter().any(|id| {
        latest_index.get(*id).map(|f| &f.deletion_file)
            != base_index.get(*id).map(|f| &f.deletion_file)
    });
    if !changed {
        return Ok(group.clone());
    }
    let Some(bytes) = &group.surviving_old_addresses else {
        return Err(Error::conflict(
            "rows of the rewritten fragments were deleted concurrently and the rewrite carries no row capture to translate them",
            true,
        ));
    };
    let survivors = decode_survivors(bytes)?;
    let gone = newly_deleted(latest, latest_index, group, &survivors).await?;
    let kept_old: Vec<u64> = group
        .old_fragment_ids
        .iter()
        .copied()
        .filter(|id| latest_index.contains(*id))
        .collect();
    if kept_old.is_empty() {
        return Err(Error::conflict(
            "every fragment of a rewrite group was deleted concurrently",
            true,
        ));
    }
    let mut new_fragments = group.new_fragments.clone();
    if !gone.is_empty() {
        let old = old_fragment_rows(base, &group.old_fragment_ids)?;
        // Ids are not assigned yet: new fragments are named `first + ordinal`,
        // above every old id (the remap refuses an id that is both).
        let first = old.iter().map(|fragment| fragment.id).max().unwrap_or(0) + 1;
        let remap = group_remap(
            old,
            new_fragments
                .iter()
                .enumerate()
                .map(|(ordinal, fragment)| (first + ordinal as u64, fragment.physical_rows)),
            survivors,
        )?;
        let translated = translate(&remap, &gone)?;
        if let Some(address) = translated.dropped.min() {
            return Err(Error::corrupt(
                "rewrite transaction",
                format!(
                    "surviving address {} does not map to a new row",
                    RowAddress::from(address)
                ),
            ));
        }
        for (named, offsets) in translated.moved {
            // Names are `first + ordinal` of `new_fragments` (see above).
            let fragment = &mut new_fragments[(named - first) as usize];
            fragment.deletion_file = Some(
                write_deletion_file(
                    latest.store(),
                    fragment.id,
                    latest.version(),
                    &DeletionVector::from_bitmap(offsets),
                )
                .await?,
            );
        }
    }
    Ok(RewriteGroup {
        old_fragment_ids: kept_old,
        new_fragments,
        surviving_old_addresses: group.surviving_old_addresses.clone(),
    })
}

/// Survivors that are deleted (or whose fragment is gone) at `latest`.
async fn newly_deleted(
    latest: &Dataset,
    latest_index: &FragmentIndex<'_>,
    group: &RewriteGroup,
    survivors: &RoaringTreemap,
) -> Result<RoaringTreemap> {
    let mut gone = RoaringTreemap::new();
    // A treemap keys its bitmaps by an address's high 32 bits: the fragment id.
    for (fragment_id, in_fragment) in survivors.bitmaps() {
        let id = u64::from(fragment_id);
        let offsets = match latest_index.get(id) {
            // The whole fragment was deleted concurrently.
            None if group.old_fragment_ids.contains(&id) => in_fragment.clone(),
            Some(fragment) if fragment.deletion_file.is_some() => {
                let vector = latest.deletion_vector(fragment).await?;
                in_fragment & vector.bitmap()
            }
            _ => continue,
        };
        gone.extend(offsets.iter().map(|offset| (id << 32) | u64::from(offset)));
    }
    Ok(gone)
}
