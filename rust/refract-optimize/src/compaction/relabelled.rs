//! Following fragments a later commit relabelled.
//!
//! A commit that replaces a run before the table's tail relabels every later
//! fragment (Lance keeps the fragment list sorted by id; see
//! `refract_table`'s commit): same data and deletion files, a fresh id,
//! offsets unchanged. Results planned before that commit name the old ids,
//! so a batch committed after another batch (`commit_every`, a second
//! coordinator) would find its sources gone. Data files belong to exactly one
//! fragment, so a relabelled source is the latest fragment holding the same
//! files; the results are renamed onto it and committed on top of the latest
//! version.
//!
//! Renaming is safe only when no source's deletions changed since the
//! result's read version (a rebase from the original read version would
//! otherwise translate them; from the latest it cannot see them): then the
//! results come back unchanged and the commit rebases, or conflicts, as any.

use std::collections::HashMap;

use refract_core::{Error, Result};
use refract_table::format::{Fragment, Manifest};
use roaring::RoaringTreemap;

use super::execute::RewriteResult;
use super::verify::ReadIndex;

/// What following relabels produced.
pub(super) struct Followed {
    /// The results, with relabelled sources renamed.
    pub results: Vec<RewriteResult>,
    /// The version to commit on: the latest when a source was renamed (every
    /// result now names fragments of that version), else the oldest read.
    pub read_version: u64,
}

/// Renames the sources of `results` that `latest` holds under a new id (see
/// the module docs). Work is linear in the fragments, never in rows.
///
/// # Errors
/// Corrupt when a result's captured rows cannot be decoded or re-encoded.
pub(super) fn follow_relabels(
    reads: &ReadIndex<'_>,
    latest: &Manifest,
    results: Vec<RewriteResult>,
    read_version: u64,
) -> Result<Followed> {
    let index = latest.fragment_index();
    let gone = |result: &RewriteResult| {
        result
            .old_fragment_ids
            .iter()
            .any(|id| !index.contains(*id))
    };
    if results.iter().any(gone) {
        if let Some(renamed) = renamed_results(reads, latest, &results)? {
            return Ok(Followed {
                results: renamed,
                read_version: latest.version,
            });
        }
    }
    Ok(Followed {
        results,
        read_version,
    })
}

/// `results` renamed onto `latest`, or None when a source cannot be followed
/// safely (not found by its files, or its deletions changed).
fn renamed_results(
    reads: &ReadIndex<'_>,
    latest: &Manifest,
    results: &[RewriteResult],
) -> Result<Option<Vec<RewriteResult>>> {
    let index = latest.fragment_index();
    let holders = Holders::of(latest);
    let mut renamed = Vec::with_capacity(results.len());
    for result in results {
        let mut ids = Vec::with_capacity(result.old_fragment_ids.len());
        for id in &result.old_fragment_ids {
            let Some(read) = reads.fragment(result.read_version, *id) else {
                return Ok(None);
            };
            let Some(now) = index.get(*id).or_else(|| holders.holder_of(read)) else {
                return Ok(None);
            };
            if deletions(read) != deletions(now) {
                return Ok(None);
            }
            ids.push((*id, now.id));
        }
        renamed.push(rename(result, &ids)?);
    }
    Ok(Some(renamed))
}

/// The fragments of one version by their data files (a data file belongs to
/// exactly one fragment, whatever its id).
struct Holders<'a> {
    by_first_file: HashMap<&'a str, &'a Fragment>,
}

impl<'a> Holders<'a> {
    fn of(manifest: &'a Manifest) -> Self {
        let by_first_file = manifest
            .fragments
            .iter()
            .filter_map(|fragment| Some((fragment.files.first()?.path.as_str(), fragment)))
            .collect();
        Self { by_first_file }
    }

    /// The fragment holding exactly `fragment`'s data files.
    fn holder_of(&self, fragment: &Fragment) -> Option<&'a Fragment> {
        let now = self
            .by_first_file
            .get(fragment.files.first()?.path.as_str())?;
        (now.files == fragment.files).then_some(*now)
    }
}

/// Which deletion write a fragment carries (a relabel copies the file under
/// the new id's name but keeps these).
fn deletions(fragment: &Fragment) -> Option<(u64, u64)> {
    fragment
        .deletion_file
        .as_ref()
        .map(|file| (file.read_version, file.id))
}

/// `result` with its sources renamed by `ids` (old, new), their captured rows
/// moved to the new ids (offsets unchanged).
fn rename(result: &RewriteResult, ids: &[(u64, u64)]) -> Result<RewriteResult> {
    let new_id = |old: u64| {
        ids.iter()
            .find(|(from, _)| *from == old)
            .map_or(old, |(_, to)| *to)
    };
    let mut by_fragment: Vec<(u32, roaring::RoaringBitmap)> = Vec::new();
    for (fragment, rows) in result.surviving()?.bitmaps() {
        let id = new_id(u64::from(fragment));
        let id = u32::try_from(id)
            .map_err(|_| Error::corrupt("rewrite result", format!("fragment id {id}")))?;
        by_fragment.push((id, rows.clone()));
    }
    // Relabels keep relative order, but ids of other sources may interleave.
    by_fragment.sort_unstable_by_key(|(id, _)| *id);
    let surviving = RoaringTreemap::from_bitmaps(by_fragment);
    let mut bytes = Vec::with_capacity(surviving.serialized_size());
    surviving
        .serialize_into(&mut bytes)
        .map_err(|e| Error::corrupt("rewrite result", format!("surviving addresses: {e}")))?;
    Ok(RewriteResult {
        old_fragment_ids: result
            .old_fragment_ids
            .iter()
            .map(|id| new_id(*id))
            .collect(),
        surviving_old_addresses: bytes,
        ..result.clone()
    })
}

/// The ids at `after` of the fragments `ids` names at `before`: a fragment
/// keeps its data files when a commit relabels it, so it is found by them.
/// Ids whose fragment was rewritten or removed are dropped. Use it to carry
/// [`CompactionOptions::excluded_fragment_ids`](super::CompactionOptions)
/// from one run to the next. Linear in the fragments of both versions.
pub fn follow_fragment_ids(before: &Manifest, after: &Manifest, ids: &[u64]) -> Vec<u64> {
    let before = before.fragment_index();
    let holders = Holders::of(after);
    ids.iter()
        .filter_map(|id| Some(holders.holder_of(before.get(*id)?)?.id))
        .collect()
}
