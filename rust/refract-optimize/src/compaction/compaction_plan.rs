//! Serializable compaction plans: what `plan_compaction` hands to workers.
//!
//! A plan names fragments by id at a read version, so a task can run on another
//! machine: it checks out `read_version`, reads exactly those fragments in order
//! and writes exactly `output_rows` rows per output.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;
use refract_table::format::Manifest;
use serde::{Deserialize, Serialize};

use super::{plan_tasks, CompactionOptions, FragmentStats, TaskPlan};

/// Everything needed to execute and commit one compaction run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionPlan {
    /// The version every task reads.
    pub read_version: u64,
    /// The options the plan was made with.
    pub options: CompactionOptions,
    /// Independent tasks; each rewrites one contiguous run of fragments.
    pub tasks: Vec<CompactionTask>,
}

/// One unit of work: rewrite a contiguous run of fragments.
///
/// A task carries the options of its plan, and so does its
/// [`RewriteResult`](super::RewriteResult): the commit uses them (inline or
/// deferred index remap) and refuses results of plans made with different ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionTask {
    /// Position of this task in its plan.
    pub task_index: usize,
    /// The version the fragments are read at.
    pub read_version: u64,
    /// The planner's decision: which fragments, how many rows per output.
    pub plan: TaskPlan,
    /// The options of the plan.
    pub options: CompactionOptions,
}

impl CompactionTask {
    /// Rows per read batch.
    pub fn batch_size(&self) -> usize {
        self.options.batch_size.unwrap_or(DEFAULT_BATCH_SIZE)
    }
}

impl CompactionPlan {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

/// Default rows per read batch of a task.
pub const DEFAULT_BATCH_SIZE: usize = 8_192;

/// Plans a compaction of `dataset` at its current version.
///
/// # Errors
/// InvalidInput when `options` fail [`CompactionOptions::validate`] (the
/// error names the option) or the version's fragment statistics are
/// impossible (more live rows than physical rows).
pub fn plan_compaction(dataset: &Dataset, options: &CompactionOptions) -> Result<CompactionPlan> {
    options.validate()?;
    let manifest = dataset.manifest();
    let stats = fragment_stats(manifest);
    let tasks = plan_tasks(&stats, options)?;
    Ok(CompactionPlan {
        read_version: manifest.version,
        options: options.clone(),
        tasks: tasks
            .into_iter()
            .enumerate()
            .map(|(task_index, plan)| CompactionTask {
                task_index,
                read_version: manifest.version,
                plan,
                options: options.clone(),
            })
            .collect(),
    })
}

/// Planner input for every fragment of `manifest`, in manifest order.
pub fn fragment_stats(manifest: &Manifest) -> Vec<FragmentStats> {
    manifest
        .fragments
        .iter()
        .map(|fragment| FragmentStats {
            id: fragment.id,
            physical_rows: fragment.physical_rows,
            live_rows: fragment.live_rows(),
            bytes: fragment.size_bytes(),
            coverage_key: coverage_key(manifest, fragment.id),
        })
        .collect()
}

/// An opaque key naming the set of user index segments that cover `fragment_id`
/// (0 when none), so bins never mix differently indexed fragments.
fn coverage_key(manifest: &Manifest, fragment_id: u64) -> u64 {
    let Ok(id) = u32::try_from(fragment_id) else {
        return 0;
    };
    let covering: BTreeSet<u128> = manifest
        .indices
        .iter()
        .filter(|index| !index.is_system())
        .filter(|index| {
            index
                .fragment_bitmap
                .as_ref()
                .is_some_and(|bitmap| bitmap.contains(id))
        })
        .map(|index| index.uuid.as_u128())
        .collect();
    if covering.is_empty() {
        return 0;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    covering.hash(&mut hasher);
    // Reserve 0 for "not indexed".
    hasher.finish().max(1)
}

/// Parses a plan from JSON (as written by `refract compact-plan`).
///
/// # Errors
/// InvalidInput for text that is not a plan, options that fail validation,
/// or a task whose index, read version or options disagree with its plan.
pub fn plan_from_json(text: &str) -> Result<CompactionPlan> {
    let plan: CompactionPlan = serde_json::from_str(text)
        .map_err(|e| Error::invalid_input(format!("compaction plan is not valid JSON: {e}")))?;
    plan.options.validate()?;
    for (position, task) in plan.tasks.iter().enumerate() {
        if task.task_index != position
            || task.read_version != plan.read_version
            || task.options != plan.options
        {
            return Err(Error::invalid_input(format!(
                "compaction plan task {position} is inconsistent with its plan"
            )));
        }
    }
    Ok(plan)
}
