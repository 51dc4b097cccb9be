//! Rebasing a Delete over the commits that landed after its read version.
//!
//! The delete is carried as the rows it newly deletes in each fragment (its
//! vector minus the one the fragment had at the read version), tracked by
//! fragment id while the intervening commits are walked in order:
//!
//! - a Delete of the same fragment: the vectors are unioned at the end (both
//!   evaluated the same physical rows);
//! - a Rewrite replacing the fragment: the rows are translated through the
//!   rewrite's compact remap (built from its `surviving_old_addresses`) onto its
//!   new fragments, which are tracked from then on, so successive rewrites
//!   chain. A row with no destination was deleted before the rewrite captured
//!   its survivors: nothing is left to do for it;
//! - a Partition replacing the fragment: a retryable conflict. Its row map is
//!   read by refract-reader, which this crate cannot depend on. The fragments
//!   a Partition relabelled are followed like a Rewrite's groups.
//!
//! Each fragment still holding rows then gets the union of its latest vector
//! and those rows as a new deletion file, or leaves the manifest when no row
//! is left. So no delete is lost and no row is resurrected.

use std::collections::BTreeMap;
use std::sync::Arc;

use refract_core::{DeletionVector, Error, Result};
use roaring::{RoaringBitmap, RoaringTreemap};

use crate::dataset::Dataset;
use crate::format::{Fragment, Manifest};
use crate::io::deletion_file::write_deletion_file;
use crate::transaction::{Operation, RewriteGroup, Transaction};

use super::group_remap::{decode_survivors, group_remap, old_fragment_rows, translate};

/// What our Delete did to one of its fragments.
#[derive(Clone, Copy)]
enum OurChange<'a> {
    /// A new deletion file.
    Updated(&'a Fragment),
    /// Every row deleted: the fragment leaves the manifest.
    Removed,
}

/// Where the rows our Delete removes are at the version being walked.
enum Tracked<'a> {
    /// Still in our fragment; `merge` once a concurrent Delete changed it.
    Ours { change: OurChange<'a>, merge: bool },
    /// Moved by a rewrite: offsets to delete in the fragment keyed by it.
    Moved(RoaringBitmap),
}

/// Returns `txn`'s Delete adjusted to apply on top of `latest`, or a retryable
/// conflict when it cannot be. Other operations are returned unchanged.
pub(super) async fn rebase_delete(
    latest: &Dataset,
    txn: &Transaction,
    intervening: &[Arc<Manifest>],
) -> Result<Operation> {
    let Operation::Delete {
        updated_fragments,
        removed_fragment_ids,
        predicate,
    } = &txn.operation
    else {
        return Ok(txn.operation.clone());
    };
    let mut walk = Walk {
        latest,
        read_version: txn.read_version,
        base: None,
        tracked: BTreeMap::new(),
        disturbed: false,
    };
    for fragment in updated_fragments {
        walk.track_ours(fragment.id, OurChange::Updated(fragment));
    }
    for id in removed_fragment_ids {
        walk.track_ours(*id, OurChange::Removed);
    }
    for (i, manifest) in intervening.iter().enumerate() {
        // `rebase` refused versions without a transaction before calling us.
        let Some(theirs) = &manifest.transaction else {
            continue;
        };
        match &theirs.operation {
            Operation::Delete { .. } => walk.mark_merged(&theirs.operation.touched_fragment_ids()),
            Operation::Rewrite { groups, .. } => {
                walk.through_groups(groups, theirs, intervening, i).await?;
            }
            Operation::Partition {
                source_fragment_ids,
                relabelled,
                ..
            } => {
                if source_fragment_ids
                    .iter()
                    .any(|id| walk.tracked.contains_key(id))
                {
                    return Err(Error::conflict(
                        format!(
                            "Delete conflicts with the Partition committed as version {}: it replaced fragments holding rows this delete removes",
                            manifest.version
                        ),
                        true,
                    ));
                }
                walk.through_groups(relabelled, theirs, intervening, i)
                    .await?;
            }
            Operation::Lance { name } => {
                return Err(Error::conflict(
                    format!(
                        "Delete conflicts with Lance's {name} committed as version {}",
                        manifest.version
                    ),
                    true,
                ));
            }
            Operation::Append { .. }
            | Operation::CreateIndex { .. }
            | Operation::Restore { .. } => {}
        }
    }
    if !walk.disturbed {
        // No intervening commit touched our fragments: apply as written.
        return Ok(txn.operation.clone());
    }
    let (updated, removed) = walk.finish().await?;
    Ok(Operation::Delete {
        updated_fragments: updated,
        removed_fragment_ids: removed,
        predicate: predicate.clone(),
    })
}

