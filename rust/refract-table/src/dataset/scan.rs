//! Scans: fragments in positional order, then offsets; deletions applied;
//! optional predicate, projection, row addresses and limit. Batches stream
//! straight from the Lance readers; masks and address columns are built per
//! batch with no per-row allocation.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::Arc;

use arrow::compute::{and, filter_record_batch};
use arrow_array::builder::BooleanBufferBuilder;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use refract_core::{row_address, DeletionVector, Error, Result};

use super::Dataset;
use crate::format::Fragment;
use crate::predicate::{self, Expr};

/// Name of the row-address column a scan adds with [`Scanner::with_row_address`].
pub const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// Default rows per output batch.
pub const DEFAULT_SCAN_BATCH_SIZE: usize = 8_192;

/// Fragments opened ahead of the one being read.
const FRAGMENT_READAHEAD: usize = 2;

/// A scan builder; see [`Dataset::scan`].
#[derive(Clone)]
pub struct Scanner {
    dataset: Dataset,
    projection: Option<Vec<String>>,
    filter: Option<Arc<Expr>>,
    with_row_address: bool,
    limit: Option<u64>,
    fragment_ids: Option<Vec<u64>>,
    batch_size: usize,
}

/// Everything one fragment's batches need, shared across its batches.
struct BatchPlan {
    /// Columns read from the files (output ∪ filter), in schema order.
    read_columns: Vec<String>,
    /// Output columns (before `_rowaddr`), in output order.
    output_columns: Vec<String>,
    filter: Option<Arc<Expr>>,
    with_row_address: bool,
    output_schema: SchemaRef,
}

impl Dataset {
    /// A scanner over this version.
    pub fn scan(&self) -> Scanner {
        Scanner {
            dataset: self.clone(),
            projection: None,
            filter: None,
            with_row_address: false,
            limit: None,
            fragment_ids: None,
            batch_size: DEFAULT_SCAN_BATCH_SIZE,
        }
    }

    /// Live rows, optionally only those matching `filter`. Without a filter
    /// this is metadata only (no I/O).
    pub async fn count_rows(&self, filter: Option<&str>) -> Result<u64> {
        let Some(filter) = filter else {
            return Ok(self.manifest.live_rows());
        };
        let mut stream = self
            .scan()
            .project(&[])
            .filter(filter)?
            .try_into_stream()
            .await?;
        let mut count = 0u64;
        while let Some(batch) = stream.try_next().await? {
            count += batch.num_rows() as u64;
        }
        Ok(count)
    }
}

impl Scanner {
    /// Output only these columns (in this order).
    pub fn project(mut self, columns: &[&str]) -> Self {
        self.projection = Some(columns.iter().map(|column| column.to_string()).collect());
        self
    }

    /// Keeps rows matching the predicate text (see [`crate::predicate`]).
    pub fn filter(self, expr: &str) -> Result<Self> {
        let expr = predicate::parse(expr)?;
        expr.validate(&self.dataset.schema())?;
        Ok(self.filter_expr(expr))
    }

    /// Keeps rows matching an already-parsed predicate.
    pub fn filter_expr(mut self, expr: Expr) -> Self {
        self.filter = Some(Arc::new(expr));
        self
    }

    /// Adds the UInt64 column `_rowaddr` (`fragment_id << 32 | offset`) last.
    pub fn with_row_address(mut self) -> Self {
        self.with_row_address = true;
        self
    }

    /// Stops after `n` rows.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Restricts the scan to these fragments (still in manifest order).
    pub fn fragments(mut self, ids: &[u64]) -> Self {
        self.fragment_ids = Some(ids.to_vec());
        self
    }

