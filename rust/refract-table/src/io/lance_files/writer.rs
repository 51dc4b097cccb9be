//! Writing Lance files: data files, index files and row maps.

use arrow_array::RecordBatch;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use lance_file::versions;
use lance_file::writer::{FileWriter, FileWriterOptions};

use super::reader::check_batch_matches;
use super::*;

/// Where a writer's bytes go.
enum Sink {
    /// Lance's object writer (parts of at least 5 MiB).
    Lance,
    /// A [`StreamingUpload`] in parts of `part_bytes`.
    Streaming { part_bytes: usize },
}

/// Writes one Lance file at a unique path. Nothing is visible until [`Self::finish`];
/// dropping the writer leaves no object behind.
pub struct LanceFileWriter {
    inner: FileWriter,
    schema: SchemaRef,
    path: RelativePath,
    checksum: ChecksumHandle,
    /// The store view the file is written through (records it when finished).
    store: DatasetStore,
    /// Global buffers are written at `finish` because adding one is an async write
    /// in lance-file; their indices are fixed when they are queued.
    pending_global_buffers: Vec<Bytes>,
}

impl LanceFileWriter {
    /// Starts a file at `path` with `schema`, its pages laid out as `layout`
    /// says. The path must not exist yet (data paths are immutable: Lance
    /// caches metadata by path).
    ///
    /// # Errors
    /// InvalidInput for an existing path, a schema Lance cannot store or a
    /// zero streaming page size; External for store failures.
    pub async fn create(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        layout: PageLayout,
    ) -> Result<Self> {
        Self::create_versioned(store, path, schema, layout, FILE_VERSION).await
    }

    /// [`Self::create`] in file format `version` instead of Refract's own:
    /// for rewrites of another Lance writer's files (pylance's index files
    /// are v2.0) that must keep their layout.
    ///
    /// # Errors
    /// As [`Self::create`].
    pub async fn create_versioned(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        layout: PageLayout,
        version: ConcreteFileVersion,
    ) -> Result<Self> {
        let lance_schema = lance_core::datatypes::Schema::try_from(schema.as_ref())
            .map_err(|e| Error::invalid_input(format!("schema of Lance file {path}: {e}")))?;
        Self::create_with_schema(store, path, schema, lance_schema, layout, version).await
    }

    /// Starts a data file of a table with `table_schema`: the file's field
    /// ids are the table's, as Lance's readers expect.
    ///
    /// # Errors
    /// As [`Self::create`]; Corrupt when the table schema does not decode.
    pub async fn create_data_file(
        store: &DatasetStore,
        path: &RelativePath,
        table_schema: &crate::format::TableSchema,
        layout: PageLayout,
    ) -> Result<Self> {
        let lance_schema = table_schema.to_lance()?;
        let schema = Arc::new(arrow_schema::Schema::from(&lance_schema));
        Self::create_with_schema(store, path, schema, lance_schema, layout, FILE_VERSION).await
    }

    async fn create_with_schema(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        lance_schema: lance_core::datatypes::Schema,
        layout: PageLayout,
        version: ConcreteFileVersion,
    ) -> Result<Self> {
        let options = match layout {
            PageLayout::Buffered => FileWriterOptions::default(),
            PageLayout::KeepBatches => FileWriterOptions {
                keep_original_array: Some(true),
                ..FileWriterOptions::default()
            },
            PageLayout::PagePerBatch => FileWriterOptions {
                data_cache_bytes: Some(1),
                ..FileWriterOptions::default()
            },
            PageLayout::Streaming { page_bytes } => {
                if page_bytes == 0 {
                    return Err(Error::invalid_input(format!(
                        "page buffer of Lance file {path} must be at least one byte"
                    )));
                }
                let columns = u64::try_from(schema.fields().len().max(1)).unwrap_or(u64::MAX);
                let options = FileWriterOptions {
                    keep_original_array: Some(true),
                    data_cache_bytes: Some(page_bytes.saturating_mul(columns)),
                    ..FileWriterOptions::default()
                };
                // Small upload parts too, so the upload buffers stay as small.
                // ...unless the store needs bigger parts (S3 and GCS: 5 MiB).
                let sink = Sink::Streaming {
                    part_bytes: usize::try_from(page_bytes)
                        .unwrap_or(usize::MAX)
                        .max(store.min_part_bytes()),
                };
                return Self::create_into(
                    store,
                    path,
                    schema,
                    lance_schema,
                    options,
                    sink,
                    version,
                )
                .await;
            }
        };
        Self::create_into(
            store,
            path,
            schema,
            lance_schema,
            options,
            Sink::Lance,
            version,
        )
        .await
    }

