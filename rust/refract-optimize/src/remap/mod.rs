//! `remap_indices`: catch index segments up with the FRI history.
//!
//! For every user segment that translates, `assess` decides eligibility from
//! metadata alone (bitmaps and lineage; see `assess.rs`). An eligible segment
//! is rewritten by its index type's streaming remap through the reader's
//! hop-by-hop translator (batches of at most 65,536 addresses; legacy plugins
//! get the budgeted materialized fallback), so the new files hold exactly the
//! rows of its restamped coverage: rows withdrawn by deletions, by newer
//! sibling segments or by coverage it cannot claim are dropped. All rewritten
//! segments are committed in one `CreateIndex` (new segments added, old ones
//! removed); the engine's rebase rules turn a concurrent rewrite of the new
//! coverage, or a concurrent replacement of the same segment, into a retryable
//! conflict. Partially covering segments are left unchanged and keep
//! translating; `trim_fri` keeps the history they need.

mod assess;
pub(crate) mod lineage_reach;
pub mod report;
mod rewrite_runtime;

use std::collections::BTreeMap;
use std::sync::Arc;

use refract_core::materialize::MaterializeBudget;
use refract_core::{Error, Result, DEFAULT_MATERIALIZE_BUDGET_BYTES};
use refract_index::manage::{index_context, user_segments};
use refract_index::{DeclineReason, IndexRegistry, RemapOutcome};
use refract_reader::history::FriHistory;
use refract_reader::listing::{DerivedListing, ListedEntry};
use refract_reader::translate::{LegacyTranslator, SegmentScope, SegmentTranslator};
use refract_reader::{ChunkCacheMode, FriReader, MappingBinder};
use refract_table::transaction::Operation;
use refract_table::{Dataset, IndexMetadata};
use roaring::RoaringBitmap;

use assess::{assess, Decision, Eligible};
pub use report::{RemapReport, SegmentRemap, SegmentStatus, SkipReason, UnchangedReason};
use rewrite_runtime::{rewrite_segment, JobTranslator, RewriteJob};

/// What `remap_indices` rewrites and with which limits.
#[derive(Debug, Clone)]
pub struct RemapOptions {
    /// Logical indices to consider; every user index when `None`. An unknown
    /// name is NotFound.
    pub names: Option<Vec<String>>,
    /// Budget of the materialized map built for plugins without streaming
    /// remap (default 256 MiB); a segment over it is skipped.
    pub budget_bytes: u64,
    /// Index types (built-ins by default; register plugins here).
    pub registry: Arc<IndexRegistry>,
    /// How row-map label chunks are cached while translating.
    pub chunk_cache: ChunkCacheMode,
}

impl Default for RemapOptions {
    fn default() -> Self {
        Self {
            names: None,
            budget_bytes: DEFAULT_MATERIALIZE_BUDGET_BYTES,
            registry: Arc::new(IndexRegistry::with_builtins()),
            chunk_cache: ChunkCacheMode::default(),
        }
    }
}

/// Rewrites every eligible segment onto current addresses and commits the
/// replacements in one `CreateIndex`. On a commit `dataset` moves to the new
/// version; when nothing is eligible nothing is committed.
///
/// # Errors
/// NotFound for an unknown index name; NotSupported when this client
/// may not write the table or cannot read its FRI; Corrupt / NotFound for
/// damaged or missing index or row-map files (I/O and corruption fail, they
/// are never reported as skips); a retryable Conflict when a concurrent commit
/// rewrote the new coverage or replaced the same segment.
pub async fn remap_indices(dataset: &mut Dataset, options: RemapOptions) -> Result<RemapReport> {
    dataset
        .features()
        .check_write(dataset.manifest().writer_flags)?;
    check_names(dataset, options.names.as_deref())?;
    let reader = FriReader::open(dataset, options.chunk_cache).await?;
    let mut report = RemapReport {
        read_version: dataset.version(),
        ..RemapReport::default()
    };
    let selected = |meta: &IndexMetadata| {
        options
            .names
            .as_ref()
            .is_none_or(|names| names.contains(&meta.name))
    };
    let (Some(history), Some(listing)) = (reader.history(), reader.listing()) else {
        for meta in user_segments(&dataset.manifest().indices).filter(|m| selected(m)) {
            report
                .segments
                .push(unchanged(meta, UnchangedReason::CaughtUp, "no FRI history"));
        }
        return Ok(report);
    };
    let mut new_indices = Vec::new();
    let mut removed = Vec::new();
    for entry in listing.entries() {
        let ListedEntry::Segment {
            meta,
            plan,
            claimed,
        } = entry
        else {
            continue;
        };
        if !selected(meta) {
            continue;
        }
        let status = match assess(history, meta, plan, claimed) {
            Decision::Skip(reason, message) => SegmentStatus::Skipped { reason, message },
            Decision::Unchanged(reason, message) => SegmentStatus::Unchanged { reason, message },
            Decision::Remap(eligible) => {
                let (status, new) =
                    rewrite(dataset, history, listing, meta, &eligible, &options).await?;
                if let Some(new) = new {
                    removed.push(meta.uuid);
                    new_indices.push(new);
                }
                status
            }
        };
        report.segments.push(SegmentRemap {
            name: meta.name.clone(),
            uuid: meta.uuid,
            status,
        });
    }
    if !new_indices.is_empty() {
        let committed = dataset
            .commit(Operation::CreateIndex {
                new_indices,
                removed_index_uuids: removed,
            })
            .await?;
        report.committed_version = Some(committed.version());
        *dataset = committed;
    }
    for line in &report.segments {
        tracing::info!(index = %line.name, segment = %line.uuid, status = ?line.status, "remap_indices");
    }
    Ok(report)
}

