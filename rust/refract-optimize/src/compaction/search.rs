//! The partition search: per-bin planning that reaches the quality reference.
//!
//! Under a source budget, moves (`moves`, docs/compaction.md invariant 5) turn
//! a bin into a partition of contiguous *groups*: a group of two or more
//! fragments is merged by chained moves into one fragment (when it has fewer
//! than `target` rows) or into its balanced outputs (then it leaves the
//! candidate set). Unlike the reference, a group may also hold fragments at or
//! above target that have deletions to materialize (each a piece of its own).
//! A group is *feasible* when a fresh budget admits its live rows, its bytes
//! and the fewest pieces of fewer than `target` rows it splits into (at least
//! two): those pieces can be merged first, as many fragments at a time as fit,
//! and then read together by one move. Its bytes are the recorded bytes of its
//! sources, the measure of the budget check (a fragment that materializes
//! alone first weighs its live bytes): a merged piece is charged what its
//! sources weighed, which a real file never exceeds.
//!
//! [`best_partition`] is a dynamic program over feasible groups that minimizes
//! the below-target fragments left, then the rows rewritten (ties: the shorter
//! last group). A bin is planned by its best partition when that leaves fewer
//! below-target fragments than the greedy cuts of `task_planner` reach at their fixed
//! point on the bin alone (they can do better: their carried remainders cut
//! outputs inside a fragment); otherwise the greedy cuts run as that simulation
//! ran them, from a fresh budget, or wait for the next run. Either way the value
//! compared never grows from one run to the next (groups not yet written stay
//! feasible; the greedy path is the simulated one), so the fixed point keeps it.

use std::ops::Range;

use super::budget::{Sizing, SourceBudget, SourceUse};
use super::candidates::{CandidateRules, FragmentStats};
use super::moves::balanced_cut;
use super::options::CompactionOptions;
use super::simulate::simulate_run;
use super::task_planner::{Flow, Planner, TaskPlan};

/// Largest bin the search plans. Its greedy simulation is quadratic in the bin
/// under the smallest budgets (two fragments per run: about half as many rounds
/// as fragments); `compaction_bench` measures planning at this size.
pub(super) const SEARCH_MAX_BIN: usize = 4096;

/// Most fragments in one group of the search, which keeps the dynamic program
/// linear in the bin when the budget does not bound groups (a budget that
/// admits whole bins of small fragments leaves them to the greedy cuts' tasks).
pub(super) const SEARCH_MAX_GROUP: usize = 64;

/// A bin's best partition: the below-target fragments it leaves and the steps
/// that write it (bin-relative ranges, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Partition {
    /// Below-target fragments of the bin once every group is written.
    pub below: usize,
    /// The groups to rewrite (two or more fragments, or one with deletions to
    /// materialize), in bin order.
    pub groups: Vec<Range<usize>>,
    /// Whether a group's merges below target run before the move that writes
    /// it, even when the group fits whole (under a byte budget that binds).
    pub pieces_first: bool,
}

/// How the planner plans a bin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BinPlan {
    /// By the greedy cuts, under whatever budget is left (the search does not apply).
    Greedy,
    /// By the greedy cuts as a fresh budget would plan them, or not this run: the
    /// search compared the greedy cuts' fixed point from a fresh budget, so the
    /// run must follow that path (a smaller remaining budget can cut differently).
    GreedyAsSimulated,
    /// By this partition: it leaves fewer below-target fragments.
    Partition(Partition),
}

/// How to plan `bin`: the search applies under a source budget, without a
/// byte cap, to bins of up to [`SEARCH_MAX_BIN`] fragments. Under a byte
/// budget that does not admit the whole bin, the partition's groups merge
/// their pieces first (see [`Partition::pieces_first`]).
pub(super) fn bin_plan(
    bin: &[FragmentStats],
    options: &CompactionOptions,
    rules: &CandidateRules,
) -> BinPlan {
    if !searches(options) || bin.len() > SEARCH_MAX_BIN {
        return BinPlan::Greedy;
    }
    let target = options.target_rows_per_fragment;
    let mut partition = best_partition(bin, rules, &SourceBudget::new(options), target);
    partition.pieces_first = options
        .max_source_bytes
        .is_some_and(|limit| limit < SourceUse::of_all(bin).bytes);
    // Compared with the greedy cuts whenever it rewrites anything: they can
    // also lose (a cut across fragments that only needed materializing).
    if !partition.groups.is_empty() && partition.below < greedy_below(bin, options) {
        BinPlan::Partition(partition)
    } else {
        BinPlan::GreedyAsSimulated
    }
}

