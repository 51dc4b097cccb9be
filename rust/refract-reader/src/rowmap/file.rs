//! The row-map Lance file, read with as few requests as the layout allows.
//!
//! Opening fetches one tail of the file (sized from the expected row and
//! destination counts) that normally holds the counts buffer, the schema and
//! the column metadata; when it does not, one more ranged GET fetches
//! everything that is missing. Lance then decodes the metadata and the counts
//! from memory. Reading labels computes, from the column's page infos, the
//! byte span of every page buffer the rows need, fetches it with one ranged
//! GET and lets Lance decode from those bytes (see [`SpanReader`]).
//!
//! Any page layout reads correctly; files written by `refract_optimize::fri::RowMapWriter`
//! hold one page per block, so a chunk's span is exactly its 32 pages.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, UInt16Array};
use arrow_schema::{DataType, Schema as ArrowSchema};
use bytes::Bytes;
use futures::TryStreamExt;
use lance_core::cache::LanceCache;
use lance_core::deepsize::DeepSizeOf;
use lance_encoding::decoder::{DecoderPlugins, FilterExpression};
use lance_file::reader::{FileReader, FileReaderOptions, ReaderProjection};
use lance_file::{versions, LanceEncodingsIo};
use lance_io::scheduler::{ScanScheduler, SchedulerConfig};
use lance_io::traits::Reader;
use lance_io::ReadBatchParams;
use refract_core::{Error, Result};
use refract_table::io::paths::RelativePath;
use refract_table::io::store::DatasetStore;

use super::span::{Span, SpanReader};
use super::{COUNTS_BUFFER_KEY, LABEL_COLUMN};

/// Size of the fixed Lance v2 footer.
const FOOTER_LEN: u64 = 40;
/// Magic bytes closing a Lance v2 file.
const LANCE_MAGIC: &[u8; 4] = b"LANC";
/// Smallest tail read at open.
pub const MIN_TAIL_BYTES: u64 = 64 << 10;
/// Largest tail read at open; larger metadata costs a second request.
pub const MAX_TAIL_BYTES: u64 = 16 << 20;
/// Bytes the scheduler may have in flight for one row map.
const READ_BUFFER_BYTES: u64 = 64 << 20;
/// Batches decoded ahead of the consumer.
const BATCH_READAHEAD: u32 = 4;

/// One page of the label column: its rows and the byte hull of its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageSpan {
    rows: Range<u64>,
    /// `None` for a page without buffers (e.g. all null).
    bytes: Option<Range<u64>>,
}

/// An opened row-map file and its counts buffer.
pub struct OpenedFile {
    /// The file.
    pub file: RowMapFile,
    /// The counts buffer's bytes (decoded by the caller).
    pub counts: Bytes,
}

/// A row-map Lance file: metadata decoded, labels read one span per call.
pub struct RowMapFile {
    store: DatasetStore,
    path: RelativePath,
    reader: FileReader,
    scheduler: Arc<ScanScheduler>,
    fallback: Arc<dyn Reader>,
    projection: ReaderProjection,
    pages: Vec<PageSpan>,
}

