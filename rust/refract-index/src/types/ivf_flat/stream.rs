//! Running an ivf_flat build in bounded memory.
//!
//! The input is one pass over the table in scan order. The build keeps a
//! reservoir sample for training ([`super::sample`]) and holds the rows in
//! memory only while they fit `BuildLimits::memory_bytes`. Past that it
//! spills every row, unassigned, to [`SPILL_FILE`] in the segment directory
//! (deleted once the segment is written). After training, one pass over the
//! spill assigns each row its partition (the build keeps these 4 bytes a
//! row), then the segment files are written in further passes over the
//! spill, each covering a run of partitions: the run's first partition
//! streams straight to the files, the others are held until the pass ends,
//! and together they fit the memory budget. Rows keep scan order inside a
//! partition either way, so a spilled build writes the same files as one
//! held in memory.
//!
//! What a build holds is allocated against its budget, never grown by
//! doubling (a reallocated buffer leaves its old copy to the allocator, and
//! a copy at twice the size): the rows kept before spilling go into chunks
//! of one batch allocated once each, up to the budget, and the held
//! partitions of every output pass share one buffer sized for the largest
//! run, allocated once per build and filled at offsets the partition sizes
//! give. Batches spilled, read back and written carry
//! `BuildLimits::batch_bytes` of rows, so the spill reader's read-ahead
//! holds a few MiB. Beyond these fixed amounts a build keeps 4 bytes a row
//! (each spilled row's partition).

use refract_table::io::{PageLayout, ReadMode, ReadOptions};
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use refract_table::io::{
    LanceFileReader, LanceFileWriter, RelativePath, STREAMING_PAGE_BYTES,
    STREAMING_READ_BUFFER_BYTES,
};

use super::build::{
    assign, partition_count, sample_rate, train_centroids, BatchVectors, CollectedVectors,
    PartitionPlan, MAX_DEFAULT_PARTITIONS,
};
use super::layout::{
    addresses_path, vector_array, vector_type, vector_values, vectors_batch, vectors_path,
    vectors_schema, IvfLayout, VECTOR_COLUMN,
};
use super::sample::{training_cap, Reservoir, MAX_TRAINING_BYTES, MAX_TRAINING_ROWS};
use super::{addresses_batch, finish_vectors, write_files, IvfFlatDetails};
use crate::types::addresses::{addresses_schema, ADDR_COLUMN};
use crate::types::{IndexContext, IndexParams, Metric};

/// Temporary file of a spilling build inside the segment directory.
pub const SPILL_FILE: &str = "build-spill.lance";
/// Row bytes (vector values and address) a build holds by default: the rows
/// kept before it spills, and the rows held back per output pass (64 MiB).
pub const BUILD_MEMORY_BYTES: usize = 64 << 20;
/// Row bytes per batch a build spills, reads back or writes by default
/// (1 MiB): the spill reader keeps about ten batches in flight.
pub const BUILD_BATCH_BYTES: usize = 1 << 20;
/// What errors call the spill file.
const WHAT: &str = "ivf_flat build spill file";

/// The bounds of one build (tests shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuildLimits {
    /// Row bytes per batch the build spills, reads back or writes (at
    /// least one row a batch).
    pub(crate) batch_bytes: usize,
    /// Row bytes held in memory: before spilling, and per output pass.
    pub(crate) memory_bytes: usize,
    /// Training rows at most (see [`training_cap`]).
    pub(crate) max_training_rows: usize,
    /// Training vector bytes at most.
    pub(crate) max_training_bytes: usize,
}

impl Default for BuildLimits {
    fn default() -> Self {
        Self {
            batch_bytes: BUILD_BATCH_BYTES,
            memory_bytes: BUILD_MEMORY_BYTES,
            max_training_rows: MAX_TRAINING_ROWS,
            max_training_bytes: MAX_TRAINING_BYTES,
        }
    }
}

impl BuildLimits {
    /// Rows per batch of `dim`-value vectors.
    fn batch_rows(&self, dim: usize) -> usize {
        (self.batch_bytes / row_bytes(dim)).max(1)
    }

    /// Rows of `dim`-value vectors the memory budget holds.
    fn held_rows(&self, dim: usize) -> usize {
        self.memory_bytes / row_bytes(dim)
    }
}

