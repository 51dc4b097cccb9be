//! `maintain`: compaction, then `remap_indices`, then `trim_fri`, optionally
//! repeated until a round commits nothing.
//!
//! The order matters: compaction records new transitions (when index remap is
//! deferred), remap catches eligible segments up with them, and trim then
//! drops the history nobody translates through. A round that commits nothing
//! is a fixed point: running again would change nothing either.
//!
//! With a retention policy, old versions expire once the rounds are done
//! (`cleanup_old_versions`): the files the rounds replaced go as soon as no
//! retained version references them.
//!
//! With `reindex`, every user index also gets a segment for the live fragments
//! no segment stores directly (new data, and destinations a partially
//! covering segment cannot claim) before the trim: the older segments become
//! superseded, `trim_fri` prunes them and drains the history they pinned.

use refract_core::{Error, Result};
use refract_index::manage::user_segments;
use refract_index::{optimize_indices_with, IndexParams};
use refract_table::{cleanup_old_versions, Dataset, RetentionPolicy, RetentionReport};
use serde::Serialize;

use crate::compaction::{compact_files, CompactionMetrics, CompactionOptions};
use crate::remap::{remap_indices, RemapOptions, RemapReport};
use crate::trim::{trim_fri, TrimReport};

/// Default cap on rounds of [`maintain`] with `until_noop`.
pub const DEFAULT_MAX_ROUNDS: usize = 16;

/// What `maintain` runs.
#[derive(Debug, Clone)]
pub struct MaintainOptions {
    /// Compaction options; no compaction when `None`.
    pub compaction: Option<CompactionOptions>,
    /// Remap options.
    pub remap: RemapOptions,
    /// Index the live fragments no segment stores directly (after the remap).
    pub reindex: bool,
    /// Repeat rounds until one commits nothing (at most `max_rounds`).
    pub until_noop: bool,
    /// Most rounds with `until_noop` (at least 1).
    pub max_rounds: usize,
    /// Expire old versions after the rounds; `None`: keep every version.
    pub retention: Option<RetentionPolicy>,
}

impl Default for MaintainOptions {
    fn default() -> Self {
        Self {
            compaction: Some(CompactionOptions::default()),
            remap: RemapOptions::default(),
            reindex: false,
            until_noop: false,
            max_rounds: DEFAULT_MAX_ROUNDS,
            retention: None,
        }
    }
}

/// One round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MaintainRound {
    /// Compaction (default metrics when not run or nothing to do).
    pub compaction: CompactionMetrics,
    /// Index remap.
    pub remap: RemapReport,
    /// Indices that got a new segment from `reindex`.
    pub reindexed: Vec<String>,
    /// FRI trim.
    pub trim: TrimReport,
}

impl MaintainRound {
    /// True when the round committed nothing.
    pub fn is_noop(&self) -> bool {
        self.compaction.committed_version.is_none()
            && self.remap.committed_version.is_none()
            && self.reindexed.is_empty()
            && self.trim.is_noop()
    }
}

/// What `maintain` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MaintainReport {
    /// Rounds, in order.
    pub rounds: Vec<MaintainRound>,
    /// True when the last round committed nothing.
    pub converged: bool,
    /// The dataset version at the end.
    pub final_version: u64,
    /// What the retention policy removed, when one was given.
    pub retention: Option<RetentionReport>,
}

/// Runs maintenance rounds on `dataset` (which moves to the last committed
/// version), then the retention policy, if any.
///
/// # Errors
/// InvalidInput for `max_rounds == 0` or bad compaction or retention
/// options (checked before anything runs); otherwise the first error of a
/// step (earlier rounds' commits stay).
pub async fn maintain(dataset: &mut Dataset, options: MaintainOptions) -> Result<MaintainReport> {
    if options.max_rounds == 0 {
        return Err(Error::invalid_input("max_rounds must be at least 1"));
    }
    if let Some(policy) = &options.retention {
        policy.validate()?;
    }
    let rounds = if options.until_noop {
        options.max_rounds
    } else {
        1
    };
    let mut report = MaintainReport::default();
    for _ in 0..rounds {
        let compaction = match &options.compaction {
            Some(compaction) => compact_files(dataset, compaction, None).await?,
            None => CompactionMetrics::default(),
        };
        let remap = remap_indices(dataset, options.remap.clone()).await?;
        let reindexed = if options.reindex {
            reindex(dataset, &options.remap).await?
        } else {
            Vec::new()
        };
        let trim = trim_fri(dataset).await?;
        let round = MaintainRound {
            compaction,
            remap,
            reindexed,
            trim,
        };
        let noop = round.is_noop();
        report.rounds.push(round);
        if noop {
            report.converged = true;
            break;
        }
    }
    report.final_version = dataset.version();
    if let Some(policy) = &options.retention {
        report.retention = Some(cleanup_old_versions(dataset, policy).await?);
    }
    Ok(report)
}

/// Adds a segment to every selected user index for the live fragments none
/// of its segments stores; returns the indices that got one.
async fn reindex(dataset: &mut Dataset, options: &RemapOptions) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for meta in user_segments(&dataset.manifest().indices) {
        let selected = options
            .names
            .as_ref()
            .is_none_or(|n| n.contains(&meta.name));
        if selected && !names.contains(&meta.name) {
            names.push(meta.name.clone());
        }
    }
    let mut reindexed = Vec::new();
    for name in names {
        let before = dataset.version();
        let next =
            optimize_indices_with(dataset, &options.registry, &name, &IndexParams::default())
                .await?;
        if next.version() != before {
            reindexed.push(name);
            *dataset = next;
        }
    }
    Ok(reindexed)
}