impl std::fmt::Debug for RowMapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowMapFile")
            .field("path", &self.path)
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl RowMapFile {
    /// Opens the row map at `path`: one ranged GET of `tail_hint` bytes (clamped
    /// to [`MIN_TAIL_BYTES`]..=[`MAX_TAIL_BYTES`] and the file size), plus one
    /// more only when the metadata or the counts buffer lies before that tail.
    /// `known_size` saves a HEAD; a wrong size is Corrupt. Checks that the
    /// label column is UInt16 and reads the counts buffer the schema names.
    pub async fn open(
        store: &DatasetStore,
        path: &RelativePath,
        known_size: Option<u64>,
        tail_hint: u64,
    ) -> Result<OpenedFile> {
        let size = match known_size {
            Some(size) => size,
            None => store.head(path).await?,
        };
        if size < FOOTER_LEN {
            return Err(corrupt(
                path,
                format!("{size} bytes is shorter than the {FOOTER_LEN}-byte footer"),
            ));
        }
        let spans = fetch_metadata_spans(store, path, size, tail_hint).await?;
        // Lance may panic on crafted metadata: decode in a task of its own so a
        // panic surfaces as Corrupt instead of unwinding through the caller.
        let task = tokio::spawn(decode_metadata(store.clone(), path.clone(), size, spans));
        match task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => Err(corrupt(
                path,
                "the Lance decoder panicked while opening the file",
            )),
            Err(join) => Err(Error::external(format!("opening row map {path}"), join)),
        }
    }

    /// The file's dataset-relative path.
    pub fn path(&self) -> &RelativePath {
        &self.path
    }

    /// Rows (labels) in the file.
    pub fn num_rows(&self) -> u64 {
        self.reader.num_rows()
    }

    /// Bytes held: the page table and the decoded Lance metadata.
    pub fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.pages.capacity() * std::mem::size_of::<PageSpan>()
            + self.reader.metadata().deep_size_of()
    }

    /// The byte hull of every page buffer holding a row of `rows`; `None`
    /// when those pages have no buffers.
    fn byte_span(&self, rows: &Range<u64>) -> Option<Range<u64>> {
        self.pages
            .iter()
            .filter(|page| page.rows.start < rows.end && rows.start < page.rows.end)
            .filter_map(|page| page.bytes.clone())
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
    }

    /// Reads the labels of `rows` in batches of at most `batch_rows`, with one
    /// ranged GET of the pages they need (none when those pages hold no
    /// buffers).
    pub async fn read_labels(&self, rows: Range<u64>, batch_rows: u32) -> Result<Vec<UInt16Array>> {
        if rows.start >= rows.end || rows.end > self.num_rows() || batch_rows == 0 {
            return Err(Error::invalid_input(format!(
                "row-map rows {rows:?} are not a non-empty range of the {} labels",
                self.num_rows()
            )));
        }
        let spans = match self.byte_span(&rows) {
            Some(span) => vec![self.fetch(span).await?],
            None => Vec::new(),
        };
        let reader = SpanReader::new(spans, self.fallback.clone());
        let io = LanceEncodingsIo::new(self.scheduler.open_reader(Arc::new(reader)));
        let range = usize::try_from(rows.start)
            .and_then(|start| usize::try_from(rows.end).map(|end| start..end))
            .map_err(|_| Error::invalid_input(format!("row range {rows:?} exceeds usize")))?;
        let reader = self.reader.with_scheduler(Arc::new(io));
        let (path, projection) = (self.path.clone(), self.projection.clone());
        // Lance asserts on damaged page metadata (a panic, not an error):
        // decode in a task of its own so the panic surfaces as Corrupt.
        let task = tokio::spawn(async move {
            reader
                .read_stream_projected(
                    ReadBatchParams::Range(range),
                    batch_rows,
                    BATCH_READAHEAD,
                    projection,
                    FilterExpression::no_filter(),
                )
                .await
                .map_err(|e| lance_error("reading", &path, e))?
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| lance_error("reading", &path, e))
        });
        let batches = match task.await {
            Ok(result) => result?,
            Err(join) if join.is_panic() => {
                return Err(corrupt(
                    &self.path,
                    "the Lance decoder panicked while reading labels",
                ))
            }
            Err(join) => {
                return Err(Error::external(
                    format!("reading row map {}", self.path),
                    join,
                ))
            }
        };
        batches
            .iter()
            .map(|batch| {
                batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<UInt16Array>()
                    .cloned()
                    .ok_or_else(|| Error::corrupt("row map", "label column is not UInt16"))
            })
            .collect()
    }

    async fn fetch(&self, range: Range<u64>) -> Result<Span> {
        let bytes = self.store.get_range(&self.path, range.clone()).await?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(corrupt(
                &self.path,
                format!("short read of bytes {range:?}"),
            ));
        }
        Ok(Span {
            start: range.start,
            bytes,
        })
    }
}

/// Fetches the tail and, when needed, the one span before it that holds the
/// rest of the metadata and the global buffers.
async fn fetch_metadata_spans(
    store: &DatasetStore,
    path: &RelativePath,
    size: u64,
    tail_hint: u64,
) -> Result<Vec<Span>> {
    let tail_len = tail_hint.clamp(MIN_TAIL_BYTES, MAX_TAIL_BYTES).min(size);
    let tail_start = size - tail_len;
    let tail = read_exact(store, path, tail_start..size, size).await?;
    let mut spans = Vec::with_capacity(2);
    if let Some(missing) = missing_before_tail(&tail, tail_start, size) {
        spans.push(read_exact(store, path, missing, size).await?);
    }
    spans.push(tail);
    Ok(spans)
}

