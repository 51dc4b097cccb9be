//! Checking task results before they are committed.
//!
//! Results may come from other machines as JSON files, so nothing in them is
//! trusted: the old run must match the read version, the captured survivors
//! must be exactly the live rows of that run, and every new file must exist,
//! be a Lance file holding the declared rows, and not already belong to the
//! table. A result that fails any check is refused before anything commits.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::{stream, StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::io::lance_files::LanceFileReader;
use refract_table::io::paths::RelativePath;
use refract_table::io::{ReadMode, ReadOptions};
use refract_table::{Fragment, FragmentIndex};
use roaring::RoaringTreemap;

use super::execute::{RewriteResult, WrittenFile};

fn lie(result: &RewriteResult, message: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!(
        "compaction result of task {}: {message}",
        result.task_index
    ))
}

/// The read versions of a set of results, each loaded once (results
/// usually share one), with their fragments indexed by id: a lookup per
/// source fragment, not a scan of the version's list.
pub(super) struct ReadVersions {
    versions: BTreeMap<u64, Dataset>,
}

impl ReadVersions {
    /// Loads the read version of every result; `dataset` serves its own version.
    ///
    /// # Errors
    /// The errors of loading a version.
    pub(super) async fn load(dataset: &Dataset, results: &[RewriteResult]) -> Result<Self> {
        let mut versions = BTreeMap::new();
        for version in results.iter().map(|r| r.read_version) {
            if versions.contains_key(&version) {
                continue;
            }
            let read = if version == dataset.version() {
                dataset.clone()
            } else {
                dataset.checkout_version(version).await?
            };
            versions.insert(version, read);
        }
        Ok(Self { versions })
    }

    /// Each read version's fragments by id.
    pub(super) fn index(&self) -> ReadIndex<'_> {
        ReadIndex {
            versions: self
                .versions
                .iter()
                .map(|(version, read)| (*version, read.manifest().fragment_index()))
                .collect(),
        }
    }
}

/// The fragments of each read version by id (see [`ReadVersions::index`]).
pub(super) struct ReadIndex<'a> {
    versions: HashMap<u64, FragmentIndex<'a>>,
}

impl<'a> ReadIndex<'a> {
    /// Fragment `id` as it was at `version` (None when absent or not loaded).
    pub(super) fn fragment(&self, version: u64, id: u64) -> Option<&'a Fragment> {
        self.versions.get(&version).and_then(|index| index.get(id))
    }
}

/// New files verified at a time: the checks are a HEAD and a footer read per
/// file, so on object storage their latency, not their work, bounds a
/// commit of thousands of results.
const VERIFY_CONCURRENCY: usize = 16;

/// Verifies every result against its read version in `reads` and `latest`
/// (whose files a result may not claim); new files are read through
/// `dataset`'s store. See the module docs. Work and requests are linear in
/// the results: constant per source fragment and per new file.
pub(super) async fn verify_results(
    dataset: &Dataset,
    reads: &ReadIndex<'_>,
    latest: &Dataset,
    results: &[RewriteResult],
) -> Result<()> {
    let referenced: HashSet<&str> = latest
        .fragments()
        .iter()
        .flat_map(|fragment| fragment.files.iter().map(|file| file.path.as_str()))
        .collect();
    let mut claimed: HashSet<&str> = HashSet::new();
    for result in results {
        verify_sources(reads, result)?;
        for file in &result.new_files {
            if referenced.contains(file.path.as_str()) || !claimed.insert(file.path.as_str()) {
                return Err(lie(
                    result,
                    format!("{} already belongs to the table", file.path),
                ));
            }
        }
    }
    // The futures made up front (a stream mapping borrowed items through a
    // closure would not be provably Send); polled in order, so the first bad
    // file reported is the first in the results.
    let checks: Vec<_> = results
        .iter()
        .flat_map(|result| result.new_files.iter().map(move |file| (result, file)))
        .map(|(result, file)| verify_file(dataset, result, file))
        .collect();
    stream::iter(checks)
        .buffered(VERIFY_CONCURRENCY)
        .try_collect::<()>()
        .await
}

