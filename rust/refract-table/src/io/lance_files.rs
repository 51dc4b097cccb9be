//! Generic Lance file I/O for data files, index files and row maps.
//!
//! All I/O goes through [`DatasetStore::lance_store`], i.e. through the counting
//! store, so every Lance request is visible to request counting and fault
//! injection. Files are written in the stable Lance v2.2 format.
//!
//! Error mapping: a missing file is NotFound; an object-store failure is
//! External; a file Lance cannot decode is Corrupt.

use std::error::Error as StdError;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use lance_core::cache::LanceCache;
use lance_encoding::decoder::{DecoderPlugins, FilterExpression};
use lance_file::reader::{FileReader, FileReaderOptions, ReaderProjection};
use lance_file::version::ConcreteFileVersion;
use lance_file::versions;
use lance_file::writer::{FileWriter, FileWriterOptions};
use lance_io::object_store::ObjectStore as LanceObjectStore;
use lance_io::scheduler::{ScanScheduler, SchedulerConfig};

/// I/O budget of a streaming reader ([`LanceFileReader::open_streaming`]) for
/// index remaps, which consume the old file in small windows.
pub const STREAMING_READ_BUFFER_BYTES: u64 = 8 * 1024 * 1024;
/// Page buffer per column of a streaming writer
/// ([`LanceFileWriter::create_streaming`]) for index remaps.
pub const STREAMING_PAGE_BYTES: u64 = 1024 * 1024;

/// Bytes one reader may have in flight. lance's `max_bandwidth` default is
/// 32 MiB per I/O thread (256 MiB here), which an index remap streaming an old
/// segment fills entirely: its peak RSS followed that budget, not the rows.
/// 64 MiB still covers several 8 MiB pages per column.
pub const READ_BUFFER_BYTES: u64 = 64 * 1024 * 1024;
use lance_io::utils::CachedFileSize;

use super::upload::StreamingUpload;
use lance_io::ReadBatchParams;
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use refract_core::{Error, Result};
use url::Url;

use super::checksumming_writer::{ChecksumHandle, ChecksummingWriter};
use super::paths::RelativePath;
use super::recorded_files::RecordedFile;
use super::store::DatasetStore;
use super::verifying_store::verification_failure;
use crate::task::AbortOnDrop;
use refract_core::checksum::FileChecksum;

/// The Lance file format version Refract writes.
pub(crate) const FILE_VERSION: ConcreteFileVersion = ConcreteFileVersion::V2_2;
/// Rows per batch for [`LanceFileReader::read_all`] and [`LanceFileReader::take`].
const DEFAULT_BATCH_ROWS: u32 = 65_536;
/// Size of the fixed Lance v2 footer; no valid file is shorter.
const LANCE_FOOTER_LEN: u64 = 40;
/// Batches decoded ahead of the consumer.
const BATCH_READAHEAD: u32 = 4;

/// Where a reader keeps the file's metadata (footer, column and page metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetadataCaching {
    /// The store's shared Lance cache.
    Store,
    /// Nowhere: the reader holds what it needs and drops it with itself.
    None,
}

/// A zero-capacity Lance cache shared by uncached readers (a fresh one per
/// reader would build a cache structure per file for nothing).
static NO_METADATA_CACHE: LazyLock<LanceCache> = LazyLock::new(LanceCache::no_cache);

/// Largest file [`LanceFileReader::open_prefetched`] fetches whole.
pub const PREFETCH_LIMIT_BYTES: u64 = 4 << 20;
/// Block size of the in-memory store behind a prefetched file: reads there
/// cost nothing, so coalesce generously.
const PREFETCH_BLOCK_SIZE: usize = 64 << 10;
/// I/O parallelism Lance assumes for a prefetched file.
const PREFETCH_IO_PARALLELISM: usize = 8;
/// URL of the in-memory store behind a prefetched file (a memory scheme, so
/// Lance reads through the store rather than the local filesystem).
const PREFETCH_STORE_URL: &str = "memory:///";

/// What a finished Lance file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanceFileSummary {
    /// Rows written.
    pub num_rows: u64,
    /// File size in bytes.
    pub size_bytes: u64,
    /// Block checksums of the file's bytes, taken as they were written.
    pub checksum: FileChecksum,
}

