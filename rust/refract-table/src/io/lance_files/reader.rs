//! Reading Lance files: whole, ranged, streamed and prefetched.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt, TryStreamExt};
use lance_core::cache::LanceCache;
use lance_encoding::decoder::{DecoderPlugins, FilterExpression};
use lance_file::reader::{CachedFileMetadata, FileReader, FileReaderOptions, ReaderProjection};
use lance_file::versions;
use lance_file::LanceEncodingsIo;
use lance_io::object_store::ObjectStore as LanceObjectStore;
use lance_io::scheduler::{FileScheduler, ScanScheduler, SchedulerConfig};

use super::*;

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

/// Runs [`open_reader`] so that a panic inside lance on crafted bytes
/// surfaces as a Corrupt error instead of unwinding through the caller.
/// It runs in the caller's task: a task of its own cost a hop per file.
async fn open_isolated(
    source: ReaderSource,
    path: &RelativePath,
    size: u64,
    cache: LanceCache,
) -> Result<LanceFileReader> {
    match AssertUnwindSafe(open_reader(source, path.clone(), size, cache))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(_panic) => Err(decoder_panicked("opening", path)),
    }
}

/// Every read is checked before Lance sees it (rows inside the file, known
/// columns, a non-zero batch size), so when Lance fails to decode, other
/// than for the store, the file's bytes are at fault.
const READ_FAILURE_IS_DAMAGE: bool = true;

/// Where a reader's bytes come from.
enum ReaderSource {
    /// Requests to a store, at most `read_buffer_bytes` in flight.
    Store {
        lance_store: Arc<LanceObjectStore>,
        read_buffer_bytes: u64,
    },
    /// The whole file, already in memory (and verified).
    Memory(Bytes),
}

/// The decoded footer of a Lance file of a given size, in a [`LanceCache`]:
/// the engine never rewrites a file in place (every path holds a fresh
/// uuid), so a later open of the same path and size skips the footer read.
/// The size is part of the key so a file replaced by one of another size
/// (truncated, say) is read again and refused.
struct FileMetadataKey(String);

impl FileMetadataKey {
    fn new(path: &RelativePath, size: u64) -> Self {
        Self(format!("{path}#{size}"))
    }
}

impl lance_core::cache::CacheKey for FileMetadataKey {
    type ValueType = CachedFileMetadata;

    fn key(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.0)
    }

    fn type_name() -> &'static str {
        "refract::CachedFileMetadata"
    }
}

/// Opens a reader on a file of `size` bytes (size already validated) from
/// `source`, keeping its metadata in `cache` (the footer too, so a warm open
/// costs no request).
async fn open_reader(
    source: ReaderSource,
    path: RelativePath,
    size: u64,
    cache: LanceCache,
) -> Result<LanceFileReader> {
    let in_memory = matches!(source, ReaderSource::Memory(_));
    let file = match source {
        ReaderSource::Store {
            lance_store,
            read_buffer_bytes,
        } => ScanScheduler::new(lance_store, SchedulerConfig::new(read_buffer_bytes))
            .open_file(&path.to_object_path(), &CachedFileSize::new(size))
            .await
            .map_err(|e| lance_error("opening", &path, e, false))?,
        ReaderSource::Memory(bytes) => {
            in_memory::scheduler_over(path.to_object_path(), bytes, READ_BUFFER_BYTES)
        }
    };
    let key = FileMetadataKey::new(&path, size);
    let cached = cache.get_with_key(&key).await;
    let warm = cached.is_some();
    let metadata = match cached {
        Some(metadata) => metadata,
        None => {
            let metadata = Arc::new(
                FileReader::read_all_metadata(&file)
                    .await
                    .map_err(|e| lance_error("opening", &path, e, true))?,
            );
            cache.insert_with_key(&key, metadata.clone()).await;
            metadata
        }
    };
    let options = FileReaderOptions::default();
    let raw = file.clone();
    let io = Arc::new(LanceEncodingsIo::new(file).with_read_chunk_size(options.read_chunk_size));
    let reader = FileReader::try_open_with_file_metadata(
        io,
        path.to_object_path(),
        None,
        Arc::<DecoderPlugins>::default(),
        metadata,
        &cache,
        options,
    )
    .await
    .map_err(|e| lance_error("opening", &path, e, true))?;
    let schema = Arc::new(ArrowSchema::from(reader.schema().as_ref()));
    Ok(LanceFileReader {
        inner: Arc::new(ReaderInner {
            reader,
            raw,
            schema,
            path,
            size,
            warm,
            in_memory,
        }),
    })
}

