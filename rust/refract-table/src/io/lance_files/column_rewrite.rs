//! A Lance file written again with one column replaced.
//!
//! Index files pair row addresses with what they index (a BTREE's values,
//! an IVF partition's vectors); a compaction moves the addresses and leaves
//! the rest as it is. Decoding and encoding the rest again is most of the
//! cost of such a rewrite, so [`ColumnRewriter`] encodes only the new column
//! and copies every other column's encoded pages byte for byte, as
//! lance-file's own concatenation does: page buffers are appended to the new
//! file and only the column metadata and the footer are written anew. The
//! schema (field ids and metadata), the file version and the global buffers
//! stay the source's.
//!
//! The new column is encoded in chunks of [`CHUNK_BYTES`]: each chunk is
//! written as a small Lance file in memory with the column's own field, and
//! its page buffers are appended like the copied ones. Memory: one chunk,
//! its encoding, [`COPY_READ_AHEAD`] pieces of [`COPY_PIECE_BYTES`] of
//! copied pages and one upload part.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use futures::{stream, StreamExt};
use lance_encoding::decoder::{ColumnInfo, PageInfo};
use lance_file::reader::FileReader;
use lance_file::versions;
use lance_file::writer::{FileWriter, FileWriterOptions};
use lance_io::object_store::ObjectStore as LanceObjectStore;
use object_store::path::Path;

use super::writer::{add_global_buffer_at, finish_file};
use super::*;

/// Bytes of new column values encoded as one chunk (one page or a few).
const CHUNK_BYTES: usize = 1 << 20;
/// Bytes of a copied page read at once: a multiple of Lance's 64-byte
/// buffer alignment, so a buffer's pieces append without padding.
const COPY_PIECE_BYTES: u64 = 2 << 20;
/// Pieces read ahead of the writes: reading overlaps writing.
const COPY_READ_AHEAD: usize = 2;

/// Writes a copy of a Lance file with one top-level column's values
/// replaced, copying the other columns' encoded pages (see the module docs).
/// Nothing is visible until [`Self::finish`]; [`Self::abort`] (or dropping
/// the rewriter) leaves no object behind.
///
/// Invariant: `pages` hold every row of the new column written so far, in
/// order, as buffers already appended to `writer`; `rows` counts them and
/// `pending` the rows not yet encoded.
pub struct ColumnRewriter {
    writer: FileWriter,
    checksum: ChecksumHandle,
    store: DatasetStore,
    source: LanceFileReader,
    version: ConcreteFileVersion,
    path: RelativePath,
    /// The replaced column (its top-level field and physical column index).
    column: usize,
    /// The replaced field alone, in Lance's and Arrow's terms, for chunks.
    chunk_schema: lance_core::datatypes::Schema,
    chunk_arrow: SchemaRef,
    pending: Vec<ArrayRef>,
    pending_bytes: usize,
    pages: Vec<PageInfo>,
    encoding: Option<lance_encoding::format::pb::ColumnEncoding>,
    rows: u64,
}