/// True if an object-store error is somewhere in the source chain of `err`.
fn caused_by_object_store(err: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if e.is::<object_store::Error>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// Maps a Lance error raised while doing `action` on `path`: the one place
/// Lance errors become Refract errors. `undecodable_is_corrupt` marks
/// failures that can only come from the file's bytes (opening a file decodes
/// nothing but its footer and metadata). A missing file is NotFound, a store
/// failure External, damage Corrupt naming the dataset-relative file; Lance's
/// text is cleaned of its source locations ([`refract_core::error::clean_text`]).
pub fn lance_error(
    action: &str,
    path: &RelativePath,
    err: lance_core::Error,
    undecodable_is_corrupt: bool,
) -> Error {
    if err.is_not_found() {
        return Error::not_found(format!("Lance file {path} does not exist"));
    }
    if let Some(damage) = verification_failure(&err) {
        return damage;
    }
    if caused_by_object_store(&err) {
        return Error::external(format!("{action} Lance file {path}"), err);
    }
    let corrupt = matches!(err, lance_core::Error::CorruptFile { .. }) || undecodable_is_corrupt;
    if corrupt {
        Error::corrupt(format!("Lance file {path}"), err.to_string())
    } else {
        Error::external(format!("{action} Lance file {path}"), err)
    }
}

/// Refuses to overwrite: data and index paths are immutable (Lance caches
/// metadata by path). An existing file is InvalidInput.
pub(crate) async fn ensure_absent(store: &DatasetStore, path: &RelativePath) -> Result<()> {
    match store.head(path).await {
        Ok(_) => Err(Error::invalid_input(format!(
            "Lance file {path} already exists; file paths must be unique"
        ))),
        Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// lance-io panics on an empty file and cannot decode anything shorter than
/// its fixed-size footer: such a file is Corrupt before Lance sees it.
pub(crate) fn check_footer_fits(path: &RelativePath, size: u64) -> Result<()> {
    if size < LANCE_FOOTER_LEN {
        return Err(Error::corrupt(
            format!("Lance file {path}"),
            format!("{size} bytes is shorter than the {LANCE_FOOTER_LEN}-byte footer"),
        ));
    }
    Ok(())
}

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
    /// Starts a file at `path` with `schema`. The path must not exist yet (data
    /// paths are immutable: Lance caches metadata by path).
    pub async fn create(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
    ) -> Result<Self> {
        Self::create_with(store, path, schema, FileWriterOptions::default()).await
    }

    /// Like [`Self::create`], for writers fed with batches they may keep: the
    /// arrays of each batch are held by reference until their page is written
    /// instead of being copied first. Use it when batches own their buffers
    /// and are dropped after writing (compaction outputs), so keeping them
    /// costs no more memory than the copy would.
    pub async fn create_keeping_batches(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
    ) -> Result<Self> {
        let options = FileWriterOptions {
            keep_original_array: Some(true),
            ..FileWriterOptions::default()
        };
        Self::create_with(store, path, schema, options).await
    }

    /// Like [`Self::create_keeping_batches`], buffering about `page_bytes`
    /// of data per column before a page is encoded and written (Lance's
    /// default is 8 MiB per column). For one-pass rewrites of index files
    /// (remaps, [`STREAMING_PAGE_BYTES`]) whose memory should not follow
    /// Lance's page buffers; smaller pages cost a little more page metadata.
    /// Zero is InvalidInput.
    pub async fn create_streaming(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        page_bytes: u64,
    ) -> Result<Self> {
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
        Self::create_into(store, path, schema, options, sink).await
    }

    /// Like [`Self::create`], writing every batch as its own page with
    /// (almost) nothing buffered between batches: for files whose readers
    /// fetch whole batches by page (row maps, one page per label block).
    pub async fn create_page_per_batch(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
    ) -> Result<Self> {
        let options = FileWriterOptions {
            data_cache_bytes: Some(1),
            ..FileWriterOptions::default()
        };
        Self::create_with(store, path, schema, options).await
    }

    async fn create_with(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        options: FileWriterOptions,
    ) -> Result<Self> {
        Self::create_into(store, path, schema, options, Sink::Lance).await
    }

    async fn create_into(
        store: &DatasetStore,
        path: &RelativePath,
        schema: SchemaRef,
        options: FileWriterOptions,
        sink: Sink,
    ) -> Result<Self> {
        ensure_absent(store, path).await?;
        let lance_schema = lance_core::datatypes::Schema::try_from(schema.as_ref())
            .map_err(|e| Error::invalid_input(format!("schema of Lance file {path}: {e}")))?;
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
            versions::create_writer(FILE_VERSION, Box::new(object_writer), lance_schema, options)
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

    /// Appends a batch; a schema mismatch is InvalidInput.
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
    pub async fn finish(mut self) -> Result<LanceFileSummary> {
        for (position, bytes) in std::mem::take(&mut self.pending_global_buffers)
            .into_iter()
            .enumerate()
        {
            let index = self
                .inner
                .add_global_buffer(bytes)
                .await
                .map_err(|e| lance_error("writing a global buffer of", &self.path, e, false))?;
            // Indices were promised at queue time; refuse to write a file that breaks them.
            if usize::try_from(index).ok() != Some(position + 1) {
                self.inner.abort().await;
                return Err(Error::corrupt(
                    format!("Lance file {}", self.path),
                    format!("global buffer {} was stored at index {index}", position + 1),
                ));
            }
        }
        let summary = self
            .inner
            .finish()
            .await
            .map_err(|e| lance_error("finishing", &self.path, e, false))?;
        let summary = written_summary(
            &self.path,
            summary.num_rows,
            summary.size_bytes,
            &self.checksum,
        )?;
        self.store
            .record_written(&self.path, summary.size_bytes, summary.checksum.clone());
        Ok(summary)
    }

    /// Abandons the file; nothing becomes visible.
    pub async fn abort(mut self) {
        self.inner.abort().await;
    }
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
    })
}

/// After a failed open with a caller-supplied size: a file whose real size differs
/// (truncated or replaced) is Corrupt; otherwise the original error stands.
async fn explain_size_mismatch(
    store: &DatasetStore,
    path: &RelativePath,
    expected: u64,
    context: String,
    source: refract_core::error::BoxedError,
) -> Error {
    match store.head(path).await {
        Ok(actual) if actual != expected => Error::corrupt(
            format!("Lance file {path}"),
            format!("file is {actual} bytes but {expected} bytes were expected"),
        ),
        Err(not_found @ Error::NotFound { .. }) => not_found,
        _ => Error::External { context, source },
    }
}

/// Runs [`open_reader`] in its own task so a panic inside lance on crafted
/// bytes surfaces as a Corrupt error instead of unwinding through the caller.
async fn open_isolated(
    lance_store: Arc<LanceObjectStore>,
    path: &RelativePath,
    size: u64,
    cache: LanceCache,
    read_buffer_bytes: u64,
) -> Result<LanceFileReader> {
    let task = tokio::spawn(open_reader(
        lance_store,
        path.clone(),
        size,
        cache,
        read_buffer_bytes,
    ));
    match task.await {
        Ok(result) => result,
        Err(join) if join.is_panic() => Err(Error::corrupt(
            format!("Lance file {path}"),
            "the Lance decoder panicked while opening the file",
        )),
        Err(join) => Err(Error::external(format!("opening Lance file {path}"), join)),
    }
}

/// Opens a reader on a file of `size` bytes (size already validated) in
/// `lance_store`, keeping its metadata in `cache`, with `read_buffer_bytes`
/// of I/O in flight at most.
async fn open_reader(
    lance_store: Arc<LanceObjectStore>,
    path: RelativePath,
    size: u64,
    cache: LanceCache,
    read_buffer_bytes: u64,
) -> Result<LanceFileReader> {
    let scheduler =
        ScanScheduler::new(lance_store.clone(), SchedulerConfig::new(read_buffer_bytes));
    let file = scheduler
        .open_file(&path.to_object_path(), &CachedFileSize::new(size))
        .await
        .map_err(|e| lance_error("opening", &path, e, false))?;
    let reader = FileReader::try_open(
        file,
        None,
        Arc::<DecoderPlugins>::default(),
        &cache,
        FileReaderOptions::default(),
    )
    .await
    .map_err(|e| lance_error("opening", &path, e, true))?;
    let schema = Arc::new(ArrowSchema::from(reader.schema().as_ref()));
    Ok(LanceFileReader {
        inner: Arc::new(ReaderInner {
            reader,
            schema,
            path,
        }),
    })
}

/// Checks that `batch` has exactly the columns of `schema`, with compatible types
/// and no nulls in non-nullable columns.
fn check_batch_matches(
    schema: &ArrowSchema,
    batch: &RecordBatch,
    path: &RelativePath,
) -> Result<()> {
    let batch_schema = batch.schema();
    let mismatch = |detail: String| {
        Error::invalid_input(format!(
            "batch does not match the schema of Lance file {path}: {detail}"
        ))
    };
    if batch_schema.fields().len() != schema.fields().len() {
        return Err(mismatch(format!(
            "{} columns, expected {}",
            batch_schema.fields().len(),
            schema.fields().len()
        )));
    }
    for ((expected, actual), column) in schema
        .fields()
        .iter()
        .zip(batch_schema.fields().iter())
        .zip(batch.columns())
    {
        if expected.name() != actual.name() {
            return Err(mismatch(format!(
                "column {:?} where {:?} was expected",
                actual.name(),
                expected.name()
            )));
        }
        if !expected.data_type().equals_datatype(actual.data_type()) {
            return Err(mismatch(format!(
                "column {:?} has type {}, expected {}",
                actual.name(),
                actual.data_type(),
                expected.data_type()
            )));
        }
        if !expected.is_nullable() && column.null_count() > 0 {
            return Err(mismatch(format!(
                "column {:?} is not nullable but has {} nulls",
                actual.name(),
                column.null_count()
            )));
        }
    }
    Ok(())
}

struct ReaderInner {
    reader: FileReader,
    schema: SchemaRef,
    path: RelativePath,
}

/// Reads one Lance file. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct LanceFileReader {
    inner: Arc<ReaderInner>,
}