/// What a build did, for the tests of its bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BuildReport {
    /// Rows indexed.
    pub(crate) rows: u64,
    /// Rows the training sample held (what k-means was given).
    pub(crate) sample_rows: usize,
    /// Rows k-means trained on (the sample, subsampled to the cap of the
    /// final partition count).
    pub(crate) training_rows: usize,
    /// True when the rows went through the spill file.
    pub(crate) spilled: bool,
    /// Reads of the whole spill file (assignment and output passes).
    pub(crate) spill_passes: usize,
    /// Largest batch the build spilled, read back or wrote.
    pub(crate) max_batch_rows: usize,
    /// Most bytes allocated at once for held rows: the rows kept before
    /// spilling, or the buffer of the partitions output passes hold back.
    pub(crate) max_held_bytes: usize,
    /// Bytes the training sample allocated.
    pub(crate) sample_bytes: usize,
}

/// Bytes of one row held by the build: its vector values and address.
fn row_bytes(dim: usize) -> usize {
    dim * std::mem::size_of::<f32>() + std::mem::size_of::<u64>()
}

/// Builds the segment at `dir` from `input` within `limits`; returns the
/// details and what the build did.
pub(crate) async fn build(
    ctx: &IndexContext,
    dir: &RelativePath,
    mut input: BoxStream<'_, Result<RecordBatch>>,
    params: &IndexParams,
    limits: BuildLimits,
) -> Result<(Vec<u8>, BuildReport)> {
    let metric = params.metric.unwrap_or_default();
    let rate = sample_rate(params)?;
    let spill_path = dir.join(SPILL_FILE)?;
    let mut intake = Intake {
        ctx,
        spill_path: &spill_path,
        limits,
        // The partition count is known only at the end: sample for the most it can be.
        most_partitions: params
            .partitions
            .map_or(MAX_DEFAULT_PARTITIONS, |p| p as usize),
        rate,
        dim: 0,
        rows: 0,
        memory: None,
        spill: None,
        reservoir: None,
        report: BuildReport::default(),
    };
    while let Some(batch) = input.next().await {
        intake.add(&batch?).await?;
    }
    let Intake {
        dim,
        rows,
        memory,
        spill,
        reservoir,
        mut report,
        ..
    } = intake;
    report.rows = rows;
    let k = partition_count(
        params,
        usize::try_from(rows).map_err(|_| Error::invalid_input("too many rows"))?,
    )?;
    tracing::debug!(
        rows,
        spilled = spill.is_some(),
        "ivf_flat build: input read"
    );
    let centroids = match reservoir {
        None => Vec::new(),
        Some(sample) => {
            let cap = training_cap(
                k,
                rate,
                dim,
                limits.max_training_rows,
                limits.max_training_bytes,
            );
            report.sample_rows = sample.len();
            report.sample_bytes = sample.allocated_bytes();
            report.training_rows = sample.len().min(cap);
            train_centroids(&sample.into_values(), dim, k, cap, params, metric)?
        }
    };
    tracing::debug!(partitions = k, "ivf_flat build: trained");
    let layout = match spill {
        None => {
            let memory = memory.unwrap_or_else(|| CollectedVectors::new(dim, 1, 0));
            let plan = PartitionPlan::new(&memory, centroids, metric);
            let batch_rows = limits.batch_rows(dim);
            report.max_batch_rows = report.max_batch_rows.max(batch_rows.min(memory.len()));
            write_files(
                ctx,
                dir,
                plan.layout.dim,
                plan.batches(&memory, batch_rows),
                &plan.layout,
            )
            .await?;
            plan.layout
        }
        Some(writer) => {
            writer.finish().await?;
            report.spilled = true;
            let spilled = Spilled {
                ctx,
                dir,
                path: &spill_path,
                dim,
                rows,
                limits,
            };
            let written = spilled.write_segment(centroids, metric, &mut report).await;
            // The spill goes whether or not the segment was written; a failed
            // write's error wins over a failed delete.
            let deleted = ctx.store.delete(&spill_path).await;
            let layout = written?;
            deleted?;
            layout
        }
    };
    Ok((
        IvfFlatDetails::for_layout(&layout, metric)?.encode()?,
        report,
    ))
}

