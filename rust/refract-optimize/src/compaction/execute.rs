//! Executing one compaction task: read the run in order, write balanced outputs,
//! capture the surviving row addresses compactly.
//!
//! The ordering contract of `RowAddrRemap` rests on this file: fragments are
//! read in manifest order, offsets ascending, and rows are written in exactly
//! the order they were read. Nothing here reorders, buffers a whole output, or
//! keeps per-row maps: the capture is a `RoaringTreemap`.
//!
//! Reading (with the capture) and writing run as two tasks joined by a channel
//! holding about `READ_AHEAD_ROWS` rows, so decoding the sources and encoding
//! the outputs overlap (the writer stalls for whole pages at a time) while
//! memory stays bounded by that channel.

use std::ops::RangeInclusive;

use arrow_array::{RecordBatch, UInt64Array};
use futures::stream::BoxStream;
use futures::StreamExt;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use refract_table::dataset::{Dataset, ROW_ADDRESS_COLUMN};
use refract_table::format::{DataFile, FileLayout, Fragment};
use refract_table::io::lance_files::{LanceFileWriter, DATA_FILE_VERSION};
use refract_table::io::paths::{data_file_path, RelativePath};
use refract_table::io::LanceFileSummary;
use refract_table::io::PageLayout;
use refract_table::task::AbortOnDrop;
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::binary_copy::try_copy_task;
use super::compaction_plan::CompactionTask;
use super::CompactionOptions;

/// A data file written by a task (serializable mirror of the table's `DataFile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Path relative to the dataset root.
    pub path: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Rows in the file.
    pub num_rows: u64,
    /// Block checksums of the file as written (absent from results of
    /// older releases).
    #[serde(default)]
    pub checksum: Option<FileChecksum>,
    /// Field ids of the table schema the file stores.
    pub fields: Vec<i32>,
    /// The column of each field in the file.
    pub column_indices: Vec<i32>,
}

impl WrittenFile {
    /// A file this engine wrote at `path`.
    pub(crate) fn written(path: &RelativePath, summary: &LanceFileSummary) -> WrittenFile {
        Self::of(&DataFile::written(path.clone(), summary))
    }

    /// A file copied page by page from sources laid out as `layout`.
    pub(crate) fn copied(
        path: &RelativePath,
        summary: &LanceFileSummary,
        layout: &FileLayout,
    ) -> WrittenFile {
        let mut file = DataFile::written(path.clone(), summary);
        file.layout = layout.clone();
        Self::of(&file)
    }

    fn of(file: &DataFile) -> WrittenFile {
        WrittenFile {
            path: file.path.to_string(),
            size_bytes: file.size_bytes,
            num_rows: file.num_rows,
            checksum: file.checksum.clone(),
            fields: file.layout.fields.clone(),
            column_indices: file.layout.column_indices.clone(),
        }
    }

    /// The table's record of the file.
    ///
    /// # Errors
    /// InvalidInput when the path is not a dataset-relative path.
    pub fn to_data_file(&self) -> Result<DataFile> {
        Ok(DataFile {
            path: RelativePath::parse(&self.path)?,
            size_bytes: self.size_bytes,
            num_rows: self.num_rows,
            checksum: self.checksum.clone(),
            layout: FileLayout {
                fields: self.fields.clone(),
                column_indices: self.column_indices.clone(),
                file_version: DATA_FILE_VERSION,
            },
        })
    }
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
    /// True when the outputs were made by copying the sources' encoded pages
    /// rather than by decoding and re-encoding their rows.
    #[serde(default)]
    pub pages_copied: bool,
    /// The options of the plan the task came from; the commit uses them.
    pub options: CompactionOptions,
}

impl RewriteResult {
    /// The new fragments (ids unassigned: the commit assigns them).
    ///
    /// # Errors
    /// InvalidInput when a written file's path is not a dataset-relative
    /// path (absolute, empty, or escaping the dataset root).
    pub fn new_fragments(&self) -> Result<Vec<Fragment>> {
        self.new_files
            .iter()
            .map(|file| {
                Ok(Fragment {
                    id: 0,
                    files: vec![file.to_data_file()?],
                    physical_rows: file.num_rows,
                    deletion_file: None,
                })
            })
            .collect()
    }

