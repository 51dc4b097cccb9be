//! Committing compaction results: verified, rebased over concurrent commits,
//! with the index remap inline or recorded in the FRI.

use std::sync::Arc;

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::transaction::{Operation, RewriteGroup, Transaction};
use refract_table::CommitHook;
use serde::{Deserialize, Serialize};

use super::execute::RewriteResult;
use super::inline_remap::InlineRemapHook;
use super::landed::{find_landing, references_any, Landing};
use super::relabelled::{follow_relabels, Followed};
use super::verify::{verify_results, ReadIndex, ReadVersions};
use super::CompactionOptions;
use refract_index::registry::IndexRegistry;

/// What a compaction run changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionMetrics {
    /// Fragments replaced.
    pub fragments_removed: u64,
    /// Fragments written.
    pub fragments_added: u64,
    /// Data files replaced.
    pub files_removed: u64,
    /// Data files written.
    pub files_added: u64,
    /// The version the commit produced; `None` when nothing was committed.
    pub committed_version: Option<u64>,
}

/// Commits the results of a plan's tasks, in any order and any subset, as one
/// Rewrite, with the options their plan was made with (inline or deferred index
/// remap). Each result replaces its run in place; new fragment ids are assigned
/// by the commit. An empty `results` commits nothing.
///
/// Committing results that already landed (a coordinator that died after its
/// commit, or two coordinators racing with the same results) commits nothing
/// and reports the version they landed in, with the same metrics.
///
/// # Errors
/// InvalidInput when results come from plans with different options, rewrite
/// one fragment twice, fail verification (see `verify`), or only some of them
/// already landed; a retryable Conflict when a concurrent commit replaced
/// their sources; the errors of reading and committing.
pub async fn commit_compaction(
    dataset: &Dataset,
    results: Vec<RewriteResult>,
) -> Result<(Dataset, CompactionMetrics)> {
    let Some(read_version) = results.iter().map(|r| r.read_version).min() else {
        return Ok((dataset.clone(), CompactionMetrics::default()));
    };
    let options = shared_options(&results)?.clone();
    check_disjoint(&results)?;
    let latest = dataset.checkout_latest().await?;
    let reads = ReadVersions::load(dataset, &results).await?;
    let read_index = reads.index();
    let mut metrics = rewrite_metrics(&read_index, &results);
    if references_any(&latest, &results) {
        if let Landing::Committed(version) = find_landing(&latest, &results).await? {
            metrics.committed_version = Some(version);
            return Ok((latest, metrics));
        }
    }
    verify_results(dataset, &read_index, &latest, &results).await?;
    let Followed {
        results,
        read_version,
    } = follow_relabels(&read_index, latest.manifest(), results, read_version)?;
    let mut groups = Vec::with_capacity(results.len());
    for result in &results {
        groups.push(RewriteGroup {
            old_fragment_ids: result.old_fragment_ids.clone(),
            new_fragments: result.new_fragments()?,
            surviving_old_addresses: Some(result.surviving_old_addresses.clone()),
        });
    }
    let transaction = Transaction::new(
        read_version,
        Operation::Rewrite {
            groups,
            new_indices: Vec::new(),
            removed_index_uuids: Vec::new(),
        },
    );
    let hook = index_hook(&options, &results)?;
    let committed = match latest
        .commit_transaction(transaction, hook.as_deref())
        .await
    {
        Ok(committed) => committed,
        Err(conflict @ Error::Conflict { .. }) => {
            // The same results may have won the race from another coordinator.
            let now = latest.checkout_latest().await?;
            return match find_landing(&now, &results).await {
                Ok(Landing::Committed(version)) => {
                    metrics.committed_version = Some(version);
                    Ok((now, metrics))
                }
                _ => Err(conflict),
            };
        }
        Err(e) => return Err(e),
    };
    metrics.committed_version = Some(committed.version());
    Ok((committed, metrics))
}

/// The options every result carries; they must all be the same.
fn shared_options(results: &[RewriteResult]) -> Result<&CompactionOptions> {
    let Some((first, rest)) = results.split_first() else {
        return Err(Error::invalid_input("no compaction results to commit"));
    };
    if let Some(other) = rest.iter().find(|r| r.options != first.options) {
        return Err(Error::invalid_input(format!(
            "compaction results of tasks {} and {} come from plans with different options",
            first.task_index, other.task_index
        )));
    }
    Ok(&first.options)
}

/// What committing `results` changes (the committed version unset). Old
/// fragments are counted at each result's read version.
fn rewrite_metrics(reads: &ReadIndex<'_>, results: &[RewriteResult]) -> CompactionMetrics {
    let mut metrics = CompactionMetrics::default();
    for result in results {
        metrics.fragments_removed += result.old_fragment_ids.len() as u64;
        metrics.files_removed += result
            .old_fragment_ids
            .iter()
            .map(|id| {
                reads
                    .fragment(result.read_version, *id)
                    .map_or(0, |f| f.files.len() as u64)
            })
            .sum::<u64>();
        metrics.fragments_added += result.new_files.len() as u64;
        metrics.files_added += result.new_files.len() as u64;
    }
    metrics
}

/// The commit hook that keeps indices correct: inline remap of every affected
/// segment, or (deferred) a ledger transition.
fn index_hook(
    options: &CompactionOptions,
    results: &[RewriteResult],
) -> Result<Option<Box<dyn CommitHook>>> {
    if options.defer_index_remap {
        return Ok(Some(crate::fri::deferred::deferred_remap_hook()));
    }
    let registry = Arc::new(IndexRegistry::with_builtins());
    let inline: Box<dyn CommitHook> = Box::new(InlineRemapHook::new(results, registry)?);
    // On a table with FRI history, fragments reachable only through that
    // history still need a transition even when the segments are remapped inline.
    Ok(Some(crate::fri::deferred::preserve_history(Some(inline))))
}

/// Two results may not rewrite the same fragment.
fn check_disjoint(results: &[RewriteResult]) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for result in results {
        for id in &result.old_fragment_ids {
            if !seen.insert(*id) {
                return Err(Error::invalid_input(format!(
                    "fragment {id} is rewritten by more than one compaction result"
                )));
            }
        }
    }
    Ok(())
}