impl std::fmt::Debug for LanceFileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanceFileReader")
            .field("path", &self.inner.path)
            .field("num_rows", &self.num_rows())
            .finish()
    }
}

impl LanceFileReader {
    /// Opens the file at `path`; missing → NotFound, undecodable → Corrupt.
    /// `known_size` (from the manifest) saves a HEAD request; with the
    /// `checksum` the metadata referencing the file recorded, every read
    /// verifies the blocks it touches (a mismatch is Corrupt naming the
    /// block). The file's
    /// metadata is cached in the store's Lance cache for later opens.
    pub async fn open(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
        checksum: Option<&FileChecksum>,
    ) -> Result<Self> {
        Self::open_with(
            store,
            path,
            known_size,
            checksum,
            MetadataCaching::Store,
            READ_BUFFER_BYTES,
        )
        .await
    }

    /// Like [`Self::open`], but nothing about the file is kept in the store's
    /// Lance cache: for one-pass reads of files that are about to be replaced
    /// (compaction), where caching thousands of small files' metadata only
    /// evicts useful entries and leaves long-lived allocations behind.
    pub async fn open_uncached(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
        checksum: Option<&FileChecksum>,
    ) -> Result<Self> {
        Self::open_with(
            store,
            path,
            known_size,
            checksum,
            MetadataCaching::None,
            READ_BUFFER_BYTES,
        )
        .await
    }

