//! `trim_fri`: drain the FRI history of what no segment needs.
//!
//! 1. Superseded segments (every row lands in fragments newer siblings cover
//!    directly) are removed in a removal-only `CreateIndex`.
//! 2. The transitions no segment translates through any more (see
//!    `retain.rs`) are removed from the ledger; survivors keep their exact
//!    content (same canonical bytes, same fingerprints, same row maps). The
//!    entry is replaced through `CreateIndex`, or removed when the ledger is
//!    drained (the sticky FRI feature flag stays set).
//! 3. The row maps of removed stable partitions are released, not deleted:
//!    versions from before the trim still translate through them, and
//!    `cleanup_old_versions` deletes each once no retained version needs it.
//!
//! Nothing to prune or trim → nothing is committed. Each commit is derived
//! again from the latest version when it loses a race (retryable conflict).

mod lineage;
mod retain;
mod supersede;

use refract_core::{Error, Result};
use refract_ledger::{fingerprint_hex, Fingerprint, Mapping};
use refract_reader::history::{load_history, FriHistory};
use refract_reader::rowmap::row_map_path;
use refract_table::commit::fri_entry::{find_fri_entry, load_ledger, new_fri_entry};
use refract_table::transaction::Operation;
use refract_table::Dataset;
use serde::Serialize;
use uuid::Uuid;

pub use lineage::live;

/// Commit attempts before a retryable conflict is returned.
const MAX_ATTEMPTS: usize = 4;

/// What `trim_fri` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TrimReport {
    /// Superseded segments removed.
    pub pruned_segments: Vec<Uuid>,
    /// The version of the removal-only commit, if any.
    pub prune_version: Option<u64>,
    /// Records (transitions and legacy groups) before the trim.
    pub transitions_before: usize,
    /// Records kept.
    pub transitions_kept: usize,
    /// Fingerprints (hex) of the removed records.
    pub removed_transitions: Vec<String>,
    /// Row maps the trimmed ledger no longer references (dataset-relative
    /// paths). They stay on storage while an older version references them,
    /// so indexed queries at that version keep translating;
    /// `cleanup_old_versions` deletes each once no retained version does.
    pub row_maps_released: Vec<String>,
    /// True when the drained FRI entry was removed.
    pub fri_removed: bool,
    /// The version of the trim commit, if any.
    pub committed_version: Option<u64>,
}

impl TrimReport {
    /// True when nothing was committed.
    pub fn is_noop(&self) -> bool {
        self.prune_version.is_none() && self.committed_version.is_none()
    }
}

/// Prunes superseded segments, then trims the FRI history. On a commit
/// `dataset` moves to the new version.
///
/// # Errors
/// NotSupported when this client may not write the table or the
/// history holds transitions it cannot read (it cannot rewrite such a ledger);
/// Corrupt / NotFound for a damaged ledger; a retryable Conflict after
/// repeated lost races.
pub async fn trim_fri(dataset: &mut Dataset) -> Result<TrimReport> {
    dataset
        .features()
        .check_write(dataset.manifest().writer_flags)?;
    let mut report = TrimReport::default();
    let mut attempt = 1;
    loop {
        match prune(dataset, &mut report).await {
            Err(err) if retry(&err, attempt) => attempt += 1,
            other => break other?,
        }
        *dataset = dataset.checkout_latest().await?;
    }
    let mut attempt = 1;
    loop {
        match trim(dataset, &mut report).await {
            Err(err) if retry(&err, attempt) => attempt += 1,
            other => break other?,
        }
        *dataset = dataset.checkout_latest().await?;
    }
    Ok(report)
}

/// True when a lost commit race should be derived again from the latest version.
fn retry(err: &Error, attempt: usize) -> bool {
    let again = err.is_retryable_conflict() && attempt < MAX_ATTEMPTS;
    if again {
        tracing::debug!(%err, attempt, "trim_fri: lost a commit race; deriving again");
    }
    again
}

/// The snapshot's FRI history, when it has one.
async fn history(dataset: &Dataset) -> Result<Option<std::sync::Arc<FriHistory>>> {
    match find_fri_entry(dataset.manifest())? {
        Some(entry) => Ok(Some(
            load_history(dataset.store(), dataset.session().cache(), entry).await?,
        )),
        None => Ok(None),
    }
}

async fn prune(dataset: &mut Dataset, report: &mut TrimReport) -> Result<()> {
    {
        let history = history(dataset).await?;
        let pruned = supersede::superseded(
            history.as_deref(),
            &live(dataset.manifest()),
            &dataset.manifest().indices,
        );
        if pruned.is_empty() {
            return Ok(());
        }
        let committed = dataset
            .commit(Operation::CreateIndex {
                new_indices: Vec::new(),
                removed_index_uuids: pruned.clone(),
            })
            .await?;
        report.pruned_segments = pruned;
        report.prune_version = Some(committed.version());
        *dataset = committed;
        Ok(())
    }
}

async fn trim(dataset: &mut Dataset, report: &mut TrimReport) -> Result<()> {
    {
        let Some((entry, mut ledger)) = load_ledger(dataset).await? else {
            return Ok(());
        };
        if ledger.has_unsupported_transitions() {
            return Err(Error::not_supported(
                "the FRI history holds transitions this client cannot read, so it cannot be \
                 trimmed; upgrade to a newer version of Refract",
            ));
        }
        let history = load_history(dataset.store(), dataset.session().cache(), &entry).await?;
        let keep = retain::retained(
            &history,
            &live(dataset.manifest()),
            &dataset.manifest().indices,
        );
        let removed: Vec<&refract_reader::history::TransitionNode> = history
            .nodes()
            .iter()
            .zip(&keep)
            .filter(|(_, keep)| !**keep)
            .map(|(node, _)| node)
            .collect();
        report.transitions_before = history.nodes().len();
        report.transitions_kept = report.transitions_before - removed.len();
        if removed.is_empty() && !ledger.is_empty() {
            report.removed_transitions.clear();
            return Ok(());
        }
        let fingerprints: Vec<Fingerprint> = removed.iter().map(|n| *n.fingerprint()).collect();
        ledger.remove_transitions(&fingerprints)?;
        let (new_indices, drained) = if ledger.is_empty() {
            (Vec::new(), true)
        } else {
            let replacement = new_fri_entry(dataset.store(), &ledger, dataset.version()).await?;
            (vec![replacement], false)
        };
        let committed = dataset
            .commit(Operation::CreateIndex {
                new_indices,
                removed_index_uuids: vec![entry.uuid],
            })
            .await?;
        report.removed_transitions = fingerprints.iter().map(fingerprint_hex).collect();
        report.fri_removed = drained;
        report.committed_version = Some(committed.version());
        *dataset = committed;
        report.row_maps_released = released_row_maps(&removed);
        Ok(())
    }
}

/// The row maps of removed stable partitions.
fn released_row_maps(removed: &[&refract_reader::history::TransitionNode]) -> Vec<String> {
    removed
        .iter()
        .filter_map(|node| match node.record.mapping() {
            Mapping::StablePartition { map_id, .. } => Some(row_map_path(map_id).to_string()),
            _ => None,
        })
        .collect()
}
