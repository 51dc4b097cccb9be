//! The commit hook that records rewrites in the FRI ledger instead of
//! rewriting index segments (deferred remap).
//!
//! It runs on every commit attempt, after the engine assigned the final ids of
//! the new fragments. Each attempt re-reads the latest ledger and appends to it,
//! so a concurrent trim is rebased over (its removals are kept, our transition
//! survives) and every attempt mints a new FRI uuid.

use async_trait::async_trait;
use refract_core::{Error, Result};
use refract_ledger::{
    append_legacy_version, FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord,
};
use refract_table::commit::fri_entry::{is_fri_entry, is_tagged, load_ledger, new_fri_entry};
use refract_table::transaction::{Operation, RewriteGroup};
use refract_table::{CommitHook, Dataset, FragmentIndex, IndexMetadata, Manifest};
use roaring::RoaringTreemap;

/// Which ledger generation the hook writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryFormat {
    /// Version-1 transitions (the default). The first such commit tags the
    /// table with the paired FRI flag.
    Tagged,
    /// Legacy version-0 reuse versions, for tables that must stay readable by
    /// clients without tagged-history support. Refused on tagged tables.
    Legacy,
}

/// Records Rewrite groups (ordered compaction) and Partition row maps (stable
/// partition) in the FRI ledger.
#[derive(Debug, Clone, Copy)]
pub struct DeferredRemapHook {
    format: HistoryFormat,
}

/// Runs an inline-remap hook, then records the rewrite in the ledger when a
/// source is still covered after it: by the FRI history (segments translating
/// through it would otherwise be cut off from the rewritten rows) or by a user
/// segment the inline remap declined. The write gate refuses such a commit
/// without the record on a tagged table.
pub struct HistoryPreservingHook {
    inner: Option<Box<dyn CommitHook>>,
    record: DeferredRemapHook,
}

/// Wraps the inline-remap hook of a non-deferred compaction so it also works
/// on tables with an FRI history (see [`HistoryPreservingHook`]).
pub fn preserve_history(inner: Option<Box<dyn CommitHook>>) -> Box<dyn CommitHook> {
    Box::new(HistoryPreservingHook {
        inner,
        record: DeferredRemapHook::new(HistoryFormat::Tagged),
    })
}

#[async_trait]
impl CommitHook for HistoryPreservingHook {
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<()> {
        if let Some(inner) = &self.inner {
            inner.before_publish(dataset, candidate, assigned).await?;
        }
        self.record
            .before_publish(dataset, candidate, assigned)
            .await
    }
}

/// The hook compaction uses with `defer_index_remap`: version-1 transitions.
pub fn deferred_remap_hook() -> Box<dyn CommitHook> {
    Box::new(DeferredRemapHook::new(HistoryFormat::Tagged))
}

/// The legacy-writer variant: appends a version-0 reuse version.
pub fn legacy_deferred_remap_hook() -> Box<dyn CommitHook> {
    Box::new(DeferredRemapHook::new(HistoryFormat::Legacy))
}

impl DeferredRemapHook {
    /// A hook writing `format`.
    pub fn new(format: HistoryFormat) -> Self {
        Self { format }
    }
}

