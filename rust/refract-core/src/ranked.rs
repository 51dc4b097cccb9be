//! Ranked offset sets: the surviving offsets of one rewritten fragment.
//!
//! A compact remap needs two answers per old offset: "did it survive?" and "how many
//! survivors precede it?" (its rank). [`RankedOffsets`] answers both in one probe and
//! picks, per fragment, the smallest of four layouts:
//!
//! * `Sparse`: the sorted offsets (4 bytes per survivor) — few survivors;
//! * `Dense`: one bit per offset plus a cumulative count per 64-bit word
//!   (12 bytes per 64 offsets) — scattered deletions in a small universe;
//! * `Runs`: maximal runs of consecutive survivors (8 bytes per run) — no or
//!   clustered deletions; a fragment without deletions is a single run;
//! * `Roaring`: a roaring bitmap, kept only when it is several times smaller than
//!   the others, because its rank walks containers linearly.

use roaring::RoaringBitmap;

/// Roaring must be this many times smaller than the best alternative to be chosen,
/// because its rank is linear in the containers (and runs) before the offset.
const ROARING_SIZE_ADVANTAGE: usize = 4;

/// Surviving offsets of one fragment, with rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RankedOffsets {
    /// Sorted surviving offsets.
    Sparse(Box<[u32]>),
    /// Bit per offset (`words`) and survivors before each word (`rank_before`).
    Dense {
        words: Box<[u64]>,
        rank_before: Box<[u32]>,
    },
    /// Run starts and the survivor count at the end of each run (cumulative).
    Runs {
        starts: Box<[u32]>,
        cumulative_end: Box<[u32]>,
    },
    /// A roaring bitmap of survivors.
    Roaring(RoaringBitmap),
}

/// Which layout `RankedOffsets::build` picked; exposed for tests and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankedLayout {
    /// Sorted offsets.
    Sparse,
    /// Words plus per-word ranks.
    Dense,
    /// Runs of consecutive offsets.
    Runs,
    /// A roaring bitmap.
    Roaring,
}

/// Index of the last element whose key is `<= target`, or `None` if every key is
/// larger. `hint` is where the previous search ended: sorted probes gallop forward
/// from it instead of searching the whole slice again.
pub(crate) fn last_le_by<T>(
    slice: &[T],
    key: impl Fn(&T) -> u64,
    target: u64,
    hint: usize,
) -> Option<usize> {
    let len = slice.len();
    let (mut lo, hi) = match slice.get(hint) {
        Some(h) if key(h) <= target => {
            // Gallop: double the step until we pass the target or the end.
            let mut lo = hint;
            let mut step = 1usize;
            loop {
                let next = lo.saturating_add(step);
                match slice.get(next) {
                    Some(x) if key(x) <= target => {
                        lo = next;
                        step = step.saturating_mul(2);
                    }
                    _ => break (lo, next.min(len)),
                }
            }
        }
        // The target lies before the hint (or the hint is past the end).
        _ => {
            let end = hint.min(len);
            let p = slice[..end].partition_point(|x| key(x) <= target);
            return p.checked_sub(1);
        }
    };
    // Invariant: key(slice[lo]) <= target, and slice[hi] (if any) > target.
    let tail = &slice[lo + 1..hi];
    lo += tail.partition_point(|x| key(x) <= target);
    Some(lo)
}

impl RankedOffsets {
    /// Builds the smallest layout for `survivors`. Callers guarantee every survivor is
    /// below a physical row count `<= u32::MAX`, so counts fit `u32`.
    pub(crate) fn build(survivors: &RoaringBitmap) -> Self {
        let count = survivors.len() as usize;
        let Some(max) = survivors.max() else {
            return RankedOffsets::Sparse(Box::new([]));
        };
        // One contiguous run of two or more survivors (a fragment that lost no
        // rows): runs are the smallest layout, known without visiting the rows.
        if count >= 2
            && survivors
                .min()
                .is_some_and(|min| (max - min) as usize + 1 == count)
        {
            return RankedOffsets::Runs {
                starts: Box::new([max + 1 - count as u32]),
                cumulative_end: Box::new([count as u32]),
            };
        }
        let runs = count_runs(survivors);
        let sparse_bytes = count * 4;
        let dense_bytes = (max as usize / 64 + 1) * 12;
        let runs_bytes = runs * 8;
        let best = sparse_bytes.min(dense_bytes).min(runs_bytes);
        let roaring_bytes = survivors.serialized_size() + 16 * survivors_containers(survivors);
        if roaring_bytes.saturating_mul(ROARING_SIZE_ADVANTAGE) < best {
            return RankedOffsets::Roaring(survivors.clone());
        }
        if best == runs_bytes {
            Self::build_runs(survivors, runs)
        } else if best == sparse_bytes {
            RankedOffsets::Sparse(survivors.iter().collect())
        } else {
            Self::build_dense(survivors, max)
        }
    }

