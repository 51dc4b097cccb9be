//! Bins (maximal runs of adjacent candidates) and their split into tasks.
//!
//! A bin is a maximal run of adjacent candidates with the same coverage key;
//! non-candidates, excluded fragments and key changes end it. A bin that is one
//! fragment without deletions to materialize is a no-op and is not yielded.
//!
//! Large bins are split into tasks *losslessly*: a cut is made at a fragment
//! boundary only when both sides hold at least `target` live rows and
//! `floor(a/T) + floor(b/T) == floor((a+b)/T)`, so the tasks together write exactly
//! the `floor(L/T)` outputs one task over the whole bin would write. Every output
//! of the bin then has between `T` and `T + (L mod T)` rows: no stranded tail, and
//! no output larger than the bin's slack allows. To stay close to the bin's even
//! split, a task ends at the first such boundary that is at or past the ideal end
//! (in the whole bin's balance) of the outputs it holds. A bin without such a
//! boundary is one task.

use std::ops::Range;

use super::balance::Balance;
use super::candidates::{Candidacy, CandidateRules, FragmentStats};

/// Iterator over the non-trivial bins of a fragment list, as index ranges.
pub struct Bins<'a> {
    fragments: &'a [FragmentStats],
    rules: &'a CandidateRules,
    next: usize,
}

impl<'a> Bins<'a> {
    /// Bins of `fragments` (manifest order) under `rules`.
    pub fn new(fragments: &'a [FragmentStats], rules: &'a CandidateRules) -> Self {
        Self {
            fragments,
            rules,
            next: 0,
        }
    }
}

impl Iterator for Bins<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        loop {
            let rest = self.fragments.get(self.next..)?;
            let offset = rest
                .iter()
                .position(|f| self.rules.candidacy(f) != Candidacy::None)?;
            let start = self.next + offset;
            let key = self.fragments[start].coverage_key; // start < len: found above
            let len = self.fragments[start..]
                .iter()
                .position(|f| f.coverage_key != key || self.rules.candidacy(f) == Candidacy::None)
                .unwrap_or(self.fragments.len() - start);
            self.next = start + len;
            let lone_small =
                len == 1 && self.rules.candidacy(&self.fragments[start]) != Candidacy::Itself;
            if !lone_small {
                return Some(start..start + len);
            }
        }
    }
}

/// Iterator over the tasks of one bin, as index ranges into the fragment list.
pub struct TaskSplits<'a> {
    fragments: &'a [FragmentStats],
    end: usize,
    next: usize,
    /// Live rows before `next`, counted from the bin start.
    rows_before: u64,
    bin_rows: u64,
    /// The even split of the whole bin; task ends follow its boundaries.
    bin_balance: Balance,
    target: u64,
}

impl<'a> TaskSplits<'a> {
    /// Splits `bin` (a range of `fragments`) into tasks for `target` rows.
    pub fn new(fragments: &'a [FragmentStats], bin: Range<usize>, target: u64) -> Self {
        // Clamp so a range outside the list yields nothing instead of panicking.
        let end = bin.end.min(fragments.len());
        let start = bin.start.min(end);
        let bin_rows = fragments[start..end].iter().map(|f| f.live_rows).sum();
        let target = target.max(1);
        Self {
            fragments,
            end,
            next: start,
            rows_before: 0,
            bin_rows,
            bin_balance: Balance::for_task(bin_rows, 0, target, None),
            target,
        }
    }
}

impl Iterator for TaskSplits<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.next >= self.end {
            return None;
        }
        let start = self.next;
        let mut rows = self.rows_before;
        for index in start..self.end {
            rows += self.fragments[index].live_rows; // index < end <= len
            let is_last = index + 1 == self.end;
            if is_last || self.is_cut(rows) {
                self.next = index + 1;
                self.rows_before = rows;
                return Some(start..index + 1);
            }
        }
        None // unreachable: the loop returns at the last index
    }
}

impl TaskSplits<'_> {
    /// Cut after `rows` rows of the bin? Lossless, and at or past the ideal end of
    /// the outputs before it (lossless cuts keep `floor(rows / T)` outputs before).
    fn is_cut(&self, rows: u64) -> bool {
        lossless_cut(self.rows_before, rows, self.bin_rows, self.target)
            && rows >= self.bin_balance.end(rows / self.target)
    }
}

