//! `ngram`: a trigram index for substring search (`contains(column, 'needle')`).
//!
//! Layout: one Lance file per segment ([`storage::POSTINGS_FILE`]) mapping each
//! distinct byte trigram of the normalised values to a posting (a
//! `RoaringTreemap` of stored row addresses). A search intersects the postings
//! of the needle's trigrams and returns [`SearchResult::Candidates`]; the query
//! layer rechecks them. Needles under three characters are not answered.
//!
//! Remap streams the file posting by posting. A row sits in one posting per
//! trigram of its value, so stored addresses go through a
//! [`crate::posting::TranslationMemo`]: each is translated
//! once, in ascending batches of at most
//! [`MAX_TRANSLATION_BATCH`](super::MAX_TRANSLATION_BATCH) addresses,
//! and later postings look the result up in a dense per-fragment table
//! (8 bytes per stored row, no hash map). A posting is never expanded into a
//! per-row vector; outputs are assembled by appends.

pub mod posting;
pub mod storage;
pub mod trigram;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use refract_table::io::{read_ahead, LanceFileReader, RelativePath, WindowSize};
use refract_table::io::{ReadMode, ReadOptions};
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

use super::entries::{expand_posting, value_and_addresses};
use super::{
    EntrySink, IndexContext, IndexEntries, IndexParams, IndexQuery, IndexSegmentReader, IndexType,
    SearchResult, Translator,
};
use crate::posting::TranslationMemo;
use posting::{intersect_all, PostingBuilder};
use storage::{decode_posting, posting_column, postings_path, trigram_column, PostingsWriter};
use trigram::{needle_is_indexable, trigrams, Trigram};

/// On-disk layout version.
const FORMAT_VERSION: u32 = 1;
/// Decoded posting bytes a remap window aims at: a dense posting is hundreds
/// of KiB, a sparse one a few bytes, so windows are sized in bytes.
const REMAP_WINDOW_BYTES: usize = 256 << 10;
/// Most postings in one remap window (small postings).
const REMAP_WINDOW_MAX_ROWS: u32 = 1024;
/// Postings read per window by [`NgramSegment`] scans.
const SCAN_READ_ROWS: u32 = 8;
/// I/O budget of the old postings file while remapping (probe value).
const REMAP_READ_BUFFER_BYTES: u64 = 1 << 20;
/// Windows read (or being read) ahead of the rewrite while remapping: two,
/// so the next posting is decoded while the one after it is read.
const REMAP_READ_AHEAD: usize = 2;

/// The ngram index type.
#[derive(Debug, Clone, Copy, Default)]
pub struct NgramIndex;

/// Segment details stored in `IndexMetadata.details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NgramDetails {
    /// Layout version of the files.
    pub format_version: u32,
    /// Distinct trigrams (rows of the postings file).
    pub trigrams: u64,
}

impl NgramDetails {
    fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::external("encoding ngram details", e))
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let details: NgramDetails = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt("ngram index details", e.to_string()))?;
        if details.format_version != FORMAT_VERSION {
            return Err(Error::not_supported(format!(
                "ngram index format version {} (this client reads {FORMAT_VERSION})",
                details.format_version
            )));
        }
        Ok(details)
    }
}

/// Opens the postings file of `dir` and checks it against `details`.
async fn open_postings(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &NgramDetails,
) -> Result<LanceFileReader> {
    let reader =
        LanceFileReader::open(&ctx.store, &postings_path(dir)?, ReadOptions::default()).await?;
    check_postings(reader, details)
}

/// Checks an opened postings file against `details`.
fn check_postings(reader: LanceFileReader, details: &NgramDetails) -> Result<LanceFileReader> {
    storage::check_schema(&reader)?;
    if reader.num_rows() != details.trigrams {
        return Err(Error::corrupt(
            "ngram postings file",
            format!(
                "{} rows, details say {} trigrams",
                reader.num_rows(),
                details.trigrams
            ),
        ));
    }
    Ok(reader)
}

/// Most threads adding rows to postings during a build.
const MAX_BUILD_WORKERS: usize = 4;
/// Batches queued for each build thread.
const BUILD_QUEUE_BATCHES: usize = 2;

/// Threads adding rows to postings: one per core, at most [`MAX_BUILD_WORKERS`].
fn build_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |cores| cores.get())
        .clamp(1, MAX_BUILD_WORKERS)
}

