//! The quality reference for budgeted compaction (docs/compaction.md, invariant 5):
//! an exhaustive search over sequences of *moves*.
//!
//! A move rewrites a run of adjacent below-target candidates of one bin (same
//! coverage key) that fits the source budget into balanced outputs,
//! `max(1, floor(live / target))` pieces (none when the run has no live rows). A run
//! of one fragment is a move only when it has deletions to materialize. The
//! reference is the fewest below-target fragments (`live_rows < target`) of any
//! layout reachable from the start by moves.
//!
//! A move fits the budget by the bytes known when planning: a start fragment
//! weighs its recorded bytes, a fragment merged by a move weighs the sum of
//! what its sources weighed, and a fragment rewritten alone (materializing
//! its deletions) weighs its estimated live bytes. So a move fits when the
//! recorded bytes of the start fragments it covers fit (less the deleted
//! bytes of those rewritten alone first). A real merged file is no heavier
//! (it drops the deleted rows and its sources' per-file overhead), but how
//! much lighter is known only once it is written.
//!
//! Fragments that are not below-target candidates never change under moves and no
//! move crosses them, so the layout splits into independent segments between them;
//! each segment is searched on its own, memoized on its sizes.

use std::collections::HashMap;

use super::balance::Balance;
use super::budget::{SourceBudget, SourceUse};
use super::candidates::{Candidacy, CandidateRules, FragmentStats};
use super::options::CompactionOptions;
use super::simulate::simulate_run;
use super::task_planner::TaskPlan;

/// Fewest below-target fragments reachable from `start` by moves under `options`
/// (which must have no `max_bytes_per_file`: moves are balanced by rows only).
pub(super) fn reference_below_target(
    start: &[FragmentStats],
    options: &CompactionOptions,
) -> usize {
    assert_eq!(
        options.max_bytes_per_file, None,
        "the reference balances by rows"
    );
    let search = Search::new(options);
    let rules = CandidateRules::new(options);
    let mut best = 0;
    let mut segment = Vec::new();
    for fragment in start {
        if search.is_movable(fragment) && rules.candidacy(fragment) != Candidacy::None {
            segment.push(fragment.clone());
        } else {
            best += search.best(&segment);
            best += usize::from(fragment.live_rows < search.target);
            segment.clear();
        }
    }
    best + search.best(&segment)
}

/// Segment search state: the rules without exclusions (segments hold no excluded
/// fragment, and renumbered ids must not hit an excluded id) and a memo.
struct Search {
    rules: CandidateRules,
    budget: SourceBudget,
    target: u64,
    memo: std::cell::RefCell<HashMap<Vec<SegmentKey>, usize>>,
}

/// What a move depends on: (physical rows, live rows, bytes, coverage key).
type SegmentKey = (u64, u64, u64, u64);

impl Search {
    fn new(options: &CompactionOptions) -> Self {
        let without_exclusions = CompactionOptions {
            excluded_fragment_ids: Vec::new(),
            ..options.clone()
        };
        Self {
            rules: CandidateRules::new(&without_exclusions),
            budget: SourceBudget::new(options),
            target: options.target_rows_per_fragment,
            memo: Default::default(),
        }
    }

    /// A below-target candidate (exclusions are checked by the caller).
    fn is_movable(&self, fragment: &FragmentStats) -> bool {
        fragment.live_rows < self.target && self.rules.candidacy(fragment) != Candidacy::None
    }

    /// Fewest below-target fragments reachable from a layout of candidates.
    fn best(&self, segment: &[FragmentStats]) -> usize {
        if segment.is_empty() {
            return 0;
        }
        let key: Vec<SegmentKey> = segment
            .iter()
            .map(|f| (f.physical_rows, f.live_rows, f.bytes, f.coverage_key))
            .collect();
        if let Some(&known) = self.memo.borrow().get(&key) {
            return known;
        }
        let segment: Vec<FragmentStats> = segment
            .iter()
            .enumerate()
            .map(|(id, f)| FragmentStats {
                id: id as u64,
                ..f.clone()
            })
            .collect();
        let mut best = segment.len();
        for start in 0..segment.len() {
            let key = segment[start].coverage_key;
            let mut used = SourceUse::default();
            for end in start..segment.len() {
                let fragment = &segment[end];
                used = used.plus(SourceUse::of(fragment));
                if fragment.coverage_key != key || !self.budget.admits(used) {
                    break;
                }
                let alone_and_clean =
                    end == start && !self.rules.has_deletions_to_materialize(fragment);
                if !alone_and_clean {
                    best = best.min(self.after_move(&segment, start..end + 1, used));
                }
            }
        }
        self.memo.borrow_mut().insert(key, best);
        best
    }

    /// The best count after rewriting `run` (reading `sources`) into balanced
    /// outputs: outputs at or above target end the segment there. A merged
    /// output is charged the bytes of its sources (see the module docs).
    fn after_move(
        &self,
        segment: &[FragmentStats],
        run: std::ops::Range<usize>,
        sources: SourceUse,
    ) -> usize {
        let merged = run.len() >= 2;
        let at = run.start;
        let plan = TaskPlan {
            fragment_ids: segment[run].iter().map(|f| f.id).collect(),
            output_rows: Balance::for_task(sources.rows, 0, self.target, None)
                .sizes()
                .collect(),
            partial: false,
        };
        let outputs = plan.output_rows.len();
        // A contiguous run of the segment with conserved rows: the simulator accepts it.
        let mut next = simulate_run(segment, &[plan]).expect("a move is a valid plan");
        if merged && outputs == 1 {
            // Only a single output can be below target and move again.
            next[at].bytes = sources.bytes;
        }
        let mut best = 0;
        let mut rest = next.as_slice();
        while let Some(split) = rest.iter().position(|f| !self.is_movable(f)) {
            best += self.best(&rest[..split]) + usize::from(rest[split].live_rows < self.target);
            rest = &rest[split + 1..];
        }
        best + self.best(rest)
    }
}