/// Whether `options` let the search plan some bins: a source budget, no byte
/// cap.
pub(super) fn searches(options: &CompactionOptions) -> bool {
    (options.max_source_fragments.is_some()
        || options.max_source_rows.is_some()
        || options.max_source_bytes.is_some())
        && options.max_bytes_per_file.is_none()
}

fn below_target(fragments: &[FragmentStats], target: u64) -> usize {
    fragments.iter().filter(|f| f.live_rows < target).count()
}

/// Below-target fragments of the greedy cuts' fixed point on `bin` alone
/// (`usize::MAX` if they do not reach one within a generous bound).
fn greedy_below(bin: &[FragmentStats], options: &CompactionOptions) -> usize {
    // The bin holds no excluded fragment; fresh ids must not hit one.
    let options = CompactionOptions {
        excluded_fragment_ids: Vec::new(),
        ..options.clone()
    };
    let planner = Planner::new(&options, false);
    let mut layout = bin.to_vec();
    for _ in 0..16 * bin.len() + 64 {
        let plan = planner.plan(&layout);
        if plan.is_empty() {
            return below_target(&layout, options.target_rows_per_fragment);
        }
        match simulate_run(&layout, &plan) {
            Ok(next) => layout = next,
            Err(_) => break,
        }
    }
    usize::MAX
}

/// Cost of a partition prefix: (below-target fragments, rewritten rows).
type Cost = (usize, u64);

/// The best partition of `bin` into feasible groups under a fresh `budget`.
pub(super) fn best_partition(
    bin: &[FragmentStats],
    rules: &CandidateRules,
    budget: &SourceBudget,
    target: u64,
) -> Partition {
    let budget = budget.fresh();
    let below = |rows: u64| usize::from(rows > 0 && rows < target);
    // best[i]: the best cost of the first i fragments and where its last group starts.
    let mut best: Vec<(Cost, usize)> = vec![((0, 0), 0)];
    for end in 1..=bin.len() {
        // end >= 1, and best holds end entries.
        let last = &bin[end - 1];
        let (before, _) = best[end - 1];
        // Alone: a fragment with deletions to materialize is rewritten when it fits.
        let rewrite =
            rules.has_deletions_to_materialize(last) && budget.admits(SourceUse::of(last));
        let alone = if rewrite {
            (below(last.live_rows), last.live_rows)
        } else {
            (usize::from(last.live_rows < target), 0)
        };
        let mut choice = (add(before, alone), end - 1);
        // Groups of two or more fragments, grown to the left. A fragment at or
        // above target (one with deletions to materialize) is a piece of its own.
        let mut sources = weight(last, rules, &budget);
        let mut pieces = 1u64;
        let mut piece_rows = last.live_rows;
        for start in (end.saturating_sub(SEARCH_MAX_GROUP)..end - 1).rev() {
            let next = &bin[start];
            sources = sources.plus(weight(next, rules, &budget));
            // Fewest pieces below target: greedy from the right, grown leftwards.
            if piece_rows + next.live_rows < target {
                piece_rows += next.live_rows;
            } else {
                pieces += 1;
                piece_rows = next.live_rows;
            }
            let read = SourceUse {
                fragments: pieces.max(2),
                ..sources
            };
            if !budget.admits(read) {
                break; // every limit grows with the group
            }
            let cost = add(best[start].0, (below(sources.rows), sources.rows));
            if cost < choice.0 {
                choice = (cost, start);
            }
        }
        best.push(choice);
    }
    let mut groups = Vec::new();
    let mut end = bin.len();
    while end > 0 {
        let start = best[end].1;
        let alone_clean = end - start == 1 && {
            let f = &bin[start];
            !(rules.has_deletions_to_materialize(f) && budget.admits(SourceUse::of(f)))
        };
        if !alone_clean {
            groups.push(start..end);
        }
        end = start;
    }
    groups.reverse();
    Partition {
        below: best[bin.len()].0 .0,
        groups,
        pieces_first: false,
    }
}