/// May `[a, total)` be cut at `b` without losing an output or leaving a side
/// below target?
pub fn lossless_cut(a: u64, b: u64, total: u64, target: u64) -> bool {
    let (Some(left), Some(right)) = (b.checked_sub(a), total.checked_sub(b)) else {
        return false;
    };
    let target = target.max(1);
    left >= target && right >= target && left / target + right / target == (left + right) / target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::options::CompactionOptions;
    use rstest::rstest;

    fn layout(rows: &[u64]) -> Vec<FragmentStats> {
        rows.iter()
            .enumerate()
            .map(|(i, &r)| FragmentStats {
                id: i as u64,
                physical_rows: r,
                live_rows: r,
                bytes: r,
                coverage_key: 0,
            })
            .collect()
    }

    fn rules(target: u64) -> CandidateRules {
        CandidateRules::new(&CompactionOptions {
            target_rows_per_fragment: target,
            ..Default::default()
        })
    }

    #[rstest]
    #[case::all_small(&[10, 10, 10], vec![0..3])]
    #[case::lone_small_between_full(&[100, 10, 100], vec![])]
    #[case::two_bins(&[10, 10, 100, 10, 10], vec![0..2, 3..5])]
    #[case::lance_f3(&[3000, 3000, 3000, 1000], vec![])]
    #[case::empty(&[], vec![])]
    fn bins_by_size(#[case] rows: &[u64], #[case] expected: Vec<Range<usize>>) {
        let target = if rows.first() == Some(&3000) {
            3000
        } else {
            100
        };
        let fragments = layout(rows);
        let r = rules(target);
        assert_eq!(Bins::new(&fragments, &r).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn coverage_keys_and_exclusions_break_bins() {
        let mut fragments = layout(&[10, 10, 10, 10, 10, 10]);
        fragments[2].coverage_key = 5;
        fragments[3].coverage_key = 5;
        let options = CompactionOptions {
            target_rows_per_fragment: 100,
            excluded_fragment_ids: vec![4],
            ..Default::default()
        };
        let r = CandidateRules::new(&options);
        // [0,1] key 0 | [2,3] key 5 | 4 excluded | [5] lone -> no-op
        assert_eq!(
            Bins::new(&fragments, &r).collect::<Vec<_>>(),
            vec![0..2, 2..4]
        );
    }

    #[test]
    fn lone_fragment_with_deletions_is_a_bin() {
        let mut fragments = layout(&[100, 100, 100]);
        fragments[1].live_rows = 50;
        let r = rules(100);
        assert_eq!(Bins::new(&fragments, &r).collect::<Vec<_>>(), vec![1..2]);
    }

    #[rstest]
    // Lance F.1 sizes at target 500. Lance cuts 0..2 | 2..5 | 5..8 and writes 3
    // outputs; cutting 2..5 | 5..8 (800 | 700) would lose one, so Refract keeps 2..8
    // whole and writes 4 outputs of 500.
    #[case::lance_f1(&[100, 400, 200, 200, 400, 300, 300, 100], 500, vec![0..2, 2..8])]
    #[case::seed_004(&[100, 100, 100, 100, 100], 250, vec![0..5])]
    #[case::ten_by_200(&[200; 10], 500, vec![0..5, 5..10])]
    #[case::sixty_by_ten(&[60; 10], 100, vec![0..5, 5..10])]
    #[case::lossy_cut_refused(&[150, 150], 100, vec![0..2])]
    fn lossless_task_splits(
        #[case] rows: &[u64],
        #[case] target: u64,
        #[case] expected: Vec<Range<usize>>,
    ) {
        let fragments = layout(rows);
        let tasks: Vec<_> = TaskSplits::new(&fragments, 0..fragments.len(), target).collect();
        assert_eq!(tasks, expected);
        let outputs: u64 = tasks
            .iter()
            .map(|t| {
                fragments[t.clone()]
                    .iter()
                    .map(|f| f.live_rows)
                    .sum::<u64>()
                    / target
            })
            .sum();
        assert_eq!(outputs, rows.iter().sum::<u64>() / target);
    }
}
