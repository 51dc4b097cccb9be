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
use super::moves::{could_run_whole, leftmost_balanced_run};
use super::options::CompactionOptions;
use super::task_planner::TaskPlan;

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

/// Output sizing knobs the cuts need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// `target_rows_per_fragment`.
    pub target: u64,
    /// `max_bytes_per_file`.
    pub max_bytes_per_file: Option<u64>,
}

impl Sizing {
    /// The sizing of `options`.
    pub fn new(options: &CompactionOptions) -> Self {
        Self {
            target: options.target_rows_per_fragment,
            max_bytes_per_file: options.max_bytes_per_file,
        }
    }
}

/// How hard a cut tries: [`Effort::Preferred`] cuts keep the task's balance
/// reachable; [`Effort::AnyMove`] is the last resort that keeps budgets from
/// stalling a merge that fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// The largest useful prefix, else (for a task that could run whole once
    /// merged) the leftmost merge window.
    Preferred,
    /// The leftmost balanced move of the task.
    AnyMove,
}

/// The useful cut of a task that does not fit whole, if any fits `budget`.
///
/// With [`Effort::Preferred`]: a task that could run whole once merged below
/// target keeps its own balance reachable (the largest useful prefix, walking
/// back, else the leftmost merge window); a task that never can (more rows or
/// bytes than the budget, or too many pieces) takes only the largest fitting
/// prefix, and only if it is useful. With [`Effort::AnyMove`]: the leftmost
/// balanced move, so a task with two adjacent fragments that fit the budget is
/// never stalled. The planner tries the second only when the first fits
/// neither the remaining nor a fresh budget.
pub fn useful_cut(
    sources: &[FragmentStats],
    balance: &Balance,
    rules: &CandidateRules,
    budget: &SourceBudget,
    sizing: Sizing,
    effort: Effort,
) -> Option<BudgetCut> {
    if effort == Effort::AnyMove {
        return leftmost_balanced_run(sources, rules, budget, sizing);
    }
    let whole_reachable = could_run_whole(sources, budget, sizing.target);
    largest_useful_prefix(sources, balance, rules, budget, sizing, whole_reachable).or_else(|| {
        whole_reachable
            .then(|| leftmost_merge_window(sources, rules, budget, sizing))
            .flatten()
    })
}

/// The live rows and estimated bytes of a run of fragments.
#[derive(Debug, Clone, Copy, Default)]
struct RunSize {
    sources: SourceUse,
    estimated_bytes: u64,
}

impl RunSize {
    fn plus(self, fragment: &FragmentStats) -> Self {
        Self {
            sources: self.sources.plus(SourceUse::of(fragment)),
            estimated_bytes: self
                .estimated_bytes
                .saturating_add(fragment.estimated_live_bytes()),
        }
    }

    fn minus(self, fragment: &FragmentStats) -> Self {
        Self {
            sources: SourceUse {
                fragments: self.sources.fragments - 1,
                rows: self.sources.rows - fragment.live_rows,
                bytes: self.sources.bytes - fragment.bytes,
            },
            estimated_bytes: self.estimated_bytes - fragment.estimated_live_bytes(),
        }
    }
}

fn largest_useful_prefix(
    sources: &[FragmentStats],
    balance: &Balance,
    rules: &CandidateRules,
    budget: &SourceBudget,
    sizing: Sizing,
    walk_back: bool,
) -> Option<BudgetCut> {
    // Grow the prefix while it fits, then (if asked) walk back to the largest
    // useful one.
    let mut fitting = 0;
    let mut size = RunSize::default();
    for fragment in sources {
        let next = size.plus(fragment);
        if !budget.admits(next.sources) {
            break;
        }
        size = next;
        fitting += 1;
    }
    let can_merge = budget.fresh().admits(SourceUse {
        fragments: 2,
        rows: 0,
        bytes: 0,
    });
    let first_materializes = sources
        .first()
        .is_some_and(|f| rules.has_deletions_to_materialize(f));
    let shortest = if walk_back { 1 } else { fitting.max(1) };
    for k in (shortest..=fitting).rev() {
        let progress = k >= 2 || first_materializes;
        let output_rows = if sizing.max_bytes_per_file.is_some() {
            // Under a byte cap the prefix is sized as a task of its own, with its
            // own bytes per row, so its outputs respect the cap and byte-split
            // outputs are byte-full (not candidates again).
            let own = Balance::for_task(
                size.sources.rows,
                size.estimated_bytes,
                sizing.target,
                sizing.max_bytes_per_file,
            );
            progress.then(|| own.sizes().collect())
        } else {
            // A carried rest must merge forward later, which a budget of one
            // fragment never allows: then only a prefix without a rest is useful.
            carried_prefix_outputs(balance, size.sources.rows, sizing.target)
                .filter(|outputs| progress && (can_merge || carries_nothing(balance, outputs)))
        };
        if let Some(output_rows) = output_rows {
            let plan = TaskPlan {
                fragment_ids: sources[..k].iter().map(|f| f.id).collect(),
                output_rows,
                partial: true,
            };
            return Some(BudgetCut {
                plan,
                sources: size.sources,
            });
        }
        size = size.minus(&sources[k - 1]); // k >= 1
    }
    None
}

