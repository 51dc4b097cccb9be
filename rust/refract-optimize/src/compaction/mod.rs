//! Compaction planning: which contiguous runs of fragments to rewrite, and into
//! exactly which output sizes.
//!
//! The planner is pure (no I/O): [`plan_tasks`] takes fragment statistics in
//! manifest order and [`CompactionOptions`] and returns [`TaskPlan`]s. The executor
//! writes exactly the output sizes a plan names and replaces each run in place, so
//! the order of rows never changes. `docs/compaction.md` states the rules and proves
//! that repeated runs converge, also under source budgets.
//!
//! Modules: `options` (validation), `candidates` (candidacy), `bins` (bins and
//! the lossless task split), `balance` (output sizes), `budget` (source budgets
//! and budget cuts), `moves` (the fallback run a budget admits), `search` (the
//! best reachable partition of a bin), `task_planner` (`plan_tasks`),
//! `compaction_plan` (the serializable [`CompactionPlan`] of tasks workers
//! execute), `execute` (one task → [`RewriteResult`]), `commit` and `verify`
//! (checking and landing results), `run` (`compact_files`), `simulate` (a pure
//! simulator and the execute-until-noop driver used by tests and benchmarks).
//! Every module is private; the re-exports below are the API.

mod balance;
mod binary_copy;
mod bins;
mod budget;
mod candidates;
mod commit;
mod compaction_plan;
mod execute;
mod inline_remap;
mod landed;
mod moves;
mod options;
mod relabelled;
mod run;
mod search;
mod simulate;
mod task_planner;
mod verify;

#[cfg(test)]
mod task_planner_reference;
#[cfg(test)]
mod task_planner_reference_tests;
#[cfg(test)]
mod task_planner_tests;

pub use candidates::{Candidacy, FragmentStats};
pub use commit::{commit_compaction, CompactionMetrics};
pub use compaction_plan::{plan_compaction, plan_from_json, CompactionPlan, CompactionTask};
pub use execute::{RewriteResult, WrittenFile};
pub use options::{
    CompactionOptions, DEFAULT_BINARY_COPY_MIN_SOURCE_ROWS,
    DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD, DEFAULT_MAX_ROWS_PER_GROUP,
    DEFAULT_TARGET_ROWS_PER_FRAGMENT,
};
pub use relabelled::follow_fragment_ids;
pub use run::{compact_files, execute_plan, CompactionProgress, ProgressCallback};
pub use simulate::{execute_until_noop, simulate_run, Convergence};
pub use task_planner::{plan_tasks, TaskPlan};
