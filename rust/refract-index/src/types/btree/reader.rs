//! Searching a btree segment: pick pages by their `[min, max]`, read only those,
//! binary-search inside them.

use std::ops::{Bound, Range};
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt64Array};
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::{CacheKey, CacheNamespace, DeepSize, Error, KeyParts, Result};
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::lookup::{self, PageEntry};
use super::{BTreeDetails, ADDR_COLUMN, PAGE_DATA_FILE, PAGE_LOOKUP_FILE, VALUE_COLUMN};
use crate::keys::{downcast, interval_meets, range_is_empty, Key, KeyColumn, KeyKind};
use crate::types::{IndexContext, IndexQuery, IndexSegmentReader, SearchResult};

/// Rows decoded per read batch while searching.
const READ_BATCH_ROWS: u32 = 8192;

/// An opened btree segment.
pub struct BTreeSegment {
    /// `None` for an empty segment (no files).
    inner: Option<Opened>,
}

struct Opened {
    kind: KeyKind,
    data: LanceFileReader,
    pages: Vec<PageEntry>,
}

impl DeepSize for BTreeSegment {
    fn deep_size_bytes(&self) -> usize {
        let pages = self.inner.as_ref().map_or(0, |o| {
            o.pages
                .iter()
                .map(|p| (p.min.deep_size() + p.max.deep_size() + 16) as usize)
                .sum()
        });
        // The reader itself holds file metadata; count a fixed overhead for it.
        pages + 4096
    }
}

/// Opens the segment at `dir`, sharing the decoded lookup through the session cache.
pub(crate) async fn open_cached(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &BTreeDetails,
) -> Result<Arc<BTreeSegment>> {
    let lookup_path = dir.join(PAGE_LOOKUP_FILE)?;
    let key = CacheKey::new(
        CacheNamespace::IndexData,
        KeyParts::Path(format!("{}/{}", ctx.store.uri(), lookup_path.as_str())),
    );
    ctx.cache
        .get_or_try_insert(key, open(ctx, dir, details))
        .await
}

/// Opens without the cache.
pub(crate) async fn open(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &BTreeDetails,
) -> Result<BTreeSegment> {
    if details.num_rows == 0 {
        return Ok(BTreeSegment { inner: None });
    }
    let data = LanceFileReader::open(&ctx.store, &dir.join(PAGE_DATA_FILE)?, None).await?;
    let value_type = check_data_schema(&data)?;
    if data.num_rows() != details.num_rows {
        return Err(Error::corrupt(
            "btree page data",
            format!(
                "holds {} rows, details say {}",
                data.num_rows(),
                details.num_rows
            ),
        ));
    }
    let lookup_file = LanceFileReader::open(&ctx.store, &dir.join(PAGE_LOOKUP_FILE)?, None).await?;
    let pages = lookup::load(&lookup_file, &value_type, data.num_rows()).await?;
    let kind = KeyKind::of(&value_type).ok_or_else(|| {
        Error::corrupt(
            "btree page data",
            format!("unsupported value type {value_type}"),
        )
    })?;
    Ok(BTreeSegment {
        inner: Some(Opened { kind, data, pages }),
    })
}

/// Checks the page data columns and returns the value type.
pub(crate) fn check_data_schema(data: &LanceFileReader) -> Result<DataType> {
    let schema = data.schema();
    let value = schema
        .field_with_name(VALUE_COLUMN)
        .map_err(|_| Error::corrupt("btree page data", "missing value column"))?;
    let addr = schema
        .field_with_name(ADDR_COLUMN)
        .map_err(|_| Error::corrupt("btree page data", "missing _rowaddr column"))?;
    if addr.data_type() != &DataType::UInt64 || KeyKind::of(value.data_type()).is_none() {
        return Err(Error::corrupt(
            "btree page data",
            format!(
                "unexpected column types {} / {}",
                value.data_type(),
                addr.data_type()
            ),
        ));
    }
    Ok(value.data_type().clone())
}

/// A query reduced to key ranges.
type KeyRanges = Vec<(Bound<Key>, Bound<Key>)>;

impl Opened {
    /// The key ranges of `query`, or `None` if it is not a btree query.
    fn ranges(&self, query: &IndexQuery) -> Option<KeyRanges> {
        match query {
            IndexQuery::Equals(l) => {
                let k = self.kind.literal_key(l)?;
                Some(vec![(Bound::Included(k.clone()), Bound::Included(k))])
            }
            IndexQuery::Range { low, high } => Some(vec![self.kind.bound_keys(low, high)?]),
            IndexQuery::InList(list) => list
                .iter()
                .map(|l| {
                    let k = self.kind.literal_key(l)?;
                    Some((Bound::Included(k.clone()), Bound::Included(k)))
                })
                .collect(),
            IndexQuery::IsNull | IndexQuery::Contains(_) | IndexQuery::Nearest { .. } => None,
        }
    }

