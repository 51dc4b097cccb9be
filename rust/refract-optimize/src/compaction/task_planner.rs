//! `plan_tasks`: the pure compaction planner.

use std::ops::Range;

use refract_core::Result;
use serde::{Deserialize, Serialize};

use super::balance::Balance;
use super::bins::{Bins, TaskSplits};
use super::budget::{useful_cut, BudgetCut, Effort, Sizing, SourceBudget, SourceUse};
use super::candidates::{validate_fragments, CandidateRules, FragmentStats};
use super::moves::leftmost_balanced_run;
use super::options::CompactionOptions;
use super::search::{bin_plan, plan_partition, searches, BinPlan};

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
///
/// Under a source budget (and without a byte cap), a bin of up to 4,096
/// fragments whose best partition into moves (groups of at most 64 fragments)
/// leaves fewer below-target fragments than
/// these greedy cuts would at their fixed point is planned by that partition
/// instead (the `search` module, docs/compaction.md "Budgets and cuts").
///
/// # Errors
/// InvalidInput when `options` fail validation or a fragment's statistics
/// are impossible (more live rows than physical rows).
pub fn plan_tasks(
    fragments: &[FragmentStats],
    options: &CompactionOptions,
) -> Result<Vec<TaskPlan>> {
    options.validate()?;
    validate_fragments(fragments)?;
    Ok(Planner::new(options, true).plan(fragments))
}

/// One run's planning state.
pub(super) struct Planner<'o> {
    options: &'o CompactionOptions,
    rules: CandidateRules,
    sizing: Sizing,
    /// Whether bins may be planned by the partition search (off inside the
    /// search's own simulation of the greedy cuts).
    search: bool,
}

/// Whether the run goes on after a bin.
#[derive(PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    EndRun,
}

impl<'o> Planner<'o> {
    /// A planner for validated `options`.
    pub(super) fn new(options: &'o CompactionOptions, search: bool) -> Self {
        Self {
            options,
            rules: CandidateRules::new(options),
            sizing: Sizing::new(options),
            search,
        }
    }

    /// The plan of one run over validated `fragments`.
    pub(super) fn plan(&self, fragments: &[FragmentStats]) -> Vec<TaskPlan> {
        let mut budget = SourceBudget::new(self.options);
        let mut plans = Vec::new();
        if self.search && searches(self.options) {
            // Bins with no live rows vanish, which can join their neighbours
            // into one bin: remove them first so the search sees the joined bin.
            for bin in Bins::new(fragments, &self.rules) {
                let sources = SourceUse::of_all(&fragments[bin.clone()]);
                if sources.rows == 0 && budget.admits(sources) {
                    budget.take(sources);
                    plans.push(Task::new(&fragments[bin], self.options).whole_plan());
                }
            }
            if !plans.is_empty() {
                return plans;
            }
        }
        for bin in Bins::new(fragments, &self.rules) {
            let how = if self.search {
                bin_plan(&fragments[bin.clone()], self.options, &self.rules)
            } else {
                BinPlan::Greedy
            };
            let flow = match how {
                BinPlan::Partition(partition) => plan_partition(
                    &fragments[bin],
                    &partition,
                    &self.rules,
                    self.options.target_rows_per_fragment,
                    &mut budget,
                    &mut plans,
                ),
                BinPlan::Greedy => self.plan_bin_greedy(fragments, bin, &mut budget, &mut plans),
                BinPlan::GreedyAsSimulated => {
                    self.plan_bin_as_fresh(fragments, bin, &mut budget, &mut plans)
                }
            };
            if flow == Flow::EndRun {
                break;
            }
        }
        plans
    }

    /// The greedy cuts of one bin as a fresh budget plans them, if what is left
    /// of `budget` plans the same; else the bin waits for the next run.
    fn plan_bin_as_fresh(
        &self,
        fragments: &[FragmentStats],
        bin: Range<usize>,
        budget: &mut SourceBudget,
        plans: &mut Vec<TaskPlan>,
    ) -> Flow {
        if budget.is_fresh() {
            return self.plan_bin_greedy(fragments, bin, budget, plans);
        }
        let (mut fresh, mut fresh_plans) = (budget.fresh(), Vec::new());
        let fresh_flow = self.plan_bin_greedy(fragments, bin.clone(), &mut fresh, &mut fresh_plans);
        let (mut left, mut left_plans) = (*budget, Vec::new());
        let flow = self.plan_bin_greedy(fragments, bin, &mut left, &mut left_plans);
        if left_plans != fresh_plans {
            return Flow::EndRun;
        }
        *budget = left;
        plans.extend(left_plans);
        if fresh_flow == Flow::EndRun {
            Flow::EndRun
        } else {
            flow
        }
    }

    /// The greedy cuts of one bin (see [`plan_tasks`]).
    fn plan_bin_greedy(
        &self,
        fragments: &[FragmentStats],
        bin: Range<usize>,
        budget: &mut SourceBudget,
        plans: &mut Vec<TaskPlan>,
    ) -> Flow {
        let (rules, sizing) = (&self.rules, self.sizing);
        let target = self.options.target_rows_per_fragment;
        let mut all_skipped = true;
        for range in TaskSplits::new(fragments, bin.clone(), target) {
            let task = Task::new(&fragments[range], self.options);
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
                useful_cut(task.fragments, &task.balance, rules, budget, sizing, effort)
            };
            match Step::of(budget, cut) {
                Step::Cut(cut) => {
                    plans.push(cut.plan);
                    return Flow::EndRun;
                }
                Step::NextRun => return Flow::EndRun,
                Step::Skip => {}
            }
        }
        if all_skipped {
            // Each task alone is stuck; a pair across a task boundary may not be.
            let bin_fragments = &fragments[bin];
            let across = |budget: &SourceBudget, effort| {
                (effort == Effort::AnyMove)
                    .then(|| leftmost_balanced_run(bin_fragments, rules, budget, sizing))
                    .flatten()
            };
            match Step::of(budget, across) {
                Step::Cut(cut) => {
                    plans.push(cut.plan);
                    return Flow::EndRun;
                }
                Step::NextRun => return Flow::EndRun,
                Step::Skip => {}
            }
        }
        Flow::Continue
    }
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
