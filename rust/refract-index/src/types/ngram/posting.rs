//! Posting lists: trigram → RoaringTreemap of stored row addresses.
//!
//! Building keeps one treemap per distinct trigram (never one entry per row).
//! Remapping walks a posting lazily in slices of at most
//! [`MAX_TRANSLATION_BATCH`] addresses, so the only memory that grows with the
//! posting is the output treemap itself.

use std::collections::BTreeMap;

use refract_core::{Error, Result};
use roaring::RoaringTreemap;

use crate::posting::TreemapAssembler;
use crate::translate::MAX_TRANSLATION_BATCH;

use super::trigram::{trigrams, Trigram};

/// Accumulates postings while a segment is built.
#[derive(Debug, Default)]
pub struct PostingBuilder {
    postings: BTreeMap<Trigram, RoaringTreemap>,
}

impl PostingBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every trigram of `value` for the row at `addr`.
    ///
    /// Scans yield a fragment's rows in ascending address order, so `addr`
    /// usually goes after every address of the posting: an append to its last
    /// container, without the searches of an insert.
    pub fn add(&mut self, value: &str, addr: u64) {
        for trigram in trigrams(value) {
            let posting = self.postings.entry(trigram).or_default();
            if posting.try_push(addr).is_err() {
                posting.insert(addr);
            }
        }
    }

    /// Adds every posting of `other` (built over other rows) to this one.
    pub fn merge(&mut self, other: PostingBuilder) {
        for (trigram, posting) in other.postings {
            *self.postings.entry(trigram).or_default() |= posting;
        }
    }

    /// Distinct trigrams seen so far.
    pub fn len(&self) -> usize {
        self.postings.len()
    }

    /// True when no trigram has been seen.
    pub fn is_empty(&self) -> bool {
        self.postings.is_empty()
    }

    /// The postings in ascending trigram order, compacted for storage.
    pub fn finish(self) -> impl Iterator<Item = (Trigram, RoaringTreemap)> {
        self.postings.into_iter().map(|(trigram, mut posting)| {
            posting.optimize();
            (trigram, posting)
        })
    }
}

/// Serializes a posting in the portable roaring format.
///
/// # Errors
/// External if serialization fails (it does not when writing to memory).
pub fn serialize_posting(posting: &RoaringTreemap) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(posting.serialized_size());
    posting
        .serialize_into(&mut bytes)
        .map_err(|e| Error::external("serializing an ngram posting", e))?;
    Ok(bytes)
}

/// Deserializes a posting.
///
/// # Errors
/// [`Error::Corrupt`] (ngram posting) when `bytes` do not decode.
pub fn deserialize_posting(bytes: &[u8]) -> Result<RoaringTreemap> {
    RoaringTreemap::deserialize_from(bytes)
        .map_err(|e| Error::corrupt("ngram posting", e.to_string()))
}

/// Intersects postings; `None` when there are none to intersect.
pub fn intersect_all<I>(postings: I) -> Option<RoaringTreemap>
where
    I: IntoIterator<Item = RoaringTreemap>,
{
    let mut sorted: Vec<RoaringTreemap> = postings.into_iter().collect();
    // Start from the smallest posting so every intermediate result stays small.
    sorted.sort_by_key(RoaringTreemap::len);
    let mut iter = sorted.into_iter();
    let mut acc = iter.next()?;
    for posting in iter {
        if acc.is_empty() {
            break;
        }
        acc &= posting;
    }
    Some(acc)
}

