//! Executing one compaction task: read the run in order, write balanced outputs,
//! capture the surviving row addresses compactly.
//!
//! The ordering contract of `RowAddrRemap` rests on this file: fragments are
//! read in manifest order, offsets ascending, and rows are written in exactly
//! the order they were read. Nothing here reorders, buffers a whole output, or
//! keeps per-row maps: the capture is a `RoaringTreemap`.

use arrow_array::{RecordBatch, UInt64Array};
use futures::StreamExt;
use refract_core::{Error, Result};
use refract_table::dataset::{Dataset, ROW_ADDRESS_COLUMN};
use refract_table::format::{DataFile, Fragment};
use refract_table::io::lance_files::LanceFileWriter;
use refract_table::io::paths::{data_file_path, RelativePath};
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::plan::CompactionTask;

/// A data file written by a task (serializable mirror of the table's `DataFile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Path relative to the dataset root.
    pub path: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Rows in the file.
    pub num_rows: u64,
}

/// The serializable outcome of [`CompactionTask::execute`], committed by
/// [`super::commit::commit_compaction`], possibly on another machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewriteResult {
    /// The task that produced it.
    pub task_index: usize,
    /// The version the sources were read at.
    pub read_version: u64,
    /// The rewritten run, in order.
    pub old_fragment_ids: Vec<u64>,
    /// Physical rows of each old fragment (parallel to `old_fragment_ids`).
    pub old_physical_rows: Vec<u64>,
    /// One data file per new fragment, in write order.
    pub new_files: Vec<WrittenFile>,
    /// Serialized `RoaringTreemap` of the old row addresses that survived.
    pub surviving_old_addresses: Vec<u8>,
    /// Rows read (live rows of the sources).
    pub rows_read: u64,
}

impl RewriteResult {
    /// The new fragments (ids unassigned: the commit assigns them).
    pub fn new_fragments(&self) -> Result<Vec<Fragment>> {
        self.new_files
            .iter()
            .map(|file| {
                Ok(Fragment {
                    id: 0,
                    files: vec![DataFile {
                        path: RelativePath::parse(&file.path)?,
                        size_bytes: file.size_bytes,
                        num_rows: file.num_rows,
                    }],
                    physical_rows: file.num_rows,
                    deletion_file: None,
                })
            })
            .collect()
    }

    /// The surviving old addresses, decoded.
    pub fn surviving(&self) -> Result<RoaringTreemap> {
        RoaringTreemap::deserialize_from(self.surviving_old_addresses.as_slice())
            .map_err(|e| Error::corrupt("rewrite result", format!("surviving addresses: {e}")))
    }
}

impl CompactionTask {
    /// Reads the task's fragments at its read version and writes its outputs.
    /// Files written here become visible only when a commit references them.
    pub async fn execute(&self, dataset: &Dataset) -> Result<RewriteResult> {
        let dataset = if dataset.version() == self.read_version {
            dataset.clone()
        } else {
            dataset.checkout_version(self.read_version).await?
        };
        let sources = self.source_fragments(&dataset)?;
        let expected_rows: u64 = sources.iter().map(|f| f.live_rows()).sum();
        let planned_rows: u64 = self.plan.output_rows.iter().sum();
        if expected_rows != planned_rows || self.plan.output_rows.contains(&0) {
            return Err(Error::invalid_input(format!(
                "task {} plans {planned_rows} output rows but its sources hold {expected_rows} live rows",
                self.task_index
            )));
        }
        let mut stream = dataset
            .scan()
            .fragments(&self.plan.fragment_ids)
            .with_row_address()
            .batch_size(self.batch_size)
            .try_into_stream()
            .await?;
        let mut outputs = OutputSplitter::new(&dataset, self.plan.output_rows.clone());
        let mut surviving = RoaringTreemap::new();
        let mut rows_read = 0u64;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let (data, addresses) = split_row_addresses(&batch)?;
            // Fragments come in manifest order, which is not id order after
            // earlier in-place rewrites, so insert rather than append.
            surviving.extend(addresses.values().iter().copied());
            rows_read += data.num_rows() as u64;
            outputs.write(&data).await?;
        }
        let new_files = outputs.finish().await?;
        let mut surviving_bytes = Vec::with_capacity(surviving.serialized_size());
        surviving
            .serialize_into(&mut surviving_bytes)
            .map_err(|e| Error::external("serializing surviving addresses", e))?;
        Ok(RewriteResult {
            task_index: self.task_index,
            read_version: self.read_version,
            old_fragment_ids: self.plan.fragment_ids.clone(),
            old_physical_rows: sources.iter().map(|f| f.physical_rows).collect(),
            new_files,
            surviving_old_addresses: surviving_bytes,
            rows_read,
        })
    }

    /// The task's fragments at the read version; they must form a contiguous run.
    fn source_fragments(&self, dataset: &Dataset) -> Result<Vec<Fragment>> {
        let fragments = dataset.fragments();
        let first = self
            .plan
            .fragment_ids
            .first()
            .ok_or_else(|| Error::invalid_input("compaction task has no fragments"))?;
        let start = fragments
            .iter()
            .position(|f| f.id == *first)
            .ok_or_else(|| {
                Error::not_found(format!("fragment {first} at version {}", self.read_version))
            })?;
        let run = fragments
            .get(start..start + self.plan.fragment_ids.len())
            .ok_or_else(|| Error::invalid_input("compaction task runs past the fragment list"))?;
        let ids_match = run
            .iter()
            .zip(&self.plan.fragment_ids)
            .all(|(fragment, id)| fragment.id == *id);
        if !ids_match {
            return Err(Error::invalid_input(format!(
                "compaction task {} does not name a contiguous run of version {}",
                self.task_index, self.read_version
            )));
        }
        Ok(run.to_vec())
    }
}

