//! Scans: fragments in positional order, then offsets; deletions applied;
//! optional predicate, projection, row addresses, limit and row selection
//! (the rows an index returned, read as coalesced ranges). Batches stream
//! straight from the Lance readers; masks and address columns are built per
//! batch with no per-row allocation.

use std::ops::RangeInclusive;
use std::sync::Arc;

use arrow::compute::{and, filter_record_batch};
use arrow_array::builder::BooleanBufferBuilder;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use refract_core::{row_address, DeletionVector, Error, Result};

use super::selection::{coalesced_ranges, RowSelection, COALESCE_GAP_ROWS};
use super::{single_data_file, Dataset};
use crate::format::Fragment;
use crate::io::lance_files::{LanceFileReader, PREFETCH_LIMIT_BYTES};
use crate::io::{ReadMode, ReadOptions};
use crate::predicate::{self, Expr};
use crate::task::AbortOnDrop;

/// Name of the row-address column a scan adds with [`Scanner::with_row_address`].
pub const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// Default rows per output batch.
pub const DEFAULT_SCAN_BATCH_SIZE: usize = 8_192;

/// Fewest fragments opened ahead of the one being read.
const MIN_FRAGMENT_READAHEAD: usize = 2;
/// Most fragments opened ahead: bounds open files and buffered batches.
const MAX_FRAGMENT_READAHEAD: usize = 16;
/// The same on a remote store, where every open waits a round trip: more
/// opens overlap (the row and byte aims still bound what is held).
const MAX_REMOTE_FRAGMENT_READAHEAD: usize = 64;
/// Rows the read-ahead aims to keep in flight. Small fragments get more
/// fragments in flight so per-file open latency overlaps; large ones stay at
/// the minimum so memory stays bounded.
const READAHEAD_ROWS: u64 = 65_536;
/// Bytes of data files the read-ahead aims to keep in flight (a one-pass scan
/// may hold small files whole, see [`Scanner::one_pass`]).
const READAHEAD_BYTES: u64 = 16 << 20;
/// Largest file a one-pass scan of only some columns fetches whole: below
/// it, a request's round trip costs more than the bytes of the other
/// columns (one request instead of the footer, metadata and column reads).
const PROJECTED_WHOLE_FILE_LIMIT_BYTES: u64 = 256 << 10;

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
    one_pass: bool,
    selection: Option<Arc<RowSelection>>,
    selected_must_match: Option<Arc<SelectionCheck>>,
}

