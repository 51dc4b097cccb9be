//! Searching a bitmap segment: the sorted key column is held in memory (cached
//! in the session), postings are taken from the file only for matching keys.

use std::ops::Bound;
use std::sync::Arc;

use arrow_array::{Array, BinaryArray, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{CacheKey, CacheNamespace, DeepSize, Error, KeyParts, Result};
use refract_table::io::ReadOptions;
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::{
    BitmapDetails, PostingStats, BITMAP_FILE, POSTING_COLUMN, STATS_COLUMNS, VALUE_COLUMN,
};
use crate::keys::{downcast, range_is_empty, Key, KeyColumn, KeyKind};
use crate::posting;
use crate::query::cost::Work;
use crate::types::entries::{expand_posting, value_and_addresses};
use crate::types::{
    EntrySink, IndexContext, IndexEntries, IndexQuery, IndexSegmentReader, SearchResult,
};

/// Names the index in errors.
pub(crate) const WHAT: &str = "bitmap index";

/// An opened bitmap segment.
pub struct BitmapSegment {
    inner: Option<Opened>,
}

struct Opened {
    kind: KeyKind,
    file: LanceFileReader,
    /// Row of the null posting, if any (always row 0).
    null_row: Option<u32>,
    /// Non-null keys, ascending; `keys[i]` lives at row `i + first_key_row`.
    keys: Vec<Key>,
    first_key_row: u32,
    /// Statistics of every file row's posting; `None` for segments written
    /// without them.
    stats: Option<Vec<PostingStats>>,
}

impl DeepSize for BitmapSegment {
    fn deep_size_bytes(&self) -> usize {
        let keys = self.inner.as_ref().map_or(0, |o| {
            o.keys.iter().map(|k| k.deep_size() as usize).sum::<usize>()
                + o.stats.as_ref().map_or(0, |c| c.len() * 32)
        });
        keys + 4096
    }
}

/// Opens the segment at `dir`, sharing the decoded keys through the session cache.
pub(crate) async fn open_cached(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &BitmapDetails,
) -> Result<Arc<BitmapSegment>> {
    let path = dir.join(BITMAP_FILE)?;
    let key = CacheKey::new(
        CacheNamespace::IndexData,
        KeyParts::Path(format!("{}/{}", ctx.store.uri(), path.as_str())),
    );
    ctx.cache
        .get_or_try_insert(key, open(ctx, dir, details))
        .await
}

/// Opens without the cache.
pub(crate) async fn open(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &BitmapDetails,
) -> Result<BitmapSegment> {
    if details.num_keys == 0 {
        return Ok(BitmapSegment { inner: None });
    }
    let file =
        LanceFileReader::open(&ctx.store, &dir.join(BITMAP_FILE)?, ReadOptions::default()).await?;
    let columns = check_schema(&file)?;
    if file.num_rows() != details.num_keys || file.num_rows() > u64::from(u32::MAX) {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "holds {} rows, details say {}",
                file.num_rows(),
                details.num_keys
            ),
        ));
    }
    let kind = KeyKind::of(&columns.value_type).ok_or_else(|| {
        Error::corrupt(
            WHAT,
            format!("unsupported value type {}", columns.value_type),
        )
    })?;
    let mut keys = Vec::new();
    let mut stats = columns.has_stats.then(Vec::new);
    let mut null_row = None;
    let mut row = 0u32;
    let mut projection = vec![VALUE_COLUMN];
    if columns.has_stats {
        projection.extend(STATS_COLUMNS);
    }
    for batch in file.read_all(Some(&projection)).await? {
        let column = batch
            .column_by_name(VALUE_COLUMN)
            .ok_or_else(|| Error::corrupt(WHAT, "missing value column"))?;
        if let Some(stats) = stats.as_mut() {
            read_stats(&batch, stats)?;
        }
        let values = KeyColumn::new(column)?;
        for i in 0..values.len() {
            match values.key_at(i) {
                None if row == 0 => null_row = Some(0),
                None => return Err(Error::corrupt(WHAT, "null key after the first row")),
                Some(key) => {
                    if keys.last().is_some_and(|prev| prev >= &key) {
                        return Err(Error::corrupt(WHAT, "keys are not strictly ascending"));
                    }
                    keys.push(key);
                }
            }
            row += 1;
        }
    }
    if let Some(stats) = &stats {
        let total = stats
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(s.rows));
        if stats.len() as u64 != details.num_keys || total != Some(details.num_rows) {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "posting counts add up to {total:?} over {} rows, details say {} over {}",
                    stats.len(),
                    details.num_rows,
                    details.num_keys
                ),
            ));
        }
    }
    Ok(BitmapSegment {
        inner: Some(Opened {
            kind,
            file,
            first_key_row: u32::from(null_row.is_some()),
            null_row,
            keys,
            stats,
        }),
    })
}

