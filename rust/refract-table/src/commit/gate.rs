//! The write gate: every commit on a table tagged with the FRI feature flag is
//! classified before it is published, and operations that cannot preserve the
//! version-1 history are refused with an upgrade error.
//!
//! The gate runs on every commit attempt, after the commit hook, on the
//! candidate manifest (so it sees exactly what would be published). It also
//! sets the paired FRI flag when the candidate carries a version-1 entry; the
//! flag is never cleared (the candidate starts from the latest manifest, whose
//! flags it keeps). See the "Write gate" section of `docs/fri.md`.

use std::collections::HashSet;

use refract_core::{Error, Result};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_ledger::{Fingerprint, Ledger, FRI_INDEX_VERSION_TAGGED};
use uuid::Uuid;

use super::fri_entry::{decode_entry, find_fri_entry, is_fri_entry, is_tagged};
use crate::dataset::Dataset;
use crate::format::{IndexMetadata, Manifest};
use crate::transaction::Operation;

/// Why a commit on a tagged table was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The table carries no version-1 history and no FRI flag: nothing to guard.
    Untagged,
    /// Append or Delete: no row changes its address.
    MovesNoRows,
    /// CreateIndex that leaves the FRI entry alone.
    MaintainsUserIndices,
    /// A rewrite (Rewrite or Partition) whose every covered source is consumed
    /// by a transition appended in this commit.
    AppendsTransitions,
    /// A rewrite of fragments that no user segment and no history covers, or
    /// whose covering segments were all remapped inline in the same commit.
    RewritesUncoveredFragments,
    /// A CreateIndex replacing the FRI entry by one holding a subset of its
    /// records (a trim), or removing a drained entry.
    TrimsHistory,
    /// A CreateIndex installing a history on a table without one, or replacing
    /// the entry by one that keeps every record and adds more.
    ExtendsHistory,
    /// A Restore whose FRI entry is the current one, or whose history no user
    /// segment translates through.
    RestoresManifest,
}

/// The message every refusal carries.
const UPGRADE: &str = "upgrade to a writer supporting tagged histories";

fn refuse(why: String) -> Error {
    Error::not_supported(format!(
        "{why}; this operation cannot preserve the table's FRI history: {UPGRADE}"
    ))
}

/// Classifies the candidate built on `latest`, setting the FRI flag pair when
/// the candidate carries a version-1 entry. Errors: NotSupported (upgrade
/// error) for operations that would lose or break the history; InvalidInput
/// for FRI entries derived against a stale version.
pub(crate) async fn admit(latest: &Dataset, candidate: &mut Manifest) -> Result<Admission> {
    if candidate.indices.iter().filter(|i| is_fri_entry(i)).count() > 1 {
        return Err(Error::invalid_input(
            "the commit adds an FRI entry without replacing the current one \
             (derived against a stale version)",
        ));
    }
    if find_fri_entry(candidate)?.is_some_and(|e| e.index_version >= FRI_INDEX_VERSION_TAGGED) {
        candidate.reader_flags |= FLAG_FRAGMENT_REUSE_INDEX;
        candidate.writer_flags |= FLAG_FRAGMENT_REUSE_INDEX;
    }
    if !is_tagged(candidate) {
        return Ok(Admission::Untagged);
    }
    let Some(txn) = candidate.transaction.clone() else {
        return Ok(Admission::Untagged);
    };
    let admission = match &txn.operation {
        Operation::Append { .. } | Operation::Delete { .. } => Admission::MovesNoRows,
        Operation::CreateIndex { .. } => {
            if fri_changed(latest.manifest(), candidate)? {
                classify_history_update(latest, candidate).await?
            } else {
                Admission::MaintainsUserIndices
            }
        }
        Operation::Rewrite { .. } => {
            let sources = txn.operation.touched_fragment_ids();
            // Judge what would be published: a commit hook (inline remap) may
            // have replaced segments beyond those the transaction names.
            let replaced = replaced_segments(latest.manifest(), candidate);
            classify_rewrite(latest, candidate, &sources, &replaced).await?
        }
        Operation::Partition { .. } => {
            let sources = txn.operation.touched_fragment_ids();
            classify_rewrite(latest, candidate, &sources, &[]).await?
        }
        Operation::Restore { version } => classify_restore(latest, candidate, *version).await?,
        Operation::Lance { name } => {
            return Err(Error::invalid_input(format!(
                "Refract does not commit Lance's {name} operation"
            )))
        }
    };
    tracing::debug!(?admission, version = candidate.version, "FRI write gate");
    Ok(admission)
}

