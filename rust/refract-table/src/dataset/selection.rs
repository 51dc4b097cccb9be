//! Row selections: the offsets a scan reads in some fragments (the rows an
//! index returned), read as a few coalesced row ranges instead of row by row.

use std::collections::HashMap;
use std::ops::Range;

use roaring::{RoaringBitmap, RoaringTreemap};

/// Unselected rows a coalesced range may span between two selected runs:
/// reading a short gap costs less than another ranged read (another request
/// and another page decode per column).
pub const COALESCE_GAP_ROWS: u32 = 64;

/// The offsets to read in some fragments; see [`crate::dataset::Scanner::select_rows`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowSelection {
    fragments: HashMap<u64, RoaringBitmap>,
}

impl RowSelection {
    /// An empty selection (restricts no fragment).
    pub fn new() -> Self {
        Self::default()
    }

    /// Selects the rows at `addresses` (`fragment_id << 32 | offset`); each
    /// fragment with at least one address gets an entry.
    pub fn from_addresses(addresses: &RoaringTreemap) -> Self {
        let fragments = addresses
            .bitmaps()
            .map(|(fragment, offsets)| (u64::from(fragment), offsets.clone()))
            .collect();
        Self { fragments }
    }

    /// Restricts `fragment_id` to `offsets` (an empty bitmap reads nothing of it).
    pub fn insert(&mut self, fragment_id: u64, offsets: RoaringBitmap) {
        self.fragments.insert(fragment_id, offsets);
    }

    /// The selected offsets of `fragment_id`, `None` when it is not restricted.
    pub fn get(&self, fragment_id: u64) -> Option<&RoaringBitmap> {
        self.fragments.get(&fragment_id)
    }

    /// Restricted fragments (any order).
    pub fn fragment_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.fragments.keys().copied()
    }

    /// Selected rows over every fragment.
    pub fn len(&self) -> u64 {
        self.fragments.values().map(RoaringBitmap::len).sum()
    }

    /// True when no row is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ascending, disjoint row ranges that read every offset of `offsets`:
/// runs of consecutive offsets, merged when at most `gap` unselected rows lie
/// between them.
pub fn coalesced_ranges(offsets: &RoaringBitmap, gap: u32) -> Vec<Range<u64>> {
    let mut ranges: Vec<Range<u64>> = Vec::new();
    for offset in offsets {
        let offset = u64::from(offset);
        match ranges.last_mut() {
            Some(last) if offset <= last.end + u64::from(gap) => last.end = offset + 1,
            _ => ranges.push(offset..offset + 1),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::empty(vec![], 4, vec![])]
    #[case::one(vec![7], 4, vec![7..8])]
    #[case::run(vec![3, 4, 5], 0, vec![3..6])]
    #[case::gap_within(vec![1, 6], 4, vec![1..7])]
    #[case::gap_beyond(vec![1, 7], 4, vec![1..2, 7..8])]
    #[case::mixed(vec![0, 1, 2, 10, 20, 21, 40], 7, vec![0..11, 20..22, 40..41])]
    fn coalesces_runs_and_short_gaps(
        #[case] offsets: Vec<u32>,
        #[case] gap: u32,
        #[case] expected: Vec<Range<u64>>,
    ) {
        let bitmap: RoaringBitmap = offsets.into_iter().collect();
        assert_eq!(coalesced_ranges(&bitmap, gap), expected);
    }

    #[test]
    fn splits_addresses_by_fragment() {
        let addresses: RoaringTreemap = [(2u64 << 32) | 5, (2 << 32) | 9, (7 << 32) | 1]
            .into_iter()
            .collect();
        let selection = RowSelection::from_addresses(&addresses);
        let mut ids: Vec<u64> = selection.fragment_ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![2, 7]);
        assert_eq!(
            selection.get(2).unwrap().iter().collect::<Vec<_>>(),
            vec![5, 9]
        );
        assert_eq!(selection.get(3), None);
        assert_eq!(selection.len(), 3);
    }
}