/// The first pass: rows held in memory or spilled, and the training sample.
struct Intake<'a> {
    ctx: &'a IndexContext,
    spill_path: &'a RelativePath,
    limits: BuildLimits,
    most_partitions: usize,
    rate: usize,
    /// Vector dimension (0 until the first batch).
    dim: usize,
    /// Non-null vectors seen.
    rows: u64,
    /// The rows, while they fit the memory budget (created with the first vector).
    memory: Option<CollectedVectors>,
    /// Where every row goes once they do not.
    spill: Option<LanceFileWriter>,
    /// The training sample (created with the first vector).
    reservoir: Option<Reservoir>,
    report: BuildReport,
}

impl Intake<'_> {
    async fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let vectors = BatchVectors::read(batch, self.dim)?;
        self.dim = vectors.dim;
        if vectors.is_empty() {
            return Ok(());
        }
        let dim = self.dim;
        let cap = training_cap(
            self.most_partitions,
            self.rate,
            dim,
            self.limits.max_training_rows,
            self.limits.max_training_bytes,
        );
        let reservoir = self
            .reservoir
            .get_or_insert_with(|| Reservoir::new(cap, dim));
        vectors
            .values
            .chunks_exact(dim)
            .for_each(|v| reservoir.offer(v));
        self.rows += vectors.len() as u64;
        let kept = self.memory.as_ref().map_or(0, CollectedVectors::len);
        let held = (kept + vectors.len()) * row_bytes(dim);
        if self.spill.is_none() && held > self.limits.memory_bytes {
            let mut writer = LanceFileWriter::create(
                &self.ctx.store,
                self.spill_path,
                spill_schema(dim)?,
                PageLayout::Streaming {
                    page_bytes: STREAMING_PAGE_BYTES,
                },
            )
            .await?;
            if let Some(memory) = self.memory.take() {
                for (values, addrs) in memory.chunks() {
                    self.write_spill(&mut writer, values, addrs).await?;
                }
            }
            self.spill = Some(writer);
        }
        match self.spill.take() {
            Some(mut writer) => {
                self.write_spill(&mut writer, &vectors.values, &vectors.addrs)
                    .await?;
                self.spill = Some(writer);
            }
            None => self.hold(&vectors),
        }
        Ok(())
    }

    /// Keeps rows that fit the budget.
    fn hold(&mut self, vectors: &BatchVectors) {
        let (dim, limits) = (self.dim, self.limits);
        let memory = self.memory.get_or_insert_with(|| {
            CollectedVectors::new(dim, limits.batch_rows(dim), limits.held_rows(dim))
        });
        memory.append(vectors);
        self.report.max_held_bytes = self.report.max_held_bytes.max(memory.allocated_bytes());
    }

    /// Spills rows in batches of at most `limits.batch_rows`.
    async fn write_spill(
        &mut self,
        writer: &mut LanceFileWriter,
        values: &[f32],
        addrs: &[u64],
    ) -> Result<()> {
        let dim = self.dim;
        let step = self.limits.batch_rows(dim);
        for (addrs, values) in addrs.chunks(step).zip(values.chunks(step * dim)) {
            self.report.max_batch_rows = self.report.max_batch_rows.max(addrs.len());
            let batch = RecordBatch::try_new(
                spill_schema(dim)?,
                vec![
                    Arc::new(UInt64Array::from(addrs.to_vec())),
                    Arc::new(vector_array(dim, values.to_vec())?),
                ],
            )
            .map_err(|e| Error::external("assembling an ivf_flat spill batch", e))?;
            writer.write(&batch).await?;
        }
        Ok(())
    }
}

/// The schema of [`SPILL_FILE`]: each row's address and vector, in scan order.
fn spill_schema(dim: usize) -> Result<SchemaRef> {
    Ok(Arc::new(Schema::new(vec![
        Field::new(ADDR_COLUMN, DataType::UInt64, false),
        Field::new(VECTOR_COLUMN, vector_type(dim)?, false),
    ])))
}