/// A condition every selected row must satisfy (see
/// [`Scanner::expect_selected_match`]).
struct SelectionCheck {
    expr: Expr,
    source: String,
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
    one_pass: bool,
    /// Files up to this size are fetched whole (0 unless one-pass).
    whole_file_limit: u64,
    selection: Option<Arc<RowSelection>>,
    selected_must_match: Option<Arc<SelectionCheck>>,
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
            one_pass: false,
            selection: None,
            selected_must_match: None,
        }
    }

    /// Live rows, optionally only those matching `filter`. Without a filter
    /// this is metadata only (no I/O).
    ///
    /// # Errors
    /// None without a filter; with one, those of [`Scanner::filter`] and of
    /// reading the rows ([`Scanner::try_into_stream`] and its items).
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
    ///
    /// # Errors
    /// InvalidInput when `expr` does not parse or does not fit the schema (an
    /// unknown column, a literal of the wrong type, ...).
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

    /// Reads each data file once, for work that reads a fragment once
    /// (compaction, index builds): file metadata is not kept in the store's
    /// Lance cache, and files up to [`PREFETCH_LIMIT_BYTES`] (256 KiB when
    /// only some columns are read) are fetched whole in one request instead
    /// of several ranged reads. Results are identical; only I/O and caching
    /// differ.
    pub fn one_pass(mut self) -> Self {
        self.one_pass = true;
        self
    }

    /// Reads only the selected offsets of the fragments `selection` restricts
    /// (others are read whole): a fragment reads the coalesced row ranges
    /// holding its selected live offsets in one ranged read, drops the other
    /// rows of those ranges, and is not opened when none is selected. The
    /// filter still applies to every selected row; order stays scan order.
    pub fn select_rows(mut self, selection: RowSelection) -> Self {
        self.selection = Some(Arc::new(selection));
        self
    }

    /// Declares that every live row [`Self::select_rows`] selects satisfies
    /// `expr` (an index answered it exactly): the scan checks it on the
    /// values it reads anyway, and a selected row that does not satisfy it
    /// fails the scan as Corrupt naming `source`, instead of being silently
    /// dropped by the filter. `expr`'s columns must be read (part of the
    /// filter or the projection).
    pub fn expect_selected_match(mut self, expr: Expr, source: impl Into<String>) -> Self {
        self.selected_must_match = Some(Arc::new(SelectionCheck {
            expr,
            source: source.into(),
        }));
        self
    }

    /// The schema of the batches this scan yields.
    ///
    /// # Errors
    /// InvalidInput when a projected column is not in the schema.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        Ok(self.plan()?.output_schema)
    }

    /// Streams the matching rows in positional order.
    ///
    /// # Errors
    /// InvalidInput when a projected column is not in the schema; NotFound for a
    /// [`Self::fragments`] id not in this version. Items fail as
    /// [`Dataset::fragment_reader`] and [`Dataset::deletion_vector`] do, with
    /// External when an Arrow kernel fails, or Corrupt for a selected row that
    /// breaks [`Self::expect_selected_match`].
    pub async fn try_into_stream(self) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let plan = Arc::new(self.plan()?);
        let fragments = self.selected_fragments()?;
        let dataset = self.dataset.clone();
        let batch_size = u32::try_from(self.batch_size).unwrap_or(u32::MAX);
        let readahead = fragment_readahead(&fragments, self.dataset.store().is_remote());
        let per_fragment = stream::iter(fragments)
            .map(move |fragment| open_fragment(dataset.clone(), fragment, plan.clone(), batch_size))
            .buffered(readahead)
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
    ///
    /// # Errors
    /// Those of [`Self::try_into_stream`] and of its items; External when the
    /// batches do not concatenate.
    pub async fn try_into_batch(self) -> Result<RecordBatch> {
        let schema = self.output_schema()?;
        let batches: Vec<RecordBatch> = self.try_into_stream().await?.try_collect().await?;
        concat(&schema, &batches)
    }

    fn selected_fragments(&self) -> Result<Vec<Fragment>> {
        let all = &self.dataset.manifest.fragments;
        let selected = |fragment: &Fragment| {
            self.selection
                .as_ref()
                .and_then(|selection| selection.get(fragment.id))
                .is_none_or(|offsets| !offsets.is_empty())
        };
        let Some(ids) = &self.fragment_ids else {
            return Ok(all.iter().filter(|f| selected(f)).cloned().collect());
        };
        // Looked up by position, not by a pass over every fragment: tasks of
        // a few fragments cost the same on a table of any size.
        let mut positions = ids
            .iter()
            .map(|id| {
                self.dataset.fragment_position(*id).ok_or_else(|| {
                    Error::not_found(format!(
                        "fragment {id} in version {}",
                        self.dataset.version()
                    ))
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        positions.sort_unstable();
        positions.dedup();
        Ok(positions
            .into_iter()
            .filter_map(|at| all.get(at))
            .filter(|fragment| selected(fragment))
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
        let mut filter_columns = self
            .filter
            .as_ref()
            .map(|filter| filter.columns())
            .unwrap_or_default();
        if let Some(check) = &self.selected_must_match {
            filter_columns.extend(check.expr.columns());
        }
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
        let whole_file_limit = match (self.one_pass, read_columns.len() == schema.fields().len()) {
            (false, _) => 0,
            (true, true) => PREFETCH_LIMIT_BYTES,
            (true, false) => PROJECTED_WHOLE_FILE_LIMIT_BYTES,
        };
        Ok(BatchPlan {
            read_columns,
            output_columns: output,
            filter: self.filter.clone(),
            with_row_address: self.with_row_address,
            output_schema: Arc::new(Schema::new(output_fields)),
            one_pass: self.one_pass,
            whole_file_limit,
            selection: self.selection.clone(),
            selected_must_match: self.selected_must_match.clone(),
        })
    }
}

/// Fragments to open ahead for `fragments`: enough to keep about
/// [`READAHEAD_ROWS`] rows and at most about [`READAHEAD_BYTES`] in flight,
/// within the fixed bounds.
fn fragment_readahead(fragments: &[Fragment], remote: bool) -> usize {
    let most = if remote {
        MAX_REMOTE_FRAGMENT_READAHEAD
    } else {
        MAX_FRAGMENT_READAHEAD
    };
    let count = fragments.len() as u64;
    if count == 0 {
        return MIN_FRAGMENT_READAHEAD;
    }
    let average_rows = (fragments.iter().map(|f| f.physical_rows).sum::<u64>() / count).max(1);
    let average_bytes = (fragments.iter().map(|f| f.size_bytes()).sum::<u64>() / count).max(1);
    let wanted = (READAHEAD_ROWS / average_rows).min(READAHEAD_BYTES / average_bytes);
    usize::try_from(wanted)
        .unwrap_or(most)
        .clamp(MIN_FRAGMENT_READAHEAD, most)
}

/// Opens one fragment for the scan. In a one-pass scan, a fragment whose
/// file is small enough to be fetched whole is also read and decoded whole on
/// a task of its own, so the fragments in the read-ahead decode in parallel on
/// a multi-threaded runtime (`buffered` still yields them in order, and the
/// read-ahead bounds how many are held). Larger fragments stream.
async fn open_fragment(
    dataset: Dataset,
    fragment: Fragment,
    plan: Arc<BatchPlan>,
    batch_size: u32,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let small = fragment
        .files
        .iter()
        .all(|file| file.size_bytes <= plan.whole_file_limit);
    if !(plan.one_pass && small) {
        return fragment_stream(dataset, fragment, plan, batch_size).await;
    }
    let task = AbortOnDrop::spawn(async move {
        let batches = fragment_stream(dataset, fragment, plan, batch_size).await?;
        batches.try_collect::<Vec<RecordBatch>>().await
    });
    let batches = task.join("reading a fragment").await??;
    Ok(stream::iter(batches.into_iter().map(Ok)).boxed())
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
    let reader = if plan.one_pass {
        let file = single_data_file(&fragment)?;
        if file.size_bytes <= plan.whole_file_limit {
            LanceFileReader::open(
                dataset.store(),
                &file.path,
                ReadOptions {
                    known_size: Some(file.size_bytes),
                    checksum: file.checksum.as_ref(),
                    mode: ReadMode::WholeFile,
                },
            )
            .await?
        } else {
            LanceFileReader::open(
                dataset.store(),
                &file.path,
                ReadOptions {
                    known_size: Some(file.size_bytes),
                    checksum: file.checksum.as_ref(),
                    mode: ReadMode::OnePass,
                },
            )
            .await?
        }
    } else {
        dataset.fragment_reader(&fragment).await?
    };
    if plan.one_pass {
        dataset.check_data_file(&fragment, &reader)?;
    }
    let columns: Vec<&str> = plan.read_columns.iter().map(String::as_str).collect();
    let fragment_id = fragment.id;
    if let Some(offsets) = plan.selection.as_ref().and_then(|s| s.get(fragment_id)) {
        let wanted = offsets - deletions.bitmap();
        let ranges = coalesced_ranges(&wanted, COALESCE_GAP_ROWS);
        let batches = reader
            .read_ranges(&ranges, Some(&columns), batch_size)
            .await?;
        let processed = batches
            .scan(RangeCursor::new(ranges), move |cursor, batch| {
                let result = batch.and_then(|batch| {
                    let offsets = cursor.next_offsets(batch.num_rows())?;
                    process_selected_batch(&plan, fragment_id, &wanted, &offsets, &batch)
                });
                futures::future::ready(Some(result))
            })
            .try_filter(|batch| futures::future::ready(batch.num_rows() > 0));
        return Ok(processed.boxed());
    }
    let batches = reader
        .read_range(0..fragment.physical_rows, Some(&columns), batch_size)
        .await?;
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

/// Walks the offsets of coalesced ranges batch by batch (a batch of a ranged
/// read may span ranges).
struct RangeCursor {
    ranges: std::vec::IntoIter<std::ops::Range<u64>>,
    current: std::ops::Range<u64>,
}

impl RangeCursor {
    fn new(ranges: Vec<std::ops::Range<u64>>) -> Self {
        Self {
            ranges: ranges.into_iter(),
            current: 0..0,
        }
    }

    /// The offsets of the next `rows` rows read.
    fn next_offsets(&mut self, rows: usize) -> Result<Vec<u32>> {
        let mut offsets = Vec::with_capacity(rows);
        while offsets.len() < rows {
            if self.current.is_empty() {
                self.current = self.ranges.next().ok_or_else(|| {
                    Error::corrupt("data file", "a ranged read returned more rows than asked")
                })?;
            }
            let offset = self.current.start;
            self.current.start += 1;
            offsets.push(u32::try_from(offset).map_err(|_| {
                Error::corrupt(
                    "data file",
                    format!("row offset {offset} exceeds the 2^32 rows a fragment can address"),
                )
            })?);
        }
        Ok(offsets)
    }
}

/// Keeps the rows of a ranged-read batch at `offsets` that are in `wanted`
/// (selected and live) and match the filter; adds row addresses, projects.
fn process_selected_batch(
    plan: &BatchPlan,
    fragment_id: u64,
    wanted: &roaring::RoaringBitmap,
    offsets: &[u32],
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let mut selected = BooleanBufferBuilder::new(offsets.len());
    for offset in offsets {
        selected.append(wanted.contains(*offset));
    }
    let fragment = u32::try_from(fragment_id).map_err(|_| {
        Error::corrupt("manifest", format!("fragment id {fragment_id} exceeds u32"))
    })?;
    if let Some(check) = &plan.selected_must_match {
        let satisfied = check.expr.evaluate(batch)?;
        let failing = offsets.iter().enumerate().find(|(row, offset)| {
            wanted.contains(**offset) && !(satisfied.is_valid(*row) && satisfied.value(*row))
        });
        if let Some((_, offset)) = failing {
            return Err(Error::corrupt(
                check.source.clone(),
                format!(
                    "it answered row {fragment_id}:{offset} as an exact match of `{}`, which the row's values do not satisfy",
                    check.expr
                ),
            ));
        }
    }
    let addresses = || {
        Ok(UInt64Array::from_iter_values(
            offsets.iter().map(|offset| row_address(fragment, *offset)),
        ))
    };
    finish_batch(
        plan,
        batch,
        Some(BooleanArray::new(selected.finish(), None)),
        addresses,
    )
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
    let mask = deletion_mask(deletions, start, rows)?;
    finish_batch(plan, batch, mask, || {
        row_addresses(fragment_id, start, rows)
    })
}

/// ANDs the filter into `mask`, projects, adds the row addresses `addresses`
/// builds (only when asked for), and keeps the masked rows.
fn finish_batch(
    plan: &BatchPlan,
    batch: &RecordBatch,
    mut mask: Option<BooleanArray>,
    addresses: impl FnOnce() -> Result<UInt64Array>,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
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
        columns.push(Arc::new(addresses()?));
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

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