/// True when the candidate's FRI entry differs from the latest's.
fn fri_changed(latest: &Manifest, candidate: &Manifest) -> Result<bool> {
    let before = find_fri_entry(latest)?.map(|e| e.uuid);
    let after = find_fri_entry(candidate)?.map(|e| e.uuid);
    Ok(before != after)
}

/// The ledgers before (latest) and after (candidate) the commit.
struct Histories {
    before: Option<Ledger>,
    after: Option<Ledger>,
}

async fn histories(latest: &Dataset, candidate: &Manifest) -> Result<Histories> {
    let before = match find_fri_entry(latest.manifest())? {
        Some(entry) => Some(decode_entry(latest.store(), entry).await?),
        None => None,
    };
    let after = match find_fri_entry(candidate)? {
        Some(entry) => {
            let unchanged =
                find_fri_entry(latest.manifest())?.is_some_and(|e| e.uuid == entry.uuid);
            match (&before, unchanged) {
                (Some(ledger), true) => Some(ledger.clone()),
                _ => Some(decode_entry(latest.store(), entry).await?),
            }
        }
        None => None,
    };
    Ok(Histories { before, after })
}

/// Fingerprints of every record (legacy groups and transitions).
fn records(ledger: &Ledger) -> HashSet<Fingerprint> {
    ledger.lineage().iter().map(|r| *r.fingerprint()).collect()
}

/// Every fragment id some record consumes or produces.
fn lineage_fragments(ledger: &Ledger) -> HashSet<u64> {
    ledger
        .lineage()
        .iter()
        .flat_map(|r| r.sources().iter().chain(r.destinations()).map(|d| d.id))
        .collect()
}

fn check_v1(after: &Ledger) -> Result<()> {
    if after.index_version() < FRI_INDEX_VERSION_TAGGED {
        return Err(Error::invalid_input(
            "a version-0 FRI entry cannot be published on a table tagged with the FRI flag \
             (the flag is permanent)",
        ));
    }
    Ok(())
}

/// CreateIndex that replaces, installs or removes the FRI entry.
async fn classify_history_update(latest: &Dataset, candidate: &Manifest) -> Result<Admission> {
    let Histories { before, after } = histories(latest, candidate).await?;
    match (before, after) {
        (_, None) => Ok(Admission::TrimsHistory),
        (None, Some(after)) => {
            check_v1(&after)?;
            Ok(Admission::ExtendsHistory)
        }
        (Some(before), Some(after)) => {
            check_v1(&after)?;
            if before.has_unsupported_transitions() {
                return Err(refuse(
                    "the FRI ledger holds transitions this client does not understand".into(),
                ));
            }
            let (old, new) = (records(&before), records(&after));
            if new.is_subset(&old) {
                Ok(Admission::TrimsHistory)
            } else if old.is_subset(&new) {
                Ok(Admission::ExtendsHistory)
            } else {
                Err(refuse(
                    "a CreateIndex replaces the FRI entry with a ledger that both drops and adds \
                     records"
                        .into(),
                ))
            }
        }
    }
}

/// Segments of `latest` that the candidate no longer carries.
fn replaced_segments(latest: &Manifest, candidate: &Manifest) -> Vec<Uuid> {
    let kept: HashSet<Uuid> = candidate.indices.iter().map(|index| index.uuid).collect();
    latest
        .indices
        .iter()
        .filter(|index| !kept.contains(&index.uuid))
        .map(|index| index.uuid)
        .collect()
}