    /// Like [`Self::open_uncached`], with at most `read_buffer_bytes` of I/O
    /// in flight instead of [`READ_BUFFER_BYTES`]: for one-pass streaming
    /// reads whose consumer works through small windows (index remaps,
    /// [`STREAMING_READ_BUFFER_BYTES`]), so read-ahead does not hold far more
    /// of the file than is being rewritten. The budget is a back-pressure
    /// limit, not a cap on one request: a single page larger than it is
    /// still read. Zero is InvalidInput.
    pub async fn open_streaming(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
        checksum: Option<&FileChecksum>,
        read_buffer_bytes: u64,
    ) -> Result<Self> {
        if read_buffer_bytes == 0 {
            return Err(Error::invalid_input(format!(
                "read buffer of Lance file {path} must be at least one byte"
            )));
        }
        Self::open_with(
            store,
            path,
            known_size,
            checksum,
            MetadataCaching::None,
            read_buffer_bytes,
        )
        .await
    }

    async fn open_with(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
        checksum: Option<&FileChecksum>,
        caching: MetadataCaching,
        read_buffer_bytes: u64,
    ) -> Result<Self> {
        let size = match known_size {
            Some(size) => size,
            None => store.head(path).await?,
        };
        check_footer_fits(path, size)?;
        let cache = match caching {
            MetadataCaching::Store => store.lance_cache().clone(),
            MetadataCaching::None => NO_METADATA_CACHE.clone(),
        };
        let lance_store = match checksum {
            Some(checksum) => {
                checksum.check_size(&format!("Lance file {path}"), size)?;
                let file = RecordedFile {
                    path: path.clone(),
                    size_bytes: size,
                    checksum: checksum.clone(),
                };
                store.verifying(&[file]).lance_store().clone()
            }
            None => store.lance_store().clone(),
        };
        let result = open_isolated(lance_store, path, size, cache, read_buffer_bytes).await;
        match (result, known_size) {
            (Err(Error::External { context, source }), Some(expected)) => {
                Err(explain_size_mismatch(store, path, expected, context, source).await)
            }
            (result, _) => result,
        }
    }

