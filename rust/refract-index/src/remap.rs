//! Remapping index segments after a rewrite.
//!
//! [`remap_segment`] rewrites one segment through a [`Translator`] into a new
//! segment (new uuid, coverage restamped). Streaming types translate in bounded
//! batches. Legacy plugins get the core's budgeted materialized map; when it
//! declines (over budget, unknown fragments or row counts) the segment is
//! skipped with a logged reason and keeps its history — never an abort. I/O and
//! corruption errors still fail.

use std::collections::BTreeMap;

use refract_core::materialize::{materialize, MaterializeBudget};
use refract_core::{Error, Result, RowAddrRemap};
use std::sync::Arc;

use refract_table::format::LanceIndexFields;
use refract_table::io::{index_dir, FileJournal};
use refract_table::{Dataset, IndexMetadata, Manifest};
use roaring::RoaringBitmap;
use serde::Serialize;
use uuid::Uuid;

use crate::manage::{index_context, user_segments};
use crate::registry::{name_segment, IndexRegistry, RegisteredType};
use crate::types::{IndexContext, Translator};

/// What happened to one segment.
#[derive(Debug, Clone, PartialEq)]
pub enum RemapOutcome {
    /// Rewritten: the replacement entry (new uuid, restamped coverage).
    Remapped(Box<IndexMetadata>),
    /// Left as it was.
    Skipped {
        /// Why, as a category.
        reason: DeclineReason,
        /// Why, one line for people.
        message: String,
    },
}

/// Why a segment was left as it was (it keeps translating; rebuilding the
/// index catches it up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeclineReason {
    /// The segment has no stored fragment bitmap, so what it covers is unknown.
    UnknownCoverage,
    /// The segment's index type is not registered in this process.
    UnknownIndexType,
    /// A legacy plugin's materialized map would exceed its budget.
    OverBudget,
    /// The legacy fallback needs row counts (of a fragment, or of the
    /// segment's stored fragments) that are no longer known.
    RowsUnknown,
    /// The type does not remap this segment's layout or index version
    /// (NotSupported before anything was written).
    UnsupportedLayout,
}

/// A segment that was not remapped, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipReport {
    /// Segment uuid.
    pub uuid: Uuid,
    /// Logical index name.
    pub name: String,
    /// Why it was skipped.
    pub reason: DeclineReason,
    /// Why, one line for people.
    pub message: String,
}

/// Inputs of [`remap_segment`] besides the segment and the translator.
#[derive(Debug, Clone, Default)]
pub struct RemapOptions {
    /// Budget of a legacy plugin's materialized map.
    pub budget: MaterializeBudget,
    /// Physical rows of the fragments the segment stores (legacy plugins only;
    /// a missing fragment declines with `FragmentRowsUnknown`).
    pub fragment_rows: BTreeMap<u64, u64>,
    /// `dataset_version` stamped on the new entry.
    pub dataset_version: u64,
}

/// Rewrites `meta` through `translator` into a new segment covering `new_coverage`.
///
/// # Errors
/// InvalidInput for a system entry; the type's remap errors (Corrupt for
/// damaged segment files, the translator's errors, store errors). Unknown
/// types and declined materializations are `Skipped`, not errors.
pub async fn remap_segment(
    ctx: &IndexContext,
    registry: &IndexRegistry,
    meta: &IndexMetadata,
    translator: &dyn Translator,
    new_coverage: RoaringBitmap,
    options: &RemapOptions,
) -> Result<RemapOutcome> {
    if meta.is_system() {
        return Err(Error::invalid_input(format!(
            "system entry '{}' is never remapped",
            meta.name
        )));
    }
    let registered = match registry.get(&meta.index_type) {
        Ok(registered) => registered,
        Err(err) => return Ok(skip(meta, DeclineReason::UnknownIndexType, &err)),
    };
    let uuid = Uuid::new_v4();
    let old_dir = index_dir(&meta.uuid);
    let new_dir = index_dir(&uuid);
    let journal = Arc::new(FileJournal::new());
    let ctx = &ctx.for_segment(meta).recording(journal.clone());
    let details = match registered {
        RegisteredType::Streaming(t) => {
            let remapped = async {
                t.check_index_version(meta.index_version)?;
                t.remap(ctx, &old_dir, &meta.details, &new_dir, translator)
                    .await
            };
            match remapped.await {
                Ok(details) => details,
                Err(err @ Error::NotSupported { .. }) => {
                    return Ok(skip(meta, DeclineReason::UnsupportedLayout, &err))
                }
                Err(err) => return Err(name_segment(t.name(), &old_dir, err)),
            }
        }
        RegisteredType::Legacy(t) => {
            let stored: Option<Vec<u64>> = meta
                .fragment_bitmap
                .as_ref()
                .map(|b| b.iter().map(u64::from).collect());
            let map = match materialize(
                translator,
                stored.as_deref(),
                |id| options.fragment_rows.get(&id).copied(),
                options.budget,
            ) {
                Ok(map) => map,
                Err(err @ Error::OverBudget { .. }) => {
                    return Ok(skip(meta, DeclineReason::OverBudget, &err))
                }
                Err(err @ (Error::FragmentRowsUnknown { .. } | Error::StoredFragmentsUnknown)) => {
                    return Ok(skip(meta, DeclineReason::RowsUnknown, &err))
                }
                Err(err) => return Err(err),
            };
            t.remap_legacy(ctx, &old_dir, &meta.details, &new_dir, &map)
                .await
                .map_err(|err| name_segment(t.name(), &old_dir, err))?
        }
    };
    Ok(RemapOutcome::Remapped(Box::new(IndexMetadata {
        uuid,
        name: meta.name.clone(),
        fields: meta.fields.clone(),
        fragment_bitmap: Some(new_coverage),
        index_type: meta.index_type.clone(),
        details,
        index_version: registered.remapped_index_version(meta.index_version),
        dataset_version: options.dataset_version,
        files: journal.take_under(&new_dir),
        lance: LanceIndexFields {
            metadata: meta.lance.metadata.clone(),
            ..LanceIndexFields::default()
        },
    })))
}