/// The postings of every row of `input`, built on `workers` blocking threads.
///
/// Batches are dealt to the threads in turn, each thread fills a builder of
/// its own, and the builders are merged at the end: a posting is the union of
/// its parts, so the result does not depend on the split. Each thread holds at
/// most [`BUILD_QUEUE_BATCHES`] batches in its queue.
async fn build_postings(
    mut input: BoxStream<'_, Result<RecordBatch>>,
    workers: usize,
) -> Result<PostingBuilder> {
    let mut queues = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for _ in 0..workers.max(1) {
        let (queue, mut batches) = tokio::sync::mpsc::channel::<RecordBatch>(BUILD_QUEUE_BATCHES);
        queues.push(queue);
        threads.push(tokio::task::spawn_blocking(move || {
            let mut builder = PostingBuilder::new();
            while let Some(batch) = batches.blocking_recv() {
                add_batch(&mut builder, &batch)?;
            }
            Ok::<_, Error>(builder)
        }));
    }
    let mut failure = None;
    let mut turn = 0usize;
    while let Some(batch) = input.next().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(err) => {
                failure = Some(err);
                break;
            }
        };
        // A closed queue means its thread failed; its error is reported below.
        if queues[turn % queues.len()].send(batch).await.is_err() {
            break;
        }
        turn += 1;
    }
    // Closing the queues lets every thread finish its builder.
    drop(queues);
    let mut merged = PostingBuilder::new();
    for thread in threads {
        match thread.await {
            Ok(Ok(part)) => merged.merge(part),
            Ok(Err(err)) => {
                failure.get_or_insert(err);
            }
            Err(join) => {
                failure.get_or_insert(Error::external("building ngram postings", join));
            }
        }
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(merged),
    }
}

/// Adds the string values of one input batch to `builder`.
fn add_batch(builder: &mut PostingBuilder, batch: &RecordBatch) -> Result<()> {
    let (_, addrs) = value_and_addresses(batch)?;
    for_each_string(batch, |row, value| builder.add(value, addrs.value(row)))
}

/// Calls `visit` with the row and value of every non-null string of the
/// value column of a `(value, _rowaddr)` batch.
fn for_each_string(batch: &RecordBatch, mut visit: impl FnMut(usize, &str)) -> Result<()> {
    let (values, _) = value_and_addresses(batch)?;
    let strings: Box<dyn Iterator<Item = Option<&str>>> = match values.data_type() {
        DataType::Utf8 => Box::new(values.as_string::<i32>().iter()),
        DataType::LargeUtf8 => Box::new(values.as_string::<i64>().iter()),
        DataType::Utf8View => Box::new(values.as_string_view().iter()),
        other => {
            return Err(Error::invalid_input(format!(
                "ngram indexes string columns, not {other}"
            )));
        }
    };
    for (row, value) in strings.enumerate() {
        if let Some(value) = value {
            visit(row, value);
        }
    }
    Ok(())
}

#[async_trait]
impl IndexType for NgramIndex {
    fn name(&self) -> &'static str {
        "ngram"
    }

    fn index_version(&self) -> u32 {
        FORMAT_VERSION
    }

    fn supports(&self, data_type: &DataType) -> bool {
        matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        )
    }

    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        input: BoxStream<'_, Result<RecordBatch>>,
        _params: &IndexParams,
    ) -> Result<Vec<u8>> {
        let builder = build_postings(input, build_workers()).await?;
        let mut writer = PostingsWriter::create(&ctx.store, dir).await?;
        for (trigram, posting) in builder.finish() {
            writer.push(trigram, &posting).await?;
        }
        let trigrams = writer.finish().await?;
        NgramDetails {
            format_version: FORMAT_VERSION,
            trigrams,
        }
        .encode()
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        Ok(Arc::new(NgramSegment::open(ctx, dir, details).await?))
    }

    async fn remap(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        translator: &dyn Translator,
    ) -> Result<Vec<u8>> {
        let details = NgramDetails::decode(details)?;
        // One pass over the old file in small windows: a small read-ahead and
        // small page buffers keep the remap's memory off the file's size.
        let reader = LanceFileReader::open(
            &ctx.store,
            &postings_path(old_dir)?,
            ReadOptions {
                mode: ReadMode::Streaming {
                    read_buffer_bytes: REMAP_READ_BUFFER_BYTES,
                },
                ..ReadOptions::default()
            },
        )
        .await?;
        let reader = check_postings(reader, &details)?;
        let mut writer = PostingsWriter::create_streaming(&ctx.store, new_dir).await?;
        let mut seen = 0u64;
        // A row sits in one posting per trigram of its value: translate it once.
        let mut memo = TranslationMemo::new();
        // Windows are read (up to two ahead) while earlier ones are rewritten.
        let mut batches = read_ahead(
            &reader,
            WindowSize::bytes(REMAP_WINDOW_BYTES, REMAP_WINDOW_MAX_ROWS),
            REMAP_READ_AHEAD,
        )?;
        while let Some(batch) = batches.try_next().await? {
            seen += remap_batch(&batch, &mut memo, translator, &mut writer).await?;
        }
        if seen != details.trigrams {
            return Err(Error::corrupt(
                "ngram postings file",
                format!("read {seen} postings, details say {}", details.trigrams),
            ));
        }
        let trigrams = writer.finish().await?;
        NgramDetails {
            format_version: FORMAT_VERSION,
            trigrams,
        }
        .encode()
    }
}