    /// Fetches the whole file in one request and opens a reader on the bytes in
    /// memory; nothing is cached. For one-pass reads of small files (compaction
    /// sources), where Lance's ranged reads would cost several requests per
    /// file. `size` is the size the manifest records: a file of another size is
    /// Corrupt; a size over [`PREFETCH_LIMIT_BYTES`] is InvalidInput.
    pub async fn open_prefetched(
        store: &DatasetStore,
        path: &RelativePath,
        size: u64,
        checksum: Option<&FileChecksum>,
    ) -> Result<Self> {
        if size > PREFETCH_LIMIT_BYTES {
            return Err(Error::invalid_input(format!(
                "Lance file {path} is {size} bytes; only files up to {PREFETCH_LIMIT_BYTES} bytes are fetched whole"
            )));
        }
        check_footer_fits(path, size)?;
        let bytes = store.get(path).await?;
        if bytes.len() as u64 != size {
            return Err(Error::corrupt(
                format!("Lance file {path}"),
                format!(
                    "file is {} bytes but {size} bytes were expected",
                    bytes.len()
                ),
            ));
        }
        if let Some(checksum) = checksum {
            checksum.verify_whole(&format!("Lance file {path}"), &bytes)?;
        }
        let memory = InMemory::new();
        memory
            .put(&path.to_object_path(), PutPayload::from(bytes))
            .await
            .map_err(|e| Error::external(format!("buffering Lance file {path}"), e))?;
        let url = Url::parse(PREFETCH_STORE_URL)
            .map_err(|e| Error::external("parsing the in-memory store URL", e))?;
        let lance_store = LanceObjectStore::new(
            Arc::new(memory),
            url,
            Some(PREFETCH_BLOCK_SIZE),
            None,
            false,
            false,
            PREFETCH_IO_PARALLELISM,
            0,
            None,
        );
        open_isolated(
            Arc::new(lance_store),
            path,
            size,
            NO_METADATA_CACHE.clone(),
            READ_BUFFER_BYTES,
        )
        .await
    }

    /// The path this reader was opened on.
    pub fn path(&self) -> &RelativePath {
        &self.inner.path
    }

    /// Rows in the file.
    pub fn num_rows(&self) -> u64 {
        self.inner.reader.num_rows()
    }