/// The rows output passes hold back: one buffer for the whole build, sized
/// for the run that holds the most rows. A pass fills it partition by
/// partition, each at the offset the sizes of the run's earlier partitions
/// give, so rows are written in place and never moved.
struct HeldRows {
    /// `rows × dim` vector values.
    values: Vec<f32>,
    /// The rows' addresses.
    addrs: Vec<u64>,
}

impl HeldRows {
    /// A zeroed buffer of `rows` rows (its pages are touched as rows arrive).
    fn new(rows: usize, dim: usize) -> Self {
        Self {
            values: vec![0.0; rows * dim],
            addrs: vec![0; rows],
        }
    }

    /// Bytes allocated.
    fn bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<f32>()
            + self.addrs.capacity() * std::mem::size_of::<u64>()
    }
}

/// Where the held partitions of one run go in [`HeldRows`]: partition
/// `run.start + 1 + i` fills rows `next[i]..ends[i]`.
struct Slots {
    next: Vec<usize>,
    ends: Vec<usize>,
}

impl Slots {
    /// The slots of the partitions after the first of `run`.
    fn new(lengths: &[u64], run: &Range<usize>) -> Result<Self> {
        let held = lengths
            .get(run.start + 1..run.end)
            .ok_or_else(|| Error::invalid_input("partition run outside the layout"))?;
        let mut next = Vec::with_capacity(held.len());
        let mut ends = Vec::with_capacity(held.len());
        let mut end = 0usize;
        for len in held {
            next.push(end);
            end += usize::try_from(*len).map_err(|_| Error::invalid_input("too many rows"))?;
            ends.push(end);
        }
        Ok(Self { next, ends })
    }

    /// Rows the run holds.
    fn rows(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The next free row of held partition `i`; more rows than its size is
    /// Corrupt (the spill changed between passes).
    fn take(&mut self, i: usize) -> Result<usize> {
        let (next, end) = (self.next.get_mut(i), self.ends.get(i));
        match (next, end) {
            (Some(next), Some(end)) if *next < *end => {
                *next += 1;
                Ok(*next - 1)
            }
            _ => Err(Error::corrupt(
                WHAT,
                "a partition has more rows than were assigned",
            )),
        }
    }

    /// True when every held partition got exactly its rows.
    fn full(&self) -> bool {
        self.next == self.ends
    }

    /// The rows of held partition `i` (after a full pass); `i` must be one
    /// of the run's held partitions.
    fn range(&self, i: usize) -> Range<usize> {
        // Callers pass i < ends.len(), so i - 1 and i index `ends`.
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        start..self.ends[i]
    }
}

/// The second half of a spilled build: assignment and output passes.
struct Spilled<'a> {
    ctx: &'a IndexContext,
    dir: &'a RelativePath,
    path: &'a RelativePath,
    dim: usize,
    rows: u64,
    limits: BuildLimits,
}