#[async_trait]
impl CommitHook for DeferredRemapHook {
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<()> {
        let Some(txn) = candidate.transaction.clone() else {
            return Ok(());
        };
        let loaded = load_ledger(dataset).await?;
        let current = loaded.as_ref().map(|(_, ledger)| ledger);
        let records = match &txn.operation {
            Operation::Rewrite { groups, .. } => {
                let sources: Vec<u64> = groups
                    .iter()
                    .flat_map(|g| g.old_fragment_ids.iter().copied())
                    .collect();
                // The candidate's segments: after an inline remap, the ones it
                // replaced no longer cover the sources.
                if !needs_history(candidate, current, &sources) {
                    return Ok(());
                }
                let read = dataset.checkout_version(txn.read_version).await?;
                ordered_records(read.manifest(), dataset.manifest(), groups, assigned)?
            }
            Operation::Partition {
                source_fragment_ids,
                destinations,
                map_id,
                map_size_bytes,
                map_checksum,
                relabelled,
            } => {
                let read = dataset.checkout_version(txn.read_version).await?;
                let mut records = Vec::new();
                if let Some(map_id) = map_id {
                    records.push(TransitionRecord::new(
                        source_digests(
                            &read.manifest().fragment_index(),
                            read.version(),
                            source_fragment_ids,
                        )?,
                        destinations
                            .iter()
                            .map(|f| FragmentDigest::new(f.id, f.physical_rows, 0))
                            .collect(),
                        Mapping::StablePartition {
                            map_id: *map_id,
                            map_size_bytes: *map_size_bytes,
                            map_checksum: map_checksum.clone(),
                        },
                    )?);
                }
                // The fragments after the run that the commit relabelled
                // move like compacted rows (one ordered transition per run).
                let relabelled_ids: Vec<u64> = relabelled
                    .iter()
                    .flat_map(|group| group.old_fragment_ids.iter().copied())
                    .collect();
                if !relabelled_ids.is_empty() && needs_history(candidate, current, &relabelled_ids)
                {
                    records.extend(ordered_records(
                        read.manifest(),
                        dataset.manifest(),
                        relabelled,
                        assigned.get(1..).unwrap_or_default(),
                    )?);
                }
                if records.is_empty() {
                    return Ok(());
                }
                records
            }
            _ => return Ok(()),
        };
        let ledger = self.extend(current, candidate, txn.read_version, records)?;
        let entry = new_fri_entry(dataset.store(), &ledger, candidate.version).await?;
        install_entry(candidate, entry);
        Ok(())
    }
}

impl DeferredRemapHook {
    /// The current ledger plus `records`, in the hook's format.
    fn extend(
        &self,
        current: Option<&Ledger>,
        candidate: &Manifest,
        read_version: u64,
        records: Vec<TransitionRecord>,
    ) -> Result<Ledger> {
        let mut ledger = current.cloned().unwrap_or_default();
        match self.format {
            HistoryFormat::Tagged => {
                for record in records {
                    ledger.push_transition(record)?;
                }
                Ok(ledger)
            }
            HistoryFormat::Legacy => {
                if is_tagged(candidate) {
                    return Err(Error::not_supported(
                        "this table carries a tagged FRI history; a legacy (version 0) writer \
                         cannot maintain it: upgrade to a writer supporting tagged histories",
                    ));
                }
                append_legacy_version(&ledger, read_version, &records)
            }
        }
    }
}

/// A rewrite needs a history record when a user segment covers one of its
/// sources (a segment without a bitmap covers everything) or the existing
/// history does (a source produced by a recorded rewrite, or any history with
/// transitions this client cannot interpret).
pub(crate) fn needs_history(manifest: &Manifest, ledger: Option<&Ledger>, sources: &[u64]) -> bool {
    history_covers(ledger, sources)
        || manifest
            .indices
            .iter()
            .filter(|index| !index.is_system())
            .any(|index| match &index.fragment_bitmap {
                None => true,
                Some(bitmap) => sources
                    .iter()
                    .any(|id| u32::try_from(*id).is_ok_and(|id| bitmap.contains(id))),
            })
}

/// The history covers a source: a recorded rewrite produced it, or the
/// ledger holds transitions this client cannot interpret (which may).
fn history_covers(ledger: Option<&Ledger>, sources: &[u64]) -> bool {
    ledger.is_some_and(|ledger| {
        ledger.has_unsupported_transitions()
            || sources
                .iter()
                .any(|id| ledger.lineage().contains_fragment(*id))
    })
}

/// Digests of `ids` as they were in `read`, version `version` (deletion
/// counts at that version).
fn source_digests(
    read: &FragmentIndex<'_>,
    version: u64,
    ids: &[u64],
) -> Result<Vec<FragmentDigest>> {
    ids.iter()
        .map(|id| {
            let fragment = read.get(*id).ok_or_else(|| {
                Error::invalid_input(format!("fragment {id} is not part of version {version}"))
            })?;
            Ok(FragmentDigest::new(
                fragment.id,
                fragment.physical_rows,
                fragment.num_deleted_rows(),
            ))
        })
        .collect()
}