fn skip(meta: &IndexMetadata, reason: DeclineReason, err: &Error) -> RemapOutcome {
    let message = err.to_string();
    tracing::warn!(
        index = %meta.name,
        segment = %meta.uuid,
        reason = ?reason,
        %message,
        "skipping index segment remap; it keeps its history (rebuild the index to catch it up)"
    );
    RemapOutcome::Skipped { reason, message }
}

/// One rewrite group as seen by index remap: old fragment ids and the final ids
/// of their replacements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewrittenGroup {
    /// Replaced fragments.
    pub old_fragment_ids: Vec<u64>,
    /// Final ids of the new fragments.
    pub new_fragment_ids: Vec<u64>,
}

/// The index changes a rewrite commit should carry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexRewrite {
    /// Replacement entries.
    pub new_indices: Vec<IndexMetadata>,
    /// Uuids of replaced entries.
    pub removed_index_uuids: Vec<Uuid>,
    /// Segments left unchanged, with reasons.
    pub skipped: Vec<SkipReport>,
}

/// Remaps every user segment of `candidate` whose coverage meets the rewritten
/// fragments, through `remap`. For inline compaction (from a commit hook):
/// `dataset` is the version the candidate is based on (row counts of old
/// fragments come from it). A segment covering only part of a group is
/// InvalidInput (compaction bins never split coverage); a segment with unknown
/// coverage is skipped. System entries are never touched.
///
/// # Errors
/// InvalidInput for a segment covering part of a group or a fragment id above
/// `u32`; the errors of [`remap_segment`].
pub async fn remap_indices_for_rewrite(
    dataset: &Dataset,
    candidate: &Manifest,
    remap: &RowAddrRemap,
    groups: &[RewrittenGroup],
    registry: &IndexRegistry,
    budget: MaterializeBudget,
) -> Result<IndexRewrite> {
    let ctx = index_context(dataset);
    let mut result = IndexRewrite::default();
    for meta in user_segments(&candidate.indices) {
        let Some(stored) = &meta.fragment_bitmap else {
            if !groups.is_empty() {
                result.skipped.push(SkipReport {
                    uuid: meta.uuid,
                    name: meta.name.clone(),
                    reason: DeclineReason::UnknownCoverage,
                    message: "fragment coverage unknown".to_string(),
                });
            }
            continue;
        };
        let Some(new_coverage) = restamp(meta, stored, groups)? else {
            continue;
        };
        let options = RemapOptions {
            budget,
            fragment_rows: stored
                .iter()
                .filter_map(|id| {
                    let fragment = dataset.manifest().fragment(u64::from(id))?;
                    Some((fragment.id, fragment.physical_rows))
                })
                .collect(),
            dataset_version: candidate.version,
        };
        match remap_segment(&ctx, registry, meta, remap, new_coverage, &options).await? {
            RemapOutcome::Remapped(new) => {
                result.removed_index_uuids.push(meta.uuid);
                result.new_indices.push(*new);
            }
            RemapOutcome::Skipped { reason, message } => result.skipped.push(SkipReport {
                uuid: meta.uuid,
                name: meta.name.clone(),
                reason,
                message,
            }),
        }
    }
    Ok(result)
}

/// Applies an [`IndexRewrite`] to a candidate manifest (replaced entries
/// removed, new ones appended; system entries untouched).
pub fn apply_index_rewrite(candidate: &mut Manifest, rewrite: &IndexRewrite) {
    candidate
        .indices
        .retain(|m| m.is_system() || !rewrite.removed_index_uuids.contains(&m.uuid));
    candidate
        .indices
        .extend(rewrite.new_indices.iter().cloned());
}

/// The segment's coverage after the rewrite, or `None` if no group touches it.
fn restamp(
    meta: &IndexMetadata,
    stored: &RoaringBitmap,
    groups: &[RewrittenGroup],
) -> Result<Option<RoaringBitmap>> {
    let mut coverage = stored.clone();
    let mut touched = false;
    for group in groups {
        let old = to_bitmap(&group.old_fragment_ids)?;
        let hit = stored & &old;
        if hit.is_empty() {
            continue;
        }
        if hit.len() != old.len() {
            return Err(Error::invalid_input(format!(
                "index segment {} ('{}') covers only part of a rewrite group ({} of {} fragments)",
                meta.uuid,
                meta.name,
                hit.len(),
                old.len()
            )));
        }
        touched = true;
        coverage -= &old;
        coverage |= to_bitmap(&group.new_fragment_ids)?;
    }
    Ok(touched.then_some(coverage))
}

fn to_bitmap(ids: &[u64]) -> Result<RoaringBitmap> {
    ids.iter()
        .map(|id| crate::manage::fragment_id_u32(*id))
        .collect()
}
