//! Inline index remap: without `defer_index_remap`, the Rewrite commit carries
//! every affected index segment rewritten through the compaction's compact
//! `RowAddrRemap` (streaming, bounded memory).
//!
//! The remap can only be built once the commit has assigned the new fragments'
//! ids, so it runs as a [`CommitHook`] on every commit attempt.

use std::sync::Arc;

use async_trait::async_trait;
use refract_core::{
    Error, FragmentRows, MaterializeBudget, Result, RewriteGroupInput, RowAddrRemap,
};
use refract_index::registry::IndexRegistry;
use refract_index::remap::{apply_index_rewrite, remap_indices_for_rewrite, RewrittenGroup};
use refract_table::dataset::Dataset;
use refract_table::format::{FragmentIndex, Manifest};
use refract_table::transaction::Operation;
use refract_table::CommitHook;
use roaring::RoaringTreemap;

use super::execute::RewriteResult;
use crate::runtime::on_rewrite_thread;

/// What one rewrite group needs for the remap, captured from its task result.
#[derive(Debug, Clone)]
struct GroupCapture {
    old: Vec<FragmentRows>,
    surviving: RoaringTreemap,
}

/// Rewrites affected index segments inside the Rewrite commit.
pub struct InlineRemapHook {
    groups: Vec<GroupCapture>,
    registry: Arc<IndexRegistry>,
    budget: MaterializeBudget,
}

impl InlineRemapHook {
    /// A hook for `results`, in the order they are committed as groups.
    pub fn new(results: &[RewriteResult], registry: Arc<IndexRegistry>) -> Result<Self> {
        let groups = results
            .iter()
            .map(|result| {
                if result.old_fragment_ids.len() != result.old_physical_rows.len() {
                    return Err(Error::invalid_input(
                        "rewrite result lists physical rows for a different number of fragments",
                    ));
                }
                Ok(GroupCapture {
                    old: result
                        .old_fragment_ids
                        .iter()
                        .zip(&result.old_physical_rows)
                        .map(|(id, rows)| FragmentRows {
                            id: *id,
                            physical_rows: *rows,
                        })
                        .collect(),
                    surviving: result.surviving()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            groups,
            registry,
            budget: MaterializeBudget::default(),
        })
    }

    /// The captured groups, then the fragments the commit relabelled (extra
    /// groups of the candidate's transaction, after ours; see
    /// `refract_table`'s commit): the remap moves both.
    fn all_groups(&self, dataset: &Dataset, candidate: &Manifest) -> Result<Vec<GroupCapture>> {
        let mut groups = self.groups.clone();
        let Some(Operation::Rewrite {
            groups: applied, ..
        }) = candidate.transaction.as_ref().map(|txn| &txn.operation)
        else {
            return Ok(groups);
        };
        let latest = dataset.manifest().fragment_index();
        for relabel in applied.iter().skip(self.groups.len()) {
            let old = fragment_rows(&latest, &relabel.old_fragment_ids, "the latest version")?;
            let bytes = relabel.surviving_old_addresses.as_deref().ok_or_else(|| {
                Error::invalid_input("a relabelled fragment carries no surviving rows")
            })?;
            let surviving = RoaringTreemap::deserialize_from(bytes)
                .map_err(|e| Error::invalid_input(format!("relabelled rows: {e}")))?;
            groups.push(GroupCapture { old, surviving });
        }
        Ok(groups)
    }

    fn remap(
        groups: &[GroupCapture],
        candidate: &Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<RowAddrRemap> {
        if assigned.len() != groups.len() {
            return Err(Error::invalid_input(
                "commit assigned ids for a different number of rewrite groups",
            ));
        }
        let index = candidate.fragment_index();
        let inputs = groups
            .iter()
            .zip(assigned)
            .map(|(group, new_ids)| {
                Ok(RewriteGroupInput {
                    old_fragments: group.old.clone(),
                    new_fragments: fragment_rows(&index, new_ids, "the candidate")?,
                    surviving: group.surviving.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        RowAddrRemap::compact(inputs)
    }
}

/// The row counts of fragments `ids`, looked up in `index` (`what` names it).
///
/// # Errors
/// InvalidInput when a fragment is missing from it.
fn fragment_rows(index: &FragmentIndex<'_>, ids: &[u64], what: &str) -> Result<Vec<FragmentRows>> {
    ids.iter()
        .map(|id| {
            let fragment = index
                .get(*id)
                .ok_or_else(|| Error::invalid_input(format!("fragment {id} is not in {what}")))?;
            Ok(FragmentRows {
                id: *id,
                physical_rows: fragment.physical_rows,
            })
        })
        .collect()
}

#[async_trait]
impl CommitHook for InlineRemapHook {
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<()> {
        let touches_index = candidate
            .indices
            .iter()
            .any(|index| !index.is_system() && index.fragment_bitmap.is_some());
        if !touches_index {
            return Ok(());
        }
        let captured = self.all_groups(dataset, candidate)?;
        let remap = Self::remap(&captured, candidate, assigned)?;
        let groups: Vec<RewrittenGroup> = captured
            .iter()
            .zip(assigned)
            .map(|(group, new_ids)| RewrittenGroup {
                old_fragment_ids: group.old.iter().map(|f| f.id).collect(),
                new_fragment_ids: new_ids.clone(),
            })
            .collect();
        // On a rewrite thread: the segment rewrites' allocations stay on one
        // thread (see `crate::runtime`).
        let (dataset, based_on) = (dataset.clone(), candidate.clone());
        let (registry, budget) = (self.registry.clone(), self.budget);
        let rewrite = on_rewrite_thread(async move {
            remap_indices_for_rewrite(&dataset, &based_on, &remap, &groups, &registry, budget).await
        })
        .await?;
        apply_index_rewrite(candidate, &rewrite);
        Ok(())
    }
}