/// Checks that `batch` has exactly the columns of `schema`, with compatible types
/// and no nulls in non-nullable columns.
pub(super) fn check_batch_matches(
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
    /// The reader's scheduler, for copying encoded pages without decoding
    /// them (Lance's decoding I/O would split and reassemble big pages).
    raw: FileScheduler,
    schema: SchemaRef,
    path: RelativePath,
    /// The file's bytes.
    size: u64,
    /// The file's metadata came from the store's cache.
    warm: bool,
    /// The file's bytes are in memory: reads decode in the caller's task.
    in_memory: bool,
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
    /// Opens the file at `path` as `options` say (see [`ReadOptions`] and
    /// [`ReadMode`]).
    ///
    /// # Errors
    /// NotFound for a missing file; Corrupt for one Lance cannot decode, of
    /// another size than `known_size`, or failing its checksum; InvalidInput
    /// for a zero streaming buffer, or a whole-file read without a known size
    /// or over [`PREFETCH_LIMIT_BYTES`]; External for store failures.
    pub async fn open(
        store: &DatasetStore,
        path: &RelativePath,
        options: ReadOptions<'_>,
    ) -> Result<Self> {
        let ReadOptions {
            known_size,
            checksum,
            mode,
        } = options;
        let (caching, read_buffer_bytes) = match mode {
            ReadMode::Cached => (MetadataCaching::Store, READ_BUFFER_BYTES),
            ReadMode::OnePass => (MetadataCaching::None, READ_BUFFER_BYTES),
            ReadMode::Streaming { read_buffer_bytes } => {
                if read_buffer_bytes == 0 {
                    return Err(Error::invalid_input(format!(
                        "read buffer of Lance file {path} must be at least one byte"
                    )));
                }
                (MetadataCaching::None, read_buffer_bytes)
            }
            ReadMode::WholeFile => {
                let size = known_size.ok_or_else(|| {
                    Error::invalid_input(format!(
                        "Lance file {path} is fetched whole only with its size known"
                    ))
                })?;
                return Self::open_whole(store, path, size, checksum).await;
            }
        };
        Self::open_with(
            store,
            path,
            known_size,
            checksum,
            caching,
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
        let source = ReaderSource::Store {
            lance_store,
            read_buffer_bytes,
        };
        let result = open_isolated(source, path, size, cache).await;
        match (result, known_size) {
            (Err(Error::External { context, source }), Some(expected)) => {
                Err(explain_size_mismatch(store, path, expected, context, source).await)
            }
            (result, _) => result,
        }
    }

    /// [`ReadMode::WholeFile`]: one GET, then a reader on the bytes in memory.
    async fn open_whole(
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
        open_isolated(
            ReaderSource::Memory(bytes),
            path,
            size,
            NO_METADATA_CACHE.clone(),
        )
        .await
    }

    /// The path this reader was opened on.
    pub fn path(&self) -> &RelativePath {
        &self.inner.path
    }

    /// True when the file's metadata came from the store's metadata cache:
    /// the file was opened before through this store, so its footer and
    /// most likely its page metadata cost no request now.
    pub fn opened_warm(&self) -> bool {
        self.inner.warm
    }

    /// Rows in the file.
    pub fn num_rows(&self) -> u64 {
        self.inner.reader.num_rows()
    }

    /// The Arrow schema of the file, including schema metadata.
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }

    /// The file format version the file was written in (from its footer), so
    /// a rewrite of another writer's file can keep it.
    ///
    /// # Errors
    /// Corrupt when the footer names a version Lance does not know.
    pub fn file_version(&self) -> Result<ConcreteFileVersion> {
        let metadata = self.inner.reader.metadata();
        ConcreteFileVersion::from_footer_numbers(metadata.major_version, metadata.minor_version)
            .map_err(|e| Error::corrupt(format!("Lance file {}", self.inner.path), e.to_string()))
    }

    /// The Lance projection for `columns` (all columns when `None`) and its Arrow schema.
    pub(super) fn projection(
        &self,
        columns: Option<&[&str]>,
    ) -> Result<(ReaderProjection, SchemaRef)> {
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
        if self.inner.in_memory {
            return self.stream_inline(params, projection, batch_size).await;
        }
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
                        .send(Err(lance_error(
                            "reading",
                            &inner.path,
                            e,
                            READ_FAILURE_IS_DAMAGE,
                        )))
                        .await;
                    return;
                }
            };
            while let Some(batch) = batches.next().await {
                let batch = batch
                    .map_err(|e| lance_error("reading", &inner.path, e, READ_FAILURE_IS_DAMAGE));
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
                    Err(join) if join.is_panic() => {
                        Some((Err(decoder_panicked("reading", &path)), None))
                    }
                    Err(join) => Some((
                        Err(Error::external(format!("reading Lance file {path}"), join)),
                        None,
                    )),
                }
            }
        })
        .boxed())
    }

    /// [`Self::stream`] of a file in memory: no I/O to wait for, so the
    /// batches decode in the consumer's task (a panic still becomes one
    /// Corrupt error, and ends the stream).
    async fn stream_inline(
        &self,
        params: ReadBatchParams,
        projection: ReaderProjection,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let path = self.inner.path.clone();
        let opened = AssertUnwindSafe(self.inner.reader.read_stream_projected(
            params,
            batch_size,
            BATCH_READAHEAD,
            projection,
            FilterExpression::no_filter(),
        ))
        .catch_unwind()
        .await;
        let batches = match opened {
            Ok(Ok(batches)) => batches,
            Ok(Err(e)) => return Err(lance_error("reading", &path, e, READ_FAILURE_IS_DAMAGE)),
            Err(_panic) => return Err(decoder_panicked("reading", &path)),
        };
        Ok(AssertUnwindSafe(batches)
            .catch_unwind()
            .map(move |batch| match batch {
                Ok(batch) => {
                    batch.map_err(|e| lance_error("reading", &path, e, READ_FAILURE_IS_DAMAGE))
                }
                Err(_panic) => Err(decoder_panicked("reading", &path)),
            })
            .boxed())
    }

    /// Streams `rows` in batches of at most `batch_size` rows.
    ///
    /// # Errors
    /// InvalidInput for a range outside the file, a zero `batch_size` or an
    /// unknown projected column; reading yields Corrupt, NotFound or External.
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
        self.read_windows(rows, projection, batch_size, READ_WINDOW_BYTES)
            .await
    }

    /// [`Self::read_range`] of a checked, non-empty range, one read per
    /// window of about `window_bytes`.
    pub(super) async fn read_windows(
        &self,
        rows: Range<u64>,
        projection: ReaderProjection,
        batch_size: u32,
        window_bytes: u64,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let window = self.window_rows(batch_size, window_bytes);
        if rows.end - rows.start <= window {
            return self.stream_range(rows, projection, batch_size).await;
        }
        // One read per window, the next scheduled while the one before is
        // drained; batches come out as from one read (windows hold whole batches).
        let reader = self.clone();
        let windows = (rows.start..rows.end)
            .step_by(usize::try_from(window).unwrap_or(usize::MAX))
            .map(move |start| start..(start + window).min(rows.end));
        Ok(stream::iter(windows)
            .map(move |window| {
                let (reader, projection) = (reader.clone(), projection.clone());
                async move { reader.stream_range(window, projection, batch_size).await }
            })
            .buffered(2)
            .try_flatten()
            .boxed())
    }

    /// Rows one read of this file schedules at most: a whole number of
    /// batches of `batch_size` rows holding about `window_bytes` (at least
    /// one batch).
    pub(super) fn window_rows(&self, batch_size: u32, window_bytes: u64) -> u64 {
        let rows = self.num_rows().max(1);
        let bytes_per_row = (self.inner.size / rows).max(1);
        let batch = u64::from(batch_size.max(1));
        (window_bytes / bytes_per_row / batch).max(1) * batch
    }

    pub(super) async fn stream_range(
        &self,
        rows: Range<u64>,
        projection: ReaderProjection,
        batch_size: u32,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let range = usize::try_from(rows.start)
            .and_then(|start| usize::try_from(rows.end).map(|end| start..end))
            .map_err(|_| Error::invalid_input(format!("row range {rows:?} exceeds usize")))?;
        self.stream(ReadBatchParams::Range(range), projection, batch_size)
            .await
    }

    /// Streams the rows of `ranges` (ascending, disjoint, non-empty) one after
    /// the other, in batches of at most `batch_size` rows that may span ranges:
    /// one read whose I/O the decoder schedules together.
    ///
    /// # Errors
    /// InvalidInput for ranges that are not ascending, disjoint, non-empty and
    /// inside the file, a zero `batch_size` or an unknown projected column;
    /// reading yields Corrupt, NotFound or External.
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
    ///
    /// # Errors
    /// InvalidInput for an unknown projected column; Corrupt for damaged pages;
    /// NotFound or External when the file cannot be read.
    pub async fn read_all(&self, projection: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
        self.read_range(0..self.num_rows(), projection, DEFAULT_BATCH_ROWS)
            .await?
            .try_collect()
            .await
    }

    /// Reads the rows at `offsets` — any order, duplicates allowed — and returns
    /// them in caller order. Lance needs strictly increasing offsets, so they are
    /// sorted and deduplicated for the read and put back in order afterwards.
    ///
    /// # Errors
    /// InvalidInput for an offset past the file or an unknown projected column;
    /// Corrupt for damaged pages; NotFound or External when it cannot be read.
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

    /// Global buffers in the file, Lance's schema descriptor (index 0) included.
    pub fn global_buffers(&self) -> u32 {
        // A footer lists at most u32::MAX buffers (their count is a u32 there).
        u32::try_from(self.inner.reader.metadata().file_buffers.len()).unwrap_or(u32::MAX)
    }

    /// Reads a global buffer written with [`LanceFileWriter::add_global_buffer`].
    ///
    /// # Errors
    /// InvalidInput when the file has no buffer `index`; Corrupt, NotFound or
    /// External when it cannot be read.
    pub async fn read_global_buffer(&self, index: u32) -> Result<Bytes> {
        let available = self.global_buffers();
        if index >= available {
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

/// What copying a file's encoded pages needs (see `column_rewrite`).
impl LanceFileReader {
    /// Lance's metadata of the file: its columns' pages and encodings.
    pub(super) fn metadata(&self) -> &Arc<CachedFileMetadata> {
        self.inner.reader.metadata()
    }

    /// Lance's schema of the file (field ids and schema metadata).
    pub(super) fn lance_schema(&self) -> &Arc<lance_core::datatypes::Schema> {
        self.inner.reader.schema()
    }

    /// The bytes of `ranges`, as stored: one `Bytes` per range.
    ///
    /// # Errors
    /// Corrupt when the store returns other lengths than asked for (or the
    /// file fails its checksum); NotFound or External from the store.
    pub(super) async fn read_raw(&self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>> {
        let expected: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
        let data = self
            .inner
            .raw
            .submit_request(ranges, 0)
            .await
            .map_err(|e| lance_error("reading pages of", &self.inner.path, e, false))?;
        let lengths_match = data.len() == expected.len()
            && data
                .iter()
                .zip(&expected)
                .all(|(d, e)| d.len() as u64 == *e);
        if !lengths_match {
            return Err(Error::corrupt(
                format!("Lance file {}", self.inner.path),
                "a page read returned other lengths than its metadata names",
            ));
        }
        Ok(data)
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
