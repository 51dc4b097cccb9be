//! Maintenance: compaction (one call, or planned, executed and committed in
//! pieces anywhere), index remap, FRI trim, stable partition, `maintain`.
//!
//! Options, tasks, results and reports cross to Python as JSON: tasks and
//! results use exactly the form `refract compact-plan` / `compact-exec`
//! write, so they pickle, travel between processes and mix with the CLI's.

use std::time::Duration;

use pyo3::prelude::*;
use refract_core::Error;
use refract_optimize::compaction::{
    commit_compaction, compact_files, plan_compaction, CompactionOptions, CompactionTask,
    RewriteResult,
};
use refract_optimize::fri::describe::describe_fri;
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_optimize::maintain::{maintain, MaintainOptions, DEFAULT_MAX_ROUNDS};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_table::RetentionPolicy;

use crate::dataset::{to_json, PyDataset};
use crate::errors::IntoPyResult;
use crate::runtime::block_on;

/// Compaction options from their JSON form (unset fields take the defaults),
/// validated.
fn compaction_options(json: &str) -> refract_core::Result<CompactionOptions> {
    let options: CompactionOptions = serde_json::from_str(json)
        .map_err(|e| Error::invalid_input(format!("compaction options are not valid: {e}")))?;
    options.validate()?;
    Ok(options)
}

/// Plans, executes and commits one compaction run: `(new version, metrics JSON)`.
#[pyfunction]
pub fn compact_files_py(
    py: Python<'_>,
    dataset: &PyDataset,
    options_json: &str,
) -> PyResult<(PyDataset, String)> {
    let options = compaction_options(options_json).py_result(py)?;
    let mut current = dataset.inner.clone();
    let metrics = block_on(py, compact_files(&mut current, &options, None))?.py_result(py)?;
    Ok((PyDataset::new(current), to_json(&metrics)?))
}

/// Plans a compaction at this version: `(read_version, options JSON, [task JSON])`.
#[pyfunction]
pub fn plan_compaction_py(
    py: Python<'_>,
    dataset: &PyDataset,
    options_json: &str,
) -> PyResult<(u64, String, Vec<String>)> {
    let options = compaction_options(options_json).py_result(py)?;
    let plan = plan_compaction(&dataset.inner, &options).py_result(py)?;
    let tasks = plan
        .tasks
        .iter()
        .map(to_json)
        .collect::<PyResult<Vec<_>>>()?;
    Ok((plan.read_version, to_json(&plan.options)?, tasks))
}

/// Parses a task (as `refract compact-plan` writes each element of `tasks`).
fn parse_task(json: &str) -> refract_core::Result<CompactionTask> {
    let task: CompactionTask = serde_json::from_str(json)
        .map_err(|e| Error::invalid_input(format!("not a compaction task: {e}")))?;
    task.options.validate()?;
    Ok(task)
}

/// The task's `(task_index, read_version, fragment ids)`.
#[pyfunction]
pub fn describe_task_py(py: Python<'_>, task_json: &str) -> PyResult<(usize, u64, Vec<u64>)> {
    let task = parse_task(task_json).py_result(py)?;
    Ok((
        task.task_index,
        task.read_version,
        task.plan.fragment_ids.clone(),
    ))
}

/// Executes one task against `dataset`'s store: the result JSON (as
/// `refract compact-exec` prints it).
#[pyfunction]
pub fn execute_task_py(py: Python<'_>, dataset: &PyDataset, task_json: &str) -> PyResult<String> {
    let task = parse_task(task_json).py_result(py)?;
    let result = block_on(py, task.execute(&dataset.inner))?.py_result(py)?;
    to_json(&result)
}

/// Parses a result (as `refract compact-exec` prints it).
fn parse_result(json: &str) -> refract_core::Result<RewriteResult> {
    serde_json::from_str(json)
        .map_err(|e| Error::invalid_input(format!("not a compaction result: {e}")))
}

/// The result's `(task_index, read_version, old fragment ids, new files, rows read)`.
#[pyfunction]
pub fn describe_result_py(
    py: Python<'_>,
    result_json: &str,
) -> PyResult<(usize, u64, Vec<u64>, usize, u64)> {
    let result = parse_result(result_json).py_result(py)?;
    Ok((
        result.task_index,
        result.read_version,
        result.old_fragment_ids.clone(),
        result.new_files.len(),
        result.rows_read,
    ))
}

/// Commits results of one plan, in any order and subset: `(new version,
/// metrics JSON)`.
#[pyfunction]
pub fn commit_compaction_py(
    py: Python<'_>,
    dataset: &PyDataset,
    results_json: Vec<String>,
) -> PyResult<(PyDataset, String)> {
    let results = results_json
        .iter()
        .map(|json| parse_result(json))
        .collect::<refract_core::Result<Vec<_>>>()
        .py_result(py)?;
    let (next, metrics) =
        block_on(py, commit_compaction(&dataset.inner, results))?.py_result(py)?;
    Ok((PyDataset::new(next), to_json(&metrics)?))
}