/// Rewrite or Partition of `sources`.
async fn classify_rewrite(
    latest: &Dataset,
    candidate: &Manifest,
    sources: &[u64],
    remapped: &[Uuid],
) -> Result<Admission> {
    let changed = fri_changed(latest.manifest(), candidate)?;
    let Histories { before, after } = histories(latest, candidate).await?;
    if changed {
        if let (Some(before), Some(after)) = (&before, &after) {
            check_v1(after)?;
            if !records(before).is_subset(&records(after)) {
                return Err(refuse(
                    "a rewrite may only append to the FRI history, but this one drops records"
                        .into(),
                ));
            }
        } else if after.is_none() && before.is_some() {
            return Err(refuse("a rewrite may not remove the FRI entry".into()));
        }
    }
    let consumed: HashSet<u64> = after
        .as_ref()
        .filter(|_| changed)
        .map(|ledger| {
            ledger
                .lineage()
                .iter()
                .flat_map(|r| r.sources().iter().map(|d| d.id))
                .collect()
        })
        .unwrap_or_default();
    let history: HashSet<u64> = before.as_ref().map(lineage_fragments).unwrap_or_default();
    let unknown_history = before
        .as_ref()
        .is_some_and(Ledger::has_unsupported_transitions);
    let mut appended = false;
    for &source in sources {
        if consumed.contains(&source) {
            appended = true;
            continue;
        }
        if unknown_history {
            return Err(refuse(format!(
                "fragment {source} is rewritten without a transition while the FRI ledger holds \
                 transitions this client does not understand"
            )));
        }
        if history.contains(&source) {
            return Err(refuse(format!(
                "fragment {source} is covered by the FRI history but the rewrite records no \
                 transition for it"
            )));
        }
        if let Some(segment) = latest
            .manifest()
            .indices
            .iter()
            .find(|index| covers(index, source) && !remapped.contains(&index.uuid))
        {
            return Err(refuse(format!(
                "fragment {source} is covered by index '{}' (segment {}), which the rewrite \
                 neither remapped nor recorded a transition for",
                segment.name, segment.uuid
            )));
        }
    }
    Ok(if appended {
        Admission::AppendsTransitions
    } else {
        Admission::RewritesUncoveredFragments
    })
}

/// A user segment covers `fragment` when its stored bitmap holds it; a segment
/// without a bitmap has unknown coverage and is treated as covering.
pub(super) fn covers(index: &IndexMetadata, fragment: u64) -> bool {
    if index.is_system() {
        return false;
    }
    match &index.fragment_bitmap {
        None => true,
        Some(bitmap) => u32::try_from(fragment).is_ok_and(|id| bitmap.contains(id)),
    }
}

/// Restore: the restored FRI must be the current one, or one nothing needs.
async fn classify_restore(
    latest: &Dataset,
    candidate: &mut Manifest,
    version: u64,
) -> Result<Admission> {
    if !fri_changed(latest.manifest(), candidate)? {
        return Ok(Admission::RestoresManifest);
    }
    let Some(entry) = find_fri_entry(candidate)?.cloned() else {
        return Ok(Admission::RestoresManifest);
    };
    let restored = decode_entry(latest.store(), &entry).await?;
    let sources: HashSet<u64> = restored
        .lineage()
        .iter()
        .flat_map(|r| r.sources().iter().map(|d| d.id))
        .collect();
    let translating = candidate.indices.iter().find(|index| {
        !index.is_system()
            && (restored.has_unsupported_transitions()
                || index.fragment_bitmap.as_ref().is_none_or(|bitmap| {
                    sources
                        .iter()
                        .any(|id| u32::try_from(*id).is_ok_and(|id| bitmap.contains(id)))
                }))
    });
    if let Some(segment) = translating {
        return Err(refuse(format!(
            "restoring version {version} would bring back an older FRI history (entry {}) that \
             index '{}' still translates through; its row maps may have been trimmed since",
            entry.uuid, segment.name
        )));
    }
    if entry.index_version < FRI_INDEX_VERSION_TAGGED {
        // A version-0 history nothing translates through is dead; it cannot be
        // published on a tagged table (the flag is permanent), so it is dropped.
        candidate.indices.retain(|index| index.uuid != entry.uuid);
    }
    Ok(Admission::RestoresManifest)
}