    /// Rows per batch read from the files (at least 1).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// The schema of the batches this scan yields.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        Ok(self.plan()?.output_schema)
    }

    /// Streams the matching rows in positional order.
    pub async fn try_into_stream(self) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let plan = Arc::new(self.plan()?);
        let fragments = self.selected_fragments()?;
        let dataset = self.dataset.clone();
        let batch_size = u32::try_from(self.batch_size).unwrap_or(u32::MAX);
        let per_fragment = stream::iter(fragments)
            .map(move |fragment| {
                let dataset = dataset.clone();
                let plan = plan.clone();
                async move { fragment_stream(dataset, fragment, plan, batch_size).await }
            })
            .buffered(FRAGMENT_READAHEAD)
            .try_flatten();
        let Some(limit) = self.limit else {
            return Ok(per_fragment.boxed());
        };
        let limited = per_fragment
            .scan(limit, |remaining, item| {
                let next = match item {
                    Ok(_) if *remaining == 0 => None,
                    Ok(batch) => {
                        let keep = (batch.num_rows() as u64).min(*remaining);
                        *remaining -= keep;
                        // keep <= num_rows, which is a usize.
                        Some(Ok(batch.slice(0, keep as usize)))
                    }
                    Err(err) => Some(Err(err)),
                };
                futures::future::ready(next)
            })
            .try_filter(|batch| futures::future::ready(batch.num_rows() > 0));
        Ok(limited.boxed())
    }

    /// Runs the scan into one batch.
    pub async fn try_into_batch(self) -> Result<RecordBatch> {
        let schema = self.output_schema()?;
        let batches: Vec<RecordBatch> = self.try_into_stream().await?.try_collect().await?;
        concat(&schema, &batches)
    }

    fn selected_fragments(&self) -> Result<Vec<Fragment>> {
        let all = &self.dataset.manifest.fragments;
        let Some(ids) = &self.fragment_ids else {
            return Ok(all.clone());
        };
        if let Some(missing) = ids
            .iter()
            .find(|id| self.dataset.manifest.fragment(**id).is_none())
        {
            return Err(Error::not_found(format!(
                "fragment {missing} in version {}",
                self.dataset.version()
            )));
        }
        let wanted: HashSet<u64> = ids.iter().copied().collect();
        Ok(all
            .iter()
            .filter(|fragment| wanted.contains(&fragment.id))
            .cloned()
            .collect())
    }

    fn plan(&self) -> Result<BatchPlan> {
        let schema = self.dataset.schema();
        let output: Vec<String> = match &self.projection {
            Some(columns) => columns.clone(),
            None => schema
                .fields()
                .iter()
                .map(|field| field.name().clone())
                .collect(),
        };
        let mut output_fields = Vec::with_capacity(output.len() + 1);
        for column in &output {
            let field = schema.field_with_name(column).map_err(|_| {
                Error::invalid_input(format!("projected column '{column}' is not in the schema"))
            })?;
            output_fields.push(field.clone());
        }
        if self.with_row_address {
            output_fields.push(Field::new(ROW_ADDRESS_COLUMN, DataType::UInt64, false));
        }
        let filter_columns = self
            .filter
            .as_ref()
            .map(|filter| filter.columns())
            .unwrap_or_default();
        // Read in schema order; at least one column so batches carry row counts.
        let mut read_columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .filter(|name| output.contains(name) || filter_columns.contains(name))
            .collect();
        if read_columns.is_empty() {
            // The schema has at least one column (checked at create).
            if let Some(first) = schema.fields().first() {
                read_columns.push(first.name().clone());
            }
        }
        Ok(BatchPlan {
            read_columns,
            output_columns: output,
            filter: self.filter.clone(),
            with_row_address: self.with_row_address,
            output_schema: Arc::new(Schema::new(output_fields)),
        })
    }
}