    fn build_runs(survivors: &RoaringBitmap, runs: usize) -> Self {
        let mut starts = Vec::with_capacity(runs);
        let mut cumulative_end = Vec::with_capacity(runs);
        let mut prev: Option<u32> = None;
        let mut seen = 0u32;
        for offset in survivors.iter() {
            if prev.is_none_or(|p| p.checked_add(1) != Some(offset)) {
                if prev.is_some() {
                    cumulative_end.push(seen);
                }
                starts.push(offset);
            }
            prev = Some(offset);
            // Callers pass offsets < physical_rows <= u32::MAX, so the count fits u32.
            seen = seen.wrapping_add(1);
        }
        cumulative_end.push(seen);
        RankedOffsets::Runs {
            starts: starts.into_boxed_slice(),
            cumulative_end: cumulative_end.into_boxed_slice(),
        }
    }

    fn build_dense(survivors: &RoaringBitmap, max: u32) -> Self {
        let n_words = max as usize / 64 + 1;
        let mut words = vec![0u64; n_words];
        for offset in survivors.iter() {
            // offset <= max, so offset / 64 < n_words.
            words[offset as usize / 64] |= 1u64 << (offset % 64);
        }
        let mut rank_before = Vec::with_capacity(n_words);
        let mut acc = 0u32;
        for w in &words {
            rank_before.push(acc);
            acc = acc.wrapping_add(w.count_ones());
        }
        RankedOffsets::Dense {
            words: words.into_boxed_slice(),
            rank_before: rank_before.into_boxed_slice(),
        }
    }

    /// The layout in use.
    pub(crate) fn layout(&self) -> RankedLayout {
        match self {
            RankedOffsets::Sparse(_) => RankedLayout::Sparse,
            RankedOffsets::Dense { .. } => RankedLayout::Dense,
            RankedOffsets::Runs { .. } => RankedLayout::Runs,
            RankedOffsets::Roaring(_) => RankedLayout::Roaring,
        }
    }

    /// 0-based rank of `offset` among the survivors, or `None` if it did not survive.
    /// `hint` carries search state between calls (start with 0); sorted probes are
    /// then amortised O(1) instead of a binary search each.
    #[inline]
    pub(crate) fn rank(&self, offset: u32, hint: &mut usize) -> Option<u64> {
        match self {
            RankedOffsets::Sparse(sorted) => {
                let i = last_le_by(sorted, |x| u64::from(*x), u64::from(offset), *hint)?;
                *hint = i;
                (sorted[i] == offset).then_some(i as u64)
            }
            RankedOffsets::Dense { words, rank_before } => {
                let w = offset as usize / 64;
                let word = *words.get(w)?;
                let bit = offset % 64;
                if word & (1u64 << bit) == 0 {
                    return None;
                }
                let below = word & ((1u64 << bit) - 1);
                // rank_before has one entry per word.
                Some(u64::from(rank_before[w]) + u64::from(below.count_ones()))
            }
            RankedOffsets::Runs {
                starts,
                cumulative_end,
            } => {
                let i = last_le_by(starts, |x| u64::from(*x), u64::from(offset), *hint)?;
                *hint = i;
                let start = starts[i];
                // Both slices have one entry per run.
                let end_rank = u64::from(cumulative_end[i]);
                let begin_rank = match i.checked_sub(1) {
                    Some(p) => u64::from(cumulative_end[p]),
                    None => 0,
                };
                let within = u64::from(offset - start);
                // Cumulative ends never decrease, so the subtraction cannot underflow.
                (within < end_rank - begin_rank).then_some(begin_rank + within)
            }
            RankedOffsets::Roaring(bitmap) => bitmap
                .contains(offset)
                .then(|| bitmap.rank(offset).saturating_sub(1)),
        }
    }

    /// Number of survivors.
    pub(crate) fn len(&self) -> u64 {
        match self {
            RankedOffsets::Sparse(sorted) => sorted.len() as u64,
            RankedOffsets::Dense { words, rank_before } => match (words.last(), rank_before.last())
            {
                (Some(w), Some(r)) => u64::from(*r) + u64::from(w.count_ones()),
                _ => 0,
            },
            RankedOffsets::Runs { cumulative_end, .. } => {
                cumulative_end.last().map_or(0, |c| u64::from(*c))
            }
            RankedOffsets::Roaring(bitmap) => bitmap.len(),
        }
    }

    /// Heap bytes held (the enum itself is counted by its owner).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            RankedOffsets::Sparse(sorted) => sorted.len() * 4,
            RankedOffsets::Dense { words, rank_before } => words.len() * 8 + rank_before.len() * 4,
            RankedOffsets::Runs {
                starts,
                cumulative_end,
            } => (starts.len() + cumulative_end.len()) * 4,
            RankedOffsets::Roaring(bitmap) => {
                bitmap.serialized_size() + 16 * survivors_containers(bitmap)
            }
        }
    }
}

/// Number of maximal runs of consecutive values.
fn count_runs(bitmap: &RoaringBitmap) -> usize {
    let mut runs = 0usize;
    let mut prev: Option<u32> = None;
    for v in bitmap.iter() {
        if prev.is_none_or(|p| p.checked_add(1) != Some(v)) {
            runs += 1;
        }
        prev = Some(v);
    }
    runs
}

