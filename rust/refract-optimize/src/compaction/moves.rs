//! Balanced moves: the budget cuts that keep budgeted runs from stalling.
//!
//! A *balanced move* rewrites a run of adjacent fragments that fits the budget
//! into the run's own balanced outputs (`max(1, floor(live / target))` of them,
//! raised by the byte cap). It is the step of the quality reference in
//! `docs/compaction.md`: whenever two adjacent fragments of a task fit the budget,
//! the leftmost maximal such run is a move, so a budget never stalls a merge that
//! fits.
//!
//! Which cut a task gets first depends on whether the task could ever run whole
//! under the budget ([`could_run_whole`]): if it could, cuts that keep the whole
//! task's balance come first (its outputs stay reachable); if it never can, that
//! balance is out of reach, and full outputs from the left come first.

use super::balance::Balance;
use super::budget::{BudgetCut, Sizing, SourceBudget, SourceUse};
use super::candidates::{CandidateRules, FragmentStats};
use super::task_planner::TaskPlan;

/// Whether a fresh budget could admit the whole task once merges below target
/// have made it as few fragments as they can: its live rows, its estimated live
/// bytes (what merged fragments weigh) and the fewest pieces of fewer than
/// `target` rows it splits into.
pub fn could_run_whole(sources: &[FragmentStats], budget: &SourceBudget, target: u64) -> bool {
    let mut merged = SourceUse::default();
    let mut piece_rows = None;
    for fragment in sources {
        merged.rows = merged.rows.saturating_add(fragment.live_rows);
        merged.bytes = merged.bytes.saturating_add(fragment.estimated_live_bytes());
        // Greedy pieces from the left are the fewest: extend while below target.
        piece_rows = match piece_rows {
            Some(rows) if rows + fragment.live_rows < target => Some(rows + fragment.live_rows),
            _ => {
                merged.fragments += 1;
                Some(fragment.live_rows)
            }
        };
    }
    budget.fresh().admits(merged)
}

/// The leftmost maximal run of two or more adjacent fragments (or one with
/// deletions to materialize) that fits `budget`, written as its own balanced
/// outputs. `None` only when no such run exists.
pub fn leftmost_balanced_run(
    sources: &[FragmentStats],
    rules: &CandidateRules,
    budget: &SourceBudget,
    sizing: Sizing,
) -> Option<BudgetCut> {
    (0..sources.len()).find_map(|start| {
        let mut used = SourceUse::default();
        let mut estimated_bytes = 0u64;
        let mut end = start;
        while let Some(next) = sources.get(end) {
            let grown = used.plus(SourceUse::of(next));
            if !budget.admits(grown) {
                break;
            }
            used = grown;
            estimated_bytes = estimated_bytes.saturating_add(next.estimated_live_bytes());
            end += 1;
        }
        let progress = end - start >= 2
            || (end > start && rules.has_deletions_to_materialize(&sources[start]));
        progress.then(|| balanced_cut(&sources[start..end], used, estimated_bytes, sizing))
    })
}

/// `run` rewritten into its own balanced outputs.
pub fn balanced_cut(
    run: &[FragmentStats],
    sources: SourceUse,
    estimated_bytes: u64,
    sizing: Sizing,
) -> BudgetCut {
    let balance = Balance::for_task(
        sources.rows,
        estimated_bytes,
        sizing.target,
        sizing.max_bytes_per_file,
    );
    BudgetCut {
        plan: TaskPlan {
            fragment_ids: run.iter().map(|f| f.id).collect(),
            output_rows: balance.sizes().collect(),
            partial: true,
        },
        sources,
    }
}
