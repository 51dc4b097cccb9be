//! Checking task results before they are committed.
//!
//! Results may come from other machines as JSON files, so nothing in them is
//! trusted: the old run must match the read version, the captured survivors
//! must be exactly the live rows of that run, and every new file must exist,
//! be a Lance file holding the declared rows, and not already belong to the
//! table. A result that fails any check is refused before anything commits.

use std::collections::{HashMap, HashSet};

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::io::lance_files::LanceFileReader;
use refract_table::io::paths::RelativePath;
use roaring::RoaringTreemap;

use super::execute::{RewriteResult, WrittenFile};

fn lie(result: &RewriteResult, message: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!(
        "compaction result of task {}: {message}",
        result.task_index
    ))
}

/// Verifies every result against `dataset` (the caller's handle, used for the
/// read versions) and `latest` (whose files a result may not claim); see the
/// module docs.
pub async fn verify_results(
    dataset: &Dataset,
    latest: &Dataset,
    results: &[RewriteResult],
) -> Result<()> {
    let referenced: HashSet<&str> = latest
        .fragments()
        .iter()
        .flat_map(|fragment| fragment.files.iter().map(|file| file.path.as_str()))
        .collect();
    let mut claimed: HashSet<String> = HashSet::new();
    // The read version's fragments by id, built once per read version (results
    // usually share one): a lookup per source fragment, not a scan.
    let mut read_view: Option<ReadView> = None;
    for result in results {
        let view = match read_view.take() {
            Some(view) if view.read.version() == result.read_version => view,
            _ => {
                let read = if result.read_version == dataset.version() {
                    dataset.clone()
                } else {
                    dataset.checkout_version(result.read_version).await?
                };
                ReadView::new(read)
            }
        };
        verify_sources(&view, result)?;
        read_view = Some(view);
        for file in &result.new_files {
            if referenced.contains(file.path.as_str()) || !claimed.insert(file.path.clone()) {
                return Err(lie(
                    result,
                    format!("{} already belongs to the table", file.path),
                ));
            }
            verify_file(dataset, result, file).await?;
        }
    }
    Ok(())
}

/// A read version and the position of each of its fragments.
struct ReadView {
    read: Dataset,
    positions: HashMap<u64, usize>,
}

impl ReadView {
    fn new(read: Dataset) -> Self {
        let positions = read
            .fragments()
            .iter()
            .enumerate()
            .map(|(at, fragment)| (fragment.id, at))
            .collect();
        Self { read, positions }
    }

    fn fragment(&self, id: u64) -> Option<&refract_table::Fragment> {
        self.positions
            .get(&id)
            .and_then(|at| self.read.fragments().get(*at))
    }
}

/// The old run and the captured survivors match the read version.
fn verify_sources(view: &ReadView, result: &RewriteResult) -> Result<()> {
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
        let fragment = view.fragment(*id).ok_or_else(|| {
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
    let reader =
        LanceFileReader::open(dataset.store(), &path, Some(actual), file.checksum.as_ref()).await?;
    if reader.num_rows() != num_rows || num_rows == 0 {
        return Err(lie(
            result,
            format!("{path} holds {} rows, not {num_rows}", reader.num_rows()),
        ));
    }
    Ok(())
}