impl ColumnRewriter {
    /// Starts `output` as a copy of `source` whose column `column` will hold
    /// the values passed to [`Self::write`].
    ///
    /// # Errors
    /// NotSupported when the file's layout cannot be copied page by page
    /// (Lance v1, a field stored in several physical columns, column-level
    /// buffers, blobs): decode and encode the file instead. InvalidInput for
    /// an unknown column or an existing `output`; External for store failures.
    pub async fn start(
        store: &DatasetStore,
        source: &LanceFileReader,
        output: &RelativePath,
        column: &str,
    ) -> Result<Self> {
        let version = source.file_version()?;
        let schema = source.lance_schema().clone();
        let metadata = source.metadata();
        let unsupported = |why: String| {
            Err(Error::not_supported(format!(
                "copying the pages of Lance file {}: {why}",
                source.path()
            )))
        };
        if version == ConcreteFileVersion::V1 {
            return unsupported("a Lance v1 file".into());
        }
        let index = schema
            .fields
            .iter()
            .position(|f| f.name == column)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "column {column:?} does not exist in Lance file {}",
                    source.path()
                ))
            })?;
        if let Some(field) = schema
            .fields
            .iter()
            .find(|f| f.is_blob() || lance_file::versions::physical_column_count(version, f) != 1)
        {
            return unsupported(format!("field {:?} is not one plain column", field.name));
        }
        if metadata.column_infos.len() != schema.fields.len() {
            return unsupported(format!(
                "{} columns for {} fields",
                metadata.column_infos.len(),
                schema.fields.len()
            ));
        }
        if let Some(info) = metadata
            .column_infos
            .iter()
            .find(|c| !c.buffer_offsets_and_sizes.is_empty())
        {
            return unsupported(format!("column {} has column-level buffers", info.index));
        }
        let chunk_schema = schema
            .project(&[column])
            .map_err(|e| Error::corrupt(format!("Lance file {}", source.path()), e.to_string()))?;
        let chunk_arrow = Arc::new(ArrowSchema::from(&chunk_schema));
        ensure_absent(store, output).await?;
        // Parts of a page's size (or the store's minimum): Lance's own
        // writer would buffer far more of a file written this fast.
        let part_bytes = usize::try_from(STREAMING_PAGE_BYTES)
            .unwrap_or(usize::MAX)
            .max(store.min_part_bytes());
        let object_writer = StreamingUpload::new(
            store.object_store().clone(),
            output.to_object_path(),
            part_bytes,
        );
        let checksum = ChecksumHandle::default();
        let object_writer = ChecksummingWriter::new(Box::new(object_writer), checksum.clone());
        let writer = versions::create_lazy_writer(
            version,
            Box::new(object_writer),
            FileWriterOptions::default(),
        )
        .map_err(|e| lance_error("creating", output, e, false))?;
        Ok(Self {
            writer,
            checksum,
            store: store.clone(),
            source: source.clone(),
            version,
            path: output.clone(),
            column: index,
            chunk_schema,
            chunk_arrow,
            pending: Vec::new(),
            pending_bytes: 0,
            pages: Vec::new(),
            encoding: None,
            rows: 0,
        })
    }

    /// Appends the next values of the replaced column.
    ///
    /// # Errors
    /// InvalidInput when `values` has another type than the column, or nulls
    /// where it is not nullable; External when writing fails.
    pub async fn write(&mut self, values: ArrayRef) -> Result<()> {
        let batch = RecordBatch::try_new(self.chunk_arrow.clone(), vec![values]).map_err(|e| {
            Error::invalid_input(format!("new values for Lance file {}: {e}", self.path))
        })?;
        self.pending_bytes += batch.get_array_memory_size();
        self.pending.push(batch.column(0).clone());
        if self.pending_bytes >= CHUNK_BYTES {
            self.encode_pending().await?;
        }
        Ok(())
    }

    /// Encodes the pending values as a Lance file in memory and appends its
    /// pages.
    async fn encode_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let chunk = encode_chunk(self.version, &self.chunk_schema, &self.chunk_arrow, pending)
            .await
            .map_err(|e| lance_error("encoding a column of", &self.path, e, false))?;
        let scheduler =
            in_memory::scheduler_over(Path::from(CHUNK_PATH), chunk.clone(), READ_BUFFER_BYTES);
        let metadata = FileReader::read_all_metadata(&scheduler)
            .await
            .map_err(|e| lance_error("encoding a column of", &self.path, e, false))?;
        let [info] = metadata.column_infos.as_slice() else {
            return Err(self.unexpected("a chunk of one field has several columns"));
        };
        if !info.buffer_offsets_and_sizes.is_empty() {
            return Err(Error::not_supported(format!(
                "copying the pages of Lance file {}: the new column has column-level buffers",
                self.source.path()
            )));
        }
        match &self.encoding {
            None => self.encoding = Some(info.encoding.clone()),
            Some(first) if *first != info.encoding => {
                return Err(self.unexpected("chunks of one column were given other encodings"));
            }
            Some(_) => {}
        }
        for page in info.page_infos.iter() {
            let mut buffers = Vec::with_capacity(page.buffer_offsets_and_sizes.len());
            for &(offset, size) in page.buffer_offsets_and_sizes.iter() {
                let bytes = slice(&chunk, offset, size)
                    .ok_or_else(|| self.unexpected("a chunk page lies outside its file"))?;
                buffers.push(self.append(&bytes).await?);
            }
            self.pages.push(PageInfo {
                num_rows: page.num_rows,
                priority: page.priority + self.rows,
                encoding: page.encoding.clone(),
                buffer_offsets_and_sizes: Arc::from(buffers),
            });
        }
        self.rows += metadata.num_rows;
        Ok(())
    }

    async fn append(&mut self, bytes: &[u8]) -> Result<(u64, u64)> {
        self.writer
            .write_external_buffer(bytes)
            .await
            .map_err(|e| lance_error("writing", &self.path, e, false))
    }

    fn unexpected(&self, what: &str) -> Error {
        Error::external(
            format!("writing Lance file {}", self.path),
            std::io::Error::other(what.to_string()),
        )
    }

    /// Copies `pages` of the source (buffers appended to the new file),
    /// read in pieces of at most [`COPY_PIECE_BYTES`], [`COPY_READ_AHEAD`]
    /// pieces ahead of the writes so reading overlaps writing.
    async fn copy_pages(&mut self, pages: &[PageInfo]) -> Result<Vec<PageInfo>> {
        let pieces = copy_pieces(pages);
        let source = self.source.clone();
        let mut reads = stream::iter(pieces.clone().into_iter().map(|piece| {
            let source = source.clone();
            async move {
                if piece.range.is_empty() {
                    return Ok(bytes::Bytes::new());
                }
                let mut read = source.read_raw(vec![piece.range]).await?;
                // read_raw returns one buffer per range asked for.
                Ok(read.pop().unwrap_or_default())
            }
        }))
        .buffered(COPY_READ_AHEAD);
        let mut buffers: Vec<Vec<(u64, u64)>> = pages
            .iter()
            .map(|p| Vec::with_capacity(p.buffer_offsets_and_sizes.len()))
            .collect();
        for piece in pieces {
            let bytes: bytes::Bytes = reads
                .next()
                .await
                .ok_or_else(|| self.unexpected("a page read ended early"))??;
            let (start, size) = self.append(&bytes).await?;
            let page = &mut buffers[piece.page];
            if piece.first_of_buffer {
                page.push((start, size));
            } else {
                // Every piece but a buffer's last is a multiple of the
                // alignment, so the next one is appended without padding.
                let Some(last) = page.last_mut().filter(|(s, n)| s + n == start) else {
                    return Err(self.unexpected("a copied page buffer was not contiguous"));
                };
                last.1 += size;
            }
        }
        Ok(pages
            .iter()
            .zip(buffers)
            .map(|(page, buffers)| PageInfo {
                num_rows: page.num_rows,
                priority: page.priority,
                encoding: page.encoding.clone(),
                buffer_offsets_and_sizes: Arc::from(buffers),
            })
            .collect())
    }

    /// Copies the other columns and the global buffers, writes the footer
    /// and makes the file visible.
    ///
    /// # Errors
    /// InvalidInput when the values written do not number the source's rows;
    /// Corrupt when the source's pages cannot be read as its metadata says;
    /// External when writing fails.
    pub async fn finish(mut self) -> Result<LanceFileSummary> {
        match self.finish_file().await {
            Ok(summary) => Ok(summary),
            Err(e) => {
                self.writer.abort().await;
                Err(e)
            }
        }
    }

    async fn finish_file(&mut self) -> Result<LanceFileSummary> {
        self.encode_pending().await?;
        let num_rows = self.source.num_rows();
        if self.rows != num_rows {
            return Err(Error::invalid_input(format!(
                "{} new values for column {:?} of Lance file {}, which has {num_rows} rows",
                self.rows, self.chunk_schema.fields[0].name, self.path
            )));
        }
        let schema = self.source.lance_schema().clone();
        let infos = self.source.metadata().column_infos.clone();
        let mut columns = Vec::with_capacity(infos.len());
        for (position, info) in infos.iter().enumerate() {
            let (mut pages, encoding) = if position == self.column {
                let encoding = self
                    .encoding
                    .take()
                    .unwrap_or_else(|| info.encoding.clone());
                (std::mem::take(&mut self.pages), encoding)
            } else {
                (
                    self.copy_pages(&info.page_infos).await?,
                    info.encoding.clone(),
                )
            };
            versions::finalize_external_metadata_column(
                self.version,
                &schema,
                position,
                &mut pages,
                num_rows,
            )
            .map_err(|e| lance_error("writing", &self.path, e, false))?;
            columns.push(Arc::new(ColumnInfo::new(
                info.index,
                Arc::from(pages),
                Vec::new(),
                encoding,
            )));
        }
        // The schema descriptor (written by `finish`) must start aligned.
        self.append(&[]).await?;
        self.writer
            .initialize_with_external_columns(schema.as_ref().clone(), &columns, num_rows)
            .map_err(|e| lance_error("writing", &self.path, e, false))?;
        for buffer in 1..self.source.global_buffers() {
            let bytes = self.source.read_global_buffer(buffer).await?;
            add_global_buffer_at(&mut self.writer, &self.path, bytes, buffer).await?;
        }
        finish_file(&mut self.writer, &self.path, &self.checksum, &self.store).await
    }

    /// Abandons the file; nothing becomes visible.
    pub async fn abort(mut self) {
        self.writer.abort().await;
    }
}

