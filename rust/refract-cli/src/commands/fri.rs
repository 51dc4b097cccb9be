//! `partition`, `fri`, `remap`, `trim` and `maintain`.

use super::location::{Location, VersionSelector};
use refract_core::Result;
use refract_optimize::fri::describe::describe_fri;
use refract_optimize::fri::labels::PartitionBy;
use refract_optimize::fri::partition::{partition_fragments, PartitionOptions};
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_optimize::remap::report::{SegmentStatus, UnchangedReason};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_table::RetentionPolicy;

use super::compact::options_from_args;
use crate::args::CompactArgs;
use crate::output::to_json;

/// `refract partition`.
///
/// # Errors
/// Those of opening the dataset and of [`partition_fragments`] (InvalidInput
/// for a bad column or fragment run, NotSupported, a retryable Conflict).
pub async fn partition(
    at: &Location,
    by: &str,
    destinations: u32,
    fragments: Option<Vec<u64>>,
    json: bool,
) -> Result<()> {
    let mut dataset = at.open().await?;
    let mut options = PartitionOptions::new(PartitionBy::Hash {
        column: by.to_string(),
        destinations,
    });
    options.fragments = fragments;
    let metrics = partition_fragments(&mut dataset, options).await?;
    if json {
        crate::out!("{}", to_json(&metrics)?);
        return Ok(());
    }
    match metrics.committed_version {
        Some(version) => crate::out!(
            "partitioned {} fragments into {} destinations ({} rows{}); version {version}",
            metrics.fragments_removed,
            metrics.fragments_added,
            metrics.rows_written,
            if metrics.transition_recorded {
                ", transition recorded in the FRI"
            } else {
                ""
            }
        ),
        None => crate::out!("nothing to partition"),
    }
    Ok(())
}

