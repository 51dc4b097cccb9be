//! Stable partition: rewrite a contiguous run of fragments into N destination
//! fragments by a label, keeping the relative order of rows within each
//! destination, and record the rewrite as a stable-partition transition.
//!
//! Two streaming passes over the sources:
//! 1. read only the label column and count live rows per label, so empty
//!    destinations can be dropped before anything is written (labels are then
//!    remapped to a dense `0..N'` range, the destination order is kept);
//! 2. read every column, append each live row to its destination's writer
//!    (bounded buffering) and push one label per physical row (null for a
//!    deleted row) to the row map `_fri/<map_id>/stable_partition.lance`.
//!
//! The commit (`Operation::Partition`) replaces the sources' run in place by
//! the destinations, relabelling the fragments after the run so ids stay
//! sorted (docs/format.md "Relabelled fragments"). A row map is written and a transition recorded whenever a
//! user index segment covers a source or the table already has an FRI history;
//! otherwise no index can hold the sources' addresses and nothing needs
//! translating, so neither is written.

use super::row_map_writer::RowMapWriter;
use arrow::compute::{concat_batches, take_record_batch};
use arrow_array::builder::UInt16Builder;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use futures::StreamExt;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use refract_ledger::{Ledger, MAX_PHYSICAL_ROWS};
use refract_table::commit::fri_entry::load_ledger;
use refract_table::io::PageLayout;
use refract_table::io::{data_file_path, LanceFileWriter, RelativePath};
use refract_table::transaction::{Operation, RewriteGroup, Transaction};
use refract_table::{DataFile, Dataset, Fragment, Manifest};
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::deferred::{needs_history, DeferredRemapHook, HistoryFormat};
use super::labels::PartitionBy;

/// What to partition and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOptions {
    /// The source run (ids in manifest order, contiguous); all fragments when `None`.
    pub fragments: Option<Vec<u64>>,
    /// The label function.
    pub by: PartitionBy,
    /// Rows per read batch (default 8,192).
    pub batch_size: u32,
    /// Rows buffered across all destinations before everything is flushed to
    /// the writers (default 262,144). A destination is also flushed once it
    /// holds `batch_size` rows.
    pub max_buffered_rows: usize,
}

impl PartitionOptions {
    /// Options partitioning every fragment by `by`, with default buffering.
    pub fn new(by: PartitionBy) -> Self {
        Self {
            fragments: None,
            by,
            batch_size: 8_192,
            max_buffered_rows: 262_144,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be at least 1"));
        }
        if self.max_buffered_rows == 0 {
            return Err(Error::invalid_input("max_buffered_rows must be at least 1"));
        }
        self.by.num_labels().map(|_| ())
    }
}

/// What a partition changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMetrics {
    /// Source fragments replaced.
    pub fragments_removed: u64,
    /// Destination fragments written (non-empty destinations only).
    pub fragments_added: u64,
    /// Live rows written.
    pub rows_written: u64,
    /// Deleted source rows dropped by the rewrite.
    pub deleted_rows_dropped: u64,
    /// Destinations that received no row and were not written.
    pub empty_destinations_dropped: u64,
    /// The row map, when one was written.
    pub map_id: Option<Uuid>,
    /// Size of the row-map file (0 without one).
    pub map_size_bytes: u64,
    /// True when the rewrite was meant to be recorded in the FRI ledger.
    pub transition_recorded: bool,
    /// The committed version; `None` when there was nothing to partition.
    pub committed_version: Option<u64>,
}