    /// Row ranges of the pages some range can match, merged when adjacent.
    fn candidate_rows(&self, ranges: &KeyRanges) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for page in &self.pages {
            let hit = ranges.iter().any(|(low, high)| {
                !range_is_empty(low, high) && interval_meets(&page.min, &page.max, low, high)
            });
            if !hit {
                continue;
            }
            let rows = page.start..page.start + page.rows;
            match out.last_mut() {
                Some(last) if last.end == rows.start => last.end = rows.end,
                _ => out.push(rows),
            }
        }
        out
    }

    async fn search(&self, ranges: &KeyRanges) -> Result<RoaringTreemap> {
        let mut found = RoaringTreemap::new();
        for rows in self.candidate_rows(ranges) {
            let mut stream = self.data.read_range(rows, None, READ_BATCH_ROWS).await?;
            while let Some(batch) = stream.try_next().await? {
                collect_matches(&batch, ranges, &mut found)?;
            }
        }
        Ok(found)
    }
}

/// Adds the addresses of the rows of a sorted `batch` that fall in any range.
fn collect_matches(
    batch: &RecordBatch,
    ranges: &KeyRanges,
    found: &mut RoaringTreemap,
) -> Result<()> {
    let (values, addrs) = split_page_batch(batch)?;
    let n = values.len();
    for (low, high) in ranges {
        let from = values.lower_position(0, n, low);
        let to = values.upper_position(from, n, high);
        if let Some(hits) = addrs.values().get(from..to) {
            found.extend(hits.iter().copied());
        }
    }
    Ok(())
}

/// The value keys and addresses of a page-data batch.
pub(crate) fn split_page_batch(batch: &RecordBatch) -> Result<(KeyColumn, UInt64Array)> {
    let value = batch
        .column_by_name(VALUE_COLUMN)
        .ok_or_else(|| Error::corrupt("btree page data", "missing value column"))?;
    let addr = batch
        .column_by_name(ADDR_COLUMN)
        .ok_or_else(|| Error::corrupt("btree page data", "missing _rowaddr column"))?;
    if value.null_count() > 0 || addr.null_count() > 0 {
        return Err(Error::corrupt("btree page data", "null value or address"));
    }
    Ok((
        KeyColumn::new(value)?,
        downcast::<UInt64Array>(addr)?.clone(),
    ))
}

#[async_trait]
impl IndexSegmentReader for BTreeSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        match &self.inner {
            Some(opened) => opened.ranges(query).is_some(),
            // No stored value: every comparison is empty; null tests are not ours.
            None => matches!(
                query,
                IndexQuery::Equals(_) | IndexQuery::Range { .. } | IndexQuery::InList(_)
            ),
        }
    }

    async fn search(&self, query: &IndexQuery) -> Result<SearchResult> {
        let Some(opened) = &self.inner else {
            if self.can_answer(query) {
                return Ok(SearchResult::Exact(RoaringTreemap::new()));
            }
            return Err(unanswerable(query));
        };
        let ranges = opened.ranges(query).ok_or_else(|| unanswerable(query))?;
        Ok(SearchResult::Exact(opened.search(&ranges).await?))
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        let mut all = RoaringTreemap::new();
        let Some(opened) = &self.inner else {
            return Ok(all);
        };
        let mut stream = opened
            .data
            .read_range(0..opened.data.num_rows(), Some(&[ADDR_COLUMN]), 65_536)
            .await?;
        while let Some(batch) = stream.try_next().await? {
            let addr = batch
                .column_by_name(ADDR_COLUMN)
                .ok_or_else(|| Error::corrupt("btree page data", "missing _rowaddr column"))?;
            all.extend(downcast::<UInt64Array>(addr)?.values().iter().copied());
        }
        Ok(all)
    }
}

impl BTreeSegment {
    /// The page lookup (tests and diagnostics).
    pub fn pages(&self) -> &[PageEntry] {
        self.inner.as_ref().map_or(&[], |o| o.pages.as_slice())
    }
}

fn unanswerable(query: &IndexQuery) -> Error {
    Error::invalid_input(format!("a btree segment cannot answer {query:?}"))
}
