//! Executing a task by copying encoded pages instead of decoding rows.
//!
//! A run of fragments without deletions, each stored in one data file, is
//! already exactly the rows its outputs must hold, in order. When every output
//! of the task is a whole number of those fragments, each output is the
//! page-level concatenation of its sources' files (`concat_lance_files`), and
//! the surviving addresses are every physical row of every source — known from
//! the manifest without reading a row.
//!
//! Small sources are re-encoded too: the output keeps the sources' page
//! sizes, so joining thousands of tiny fragments page by page would leave a
//! big file of tiny pages that scans several times slower.
//!
//! Anything else (a deletion, a column-split fragment, an output boundary
//! inside a fragment, a file lance-file refuses to concatenate) returns `None`
//! and the caller re-encodes. Outputs already written before a refusal are
//! deleted, so a fallback leaves no stray files behind.

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::format::Fragment;
use refract_table::io::lance_files::DATA_FILE_VERSION;
use refract_table::io::paths::{data_file_path, RelativePath};
use refract_table::io::{concat_lance_files, ConcatInput, ConcatOutcome};
use roaring::RoaringTreemap;
use uuid::Uuid;

use super::execute::WrittenFile;

/// What a copied task produced.
pub(super) struct CopiedTask {
    /// One file per output, in order.
    pub new_files: Vec<WrittenFile>,
    /// Every physical row of every source.
    pub surviving: RoaringTreemap,
    /// Rows copied.
    pub rows_read: u64,
}

/// Copies the task's outputs page by page if the run allows it; `None` means
/// "re-encode instead" (nothing was left behind).
pub(super) async fn try_copy_task(
    dataset: &Dataset,
    sources: &[Fragment],
    output_rows: &[u64],
    min_source_rows: u64,
) -> Result<Option<CopiedTask>> {
    if sources.iter().any(|f| f.physical_rows < min_source_rows) {
        return Ok(None);
    }
    let Some(groups) = copy_groups(sources, output_rows) else {
        return Ok(None);
    };
    let mut new_files: Vec<WrittenFile> = Vec::with_capacity(groups.len());
    for group in groups {
        let inputs = concat_inputs(group);
        let path = data_file_path(&format!("{}.lance", Uuid::new_v4()))?;
        let schema = dataset.manifest().lance.schema.to_lance()?;
        let outcome = concat_lance_files(dataset.store(), &inputs, &schema, &path).await;
        match outcome {
            Ok(ConcatOutcome::Written(summary)) => new_files.push(WrittenFile::copied(
                &path,
                &summary,
                &group[0].files[0].layout,
            )),
            Ok(ConcatOutcome::Unsupported(reason)) => {
                tracing::debug!(%reason, "compaction re-encodes: pages cannot be copied");
                delete_written(dataset, &new_files).await?;
                return Ok(None);
            }
            Err(err) => {
                delete_written(dataset, &new_files).await?;
                return Err(err);
            }
        }
    }
    Ok(Some(CopiedTask {
        new_files,
        surviving: all_physical_rows(sources)?,
        rows_read: sources.iter().map(|f| f.physical_rows).sum(),
    }))
}

/// Splits `sources` into one run per output when every source can be copied
/// whole (one data file, no deleted rows) and every output is a whole number
/// (at least two) of sources.
fn copy_groups<'a>(sources: &'a [Fragment], output_rows: &[u64]) -> Option<Vec<&'a [Fragment]>> {
    // Pages are copied as they are: every source must be in the version
    // Refract writes and store the same fields in the same columns.
    let layout = &sources.first()?.files.first()?.layout;
    let copyable = |f: &Fragment| {
        f.files.len() == 1
            && f.deletion_file.is_none()
            && f.files[0].num_rows == f.physical_rows
            && f.files[0].layout == *layout
            && layout.file_version == DATA_FILE_VERSION
    };
    if !sources.iter().all(copyable) {
        return None;
    }
    let mut groups = Vec::with_capacity(output_rows.len());
    let mut start = 0usize;
    for &rows in output_rows {
        let mut end = start;
        let mut taken = 0u64;
        while taken < rows {
            taken += sources.get(end)?.physical_rows;
            end += 1;
        }
        // A boundary inside a fragment, or a single source (nothing to join).
        if taken != rows || end - start < 2 {
            return None;
        }
        groups.push(&sources[start..end]);
        start = end;
    }
    (start == sources.len()).then_some(groups)
}