/// Rewrites the postings of one read batch into `writer`; returns the number
/// of postings read.
async fn remap_batch(
    batch: &RecordBatch,
    memo: &mut TranslationMemo,
    translator: &dyn Translator,
    writer: &mut PostingsWriter,
) -> Result<u64> {
    let trigram_values = trigram_column(batch)?;
    let postings = posting_column(batch)?;
    // Columns of one record batch have one length: `row` is inside both.
    for (row, trigram) in trigram_values.values().iter().enumerate() {
        let mut remapped =
            memo.remap_serialized(postings.value(row), "ngram posting", translator)?;
        remapped.optimize();
        // `push` skips postings whose rows were all deleted and rejects
        // out-of-order trigrams (a corrupt source file).
        writer
            .push(*trigram, &remapped)
            .await
            .map_err(|e| match e {
                Error::InvalidInput { message } => Error::corrupt("ngram postings file", message),
                other => other,
            })?;
    }
    Ok(batch.num_rows() as u64)
}

/// An opened ngram segment: the trigram column is held in memory (4 bytes per
/// distinct trigram); postings are read on demand.
pub struct NgramSegment {
    reader: LanceFileReader,
    trigrams: Vec<Trigram>,
}

impl NgramSegment {
    /// Opens the segment at `dir` (what [`IndexType::open`] returns, as the
    /// concrete type so callers can inspect postings).
    ///
    /// # Errors
    /// Corrupt for bad details or a postings file that disagrees with them
    /// (schema, row count, trigram order); NotSupported for an unknown format
    /// version; NotFound for a missing file; External for store failures.
    pub async fn open(ctx: &IndexContext, dir: &RelativePath, details: &[u8]) -> Result<Self> {
        let details = NgramDetails::decode(details)?;
        let reader = open_postings(ctx, dir, &details).await?;
        let trigrams = storage::read_trigrams(&reader).await?;
        Ok(Self { reader, trigrams })
    }

    /// The distinct trigrams, ascending.
    pub fn trigrams(&self) -> &[Trigram] {
        &self.trigrams
    }

    /// Reads the postings at file rows `rows` (ascending).
    async fn read_postings(&self, rows: &[u32]) -> Result<Vec<RoaringTreemap>> {
        let batch = self
            .reader
            .take(rows, Some(&[storage::POSTING_COLUMN]))
            .await?;
        let column = posting_column(&batch)?;
        if column.len() != rows.len() {
            return Err(Error::corrupt(
                "ngram postings file",
                format!("asked for {} postings, read {}", rows.len(), column.len()),
            ));
        }
        (0..column.len())
            .map(|row| decode_posting(column, row))
            .collect()
    }

    /// Candidate rows for `needle`: rows holding every trigram of it.
    async fn candidates(&self, needle: &str) -> Result<RoaringTreemap> {
        let mut rows = Vec::new();
        for trigram in trigrams(needle) {
            match self.trigrams.binary_search(&trigram) {
                Ok(row) => rows.push(u32::try_from(row).map_err(|_| {
                    Error::corrupt("ngram postings file", "more than u32::MAX trigrams")
                })?),
                // A trigram no row has: nothing can contain the needle.
                Err(_) => return Ok(RoaringTreemap::new()),
            }
        }
        rows.sort_unstable();
        Ok(intersect_all(self.read_postings(&rows).await?).unwrap_or_default())
    }

    /// Calls `visit` with every stored (trigram, posting), in trigram order,
    /// holding one read batch of postings at a time.
    ///
    /// # Errors
    /// Corrupt for a bad column or an undecodable posting; the errors of
    /// reading the file (Corrupt, NotFound, External).
    pub async fn for_each_posting<F>(&self, mut visit: F) -> Result<()>
    where
        F: FnMut(Trigram, RoaringTreemap) + Send,
    {
        if self.trigrams.is_empty() {
            return Ok(());
        }
        let mut batches = self
            .reader
            .read_range(0..self.reader.num_rows(), None, SCAN_READ_ROWS)
            .await?;
        while let Some(batch) = batches.try_next().await? {
            let trigram_values: &UInt32Array = trigram_column(&batch)?;
            let postings = posting_column(&batch)?;
            for (row, trigram) in trigram_values.values().iter().enumerate() {
                visit(*trigram, decode_posting(postings, row)?);
            }
        }
        Ok(())
    }

    /// The stored posting of every trigram, in trigram order (diagnostics and tests).
    ///
    /// # Errors
    /// Those of [`Self::for_each_posting`].
    pub async fn postings(&self) -> Result<Vec<(Trigram, RoaringTreemap)>> {
        let mut out = Vec::with_capacity(self.trigrams.len());
        self.for_each_posting(|t, p| out.push((t, p))).await?;
        Ok(out)
    }
}