/// Rewrites `posting` through `translate`, which receives slices of at most
/// [`MAX_TRANSLATION_BATCH`] addresses and must fill `out` with one result per
/// input (`None` = the row is gone). Survivors go into the returned treemap.
///
/// `max_slice` lets callers use smaller slices; it is clamped to
/// `1..=MAX_TRANSLATION_BATCH`.
///
/// # Errors
/// Whatever `translate` returns; InvalidInput when it returns another number
/// of results than it was given addresses.
pub fn remap_posting<F>(
    posting: &RoaringTreemap,
    max_slice: usize,
    mut translate: F,
) -> Result<RoaringTreemap>
where
    F: FnMut(&[u64], &mut Vec<Option<u64>>) -> Result<()>,
{
    let slice_len = max_slice.clamp(1, MAX_TRANSLATION_BATCH);
    let mut input: Vec<u64> = Vec::with_capacity(slice_len.min(posting.len() as usize));
    let mut output: Vec<Option<u64>> = Vec::with_capacity(input.capacity());
    // Translation may reorder addresses; the assembler appends what comes in
    // ascending order per fragment and inserts the rest.
    let mut assembler = TreemapAssembler::new();
    let mut addrs = posting.iter();
    loop {
        input.clear();
        input.extend(addrs.by_ref().take(slice_len));
        if input.is_empty() {
            break;
        }
        output.clear();
        translate(&input, &mut output)?;
        if output.len() != input.len() {
            return Err(Error::invalid_input(format!(
                "translator returned {} results for {} addresses",
                output.len(),
                input.len()
            )));
        }
        for new in output.iter().flatten() {
            assembler.push(*new);
        }
    }
    let mut remapped = assembler.finish();
    remapped.optimize();
    Ok(remapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn treemap(values: &[u64]) -> RoaringTreemap {
        values.iter().copied().collect()
    }

    #[test]
    fn builder_groups_rows_by_trigram() {
        let mut builder = PostingBuilder::new();
        builder.add("abcd", 1);
        builder.add("xbcd", 2);
        let postings: Vec<_> = builder.finish().collect();
        let bcd = super::super::trigram::pack(*b"bcd");
        let found = postings
            .iter()
            .find(|(t, _)| *t == bcd)
            .map(|(_, p)| p.clone());
        assert_eq!(found, Some(treemap(&[1, 2])));
        assert_eq!(postings.len(), 3);
    }

    #[test]
    fn rows_in_any_order_and_merged_parts_give_the_same_postings() {
        let values = ["abcd", "bcde", "abcd", "cdef", "abcdef"];
        let addresses = [7u64, (3 << 32) + 1, 2, 5, (1 << 32) + 9];
        let mut in_order = PostingBuilder::new();
        let mut sorted: Vec<_> = values.iter().zip(addresses).collect();
        sorted.sort_by_key(|(_, addr)| *addr);
        for (value, addr) in &sorted {
            in_order.add(value, *addr);
        }
        let mut shuffled = PostingBuilder::new();
        let (mut first, mut second) = (PostingBuilder::new(), PostingBuilder::new());
        for (i, (value, addr)) in values.iter().zip(addresses).enumerate() {
            shuffled.add(value, addr);
            // A repeated trigram of one row is added twice.
            shuffled.add(value, addr);
            if i % 2 == 0 { &mut first } else { &mut second }.add(value, addr);
        }
        first.merge(second);
        let expected: Vec<_> = in_order.finish().collect();
        assert_eq!(shuffled.finish().collect::<Vec<_>>(), expected);
        assert_eq!(first.finish().collect::<Vec<_>>(), expected);
        let abc = super::super::trigram::pack(*b"abc");
        let abc_rows = expected
            .iter()
            .find(|(t, _)| *t == abc)
            .map(|(_, p)| p.clone());
        assert_eq!(abc_rows, Some(treemap(&[2, 7, (1 << 32) + 9])));
    }

    #[test]
    fn intersection_of_nothing_is_none() {
        assert_eq!(intersect_all(Vec::new()), None);
        assert_eq!(
            intersect_all(vec![
                treemap(&[1, 2, 3]),
                treemap(&[2, 3, 4]),
                treemap(&[3, 9])
            ]),
            Some(treemap(&[3]))
        );
    }

    #[test]
    fn corrupt_posting_bytes_are_corrupt_errors() {
        let err = deserialize_posting(&[1, 2, 3]).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn remap_walks_dense_posting_in_bounded_slices() {
        let posting: RoaringTreemap = (0..300_000u64).collect();
        let mut max_seen = 0usize;
        let mut calls = 0usize;
        let remapped = remap_posting(&posting, usize::MAX, |batch, out| {
            max_seen = max_seen.max(batch.len());
            calls += 1;
            // Drop every third row, move the rest to fragment 7.
            out.extend(batch.iter().map(|a| (a % 3 != 0).then_some((7 << 32) | a)));
            Ok(())
        })
        .unwrap();
        assert_eq!(max_seen, MAX_TRANSLATION_BATCH);
        assert_eq!(calls, 300_000usize.div_ceil(MAX_TRANSLATION_BATCH));
        let expected: RoaringTreemap = (0..300_000u64)
            .filter(|a| a % 3 != 0)
            .map(|a| (7 << 32) | a)
            .collect();
        assert_eq!(remapped, expected);
    }

    #[test]
    fn translator_returning_wrong_count_is_rejected() {
        let err = remap_posting(&treemap(&[1, 2]), 10, |_, out| {
            out.push(Some(1));
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }));
    }

    proptest! {
        #[test]
        fn remap_equals_elementwise_translation(
            addrs in proptest::collection::btree_set(0u64..5_000, 0..400),
            slice in 1usize..50,
            modulus in 2u64..7,
        ) {
            let posting: RoaringTreemap = addrs.iter().copied().collect();
            // A reordering translator with collisions and deletions.
            let f = |a: u64| (!a.is_multiple_of(modulus)).then_some(10_000 - a / 2);
            let remapped = remap_posting(&posting, slice, |batch, out| {
                assert!(batch.len() <= slice);
                out.extend(batch.iter().map(|a| f(*a)));
                Ok(())
            }).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected: RoaringTreemap = addrs.iter().filter_map(|a| f(*a)).collect();
            prop_assert_eq!(remapped, expected);
        }
    }
}