fn concat_inputs(group: &[Fragment]) -> Vec<ConcatInput> {
    group
        .iter()
        .flat_map(|fragment| &fragment.files)
        .map(|file| ConcatInput {
            path: file.path.clone(),
            size_bytes: file.size_bytes,
            num_rows: file.num_rows,
            checksum: file.checksum.clone(),
        })
        .collect()
}

/// Every address of every source: nothing was deleted.
fn all_physical_rows(sources: &[Fragment]) -> Result<RoaringTreemap> {
    let mut surviving = RoaringTreemap::new();
    for fragment in sources {
        let id = u32::try_from(fragment.id).map_err(|_| {
            Error::corrupt(
                "manifest",
                format!("fragment id {} does not fit a row address", fragment.id),
            )
        })?;
        let start = u64::from(id) << 32;
        surviving.insert_range(start..start + fragment.physical_rows);
    }
    Ok(surviving)
}

/// Removes outputs of a task that is falling back to re-encoding.
async fn delete_written(dataset: &Dataset, written: &[WrittenFile]) -> Result<()> {
    for file in written {
        dataset
            .store()
            .delete(&RelativePath::parse(&file.path)?)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use refract_table::format::DataFile;
    use rstest::rstest;

    use super::*;

    fn fragment(id: u64, rows: u64) -> Fragment {
        Fragment {
            id,
            files: vec![DataFile {
                path: RelativePath::parse(&format!("data/{id}.lance")).unwrap(),
                size_bytes: 1_000,
                num_rows: rows,
                checksum: None,
                layout: Default::default(),
            }],
            physical_rows: rows,
            deletion_file: None,
        }
    }

    fn group_ids(groups: &[&[Fragment]]) -> Vec<Vec<u64>> {
        groups
            .iter()
            .map(|group| group.iter().map(|f| f.id).collect())
            .collect()
    }

    #[rstest]
    #[case::one_output(&[100, 100, 100], &[300], Some(vec![vec![1, 2, 3]]))]
    #[case::two_outputs(&[100, 100, 50, 150], &[200, 200], Some(vec![vec![1, 2], vec![3, 4]]))]
    #[case::boundary_inside_a_fragment(&[100, 100, 100], &[150, 150], None)]
    #[case::single_source_output(&[200, 100, 100], &[200, 200], None)]
    #[case::outputs_short_of_sources(&[100, 100, 100], &[200], None)]
    #[case::outputs_beyond_sources(&[100, 100], &[300], None)]
    fn outputs_must_be_whole_runs_of_sources(
        #[case] rows: &[u64],
        #[case] outputs: &[u64],
        #[case] expected: Option<Vec<Vec<u64>>>,
    ) {
        let sources: Vec<Fragment> = rows
            .iter()
            .enumerate()
            .map(|(i, rows)| fragment(i as u64 + 1, *rows))
            .collect();
        let groups = copy_groups(&sources, outputs);
        assert_eq!(groups.as_deref().map(group_ids), expected);
    }

    #[test]
    fn deletions_or_column_groups_force_re_encoding() {
        let mut deleted = vec![fragment(1, 100), fragment(2, 100)];
        deleted[1].deletion_file = Some(refract_table::io::DeletionFileRef {
            path: RelativePath::parse("_deletions/2-1-7.bin").unwrap(),
            kind: refract_table::format::DeletionFileKind::Bitmap,
            read_version: 1,
            id: 7,
            num_deleted_rows: 0,
            checksum: None,
        });
        assert!(copy_groups(&deleted, &[200]).is_none());

        let mut split = vec![fragment(1, 100), fragment(2, 100)];
        let extra = split[0].files[0].clone();
        split[0].files.push(extra);
        assert!(copy_groups(&split, &[200]).is_none());
    }

    #[test]
    fn surviving_rows_are_every_physical_row() {
        let surviving = all_physical_rows(&[fragment(7, 3), fragment(2, 2)]).unwrap();
        let expected: Vec<u64> = vec![
            2 << 32,
            (2 << 32) + 1,
            7 << 32,
            (7 << 32) + 1,
            (7 << 32) + 2,
        ];
        assert_eq!(surviving.iter().collect::<Vec<_>>(), expected);
    }
}
