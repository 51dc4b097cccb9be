//! Random access by row address, in the caller's order.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{Schema, SchemaRef};
use arrow_select::interleave::interleave_record_batch;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result, RowAddress};

use super::Dataset;
use crate::format::Fragment;

/// Fragments read concurrently by one take.
const TAKE_PARALLELISM: usize = 4;

/// The sorted, deduplicated offsets one fragment must return.
struct FragmentTake {
    fragment: Fragment,
    offsets: Vec<u32>,
}

impl Dataset {
    /// Rows at `row_addresses`, in the given order (duplicates allowed).
    /// A deleted or missing address is NotFound.
    ///
    /// # Errors
    /// InvalidInput when a projected column is not in the schema; NotFound for an
    /// address whose fragment or offset does not exist or whose row is deleted;
    /// otherwise those of [`Self::fragment_reader`] and [`Self::deletion_vector`].
    pub async fn take(
        &self,
        row_addresses: &[u64],
        projection: Option<&[&str]>,
    ) -> Result<RecordBatch> {
        let schema = self.projected_schema(projection)?;
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect();
        // Sort positions by address so each fragment is read once, in order.
        let mut order: Vec<usize> = (0..row_addresses.len()).collect();
        order.sort_unstable_by_key(|position| row_addresses[*position]);
        let (takes, slots) = self.group_by_fragment(row_addresses, &order).await?;
        if columns.is_empty() {
            return RecordBatch::try_new_with_options(
                schema,
                Vec::new(),
                &RecordBatchOptions::new().with_row_count(Some(row_addresses.len())),
            )
            .map_err(|err| Error::external("assembling a take result", err));
        }
        let dataset = self.clone();
        let columns = Arc::new(columns);
        let batches: Vec<RecordBatch> = futures::stream::iter(takes)
            .map(|take| {
                let dataset = dataset.clone();
                let columns = columns.clone();
                async move {
                    let reader = dataset.fragment_reader(&take.fragment).await?;
                    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                    let batch = reader.take(&take.offsets, Some(&names)).await?;
                    relabel(&schema_of(&dataset, &columns)?, &batch)
                }
            })
            .buffered(TAKE_PARALLELISM)
            .try_collect()
            .await?;
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let mut indices = vec![(0usize, 0usize); row_addresses.len()];
        for (position, slot) in order.iter().zip(slots) {
            indices[*position] = slot;
        }
        interleave_record_batch(&refs, &indices)
            .map_err(|err| Error::external("ordering a take result", err))
    }

    /// Groups sorted addresses by fragment, validating each one. Returns the
    /// per-fragment reads and, for each sorted address, its (read, row) slot.
    async fn group_by_fragment(
        &self,
        row_addresses: &[u64],
        order: &[usize],
    ) -> Result<(Vec<FragmentTake>, Vec<(usize, usize)>)> {
        let by_id: HashMap<u64, &Fragment> = self
            .manifest
            .fragments
            .iter()
            .map(|fragment| (fragment.id, fragment))
            .collect();
        let mut takes: Vec<FragmentTake> = Vec::new();
        let mut slots = Vec::with_capacity(order.len());
        let mut deletions = None;
        for position in order {
            let address = RowAddress(row_addresses[*position]);
            let fragment_id = u64::from(address.fragment_id());
            let offset = address.offset();
            let starts_new = takes
                .last()
                .is_none_or(|take| take.fragment.id != fragment_id);
            if starts_new {
                let fragment = by_id
                    .get(&fragment_id)
                    .ok_or_else(|| missing_row(address, "its fragment does not exist"))?;
                deletions = Some(self.deletion_vector(fragment).await?);
                takes.push(FragmentTake {
                    fragment: (*fragment).clone(),
                    offsets: Vec::new(),
                });
            }
            let read_index = takes.len().saturating_sub(1);
            // A take was pushed above for this fragment if none was open.
            let take = takes
                .last_mut()
                .ok_or_else(|| missing_row(address, "internal grouping error"))?;
            if u64::from(offset) >= take.fragment.physical_rows {
                return Err(missing_row(address, "offset beyond the fragment's rows"));
            }
            if deletions.as_ref().is_some_and(|dv| dv.contains(offset)) {
                return Err(missing_row(address, "the row is deleted"));
            }
            if take.offsets.last() != Some(&offset) {
                take.offsets.push(offset);
            }
            slots.push((read_index, take.offsets.len() - 1));
        }
        Ok((takes, slots))
    }

    /// The schema restricted to `projection` (all columns when `None`).
    pub(crate) fn projected_schema(&self, projection: Option<&[&str]>) -> Result<SchemaRef> {
        let schema = self.schema();
        let Some(columns) = projection else {
            return Ok(schema);
        };
        let fields = columns
            .iter()
            .map(|column| {
                schema.field_with_name(column).cloned().map_err(|_| {
                    Error::invalid_input(format!(
                        "projected column '{column}' is not in the schema"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }
}

fn schema_of(dataset: &Dataset, columns: &[String]) -> Result<SchemaRef> {
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    dataset.projected_schema(Some(&names))
}

/// Re-labels a reader batch with the table's fields, picking columns by name.
fn relabel(schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            batch.column_by_name(field.name()).cloned().ok_or_else(|| {
                Error::corrupt(
                    "data file",
                    format!("column '{}' missing from a take result", field.name()),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|err| Error::external("assembling a take result", err))
}

fn missing_row(address: RowAddress, why: &str) -> Error {
    Error::not_found(format!("row {address}: {why}"))
}