#[async_trait]
impl IndexSegmentReader for NgramSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        matches!(query, IndexQuery::Contains(needle) if needle_is_indexable(needle))
    }

    async fn search(&self, query: &IndexQuery) -> Result<SearchResult> {
        match query {
            IndexQuery::Contains(needle) if needle_is_indexable(needle) => {
                Ok(SearchResult::Candidates(self.candidates(needle).await?))
            }
            other => Err(Error::invalid_input(format!(
                "an ngram index cannot answer {other:?}"
            ))),
        }
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        let mut all = RoaringTreemap::new();
        self.for_each_posting(|_, posting| all |= posting).await?;
        Ok(all)
    }

    /// Every (trigram, address) of every posting.
    async fn visit_entries(&self, sink: &mut dyn EntrySink) -> Result<bool> {
        if self.trigrams.is_empty() {
            return Ok(true);
        }
        let mut batches = self
            .reader
            .read_range(0..self.reader.num_rows(), None, SCAN_READ_ROWS)
            .await?;
        while let Some(batch) = batches.try_next().await? {
            let keys: [ArrayRef; 1] = [Arc::new(trigram_column(&batch)?.clone())];
            let postings = posting_column(&batch)?;
            for row in 0..postings.len() {
                let posting = decode_posting(postings, row)?;
                // A read batch holds at most SCAN_READ_ROWS rows.
                let row = u32::try_from(row)
                    .map_err(|_| Error::corrupt("ngram postings file", "batch too large"))?;
                expand_posting(&keys, row, &posting, sink).await?;
            }
        }
        Ok(true)
    }

    /// One entry per distinct trigram of each non-null value.
    fn expected_entries(&self, rows: &RecordBatch) -> Result<Option<IndexEntries>> {
        let mut keys = Vec::new();
        let mut addresses = Vec::new();
        let (_, stored) = value_and_addresses(rows)?;
        for_each_string(rows, |row, value| {
            for trigram in trigrams(value) {
                keys.push(trigram);
                addresses.push(stored.value(row));
            }
        })?;
        Ok(Some(IndexEntries {
            keys: vec![Arc::new(UInt32Array::from(keys))],
            addresses: addresses.into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{StringArray, UInt64Array};
    use arrow_schema::{Field, Schema};

    use crate::types::addresses::ADDR_COLUMN;

    fn batch(rows: std::ops::Range<u64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("text", DataType::Utf8, true),
            Field::new(ADDR_COLUMN, DataType::UInt64, false),
        ]));
        let values: StringArray = rows
            .clone()
            .map(|row| (row % 7 != 0).then(|| format!("w{} v{}", row % 13, row % 5)))
            .collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(values),
                Arc::new(UInt64Array::from_iter_values(rows)),
            ],
        )
        .unwrap()
    }

    fn input(batches: Vec<Result<RecordBatch>>) -> BoxStream<'static, Result<RecordBatch>> {
        futures::stream::iter(batches).boxed()
    }

    #[tokio::test]
    async fn postings_do_not_depend_on_the_number_of_threads() {
        let batches = || {
            (0..9)
                .map(|i| Ok(batch(i * 50..i * 50 + 50)))
                .collect::<Vec<_>>()
        };
        let one: Vec<_> = build_postings(input(batches()), 1)
            .await
            .unwrap()
            .finish()
            .collect();
        let three: Vec<_> = build_postings(input(batches()), 3)
            .await
            .unwrap()
            .finish()
            .collect();
        assert_eq!(one, three);
        let rows: u64 = one.iter().map(|(_, posting)| posting.len()).sum();
        assert!(
            one.len() > 10 && rows > 450,
            "{} trigrams, {rows} entries",
            one.len()
        );
    }

    #[tokio::test]
    async fn a_thread_that_fails_fails_the_build() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new(ADDR_COLUMN, DataType::UInt64, false),
        ]));
        let numbers = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 2])),
                Arc::new(UInt64Array::from(vec![0, 1])),
            ],
        )
        .unwrap();
        let batches = (0..6)
            .map(|i| {
                Ok(if i == 3 {
                    numbers.clone()
                } else {
                    batch(i * 10..i * 10 + 10)
                })
            })
            .collect();
        let err = build_postings(input(batches), 2).await.err().unwrap();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert!(err.to_string().contains("string columns"), "{err}");
    }

    #[tokio::test]
    async fn an_input_error_fails_the_build() {
        let batches = vec![
            Ok(batch(0..50)),
            Err(Error::corrupt("data/a.lance", "bad page")),
            Ok(batch(50..100)),
        ];
        let err = build_postings(input(batches), 2).await.err().unwrap();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
}
