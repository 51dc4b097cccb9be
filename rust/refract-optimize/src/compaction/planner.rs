//! `plan_tasks`: the pure compaction planner.

use refract_core::Result;
use serde::{Deserialize, Serialize};

use super::balance::Balance;
use super::bins::{Bins, TaskSplits};
use super::budget::{useful_cut, BudgetCut, Effort, Sizing, SourceBudget, SourceUse};
use super::candidates::{validate_fragments, CandidateRules, FragmentStats};
use super::moves::leftmost_balanced_run;
use super::options::CompactionOptions;

/// One rewrite: a contiguous run of fragments replaced in place by outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlan {
    /// A contiguous run of the input fragment list, in order.
    pub fragment_ids: Vec<u64>,
    /// Exact live rows of each output fragment, in write order. The sum equals the
    /// live rows of the sources; empty when the sources have no live rows.
    pub output_rows: Vec<u64>,
    /// True when a budget cut the task: the outputs are the complete balanced
    /// outputs inside a prefix plus one carried remainder, or one merged fragment
    /// for a merge window (see `budget`).
    pub partial: bool,
}

/// Plans one compaction run over `fragments` (manifest order).
///
/// Tasks are contiguous, non-overlapping and in list order. Walks bins and their
/// lossless task split in order; takes whole tasks while they fit the source
/// budget; at the first task that does not fit, plans its useful cut (if any) and
/// stops. A task with no useful cut even under a fresh budget can never run under
/// these options and is skipped so it does not stall the rest. When every task of
/// a bin is skipped, a balanced move across their boundaries is tried, so no two
/// adjacent fragments of a bin that fit the budget are left unmerged.
pub fn plan_tasks(
    fragments: &[FragmentStats],
    options: &CompactionOptions,
) -> Result<Vec<TaskPlan>> {
    options.validate()?;
    validate_fragments(fragments)?;
    let rules = CandidateRules::new(options);
    let target = options.target_rows_per_fragment;
    let sizing = Sizing::new(options);
    let mut budget = SourceBudget::new(options);
    let mut plans = Vec::new();
    for bin in Bins::new(fragments, &rules) {
        let mut all_skipped = true;
        for range in TaskSplits::new(fragments, bin.clone(), target) {
            let task = Task::new(&fragments[range], options);
            if budget.admits(task.sources) {
                budget.take(task.sources);
                plans.push(task.whole_plan());
                all_skipped = false;
                continue;
            }
            let cut = |budget: &SourceBudget, effort| {
                if effort == Effort::Preferred && budget.admits(task.sources) {
                    // Only a fresh budget gets here: the whole task waits for it.
                    return Some(task.whole_cut());
                }
                useful_cut(
                    task.fragments,
                    &task.balance,
                    &rules,
                    budget,
                    sizing,
                    effort,
                )
            };
            match Step::of(&budget, cut) {
                Step::Cut(cut) => {
                    plans.push(cut.plan);
                    return Ok(plans);
                }
                Step::NextRun => return Ok(plans),
                Step::Skip => {}
            }
        }
        if all_skipped {
            // Each task alone is stuck; a pair across a task boundary may not be.
            let bin_fragments = &fragments[bin];
            let across = |budget: &SourceBudget, effort| {
                (effort == Effort::AnyMove)
                    .then(|| leftmost_balanced_run(bin_fragments, &rules, budget, sizing))
                    .flatten()
            };
            match Step::of(&budget, across) {
                Step::Cut(cut) => {
                    plans.push(cut.plan);
                    return Ok(plans);
                }
                Step::NextRun => return Ok(plans),
                Step::Skip => {}
            }
        }
    }
    Ok(plans)
}

/// What to do with a task (or bin) that does not fit the remaining budget whole.
enum Step {
    /// Run this cut; it ends the run.
    Cut(BudgetCut),
    /// Nothing fits what is left of the budget, but a cut fits a fresh one: end
    /// the run here, the next run starts with it.
    NextRun,
    /// Nothing fits even a fresh budget: these options can never run it.
    Skip,
}

impl Step {
    /// Tries each effort in turn: a cut that fits what is left of the budget
    /// runs; one that fits only a fresh budget waits for the next run (a lesser
    /// effort would settle for a worse cut now).
    fn of(budget: &SourceBudget, cut: impl Fn(&SourceBudget, Effort) -> Option<BudgetCut>) -> Self {
        for effort in [Effort::Preferred, Effort::AnyMove] {
            if let Some(cut) = cut(budget, effort) {
                return Self::Cut(cut);
            }
            if !budget.is_fresh() && cut(&budget.fresh(), effort).is_some() {
                return Self::NextRun;
            }
        }
        Self::Skip
    }
}

/// A task: its sources, their use and their balanced output layout.
struct Task<'a> {
    fragments: &'a [FragmentStats],
    sources: SourceUse,
    balance: Balance,
}

impl<'a> Task<'a> {
    fn new(fragments: &'a [FragmentStats], options: &CompactionOptions) -> Self {
        let sources = SourceUse::of_all(fragments);
        let estimated_bytes = fragments
            .iter()
            .map(FragmentStats::estimated_live_bytes)
            .sum();
        let balance = Balance::for_task(
            sources.rows,
            estimated_bytes,
            options.target_rows_per_fragment,
            options.max_bytes_per_file,
        );
        Self {
            fragments,
            sources,
            balance,
        }
    }

    fn whole_cut(&self) -> BudgetCut {
        BudgetCut {
            plan: self.whole_plan(),
            sources: self.sources,
        }
    }

    fn whole_plan(&self) -> TaskPlan {
        TaskPlan {
            fragment_ids: self.fragments.iter().map(|f| f.id).collect(),
            output_rows: self.balance.sizes().collect(),
            partial: false,
        }
    }
}
