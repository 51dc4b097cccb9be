//! Recognising compaction results that already landed.
//!
//! A coordinator killed right after its commit, or two coordinators committing
//! the same results, would otherwise be told that the result files "already
//! belong to the table" or get a retryable conflict that no retry can resolve.
//! A result landed when a Rewrite committed after its read version published
//! every one of its new files; its data files have fresh uuid names, so no
//! other commit can publish them.

use std::collections::HashSet;

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::transaction::Operation;

use super::execute::RewriteResult;

/// Where a result set stands against the table's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Landing {
    /// No result has landed.
    Pending,
    /// Every result landed; the newest version holding one of them.
    Committed(u64),
}

/// True when the latest version references a file some result wrote: only
/// then can a result have landed without a later conflict showing it.
pub(crate) fn references_any(latest: &Dataset, results: &[RewriteResult]) -> bool {
    let referenced: HashSet<&str> = latest
        .fragments()
        .iter()
        .flat_map(|fragment| fragment.files.iter().map(|file| file.path.as_str()))
        .collect();
    results
        .iter()
        .flat_map(|result| &result.new_files)
        .any(|file| referenced.contains(file.path.as_str()))
}

/// Walks the versions after the results' read versions, newest first, to the
/// Rewrites that published their files. Errors: InvalidInput when only some
/// results landed (commit the others on their own), or a result's files are
/// split over several commits; the errors of reading a manifest.
pub(crate) async fn find_landing(latest: &Dataset, results: &[RewriteResult]) -> Result<Landing> {
    let oldest_read = results.iter().map(|r| r.read_version).min().unwrap_or(0);
    let mut landed: Vec<Option<u64>> = vec![None; results.len()];
    let mut version = latest.version();
    while version > oldest_read && landed.iter().any(Option::is_none) {
        let manifest = latest.checkout_version(version).await?;
        if let Some(Operation::Rewrite { groups, .. }) = manifest
            .manifest()
            .transaction
            .as_ref()
            .map(|txn| &txn.operation)
        {
            let published: HashSet<&str> = groups
                .iter()
                .flat_map(|group| &group.new_fragments)
                .flat_map(|fragment| fragment.files.iter().map(|file| file.path.as_str()))
                .collect();
            for (result, slot) in results.iter().zip(landed.iter_mut()) {
                if slot.is_some() || version <= result.read_version {
                    continue;
                }
                let found = result
                    .new_files
                    .iter()
                    .filter(|file| published.contains(file.path.as_str()))
                    .count();
                if found == result.new_files.len() && found > 0 {
                    *slot = Some(version);
                } else if found > 0 {
                    return Err(Error::invalid_input(format!(
                        "compaction result of task {}: version {version} published only {found} of its {} files",
                        result.task_index,
                        result.new_files.len()
                    )));
                }
            }
        }
        version -= 1;
    }
    let done: Vec<usize> = results
        .iter()
        .zip(&landed)
        .filter(|(_, slot)| slot.is_some())
        .map(|(result, _)| result.task_index)
        .collect();
    match landed.iter().flatten().max() {
        None => Ok(Landing::Pending),
        Some(newest) if done.len() == results.len() => Ok(Landing::Committed(*newest)),
        Some(newest) => Err(Error::invalid_input(format!(
            "compaction results of tasks {done:?} already landed (newest in version {newest}); commit the other results on their own"
        ))),
    }
}