    /// The Arrow schema of the file, including schema metadata.
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }

    /// The Lance projection for `columns` (all columns when `None`) and its Arrow schema.
    fn projection(&self, columns: Option<&[&str]>) -> Result<(ReaderProjection, SchemaRef)> {
        let reader = &self.inner.reader;
        let Some(columns) = columns else {
            let projection =
                versions::reader_projection_from_whole_schema(reader.schema(), reader.version());
            return Ok((projection, self.schema()));
        };
        for name in columns {
            if self.inner.schema.field_with_name(name).is_err() {
                return Err(Error::invalid_input(format!(
                    "column {name:?} does not exist in Lance file {}",
                    self.inner.path
                )));
            }
        }
        let projection = versions::reader_projection_from_column_names(
            reader.version(),
            reader.schema(),
            columns,
        )
        .map_err(|e| {
            Error::invalid_input(format!(
                "projection {columns:?} of Lance file {}: {e}",
                self.inner.path
            ))
        })?;
        let schema = Arc::new(ArrowSchema::from(projection.schema.as_ref()));
        Ok((projection, schema))
    }

    async fn stream(
        &self,
        params: ReadBatchParams,
        projection: ReaderProjection,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        // Decoding runs in a task of its own: Lance can panic on damaged bytes
        // of a file written before checksums, and a panic there must surface
        // as one Corrupt error naming the file, not unwind through the caller.
        let inner = self.inner.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(BATCH_READAHEAD as usize);
        let task = AbortOnDrop::spawn(async move {
            let batches = inner
                .reader
                .read_stream_projected(
                    params,
                    batch_size,
                    BATCH_READAHEAD,
                    projection,
                    FilterExpression::no_filter(),
                )
                .await;
            let mut batches = match batches {
                Ok(batches) => batches,
                Err(e) => {
                    // A dropped receiver wants nothing more.
                    let _ = sender
                        .send(Err(lance_error("reading", &inner.path, e, false)))
                        .await;
                    return;
                }
            };
            while let Some(batch) = batches.next().await {
                let batch = batch.map_err(|e| lance_error("reading", &inner.path, e, false));
                let failed = batch.is_err();
                if sender.send(batch).await.is_err() || failed {
                    return;
                }
            }
        });
        let path = self.inner.path.clone();
        Ok(stream::unfold(Some((receiver, task)), move |state| {
            let path = path.clone();
            async move {
                let (mut receiver, task) = state?;
                if let Some(batch) = receiver.recv().await {
                    return Some((batch, Some((receiver, task))));
                }
                match task.wait().await {
                    Ok(()) => None,
                    Err(join) if join.is_panic() => Some((
                        Err(Error::corrupt(
                            format!("Lance file {path}"),
                            "the Lance decoder panicked while reading the file",
                        )),
                        None,
                    )),
                    Err(join) => Some((
                        Err(Error::external(format!("reading Lance file {path}"), join)),
                        None,
                    )),
                }
            }
        })
        .boxed())
    }

    /// Streams `rows` in batches of at most `batch_size` rows.
    pub async fn read_range(
        &self,
        rows: Range<u64>,
        projection: Option<&[&str]>,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        if rows.start > rows.end || rows.end > self.num_rows() {
            return Err(Error::invalid_input(format!(
                "row range {rows:?} is outside Lance file {} of {} rows",
                self.inner.path,
                self.num_rows()
            )));
        }
        if batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be at least 1"));
        }
        let (projection, _) = self.projection(projection)?;
        if rows.is_empty() {
            return Ok(stream::empty().boxed());
        }
        let range = usize::try_from(rows.start)
            .and_then(|start| usize::try_from(rows.end).map(|end| start..end))
            .map_err(|_| Error::invalid_input(format!("row range {rows:?} exceeds usize")))?;
        self.stream(ReadBatchParams::Range(range), projection, batch_size)
            .await
    }

    /// Streams the rows of `ranges` (ascending, disjoint, non-empty) one after
    /// the other, in batches of at most `batch_size` rows that may span ranges:
    /// one read whose I/O the decoder schedules together.
    pub async fn read_ranges(
        &self,
        ranges: &[Range<u64>],
        projection: Option<&[&str]>,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let mut previous_end = 0u64;
        for range in ranges {
            if range.start >= range.end || range.start < previous_end || range.end > self.num_rows()
            {
                return Err(Error::invalid_input(format!(
                    "row ranges {ranges:?} are not ascending, disjoint and non-empty inside Lance file {} of {} rows",
                    self.inner.path,
                    self.num_rows()
                )));
            }
            previous_end = range.end;
        }
        if batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be at least 1"));
        }
        let (projection, _) = self.projection(projection)?;
        if ranges.is_empty() {
            return Ok(stream::empty().boxed());
        }
        self.stream(
            ReadBatchParams::Ranges(ranges.into()),
            projection,
            batch_size,
        )
        .await
    }

    /// Reads the whole file.
    pub async fn read_all(&self, projection: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
        self.read_range(0..self.num_rows(), projection, DEFAULT_BATCH_ROWS)
            .await?
            .try_collect()
            .await
    }

    /// Reads the rows at `offsets` — any order, duplicates allowed — and returns
    /// them in caller order. Lance needs strictly increasing offsets, so they are
    /// sorted and deduplicated for the read and put back in order afterwards.
    pub async fn take(&self, offsets: &[u32], projection: Option<&[&str]>) -> Result<RecordBatch> {
        let (projection, schema) = self.projection(projection)?;
        if let Some(bad) = offsets
            .iter()
            .find(|offset| u64::from(**offset) >= self.num_rows())
        {
            return Err(Error::invalid_input(format!(
                "row offset {bad} is outside Lance file {} of {} rows",
                self.inner.path,
                self.num_rows()
            )));
        }
        if offsets.is_empty() {
            return Ok(RecordBatch::new_empty(schema));
        }
        let mut unique = offsets.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let already_ordered = unique.len() == offsets.len() && unique.as_slice() == offsets;
        let positions = if already_ordered {
            None
        } else {
            Some(positions_in(&unique, offsets)?)
        };
        let batches: Vec<RecordBatch> = self
            .stream(
                ReadBatchParams::Indices(UInt32Array::from(unique)),
                projection,
                DEFAULT_BATCH_ROWS,
            )
            .await?
            .try_collect()
            .await?;
        let sorted = arrow_select::concat::concat_batches(&schema, &batches).map_err(|e| {
            Error::external(format!("assembling a take from {}", self.inner.path), e)
        })?;
        match positions {
            None => Ok(sorted),
            Some(positions) => {
                arrow_select::take::take_record_batch(&sorted, &positions).map_err(|e| {
                    Error::external(format!("reordering a take from {}", self.inner.path), e)
                })
            }
        }
    }

    /// Reads a global buffer written with [`LanceFileWriter::add_global_buffer`].
    pub async fn read_global_buffer(&self, index: u32) -> Result<Bytes> {
        let available = self.inner.reader.metadata().file_buffers.len();
        if usize::try_from(index).map_or(true, |i| i >= available) {
            return Err(Error::invalid_input(format!(
                "global buffer {index} does not exist in Lance file {} ({available} buffers)",
                self.inner.path
            )));
        }
        self.inner
            .reader
            .read_global_buffer(index)
            .await
            .map_err(|e| lance_error("reading a global buffer of", &self.inner.path, e, false))
    }
}