    async fn create_into(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        lance_schema: lance_core::datatypes::Schema,
        options: FileWriterOptions,
        sink: Sink,
        version: ConcreteFileVersion,
    ) -> Result<Self> {
        ensure_absent(store, path).await?;
        let object_writer: Box<dyn lance_io::traits::Writer> = match sink {
            Sink::Lance => store
                .lance_store()
                .create(&path.to_object_path())
                .await
                .map_err(|e| lance_error("creating", path, e, false))?,
            Sink::Streaming { part_bytes } => Box::new(StreamingUpload::new(
                store.object_store().clone(),
                path.to_object_path(),
                part_bytes,
            )),
        };
        let checksum = ChecksumHandle::default();
        let object_writer = ChecksummingWriter::new(object_writer, checksum.clone());
        let inner =
            versions::create_writer(version, Box::new(object_writer), lance_schema, options)
                .map_err(|e| lance_error("creating", path, e, false))?;
        Ok(LanceFileWriter {
            inner,
            schema,
            path: path.clone(),
            checksum,
            store: store.clone(),
            pending_global_buffers: Vec::new(),
        })
    }

    /// The schema batches must match.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Appends a batch.
    ///
    /// # Errors
    /// InvalidInput when `batch` does not match the file's schema (columns,
    /// types, nulls in non-nullable columns); External when writing fails.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        check_batch_matches(&self.schema, batch, &self.path)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.inner
            .write_batch(batch)
            .await
            .map_err(|e| lance_error("writing", &self.path, e, false))
    }

    /// Queues a global buffer (index / row-map metadata) and returns the index
    /// [`LanceFileReader::read_global_buffer`] will find it at. Index 0 is Lance's
    /// own schema descriptor, so the first buffer added is 1.
    ///
    /// # Errors
    /// InvalidInput when the file would hold more than `u32::MAX` buffers.
    pub fn add_global_buffer(&mut self, bytes: Bytes) -> Result<u32> {
        self.pending_global_buffers.push(bytes);
        u32::try_from(self.pending_global_buffers.len())
            .map_err(|_| Error::invalid_input("too many global buffers in one Lance file"))
    }

    /// Adds a key/value pair to the schema metadata stored in the file.
    pub fn add_schema_metadata(&mut self, key: &str, value: &str) {
        self.inner.add_schema_metadata(key, value);
    }

    /// Completes the file and makes it visible.
    ///
    /// # Errors
    /// External when writing fails; Corrupt when Lance stores a global buffer
    /// at another index than [`Self::add_global_buffer`] promised.
    pub async fn finish(mut self) -> Result<LanceFileSummary> {
        for (position, bytes) in std::mem::take(&mut self.pending_global_buffers)
            .into_iter()
            .enumerate()
        {
            let expected = u32::try_from(position + 1).unwrap_or(u32::MAX);
            if let Err(e) = add_global_buffer_at(&mut self.inner, &self.path, bytes, expected).await
            {
                self.inner.abort().await;
                return Err(e);
            }
        }
        finish_file(&mut self.inner, &self.path, &self.checksum, &self.store).await
    }

    /// Abandons the file; nothing becomes visible.
    pub async fn abort(mut self) {
        self.inner.abort().await;
    }
}

/// Adds global buffer `bytes` to `inner`, which must store it at index
/// `expected` (the index its readers were promised).
///
/// # Errors
/// External when writing fails; Corrupt when Lance stores it elsewhere.
pub(super) async fn add_global_buffer_at(
    inner: &mut FileWriter,
    path: &RelativePath,
    bytes: Bytes,
    expected: u32,
) -> Result<()> {
    let index = inner
        .add_global_buffer(bytes)
        .await
        .map_err(|e| lance_error("writing a global buffer of", path, e, false))?;
    if index != expected {
        return Err(Error::corrupt(
            format!("Lance file {path}"),
            format!("global buffer {expected} was stored at index {index}"),
        ));
    }
    Ok(())
}

/// Finishes `inner` (every byte of which went through `checksum`) and
/// records the file in `store`.
///
/// # Errors
/// External when writing fails or the checksummed bytes do not add up.
pub(super) async fn finish_file(
    inner: &mut FileWriter,
    path: &RelativePath,
    checksum: &ChecksumHandle,
    store: &DatasetStore,
) -> Result<LanceFileSummary> {
    let written = inner
        .finish()
        .await
        .map_err(|e| lance_error("finishing", path, e, false))?;
    let mut summary = written_summary(path, written.num_rows, written.size_bytes, checksum)?;
    summary.field_columns = inner.field_id_to_column_indices().to_vec();
    store.record_written(path, summary.size_bytes, summary.checksum.clone());
    Ok(summary)
}

/// The summary of a finished file whose bytes went through `checksum`.
pub(crate) fn written_summary(
    path: &RelativePath,
    num_rows: u64,
    size_bytes: u64,
    checksum: &ChecksumHandle,
) -> Result<LanceFileSummary> {
    let (checksum, checksummed) = checksum.finish();
    // Every byte of the file passes through the checksumming writer; a
    // difference means the file was not written the way it was checksummed.
    if checksummed != size_bytes {
        return Err(Error::external(
            format!("writing Lance file {path}"),
            std::io::Error::other(format!(
                "{checksummed} bytes were checksummed but the file is {size_bytes} bytes"
            )),
        ));
    }
    Ok(LanceFileSummary {
        num_rows,
        size_bytes,
        checksum,
        field_columns: Vec::new(),
    })
}