fn unchanged(meta: &IndexMetadata, reason: UnchangedReason, message: &str) -> SegmentRemap {
    SegmentRemap {
        name: meta.name.clone(),
        uuid: meta.uuid,
        status: SegmentStatus::Unchanged {
            reason,
            message: message.to_string(),
        },
    }
}

/// Every requested name must be a user index of the snapshot.
fn check_names(dataset: &Dataset, names: Option<&[String]>) -> Result<()> {
    for name in names.unwrap_or_default() {
        if !user_segments(&dataset.manifest().indices).any(|m| &m.name == name) {
            return Err(Error::not_found(format!(
                "index '{name}' in version {}",
                dataset.version()
            )));
        }
    }
    Ok(())
}

/// Rewrites one eligible segment; returns its status and the new entry.
async fn rewrite(
    dataset: &Dataset,
    history: &Arc<FriHistory>,
    listing: &DerivedListing,
    meta: &IndexMetadata,
    eligible: &Eligible,
    options: &RemapOptions,
) -> Result<(SegmentStatus, Option<IndexMetadata>)> {
    if let Err(err) = options.registry.get(&meta.index_type) {
        return Ok((
            SegmentStatus::Skipped {
                reason: SkipReason::UnknownIndexType,
                message: err.to_string(),
            },
            None,
        ));
    }
    let scope = SegmentScope {
        live: listing.live().clone(),
        claimed: Arc::new(eligible.others_claimed.clone()),
        owned: eligible.owned.clone(),
        coverage: eligible.coverage.clone(),
        stored: eligible.provenance.clone(),
    };
    let translator = match history.legacy() {
        Some(_) => JobTranslator::Blocking(Arc::new(LegacyTranslator::new(history.clone(), scope))),
        None => {
            let segment = SegmentTranslator::new(
                history.clone(),
                MappingBinder::new(
                    dataset.store().clone(),
                    dataset.session().cache().clone(),
                    options.chunk_cache,
                ),
                scope,
            );
            // Ordered compactions only: translate from memory, synchronously.
            match segment.prepared().await {
                Some(prepared) => JobTranslator::InMemory(Arc::new(prepared)),
                None => JobTranslator::Blocking(Arc::new(segment)),
            }
        }
    };
    let job = RewriteJob {
        ctx: index_context(dataset),
        registry: (*options.registry).clone(),
        // The fallback enumerates the rows of the stored fragments: for a
        // recovered legacy projection those are the source fragments.
        meta: IndexMetadata {
            fragment_bitmap: Some(eligible.provenance.clone()),
            ..meta.clone()
        },
        translator,
        coverage: eligible.coverage.clone(),
        options: refract_index::RemapOptions {
            budget: MaterializeBudget {
                budget_bytes: options.budget_bytes,
            },
            fragment_rows: fragment_rows(dataset, history, &eligible.provenance),
            dataset_version: dataset.version(),
        },
    };
    match rewrite_segment(job).await? {
        RemapOutcome::Remapped(new) => {
            let status = SegmentStatus::Remapped {
                new_uuid: new.uuid,
                coverage: eligible.coverage.iter().map(u64::from).collect(),
                transitions: eligible.transitions,
                provenance_recovered: eligible.recovered,
            };
            Ok((status, Some(*new)))
        }
        RemapOutcome::Skipped { reason, message } => Ok((
            SegmentStatus::Skipped {
                reason: match reason {
                    DeclineReason::UnknownCoverage => SkipReason::UnknownCoverage,
                    DeclineReason::UnknownIndexType => SkipReason::UnknownIndexType,
                    DeclineReason::OverBudget => SkipReason::OverBudget,
                    DeclineReason::RowsUnknown => SkipReason::RowsUnknown,
                    DeclineReason::UnsupportedLayout => SkipReason::UnsupportedLayout,
                },
                message,
            },
            None,
        )),
    }
}

/// Physical rows of the `fragments`: live ones from the manifest, rewritten
/// ones from the history's digests (recorded when they were rewritten).
fn fragment_rows(
    dataset: &Dataset,
    history: &FriHistory,
    fragments: &RoaringBitmap,
) -> BTreeMap<u64, u64> {
    let mut rows = BTreeMap::new();
    for node in history.nodes() {
        for digest in node
            .record
            .sources()
            .iter()
            .chain(node.record.destinations())
        {
            if lineage_reach::contains(fragments, digest.id) {
                rows.insert(digest.id, digest.physical_rows);
            }
        }
    }
    for fragment in dataset.fragments() {
        if lineage_reach::contains(fragments, fragment.id) {
            rows.insert(fragment.id, fragment.physical_rows);
        }
    }
    rows
}