impl Spilled<'_> {
    /// Assigns every spilled row, then writes the segment partition by
    /// partition; returns its layout.
    async fn write_segment(
        &self,
        centroids: Vec<f32>,
        metric: Metric,
        report: &mut BuildReport,
    ) -> Result<IvfLayout> {
        let reader = LanceFileReader::open(
            &self.ctx.store,
            self.path,
            ReadOptions {
                mode: ReadMode::Streaming {
                    read_buffer_bytes: STREAMING_READ_BUFFER_BYTES,
                },
                ..ReadOptions::default()
            },
        )
        .await?;
        if reader.num_rows() != self.rows {
            return Err(Error::corrupt(
                WHAT,
                format!("{} rows spilled, {} read", self.rows, reader.num_rows()),
            ));
        }
        let dim = self.dim;
        let mut lengths = vec![0u64; centroids.len() / dim];
        // Exactly 4 bytes a row, not the up to 8 of a doubling `Vec`.
        let mut assignment: Vec<u32> = Vec::with_capacity(usize::try_from(self.rows).unwrap_or(0));
        let mut batches = self.read(&reader).await?;
        while let Some(batch) = batches.try_next().await? {
            let (_, values) = spill_rows(&batch, dim, report)?;
            for v in values.chunks_exact(dim) {
                let p = assign(&centroids, dim, metric, v);
                // `assign` returns an index of `centroids`, so `p < lengths.len()`.
                lengths[p as usize] += 1;
                assignment.push(p);
            }
        }
        report.spill_passes += 1;
        tracing::debug!(rows = self.rows, "ivf_flat build: spill assigned");
        let layout = IvfLayout {
            dim,
            centroids,
            lengths,
        };
        // Streaming writers: Lance's own upload keeps up to eleven parts of
        // 5 MiB or more per file in memory, which would be most of the budget.
        let mut vectors = LanceFileWriter::create(
            &self.ctx.store,
            &vectors_path(self.dir)?,
            vectors_schema(dim)?,
            PageLayout::Streaming {
                page_bytes: STREAMING_PAGE_BYTES,
            },
        )
        .await?;
        let mut addresses = LanceFileWriter::create(
            &self.ctx.store,
            &addresses_path(self.dir)?,
            addresses_schema(),
            PageLayout::Streaming {
                page_bytes: STREAMING_PAGE_BYTES,
            },
        )
        .await?;
        let budget = u64::try_from(self.limits.memory_bytes).unwrap_or(u64::MAX);
        let runs = output_runs(&layout.lengths, row_bytes(dim) as u64, budget);
        let mut most = 0;
        for run in &runs {
            most = most.max(Slots::new(&layout.lengths, run)?.rows());
        }
        let mut held = HeldRows::new(most, dim);
        report.max_held_bytes = report.max_held_bytes.max(held.bytes());
        for run in runs {
            let mut out = Output {
                vectors: &mut vectors,
                addresses: &mut addresses,
                dim,
                batch_rows: self.limits.batch_rows(dim),
                report: &mut *report,
            };
            let slots = Slots::new(&layout.lengths, &run)?;
            self.write_run(&reader, &assignment, run, slots, &mut held, &mut out)
                .await?;
        }
        finish_vectors(vectors, &layout).await?;
        addresses.finish().await?;
        Ok(layout)
    }

    /// Streams the spill in batches of `limits.batch_bytes`.
    async fn read(
        &self,
        reader: &LanceFileReader,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let batch_rows = u32::try_from(self.limits.batch_rows(self.dim)).unwrap_or(u32::MAX);
        reader.read_range(0..self.rows, None, batch_rows).await
    }

    /// One output pass: writes partitions `run` in order, the first as its
    /// rows come, the others from `held` once the pass has seen every row.
    async fn write_run(
        &self,
        reader: &LanceFileReader,
        assignment: &[u32],
        run: Range<usize>,
        mut slots: Slots,
        held: &mut HeldRows,
        out: &mut Output<'_>,
    ) -> Result<()> {
        let dim = self.dim;
        let first = run.start;
        let batch_rows = out.batch_rows;
        let mut head = Head::new(batch_rows, dim);
        let mut offset = 0usize;
        let mut batches = self.read(reader).await?;
        while let Some(batch) = batches.try_next().await? {
            let (addrs, values) = spill_rows(&batch, dim, out.report)?;
            let parts = assignment
                .get(offset..offset + addrs.len())
                .ok_or_else(|| Error::corrupt(WHAT, "more rows than were assigned"))?;
            offset += addrs.len();
            for ((addr, v), p) in addrs.iter().zip(values.chunks_exact(dim)).zip(parts) {
                let p = *p as usize;
                if p == first {
                    head.values.extend_from_slice(v);
                    head.addrs.push(*addr);
                    if head.addrs.len() == batch_rows {
                        let (values, addrs) = head.take(batch_rows, dim);
                        out.write(first, values, addrs).await?;
                    }
                } else if run.contains(&p) {
                    // run.start < p < run.end: a held partition. Its slot
                    // is below `slots.rows()`, which is at most the rows
                    // `held` was made for, so the row indexes `held`.
                    let row = slots.take(p - first - 1)?;
                    held.values[row * dim..(row + 1) * dim].copy_from_slice(v);
                    held.addrs[row] = *addr;
                }
            }
        }
        if offset != assignment.len() || !slots.full() {
            return Err(Error::corrupt(
                WHAT,
                format!("{offset} rows read, {} assigned", assignment.len()),
            ));
        }
        out.report.spill_passes += 1;
        let (values, addrs) = head.take(0, dim);
        out.write(first, values, addrs).await?;
        for (i, p) in (first + 1..run.end).enumerate() {
            let rows = slots.range(i);
            out.write_all(
                p,
                &held.values[rows.start * dim..rows.end * dim],
                &held.addrs[rows],
            )
            .await?;
        }
        tracing::debug!(partitions = ?run, "ivf_flat build: output pass written");
        Ok(())
    }
}

