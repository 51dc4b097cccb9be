//! Per-run source budgets and the budget cuts of a task that does not fit whole.
//!
//! Budgets (`max_source_fragments`, `max_source_rows` in live rows,
//! `max_source_bytes`) are cumulative over the tasks of one run and strict: a run
//! never reads more. When a task does not fit, the planner runs a *useful cut* of it:
//!
//! 1. the largest useful prefix: the first `k` fragments (as many as fit) written as
//!    the complete outputs of the *whole task's* balance that lie inside the prefix,
//!    plus the rest of the prefix carried as one fragment `r`. A prefix is useful when
//!    it makes progress (two or more fragments, or a first fragment with deletions to
//!    materialize) and does not strand rows: either `r` is below target (it is a
//!    candidate and the next run merges it forward) or the prefix ends before the
//!    task's last output (then `r >= target` is a full fragment and the rest of the
//!    task still holds at least one output's worth of rows per remaining output, so
//!    no output is lost and nothing sub-target is left behind);
//! 2. otherwise, the leftmost merge window: a run of adjacent fragments of the task
//!    (two or more, or one with deletions to materialize) whose live rows stay below
//!    target, written as one fragment. It changes nothing but the fragment count of
//!    the task, so the next run sees the same task with fewer, larger fragments.
//!
//! `docs/compaction.md` proves that these cuts make repeated runs converge.

use super::balance::Balance;
use super::candidates::{CandidateRules, FragmentStats};
use super::options::CompactionOptions;
use super::planner::TaskPlan;

/// Sources read by a task or a cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceUse {
    /// Source fragments.
    pub fragments: u64,
    /// Source live rows.
    pub rows: u64,
    /// Source bytes.
    pub bytes: u64,
}

impl SourceUse {
    /// The use of reading one fragment.
    pub fn of(fragment: &FragmentStats) -> Self {
        Self {
            fragments: 1,
            rows: fragment.live_rows,
            bytes: fragment.bytes,
        }
    }

    /// The use of reading all `fragments`.
    pub fn of_all(fragments: &[FragmentStats]) -> Self {
        fragments
            .iter()
            .fold(Self::default(), |sum, f| sum.plus(Self::of(f)))
    }