/// Opens one fragment and yields its processed batches.
async fn fragment_stream(
    dataset: Dataset,
    fragment: Fragment,
    plan: Arc<BatchPlan>,
    batch_size: u32,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let deletions = dataset.deletion_vector(&fragment).await?;
    if deletions.live_rows(fragment.physical_rows) == 0 {
        return Ok(stream::empty().boxed());
    }
    let reader = dataset.fragment_reader(&fragment).await?;
    let columns: Vec<&str> = plan.read_columns.iter().map(String::as_str).collect();
    let batches = reader
        .read_range(0..fragment.physical_rows, Some(&columns), batch_size)
        .await?;
    let fragment_id = fragment.id;
    let processed = batches
        .scan(0u64, move |next_offset, batch| {
            let result = batch.and_then(|batch| {
                let start = *next_offset;
                *next_offset += batch.num_rows() as u64;
                process_batch(&plan, fragment_id, &deletions, start, &batch)
            });
            futures::future::ready(Some(result))
        })
        .try_filter(|batch| futures::future::ready(batch.num_rows() > 0));
    Ok(processed.boxed())
}

/// Applies deletions and the filter, adds row addresses, projects.
fn process_batch(
    plan: &BatchPlan,
    fragment_id: u64,
    deletions: &DeletionVector,
    start: u64,
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut mask = deletion_mask(deletions, start, rows)?;
    if let Some(filter) = &plan.filter {
        let matches = filter.evaluate(batch)?;
        mask = Some(match mask {
            Some(live) => {
                and(&live, &matches).map_err(|err| Error::external("combining masks", err))?
            }
            None => matches,
        });
    }
    let mut columns = plan
        .output_columns
        .iter()
        .map(|name| {
            batch.column_by_name(name).cloned().ok_or_else(|| {
                Error::corrupt(
                    "data file",
                    format!("column '{name}' missing from a scan batch"),
                )
            })
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    if plan.with_row_address {
        columns.push(Arc::new(row_addresses(fragment_id, start, rows)?));
    }
    let projected = RecordBatch::try_new_with_options(
        plan.output_schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|err| Error::external("assembling a scan batch", err))?;
    match mask {
        Some(mask) => filter_record_batch(&projected, &mask)
            .map_err(|err| Error::external("filtering a scan batch", err)),
        None => Ok(projected),
    }
}

/// Live-row mask for offsets `start..start + rows`; `None` when none are deleted.
fn deletion_mask(
    deletions: &DeletionVector,
    start: u64,
    rows: usize,
) -> Result<Option<BooleanArray>> {
    let Some(range) = offset_range(start, rows)? else {
        return Ok(None);
    };
    let bitmap = deletions.bitmap();
    if bitmap.range_cardinality(range.clone()) == 0 {
        return Ok(None);
    }
    let first = *range.start();
    let mut builder = BooleanBufferBuilder::new(rows);
    builder.append_n(rows, true);
    for offset in bitmap.range(range) {
        builder.set_bit((offset - first) as usize, false);
    }
    Ok(Some(BooleanArray::new(builder.finish(), None)))
}

fn row_addresses(fragment_id: u64, start: u64, rows: usize) -> Result<UInt64Array> {
    let fragment = u32::try_from(fragment_id).map_err(|_| {
        Error::corrupt("manifest", format!("fragment id {fragment_id} exceeds u32"))
    })?;
    Ok(match offset_range(start, rows)? {
        Some(range) => {
            UInt64Array::from_iter_values(range.map(|offset| row_address(fragment, offset)))
        }
        None => UInt64Array::from(Vec::<u64>::new()),
    })
}

/// The u32 offsets `start..start + rows`, inclusive; `None` for no rows.
fn offset_range(start: u64, rows: usize) -> Result<Option<RangeInclusive<u32>>> {
    if rows == 0 {
        return Ok(None);
    }
    let last = start + rows as u64 - 1;
    match (u32::try_from(start), u32::try_from(last)) {
        (Ok(first), Ok(last)) => Ok(Some(first..=last)),
        _ => Err(Error::corrupt(
            "data file",
            format!("row offset {last} exceeds the 2^32 rows a fragment can address"),
        )),
    }
}

/// Concatenates batches (an empty result keeps the schema).
pub(crate) fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch> {
    if batches.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    arrow::compute::concat_batches(schema, batches)
        .map_err(|err| Error::external("concatenating scan batches", err))
}