/// The rows of a run's first partition, written a batch at a time as they come.
struct Head {
    values: Vec<f32>,
    addrs: Vec<u64>,
}

impl Head {
    fn new(batch_rows: usize, dim: usize) -> Self {
        Self {
            values: Vec::with_capacity(batch_rows * dim),
            addrs: Vec::with_capacity(batch_rows),
        }
    }

    /// The rows gathered so far, leaving room for `batch_rows` more.
    fn take(&mut self, batch_rows: usize, dim: usize) -> (Vec<f32>, Vec<u64>) {
        let next = Self::new(batch_rows, dim);
        let taken = std::mem::replace(self, next);
        (taken.values, taken.addrs)
    }
}

/// The segment files being written.
struct Output<'a> {
    vectors: &'a mut LanceFileWriter,
    addresses: &'a mut LanceFileWriter,
    dim: usize,
    batch_rows: usize,
    report: &'a mut BuildReport,
}

impl Output<'_> {
    /// Writes rows of partition `p` (at most `batch_rows`).
    async fn write(&mut self, p: usize, values: Vec<f32>, addrs: Vec<u64>) -> Result<()> {
        if addrs.is_empty() {
            return Ok(());
        }
        let partition =
            u32::try_from(p).map_err(|_| Error::invalid_input("too many partitions"))?;
        self.report.max_batch_rows = self.report.max_batch_rows.max(addrs.len());
        let batch = vectors_batch(self.dim, vec![partition; addrs.len()], values)?;
        self.vectors.write(&batch).await?;
        self.addresses
            .write(&addresses_batch(UInt64Array::from(addrs))?)
            .await
    }

    /// Writes rows of partition `p`, `batch_rows` at a time.
    async fn write_all(&mut self, p: usize, values: &[f32], addrs: &[u64]) -> Result<()> {
        let step = self.batch_rows;
        for (addrs, values) in addrs.chunks(step).zip(values.chunks(step * self.dim)) {
            self.write(p, values.to_vec(), addrs.to_vec()).await?;
        }
        Ok(())
    }
}

/// The addresses and vector values of one spill batch.
fn spill_rows<'b>(
    batch: &'b RecordBatch,
    dim: usize,
    report: &mut BuildReport,
) -> Result<(&'b [u64], &'b [f32])> {
    report.max_batch_rows = report.max_batch_rows.max(batch.num_rows());
    let addrs = batch
        .column_by_name(ADDR_COLUMN)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .ok_or_else(|| Error::corrupt(WHAT, "missing address column"))?;
    let values = vector_values(batch, dim)?;
    Ok((addrs.values(), values))
}

/// Splits the partitions into runs written by one output pass each: a run
/// starts at any partition and takes the next ones while their rows fit
/// `budget` bytes (the first partition's rows stream, so they do not count).
pub(super) fn output_runs(lengths: &[u64], row_bytes: u64, budget: u64) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    while start < lengths.len() {
        let mut end = start + 1;
        let mut held = 0u64;
        while let Some(len) = lengths.get(end) {
            let more = len.saturating_mul(row_bytes);
            if held.saturating_add(more) > budget {
                break;
            }
            held += more;
            end += 1;
        }
        runs.push(start..end);
        start = end;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_partition_once_within_the_budget() {
        // 10 bytes a row, 100-byte budget: the first partition of a run is free.
        let lengths = [50, 4, 6, 1, 0, 20, 3, 0];
        let runs = output_runs(&lengths, 10, 100);
        assert_eq!(runs, vec![0..3, 3..5, 5..8]);
        assert_eq!(output_runs(&[], 10, 100), Vec::<Range<usize>>::new());
        assert_eq!(output_runs(&[7, 7, 7], 10, 0), vec![0..1, 1..2, 2..3]);
    }
}