/// What [`check_schema`] found.
pub(crate) struct FileColumns {
    /// Type of the value column.
    pub(crate) value_type: DataType,
    /// Whether the file has the posting statistics columns.
    pub(crate) has_stats: bool,
}

/// Checks the file's columns: value, posting and, when present, the count.
pub(crate) fn check_schema(file: &LanceFileReader) -> Result<FileColumns> {
    let schema = file.schema();
    let value = schema
        .field_with_name(VALUE_COLUMN)
        .map_err(|_| Error::corrupt(WHAT, "missing value column"))?;
    let posting = schema
        .field_with_name(POSTING_COLUMN)
        .map_err(|_| Error::corrupt(WHAT, "missing posting column"))?;
    if posting.data_type() != &DataType::Binary || KeyKind::of(value.data_type()).is_none() {
        return Err(Error::corrupt(
            WHAT,
            format!(
                "unexpected column types {} / {}",
                value.data_type(),
                posting.data_type()
            ),
        ));
    }
    let mut present = 0;
    for name in STATS_COLUMNS {
        match schema.field_with_name(name) {
            Ok(field) if field.data_type() == &DataType::UInt64 => present += 1,
            Ok(field) => {
                return Err(Error::corrupt(
                    WHAT,
                    format!("unexpected {name} column type {}", field.data_type()),
                ))
            }
            Err(_) => {}
        }
    }
    if present != 0 && present != STATS_COLUMNS.len() {
        return Err(Error::corrupt(
            WHAT,
            "some posting statistics columns are missing",
        ));
    }
    Ok(FileColumns {
        value_type: value.data_type().clone(),
        has_stats: present != 0,
    })
}

/// Appends the statistics of every row of `batch` to `stats`.
fn read_stats(batch: &RecordBatch, stats: &mut Vec<PostingStats>) -> Result<()> {
    let mut columns = Vec::with_capacity(STATS_COLUMNS.len());
    for name in STATS_COLUMNS {
        let column = batch
            .column_by_name(name)
            .ok_or_else(|| Error::corrupt(WHAT, format!("missing {name} column")))?;
        let values = downcast::<UInt64Array>(column)?;
        if values.null_count() > 0 {
            return Err(Error::corrupt(WHAT, format!("null in the {name} column")));
        }
        columns.push(values.values());
    }
    let [rows, fragments, ranges, read_rows] = columns.as_slice() else {
        return Err(Error::corrupt(WHAT, "posting statistics columns"));
    };
    for i in 0..batch.num_rows() {
        let stat = PostingStats {
            rows: rows[i],
            read: Work {
                fragments: fragments[i],
                ranges: ranges[i],
                rows: read_rows[i],
            },
        };
        // Reading a posting's rows reads each at least once, in at least one
        // range per fragment, and a non-empty posting touches a fragment:
        // anything else was not written by a build.
        if stat.read.rows < stat.rows
            || stat.read.ranges < stat.read.fragments
            || stat.read.fragments > stat.rows
            || (stat.rows > 0 && stat.read.fragments == 0)
        {
            return Err(Error::corrupt(
                WHAT,
                format!("inconsistent posting statistics {stat:?}"),
            ));
        }
        stats.push(stat);
    }
    Ok(())
}

/// The `posting` column of a batch, checked to hold no null.
pub(crate) fn posting_bytes(batch: &RecordBatch) -> Result<&BinaryArray> {
    let column = batch
        .column_by_name(POSTING_COLUMN)
        .ok_or_else(|| Error::corrupt(WHAT, "missing posting column"))?;
    let postings = downcast::<BinaryArray>(column)?;
    if postings.null_count() > 0 {
        return Err(Error::corrupt(WHAT, "null posting"));
    }
    Ok(postings)
}