/// The old run and the captured survivors match the read version.
fn verify_sources(reads: &ReadIndex<'_>, result: &RewriteResult) -> Result<()> {
    if result.old_fragment_ids.len() != result.old_physical_rows.len()
        || result.old_fragment_ids.is_empty()
    {
        return Err(lie(result, "old fragments and their row counts disagree"));
    }
    let surviving = result.surviving()?;
    let mut counted = 0u64;
    for (id, physical_rows) in result
        .old_fragment_ids
        .iter()
        .zip(&result.old_physical_rows)
    {
        let fragment = reads.fragment(result.read_version, *id).ok_or_else(|| {
            lie(
                result,
                format!("fragment {id} is not in version {}", result.read_version),
            )
        })?;
        if fragment.physical_rows != *physical_rows {
            return Err(lie(
                result,
                format!(
                    "fragment {id} has {} physical rows, not {physical_rows}",
                    fragment.physical_rows
                ),
            ));
        }
        // Offsets at or beyond the physical rows are not counted here, so
        // they surface in the total check below.
        let in_fragment = match (survivors_of(&surviving, *id), fragment.physical_rows) {
            (Some(bitmap), rows @ 1..) => bitmap.rank(u32::try_from(rows - 1).unwrap_or(u32::MAX)),
            _ => 0,
        };
        if in_fragment != fragment.live_rows() {
            return Err(lie(
                result,
                format!(
                    "captured {in_fragment} survivors of fragment {id}, which has {} live rows",
                    fragment.live_rows()
                ),
            ));
        }
        counted += in_fragment;
    }
    if counted != surviving.len() {
        return Err(lie(
            result,
            "captured survivors lie outside the old fragments",
        ));
    }
    let written: u64 = result.new_files.iter().map(|file| file.num_rows).sum();
    if written != counted {
        return Err(lie(
            result,
            format!("{counted} survivors but {written} rows written"),
        ));
    }
    Ok(())
}

/// The survivors of `fragment_id`: a treemap keys its bitmaps by the high 32
/// bits of an address, which is exactly the fragment id.
fn survivors_of(surviving: &RoaringTreemap, fragment_id: u64) -> Option<&roaring::RoaringBitmap> {
    let id = u32::try_from(fragment_id).ok()?;
    surviving
        .bitmaps()
        .find(|(high, _)| *high == id)
        .map(|(_, bitmap)| bitmap)
}

/// The file exists under `data/`, has the declared size and rows.
async fn verify_file(dataset: &Dataset, result: &RewriteResult, file: &WrittenFile) -> Result<()> {
    let (size_bytes, num_rows) = (file.size_bytes, file.num_rows);
    let path = RelativePath::parse(&file.path)?;
    if !path.as_str().starts_with("data/") {
        return Err(lie(result, format!("{path} is not a data file path")));
    }
    let actual = match dataset.store().head(&path).await {
        Ok(size) => size,
        Err(Error::NotFound { .. }) => return Err(lie(result, format!("{path} does not exist"))),
        Err(e) => return Err(e),
    };
    if actual != size_bytes {
        return Err(lie(
            result,
            format!("{path} has {actual} bytes, not {size_bytes}"),
        ));
    }
    // Uncached: thousands of files read once would only crowd the cache.
    let reader = LanceFileReader::open(
        dataset.store(),
        &path,
        ReadOptions {
            known_size: Some(actual),
            checksum: file.checksum.as_ref(),
            mode: ReadMode::OnePass,
        },
    )
    .await?;
    if reader.num_rows() != num_rows || num_rows == 0 {
        return Err(lie(
            result,
            format!("{path} holds {} rows, not {num_rows}", reader.num_rows()),
        ));
    }
    Ok(())
}
