//! The ngram segment file: `ngram.lance` with one row per distinct trigram,
//! `(trigram: UInt32, posting: LargeBinary)`, trigrams strictly ascending.
//! Postings are serialized `RoaringTreemap`s of stored row addresses.

use refract_table::io::PageLayout;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, ArrayRef, LargeBinaryArray, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_core::{Error, Result};
use refract_table::io::{
    DatasetStore, LanceFileReader, LanceFileWriter, RelativePath, STREAMING_PAGE_BYTES,
};
use roaring::RoaringTreemap;

use super::posting::{deserialize_posting, serialize_posting};
use super::trigram::Trigram;
use crate::types::encoding_hints::lightly_compressed;

/// File name of the postings file inside a segment directory.
pub const POSTINGS_FILE: &str = "ngram.lance";
/// Column holding the packed trigram.
pub const TRIGRAM_COLUMN: &str = "trigram";
/// Column holding the serialized posting.
pub const POSTING_COLUMN: &str = "posting";

/// Rows buffered before a write; postings are small on average.
const WRITE_BATCH_ROWS: usize = 1024;
/// Serialized bytes buffered before a write, whatever the row count.
const WRITE_BATCH_BYTES: usize = 8 << 20;

/// The schema of [`POSTINGS_FILE`].
pub fn postings_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(TRIGRAM_COLUMN, DataType::UInt32, false),
        lightly_compressed(Field::new(POSTING_COLUMN, DataType::LargeBinary, false)),
    ]))
}

/// The postings file of the segment at `dir`.
///
/// # Errors
/// PathEscape if the joined path is invalid (never for a validated `dir`).
pub fn postings_path(dir: &RelativePath) -> Result<RelativePath> {
    dir.join(POSTINGS_FILE)
}

/// Writes postings in ascending trigram order, buffering bounded batches.
pub struct PostingsWriter {
    writer: LanceFileWriter,
    trigrams: Vec<Trigram>,
    postings: Vec<Vec<u8>>,
    buffered_bytes: usize,
    /// Buffered bytes that trigger a flush.
    flush_bytes: usize,
    last: Option<Trigram>,
    written: u64,
}

impl PostingsWriter {
    /// Starts the postings file of the segment at `dir`.
    ///
    /// # Errors
    /// InvalidInput when the file already exists; External for store failures.
    pub async fn create(store: &DatasetStore, dir: &RelativePath) -> Result<Self> {
        let writer = LanceFileWriter::create(
            store,
            &postings_path(dir)?,
            postings_schema(),
            PageLayout::default(),
        )
        .await?;
        Ok(Self::around(writer, WRITE_BATCH_BYTES))
    }

    /// Like [`Self::create`] for a one-pass rewrite (a remap): postings are
    /// handed to Lance, and Lance writes pages, every [`STREAMING_PAGE_BYTES`]
    /// instead of every 8 MiB, so the rewrite's memory stays small.
    ///
    /// # Errors
    /// InvalidInput when the file already exists; External for store failures.
    pub async fn create_streaming(store: &DatasetStore, dir: &RelativePath) -> Result<Self> {
        let writer = LanceFileWriter::create(
            store,
            &postings_path(dir)?,
            postings_schema(),
            PageLayout::Streaming {
                page_bytes: STREAMING_PAGE_BYTES,
            },
        )
        .await?;
        // The page size is a small usize on every supported target.
        let flush_bytes = usize::try_from(STREAMING_PAGE_BYTES).unwrap_or(WRITE_BATCH_BYTES);
        Ok(Self::around(writer, flush_bytes))
    }

    fn around(writer: LanceFileWriter, flush_bytes: usize) -> Self {
        Self {
            writer,
            trigrams: Vec::new(),
            postings: Vec::new(),
            buffered_bytes: 0,
            flush_bytes,
            last: None,
            written: 0,
        }
    }