    /// Component-wise sum (saturating: a saturated sum exceeds every budget).
    pub fn plus(self, other: Self) -> Self {
        Self {
            fragments: self.fragments.saturating_add(other.fragments),
            rows: self.rows.saturating_add(other.rows),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

/// The cumulative source budget of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceBudget {
    max_fragments: Option<u64>,
    max_rows: Option<u64>,
    max_bytes: Option<u64>,
    used: SourceUse,
}

impl SourceBudget {
    /// The budget set by `options`, nothing used yet.
    pub fn new(options: &CompactionOptions) -> Self {
        Self {
            max_fragments: options.max_source_fragments,
            max_rows: options.max_source_rows,
            max_bytes: options.max_source_bytes,
            used: SourceUse::default(),
        }
    }

    /// The same limits with nothing used.
    pub fn fresh(&self) -> Self {
        Self {
            used: SourceUse::default(),
            ..*self
        }
    }

    /// True when nothing has been used yet.
    pub fn is_fresh(&self) -> bool {
        self.used == SourceUse::default()
    }

    /// Whether `extra` more sources stay within every limit.
    pub fn admits(&self, extra: SourceUse) -> bool {
        let total = self.used.plus(extra);
        within(total.fragments, self.max_fragments)
            && within(total.rows, self.max_rows)
            && within(total.bytes, self.max_bytes)
    }

    /// Records `extra` as used.
    pub fn take(&mut self, extra: SourceUse) {
        self.used = self.used.plus(extra);
    }

    /// What has been used so far.
    pub fn used(&self) -> SourceUse {
        self.used
    }
}

fn within(value: u64, limit: Option<u64>) -> bool {
    limit.is_none_or(|limit| value <= limit)
}

/// A cut of a task that fits the remaining budget.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetCut {
    /// The plan of the cut (`partial == true`).
    pub plan: TaskPlan,
    /// The sources it reads.
    pub sources: SourceUse,
}

/// The useful cut of a task that does not fit whole, if any fits `budget`.
pub fn useful_cut(
    sources: &[FragmentStats],
    balance: &Balance,
    rules: &CandidateRules,
    budget: &SourceBudget,
    target: u64,
) -> Option<BudgetCut> {
    largest_useful_prefix(sources, balance, rules, budget, target)
        .or_else(|| leftmost_merge_window(sources, rules, budget, target))
}

fn largest_useful_prefix(
    sources: &[FragmentStats],
    balance: &Balance,
    rules: &CandidateRules,
    budget: &SourceBudget,
    target: u64,
) -> Option<BudgetCut> {
    // Grow the prefix while it fits, then walk back to the largest useful one.
    let mut fitting = 0;
    let mut used = SourceUse::default();
    for fragment in sources {
        let next = used.plus(SourceUse::of(fragment));
        if !budget.admits(next) {
            break;
        }
        used = next;
        fitting += 1;
    }
    let first_materializes = sources
        .first()
        .is_some_and(|f| rules.has_deletions_to_materialize(f));
    for k in (1..=fitting).rev() {
        let rows = used.rows;
        // The last output is complete only with the whole task: a prefix holding
        // all live rows would leave its zero-row suffix stranded.
        let complete = balance
            .complete_within(rows)
            .min(balance.count().saturating_sub(1));
        let carried = rows - balance.end(complete);
        let progress = k >= 2 || first_materializes;
        let strands_nothing = carried < target || complete + 1 < balance.count();
        if progress && strands_nothing {
            let mut output_rows: Vec<u64> = (0..complete).map(|j| balance.size(j)).collect();
            if carried > 0 {
                output_rows.push(carried);
            }
            let plan = TaskPlan {
                fragment_ids: sources[..k].iter().map(|f| f.id).collect(),
                output_rows,
                partial: true,
            };
            return Some(BudgetCut {
                plan,
                sources: used,
            });
        }
        let dropped = &sources[k - 1]; // k >= 1
        used = SourceUse {
            fragments: used.fragments - 1,
            rows: used.rows - dropped.live_rows,
            bytes: used.bytes - dropped.bytes,
        };
    }
    None
}

fn leftmost_merge_window(
    sources: &[FragmentStats],
    rules: &CandidateRules,
    budget: &SourceBudget,
    target: u64,
) -> Option<BudgetCut> {
    for start in 0..sources.len() {
        let first = &sources[start]; // start < len
        let mut used = SourceUse::of(first);
        if used.rows >= target || !budget.admits(used) {
            continue;
        }
        let mut end = start + 1;
        while let Some(next) = sources.get(end) {
            let grown = used.plus(SourceUse::of(next));
            if grown.rows >= target || !budget.admits(grown) {
                break;
            }
            used = grown;
            end += 1;
        }
        if end - start >= 2 || rules.has_deletions_to_materialize(first) {
            let plan = TaskPlan {
                fragment_ids: sources[start..end].iter().map(|f| f.id).collect(),
                output_rows: if used.rows > 0 {
                    vec![used.rows]
                } else {
                    Vec::new()
                },
                partial: true,
            };
            return Some(BudgetCut {
                plan,
                sources: used,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(f: impl FnOnce(&mut CompactionOptions)) -> CompactionOptions {
        let mut o = CompactionOptions {
            target_rows_per_fragment: 100,
            ..Default::default()
        };
        f(&mut o);
        o
    }

    fn frag(id: u64, live: u64) -> FragmentStats {
        FragmentStats {
            id,
            physical_rows: live,
            live_rows: live,
            bytes: live * 10,
            coverage_key: 0,
        }
    }

    #[test]
    fn budgets_are_strict_and_cumulative() {
        let o = options(|o| {
            o.max_source_fragments = Some(3);
            o.max_source_rows = Some(100);
            o.max_source_bytes = Some(900);
        });
        let mut budget = SourceBudget::new(&o);
        assert!(budget.admits(SourceUse {
            fragments: 3,
            rows: 90,
            bytes: 900
        }));
        assert!(!budget.admits(SourceUse {
            fragments: 4,
            rows: 0,
            bytes: 0
        }));
        assert!(!budget.admits(SourceUse {
            fragments: 0,
            rows: 101,
            bytes: 0
        }));
        assert!(!budget.admits(SourceUse {
            fragments: 0,
            rows: 0,
            bytes: 901
        }));
        budget.take(SourceUse {
            fragments: 2,
            rows: 50,
            bytes: 500,
        });
        assert!(!budget.is_fresh());
        assert!(budget.admits(SourceUse {
            fragments: 1,
            rows: 50,
            bytes: 400
        }));
        assert!(!budget.admits(SourceUse {
            fragments: 2,
            rows: 0,
            bytes: 0
        }));
        assert!(budget.fresh().is_fresh());
    }

    fn cut(rows: &[u64], target: u64, max_fragments: u64) -> Option<TaskPlan> {
        let o = options(|o| {
            o.target_rows_per_fragment = target;
            o.max_source_fragments = Some(max_fragments);
        });
        let sources: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, &r)| frag(i as u64, r))
            .collect();
        let live = rows.iter().sum();
        let balance = Balance::for_task(live, 0, target, None);
        let rules = CandidateRules::new(&o);
        useful_cut(&sources, &balance, &rules, &SourceBudget::new(&o), target).map(|c| c.plan)
    }

    #[test]
    fn seed_004_first_cut_carries_the_prefix() {
        let plan = cut(&[100; 5], 250, 2).unwrap();
        assert_eq!(plan.fragment_ids, vec![0, 1]);
        assert_eq!(plan.output_rows, vec![200]);
        assert!(plan.partial);
    }

    #[test]
    fn complete_outputs_inside_the_prefix_plus_carry() {
        // Balance of 500 at 250: [250, 250]; prefix 200 + 100 holds one output + 50.
        let plan = cut(&[200, 100, 100, 100], 250, 2).unwrap();
        assert_eq!(plan.output_rows, vec![250, 50]);
    }

    #[test]
    fn full_carry_allowed_before_the_last_output() {
        // [50, 60, 60, 79] at 100: balance [125, 124]; prefix 110 holds no output and
        // carries 110 >= target, which is fine: 139 rows remain for the last output.
        let plan = cut(&[50, 60, 60, 79], 100, 2).unwrap();
        assert_eq!(plan.output_rows, vec![110]);
    }

    #[test]
    fn carry_that_would_strand_the_last_output_falls_back_to_a_window() {
        // [60, 60, 20, 20] at 100 (one output of 160): prefixes 120 and 140 would
        // leave a stranded tail; the leftmost window below target is [60, 20].
        let plan = cut(&[60, 60, 20, 20], 100, 3).unwrap();
        assert_eq!(plan.fragment_ids, vec![1, 2]);
        assert_eq!(plan.output_rows, vec![80]);
    }

    #[test]
    fn inherently_stuck_triple_has_no_cut() {
        // Every merge of two would leave a lone sub-target fragment behind.
        assert_eq!(cut(&[60, 60, 79], 100, 2), None);
    }
}
