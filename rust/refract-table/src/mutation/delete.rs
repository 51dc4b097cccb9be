//! Deleting rows by predicate: new deletion files (the union with the
//! existing vector); fragments left with no live rows leave the manifest.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use futures::{StreamExt, TryStreamExt};
use refract_core::{DeletionVector, Result};
use roaring::RoaringBitmap;

use crate::dataset::Dataset;
use crate::format::Fragment;
use crate::io::deletion_file::write_deletion_file;
use crate::predicate::{self, Expr};
use crate::transaction::Operation;

/// Fragments evaluated concurrently by one delete.
const DELETE_PARALLELISM: usize = 2;

/// Rows per batch while evaluating a delete predicate.
const DELETE_BATCH_SIZE: u32 = 65_536;

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteResult {
    /// Live rows that matched and are now deleted.
    pub rows_deleted: u64,
}

/// The effect of a delete on one fragment.
enum FragmentChange {
    Unchanged,
    Updated(Fragment, u64),
    Removed(u64, u64),
}

impl Dataset {
    /// Deletes the live rows matching `predicate` and commits (no new version
    /// when nothing matches).
    ///
    /// # Errors
    /// NotSupported for writer flags this client does not write; InvalidInput for
    /// a predicate that does not parse or fit the schema; those of
    /// [`Self::fragment_reader`] and [`Self::deletion_vector`]; External writing a
    /// deletion file; those of [`Self::commit`].
    pub async fn delete(&mut self, predicate_text: &str) -> Result<DeleteResult> {
        self.features().check_write(self.manifest().writer_flags)?;
        let expr = predicate::parse(predicate_text)?;
        expr.validate(&self.schema())?;
        let expr = Arc::new(expr);
        let dataset = self.clone();
        let changes: Vec<FragmentChange> = futures::stream::iter(self.manifest().fragments.clone())
            .map(|fragment| {
                let dataset = dataset.clone();
                let expr = expr.clone();
                async move { dataset.delete_in_fragment(fragment, &expr).await }
            })
            .buffered(DELETE_PARALLELISM)
            .try_collect()
            .await?;
        let mut updated_fragments = Vec::new();
        let mut removed_fragment_ids = Vec::new();
        let mut rows_deleted = 0;
        for change in changes {
            match change {
                FragmentChange::Unchanged => {}
                FragmentChange::Updated(fragment, rows) => {
                    rows_deleted += rows;
                    updated_fragments.push(fragment);
                }
                FragmentChange::Removed(id, rows) => {
                    rows_deleted += rows;
                    removed_fragment_ids.push(id);
                }
            }
        }
        if rows_deleted == 0 {
            return Ok(DeleteResult { rows_deleted });
        }
        *self = self
            .commit(Operation::Delete {
                updated_fragments,
                removed_fragment_ids,
                predicate: predicate_text.to_string(),
            })
            .await?;
        Ok(DeleteResult { rows_deleted })
    }

    async fn delete_in_fragment(&self, fragment: Fragment, expr: &Expr) -> Result<FragmentChange> {
        let existing = self.deletion_vector(&fragment).await?;
        let matched = self.matching_offsets(&fragment, expr).await?;
        let mut union: RoaringBitmap = existing.bitmap().clone();
        union |= &matched;
        let newly_deleted = union.len() - existing.len();
        if newly_deleted == 0 {
            return Ok(FragmentChange::Unchanged);
        }
        if union.len() >= fragment.physical_rows {
            return Ok(FragmentChange::Removed(fragment.id, newly_deleted));
        }
        let deletion = write_deletion_file(
            self.store(),
            fragment.id,
            self.version(),
            &DeletionVector::from_bitmap(union),
        )
        .await?;
        Ok(FragmentChange::Updated(
            Fragment {
                deletion_file: Some(deletion),
                ..fragment
            },
            newly_deleted,
        ))
    }

    /// Physical offsets of the fragment where `expr` is true.
    async fn matching_offsets(&self, fragment: &Fragment, expr: &Expr) -> Result<RoaringBitmap> {
        let schema = self.schema();
        let wanted = expr.columns();
        let mut columns: Vec<&str> = schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .filter(|name| wanted.contains(*name))
            .collect();
        if columns.is_empty() {
            // A constant predicate still needs row counts; the schema is non-empty.
            columns.extend(schema.fields().first().map(|field| field.name().as_str()));
        }
        let reader = self.fragment_reader(fragment).await?;
        let mut batches = reader
            .read_range(0..fragment.physical_rows, Some(&columns), DELETE_BATCH_SIZE)
            .await?;
        let mut matched = RoaringBitmap::new();
        let mut start = 0u64;
        while let Some(batch) = batches.try_next().await? {
            collect_matches(expr, &batch, start, &mut matched)?;
            start += batch.num_rows() as u64;
        }
        Ok(matched)
    }
}

/// Adds `start + i` for every row `i` of `batch` where `expr` is true.
fn collect_matches(
    expr: &Expr,
    batch: &RecordBatch,
    start: u64,
    matched: &mut RoaringBitmap,
) -> Result<()> {
    let mask = expr.evaluate(batch)?;
    // Offsets within one fragment fit u32 (validated physical_rows <= 2^32).
    let base = start as u32;
    let selected = mask
        .values()
        .set_indices()
        .filter(|index| mask.is_valid(*index))
        .map(|index| base + index as u32);
    matched.extend(selected);
    Ok(())
}
