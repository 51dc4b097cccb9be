//! Running a compaction: `execute_plan` executes a plan's tasks in parallel,
//! and `compact_files` plans, executes and commits in one call.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use refract_core::Result;
use refract_table::dataset::Dataset;

use super::commit::{commit_compaction, CompactionMetrics};
use super::compaction_plan::{plan_compaction, CompactionPlan};
use super::execute::RewriteResult;
use super::CompactionOptions;

/// Progress of a running compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionProgress {
    /// Tasks finished so far.
    pub tasks_done: usize,
    /// Tasks in the plan.
    pub tasks_total: usize,
    /// Rows read by finished tasks.
    pub rows_done: u64,
}

/// Receives progress updates.
pub type ProgressCallback = Arc<dyn Fn(CompactionProgress) + Send + Sync>;

/// Executes every task of `plan`, `num_threads` at a time, reporting progress.
///
/// # Errors
/// The first error of a task ([`super::CompactionTask::execute`]); the other tasks
/// stop, and files they wrote stay unreferenced (orphans for cleanup).
pub async fn execute_plan(
    dataset: &Dataset,
    plan: &CompactionPlan,
    progress: Option<ProgressCallback>,
) -> Result<Vec<RewriteResult>> {
    let parallelism = plan
        .options
        .num_threads
        .unwrap_or_else(default_parallelism)
        .max(1);
    let tasks_total = plan.tasks.len();
    let mut done = 0usize;
    let mut rows_done = 0u64;
    let mut results = Vec::with_capacity(tasks_total);
    // Boxed up front so the stream's type names no closure: that keeps the
    // whole compaction future `Send` (callers spawn it on their runtimes).
    let pending: Vec<BoxFuture<'_, Result<RewriteResult>>> = plan
        .tasks
        .iter()
        .map(|task| task.execute(dataset).boxed())
        .collect();
    let mut running = futures::stream::iter(pending).buffer_unordered(parallelism);
    while let Some(result) = running.try_next().await? {
        done += 1;
        rows_done += result.rows_read;
        if let Some(report) = &progress {
            report(CompactionProgress {
                tasks_done: done,
                tasks_total,
                rows_done,
            });
        }
        results.push(result);
    }
    results.sort_by_key(|r| r.task_index);
    Ok(results)
}

fn default_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Plans, executes and commits one compaction run. An empty plan commits nothing
/// and returns default metrics. On success `dataset` moves to the new version.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> refract_core::Result<()> {
/// use std::sync::Arc;
///
/// use arrow_array::{Int64Array, RecordBatch};
/// use arrow_schema::{DataType, Field, Schema};
/// use refract_optimize::compaction::{compact_files, CompactionOptions};
/// use refract_table::{Dataset, OpenOptions, WriteOptions};
///
/// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
/// let mut dataset =
///     Dataset::create("memory://compact-example", schema.clone(), OpenOptions::default())
///         .await?;
/// for start in (0..100).step_by(10) {
///     let ids = Arc::new(Int64Array::from_iter_values(start..start + 10));
///     let batch = RecordBatch::try_new(schema.clone(), vec![ids]).expect("ids match");
///     dataset.append(vec![batch], &WriteOptions::default()).await?;
/// }
/// assert_eq!(dataset.fragments().len(), 10);
/// let metrics = compact_files(&mut dataset, &CompactionOptions::default(), None).await?;
/// assert_eq!((metrics.fragments_removed, metrics.fragments_added), (10, 1));
/// // Execute until no-op: a second run commits nothing.
/// let again = compact_files(&mut dataset, &CompactionOptions::default(), None).await?;
/// assert_eq!(again.committed_version, None);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// InvalidInput for bad options; a retryable Conflict when a concurrent
/// commit rewrote the same fragments; Corrupt or NotFound for damaged or
/// missing source files (nothing is committed then); store errors.
pub async fn compact_files(
    dataset: &mut Dataset,
    options: &CompactionOptions,
    progress: Option<ProgressCallback>,
) -> Result<CompactionMetrics> {
    let plan = plan_compaction(dataset, options)?;
    if plan.is_empty() {
        return Ok(CompactionMetrics::default());
    }
    let results = execute_plan(dataset, &plan, progress).await?;
    let (committed, metrics) = commit_compaction(dataset, results).await?;
    *dataset = committed;
    Ok(metrics)
}
