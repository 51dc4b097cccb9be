//! Generic Lance file I/O for data files, index files and row maps.

use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::stream::BoxStream;
use refract_core::Result;

use super::paths::RelativePath;
use super::store::DatasetStore;

/// What a finished Lance file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanceFileSummary {
    /// Rows written.
    pub num_rows: u64,
    /// File size in bytes.
    pub size_bytes: u64,
}

/// Writes one Lance file at a unique path.
pub struct LanceFileWriter {
    _private: (),
}

impl LanceFileWriter {
    /// Starts a file at `path` with `schema`.
    pub async fn create(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
    ) -> Result<Self> {
        let _ = (store, path, schema);
        todo!()
    }

    /// Appends a batch; a schema mismatch is InvalidInput.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let _ = batch;
        todo!()
    }

    /// Adds a global buffer (index / row-map metadata) and returns its index.
    pub fn add_global_buffer(&mut self, bytes: Bytes) -> Result<u32> {
        let _ = bytes;
        todo!()
    }

    /// Adds a key/value pair to the schema metadata stored in the file.
    pub fn add_schema_metadata(&mut self, key: &str, value: &str) {
        let _ = (key, value);
        todo!()
    }

    /// Completes the file and makes it visible.
    pub async fn finish(self) -> Result<LanceFileSummary> {
        todo!()
    }
}

/// Reads one Lance file. Cheap to clone.
#[derive(Clone)]
pub struct LanceFileReader {
    _private: (),
}

impl LanceFileReader {
    /// Opens the file at `path`; missing → NotFound, undecodable → Corrupt.
    pub async fn open(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
    ) -> Result<Self> {
        let _ = (store, path, known_size);
        todo!()
    }

    /// Rows in the file.
    pub fn num_rows(&self) -> u64 {
        todo!()
    }

    /// The Arrow schema of the file.
    pub fn schema(&self) -> SchemaRef {
        todo!()
    }

    /// Streams `rows` in batches of at most `batch_size` rows.
    pub async fn read_range(
        &self,
        rows: Range<u64>,
        projection: Option<&[&str]>,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let _ = (rows, projection, batch_size);
        todo!()
    }

    /// Reads the whole file.
    pub async fn read_all(&self, projection: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
        let _ = projection;
        todo!()
    }

    /// Reads rows at `offsets` (any order, duplicates allowed), in caller order.
    pub async fn take(&self, offsets: &[u32], projection: Option<&[&str]>) -> Result<RecordBatch> {
        let _ = (offsets, projection);
        todo!()
    }

    /// Reads a global buffer written with [`LanceFileWriter::add_global_buffer`].
    pub async fn read_global_buffer(&self, index: u32) -> Result<Bytes> {
        let _ = index;
        todo!()
    }
}