    /// Appends one posting; empty postings are skipped. Trigrams must ascend.
    ///
    /// # Errors
    /// InvalidInput when `trigram` is not above the last one pushed; External
    /// when a buffered batch cannot be written.
    pub async fn push(&mut self, trigram: Trigram, posting: &RoaringTreemap) -> Result<()> {
        if posting.is_empty() {
            return Ok(());
        }
        if self.last.is_some_and(|last| last >= trigram) {
            return Err(Error::invalid_input(format!(
                "ngram postings must be written in ascending trigram order ({trigram:#08x} after {:#08x?})",
                self.last
            )));
        }
        self.last = Some(trigram);
        let bytes = serialize_posting(posting)?;
        self.buffered_bytes += bytes.len();
        self.trigrams.push(trigram);
        self.postings.push(bytes);
        if self.trigrams.len() >= WRITE_BATCH_ROWS || self.buffered_bytes >= self.flush_bytes {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.trigrams.is_empty() {
            return Ok(());
        }
        let trigrams: ArrayRef = Arc::new(UInt32Array::from(std::mem::take(&mut self.trigrams)));
        let postings = std::mem::take(&mut self.postings);
        let postings: ArrayRef = Arc::new(LargeBinaryArray::from_iter_values(postings.iter()));
        let batch = RecordBatch::try_new(postings_schema(), vec![trigrams, postings])
            .map_err(|e| Error::external("assembling an ngram postings batch", e))?;
        self.written += batch.num_rows() as u64;
        self.buffered_bytes = 0;
        self.writer.write(&batch).await
    }

    /// Completes the file; returns the number of postings written.
    ///
    /// # Errors
    /// External when the last batch or the file cannot be written.
    pub async fn finish(mut self) -> Result<u64> {
        self.flush().await?;
        self.writer.finish().await?;
        Ok(self.written)
    }
}

/// Checks that `reader` holds an ngram postings file.
///
/// # Errors
/// Corrupt when the file's columns are not those of [`postings_schema`].
pub fn check_schema(reader: &LanceFileReader) -> Result<()> {
    let schema = reader.schema();
    let expected = postings_schema();
    let types_match = schema.fields().len() == expected.fields().len()
        && schema
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if types_match {
        Ok(())
    } else {
        Err(Error::corrupt(
            "ngram postings file",
            format!("unexpected schema {schema:?}"),
        ))
    }
}

/// The trigram column of a batch read from the postings file.
///
/// # Errors
/// Corrupt when the column is missing, not UInt32 or holds nulls.
pub fn trigram_column(batch: &RecordBatch) -> Result<&UInt32Array> {
    batch
        .column_by_name(TRIGRAM_COLUMN)
        .and_then(|c| c.as_primitive_opt::<UInt32Type>())
        .filter(|c| c.null_count() == 0)
        .ok_or_else(|| Error::corrupt("ngram postings file", "missing or null trigram column"))
}

/// The posting column of a batch read from the postings file.
///
/// # Errors
/// Corrupt when the column is missing, not LargeBinary or holds nulls.
pub fn posting_column(batch: &RecordBatch) -> Result<&LargeBinaryArray> {
    batch
        .column_by_name(POSTING_COLUMN)
        .and_then(|c| c.as_binary_opt::<i64>())
        .filter(|c| c.null_count() == 0)
        .ok_or_else(|| Error::corrupt("ngram postings file", "missing or null posting column"))
}

/// Decodes posting `row` of `column`.
///
/// # Errors
/// Corrupt when `row` is past the column or its bytes do not decode.
pub fn decode_posting(column: &LargeBinaryArray, row: usize) -> Result<RoaringTreemap> {
    if row >= column.len() {
        return Err(Error::corrupt(
            "ngram postings file",
            format!("posting row {row} missing"),
        ));
    }
    deserialize_posting(column.value(row))
}

/// Reads the whole trigram column and checks it is strictly ascending.
///
/// # Errors
/// Corrupt for a bad trigram column, a row count mismatch or trigrams out of
/// order; the errors of reading the file (Corrupt, NotFound, External).
pub async fn read_trigrams(reader: &LanceFileReader) -> Result<Vec<Trigram>> {
    let mut trigrams = Vec::with_capacity(usize::try_from(reader.num_rows()).unwrap_or(0));
    if reader.num_rows() == 0 {
        return Ok(trigrams);
    }
    for batch in reader.read_all(Some(&[TRIGRAM_COLUMN])).await? {
        trigrams.extend(trigram_column(&batch)?.values().iter().copied());
    }
    if trigrams.len() as u64 != reader.num_rows() {
        return Err(Error::corrupt(
            "ngram postings file",
            format!(
                "read {} trigrams, file has {} rows",
                trigrams.len(),
                reader.num_rows()
            ),
        ));
    }
    if trigrams.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::corrupt(
            "ngram postings file",
            "trigrams are not strictly ascending",
        ));
    }
    Ok(trigrams)
}
