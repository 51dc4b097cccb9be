//! Searching a btree segment: pick pages by their `[min, max]`, read only
//! their values, binary-search inside them, then read the addresses of the
//! matching rows only, skipping tombstones.

use std::ops::{Bound, Range};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt32Array};
use async_trait::async_trait;
use refract_core::{CacheKey, CacheNamespace, DeepSize, Error, KeyParts, Result};
use refract_table::io::ReadOptions;
use refract_table::io::{LanceFileReader, RelativePath};
use roaring::RoaringTreemap;

use super::files::{Caching, SegmentFiles, ADDRESS_READ_ROWS, VALUE_READ_ROWS};
use super::lookup::{self, PageEntry};
use super::{BTreeDetails, PAGE_LOOKUP_FILE};
use crate::keys::{interval_meets, interval_within, range_is_empty, Key, KeyColumn, KeyKind};
use crate::types::addresses::bounded_pieces;
use crate::types::entries::{take_entries, value_and_addresses};
use crate::types::{
    EntrySink, IndexContext, IndexEntries, IndexQuery, IndexSegmentReader, SearchResult,
};

/// An opened btree segment.
pub struct BTreeSegment {
    /// `None` for an empty segment (no files).
    inner: Option<Opened>,
}

struct Opened {
    kind: KeyKind,
    files: SegmentFiles,
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
        // The readers themselves hold file metadata; count a fixed overhead for them.
        pages + 8192
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
    if details.entries()? == 0 {
        return Ok(BTreeSegment { inner: None });
    }
    // The three files open concurrently: each open is a round trip or two on
    // a cloud store.
    let lookup_path = dir.join(PAGE_LOOKUP_FILE)?;
    let (files, lookup_file) = futures::try_join!(
        SegmentFiles::open(ctx, dir, details, Caching::Cached),
        LanceFileReader::open(&ctx.store, &lookup_path, ReadOptions::default())
    )?;
    let pages = lookup::load(&lookup_file, files.value_type(), files.entries()).await?;
    Ok(BTreeSegment {
        inner: Some(Opened {
            kind: files.kind(),
            files,
            pages,
        }),
    })
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
        let mut matches: Vec<Range<u64>> = Vec::new();
        for rows in self.candidate_rows(ranges) {
            for piece in bounded_pieces(rows, VALUE_READ_ROWS) {
                let values = self.files.read_values(piece.clone()).await?;
                matching_rows(&KeyColumn::new(&values)?, piece.start, ranges, &mut matches);
            }
        }
        let mut found = RoaringTreemap::new();
        let mut sorted: Vec<u64> = Vec::new();
        for rows in merge(matches) {
            for piece in bounded_pieces(rows, ADDRESS_READ_ROWS) {
                let addresses = self.files.read_addresses(piece).await?;
                // Tombstones (nulls) are skipped. Sorting the bounded piece
                // lets it join the answer container by container instead of
                // one insert per address.
                sorted.clear();
                sorted.extend(addresses.iter().flatten());
                sorted.sort_unstable();
                sorted.dedup();
                match RoaringTreemap::from_sorted_iter(sorted.iter().copied()) {
                    Ok(piece_map) => found |= piece_map,
                    // Unreachable (sorted just above); inserting one by one is
                    // still right.
                    Err(_) => found.extend(sorted.iter().copied()),
                }
            }
        }
        Ok(found)
    }
}

/// Appends the rows of sorted `values` (row `first` of the file onwards) that
/// fall in any range.
fn matching_rows(values: &KeyColumn, first: u64, ranges: &KeyRanges, out: &mut Vec<Range<u64>>) {
    let n = values.len();
    for (low, high) in ranges {
        let from = values.lower_position(0, n, low);
        let to = values.upper_position(from, n, high);
        if from < to {
            out.push(first + from as u64..first + to as u64);
        }
    }
}

/// Sorts row ranges and merges the ones that overlap or touch.
fn merge(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_unstable_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match out.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => out.push(range),
        }
    }
    out
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

    /// Rows of the pages whose whole `[min, max]` lies inside the query: they
    /// certainly match as stored (tombstones included). Pages the query only
    /// meets may hold a single match, so they count for nothing here.
    fn estimate_rows(&self, query: &IndexQuery) -> Option<u64> {
        let Some(opened) = &self.inner else {
            return self.can_answer(query).then_some(0);
        };
        let ranges = opened.ranges(query)?;
        Some(
            opened
                .pages
                .iter()
                .filter(|page| {
                    ranges.iter().any(|(low, high)| {
                        !range_is_empty(low, high)
                            && interval_within(&page.min, &page.max, low, high)
                    })
                })
                .map(|page| page.rows)
                .sum(),
        )
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        let mut all = RoaringTreemap::new();
        let Some(opened) = &self.inner else {
            return Ok(all);
        };
        for piece in bounded_pieces(0..opened.files.entries(), ADDRESS_READ_ROWS) {
            let addresses = opened.files.read_addresses(piece).await?;
            all.extend(addresses.iter().flatten());
        }
        Ok(all)
    }

    /// Every stored (value, address), tombstones left out, in file order.
    async fn visit_entries(&self, sink: &mut dyn EntrySink) -> Result<bool> {
        let Some(opened) = &self.inner else {
            return Ok(true);
        };
        for piece in bounded_pieces(0..opened.files.entries(), VALUE_READ_ROWS) {
            let (values, addresses) = futures::try_join!(
                opened.files.read_values(piece.clone()),
                opened.files.read_addresses(piece)
            )?;
            if values.len() != addresses.len() {
                return Err(Error::corrupt(
                    "btree values",
                    format!(
                        "read {} values but {} addresses",
                        values.len(),
                        addresses.len()
                    ),
                ));
            }
            let live: UInt32Array = (0..addresses.len())
                .filter(|i| addresses.is_valid(*i))
                .filter_map(|i| u32::try_from(i).ok())
                .collect();
            let stored: Vec<u64> = addresses.iter().flatten().collect();
            sink.accept(take_entries(&[values], &live, stored)?).await?;
        }
        Ok(true)
    }

    /// One entry per row with a non-null value (nulls are not stored).
    fn expected_entries(&self, rows: &RecordBatch) -> Result<Option<IndexEntries>> {
        let (values, addresses) = value_and_addresses(rows)?;
        let kept: UInt32Array = (0..values.len())
            .filter(|i| values.is_valid(*i))
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        let stored = kept
            .values()
            .iter()
            .map(|i| addresses.value(*i as usize))
            .collect();
        Ok(Some(take_entries(
            std::slice::from_ref(values),
            &kept,
            stored,
        )?))
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