/// For each caller offset, its position in `unique` (sorted, deduplicated, and
/// containing every offset).
fn positions_in(unique: &[u32], offsets: &[u32]) -> Result<UInt32Array> {
    offsets
        .iter()
        .map(|offset| {
            let position = unique.binary_search(offset).map_err(|_| {
                Error::invalid_input(format!("row offset {offset} lost while sorting a take"))
            })?;
            // `unique` came from a `&[u32]`, so its length fits in u32.
            u32::try_from(position)
                .map_err(|_| Error::invalid_input("take of more than u32::MAX rows"))
        })
        .collect::<Result<Vec<u32>>>()
        .map(UInt32Array::from)
}

#[cfg(test)]
mod prefetch_tests {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field};
    use bytes::Bytes;
    use rstest::rstest;

    use super::*;

    async fn memory_store() -> DatasetStore {
        let uri = format!("memory://lance-prefetch-{}", uuid::Uuid::new_v4());
        DatasetStore::open(&uri, true).await.unwrap()
    }

    fn path(raw: &str) -> RelativePath {
        RelativePath::parse(raw).unwrap()
    }

    fn batch(start: i64, n: usize) -> RecordBatch {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let ids: Vec<i64> = (start..start + n as i64).collect();
        let names: StringArray = ids
            .iter()
            .map(|i| (i % 3 != 0).then(|| format!("name-{i}")))
            .collect();
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(ids)), Arc::new(names)],
        )
        .unwrap()
    }

    /// Writes batches of 100 rows; `keep` selects the writer that keeps its input.
    async fn write(store: &DatasetStore, at: &RelativePath, rows: usize, keep: bool) -> u64 {
        let schema = batch(0, 0).schema();
        let mut writer = if keep {
            LanceFileWriter::create_keeping_batches(store, at, schema).await
        } else {
            LanceFileWriter::create(store, at, schema).await
        }
        .unwrap();
        for start in (0..rows).step_by(100) {
            writer
                .write(&batch(start as i64, 100.min(rows - start)))
                .await
                .unwrap();
        }
        writer.finish().await.unwrap().size_bytes
    }

    #[rstest]
    #[case::copying_writer(false)]
    #[case::keeping_writer(true)]
    #[tokio::test]
    async fn prefetched_and_uncached_readers_read_what_was_written(#[case] keep: bool) {
        let store = memory_store().await;
        let at = path("data/a.lance");
        let size = write(&store, &at, 1_050, keep).await;
        let expected = batch(0, 1_050);
        for reader in [
            LanceFileReader::open_prefetched(&store, &at, size, None)
                .await
                .unwrap(),
            LanceFileReader::open_uncached(&store, &at, Some(size), None)
                .await
                .unwrap(),
            LanceFileReader::open(&store, &at, Some(size), None)
                .await
                .unwrap(),
        ] {
            assert_eq!(reader.num_rows(), 1_050);
            let batches = reader.read_all(None).await.unwrap();
            let read = arrow_select::concat::concat_batches(&reader.schema(), &batches).unwrap();
            assert_eq!(read.columns(), expected.columns());
            let taken = reader.take(&[7, 3, 1_049], Some(&["id"])).await.unwrap();
            let ids = taken
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            assert_eq!(ids.values().to_vec(), vec![7, 3, 1_049]);
        }
    }

    #[tokio::test]
    async fn prefetching_costs_one_whole_get() {
        let store = memory_store().await;
        let at = path("data/a.lance");
        let size = write(&store, &at, 500, false).await;
        store.reset_stats();
        let reader = LanceFileReader::open_prefetched(&store, &at, size, None)
            .await
            .unwrap();
        reader.read_all(None).await.unwrap();
        let stats = store.stats();
        assert_eq!(
            (stats.gets, stats.get_ranges, stats.heads, stats.bytes_read),
            (1, 0, 0, size)
        );
    }

    #[tokio::test]
    async fn prefetching_refuses_bad_sizes_and_missing_files() {
        let store = memory_store().await;
        let at = path("data/a.lance");
        let size = write(&store, &at, 200, false).await;
        let wrong = LanceFileReader::open_prefetched(&store, &at, size + 1, None).await;
        assert!(matches!(wrong, Err(Error::Corrupt { .. })), "{wrong:?}");
        let short = LanceFileReader::open_prefetched(&store, &at, 10, None).await;
        assert!(matches!(short, Err(Error::Corrupt { .. })), "{short:?}");
        let huge =
            LanceFileReader::open_prefetched(&store, &at, PREFETCH_LIMIT_BYTES + 1, None).await;
        assert!(matches!(huge, Err(Error::InvalidInput { .. })), "{huge:?}");
        let missing =
            LanceFileReader::open_prefetched(&store, &path("data/b.lance"), size, None).await;
        assert!(
            matches!(missing, Err(Error::NotFound { .. })),
            "{missing:?}"
        );
        // Bytes that are not a Lance file decode to Corrupt, not a panic.
        let junk = path("data/junk.lance");
        store
            .put(&junk, Bytes::from(vec![7u8; 4_096]))
            .await
            .unwrap();
        let garbage = LanceFileReader::open_prefetched(&store, &junk, 4_096, None).await;
        assert!(matches!(garbage, Err(Error::Corrupt { .. })), "{garbage:?}");
    }
}