/// Rewrites the source run into destinations by `options.by`, keeping the
/// relative order of rows within each destination, and commits it. On
/// success `dataset` moves to the new version.
///
/// # Errors
/// InvalidInput for bad options, a missing or unsupported column, or
/// fragments that are not a contiguous run; NotSupported on a table whose FRI
/// history holds transitions this client cannot maintain (or whose flags it
/// does not support); a retryable Conflict when a concurrent commit rewrote or
/// deleted from the sources or indexed them.
pub async fn partition_fragments(
    dataset: &mut Dataset,
    options: PartitionOptions,
) -> Result<PartitionMetrics> {
    options.validate()?;
    dataset
        .features()
        .check_write(dataset.manifest().writer_flags)?;
    options.by.check_schema(&dataset.schema())?;
    let sources = select_sources(dataset.manifest(), options.fragments.as_deref())?;
    if sources.is_empty() {
        return Ok(PartitionMetrics::default());
    }
    let ledger = load_ledger(dataset).await?.map(|(_, ledger)| ledger);
    if ledger
        .as_ref()
        .is_some_and(Ledger::has_unsupported_transitions)
    {
        return Err(Error::not_supported(
            "the FRI ledger holds transitions this client does not understand; upgrade to a \
             writer supporting tagged histories before partitioning this table",
        ));
    }
    let ids: Vec<u64> = sources.iter().map(|f| f.id).collect();
    let record = needs_history(dataset.manifest(), ledger.as_ref(), &ids)
        || ledger.as_ref().is_some_and(|l| !l.is_empty());
    let counts = count_labels(dataset, &sources, &options).await?;
    let dense = DenseLabels::new(&counts)?;
    let mut metrics = PartitionMetrics {
        fragments_removed: sources.len() as u64,
        deleted_rows_dropped: sources.iter().map(Fragment::num_deleted_rows).sum(),
        empty_destinations_dropped: (counts.len() - dense.len()) as u64,
        transition_recorded: record,
        ..PartitionMetrics::default()
    };
    let operation = if dense.len() == 0 {
        all_deleted_rewrite(ids)
    } else {
        let map_id = record.then(Uuid::new_v4);
        let written = write_destinations(dataset, &sources, &options, &dense, map_id).await?;
        metrics.fragments_added = written.destinations.len() as u64;
        metrics.rows_written = written.destinations.iter().map(|f| f.physical_rows).sum();
        metrics.map_id = map_id;
        metrics.map_size_bytes = written.map_size_bytes;
        Operation::Partition {
            source_fragment_ids: ids,
            destinations: written.destinations,
            map_id,
            map_size_bytes: written.map_size_bytes,
            map_checksum: written.map_checksum,
            relabelled: Vec::new(),
        }
    };
    let hook = DeferredRemapHook::new(HistoryFormat::Tagged);
    let committed = dataset
        .commit_transaction(Transaction::new(dataset.version(), operation), Some(&hook))
        .await?;
    metrics.committed_version = Some(committed.version());
    *dataset = committed;
    Ok(metrics)
}

/// The source fragments: all, or the given ids if they form a contiguous run
/// of the fragment list in order.
fn select_sources(manifest: &Manifest, ids: Option<&[u64]>) -> Result<Vec<Fragment>> {
    let Some(ids) = ids else {
        return Ok(manifest.fragments.clone());
    };
    let first = ids
        .first()
        .ok_or_else(|| Error::invalid_input("the fragment list to partition is empty"))?;
    let start = manifest
        .fragment_position(*first)
        .ok_or_else(|| Error::invalid_input(format!("fragment {first} is not in the table")))?;
    let run = manifest
        .fragments
        .get(start..start + ids.len())
        .filter(|run| run.iter().map(|f| f.id).eq(ids.iter().copied()))
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "fragments {ids:?} are not a contiguous run of the fragment list in order"
            ))
        })?;
    Ok(run.to_vec())
}

/// Live rows per label over all sources (pass 1, label column only).
async fn count_labels(
    dataset: &Dataset,
    sources: &[Fragment],
    options: &PartitionOptions,
) -> Result<Vec<u64>> {
    let mut counts = vec![0u64; options.by.num_labels()? as usize];
    let column = [options.by.column()];
    for fragment in sources {
        let deleted = dataset.deletion_vector(fragment).await?;
        let reader = dataset.fragment_reader(fragment).await?;
        let mut batches = reader
            .read_range(0..fragment.physical_rows, Some(&column), options.batch_size)
            .await?;
        let mut offset = 0u64;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            for (i, label) in options.by.labels(&batch)?.into_iter().enumerate() {
                if !is_deleted(&deleted, offset + i as u64) {
                    // Labels are < num_labels (guaranteed by PartitionBy::labels).
                    if let Some(count) = counts.get_mut(usize::from(label)) {
                        *count += 1;
                    }
                }
            }
            offset += batch.num_rows() as u64;
        }
        check_rows_read(fragment, offset)?;
    }
    if let Some((label, rows)) = counts
        .iter()
        .enumerate()
        .find(|(_, rows)| **rows > MAX_PHYSICAL_ROWS)
    {
        return Err(Error::invalid_input(format!(
            "destination {label} would hold {rows} rows, more than a fragment can address; \
             use more destinations"
        )));
    }
    Ok(counts)
}

fn is_deleted(deleted: &refract_core::DeletionVector, offset: u64) -> bool {
    u32::try_from(offset).is_ok_and(|offset| deleted.contains(offset))
}