    /// The surviving old addresses, decoded.
    ///
    /// # Errors
    /// Corrupt when the serialized bitmap does not decode.
    pub fn surviving(&self) -> Result<RoaringTreemap> {
        RoaringTreemap::deserialize_from(self.surviving_old_addresses.as_slice())
            .map_err(|e| Error::corrupt("rewrite result", format!("surviving addresses: {e}")))
    }
}

impl CompactionTask {
    /// Reads the task's fragments at its read version and writes its outputs.
    /// Files written here become visible only when a commit references them.
    ///
    /// # Errors
    /// NotFound when the read version or a source fragment no longer exists;
    /// InvalidInput when the task's planned output rows disagree with its
    /// sources' live rows; Corrupt / NotFound for damaged or missing source
    /// files; External for store failures.
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
        if self.options.binary_copy {
            let copy = try_copy_task(
                &dataset,
                &sources,
                &self.plan.output_rows,
                self.options.binary_copy_min_source_rows,
            );
            if let Some(copied) = copy.await? {
                let mut result = self.result(
                    &sources,
                    copied.new_files,
                    &copied.surviving,
                    copied.rows_read,
                )?;
                result.pages_copied = true;
                return Ok(result);
            }
        }
        // The sources are read once and replaced: no metadata caching, and
        // small files are fetched whole.
        let stream = dataset
            .scan()
            .fragments(&self.plan.fragment_ids)
            .with_row_address()
            .batch_size(self.batch_size())
            .one_pass()
            .try_into_stream()
            .await?;
        let (sender, mut receiver) = mpsc::channel(read_ahead_batches(&sources, self.batch_size()));
        // Aborted if the writer fails, so the reader never outlives the task.
        let reader = AbortOnDrop::spawn(read_sources(stream, sender));
        let mut outputs = OutputSplitter::new(&dataset, self.plan.output_rows.clone());
        // The channel closes when the reader is done; a read error arrives in it.
        while let Some(data) = receiver.recv().await {
            outputs.write(&data?).await?;
        }
        let (surviving, rows_read) = reader.join("reading compaction sources").await??;
        let new_files = outputs.finish().await?;
        self.result(&sources, new_files, &surviving, rows_read)
    }

    /// Packs what the task wrote into its serializable result.
    fn result(
        &self,
        sources: &[Fragment],
        new_files: Vec<WrittenFile>,
        surviving: &RoaringTreemap,
        rows_read: u64,
    ) -> Result<RewriteResult> {
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
            pages_copied: false,
            options: self.options.clone(),
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
        let start = dataset.fragment_position(*first).ok_or_else(|| {
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

/// Rows the reader may run ahead of the writer: about one Lance page of a
/// narrow column, so the reader keeps going while the writer encodes a page.
const READ_AHEAD_ROWS: u64 = 65_536;
/// Bounds on the batches in the channel between reader and writer.
const MIN_READ_AHEAD_BATCHES: usize = 4;
const MAX_READ_AHEAD_BATCHES: usize = 64;

/// Channel capacity for `sources`: batches are at most `batch_size` rows and
/// no larger than a source fragment, so small fragments get more batches.
fn read_ahead_batches(sources: &[Fragment], batch_size: usize) -> usize {
    let count = sources.len().max(1) as u64;
    let average_rows = sources.iter().map(|f| f.physical_rows).sum::<u64>() / count;
    let rows_per_batch = average_rows.min(batch_size as u64).max(1);
    usize::try_from(READ_AHEAD_ROWS / rows_per_batch)
        .unwrap_or(MAX_READ_AHEAD_BATCHES)
        .clamp(MIN_READ_AHEAD_BATCHES, MAX_READ_AHEAD_BATCHES)
}

/// Addresses collected before they are added to the capture in one sorted
/// insertion (the translation batch limit, so the buffer stays small).
const CAPTURE_BUFFER_ADDRESSES: usize = 65_536;

/// `first..=last` when `addresses` are consecutive ascending values.
fn consecutive_run(addresses: &[u64]) -> Option<RangeInclusive<u64>> {
    let (&first, &last) = (addresses.first()?, addresses.last()?);
    let span = last.checked_sub(first)?;
    let consecutive = span == (addresses.len() - 1) as u64
        && addresses
            .windows(2)
            .all(|pair| pair[0].checked_add(1) == Some(pair[1]));
    consecutive.then_some(first..=last)
}

/// The reading half of a task: streams the data batches to the writer in
/// order and returns the captured surviving addresses and the rows read.
async fn read_sources(
    mut stream: BoxStream<'static, Result<RecordBatch>>,
    sender: mpsc::Sender<Result<RecordBatch>>,
) -> Result<(RoaringTreemap, u64)> {
    let mut capture = AddressCapture::default();
    let mut rows_read = 0u64;
    while let Some(batch) = stream.next().await {
        let split = batch.and_then(|batch| split_row_addresses(&batch));
        let data = match split {
            Ok((data, addresses)) => {
                capture.add(addresses.values())?;
                rows_read += data.num_rows() as u64;
                Ok(data)
            }
            Err(err) => Err(err),
        };
        let failed = data.is_err();
        // A closed channel means the writer gave up; its error is the one reported.
        if sender.send(data).await.is_err() || failed {
            break;
        }
    }
    Ok((capture.finish()?, rows_read))
}

/// Collects surviving addresses into a `RoaringTreemap` in sorted chunks:
/// fragments come in manifest order, which is not id order after earlier
/// in-place rewrites, and inserting chunk by chunk keeps the bitmap's
/// allocations together instead of growing one container per fragment
/// between the large, short-lived batch buffers.
#[derive(Default)]
struct AddressCapture {
    surviving: RoaringTreemap,
    pending: Vec<u64>,
}

impl AddressCapture {
    fn add(&mut self, addresses: &[u64]) -> Result<()> {
        // A batch without deletions is one run: a range insert, no sort.
        if let Some(run) = consecutive_run(addresses) {
            self.surviving.insert_range(run);
            return Ok(());
        }
        for chunk in addresses.chunks(CAPTURE_BUFFER_ADDRESSES) {
            if self.pending.len() + chunk.len() > CAPTURE_BUFFER_ADDRESSES {
                self.flush()?;
            }
            self.pending.extend_from_slice(chunk);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending.sort_unstable();
        self.pending.dedup();
        let chunk = RoaringTreemap::from_sorted_iter(self.pending.drain(..))
            .map_err(|e| Error::corrupt("scan", format!("row addresses out of order: {e}")))?;
        self.surviving |= chunk;
        Ok(())
    }

    fn finish(mut self) -> Result<RoaringTreemap> {
        self.flush()?;
        Ok(self.surviving)
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
                self.open_next().await?;
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

    async fn open_next(&mut self) -> Result<()> {
        let Some(size) = self.remaining_sizes.next() else {
            return Err(Error::invalid_input(
                "compaction sources hold more rows than the plan's outputs",
            ));
        };
        let path = data_file_path(&format!("{}.lance", Uuid::new_v4()))?;
        // Scan batches own their buffers and are dropped once written.
        let writer = LanceFileWriter::create_data_file(
            self.dataset.store(),
            &path,
            &self.dataset.manifest().lance.schema,
            PageLayout::KeepBatches,
        )
        .await?;
        self.current = Some((writer, path, size));
        Ok(())
    }

    async fn close_current(&mut self) -> Result<()> {
        if let Some((writer, path, _)) = self.current.take() {
            let summary = writer.finish().await?;
            self.written.push(WrittenFile::written(&path, &summary));
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Feeds `batches` to a capture and returns the treemap it builds.
    fn capture(batches: &[Vec<u64>]) -> RoaringTreemap {
        let mut capture = AddressCapture::default();
        for batch in batches {
            capture.add(batch).unwrap();
        }
        capture.finish().unwrap()
    }

    #[test]
    fn capture_crosses_the_buffer_limit_without_losing_addresses() {
        // Two fragments, out of id order, with one batch larger than the buffer.
        let second: Vec<u64> = (0..70_000u64).map(|offset| (9 << 32) | offset).collect();
        let first: Vec<u64> = (0..10u64).map(|offset| (2 << 32) | (offset * 3)).collect();
        let captured = capture(&[second.clone(), first.clone()]);
        let expected: RoaringTreemap = second.into_iter().chain(first).collect();
        assert_eq!(captured, expected);
        assert_eq!(captured.len(), 70_010);
    }

    fn fragments(physical_rows: u64, count: usize) -> Vec<Fragment> {
        let fragment = Fragment {
            id: 1,
            files: Vec::new(),
            physical_rows,
            deletion_file: None,
        };
        vec![fragment; count]
    }

    #[test]
    fn read_ahead_holds_about_a_page_of_rows() {
        assert_eq!(read_ahead_batches(&fragments(1_000, 2_000), 8_192), 64);
        assert_eq!(read_ahead_batches(&fragments(2_048, 100), 8_192), 32);
        assert_eq!(read_ahead_batches(&fragments(1_048_576, 2), 8_192), 8);
        assert_eq!(read_ahead_batches(&fragments(1_048_576, 2), 65_536), 4);
        assert_eq!(read_ahead_batches(&fragments(1, 10), 8_192), 64);
        assert_eq!(read_ahead_batches(&[], 8_192), 64);
    }

    #[test]
    fn consecutive_batches_and_scattered_batches_capture_the_same_set() {
        let run: Vec<u64> = (1_000..71_000).collect();
        let scattered: Vec<u64> = (0..5_000u64).map(|i| (7 << 32) + i * 3).collect();
        let single = vec![(3 << 32) + 9];
        let captured = capture(&[scattered.clone(), run.clone(), single.clone(), run.clone()]);
        let mut expected = RoaringTreemap::new();
        for address in run.iter().chain(&scattered).chain(&single) {
            expected.insert(*address);
        }
        assert_eq!(captured, expected);
        assert_eq!(consecutive_run(&run), Some(1_000..=70_999));
        assert_eq!(consecutive_run(&single), Some(single[0]..=single[0]));
        assert_eq!(consecutive_run(&scattered), None);
        // Right endpoints but not consecutive inside.
        assert_eq!(consecutive_run(&[5, 5, 7]), None);
        assert_eq!(consecutive_run(&[5, 7, 6, 8]), None);
        assert_eq!(consecutive_run(&[]), None);
        assert_eq!(
            consecutive_run(&[u64::MAX - 1, u64::MAX]),
            Some(u64::MAX - 1..=u64::MAX)
        );
    }

    #[test]
    fn empty_capture_is_empty() {
        assert!(capture(&[]).is_empty());
        assert!(capture(&[vec![], vec![]]).is_empty());
    }

    proptest! {
        /// Fragments in any id order, offsets ascending within each, cut into
        /// batches of any size: the capture holds exactly the addresses seen.
        #[test]
        fn capture_equals_inserting_every_address(
            fragments in prop::collection::vec(
                (0u64..50, prop::collection::btree_set(0u32..200_000, 0..300)),
                0..12,
            ),
            batch_rows in 1usize..500,
        ) {
            let addresses: Vec<u64> = fragments
                .iter()
                .flat_map(|(id, offsets)| offsets.iter().map(move |o| (id << 32) | u64::from(*o)))
                .collect();
            let batches: Vec<Vec<u64>> = addresses.chunks(batch_rows).map(<[u64]>::to_vec).collect();
            let expected: RoaringTreemap = addresses.iter().copied().collect();
            prop_assert_eq!(capture(&batches), expected);
        }
    }
}