/// Decodes every posting of a `posting` column batch, in row order.
pub(crate) fn decode_postings(batch: &RecordBatch) -> Result<Vec<RoaringTreemap>> {
    posting_bytes(batch)?
        .iter()
        .map(|bytes| posting::decode(bytes.unwrap_or_default(), WHAT))
        .collect()
}

impl Opened {
    /// File rows holding the postings `query` needs, ascending and distinct;
    /// `None` if the query is not a bitmap query.
    fn rows(&self, query: &IndexQuery) -> Option<Vec<u32>> {
        let mut rows = match query {
            IndexQuery::IsNull => self.null_row.into_iter().collect(),
            IndexQuery::Equals(l) => self
                .key_row(&self.kind.literal_key(l)?)
                .into_iter()
                .collect(),
            IndexQuery::InList(list) => {
                let mut rows = Vec::with_capacity(list.len());
                for l in list {
                    rows.extend(self.key_row(&self.kind.literal_key(l)?));
                }
                rows
            }
            IndexQuery::Range { low, high } => {
                let (low, high) = self.kind.bound_keys(low, high)?;
                self.range_rows(&low, &high)
            }
            IndexQuery::Contains(_) | IndexQuery::Nearest { .. } => return None,
        };
        rows.sort_unstable();
        rows.dedup();
        Some(rows)
    }

    fn key_row(&self, key: &Key) -> Option<u32> {
        let i = self.keys.binary_search(key).ok()?;
        // keys.len() < file rows <= u32::MAX (checked at open).
        u32::try_from(i).ok().map(|i| i + self.first_key_row)
    }

    fn range_rows(&self, low: &Bound<Key>, high: &Bound<Key>) -> Vec<u32> {
        if range_is_empty(low, high) {
            return Vec::new();
        }
        let from = match low {
            Bound::Unbounded => 0,
            Bound::Included(k) => self.keys.partition_point(|x| x < k),
            Bound::Excluded(k) => self.keys.partition_point(|x| x <= k),
        };
        let to = match high {
            Bound::Unbounded => self.keys.len(),
            Bound::Included(k) => self.keys.partition_point(|x| x <= k),
            Bound::Excluded(k) => self.keys.partition_point(|x| x < k),
        };
        (from..to)
            .filter_map(|i| u32::try_from(i).ok().map(|i| i + self.first_key_row))
            .collect()
    }

    /// The union of the postings at `rows`; each is checked against its
    /// recorded count, so a damaged posting fails the search instead of
    /// answering with other rows.
    async fn union_postings(&self, rows: &[u32]) -> Result<RoaringTreemap> {
        let mut found = RoaringTreemap::new();
        for chunk in rows.chunks(super::ROWS_PER_BATCH) {
            let batch = self.file.take(chunk, Some(&[POSTING_COLUMN])).await?;
            let postings = decode_postings(&batch)?;
            if postings.len() != chunk.len() {
                return Err(Error::corrupt(
                    WHAT,
                    format!(
                        "asked for {} postings, read {}",
                        chunk.len(),
                        postings.len()
                    ),
                ));
            }
            for (row, posting) in chunk.iter().zip(postings) {
                if let Some(expected) = self.stat(*row).map(|s| s.rows) {
                    if posting.len() != expected {
                        return Err(Error::corrupt(
                            WHAT,
                            format!(
                                "posting of row {row} holds {} addresses, its count says {expected}",
                                posting.len()
                            ),
                        ));
                    }
                }
                found |= posting;
            }
        }
        Ok(found)
    }

    /// The recorded statistics of file row `row`, if the file has them.
    fn stat(&self, row: u32) -> Option<PostingStats> {
        let stats = self.stats.as_ref()?;
        stats.get(usize::try_from(row).ok()?).copied()
    }
}