/// One read of a page copy: `range` of the source, part of a buffer of
/// page `page` (its first part when `first_of_buffer`).
#[derive(Debug, Clone)]
struct Piece {
    page: usize,
    first_of_buffer: bool,
    range: Range<u64>,
}

/// Every buffer of `pages` cut into pieces of at most [`COPY_PIECE_BYTES`]
/// (an empty buffer is one empty piece).
fn copy_pieces(pages: &[PageInfo]) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for (page, info) in pages.iter().enumerate() {
        for &(offset, size) in info.buffer_offsets_and_sizes.iter() {
            let end = offset.saturating_add(size);
            let mut start = offset;
            loop {
                let stop = end.min(start.saturating_add(COPY_PIECE_BYTES));
                pieces.push(Piece {
                    page,
                    first_of_buffer: start == offset,
                    range: start..stop,
                });
                start = stop;
                if start >= end {
                    break;
                }
            }
        }
    }
    pieces
}

/// Where a chunk lives in its in-memory store.
const CHUNK_PATH: &str = "chunk.lance";

/// `arrays` as a Lance file of `version` with `schema` alone, in memory.
async fn encode_chunk(
    version: ConcreteFileVersion,
    schema: &lance_core::datatypes::Schema,
    arrow: &SchemaRef,
    arrays: Vec<ArrayRef>,
) -> lance_core::Result<bytes::Bytes> {
    let memory = LanceObjectStore::memory();
    let path = Path::from(CHUNK_PATH);
    let options = FileWriterOptions {
        keep_original_array: Some(true),
        // One page for the whole chunk where the format allows.
        data_cache_bytes: Some(2 * CHUNK_BYTES as u64),
        ..FileWriterOptions::default()
    };
    let mut writer = versions::create_writer(
        version,
        memory.create(&path).await?,
        schema.clone(),
        options,
    )?;
    for array in arrays {
        let batch = RecordBatch::try_new(arrow.clone(), vec![array])?;
        writer.write_batch(&batch).await?;
    }
    writer.finish().await?;
    memory.read_one_all(&path).await
}

fn slice(bytes: &bytes::Bytes, offset: u64, size: u64) -> Option<bytes::Bytes> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    (end <= bytes.len()).then(|| bytes.slice(start..end))
}

#[cfg(test)]
#[path = "column_rewrite_tests.rs"]
mod tests;