/// One ordered-compaction record per rewrite group. A source's digest counts
/// as deleted exactly the rows the group does not carry over: its deletions at
/// the read version for a compaction, none for a relabelled fragment (whose
/// deleted rows move with it, still deleted). A relabelled fragment may be
/// newer than the read version, so sources are looked up in `latest` too.
fn ordered_records(
    read: &Manifest,
    latest: &Manifest,
    groups: &[RewriteGroup],
    assigned: &[Vec<u64>],
) -> Result<Vec<TransitionRecord>> {
    if groups.len() != assigned.len() {
        return Err(Error::invalid_input(format!(
            "{} rewrite groups but {} assigned id lists",
            groups.len(),
            assigned.len()
        )));
    }
    let (read_index, latest_index) = (read.fragment_index(), latest.fragment_index());
    groups
        .iter()
        .zip(assigned)
        .map(|(group, ids)| {
            let bytes = group.surviving_old_addresses.as_deref().ok_or_else(|| {
                Error::invalid_input(format!(
                    "rewrite group {:?} carries no surviving addresses; a deferred remap needs them",
                    group.old_fragment_ids
                ))
            })?;
            let surviving = RoaringTreemap::deserialize_from(bytes).map_err(|e| {
                Error::invalid_input(format!(
                    "surviving addresses of group {:?}: {e}",
                    group.old_fragment_ids
                ))
            })?;
            if ids.len() != group.new_fragments.len() {
                return Err(Error::invalid_input(format!(
                    "group {:?} wrote {} fragments but {} ids were assigned",
                    group.old_fragment_ids,
                    group.new_fragments.len(),
                    ids.len()
                )));
            }
            let destinations = ids
                .iter()
                .zip(&group.new_fragments)
                .map(|(id, fragment)| FragmentDigest::new(*id, fragment.physical_rows, 0))
                .collect();
            let sources = group_sources(&read_index, &group.old_fragment_ids, &surviving);
            let sources = sources
                .iter()
                .map(|id| {
                    let fragment = read_index
                        .get(*id)
                        .or_else(|| latest_index.get(*id))
                        .ok_or_else(|| {
                            Error::invalid_input(format!(
                                "fragment {id} is in neither version {} nor {}",
                                read.version, latest.version
                            ))
                        })?;
                    let kept = surviving.range_cardinality(*id << 32..(*id + 1) << 32);
                    Ok(FragmentDigest::new(
                        *id,
                        fragment.physical_rows,
                        fragment.physical_rows.saturating_sub(kept),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            TransitionRecord::new(
                sources,
                destinations,
                Mapping::OrderedCompaction { surviving },
            )
        })
        .collect()
}

/// The group's sources in read order: its listed fragments plus any whose rows
/// it captured but a concurrent delete removed since (the rebase drops those
/// from the positional run, yet their survivors are in the mapping). A listed
/// fragment newer than the read version (only a relabelled one) follows.
fn group_sources(read: &FragmentIndex<'_>, listed: &[u64], surviving: &RoaringTreemap) -> Vec<u64> {
    let mut sources: Vec<(usize, u64)> = listed
        .iter()
        .copied()
        .chain(surviving.bitmaps().map(|(fragment, _)| u64::from(fragment)))
        .filter_map(|id| read.position(id).map(|at| (at, id)))
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let newer = listed.iter().copied().filter(|id| !read.contains(*id));
    sources.into_iter().map(|(_, id)| id).chain(newer).collect()
}

/// Replaces the candidate's FRI entry by `entry`, and records the swap in the
/// candidate's transaction (Rewrite) so the history shows it.
fn install_entry(candidate: &mut Manifest, entry: IndexMetadata) {
    let removed: Vec<_> = candidate
        .indices
        .iter()
        .filter(|index| is_fri_entry(index))
        .map(|index| index.uuid)
        .collect();
    candidate.indices.retain(|index| !is_fri_entry(index));
    candidate.indices.push(entry.clone());
    if let Some(txn) = candidate.transaction.as_mut() {
        if let Operation::Rewrite {
            new_indices,
            removed_index_uuids,
            ..
        } = &mut txn.operation
        {
            new_indices.retain(|index| !is_fri_entry(index));
            new_indices.push(entry);
            removed_index_uuids.extend(removed);
        }
    }
}