/// True when `outputs` are complete outputs of `balance` only (no carried rest).
fn carries_nothing(balance: &Balance, outputs: &[u64]) -> bool {
    outputs
        .iter()
        .enumerate()
        .all(|(index, &rows)| rows == balance.size(index as u64))
}

/// The complete outputs of the whole task's `balance` inside a prefix of `rows`
/// rows plus the carried rest, or `None` when that would strand rows: a carried
/// rest at or above target is allowed only before the task's last output.
fn carried_prefix_outputs(balance: &Balance, rows: u64, target: u64) -> Option<Vec<u64>> {
    // The last output is complete only with the whole task: a prefix holding all
    // live rows would leave its zero-row suffix stranded.
    let complete = balance
        .complete_within(rows)
        .min(balance.count().saturating_sub(1));
    let carried = rows - balance.end(complete);
    let strands_nothing = carried < target || complete + 1 < balance.count();
    strands_nothing.then(|| {
        let mut output_rows: Vec<u64> = (0..complete).map(|j| balance.size(j)).collect();
        if carried > 0 {
            output_rows.push(carried);
        }
        output_rows
    })
}

fn leftmost_merge_window(
    sources: &[FragmentStats],
    rules: &CandidateRules,
    budget: &SourceBudget,
    sizing: Sizing,
) -> Option<BudgetCut> {
    // A window is written as one fragment: below target, and within the byte cap.
    let fits_one_output = |size: &RunSize| {
        size.sources.rows < sizing.target
            && budget.admits(size.sources)
            && sizing
                .max_bytes_per_file
                .is_none_or(|cap| size.estimated_bytes <= cap)
    };
    for start in 0..sources.len() {
        let first = &sources[start]; // start < len
        let mut size = RunSize::default().plus(first);
        if !fits_one_output(&size) {
            continue;
        }
        let mut end = start + 1;
        while let Some(next) = sources.get(end) {
            let grown = size.plus(next);
            if !fits_one_output(&grown) {
                break;
            }
            size = grown;
            end += 1;
        }
        if end - start >= 2 || rules.has_deletions_to_materialize(first) {
            let rows = size.sources.rows;
            let plan = TaskPlan {
                fragment_ids: sources[start..end].iter().map(|f| f.id).collect(),
                output_rows: if rows > 0 { vec![rows] } else { Vec::new() },
                partial: true,
            };
            return Some(BudgetCut {
                plan,
                sources: size.sources,
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
        [Effort::Preferred, Effort::AnyMove]
            .into_iter()
            .find_map(|effort| {
                let budget = SourceBudget::new(&o);
                useful_cut(&sources, &balance, &rules, &budget, Sizing::new(&o), effort)
                    .map(|c| c.plan)
            })
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
    fn triple_that_cannot_run_whole_merges_its_leftmost_pair() {
        // Every merge of two leaves a lone sub-target fragment behind, but one
        // below-target fragment beats three: the leftmost pair is a balanced move.
        let plan = cut(&[60, 60, 79], 100, 2).unwrap();
        assert_eq!(plan.fragment_ids, vec![0, 1]);
        assert_eq!(plan.output_rows, vec![120]);
    }

    #[test]
    fn task_too_big_for_any_run_writes_full_outputs_from_the_left() {
        // Six 200-row fragments at target 1000 under 1000 rows per run: the task's
        // one output of 1200 can never be written; five fragments make 1000.
        let o = options(|o| {
            o.target_rows_per_fragment = 1000;
            o.max_source_rows = Some(1000);
        });
        let sources: Vec<_> = (0..6).map(|i| frag(i, 200)).collect();
        let balance = Balance::for_task(1200, 0, 1000, None);
        let rules = CandidateRules::new(&o);
        let budget = SourceBudget::new(&o);
        let sizing = Sizing::new(&o);
        // The task can never run whole and its largest fitting prefix would carry
        // a full remainder into its last output: the balanced move takes over.
        let preferred = useful_cut(
            &sources,
            &balance,
            &rules,
            &budget,
            sizing,
            Effort::Preferred,
        );
        assert_eq!(preferred, None);
        let cut = useful_cut(&sources, &balance, &rules, &budget, sizing, Effort::AnyMove);
        let plan = cut.unwrap().plan;
        assert_eq!(plan.fragment_ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(plan.output_rows, vec![1000]);
    }
}