/// `refract fri`: the ledger of the latest version, or of `version`.
///
/// # Errors
/// Those of [`Location::open_at`] and [`describe_fri`] (Corrupt, NotFound or
/// NotSupported for a ledger it cannot read).
pub async fn fri(at: &Location, version: Option<&VersionSelector>, json: bool) -> Result<()> {
    let dataset = at.open_at(version).await?;
    let description = describe_fri(&dataset).await?;
    if json {
        crate::out!("{}", to_json(&description)?);
        return Ok(());
    }
    let Some(uuid) = &description.fri_uuid else {
        crate::out!("no FRI (fri flag: {})", description.fri_flag);
        return Ok(());
    };
    crate::out!(
        "FRI {uuid}: index_version {:?}, {} ({} bytes), fri flag {}, {} legacy version(s), {} transition(s){}",
        description.index_version,
        description.storage,
        description.size_bytes,
        description.fri_flag,
        description.legacy_versions,
        description.transitions.len(),
        if description.has_unsupported_transitions { ", has unsupported transitions" } else { "" }
    );
    for transition in &description.transitions {
        let ids = |digests: &[refract_optimize::fri::describe::DigestDescription]| {
            digests.iter().map(|d| d.id).collect::<Vec<_>>()
        };
        crate::out!(
            "  {} {:?} -> {:?} fingerprint {}{}",
            transition.kind,
            ids(&transition.sources),
            ids(&transition.destinations),
            &transition.fingerprint[..16.min(transition.fingerprint.len())],
            transition
                .map_id
                .as_ref()
                .map(|id| format!(" map {id}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn remap_options(name: Option<String>, budget_bytes: Option<u64>) -> RemapOptions {
    let defaults = RemapOptions::default();
    RemapOptions {
        names: name.map(|n| vec![n]),
        budget_bytes: budget_bytes.unwrap_or(defaults.budget_bytes),
        chunk_cache: crate::settings::chunk_cache_mode(),
        ..defaults
    }
}

/// `refract remap`.
///
/// # Errors
/// Those of opening the dataset and of [`remap_indices`] (NotFound for an
/// unknown index, Corrupt for damaged files, a retryable Conflict).
pub async fn remap(
    at: &Location,
    name: Option<String>,
    budget_bytes: Option<u64>,
    json: bool,
) -> Result<()> {
    let mut dataset = at.open().await?;
    let report = remap_indices(&mut dataset, remap_options(name, budget_bytes)).await?;
    if json {
        crate::out!("{}", to_json(&report)?);
        return Ok(());
    }
    crate::out!(
        "remapped {} segment(s), skipped {}, left translating (partial coverage) {}; {}",
        report.remapped(),
        report.skipped(),
        report.unchanged(UnchangedReason::PartialCoverage),
        report
            .committed_version
            .map_or("nothing committed".to_string(), |v| format!("version {v}"))
    );
    for segment in &report.segments {
        let status = match &segment.status {
            SegmentStatus::Remapped {
                transitions,
                coverage,
                ..
            } => {
                format!("remapped through {transitions} transition(s), coverage {coverage:?}")
            }
            SegmentStatus::Skipped { reason, message } => {
                format!("skipped ({reason:?}): {message}")
            }
            SegmentStatus::Unchanged { reason, message } => {
                format!("unchanged ({reason:?}): {message}")
            }
        };
        crate::out!("  {} {}: {status}", segment.name, segment.uuid);
    }
    Ok(())
}

/// `refract trim`.
///
/// # Errors
/// Those of opening the dataset and of [`trim_fri`] (NotSupported, Corrupt or
/// NotFound for a damaged ledger, a retryable Conflict).
pub async fn trim(at: &Location, json: bool) -> Result<()> {
    let mut dataset = at.open().await?;
    let report = trim_fri(&mut dataset).await?;
    if json {
        crate::out!("{}", to_json(&report)?);
        return Ok(());
    }
    crate::out!(
        "trim: {} of {} transition(s) kept, {} removed, {} row map(s) released, {} superseded segment(s) pruned",
        report.transitions_kept,
        report.transitions_before,
        report.removed_transitions.len(),
        report.row_maps_released.len(),
        report.pruned_segments.len()
    );
    Ok(())
}

/// `refract maintain`.
///
/// # Errors
/// InvalidInput for bad compaction flags; those of opening the dataset and of
/// [`maintain`] (the first failing step's; earlier rounds stay committed).
pub async fn run_maintain(
    at: &Location,
    args: &CompactArgs,
    until_noop_rounds: Option<usize>,
    reindex: bool,
    retention: Option<RetentionPolicy>,
    json: bool,
) -> Result<()> {
    let mut dataset = at.open().await?;
    let defaults = MaintainOptions::default();
    let options = MaintainOptions {
        compaction: Some(options_from_args(args)?),
        remap: RemapOptions {
            chunk_cache: crate::settings::chunk_cache_mode(),
            ..RemapOptions::default()
        },
        reindex,
        until_noop: until_noop_rounds.is_some(),
        max_rounds: until_noop_rounds.unwrap_or(defaults.max_rounds),
        retention,
    };
    let max_rounds = options.max_rounds;
    let report = maintain(&mut dataset, options).await?;
    if json {
        crate::out!("{}", to_json(&report)?);
        return Ok(());
    }
    for (i, round) in report.rounds.iter().enumerate() {
        crate::out!(
            "round {}: compaction {}, remapped {} segment(s), trim removed {} transition(s){}",
            i + 1,
            round
                .compaction
                .committed_version
                .map_or("no-op".to_string(), |v| format!("→ version {v}")),
            round.remap.remapped(),
            round.trim.removed_transitions.len(),
            if round.is_noop() { " (no-op)" } else { "" }
        );
    }
    crate::out!(
        "converged: {}, version {}",
        report.converged,
        report.final_version
    );
    if until_noop_rounds.is_some() && !report.converged {
        crate::out!(
            "stopped at --max-rounds {max_rounds} before a round committed nothing; run again to continue"
        );
    }
    if let Some(retention) = &report.retention {
        crate::out!(
            "retention: expired {} version(s), removed {} file(s), freed {} bytes",
            retention.expired_versions.len(),
            retention.removed.len(),
            retention.bytes_freed
        );
    }
    Ok(())
}