fn check_rows_read(fragment: &Fragment, rows: u64) -> Result<()> {
    if rows != fragment.physical_rows {
        return Err(Error::corrupt(
            "data file",
            format!(
                "fragment {} returned {rows} rows but records {} physical rows",
                fragment.id, fragment.physical_rows
            ),
        ));
    }
    Ok(())
}

/// Labels of non-empty destinations, renumbered densely in label order.
struct DenseLabels {
    dense: Vec<Option<u16>>,
    rows: Vec<u64>,
}

impl DenseLabels {
    fn new(counts: &[u64]) -> Result<Self> {
        let mut dense = Vec::with_capacity(counts.len());
        let mut rows = Vec::new();
        for count in counts {
            if *count == 0 {
                dense.push(None);
            } else {
                let label = u16::try_from(rows.len())
                    .map_err(|_| Error::invalid_input("too many destinations"))?;
                dense.push(Some(label));
                rows.push(*count);
            }
        }
        Ok(Self { dense, rows })
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    /// The dense label of a raw label that was counted in pass 1.
    fn get(&self, raw: u16) -> Result<u16> {
        self.dense
            .get(usize::from(raw))
            .copied()
            .flatten()
            .ok_or_else(|| {
                Error::corrupt(
                    "data file",
                    format!("label {raw} appeared while writing but not while counting"),
                )
            })
    }
}

/// A Rewrite dropping sources whose rows are all deleted; the deferred hook
/// records it (empty survivors, no destinations) when indices or history need it.
fn all_deleted_rewrite(ids: Vec<u64>) -> Operation {
    let mut surviving = Vec::new();
    // Serializing into a Vec cannot fail.
    let _ = RoaringTreemap::new().serialize_into(&mut surviving);
    Operation::Rewrite {
        groups: vec![RewriteGroup {
            old_fragment_ids: ids,
            new_fragments: Vec::new(),
            surviving_old_addresses: Some(surviving),
        }],
        new_indices: Vec::new(),
        removed_index_uuids: Vec::new(),
    }
}

/// One destination being written.
struct Destination {
    writer: Option<(LanceFileWriter, RelativePath)>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    rows: u64,
}

/// The destination writers with bounded buffering.
struct Destinations {
    schema: SchemaRef,
    slots: Vec<Destination>,
    buffered: usize,
    flush_rows: usize,
    max_buffered: usize,
}

impl Destinations {
    fn new(schema: SchemaRef, count: usize, options: &PartitionOptions) -> Self {
        let slots = (0..count)
            .map(|_| Destination {
                writer: None,
                pending: Vec::new(),
                pending_rows: 0,
                rows: 0,
            })
            .collect();
        Self {
            schema,
            slots,
            buffered: 0,
            flush_rows: options.batch_size as usize,
            max_buffered: options.max_buffered_rows,
        }
    }

    fn slot(&mut self, label: u16) -> Result<&mut Destination> {
        self.slots
            .get_mut(usize::from(label))
            .ok_or_else(|| Error::invalid_input(format!("no destination {label}")))
    }