/// Remap options for `names` (every index when None) and `budget_bytes`.
fn remap_options(names: Option<Vec<String>>, budget_bytes: Option<u64>) -> RemapOptions {
    let mut options = RemapOptions {
        names,
        ..RemapOptions::default()
    };
    if let Some(budget) = budget_bytes {
        options.budget_bytes = budget;
    }
    options
}

/// Rewrites eligible index segments onto current addresses: `(version, report JSON)`.
#[pyfunction]
#[pyo3(signature = (dataset, names=None, budget_bytes=None))]
pub fn remap_indices_py(
    py: Python<'_>,
    dataset: &PyDataset,
    names: Option<Vec<String>>,
    budget_bytes: Option<u64>,
) -> PyResult<(PyDataset, String)> {
    let mut current = dataset.inner.clone();
    let options = remap_options(names, budget_bytes);
    let report = block_on(py, remap_indices(&mut current, options))?.py_result(py)?;
    Ok((PyDataset::new(current), to_json(&report)?))
}

/// Drops FRI history no segment needs: `(version, report JSON)`.
#[pyfunction]
pub fn trim_fri_py(py: Python<'_>, dataset: &PyDataset) -> PyResult<(PyDataset, String)> {
    let mut current = dataset.inner.clone();
    let report = block_on(py, trim_fri(&mut current))?.py_result(py)?;
    Ok((PyDataset::new(current), to_json(&report)?))
}

/// The fragment reuse index of the dataset's version, as JSON.
#[pyfunction]
pub fn describe_fri_py(py: Python<'_>, dataset: &PyDataset) -> PyResult<String> {
    let description = block_on(py, describe_fri(&dataset.inner))?.py_result(py)?;
    to_json(&description)
}

/// Stable-partition rewrite by `column`: hashed into `destinations`, or by
/// range `boundaries`: `(version, metrics JSON)`.
#[pyfunction]
#[pyo3(signature = (dataset, column, destinations=None, boundaries=None, fragment_ids=None))]
pub fn partition_fragments_py(
    py: Python<'_>,
    dataset: &PyDataset,
    column: String,
    destinations: Option<u32>,
    boundaries: Option<Vec<i64>>,
    fragment_ids: Option<Vec<u64>>,
) -> PyResult<(PyDataset, String)> {
    let by = match (destinations, boundaries) {
        (Some(destinations), None) => PartitionBy::Hash {
            column,
            destinations,
        },
        (None, Some(boundaries)) => PartitionBy::Range { column, boundaries },
        _ => {
            return Err(crate::errors::to_py_err(
                py,
                Error::invalid_input("give exactly one of destinations and boundaries"),
            ))
        }
    };
    let options = PartitionOptions {
        fragments: fragment_ids,
        ..PartitionOptions::new(by)
    };
    let mut current = dataset.inner.clone();
    let metrics = block_on(py, partition_fragments(&mut current, options))?.py_result(py)?;
    Ok((PyDataset::new(current), to_json(&metrics)?))
}

/// Compaction (unless `compaction_json` is None), remap and trim, repeated
/// with `until_noop`, then retention when `keep_last` or
/// `older_than_seconds` is given: `(version, report JSON)`.
#[pyfunction]
#[pyo3(signature = (dataset, compaction_json=None, reindex=false, until_noop=false, max_rounds=None, index_names=None, budget_bytes=None, keep_last=None, older_than_seconds=None))]
#[allow(clippy::too_many_arguments)]
pub fn maintain_py(
    py: Python<'_>,
    dataset: &PyDataset,
    compaction_json: Option<String>,
    reindex: bool,
    until_noop: bool,
    max_rounds: Option<usize>,
    index_names: Option<Vec<String>>,
    budget_bytes: Option<u64>,
    keep_last: Option<u64>,
    older_than_seconds: Option<f64>,
) -> PyResult<(PyDataset, String)> {
    let compaction = compaction_json
        .as_deref()
        .map(compaction_options)
        .transpose()
        .py_result(py)?;
    let older_than = older_than_seconds
        .map(|seconds| {
            Duration::try_from_secs_f64(seconds).map_err(|_| {
                Error::invalid_input(format!(
                    "older_than must be a non-negative duration, got {seconds} seconds"
                ))
            })
        })
        .transpose()
        .py_result(py)?;
    let retention = (keep_last.is_some() || older_than.is_some()).then_some(RetentionPolicy {
        older_than,
        keep_last,
        keep_tagged: true,
        dry_run: false,
    });
    let options = MaintainOptions {
        compaction,
        remap: remap_options(index_names, budget_bytes),
        reindex,
        until_noop,
        max_rounds: max_rounds.unwrap_or(DEFAULT_MAX_ROUNDS),
        retention,
    };
    let mut current = dataset.inner.clone();
    let report = block_on(py, maintain(&mut current, options))?.py_result(py)?;
    Ok((PyDataset::new(current), to_json(&report)?))
}