#[async_trait]
impl IndexSegmentReader for BitmapSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        match &self.inner {
            Some(opened) => opened.rows(query).is_some(),
            None => matches!(
                query,
                IndexQuery::Equals(_)
                    | IndexQuery::Range { .. }
                    | IndexQuery::InList(_)
                    | IndexQuery::IsNull
            ),
        }
    }

    async fn search(&self, query: &IndexQuery) -> Result<SearchResult> {
        if !self.can_answer(query) {
            return Err(Error::invalid_input(format!(
                "a bitmap segment cannot answer {query:?}"
            )));
        }
        let Some(opened) = &self.inner else {
            return Ok(SearchResult::Exact(RoaringTreemap::new()));
        };
        let rows = opened.rows(query).unwrap_or_default();
        Ok(SearchResult::Exact(opened.union_postings(&rows).await?))
    }

    /// Exactly the addresses a search returns (postings are disjoint), from
    /// the statistics; `None` for segments written without them.
    fn estimate_rows(&self, query: &IndexQuery) -> Option<u64> {
        let Some(opened) = &self.inner else {
            return self.can_answer(query).then_some(0);
        };
        let rows = opened.rows(query)?;
        rows.iter()
            .map(|row| opened.stat(*row).map(|s| s.rows))
            .sum()
    }

    /// One posting's recorded read work is exactly what reading its stored
    /// rows costs. A union of several reads every row of each one's coalesced
    /// ranges (the others' rows only shorten the gaps), the rows they hold
    /// together, and at least one range in each fragment of each (ranges of
    /// different postings may merge, so their range counts are no bound).
    fn estimate_work(&self, query: &IndexQuery) -> Option<Work> {
        let Some(opened) = &self.inner else {
            return self.can_answer(query).then(Work::default);
        };
        let rows = opened.rows(query)?;
        if let [row] = rows.as_slice() {
            return opened.stat(*row).map(|s| s.read);
        }
        let mut work = Work::default();
        let mut total_rows = 0u64;
        for row in rows {
            let stat = opened.stat(row)?;
            total_rows = total_rows.saturating_add(stat.rows);
            work.fragments = work.fragments.max(stat.read.fragments);
            work.rows = work.rows.max(stat.read.rows);
        }
        work.ranges = work.fragments;
        work.rows = work.rows.max(total_rows);
        Some(work)
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        let mut all = RoaringTreemap::new();
        let Some(opened) = &self.inner else {
            return Ok(all);
        };
        let mut stream = opened
            .file
            .read_range(0..opened.file.num_rows(), Some(&[POSTING_COLUMN]), 256)
            .await?;
        while let Some(batch) = stream.try_next().await? {
            for posting in decode_postings(&batch)? {
                all |= posting;
            }
        }
        Ok(all)
    }

    /// Every (key, address) of every posting, the null key's included.
    async fn visit_entries(&self, sink: &mut dyn EntrySink) -> Result<bool> {
        let Some(opened) = &self.inner else {
            return Ok(true);
        };
        // ROWS_PER_BATCH (256) fits in u32.
        let mut stream = opened
            .file
            .read_range(
                0..opened.file.num_rows(),
                None,
                super::ROWS_PER_BATCH as u32,
            )
            .await?;
        while let Some(batch) = stream.try_next().await? {
            let values = batch
                .column_by_name(VALUE_COLUMN)
                .ok_or_else(|| Error::corrupt(WHAT, "missing value column"))?
                .clone();
            let keys = [values];
            for (row, posting) in decode_postings(&batch)?.iter().enumerate() {
                let row = u32::try_from(row)
                    .map_err(|_| Error::corrupt(WHAT, "a read batch over u32::MAX rows"))?;
                expand_posting(&keys, row, posting, sink).await?;
            }
        }
        Ok(true)
    }

    /// One entry per row, nulls included (the null posting).
    fn expected_entries(&self, rows: &RecordBatch) -> Result<Option<IndexEntries>> {
        let (values, addresses) = value_and_addresses(rows)?;
        Ok(Some(IndexEntries {
            keys: vec![values.clone()],
            addresses: addresses.clone(),
        }))
    }
}

impl BitmapSegment {
    /// Distinct non-null keys (tests and diagnostics).
    pub fn keys(&self) -> &[Key] {
        self.inner.as_ref().map_or(&[], |o| o.keys.as_slice())
    }
}