    async fn push(&mut self, dataset: &Dataset, label: u16, rows: RecordBatch) -> Result<()> {
        let count = rows.num_rows();
        let slot = self.slot(label)?;
        slot.pending.push(rows);
        slot.pending_rows += count;
        slot.rows += count as u64;
        let full = slot.pending_rows >= self.flush_rows;
        self.buffered += count;
        if full {
            self.flush(dataset, label).await?;
        }
        if self.buffered >= self.max_buffered {
            for label in 0..self.slots.len() {
                // Fewer than 65,536 destinations (checked by num_labels).
                self.flush(dataset, label as u16).await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self, dataset: &Dataset, label: u16) -> Result<()> {
        let schema = self.schema.clone();
        let slot = self.slot(label)?;
        if slot.pending.is_empty() {
            return Ok(());
        }
        let batch = concat_batches(&schema, &slot.pending)
            .map_err(|e| Error::external("concatenating partition rows", e))?;
        let flushed = slot.pending_rows;
        slot.pending.clear();
        slot.pending_rows = 0;
        if slot.writer.is_none() {
            let path = data_file_path(&format!("{}.lance", Uuid::new_v4()))?;
            let writer = LanceFileWriter::create_data_file(
                dataset.store(),
                &path,
                &dataset.manifest().lance.schema,
                PageLayout::default(),
            )
            .await?;
            slot.writer = Some((writer, path));
        }
        if let Some((writer, _)) = slot.writer.as_mut() {
            writer.write(&batch).await?;
        }
        self.buffered -= flushed;
        Ok(())
    }

    /// Flushes and closes every writer; the fragments in destination order.
    async fn finish(mut self, dataset: &Dataset) -> Result<Vec<Fragment>> {
        for label in 0..self.slots.len() {
            // Fewer than 65,536 destinations (checked by num_labels).
            self.flush(dataset, label as u16).await?;
        }
        let mut fragments = Vec::with_capacity(self.slots.len());
        for slot in self.slots {
            let Some((writer, path)) = slot.writer else {
                return Err(Error::corrupt(
                    "partition",
                    "a counted destination received no rows",
                ));
            };
            let summary = writer.finish().await?;
            if summary.num_rows != slot.rows {
                return Err(Error::corrupt(
                    "data file",
                    format!(
                        "{path} reports {} rows after writing {}",
                        summary.num_rows, slot.rows
                    ),
                ));
            }
            fragments.push(Fragment {
                id: 0,
                files: vec![DataFile::written(path, &summary)],
                physical_rows: summary.num_rows,
                deletion_file: None,
            });
        }
        Ok(fragments)
    }
}

/// The written destinations and row map.
struct Written {
    destinations: Vec<Fragment>,
    map_size_bytes: u64,
    map_checksum: Option<FileChecksum>,
}

/// Pass 2: stream every source into the destinations and the row map.
async fn write_destinations(
    dataset: &Dataset,
    sources: &[Fragment],
    options: &PartitionOptions,
    dense: &DenseLabels,
    map_id: Option<Uuid>,
) -> Result<Written> {
    let schema = dataset.schema();
    let mut destinations = Destinations::new(schema.clone(), dense.len(), options);
    let mut row_map = match map_id {
        Some(map_id) => {
            // dense.len() <= 65,535 (checked by num_labels), so it fits u32.
            Some(RowMapWriter::create(dataset.store(), &map_id, dense.len() as u32).await?)
        }
        None => None,
    };
    for fragment in sources {
        let deleted = dataset.deletion_vector(fragment).await?;
        let reader = dataset.fragment_reader(fragment).await?;
        let mut batches = reader
            .read_range(0..fragment.physical_rows, None, options.batch_size)
            .await?;
        let mut offset = 0u64;
        while let Some(batch) = batches.next().await {
            let batch = RecordBatch::try_new(schema.clone(), batch?.columns().to_vec())
                .map_err(|e| Error::external("conforming a source batch to the table schema", e))?;
            let raw = options.by.labels(&batch)?;
            let mut map_labels = UInt16Builder::with_capacity(batch.num_rows());
            let mut order: Vec<(u16, u32)> = Vec::with_capacity(batch.num_rows());
            for (i, label) in raw.into_iter().enumerate() {
                if is_deleted(&deleted, offset + i as u64) {
                    map_labels.append_null();
                } else {
                    let label = dense.get(label)?;
                    map_labels.append_value(label);
                    // Batches hold at most batch_size (u32) rows.
                    order.push((label, i as u32));
                }
            }
            // (label, row) order: rows of one destination stay in source order.
            order.sort_unstable();
            for run in order.chunk_by(|a, b| a.0 == b.0) {
                // chunk_by never yields an empty run.
                let Some(&(label, _)) = run.first() else {
                    continue;
                };
                let indices = UInt32Array::from_iter_values(run.iter().map(|(_, row)| *row));
                let rows = take_record_batch(&batch, &indices)
                    .map_err(|e| Error::external("selecting partition rows", e))?;
                destinations.push(dataset, label, rows).await?;
            }
            if let Some(map) = row_map.as_mut() {
                map.push(map_labels.finish()).await?;
            }
            offset += batch.num_rows() as u64;
        }
        check_rows_read(fragment, offset)?;
    }
    let fragments = destinations.finish(dataset).await?;
    let (map_size_bytes, map_checksum) = match row_map {
        Some(map) => {
            let written = map.finish().await?;
            let expected: Vec<u64> = fragments.iter().map(|f| f.physical_rows).collect();
            if written.destination_rows != expected {
                return Err(Error::corrupt(
                    "row map",
                    format!(
                        "row map counts {:?} disagree with the destinations {expected:?}",
                        written.destination_rows
                    ),
                ));
            }
            (written.size_bytes, Some(written.checksum))
        }
        None => (0, None),
    };
    debug_assert!(fragments
        .iter()
        .map(|f| f.physical_rows)
        .eq(dense.rows.iter().copied()));
    Ok(Written {
        destinations: fragments,
        map_size_bytes,
        map_checksum,
    })
}
