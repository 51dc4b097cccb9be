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
//! and budget cuts), `moves` (the fallback run a budget admits), `planner`
//! (`plan_tasks`), `simulate` (a pure simulator and the execute-until-noop
//! driver used by tests and benchmarks). The planner's internals are private;
//! the re-exports below are the API.

mod balance;
mod binary_copy;
mod bins;
mod budget;
mod candidates;
pub mod commit;
pub mod execute;
pub mod inline_remap;
mod landed;
mod moves;
pub mod options;
pub mod plan;
pub mod planner;
mod run;
mod search;
mod simulate;
pub mod verify;

#[cfg(test)]
mod planner_reference;
#[cfg(test)]
mod planner_reference_tests;
#[cfg(test)]
mod planner_tests;

pub use candidates::{Candidacy, FragmentStats};
pub use commit::{commit_compaction, CompactionMetrics};
pub use execute::{RewriteResult, WrittenFile};
pub use options::CompactionOptions;
pub use plan::{plan_compaction, plan_from_json, CompactionPlan, CompactionTask};
pub use planner::{plan_tasks, TaskPlan};
pub use run::{compact_files, execute_plan, CompactionProgress, ProgressCallback};
pub use simulate::{execute_until_noop, simulate_run, Convergence};