/// Number of roaring containers (one per distinct high 16 bits), for size estimates.
fn survivors_containers(bitmap: &RoaringBitmap) -> usize {
    bitmap.statistics().n_containers as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    fn ranks_all(r: &RankedOffsets, universe: u32) -> Vec<Option<u64>> {
        let mut hint = 0;
        (0..universe).map(|o| r.rank(o, &mut hint)).collect()
    }

    fn expected(bitmap: &RoaringBitmap, universe: u32) -> Vec<Option<u64>> {
        (0..universe)
            .map(|o| bitmap.contains(o).then(|| bitmap.rank(o) - 1))
            .collect()
    }

    #[rstest]
    #[case::empty(vec![], RankedLayout::Sparse)]
    #[case::few(vec![5, 900, 70_000], RankedLayout::Sparse)]
    #[case::one_run((0..10_000).collect(), RankedLayout::Runs)]
    #[case::scattered((0..10_000).filter(|o| o % 3 != 0).collect(), RankedLayout::Dense)]
    #[case::clustered((0..10_000).filter(|o| (o / 1000) % 2 == 0).collect(), RankedLayout::Runs)]
    fn picks_smallest_layout(#[case] offsets: Vec<u32>, #[case] layout: RankedLayout) {
        let bitmap: RoaringBitmap = offsets.iter().copied().collect();
        let r = RankedOffsets::build(&bitmap);
        assert_eq!(r.layout(), layout);
        assert_eq!(r.len(), offsets.len() as u64);
        assert_eq!(ranks_all(&r, 80_000), expected(&bitmap, 80_000));
    }

    #[rstest]
    #[case::from_zero(0..1_000)]
    #[case::shifted(37..70_000)]
    #[case::two(5..7)]
    fn contiguous_survivors_are_one_run(#[case] offsets: std::ops::Range<u32>) {
        let bitmap: RoaringBitmap = offsets.clone().collect();
        let r = RankedOffsets::build(&bitmap);
        assert_eq!(r.layout(), RankedLayout::Runs);
        assert_eq!(
            r,
            RankedOffsets::build_runs(&bitmap, 1),
            "the shortcut builds what the general path builds"
        );
        assert_eq!(ranks_all(&r, 80_000), expected(&bitmap, 80_000));
    }

    #[test]
    fn roaring_wins_for_two_far_apart_dense_clusters() {
        let bitmap: RoaringBitmap = (0..65_536u32)
            .step_by(2)
            .chain((3_000_000_000..3_000_065_536u32).step_by(2))
            .collect();
        let r = RankedOffsets::build(&bitmap);
        assert_eq!(r.layout(), RankedLayout::Roaring);
        let mut hint = 0;
        assert_eq!(r.rank(0, &mut hint), Some(0));
        assert_eq!(r.rank(1, &mut hint), None);
        assert_eq!(r.rank(3_000_000_002, &mut hint), Some(32_769));
        assert_eq!(r.len(), 65_536);
    }

    #[test]
    fn hint_survives_backward_probes() {
        let bitmap: RoaringBitmap = [1u32, 4, 9, 16, 25, 36].into_iter().collect();
        let r = RankedOffsets::build(&bitmap);
        let mut hint = 0;
        assert_eq!(r.rank(36, &mut hint), Some(5));
        assert_eq!(r.rank(1, &mut hint), Some(0));
        assert_eq!(r.rank(25, &mut hint), Some(4));
        assert_eq!(r.rank(0, &mut hint), None);
        assert_eq!(r.rank(37, &mut hint), None);
    }

    #[test]
    fn last_le_by_matches_partition_point() {
        let v: Vec<u64> = vec![0, 0, 3, 7, 7, 9, 20];
        for hint in 0..=v.len() + 1 {
            for t in 0..25u64 {
                let want = v.partition_point(|x| *x <= t).checked_sub(1);
                assert_eq!(last_le_by(&v, |x| *x, t, hint), want, "hint {hint} t {t}");
            }
        }
    }

    proptest! {
        #[test]
        fn every_layout_ranks_like_roaring(
            offsets in proptest::collection::btree_set(0u32..5000, 0..3000),
            probes in proptest::collection::vec(0u32..5100, 0..200),
        ) {
            let bitmap: RoaringBitmap = offsets.iter().copied().collect();
            let max = bitmap.max();
            let candidates = [
                Some(RankedOffsets::Sparse(bitmap.iter().collect())),
                max.map(|m| RankedOffsets::build_dense(&bitmap, m)),
                max.map(|_| RankedOffsets::build_runs(&bitmap, count_runs(&bitmap))),
                Some(RankedOffsets::Roaring(bitmap.clone())),
                Some(RankedOffsets::build(&bitmap)),
            ];
            for r in candidates.iter().flatten() {
                prop_assert_eq!(r.len(), bitmap.len());
                let mut hint = 0;
                for &p in &probes {
                    let want = bitmap.contains(p).then(|| bitmap.rank(p) - 1);
                    prop_assert_eq!(r.rank(p, &mut hint), want, "{:?} probe {}", r.layout(), p);
                }
            }
        }
    }
}