/// What a fragment weighs in a group: a fragment with deletions to materialize
/// that fits alone is rewritten first, and then weighs its live bytes.
fn weight(fragment: &FragmentStats, rules: &CandidateRules, budget: &SourceBudget) -> SourceUse {
    let own = SourceUse::of(fragment);
    if rules.has_deletions_to_materialize(fragment) && budget.fresh().admits(own) {
        SourceUse {
            bytes: fragment.estimated_live_bytes(),
            ..own
        }
    } else {
        own
    }
}

fn add(a: Cost, b: Cost) -> Cost {
    (a.0 + b.0, a.1.saturating_add(b.1))
}

/// Plans the groups of `partition` over `bin` while they fit `budget`. A group
/// that a fresh budget does not admit whole (too many fragments) first merges
/// its pieces below target, at most `max_source_fragments` fragments at a time.
pub(super) fn plan_partition(
    bin: &[FragmentStats],
    partition: &Partition,
    rules: &CandidateRules,
    target: u64,
    budget: &mut SourceBudget,
    plans: &mut Vec<TaskPlan>,
) -> Flow {
    let sizing = Sizing {
        target,
        max_bytes_per_file: None,
    };
    for group in &partition.groups {
        let group_fragments = &bin[group.clone()];
        for step in steps(
            group_fragments,
            rules,
            budget,
            target,
            partition.pieces_first,
        ) {
            let run = &bin[group.start + step.start..group.start + step.end];
            let sources = SourceUse::of_all(run);
            if !budget.admits(sources) {
                if budget.is_fresh() {
                    continue; // unreachable for feasible groups; never stall on it
                }
                return Flow::EndRun;
            }
            budget.take(sources);
            let estimated = run.iter().map(FragmentStats::estimated_live_bytes).sum();
            plans.push(balanced_cut(run, sources, estimated, sizing).plan);
        }
    }
    Flow::Continue
}

/// The runs (group-relative) that write `group` this run: the whole group if a
/// fresh budget admits it (and, with `pieces_first`, it has no work to do
/// first); else its fragments with deletions to materialize that get lighter
/// alone; else merges inside its pieces below target (greedy from the left,
/// the fewest pieces), as many fragments at a time as fit.
///
/// `pieces_first` is for byte budgets that bind: the search weighs a merged
/// fragment as the sum of its sources, an upper bound of what a real file
/// weighs (a merged Lance file sheds the per-file overhead of its sources).
/// Writing the pieces first keeps the group feasible and lets the next run's
/// search see the real, lighter files (in the model nothing changes but the
/// fragment count, so the partition stays as good).
fn steps(
    group: &[FragmentStats],
    rules: &CandidateRules,
    budget: &SourceBudget,
    target: u64,
    pieces_first: bool,
) -> Vec<Range<usize>> {
    let fresh = budget.fresh();
    let whole = || std::iter::once(0..group.len()).collect();
    let fits_whole = fresh.admits(SourceUse::of_all(group));
    if fits_whole && !pieces_first {
        return whole();
    }
    let lighter: Vec<_> = (0..group.len())
        .filter(|&i| weight(&group[i], rules, &fresh).bytes < group[i].bytes)
        .map(|i| i..i + 1)
        .collect();
    if !lighter.is_empty() {
        return lighter;
    }
    let merges = piece_merges(group, &fresh, target);
    // A group of one piece is written by its own merge.
    if fits_whole && (merges.is_empty() || merges.iter().eq(std::iter::once(&(0..group.len())))) {
        return whole();
    }
    merges
}

/// Merges inside the fewest pieces below target of `group` (greedy from the
/// left), each the longest prefix of its piece that a fresh budget admits.
fn piece_merges(group: &[FragmentStats], fresh: &SourceBudget, target: u64) -> Vec<Range<usize>> {
    let mut steps = Vec::new();
    let mut start = 0;
    while start < group.len() {
        let mut end = start + 1;
        let mut rows = group[start].live_rows;
        while let Some(next) = group.get(end) {
            if rows + next.live_rows >= target {
                break;
            }
            rows += next.live_rows;
            end += 1;
        }
        // The longest prefix of the piece a fresh budget admits.
        let mut fits = start + 1;
        while fits < end && fresh.admits(SourceUse::of_all(&group[start..fits + 1])) {
            fits += 1;
        }
        if fits - start >= 2 {
            steps.push(start..fits);
        }
        start = end;
    }
    steps
}
