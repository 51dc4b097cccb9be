//! `compact`, `compact-plan`, `compact-exec` and `compact-commit`.

use super::location::Location;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indicatif::ProgressBar;
use refract_core::{Error, Result};
use refract_optimize::compaction::{
    commit_compaction, compact_files, plan_compaction, plan_from_json, CompactionMetrics,
    CompactionOptions, ProgressCallback, RewriteResult,
};

use crate::args::CompactArgs;

/// Turns command-line flags into validated options.
pub fn options_from_args(args: &CompactArgs) -> Result<CompactionOptions> {
    let mut options = CompactionOptions::default();
    if let Some(target) = args.target_rows {
        options.target_rows_per_fragment = target;
    }
    options.max_source_fragments = args.max_source_fragments;
    options.max_source_rows = args.max_source_rows;
    options.max_source_bytes = args.max_source_bytes;
    options.excluded_fragment_ids = args.exclude.clone();
    if let Some(threshold) = args.materialize_deletions_threshold {
        options.materialize_deletions_threshold = threshold;
    }
    options.materialize_deletions = !args.no_materialize_deletions;
    options.defer_index_remap = args.defer_index_remap;
    options.binary_copy = !args.no_binary_copy;
    options.validate()?;
    Ok(options)
}

/// A progress bar for task completion, hidden when stderr is not a terminal.
pub fn progress_bar(label: &str) -> (ProgressBar, ProgressCallback) {
    let bar = super::progress::styled_bar("{msg} [{bar:30}] {pos}/{len} tasks, {elapsed}");
    bar.set_message(label.to_string());
    let handle = bar.clone();
    let callback: ProgressCallback = Arc::new(move |progress| {
        handle.set_length(progress.tasks_total as u64);
        handle.set_position(progress.tasks_done as u64);
    });
    (bar, callback)
}

fn metrics_json(metrics: &CompactionMetrics) -> String {
    serde_json::json!({
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
        "files_removed": metrics.files_removed,
        "files_added": metrics.files_added,
        "committed_version": metrics.committed_version,
    })
    .to_string()
}

fn metrics_line(metrics: &CompactionMetrics) -> String {
    match metrics.committed_version {
        Some(version) => format!(
            "compacted {} fragments ({} files) into {} fragments ({} files); version {version}",
            metrics.fragments_removed,
            metrics.files_removed,
            metrics.fragments_added,
            metrics.files_added
        ),
        None => "nothing to compact".to_string(),
    }
}

/// `refract compact`. With `until_noop_rounds`, repeats until a round commits
/// nothing or that many rounds ran, and says which.
pub async fn compact(
    at: &Location,
    args: &CompactArgs,
    until_noop_rounds: Option<usize>,
    json: bool,
) -> Result<()> {
    let options = options_from_args(args)?;
    let mut dataset = at.open().await?;
    let max_rounds = until_noop_rounds.unwrap_or(1);
    for round in 1..=max_rounds {
        let (bar, callback) = progress_bar(&format!("compaction round {round}"));
        let metrics = compact_files(&mut dataset, &options, Some(callback)).await?;
        bar.finish_and_clear();
        let line = if json {
            metrics_json(&metrics)
        } else {
            metrics_line(&metrics)
        };
        if until_noop_rounds.is_some() && !json {
            crate::out!("round {round}: {line}");
        } else {
            crate::out!("{line}");
        }
        if metrics.committed_version.is_none() {
            return Ok(());
        }
    }
    if until_noop_rounds.is_some() {
        if json {
            crate::out!(
                "{}",
                serde_json::json!({ "stopped_at_max_rounds": max_rounds })
            );
        } else {
            crate::out!(
                "stopped at --max-rounds {max_rounds} before a round committed nothing; run again to continue"
            );
        }
    }
    Ok(())
}

/// `refract compact-plan`.
pub async fn compact_plan(at: &Location, args: &CompactArgs) -> Result<()> {
    let options = options_from_args(args)?;
    let dataset = at.open().await?;
    let plan = plan_compaction(&dataset, &options)?;
    let text = serde_json::to_string_pretty(&plan)
        .map_err(|e| Error::external("serializing the plan", e))?;
    crate::out!("{text}");
    Ok(())
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::invalid_input(format!("cannot read {}: {e}", path.display())))
}

/// `refract compact-exec`.
pub async fn compact_exec(at: &Location, plan_path: &Path, task: usize) -> Result<()> {
    let plan = plan_from_json(&read_text(plan_path)?)?;
    let task = plan.tasks.get(task).ok_or_else(|| {
        Error::invalid_input(format!(
            "--task {task}: the plan has {} tasks",
            plan.tasks.len()
        ))
    })?;
    let dataset = at.open().await?;
    let result = task.execute(&dataset).await?;
    let text = serde_json::to_string(&result)
        .map_err(|e| Error::external("serializing the task result", e))?;
    crate::out!("{text}");
    Ok(())
}

/// `refract compact-commit`.
pub async fn compact_commit(at: &Location, result_paths: &[PathBuf], json: bool) -> Result<()> {
    let mut results = Vec::with_capacity(result_paths.len());
    for path in result_paths {
        let result: RewriteResult = serde_json::from_str(&read_text(path)?).map_err(|e| {
            Error::invalid_input(format!(
                "{} is not a compaction result: {e}",
                path.display()
            ))
        })?;
        results.push(result);
    }
    let dataset = at.open().await?;
    let (_, metrics) = commit_compaction(&dataset, results).await?;
    crate::out!(
        "{}",
        if json {
            metrics_json(&metrics)
        } else {
            metrics_line(&metrics)
        }
    );
    Ok(())
}
