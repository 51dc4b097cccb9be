//! `plan_tasks`: the pure compaction planner.

use refract_core::Result;
use serde::{Deserialize, Serialize};

use super::balance::Balance;
use super::bins::{Bins, TaskSplits};
use super::budget::{useful_cut, Sizing, SourceBudget, SourceUse};
use super::candidates::{validate_fragments, CandidateRules, FragmentStats};
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
/// these options and is skipped so it does not stall the rest.
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
        for range in TaskSplits::new(fragments, bin, target) {
            let task = Task::new(&fragments[range], options);
            if budget.admits(task.sources) {
                budget.take(task.sources);
                plans.push(task.whole_plan());
                continue;
            }
            if let Some(cut) = useful_cut(task.fragments, &task.balance, &rules, &budget, sizing) {
                budget.take(cut.sources);
                plans.push(cut.plan);
                return Ok(plans);
            }
            let runnable_later = !budget.is_fresh()
                && useful_cut(
                    task.fragments,
                    &task.balance,
                    &rules,
                    &budget.fresh(),
                    sizing,
                )
                .is_some();
            if runnable_later {
                return Ok(plans);
            }
        }
    }
    Ok(plans)
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

    fn whole_plan(&self) -> TaskPlan {
        TaskPlan {
            fragment_ids: self.fragments.iter().map(|f| f.id).collect(),
            output_rows: self.balance.sizes().collect(),
            partial: false,
        }
    }
}