/// Reads `range` of a file expected to be `size` bytes; a read failing
/// because the file has another size is Corrupt.
async fn read_exact(
    store: &DatasetStore,
    path: &RelativePath,
    range: Range<u64>,
    size: u64,
) -> Result<Span> {
    match store.get_range(path, range.clone()).await {
        Ok(bytes) if bytes.len() as u64 == range.end - range.start => Ok(Span {
            start: range.start,
            bytes,
        }),
        Ok(_) => Err(corrupt(path, format!("file is shorter than {size} bytes"))),
        Err(Error::External { context, source }) => match store.head(path).await {
            Ok(actual) if actual != size => Err(corrupt(
                path,
                format!("file is {actual} bytes but {size} bytes were expected"),
            )),
            Err(not_found @ Error::NotFound { .. }) => Err(not_found),
            _ => Err(Error::External { context, source }),
        },
        Err(other) => Err(other),
    }
}

/// The footer fields the prefetch plan needs.
struct Footer {
    column_meta_start: u64,
    global_buff_offsets_start: u64,
    num_global_buffers: u32,
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn parse_footer(tail: &[u8]) -> Option<Footer> {
    let at = tail.len().checked_sub(FOOTER_LEN as usize)?;
    let footer = &tail[at..];
    if footer.get(36..40)? != LANCE_MAGIC {
        return None;
    }
    Some(Footer {
        column_meta_start: le_u64(footer, 0)?,
        global_buff_offsets_start: le_u64(footer, 16)?,
        num_global_buffers: le_u32(footer, 24)?,
    })
}

/// The byte ranges opening needs: the column metadata through the end of the
/// file and every global buffer (the schema and the counts among them). When
/// the global buffer table is not in the tail, the range from it to the end.
fn needed_ranges(tail: &Span, footer: &Footer, size: u64) -> Vec<Range<u64>> {
    // Not sized from the footer: its counts are untrusted until Lance checks them.
    let mut needed = Vec::new();
    needed.push(footer.column_meta_start..size);
    let table_len = u64::from(footer.num_global_buffers) * 16;
    let table = footer.global_buff_offsets_start
        ..footer.global_buff_offsets_start.saturating_add(table_len);
    let Some(bytes) = tail.slice(&table) else {
        needed.push(table.start..size);
        return needed;
    };
    for entry in bytes.chunks_exact(16) {
        if let (Some(position), Some(len)) = (le_u64(entry, 0), le_u64(entry, 8)) {
            if let Some(end) = position.checked_add(len).filter(|end| *end <= size) {
                needed.push(position..end);
            }
        }
    }
    needed
}

/// The hull of every needed range's part before the tail; `None` when the
/// tail holds everything, or when the footer is unreadable (Lance then
/// reports the damage).
fn missing_before_tail(tail: &Span, tail_start: u64, size: u64) -> Option<Range<u64>> {
    let footer = parse_footer(&tail.bytes)?;
    if footer.column_meta_start > size || footer.global_buff_offsets_start > size {
        return None;
    }
    needed_ranges(tail, &footer, size)
        .into_iter()
        .filter(|range| range.start < tail_start && range.start < range.end)
        .map(|range| range.start..range.end.min(tail_start))
        .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
}

/// Decodes the metadata and the counts buffer from `spans` (falling back to
/// the store for anything they miss).
async fn decode_metadata(
    store: DatasetStore,
    path: RelativePath,
    size: u64,
    spans: Vec<Span>,
) -> Result<OpenedFile> {
    let object_path = path.to_object_path();
    let fallback = store_reader(&store, &path, size).await?;
    let scheduler = ScanScheduler::new(
        store.lance_store().clone(),
        SchedulerConfig::new(READ_BUFFER_BYTES),
    );
    let prefetched = scheduler.open_reader(Arc::new(SpanReader::new(spans, fallback.clone())));
    let metadata = FileReader::read_all_metadata(&prefetched)
        .await
        .map_err(|e| lance_error("opening", &path, e))?;
    let reader = FileReader::try_open_with_file_metadata(
        Arc::new(LanceEncodingsIo::new(prefetched)),
        object_path,
        None,
        Arc::<DecoderPlugins>::default(),
        Arc::new(metadata),
        &LanceCache::no_cache(),
        FileReaderOptions::default(),
    )
    .await
    .map_err(|e| lance_error("opening", &path, e))?;
    let schema = ArrowSchema::from(reader.schema().as_ref());
    let projection = label_projection(&reader, &schema, &path)?;
    let counts = read_counts_buffer(&reader, &schema, &path).await?;
    let pages = page_spans(&reader, &projection, &path, size)?;
    // From here on reads go to the store (through per-read spans): the
    // opening spans are dropped with the scheduler that held them.
    let plain = LanceEncodingsIo::new(scheduler.open_reader(fallback.clone()));
    Ok(OpenedFile {
        file: RowMapFile {
            store,
            path,
            reader: reader.with_scheduler(Arc::new(plain)),
            scheduler,
            fallback,
            projection,
            pages,
        },
        counts,
    })
}

/// Lance's reader of the file in the store (every read a counted request).
async fn store_reader(
    store: &DatasetStore,
    path: &RelativePath,
    size: u64,
) -> Result<Arc<dyn Reader>> {
    let size =
        usize::try_from(size).map_err(|_| corrupt(path, format!("{size} bytes exceeds usize")))?;
    let reader = store
        .lance_store()
        .open_with_size(&path.to_object_path(), size)
        .await
        .map_err(|e| lance_error("opening", path, e))?;
    Ok(reader.into())
}

/// The projection of the label column, which must be UInt16.
fn label_projection(
    reader: &FileReader,
    schema: &ArrowSchema,
    path: &RelativePath,
) -> Result<ReaderProjection> {
    let field = schema
        .field_with_name(LABEL_COLUMN)
        .map_err(|_| Error::corrupt("row map", "no label column"))?;
    if field.data_type() != &DataType::UInt16 {
        return Err(Error::corrupt("row map", "label column is not UInt16"));
    }
    versions::reader_projection_from_column_names(
        reader.metadata().version(),
        reader.schema(),
        &[LABEL_COLUMN],
    )
    .map_err(|e| corrupt(path, format!("projecting the label column: {e}")))
}

/// The counts buffer named by the schema metadata.
async fn read_counts_buffer(
    reader: &FileReader,
    schema: &ArrowSchema,
    path: &RelativePath,
) -> Result<Bytes> {
    let index = schema
        .metadata()
        .get(COUNTS_BUFFER_KEY)
        .and_then(|value| value.parse::<u32>().ok())
        .ok_or_else(|| Error::corrupt("row map", "the counts buffer is not named in the schema"))?;
    let available = reader.metadata().file_buffers.len();
    // Buffer 0 is Lance's own schema descriptor, never the counts.
    if index == 0 || usize::try_from(index).map_or(true, |i| i >= available) {
        return Err(Error::corrupt(
            "row map",
            format!("the schema names global buffer {index} of {available} as the counts"),
        ));
    }
    reader
        .read_global_buffer(index)
        .await
        .map_err(|e| lance_error("reading the counts buffer of", path, e))
}

/// Rows and byte hull of each page of the projected label column, whose
/// buffers must lie inside the file's `size` bytes.
fn page_spans(
    reader: &FileReader,
    projection: &ReaderProjection,
    path: &RelativePath,
    size: u64,
) -> Result<Vec<PageSpan>> {
    let column = projection
        .column_indices
        .first()
        .and_then(|index| reader.metadata().column_infos.get(*index as usize))
        .ok_or_else(|| corrupt(path, "the label column has no column metadata"))?;
    let mut first_row = 0u64;
    let mut pages = Vec::with_capacity(column.page_infos.len());
    for page in column.page_infos.iter() {
        let end_row = first_row
            .checked_add(page.num_rows)
            .ok_or_else(|| corrupt(path, "page row counts overflow"))?;
        pages.push(PageSpan {
            rows: first_row..end_row,
            bytes: buffer_hull(&page.buffer_offsets_and_sizes, path, size)?,
        });
        first_row = end_row;
    }
    Ok(pages)
}

/// The smallest byte range holding every non-empty buffer of a page; `None`
/// when it has none. A buffer beyond the file's end is Corrupt.
fn buffer_hull(
    buffers: &[(u64, u64)],
    path: &RelativePath,
    size: u64,
) -> Result<Option<Range<u64>>> {
    let mut hull: Option<Range<u64>> = None;
    for (offset, len) in buffers.iter().filter(|(_, len)| *len > 0) {
        let end = offset
            .checked_add(*len)
            .filter(|end| *end <= size)
            .ok_or_else(|| {
                corrupt(
                    path,
                    format!("a page buffer of {len} bytes at {offset} ends past the file's {size} bytes"),
                )
            })?;
        hull = Some(match hull {
            Some(h) => h.start.min(*offset)..h.end.max(end),
            None => *offset..end,
        });
    }
    Ok(hull)
}

fn corrupt(path: &RelativePath, message: impl Into<String>) -> Error {
    Error::corrupt(format!("row map {path}"), message.into())
}

/// Maps a Lance error raised while `action` the row map at `path` through
/// the table's one mapping (missing → NotFound, store failure → External,
/// undecodable bytes → Corrupt naming the file).
fn lance_error(action: &str, path: &RelativePath, err: lance_core::Error) -> Error {
    refract_table::io::lance_files::lance_error(action, path, err, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footer(column_meta_start: u64, gbo_start: u64, buffers: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&column_meta_start.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&gbo_start.to_le_bytes());
        out.extend_from_slice(&buffers.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(LANCE_MAGIC);
        out
    }

    /// A 10,000-byte "file" whose last `tail` bytes are held: global buffer
    /// table at 9,928 (two buffers: `schema` and `counts`), footer at 9,960.
    fn plan(tail: u64, column_meta_start: u64, counts: Range<u64>) -> Option<Range<u64>> {
        let size = 10_000u64;
        let mut file = vec![0u8; size as usize];
        let mut table = Vec::new();
        for (position, len) in [
            (9_000u64, 100u64),
            (counts.start, counts.end - counts.start),
        ] {
            table.extend_from_slice(&position.to_le_bytes());
            table.extend_from_slice(&len.to_le_bytes());
        }
        file[9_928..9_960].copy_from_slice(&table);
        file[9_960..].copy_from_slice(&footer(column_meta_start, 9_928, 2));
        let start = size - tail;
        let span = Span {
            start,
            bytes: Bytes::from(file[start as usize..].to_vec()),
        };
        missing_before_tail(&span, start, size)
    }

    #[test]
    fn a_tail_holding_everything_needs_nothing_more() {
        assert_eq!(plan(2_000, 9_100, 8_500..9_000), None);
    }

    #[test]
    fn a_far_counts_buffer_is_fetched_alone() {
        assert_eq!(plan(2_000, 9_100, 0..2_208), Some(0..2_208));
    }

    #[test]
    fn missing_metadata_and_counts_are_fetched_as_one_span() {
        assert_eq!(plan(500, 9_100, 8_500..9_000), Some(8_500..9_500));
    }

    #[test]
    fn page_hulls_cover_every_buffer_inside_the_file() {
        let path = RelativePath::parse("_fri/x/stable_partition.lance").unwrap();
        let hull = |buffers: &[(u64, u64)]| buffer_hull(buffers, &path, 1_000);
        assert_eq!(hull(&[(100, 20), (300, 50)]).unwrap(), Some(100..350));
        assert_eq!(
            hull(&[(300, 50), (0, 0), (120, 5)]).unwrap(),
            Some(120..350)
        );
        assert_eq!(hull(&[(500, 0)]).unwrap(), None);
        assert_eq!(hull(&[]).unwrap(), None);
        for bad in [(990, 20), (u64::MAX, 2)] {
            assert!(
                matches!(hull(&[bad]), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_unreadable_footer_plans_nothing() {
        let span = Span {
            start: 0,
            bytes: Bytes::from(vec![1u8; 64]),
        };
        assert_eq!(missing_before_tail(&span, 0, 64), None);
    }
}