/// State of one rebase walk.
struct Walk<'a> {
    latest: &'a Dataset,
    read_version: u64,
    /// Our read version's manifest, loaded when first needed.
    base: Option<Arc<Manifest>>,
    tracked: BTreeMap<u64, Tracked<'a>>,
    /// An intervening commit touched a tracked fragment.
    disturbed: bool,
}

impl<'a> Walk<'a> {
    fn track_ours(&mut self, id: u64, change: OurChange<'a>) {
        self.tracked.insert(
            id,
            Tracked::Ours {
                change,
                merge: false,
            },
        );
    }

    fn mark_merged(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(Tracked::Ours { merge, .. }) = self.tracked.get_mut(id) {
                *merge = true;
                self.disturbed = true;
            }
        }
    }

    async fn base(&mut self) -> Result<Arc<Manifest>> {
        if let Some(base) = &self.base {
            return Ok(base.clone());
        }
        let base = self.latest.load_manifest(self.read_version).await?;
        self.base = Some(base.clone());
        Ok(base)
    }

    /// Rows our Delete newly deletes in our fragment `id`.
    async fn our_rows(&mut self, id: u64, change: OurChange<'a>) -> Result<RoaringBitmap> {
        let base = self.base().await?;
        let before = base.fragment(id).ok_or_else(|| {
            Error::corrupt(
                "delete transaction",
                format!(
                    "fragment {id} is not in its read version {}",
                    self.read_version
                ),
            )
        })?;
        let mut rows = match change {
            OurChange::Updated(ours) => self.latest.deletion_vector(ours).await?.bitmap().clone(),
            OurChange::Removed => {
                let physical_rows = u32::try_from(before.physical_rows).map_err(|_| {
                    Error::corrupt(
                        "manifest",
                        format!("fragment {id} records more than 2^32 rows"),
                    )
                })?;
                let mut all = RoaringBitmap::new();
                all.insert_range(0..physical_rows);
                all
            }
        };
        rows -= self.latest.deletion_vector(before).await?.bitmap();
        Ok(rows)
    }

    /// Moves the rows tracked in `group`'s old fragments onto its new fragments.
    /// `previous` is the manifest the rewrite was applied to.
    /// Follows our rows through `groups` of the commit `intervening[at]`
    /// (whose transaction is `theirs`), against the version before it.
    async fn through_groups(
        &mut self,
        groups: &[RewriteGroup],
        theirs: &Transaction,
        intervening: &[Arc<Manifest>],
        at: usize,
    ) -> Result<()> {
        if groups.is_empty() {
            return Ok(());
        }
        let previous = match at.checked_sub(1) {
            Some(before) => intervening[before].clone(),
            None => self.base().await?,
        };
        for group in groups {
            self.through_group(group, theirs, intervening[at].version, &previous)
                .await?;
        }
        Ok(())
    }

    async fn through_group(
        &mut self,
        group: &RewriteGroup,
        theirs: &Transaction,
        their_version: u64,
        previous: &Manifest,
    ) -> Result<()> {
        let survivors = group
            .surviving_old_addresses
            .as_deref()
            .map(decode_survivors)
            .transpose()?;
        // The capture may name sources the rewrite's own rebase dropped from
        // `old_fragment_ids` (deleted whole while it ran): they are still its sources.
        let mut sources: Vec<u64> = group.old_fragment_ids.clone();
        if let Some(survivors) = &survivors {
            for (id, offsets) in survivors.bitmaps() {
                if !offsets.is_empty() && !sources.contains(&u64::from(id)) {
                    sources.push(u64::from(id));
                }
            }
        }
        let hit: Vec<u64> = sources
            .iter()
            .copied()
            .filter(|id| self.tracked.contains_key(id))
            .collect();
        if hit.is_empty() {
            return Ok(());
        }
        self.disturbed = true;
        let Some(survivors) = survivors else {
            return Err(Error::conflict(
                format!(
                    "Delete conflicts with the Rewrite committed as version {their_version}: it replaced fragments holding rows this delete removes and carries no row capture to translate them"
                ),
                true,
            ));
        };
        let mut addresses = RoaringTreemap::new();
        for id in hit {
            let rows = match self.tracked.remove(&id) {
                Some(Tracked::Ours { change, .. }) => self.our_rows(id, change).await?,
                Some(Tracked::Moved(rows)) => rows,
                None => continue,
            };
            addresses.extend(rows.iter().map(|offset| (id << 32) | u64::from(offset)));
        }
        let old = if sources.len() == group.old_fragment_ids.len() {
            old_fragment_rows(previous, &group.old_fragment_ids)?
        } else {
            // The run, in write order, is the sources in the rewrite's read version.
            let at_read = self.latest.load_manifest(theirs.read_version).await?;
            let run: Vec<u64> = at_read
                .fragments
                .iter()
                .map(|fragment| fragment.id)
                .filter(|id| sources.contains(id))
                .collect();
            if run.len() != sources.len() {
                return Err(Error::conflict(
                    format!(
                        "Delete conflicts with the Rewrite committed as version {their_version}: the order of its sources cannot be recovered from its read version {}",
                        theirs.read_version
                    ),
                    true,
                ));
            }
            old_fragment_rows(&at_read, &run)?
        };
        let remap = group_remap(
            old,
            group
                .new_fragments
                .iter()
                .map(|fragment| (fragment.id, fragment.physical_rows)),
            survivors,
        )?;
        // Dropped rows were deleted before the rewrite captured its survivors.
        let translated = translate(&remap, &addresses)?;
        for (id, offsets) in translated.moved {
            match self
                .tracked
                .entry(id)
                .or_insert_with(|| Tracked::Moved(RoaringBitmap::new()))
            {
                Tracked::Moved(rows) => *rows |= offsets,
                Tracked::Ours { .. } => {
                    return Err(Error::corrupt(
                        "rewrite transaction",
                        format!(
                            "version {their_version} names fragment {id}, which existed before it, as new"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The rebased Delete's updated fragments and removed fragment ids.
    async fn finish(self) -> Result<(Vec<Fragment>, Vec<u64>)> {
        let latest = self.latest;
        let mut updated = Vec::new();
        let mut removed = Vec::new();
        for (id, tracked) in self.tracked {
            // A fragment gone from `latest` had all its rows deleted concurrently.
            let Some(current) = latest.manifest().fragment(id) else {
                continue;
            };
            match tracked {
                Tracked::Ours {
                    change: OurChange::Removed,
                    ..
                } => removed.push(id),
                Tracked::Ours {
                    change: OurChange::Updated(ours),
                    merge,
                } => {
                    if !merge || current.deletion_file == ours.deletion_file {
                        updated.push(ours.clone());
                    } else {
                        let rows = latest.deletion_vector(ours).await?;
                        delete_in(latest, current, rows.bitmap(), &mut updated, &mut removed)
                            .await?;
                    }
                }
                Tracked::Moved(rows) => {
                    delete_in(latest, current, &rows, &mut updated, &mut removed).await?
                }
            }
        }
        Ok((updated, removed))
    }
}

/// Deletes `rows` in `current` on top of its vector at `latest`: a new deletion
/// file, the fragment's removal when no row is left, or nothing when every row
/// is deleted already.
async fn delete_in(
    latest: &Dataset,
    current: &Fragment,
    rows: &RoaringBitmap,
    updated: &mut Vec<Fragment>,
    removed: &mut Vec<u64>,
) -> Result<()> {
    let existing = latest.deletion_vector(current).await?;
    let mut union = existing.bitmap().clone();
    union |= rows;
    if union.len() == existing.len() {
        return Ok(());
    }
    if union.len() >= current.physical_rows {
        removed.push(current.id);
        return Ok(());
    }
    let deletion = write_deletion_file(
        latest.store(),
        current.id,
        latest.version(),
        &DeletionVector::from_bitmap(union),
    )
    .await?;
    updated.push(Fragment {
        deletion_file: Some(deletion),
        ..current.clone()
    });
    Ok(())
}
