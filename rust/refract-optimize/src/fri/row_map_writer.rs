//! Writing a row map while a stable partition streams its sources, in the
//! format `refract_reader::rowmap` defines and reads.
//!
//! Labels are buffered into whole blocks and each block is written as one
//! Lance page, so a label chunk (32 blocks) is 32 adjacent pages the reader
//! fetches with one ranged GET, and a single block is one page. The counts
//! buffer follows the last page, next to the file's metadata, so opening
//! reads both from the file's tail.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt16Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use refract_table::io::lance_files::LanceFileWriter;
use refract_table::io::paths::RelativePath;
use refract_table::io::store::DatasetStore;
use refract_table::io::PageLayout;
use uuid::Uuid;

use refract_ledger::MAX_PARTITION_DESTINATIONS as MAX_DESTINATIONS;

use refract_reader::rowmap::{
    row_map_path, CountsBuilder, BLOCK_ROWS, COUNTS_BUFFER_KEY, LABEL_COLUMN,
};

/// Streams labels into `_fri/<map_id>/stable_partition.lance`, feeding the
/// counts matrix as it goes.
pub struct RowMapWriter {
    writer: LanceFileWriter,
    path: RelativePath,
    rows: u64,
    counts: CountsBuilder,
    schema: Arc<Schema>,
    /// Labels of the block being filled (fewer than `BLOCK_ROWS` rows).
    pending: Vec<ArrayRef>,
    pending_rows: usize,
}

/// What [`RowMapWriter::finish`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenRowMap {
    /// The file.
    pub path: RelativePath,
    /// Its size.
    pub size_bytes: u64,
    /// Its block checksums.
    pub checksum: FileChecksum,
    /// Rows per destination.
    pub destination_rows: Vec<u64>,
    /// Labels written.
    pub num_rows: u64,
}

impl RowMapWriter {
    /// Starts the row map of `map_id` with `num_destinations` destinations.
    ///
    /// # Errors
    /// InvalidInput for a destination count outside 1..=65,535 or an
    /// existing row map of that id; External for store failures.
    pub async fn create(
        store: &DatasetStore,
        map_id: &Uuid,
        num_destinations: u32,
    ) -> Result<Self> {
        if num_destinations == 0 || num_destinations > MAX_DESTINATIONS {
            return Err(Error::invalid_input(format!(
                "a stable partition needs 1..={MAX_DESTINATIONS} destinations, got {num_destinations}"
            )));
        }
        let schema = Arc::new(Schema::new(vec![Field::new(
            LABEL_COLUMN,
            DataType::UInt16,
            true,
        )]));
        let path = row_map_path(map_id);
        let writer =
            LanceFileWriter::create(store, &path, schema.clone(), PageLayout::PagePerBatch).await?;
        Ok(Self {
            writer,
            path,
            rows: 0,
            counts: CountsBuilder::new(num_destinations)?,
            schema,
            pending: Vec::new(),
            pending_rows: 0,
        })
    }

    /// Appends the labels of the next source rows (null = deleted row).
    ///
    /// # Errors
    /// InvalidInput for a label not below the destination count; External
    /// for store failures.
    pub async fn push(&mut self, labels: UInt16Array) -> Result<()> {
        for label in labels.iter() {
            self.counts.push(label)?;
        }
        self.rows += labels.len() as u64;
        let block_rows = BLOCK_ROWS as usize;
        let mut offset = 0;
        while offset < labels.len() {
            let take = (block_rows - self.pending_rows).min(labels.len() - offset);
            self.pending.push(Arc::new(labels.slice(offset, take)));
            self.pending_rows += take;
            offset += take;
            if self.pending_rows == block_rows {
                self.write_block().await?;
            }
        }
        Ok(())
    }

    /// Writes the pending labels as one page.
    async fn write_block(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let pieces: Vec<&dyn Array> = self.pending.iter().map(|a| a.as_ref()).collect();
        let block = arrow::compute::concat(&pieces)
            .map_err(|e| Error::external("assembling a row-map block", e))?;
        self.pending.clear();
        self.pending_rows = 0;
        let batch = RecordBatch::try_new(self.schema.clone(), vec![block])
            .map_err(|e| Error::external("building a row-map batch", e))?;
        self.writer.write(&batch).await
    }

    /// Writes the counts matrix and closes the file.
    ///
    /// # Errors
    /// External for store failures (nothing is visible then).
    pub async fn finish(mut self) -> Result<WrittenRowMap> {
        self.write_block().await?;
        let counts = self.counts.finish()?;
        let buffer = self
            .writer
            .add_global_buffer(Bytes::from(counts.encode()))?;
        self.writer
            .add_schema_metadata(COUNTS_BUFFER_KEY, &buffer.to_string());
        let summary = self.writer.finish().await?;
        Ok(WrittenRowMap {
            path: self.path,
            size_bytes: summary.size_bytes,
            checksum: summary.checksum,
            destination_rows: counts.totals(),
            num_rows: self.rows,
        })
    }
}
