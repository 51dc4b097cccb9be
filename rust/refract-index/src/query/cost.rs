//! Choosing how to read the fragments an index covers: through the index's
//! answer (the matched rows, read as coalesced row ranges) or by scanning
//! them. Both paths read the same columns, so work is counted in rows read,
//! plus a fixed row-equivalent for every fragment opened and every ranged
//! read issued. The index path is taken only when it costs clearly less than
//! the scan: an index never makes a query slower than a scan.

use refract_table::dataset::{coalesced_ranges, COALESCE_GAP_ROWS};
use refract_table::Dataset;
use roaring::{RoaringBitmap, RoaringTreemap};
use serde::Serialize;

/// Work of opening one fragment beyond reading its rows (reader and
/// deletion-vector lookups, scheduling its reads), in rows.
pub const FRAGMENT_COST_ROWS: u64 = 1_024;
/// Work of one ranged read beyond its rows (a request and a page decode per
/// column), in rows.
pub const RANGE_COST_ROWS: u64 = 256;
/// The index path is taken when its cost is at most this fraction of the
/// scan's: near a tie the scan wins, since the index was searched already and
/// the model is an estimate.
pub const INDEX_COST_MARGIN: f64 = 0.8;

/// What one way of reading costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Work {
    /// Fragments opened.
    pub fragments: u64,
    /// Ranged reads issued (a scan reads each fragment in one range).
    pub ranges: u64,
    /// Rows read (selected or not).
    pub rows: u64,
}

impl Work {
    /// Rows read plus the row-equivalents of the fragments and ranges.
    pub fn cost(&self) -> u64 {
        self.rows
            .saturating_add(self.fragments.saturating_mul(FRAGMENT_COST_ROWS))
            .saturating_add(self.ranges.saturating_mul(RANGE_COST_ROWS))
    }

    /// What a scan of the live fragments in `covered` reads.
    pub fn scan(dataset: &Dataset, covered: &RoaringBitmap) -> Self {
        let mut work = Work::default();
        for fragment in dataset.fragments() {
            let live = fragment.live_rows();
            if live == 0 || !u32::try_from(fragment.id).is_ok_and(|id| covered.contains(id)) {
                continue;
            }
            work.fragments += 1;
            work.ranges += 1;
            work.rows += live;
        }
        work
    }

    /// What reading the live rows at `addresses` costs: each fragment holding
    /// one reads the coalesced ranges of its rows (see
    /// [`refract_table::Scanner::select_rows`]).
    pub fn index(addresses: &RoaringTreemap) -> Self {
        let mut work = Work::default();
        for (_, offsets) in addresses.bitmaps() {
            let ranges = coalesced_ranges(offsets, COALESCE_GAP_ROWS);
            work.fragments += 1;
            work.ranges += ranges.len() as u64;
            work.rows += ranges.iter().map(|r| r.end - r.start).sum::<u64>();
        }
        work
    }

    /// The cheapest the index path could be for `rows` matches in fragments
    /// like the ones `scan` reads: the rows packed contiguously into as few
    /// fragments as can hold them, one range each.
    pub fn best_case(rows: u64, scan: &Work) -> Self {
        let per_fragment = (scan.rows / scan.fragments.max(1)).max(1);
        let fragments = rows.div_ceil(per_fragment).max(1);
        Work {
            fragments,
            ranges: fragments,
            rows,
        }
    }
}

impl std::iter::Sum for Work {
    fn sum<I: Iterator<Item = Work>>(iter: I) -> Self {
        iter.fold(Work::default(), |a, b| Work {
            fragments: a.fragments.saturating_add(b.fragments),
            ranges: a.ranges.saturating_add(b.ranges),
            rows: a.rows.saturating_add(b.rows),
        })
    }
}

/// True when work costing `index` should be read through the index rather
/// than scanning work costing `scan`.
pub fn index_wins(index: u64, scan: u64) -> bool {
    (index as f64) <= INDEX_COST_MARGIN * scan as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(fragment: u64, offsets: impl IntoIterator<Item = u32>) -> RoaringTreemap {
        offsets
            .into_iter()
            .map(|o| (fragment << 32) | u64::from(o))
            .collect()
    }

    #[test]
    fn index_work_counts_coalesced_ranges() {
        // A run, a row within the gap of it, and a far row; then another fragment.
        let mut addrs = addresses(3, (100..200).chain([210, 5_000]));
        addrs |= addresses(9, [7]);
        let work = Work::index(&addrs);
        assert_eq!(
            work,
            Work {
                fragments: 2,
                ranges: 3,
                rows: 111 + 1 + 1
            }
        );
        assert_eq!(
            work.cost(),
            113 + 2 * FRAGMENT_COST_ROWS + 3 * RANGE_COST_ROWS
        );
    }

    #[test]
    fn point_lookups_win_and_scattered_majorities_lose() {
        let scan = Work {
            fragments: 1_000,
            ranges: 1_000,
            rows: 1_000_000,
        }
        .cost();
        let scan_work = Work {
            fragments: 1_000,
            ranges: 1_000,
            rows: 1_000_000,
        };
        assert_eq!(scan_work.cost(), scan);
        assert!(index_wins(Work::best_case(1, &scan_work).cost(), scan));
        // Even packed contiguously, 90% of the rows cost more than 0.8 of the scan.
        assert_eq!(
            Work::best_case(900_000, &scan_work),
            Work {
                fragments: 900,
                ranges: 900,
                rows: 900_000
            }
        );
        assert!(!index_wins(
            Work::best_case(900_000, &scan_work).cost(),
            scan
        ));
        // Every 10th row of every fragment: each fragment is read almost whole.
        let mut tenth = RoaringTreemap::new();
        for fragment in 0..1_000u64 {
            tenth |= addresses(fragment, (0..1_000).step_by(10));
        }
        assert!(!index_wins(Work::index(&tenth).cost(), scan));
        // A contiguous tenth of the table wins.
        let mut contiguous = RoaringTreemap::new();
        for fragment in 400..500u64 {
            contiguous |= addresses(fragment, 0..1_000);
        }
        assert!(index_wins(Work::index(&contiguous).cost(), scan));
    }
}