/// Separates the `_rowaddr` column from the data columns.
fn split_row_addresses(batch: &RecordBatch) -> Result<(RecordBatch, UInt64Array)> {
    let index = batch
        .schema()
        .index_of(ROW_ADDRESS_COLUMN)
        .map_err(|_| Error::corrupt("scan", "compaction read is missing the row address column"))?;
    let addresses = batch
        .column(index)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .cloned()
        .ok_or_else(|| Error::corrupt("scan", "row address column is not UInt64"))?;
    let mut data = batch.clone();
    data.remove_column(index);
    Ok((data, addresses))
}

/// Writes a stream of batches into outputs of exact row counts, in order.
struct OutputSplitter<'a> {
    dataset: &'a Dataset,
    remaining_sizes: std::vec::IntoIter<u64>,
    current: Option<(LanceFileWriter, RelativePath, u64)>,
    written: Vec<WrittenFile>,
}

impl<'a> OutputSplitter<'a> {
    fn new(dataset: &'a Dataset, sizes: Vec<u64>) -> Self {
        Self {
            dataset,
            remaining_sizes: sizes.into_iter(),
            current: None,
            written: Vec::new(),
        }
    }

    async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut offset = 0usize;
        while offset < batch.num_rows() {
            if self.current.is_none() {
                self.open_next(batch).await?;
            }
            let Some((writer, _, left)) = self.current.as_mut() else {
                return Err(Error::invalid_input(
                    "compaction sources hold more rows than the plan's outputs",
                ));
            };
            let take = (*left).min((batch.num_rows() - offset) as u64) as usize;
            writer.write(&batch.slice(offset, take)).await?;
            *left -= take as u64;
            offset += take;
            if *left == 0 {
                self.close_current().await?;
            }
        }
        Ok(())
    }

    async fn open_next(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(size) = self.remaining_sizes.next() else {
            return Err(Error::invalid_input(
                "compaction sources hold more rows than the plan's outputs",
            ));
        };
        let path = data_file_path(&format!("{}.lance", Uuid::new_v4()))?;
        let writer = LanceFileWriter::create(self.dataset.store(), &path, batch.schema()).await?;
        self.current = Some((writer, path, size));
        Ok(())
    }

    async fn close_current(&mut self) -> Result<()> {
        if let Some((writer, path, _)) = self.current.take() {
            let summary = writer.finish().await?;
            self.written.push(WrittenFile {
                path: path.to_string(),
                size_bytes: summary.size_bytes,
                num_rows: summary.num_rows,
            });
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<Vec<WrittenFile>> {
        if self.current.is_some() || self.remaining_sizes.next().is_some() {
            return Err(Error::invalid_input(
                "compaction sources hold fewer rows than the plan's outputs",
            ));
        }
        self.close_current().await?;
        Ok(std::mem::take(&mut self.written))
    }
}
